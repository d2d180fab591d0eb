// A Mixture-of-Experts MLP (--num-experts): a router picks each token's top
// k of E expert FFNs (kernels/cpu/moe.h: scores, expert bias, capacity), the
// token runs those, and its output is their weighted sum, plus the shared
// expert's output when there is one (--moe-shared-expert-intermediate-size):
//   logits = x Wr^T;  y_t = sum_j prob_tj FFN_{e_tj}(x_t) [+ FFN_shared(x_t)]
// Experts are stored stacked, one parameter per matrix over all experts
// (fc [E, Fe, C], up [E, Fe, C] for SwiGLU, proj [E, C, Fe]), so the
// dispatched rows of every expert run as one grouped GEMM.
//
// Saved: the router logits [N, E] (routing is recomputed from them in
// backward: cheap, and nothing variable-sized is kept), the experts'
// pre-activations and outputs over the dispatched rows (at most N k rows;
// the arena is sized for that). The expert outputs are kept because the
// combine weights' gradient is <dy_t, out_tj>.
//
// Auxiliary losses. The load-balancing and z-losses of a micro-batch enter
// the objective with weight StepCtx::moe_aux_scale (1 / the global batch's
// micro-batches, so the objective is the mean over micro-batches, as
// Megatron-Core's); their gradients are added in backward and their values
// are reported (moe_stats), not added to the language-model loss.
//
// Expert bias (--moe-router-enable-expert-bias): a parameter that never
// trains (ParamSpec::buffer); after each optimizer step it moves toward the
// mean load (update_expert_bias, the loads summed over the data-parallel
// ranks), and it is saved with checkpoints.
//
// LoRA (--lora-rank, the targets naming gate/up/down or Mixtral's w1/w3/w2):
// each expert's matrix W_e gets its own adapter, stacked as the experts
// are (A [E, r, in], B [E, out, r]), so Y_e += s (X_e A_e^T) B_e^T runs as
// two more grouped GEMMs of rank r over the same dispatched rows; the
// shared expert's linear layers get Linear's. Generation folds them into
// the experts (merge_lora).
//
// Parallelism. The layer works on the tokens its rank holds: a sequence-
// parallel piece under TP (MoE with TP needs --sequence-parallel), a CP
// rank's chunks. Routing statistics (the auxiliary losses' f_i, N, and the
// loads) are summed over the ranks sharing a micro-batch's tokens
// (TensorParallel::moe_tokens), so the losses and their gradients are the
// one-rank ones. The router is replicated: under SP its gradient is summed
// over TP in backward, as a norm's. Expert parallelism (TensorParallel::ep):
// rank r holds experts [r El, (r + 1) El), El = E / EP; the dispatched rows
// go to their experts' ranks by an all-to-all (first the per-expert row
// counts, then the rows), run there as one grouped GEMM over the rows of
// every source, and come back by the inverse all-to-all; backward sends the
// output gradients the same way and the input gradients back. Experts are
// whole on each rank (expert tensor parallelism 1).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "claw/core/arena.h"
#include "claw/kernels/cpu/moe.h"
#include "claw/model/config.h"
#include "claw/model/hf_names.h"
#include "claw/model/mlp.h"
#include "claw/model/param.h"
#include "claw/model/scratch.h"
#include "claw/model/step.h"
#include "claw/model/tensor_parallel.h"

namespace claw::comm {
class Group;
}

namespace claw::model {

// Routing statistics since the last take(): for the metrics.
struct MoeStats {
  int64_t layers = 0;           // MoE layers these cover
  double aux_loss = 0;          // sum over layers and micro-batches of the load-balancing loss (unweighted)
  double z_loss = 0;            // same for the z-loss
  int64_t micro_batches = 0;    // per layer
  double max_load_over_mean = 0;  // the worst layer's max / mean tokens per expert over the step
};

class MoELayer {
 public:
  struct Saved {
    // R: this rank's tokens; Rin: rows its experts may receive (R k x EP).
    float* logits = nullptr;  // [R, E]
    float* h = nullptr;       // [Rin, Fe] fc (GELU) or gate (SwiGLU) output of the received rows
    float* u = nullptr;       // [Rin, Fe] up output (SwiGLU)
    float* o = nullptr;       // [R k, C] expert outputs of this rank's dispatched rows (back from their experts)
    float* x_in = nullptr;    // [Rin, C] the received rows, expert-major (EP > 1; else gathered again)
    MLP::Saved shared;        // the shared expert's (when there is one)
    void layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t N, TpDims tp);
  };
  MoELayer(int layer, const ModelConfig& cfg, const HfNames& hf, const TensorParallel& tp);

