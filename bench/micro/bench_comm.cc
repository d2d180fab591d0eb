// Collectives through claw's comm layer (Group, blocking form: hand-off to
// the communication thread, MPI call there, wake-up of the caller) against
// the same MPI call made directly, on the same buffers, interleaved in one
// run.
//
//   mpirun -np N --oversubscribe --bind-to none build/bin/bench_comm [--max-mb 256] [--iters 10]
//       [--min-mb 1] [--ops all_reduce,reduce_scatter,all_gather] [--latency-reps 2000]
// (a slow link, such as bench/drivers/bench_dc.py's long haul, wants few latency
// repetitions and one operation).
//
// One line per (operation, size) on rank 0:
//   bench=comm op=all_reduce ranks=2 bytes=1048576 iters=.. claw_ms=.. mpi_ms=.. claw_best_ms=.. mpi_best_ms=..
//     claw_busbw_gbs=.. mpi_busbw_gbs=.. ratio=.. best_ratio=.. burst_claw_ms=.. burst_mpi_ms=.. burst_ratio=..
// Times are per operation, the slowest rank's, after a barrier; *_ms is the
// median and *_best_ms the minimum over the iterations; ratio = claw_ms /
// mpi_ms. burst_*: four operations issued back to back (claw async, then
// waited), time per operation. Bandwidths follow nccl-tests
// (doc/PERFORMANCE.md): algbw = S / t with S the full buffer (all_reduce's
// buffer, reduce_scatter's input, all_gather's output); busbw = algbw *
// 2(n-1)/n for all_reduce and algbw * (n-1)/n for reduce_scatter and
// all_gather. GB = 1e9 bytes.
// A first line measures the latency of an 8-byte all_reduce (the fixed cost
// of the hand-off, which the large sizes hide).
#include <malloc.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "claw/comm/world.h"

using namespace claw;

namespace {

enum class Op { all_reduce, reduce_scatter, all_gather };
const char* name(Op op) {
  return op == Op::all_reduce ? "all_reduce" : op == Op::reduce_scatter ? "reduce_scatter" : "all_gather";
}

struct Stats {
  double median = 0, best = 0;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return {v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]), v.front()};
}

}  // namespace

