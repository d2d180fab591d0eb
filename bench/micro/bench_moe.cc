// Mixture of Experts: the expert-parallel token dispatch against the raw MPI
// all-to-all on the same buffers, and a MoE layer against a dense MLP of the
// same active parameters, with the roof (SGEMM at the experts' shape, memory
// copy) measured in the same run.
//
//   mpirun -np N --oversubscribe --bind-to none build/bin/bench_moe dispatch [--tokens 4096] [--hidden 1024]
//   build/bin/bench_moe layer [--tokens 2048] [--hidden 512] [--experts 8] [--topk 2] [--expert-ffn 1024]
//
// dispatch (EP = N ranks, 4 experts a rank, top 2, softmax routing of random
// logits): claw's path is what model::MoELayer runs on the way out and back:
// gather the chosen rows by expert, exchange the per-expert counts, the rows
// (Group::all_to_all), reorder them expert-major; then the reverse
// reordering, the rows back, and the weighted combine. The raw path is two
// MPI_Alltoallv calls on the same send and receive buffers with counts known
// in advance (no routing, gather, counts or reordering); claw_comm: the
// count and row exchanges through claw's Group alone. One line on rank 0:
//   bench=moe_dispatch ranks=.. tokens=.. hidden=.. bytes_out=.. claw_ms=.. claw_comm_ms=.. mpi_ms=.. ratio=..
//     comm_ratio=.. copy_GBs=..
// layer (one rank): forward + backward of model::MoELayer (E experts, top k,
// SwiGLU experts of width Fe) against model::MLP of width k Fe (the same
// FLOPs per token but the router's); one line:
//   bench=moe_layer tokens=.. moe_ms=.. dense_ms=.. ratio=.. moe_gflops=.. dense_gflops=.. sgemm_gflops=.. copy_GBs=..
// Times are the best of 5 repetitions (bench_util.h), the slowest rank's.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "claw/comm/group.h"
#include "claw/comm/world.h"
#include "claw/core/arena.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/moe.h"
#include "claw/model/config.h"
#include "claw/model/hf_names.h"
#include "claw/model/mlp.h"
#include "claw/model/moe.h"
#include "claw/model/scratch.h"
#include "claw/model/step.h"

using namespace claw;

namespace {

int64_t arg(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 2; i + 1 < argc; ++i)
    if (std::string(argv[i]) == name) return std::stoll(argv[i + 1]);
  return fallback;
}

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Memory copy bandwidth (read + write) over `bytes`, GB/s.
double copy_gbs(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes);
  const double t = bench::best_seconds([&] { std::memcpy(b.data(), a.data(), bytes); });
  return 2.0 * static_cast<double>(bytes) / t / 1e9;
}

// The slowest rank's time.
double slowest(comm::Group& g, double t) { return g.size() > 1 ? g.all_reduce_value(t, comm::ReduceOp::max) : t; }

