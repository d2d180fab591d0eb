// The JSONL metrics stream (--metrics-file): one JSON object per training
// step, flushed as it is written so a crashed run keeps every finished step.
// Keys: step, loss, lr, grad_norm, tokens_per_s, mfu, mem_bytes; plus
// val_loss on steps that ran validation, step_ms and tokens. The same
// scalars can also go to TensorBoard (--tensorboard-dir, see tensorboard.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace claw::train {

class TensorBoardWriter;

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // Opens `path`; an empty path writes nothing. A non-empty
  // `tensorboard_dir` also writes each record's scalars as TensorBoard events.
  // A fresh run (`resumed_at` 0) truncates the file; a run resumed from
  // iteration `resumed_at` keeps the records of steps up to it (an earlier
  // attempt's, under `claw launch`) and drops later ones, which it runs again,
  // so the file holds every step once.
  explicit MetricsWriter(const std::string& path, const std::string& tensorboard_dir = {}, int64_t resumed_at = 0);
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
