// Parameters and their global identity (DESIGN.md principle 3).
//
// A ParamSpec says what a parameter *is* independently of how it is stored:
// canonical name, global shape, dtype, whether weight decay applies, how it
// is initialised, how this rank holds it, whether it trains, over which
// group its gradients are reduced, and where it lives in a Hugging Face
// checkpoint. ZeRO ranges, weight decay, checkpoints, HF import/export and
// the planner's memory accounting all read it; nothing is addressed by
// position (STYLE.md #8).
//
// ParamStore lays all parameters of a model out in one flat, 64-byte aligned
// value buffer and the trainable ones in a flat gradient buffer (the llm.c
// single buffer, generalised). The buffers play the three roles of
// mixed-precision training, each with its dtype (StoreDtypes): the master
// weights the optimizer updates (the value buffer), the compute copy the
// layers read (the value buffer itself when its dtype is the master's, else a
// buffer of its own laid out like the values and refreshed from them), and
// the gradients; the optimizer, gradient norm and bucketed
// all-reduce work on ranges of these flat buffers. The buffers are cut into
// regions (StoreRegion): the trainable parameters of each reduction group,
// then the frozen ones. Within a trainable region a parameter's value and
// gradient sit at the same offset, so ZeRO's ranges of one region are the
// same for values, gradients and optimizer state; frozen parameters have no
// gradient and never reach the optimizer.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "claw/core/arena.h"
#include "claw/core/dtype.h"
#include "claw/core/error.h"
#include "claw/core/parallel.h"
#include "claw/core/tensor.h"
#include "claw/kernels/cuda/context.h"
#include "claw/model/config.h"

namespace claw::model {

// Where a parameter (or its part) sits in a Hugging Face state dict.
// Our tensor (after the optional transpose) equals hf[name] restricted to
// [begin, end) along `slice_dim` of the HF tensor (-1: the whole tensor).
// `rows` < 0: all our rows map; otherwise only our first `rows` rows do (the
// rest is vocabulary padding that HF does not have).
struct HfRef {
  std::string name;      // empty: no HF counterpart
  bool transpose = false;  // GPT-2's Conv1D stores [in, out]
  int slice_dim = -1;
  int64_t begin = 0, end = 0;
  int64_t rows = -1;
  // > 0: our dimension 0 stacks that many HF tensors, each named by `name`
  // with "{}" replaced by its index (Mixtral's experts.{}.w1.weight); our
  // [e] is HF tensor e.
  int64_t stack = 0;
};

// normal: N(0, init_std); uniform: U(-init_std, init_std) (LoRA's A).
enum class Init { normal, zeros, ones, uniform };

struct ParamSpec {
  std::string name;        // canonical claw name, e.g. "layers.3.attention.q_proj.weight"
  Shape shape;             // global shape
  DType dtype = DType::f32;
  bool weight_decay = true;  // Megatron/llm.c rule: matrices decay, biases and norm weights do not
  Init init = Init::normal;
  double init_std = 0.02;
  int64_t init_rows = -1;  // >= 0: rows beyond this are zero (vocabulary padding)
  HfRef hf;
  // How this rank holds it: replicated (shard_dim < 0), or slice shard_index
  // of shard_count equal slices along shard_dim across the group named
  // shard_group (tensor parallelism: "tp"). `shape` stays the global shape.
  int shard_dim = -1;
  int shard_count = 1, shard_index = 0;
  std::string shard_group;
  // Whether this rank's copy counts in sums over the tensor-parallel group
  // (the gradient norm): true on exactly one of the TP ranks holding the same
  // values (TP rank 0 for replicated parameters, the first rank of a
  // replicated KV group's ranks), true everywhere without TP.
  bool primary = true;
  // Whether it trains (claw train --freeze). A frozen parameter gets no
  // gradient buffer and no optimizer state, and layers skip its
  // weight-gradient work (input gradients still flow through it).
  bool trainable = true;
  // The group its gradients are summed over and its ZeRO state is sharded
  // across: "dp" (the ranks the dense parameters are replicated over: data-
  // parallel, times context-parallel under CP), or "expert_dp" (MoE experts
  // under expert parallelism: the ranks holding the same experts).
  std::string reduction_group = "dp";
  // MoE: the expert of its layer this parameter belongs to (-1: dense).
  int expert = -1;
  // State kept with the parameters that no optimizer updates (a MoE
  // router's expert bias, which its own rule moves): never trainable,
  // whatever --freeze or LoRA say; saved and loaded like a parameter.
  bool buffer = false;

