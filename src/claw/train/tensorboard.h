// TensorBoard event files (--tensorboard-dir): the scalars of the JSONL
// metrics stream, written by rank 0 into DIR/events.out.tfevents.<unix
// seconds>.<hostname> so `tensorboard --logdir` plots them without Python in
// the training job. A directory is one run to TensorBoard: give each run its
// own. Tags, named as Megatron-LM names them where it has the metric:
//   lm loss                   loss (JSONL `loss`)
//   lm loss validation        validation loss, on evaluation steps (`val_loss`)
//   learning-rate             `lr`
//   grad-norm                 `grad_norm`
//   throughput/tokens_per_s   `tokens_per_s`
//   mfu                       `mfu` (fraction of --peak-gflops)
//   mem-max-allocated-bytes   `mem_bytes`: the process's peak RSS
// Each at the step number of the JSONL record; values are float32, as the
// format's simple_value is.
//
// The file is a sequence of records: u64 LE length, u32 masked CRC-32C of
// those 8 bytes, the data, u32 masked CRC-32C of the data. Each record's data
// is an Event protobuf, encoded here by hand: the first one carries
// file_version "brain.Event:2", each later one a step's Summary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace claw::train {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum the
// record framing uses; computed by ISA-L (libisal).
uint32_t crc32c(const void* data, size_t n);
// The framing stores masked CRCs, so that a CRC of data that itself holds
// CRCs does not degenerate.
uint32_t mask_crc32c(uint32_t crc);
// One record of the file: `data` with its length and their masked CRCs.
std::string frame_record(const std::string& data);

// The Event protos the writer frames, `wall_time` in seconds since 1970: the
// file's first event (file_version "brain.Event:2"), and a step's scalars
// (one Summary.Value with simple_value per tag, in the order given).
std::string version_event(double wall_time);
std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& values);

class TensorBoardWriter {
 public:
  // Creates `dir` if needed and opens a new event file in it; fails naming
  // --tensorboard-dir when it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event at `step` with a simple_value per (tag, value); flushed, so a
  // live TensorBoard sees each step as it finishes.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::FILE* f_ = nullptr;
  std::string path_;
};

}  // namespace claw::train
