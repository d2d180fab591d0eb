// Data parallelism with ZeRO stages 0-3, run per region of the parameter
// store (model/param.h): the trainable parameters of each reduction group
// ("dp": the dense parameters' replicas, dp x cp ranks under context
// parallelism; "expert_dp": MoE experts under expert parallelism, the ranks
// holding the same experts), and the frozen parameters, which have no
// gradients and no optimizer state and matter here only to ZeRO-3's
// gathers. Each region is its own flat layout padded to a multiple of
// 16 x its group's size; rank r of the group owns [r S, (r + 1) S),
// S = total / size, of it.
//
//   stage 0  full values, gradients and AdamW state. Gradients are summed
//            over the group by all-reduce in buckets (--ddp-bucket-size):
//            runs of whole units, filled from the output end because
//            backward produces gradients from there; with
//            --overlap-grad-reduce a bucket's all-reduce starts as soon as
//            its last unit's gradients are final on the last micro-batch,
//            while backward goes on; otherwise all start after backward.
//   stage 1  (--use-distributed-optimizer) the same gradient all-reduce;
//            AdamW state only for the owned range; after the update the
//            values are all-gathered in place.
//   stage 2  gradients too are held only for the owned range: a unit's
//            gradients are written into a staging slot and reduce-scattered
//            into the owned range as soon as the unit's backward ends (every
//            micro-batch: this is what lets the full gradient buffer go),
//            accumulating there across micro-batches; in pieces of at most
//            --ddp-bucket-size elements, since MPI's reduce-scatter
//            allocates a temporary as large as its input.
//   stage 3  values too: before a unit is used its values are all-gathered
//            into a slot and freed after use; with --overlap-param-gather
//            the next unit's gather is issued before the current unit runs.
//
// Instances (--num-distributed-optimizer-instances N, data centres): the
// dense region is sharded over the ranks of this rank's instance only
// (Instances::intra), so each instance holds a whole ZeRO-sharded optimizer,
// and a gradient reduction becomes reduce-scatter inside the instance, then
// all-reduce of this rank's block across the instances (Instances::inter),
// issued together as a chain that the groups' threads run while backward
// goes on: only 1/intra of the gradients crosses the long haul, cut into
// chunks of --inter-dc-chunk-bytes spread over several communicators so
// that they are in flight together. Stages 1-3 (stage 0 has no shards).
//
// DiLoCo (--diloco-inner-steps H, with instances): no gradient crosses the
// instances. Inside one, the reduce-scatter's owned block is scaled by N (the
// loss is normalised by the global batch's tokens, of which an instance sees
// 1/N), so each instance trains on its own mean gradient. Every H steps,
// after the inner optimizer's step and before the owned values are gathered,
// the outer step runs on the owned shard: delta = anchor - values (the
// anchor: the values at the round's start), all-reduced and averaged over
// the instances; m = mu m + delta; anchor -= lr (delta + mu m) (Nesterov);
// values = anchor. Only the owned shards cross the long haul, once per H
// steps. With --diloco-delta-bits 8 or 4 each instance packs its delta
// (pack_delta) and the instances all-gather the packed blocks; every rank
// decodes and sums them in instance order, so all reach the same values
// (N = 2: a quarter or an eighth of the all-reduce's bytes). With
// --diloco-fragments P the shard is cut into P fragments whose outer steps
// are spread over the round (streaming DiLoCo): between them the replicas
// differ in the fragments not yet synchronised, so a checkpoint first runs
// the outer step of those (synchronize_replicas).
//
// fp16 master weights (--main-params-dtype fp16) use the same slots at any
// stage: the store holds the values in fp16 (the owned range at stage 3),
// and before a unit is used its values are widened into an fp32 slot (and at
// stage 3 all-gathered there), freed after use; stage 1/2's in-place gather
// after the update moves fp16.
//
// A unit's staging slot holds its ranges of the trainable regions one after
// another, its gather slot its ranges of every region. Staging and gather
// slots come from two planned arenas whose sizes are found by running the
// model's fixed use and gradient orders through the same first-fit
// allocator the run uses (plan()), so nothing is allocated during a step.
// The loss and gradients are sums over every token of the global batch
// scaled by 1 / (targets in the global batch), so the summed gradient is the
// single-rank gradient: only the order of additions differs.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "claw/comm/group.h"
#include "claw/core/arena.h"
#include "claw/model/gpt.h"