int main(int argc, char** argv) {
  int64_t max_mb = 256, min_mb = 1;
  int iters_wanted = 0;  // 0: from a time budget per size
  int latency_reps = 2000;
  std::vector<Op> ops = {Op::all_reduce, Op::reduce_scatter, Op::all_gather};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--max-mb" && i + 1 < argc) max_mb = std::atoll(argv[++i]);
    else if (a == "--min-mb" && i + 1 < argc) min_mb = std::atoll(argv[++i]);
    else if (a == "--iters" && i + 1 < argc) iters_wanted = std::atoi(argv[++i]);
    else if (a == "--latency-reps" && i + 1 < argc) latency_reps = std::atoi(argv[++i]);
    else if (a == "--ops" && i + 1 < argc) {
      ops.clear();
      const std::string list = argv[++i];
      for (Op op : {Op::all_reduce, Op::reduce_scatter, Op::all_gather})
        if (("," + list + ",").find("," + std::string(name(op)) + ",") != std::string::npos) ops.push_back(op);
    } else {
      ops.clear();
    }
    if (ops.empty() || min_mb < 1 || max_mb < min_mb || latency_reps < 1) {
      std::fprintf(stderr, "usage: bench_comm [--max-mb MB] [--min-mb MB] [--iters N] [--latency-reps N] "
                           "[--ops all_reduce,reduce_scatter,all_gather]\n");
      return 2;
    }
  }
  // Open MPI's basic reduce_scatter_block allocates a temporary of the full
  // buffer on every call. glibc gives the main thread's freed memory back to
  // the system (trim) and the communication thread's arena keeps it, so with
  // default settings the direct call page-faults ~1000 times per 4 MB and
  // looks slower than claw's for reasons that have nothing to do with the
  // layer. Keep freed memory for both (up to glibc's largest mmap
  // threshold, 32 MB: larger temporaries are mapped afresh on either thread).
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  auto world = comm::World::create(comm::WorldOptions{.timeout = std::chrono::minutes(10)});
  const int n = world->size(), rank = world->rank();
  if (n < 2) {
    std::fprintf(stderr, "bench_comm: run it under mpirun with 2 or more ranks (e.g. mpirun -np 2 %s)\n", argv[0]);
    return 2;
  }
  comm::Group& g = *world->world_group();
  // The direct calls use their own communicator (same ranks) so that nothing
  // of claw's matching can interfere; claw's operations are all complete
  // whenever a direct call runs.
  MPI_Comm raw;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  if (rank == 0)
    std::printf("# bench_comm: %d ranks, %s; median/best of the slowest rank's time per operation\n", n,
                world->backend().c_str());

  // Times one operation: barrier, then the call; returns this rank's seconds.
  auto timed = [&](auto&& fn) {
    MPI_Barrier(raw);
    const double t0 = bench::now();
    fn();
    return bench::now() - t0;
  };

  // Latency of a tiny all_reduce: the hand-off's fixed cost.
  {
    float x[2] = {0, 0};
    const int reps = latency_reps;
    std::vector<double> tc, tm;
    for (int rep = 0; rep < 5; ++rep) {
      const bool claw_first = rep % 2 == 0;
      for (int k = 0; k < 2; ++k) {
        const bool use_claw = (k == 0) == claw_first;
        MPI_Barrier(raw);
        const double t0 = bench::now();
        for (int i = 0; i < reps; ++i) {
          if (use_claw) g.all_reduce(x, 2, DType::f32);
          else MPI_Allreduce(MPI_IN_PLACE, x, 2, MPI_FLOAT, MPI_SUM, raw);
        }
        (use_claw ? tc : tm).push_back((bench::now() - t0) / reps);
      }
    }
    MPI_Allreduce(MPI_IN_PLACE, tc.data(), static_cast<int>(tc.size()), MPI_DOUBLE, MPI_MAX, raw);
    MPI_Allreduce(MPI_IN_PLACE, tm.data(), static_cast<int>(tm.size()), MPI_DOUBLE, MPI_MAX, raw);
    const Stats c = stats(tc), m = stats(tm);
    if (rank == 0)
      std::printf("bench=comm op=all_reduce ranks=%d bytes=8 iters=%d claw_us=%.2f mpi_us=%.2f claw_best_us=%.2f "
                  "mpi_best_us=%.2f overhead_us=%.2f ratio=%.3f\n",
                  n, reps, c.median * 1e6, m.median * 1e6, c.best * 1e6, m.best * 1e6, (c.median - m.median) * 1e6,
                  c.median / m.median);
    std::fflush(stdout);
  }

  const int64_t max_bytes = max_mb << 20;
  // Each buffer is sized for the largest case and reused (pages touched once).
  const int64_t max_count = max_bytes / 4;
  std::vector<float> big(max_count, 0.0f), piece(max_count / n + 1, 0.0f);
  for (Op op : ops) {
    for (int64_t bytes = min_mb << 20; bytes <= max_bytes; bytes *= 4) {
      const int64_t count = bytes / 4, block = count / n;
      const int64_t full = op == Op::all_reduce ? count : block * n;  // S, a multiple of n for the scattered forms
      auto run_claw = [&] {
        switch (op) {
          case Op::all_reduce: g.all_reduce(big.data(), count, DType::f32); break;
          case Op::reduce_scatter: g.reduce_scatter(big.data(), piece.data(), block, DType::f32); break;
          case Op::all_gather: g.all_gather(piece.data(), big.data(), block, DType::f32); break;
        }
      };
      auto run_mpi = [&] {
        switch (op) {
          case Op::all_reduce:
            MPI_Allreduce(MPI_IN_PLACE, big.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, raw);
            break;
          case Op::reduce_scatter:
            MPI_Reduce_scatter_block(big.data(), piece.data(), static_cast<int>(block), MPI_FLOAT, MPI_SUM, raw);
            break;
          case Op::all_gather:
            MPI_Allgather(piece.data(), static_cast<int>(block), MPI_FLOAT, big.data(), static_cast<int>(block),
                          MPI_FLOAT, raw);
            break;
        }
      };
      // Bursts: kBurst operations issued back to back (claw: async, then
      // waited; MPI: consecutive calls), per-operation time. This is how
      // gradient buckets go out; the communication thread does not go to
      // sleep between them.
      constexpr int kBurst = 4;
      auto run_claw_burst = [&] {
        comm::Work w[kBurst];
        for (int b = 0; b < kBurst; ++b) {
          switch (op) {
            case Op::all_reduce: w[b] = g.all_reduce_async(big.data(), count, DType::f32); break;
            case Op::reduce_scatter: w[b] = g.reduce_scatter_async(big.data(), piece.data(), block, DType::f32); break;
            case Op::all_gather: w[b] = g.all_gather_async(piece.data(), big.data(), block, DType::f32); break;
          }
        }
        for (auto& x : w) x.wait();
      };
      auto run_mpi_burst = [&] {
        for (int b = 0; b < kBurst; ++b) run_mpi();
      };
      // Warm-up (both), and the iteration count from the slower's time: about
      // 4 s per size for the four variants, 5 to 300 iterations.
      double one = std::max(timed(run_claw), timed(run_mpi));
      one = std::max(one, std::max(timed(run_claw), timed(run_mpi)));
      MPI_Allreduce(MPI_IN_PLACE, &one, 1, MPI_DOUBLE, MPI_MAX, raw);
      const int iters =
          iters_wanted > 0 ? iters_wanted : std::clamp(static_cast<int>(4.0 / ((2 + 2 * kBurst) * one)), 5, 300);
      std::vector<double> tc, tm, tcb, tmb;
      for (int it = 0; it < iters; ++it) {
        // Rotate the order so that no variant always follows the same one.
        for (int k = 0; k < 4; ++k) switch ((k + it) % 4) {
            case 0: tc.push_back(timed(run_claw)); break;
            case 1: tm.push_back(timed(run_mpi)); break;
            case 2: tcb.push_back(timed(run_claw_burst) / kBurst); break;
            case 3: tmb.push_back(timed(run_mpi_burst) / kBurst); break;
          }
      }
      for (auto* v : {&tc, &tm, &tcb, &tmb})
        MPI_Allreduce(MPI_IN_PLACE, v->data(), iters, MPI_DOUBLE, MPI_MAX, raw);
      const Stats c = stats(tc), m = stats(tm), cb = stats(tcb), mb = stats(tmb);
      const double factor = op == Op::all_reduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
      const double s = static_cast<double>(full) * 4;
      if (rank == 0)
        std::printf("bench=comm op=%s ranks=%d bytes=%lld iters=%d claw_ms=%.3f mpi_ms=%.3f claw_best_ms=%.3f "
                    "mpi_best_ms=%.3f claw_busbw_gbs=%.3f mpi_busbw_gbs=%.3f ratio=%.3f best_ratio=%.3f "
                    "burst_claw_ms=%.3f burst_mpi_ms=%.3f burst_ratio=%.3f\n",
                    name(op), n, static_cast<long long>(full * 4), iters, c.median * 1e3, m.median * 1e3,
                    c.best * 1e3, m.best * 1e3, s / c.median * factor / 1e9, s / m.median * factor / 1e9,
                    c.median / m.median, c.best / m.best, cb.median * 1e3, mb.median * 1e3, cb.median / mb.median);
      std::fflush(stdout);
    }
  }
  MPI_Comm_free(&raw);
  return 0;
}
