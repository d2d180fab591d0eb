// Greedy decoding by llama.cpp itself, from token ids: the reference
// runtime's answer for a GGUF file, as JSON on stdout
//   {"tokens": [...], "gaps": [...]}   (gaps: top-1 minus top-2 logit per step)
//
//   llamacpp_greedy MODEL.gguf PROMPT_IDS N [THREADS [LOGITS]]     (PROMPT_IDS: 1,2,3)
//
// LOGITS: also write each step's logits there, [N, vocabulary] raw
// little-endian f32. The KV cache is f32 (llama.cpp's default is f16) and
// attention takes llama.cpp's unfused path (its CPU flash attention rounds
// to f16: 1e-3 relative on the logits of an f32 Llama, where the unfused
// path is within 1e-6 of transformers in double), so that a comparison is
// of the weights and their arithmetic.
// Built against libllama by tools/llamacpp_build.sh's callers (see
// tools/llamacpp_greedy.sh); llama.cpp's log goes to stderr.
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf PROMPT_IDS N [THREADS [LOGITS]]\n", argv[0]);
    return 2;
  }
  std::vector<llama_token> prompt;
  std::stringstream ids(argv[2]);
  for (std::string id; std::getline(ids, id, ',');) prompt.push_back(std::atoi(id.c_str()));
  const int n = std::atoi(argv[3]), threads = argc > 4 ? std::atoi(argv[4]) : 2;
  if (prompt.empty() || n <= 0) {
    std::fprintf(stderr, "llamacpp_greedy: need a prompt and N > 0\n");
    return 2;
  }

  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    std::fprintf(stderr, "llamacpp_greedy: llama.cpp could not load %s\n", argv[1]);
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(prompt.size() + n + 16);
  cp.n_batch = cp.n_ctx;
  cp.n_ubatch = cp.n_ctx;
  cp.n_threads = cp.n_threads_batch = threads;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "llamacpp_greedy: llama.cpp could not make a context for %s\n", argv[1]);
    return 1;
  }
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  std::vector<llama_token> out;
  std::vector<float> gaps, all;
  std::vector<llama_token> next = prompt;
  for (int step = 0; step < n; ++step) {
    if (llama_decode(ctx, llama_batch_get_one(next.data(), static_cast<int32_t>(next.size()))) != 0) {
      std::fprintf(stderr, "llamacpp_greedy: llama_decode failed at step %d\n", step);
      return 1;
    }
    const float* logits = llama_get_logits_ith(ctx, -1);
    int best = 0, second = -1;
    for (int v = 1; v < vocab; ++v) {
      if (logits[v] > logits[best]) {
        second = best;
        best = v;
      } else if (second < 0 || logits[v] > logits[second]) {
        second = v;
      }
    }
    if (argc > 5) all.insert(all.end(), logits, logits + vocab);
    out.push_back(best);
    gaps.push_back(logits[best] - logits[second]);
    next.assign(1, best);
  }
  if (argc > 5) {
    FILE* f = std::fopen(argv[5], "wb");
    if (!f || std::fwrite(all.data(), sizeof(float), all.size(), f) != all.size() || std::fclose(f) != 0) {
      std::fprintf(stderr, "llamacpp_greedy: cannot write %s\n", argv[5]);
      return 1;
    }
  }
  std::printf("{\"tokens\": [");
  for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? ", " : "", out[i]);
  std::printf("], \"gaps\": [");
  for (size_t i = 0; i < gaps.size(); ++i) std::printf("%s%.6g", i ? ", " : "", gaps[i]);
  std::printf("]}\n");
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
