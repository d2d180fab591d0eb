// Mixture-of-Experts routing and token permutation (the router of
// Megatron-Core's MoE layer; Shazeer et al. 2017, Fedus et al. 2021).
//
// Router. logits [N, E] = x Wr^T for N tokens and E experts. Each token
// picks k experts:
//   softmax  the k largest logits (+ bias); its combine weights are the
//            softmax over those k logits (Mixtral: softmax over all E, top
//            k, renormalised, which is the same)
//   sigmoid  s = sigmoid(logits); the k largest s (+ bias); weights s / the
//            sum of the k chosen s (k > 1), s itself for k = 1 (DeepSeek-V3)
// The bias (--moe-router-enable-expert-bias; DeepSeek-V3's aux-loss-free
// balancing) changes only which experts are chosen, never a weight.
//
// Group-limited top-k (DeepSeek-V3; MoeTopK below): the E experts form G
// equal groups; a token ranks the groups by the sum of the two largest
// selection keys in each (the logits or s, + bias, as the top k ranks them),
// keeps the best g groups and picks its k experts among theirs only. The
// weights are then multiplied by the scaling factor (DeepSeek-V3: 2.5).
//
// Capacity (--moe-expert-capacity-factor f > 0): an expert takes at most
// ceil(N k / E x f) tokens; over that, the policy keeps those with the
// largest weights (probs) or the first in token order (position). A dropped
// choice contributes nothing (its weight is 0, the others keep theirs).
//
// Auxiliary losses (their gradients are added in backward, scaled by the
// caller; kernels take the per-expert and per-token factors so that token
// counts reduced over ranks can go in):
//   load balancing  coeff E sum_i f_i P_i, f_i = routed_i / (N k) with
//                   routed_i the top-k choices of the aux scores (no bias,
//                   no capacity), P_i = mean_t score_ti, score = softmax of
//                   the logits over all E (sigmoid: s / sum_E s). Only P
//                   carries a gradient.
//   z-loss          coeff mean_t logsumexp(logits_t)^2 (Zoph et al. 2022).
//
// Dispatch. The kept (token, choice) pairs are ordered by expert, then
// token: `order` lists them and `offsets` [E + 1] cuts it per expert, so
// each expert's rows are contiguous and its FFN is one GEMM over them
// (grouped_gemm below runs the E products as one call).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "claw/core/parallel.h"

