// Distributed checkpoints on one process: the box arithmetic every layout
// change rests on, a save read back into another layout (ZeRO-3 shards of two
// data-parallel ranks), corruption named by file and tensor, and the Hugging
// Face mapping (GPT-2's fused, transposed c_attn; bitwise round trips).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "claw/ckpt/checkpoint.h"
#include "claw/core/dtype_convert.h"
#include "claw/ckpt/hf.h"
#include "claw/core/error.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/model/gpt.h"
#include "expect_error.h"

namespace claw::ckpt {
namespace {

namespace fs = std::filesystem;

// Row-major index of a point within the whole tensor.
int64_t flat(const std::vector<int64_t>& shape, const std::vector<int64_t>& p) {
  Box whole;
  whole.offset.assign(shape.size(), 0);
  whole.size = shape;
  return index_in(whole, p);
}

TEST(Ckpt, FlatRangeBoxesAreConsecutiveRunsCoveringTheRange) {
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{7}, {5, 6}, {3, 4, 5}, {2, 3, 2, 3}}) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    for (int64_t begin = 0; begin < numel; ++begin)
      for (int64_t n = 1; begin + n <= numel; ++n) {
        const std::vector<Box> boxes = flat_range_boxes(shape, begin, n);
        ASSERT_LE(boxes.size(), 2 * shape.size() - 1) << begin << "+" << n;
        int64_t at = begin;
        for (const Box& b : boxes) {
          // A box is a run of consecutive elements: its first and last
          // elements are numel() - 1 apart in the tensor's order.
          std::vector<int64_t> last = b.offset;
          for (size_t d = 0; d < shape.size(); ++d) last[d] += b.size[d] - 1;
          ASSERT_EQ(flat(shape, b.offset), at);
          ASSERT_EQ(flat(shape, last) - at + 1, b.numel());
          at += b.numel();
        }
        ASSERT_EQ(at, begin + n);
      }
  }
}