namespace claw::parallel {

struct DataParallelConfig {
  int zero_stage = 0;               // --zero-stage (0-3); --use-distributed-optimizer means 1
  int64_t bucket_size = 0;          // --ddp-bucket-size, elements (0: Megatron's max(40M, 1M x DP))
  bool overlap_grad_reduce = false;   // --overlap-grad-reduce
  bool overlap_param_gather = false;  // --overlap-param-gather
  int max_inflight_reductions = 2;    // stage 2/3: staged units whose reduce-scatter may be pending
  // Optimizer state per element of the rank's segments (AdamW::bytes_per_element:
  // two fp32 moments, less with 16-bit ones); plan_memory's optimizer bytes.
  size_t optimizer_bytes_per_element = 8;
  // FP8 moments (AdamW::fp8_moments): each adds a 4-byte scale per
  // optimizer_fp8_block (AdamW::kFp8Block) elements of the state.
  int optimizer_fp8_moments = 0;
  int64_t optimizer_fp8_block = 128;
  // --num-distributed-optimizer-instances: > 1 reduces hierarchically (the
  // memory plan counts stage 1's buffer of reduced owned blocks).
  int instances = 1;
  // DiLoCo across the instances (--diloco-inner-steps H > 0): gradients
  // reduce inside an instance only, each instance takes H steps of its own,
  // then the outer step averages the instances' parameter deltas and applies
  // them with SGD and Nesterov momentum (--diloco-outer-lr,
  // --diloco-outer-momentum).
  int64_t diloco_inner_steps = 0;
  double diloco_outer_lr = 0.7;
  double diloco_outer_momentum = 0.9;
  // --diloco-delta-bits: 32 sends the deltas as fp32 (all-reduce); 8 or 4
  // packs them (pack_delta) and all-gathers the packed blocks.
  int diloco_delta_bits = 32;
  // --diloco-fragments P (streaming DiLoCo): the owned shard in P fragments,
  // fragment f's outer step after inner step (f + 1) H / P of each round, so
  // the long haul carries 1/P of the shard at a time.
  int diloco_fragments = 1;
  void validate(int dp) const;
};

// DiLoCo's compressed parameter deltas (--diloco-delta-bits 8 or 4): blocks
// of kDeltaBlock values, each with an fp32 scale (the block's largest
// magnitude / 127 or / 7) and signed codes rounded to the nearest (ties to
// even); 4-bit codes two to a byte, low nibble first. Layout: the scales of
// every block, then the codes.
constexpr int64_t kDeltaBlock = 128;
int64_t packed_delta_bytes(int64_t n, int bits);
void pack_delta(const float* x, int64_t n, int bits, uint8_t* out);
// acc[i] += the decoded value i of a packed run of n values.
void add_packed_delta(const uint8_t* in, int64_t n, int bits, float* acc);

// The store options a stage needs.
model::StoreOptions store_options(int zero_stage, int dp_size, int dp_rank);

// Bytes per rank, from the same functions the run allocates with.
struct DataParallelMemory {
  size_t values = 0, grads = 0, optimizer = 0;
  size_t gather_slots = 0;   // stage 3: gathered units in flight
  size_t staging_slots = 0;  // stage 2/3: gradient staging
  // Elements of the largest gradient collective (MPI may allocate temporaries
  // in proportion): the largest all-reduce bucket (stages 0/1) and the largest
  // reduce-scatter piece (2/3).
  int64_t largest_all_reduce = 0, largest_reduce_scatter = 0;
  size_t total() const { return values + grads + optimizer + gather_slots + staging_slots; }
};

// A first-fit allocator over [0, capacity) floats with 16-float alignment;
// capacity 0 means unbounded (planning: the high-water mark is the capacity).
class SlotAllocator {
 public:
  explicit SlotAllocator(int64_t capacity = 0) : capacity_(capacity) {}
  int64_t allocate(int64_t n);  // offset, or -1 if it does not fit
  void release(int64_t offset);
  int64_t high_water() const { return high_; }

