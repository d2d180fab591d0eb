#include "claw/model/param.h"

#include <fnmatch.h>

#include <algorithm>
#include <cstring>

#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"
#include "claw/core/philox.h"
#include "claw/kernels/cuda/ops.h"

namespace claw::model {

namespace {
int64_t align16(int64_t n) { return (n + 15) / 16 * 16; }
}  // namespace

namespace {
// A name to show in messages: a block's, where the model has blocks.
std::string example(const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (n.rfind("layers.", 0) == 0) return n;
  return names.empty() ? std::string() : names.front();
}
}  // namespace

bool matches_any(const std::vector<std::string>& patterns, const std::string& name) {
  for (const std::string& p : patterns)
    if (::fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

void check_patterns_match(const std::vector<std::string>& patterns, const std::vector<std::string>& names,
                          const std::string& flag) {
  for (const std::string& p : patterns) {
    if (p.empty()) fail("{}: an empty pattern (give glob patterns over parameter names, comma-separated)", flag);
    if (std::none_of(names.begin(), names.end(), [&](const std::string& n) { return matches_any({p}, n); }))
      fail("{} '{}' matches no parameter of this model (names look like '{}'; '*' matches any characters)", flag, p,
           example(names));
  }
}

StoreLayout ParamStore::layout(const std::vector<const ParamSpec*>& specs, const StoreOptions& opts) {
  CLAW_CHECK(opts.shards >= 1 && opts.shard >= 0 && opts.shard < opts.shards, "shard {} of {}", opts.shard,
             opts.shards);
  CLAW_CHECK(opts.expert_shards >= 1 && opts.expert_shard >= 0 && opts.expert_shard < opts.expert_shards,
             "expert shard {} of {}", opts.expert_shard, opts.expert_shards);
  CLAW_CHECK(!opts.shard_values || opts.shard_grads, "sharded values need sharded gradients");
  StoreLayout l;
  l.slots.resize(specs.size());
  // Regions in order of first appearance, trainable before frozen, so that a
  // store without frozen parameters is one region laid out as before.
  for (bool trainable : {true, false}) {
    for (size_t k = 0; k < specs.size(); ++k) {
      const ParamSpec& s = *specs[k];
      if (s.trainable != trainable) continue;
      const bool expert = s.reduction_group == "expert_dp";
      CLAW_CHECK(expert || s.reduction_group == "dp", "{}: unknown reduction group '{}' (\"dp\" or \"expert_dp\")",
                 s.name, s.reduction_group);
      auto it = std::find_if(l.regions.begin(), l.regions.end(), [&](const StoreRegion& r) {
        return r.trainable == trainable && r.group == s.reduction_group;
      });
      if (it == l.regions.end()) {
        l.regions.push_back({.group = s.reduction_group, .trainable = trainable,
                             .shards = expert ? opts.expert_shards : opts.shards,
                             .shard = expert ? opts.expert_shard : opts.shard});
        it = l.regions.end() - 1;
      }
      l.slots[k] = {.region = static_cast<int>(it - l.regions.begin()), .offset = it->total};
      it->params.push_back(k);
      const int64_t n = s.local_shape().numel();
      it->total += align16(n);
      if (!trainable) l.frozen_numel += n;
    }
  }
  int64_t held_values = 0, held_grads = 0;
  for (StoreRegion& r : l.regions) {
    const int64_t quantum = 16 * static_cast<int64_t>(r.shards);  // 64-byte aligned shards
    r.total = (r.total + quantum - 1) / quantum * quantum;
    r.value_base = l.value_total;
    r.value_held_base = held_values;
    l.value_total += r.total;
    held_values += opts.shard_values ? r.shard_size() : r.total;
    if (!r.trainable) continue;
    r.grad_base = l.grad_total;
    r.grad_held_base = held_grads;
    l.grad_total += r.total;
    held_grads += opts.shard_grads ? r.shard_size() : r.total;
  }
  l.value_bytes = static_cast<size_t>(held_values) * dtype_size(opts.dtypes.master);
  l.grad_bytes = static_cast<size_t>(held_grads) * dtype_size(opts.dtypes.grad);
  if (opts.dtypes.separate_compute())
    l.compute_bytes = static_cast<size_t>(held_values) * dtype_size(opts.dtypes.compute);
  return l;
}

ParamStore::ParamStore(std::vector<Param*> params, StoreOptions opts) : params_(std::move(params)), opts_(opts) {
  std::vector<const ParamSpec*> specs;
  for (const Param* p : params_) {
    CLAW_CHECK(p->spec.dtype == DType::f32, "parameter {} must be f32 in the CPU trainer", p->spec.name);
    specs.push_back(&p->spec);
  }
  opts_.dtypes.validate();
  layout_ = layout(specs, opts_);
  if (!opts_.allocate) return;
  if (opts_.dtypes.separate_compute() &&
      (opts_.shard_values || (opts_.device && opts_.dtypes.compute != DType::bf16)))
    fail("a {} compute copy of the parameters needs unsharded values (ZeRO stages 0-2), and bf16 on --device cuda",
         dtype_name(opts_.dtypes.compute));
  if (opts_.device && (opts_.shard_values || opts_.shard_grads))
    fail("--device cuda supports ZeRO stages 0 and 1 for now (sharded gradients and values stay on the CPU backend)");
  if (opts_.device && opts_.dtypes.master != DType::f32)
    fail("--main-params-dtype {}: fp16 master weights run on the CPU backend for now (--device cpu)",
         dtype_name(opts_.dtypes.master));
  values_ = Arena("parameters", layout_.value_bytes, memory());
  grads_ = Arena("gradients", layout_.grad_bytes, memory());
  if (layout_.compute_bytes > 0) compute_ = Arena("parameters (compute copy)", layout_.compute_bytes, memory());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Shape local = params_[i]->spec.local_shape();
    const StoreRegion& r = layout_.regions[layout_.slots[i].region];
    const int64_t at = layout_.slots[i].offset;
    params_[i]->value = opts_.values_in_slots() ? Tensor()
                                                : Tensor(values(layout_.slots[i].region) + at, DType::f32, local);
    params_[i]->grad = opts_.shard_grads || !r.trainable ? Tensor()
                                                         : Tensor(grads(layout_.slots[i].region) + at, DType::f32, local);
    params_[i]->compute = params_[i]->value;
    if (layout_.compute_bytes > 0) {
      const size_t elem = dtype_size(opts_.dtypes.compute);
      uint8_t* base = compute_.base() + static_cast<size_t>(r.value_base + at) * elem;
      params_[i]->compute = Tensor(base, opts_.dtypes.compute, local);
    }
  }
}

void StoreDtypes::validate() const {
  if (master != DType::f32 && master != DType::f16)
    fail("the master weights must be f32 or f16 (got {})", dtype_name(master));
  if (master != DType::f32 && compute != DType::f32)
    fail("{} master weights are read through fp32 working copies: the compute dtype must be f32 (got {})",
         dtype_name(master), dtype_name(compute));
  if (grad != DType::f32)
    fail("the gradients must be f32 (got {}): the data-parallel reduction and the optimizer read fp32 gradients",
         dtype_name(grad));
  if (compute != DType::f32 && compute != DType::bf16 && compute != DType::f16)
    fail("the compute copy of the parameters must be f32, bf16 or f16 (got {})", dtype_name(compute));
}

void ParamStore::refresh_compute(const CpuCtx& ctx) {
  if (layout_.compute_bytes == 0) return;
  const int64_t n = static_cast<int64_t>(layout_.value_bytes / dtype_size(opts_.dtypes.master));
  if constexpr (kernels::cuda::cuda_built()) {
    if (opts_.device) {  // fp32 masters to their bf16 copy, one pass on the device
      kernels::cuda::to_bf16(opts_.device->ctx(), reinterpret_cast<uint16_t*>(compute_.base()),
                             reinterpret_cast<const float*>(values_.base()), n);
      return;
    }
  }
  const size_t from = dtype_size(opts_.dtypes.master), to = dtype_size(opts_.dtypes.compute);
  parallel_for(ctx, n, 1 << 15, [&](int64_t b, int64_t e) {
    convert(opts_.dtypes.master, values_.base() + b * from, opts_.dtypes.compute, compute_.base() + b * to, e - b);
  });
}

int64_t ParamStore::value_offset(size_t k) const {
  return regions()[slot(k).region].value_base + slot(k).offset;
}

int64_t ParamStore::grad_offset(size_t k) const {
  const StoreRegion& r = regions()[slot(k).region];
  return r.trainable ? r.grad_base + slot(k).offset : -1;
}

float* ParamStore::values() const {
  CLAW_CHECK(master_dtype() == DType::f32, "float view of {} master weights", dtype_name(master_dtype()));
  return opts_.shard_values ? nullptr : values_.ptr<float>(0);
}

float* ParamStore::values(int r) const {
  CLAW_CHECK(master_dtype() == DType::f32, "float view of {} master weights", dtype_name(master_dtype()));
  return opts_.shard_values ? nullptr : values_.ptr<float>(0) + regions()[r].value_base;
}

uint8_t* ParamStore::value_at(int r, int64_t i) const {
  const StoreRegion& g = regions()[r];
  CLAW_CHECK(!opts_.shard_values || (i >= g.shard_lo() && i <= g.shard_hi()), "element {} of region {} is not held here",
             i, r);
  const int64_t at = opts_.shard_values ? g.value_held_base + (i - g.shard_lo()) : g.value_base + i;
  return values_.base() + static_cast<size_t>(at) * dtype_size(master_dtype());
}

float* ParamStore::grads(int r) const {
  const StoreRegion& g = regions()[r];
  return opts_.shard_grads || !g.trainable ? nullptr : grads_.ptr<float>(0) + g.grad_base;
}

float* ParamStore::value_shard(int r) const {
  const StoreRegion& g = regions()[r];
  CLAW_CHECK(master_dtype() == DType::f32, "float view of {} master weights", dtype_name(master_dtype()));
  return values_.ptr<float>(0) + (opts_.shard_values ? g.value_held_base : g.value_base + g.shard_lo());
}

float* ParamStore::grad_shard(int r) const {
  const StoreRegion& g = regions()[r];
  if (!g.trainable) return nullptr;
  return grads_.ptr<float>(0) + (opts_.shard_grads ? g.grad_held_base : g.grad_base + g.shard_lo());
}

int64_t ParamStore::numel() const {
  int64_t n = 0;
  for (const Param* p : params_) n += p->spec.local_shape().numel();
  return n;
}

const MemoryResource& ParamStore::memory() const {
  return opts_.device ? opts_.device->memory() : host_memory();
}

void ParamStore::zero_grads() {
  if (grads_.size() == 0) return;
  if (opts_.device)
    kernels::cuda::fill_zero(opts_.device->ctx(), grads_.base(), grads_.size());
  else
    std::memset(grads_.base(), 0, grads_.size());
}

void ParamStore::values_from_host(const float* in) {
  if (opts_.device)
    kernels::cuda::copy_to_device(opts_.device->ctx(), values_.base(), in, layout_.value_bytes);
  else
    std::memcpy(values_.base(), in, layout_.value_bytes);
}

namespace {
// Parameter s's initial values for its local elements [i0, i1), into
// out[0, i1 - i0). Rows past init_rows (global rows) are zero; Philox is
// keyed by the global element index, so every sharding draws the same
// numbers.
void draw(const CpuCtx& ctx, const ParamSpec& s, uint64_t seed, float* out, int64_t i0, int64_t i1) {
  const int64_t row = s.shape.ndim() > 1 ? s.shape.numel() / s.shape[0] : s.shape.numel();
  const int64_t live = s.init_rows >= 0 ? s.init_rows * row : s.shape.numel();
  switch (s.init) {
    case Init::zeros: std::memset(out, 0, (i1 - i0) * sizeof(float)); break;
    case Init::ones: std::fill(out, out + (i1 - i0), 1.0f); break;
    case Init::uniform: {
      RandomStream rng(seed, hash_name(s.name));
      for (int64_t i = i0; i < i1; ++i)
        out[i - i0] = static_cast<float>(s.init_std * (2.0 * rng.uniform(s.global_index(i)) - 1.0));
      break;
    }
    case Init::normal: {
      RandomStream rng(seed, hash_name(s.name));
      parallel_for(ctx, i1 - i0, 1 << 14, [&](int64_t cb, int64_t ce) {
        constexpr int64_t kChunk = 512;  // global indices, then their deviates several at a time
        uint64_t g[kChunk];
        float z[kChunk];
        for (int64_t c = i0 + cb; c < i0 + ce; c += kChunk) {
          const int64_t m = std::min(kChunk, i0 + ce - c);
          for (int64_t j = 0; j < m; ++j) g[j] = static_cast<uint64_t>(s.global_index(c + j));
          rng.normals(g, m, z);
          for (int64_t j = 0; j < m; ++j)
            out[c + j - i0] = static_cast<int64_t>(g[j]) < live ? static_cast<float>(s.init_std * z[j]) : 0.0f;
        }
      });
      break;
    }
  }
}
}  // namespace

void ParamStore::init(const CpuCtx& ctx_in, uint64_t seed) {
  // On a GPU the values are drawn into host memory (the same Philox numbers)
  // laid out as the device buffer, then copied over in one piece; 16-bit
  // masters are drawn in fp32 a block at a time and rounded to nearest even.
  const bool f32 = master_dtype() == DType::f32;
  Arena staging;
  if (opts_.device) staging = Arena("parameters (host staging)", layout_.value_bytes);
  std::vector<float> block;
  CpuCtx ctx = ctx_in;
  ctx.gpu = nullptr;
  for (size_t k = 0; k < params_.size(); ++k) {
    const ParamSpec& s = params_[k]->spec;
    const int r = slot(k).region;
    const StoreRegion& g = regions()[r];
    // The region's range this rank holds.
    const int64_t lo = opts_.shard_values ? g.shard_lo() : 0, hi = opts_.shard_values ? g.shard_hi() : g.total;
    const int64_t n = s.local_shape().numel(), off = slot(k).offset;
    const int64_t b = std::max(lo, off), e = std::min(hi, off + n);  // region elements held here
    if (b >= e) continue;
    if (f32) {
      float* at = reinterpret_cast<float*>(value_at(r, b));
      if (opts_.device) at = reinterpret_cast<float*>(staging.base() + (value_at(r, b) - values_.base()));
      draw(ctx, s, seed, at, b - off, e - off);
      continue;
    }
    constexpr int64_t kBlock = int64_t{1} << 16;
    block.resize(static_cast<size_t>(std::min(kBlock, e - b)));
    for (int64_t c = b; c < e; c += kBlock) {
      const int64_t m = std::min(kBlock, e - c);
      draw(ctx, s, seed, block.data(), c - off, c - off + m);
      convert(DType::f32, block.data(), master_dtype(), value_at(r, c), m);
    }
  }
  if (opts_.device) values_from_host(staging.ptr<float>(0));
  refresh_compute(ctx);
}

std::vector<Segment> ParamStore::full_segments() const {
  CLAW_CHECK(!opts_.shard_values && !opts_.shard_grads, "full segments of a sharded store");
  std::vector<Segment> out;
  for (int r = 0; r < static_cast<int>(regions().size()); ++r) {
    if (!regions()[r].trainable) continue;
    for (size_t k : regions()[r].params) {
      const Param* p = params_[k];
      out.push_back({.param = p, .value = value_at(r, slot(k).offset), .grad = p->gdata(),
                     .n = p->spec.local_shape().numel(), .value_dtype = master_dtype()});
    }
  }
  return out;
}

Param* ParamStore::find(const std::string& name) const {
  for (Param* p : params_)
    if (p->spec.name == name) return p;
  return nullptr;
}

}  // namespace claw::model
