#include "claw/kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>
#include <vector>

#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"
#include "claw/kernels/cpu/fixed_order_dot.h"
#include "claw/kernels/cpu/ggml_quants.h"
#include "claw/kernels/cpu/vec_math.h"

namespace claw::kernels {
namespace {

constexpr int64_t kMaxHeadDim = kMaxPagedHeadDim, kTile = 16;

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
    case KvDtype::f16: {
      f16_to_f32_bulk(static_cast<const uint16_t*>(v.data) + row * D, tmp, D);
      return tmp;
    }
    case KvDtype::q8_0: {
      const int8_t* p = static_cast<const int8_t*>(v.data) + row * D;
      const float* s = v.scales + row * (D / 32);
      for (int64_t b = 0; b < D / 32; ++b)  // a block at a time: a loop that vectorises
        for (int64_t k = 0; k < 32; ++k) tmp[32 * b + k] = s[b] * p[32 * b + k];
      return tmp;
    }
  }
  return nullptr;
}

// One query head's keys and values in a paged cache (a KV head's rows of a
// block are a run of block_size rows, far apart between blocks).
struct PagedRows {
  const KvView& keys;
  const KvView& values;
  const PagedSeq& seq;
  int64_t g, G, block_size, D;
  int64_t row(int64_t p) const { return kv_row(seq.blocks[p / block_size], p % block_size, g, G, block_size); }
  const float* key(int64_t row, float* tmp) const { return load_row(keys, row, D, tmp); }
  const float* value(int64_t row, float* tmp) const { return load_row(values, row, D, tmp); }
  void prefetch(int64_t p) const {
    const int64_t bytes = D * static_cast<int64_t>(kv_dtype_size(keys.dtype)), r = row(p);
    const char* kp = static_cast<const char*>(keys.data) + r * bytes;
    const char* vp = static_cast<const char*>(values.data) + r * bytes;
    for (int64_t b = 0; b < bytes; b += 64) {
      __builtin_prefetch(kp + b);
      __builtin_prefetch(vp + b);
    }
  }
};

// One query head's keys and values in contiguous [B, T, G, D] arrays, from
// its document's first token `first` on.
struct ContiguousRows {
  const float* k;  // row b's position 0, KV head g
  const float* v;
  int64_t first, stride;  // stride: G * D
  int64_t row(int64_t p) const { return first + p; }
  const float* key(int64_t row, float*) const { return k + row * stride; }
  const float* value(int64_t row, float*) const { return v + row * stride; }
  void prefetch(int64_t) const {}  // consecutive rows: the hardware prefetcher follows them
};

// One query head's attention to keys [lo, pos] (positions counted from its
// sequence's first token; lo = 0 but under a sliding window): kD is D when
// the compiler should know it (0: D at run time). Returns the log-sum-exp of
// the scaled scores.
template <int64_t kD, typename Rows>
float attend_one(const float* q, float* out, int64_t lo, int64_t pos, const Rows& rows, int64_t D_, float fscale,
                 float cap) {
  const int64_t D = kD ? kD : D_;
  float acc[kD ? kD : kMaxHeadDim] = {};
  float scores[kTile];
  float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
  // Keys in tiles of kTile positions whatever the block size, so the
  // online softmax rescales at the same places for any paging.
  int64_t kv[kTile];  // rows of the views
  float tmp[kD ? kD : kMaxHeadDim];
  for (int64_t j0 = lo; j0 <= pos; j0 += kTile) {
    const int64_t n = std::min(kTile, pos + 1 - j0);
    // The next tile's rows on their way while this one is computed.
    for (int64_t p = j0 + kTile; p < std::min(j0 + 2 * kTile, pos + 1); ++p) rows.prefetch(p);
    float mb = m;
    for (int64_t j = 0; j < n; ++j) {
      kv[j] = rows.row(j0 + j);
      scores[j] = fscale * fixed_order::dot(q, rows.key(kv[j], tmp), D);
      if (cap > 0) scores[j] = cap * std::tanh(scores[j] * (1.0f / cap));  // score_scale.h's soft cap
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
      const float* vj = rows.value(kv[j], tmp);
      for (int64_t d = 0; d < D; ++d) acc[d] += p * vj[d];
    }
  }
  const float inv = 1.0f / l;
  for (int64_t d = 0; d < D; ++d) out[d] = acc[d] * inv;
  return m + std::log(l);
}

// attend_one with the common head sizes known to the compiler (the
// accumulator stays in registers): the same operations in the same order as
// any D.
// window: keys a query sees, itself included (0: all).
template <typename Rows>
float attend(const float* q, float* out, int64_t pos, int64_t window, const Rows& rows, int64_t D,
             const ScoreScale& scale) {
  const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
  const auto fscale = static_cast<float>(scale.scale), cap = static_cast<float>(scale.softcap);
  if (D == 64) return attend_one<64>(q, out, lo, pos, rows, D, fscale, cap);
  if (D == 128) return attend_one<128>(q, out, lo, pos, rows, D, fscale, cap);
  return attend_one<0>(q, out, lo, pos, rows, D, fscale, cap);
}

}  // namespace

