#include "claw/kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>
#include <vector>

#include "claw/core/dtype_convert.h"
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

// Row `row` of a view as fp32: in place for f32, else widened into tmp.
inline const float* load_row(const KvView& v, int64_t row, int64_t D, float* tmp) {
  switch (v.dtype) {
    case KvDtype::f32: return static_cast<const float*>(v.data) + row * D;
    case KvDtype::bf16: {
      const uint16_t* p = static_cast<const uint16_t*>(v.data) + row * D;
      for (int64_t d = 0; d < D; ++d) {
        const uint32_t u = uint32_t{p[d]} << 16;
        std::memcpy(&tmp[d], &u, 4);
      }
      return tmp;
    }
    case KvDtype::int8: {
      const int8_t* p = static_cast<const int8_t*>(v.data) + row * D;
      const float s = v.scales[row];
      for (int64_t d = 0; d < D; ++d) tmp[d] = s * p[d];
      return tmp;
    }
  }
  return nullptr;
}

struct Query {
  const float* q;  // [D]
  float* out;      // [D]
  int64_t pos;     // attends to keys [0, pos]
  int64_t g;       // its KV head
};

// One query head's attention over its sequence's keys: kD is D when the
// compiler should know it (0: D at run time).
template <int64_t kD>
void attend_one(const Query& qy, const KvView& keys, const KvView& values, int64_t block_size, const PagedSeq& s,
                int64_t G, int64_t D_, float fscale) {
  const int64_t D = kD ? kD : D_;
  const int64_t pos = qy.pos, g = qy.g;
  float acc[kD ? kD : kMaxHeadDim] = {};
  float scores[kTile];
  float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
  // Keys in tiles of kTile positions whatever the block size, so the
  // online softmax rescales at the same places for any paging.
  int64_t kv[kTile];  // rows of the views
  float tmp[kD ? kD : kMaxHeadDim];
  const int64_t row_bytes = D * static_cast<int64_t>(kv_dtype_size(keys.dtype));
  for (int64_t j0 = 0; j0 <= pos; j0 += kTile) {
    const int64_t n = std::min(kTile, pos + 1 - j0);
    // The next tile's rows on their way while this one is computed (a
    // head's rows are runs of block_size rows, far apart between blocks).
    for (int64_t p = j0 + kTile; p < std::min(j0 + 2 * kTile, pos + 1); ++p) {
      const int64_t row = kv_row(s.blocks[p / block_size], p % block_size, g, G, block_size);
      const char* kp = static_cast<const char*>(keys.data) + row * row_bytes;
      const char* vp = static_cast<const char*>(values.data) + row * row_bytes;
      for (int64_t b = 0; b < row_bytes; b += 64) {
        __builtin_prefetch(kp + b);
        __builtin_prefetch(vp + b);
      }
    }
    float mb = m;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t p = j0 + j;
      kv[j] = kv_row(s.blocks[p / block_size], p % block_size, g, G, block_size);
      scores[j] = fscale * fixed_order::dot(qy.q, load_row(keys, kv[j], D, tmp), D);
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
      const float* vj = load_row(values, kv[j], D, tmp);
      for (int64_t d = 0; d < D; ++d) acc[d] += p * vj[d];
    }
  }
  const float inv = 1.0f / l;
  for (int64_t d = 0; d < D; ++d) qy.out[d] = acc[d] * inv;
}

}  // namespace

std::string_view kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::f32: return "f32";
    case KvDtype::bf16: return "bf16";
    case KvDtype::int8: return "int8";
  }
  return "?";
}

std::optional<KvDtype> parse_kv_dtype(std::string_view s) {
  for (KvDtype t : {KvDtype::f32, KvDtype::bf16, KvDtype::int8})
    if (s == kv_dtype_name(t)) return t;
  return std::nullopt;
}

size_t kv_dtype_size(KvDtype t) { return t == KvDtype::f32 ? 4 : t == KvDtype::bf16 ? 2 : 1; }

void kv_store_row(const KvView& v, int64_t row, const float* src, int64_t D) {
  switch (v.dtype) {
    case KvDtype::f32: std::copy_n(src, D, static_cast<float*>(v.data) + row * D); return;
    case KvDtype::bf16: {
      uint16_t* p = static_cast<uint16_t*>(v.data) + row * D;
      for (int64_t d = 0; d < D; ++d) p[d] = f32_to_bf16(src[d]);
      return;
    }
    case KvDtype::int8: {
      float amax = 0;
      for (int64_t d = 0; d < D; ++d) amax = std::max(amax, std::fabs(src[d]));
      const float s = amax / 127, inv = s != 0 ? 1 / s : 0;
      int8_t* p = static_cast<int8_t*>(v.data) + row * D;
      for (int64_t d = 0; d < D; ++d) p[d] = static_cast<int8_t>(std::round(src[d] * inv));
      v.scales[row] = s;
      return;
    }
  }
}

void paged_attention_forward(const CpuCtx& ctx, float* out, const float* q, const KvView& keys,
                             const KvView& values, int64_t block_size, const PagedSeq* seqs, int64_t num_seqs,
                             int64_t H, int64_t G, int64_t D, double scale) {
  CLAW_CHECK(block_size >= 1 && D <= kMaxHeadDim && H % G == 0,
             "paged attention: block size {}, head dim {} (<= {}), {} heads over {} KV heads", block_size, D,
             kMaxHeadDim, H, G);
  std::vector<Item> items;
  for (int64_t s = 0; s < num_seqs; ++s)
    for (int64_t t = 0; t < seqs[s].num_tokens; ++t) items.push_back({static_cast<int32_t>(s), static_cast<int32_t>(t)});
  const int64_t per_group = H / G;
  const float fscale = static_cast<float>(scale);
  // Longer contexts first would balance better; items are few and similar.
  parallel_for_dynamic(ctx, static_cast<int64_t>(items.size()) * H, [&](int64_t task) {
    const Item it = items[task / H];
    const int64_t h = task % H;
    const PagedSeq& s = seqs[it.seq];
    const int64_t r = s.first_row + it.token;
    const Query qy{q + (r * H + h) * D, out + (r * H + h) * D, s.context + it.token, h / per_group};
    // The common head sizes with D known to the compiler (the accumulator
    // stays in registers); the same operations in the same order as any D.
    if (D == 64)
      attend_one<64>(qy, keys, values, block_size, s, G, D, fscale);
    else if (D == 128)
      attend_one<128>(qy, keys, values, block_size, s, G, D, fscale);
    else
      attend_one<0>(qy, keys, values, block_size, s, G, D, fscale);
  });
}

}  // namespace claw::kernels