TEST(Ckpt, ShardPiecesDropVocabularyPaddingAndPlaceTensorParallelSlices) {
  model::ParamSpec spec{.name = "w", .shape = {8, 3}, .init_rows = 6};
  spec.split(0, 2, 1, "tp");  // global rows 4-7; 6 and 7 are padding
  EXPECT_EQ(checkpoint_shape(spec), (std::vector<int64_t>{6, 3}));
  const std::vector<ShardPiece> all = shard_pieces({.tensor = "model.w", .spec = &spec, .begin = 0, .n = 12});
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].box.offset, (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(all[0].box.size, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(all[0].local_begin, 0);
  // A ZeRO piece: local elements 5..9 = local row 1 col 2, row 2, row 3 col 0;
  // globally rows 5 (col 2), 6 and 7, the last two padding.
  const std::vector<ShardPiece> zero = shard_pieces({.tensor = "model.w", .spec = &spec, .begin = 5, .n = 5});
  ASSERT_EQ(zero.size(), 1u);
  EXPECT_EQ(zero[0].box.offset, (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(zero[0].box.size, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(zero[0].local_begin, 5);
}

model::ModelConfig tiny(bool llama) {
  model::ModelConfig c = model::model_preset(llama ? "llama-tiny" : "gpt2-tiny");
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.num_query_groups = llama ? 2 : 0;
  c.ffn_hidden_size = llama ? 48 : 0;
  c.num_layers = 2;
  c.vocab_size = 300;
  c.max_position_embeddings = 64;
  return c;
}

class CkptDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("claw_test_ckpt_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }
  fs::path dir_;
};

// Saves a one-rank model's values as iteration 3 of dir.
void save_model(model::GPT& m, const std::string& root) {
  comm::SelfGroup self("world");
  Saver saver(self, {.root = root});
  saver.save(collect_shards({&m.store()}, nullptr, {.optimizer = false}), {.iteration = 3});
}

TEST_F(CkptDir, LoadsIntoZero3ShardsOfTwoRanks) {
  const CpuCtx ctx = kernels::make_cpu_ctx(1);
  model::GPT full(tiny(false));
  full.init_weights(ctx, 11);
  save_model(full, dir());
  const std::string d = resolve_load_dir(dir());
  EXPECT_EQ(d, iteration_dir(dir(), 3));
  const Metadata meta = Metadata::read(d);
  for (int r = 0; r < 2; ++r) {
    model::GPT part(tiny(false), {.shards = 2, .shard = r, .shard_values = true, .shard_grads = true});
    load_shards(d, meta, collect_shards({&part.store()}, nullptr, {.zero_stage = 3}));
    const int64_t lo = part.store().regions()[0].shard_lo(), hi = part.store().regions()[0].shard_hi();
    // Every parameter element in the shard equals the full model's (the
    // alignment gaps between parameters are zero in both).
    for (int64_t i = lo; i < hi; ++i) ASSERT_EQ(part.store().value_shard(0)[i - lo], full.store().values()[i]) << i;
  }
}

// Chunks record their dtype and load with conversion: a checkpoint saved in
// bf16 (or fp8 e4m3) loads into an fp32 model with every value widened
// exactly, and an fp32 checkpoint loads into bf16 memory rounded to nearest
// even, element for element what core/dtype_convert gives.
TEST_F(CkptDir, ChunksInOtherDtypesLoadWithExactConversion) {
  const CpuCtx ctx = kernels::make_cpu_ctx(1);
  model::GPT m(tiny(true));
  m.init_weights(ctx, 21);
  const float* values = m.store().values();
  const int64_t total = m.store().total();
  for (DType stored : {DType::bf16, DType::e4m3}) {
    const std::string root = dir() + "/" + std::string(dtype_name(stored));
    // The same shards, held in `stored`.
    std::vector<Shard> shards = collect_shards({&m.store()}, nullptr, {.optimizer = false});
    std::vector<std::vector<uint8_t>> held;
    for (Shard& s : shards) {
      held.emplace_back(static_cast<size_t>(s.n) * dtype_size(stored));
      convert(DType::f32, s.data, stored, held.back().data(), s.n);
      s.data = held.back().data();
      s.dtype = stored;
    }
    comm::SelfGroup self("world");
    Saver(self, {.root = root}).save(shards, {.iteration = 1});
    const std::string d = iteration_dir(root, 1);
    const Metadata meta = Metadata::read(d);
    for (const TensorMeta& t : meta.tensors) EXPECT_EQ(t.dtype, stored) << t.name;
    model::GPT loaded(tiny(true));
    load_shards(d, meta, collect_shards({&loaded.store()}, nullptr, {.optimizer = false}));
    for (int64_t i = 0; i < total; ++i) {
      float expect = 0;
      uint16_t b = 0;
      uint8_t e = 0;
      if (stored == DType::bf16) {
        b = f32_to_bf16(values[i]);
        expect = bf16_to_f32(b);
      } else {
        e = f32_to_e4m3(values[i]);
        expect = e4m3_to_f32(e);
      }
      ASSERT_EQ(loaded.store().values()[i], expect) << dtype_name(stored) << " element " << i;
    }
  }
  // fp32 chunks into bf16 memory.
  save_model(m, dir());
  const std::string d = iteration_dir(dir(), 3);
  std::vector<Shard> into = collect_shards({&m.store()}, nullptr, {.optimizer = false});
  std::vector<std::vector<uint16_t>> bf(into.size());
  std::vector<std::vector<float>> reference(into.size());
  for (size_t k = 0; k < into.size(); ++k) {
    reference[k].assign(static_cast<const float*>(into[k].data), static_cast<const float*>(into[k].data) + into[k].n);
    bf[k].assign(into[k].n, 0xffff);
    into[k].data = bf[k].data();
    into[k].dtype = DType::bf16;
  }
  load_shards(d, Metadata::read(d), into);
  for (size_t k = 0; k < into.size(); ++k)
    for (int64_t i = 0; i < into[k].n; ++i)
      ASSERT_EQ(bf[k][i], f32_to_bf16(reference[k][i])) << into[k].tensor << " element " << i;
}

TEST_F(CkptDir, CorruptionAndTruncationNameTheFileAndTensor) {
  const CpuCtx ctx = kernels::make_cpu_ctx(1);
  model::GPT m(tiny(true));
  m.init_weights(ctx, 5);
  save_model(m, dir());
  const std::string d = iteration_dir(dir(), 3), file = d + "/" + rank_file_name(0);
  const Metadata meta = Metadata::read(d);
  const auto shards = collect_shards({&m.store()}, nullptr, {.optimizer = false});
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  try {
    load_shards(d, meta, shards);
    FAIL() << "a flipped byte was not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(rank_file_name(0) + ": checksum mismatch in tensor 'model.embedding"),
              std::string::npos)
        << e.what();
  }
  fs::resize_file(file, 1000);
  try {
    load_shards(d, meta, shards);
    FAIL() << "a truncated file was not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated: tensor '"), std::string::npos) << e.what();
  }
  // Another shape is refused before reading, naming the tensor.
  model::ModelConfig wider = tiny(true);
  wider.hidden_size = 64;
  model::GPT w(wider);
  try {
    check_compatible(meta, d, collect_shards({&w.store()}, nullptr, {.optimizer = false}));
    FAIL() << "another shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.embedding.word_embeddings.weight' has shape [300, 32] there, but "
                                         "[300, 64]"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CkptDir, MetadataErrorsNameTheField) {
  fs::create_directories(dir());
  std::ofstream(dir() + "/metadata.json") << R"({"format": "claw-distributed-checkpoint", "version": 1,
      "iteration": 1, "checksum_block": 1048576, "files": [], "tensors": []})";
  try {
    Metadata::read(dir());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metadata.json: chunks: missing"), std::string::npos) << e.what();
  }
}

