// The one step function on the one-stage pipeline (runtime::ModelChunks of
// the whole model) is the plain gradient-accumulation loop: zero the
// gradients, forward and backward each micro-batch in order, the norm, one
// AdamW update. Written out here by hand and compared bit for bit (losses,
// gradient norms, every parameter after three steps, and evaluation), so the
// executor's one-stage schedule adds no operation and reorders none.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "claw/core/error.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/model/gpt.h"
#include "claw/optim/adamw.h"
#include "claw/runtime/model_chunks.h"
#include "claw/train/step.h"
#include "model/random_batch.h"

namespace claw::train {
namespace {

constexpr int64_t kMicro = 4, kB = 2, kT = 16, kV = 500, kSteps = 3;

model::ModelConfig small(const char* preset) {
  model::ModelConfig c = model::model_preset(preset);
  c.vocab_size = kV;
  c.num_layers = 2;
  c.hidden_dropout = 0.1;  // dropout streams keyed by sample0: the micro-batch offsets must match too
  return c;
}

optim::AdamWConfig adam() { return {.beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1, .clip_grad = 0.5}; }

void fill(GlobalBatch& batch, int64_t step) {
  const model::Batch b = model::random_batch(kMicro * kB * kT, kV, 100 + static_cast<uint64_t>(step));
  std::vector<int32_t> targets = b.targets;
  targets[3] = -1;  // a masked target: the loss is the mean over the others
  batch.assign(b.tokens, targets);
}

// The loop train_step ran before the executor ran it.
StepResult by_hand(model::GPT& m, optim::AdamW& opt, const CpuCtx& cpu, const GlobalBatch& batch, double lr,
                   uint64_t seed, uint64_t sample0) {
  const int64_t counted = batch.valid_targets();
  m.store().zero_grads();
  double loss_sum = 0;
  for (int64_t k = 0; k < batch.micro_batches(); ++k) {
    const MicroBatch mb = batch.micro(k);
    const model::StepCtx ctx{.cpu = cpu, .B = batch.B(), .T = batch.T(), .training = true, .seed = seed,
                             .sample0 = sample0 + static_cast<uint64_t>(batch.sample_offset(k))};
    loss_sum += m.forward(ctx, mb.tokens, mb.targets, 1.0 / static_cast<double>(counted));
    m.backward(ctx, mb.tokens);
  }
  StepResult r{loss_sum / static_cast<double>(counted), std::sqrt(opt.grad_sum_squares(cpu))};
  opt.step(cpu, lr, opt.clip_coefficient(r.grad_norm));
  return r;
}

class OneStagePipeline : public ::testing::TestWithParam<const char*> {};

TEST_P(OneStagePipeline, IsTheGradientAccumulationLoopBitForBit) {
  const CpuCtx cpu = kernels::make_cpu_ctx(1);
  const model::ModelConfig cfg = small(GetParam());
  model::GPT a(cfg), b(cfg);
  a.init_weights(cpu, 3);
  b.init_weights(cpu, 3);
  b.reserve(kB, kT);
  runtime::ModelChunks whole(a, nullptr, kMicro, kB, kT);
  optim::AdamW opt_a(whole.optimizer_segments(), adam()), opt_b(b.store(), adam());
  GlobalBatch batch(kMicro, kB, kT, {});
  for (int64_t s = 0; s < kSteps; ++s) {
    fill(batch, s);
    const double lr = 1e-3 * static_cast<double>(s + 1);
    const StepResult got = train_step(whole, opt_a, cpu, batch, s, lr, 9, s * kMicro * kB);
    const StepResult want = by_hand(b, opt_b, cpu, batch, lr, 9, s * kMicro * kB);
    EXPECT_EQ(got.loss, want.loss) << "step " << s;
    EXPECT_EQ(got.grad_norm, want.grad_norm) << "step " << s;
  }
  ASSERT_EQ(a.store().total(), b.store().total());
  EXPECT_EQ(std::memcmp(a.store().values(), b.store().values(), a.store().bytes()), 0);

  // Evaluation: the forward losses summed in micro-batch order over the count.
  fill(batch, kSteps);
  double total = 0;
  for (int64_t k = 0; k < kMicro; ++k) {
    const MicroBatch mb = batch.micro(k);
    total += b.forward({.cpu = cpu, .B = kB, .T = kT}, mb.tokens, mb.targets, 0.0);
  }
  EXPECT_EQ(eval_loss(whole, cpu, batch, 9), total / static_cast<double>(batch.valid_targets()));
}

INSTANTIATE_TEST_SUITE_P(Presets, OneStagePipeline, ::testing::Values("gpt2-tiny", "llama-tiny"));

TEST(TrainStep, NonFiniteLossNamesTheStepMicroBatchAndTensor) {
  const CpuCtx cpu = kernels::make_cpu_ctx(1);
  model::ModelConfig cfg = small("gpt2-tiny");
  model::GPT m(cfg);
  m.init_weights(cpu, 3);
  runtime::ModelChunks whole(m, nullptr, kMicro, kB, kT);
  m.store().find("final_norm.weight")->data()[5] = std::nanf("");
  optim::AdamW opt(whole.optimizer_segments(), adam());
  GlobalBatch batch(kMicro, kB, kT, {});
  fill(batch, 0);
  try {
    train_step(whole, opt, cpu, batch, 6, 1e-3, 9, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step 7: loss is nan (micro-batch 0); first non-finite tensor: "
                                         "final_norm.weight (parameter)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace claw::train