namespace claw::kernels {

enum class MoeScore { softmax, sigmoid };
enum class MoeDrop { probs, position };
// "softmax" / "sigmoid", "probs" / "position"; throw claw::Error naming the flag.
MoeScore parse_moe_score(std::string_view s);
MoeDrop parse_moe_drop(std::string_view s);

// DeepSeek-V3's top-k: Megatron's --moe-router-num-groups,
// --moe-router-group-topk and --moe-router-topk-scaling-factor (Hugging
// Face's n_group, topk_group, routed_scaling_factor). The default is plain top-k.
struct MoeTopK {
  int64_t num_groups = 0;       // G > 1: experts in G groups of E / G (at least 2 each); 0 or 1: no groups
  int64_t group_topk = 0;       // g in [1, G]: the groups a token chooses from (k <= g E / G)
  double scaling_factor = 1.0;  // the combine weights times this
  bool grouped() const { return num_groups > 1; }
};

struct MoeRouting {
  int64_t N = 0, E = 0, k = 0;
  double scaling = 1.0;         // MoeTopK::scaling_factor (the backward's too)
  std::vector<int32_t> expert;  // [N, k] chosen experts, best first
  std::vector<float> prob;      // [N, k] combine weights (0 where dropped)
  std::vector<uint8_t> kept;    // [N, k] 1 unless dropped by capacity
  std::vector<float> score;     // [N, E] aux scores (softmax over E, or s / sum_E s)
  std::vector<float> lse;       // [N] logsumexp of each token's logits
  std::vector<int64_t> routed;  // [E] top-k choices of the aux scores, before capacity (f_i N k)
  std::vector<int64_t> load;    // [E] kept choices (tokens each expert runs)
  // Dispatch: kept pairs by expert then token, as indices t * k + j.
  std::vector<int32_t> order;
  std::vector<int64_t> offsets;  // [E + 1]
  std::vector<int64_t> row;      // [N, k] each choice's dispatched row (-1: dropped); order's inverse
};

// bias: [E] or null. capacity_factor <= 0: dropless. Throws claw::Error for
// groups that do not divide E or cannot hold k choices.
void moe_route(const float* logits, const float* bias, int64_t N, int64_t E, int64_t k, MoeScore score,
               double capacity_factor, MoeDrop drop, MoeRouting& r, const MoeTopK& topk = {});

// dlogits [N, E] (overwritten) from d loss / d prob [N, k] (a dropped
// choice's entry is ignored), plus aux_dscore [E] (null: none), the
// gradient of the load-balancing loss with respect to each score_ti, the
// same for every token (coeff E routed_i / (N^2 k), times the loss scale),
// plus z_scale (0: none) x d(sum_t lse_t^2)/d logits (z_scale = coeff / N
// times the loss scale).
void moe_route_backward(const float* logits, const MoeRouting& r, MoeScore score, const float* dprob,
                        const double* aux_dscore, double z_scale, float* dlogits);

// d aux / d score_ti for every token (the same for all t): coeff E routed_i /
// (N^2 k), times `scale` (the loss's weight), into out [E] (moe_route_backward's aux_dscore).
void moe_aux_dscore(double coeff, const int64_t* routed, int64_t N, int64_t E, int64_t k, double scale, double* out);
// A routing's sums the auxiliary losses need: score_sum [E] = sum_t score_ti;
// returns sum_t lse_t^2.
double moe_route_sums(const MoeRouting& r, double* score_sum);

// The load-balancing loss coeff E sum_i f_i P_i from routing stats that may
// be sums over several ranks' tokens: routed [E], score_sum [E] (sum_t
// score_ti), N tokens in all.
double moe_aux_loss(double coeff, const int64_t* routed, const double* score_sum, int64_t N, int64_t E, int64_t k);

// Aux-loss-free balancing (DeepSeek-V3): after a step, each expert's bias
// moves by `rate` toward the mean load, bias_i += rate sign(mean - load_i),
// load [E] the tokens each expert ran over the step (all ranks').
void moe_update_expert_bias(float* bias, const int64_t* load, int64_t E, double rate);

// rows [M, C] = x[token of order[m]] for each dispatched pair m.
void moe_gather(const CpuCtx& ctx, const MoeRouting& r, const float* x, int64_t C, float* rows);
// y[t] (+)= sum over t's kept choices of prob x rows[m] (accumulate: add to y).
void moe_combine(const CpuCtx& ctx, const MoeRouting& r, const float* rows, int64_t C, float* y, bool accumulate);
// Backward of combine: drows[m] = prob x dy[t]; dprob[t, j] = <dy[t], rows[m]>
// (0 for dropped choices).
void moe_combine_backward(const CpuCtx& ctx, const MoeRouting& r, const float* dy, const float* rows, int64_t C,
                          float* drows, float* dprob);
// Backward of gather: dx[t] += drows[m] over t's kept choices.
void moe_scatter_add(const CpuCtx& ctx, const MoeRouting& r, const float* drows, int64_t C, float* dx);

// Expert parallelism: rows received from `ranks` source ranks arrive
// rank-major (source 0's rows for its local experts 0..El-1, then source
// 1's, ...); the grouped GEMM wants them expert-major (expert 0's rows from
// every source in source order, then expert 1's). counts [ranks, El] are the
// rows per (source, local expert). to_expert_major: rank-major in ->
// expert-major out; false: the inverse. Returns the rows; expert_offsets
// [El + 1] (non-null) gets the expert-major cut.
int64_t moe_permute_received(const CpuCtx& ctx, const int64_t* counts, int64_t ranks, int64_t El, int64_t C,
                             const float* in, float* out, bool to_expert_major, int64_t* expert_offsets = nullptr);

// Grouped GEMMs over the dispatched rows: group e is rows [offsets[e],
// offsets[e + 1]) and has its own matrix; empty groups are skipped.
// Y[rows e] = X[rows e] W_e^T + beta Y[rows e], X [M, K], Y [M, N], W
// [E, N, K] (each expert's weight as a Linear stores it).
void grouped_gemm(const CpuCtx& ctx, const int64_t* offsets, int64_t E, int64_t N, int64_t K, const float* X,
                  const float* W, float beta, float* Y);
// The same product in rowwise_linear.h's fixed order (beta 0): each row's
// outputs the same whatever the other rows of its expert, and one-row groups
// (decoding) read their expert's weights at memory bandwidth, where BLAS's
// GEMM of one row runs at a third of it. For the engine's batch-invariant steps.
void grouped_rowwise_linear(const CpuCtx& ctx, const int64_t* offsets, int64_t E, int64_t N, int64_t K, const float* X,
                            const float* W, float* Y);
// dX[rows e] = dY[rows e] W_e + beta dX[rows e] (the input gradient).
void grouped_gemm_dx(const CpuCtx& ctx, const int64_t* offsets, int64_t E, int64_t N, int64_t K, const float* dY,
                     const float* W, float beta, float* dX);
// dW_e = dY[rows e]^T X[rows e] + beta dW_e, dW [E, N, K] (the weight
// gradient; an expert without rows gets beta dW_e).
void grouped_gemm_dw(const CpuCtx& ctx, const int64_t* offsets, int64_t E, int64_t N, int64_t K, const float* dY,
                     const float* X, float beta, float* dW);

}  // namespace claw::kernels
