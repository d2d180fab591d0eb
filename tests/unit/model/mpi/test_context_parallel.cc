// Context-parallel attention (model/context_parallel.h), ring (p2p) and
// heads-for-sequence (a2a), over the world as the CP group equals the
// single-rank flash kernel on the full rows: every rank
// builds the same seeded q, k, v and output gradient, computes the reference
// (kernels::attention_forward / backward), and checks its two chunks of out,
// lse, dq, dk and dv (1e-5 of the largest reference value). Cases: plain
// causal, grouped-query heads, and packed documents whose boundaries fall
// inside chunks and across ranks (a document spanning every chunk of a rank
// pair included). a2a's lse is its heads' full rows, checked as such; its
// heads-per-rank and KV-group rules are refused with the flags named.
//
//   mpirun -np N test_context_parallel     (N = 1, 2, 4)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "claw/comm/world.h"
#include "claw/core/error.h"
#include "claw/core/philox.h"
#include "claw/kernels/cpu/attention.h"
#include "claw/model/context_parallel.h"
#include "mpi_gtest.h"

namespace claw {
namespace {

std::unique_ptr<comm::World> g_world;

struct Case {
  std::string name;
  int64_t B, T, H, G, D;
  std::vector<std::vector<int64_t>> documents;  // per row, lengths summing to T (empty: one causal sequence)
};

std::vector<float> seeded(int64_t n, uint64_t key) {
  RandomStream r(7, key);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<float>(r.block(static_cast<uint64_t>(i))[0] % 20001) / 10000.0f - 1.0f;
  return v;
}

// The largest |got - want| over the largest |want|.
double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::abs(want[i])));
  }
  return diff / scale;
}

void check(const Case& c, model::CpCommType type) {
  comm::Group* cp = g_world->world_group().get();
  const int64_t B = c.B, T = c.T, H = c.H, G = c.G, D = c.D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const auto q = seeded(B * T * H * D, 1), k = seeded(B * T * G * D, 2), v = seeded(B * T * G * D, 3),
             dout = seeded(B * T * H * D, 4);
  std::vector<int32_t> seg;
  for (const auto& lengths : c.documents) {
    int32_t start = 0;
    for (int64_t len : lengths) {
      seg.insert(seg.end(), static_cast<size_t>(len), start);
      start += static_cast<int32_t>(len);
    }
  }
  const int32_t* seg_ptr = seg.empty() ? nullptr : seg.data();
  // The reference on one rank.
  const CpuCtx one{1};
  std::vector<float> out(q.size()), lse(static_cast<size_t>(B * H * T)), dq(q.size()), dk(k.size()), dv(v.size());
  kernels::attention_forward(one, out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, G, D, scale, seg_ptr);
  kernels::attention_backward(one, dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                              out.data(), lse.data(), B, T, H, G, D, scale, seg_ptr);
  // This rank's chunks through the ring.
  const auto chunks = model::CpChunks::of(T, cp->rank(), cp->size());
  const int64_t TL = chunks.local_tokens();
  const auto lq = model::cp_slice(chunks, q.data(), B, H * D), lk = model::cp_slice(chunks, k.data(), B, G * D),
             lv = model::cp_slice(chunks, v.data(), B, G * D),
             ldout = model::cp_slice(chunks, dout.data(), B, H * D);
  const std::vector<int32_t> lseg = seg.empty() ? std::vector<int32_t>{} : model::cp_slice(chunks, seg.data(), B, 1);
  for (int64_t t = 0; t < TL; ++t)  // positions: chunk r, then chunk 2 CP - 1 - r
    ASSERT_EQ(chunks.position(t), chunks.index(t < chunks.chunk ? 0 : 1) * chunks.chunk + t % chunks.chunk);
  const auto attn = model::make_cp_attention(type, cp, B, TL, H, G, D, scale);
  std::vector<float> gout(lq.size()), glse(static_cast<size_t>(B * H * TL)), gdq(lq.size()), gdk(lk.size()),
      gdv(lv.size());
  const CpuCtx ctx{1};
  attn->forward(ctx, gout.data(), glse.data(), lq.data(), lk.data(), lv.data(), lseg.empty() ? nullptr : lseg.data());
  attn->backward(ctx, gdq.data(), gdk.data(), gdv.data(), ldout.data(), lq.data(), lk.data(), lv.data(), gout.data(),
                glse.data(), lseg.empty() ? nullptr : lseg.data());
  const std::string where = c.name + " (" + model::to_string(type) + ") on CP rank " + std::to_string(cp->rank()) + " of " + std::to_string(cp->size());
  EXPECT_LT(rel_error(gout, model::cp_slice(chunks, out.data(), B, H * D)), 1e-5) << "out, " << where;
  if (type == model::CpCommType::p2p) {
    EXPECT_LT(rel_error(glse, model::cp_slice(chunks, lse.data(), B * H, 1)), 1e-6) << "lse, " << where;
  } else {  // this rank's heads, full rows
    const int64_t Hc = H / cp->size();
    std::vector<float> want;
    for (int64_t b = 0; b < B; ++b)
      want.insert(want.end(), lse.begin() + (b * H + cp->rank() * Hc) * T, lse.begin() + (b * H + (cp->rank() + 1) * Hc) * T);
    EXPECT_LT(rel_error(glse, want), 1e-6) << "lse, " << where;
  }
  EXPECT_LT(rel_error(gdq, model::cp_slice(chunks, dq.data(), B, H * D)), 1e-5) << "dq, " << where;
  EXPECT_LT(rel_error(gdk, model::cp_slice(chunks, dk.data(), B, G * D)), 1e-5) << "dk, " << where;
  EXPECT_LT(rel_error(gdv, model::cp_slice(chunks, dv.data(), B, G * D)), 1e-5) << "dv, " << where;
}

