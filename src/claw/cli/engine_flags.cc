#include "claw/cli/engine_flags.h"

#include <algorithm>

#include <fmt/format.h>

#include "claw/cli/flags.h"
#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/core/memory.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/serve/paged_kv_cache.h"

namespace claw::cli {

EngineJob start_engine_job(serve::InferenceModelOptions& model) {
  EngineJob job;
  job.world = comm::World::create({});
  log::set_rank(job.world->rank(), job.world->size());
  if (job.world->size() > 1) {
    job.parallel = comm::ParallelState::create(*job.world, {.tp = job.world->size()});
    model.world = job.world.get();
    model.parallel = job.parallel.get();
    log::info("serve", "tensor parallelism over {} ranks ({}); rank 0 takes the requests", job.world->size(),
              job.world->backend());
  }
  return job;
}

serve::EngineConfig EngineJob::agree(serve::EngineConfig e) const {
  if (size() == 1) return e;
  int64_t v[3] = {e.num_blocks, e.max_model_len, e.max_num_batched_tokens};
  world->world_group()->broadcast(v, 3, DType::i64, 0);
  e.num_blocks = v[0];
  e.max_model_len = v[1];
  e.max_num_batched_tokens = v[2];
  return e;
}

void add_model_flags(CLI::App& app, serve::InferenceModelOptions& model) {
  app.add_option("--model,-m", model.path, "a claw checkpoint (root or iter_* directory), a Hugging Face directory or a GGUF file");
  app.add_option("--dtype", model.dtype,
                 "weights of the linear layers: auto (a GGUF file's types, else f32), f32, bf16, f16, q8_0, q6_k, "
                 "q5_k, q5_1, q5_0, q4_k, q4_1, q4_0, iq4_nl, iq4_xs, q3_k or q2_k")
      ->capture_default_str();
  app.add_option("--ckpt-step", model.step, "this iteration of a claw checkpoint instead of the latest");
  app.add_option("--tokenizer-type", model.tokenizer.type,
                 "GPT2BPETokenizer, TikTokenizer, SentencePieceTokenizer or HFTokenizer (default: the model's)");
  app.add_option("--vocab-file", model.tokenizer.vocab_file, "GPT-2 encoder.json / vocab.json");
  app.add_option("--merge-file", model.tokenizer.merge_file, "GPT-2 vocab.bpe / merges.txt");
  app.add_option("--tokenizer-model", model.tokenizer.model_file,
                 "tiktoken rank file, SentencePiece .model, or tokenizer.json (or its model directory)");
}

void EngineFlags::add_to(CLI::App& app) {
  add_model_flags(app, model);
  app.add_option("--block-size", engine.block_size, "tokens per KV-cache block")->capture_default_str();
  app.add_option("--kv-cache-dtype", kv_cache_dtype,
                 "keys and values held as auto (f32), f32, bf16, f16, int8 (a scale per token and KV head) or "
                 "q8_0 (llama.cpp's: a scale per 32)")
      ->capture_default_str();
  app.add_option("--cache-type-k", cache_type_k, "llama.cpp's name for --kv-cache-dtype (keys)");
  app.add_option("--cache-type-v", cache_type_v,
                 "llama.cpp's name for --kv-cache-dtype (values; keys and values are held in one type)");
  app.add_option("--kv-cache-memory", kv_cache_memory,
                 "memory for the KV cache, e.g. 2GiB (default: a quarter of the available memory)");
  app.add_option("--num-kv-blocks", engine.num_blocks, "KV-cache blocks (overrides --kv-cache-memory)");
  app.add_option("--max-num-batched-tokens", engine.max_num_batched_tokens, "tokens per engine step (chunked prefill)")
      ->capture_default_str();
  app.add_option("--max-num-seqs", engine.max_num_seqs, "sequences running at once")->capture_default_str();
  app.add_option("--max-model-len", engine.max_model_len, "longest prompt + output in tokens (default: the model's)");
  app.add_flag("--no-prefix-caching", no_prefix_caching, "do not reuse the KV blocks of shared prompt prefixes");
  app.add_option("--num-threads", num_threads, "CPU threads (default: the CPUs this process may use)");
}

void add_sampling_flags(CLI::App& app, serve::SamplingParams& p) {
  app.add_option("--temperature", p.temperature, "0: greedy; up to 2")->capture_default_str();
  app.add_option("--top-k", p.top_k, "sample from the k most likely tokens (0: all)")->capture_default_str();
  app.add_option("--top-p", p.top_p, "nucleus sampling: the most likely tokens up to this probability")
      ->capture_default_str();
  app.add_option("--min-p", p.min_p, "drop tokens less likely than min-p times the most likely")->capture_default_str();
  app.add_option("--seed", p.seed, "seed of the sampling draws")->capture_default_str();
}

std::vector<std::pair<std::string, std::string>> EngineFlags::resolved(const serve::InferenceModel& m,
                                                                       const serve::EngineConfig& e) const {
  return {{"model", model.path},
          {"dtype", std::string(kernels::weight_type_name(m.weight_type))},
          {"ckpt-step", std::to_string(model.step)},
          {"tokenizer-type", model.tokenizer.type},
          {"vocab-file", model.tokenizer.vocab_file},
          {"merge-file", model.tokenizer.merge_file},
          {"tokenizer-model", model.tokenizer.model_file},
          {"block-size", std::to_string(e.block_size)},
          {"kv-cache-dtype", std::string(kernels::kv_dtype_name(e.kv_cache_dtype))},
          {"cache-type-k", std::string(kernels::kv_dtype_name(e.kv_cache_dtype))},
          {"cache-type-v", std::string(kernels::kv_dtype_name(e.kv_cache_dtype))},
          {"kv-cache-memory", kv_cache_memory},
          {"num-kv-blocks", std::to_string(e.num_blocks)},
          {"max-num-batched-tokens", std::to_string(e.max_num_batched_tokens)},
          {"max-num-seqs", std::to_string(e.max_num_seqs)},
          {"max-model-len", std::to_string(e.max_model_len)},
          {"no-prefix-caching", e.prefix_caching ? "false" : "true"},
          {"num-threads", std::to_string(cpu().num_threads)}};
}

void print_resolved_config(const std::string& command, const std::vector<std::pair<std::string, std::string>>& lines) {
  log::info(command, "{}", config_table("resolved config", lines));
}

CpuCtx EngineFlags::cpu() const { return CpuCtx{num_threads > 0 ? num_threads : kernels::default_num_threads()}; }

serve::EngineConfig EngineFlags::resolve(const serve::InferenceModel& m) const {
  serve::EngineConfig e = engine;
  e.prefix_caching = !no_prefix_caching;
  serve::BlockPool::check_block_size(e.block_size);  // before sizing blocks by it
  const int64_t context = e.max_model_len > 0 ? e.max_model_len : m.cfg.max_position_embeddings;
  std::string kv = kv_cache_dtype, from = "--kv-cache-dtype";
  for (const auto& [flag, v] : {std::pair<const char*, const std::string*>{"--cache-type-k", &cache_type_k},
                                {"--cache-type-v", &cache_type_v}}) {
    if (v->empty()) continue;
    if (kv != "auto" && kv != *v)
      fail("{} {} and {} {}: claw holds keys and values in one type (--kv-cache-dtype)", from, kv, flag, *v);
    kv = *v, from = flag;
  }
  if (kv != "auto") {
    const auto t = kernels::parse_kv_dtype(kv);
    if (!t) fail("{} '{}': valid are auto (f32), {}", from, kv, kernels::kKvDtypeChoices);
    if (*t == kernels::KvDtype::q8_0 && m.cfg.cache_head_dim() % 32 != 0)
      fail("{} q8_0 holds rows of whole blocks of 32; {}'s cached head size is {} (f16 or int8 would do)", from,
           m.name, m.cfg.cache_head_dim());
    e.kv_cache_dtype = *t;
  }
  const int64_t block_bytes = serve::PagedKvCache::block_bytes(m.cfg, {}, e.block_size, e.kv_cache_dtype);
  if (e.num_blocks <= 0) {
    uint64_t budget = 0;
    if (!kv_cache_memory.empty()) {
      budget = parse_size("--kv-cache-memory", kv_cache_memory);
    } else {
      const MemoryLimit avail = available_memory();
      budget = avail.bytes == UINT64_MAX ? uint64_t{4} << 30 : avail.bytes / 4;
    }
    const int64_t fit = static_cast<int64_t>(budget / static_cast<uint64_t>(block_bytes));
    const int64_t useful = e.max_num_seqs * ((context + e.block_size - 1) / e.block_size);
    e.num_blocks = std::min(fit, useful);
    if (e.num_blocks < 1)
      fail("--kv-cache-memory {} holds no KV block of {} bytes", kv_cache_memory.empty() ? "(default)" : kv_cache_memory,
           block_bytes);
  }
  log::info("serve", "KV cache: {} blocks of {} tokens in {} ({:.1f} MiB)", e.num_blocks, e.block_size,
            kernels::kv_dtype_name(e.kv_cache_dtype), static_cast<double>(e.num_blocks * block_bytes) / 1048576.0);
  return e;
}

}  // namespace claw::cli
