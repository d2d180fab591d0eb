// The calibrated GEMM peak's cache: keying, reuse, merging of new shapes,
// raising. The measurement is a fake that counts its calls and returns
// fixed figures, so nothing here depends on the machine's speed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <unistd.h>

#include "claw/kernels/cpu/peak.h"

namespace claw::kernels {
namespace {

namespace fs = std::filesystem;

struct FakeMeasure {
  std::map<std::string, double> gflops;  // by shape name; others 100
  std::map<std::string, int> calls;
  GemmMeasure fn() {
    return [this](const GemmShape& s, double) {
      ++calls[s.name()];
      auto it = gflops.find(s.name());
      return it == gflops.end() ? 100.0 : it->second;
    };
  }
  int total() const {
    int n = 0;
    for (const auto& [k, v] : calls) n += v;
    return n;
  }
};

class PeakCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = (fs::temp_directory_path() / ("claw_peak_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name()))
              .string();
    fs::remove_all(dir);
    opt.dir = dir;
    opt.seconds = 0;
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string dir;
  PeakCacheOptions opt;
  const PeakKey key{"Test CPU @ 1GHz", "SkylakeX", 2};
  const std::vector<GemmShape> model{{1024, 2304, 768}, {1024, 768, 3072}};
};

TEST_F(PeakCache, FirstRunMeasuresEveryShapeAndTakesTheBest) {
  FakeMeasure m;
  m.gflops = {{"1024x2304x768", 180}, {"1024x768x3072", 150}, {"2048x2048x2048", 170}};
  Peak p = calibrated_gemm_peak(key, model, opt, m.fn());
  EXPECT_DOUBLE_EQ(p.gflops, 180);
  EXPECT_EQ(m.total(), 3);
  EXPECT_EQ(m.calls["2048x2048x2048"], 1);  // always among the shapes
  EXPECT_EQ(p.cache_file, (fs::path(dir) / "gemm_peak.json").string());
  EXPECT_TRUE(fs::exists(p.cache_file));
  EXPECT_NE(p.provenance.find("measured now"), std::string::npos) << p.provenance;
  EXPECT_NE(p.provenance.find("top 1024x2304x768"), std::string::npos) << p.provenance;
}

TEST_F(PeakCache, SecondRunReusesTheCacheWithoutMeasuring) {
  FakeMeasure first;
  first.gflops = {{"1024x2304x768", 180}};
  const double a = calibrated_gemm_peak(key, model, opt, first.fn()).gflops;
  FakeMeasure second;
  second.gflops = {{"1024x2304x768", 90}};  // a loaded machine now: must not lower the figure
  Peak p = calibrated_gemm_peak(key, model, opt, second.fn());
  EXPECT_EQ(second.total(), 0);
  EXPECT_DOUBLE_EQ(p.gflops, a);
  EXPECT_NE(p.provenance.find("calibrated "), std::string::npos) << p.provenance;
}

TEST_F(PeakCache, KeyedByCpuCoreAndThreads) {
  FakeMeasure m;
  m.gflops = {{"2048x2048x2048", 300}};
  calibrated_gemm_peak(key, model, opt, m.fn());
  for (const PeakKey& other : {PeakKey{key.cpu, key.blas_core, 1}, PeakKey{key.cpu, "Haswell", 2},
                               PeakKey{"Other CPU", key.blas_core, 2}}) {
    FakeMeasure n;
    n.gflops = {{"2048x2048x2048", 50}};
    EXPECT_DOUBLE_EQ(calibrated_gemm_peak(other, model, opt, n.fn()).gflops, 100) << other.id();
    EXPECT_EQ(n.total(), 3) << other.id();
  }
  FakeMeasure again;
  EXPECT_DOUBLE_EQ(calibrated_gemm_peak(key, model, opt, again.fn()).gflops, 300);
  EXPECT_EQ(again.total(), 0);
}

// A bf16 (or FP8) step faster than the fp32 SGEMM figure raises its own
// entry only: fp32 runs keep dividing by what SGEMM measures.
TEST_F(PeakCache, AStepRaisesOnlyThePeakOfItsArithmetic) {
  FakeMeasure m;
  m.gflops = {{"1024x2304x768", 240}};
  const double fp32 = calibrated_gemm_peak(key, model, opt, m.fn()).gflops;
  PeakKey bf16 = key;
  bf16.arithmetic = "bf16-onednn";
  EXPECT_NE(bf16.id(), key.id());
  EXPECT_DOUBLE_EQ(calibrated_gemm_peak(bf16, model, opt, m.fn()).gflops, fp32);  // SGEMM for its start
  EXPECT_DOUBLE_EQ(raise_gemm_peak(bf16, 554, "training step 66", opt), 554);
  FakeMeasure none;
  EXPECT_DOUBLE_EQ(calibrated_gemm_peak(key, model, opt, none.fn()).gflops, fp32);
  EXPECT_DOUBLE_EQ(calibrated_gemm_peak(bf16, model, opt, none.fn()).gflops, 554);
  EXPECT_EQ(none.total(), 0);
}

TEST_F(PeakCache, NewShapesAreMeasuredAndMerged) {
  FakeMeasure m;
  calibrated_gemm_peak(key, model, opt, m.fn());
  FakeMeasure n;
  n.gflops = {{"256x50304x768", 250}};
  std::vector<GemmShape> more = model;
  more.push_back({256, 50304, 768});
  Peak p = calibrated_gemm_peak(key, more, opt, n.fn());
  EXPECT_EQ(n.total(), 1);
  EXPECT_EQ(n.calls["256x50304x768"], 1);
  EXPECT_DOUBLE_EQ(p.gflops, 250);
  EXPECT_NE(p.provenance.find("1 new shape(s)"), std::string::npos) << p.provenance;
  FakeMeasure none;
  EXPECT_DOUBLE_EQ(calibrated_gemm_peak(key, model, opt, none.fn()).gflops, 250);  // a subset: nothing new
  EXPECT_EQ(none.total(), 0);
}

TEST_F(PeakCache, RaisingKeepsAnUpperBound) {
  FakeMeasure m;
  calibrated_gemm_peak(key, model, opt, m.fn());  // 100
  EXPECT_DOUBLE_EQ(raise_gemm_peak(key, 120, "training step 3", opt), 120);
  FakeMeasure n;
  Peak p = calibrated_gemm_peak(key, model, opt, n.fn());
  EXPECT_DOUBLE_EQ(p.gflops, 120);
  EXPECT_EQ(n.total(), 0);
  EXPECT_NE(p.provenance.find("training step 3"), std::string::npos) << p.provenance;
  // A raise below the cached figure leaves it.
  EXPECT_DOUBLE_EQ(raise_gemm_peak(key, 110, "training step 4", opt), 120);
  EXPECT_DOUBLE_EQ(calibrated_gemm_peak(key, model, opt, n.fn()).gflops, 120);
}

TEST_F(PeakCache, RemeasuringOnlyRaises) {
  FakeMeasure m;
  m.gflops = {{"2048x2048x2048", 200}};
  calibrated_gemm_peak(key, model, opt, m.fn());
  opt.remeasure = true;
  FakeMeasure lower;  // a loaded machine: every shape slower now
  lower.gflops = {{"2048x2048x2048", 50}, {"1024x2304x768", 50}, {"1024x768x3072", 50}};
  Peak p = calibrated_gemm_peak(key, model, opt, lower.fn());
  EXPECT_EQ(lower.total(), 3);
  EXPECT_DOUBLE_EQ(p.gflops, 200);
  FakeMeasure higher;
  higher.gflops = {{"1024x768x3072", 260}};
  EXPECT_DOUBLE_EQ(calibrated_gemm_peak(key, model, opt, higher.fn()).gflops, 260);
  opt.remeasure = false;
  FakeMeasure none;
  EXPECT_DOUBLE_EQ(calibrated_gemm_peak(key, model, opt, none.fn()).gflops, 260);
  EXPECT_EQ(none.total(), 0);
}

TEST_F(PeakCache, CorruptCacheIsReplaced) {
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / "gemm_peak.json") << "{ not json";
  FakeMeasure m;
  EXPECT_DOUBLE_EQ(calibrated_gemm_peak(key, model, opt, m.fn()).gflops, 100);
  EXPECT_EQ(m.total(), 3);
  FakeMeasure n;
  calibrated_gemm_peak(key, model, opt, n.fn());
  EXPECT_EQ(n.total(), 0);
}

TEST_F(PeakCache, UnwritableCacheStillGivesAFigure) {
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / "blocker") << "a file, not a directory";
  opt.dir = (fs::path(dir) / "blocker").string();
  FakeMeasure m;
  Peak p = calibrated_gemm_peak(key, model, opt, m.fn());
  EXPECT_DOUBLE_EQ(p.gflops, 100);
  EXPECT_TRUE(p.cache_file.empty());
  EXPECT_NE(p.provenance.find("no cache"), std::string::npos) << p.provenance;
}

TEST(PeakMeasure, RealGemmIsPositive) {
  EXPECT_GT(measure_gemm_gflops({64, 96, 32}, 0.0), 0.0);
}

}  // namespace
}  // namespace claw::kernels