std::string_view kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::f32: return "f32";
    case KvDtype::bf16: return "bf16";
    case KvDtype::int8: return "int8";
    case KvDtype::f16: return "f16";
    case KvDtype::q8_0: return "q8_0";
  }
  return "?";
}

std::optional<KvDtype> parse_kv_dtype(std::string_view s) {
  for (KvDtype t : {KvDtype::f32, KvDtype::bf16, KvDtype::int8, KvDtype::f16, KvDtype::q8_0})
    if (s == kv_dtype_name(t)) return t;
  return std::nullopt;
}

size_t kv_dtype_size(KvDtype t) {
  return t == KvDtype::f32 ? 4 : t == KvDtype::bf16 || t == KvDtype::f16 ? 2 : 1;
}

int64_t kv_scales_per_row(KvDtype t, int64_t D) { return t == KvDtype::int8 ? 1 : t == KvDtype::q8_0 ? D / 32 : 0; }

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
    case KvDtype::f16: {
      uint16_t* p = static_cast<uint16_t*>(v.data) + row * D;
      for (int64_t d = 0; d < D; ++d) p[d] = f32_to_f16(src[d]);
      return;
    }
    case KvDtype::q8_0: {
      CLAW_CHECK(D % 32 == 0, "a q8_0 KV cache holds rows of whole blocks of 32, not {}", D);
      int8_t* p = static_cast<int8_t*>(v.data) + row * D;
      for (int64_t b = 0; b < D / 32; ++b) {
        float d;
        ggml_quantize_q8_0_block(src + b * 32, p + b * 32, &d);
        v.scales[row * (D / 32) + b] = f16_to_f32(f32_to_f16(d));
      }
      return;
    }
  }
}

void paged_attention_forward(const CpuCtx& ctx, float* out, const float* q, const KvView& keys,
                             const KvView& values, int64_t block_size, const PagedSeq* seqs, int64_t num_seqs,
                             int64_t H, int64_t G, int64_t D, ScoreScale scale, int64_t window) {
  CLAW_CHECK(block_size >= 1 && D <= kMaxHeadDim && H % G == 0,
             "paged attention: block size {}, head dim {} (<= {}), {} heads over {} KV heads", block_size, D,
             kMaxHeadDim, H, G);
  std::vector<Item> items;
  for (int64_t s = 0; s < num_seqs; ++s)
    for (int64_t t = 0; t < seqs[s].num_tokens; ++t) items.push_back({static_cast<int32_t>(s), static_cast<int32_t>(t)});
  const int64_t per_group = H / G;
  // Longer contexts first would balance better; items are few and similar.
  parallel_for_dynamic(ctx, static_cast<int64_t>(items.size()) * H, [&](int64_t task) {
    const Item it = items[task / H];
    const int64_t h = task % H;
    const PagedSeq& s = seqs[it.seq];
    const int64_t r = s.first_row + it.token;
    attend(q + (r * H + h) * D, out + (r * H + h) * D, s.context + it.token, window,
           PagedRows{keys, values, s, h / per_group, G, block_size, D}, D, scale);
  });
}


void fixed_order_attention_forward(const CpuCtx& ctx, float* out, float* lse, const float* q, const float* k,
                                   const float* v, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D,
                                   ScoreScale scale, const int32_t* seg_start, int64_t window) {
  CLAW_CHECK(D <= kMaxHeadDim && H % G == 0, "fixed-order attention: head dim {} (<= {}), {} heads over {} KV heads",
             D, kMaxHeadDim, H, G);
  if (seg_start)
    for (int64_t i = 0; i < B * T; ++i)
      CLAW_CHECK(seg_start[i] >= 0 && seg_start[i] <= i % T, "fixed-order attention: seg_start {} at token {} of a row",
                 seg_start[i], i % T);
  const int64_t per_group = H / G;
  parallel_for_dynamic(ctx, B * T * H, [&](int64_t task) {
    const int64_t b = task / (T * H), t = task / H % T, h = task % H;
    const int64_t first = seg_start ? seg_start[b * T + t] : 0;
    const int64_t i = (b * T + t) * H + h;
    const ContiguousRows rows{k + (b * T * G + h / per_group) * D, v + (b * T * G + h / per_group) * D, first, G * D};
    lse[(b * H + h) * T + t] = attend(q + i * D, out + i * D, t - first, window, rows, D, scale);
  });
}

}  // namespace claw::kernels
