#include "claw/train/metrics.h"

#include <cerrno>
#include <cstring>

#include "claw/core/error.h"

namespace claw::train {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  if (path.empty()) return;
  f_ = std::fopen(path.c_str(), "w");
  if (!f_) fail("--metrics-file {}: cannot open for writing: {}", path, std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!f_) return;
  std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
    fail("--metrics-file {}: write failed: {}", path_, std::strerror(errno));
}

}  // namespace claw::train
