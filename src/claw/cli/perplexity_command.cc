#include "claw/cli/perplexity_command.h"

#include <chrono>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "claw/cli/engine_flags.h"
#include "claw/serve/inference_model.h"
#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/data/file_io.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/serve/perplexity.h"

namespace claw::cli {
namespace {

struct PerplexityArgs {
  serve::InferenceModelOptions model;
  std::string text_file, output_format = "text";
  int64_t ctx_size = 256, chunks = 0;
  bool second_half = false;
  int num_threads = 0;

  void run() const {
    if (text_file.empty()) fail("claw perplexity: --text-file FILE is required");
    if (output_format != "text" && output_format != "json")
      fail("--output-format '{}' is not one of text, json", output_format);
    if (ctx_size < 2) fail("--ctx-size {}: a window needs at least 2 tokens", ctx_size);
    if (chunks < 0) fail("--chunks {}: give 0 (all windows) or a positive count", chunks);
    const CpuCtx cpu{num_threads > 0 ? num_threads : kernels::default_num_threads()};
    serve::InferenceModel m = serve::load_inference_model(model);
    log::info("perplexity", "loaded {}: {}", m.source, m.weights_summary());
    if (!m.tokenizer) fail("{} has no tokenizer: give --tokenizer-type and its files", m.source);
    const std::string text = data::read_file(text_file, "--text-file");
    const std::vector<int32_t> tokens = m.tokenizer->encode(text);
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t first = second_half ? ctx_size / 2 : 0;
    const serve::PerplexityResult r = serve::perplexity(
        *m.gpt, cpu, tokens, ctx_size, chunks, first, [&](int64_t w, const serve::PerplexityResult& s) {
          log::info("perplexity", "window {}: perplexity so far {:.4f}", w, s.perplexity());
        });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (output_format == "json") {
      fmt::print("{}\n", nlohmann::json{{"model", m.source},
                                        {"weights", kernels::weight_type_name(m.weight_type)},
                                        {"text_file", text_file},
                                        {"ctx_size", ctx_size},
                                        {"scored_from", first + 1},
                                        {"windows", r.windows},
                                        {"tokens", r.tokens},
                                        {"nll", r.nll_sum / static_cast<double>(r.tokens)},
                                        {"perplexity", r.perplexity()},
                                        {"seconds", secs}}
                                .dump());
    } else {
      fmt::print("perplexity {:.4f} over {} tokens ({} windows of {}) of {}, {} weights ({:.0f} tokens/s)\n",
                 r.perplexity(), r.tokens, r.windows, ctx_size, text_file, kernels::weight_type_name(m.weight_type),
                 static_cast<double>(r.windows * ctx_size) / secs);
    }
  }
};

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  CLI::App* sub = app.add_subcommand(
      "perplexity", "perplexity of a model on a text file, in the weight type it serves at (--dtype)");
  add_model_flags(*sub, a->model);
  sub->add_option("--text-file,-f", a->text_file, "the text to score (held out from training)");
  sub->add_option("--ctx-size,-c", a->ctx_size, "tokens per window, each from an empty cache")->capture_default_str();
  sub->add_option("--chunks", a->chunks, "score at most this many windows (0: all)")->capture_default_str();
  sub->add_flag("--score-second-half", a->second_half,
                "score each window's tokens after ctx-size / 2 only, as llama.cpp's llama-perplexity does "
                "(default: every token but the window's first)");
  sub->add_option("--num-threads", a->num_threads, "CPU threads (default: the CPUs this process may use)");
  sub->add_option("--output-format", a->output_format, "text or json")->capture_default_str();
  sub->callback([a] { a->run(); });
}

}  // namespace claw::cli
