// Parameters and their global identity (DESIGN.md principle 3).
//
// A ParamSpec says what a parameter *is* independently of how it is stored:
// canonical name, global shape, dtype, whether weight decay applies, how it
// is initialised, how this rank holds it, and where it lives in a Hugging
// Face checkpoint. ZeRO ranges, weight decay, checkpoints, HF import/export
// and the planner's memory accounting all read it; nothing is addressed by
// position (STYLE.md #8).
//
// ParamStore lays all parameters of a model out in one flat, 64-byte aligned
// value buffer, with gradients at the same offsets in a second buffer (the
// llm.c single buffer, generalised): the optimizer, gradient norm and future
// bucketed all-reduce work on ranges of these flat buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "claw/core/arena.h"
#include "claw/core/dtype.h"
#include "claw/core/parallel.h"
#include "claw/core/tensor.h"
#include "claw/kernels/cuda/context.h"

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
};

enum class Init { normal, zeros, ones };

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
  Tensor value;  // bound by ParamStore
  Tensor grad;
  float* data() const { return value.data<float>(); }
  float* gdata() const { return grad.data<float>(); }
};

// A contiguous run of one parameter's elements held by this rank, with its
// gradient: the unit of optimizer work (a whole parameter on one rank, the
// piece of it inside the rank's shard under ZeRO).
struct Segment {
  const Param* param;  // for weight decay and messages
  float* value;
  const float* grad;
  int64_t n;
  int64_t begin = 0;  // offset of value[0] among the parameter's local elements (checkpoints)
};

// How a ParamStore holds its flat buffers. The flat layout (offsets) is the
// same everywhere; its length is padded to a multiple of 16 x shards so that
// each of the `shards` ranks of a data-parallel group owns the equal range
// [shard * S, (shard + 1) * S) (ZeRO's partition; padding instead of
// refusing odd sizes). With shard_values / shard_grads a rank allocates only
// its range of that buffer; the parameters' tensors are then unbound until
// the data-parallel engine binds them to gathered or staging memory.
struct StoreOptions {
  int shards = 1;
  int shard = 0;
  bool shard_values = false;  // ZeRO-3
  bool shard_grads = false;   // ZeRO-2 and 3
  // false: lay out only (offsets, shard range, byte counts) and allocate
  // nothing, leaving every tensor unbound: the planner's shape-only model.
  bool allocate = true;
  // Non-null: values and gradients live in this GPU's memory (--device
  // cuda), and so do the model's activations; null: host memory.
  const kernels::cuda::Device* device = nullptr;
};

// The flat layout of a store (pure): what ParamStore allocates and the
// planner counts.
struct StoreLayout {
  std::vector<size_t> offsets;  // bytes, per parameter in order
  int64_t total = 0;            // floats, padded to 16 x shards
  int64_t shard_lo = 0, shard_hi = 0;
  size_t value_bytes = 0, grad_bytes = 0;  // what this rank holds of each buffer
};

class ParamStore {
 public:
  // Plans offsets for `params` (in the given order) and allocates the value
  // and gradient buffers; binds each Param's tensors to the full buffers.
  explicit ParamStore(std::vector<Param*> params, StoreOptions opts = {});

  // The layout as a pure function of the specs (for the memory plan).
  static ArenaPlan plan(const std::vector<const ParamSpec*>& specs, const std::string& name);
  static StoreLayout layout(const std::vector<const ParamSpec*>& specs, const StoreOptions& opts);

  const std::vector<Param*>& params() const { return params_; }
  const StoreOptions& options() const { return opts_; }
  // Offsets into the flat buffers, parallel to params(), in bytes.
  const std::vector<size_t>& offsets() const { return offsets_; }
  // Flat length in floats (padded to the shard count) and this rank's range of it.
  int64_t total() const { return total_; }
  int64_t shard_lo() const { return shard_lo_; }
  int64_t shard_hi() const { return shard_hi_; }
  // Full buffers (null when sharded).
  float* values() const { return opts_.shard_values ? nullptr : values_.ptr<float>(0); }
  float* grads() const { return opts_.shard_grads ? nullptr : grads_.ptr<float>(0); }
  // This rank's range [shard_lo, shard_hi) of each buffer (in the full buffer when not sharded).
  float* value_shard() const;
  float* grad_shard() const;
  size_t bytes() const { return static_cast<size_t>(total_) * sizeof(float); }  // one full buffer
  size_t value_bytes() const { return value_bytes_; }  // held by this rank (allocated unless planning)
  size_t grad_bytes() const { return grad_bytes_; }
  int64_t numel() const;  // parameters, excluding alignment padding

  // Zeroes the gradient buffer this rank holds (full or shard).
  void zero_grads();
  // The memory the buffers live in (host, or the GPU of options().device).
  const MemoryResource& memory() const;
  bool on_device() const { return opts_.device != nullptr; }
  // Copies of the values this rank holds (value_bytes()) to and from host memory.
  void values_to_host(float* out) const;
  void values_from_host(const float* in);
  // Philox init keyed by (seed, hash(name)) at the global element index, so
  // every layout initialises a parameter identically; writes the values this
  // rank holds (all, or its shard).
  void init(const CpuCtx& ctx, uint64_t seed);
  Param* find(const std::string& name) const;
  // One segment per parameter (full buffers only).
  std::vector<Segment> full_segments() const;

 private:
  std::vector<Param*> params_;
  std::vector<size_t> offsets_;
  StoreOptions opts_;
  int64_t total_ = 0, shard_lo_ = 0, shard_hi_ = 0;
  size_t value_bytes_ = 0, grad_bytes_ = 0;
  Arena values_, grads_;
};

}  // namespace claw::model
