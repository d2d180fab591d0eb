#include "claw/model/param.h"

#include <cstring>

#include "claw/core/error.h"
#include "claw/core/philox.h"

namespace claw::model {

ArenaPlan ParamStore::plan(const std::vector<const ParamSpec*>& specs, const std::string& name) {
  ArenaPlan plan(name);
  for (const ParamSpec* s : specs) plan.add(s->name, static_cast<size_t>(s->shape.numel()) * dtype_size(s->dtype));
  return plan;
}

ParamStore::ParamStore(std::vector<Param*> params) : params_(std::move(params)) {
  std::vector<const ParamSpec*> specs;
  for (const Param* p : params_) {
    CLAW_CHECK(p->spec.dtype == DType::f32, "parameter {} must be f32 in the CPU trainer", p->spec.name);
    specs.push_back(&p->spec);
  }
  ArenaPlan layout = plan(specs, "parameters");
  values_ = Arena(layout);
  grads_ = Arena("gradients", layout.total());
  for (size_t i = 0; i < params_.size(); ++i) {
    size_t off = layout.entries()[i].offset;
    offsets_.push_back(off);
    params_[i]->value = Tensor(values_.base() + off, DType::f32, params_[i]->spec.shape);
    params_[i]->grad = Tensor(grads_.base() + off, DType::f32, params_[i]->spec.shape);
  }
}

int64_t ParamStore::numel() const {
  int64_t n = 0;
  for (const Param* p : params_) n += p->spec.shape.numel();
  return n;
}

void ParamStore::zero_grads() { std::memset(grads_.base(), 0, grads_.size()); }

void ParamStore::init(const CpuCtx& ctx, uint64_t seed) {
  for (Param* p : params_) {
    const ParamSpec& s = p->spec;
    float* v = p->data();
    int64_t n = s.shape.numel();
    int64_t row = s.shape.ndim() > 1 ? n / s.shape[0] : n;
    int64_t live = s.init_rows >= 0 ? s.init_rows * row : n;
    switch (s.init) {
      case Init::zeros: std::memset(v, 0, n * sizeof(float)); break;
      case Init::ones:
        for (int64_t i = 0; i < n; ++i) v[i] = 1.0f;
        break;
      case Init::normal: {
        RandomStream rng(seed, hash_name(s.name));
        parallel_for(ctx, n, 1 << 14, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) v[i] = i < live ? static_cast<float>(s.init_std * rng.normal(i)) : 0.0f;
        });
        break;
      }
    }
  }
}

Param* ParamStore::find(const std::string& name) const {
  for (Param* p : params_)
    if (p->spec.name == name) return p;
  return nullptr;
}

}  // namespace claw::model
