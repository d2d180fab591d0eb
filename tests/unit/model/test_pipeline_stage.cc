// A GPT built as one pipeline stage (PipelineStage): stages run in sequence,
// passing activations forward and their gradients back, give the whole
// model's loss and gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "claw/core/error.h"
#include "claw/core/philox.h"
#include "claw/model/config.h"
#include "claw/model/gpt.h"
#include "random_batch.h"

namespace claw::model {
namespace {

const CpuCtx ctx{2};
constexpr int64_t B = 2, T = 16;
constexpr uint64_t kInitSeed = 11;

ModelConfig tiny(const std::string& preset) {
  ModelConfig c = model_preset(preset);
  c.vocab_size = 1000;
  c.num_layers = 4;
  c.hidden_dropout = 0.1;
  return c;
}



StepCtx step() { return StepCtx{.cpu = ctx, .B = B, .T = T, .training = true, .seed = 3, .sample0 = 5}; }

// The stages of `sizes` layers each, initialized like the whole model.
std::vector<std::unique_ptr<GPT>> make_stages(const ModelConfig& c, const std::vector<int64_t>& sizes) {
  std::vector<std::unique_ptr<GPT>> stages;
  int64_t first = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    PipelineStage st{.first_layer = first,
                     .num_layers = sizes[i],
                     .pre_process = i == 0,
                     .post_process = i + 1 == sizes.size()};
    stages.push_back(std::make_unique<GPT>(c, StoreOptions{}, TensorParallel{}, st));
    stages.back()->init_weights(ctx, kInitSeed);
    first += sizes[i];
  }
  return stages;
}

double max_abs(const float* p, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, double(std::abs(p[i])));
  return m;
}

double max_diff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, double(std::abs(a[i] - b[i])));
  return m;
}

int64_t numel(const Param* p) { return p->spec.local_shape().numel(); }

void check_stages_match_whole(const std::string& preset, const std::vector<int64_t>& sizes) {
  SCOPED_TRACE(preset + " split into " + std::to_string(sizes.size()) + " stages, first of " +
               std::to_string(sizes[0]) + " layers");
  const ModelConfig c = tiny(preset);
  const Batch b = random_batch(B * T, c.vocab_size, 4);
  const double scale = 1.0 / (B * T);

  GPT whole(c);
  whole.init_weights(ctx, kInitSeed);
  whole.reserve(B, T);
  whole.store().zero_grads();
  const double loss = whole.forward(step(), b.tokens.data(), b.targets.data(), scale);
  whole.backward(step(), b.tokens.data());

  auto stages = make_stages(c, sizes);
  for (auto& s : stages) {
    s->reserve(B, T);
    s->store().zero_grads();
  }
  double stage_loss = 0;
  Tensor input;  // undefined: the first stage starts from tokens
  for (auto& s : stages) {
    s->forward_stage(step(), b.tokens.data(), input, b.targets.data(), scale, &stage_loss);
    input = s->stage_output(step());
    EXPECT_EQ(input.dtype(), DType::f32);
    EXPECT_EQ(input.shape(), Shape({B * T, c.hidden_size}));
  }
  Tensor output_grad;
  for (size_t i = stages.size(); i-- > 0;) {
    stages[i]->backward_stage(step(), b.tokens.data(), output_grad);
    output_grad = stages[i]->stage_input_grad(step());
  }
  EXPECT_NEAR(stage_loss, loss, 1e-6 * std::abs(loss));

  // Every parameter held by some stage, its values and gradient; the tied
  // word embeddings' gradient is the sum of the first and last stage's copies.
  const std::string word = "embedding.word_embeddings.weight";
  int64_t covered = 0;
  for (Param* p : whole.params()) {
    std::vector<Param*> copies;
    for (auto& s : stages)
      if (Param* q = s->store().find(p->spec.name)) copies.push_back(q);
    SCOPED_TRACE(p->spec.name);
    const bool tied_copy = c.tied() && p->spec.name == word && stages.size() > 1;
    ASSERT_EQ(copies.size(), tied_copy ? 2u : 1u);
    const int64_t n = numel(p);
    std::vector<float> g(copies[0]->gdata(), copies[0]->gdata() + n);
    for (size_t k = 0; k < copies.size(); ++k) {
      ASSERT_EQ(numel(copies[k]), n);
      EXPECT_EQ(max_diff(copies[k]->data(), p->data(), n), 0.0);
      if (k > 0)
        for (int64_t i = 0; i < n; ++i) g[i] += copies[k]->gdata()[i];
    }
    EXPECT_LE(max_diff(g.data(), p->gdata(), n), 1e-5 * max_abs(p->gdata(), n) + 1e-8);
    covered += n * static_cast<int64_t>(copies.size());
  }
  // Nothing but the whole model's parameters (and the tied copy).
  int64_t held = 0;
  for (auto& s : stages) held += s->store().numel();
  EXPECT_EQ(held, covered);
}