// Every field is checked for its type and range, named by its JSON path; the
// state section's known fields too (the trainer's --load reads them).
TEST(Ckpt, MetadataFieldsAreValidatedByJsonPath) {
  const nlohmann::json good = nlohmann::json::parse(R"({"format": "claw-distributed-checkpoint", "version": 1,
      "iteration": 2, "checksum_block": 1048576, "files": ["rank_00000.bin"],
      "tensors": [{"name": "model.w", "shape": [4, 8], "dtype": "F32"}],
      "chunks": [{"tensor": "model.w", "offsets": [0, 0], "sizes": [4, 8], "file": 0, "byte_offset": 0,
                  "length": 128, "checksums": ["0123456789abcdef"]}],
      "model": null, "args": {},
      "state": {"consumed_train_samples": 8, "seed": 1234, "rng": {"kind": "philox4x32-10", "seed": 1234},
                "layout": {"world_size": 1, "tp": 1, "pp": 1, "dp": 1, "zero_stage": 0, "sequence_parallel": false}}})");
  EXPECT_NO_THROW(Metadata::from_json(good, "m.json"));
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](auto& j) { j["state"]["layout"]["dp"] = nlohmann::json::object(); },
       "m.json: state.layout.dp: expected an integer in [1, 2147483647], got an object"},
      {[](auto& j) { j["state"]["layout"]["zero_stage"] = 4; },
       "m.json: state.layout.zero_stage: expected an integer in [0, 3], got 4"},
      {[](auto& j) { j["state"]["layout"]["sequence_parallel"] = "no"; },
       "m.json: state.layout.sequence_parallel: expected true or false, got a string"},
      {[](auto& j) { j["state"]["consumed_train_samples"] = -1; },
       "m.json: state.consumed_train_samples: expected an integer >= 0, got -1"},
      {[](auto& j) { j["state"]["seed"] = 1.5; }, "m.json: state.seed: expected an integer >= 0, got 1.5"},
      {[](auto& j) { j["state"]["rng"] = "philox"; }, "m.json: state.rng: expected an object, got a string"},
      {[](auto& j) { j["state"] = nlohmann::json::array(); }, "m.json: state: expected an object, got an array"},
      {[](auto& j) { j["iteration"] = "2"; }, "m.json: iteration: expected an integer >= 0, got a string"},
      {[](auto& j) { j["checksum_block"] = 0; }, "m.json: checksum_block: expected an integer in [1, "},
      {[](auto& j) { j["files"][0] = "../rank_00000.bin"; }, "m.json: files[0]: '../rank_00000.bin' is not a file name"},
      {[](auto& j) { j["tensors"][0]["shape"][1] = -8; }, "m.json: tensors[0].shape[1]: expected an integer in [0, "},
      {[](auto& j) { j["tensors"][0]["dtype"] = 32; }, "m.json: tensors[0].dtype: expected a string, got 32"},
      {[](auto& j) { j["chunks"][0]["sizes"] = 4; }, "m.json: chunks[0].sizes: expected an array, got 4"},
      {[](auto& j) { j["chunks"][0]["byte_offset"] = -64; },
       "m.json: chunks[0].byte_offset: expected an integer >= 0, got -64"},
      {[](auto& j) { j["chunks"][0]["offsets"][1] = 4; }, "m.json: chunks[0]: a chunk of 'model.w' reaches 12 along dimension 1"},
      {[](auto& j) { j["chunks"][0]["offsets"] = {0}; }, "m.json: chunks[0]: a chunk of 'model.w' has 1 offsets but 2 sizes"},
      {[](auto& j) { j["chunks"][0]["file"] = 1; }, "m.json: chunks[0].file: a chunk of 'model.w' names file 1 of 1"},
      {[](auto& j) { j["chunks"][0]["checksums"][0] = "xyz"; }, "m.json: chunks[0].checksums[0]: checksum 'xyz'"},
      {[](auto& j) { j["chunks"][0]["checksums"].push_back("0123456789abcdef"); },
       "m.json: chunks[0].checksums: a chunk of 'model.w' has 2 checksums for 128 bytes"},
      {[](auto& j) { j["chunks"][0].erase("length"); }, "m.json: chunks[0].length: missing"},
  };
  for (const auto& [mutate, want] : cases) {
    nlohmann::json j = good;
    mutate(j);
    try {
      Metadata::from_json(j, "m.json");
      ADD_FAILURE() << "accepted; wanted: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what() << "\nwanted: " << want;
    }
  }
}

