#include "claw/plan/cost_model.h"

#include <algorithm>
#include <utility>
#include <vector>
#include <cmath>

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/model/tensor_parallel.h"
#include "claw/parallel/data_parallel.h"
#include "claw/parallel/pipeline_sim.h"

namespace claw::plan {

void Cluster::validate() const {
  if (num_devices < 1) fail("--num-gpus must be at least 1, got {}", num_devices);
  if (devices_per_node < 1) fail("--gpus-per-node must be at least 1, got {}", devices_per_node);
  if (num_devices > devices_per_node && num_devices % devices_per_node != 0)
    fail("--num-gpus {} is not a whole number of nodes of --gpus-per-node {}", num_devices, devices_per_node);
  if (data_centers < 1) fail("--data-centers must be at least 1, got {}", data_centers);
  if (data_centers > 1) {
    const int nodes = std::max(1, num_devices / devices_per_node);
    if (nodes % data_centers != 0)
      fail("--data-centers {} does not divide the {} nodes (--num-gpus {} / --gpus-per-node {})", data_centers, nodes,
           num_devices, devices_per_node);
    if (!(inter_dc_bandwidth > 0)) fail("--data-centers {} needs --inter-dc-gbps > 0", data_centers);
    if (!(inter_dc_rtt >= 0)) fail("--inter-dc-rtt-ms must not be negative");
  }
}

namespace {

constexpr double kCausal = 0.5;  // causal attention computes half the T x T square

// Ring collectives over `ranks` ranks (Patarasuk & Yuan; NCCL's ring): an
// all-reduce moves 2 (n-1)/n of the buffer through each link in 2 (n-1)
// steps, a reduce-scatter or all-gather (n-1)/n in n-1 steps.
double ring_all_reduce(double bytes, int ranks, double bw, double lat) {
  if (ranks <= 1) return 0;
  const double n = ranks;
  return 2 * (n - 1) / n * bytes / bw + 2 * (n - 1) * lat;
}
double ring_gather(double bytes, int ranks, double bw, double lat) {
  if (ranks <= 1) return 0;
  const double n = ranks;
  return (n - 1) / n * bytes / bw + (n - 1) * lat;
}

struct Link {
  double bw, lat;
};
// The link of a group whose members are `stride` ranks apart within `extent`
// consecutive ranks. Inside a node: NVLink. Across nodes a ring (NCCL's, one
// channel per NIC) crosses each node boundary once per channel, so the k
// members a node holds drive k NICs at once: k x the per-NIC bandwidth, up to
// NVLink's (a DGX A100's 8 x 200 Gb/s give NCCL's ~190 GB/s bus bandwidth).
Link link_for(const Cluster& c, int extent, int stride = 1) {
  if (extent <= c.devices_per_node) return {c.device.intra_node_bandwidth, c.device.intra_node_latency};
  const int k = std::max(1, c.devices_per_node / std::max(1, stride));
  return {std::min(c.device.intra_node_bandwidth, k * c.device.inter_node_bandwidth), c.device.inter_node_latency};
}

// Seconds of one micro-batch's pass over parts of a stage on one rank.
struct PassCost {
  double gemm = 0, elementwise = 0, tp = 0, cp = 0, ep = 0, attention = 0;
  double compute() const { return gemm + elementwise; }
  double total() const { return gemm + elementwise + tp + cp + ep; }
};

class BlockCosts {
 public:
  BlockCosts(const Job& job, const Layout& l, const Cluster& c, const Precision& p) : l_(l), c_(c), p_(p) {
    const model::ModelConfig& m = job.model;
    const model::TpDims dims{l.tp, l.sequence_parallel};
    peak_ = c.device.peak_flops(p.compute);
    Tfull_ = static_cast<double>(job.seq_length);
    N_ = static_cast<double>(l.micro_batch_size) * Tfull_ / l.cp;
    C_ = static_cast<double>(m.hidden_size);
    D_ = static_cast<double>(m.head_dim());
    H_ = static_cast<double>(dims.heads(m));
    G_ = static_cast<double>(dims.kv_groups(m));
    F_ = static_cast<double>(dims.ffn(m));
    Vt_ = static_cast<double>(dims.vocab_rows(m));
    rows_ = l.sequence_parallel && l.tp > 1 ? N_ / l.tp : N_;
    swiglu_ = m.gated_mlp();
    tp_link_ = link_for(c, l.tp);
    cp_link_ = link_for(c, l.tp * l.cp, l.tp);
    if (m.moe.enabled()) {
      moe_share_ = static_cast<double>(m.moe.num_moe_layers(m.num_layers)) / static_cast<double>(m.num_layers);
      E_ = static_cast<double>(m.moe.num_experts);
      k_ = static_cast<double>(m.moe.router_topk);
      Fe_ = static_cast<double>(m.moe_ffn());
      Fs_ = static_cast<double>(m.moe.shared_expert_intermediate_size) / l.tp;
      ep_link_ = link_for(c, l.expert_tp() * l.ep, l.expert_tp());  // the expert grid's EP group
    }
  }

