#include "claw/train/config.h"

#include "claw/core/error.h"

namespace claw::train {

void TrainConfig::resolve_and_validate() {
  if (micro_batch_size <= 0) fail("--micro-batch-size must be positive, got {}", micro_batch_size);
  if (global_batch_size == 0) global_batch_size = micro_batch_size;
  if (global_batch_size < 0 || global_batch_size % micro_batch_size != 0)
    fail("--global-batch-size {} must be a positive multiple of --micro-batch-size {}", global_batch_size,
         micro_batch_size);
  if (seq_length <= 0) fail("--seq-length must be positive, got {}", seq_length);
  if (train_iters < 0) fail("--train-iters must be >= 0, got {}", train_iters);
  if (eval_interval < 0) fail("--eval-interval must be >= 0 (0 disables evaluation), got {}", eval_interval);
  if (eval_iters < 0) fail("--eval-iters must be >= 0, got {}", eval_iters);
  if (log_interval <= 0) fail("--log-interval must be positive, got {}", log_interval);
  if (num_threads < 0) fail("--num-threads must be >= 0 (0: all available), got {}", num_threads);
  if (peak_gflops < 0) fail("--peak-gflops must be >= 0 (0: measure), got {}", peak_gflops);
}

}  // namespace claw::train
