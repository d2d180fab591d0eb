// Context parallelism: a sequence split over the CP group
// (--context-parallel-size), attention across it by one of two methods
// (--cp-comm-type, Megatron-Core's names).
//
// Layout. A row of T tokens is cut into 2 CP chunks of Tc = T / (2 CP)
// tokens; CP rank r holds chunks r and 2 CP - 1 - r, in that order, as its
// 2 Tc local tokens. Causal attention costs a chunk in proportion to its
// index, so every rank gets the same work (chunk r's and its mirror's add up
// to 2 CP - 1). Everything but attention is per token and runs on the local
// tokens unchanged; positions (RoPE, learned position embeddings) are the
// tokens' places in the full row.
//
// p2p, ring attention (RingAttention). Each rank's keys and values
// [B, 2 Tc, G, D] travel around the group, CP - 1 hops, while the block in
// hand is computed against the local queries of both chunks
// (kernels::attention_offset_forward with the chunks' positions; a key chunk
// wholly after a query chunk is skipped: the causal half). Partial results
// merge by their log-sum-exp,
//   lse = log(e^lse1 + e^lse2),  O = e^(lse1 - lse) O1 + e^(lse2 - lse) O2,
// the online softmax over blocks. The next block's transfer is in flight
// while the current one is computed.
// Backward: the same ring; behind each block travel its dK and dV, to which
// every rank adds its queries' share (P recomputed from the merged lse), and
// after CP hops they are back at the block's owner. Both transfers are in
// flight while a block is computed.
//
// a2a, heads for sequence (AllToAllAttention, DeepSpeed-Ulysses): one
// all-to-all gives every rank the whole row for H / CP of its query heads
// and the KV groups those heads read (G / CP of them when CP divides G; the
// one group they share when G divides CP, so that group goes to CP / G
// ranks); the plain flash kernel runs on the full rows; a second all-to-all
// returns each rank its tokens for all heads. Backward gathers q, k, v, out
// and dout the same way (nothing full-length is kept between the passes),
// runs the flash backward and returns dq, dk, dv; a KV group held by several
// ranks gets the sum of their dk, dv. Needs CP to divide the local heads.
//
// Packed documents: q_lo [B, 2 Tc] gives each local query the position of
// its document's first token (the full row's seg_start at the token's
// position), so documents that cross chunk and rank boundaries attend
// exactly within themselves.
//
// Shapes as kernels/cpu/attention.h with T = 2 Tc local tokens: q, out, dq,
// dout [B, 2 Tc, H, D]; k, v, dk, dv [B, 2 Tc, G, D]; lse: B H 2 Tc floats
// that backward reads (p2p: [B, H, 2 Tc] by local token; a2a: [B, H / CP, T]
// by full-row position, the flash kernel's own). With CP = 1 either is causal
// attention of one rank (one chunk pair, no transfers).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string_view>
#include <vector>

#include "claw/comm/group.h"
#include "claw/core/parallel.h"
#include "claw/kernels/cpu/score_scale.h"

namespace claw::model {

enum class CpCommType { p2p, a2a };
// "p2p" or "a2a"; throws claw::Error naming --cp-comm-type otherwise.
CpCommType parse_cp_comm_type(std::string_view s);
const char* to_string(CpCommType t);

struct CpChunks {
  int rank = 0, size = 1;  // in the CP group
  int64_t chunk = 0;       // Tc: tokens of a chunk