class CpAttention : public ::testing::TestWithParam<model::CpCommType> {};

TEST_P(CpAttention, CausalEqualsOneRank) { check({"causal", 2, 64, 4, 4, 16, {}}, GetParam()); }

// 2 KV groups: at CP 4 under a2a each is read by two ranks' heads, and its
// dk, dv are the sum of theirs.
TEST_P(CpAttention, GroupedQueryHeadsEqualOneRank) { check({"grouped-query", 1, 32, 4, 2, 8, {}}, GetParam()); }

// Chunks of 64 / (2 CP) = 8 (CP 4), 16 (CP 2), 32 (CP 1) tokens: documents
// of 5, 19, 3, 37 start and end inside chunks and span several; row 1 is
// one document then a run of one-token documents.
TEST_P(CpAttention, PackedDocumentsAcrossChunksEqualOneRank) {
  check({"packed documents", 2, 64, 4, 1, 16, {{5, 19, 3, 37}, {56, 1, 1, 1, 1, 1, 1, 1, 1}}}, GetParam());
}

INSTANTIATE_TEST_SUITE_P(CommType, CpAttention, ::testing::Values(model::CpCommType::p2p, model::CpCommType::a2a),
                         [](const auto& info) { return std::string(model::to_string(info.param)); });

void expect_refused(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(CpAttentionRules, AllToAllNeedsCpToSplitHeadsAndGroups) {
  expect_refused([] { model::validate_cp_heads(model::CpCommType::a2a, 4, 6, 6); },
                 "--context-parallel-size 4 must divide the 6 heads");
  expect_refused([] { model::validate_cp_heads(model::CpCommType::a2a, 4, 12, 6); },
                 "--context-parallel-size 4 and the 6 KV groups");
  model::validate_cp_heads(model::CpCommType::p2p, 4, 6, 6);  // the ring takes any heads
  expect_refused([] { model::parse_cp_comm_type("ring"); }, "--cp-comm-type ring: expected p2p");
}

TEST(CpAttentionRules, SequenceNotInTwoCpChunksIsRefused) {
  try {
    model::CpChunks::of(36, 0, 4);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--seq-length 36 is not a multiple of 2 x --context-parallel-size 4"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace claw

int main(int argc, char** argv) {
  claw::g_world = claw::testing_mpi::init(argc, argv);
  return claw::testing_mpi::run_all_tests_on_every_rank(*claw::g_world);
}
