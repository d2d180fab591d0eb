// The cost model: the time of one training step of a layout on a cluster,
// broken down by where it goes, and the figures users judge a run by
// (tokens/s, model and hardware TFLOP/s per device, MFU).
//
// Per micro-batch and block on one rank (N = micro-batch x seq / CP tokens):
//   GEMMs     QKV, attention output, MLP in and out, split by TP; attention
//             scores and values over the causal half of the T x T square;
//             each at peak x the device's efficiency curve for its shape
//             (Device::gemm_fraction); backward = 2x forward (input and
//             weight gradients); full recompute adds one forward.
//   elementwise  norms, dropout, residual adds, activation functions, RoPE:
//             memory-bound passes over the block's tensors (SP divides the
//             residual-stream ones by TP) at the device's memory bandwidth.
//   TP/SP     two all-reduces (or all-gather + reduce-scatter pairs, the
//             same volume) per block in forward and two in backward, ring
//             cost 2 (t-1)/t x bytes / bandwidth + 2 (t-1) x latency, over
//             NVLink when TP fits in a node (Narayanan et al. 2021, 3.2).
//   CP        ring attention passes K and V chunks (dK, dV in backward) CP - 1
//             times, hidden behind the attention compute up to its length.
// Pipeline: per-stage forward/backward costs (first stage: embedding; last:
// the LM head and loss) drive the discrete-event simulator
// (parallel::simulate) on the very schedule the executor runs, with p2p
// transfers as latency, so the bubble, interleaving and uneven stages come
// out of the simulation rather than (p - 1) / m.
// DP/ZeRO: ring all-reduce of the stage's gradients (ZeRO-0), or
// reduce-scatter of gradients + all-gather of parameters (ZeRO-1/2; ZeRO-3
// also gathers per micro-batch), over NVLink inside a node and across nodes
// over as many NICs as the group has members per node; with --overlap-grad-reduce the reduce-scatter hides
// behind the last micro-batch's backward, with --overlap-param-gather the
// gather behind the first forward. Across data centres the reduction is
// hierarchical: reduce-scatter inside each DC, all-reduce of the 1/DP_local
// shard over the inter-DC link (shared by all of a DC's ranks, one RTT per
// ring step), all-gather inside the DC.
// Optimizer: AdamW over the rank's shard, memory-bound.
#pragma once

#include <string>

#include "claw/plan/hardware.h"
#include "claw/plan/layout.h"
#include "claw/plan/memory_model.h"

namespace claw::plan {

struct Cluster {
  Device device;
  int num_devices = 1;
  int devices_per_node = 8;
  int data_centers = 1;
  double inter_dc_bandwidth = 0;  // bytes/s between data centres (each direction, shared by a DC's ranks)
  double inter_dc_rtt = 0;        // seconds
  // Throws naming the flags when the counts do not factor (nodes, DCs).
  void validate() const;
};

struct StepTime {
  double compute = 0;     // GEMMs + elementwise on the busiest stage (recompute included)
  double recompute = 0;   // part of compute re-running forwards
  double tp_comm = 0;     // TP/SP collectives on the busiest stage (on the critical path)
  double cp_comm = 0;     // exposed ring-attention exchange on the busiest stage
  double ep_comm = 0;     // MoE token all-to-alls (dispatch and combine) on the busiest stage
  double bubble = 0;      // pipeline: makespan - the busiest stage's busy time (p2p waits included)
  double dp_comm = 0;     // exposed DP/ZeRO communication
  double dp_comm_total = 0;
  double inter_dc = 0;    // across data centres: the all-reduce of the shards over the link (in dp_comm_total)
  double optimizer = 0;
  double network_cpu = 0; // CPU devices: compute time the DP traffic between nodes takes (Device::network_cpu_s_per_byte)
  double total = 0;       // seconds per step
};

struct Estimate {
  Layout layout;
  StageMemory memory;
  StepTime time;
  double tokens_per_s = 0;
  double model_tflops_per_device = 0;     // model FLOPs only (6N + attention, PaLM), as MFU counts
  double hardware_tflops_per_device = 0;  // including recomputed forwards (Narayanan et al. 2021, eq. 3)
  double mfu = 0;
  bool fits = true;
  std::string why_not;  // when it does not fit: which stage needs how much
};

// Evaluates one layout (validated first). The memory model decides `fits`
// against the device's capacity.
// memory: the layout's peak_memory when already computed.
Estimate estimate(const Job& job, const Layout& layout, const Cluster& cluster, const Precision& prec,
                  const StageMemory* memory = nullptr);

// Across data centres (cluster.data_centers > 1): what the planner advises
// for the best layout. Hierarchical reduction's long-haul all-reduce hides
// behind backward as far as the estimate says; DiLoCo sends the same shards
// once per H steps, unhidden (the outer step waits for them), so a step costs
// the layout without the long haul plus inter_dc / H.
struct DataCenterAdvice {
  double one_dc_step = 0;       // the best layout's step without the long-haul traffic
  double hierarchical_step = 0; // the estimate's
  double hierarchical_fraction = 0;  // one_dc_step / hierarchical_step
  int64_t diloco_inner_steps = 0;    // the smallest H in {10, 50, 100, 500} keeping 95% (0: hierarchical suffices)
  double diloco_fraction = 0;
  std::string summary;               // one line for `claw plan`
};
DataCenterAdvice advise_data_centers(const Estimate& best, const Cluster& cluster);

// Across data centres: the step time of one layout under each way of
// crossing them (`claw plan --json`'s "data_centers"; bench/drivers/bench_dc.py puts
// them beside its measurements).
struct DataCenterStrategies {
  double one_dc = 0;                   // the layout inside one data centre (no long haul)
  double flat = 0;                     // one data-parallel group across the link, overlapped
  double hierarchical = 0;             // instances, reductions after backward
  double hierarchical_overlapped = 0;  // instances, reductions overlapped with backward
  std::vector<std::pair<int64_t, double>> diloco;  // (H, step): --diloco-inner-steps H, overlapped
};
DataCenterStrategies data_center_strategies(const Job& job, const Layout& layout, const Cluster& cluster,
                                            const Precision& prec, const std::vector<int64_t>& diloco_inner_steps,
                                            int diloco_delta_bits = 32);

// Model FLOPs of one step (ModelConfig::flops_per_token x tokens) and the
// recomputed forward FLOPs a layout adds.
double model_flops_per_step(const Job& job);
double recompute_flops_per_step(const Job& job, const Layout& layout);

}  // namespace claw::plan
