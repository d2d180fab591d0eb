#include "claw/ckpt/shards.h"

#include <algorithm>
#include <map>

#include "claw/core/error.h"
#include "claw/model/gpt.h"

namespace claw::ckpt {

std::vector<int64_t> checkpoint_shape(const model::ParamSpec& spec) {
  std::vector<int64_t> shape;
  for (int d = 0; d < spec.shape.ndim(); ++d) shape.push_back(spec.shape[d]);
  if (spec.init_rows >= 0) shape[0] = std::min(shape[0], spec.init_rows);
  return shape;
}

std::vector<ShardPiece> shard_pieces(const Shard& s) {
  const Shape local = s.spec->local_shape();
  std::vector<int64_t> local_dims;
  for (int d = 0; d < local.ndim(); ++d) local_dims.push_back(local[d]);
  const std::vector<int64_t> shape = checkpoint_shape(*s.spec);
  Box whole;
  whole.offset.assign(shape.size(), 0);
  whole.size = shape;
  Box local_box;
  local_box.offset.assign(local_dims.size(), 0);
  local_box.size = local_dims;
  std::vector<ShardPiece> out;
  for (Box b : flat_range_boxes(local_dims, s.begin, s.n)) {
    const int64_t local_begin = index_in(local_box, b.offset);
    if (s.spec->shard_dim >= 0) b.offset[s.spec->shard_dim] += s.spec->shard_index * local_dims[s.spec->shard_dim];
    // Only padding rows (the end of dimension 0) fall outside, so what is
    // left still starts at local_begin.
    if (auto c = intersect(b, whole)) out.push_back({std::move(*c), local_begin});
  }
  return out;
}

std::string value_tensor(const std::string& param) { return "model." + param; }

std::string instance_state_name(const std::string& state, int replica) {
  return replica == 0 ? state : fmt::format("{}@instance{}", state, replica);
}

std::string instance0_tensor(const std::string& tensor) {
  const size_t at = tensor.find("@instance");
  return at == std::string::npos ? tensor : tensor.substr(0, at) + tensor.substr(tensor.find('.', at));
}

std::string optimizer_tensor(const std::string& state, const std::string& param) {
  return "optim." + state + "." + param;
}

std::vector<model::ParamSpec> model_param_specs(const model::ModelConfig& cfg) {
  model::GPT whole(cfg, {.allocate = false});
  std::vector<model::ParamSpec> out;
  for (const model::Param* p : whole.params()) out.push_back(p->spec);
  return out;
}


std::vector<Shard> collect_shards(const std::vector<const model::ParamStore*>& stores, const optim::AdamW* optimizer,
                                  const ShardOptions& opts) {
  std::vector<Shard> out;
  // What every rank of a reduction group holds ("dp", or "expert_dp" for
  // experts under expert parallelism) goes to its rank with the fewest bytes
  // so far; the same walk on every rank of the group gives the same deal.
  std::map<std::string, std::vector<int64_t>> loads;
  std::map<const model::Param*, const model::StoreRegion*> region_of;
  const auto deal = [&](const model::StoreRegion& g, int64_t n) {
    std::vector<int64_t>& load = loads[g.group];
    load.resize(static_cast<size_t>(g.shards));
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    load[r] += n;
    return r == g.shard;
  };
  for (const model::ParamStore* store : stores) {
    const bool sharded = store->options().shard_values;
    for (size_t k = 0; k < store->params().size(); ++k) {
      const model::Param* p = store->params()[k];
      const int r = store->slot(k).region;
      const model::StoreRegion& g = store->regions()[r];
      region_of[p] = &g;
      const int64_t lo = g.shard_lo(), hi = g.shard_hi();
      const int64_t off = store->slot(k).offset;
      const int64_t numel = p->spec.local_shape().numel();
      const int64_t b = sharded ? std::max(lo, off) : off, e = sharded ? std::min(hi, off + numel) : off + numel;
      if (b >= e) continue;
      const bool mine = (sharded || g.shards == 1 || deal(g, e - b)) && !(opts.replica > 0 && g.group == "dp");
      out.push_back({.tensor = value_tensor(p->spec.name), .spec = &p->spec, .begin = b - off, .n = e - b,
                     .data = store->value_at(r, b), .write = p->spec.primary && mine, .dtype = store->master_dtype()});
    }
  }
  if (optimizer && opts.optimizer) {
    const auto& segs = optimizer->segments();
    const auto& names = optim::AdamW::state_names();
    optimizer->open_checkpoint_view();  // FP8 moments: as bf16 until the next step
    for (size_t i = 0; i < segs.size(); ++i) {
      const model::Segment& s = segs[i];
      const model::StoreRegion& g = *region_of.at(s.param);
      const bool own_instance = opts.per_instance_optimizer && g.group == "dp";
      const bool mine = (opts.zero_stage >= 1 || g.shards == 1 || deal(g, static_cast<int64_t>(names.size()) * s.n)) &&
                        !(opts.replica > 0 && g.group == "dp" && !own_instance);
      const bool write = s.param->spec.primary && mine;
      for (size_t k = 0; k < names.size(); ++k)
        out.push_back({.tensor = optimizer_tensor(own_instance ? instance_state_name(names[k], opts.replica) : names[k],
                                                  s.param->spec.name),
                       .spec = &s.param->spec,
                       .begin = s.begin, .n = s.n, .data = optimizer->checkpoint_state(k, i), .write = write,
                       .dtype = optimizer->checkpoint_dtype(k)});
    }
  }
  return out;
}

}  // namespace claw::ckpt
