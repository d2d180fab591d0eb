// A source of fixed-length training samples: what the trainer reads batches
// from, whether one GPT dataset split or a weighted blend of several.
//
// Position p (0 <= p < num_samples()) of a source is its p-th sample in
// training order (already shuffled): step s of a run with global batch GB
// reads positions [s*GB, (s+1)*GB), and data-parallel rank r of R reads its
// contiguous slice [s*GB + r*GB/R, s*GB + (r+1)*GB/R) of them.
//
// Thread-safety: implementations are immutable after construction;
// get_sample and get_batch may run concurrently.
#pragma once

#include <cstdint>

namespace claw::data {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t num_samples() const = 0;
  virtual int64_t seq_length() const = 0;
  // The S + 1 tokens of the sample at `position`.
  virtual void get_sample(int64_t position, int32_t* tokens) const = 0;

  // Sources with a loss mask (SFT data, sft_dataset.h): which of the
  // sample's S + 1 tokens are learned (1) rather than context (0).
  virtual bool has_loss_mask() const { return false; }
  virtual void get_loss_mask(int64_t position, uint8_t* mask) const;  // default: all learned

  // Samples at [first, first + count): tokens[b*S + t] is input t of the
  // b-th and targets[b*S + t] its next token, or -1 (no loss) where a loss
  // mask says that token is not learned. Both buffers hold count * S ids.
  void get_batch(int64_t first, int64_t count, int32_t* tokens, int32_t* targets) const;
};

}  // namespace claw::data