TEST(Ckpt, HuggingFaceMappingRoundTripsBitwise) {
  for (bool llama : {false, true}) {
    const model::ModelConfig cfg = tiny(llama);
    std::mt19937 rng(3);
    std::normal_distribution<float> N(0, 1);
    std::map<std::string, std::vector<float>> ours;
    for (const model::ParamSpec& s : model_param_specs(cfg)) {
      int64_t n = 1;
      for (int64_t d : checkpoint_shape(s)) n *= d;
      auto& v = ours[s.name];
      for (int64_t i = 0; i < n; ++i) v.push_back(N(rng));
    }
    const HfStateDict hf = to_hf(cfg, [&](const std::string& p) { return ours.at(p); });
    for (const model::ParamSpec& s : model_param_specs(cfg)) EXPECT_EQ(from_hf(s, hf, "test"), ours.at(s.name)) << s.name;
    if (!llama) {
      // The Hub's original gpt2 files drop the "transformer." prefix.
      HfStateDict hub;
      for (const auto& [name, t] : hf) hub[name.rfind("transformer.", 0) == 0 ? name.substr(12) : name] = t;
      for (const model::ParamSpec& s : model_param_specs(cfg)) EXPECT_EQ(from_hf(s, hub, "hub"), ours.at(s.name));
    }
    const model::ModelConfig back = model_from_hf_config(hf_config(cfg), "config.json");
    EXPECT_EQ(back.num_layers, cfg.num_layers);
    EXPECT_EQ(back.kv_heads(), cfg.kv_heads());
    EXPECT_EQ(back.ffn(), cfg.ffn());
    EXPECT_EQ(back.tied(), cfg.tied());
    EXPECT_EQ(back.normalization, cfg.normalization);
    EXPECT_EQ(back.norm_epsilon, cfg.norm_epsilon);
    if (llama) {
      // nn.Linear: HF's q_proj is claw's, [out, in].
      EXPECT_EQ(hf.at("model.layers.1.self_attn.k_proj.weight").data, ours.at("layers.1.attention.k_proj.weight"));
      EXPECT_FALSE(hf.count("lm_head.weight") == 0);  // llama-tiny is untied
    } else {
      // Conv1D: c_attn.weight is [C, 3C] = [q | k | v] transposed.
      const int64_t C = cfg.hidden_size;
      const HfTensor& c_attn = hf.at("transformer.h.0.attn.c_attn.weight");
      EXPECT_EQ(c_attn.shape, (std::vector<int64_t>{C, 3 * C}));
      const std::vector<float>& k = ours.at("layers.0.attention.k_proj.weight");
      for (int64_t i = 0; i < C; ++i)
        for (int64_t j = 0; j < C; ++j) ASSERT_EQ(c_attn.data[i * 3 * C + C + j], k[j * C + i]);
      EXPECT_EQ(hf.count("lm_head.weight"), 0u);  // tied: transformers saves wte only
    }
  }
}

