#include "claw/runtime/model_chunks.h"

#include <bit>
#include <cmath>
#include <map>
#include <tuple>

#include "claw/core/error.h"

namespace claw::runtime {

ModelChunks::ModelChunks(std::vector<model::GPT*> chunks, std::vector<parallel::DataParallel*> dps, comm::Group& pp,
                         comm::Group& embedding, const parallel::ScheduleConfig& schedule, int64_t B, int64_t T,
                         model::Recompute recompute)
    : chunks_(std::move(chunks)), dps_(std::move(dps)), pp_(&pp), embedding_(&embedding) {
  build(schedule, B, T, recompute);
}

ModelChunks::ModelChunks(model::GPT& model, parallel::DataParallel* dp, int64_t micro_batches, int64_t B, int64_t T,
                         model::Recompute recompute)
    : chunks_{&model},
      own_pp_(std::make_unique<comm::SelfGroup>("pp")),
      own_embedding_(std::make_unique<comm::SelfGroup>("embedding")),
      pp_(own_pp_.get()),
      embedding_(own_embedding_.get()) {
  if (dp) dps_.push_back(dp);
  build({.kind = parallel::ScheduleKind::one_f_one_b, .stages = 1, .microbatches = static_cast<int>(micro_batches),
         .chunks = 1},
        B, T, recompute);
}

ModelChunks::~ModelChunks() = default;

void ModelChunks::build(const parallel::ScheduleConfig& schedule, int64_t B, int64_t T, model::Recompute recompute) {
  CLAW_CHECK(!chunks_.empty(), "a pipeline stage without model chunks");
  CLAW_CHECK(dps_.empty() || dps_.size() == chunks_.size(), "{} data-parallel engines for {} model chunks",
             dps_.size(), chunks_.size());
  exec_ = std::make_unique<parallel::PipelineExecutor>(chunks_, *pp_, parallel::make_schedule(schedule), B, T,
                                                       recompute, dps_);
}

void ModelChunks::begin_step() {
  if (dps_.empty())
    for (model::GPT* m : chunks_) m->store().zero_grads();
  for (parallel::DataParallel* d : dps_) d->begin_step();
}

void ModelChunks::finish_grad_sync() {
  // Tied embeddings: the first stage's word embeddings and the last stage's
  // copy each got part of the gradient (lookup, output layer); a frozen
  // embedding has none.
  if (embedding_->size() > 1)
    for (model::GPT* m : chunks_)
      if (model::Param* w = m->store().find("embedding.word_embeddings.weight");
          w && m->config().tied() && w->spec.trainable)
        embedding_->all_reduce(w->gdata(), w->spec.local_shape().numel(), DType::f32);
  for (parallel::DataParallel* d : dps_) d->finish_grad_sync();
}

void ModelChunks::after_optimizer_step(const CpuCtx& cpu) {
  for (parallel::DataParallel* d : dps_) d->after_optimizer_step();
  for (model::GPT* c : chunks_) {
    c->update_expert_bias(dp() ? &dp()->group() : nullptr);
    c->store().refresh_compute(cpu);
  }
}

model::MoeStats ModelChunks::take_moe_stats() {
  model::MoeStats s;
  for (model::GPT* c : chunks_) c->take_moe_stats(s);
  return s;
}

void ModelChunks::reduce_over_layer_replicas(size_t c, void* buf, int64_t n, DType dt, comm::ReduceOp op) const {
  const model::TensorParallel& tp = chunks_[c]->tp();
  if (comm::Group* g = tp.moe_tokens ? tp.moe_tokens : tp.group; g && g->size() > 1) g->all_reduce(buf, n, dt, op);
  if (!dps_.empty() && dps_[c]->group().size() > 1) dps_[c]->group().all_reduce(buf, n, dt, op);
}

void ModelChunks::fp8_step_end() {
  for (size_t c = 0; c < chunks_.size(); ++c) {
    std::vector<model::Fp8Linear*> layers;
    for (model::Fp8Linear* l : chunks_[c]->fp8_layers())
      if (l->delayed()) layers.push_back(l);
    if (layers.empty()) continue;
    // Amaxes as their bit patterns: non-negative floats order like int32s,
    // and a NaN (above inf) survives the max.
    std::vector<int32_t> bits;
    for (model::Fp8Linear* l : layers)
      for (float a : l->step_amax()) bits.push_back(std::bit_cast<int32_t>(std::fabs(a)));
    reduce_over_layer_replicas(c, bits.data(), static_cast<int64_t>(bits.size()), DType::i32, comm::ReduceOp::max);
    for (size_t i = 0; i < layers.size(); ++i) {
      for (int r = 0; r < 3; ++r) layers[i]->step_amax()[static_cast<size_t>(r)] = std::bit_cast<float>(bits[3 * i + r]);
      layers[i]->update();
    }
  }
}

namespace {
// This rank's FP8 layers with their (block, slot) places.
std::vector<std::tuple<model::Fp8Linear*, int64_t, int64_t>> fp8_places(const std::vector<model::GPT*>& chunks) {
  std::vector<std::tuple<model::Fp8Linear*, int64_t, int64_t>> out;
  std::map<int64_t, int64_t> next;
  for (model::GPT* c : chunks)
    for (model::Fp8Linear* l : c->fp8_layers()) out.emplace_back(l, l->block(), next[l->block()]++);
  return out;
}
}  // namespace

int64_t ModelChunks::fp8_slots_per_block() const {
  std::map<int64_t, int64_t> count;
  for (const auto& [l, block, slot] : fp8_places(chunks_)) count[block] = std::max(count[block], slot + 1);
  int64_t slots = 0;
  for (const auto& [block, n] : count) slots = std::max(slots, n);
  if (pp_->size() > 1) slots = static_cast<int64_t>(pp_->all_reduce_value(static_cast<double>(slots), comm::ReduceOp::max));
  return slots;
}

std::vector<double> ModelChunks::fp8_scaling_state(int64_t num_layers, int64_t slots, int64_t history_len) const {
  const int64_t size = model::Fp8Linear::scaling_state_size(history_len);
  std::vector<double> out(static_cast<size_t>(num_layers * slots * size), 0.0);
  for (const auto& [l, block, slot] : fp8_places(chunks_)) {
    const std::vector<double> s = l->scaling_state();
    std::copy(s.begin(), s.end(), out.begin() + (block * slots + slot) * size);
  }
  if (pp_->size() > 1) pp_->all_reduce(out.data(), static_cast<int64_t>(out.size()), DType::f64, comm::ReduceOp::sum);
  return out;
}

void ModelChunks::load_fp8_scaling_state(const std::vector<double>& state, int64_t slots, int64_t history_len) {
  const int64_t size = model::Fp8Linear::scaling_state_size(history_len);
  for (const auto& [l, block, slot] : fp8_places(chunks_)) {
    const int64_t at = (block * slots + slot) * size;
    CLAW_CHECK(slot < slots && at + size <= static_cast<int64_t>(state.size()), "FP8 scaling state has no slot for {}",
               l->layer());
    l->load_scaling_state(std::vector<double>(state.begin() + at, state.begin() + at + size));
  }
}

double ModelChunks::dp_sum(double v) const { return dp() ? dp()->all_reduce_sum(v) : v; }

double ModelChunks::pp_sum(double v) const { return pp_->size() > 1 ? pp_->all_reduce_value(v) : v; }

double ModelChunks::reduce_grad_sum_squares(double sum_squares, double expert) const {
  if (dp() && dp()->sharded_optimizer()) sum_squares = dp()->shard_sum(sum_squares);
  sum_squares = pp_sum(sum_squares);
  if (comm::Group& tp = *first().tp().group; tp.size() > 1) sum_squares = tp.all_reduce_value(sum_squares);
  if (!first().tp().expert_region) return sum_squares;
  if (comm::Group* edp = dp() ? dp()->expert_group() : nullptr; edp && dp()->sharded_optimizer())
    expert = edp->all_reduce_value(expert);
  if (comm::Group* ep = first().tp().ep; ep && ep->size() > 1) expert = ep->all_reduce_value(expert);
  return sum_squares + pp_sum(expert);
}

std::string ModelChunks::first_non_finite_grad(const CpuCtx& cpu) const {
  for (const model::GPT* m : chunks_)
    if (std::string where = m->first_non_finite_grad(cpu); !where.empty()) return where;
  return "";
}

std::vector<model::Segment> ModelChunks::optimizer_segments() const {
  std::vector<model::Segment> out;
  for (size_t c = 0; c < chunks_.size(); ++c)
    for (const model::Segment& s : dps_.empty() ? chunks_[c]->store().full_segments() : dps_[c]->segments())
      out.push_back(s);
  return out;
}

std::vector<const model::ParamStore*> ModelChunks::stores() const {
  std::vector<const model::ParamStore*> out;
  for (const model::GPT* m : chunks_) out.push_back(&m->store());
  return out;
}

}  // namespace claw::runtime