  // Makes this rank hold slice `index` of `count` along `dim` over `group`.
  void split(int dim, int count, int index, std::string group) {
    shard_dim = dim;
    shard_count = count;
    shard_index = index;
    shard_group = std::move(group);
  }
  // The shape this rank stores.
  Shape local_shape() const {
    return shard_dim < 0 ? shape : shape.with(shard_dim, shape[shard_dim] / shard_count);
  }
  // The global flat (row-major) index of local element i.
  int64_t global_index(int64_t i) const {
    if (shard_dim < 0) return i;
    int64_t inner = 1;
    for (int d = shard_dim + 1; d < shape.ndim(); ++d) inner *= shape[d];
    const int64_t local_block = shape[shard_dim] / shard_count * inner;
    return i / local_block * (shape[shard_dim] * inner) + shard_index * local_block + i % local_block;
  }
};

struct Param {
  ParamSpec spec;
  Tensor value;    // the master weights, bound by ParamStore
  Tensor compute;  // what the layers read: `value` itself, or its copy in the compute dtype
  Tensor grad;     // unbound (null) for a frozen parameter
  float* data() const { return value.data<float>(); }
  float* gdata() const { return grad.data<float>(); }
  // The bf16 compute copy's bits (--bf16 on a GPU: refreshed after every
  // optimizer step), or null when the layers read the values themselves.
  const uint16_t* bf16_compute() const {
    return compute.dtype() == DType::bf16 ? static_cast<const uint16_t*>(compute.raw()) : nullptr;
  }
};

// A contiguous run of one parameter's elements held by this rank, with its
// gradient: the unit of optimizer work (a whole parameter on one rank, the
// piece of it inside the rank's shard under ZeRO).
struct Segment {
  const Param* param;  // for weight decay and messages
  void* value;         // n elements of value_dtype: the master weights
  const float* grad;
  int64_t n;
  int64_t begin = 0;  // offset of value[0] among the parameter's local elements (checkpoints)
  DType value_dtype = DType::f32;
  float* f32_value() const {
    CLAW_CHECK(value_dtype == DType::f32, "{}: the master weights are {}", param->spec.name, dtype_name(value_dtype));
    return static_cast<float*>(value);
  }
};

// The dtype of each role of a ParamStore. fp32 everywhere is the default;
// a bf16 or f16 compute copy is laid out like the values and refreshed from
// them (the kernels take 16-bit storage already). The master weights are
// f32, or f16 (--main-params-dtype fp16): then the store holds only the
// 2-byte masters and the layers read an fp32 working copy of each unit,
// made by the data-parallel engine before the unit runs and dropped after
// (the same slots as ZeRO-3's gathers; compute stays f32). Gradients are
// f32: the data-parallel reduction and the optimizer read fp32 gradients.
enum class ParamRole { master, compute, grad };
struct StoreDtypes {
  DType master = DType::f32;
  DType compute = DType::f32;
  DType grad = DType::f32;
  DType of(ParamRole r) const { return r == ParamRole::master ? master : r == ParamRole::compute ? compute : grad; }
  bool separate_compute() const { return master == DType::f32 && compute != master; }
  // Throws claw::Error naming the role and the dtypes it may have.
  void validate() const;
};

// How a ParamStore holds its flat buffers. Each region's flat layout is
// padded to a multiple of 16 x shards so that each of the `shards` ranks of
// its group owns the equal range [shard * S, (shard + 1) * S) (ZeRO's
// partition; padding instead of refusing odd sizes). With shard_values /
// shard_grads a rank allocates only its range of each region of that buffer;
// the parameters' tensors are then unbound until the data-parallel engine
// binds them to gathered or staging memory.
struct StoreOptions {
  int shards = 1;  // ranks of the "dp" reduction group, and this rank's place in it
  int shard = 0;
  int expert_shards = 1;  // the same for "expert_dp"
  int expert_shard = 0;
  bool shard_values = false;  // ZeRO-3
  bool shard_grads = false;   // ZeRO-2 and 3
  // false: lay out only (offsets, shard range, byte counts) and allocate
  // nothing, leaving every tensor unbound: the planner's shape-only model.
  bool allocate = true;
  // Non-null: values and gradients live in this GPU's memory (--device
  // cuda), and so do the model's activations; null: host memory.
  const kernels::cuda::Device* device = nullptr;
  // Glob patterns (fnmatch) over canonical names of the parameters that do
  // not train (--freeze); the GPT sets ParamSpec::trainable from them.
  std::vector<std::string> freeze;
  StoreDtypes dtypes;
  // Whether the parameters' value tensors are unbound outside a unit's use:
  // the values are sharded (ZeRO-3) or stored in a dtype the layers do not
  // read (fp16 masters); the data-parallel engine binds each unit to an
  // fp32 slot while it runs.
  bool values_in_slots() const { return shard_values || dtypes.master != DType::f32; }
};

// Whether `name` matches one of the glob patterns.
// A LoRA adapter's factor (Linear::enable_lora): "...q_proj.lora_A.weight".
inline bool is_lora_param(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}
bool matches_any(const std::vector<std::string>& patterns, const std::string& name);
// Whether parameter `name` trains under `lora` (enabled): an adapter's
// factor, or a base parameter --lora-modules-to-save names.
inline bool lora_trains(const LoraConfig& lora, const std::string& name) {
  return is_lora_param(name) || matches_any(lora.modules_to_save, name);
}
// Throws claw::Error naming the first pattern that matches none of `names`
// (`flag` names the option in the message).
void check_patterns_match(const std::vector<std::string>& patterns, const std::vector<std::string>& names,
                          const std::string& flag);

// A region of the store: the trainable parameters of one reduction group, or
// the frozen ones. Its own flat layout (parameters in store order, 64-byte
// aligned, padded to 16 x shards) is split into equal shards over the
// group's ranks. Coordinates inside a region are floats from its start.
struct StoreRegion {
  std::string group = "dp";  // the reduction group whose ranks share it ("dp" or "expert_dp")
  bool trainable = true;
  int shards = 1, shard = 0;
  std::vector<size_t> params;  // indices into the store's parameters, in order
  int64_t total = 0;           // floats, padded
  // Where it starts: in the whole value layout, and in this rank's value
  // buffer (its shard's start when values are sharded); likewise for
  // gradients (-1: frozen, none).
  int64_t value_base = 0, value_held_base = 0;
  int64_t grad_base = -1, grad_held_base = -1;
  int64_t shard_size() const { return total / shards; }
  int64_t shard_lo() const { return shard * shard_size(); }
  int64_t shard_hi() const { return shard_lo() + shard_size(); }
};

// Where a parameter lives: its region and its offset there (floats).
struct ParamSlot {
  int region = 0;
  int64_t offset = 0;
};

// The flat layout of a store (pure): what ParamStore allocates and the
// planner counts.
struct StoreLayout {
  std::vector<StoreRegion> regions;  // trainable regions first, then frozen ones
  std::vector<ParamSlot> slots;      // per parameter, in order
  int64_t value_total = 0, grad_total = 0;  // floats of the whole value / gradient layouts
  size_t value_bytes = 0, grad_bytes = 0;   // what this rank holds of each buffer
  size_t compute_bytes = 0;                 // the compute copy (0: the values serve)
  int64_t frozen_numel = 0;                 // elements of frozen parameters (no alignment padding)
};

class ParamStore {
 public:
  // Plans the regions for `params` (in the given order) and allocates the
  // value and gradient buffers; binds each Param's tensors to the full
  // buffers (a frozen parameter's gradient stays unbound).
  explicit ParamStore(std::vector<Param*> params, StoreOptions opts = {});

