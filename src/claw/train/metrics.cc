#include "claw/train/metrics.h"

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "claw/core/error.h"
#include "claw/train/tensorboard.h"

namespace claw::train {

namespace {

// JSONL key -> TensorBoard tag (documented in tensorboard.h).
constexpr std::pair<const char*, const char*> kTensorBoardTags[] = {
    {"loss", "lm loss"},
    {"val_loss", "lm loss validation"},
    {"lr", "learning-rate"},
    {"grad_norm", "grad-norm"},
    {"tokens_per_s", "throughput/tokens_per_s"},
    {"mfu", "mfu"},
    {"mem_bytes", "mem-max-allocated-bytes"},
};

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, const std::string& tensorboard_dir) : path_(path) {
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir);
  if (path.empty()) return;
  f_ = std::fopen(path.c_str(), "w");
  if (!f_) fail("--metrics-file {}: cannot open for writing: {}", path, std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (tensorboard_) {
    std::vector<std::pair<std::string, double>> values;
    for (const auto& [key, tag] : kTensorBoardTags)
      if (const auto it = record.find(key); it != record.end() && it->is_number())
        values.emplace_back(tag, it->get<double>());
    tensorboard_->add_scalars(record.value("step", int64_t{0}), values);
  }
  if (!f_) return;
  std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
    fail("--metrics-file {}: write failed: {}", path_, std::strerror(errno));
}

}  // namespace claw::train