 private:
  struct Block {
    int64_t off, n;
  };
  std::vector<Block> live_;  // sorted by offset
  int64_t capacity_, high_ = 0;
};

// The hierarchy of --num-distributed-optimizer-instances (ParallelState::
// dp_intra, dp_inter).
struct Instances {
  comm::Group* intra = nullptr;      // this rank's instance: the dense region's shards
  std::vector<comm::Group*> inter;   // across instances, one per stream
  int64_t chunk_elements = 0;        // --inter-dc-chunk-bytes / 4; 0: one all-reduce per block
};

class DataParallel final : public model::UnitHooks {
 public:
  // dp: the dense parameters' group (every replica); expert_dp: the experts'
  // (needed when the store has an "expert_dp" region); instances: the
  // hierarchy, when dp spans several (the store is then sharded over
  // instances->intra).
  DataParallel(model::GPT& model, comm::Group& dp, DataParallelConfig cfg, comm::Group* expert_dp = nullptr,
               const Instances* instances = nullptr);
  ~DataParallel() override;

  // Static memory of a model under a stage (values, grads, AdamW state, slots).
  DataParallelMemory memory() const { return memory_; }
  // The same, as a pure function of the model's store and units and the
  // engine's config: the constructor sizes its buffers with it and the planner
  // calls it on shape-only models (GPT with StoreOptions::allocate false).
  static DataParallelMemory plan_memory(const model::GPT& model, const DataParallelConfig& cfg);
  // This rank's AdamW segments: the trainable parameters (whole at stage 0,
  // the owned ranges above), region by region.
  std::vector<model::Segment> segments() const;
  bool sharded_optimizer() const { return cfg_.zero_stage >= 1; }

  // Step protocol (train_step): begin_step, then per micro-batch
  // begin_micro_batch + forward + backward, then finish_grad_sync, the
  // optimizer, and after_optimizer_step.
  void begin_step();
  void begin_micro_batch(bool last);
  void finish_grad_sync();
  void after_optimizer_step();
  // Sum over the group of a local value (loss sums, counts).
  double all_reduce_sum(double v);
  // Sum over the dense region's shards (one instance): a sum of squares of
  // this rank's owned gradients becomes the whole replica's.
  double shard_sum(double v);
  // The ranks the parameters are replicated over (dp, or dp x cp).
  comm::Group& group() const { return dp_; }
  // The experts' group under expert parallelism (null: none given).
  comm::Group* expert_group() const { return expert_dp_; }
  // Gathers the whole flat value layout into `out` (the store's total()
  // floats) on every rank (tests, export).
  void gather_values(float* out);

  // Exposed communication: seconds the main thread waited for gradient
  // reductions / parameter gathers in the last step.
  double last_grad_wait_s() const { return grad_wait_s_; }
  double last_gather_wait_s() const { return gather_wait_s_; }
  // DiLoCo: whether the last after_optimizer_step left every replica equal
  // (the outer step of the last fragment, or of the whole shard).
  bool last_step_synced() const { return synced_; }
  // DiLoCo with fragments: the outer step now for every fragment that did
  // not take it on the last step, so that every replica holds the same
  // values (before a checkpoint is written from instance 0's).
  void synchronize_replicas();
  // DiLoCo's outer momentum of parameter `spec`'s local elements from
  // `begin` (inside this rank's owned range), or null when it has none (not
  // DiLoCo, or not in the dense region). Checkpoints save and load it.
  float* outer_momentum(const model::ParamSpec& spec, int64_t begin);

  // UnitHooks
  void begin_pass(bool training) override;
  void before_use(int unit) override;
  void after_use(int unit) override;
  void grads_begin(int unit) override;
  void grads_end(int unit) override;

