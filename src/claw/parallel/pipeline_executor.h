// Runs one pipeline stage's action list (pipeline_schedule.h) for a training
// step: forwards and backwards of the stage's model chunks on the
// micro-batches, and the point-to-point transfers between stages.
//
// Each model chunk is a model::GPT built as a PipelineStage. It holds one set
// of saved activations per micro-batch that can be in flight on it at once
// under the schedule (slots_needed: a walk over the action list, so
// activation memory follows the schedule, not the micro-batch count). A
// micro-batch takes a slot at its forward (or at the receive before it) and
// gives it back after its backward.
//
// Transfers: a send copies its data (the slot's output activation, or the
// input gradient from the shared scratch) into a buffer of its own and is
// non-blocking; the buffer returns to a pool when the send completes, and the
// step waits for all of them at its end. A rank never blocks on its own send
// mid-step: an MPI send of this size completes only once the receiver has
// posted the receive, which the receiver's schedule may place after work that
// waits on this rank (a cycle the schedule itself does not have). Receives
// land in the slot's input buffer (activations) or output buffer (gradients:
// the output activation is dead by then); those the next computation needs
// are posted before the current one runs and waited where the schedule puts
// them. Tags name the micro-batch, the receiving virtual stage and the
// direction, so transfers of different micro-batches and chunks between the
// same two stages never match wrongly.
//
// ZB-H1's split backward: backward_input runs the stage's backward with
// StepCtx::defer_weight_grads set, so every linear layer's weight-gradient
// GEMM is recorded (with copies of its operands) instead of run, and the
// activation slot is released; backward_weight runs the recorded GEMMs. The
// lists come from a pool, so their memory follows the schedule's pending-W
// count. Everything else (norms, embeddings, the output layer) is computed in
// the input pass.
//
// Data parallelism: given each chunk's engine, the executor tells it, before
// every computation on a micro-batch, whether that is the step's last
// micro-batch (DataParallel::begin_micro_batch), which is when a bucket's
// gradients become final. With one stage and one chunk the 1F1B list is
// "forward k, backward k" for each micro-batch, so the engine sees exactly
// the sequence of a plain gradient-accumulation loop and can overlap its
// reductions with the backward passes; with several stages (where a
// micro-batch's backward may be split, ZB-H1) the caller keeps the engines
// to reductions after the step (no overlap, ZeRO 0 or 1).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "claw/comm/group.h"
#include "claw/comm/work.h"
#include "claw/model/gpt.h"
#include "claw/parallel/data_parallel.h"
#include "claw/parallel/pipeline_schedule.h"

namespace claw::parallel {

struct PipelineMicroBatch {
  model::StepCtx ctx;
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
};

class PipelineExecutor {
 public:
  // chunks[c]: this stage's model for chunk c (virtual stage c p + stage);
  // pp: the pipeline group (group rank = stage). Reserves each chunk's
  // activation slots for micro-batches of [B, T]. engines: empty, or
  // engines[c] is chunk c's data-parallel engine.
  PipelineExecutor(std::vector<model::GPT*> chunks, comm::Group& pp, Schedule schedule, int64_t B, int64_t T,
                   model::Recompute recompute = {}, std::vector<DataParallel*> engines = {});

  // Activation sets chunk c of `stage` needs: the most micro-batches
  // forwarded on it and not yet backwarded at any point of the list.
  static std::vector<int> slots_needed(const Schedule& schedule, int stage);

  // Runs this stage's actions for one step; micro(k) describes micro-batch k.
  // Gradients accumulate into the chunks' stores. Returns the sum of token
  // losses on the last stage, 0 elsewhere. on_loss, if set, sees each
  // micro-batch's loss sum on the last stage right after its forward (the
  // saved activations are still those of that micro-batch).
  double run(const std::function<PipelineMicroBatch(int)>& micro, double dloss_scale,
             const std::function<void(int microbatch, double loss)>& on_loss = {});
  // Forward only (evaluation), `microbatches` of them in order, each through
  // the stage's chunks in turn; returns the loss sum on the last stage.
  double run_forward(const std::function<PipelineMicroBatch(int)>& micro, int microbatches);

  // Timing of the last run(): wall time, time in forward and in backward
  // computations (the rest is waiting on receives and bookkeeping), and the
  // count of each.
  struct StepTiming {
    double wall_s = 0, forward_s = 0, backward_s = 0, weight_s = 0;  // backward_s: full or input-gradient passes
    int forwards = 0, backwards = 0, weights = 0;
    double busy_s() const { return forward_s + backward_s + weight_s; }
    double idle_s() const { return wall_s - busy_s(); }
  };
  const StepTiming& last_timing() const { return timing_; }

  const Schedule& schedule() const { return schedule_; }
  const std::vector<model::GPT*>& chunks() const { return chunks_; }

 private:
  int acquire(int chunk, int mb);
  // A backward action of run(): the whole backward, its input-gradient half
  // (the weight-gradient GEMMs deferred) or the deferred half.
  void run_backward(const Action& a, const PipelineMicroBatch& mb);
  int64_t tag(int mb, int vstage, bool grad) const;
  // Point-to-point transfers of a stage boundary tensor (its dtype and
  // element count): a send copies it into a buffer of its own first (with
  // its last row zeroed for the mutation drop-pp-row, tests only).
  void send(const Tensor& t, int peer, int64_t tag, bool drop_last_row = false);
  void recv(const Tensor& t, int peer, int64_t tag);
  comm::Work recv_async(const Tensor& t, int peer, int64_t tag);
  void reap_sends(bool wait_all);
  std::vector<model::GPT*> chunks_;
  std::vector<DataParallel*> engines_;  // per chunk, or empty
  comm::Group& pp_;
  Schedule schedule_;
  int stage_;
  std::vector<std::vector<int>> slot_of_;       // [chunk][micro-batch] -> slot, -1 none
  std::vector<std::vector<int>> free_;          // [chunk] free slots
  struct Outgoing {
    comm::Work work;
    std::vector<uint8_t> data;
  };
  std::vector<Outgoing> outgoing_;           // sends in flight
  std::vector<std::vector<uint8_t>> spare_;  // buffers of completed sends, for reuse
  std::vector<int> slots_;                   // [chunk] activation sets
  StepTiming timing_;
  // Training steps run, and whether this one's first activation send still
  // loses its last row (the mutation drop-pp-row:STEP, tests only).
  int64_t runs_ = 0;
  bool drop_row_ = false;
  std::vector<std::unique_ptr<model::DeferredWeightGrads>> deferred_;  // pool of weight-gradient lists
  std::vector<int> free_deferred_;
  std::vector<std::vector<int>> deferred_of_;  // [chunk][micro-batch] -> pool index, -1 none
};

}  // namespace claw::parallel
