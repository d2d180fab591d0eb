#include "claw/rl/weight_sync.h"

#include <algorithm>
#include <cstring>

#include "claw/ckpt/shards.h"
#include "claw/core/error.h"

namespace claw::rl {

WeightLayout::WeightLayout(const model::ModelConfig& cfg) {
  for (const model::ParamSpec& s : ckpt::model_param_specs(cfg)) {
    Entry e{.name = s.name, .shape = ckpt::checkpoint_shape(s), .offset = total_};
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    total_ += n;
    entries_.push_back(std::move(e));
  }
  std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
}

const WeightLayout::Entry& WeightLayout::find(const std::string& name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const Entry& e, const std::string& n) { return e.name < n; });
  if (it == entries_.end() || it->name != name) fail("weight sync: the learner's model has no parameter {}", name);
  return *it;
}

int64_t WeightLayout::offset(const std::string& name) const { return find(name).offset; }
const std::vector<int64_t>& WeightLayout::shape(const std::string& name) const { return find(name).shape; }

namespace {
// Row-major strides of `shape`.
std::vector<int64_t> strides_of(const std::vector<int64_t>& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * shape[d + 1];
  return st;
}
}  // namespace

void gather_weights(runtime::Runtime& learner, const WeightLayout& layout, std::vector<float>& out) {
  out.assign(static_cast<size_t>(layout.total()), 0.0f);
  for (const ckpt::Shard& s : learner.checkpoint_shards(nullptr)) {
    if (!s.write) continue;
    CLAW_CHECK(s.dtype == DType::f32, "weight sync reads fp32 values ({} is {})", s.tensor, dtype_name(s.dtype));
    const std::string& name = s.spec->name;
    const std::vector<int64_t>& shape = layout.shape(name);
    const std::vector<int64_t> st = strides_of(shape);
    float* dst = out.data() + layout.offset(name);
    for (const ckpt::ShardPiece& p : ckpt::shard_pieces(s)) {
      // The box's elements, row-major, are the shard's local elements from
      // local_begin on: copy it run by run along its last dimension.
      const int nd = p.box.ndim();
      const int64_t run = p.box.size[nd - 1];
      const int64_t runs = p.box.numel() / std::max<int64_t>(run, 1);
      const auto* src = static_cast<const float*>(s.data) + (p.local_begin - s.begin);
      std::vector<int64_t> at(p.box.offset);
      for (int64_t r = 0; r < runs; ++r) {
        int64_t flat = 0;
        for (int d = 0; d < nd; ++d) flat += at[d] * st[d];
        std::memcpy(dst + flat, src + r * run, static_cast<size_t>(run) * sizeof(float));
        for (int d = nd - 2; d >= 0; --d) {  // next run: odometer over the leading dimensions
          if (++at[d] < p.box.offset[d] + p.box.size[d]) break;
          at[d] = p.box.offset[d];
        }
      }
    }
  }
  comm::Group& everyone = *learner.world().world_group();
  if (everyone.size() > 1) everyone.all_reduce(out.data(), layout.total(), DType::f32);
}

void load_weights(model::GPT& model, const CpuCtx& cpu, const WeightLayout& layout, const float* weights) {
  CLAW_CHECK(model.tp().size() == 1, "load_weights fills a whole model (TP {})", model.tp().size());
  for (model::Param* p : model.store().params()) {
    const std::vector<int64_t>& shape = layout.shape(p->spec.name);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const int64_t local = p->spec.local_shape().numel();
    CLAW_CHECK(n <= local, "{}: {} values for {} slots", p->spec.name, n, local);
    // Checkpoint shape differs only by padding rows at the end of dimension 0.
    std::memcpy(p->data(), weights + layout.offset(p->spec.name), static_cast<size_t>(n) * sizeof(float));
    std::fill(p->data() + n, p->data() + local, 0.0f);
  }
  model.remerge_lora(cpu);
}

}  // namespace claw::rl