int dispatch(comm::World& world, int argc, char** argv) {
  const int ep = world.size();
  const int64_t N = arg(argc, argv, "--tokens", 4096), C = arg(argc, argv, "--hidden", 1024);
  const int64_t El = 4, E = El * ep, k = 2;
  const CpuCtx cpu = kernels::make_cpu_ctx(1);
  std::shared_ptr<comm::Group> g = world.split("ep", {[&] {
                                                   std::vector<int> all(ep);
                                                   for (int r = 0; r < ep; ++r) all[r] = r;
                                                   return all;
                                                 }()});
  const std::vector<float> logits = randn(static_cast<size_t>(N * E), 1 + world.rank());
  const std::vector<float> x = randn(static_cast<size_t>(N * C), 100 + world.rank());
  kernels::MoeRouting r;
  kernels::moe_route(logits.data(), nullptr, N, E, k, kernels::MoeScore::softmax, 0, kernels::MoeDrop::probs, r);
  const auto M = static_cast<int64_t>(r.order.size());
  std::vector<int64_t> send_counts(static_cast<size_t>(E)), recv_counts(static_cast<size_t>(E)), blocks(ep, El);
  for (int64_t e = 0; e < E; ++e) send_counts[e] = r.offsets[e + 1] - r.offsets[e];
  g->all_to_all(send_counts.data(), blocks, recv_counts.data(), blocks, DType::i64);
  std::vector<int64_t> sent(ep), got(ep, 0);
  for (int q = 0; q < ep; ++q) {
    sent[q] = (r.offsets[(q + 1) * El] - r.offsets[q * El]) * C;
    for (int64_t j = 0; j < El; ++j) got[q] += recv_counts[q * El + j] * C;
  }
  int64_t Rin = 0;
  for (int64_t v : got) Rin += v;
  Rin /= C;
  std::vector<float> rows(static_cast<size_t>(M * C)), in(static_cast<size_t>(Rin * C)), major(in.size()),
      back(rows.size()), y(static_cast<size_t>(N * C));
  std::vector<int64_t> off(static_cast<size_t>(El + 1));

  const auto claw_path = [&] {
    kernels::moe_gather(cpu, r, x.data(), C, rows.data());
    std::vector<int64_t> counts(static_cast<size_t>(E));
    g->all_to_all(send_counts.data(), blocks, counts.data(), blocks, DType::i64);
    g->all_to_all(rows.data(), sent, in.data(), got, DType::f32);
    kernels::moe_permute_received(cpu, counts.data(), ep, El, C, in.data(), major.data(), true, off.data());
    kernels::moe_permute_received(cpu, counts.data(), ep, El, C, major.data(), in.data(), false);
    g->all_to_all(in.data(), got, back.data(), sent, DType::f32);
    kernels::moe_combine(cpu, r, back.data(), C, y.data(), false);
  };
  // The same exchanges through claw's Group alone (counts and rows, both
  // ways): what the comm layer adds over MPI, apart from the data movement.
  const auto comm_path = [&] {
    std::vector<int64_t> counts(static_cast<size_t>(E));
    g->all_to_all(send_counts.data(), blocks, counts.data(), blocks, DType::i64);
    g->all_to_all(rows.data(), sent, in.data(), got, DType::f32);
    g->all_to_all(in.data(), got, back.data(), sent, DType::f32);
  };
  // MPI's counts and displacements in elements of MPI_FLOAT (int).
  std::vector<int> sc(ep), sd(ep), rc(ep), rd(ep);
  for (int q = 0, s = 0, t = 0; q < ep; ++q) {
    sc[q] = static_cast<int>(sent[q]), rc[q] = static_cast<int>(got[q]);
    sd[q] = s, rd[q] = t;
    s += sc[q], t += rc[q];
  }
  const auto mpi_path = [&] {
    MPI_Alltoallv(rows.data(), sc.data(), sd.data(), MPI_FLOAT, in.data(), rc.data(), rd.data(), MPI_FLOAT,
                  MPI_COMM_WORLD);
    MPI_Alltoallv(in.data(), rc.data(), rd.data(), MPI_FLOAT, back.data(), sc.data(), sd.data(), MPI_FLOAT,
                  MPI_COMM_WORLD);
  };
  // Interleaved: each repetition times both, so drift hits both alike.
  double best_claw = 1e30, best_mpi = 1e30, best_comm = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t1 = bench::now();
    for (int i = 0; i < 5; ++i) comm_path();
    best_comm = std::min(best_comm, slowest(*g, (bench::now() - t1) / 5));
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench::now();
    for (int i = 0; i < 5; ++i) claw_path();
    best_claw = std::min(best_claw, slowest(*g, (bench::now() - t0) / 5));
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = bench::now();
    for (int i = 0; i < 5; ++i) mpi_path();
    best_mpi = std::min(best_mpi, slowest(*g, (bench::now() - t0) / 5));
  }
  const double copy = copy_gbs(static_cast<size_t>(M * C) * sizeof(float));
  if (world.rank() == 0)
    std::printf("bench=moe_dispatch ranks=%d tokens=%lld hidden=%lld experts=%lld topk=%lld bytes_out=%lld "
                "claw_ms=%.3f claw_comm_ms=%.3f mpi_ms=%.3f ratio=%.3f comm_ratio=%.3f copy_GBs=%.1f\n",
                ep, static_cast<long long>(N), static_cast<long long>(C), static_cast<long long>(E),
                static_cast<long long>(k), static_cast<long long>(M * C * 4), best_claw * 1e3, best_comm * 1e3,
                best_mpi * 1e3, best_claw / best_mpi, best_comm / best_mpi, copy);
  return 0;
}

// One layer's forward and backward on N tokens of one sequence.
struct LayerRun {
  ArenaPlan plan{"bench"};
  Arena arena;
};

