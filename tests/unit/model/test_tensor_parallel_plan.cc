// Tensor parallelism without MPI: what the layout validation refuses, how KV
// groups are replicated, and the activation plan of one TP rank (pure).
#include <gtest/gtest.h>

#include <string>

#include "claw/core/error.h"
#include "claw/model/gpt.h"
#include "claw/model/tensor_parallel.h"

namespace claw::model {
namespace {

std::string error_of(const ModelConfig& c, int tp, bool sp, int64_t T = 0) {
  try {
    validate_tensor_parallel(c, tp, sp, T);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TensorParallelLayout, RefusedLayoutsNameTheFlags) {
  ModelConfig gpt = model_preset("gpt2-124m");  // 12 heads, FFN 3072
  EXPECT_EQ(error_of(gpt, 4, false), "");
  EXPECT_EQ(error_of(gpt, 4, true, 1024), "");
  EXPECT_NE(error_of(gpt, 8, false).find("--tensor-model-parallel-size 8 does not divide --num-attention-heads 12"),
            std::string::npos);
  EXPECT_NE(error_of(gpt, 1, true).find("--sequence-parallel needs --tensor-model-parallel-size > 1"),
            std::string::npos);
  EXPECT_NE(error_of(gpt, 4, true, 1022).find("--seq-length 1022 is not a multiple of --tensor-model-parallel-size 4"),
            std::string::npos);
  ModelConfig ffn = gpt;
  ffn.ffn_hidden_size = 3070;
  EXPECT_NE(error_of(ffn, 4, false).find("does not divide --ffn-hidden-size 3070"), std::string::npos);
  ModelConfig llama = model_preset("llama-tiny");  // 8 heads, 2 KV groups
  EXPECT_EQ(error_of(llama, 4, false), "");        // groups replicated on 2 ranks each
  EXPECT_EQ(error_of(llama, 8, true, 64), "");
  ModelConfig odd = llama;
  odd.num_attention_heads = 12;
  odd.num_query_groups = 3;
  odd.hidden_size = 384;
  EXPECT_NE(error_of(odd, 2, false).find("--tensor-model-parallel-size 2 and --num-query-groups 3"), std::string::npos);
  EXPECT_NE(error_of(gpt, 0, false).find("--tensor-model-parallel-size must be at least 1"), std::string::npos);
}

TEST(TensorParallelLayout, KvReplicaSets) {
  using Sets = std::vector<std::vector<int>>;
  EXPECT_EQ(kv_replica_sets(2, 8), (Sets{{0}, {1}}));
  EXPECT_EQ(kv_replica_sets(4, 2), (Sets{{0, 1}, {2, 3}}));
  EXPECT_EQ(kv_replica_sets(8, 1), (Sets{{0, 1, 2, 3, 4, 5, 6, 7}}));
  const ModelConfig llama = model_preset("llama-tiny");
  EXPECT_EQ((TpDims{4, false}.kv_groups(llama)), 1);
  EXPECT_EQ((TpDims{4, false}.kv_replicas(llama)), 2);
  EXPECT_EQ((TpDims{2, false}.kv_groups(llama)), 1);
  EXPECT_EQ((TpDims{2, false}.kv_replicas(llama)), 1);
}

// No rank ever plans logits over the whole vocabulary when TP > 1: the only
// logits buffer is one chunk of rows over this rank's Vp/TP columns, and no
// buffer is a whole number of full-vocabulary rows as large as a chunk.
TEST(TensorParallelPlan, NoRankHoldsFullVocabularyLogits) {
  for (const char* preset : {"gpt2-124m", "llama-tiny", "llama3-8b"})
    for (int tp : {1, 2, 4, 8})
      for (bool sp : {false, true}) {
        const ModelConfig c = model_preset(preset);
        if (!error_of(c, tp, sp, 1024).empty()) continue;
        const int64_t B = 1, T = 1024, N = B * T, chunk = Scratch::logits_chunk(N);
        const int64_t Vp = c.padded_vocab_size(tp), full_row = Vp * sizeof(float);
        ModelConfig shallow = c;
        shallow.num_layers = 2;  // the plan's per-layer entries repeat
        const ArenaPlan plan = plan_activations(shallow, B, T, {}, TpDims{tp, sp});
        SCOPED_TRACE(std::string(preset) + " tp " + std::to_string(tp) + (sp ? " sp" : ""));
        int logits = 0;
        for (const ArenaPlan::Entry& e : plan.entries()) {
          if (e.name.find("logits") != std::string::npos) {
            ++logits;
            EXPECT_EQ(e.name, "scratch.logits");
            EXPECT_EQ(static_cast<int64_t>(e.bytes), chunk * (Vp / tp) * static_cast<int64_t>(sizeof(float)));
          }
          if (tp > 1) {
            EXPECT_FALSE(static_cast<int64_t>(e.bytes) >= chunk * full_row &&
                         static_cast<int64_t>(e.bytes) % full_row == 0)
                << e.name << ": " << e.bytes << " bytes, a whole number of full-vocabulary rows";
          }
        }
        EXPECT_EQ(logits, 1);
      }
}

// Sequence parallelism divides every saved activation by TP (Korthikanti et
// al. 2022, Table 2: sbh(34/t + 5as/(ht)) -- every term over t); without it
// the residual stream, norms and their statistics stay whole.
TEST(TensorParallelPlan, SequenceParallelDividesEverySavedActivation) {
  ModelConfig c = model_preset("gpt2-124m");
  c.num_layers = 1;
  auto layer_bytes = [&](int tp, bool sp) {
    int64_t sum = 0;
    const ArenaPlan plan = plan_activations(c, 2, 1024, {}, TpDims{tp, sp});
    for (const ArenaPlan::Entry& e : plan.entries())
      if (e.name.rfind("layers.0.", 0) == 0) sum += static_cast<int64_t>(e.bytes);
    return sum;
  };
  const int64_t one = layer_bytes(1, false);
  for (int tp : {2, 4}) {
    EXPECT_EQ(layer_bytes(tp, true) * tp, one) << tp;
    EXPECT_GT(layer_bytes(tp, false) * tp, one) << tp;
  }
}

}  // namespace
}  // namespace claw::model
