// What one rank holds of each checkpoint tensor, and which parts it writes.
//
// Tensors: "model.<param>" (values) and "optim.<state>.<param>" for each
// state the optimizer names (AdamW::state_names(): its moments), each at the
// parameter's checkpoint shape: the global shape without vocabulary padding
// (the padded rows are zero, never trained, and their number depends on the
// TP size). Frozen parameters have values and no optimizer state.
//
// A rank holds each tensor as runs of its local (TP-sliced) elements: all of
// them, or the part in its ZeRO shard of the flat buffer. Every element is
// written by exactly one rank:
//   - copies on other TP ranks and the last pipeline stage's copy of tied
//     embeddings are not primary (ParamSpec::primary) and never write;
//   - what the data-parallel ranks all hold (values below ZeRO-3, moments at
//     ZeRO-0) is dealt out among them by size, so they write in parallel;
//   - ZeRO shards are written by their owners.
#pragma once

#include <string>
#include <vector>

#include "claw/ckpt/format.h"
#include "claw/model/config.h"
#include "claw/model/param.h"
#include "claw/optim/adamw.h"

namespace claw::ckpt {

struct Shard {
  std::string tensor;
  const model::ParamSpec* spec = nullptr;
  int64_t begin = 0, n = 0;  // among the local tensor's elements (row-major over spec->local_shape())
  void* data = nullptr;      // element `begin`, of type `dtype`
  bool write = false;        // this rank writes it
  // The element type in memory. A save stores chunks in it; a load converts
  // from the checkpoint's stored type into it (core/dtype_convert.h).
  DType dtype = DType::f32;
  // Element i (0-based from `begin`) as a pointer into data.
  void* at(int64_t i) const { return static_cast<uint8_t*>(data) + i * static_cast<int64_t>(dtype_size(dtype)); }
};

// The global shape a parameter has in a checkpoint (no vocabulary padding).
std::vector<int64_t> checkpoint_shape(const model::ParamSpec& spec);
// A shard as boxes of the checkpoint tensor (padding rows dropped). Each box
// is a contiguous run of the rank's local elements, starting at local_begin.
struct ShardPiece {
  Box box;
  int64_t local_begin = 0;
};
std::vector<ShardPiece> shard_pieces(const Shard& s);

std::string value_tensor(const std::string& param);  // "model.<param>"
std::string optimizer_tensor(const std::string& state, const std::string& param);  // "optim.<state>.<param>"

// Every parameter of the whole model (a shape-only GPT), in canonical order:
// what a complete checkpoint of `cfg` holds.
std::vector<model::ParamSpec> model_param_specs(const model::ModelConfig& cfg);

struct ShardOptions {
  int zero_stage = 0;  // the group sizes and ranks come from the stores' regions
  bool optimizer = true;  // include the optimizer's state
  // --num-distributed-optimizer-instances: this rank's instance. The dense
  // region ("dp") is sharded inside each instance and every instance holds
  // the same values and state, so only instance 0 writes it.
  int replica = 0;
  // DiLoCo: the instances' inner optimizers hold different moments, so
  // instance i > 0 writes its own as "optim.<state>@instance<i>.<param>"
  // (instance_state_name).
  bool per_instance_optimizer = false;
};
// The name instance `replica` gives optimizer state `state` under
// ShardOptions::per_instance_optimizer ("<state>@instance<i>"; instance 0's is `state`).
std::string instance_state_name(const std::string& state, int replica);
// An instance's optimizer tensor under instance 0's name (a tensor without
// the instance tag comes back unchanged).
std::string instance0_tensor(const std::string& tensor);

// This rank's shards of `stores` (its model chunks, in order) and of the
// optimizer stepping them.
std::vector<Shard> collect_shards(const std::vector<const model::ParamStore*>& stores, const optim::AdamW* optimizer,
                                  const ShardOptions& opts);

}  // namespace claw::ckpt