int layer(int argc, char** argv) {
  const int64_t N = arg(argc, argv, "--tokens", 2048), C = arg(argc, argv, "--hidden", 512);
  const int64_t E = arg(argc, argv, "--experts", 8), k = arg(argc, argv, "--topk", 2);
  const int64_t Fe = arg(argc, argv, "--expert-ffn", 1024);
  const int threads = static_cast<int>(arg(argc, argv, "--threads", kernels::default_num_threads()));
  const CpuCtx cpu = kernels::make_cpu_ctx(threads);
  model::ModelConfig moe_cfg = model::model_preset("mixtral-tiny");
  moe_cfg.hidden_size = C;
  moe_cfg.num_attention_heads = 8;
  moe_cfg.num_query_groups = 8;
  moe_cfg.ffn_hidden_size = Fe;
  moe_cfg.moe.num_experts = E;
  moe_cfg.moe.router_topk = k;
  model::ModelConfig dense_cfg = moe_cfg;
  dense_cfg.moe = {};
  dense_cfg.ffn_hidden_size = k * Fe;  // the same active parameters per token
  const model::HfNames moe_hf(moe_cfg), dense_hf(dense_cfg);
  const model::TensorParallel tp{};
  model::MoELayer moe(0, moe_cfg, moe_hf, tp);
  model::MLP mlp(0, dense_cfg, dense_hf, tp);
  std::vector<model::Param*> moe_params, mlp_params;
  moe.collect(moe_params);
  mlp.collect(mlp_params);
  model::ParamStore moe_store(moe_params), mlp_store(mlp_params);
  moe_store.init(cpu, 1);
  mlp_store.init(cpu, 1);

  model::MoELayer::Saved ms;
  model::MLP::Saved ds;
  model::Scratch msc, dsc;
  LayerRun mr, dr;
  for (bool bind : {false, true}) {
    ArenaLayout L = bind ? ArenaLayout::binding(mr.plan, mr.arena) : ArenaLayout::planning(mr.plan);
    ms.layout(L, "moe", moe_cfg, N, {});
    msc.layout(L, moe_cfg, N, {});
    ArenaLayout D = bind ? ArenaLayout::binding(dr.plan, dr.arena) : ArenaLayout::planning(dr.plan);
    ds.layout(D, "mlp", dense_cfg, N, {});
    dsc.layout(D, dense_cfg, N, {});
    if (!bind) mr.arena = Arena(mr.plan), dr.arena = Arena(dr.plan);
  }
  const std::vector<float> x = randn(static_cast<size_t>(N * C), 7), dy = randn(static_cast<size_t>(N * C), 8, 1e-2f);
  std::vector<float> y(x.size()), dx(x.size());
  const model::StepCtx ctx{.cpu = cpu, .B = 1, .T = N, .training = true, .moe_aux_scale = 1.0};
  // The roof at the experts' GEMM shape: N k / E rows of one expert's gate projection.
  const int64_t rows = N * k / E;
  std::vector<float> a = randn(static_cast<size_t>(rows * C), 9), w = randn(static_cast<size_t>(Fe * C), 10),
                     h(static_cast<size_t>(rows * Fe));
  const auto moe_pass = [&] {
    moe.forward(ctx, x.data(), y.data(), ms, msc);
    moe.backward(ctx, ms, x.data(), dy.data(), dx.data(), msc);
  };
  const auto dense_pass = [&] {
    mlp.forward(ctx, x.data(), y.data(), ds, dsc);
    mlp.backward(ctx, ds, x.data(), dy.data(), dx.data(), dsc);
  };
  const auto sgemm = [&] {
    kernels::gemm(cpu, false, true, rows, Fe, C, 1.0f, a.data(), C, w.data(), C, 0.0f, h.data(), Fe);
  };
  // Interleaved, best of 7: interference on a shared machine hits all three alike.
  double moe_s = 1e30, dense_s = 1e30, sgemm_s = 1e30;
  moe_pass(), dense_pass(), sgemm();
  for (int rep = 0; rep < 7; ++rep) {
    moe_s = std::min(moe_s, bench::best_seconds(moe_pass, 1, 0));
    dense_s = std::min(dense_s, bench::best_seconds(dense_pass, 1, 0));
    sgemm_s = std::min(sgemm_s, bench::best_seconds(sgemm, 1, 0.05));
  }
  // FLOPs of the active experts (3 matrices of Fe x C per choice, forward 2, backward 4 per weight).
  const double flops = 6.0 * static_cast<double>(N) * k * 3 * Fe * C;
  std::printf("bench=moe_layer threads=%d tokens=%lld hidden=%lld experts=%lld topk=%lld expert_ffn=%lld "
              "dense_ffn=%lld moe_ms=%.3f dense_ms=%.3f ratio=%.3f moe_gflops=%.1f dense_gflops=%.1f "
              "sgemm_gflops=%.1f copy_GBs=%.1f\n",
              threads, static_cast<long long>(N), static_cast<long long>(C), static_cast<long long>(E),
              static_cast<long long>(k), static_cast<long long>(Fe), static_cast<long long>(k * Fe), moe_s * 1e3,
              dense_s * 1e3, moe_s / dense_s, flops / moe_s / 1e9, flops / dense_s / 1e9,
              2.0 * rows * Fe * C / sgemm_s / 1e9, copy_gbs(static_cast<size_t>(N * C) * sizeof(float)));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "dispatch" && mode != "layer") {
    std::fprintf(stderr, "usage: bench_moe dispatch|layer [--tokens N] [--hidden C] ...\n");
    return 2;
  }
  auto world = comm::World::create({});
  if (mode == "layer") return world->rank() == 0 ? layer(argc, argv) : 0;
  return dispatch(*world, argc, argv);
}