// MixtralForCausalLM: each stacked expert matrix [E, F, C] is E HF tensors
// experts.{e}.w1/w3/w2; the config round-trips the MoE fields.
TEST(Ckpt, HuggingFaceMixtralStacksExperts) {
  model::ModelConfig cfg = model::model_preset("mixtral-tiny");
  cfg.num_layers = 2;
  cfg.hidden_size = 64;
  cfg.num_attention_heads = 4;
  cfg.ffn_hidden_size = 96;
  std::map<std::string, std::vector<float>> ours;
  float v = 0;
  for (const model::ParamSpec& s : model_param_specs(cfg)) {
    int64_t n = 1;
    for (int64_t d : checkpoint_shape(s)) n *= d;
    for (int64_t i = 0; i < n; ++i) ours[s.name].push_back(v += 1e-3f);
  }
  const HfStateDict hf = to_hf(cfg, [&](const std::string& p) { return ours.at(p); });
  for (const model::ParamSpec& s : model_param_specs(cfg)) EXPECT_EQ(from_hf(s, hf, "test"), ours.at(s.name)) << s.name;
  const std::vector<float>& gate = ours.at("layers.1.mlp.experts.gate_proj.weight");  // [8, 96, 64]
  const HfTensor& w1 = hf.at("model.layers.1.block_sparse_moe.experts.5.w1.weight");
  EXPECT_EQ(w1.shape, (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(w1.data, std::vector<float>(gate.begin() + 5 * 96 * 64, gate.begin() + 6 * 96 * 64));
  EXPECT_EQ(hf.at("model.layers.0.block_sparse_moe.experts.7.w2.weight").shape, (std::vector<int64_t>{64, 96}));
  EXPECT_EQ(hf.at("model.layers.0.block_sparse_moe.gate.weight").data, ours.at("layers.0.mlp.router.weight"));
  const nlohmann::json j = hf_config(cfg);
  EXPECT_EQ(j["architectures"][0], "MixtralForCausalLM");
  EXPECT_EQ(j["num_local_experts"], 8);
  const model::ModelConfig back = model_from_hf_config(j, "config.json");
  EXPECT_EQ(back.moe.num_experts, 8);
  EXPECT_EQ(back.moe.router_topk, 2);
  EXPECT_EQ(back.moe_ffn(), 96);
  EXPECT_EQ(back.moe.aux_loss_coeff, cfg.moe.aux_loss_coeff);
  // DeepSeek's shared expert and sigmoid routing have no Mixtral form.
  EXPECT_CLAW_ERROR(hf_config(model::model_preset("deepseek-tiny")), "MixtralForCausalLM only", "sigmoid",
                    "a shared expert");
  nlohmann::json windowed = j;
  windowed["sliding_window"] = 128;  // Mixtral's window: every layer's
  EXPECT_EQ(model_from_hf_config(windowed, "config.json").window_size, 128);
  EXPECT_EQ(hf_config(model_from_hf_config(windowed, "config.json"))["sliding_window"], 128);
}

// The Llama-shaped families: each option maps to its class and back, the
// tensors round-trip (Phi-3's fused qkv_proj and gate_up_proj as row
// slices), and what claw cannot honour is refused naming the field.
TEST(Ckpt, HuggingFaceFamiliesRoundTrip) {
  struct Family {
    const char* arch;
    void (*set)(model::ModelConfig&);
  };
  const Family families[] = {
      {"Qwen2ForCausalLM", [](model::ModelConfig& c) { c.add_qkv_bias = true; }},
      {"Qwen3ForCausalLM", [](model::ModelConfig& c) { c.qk_layernorm = true, c.kv_channels = 32; }},
      {"MistralForCausalLM", [](model::ModelConfig& c) { c.window_size = 8; }},
      {"Phi3ForCausalLM", [](model::ModelConfig& c) { c.hf_architecture = "Phi3ForCausalLM", c.window_size = 8; }},
      {"Gemma3ForCausalLM",
       [](model::ModelConfig& c) {
         c.mlp = model::Mlp::geglu;
         c.apply_layernorm_1p = c.post_sublayer_norm = c.scale_embedding = c.qk_layernorm = true;
         c.untie_embeddings_and_output_weights = false;
         c.kv_channels = 32;
         c.softmax_scale = 1 / std::sqrt(24.0);
         c.window_size = 8;
         c.window_attn_skip_freq = 2;
         c.local_rotary_base = 1e4;
       }},
      {"Olmo2ForCausalLM",
       [](model::ModelConfig& c) {
         c.qk_layernorm = c.qk_layernorm_full_width = c.post_sublayer_norm = true;
         c.pre_sublayer_norm = false;
       }},
  };
  for (const Family& f : families) {
    model::ModelConfig cfg = tiny(true);
    f.set(cfg);
    const nlohmann::json j = hf_config(cfg);
    EXPECT_EQ(j["architectures"][0], f.arch);
    const model::ModelConfig back = model_from_hf_config(j, "config.json");
    EXPECT_EQ(back.hf_architecture, f.arch);
    EXPECT_EQ(back.add_qkv_bias, cfg.add_qkv_bias) << f.arch;
    EXPECT_EQ(back.qk_layernorm, cfg.qk_layernorm) << f.arch;
    EXPECT_EQ(back.head_dim(), cfg.head_dim()) << f.arch;
    EXPECT_EQ(back.window_size, cfg.window_size) << f.arch;
    EXPECT_EQ(back.num_params(), cfg.num_params()) << f.arch;
    EXPECT_EQ(hf_config(back), j) << f.arch;
    std::map<std::string, std::vector<float>> ours;
    float v = 0;
    for (const model::ParamSpec& s : model_param_specs(back)) {
      int64_t n = 1;
      for (int64_t d : checkpoint_shape(s)) n *= d;
      for (int64_t i = 0; i < n; ++i) ours[s.name].push_back(v += 1e-3f);
    }
    const HfStateDict hf = to_hf(back, [&](const std::string& p) { return ours.at(p); });
    for (const model::ParamSpec& s : model_param_specs(back))
      EXPECT_EQ(from_hf(s, hf, "test"), ours.at(s.name)) << f.arch << " " << s.name;
    if (cfg.add_qkv_bias) {
      EXPECT_EQ(hf.count("model.layers.0.self_attn.k_proj.bias"), 1u);
    }
    if (cfg.qk_layernorm && !cfg.qk_layernorm_full_width) {
      EXPECT_EQ(hf.at("model.layers.1.self_attn.q_norm.weight").shape, (std::vector<int64_t>{32}));
    }
    if (!cfg.pre_sublayer_norm) {  // OLMo 2: two norms a layer, after the sublayers; q/k norms of full width
      EXPECT_EQ(back.pre_sublayer_norm, false);
      EXPECT_EQ(back.qk_layernorm_full_width, true);
      EXPECT_EQ(hf.count("model.layers.0.input_layernorm.weight"), 0u);
      EXPECT_EQ(hf.at("model.layers.0.post_attention_layernorm.weight").data, ours.at("layers.0.attention_out_norm.weight"));
      EXPECT_EQ(hf.at("model.layers.1.post_feedforward_layernorm.weight").data, ours.at("layers.1.mlp_out_norm.weight"));
      EXPECT_EQ(hf.at("model.layers.0.self_attn.q_norm.weight").shape,
                (std::vector<int64_t>{cfg.num_attention_heads * cfg.head_dim()}));
      EXPECT_EQ(hf.at("model.layers.0.self_attn.k_norm.weight").shape,
                (std::vector<int64_t>{cfg.kv_heads() * cfg.head_dim()}));
    } else if (cfg.post_sublayer_norm) {  // Gemma's four norms a layer, the MLP's input one named pre_feedforward
      EXPECT_EQ(hf.at("model.layers.0.pre_feedforward_layernorm.weight").data, ours.at("layers.0.post_attention_norm.weight"));
      EXPECT_EQ(hf.at("model.layers.0.post_attention_layernorm.weight").data, ours.at("layers.0.attention_out_norm.weight"));
      EXPECT_EQ(hf.count("model.layers.1.post_feedforward_layernorm.weight"), 1u);
      EXPECT_EQ(j["layer_types"], (nlohmann::json{"sliding_attention", "full_attention"}));
      EXPECT_EQ(j["query_pre_attn_scalar"], 24);
    }
    if (back.hf_architecture == "Phi3ForCausalLM") {
      const int64_t C = cfg.hidden_size, KV = cfg.kv_heads() * cfg.head_dim(), F = cfg.ffn();
      const HfTensor& qkv = hf.at("model.layers.0.self_attn.qkv_proj.weight");
      EXPECT_EQ(qkv.shape, (std::vector<int64_t>{C + 2 * KV, C}));
      const std::vector<float>& k = ours.at("layers.0.attention.k_proj.weight");
      EXPECT_EQ(std::vector<float>(qkv.data.begin() + C * C, qkv.data.begin() + (C + KV) * C), k);
      const HfTensor& gate_up = hf.at("model.layers.0.mlp.gate_up_proj.weight");
      EXPECT_EQ(gate_up.shape, (std::vector<int64_t>{2 * F, C}));
      EXPECT_EQ(std::vector<float>(gate_up.data.begin() + F * C, gate_up.data.end()),
                ours.at("layers.0.mlp.up_proj.weight"));
    }
  }
  nlohmann::json qwen2 = hf_config([] {
    model::ModelConfig c = tiny(true);
    c.add_qkv_bias = true;
    return c;
  }());
  qwen2["use_sliding_window"] = true;
  EXPECT_CLAW_ERROR(model_from_hf_config(qwen2, "q/config.json"), "q/config.json", "use_sliding_window");
  qwen2["use_sliding_window"] = false;
  qwen2["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}};
  EXPECT_CLAW_ERROR(model_from_hf_config(qwen2, "q/config.json"), "rope_scaling", "longrope needs a list 'short_factor'");
  qwen2["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4.0}};
  EXPECT_CLAW_ERROR(model_from_hf_config(qwen2, "q/config.json"), "rope_scaling", "'dynamic' is not supported");
  // YaRN: transformers' defaults for what is absent (the original context: max_position_embeddings), and back
  // with what differs from them.
  qwen2["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 16}, {"mscale", 0.7},
                           {"mscale_all_dim", 0.7}};
  const model::ModelConfig yarn = model_from_hf_config(qwen2, "q/config.json");
  EXPECT_EQ(yarn.rope_scaling.original_max_position_embeddings, qwen2["max_position_embeddings"].get<int64_t>());
  EXPECT_EQ(yarn.rope_scaling.beta_fast, 16);
  EXPECT_EQ(yarn.rope_scaling.beta_slow, 1);
  EXPECT_DOUBLE_EQ(yarn.rope_scaling.table_scale(), 1.0);  // DeepSeek's equal mscales cancel
  EXPECT_EQ(hf_config(yarn)["rope_scaling"],
            (nlohmann::json{{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 16.0}, {"mscale", 0.7},
                            {"mscale_all_dim", 0.7},
                            {"original_max_position_embeddings", qwen2["max_position_embeddings"]}}));
  qwen2["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};  // the older key
  EXPECT_EQ(model_from_hf_config(qwen2, "q/config.json").rope_scaling.type, "linear");
  EXPECT_EQ(hf_config(model_from_hf_config(qwen2, "q/config.json"))["rope_scaling"],
            (nlohmann::json{{"rope_type", "linear"}, {"factor", 4.0}}));
  qwen2["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_CLAW_ERROR(model_from_hf_config(qwen2, "q/config.json"), "q/config.json: rope_scaling", "low_freq_factor");
  nlohmann::json qwen3 = qwen2;
  qwen3["model_type"] = "qwen3";
  qwen3["rope_scaling"] = nullptr;
  qwen3["attention_bias"] = true;
  EXPECT_CLAW_ERROR(model_from_hf_config(qwen3, "q/config.json"), "attention_bias");
  nlohmann::json phi3 = qwen2;
  phi3["model_type"] = "phi3";
  phi3["rope_scaling"] = nullptr;
  phi3["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(model_from_hf_config(phi3, "p/config.json").rotary_percent, 0.5);
  phi3["partial_rotary_factor"] = 0.1;  // a head of 8: no pair left to rotate
  EXPECT_CLAW_ERROR(model_from_hf_config(phi3, "p/config.json"), "--rotary-percent 0.1", "even");
  model::ModelConfig partial = tiny(true);
  partial.rotary_percent = 0.5;
  EXPECT_CLAW_ERROR(hf_config(partial), "--rotary-percent 0.5", "Phi3ForCausalLM");
  nlohmann::json olmo2 = qwen3;
  olmo2["model_type"] = "olmo2";
  EXPECT_CLAW_ERROR(model_from_hf_config(olmo2, "o/config.json"), "o/config.json: attention_bias true", "OLMo 2");
  model::ModelConfig olmo_geglu = tiny(true);
  olmo_geglu.qk_layernorm = olmo_geglu.qk_layernorm_full_width = true;
  olmo_geglu.mlp = model::Mlp::geglu;
  EXPECT_CLAW_ERROR(hf_config(olmo_geglu), "Olmo2ForCausalLM needs --post-sublayer-norm --no-pre-sublayer-norm");
  model::ModelConfig bare = tiny(true);
  bare.pre_sublayer_norm = false;
  EXPECT_CLAW_ERROR(bare.validate(), "--no-pre-sublayer-norm", "--post-sublayer-norm");
  model::ModelConfig both = tiny(true);
  both.add_qkv_bias = true;
  both.window_size = 8;
  EXPECT_CLAW_ERROR(hf_config(both), "--window-size 8", "Qwen2ForCausalLM");
  model::ModelConfig bad = tiny(true);
  bad.hf_architecture = "BertModel";
  EXPECT_CLAW_ERROR(bad.validate(), "--hf-architecture 'BertModel'", "Phi3ForCausalLM");
}

TEST(Ckpt, HuggingFaceRefusesWhatItCannotRepresent) {
  model::ModelConfig c = tiny(false);
  c.add_bias_linear = false;
  EXPECT_THROW(hf_config(c), Error);
  model::ModelConfig mix = tiny(true);
  mix.normalization = model::Norm::layernorm;
  EXPECT_THROW(hf_config(mix), Error);
  EXPECT_THROW(model_from_hf_config({{"model_type", "bert"}}, "config.json"), Error);
}

}  // namespace
}  // namespace claw::ckpt