  double gemm(double M, double N, double K) const {
    return 2 * M * N * K / (peak_ * c_.device.gemm_fraction(M, N, K, p_.compute));
  }
  // One block's forward.
  PassCost block_forward() const {
    PassCost pc;
    const double up = swiglu_ ? 2 : 1;
    const double dense_mlp = gemm(N_, F_ * up, C_) + gemm(N_, C_, F_);
    pc.gemm = gemm(N_, (H_ + 2 * G_) * D_, C_) + gemm(N_, C_, H_ * D_) + (1 - moe_share_) * dense_mlp;
    if (moe_share_ > 0) {
      // A MoE layer on this rank's rows: the router, k expert FFNs per token
      // (balanced loads: each rank's experts receive rows x k rows), the
      // shared expert (TP-split like a dense MLP), and two all-to-alls (the
      // dispatch and the combine) of rows x k x C values, (EP - 1) / EP of
      // them leaving the rank.
      const double M = rows_ * k_;
      double moe = gemm(rows_, E_, C_) + gemm(M, Fe_ * up, C_) + gemm(M, C_, Fe_);
      if (Fs_ > 0) moe += gemm(N_, Fs_ * up, C_) + gemm(N_, C_, Fs_);
      pc.gemm += moe_share_ * moe;
      if (l_.ep > 1) {
        const double bytes = M * C_ * p_.activation_bytes * (l_.ep - 1) / l_.ep;
        pc.ep = moe_share_ * 2 * (bytes / ep_link_.bw + (l_.ep - 1) * ep_link_.lat);
      }
    }
    // Scores and weighted values per head: [T/cp, D] x [D, T] and [T/cp, T] x [T, D], causal half.
    const double per_seq = N_ / l_.micro_batch_size;
    // Flash-style kernels skip the masked half; unfused ones compute the whole square and pass over the
    // materialised scores: write, scaled-masked softmax read + write, dropout read + write + mask, read by
    // the second GEMM (13 bytes per element at 16 bits; the backward's passes are counted by the 2x below).
    pc.attention = (p_.flash_attention ? kCausal : 1.0) * l_.micro_batch_size * H_ *
                   (gemm(per_seq, Tfull_, D_) + gemm(per_seq, D_, Tfull_));
    if (!p_.flash_attention)
      pc.attention += 13.0 * l_.micro_batch_size * H_ * per_seq * Tfull_ / c_.device.memory_bandwidth;
    pc.gemm += pc.attention;
    // Memory-bound passes (reads + writes, in elements): two norms (2 each), two dropout + residual adds
    // (4 each, masks included), RoPE and the attention layout over q/k/v (4), the activation function (3 for
    // GELU on F, 4 for SwiGLU's two inputs and output), attention statistics (negligible).
    double elems = 12 * rows_ * C_ + 4 * N_ * (H_ + 2 * G_) * D_ + (1 - moe_share_) * (swiglu_ ? 4 : 3) * N_ * F_;
    // MoE: the activation over the dispatched rows, and the gather, permute and combine copies.
    if (moe_share_ > 0) elems += moe_share_ * ((swiglu_ ? 4 : 3) * rows_ * k_ * Fe_ + 6 * rows_ * k_ * C_);
    pc.elementwise = elems * p_.activation_bytes / c_.device.memory_bandwidth;
    // Two TP collectives of the block's [N, C] output pieces.
    pc.tp = 2 * ring_all_reduce(N_ * C_ * p_.activation_bytes, l_.tp, tp_link_.bw, tp_link_.lat);
    // Ring attention: K and V chunks of this rank's G groups go round CP - 1 times.
    if (l_.cp > 1) {
      const double bytes = (l_.cp - 1) * 2 * N_ * G_ * D_ * p_.activation_bytes;
      pc.cp = std::max(0.0, bytes / cp_link_.bw + (l_.cp - 1) * cp_link_.lat - pc.attention);
    }
    return pc;
  }
  // The LM head and loss on the last stage (forward), the embedding on the first.
  PassCost head_forward() const {
    PassCost pc;
    pc.gemm = gemm(N_, Vt_, C_);
    pc.elementwise = (2 * rows_ * C_ + 3 * N_ * Vt_) * p_.activation_bytes / c_.device.memory_bandwidth;
    pc.tp = 3 * ring_all_reduce(N_ * 8, l_.tp, tp_link_.bw, tp_link_.lat);  // max, sum, target logit per token
    return pc;
  }
  PassCost embedding_forward() const {
    PassCost pc;
    pc.elementwise = 3 * rows_ * C_ * p_.activation_bytes / c_.device.memory_bandwidth;
    pc.tp = ring_all_reduce(N_ * C_ * p_.activation_bytes, l_.tp, tp_link_.bw, tp_link_.lat);
    return pc;
  }
  // Bytes sent between pipeline stages per micro-batch.
  double p2p_bytes() const { return rows_ * C_ * p_.activation_bytes; }

