// A tokenizer.json (data/hf_tokenizer.h) driven for hf_vs_tokenizers.py:
//
//   hf_tokenizer_driver TOKENIZER.json --cases VOCAB.gguf.inp
//       llama.cpp's cases for the vocabulary (.inp/.out beside each other;
//       no BOS, special tokens as text): prints mismatches and a summary,
//       exit 1 on any
//   hf_tokenizer_driver TOKENIZER.json --encode TEXTS.jsonl
//       per text (one JSON string per line) one line: the ids with added
//       tokens recognised, a tab, the ids with special ones as text, a tab,
//       the first list through the post-processor
//   hf_tokenizer_driver TOKENIZER.json --decode IDS.txt
//       per line of ids the decoded text as a JSON string
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/data/file_io.h"
#include "claw/data/hf_tokenizer.h"

namespace {

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

}  // namespace

int main(int argc, char** argv) try {
  using claw::data::SpecialTokens;
  if (argc != 4) {
    std::fprintf(stderr, "usage: hf_tokenizer_driver TOKENIZER.json --cases|--encode|--decode FILE\n");
    return 2;
  }
  const std::string mode = argv[2], file = argv[3];
  const auto t0 = std::chrono::steady_clock::now();
  const claw::data::HfTokenizer tok = claw::data::HfTokenizer::load(argv[1]);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "%s: %s BPE, %d ids, loaded in %.2f s\n", argv[1], std::string(tok.mode()).c_str(),
               tok.vocab_size(), load_s);
  std::string out;
  auto flush = [&](bool force) {
    if (force || out.size() > (1 << 20)) std::fputs(out.c_str(), stdout), out.clear();
  };
  if (mode == "--encode") {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      const std::string text = nlohmann::json::parse(line).get<std::string>();
      const std::vector<int32_t> ids = tok.encode(text, SpecialTokens::recognise);
      out += join(ids) + "\t" + join(tok.encode(text, SpecialTokens::as_text)) + "\t" +
             join(tok.add_special_tokens(ids)) + "\n";
      flush(false);
    }
    flush(true);
    return 0;
  }
  if (mode == "--decode") {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      std::vector<int32_t> ids;
      std::istringstream s(line);
      for (int32_t id; s >> id;) ids.push_back(id);
      out += nlohmann::json(tok.decode(ids)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      flush(false);
    }
    flush(true);
    return 0;
  }
  if (mode != "--cases") claw::fail("unknown mode {}", mode);
  const std::string inp = claw::data::read_file(file, "llama.cpp cases");
  const std::string outs = claw::data::read_file(file.substr(0, file.size() - 4) + ".out", "llama.cpp cases");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::istringstream lines(outs);
  int ok = 0, bad = 0;
  std::string want;
  for (size_t at = 0;;) {
    const size_t next = inp.find(sep, at);
    if (next == std::string::npos) break;
    const std::string text = inp.substr(at, next - at);
    at = next + sep.size();
    std::getline(lines, want);
    const std::vector<int32_t> ids = tok.encode(text, SpecialTokens::as_text);
    if (" " + join(ids) == want || join(ids) == want) {
      ++ok;
    } else {
      ++bad;
      std::printf("MISMATCH %s\n  text %s\n  want%s\n  got  %s\n", file.c_str(), text.c_str(), want.c_str(),
                  join(ids).c_str());
    }
  }
  std::printf("%s: %d of %d llama.cpp cases equal\n", argv[1], ok, ok + bad);
  return bad == 0 ? 0 : 1;
} catch (const claw::Error& e) {
  std::fprintf(stderr, "claw: error: %s\n", e.what());
  return 1;
}