  // CP rank `r`'s chunks of a row of T tokens. Throws claw::Error naming
  // --seq-length and --context-parallel-size unless 2 CP divides T.
  static CpChunks of(int64_t T, int rank, int size);
  // The global chunk index of local chunk i (0 or 1) of rank r.
  int64_t index(int i, int r) const { return i == 0 ? r : 2 * int64_t{size} - 1 - r; }
  int64_t index(int i) const { return index(i, rank); }
  // Position in the full row of rank r's local token t (0 <= t < 2 Tc).
  int64_t position(int64_t t, int r) const { return index(t < chunk ? 0 : 1, r) * chunk + t % chunk; }
  int64_t position(int64_t t) const { return position(t, rank); }
  int64_t local_tokens() const { return 2 * chunk; }
};

// This rank's 2 Tc tokens of each of B rows of T ([B, T, width] -> [B, 2 Tc,
// width]), and back: what the data path and the tests use.
template <typename T>
std::vector<T> cp_slice(const CpChunks& c, const T* full, int64_t B, int64_t width);

// Attention over the CP group's split rows; one per model (its buffers are
// shared by the layers, which run one at a time).
class CpAttention {
 public:
  virtual ~CpAttention() = default;
  virtual void forward(const CpuCtx& ctx, float* out, float* lse, const float* q, const float* k, const float* v,
                       const int32_t* q_lo) = 0;
  // dq, dk, dv are overwritten.
  virtual void backward(const CpuCtx& ctx, float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* out, const float* lse, const int32_t* q_lo) = 0;
};

// Throws claw::Error naming the flags unless `type` can split H query heads
// and G KV groups (this rank's, after TP) over `cp` ranks.
void validate_cp_heads(CpCommType type, int cp, int64_t H, int64_t G);
// group: the CP group (null or size 1: no transfers). T_local = 2 Tc.
std::unique_ptr<CpAttention> make_cp_attention(CpCommType type, comm::Group* group, int64_t B, int64_t T_local,
                                               int64_t H, int64_t G, int64_t D, kernels::ScoreScale scale);

class RingAttention final : public CpAttention {
 public:
  RingAttention(comm::Group* group, int64_t B, int64_t T_local, int64_t H, int64_t G, int64_t D,
                kernels::ScoreScale scale);

  void forward(const CpuCtx& ctx, float* out, float* lse, const float* q, const float* k, const float* v,
               const int32_t* q_lo) override;
  void backward(const CpuCtx& ctx, float* dq, float* dk, float* dv, const float* dout, const float* q,
                const float* k, const float* v, const float* out, const float* lse, const int32_t* q_lo) override;

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
  kernels::ScoreScale scale_;
  std::vector<comm::Work> hop_;
  // Double-buffered {k, v} blocks in transit; backward's {dk, dv} of the
  // block in hand: this rank's share (then the running sum), the sum from the
  // previous rank, and the sum on its way to the next; one chunk's partial
  // results.
  std::vector<float> block_[2];
  std::vector<float> grad_mine_, grad_in_, grad_out_;
  std::vector<float> part_out_, part_lse_, dq_part_, dk_part_, dv_part_, lse_chunk_;
};

class AllToAllAttention final : public CpAttention {
 public:
  AllToAllAttention(comm::Group* group, int64_t B, int64_t T_local, int64_t H, int64_t G, int64_t D,
                    kernels::ScoreScale scale);

  void forward(const CpuCtx& ctx, float* out, float* lse, const float* q, const float* k, const float* v,
               const int32_t* q_lo) override;
  void backward(const CpuCtx& ctx, float* dq, float* dk, float* dv, const float* dout, const float* q,
                const float* k, const float* v, const float* out, const float* lse, const int32_t* q_lo) override;

 private:
  // Heads for sequence, in one all-to-all: each part's local [B, 2 Tc,
  // width, D] sends rank r its `take` columns from first(r) (take: Hc heads,
  // or Gc KV groups for a kv part), which arrive as the full rows [B, T,
  // take, D].
  struct ToHeads {
    const float* local;
    int64_t width;  // local heads or groups
    bool kv;
    float* full;
  };
  void to_heads(std::initializer_list<ToHeads> parts);
  // The inverse: full rows back to each token's owner; a kv part adds what
  // several ranks send for one group.
  struct ToTokens {
    const float* full;
    int64_t width;
    bool kv;
    float* local;
  };
  void to_tokens(std::initializer_list<ToTokens> parts);
  void exchange(int64_t per_rank);
  // The full rows' seg_start from every rank's q_lo (null when q_lo is).
  const int32_t* full_seg_start(const int32_t* q_lo);
  int64_t first_group(int r) const;

  comm::Group* group_;
  CpChunks chunks_;
  int64_t B_, H_, G_, D_, Hc_, Gc_;
  kernels::ScoreScale scale_;
  std::vector<float> send_, recv_;
  std::vector<float> q_, k_, v_, out_, dout_, dq_, dk_, dv_;  // full rows, this rank's heads
  std::vector<int32_t> lo_all_, seg_;
};

}  // namespace claw::model
