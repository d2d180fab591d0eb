// Pipeline schedules as data (DESIGN.md principle 5): a pure function of the
// schedule config that returns, for every pipeline stage, the ordered list of
// actions that stage performs in one training step. The executor runs these
// lists; the simulator (pipeline_sim.h), the planner and the tests run the
// very same lists, so what is measured is what is executed.
//
// Notation: p stages (--pipeline-model-parallel-size), m micro-batches per
// step (global batch / (micro batch x DP)), v model chunks per stage. Chunk c
// of stage s holds virtual stage c p + s (Megatron-Core's layout), so the
// model's layers flow 0 -> 1 -> ... -> p-1 -> 0 (next chunk) -> ... and
// V = v p virtual stages in all. F = forward, B = backward (full),
// Bi = backward_input (input gradient only), W = backward_weight.
//
//   gpipe        F0 F1 ... F(m-1) then B0 B1 ... B(m-1) on every stage
//                (Huang et al. 2019). In flight: m micro-batches.
//   1f1b         PipeDream-Flush / Megatron's non-interleaved schedule
//                (Narayanan et al. 2021, section 2.2.1): stage s runs
//                w = min(p - s - 1, m) warm-up forwards, then m - w steady
//                pairs "F(w + i), B(i)", then the w cool-down backwards.
//                In flight: min(p - s, m). Bubble (p - 1)(f + b) per stage.
//   interleaved  interleaved 1F1B (Narayanan et al. 2021, "Efficient
//                Large-Scale Language Model Training on GPU Clusters Using
//                Megatron-LM", section 2.2.2) in Megatron-Core's order: the
//                m v chunk-passes of a stage are numbered k = 0 .. m v - 1;
//                pass k works on chunk (k mod p v) / p (reversed, v - 1 -
//                that, for backward) and micro-batch (k / p v) p + k mod p,
//                i.e. micro-batches go through a chunk in groups of p before
//                the stage moves to its next chunk. Warm-up runs
//                min(2 (p - s - 1) + (v - 1) p, m v) forward passes, or all
//                m v when m == p (then every backward follows every forward);
//                then steady "F(k + warm-up), B(k)" pairs; then cool-down.
//                In flight: warm-up + 1 chunk passes (each 1/v of a stage's
//                layers), or m v without steady pairs; with v = 1 this is not
//                1F1B (the warm-up is 2 (p - s - 1)). Needs m % p == 0
//                (Megatron's restriction). Each pass costs 1/v of a stage's
//                work and the bubble is divided by v. Unlike Megatron, p = 1
//                and p = 2 are accepted: its p > 2 rule (without
//                --overlap-p2p-communication) avoids two transfers between
//                one pair of ranks in one batched p2p call, and here every
//                transfer is its own non-blocking action.
//   zb-h1        ZB-H1 of "Zero Bubble Pipeline Parallelism" (Qi et al. 2023,
//                section 2, the handcrafted schedules): exactly 1F1B's order
//                of F and Bi (so the same in-flight count, which sizes
//                activation memory), with the weight-gradient pass W split
//                off and deferred: stage s runs W(j) right after Bi(j + s),
//                and the last min(s, m) weight passes after the last Bi. The
//                deferred W's shorten the gradient's critical path (a hop
//                costs Bi, not Bi + W) and fill the cool-down bubble; with
//                f = bi = w and m >= p the bubble per stage falls from 1F1B's
//                3 (p - 1) f to (p - 1) f, the paper's (p - 1)(F + B - 2W).
//                The price: stage s keeps the inputs W needs for up to
//                min(p, m) micro-batches (1F1B's stage-0 peak) instead of
//                min(p - s, m).
//
// Transfers. Around each compute action the list carries the transfers it
// needs: recv_activation just before a forward whose input comes from another
// stage and send_activation just after it; recv_grad just before a backward
// (input part) whose output gradient comes from another stage, send_grad just
// after it. A send is non-blocking (posted when reached); a recv marks where
// the data must have arrived (an executor may post the receive earlier and
// wait here). Chunk c's output goes to the stage holding virtual stage
// c p + s + 1: stage s + 1, or stage 0 (chunk c + 1) from the last stage.
// With p = 1 consecutive chunks are on the same stage and nothing is sent.
//
// Pure functions, no state: safe to call from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace claw::parallel {

enum class ScheduleKind { gpipe, one_f_one_b, interleaved, zb_h1 };

// "gpipe", "1f1b", "interleaved", "zb-h1"; anything else throws naming --pipeline-schedule.
ScheduleKind parse_schedule_kind(std::string_view name);
std::string_view to_string(ScheduleKind kind);

enum class ActionKind : uint8_t {
  forward,
  backward,         // input and weight gradients together
  backward_input,   // input gradient only (ZB-H1's B)
  backward_weight,  // weight gradient only (ZB-H1's W); needs backward_input first
  send_activation,
  recv_activation,
  send_grad,
  recv_grad,
};
std::string_view to_string(ActionKind kind);
bool is_compute(ActionKind kind);   // forward or one of the backwards
bool is_transfer(ActionKind kind);  // send_* or recv_*

struct Action {
  ActionKind kind = ActionKind::forward;
  int microbatch = 0;  // 0 .. m-1
  int chunk = 0;       // this stage's model chunk the action belongs to (producer for
                       // send_*, consumer for recv_*), 0 .. v-1
  int peer = -1;       // send_*/recv_*: the other stage; -1 otherwise
  bool operator==(const Action&) const = default;
};
// "F mb3 c1", "recv_grad mb3 c1 <- 2", "send_activation mb0 c0 -> 1".
std::string to_string(const Action& action);

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::one_f_one_b;  // --pipeline-schedule
  int stages = 1;        // --pipeline-model-parallel-size
  int microbatches = 1;  // per step: --global-batch-size / (--micro-batch-size x DP)
  int chunks = 1;        // model chunks per stage (virtual pipeline size); > 1 only for interleaved
                         // (num-layers / (p x --num-layers-per-virtual-pipeline-stage))
  // Throws claw::Error naming the flags: sizes < 1, chunks > 1 without the interleaved
  // schedule, and for interleaved m < p or m % p != 0.
  void validate() const;
};

struct Schedule {
  ScheduleConfig config;
  std::vector<std::vector<Action>> stages;  // stages[s]: stage s's actions, in order
};

// Validates the config and returns every stage's action list.
Schedule make_schedule(const ScheduleConfig& config);

// The layout shared by the schedules, the simulator and the executor.
inline int virtual_stage(int stage, int chunk, int stages) { return chunk * stages + stage; }
inline int stage_of_virtual(int vstage, int stages) { return vstage % stages; }
inline int chunk_of_virtual(int vstage, int stages) { return vstage / stages; }

// Megatron-Core's warm-up forward count for stage s of the interleaved schedule (above).
int interleaved_warmup_passes(int stages, int microbatches, int chunks, int stage);

}  // namespace claw::parallel