 private:
  const Layout& l_;
  const Cluster& c_;
  const Precision& p_;
  double peak_, Tfull_, N_, C_, D_, H_, G_, F_, Vt_, rows_;
  double moe_share_ = 0, E_ = 0, k_ = 0, Fe_ = 0, Fs_ = 0;  // MoE: the share of MoE layers, experts, top-k, widths
  bool swiglu_;
  Link tp_link_, cp_link_, ep_link_;
};

// Per stage and chunk: forward, backward (input part, weight part) seconds, and their breakdown.
struct ChunkCost {
  double forward = 0, backward_input = 0, backward_weight = 0;
  PassCost fwd_parts;  // forward parts (backward = 2x gemm/elementwise, 2x tp; recompute = 1 forward)
  double recompute = 0;
};

// How long the last micro-batch's gradient reduction runs past the end of
// its backward under --overlap-grad-reduce, as DataParallel issues it for
// ZeRO 0-1 on one pipeline stage: buckets of whole units from the output end
// (head and final norm, blocks, embeddings), each closed once it holds
// `bucket` elements; a bucket is reduced once the backward of its last unit
// has run and the previous bucket's reduction is done, taking its share of
// `reduce` by elements. `units`: (backward seconds, gradient elements) in
// the order backward runs them. A tied embedding's gradient is ready only
// when the lookup's backward ends, so a model whose embedding dominates
// (gpt2-tiny: 79% of the elements) hides little whatever the bucket size.
double bucketed_exposure(const std::vector<std::pair<double, double>>& units, double bucket, double reduce) {
  double elements = 0, backward = 0;
  for (const auto& [secs, n] : units) elements += n, backward += secs;
  if (elements <= 0) return reduce;
  double t = 0, free = 0, filled = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    t += units[u].first;
    filled += units[u].second;
    if (filled >= bucket || u + 1 == units.size()) {
      free = std::max(free, t) + reduce * filled / elements;
      filled = 0;
    }
  }
  return std::max(0.0, free - backward);
}

}  // namespace

double model_flops_per_step(const Job& job) {
  return job.model.flops_per_token(job.seq_length) * static_cast<double>(job.global_batch_size * job.seq_length);
}

double recompute_flops_per_step(const Job& job, const Layout& l) {
  if (!l.recompute()) return 0;
  const model::ModelConfig& m = job.model;
  // One block's forward FLOPs per token: 2 x its matmul parameters + 4 H D T (scores and values, as PaLM counts).
  const double C = static_cast<double>(m.hidden_size), D = static_cast<double>(m.head_dim());
  const double block_params = static_cast<double>(m.attention_params()) + C * m.ffn() * (m.gated_mlp() ? 3 : 2);
  const double per_token =
      2 * block_params + 2.0 * m.num_attention_heads * (D + static_cast<double>(m.value_dim())) * job.seq_length;
  const int64_t chunk_layers = l.layers_per_virtual_stage(job);
  const double recomputed = static_cast<double>(m.num_layers) *
                            std::min<double>(1.0, static_cast<double>(l.recompute_num_layers) / chunk_layers);
  return per_token * recomputed * static_cast<double>(job.global_batch_size * job.seq_length);
}

