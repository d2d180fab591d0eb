#include "claw/train/metrics.h"

#include <cerrno>
#include <cstring>
#include <fstream>
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

MetricsWriter::MetricsWriter(const std::string& path, const std::string& tensorboard_dir, int64_t resumed_at)
    : path_(path) {
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir);
  if (path.empty()) return;
  if (resumed_at > 0) {
    // The steps the resumed run keeps, written whole under a temporary name
    // and renamed over the file (a crash here leaves the old file), then
    // appended to. A torn last line of a killed attempt does not parse: dropped.
    std::string kept;
    if (std::ifstream in(path); in)
      for (std::string line; std::getline(in, line);) {
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
            j["step"].get<int64_t>() <= resumed_at)
          kept += line + "\n";
      }
    const std::string tmp = path + ".tmp";
    std::FILE* t = std::fopen(tmp.c_str(), "w");
    if (!t || std::fwrite(kept.data(), 1, kept.size(), t) != kept.size() || std::fclose(t) != 0 ||
        std::rename(tmp.c_str(), path.c_str()) != 0)
      fail("--metrics-file {}: cannot rewrite it for the resumed run: {}", path, std::strerror(errno));
  }
  f_ = std::fopen(path.c_str(), resumed_at > 0 ? "a" : "w");
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
