#include "claw/train/dpo.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/core/philox.h"
#include "claw/data/npy.h"
#include "claw/train/step.h"

namespace claw::train {

DpoLoss::DpoLoss(const DpoConfig& cfg, Reference reference)
    : type_(cfg.type()), beta_(cfg.beta), reference_(std::move(reference)) {}

double DpoLoss::apply(const model::StepCtx& ctx, const float* losses, const int32_t* targets, float* weights) {
  CLAW_CHECK(ctx.B % 2 == 0 && ctx.sample0 % 2 == 0, "DPO micro-batches hold whole pairs (B {}, first sample {})",
             ctx.B, ctx.sample0);
  const int64_t T = ctx.T;
  double total = 0;
  for (int64_t j = 0; j < ctx.B / 2; ++j) {
    double logp[2], ref[2], count[2];
    for (int side = 0; side < 2; ++side) {
      const int64_t row = 2 * j + side;
      double sum = 0, n = 0;
      for (int64_t t = 0; t < T; ++t) {
        sum -= losses[row * T + t];
        n += targets[row * T + t] >= 0;
      }
      const int64_t sample = static_cast<int64_t>(ctx.sample0) + row;
      ref[side] = reference_(sample);
      CLAW_CHECK(std::isfinite(ref[side]), "no reference log-probability for sample {}", sample);
      count[side] = std::max(n, 1.0);
      logp[side] = sum;
      if (type_ == DpoLossType::ipo) {  // means over the reply
        logp[side] /= count[side];
        ref[side] /= count[side];
      }
    }
    const double h = (logp[0] - ref[0]) - (logp[1] - ref[1]);
    double loss = 0, dh = 0;  // the pair's loss and d loss / d h
    switch (type_) {
      case DpoLossType::sigmoid: {
        const double z = beta_ * h;  // -log sigmoid(z) = softplus(-z)
        loss = std::max(-z, 0.0) + std::log1p(std::exp(-std::abs(z)));
        dh = -beta_ / (1.0 + std::exp(z));
        break;
      }
      case DpoLossType::ipo: {
        const double d = h - 1.0 / (2.0 * beta_);
        loss = d * d;
        dh = 2.0 * d;
        break;
      }
      case DpoLossType::hinge:
        loss = std::max(0.0, 1.0 - beta_ * h);
        dh = beta_ * h < 1.0 ? -beta_ : 0.0;
        break;
    }
    // token loss = -log p: d logp_chosen = -d loss_t, and h falls with logp_rejected.
    for (int side = 0; side < 2; ++side) {
      const float w = static_cast<float>((side == 0 ? -dh : dh) / (type_ == DpoLossType::ipo ? count[side] : 1.0));
      std::fill_n(weights + (2 * j + side) * T, T, w);
    }
    total += loss;
    sums_.pairs += 1;
    sums_.loss += loss;
    sums_.chosen_reward += beta_ * (logp[0] - ref[0]);
    sums_.rejected_reward += beta_ * (logp[1] - ref[1]);
    sums_.correct += h > 0;
  }
  return total;
}

DpoSums DpoLoss::take() {
  const DpoSums s = sums_;
  sums_ = {};
  return s;
}

double SequenceLogps::apply(const model::StepCtx& ctx, const float* losses, const int32_t*, float* weights) {
  for (int64_t row = 0; row < ctx.B; ++row) {
    double lp = 0;
    for (int64_t t = 0; t < ctx.T; ++t) lp -= losses[row * ctx.T + t];
    sink_(static_cast<int64_t>(ctx.sample0) + row, lp);
  }
  std::fill_n(weights, ctx.tokens(), 0.0f);
  return 0;
}

std::string dpo_reference_cache(const std::string& prefix, const std::string& key) {
  return fmt::format("{}_dpo_ref_{:016x}.npy", prefix, hash_name(key));
}

std::shared_ptr<const std::vector<double>> dpo_reference_logps(runtime::Runtime& runtime, GlobalBatch& batch,
                                                               const std::vector<const data::DpoDataset*>& sources,
                                                               const std::string& cache_path, uint64_t seed) {
  CLAW_CHECK(!sources.empty());
  comm::ParallelState& ps = runtime.parallel_state();
  comm::Group& world = ps.world();
  const int64_t n = sources[0]->num_sequences();
  auto out = std::make_shared<std::vector<double>>(static_cast<size_t>(n), std::numeric_limits<double>::quiet_NaN());

  int64_t cached = world.rank() == 0 && std::filesystem::exists(cache_path) ? 1 : 0;
  world.broadcast(&cached, 1, DType::i64, 0);
  if (cached) {
    int64_t size = 0;
    if (world.rank() == 0) {
      *out = data::read_npy<double>(cache_path);
      size = static_cast<int64_t>(out->size());
    }
    world.broadcast(&size, 1, DType::i64, 0);
    if (size != n)
      fail("{}: {} reference log-probabilities for a dataset of {} sequences; remove the file to recompute it",
           cache_path, size, n);
    out->resize(static_cast<size_t>(n));
    world.broadcast(out->data(), n, DType::f64, 0);
    log::info("dpo", "reference log-probabilities of {} sequences from {}", n, cache_path);
    return out;
  }

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<double> sum(static_cast<size_t>(n)), seen(static_cast<size_t>(n));
  const int64_t GB = batch.micro_batches() * batch.B() * ps.dp().size();
  int64_t pairs = 0;
  for (const data::DpoDataset* source : sources) {
    SequenceLogps recorder([&](int64_t sample, double logp) {
      const auto seq = static_cast<size_t>(source->sequence_of(sample));
      sum[seq] += logp;
      seen[seq] += 1;
    });
    pairs += source->num_pairs();
    for (int64_t first = 0; first < 2 * source->num_pairs(); first += GB) {
      batch.load(*source, first);
      eval_loss(runtime.model(), runtime.cpu(), batch, seed, static_cast<uint64_t>(first), &recorder);
    }
  }
  // Each sequence was scored on a last pipeline stage of one or more
  // data-parallel ranks (every TP rank of it alike).
  for (comm::Group* g : {&ps.pp(), &ps.dp()})
    if (g->size() > 1) {
      g->all_reduce(sum.data(), n, DType::f64);
      g->all_reduce(seen.data(), n, DType::f64);
    }
  for (int64_t s = 0; s < n; ++s)
    if (seen[s] > 0) (*out)[s] = sum[s] / seen[s];
  if (world.rank() == 0) data::write_npy(cache_path, *out);
  world.barrier();
  log::info("dpo", "reference log-probabilities of {} pairs computed in {:.1f} s (the starting model), cached in {}",
            pairs, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), cache_path);
  return out;
}

}  // namespace claw::train