 private:
  // One store region's synchronisation: the group it is reduced over, and
  // (trainable, stages 0/1) its buckets.
  struct RegionSync {
    comm::Group* group = nullptr;
    bool hierarchical = false;  // reduce-scatter over group, then all-reduce over instances_.inter
    bool trainable = true;
    std::vector<std::pair<int64_t, int64_t>> buckets;  // region ranges
    std::vector<int> bucket_of_unit;                   // -1: the unit has nothing here
    std::vector<int> pending_units;                    // per bucket, units still to finish
    std::vector<comm::Work> bucket_work;
    // Hierarchical stage 1: each bucket's owned block, reduced, lands in
    // `owned` (the shard's size) at its place in the shard; the chain's last
    // operations per bucket.
    std::vector<float> owned;
    std::vector<std::vector<comm::Work>> chain_work;
  };
  // A piece of a unit's range of one region, reduce-scattered on its own.
  struct Piece {
    int region;
    int64_t lo, hi;  // region range
    int64_t at;      // where it starts in the staging slot
  };
  // One unit's staged gradients, reduce-scattered in pieces of at most
  // --ddp-bucket-size elements (which also bounds MPI's temporary buffers).
  struct Staged {
    int unit;
    int64_t slot;
    std::vector<Piece> pieces;
    std::vector<comm::Work> work;
    std::vector<std::vector<comm::Work>> chain;  // per piece: its all-reduce across instances
  };
  struct Gathered {
    int64_t slot = -1;
    std::vector<comm::Work> work;
  };
  // Where unit u's range of region r starts in its gather slot (values: every
  // region) or staging slot (gradients: trainable regions), and the slot's size.
  static int64_t slot_offset(const model::ParamStore& store, const model::Unit& u, int r, bool grads);
  static int64_t slot_size(const model::ParamStore& store, const model::Unit& u, bool grads);
  // Per rank of region r's group: the owned part of the region range [lo, hi).
  std::vector<int64_t> counts_of(int r, int64_t lo, int64_t hi) const;
  // Points the unit's parameters' values (or gradients) into its slot at
  // `base`; null unbinds them. Frozen parameters' gradients stay unbound.
  void bind(int unit, float* base, bool grads);
  void issue_gather(int unit);
  void retire_oldest();
  // What a region's reduced owned block is multiplied by (N under DiLoCo, else 1).
  float owned_scale(const RegionSync& g) const;
  // DiLoCo's outer step on fragments [f0, f1) of the owned shards.
  void outer_step(int f0, int f1);
  // Stages 1/2: every rank's updated shards of the trainable regions, in place.
  void gather_trainable_values();
  // Stage 1 bucket b of region r: all-reduce, or under instances the chain.
  void issue_bucket(int r, size_t b);
  // The all-reduce across instances of `n` floats at `buf`, after `first`:
  // in chunks round-robin over the streams; appends their Work to `out`.
  void issue_inter(float* buf, int64_t n, const comm::Work& first, std::vector<comm::Work>& out);
  // The all-gather across instances of `bytes` at `send` into `recv` (N x
  // bytes), in chunks over the streams: chunk k of every instance lands at
  // recv + N k C, rank-major (unchunk_gathered puts instance i's back in order).
  void issue_inter_gather(const uint8_t* send, uint8_t* recv, int64_t bytes, std::vector<comm::Work>& out);
  void unchunk_gathered(const uint8_t* recv, int64_t bytes, int instance, uint8_t* out) const;

  model::GPT& model_;
  model::ParamStore& store_;
  comm::Group& dp_;
  comm::Group* expert_dp_;
  Instances instances_;  // intra null: flat
  size_t next_stream_ = 0;
  // DiLoCo, per region (hierarchical ones; empty elsewhere): the anchor (the
  // values at each fragment's last outer step), the outer momentum and the
  // deltas, each the owned shard's size; with packed deltas, this rank's
  // packed fragment and the instances' gathered ones.
  struct Outer {
    std::vector<float> anchor, momentum, delta;
    std::vector<uint8_t> packed, gathered;
  };
  std::vector<Outer> outer_;
  int64_t inner_step_ = 0;  // steps into the current round
  // Training steps begun (begin_step), and whether this one leaves its first
  // gradient bucket unreduced (the mutation skip-grad-reduce:STEP, tests only).
  int64_t steps_ = 0;
  bool skip_reduce_ = false;
  // Whether the mutation takes the reduction of region r's bucket or piece now (once a step).
  bool take_skip(int r);
  bool anchored_ = false;   // the anchors hold the values (the first step sets them)
  DataParallelConfig cfg_;
  const std::vector<model::Unit>& units_;
  std::vector<std::vector<size_t>> unit_params_;  // per unit: its parameters' indices in the store

  std::vector<RegionSync> regions_;  // parallel to the store's regions
  bool last_micro_ = true;
  bool training_ = true;

  DataParallelMemory memory_;
  // Stage 2/3 gradient staging.
  int64_t staging_capacity_ = 0;
  Arena staging_;
  SlotAllocator staging_alloc_;
  std::vector<int64_t> open_slot_;  // per unit: staging slot while its grads are open, else -1
  std::deque<Staged> inflight_;

  // Stage 3 gathered values.
  int64_t gather_capacity_ = 0;
  Arena gathered_;
  SlotAllocator gather_alloc_;
  std::vector<Gathered> resident_;
  std::vector<int> use_order_;
  size_t use_cursor_ = 0;

  double grad_wait_s_ = 0, gather_wait_s_ = 0;
  bool synced_ = true;  // every replica holds the same values (at the start, and after a step that made them so)
};

}  // namespace claw::parallel
