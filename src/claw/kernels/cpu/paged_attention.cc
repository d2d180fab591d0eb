#include "claw/kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "claw/core/error.h"
#include "claw/kernels/cpu/fixed_order_dot.h"
#include "claw/kernels/cpu/vec_math.h"

namespace claw::kernels {
namespace {

constexpr int64_t kMaxHeadDim = 512, kTile = 16;

struct Item {
  int32_t seq;
  int32_t token;  // within the sequence's new tokens
};

}  // namespace

void paged_attention_forward(const CpuCtx& ctx, float* out, const float* q, const float* keys, const float* values,
                             int64_t block_size, const PagedSeq* seqs, int64_t num_seqs, int64_t H, int64_t G,
                             int64_t D, double scale) {
  CLAW_CHECK(block_size >= 1 && D <= kMaxHeadDim && H % G == 0,
             "paged attention: block size {}, head dim {} (<= {}), {} heads over {} KV heads", block_size, D,
             kMaxHeadDim, H, G);
  std::vector<Item> items;
  for (int64_t s = 0; s < num_seqs; ++s)
    for (int64_t t = 0; t < seqs[s].num_tokens; ++t) items.push_back({static_cast<int32_t>(s), static_cast<int32_t>(t)});
  const int64_t per_group = H / G, row = G * D;
  const float fscale = static_cast<float>(scale);
  // Longer contexts first would balance better; items are few and similar.
  parallel_for_dynamic(ctx, static_cast<int64_t>(items.size()) * H, [&](int64_t task) {
    const Item it = items[task / H];
    const int64_t h = task % H, g = h / per_group;
    const PagedSeq& s = seqs[it.seq];
    const int64_t r = s.first_row + it.token, pos = s.context + it.token;
    const float* qh = q + (r * H + h) * D;
    float* oh = out + (r * H + h) * D;
    float acc[kMaxHeadDim] = {};
    float scores[kTile];
    float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
    // Keys in tiles of kTile positions whatever the block size, so the
    // online softmax rescales at the same places for any paging.
    const float* kv[kTile];
    for (int64_t j0 = 0; j0 <= pos; j0 += kTile) {
      const int64_t n = std::min(kTile, pos + 1 - j0);
      float mb = m;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t p = j0 + j;
        kv[j] = keys + (static_cast<int64_t>(s.blocks[p / block_size]) * block_size + p % block_size) * row + g * D;
        scores[j] = fscale * fixed_order::dot(qh, kv[j], D);
        mb = std::max(mb, scores[j]);
      }
      if (mb > m) {  // rescale what came before to the new maximum
        const float c = fast_exp(m - mb);
        l *= c;
        for (int64_t d = 0; d < D; ++d) acc[d] *= c;
        m = mb;
      }
      for (int64_t j = 0; j < n; ++j) {
        const float p = fast_exp(scores[j] - m);
        l += p;
        const float* vj = kv[j] + (values - keys);
        for (int64_t d = 0; d < D; ++d) acc[d] += p * vj[d];
      }
    }
    const float inv = 1.0f / l;
    for (int64_t d = 0; d < D; ++d) oh[d] = acc[d] * inv;
  });
}

}  // namespace claw::kernels
