// The runtime on one process: what it builds (one chunk holding the whole
// model, its engine, the optimizer's segments covering the store), the
// memory check without an optimizer (evaluation), frozen parameters (no
// gradients, no optimizer segments, the plan still the allocation), the
// configuration refused
// with the flags' one-line errors before anything is built, and checkpoint
// loading (a fresh root; parameters saved from one runtime read into another).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "claw/ckpt/checkpoint.h"
#include "claw/comm/world.h"
#include "claw/core/error.h"
#include "claw/runtime/runtime.h"

namespace claw::runtime {
namespace {

namespace fs = std::filesystem;

RuntimeConfig small() {
  RuntimeConfig c;
  c.model = model::model_preset("gpt2-tiny");
  c.model.vocab_size = 500;
  c.model.num_layers = 2;
  c.micro_batch_size = 2;
  c.global_batch_size = 6;
  c.seq_length = 16;
  c.num_threads = 1;
  return c;
}

std::string error_of(RuntimeConfig c) {
  const auto world = comm::World::single();
  try {
    Runtime rt(std::move(c), *world);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Runtime, BuildsTheWholeModelAsOneStageOfOneChunk) {
  const auto world = comm::World::single();
  RuntimeConfig c = small();
  c.training = false;
  Runtime rt(c, *world);
  ModelChunks& m = rt.model();
  ASSERT_EQ(m.chunks().size(), 1u);
  ASSERT_EQ(m.dps().size(), 1u);  // an engine also on one rank
  EXPECT_TRUE(m.first().stage().pre_process && m.first().stage().post_process);
  EXPECT_EQ(m.first().stage().num_layers, 2);
  EXPECT_EQ(m.micro_batches(), 3);
  EXPECT_EQ(m.pp().size(), 1);
  EXPECT_EQ(m.first().reserved_B(), 2);
  int64_t covered = 0;
  for (const model::Segment& s : m.optimizer_segments()) covered += s.n;
  EXPECT_EQ(covered, m.first().store().numel());
  EXPECT_NO_THROW(rt.check_memory(nullptr));
  optim::AdamW opt(m.optimizer_segments(), {});
  EXPECT_NO_THROW(rt.check_memory(&opt));
}

TEST(Runtime, FrozenParametersHaveNoGradientsAndNoOptimizerSegments) {
  const auto world = comm::World::single();
  RuntimeConfig c = small();
  c.freeze = {"layers.*.attention.*", "embedding.position_embeddings.*"};
  Runtime rt(c, *world);
  Runtime all(small(), *world);
  const model::ParamStore& s = rt.model().first().store();
  int64_t frozen = 0;
  for (const model::Param* p : s.params()) {
    const bool match = model::matches_any(c.freeze, p->spec.name);
    EXPECT_EQ(p->spec.trainable, !match) << p->spec.name;
    EXPECT_EQ(p->grad.defined(), !match) << p->spec.name;
    if (match) frozen += p->spec.local_shape().numel();
  }
  ASSERT_GT(frozen, 0);
  EXPECT_EQ(s.frozen_numel(), frozen);
  EXPECT_EQ(s.value_bytes(), all.model().first().store().value_bytes());
  EXPECT_LT(s.grad_bytes(), all.model().first().store().grad_bytes());
  int64_t covered = 0;
  for (const model::Segment& seg : rt.model().optimizer_segments()) {
    EXPECT_TRUE(seg.param->spec.trainable) << seg.param->spec.name;
    covered += seg.n;
  }
  EXPECT_EQ(covered, s.numel() - frozen);
  optim::AdamW opt(rt.model().optimizer_segments(), {});
  EXPECT_NO_THROW(rt.check_memory(&opt));
}

TEST(Runtime, RefusesLayoutsNamingTheFlags) {
  RuntimeConfig c = small();
  c.recompute_layers = 5;
  EXPECT_EQ(error_of(c), "--recompute-num-layers 5 exceeds --num-layers 2");
  c = small();
  c.parallel.decoder_first_pipeline_num_layers = 1;
  EXPECT_NE(error_of(c).find("need --pipeline-model-parallel-size > 1"), std::string::npos);
  c = small();
  c.seq_length = 2048;
  EXPECT_NE(error_of(c).find("--seq-length 2048 exceeds --max-position-embeddings"), std::string::npos);
  c = small();
  c.parallel.dp.zero_stage = 4;
  EXPECT_NE(error_of(c).find("--zero-stage 4"), std::string::npos);
  c = small();
  c.parallel.sizes.tp = 2;
  EXPECT_NE(error_of(c).find("--tensor-model-parallel-size 2"), std::string::npos);
  c = small();
  c.freeze = {"layers.*.attention.*", "layers.*.mlpx.*"};
  EXPECT_NE(error_of(c).find("--freeze 'layers.*.mlpx.*' matches no parameter of this model"), std::string::npos);
  c = small();
  c.freeze = {"*"};
  EXPECT_EQ(error_of(c), "--freeze '*' freezes every parameter: nothing would train");
}

class RuntimeCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("claw_test_runtime_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(RuntimeCheckpoint, FreshRootStartsFromZero) {
  const auto world = comm::World::single();
  Runtime rt(small(), *world);
  const LoadedCheckpoint c = rt.load_checkpoint({.root = dir_.string()}, nullptr);
  EXPECT_FALSE(c.loaded);
}

TEST_F(RuntimeCheckpoint, ParametersLoadIntoAnotherRuntimeWithoutAnOptimizer) {
  const auto world = comm::World::single();
  RuntimeConfig a_cfg = small(), b_cfg = small();
  b_cfg.seed = 99;  // different initial values
  b_cfg.training = false;
  Runtime a(a_cfg, *world);
  {
    ckpt::Saver saver(a.parallel_state().world(), {.root = dir_.string()});
    saver.save(a.checkpoint_shards(nullptr), {.iteration = 4, .state = {{"consumed_train_samples", 24}}});
  }
  Runtime b(b_cfg, *world);
  const model::ParamStore& sa = a.model().first().store();
  const model::ParamStore& sb = b.model().first().store();
  ASSERT_NE(std::memcmp(sa.values(), sb.values(), sa.bytes()), 0);
  const LoadedCheckpoint c = b.load_checkpoint({.root = dir_.string()}, nullptr);
  EXPECT_TRUE(c.loaded);
  EXPECT_EQ(c.iteration, 4);
  EXPECT_FALSE(c.optimizer);
  EXPECT_EQ(c.state.value("consumed_train_samples", 0), 24);
  EXPECT_GT(c.bytes_read, 0u);
  EXPECT_EQ(std::memcmp(sa.values(), sb.values(), sa.bytes()), 0);
}

}  // namespace
}  // namespace claw::runtime
