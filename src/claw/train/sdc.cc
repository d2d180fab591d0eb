#include "claw/train/sdc.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "claw/ckpt/format.h"
#include "claw/core/error.h"
#include "claw/core/log.h"

namespace claw::train {

void SdcConfig::validate() const {
  if (rerun_mode != "validate_results" && rerun_mode != "disabled")
    fail("--rerun-mode must be validate_results or disabled, got '{}'", rerun_mode);
  if (!(spiky_factor > 1)) fail("--spiky-loss-factor must be > 1 (a multiple of the recent maximum), got {}", spiky_factor);
  if (weight_hash_interval < 0)
    fail("--check-weight-hash-across-dp-replicas-interval must be >= 0 (0: off), got {}", weight_hash_interval);
}

uint64_t bits_of(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

RankHosts describe_ranks(comm::Group& world, const std::vector<int>& ranks) {
  constexpr int kWords = 9;  // 64 bytes of host name, the pid
  std::vector<int64_t> mine(kWords, 0), all(static_cast<size_t>(kWords) * world.size());
  gethostname(reinterpret_cast<char*>(mine.data()), 63);
  mine[kWords - 1] = getpid();
  world.all_gather(mine.data(), all.data(), kWords, DType::i64);
  std::vector<std::string> out;
  RankHosts rh;
  for (int r : ranks) {
    const int64_t* w = all.data() + static_cast<size_t>(kWords) * r;
    const std::string host(reinterpret_cast<const char*>(w), strnlen(reinterpret_cast<const char*>(w), 63));
    out.push_back(fmt::format("world rank {} (host {}, pid {})", world.world_ranks()[static_cast<size_t>(r)], host,
                              w[kWords - 1]));
    if (std::find(rh.hosts.begin(), rh.hosts.end(), host) == rh.hosts.end()) rh.hosts.push_back(host);
  }
  rh.description = fmt::format("{}", fmt::join(out, ", "));
  return rh;
}

SdcMonitor::SdcMonitor(SdcConfig cfg, comm::Group& world, comm::Group* dp)
    : cfg_(std::move(cfg)), world_(world), dp_(dp) {
  cfg_.validate();
}

bool SdcMonitor::suspect(double loss, double grad_norm) {
  if (!cfg_.rerun()) return false;
  bool mine = !std::isfinite(loss) || !std::isfinite(grad_norm);
  if (!mine && static_cast<int64_t>(losses_.size()) >= cfg_.min_history) {
    const double max_loss = *std::max_element(losses_.begin(), losses_.end());
    const double max_norm = *std::max_element(norms_.begin(), norms_.end());
    mine = loss > cfg_.spiky_factor * max_loss || grad_norm > cfg_.spiky_factor * max_norm;
  }
  const bool any = world_.size() == 1 ? mine : world_.all_reduce_value<int32_t>(mine, comm::ReduceOp::max) != 0;
  reruns_ += any;
  return any;
}

std::vector<int> SdcMonitor::unreproduced(uint64_t first, uint64_t second) {
  const int32_t differs = first != second;
  std::vector<int32_t> all(static_cast<size_t>(world_.size()));
  world_.all_gather(&differs, all.data(), 1, DType::i32);
  std::vector<int> ranks;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r]) ranks.push_back(static_cast<int>(r));
  transient_ += !ranks.empty();
  return ranks;
}

void SdcMonitor::observe(double loss, double grad_norm) {
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) return;
  losses_.push_back(loss);
  norms_.push_back(grad_norm);
  if (static_cast<int64_t>(losses_.size()) > cfg_.window) {
    losses_.pop_front();
    norms_.pop_front();
  }
}

void SdcMonitor::check_replicas(const runtime::ModelChunks& model, int64_t step) {
  if (cfg_.weight_hash_interval <= 0 || step % cfg_.weight_hash_interval != 0 || !dp_ || dp_->size() < 2) return;
  // The parameters every replica holds whole (ZeRO 0-2), chunk by chunk, in order.
  uint64_t h = 0;
  for (model::GPT* m : model.chunks())
    for (const model::Param* p : m->params())
      if (p->value.defined()) h = h * 0x100000001b3ULL ^ ckpt::checksum(p->value.raw(), p->value.nbytes());
  std::vector<uint64_t> all(static_cast<size_t>(dp_->size()));
  dp_->all_gather(&h, all.data(), 1, DType::i64);
  std::map<uint64_t, int> votes;
  for (uint64_t v : all) ++votes[v];
  if (votes.size() == 1) {
    if (dp_->rank() == 0)
      log::info("sdc", "step {}: the parameters of the {} data-parallel replicas are bitwise equal (hash {:016x})",
                step, all.size(), h);
    return;
  }
  const auto majority = std::max_element(votes.begin(), votes.end(),
                                         [](const auto& a, const auto& b) { return a.second < b.second; });
  const bool clear = majority->second * 2 > static_cast<int>(all.size());
  std::vector<int> diverging;
  for (size_t r = 0; r < all.size(); ++r)
    if (!clear || all[r] != majority->first) diverging.push_back(static_cast<int>(r));
  const RankHosts who_hosts = describe_ranks(*dp_, diverging);
  const std::string& who = who_hosts.description;
  if (clear) suspect_hosts_ = who_hosts.hosts;
  fail<NonFiniteError>(
      "step {}: silent data corruption: the parameters of {} differ from {} (hashes over the {} data-parallel "
      "replicas, which must be bitwise equal): the state is corrupt; resume from the last checkpoint{}",
      step, who,
      clear ? fmt::format("the other {} replicas'", majority->second) : std::string("each other (no majority)"),
      all.size(), clear ? fmt::format(" and check the host of data-parallel rank(s) {}", fmt::join(diverging, ", ")) : "");
}

}  // namespace claw::train
