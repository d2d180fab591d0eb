// The GPT's inference path: low-precision weights (set_inference_weights),
// the KV-cache forward (forward_cached) and full logits (full_logits, logits).
#include "claw/model/gpt.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "claw/core/error.h"
#include "claw/kernels/cpu/bf16_gemm.h"
#include "claw/kernels/cpu/reduce.h"
#include "claw/model/tp_mappings.h"

namespace claw::model {

namespace {

// Gives the whole pages inside [p, p + bytes) back to the OS (anonymous
// memory: they read as zeros if touched again).
void release_pages(void* p, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

}  // namespace

GPT::InferenceWeights GPT::set_inference_weights(const CpuCtx& ctx, kernels::WeightType t,
                                                 const std::map<std::string, kernels::WeightMatrix>* given,
                                                 bool release_fp32) {
  if (!stage_.whole(cfg_)) fail("inference weights need the whole model on each rank (no pipeline stages)");
  if (store_->on_device()) fail("low-precision inference weights run on the CPU backend for now (--device cpu)");
  CLAW_CHECK(store_->dtypes().compute == DType::f32, "inference weights are made from fp32 parameters");
  merge_lora(ctx);  // generation reads adapters folded into their weights
  InferenceWeights r;
  // One matrix: its parameter, where its inference copy goes, and whether
  // the fp32 values may be released after conversion.
  auto convert = [&](const Param& p, kernels::WeightMatrix& dst, bool releasable) {
    const int64_t rows = p.spec.local_shape()[0], cols = p.spec.local_shape()[1];
    dst = {};
    // A file's own matrix whatever its type (a file's mix, as Q4_K_M's q4_k
    // and q6_k; the caller leaves out those it wants converted); else one
    // claw makes from the fp32 values, unless t is a type claw only reads
    // (q4_k...) or the rows are not whole blocks of t: then fp32.
    const kernels::WeightMatrix* own = nullptr;
    if (given && t != kernels::WeightType::f32)
      if (auto it = given->find(p.spec.name); it != given->end()) own = &it->second;
    if (!own && (t == kernels::WeightType::f32 || !kernels::weight_type_quantizable(t) ||
                 !kernels::weight_type_fits(t, cols))) {
      ++r.kept_f32;
      r.bytes += static_cast<size_t>(rows * cols) * 4;
      return;
    }
    if (own) {
      CLAW_CHECK(own->rows() == rows && own->cols() == cols, "{}: given as [{}, {}], the model holds [{}, {}]",
                 p.spec.name, own->rows(), own->cols(), rows, cols);
      dst = *own;
    } else {
      dst = kernels::WeightMatrix::quantize(ctx, t, p.data(), rows, cols);
    }
    ++r.converted;
    r.bytes += dst.bytes();
    if (release_fp32 && releasable) {
      Param& mp = const_cast<Param&>(p);
      release_pages(mp.data(), static_cast<size_t>(rows * cols) * sizeof(float));
      mp.value = Tensor();
      mp.compute = Tensor();
    }
  };
  // The embeddings as a file of type t would hold them, when claw makes the
  // matrices; a file's own (given) are read as stored (quantizing its q4_k
  // values again would move them: the K-quants' searches are not idempotent).
  const bool own_file = given && !given->empty();
  if (t != kernels::WeightType::f32 && kernels::weight_type_quantizable(t) && !own_file) {
    Param& w = embedding_.word;
    const int64_t rows = w.spec.local_shape()[0], cols = w.spec.local_shape()[1];
    if (kernels::weight_type_fits(t, cols)) {
      const kernels::WeightMatrix q = kernels::WeightMatrix::quantize(ctx, t, w.data(), rows, cols);
      q.dequantize(w.data());
    }
  }
  // MLA's kv_b_proj stays fp32: the absorbed inference form reads its
  // weight per head (model/mla.h), never through the layer.
  std::vector<const Linear*> absorbed;
  for (const auto& b : blocks_)
    if (b->attention.mla) absorbed.push_back(&b->attention.mla->kv_b_proj);
  for (Linear* l : linears())
    if (std::find(absorbed.begin(), absorbed.end(), l) == absorbed.end())
      convert(l->weight, l->inference_weight, true);
  convert(output_.weight(), output_.inference_weight, !cfg_.tied());
  return r;
}

Tensor GPT::forward_cached(const StepCtx& ctx_in, const int32_t* tokens, AttentionCache& cache) {
  if (!stage_.whole(cfg_)) fail("generation with a KV cache needs the whole model on each rank (no pipeline stages)");
  if (store_->on_device()) fail("generation with a KV cache runs on the CPU backend for now (--device cpu)");
  if (tp_.sp()) fail("generation with a KV cache runs without --sequence-parallel");
  CLAW_CHECK(!ctx_in.training, "forward_cached is inference only");
  const int64_t B = ctx_in.B, T = ctx_in.T;
  cache.check_room(B, T);
  if (B * T > inf_tokens_) {  // the arena's buffers are sized by the token count only: grow, never shrink
    inf_plan_ = ArenaPlan("inference");
    ArenaLayout planning = ArenaLayout::planning(inf_plan_);
    Activations shape;
    shape.layout_inference(planning, cfg_, 1, B * T, tp_.dims());
    inf_arena_ = Arena(inf_plan_);
    ArenaLayout L = ArenaLayout::binding(inf_plan_, inf_arena_);
    inf_.layout_inference(L, cfg_, 1, B * T, tp_.dims());
    inf_tokens_ = B * T;
  }
  std::vector<int32_t> positions(static_cast<size_t>(B * T));
  cache.positions(B, T, positions.data());
  for (int32_t p : positions)
    if (p >= cfg_.max_position_embeddings)
      fail("position {} is past the model's context of {} tokens (--max-position-embeddings)", p,
           cfg_.max_position_embeddings);
  StepCtx ctx = ctx_in;
  ctx.positions = positions.data();
  ctx.seg_start = nullptr;
  ctx.kv_cache = &cache;
  ctx.batch_invariant = true;
  embedding_.forward(ctx, tokens, inf_.input, inf_.scratch);
  for (int k = 0; k < num_blocks(); ++k) blocks_[k]->forward(ctx, inf_.blocks[k], inf_.scratch);
  final_norm_.forward(ctx, inf_.out(), inf_.final_norm);
  cache.advance(B, T);
  return Tensor(inf_.final_norm.out, activation_dtype(), {B * T, cfg_.hidden_size});
}

void GPT::full_logits(const StepCtx& ctx, const Tensor& hidden, float* out) const {
  CLAW_CHECK(hidden.dtype() == activation_dtype() && hidden.shape() == Shape({ctx.tokens(), cfg_.hidden_size}),
             "full_logits of {} {}: expected {} [{}, {}]", dtype_name(hidden.dtype()), hidden.shape().str(),
             dtype_name(activation_dtype()), ctx.tokens(), cfg_.hidden_size);
  output_.full_logits(ctx, hidden.data<float>(), out);
}

void GPT::logits(const StepCtx& ctx, float* out) const { output_.logits(ctx, acts().final_norm.out, out); }

}  // namespace claw::model
