// The tensor/sequence-parallel mappings (claw/model/tp_mappings.h) under
// mpirun, on the world group, on the world in reverse order (group rank !=
// world rank) and, on 4 ranks, on two groups of 2:
//  - forward and backward equal a reference computed from every rank's data
//    (each rank regenerates the others' inputs from their seeds); values are
//    small integers, so sums are exact whatever order MPI adds in;
//  - the adjoint identity sum_r <f(x)_r, y_r> = sum_r <x_r, f*(y)_r> for
//    random x, y, replicated spaces counted once (tp_mappings.h "Spaces"),
//    to 1e-5 of the Cauchy-Schwarz bound ||f(x)|| ||y||, dot products in
//    double;
//  - every documented aliasing form gives the out-of-place result;
//  - a group of one rank with out == in writes nothing (the buffer is
//    read-only memory);
//  - T not divisible by TP is a claw::Error naming both flags, on every rank
//    before any collective.
//
//   mpirun -np N test_tp_mappings     (N = 1, 2, 4)
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "claw/comm/world.h"
#include "claw/core/error.h"
#include "claw/core/philox.h"
#include "claw/model/tp_mappings.h"
#include "mpi_gtest.h"

namespace claw {
namespace {

comm::World* g_world = nullptr;
std::vector<std::shared_ptr<comm::Group>> g_groups;  // the TP groups under test

struct Shape {
  int64_t B, T, C;
};
const Shape kShapes[] = {{3, 8, 5}, {1, 4, 1}, {2, 64, 33}};

// What a buffer holds across the ranks of the group.
enum class Space {
  replicated,  // full [N, C], the same on every rank
  partial,     // full [N, C], one per rank (partial sums)
  piece,       // [N/TP, C], one per rank (this rank's rows)
};

enum class Ref { mine, sum, slice, concat, sum_slice };

using Fn = std::function<void(comm::Group&, float*, const float*, const Shape&)>;

struct Mapping {
  const char* name;
  Space in, out;
  Fn fwd, bwd;
  Ref fwd_ref, bwd_ref;
};

int64_t numel(Space s, const Shape& sh, int tp) {
  return s == Space::piece ? sh.B * sh.T / tp * sh.C : sh.B * sh.T * sh.C;
}

Fn elementwise(void (*f)(comm::Group&, float*, const float*, int64_t)) {
  return [f](comm::Group& g, float* o, const float* i, const Shape& s) { f(g, o, i, s.B * s.T * s.C); };
}
Fn sequence(void (*f)(comm::Group&, float*, const float*, int64_t, int64_t, int64_t)) {
  return [f](comm::Group& g, float* o, const float* i, const Shape& s) { f(g, o, i, s.B, s.T, s.C); };
}

std::vector<Mapping> mappings() {
  using namespace model;
  return {
      {"copy_to_tp", Space::replicated, Space::partial, elementwise(copy_to_tp_forward),
       elementwise(copy_to_tp_backward), Ref::mine, Ref::sum},
      {"reduce_from_tp", Space::partial, Space::replicated, elementwise(reduce_from_tp_forward),
       elementwise(reduce_from_tp_backward), Ref::sum, Ref::mine},
      {"scatter_to_sp", Space::replicated, Space::piece, sequence(scatter_to_sp_forward),
       sequence(scatter_to_sp_backward), Ref::slice, Ref::concat},
      {"gather_from_sp", Space::piece, Space::partial, sequence(gather_from_sp_forward),
       sequence(gather_from_sp_backward), Ref::concat, Ref::sum_slice},
      {"reduce_scatter_to_sp", Space::partial, Space::piece, sequence(reduce_scatter_to_sp_forward),
       sequence(reduce_scatter_to_sp_backward), Ref::sum_slice, Ref::concat},
  };
}

// The data a group member holds in a space: replicated data is keyed by the
// group (its first member), per-rank data by the world rank.
std::vector<float> data(uint64_t purpose, Space s, const comm::Group& g, int member, const Shape& sh,
                        bool integers) {
  const int key = s == Space::replicated ? g.world_ranks()[0] : g.world_ranks()[member];
  const RandomStream rng(1234 + key, purpose);
  std::vector<float> v(numel(s, sh, g.size()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = integers ? static_cast<float>(static_cast<int>(rng.block(i)[0] % 17) - 8) : rng.normal(i);
  return v;
}

std::vector<float> reference(Ref ref, const std::vector<std::vector<float>>& all, int rank, int64_t piece) {
  const int P = static_cast<int>(all.size());
  std::vector<float> sum(all[0].size(), 0.0f);
  for (const auto& a : all)
    for (size_t i = 0; i < a.size(); ++i) sum[i] += a[i];
  switch (ref) {
    case Ref::mine: return all[rank];
    case Ref::sum: return sum;
    case Ref::slice: return {all[rank].begin() + rank * piece, all[rank].begin() + (rank + 1) * piece};
    case Ref::sum_slice: return {sum.begin() + rank * piece, sum.begin() + (rank + 1) * piece};
    case Ref::concat: {
      std::vector<float> out;
      for (int q = 0; q < P; ++q) out.insert(out.end(), all[q].begin(), all[q].end());
      return out;
    }
  }
  return {};
}

// The inner product of a space: replicated counted once, per-rank summed over the group.
double dot(comm::Group& g, Space s, const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += static_cast<double>(a[i]) * b[i];
  return s == Space::replicated ? d : g.all_reduce_value(d);
}

std::string where(const comm::Group& g, const Mapping& m, const Shape& s) {
  return std::string(m.name) + " on " + g.name() + " (tp " + std::to_string(g.size()) + ", rank " +
         std::to_string(g.rank()) + "), B " + std::to_string(s.B) + " T " + std::to_string(s.T) + " C " +
         std::to_string(s.C);
}

TEST(TpMappings, ForwardAndBackwardEqualReference) {
  for (auto& gp : g_groups) {
    comm::Group& g = *gp;
    const int P = g.size(), r = g.rank();
    for (const Shape& sh : kShapes)
      for (const Mapping& m : mappings()) {
        SCOPED_TRACE(where(g, m, sh));
        const int64_t piece = sh.B * sh.T / P * sh.C;
        // Forward: x in the input space.
        std::vector<std::vector<float>> xs, ys;
        for (int q = 0; q < P; ++q) {
          xs.push_back(data(1, m.in, g, q, sh, true));
          ys.push_back(data(2, m.out, g, q, sh, true));
        }
        std::vector<float> out(numel(m.out, sh, P), NAN);
        m.fwd(g, out.data(), xs[r].data(), sh);
        EXPECT_EQ(out, reference(m.fwd_ref, xs, r, piece)) << "forward";
        // Backward: dy in the output space, dx in the input space.
        std::vector<float> din(numel(m.in, sh, P), NAN);
        m.bwd(g, din.data(), ys[r].data(), sh);
        EXPECT_EQ(din, reference(m.bwd_ref, ys, r, piece)) << "backward";
      }
  }
}

TEST(TpMappings, AdjointIdentity) {
  for (auto& gp : g_groups) {
    comm::Group& g = *gp;
    const int P = g.size();
    for (const Shape& sh : kShapes)
      for (const Mapping& m : mappings()) {
        SCOPED_TRACE(where(g, m, sh));
        const std::vector<float> x = data(3, m.in, g, g.rank(), sh, false);
        const std::vector<float> y = data(4, m.out, g, g.rank(), sh, false);
        std::vector<float> fx(numel(m.out, sh, P)), fty(numel(m.in, sh, P));
        m.fwd(g, fx.data(), x.data(), sh);
        m.bwd(g, fty.data(), y.data(), sh);
        const double lhs = dot(g, m.out, fx, y), rhs = dot(g, m.in, x, fty);
        const double bound = std::sqrt(dot(g, m.out, fx, fx) * dot(g, m.out, y, y));
        EXPECT_GT(bound, 0.0);
        EXPECT_LE(std::abs(lhs - rhs), 1e-5 * bound) << "<f(x), y> = " << lhs << ", <x, f*(y)> = " << rhs;
      }
  }
}

// Every aliasing form the header allows gives the out-of-place result.
TEST(TpMappings, InPlaceFormsEqualOutOfPlace) {
  for (auto& gp : g_groups) {
    comm::Group& g = *gp;
    const int P = g.size(), r = g.rank();
    for (const Shape& sh : kShapes)
      for (const Mapping& m : mappings())
        for (bool forward : {true, false}) {
          SCOPED_TRACE(where(g, m, sh) + (forward ? " forward" : " backward"));
          const Space src = forward ? m.in : m.out, dst = forward ? m.out : m.in;
          const Fn& f = forward ? m.fwd : m.bwd;
          const std::vector<float> in = data(5, src, g, r, sh, true);
          std::vector<float> expected(numel(dst, sh, P));
          f(g, expected.data(), in.data(), sh);
          // out == in: the buffer is the larger of the two.
          std::vector<float> buf(std::max(in.size(), expected.size()), NAN);
          std::copy(in.begin(), in.end(), buf.begin());
          f(g, buf.data(), buf.data(), sh);
          EXPECT_TRUE(std::equal(expected.begin(), expected.end(), buf.begin())) << "out == in";
          // All-gathers: the piece already in its slot of the output.
          if (src == Space::piece && dst != Space::piece) {
            std::vector<float> full(expected.size(), NAN);
            float* slot = full.data() + r * static_cast<int64_t>(in.size());
            std::copy(in.begin(), in.end(), slot);
            f(g, full.data(), slot, sh);
            EXPECT_EQ(full, expected) << "in == out + rank * piece";
          }
        }
  }
}

// A one-rank group with out == in touches nothing: the buffer is read-only,
// so any copy would fault. Distinct buffers get a copy (or this rank's rows).
TEST(TpMappings, OneRankIsANoOp) {
  comm::SelfGroup self("tp_self", g_world->rank());
  std::vector<comm::Group*> ones = {&self};
  if (g_world->size() == 1) ones.push_back(g_world->world_group().get());
  const Shape sh{3, 8, 5};
  const int64_t n = sh.B * sh.T * sh.C;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = (n * sizeof(float) + page - 1) / page * page;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  float* ro = static_cast<float*>(mem);
  for (int64_t i = 0; i < n; ++i) ro[i] = static_cast<float>(i);
  ASSERT_EQ(mprotect(mem, bytes, PROT_READ), 0);
  for (comm::Group* g : ones)
    for (const Mapping& m : mappings()) {
      SCOPED_TRACE(where(*g, m, sh));
      m.fwd(*g, ro, ro, sh);
      m.bwd(*g, ro, ro, sh);
      std::vector<float> out(n, NAN);
      m.fwd(*g, out.data(), ro, sh);
      EXPECT_TRUE(std::equal(out.begin(), out.end(), ro)) << "forward copy";
      std::fill(out.begin(), out.end(), NAN);
      m.bwd(*g, out.data(), ro, sh);
      EXPECT_TRUE(std::equal(out.begin(), out.end(), ro)) << "backward copy";
    }
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(ro[i], static_cast<float>(i));
  munmap(mem, bytes);
}

TEST(TpMappings, SequenceNotDivisibleByTpIsAnError) {
  EXPECT_NO_THROW(model::check_sequence_split(7, 1));
  EXPECT_THROW(model::check_sequence_split(6, 4), Error);
  EXPECT_THROW(model::check_sequence_split(0, 1), Error);
  try {
    model::check_sequence_split(6, 4);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--seq-length 6"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--tensor-model-parallel-size 4"), std::string::npos) << e.what();
  }
  const model::SeqShard s = model::seq_shard(3, 8, 4, 2);
  EXPECT_EQ(s.rows, 6);
  EXPECT_EQ(s.first, 12);
  // Every rank of a group refuses before any collective, so nothing waits.
  for (auto& gp : g_groups) {
    comm::Group& g = *gp;
    if (g.size() == 1) continue;
    const Shape bad{2, 3 * g.size() + 1, 4};
    std::vector<float> a(1024), b(1024);
    for (const Mapping& m : mappings()) {
      if (m.in != Space::piece && m.out != Space::piece) continue;  // elementwise: no sequence split
      SCOPED_TRACE(where(g, m, bad));
      EXPECT_THROW(m.fwd(g, b.data(), a.data(), bad), Error);
      EXPECT_THROW(m.bwd(g, b.data(), a.data(), bad), Error);
    }
    g.barrier();  // the group still works
  }
}

}  // namespace
}  // namespace claw

int main(int argc, char** argv) {
  std::unique_ptr<claw::comm::World> world = claw::testing_mpi::init(argc, argv);
  claw::g_world = world.get();
  const int n = world->size();
  claw::g_groups.push_back(world->world_group());
  if (n > 1) {
    std::vector<int> reversed(n);
    for (int i = 0; i < n; ++i) reversed[i] = n - 1 - i;
    claw::g_groups.push_back(world->split("tp_reversed", {reversed}));
  }
  if (n == 4) claw::g_groups.push_back(world->split("tp_pairs", {{0, 1}, {2, 3}}));
  const int rc = claw::testing_mpi::run_all_tests_on_every_rank(*world);
  claw::g_groups.clear();
  return rc;
}
