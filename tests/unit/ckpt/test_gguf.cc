// GGUF: the container round-trips its metadata and tensors; a damaged file
// is an error naming the file and what is wrong; claw models round-trip
// through it (the values at f32, the stored blocks at q8_0/q4_0; llama's
// q/k row order undone). Other readers' view is tests/e2e/serve/gguf_oracle.sh.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "claw/ckpt/gguf.h"
#include "claw/ckpt/gguf_model.h"
#include "claw/ckpt/shards.h"
#include "claw/model/gpt.h"
#include "claw/core/error.h"

namespace claw::ckpt {
namespace {

namespace fs = std::filesystem;

std::string tmp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("claw_test_gguf_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(Gguf, ContainerRoundTrips) {
  const std::string path = tmp_path("container.gguf");
  gguf::Writer w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 3);
  w.add_f32("llama.rope.freq_base", 500000.0f);
  w.add_bool("flag", true);
  w.add_strings("tokenizer.ggml.tokens", {"a", "b", "c d"});
  w.add_i32s("tokenizer.ggml.token_type", {1, 3, -1});
  std::vector<float> a(3 * 64), b(5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.01f * static_cast<float>(i) - 1;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i);
  std::vector<uint8_t> q(kernels::weight_row_bytes(kernels::WeightType::q4_0, 64) * 3);
  kernels::quantize_rows(kernels::WeightType::q4_0, a.data(), q.data(), 3, 64);
  w.add_tensor("m", {3, 64}, gguf::GgmlType::q4_0, q);
  w.add_tensor("v", {5}, gguf::GgmlType::f32, f32_bytes(b));
  w.write(path);

  const gguf::Reader r(path);
  EXPECT_EQ(r.version(), 3u);
  EXPECT_EQ(r.metadata()["general.architecture"], "llama");
  EXPECT_EQ(r.metadata()["llama.block_count"], 3);
  EXPECT_EQ(r.metadata()["llama.rope.freq_base"], 500000.0);
  EXPECT_EQ(r.metadata()["flag"], true);
  EXPECT_EQ(r.metadata()["tokenizer.ggml.tokens"], nlohmann::json({"a", "b", "c d"}));
  EXPECT_EQ(r.metadata()["tokenizer.ggml.token_type"], nlohmann::json({1, 3, -1}));
  ASSERT_EQ(r.tensors().size(), 2u);
  const gguf::TensorInfo* m = r.find("m");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->ne, (std::vector<int64_t>{64, 3}));  // innermost first
  EXPECT_EQ(m->shape(), (std::vector<int64_t>{3, 64}));
  EXPECT_EQ(r.read(*m), q);
  std::vector<float> back(a.size());
  kernels::dequantize_rows(kernels::WeightType::q4_0, q.data(), back.data(), 3, 64);
  EXPECT_EQ(r.read_f32(*m), back);
  EXPECT_EQ(r.read_f32(*r.find("v")), b);
  EXPECT_EQ(r.find("v")->offset % 32, 0u);