namespace {

using ChunkCosts = std::vector<std::vector<ChunkCost>>;  // [stage][virtual chunk]

// Every pipeline stage's chunks: a micro-batch's forward, input-gradient
// and weight-gradient times, from the blocks each holds (the embedding on
// the first, the head on the last).
ChunkCosts chunk_costs(const Job& job, const Layout& l, const Cluster& c, const Precision& p, const BlockCosts& bc,
                       const parallel::PipelineLayout& pl) {
  const PassCost block = bc.block_forward(), head = bc.head_forward(), emb = bc.embedding_forward();
  // FP8 runs keep some blocks' GEMMs in bf16: those blocks cost what a bf16 block does.
  Precision bf16 = p;
  bf16.compute = "bf16";
  const bool mixed = p.compute == "fp8" && !p.high_precision_layers.empty();
  const PassCost block16 = mixed ? BlockCosts(job, l, c, bf16).block_forward() : block;
  ChunkCosts cost(l.pp, std::vector<ChunkCost>(pl.chunks));
  for (int s = 0; s < l.pp; ++s)
    for (int ch = 0; ch < pl.chunks; ++ch) {
      const parallel::LayerRange r = pl.at(s, ch);
      ChunkCost& cc = cost[s][ch];
      const double n = static_cast<double>(r.count);
      double n16 = 0;  // blocks of this chunk kept in bf16
      for (int64_t b : p.high_precision_layers)
        if (mixed && b >= r.first && b < r.first + r.count) ++n16;
      PassCost f;
      f.gemm = (n - n16) * block.gemm + n16 * block16.gemm;
      f.elementwise = n * block.elementwise;
      f.tp = n * block.tp;
      f.cp = n * block.cp;
      f.ep = n * block.ep;
      if (s == 0 && ch == 0) f.gemm += emb.gemm, f.elementwise += emb.elementwise, f.tp += emb.tp;
      if (s == l.pp - 1 && ch == pl.chunks - 1) f.gemm += head.gemm, f.elementwise += head.elementwise, f.tp += head.tp;
      const double rc = static_cast<double>(std::min(l.recompute_num_layers, r.count)) * block.total();
      cc.fwd_parts = f;
      cc.recompute = rc;
      cc.forward = f.total();
      // Backward: input and weight gradients each cost one forward's GEMMs; elementwise and TP/CP
      // communication go with the input part.
      cc.backward_input = rc + f.gemm + 2 * f.elementwise + f.tp + 2 * f.cp + f.ep;
      cc.backward_weight = f.gemm;
    }
  return cost;
}

// The step's pipeline makespan: the busiest stage's work on one stage, the
// schedule simulated with these costs and the P2P transfer time otherwise.
double pipeline_makespan(const Job& job, const Layout& l, const parallel::PipelineLayout& pl, const ChunkCosts& cost,
                         const std::vector<double>& busy, int busiest, double p2p) {
  if (l.pp == 1) return busy[busiest];
  const parallel::ScheduleConfig sc = schedule_config(job, l, pl.chunks);
  const parallel::SimResult sim = parallel::simulate(
      parallel::make_schedule(sc),
      [&](int stage, const parallel::Action& a) {
        const ChunkCost& cc = cost[stage][a.chunk];
        switch (a.kind) {
          case parallel::ActionKind::forward: return cc.forward;
          case parallel::ActionKind::backward: return cc.backward_input + cc.backward_weight;
          case parallel::ActionKind::backward_input: return cc.backward_input;
          case parallel::ActionKind::backward_weight: return cc.backward_weight;
          default: return 0.0;
        }
      },
      p2p);
  CLAW_CHECK(sim.deadlock_free, "schedule {} deadlocks: {}", parallel::to_string(sc.kind), sim.describe());
  return sim.makespan;
}

// Data parallelism's collectives per step, before any overlap.
struct DpComm {
  double reduce = 0, gather = 0;  // gradient reduction; ZeRO's parameter all-gather
  double diloco_outer = 0;        // DiLoCo's outer step, per inner step
  double inter_dc = 0;            // the long-haul part of `reduce`
  // Bytes this rank sends between nodes per step (Device::network_cpu_s_per_byte),
  // and across the long haul, whose CPU time counts only past `haul_wait`.
  double net_bytes = 0, haul_bytes = 0, haul_wait = 0;
};

// The dense parameters (P elements of the busiest stage) are replicated over
// dp x cp (the CP ranks hold other tokens of the samples); under expert
// parallelism the experts (expert_elems) only over the expert-data-parallel
// ranks, a collective of their own (the two overlap nothing here: summed).
DpComm data_parallel_comm(const Layout& l, const Cluster& c, const Precision& p, double P, double expert_elems) {
  DpComm d;
  const int reps = l.dp * l.cp;
  const Link dp_link = link_for(c, l.tp * l.cp * l.dp, l.tp);
  const double grad_bytes = P * p.grad_bytes, param_bytes = P * p.param_bytes;
  // Of a ring over `ranks` members `stride` apart, the share of hops that
  // leave a node (one per node boundary) times the bytes each rank sends.
  const auto between_nodes = [&](double sent, int ranks, int stride) {
    const double span = static_cast<double>(ranks) * stride;
    if (ranks <= 1 || span <= c.devices_per_node) return 0.0;
    return sent * std::min(1.0, span / c.devices_per_node / ranks);
  };
  if (reps > 1 && c.data_centers > 1) {
    const int local = reps / c.data_centers;
    const Link in = link_for(c, l.tp * local, l.tp);
    const double ranks_per_dc = static_cast<double>(c.num_devices) / c.data_centers, n = c.data_centers;
    // What one data centre sends across per step, each way: hierarchical
    // reduction all-reduces every rank's 1/local block of the gradients
    // across (a ring of n, one rank per centre); flat data parallelism
    // runs claw's ring over all reps ranks, ordered by centre, so a
    // centre's last rank sends (reps - 1)/reps of the buffer across per
    // ring pass: two for the gradients' all-reduce, one more for ZeRO's
    // parameter all-gather (2.25x the hierarchical bytes at 4 ranks in 2
    // centres, measured in bench/RESULTS.md "Across data centres"). Each
    // pass's chunks cross (reps - 1) hops in turn, n of every reps of them
    // long-haul ones, so a pass waits (reps - 1) n / reps one-way delays.
    const double R = reps, passes = l.zero_stage >= 1 ? 3 : 2;
    const double crossing = l.flat_across_data_centers
                                ? (R - 1) / R * (2 * grad_bytes + (l.zero_stage >= 1 ? param_bytes : 0))
                                : ranks_per_dc * 2 * (n - 1) / n * grad_bytes / local;
    const double latency = l.flat_across_data_centers ? passes * (R - 1) * n / R * c.inter_dc_rtt / 2
                                                      : (n - 1) * c.inter_dc_rtt;
    const double inter = crossing / c.inter_dc_bandwidth + latency;
    if (l.diloco_inner_steps > 0) {
      // DiLoCo: the outer step's deltas (fp32 all-reduced, or packed to
      // b bits + a 4-byte scale per block and all-gathered: n/2 x (b + 32 /
      // block)/32 of the bytes), once per H steps, waited for.
      const double packed =
          l.diloco_delta_bits < 32 ? n / 2 * (l.diloco_delta_bits + 32.0 / parallel::kDeltaBlock) / 32 : 1.0;
      d.diloco_outer = (crossing * packed / c.inter_dc_bandwidth + (n - 1) * c.inter_dc_rtt) /
                       static_cast<double>(l.diloco_inner_steps);
      d.reduce = ring_gather(grad_bytes, local, in.bw, in.lat);
      d.haul_bytes = crossing / ranks_per_dc * packed / static_cast<double>(l.diloco_inner_steps);
      d.haul_wait = d.diloco_outer;
    } else {
      d.reduce = ring_gather(grad_bytes, local, in.bw, in.lat) + inter;
      d.inter_dc = inter;
      d.haul_bytes = crossing / ranks_per_dc;
      d.haul_wait = inter;
    }
    const double gathered = l.zero_stage >= 1 ? param_bytes : grad_bytes, nl = local;
    d.gather = ring_gather(gathered, local, in.bw, in.lat);
    d.net_bytes += between_nodes((nl - 1) / nl * (grad_bytes + gathered), local, l.tp);
  } else if (reps > 1 && l.zero_stage == 0) {
    d.reduce = ring_all_reduce(grad_bytes, reps, dp_link.bw, dp_link.lat);
    d.net_bytes += between_nodes(2.0 * (reps - 1) / reps * grad_bytes, reps, l.tp);
  } else if (reps > 1) {
    d.reduce = ring_gather(grad_bytes, reps, dp_link.bw, dp_link.lat);
    d.gather = ring_gather(param_bytes, reps, dp_link.bw, dp_link.lat);
    d.net_bytes += between_nodes((reps - 1.0) / reps * (grad_bytes + param_bytes), reps, l.tp);
  }
  if (const int edp = l.expert_dp(); expert_elems > 0 && edp > 1) {
    const Link edp_link = link_for(c, l.world() / l.pp, l.expert_tp() * l.ep);
    const double eg = expert_elems * p.grad_bytes, ep_bytes = expert_elems * p.param_bytes;
    if (l.zero_stage == 0) {
      d.reduce += ring_all_reduce(eg, edp, edp_link.bw, edp_link.lat);
    } else {
      d.reduce += ring_gather(eg, edp, edp_link.bw, edp_link.lat);
      d.gather += ring_gather(ep_bytes, edp, edp_link.bw, edp_link.lat);
    }
  }
  return d;
}

// The gradient reduction left exposed after the last backward under
// --overlap-grad-reduce: bucket by bucket on one stage (bucketed_exposure),
// else what outlasts the last chunk's backward.
double exposed_grad_reduce(const Job& job, const Layout& l, const parallel::PipelineLayout& pl, const BlockCosts& bc,
                           const ChunkCost& last, double reduce, double P) {
  const double last_backward = last.backward_input + last.backward_weight;
  if (!l.overlap_grad_reduce) return reduce;
  if (!(l.pp == 1 && pl.chunks == 1 && l.zero_stage <= 1 && reduce > 0)) return std::max(0.0, reduce - last_backward);
  // Units as backward meets them, each's time from its forward parts, scaled to the chunk's backward.
  const model::ModelConfig& mc = job.model;
  const auto bwd = [](const PassCost& f) { return 2 * (f.gemm + f.elementwise) + f.tp + 2 * f.cp + f.ep; };
  const double C = static_cast<double>(mc.hidden_size);
  const double vocab = static_cast<double>(mc.padded_vocab_size(l.tp)) / l.tp * C;
  const double positions =
      mc.position_embedding_type == model::Position::learned ? static_cast<double>(mc.max_position_embeddings) * C : 0.0;
  const double head_elems = mc.tied() ? 0.0 : vocab, emb_elems = vocab + positions;
  const double L = static_cast<double>(mc.num_layers);
  const double block_elems = std::max(0.0, (P - head_elems - emb_elems) / L);
  std::vector<std::pair<double, double>> units;
  units.emplace_back(bwd(bc.head_forward()), head_elems);
  for (int64_t b = 0; b < mc.num_layers; ++b) units.emplace_back(bwd(bc.block_forward()) + last.recompute / L, block_elems);
  units.emplace_back(bwd(bc.embedding_forward()), emb_elems);
  double sum = 0;
  for (const auto& u : units) sum += u.first;
  for (auto& u : units) u.first *= sum > 0 ? last_backward / sum : 0;
  const double bucket = l.ddp_bucket_size > 0 ? static_cast<double>(l.ddp_bucket_size)
                                              : std::max(40e6, 1e6 * static_cast<double>(l.dp));
  return bucketed_exposure(units, bucket, reduce);
}

}  // namespace

