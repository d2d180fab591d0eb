// The JSONL metrics stream (--metrics-file): one JSON object per training
// step, flushed as it is written so a crashed run keeps every finished step.
// Keys: step, loss, lr, grad_norm, tokens_per_s, mfu, mem_bytes; plus
// val_loss on steps that ran validation, step_ms and tokens. The same
// scalars can also go to TensorBoard (--tensorboard-dir, see tensorboard.h).
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace claw::train {

class TensorBoardWriter;

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // Opens (truncates) `path`; an empty path writes nothing. A non-empty
  // `tensorboard_dir` also writes each record's scalars as TensorBoard events.
  explicit MetricsWriter(const std::string& path, const std::string& tensorboard_dir = {});
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void write(const nlohmann::json& record);

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace claw::train
