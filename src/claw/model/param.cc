#include "claw/model/param.h"

#include <algorithm>
#include <cstring>

#include "claw/core/error.h"
#include "claw/core/philox.h"

namespace claw::model {

ArenaPlan ParamStore::plan(const std::vector<const ParamSpec*>& specs, const std::string& name) {
  ArenaPlan plan(name);
  for (const ParamSpec* s : specs)
    plan.add(s->name, static_cast<size_t>(s->local_shape().numel()) * dtype_size(s->dtype));
  return plan;
}

StoreLayout ParamStore::layout(const std::vector<const ParamSpec*>& specs, const StoreOptions& opts) {
  CLAW_CHECK(opts.shards >= 1 && opts.shard >= 0 && opts.shard < opts.shards, "shard {} of {}", opts.shard,
             opts.shards);
  CLAW_CHECK(!opts.shard_values || opts.shard_grads, "sharded values need sharded gradients");
  const ArenaPlan flat = plan(specs, "parameters");
  StoreLayout l;
  for (const auto& e : flat.entries()) l.offsets.push_back(e.offset);
  const int64_t quantum = 16 * static_cast<int64_t>(opts.shards);  // 64-byte aligned shards
  const int64_t floats = static_cast<int64_t>(flat.total() / sizeof(float));
  l.total = (floats + quantum - 1) / quantum * quantum;
  const int64_t S = l.total / opts.shards;
  l.shard_lo = opts.shard * S;
  l.shard_hi = l.shard_lo + S;
  l.value_bytes = static_cast<size_t>(opts.shard_values ? S : l.total) * sizeof(float);
  l.grad_bytes = static_cast<size_t>(opts.shard_grads ? S : l.total) * sizeof(float);
  return l;
}

ParamStore::ParamStore(std::vector<Param*> params, StoreOptions opts) : params_(std::move(params)), opts_(opts) {
  std::vector<const ParamSpec*> specs;
  for (const Param* p : params_) {
    CLAW_CHECK(p->spec.dtype == DType::f32, "parameter {} must be f32 in the CPU trainer", p->spec.name);
    specs.push_back(&p->spec);
  }
  StoreLayout l = layout(specs, opts_);
  offsets_ = std::move(l.offsets);
  total_ = l.total;
  shard_lo_ = l.shard_lo;
  shard_hi_ = l.shard_hi;
  value_bytes_ = l.value_bytes;
  grad_bytes_ = l.grad_bytes;
  if (!opts_.allocate) return;
  if (opts_.device && (opts_.shard_values || opts_.shard_grads))
    fail("--device cuda supports ZeRO stages 0 and 1 for now (sharded gradients and values stay on the CPU backend)");
  values_ = Arena("parameters", value_bytes_, memory());
  grads_ = Arena("gradients", grad_bytes_, memory());
  for (size_t i = 0; i < params_.size(); ++i) {
    const size_t off = offsets_[i];
    const Shape local = params_[i]->spec.local_shape();
    params_[i]->value = opts_.shard_values ? Tensor() : Tensor(values_.base() + off, DType::f32, local);
    params_[i]->grad = opts_.shard_grads ? Tensor() : Tensor(grads_.base() + off, DType::f32, local);
  }
}

float* ParamStore::value_shard() const {
  return opts_.shard_values ? values_.ptr<float>(0) : values_.ptr<float>(0) + shard_lo_;
}

float* ParamStore::grad_shard() const {
  return opts_.shard_grads ? grads_.ptr<float>(0) : grads_.ptr<float>(0) + shard_lo_;
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
  if (opts_.device)
    kernels::cuda::fill_zero(opts_.device->ctx(), grads_.base(), grads_.size());
  else
    std::memset(grads_.base(), 0, grads_.size());
}

void ParamStore::values_to_host(float* out) const {
  if (opts_.device)
    kernels::cuda::copy_to_host(opts_.device->ctx(), out, values_.base(), value_bytes_);
  else
    std::memcpy(out, values_.base(), value_bytes_);
}

void ParamStore::values_from_host(const float* in) {
  if (opts_.device)
    kernels::cuda::copy_to_device(opts_.device->ctx(), values_.base(), in, value_bytes_);
  else
    std::memcpy(values_.base(), in, value_bytes_);
}

void ParamStore::init(const CpuCtx& ctx_in, uint64_t seed) {
  // On a GPU the values are drawn on the host (the same Philox numbers) and copied over.
  Arena staging;
  if (opts_.device) staging = Arena("parameters (host staging)", value_bytes_);
  CpuCtx ctx = ctx_in;
  ctx.gpu = nullptr;
  // The flat range this rank holds, and where it starts in memory.
  const int64_t lo = opts_.shard_values ? shard_lo_ : 0, hi = opts_.shard_values ? shard_hi_ : total_;
  float* base = (opts_.device ? staging.ptr<float>(0) : values_.ptr<float>(0)) - lo;
  for (size_t k = 0; k < params_.size(); ++k) {
    const ParamSpec& s = params_[k]->spec;
    const int64_t n = s.local_shape().numel(), off = static_cast<int64_t>(offsets_[k] / sizeof(float));
    const int64_t b = std::max(lo, off), e = std::min(hi, off + n);  // global flat elements held here
    if (b >= e) continue;
    float* v = base + off;  // element i of the parameter is v[i], for i in [b - off, e - off)
    // Rows past init_rows (global rows) are zero; Philox is keyed by the
    // global element index, so every sharding draws the same numbers.
    const int64_t row = s.shape.ndim() > 1 ? s.shape.numel() / s.shape[0] : s.shape.numel();
    const int64_t live = s.init_rows >= 0 ? s.init_rows * row : s.shape.numel();
    switch (s.init) {
      case Init::zeros: std::memset(v + (b - off), 0, (e - b) * sizeof(float)); break;
      case Init::ones:
        for (int64_t i = b - off; i < e - off; ++i) v[i] = 1.0f;
        break;
      case Init::normal: {
        RandomStream rng(seed, hash_name(s.name));
        parallel_for(ctx, e - b, 1 << 14, [&](int64_t cb, int64_t ce) {
          for (int64_t i = b - off + cb; i < b - off + ce; ++i) {
            const int64_t g = s.global_index(i);
            v[i] = g < live ? static_cast<float>(s.init_std * rng.normal(g)) : 0.0f;
          }
        });
        break;
      }
    }
  }
  if (opts_.device) values_from_host(staging.ptr<float>(0));
}

std::vector<Segment> ParamStore::full_segments() const {
  CLAW_CHECK(!opts_.shard_values && !opts_.shard_grads, "full segments of a sharded store");
  std::vector<Segment> out;
  for (const Param* p : params_)
    out.push_back({.param = p, .value = p->data(), .grad = p->gdata(), .n = p->spec.local_shape().numel()});
  return out;
}

Param* ParamStore::find(const std::string& name) const {
  for (Param* p : params_)
    if (p->spec.name == name) return p;
  return nullptr;
}

}  // namespace claw::model