  // Damage: every prefix of the file is an error naming it, never a crash
  // or a read past the end; so are a wrong magic and an unknown type.
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const std::string bad = tmp_path("bad.gguf");
  auto expect_error = [&](const std::string& content, const std::string& want) {
    std::ofstream(bad, std::ios::binary | std::ios::trunc) << content;
    try {
      gguf::Reader x(bad);
      ADD_FAILURE() << "no error for " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  for (size_t n : {size_t{0}, size_t{10}, size_t{30}, size_t{100}, bytes.size() / 2, bytes.size() - 20})
    expect_error(bytes.substr(0, n), n < 24 ? "not a GGUF file" : "");
  std::string wrong = bytes;
  wrong[0] = 'X';
  expect_error(wrong, "not a GGUF file");
  fs::remove(bad);
  fs::remove(path);
}

// Every parameter of cfg at its checkpoint shape, N(0, 1).
std::map<std::string, std::vector<float>> random_params(const model::ModelConfig& cfg) {
  std::mt19937 rng(5);
  std::normal_distribution<float> N(0, 1);
  std::map<std::string, std::vector<float>> out;
  for (const model::ParamSpec& s : model_param_specs(cfg)) {
    int64_t n = 1;
    for (int64_t d : checkpoint_shape(s)) n *= d;
    auto& v = out[s.name];
    for (int64_t i = 0; i < n; ++i) v.push_back(N(rng));
  }
  return out;
}

model::ModelConfig tiny(bool llama) {
  model::ModelConfig c = model::model_preset(llama ? "llama-tiny" : "gpt2-tiny");
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.num_query_groups = llama ? 2 : 0;
  c.ffn_hidden_size = llama ? 96 : 0;
  c.num_layers = 2;
  c.vocab_size = 300;
  c.max_position_embeddings = 64;
  return c;
}

TEST(Gguf, ModelsRoundTrip) {
  for (bool llama : {false, true}) {
    const model::ModelConfig cfg = tiny(llama);
    const std::map<std::string, std::vector<float>> ours = random_params(cfg);
    auto get = [&](const std::string& p) { return ours.at(p); };
    const std::string path = tmp_path(llama ? "llama.gguf" : "gpt2.gguf");
    write_gguf_model(path, cfg, get, {.type = kernels::WeightType::f32, .name = "t"});
    const GgufModel g = read_gguf_model(path);
    EXPECT_EQ(g.arch, llama ? "llama" : "gpt2");
    EXPECT_EQ(g.cfg.num_layers, cfg.num_layers);
    EXPECT_EQ(g.cfg.kv_heads(), cfg.kv_heads());
    EXPECT_EQ(g.cfg.vocab_size, cfg.vocab_size);
    EXPECT_EQ(g.cfg.tied(), cfg.tied());
    EXPECT_EQ(g.cfg.norm_epsilon, cfg.norm_epsilon) << "f32 in the file, the decimal the writer meant on reading";
    EXPECT_EQ(g.cfg.rotary_base, cfg.rotary_base);
    EXPECT_TRUE(g.matrices.empty());
    const HfStateDict tensors = g.all_tensors();
    for (const model::ParamSpec& s : model_param_specs(cfg))
      EXPECT_EQ(from_hf(s, tensors, path), ours.at(s.name)) << s.name;

    // q8_0: the file's blocks are what quantizing our values gives, rows in
    // claw's order; the fp32 tensors are their dequantized values.
    write_gguf_model(path, cfg, get, {.type = kernels::WeightType::q8_0});
    GgufModel q = read_gguf_model(path);
    EXPECT_EQ(q.weight_type, kernels::WeightType::q8_0);
    model::GPT m(q.cfg, {.allocate = false});
    const auto mats = gguf_matrices_for(q, m.params());
    // The layers' matrices and the output layer's: its own, or the tied
    // embeddings it multiplies by.
    EXPECT_EQ(mats.size(), llama ? 2u * 7 + 1 : 2u * 6 + 1);
    for (const auto& [name, mat] : mats) {
      // The checkpoint shape has no vocabulary padding; the matrix's
      // padding rows are zero.
      const std::vector<float>& v = ours.at(name);
      const int64_t rows = static_cast<int64_t>(v.size()) / mat.cols();
      const kernels::WeightMatrix want =
          kernels::WeightMatrix::quantize({1}, kernels::WeightType::q8_0, v.data(), rows, mat.cols());
      const std::vector<uint8_t> got = mat.gguf_bytes(), expect = want.gguf_bytes();
      ASSERT_LE(expect.size(), got.size()) << name;
      EXPECT_EQ(std::memcmp(got.data(), expect.data(), expect.size()), 0) << name;
      EXPECT_EQ(std::count(got.begin() + expect.size(), got.end(), 0), got.size() - expect.size()) << name;
    }
    fs::remove(path);
  }
}

// Every family llama.cpp has an architecture for, written and read back:
// the same configuration (as its config.json) and the same tensors (Gemma's
// norms within the rounding of 1 + w).
TEST(Gguf, FamiliesRoundTrip) {
  const nlohmann::json shape = {{"vocab_size", 300},         {"hidden_size", 64}, {"intermediate_size", 96},
                                {"num_hidden_layers", 2},    {"num_attention_heads", 4},
                                {"num_key_value_heads", 2},  {"max_position_embeddings", 64},
                                {"rms_norm_eps", 1e-6},      {"rope_theta", 1e6}};
  const auto with = [&](nlohmann::json more) {
    nlohmann::json j = shape;
    j.update(more);
    return j;
  };
  const std::vector<std::pair<std::string, nlohmann::json>> families = {
      {"qwen2", with({{"model_type", "qwen2"}, {"tie_word_embeddings", true}})},
      {"qwen3", with({{"model_type", "qwen3"},
                      {"head_dim", 32},
                      {"rope_scaling",
                       {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}}}})},
      {"qwen3moe", with({{"model_type", "qwen3_moe"}, {"head_dim", 32}, {"num_experts", 4}, {"num_experts_per_tok", 2},
                         {"moe_intermediate_size", 32}})},
      {"llama", with({{"model_type", "mixtral"}, {"num_local_experts", 4}, {"num_experts_per_tok", 2}})},
      {"llama", with({{"model_type", "mistral"}, {"sliding_window", 8}})},
      {"phi3", with({{"model_type", "phi3"}, {"partial_rotary_factor", 0.5}, {"original_max_position_embeddings", 16},
                     {"rope_scaling", {{"type", "longrope"}, {"short_factor", {1.0, 1.5, 2.0, 2.5}},
                                       {"long_factor", {1.0, 2.0, 4.0, 8.0}}}}})},
      {"gemma2", with({{"model_type", "gemma2"}, {"head_dim", 16}, {"query_pre_attn_scalar", 16}, {"sliding_window", 8},
                       {"attn_logit_softcapping", 50.0}, {"final_logit_softcapping", 30.0}})},
      {"gemma3", with({{"model_type", "gemma3_text"}, {"head_dim", 32}, {"query_pre_attn_scalar", 32},
                       {"sliding_window", 8}, {"layer_types", {"sliding_attention", "full_attention"}},
                       {"rope_local_base_freq", 1e4}, {"rope_scaling", {{"rope_type", "linear"}, {"factor", 4.0}}}})},
      {"olmo2", with({{"model_type", "olmo2"}})},
      {"deepseek2", with({{"model_type", "deepseek_v3"}, {"num_key_value_heads", 4}, {"q_lora_rank", 24},
                          {"kv_lora_rank", 16}, {"qk_nope_head_dim", 16}, {"qk_rope_head_dim", 8}, {"v_head_dim", 12},
                          {"n_routed_experts", 8}, {"num_experts_per_tok", 2}, {"n_group", 4}, {"topk_group", 2},
                          {"routed_scaling_factor", 2.5}, {"moe_intermediate_size", 32}, {"n_shared_experts", 1},
                          {"first_k_dense_replace", 1},
                          {"rope_scaling",
                           {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16},
                            {"mscale", 1.0}, {"mscale_all_dim", 1.0}}}})}};
  for (const auto& [arch, config] : families) {
    SCOPED_TRACE(config["model_type"].get<std::string>());
    const model::ModelConfig cfg = model_from_hf_config(config, "config.json");
    const std::map<std::string, std::vector<float>> ours = random_params(cfg);
    const std::string path = tmp_path(arch + ".gguf");
    write_gguf_model(path, cfg, [&](const std::string& p) { return ours.at(p); }, {.name = "t"});
    const GgufModel g = read_gguf_model(path);
    EXPECT_EQ(g.arch, arch);
    nlohmann::json want = hf_config(cfg), got = hf_config(g.cfg);
    for (const char* k : {"initializer_range"}) want.erase(k), got.erase(k);
    EXPECT_EQ(got, want) << "read back:\n" << got.dump(1) << "\nwritten:\n" << want.dump(1);
    const HfStateDict tensors = g.all_tensors();
    const bool gemma = arch.starts_with("gemma");
    for (const model::ParamSpec& s : model_param_specs(cfg)) {
      const std::vector<float> back = from_hf(s, tensors, path), & v = ours.at(s.name);
      if (!gemma || s.name.find("norm") == std::string::npos) {
        EXPECT_EQ(back, v) << s.name;
        continue;
      }
      ASSERT_EQ(back.size(), v.size());
      for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(back[i], v[i], 2e-7 * (1 + std::abs(v[i]))) << s.name;
    }
    fs::remove(path);
  }
}