Estimate estimate(const Job& job, const Layout& l, const Cluster& c, const Precision& p, const StageMemory* memory) {
  validate_layout(job, l, c.num_devices);
  if (c.data_centers > 1 && l.dp % c.data_centers != 0)
    fail("data-parallel size {} does not split over --data-centers {} (each data centre holds whole replicas)", l.dp,
         c.data_centers);
  Estimate e;
  e.layout = l;
  e.memory = memory ? *memory : peak_memory(job, l, p, &c.device);
  if (e.memory.total() > c.device.memory_bytes) {
    e.fits = false;
    e.why_not = fmt::format("stage {} needs {:.1f} GiB > {:.1f} GiB on {} ({})", e.memory.stage,
                            e.memory.total() / 1073741824.0, c.device.memory_bytes / 1073741824.0, c.device.key,
                            describe(e.memory));
  }

  const BlockCosts bc(job, l, c, p);
  const parallel::PipelineLayout pl = pipeline_layout(job, l);
  const ChunkCosts cost = chunk_costs(job, l, c, p, bc, pl);
  const int64_t m = l.microbatches(job);
  // Neighbouring stages are world / PP ranks apart (PP is the outermost grid dimension); each transfer
  // has one NIC.
  const Link pp_link = link_for(c, l.pp > 1 ? 2 * (c.num_devices / l.pp) : 1, c.devices_per_node);
  const double p2p = bc.p2p_bytes() / pp_link.bw + pp_link.lat;
  int busiest = 0;
  std::vector<double> busy(l.pp, 0.0);
  for (int s = 0; s < l.pp; ++s)
    for (const ChunkCost& cc : cost[s]) busy[s] += static_cast<double>(m) * (cc.forward + cc.backward_input + cc.backward_weight);
  for (int s = 1; s < l.pp; ++s)
    if (busy[s] > busy[busiest]) busiest = s;
  const double makespan = pipeline_makespan(job, l, pl, cost, busy, busiest, p2p);
  StepTime& t = e.time;
  for (const ChunkCost& cc : cost[busiest]) {
    const double mm = static_cast<double>(m);
    t.compute += mm * (3 * cc.fwd_parts.gemm + 3 * cc.fwd_parts.elementwise + cc.recompute);
    t.recompute += mm * cc.recompute;
    t.tp_comm += mm * 2 * cc.fwd_parts.tp;
    t.cp_comm += mm * 3 * cc.fwd_parts.cp;
    t.ep_comm += mm * 2 * cc.fwd_parts.ep;
  }
  t.bubble = makespan - busy[busiest];

  // Data parallelism over the busiest stage's parameters.
  const model::ModelConfig& mc = job.model;
  double expert_elems = 0;
  if (mc.moe.enabled() && l.expert_region())
    expert_elems = static_cast<double>(mc.moe.num_moe_layers(mc.num_layers)) / l.pp * mc.moe.num_experts / l.ep *
                   static_cast<double>(mc.moe_ffn()) * mc.hidden_size * (mc.gated_mlp() ? 3 : 2);
  const double P = static_cast<double>(e.memory.param_elements) - expert_elems;
  const DpComm d = data_parallel_comm(l, c, p, P, expert_elems);
  t.inter_dc = d.inter_dc;
  t.dp_comm_total = d.reduce + d.gather;
  const ChunkCost& first = cost[busiest].front();
  const double exposed_reduce = exposed_grad_reduce(job, l, pl, bc, cost[busiest].back(), d.reduce, P);
  const double hide_gather = l.overlap_param_gather || (l.overlap_grad_reduce && l.zero_stage >= 1) ? first.forward : 0;
  t.dp_comm = exposed_reduce + std::max(0.0, d.gather - hide_gather) + d.diloco_outer;
  if (d.diloco_outer > 0) {
    t.dp_comm_total += d.diloco_outer;
    t.inter_dc = d.diloco_outer;
  }
  const int reps = l.dp * l.cp;
  if (l.zero_stage >= 3 && reps > 1) {  // parameters gathered for every micro-batch's forward and backward
    const Link dp_link = link_for(c, l.tp * l.cp * l.dp, l.tp);
    const double per_mb = 2 * ring_gather(P * p.param_bytes, reps, dp_link.bw, dp_link.lat);
    t.dp_comm_total += static_cast<double>(m) * per_mb;
    const double hidden = l.overlap_param_gather ? first.forward + first.backward_input : 0;
    t.dp_comm += static_cast<double>(m) * std::max(0.0, per_mb - hidden);
  }
  // AdamW over the shard: gradient read, master (or fp32 parameter) read/write, two moments
  // read/write, 16-bit parameter write.
  const double shard = static_cast<double>(e.memory.arenas.optimizer) / 8.0;
  const double per_elem = p.grad_bytes + 2 * std::max(p.master_bytes, 4.0) + 4 * p.moment_bytes +
                          (p.master_bytes > 0 ? p.param_bytes : 0);
  t.optimizer = shard * per_elem / c.device.memory_bandwidth;
  t.network_cpu = d.net_bytes * c.device.network_cpu_s_per_byte +
                  std::max(0.0, d.haul_bytes * c.device.network_cpu_s_per_byte - d.haul_wait);
  t.total = makespan + t.dp_comm + t.optimizer + t.network_cpu;

  const double tokens = static_cast<double>(job.global_batch_size * job.seq_length);
  e.tokens_per_s = tokens / t.total;
  const double mf = model_flops_per_step(job);
  e.model_tflops_per_device = mf / t.total / c.num_devices / 1e12;
  e.hardware_tflops_per_device = (mf + recompute_flops_per_step(job, l)) / t.total / c.num_devices / 1e12;
  e.mfu = e.model_tflops_per_device * 1e12 / c.device.peak_flops(p.compute);
  return e;
}

