// Context parallelism: a sequence split over the CP group, attention as a
// ring (Megatron-Core's --cp-comm-type p2p).
//
// Layout. A row of T tokens is cut into 2 CP chunks of Tc = T / (2 CP)
// tokens; CP rank r holds chunks r and 2 CP - 1 - r, in that order, as its
// 2 Tc local tokens. Causal attention costs a chunk in proportion to its
// index, so every rank gets the same work (chunk r's and its mirror's add up
// to 2 CP - 1). Everything but attention is per token and runs on the local
// tokens unchanged.
//
// Ring attention. Each rank's keys and values [B, 2 Tc, G, D] travel around
// the group, CP - 1 hops, while the block in hand is computed against the
// local queries of both chunks (kernels::attention_offset_forward with the
// chunks' positions; a key chunk wholly after a query chunk is skipped: the
// causal half). Partial results merge by their log-sum-exp,
//   lse = log(e^lse1 + e^lse2),  O = e^(lse1 - lse) O1 + e^(lse2 - lse) O2,
// the online softmax over blocks. The next block's transfer is in flight
// while the current one is computed.
// Backward: the same ring; each block travels with its dK and dV, to which
// every rank adds its queries' share (P recomputed from the merged lse), and
// after CP hops they are back at the block's owner.
//
// Packed documents: q_lo [B, 2 Tc] gives each local query the position of
// its document's first token (the full row's seg_start at the token's
// position), so documents that cross chunk and rank boundaries attend
// exactly within themselves.
//
// Shapes as kernels/cpu/attention.h with T = 2 Tc local tokens: q, out, dq,
// dout [B, 2 Tc, H, D]; k, v, dk, dv [B, 2 Tc, G, D]; lse [B, H, 2 Tc].
// With CP = 1 it is causal attention of one rank (one chunk pair, no
// transfers).
#pragma once

#include <cstdint>
#include <vector>

#include "claw/comm/group.h"
#include "claw/core/parallel.h"

namespace claw::parallel {

struct CpChunks {
  int rank = 0, size = 1;  // in the CP group
  int64_t chunk = 0;       // Tc: tokens of a chunk

  // CP rank `r`'s chunks of a row of T tokens. Throws claw::Error naming
  // --seq-length and --context-parallel-size unless 2 CP divides T.
  static CpChunks of(int64_t T, int rank, int size);
  // The global chunk index of local chunk i (0 or 1) of rank r.
  int64_t index(int i, int r) const { return i == 0 ? r : 2 * int64_t{size} - 1 - r; }
  int64_t index(int i) const { return index(i, rank); }
  // Position in the full row of local token t (0 <= t < 2 Tc).
  int64_t position(int64_t t) const { return index(t < chunk ? 0 : 1) * chunk + t % chunk; }
  int64_t local_tokens() const { return 2 * chunk; }
};

// This rank's 2 Tc tokens of each of B rows of T ([B, T, width] -> [B, 2 Tc,
// width]), and back: what the data path and the tests use.
template <typename T>
std::vector<T> cp_slice(const CpChunks& c, const T* full, int64_t B, int64_t width);

class RingAttention {
 public:
  // group: the CP group (null or size 1: no ring).
  RingAttention(comm::Group* group, int64_t B, int64_t T_local, int64_t H, int64_t G, int64_t D, double scale);

  void forward(const CpuCtx& ctx, float* out, float* lse, const float* q, const float* k, const float* v,
               const int32_t* q_lo);
  // dq, dk, dv are overwritten.
  void backward(const CpuCtx& ctx, float* dq, float* dk, float* dv, const float* dout, const float* q,
                const float* k, const float* v, const float* out, const float* lse, const int32_t* q_lo);

 private:
  // Posts the exchange of `send` (to the next rank) into `recv` (from the
  // previous one), n floats; waited by finish().
  void start_hop(const float* send, float* recv, int64_t n);
  void finish_hop();
  // f(b, qi, ki, qc, kc) for every row b and local query chunk qi against
  // key chunk ki of rank src's block that it can see (global chunks qc >= kc).
  template <typename F>
  void each_pair(int src, F&& f) const;

  comm::Group* group_;
  CpChunks chunks_;
  int64_t B_, H_, G_, D_;
  double scale_;
  std::vector<comm::Work> hop_;
  // Double-buffered blocks in transit ({k, v} forward, {k, v, dk, dv}
  // backward) and one chunk's partial results.
  std::vector<float> block_[2];
  std::vector<float> part_out_, part_lse_, dq_part_, dk_part_, dv_part_, lse_chunk_;
};

}  // namespace claw::parallel