TEST(Gguf, UnsupportedFilesAreClearErrors) {
  const std::string path = tmp_path("arch.gguf");
  gguf::Writer w;
  w.add_string("general.architecture", "falcon");
  w.write(path);
  EXPECT_THROW(
      {
        try {
          read_gguf_model(path);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("architecture 'falcon' is not supported"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  // A tensor of a type claw does not read (MXFP4, 39), and a Q4_K tensor
  // (super-blocks of 256) whose rows are 64 long: each named.
  for (auto [type, cols, want] : {std::tuple{39u, 256, "is type 39 (MXFP4); claw reads F32, F16, Q4_0, Q4_1"},
                                  {12u, 64, "is Q4_K with rows of 64 elements; Q4_K rows are whole blocks of 256"}}) {
    gguf::Writer k;
    k.add_string("general.architecture", "llama");
    k.add_tensor("token_embd.weight", {4, cols}, gguf::GgmlType::q8_0, std::vector<uint8_t>(4 * cols / 32 * 34));
    k.write(path);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(f)), {});
    const size_t at = all.find("token_embd.weight") + 17 + 4 + 16;  // name, n_dims, ne[2]
    f.seekp(static_cast<std::streamoff>(at));
    f.write(reinterpret_cast<const char*>(&type), 4);
    f.close();
    try {
      gguf::Reader r(path);
      ADD_FAILURE() << "type " << type << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tensor token_embd.weight"), std::string::npos) << e.what();
    }
  }
  fs::remove(path);
}

}  // namespace
}  // namespace claw::ckpt
