// Mutation fuzzing of the checkpoint-side readers (tests/unit/fuzz.h): GGUF
// (header, metadata, tensor table, tensor data to fp32), safetensors
// (header and tensor views), PEFT adapters (adapter_config.json and the
// weights, through lora_from_peft) and a checkpoint's metadata.json. Files
// claw writes, mutated; every case read or refused with a claw::Error naming
// the file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "claw/ckpt/checkpoint.h"
#include "claw/ckpt/format.h"
#include "claw/ckpt/gguf.h"
#include "claw/ckpt/peft.h"
#include "claw/ckpt/safetensors.h"
#include "claw/ckpt/shards.h"
#include "claw/comm/group.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/quant.h"
#include "claw/model/gpt.h"
#include "fuzz.h"
#include "temp_dir.h"

namespace claw::ckpt {
namespace {

using claw::testing::fuzz;
using claw::testing::read_bytes;
using claw::testing::write_bytes;

constexpr int kCases = 3000;

model::ModelConfig tiny_lora() {
  model::ModelConfig c = model::model_preset("llama-tiny");
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.num_query_groups = 2;
  c.ffn_hidden_size = 48;
  c.num_layers = 2;
  c.vocab_size = 64;
  c.max_position_embeddings = 32;
  c.lora.rank = 4;
  return c;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(FuzzReaders, Gguf) {
  const claw::testing::TempDir dir;
  const std::string path = dir.path() + "/model.gguf";
  gguf::Writer w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 2);
  w.add_f32("llama.rope.freq_base", 10000.0f);
  w.add_strings("tokenizer.ggml.tokens", {"a", "b", "c d"});
  w.add_i32s("tokenizer.ggml.token_type", {1, 3, -1});
  std::vector<float> a(4 * 64), b(6);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.01f * static_cast<float>(i) - 1;
  std::vector<uint8_t> q(kernels::weight_row_bytes(kernels::WeightType::q8_0, 64) * 4);
  kernels::quantize_rows(kernels::WeightType::q8_0, a.data(), q.data(), 4, 64);
  w.add_tensor("q", {4, 64}, gguf::GgmlType::q8_0, q);
  w.add_tensor("v", {2, 3}, gguf::GgmlType::f32, f32_bytes(b));
  w.write(path);
  const std::string valid = read_bytes(path);
  const auto c = fuzz("gguf", valid, kCases, 1, [&](const std::string& bytes) {
    write_bytes(path, bytes);
    const gguf::Reader r(path);
    for (const gguf::TensorInfo& t : r.tensors()) (void)r.read_f32(t);
  }, path);
  EXPECT_EQ(c.cases, kCases);
  EXPECT_GT(c.refused, kCases / 2);
}

TEST(FuzzReaders, Safetensors) {
  const claw::testing::TempDir dir;
  const std::string path = dir.path() + "/model.safetensors";
  std::vector<float> w(12), v(5);
  std::vector<uint16_t> h(6);
  write_safetensors(path, {{"w", DType::f32, {3, 4}, w.data()}, {"v", DType::f32, {5}, v.data()},
                           {"h", DType::bf16, {2, 3}, h.data()}},
                    {{"format", "pt"}});
  const std::string valid = read_bytes(path);
  const auto c = fuzz("safetensors", valid, kCases, 2, [&](const std::string& bytes) {
    write_bytes(path, bytes);
    const SafetensorsFile f(path);
    for (const TensorView& t : f.tensors()) (void)f.get(t.name);
  }, path);
  EXPECT_EQ(c.cases, kCases);
}

TEST(FuzzReaders, PeftAdapter) {
  const claw::testing::TempDir dir;
  const model::ModelConfig cfg = tiny_lora();
  model::GPT m(cfg);
  m.init_weights(kernels::make_cpu_ctx(1), 3);
  const HfStateDict tensors = to_peft(cfg, [&](const std::string& p) {
    const model::Param& param = *m.store().find(p);
    return std::vector<float>(param.data(), param.data() + param.value.numel());
  });
  write_peft_dir(dir.path(), peft_config(cfg, ""), tensors);
  model::ModelConfig base = cfg;
  base.lora = {};
  for (const char* file : {"adapter_config.json", "adapter_model.safetensors"}) {
    const std::string path = dir.path() + "/" + file;
    const std::string valid = read_bytes(path);
    const bool json = std::string(file).ends_with(".json");
    const auto c = fuzz(file, valid, kCases / 2, json ? 3 : 5, [&](const std::string& bytes) {
      write_bytes(path, bytes);
      (void)lora_from_peft(read_peft_dir(dir.path()), base, dir.path());
    }, dir.path(), json);
    write_bytes(path, valid);
    EXPECT_EQ(c.cases, kCases / 2);
  }
}

TEST(FuzzReaders, CheckpointMetadata) {
  const claw::testing::TempDir dir;
  model::ModelConfig cfg = tiny_lora();
  cfg.lora = {};
  model::GPT m(cfg);
  comm::SelfGroup self("world");
  {
    Saver saver(self, {.root = dir.path()});
    saver.save(collect_shards({&m.store()}, nullptr, {.optimizer = false}), {.iteration = 1});
  }
  const std::string d = iteration_dir(dir.path(), 1);
  const std::string path = d + "/metadata.json";
  const std::string valid = read_bytes(path);
  const auto c = fuzz("metadata.json", valid, kCases, 4, [&](const std::string& bytes) {
    write_bytes(path, bytes);
    const Metadata meta = Metadata::read(d);
    model::GPT into(cfg);
    load_shards(d, meta, collect_shards({&into.store()}, nullptr, {.optimizer = false}));
  }, d, true);
  EXPECT_EQ(c.cases, kCases);
}

}  // namespace
}  // namespace claw::ckpt