DataCenterAdvice advise_data_centers(const Estimate& best, const Cluster& c) {
  DataCenterAdvice a;
  const StepTime& t = best.time;
  a.hierarchical_step = t.total;
  // The exposed DP communication is charged to the long haul first: without
  // it the rest (inside a data centre) hides as well as before or better.
  a.one_dc_step = t.total - std::min(t.inter_dc, t.dp_comm);
  a.hierarchical_fraction = a.one_dc_step / a.hierarchical_step;
  const std::string link = fmt::format("{} data centres ({:g} ms round trip, {:g} Gbit/s)", c.data_centers,
                                       c.inter_dc_rtt * 1e3, c.inter_dc_bandwidth * 8 / 1e9);
  if (a.hierarchical_fraction >= 0.9) {
    a.summary = fmt::format("across {}: hierarchical reduction keeps {:.0f}% of one data centre's tokens/s (the "
                            "long haul takes {:.3f} s a step, {:.3f} s of it exposed): train with --data-centers {} "
                            "--overlap-grad-reduce",
                            link, 100 * a.hierarchical_fraction, t.inter_dc, a.hierarchical_step - a.one_dc_step,
                            c.data_centers);
    return a;
  }
  for (int64_t h : {10, 50, 100, 500}) {
    a.diloco_inner_steps = h;
    a.diloco_fraction = a.one_dc_step / (a.one_dc_step + t.inter_dc / static_cast<double>(h));
    if (a.diloco_fraction >= 0.95) break;
  }
  a.summary = fmt::format("across {}: hierarchical reduction keeps only {:.0f}% of one data centre's tokens/s (the "
                          "long haul takes {:.3f} s a step); DiLoCo with --diloco-inner-steps {} would keep {:.0f}% "
                          "(the shards cross once per {} steps; its loss against synchronous training: "
                          "bench/RESULTS.md)",
                          link, 100 * a.hierarchical_fraction, t.inter_dc, a.diloco_inner_steps,
                          100 * a.diloco_fraction, a.diloco_inner_steps);
  return a;
}