  // x [R, C] (R = tp.rows(N)); y: [N, C], the first R rows the output.
  void forward(const StepCtx& ctx, const float* x, float* y, Saved& s, Scratch& scratch) const;
  // dy [R, C] -> dx [N, C] (overwritten; the first R rows the gradient). Clobbers s.h / s.u.
  void backward(const StepCtx& ctx, Saved& s, const float* x, const float* dy, float* dx, Scratch& scratch);

  void collect(std::vector<Param*>& out);
  // The experts' h (and u) and outputs o rounded to 16-bit values where they
  // are made (ModelConfig::activation_dtype), so that they can be stored in 16 bits.
  void set_activation_dtype(DType t) { activation_dtype_ = t; }
  // After the optimizer step: the expert bias moves toward the mean of the
  // step's loads, summed over `group` (the ranks the parameters are
  // replicated over); a no-op without the bias.
  void update_expert_bias(comm::Group* group);
  // Adds this layer's statistics since the last call to `stats` and resets them.
  void take_stats(MoeStats& stats);
  // Folds the experts' (and the shared expert's) LoRA adapters into their
  // weights, once (remerge: again, after the weights were replaced).
  void merge_lora(const CpuCtx& cpu, bool remerge = false);

  Param router;       // [E, C]
  Param expert_bias;  // [E] (with --moe-router-enable-expert-bias)
  Param fc, up, proj;  // stacked experts: [E, Fe, C], [E, Fe, C] (SwiGLU), [E, C, Fe]; this rank's El of them
  // The experts' LoRA adapters, by matrix (fc, up, proj): A [E, r, in], B [E, out, r].
  struct Lora {
    Param a, b;
  };
  std::optional<Lora> lora[3];
  std::optional<MLP> shared;

 private:
  // The adapters LoraConfig::targets names (HF: gate/up/down_proj, Mixtral's w1/w3/w2).
  void enable_lora(const HfNames& hf);
  // Y += s (X A^T) B^T over the groups `off`, for matrix m (0 fc, 1 up, 2 proj).
  void lora_forward(const CpuCtx& cpu, int m, const int64_t* off, int64_t N, int64_t K, const float* X, float* Y) const;
  // Its gradients: dA, dB from dY and X; dX += s (dY B) A (dX may be null).
  void lora_backward(const CpuCtx& cpu, int m, const int64_t* off, int64_t N, int64_t K, const float* dY,
                     const float* X, float* dX);
  int64_t lora_rank_ = 0;
  double lora_scale_ = 0;
  bool lora_merged_ = false;
  DType activation_dtype_ = DType::f32;  // f32: not rounded
  void activate(const CpuCtx& cpu, const Saved& s, int64_t rows, float* a) const;
  // Routes this rank's R tokens into routing_.
  void route(const float* logits, int64_t R) const;
  // The auxiliary losses' counts over the micro-batch's tokens (summed over
  // the token group): routed [E] into `routed`; returns the tokens.
  int64_t token_counts(std::vector<int64_t>& routed) const;
  // Expert parallelism: the rows of the routing's dispatched pairs `out`
  // [M, C] (expert-major, so grouped by destination) go to their experts'
  // ranks; they arrive rank-major in `staging` and are reordered expert-major
  // into `in` (which may be `out`). Fills `d` (rows per (source, local
  // expert), the expert-major cut) and returns the rows received.
  struct Received {
    std::vector<int64_t> counts;   // [EP, El]
    std::vector<int64_t> offsets;  // [El + 1]
  };
  int64_t dispatch(const CpuCtx& cpu, float* out, float* staging, float* in, Received& d) const;
  // The way back: rows `in` (expert-major, as dispatch left them) return to
  // their tokens' ranks, into `out` in the routing's order; clobbers `staging`.
  void undispatch(const CpuCtx& cpu, const Received& d, float* in, float* staging, float* out) const;
  // The all-to-all of rows between `out` (this rank's dispatched pairs) and
  // `in` (received, rank-major); inverse: in -> out.
  void exchange_rows(const std::vector<int64_t>& counts, float* out, float* in, bool inverse) const;
  const ModelConfig& cfg_;
  TensorParallel tp_;
  int64_t C_, E_, k_, Fe_;
  int64_t El_;  // experts on this rank (E / EP)
  kernels::MoeScore score_;
  kernels::MoeDrop drop_;
  bool swiglu_;
  mutable kernels::MoeRouting routing_;
  // Statistics: per micro-batch losses and the step's loads.
  mutable double aux_sum_ = 0, z_sum_ = 0;
  mutable int64_t micro_batches_ = 0;
  mutable std::vector<int64_t> step_load_;  // since take_stats
  mutable std::vector<int64_t> bias_load_;  // since the last bias update
};

}  // namespace claw::model
