// DiLoCo (data_parallel.h): the outer step across the instances (data
// centres) every --diloco-inner-steps, streamed in fragments, with the
// deltas packed to 8 or 4 bits in blocks with a scale each.
#include "claw/parallel/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

#include "claw/core/clock.h"
#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"
#include "claw/core/log.h"

namespace claw::parallel {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

int64_t packed_delta_bytes(int64_t n, int bits) {
  const int64_t blocks = (n + kDeltaBlock - 1) / kDeltaBlock;
  return blocks * static_cast<int64_t>(sizeof(float)) + (bits == 8 ? n : (n + 1) / 2);
}

void pack_delta(const float* x, int64_t n, int bits, uint8_t* out) {
  CLAW_CHECK(bits == 8 || bits == 4, "packed deltas have 8 or 4 bits, not {}", bits);
  const float qmax = bits == 8 ? 127.0f : 7.0f;
  const int64_t blocks = (n + kDeltaBlock - 1) / kDeltaBlock;
  uint8_t* codes = out + blocks * static_cast<int64_t>(sizeof(float));
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * kDeltaBlock, hi = std::min(n, lo + kDeltaBlock);
    float amax = 0;
    for (int64_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float scale = amax / qmax, inv = amax > 0 ? qmax / amax : 0.0f;
    std::memcpy(out + b * static_cast<int64_t>(sizeof(float)), &scale, sizeof(float));
    for (int64_t i = lo; i < hi; ++i) {
      const int q = static_cast<int>(std::clamp(std::nearbyint(x[i] * inv), -qmax, qmax));
      if (bits == 8) {
        codes[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      } else {
        const auto nib = static_cast<uint8_t>(q + 8);  // 1..15
        codes[i / 2] = (i % 2 == 0) ? nib : static_cast<uint8_t>(codes[i / 2] | (nib << 4));
      }
    }
  }
}

void add_packed_delta(const uint8_t* in, int64_t n, int bits, float* acc) {
  const int64_t blocks = (n + kDeltaBlock - 1) / kDeltaBlock;
  const uint8_t* codes = in + blocks * static_cast<int64_t>(sizeof(float));
  for (int64_t b = 0; b < blocks; ++b) {
    float scale;
    std::memcpy(&scale, in + b * static_cast<int64_t>(sizeof(float)), sizeof(float));
    const int64_t lo = b * kDeltaBlock, hi = std::min(n, lo + kDeltaBlock);
    for (int64_t i = lo; i < hi; ++i) {
      const int q = bits == 8 ? static_cast<int>(static_cast<int8_t>(codes[i]))
                              : static_cast<int>((codes[i / 2] >> (4 * (i % 2))) & 0xF) - 8;
      acc[i] += static_cast<float>(q) * scale;
    }
  }
}

void DataParallel::issue_inter_gather(const uint8_t* send, uint8_t* recv, int64_t bytes,
                                      std::vector<comm::Work>& out) {
  const int64_t chunk = instances_.chunk_elements > 0 ? instances_.chunk_elements * 4 : bytes;
  const int64_t n = cfg_.instances;
  for (int64_t at = 0; at < bytes; at += chunk) {
    comm::Group* g = instances_.inter[next_stream_++ % instances_.inter.size()];
    out.push_back(g->all_gather_async(send + at, recv + n * at, std::min(chunk, bytes - at), DType::u8));
  }
}

void DataParallel::unchunk_gathered(const uint8_t* recv, int64_t bytes, int instance, uint8_t* out) const {
  const int64_t chunk = instances_.chunk_elements > 0 ? instances_.chunk_elements * 4 : bytes;
  const int64_t n = cfg_.instances;
  for (int64_t at = 0; at < bytes; at += chunk) {
    const int64_t c = std::min(chunk, bytes - at);
    std::memcpy(out + at, recv + n * at + instance * c, static_cast<size_t>(c));
  }
}

void DataParallel::outer_step(int f0, int f1) {
  const int N = cfg_.instances, P = cfg_.diloco_fragments, bits = cfg_.diloco_delta_bits;
  const float inv = 1.0f / static_cast<float>(N), mu = static_cast<float>(cfg_.diloco_outer_momentum);
  const float lr = static_cast<float>(cfg_.diloco_outer_lr);
  // Fragments [f0, f1) of region r's owned shard: [lo, hi).
  const auto range = [&](size_t r) {
    const int64_t S = static_cast<int64_t>(outer_[r].anchor.size());
    return std::pair<int64_t, int64_t>{S * f0 / P, S * f1 / P};
  };
  const auto values = [&](size_t r) {
    return reinterpret_cast<float*>(store_.value_at(static_cast<int>(r), store_.regions()[r].shard_lo()));
  };
  std::vector<comm::Work> work;
  for (size_t r = 0; r < outer_.size(); ++r) {
    Outer& o = outer_[r];
    if (o.anchor.empty()) continue;
    const auto [lo, hi] = range(r);
    const float* v = values(r);
    for (int64_t i = lo; i < hi; ++i) o.delta[i] = o.anchor[i] - v[i];
    if (bits == 32) {
      issue_inter(o.delta.data() + lo, hi - lo, comm::Work(), work);
    } else {
      pack_delta(o.delta.data() + lo, hi - lo, bits, o.packed.data());
      issue_inter_gather(o.packed.data(), o.gathered.data(), packed_delta_bytes(hi - lo, bits), work);
    }
  }
  const auto t0 = Clock::now();
  for (const comm::Work& w : work) w.wait();
  grad_wait_s_ += seconds_since(t0);
  for (size_t r = 0; r < outer_.size(); ++r) {
    Outer& o = outer_[r];
    if (o.anchor.empty()) continue;
    const auto [lo, hi] = range(r);
    float *a = o.anchor.data(), *m = o.momentum.data(), *d = o.delta.data(), *v = values(r);
    if (bits < 32) {  // the instances' decoded deltas, summed in instance order (the same sum on every rank)
      const int64_t bytes = packed_delta_bytes(hi - lo, bits);
      std::fill(d + lo, d + hi, 0.0f);
      for (int i = 0; i < N; ++i) {
        unchunk_gathered(o.gathered.data(), bytes, i, o.packed.data());
        add_packed_delta(o.packed.data(), hi - lo, bits, d + lo);
      }
    }
    for (int64_t i = lo; i < hi; ++i) {
      const float delta = d[i] * inv;
      m[i] = mu * m[i] + delta;
      a[i] -= lr * (delta + mu * m[i]);
      v[i] = a[i];
    }
  }
}

void DataParallel::synchronize_replicas() {
  if (cfg_.diloco_inner_steps == 0 || synced_) return;
  // Every fragment but the one (if any) whose outer step ran on the last step.
  const int64_t H = cfg_.diloco_inner_steps, P = cfg_.diloco_fragments;
  const int64_t k = inner_step_ == 0 ? H : inner_step_;  // the last step's place in its round
  int64_t just = -1;
  for (int64_t f = 0; f < P; ++f)
    if ((f + 1) * H / P == k) just = f;
  if (just < 0) {
    outer_step(0, static_cast<int>(P));
  } else {
    if (just > 0) outer_step(0, static_cast<int>(just));
    if (just + 1 < P) outer_step(static_cast<int>(just + 1), static_cast<int>(P));
  }
  synced_ = true;
  if (cfg_.zero_stage == 1 || cfg_.zero_stage == 2) gather_trainable_values();
}

float* DataParallel::outer_momentum(const model::ParamSpec& spec, int64_t begin) {
  const auto& params = store_.params();
  for (size_t k = 0; k < params.size(); ++k) {
    if (&params[k]->spec != &spec) continue;
    const model::ParamSlot& at = store_.slot(k);
    Outer& o = outer_[at.region];
    if (o.momentum.empty()) return nullptr;
    const int64_t flat = at.offset + begin - store_.regions()[at.region].shard_lo();
    CLAW_CHECK(flat >= 0 && flat < static_cast<int64_t>(o.momentum.size()),
               "{}: element {} is outside this rank's owned range", spec.name, begin);
    return o.momentum.data() + flat;
  }
  return nullptr;
}

}  // namespace claw::parallel
