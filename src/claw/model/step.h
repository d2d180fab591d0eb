// What a layer needs to know about the micro-batch it is running.
#pragma once

#include <cstdint>
#include <string>

#include "claw/core/parallel.h"

namespace claw::model {

class DeferredWeightGrads;
class AttentionCache;
struct StepCtx;

// A loss over whole sequences built from their token losses (DPO: a pair's
// loss from each side's sum of log-probabilities). The output layer computes
// every token's cross-entropy loss_t of the micro-batch first (0 where the
// target is < 0), then calls this once per micro-batch on the last pipeline
// stage (on every TP rank alike); the weights it returns, d loss /
// d loss_t, replace the per-token weights in backward, which recomputes
// the logits chunk by chunk. The returned value is the micro-batch's loss
// (summed over its units; units(B) is the count it is a sum over).
class SequenceLoss {
 public:
  virtual ~SequenceLoss() = default;
  // losses, targets, weights: [ctx.B, ctx.T].
  virtual double apply(const StepCtx& ctx, const float* losses, const int32_t* targets, float* weights) = 0;
  // How many loss units B sequences hold (DPO: B / 2 pairs).
  virtual int64_t units(int64_t sequences) const = 0;
  // The forward runs the generation engine's batch-invariant kernels
  // (StepCtx::batch_invariant): an RL learner whose token losses must be
  // the sampled log-probabilities negated, to the bit.
  virtual bool batch_invariant() const { return false; }
};

struct StepCtx {
  CpuCtx cpu;
  int64_t B = 0;          // sequences in this micro-batch
  int64_t T = 0;          // tokens per sequence
  bool training = false;  // dropout active
  uint64_t seed = 0;      // run seed (dropout streams are keyed by it)
  // Global index of this micro-batch's first sample in the run's sample
  // sequence (monotonic over steps): dropout counters start from it, so masks
  // never repeat and do not depend on how samples are spread over ranks.
  uint64_t sample0 = 0;
  // Context parallelism: this rank holds T of each row's cp_size x T tokens
  // (model/context_parallel.h); positions and seg_start are then always
  // given, as places in the full row.
  int cp_size = 1, cp_rank = 0;
  // Packed sequences ([B, T] each; null: the plain layout). positions: each
  // token's position (restarting per document); seg_start: index in its row
  // of the first token of its document (attention stays inside documents).
  const int32_t* positions = nullptr;
  const int32_t* seg_start = nullptr;
  // Non-null: backward computes input gradients only and records each linear
  // layer's weight-gradient GEMM here, to run later (ZB-H1's split backward).
  DeferredWeightGrads* defer_weight_grads = nullptr;
  // Non-null: inference with a KV cache (GPT::forward_cached). The B x T new
  // tokens sit at the positions the cache gives; attention hands the cache
  // their keys and values and it attends (model/kv_cache.h).
  AttentionCache* kv_cache = nullptr;
  // Kernels whose result for a token does not depend on the other tokens of
  // the call (kernels/cpu/rowwise_linear.h, paged_attention.h): in inference,
  // a request's output is the same alone and in any batch; in an RL
  // learner's forward (SequenceLoss::batch_invariant), a token's
  // log-probability is the generator's. Backward passes keep their kernels.
  bool batch_invariant = false;
  // The weight of this micro-batch's MoE auxiliary losses in the objective
  // (1 / the global batch's micro-batches; 0: their gradients are skipped).
  double moe_aux_scale = 0;
  // [B, T] weight of each token's loss (null: 1 for every target >= 0):
  // prompt masking, per-token advantages. The loss is sum_t w_t loss_t.
  const float* loss_weight = nullptr;
  // Non-null: the loss is this function of whole sequences (above).
  SequenceLoss* sequence_loss = nullptr;
  int64_t tokens() const { return B * T; }
  // Whether this step runs the fixed-order row kernels (batch_invariant on
  // the CPU; the GPU keeps its own).
  bool row_kernels() const { return batch_invariant && !cpu.gpu; }
  // The run's index of this micro-batch's first local token, where dropout
  // counters start: a micro-batch covers sample0's rows, B cp_size T tokens,
  // of which the CP ranks take consecutive B T in rank order.
  uint64_t first_token() const {
    return (sample0 * static_cast<uint64_t>(cp_size) + static_cast<uint64_t>(cp_rank * B)) * static_cast<uint64_t>(T);
  }
};

// A named view of saved activations, for diagnostics (the non-finite report).
struct NamedSpan {
  std::string name;
  const float* data;
  int64_t numel;
};

}  // namespace claw::model