  // The layout as a pure function of the specs (for the memory plan).
  static StoreLayout layout(const std::vector<const ParamSpec*>& specs, const StoreOptions& opts);

  const std::vector<Param*>& params() const { return params_; }
  const StoreOptions& options() const { return opts_; }
  const std::vector<StoreRegion>& regions() const { return layout_.regions; }
  const ParamSlot& slot(size_t k) const { return layout_.slots[k]; }
  // Parameter k's first element in the whole value / gradient layout (floats; -1: frozen).
  int64_t value_offset(size_t k) const;
  int64_t grad_offset(size_t k) const;
  // Floats of the whole value and gradient layouts.
  int64_t total() const { return layout_.value_total; }
  int64_t grad_total() const { return layout_.grad_total; }
  // Full buffers (null when sharded); the float views need fp32 masters.
  float* values() const;
  float* grads() const { return opts_.shard_grads ? nullptr : grads_.ptr<float>(0); }
  // Region r's element 0 in the full buffers (null when sharded).
  float* values(int r) const;
  float* grads(int r) const;
  // This rank's range [shard_lo, shard_hi) of region r in each buffer (in the
  // full buffer when not sharded).
  float* value_shard(int r) const;
  float* grad_shard(int r) const;
  // Element i (region coordinates) of region r's values, in the master
  // dtype; this rank must hold it (any element, unless values are sharded).
  uint8_t* value_at(int r, int64_t i) const;
  DType master_dtype() const { return opts_.dtypes.master; }
  size_t bytes() const { return static_cast<size_t>(total()) * sizeof(float); }  // the whole value buffer
  size_t value_bytes() const { return layout_.value_bytes; }  // held by this rank (allocated unless planning)
  size_t grad_bytes() const { return layout_.grad_bytes; }
  size_t compute_bytes() const { return layout_.compute_bytes; }
  const StoreDtypes& dtypes() const { return opts_.dtypes; }
  // Rewrites the compute copy from the master values this rank holds
  // (rounding to nearest even); a no-op when the values are the compute
  // copy. Called after initialisation, a checkpoint load and each optimizer
  // step.
  void refresh_compute(const CpuCtx& ctx);
  int64_t numel() const;  // parameters, excluding alignment padding
  int64_t frozen_numel() const { return layout_.frozen_numel; }

  // Zeroes the gradient buffer this rank holds (full or shard).
  void zero_grads();
  // The memory the buffers live in (host, or the GPU of options().device).
  const MemoryResource& memory() const;
  bool on_device() const { return opts_.device != nullptr; }
  // Overwrites the values this rank holds (value_bytes()) from host memory.
  void values_from_host(const float* in);
  // Philox init keyed by (seed, hash(name)) at the global element index, so
  // every layout initialises a parameter identically; writes the values this
  // rank holds (all, or its shard).
  void init(const CpuCtx& ctx, uint64_t seed);
  Param* find(const std::string& name) const;
  // One segment per trainable parameter (full buffers only).
  std::vector<Segment> full_segments() const;

 private:
  std::vector<Param*> params_;
  StoreOptions opts_;
  StoreLayout layout_;
  Arena values_, grads_, compute_;
};

}  // namespace claw::model