DataCenterStrategies data_center_strategies(const Job& job, const Layout& layout, const Cluster& cluster,
                                            const Precision& prec, const std::vector<int64_t>& diloco_inner_steps,
                                            int diloco_delta_bits) {
  CLAW_CHECK(cluster.data_centers > 1, "data_center_strategies needs a cluster of several data centres");
  DataCenterStrategies s;
  const auto step = [&](const Cluster& c, const auto& edit) {
    Layout l = layout;
    l.instances = 1;
    l.flat_across_data_centers = false;
    l.diloco_inner_steps = 0;
    l.diloco_delta_bits = 32;
    edit(l);
    return estimate(job, l, c, prec).time.total;
  };
  Cluster one = cluster;
  one.data_centers = 1;
  one.inter_dc_bandwidth = one.inter_dc_rtt = 0;
  s.one_dc = step(one, [](Layout&) {});
  s.flat = step(cluster, [](Layout& l) {
    l.flat_across_data_centers = true;
    l.overlap_grad_reduce = true;
  });
  const int instances = layout.zero_stage >= 1 ? cluster.data_centers : 1;
  s.hierarchical = step(cluster, [&](Layout& l) {
    l.instances = instances;
    l.overlap_grad_reduce = false;
  });
  s.hierarchical_overlapped = step(cluster, [&](Layout& l) {
    l.instances = instances;
    l.overlap_grad_reduce = true;
  });
  for (int64_t h : diloco_inner_steps)
    s.diloco.emplace_back(h, step(cluster, [&](Layout& l) {
                            l.instances = instances;
                            l.overlap_grad_reduce = true;
                            l.diloco_inner_steps = h;
                            l.diloco_delta_bits = diloco_delta_bits;
                          }));
  return s;
}

}  // namespace claw::plan