TEST(PipelineStage, StagesGiveTheWholeModelsLossAndGradients) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"})
    for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{2, 2}, {1, 3}, {1, 1, 1, 1}})
      check_stages_match_whole(preset, sizes);
}

// A stage's units cover only what it holds, in the order its passes use them.
TEST(PipelineStage, UnitsCoverOnlyTheStage) {
  const ModelConfig c = tiny("gpt2-tiny");  // tied
  auto stages = make_stages(c, {1, 2, 1});
  auto names = [](const GPT& m) {
    std::vector<std::string> out;
    for (const Unit& u : m.units()) out.push_back(u.name);
    return out;
  };
  EXPECT_EQ(names(*stages[0]), (std::vector<std::string>{"embedding", "layers.0"}));
  EXPECT_EQ(names(*stages[1]), (std::vector<std::string>{"layers.1", "layers.2"}));
  EXPECT_EQ(names(*stages[2]), (std::vector<std::string>{"layers.3", "final_norm", "output_layer"}));
  // The last stage's output layer holds the copy of the word embeddings.
  ASSERT_EQ(stages[2]->units()[2].params.size(), 1u);
  EXPECT_EQ(stages[2]->units()[2].params[0]->spec.name, "embedding.word_embeddings.weight");
  EXPECT_EQ(stages[1]->use_order(true), (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(stages[2]->use_order(true), (std::vector<int>{0, 1, 2, 1, 0}));
  EXPECT_EQ(stages[0]->use_order(false), (std::vector<int>{0, 1}));
  for (auto& s : stages) {
    // Every unit's gradient begins and ends exactly once.
    std::vector<int> begun(s->units().size()), ended(s->units().size());
    for (const auto& ev : s->grad_order()) ++(ev.begin ? begun : ended)[ev.unit];
    for (size_t u = 0; u < s->units().size(); ++u) {
      EXPECT_EQ(begun[u], 1);
      EXPECT_EQ(ended[u], 1);
    }
  }
  // The activation arena holds only the stage's layers.
  EXPECT_LT(plan_activations(c, B, T, {}, {}, PipelineStage{.first_layer = 1, .num_layers = 2, .pre_process = false,
                                                               .post_process = false})
                .total(),
            plan_activations(c, B, T).total());
}

TEST(PipelineStage, RejectsAStageOutsideTheModel) {
  const ModelConfig c = tiny("llama-tiny");
  EXPECT_THROW(GPT(c, {}, {}, PipelineStage{.first_layer = 3, .num_layers = 2}), Error);
  EXPECT_THROW(GPT(c, {}, {}, PipelineStage{.first_layer = 1, .num_layers = 3, .pre_process = true}), Error);
  EXPECT_THROW(GPT(c, {}, {}, PipelineStage{.first_layer = 0, .num_layers = 2, .post_process = true}), Error);
}

}  // namespace
}  // namespace claw::model
