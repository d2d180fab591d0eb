// A GGUF vocabulary (ckpt/gguf_tokenizer.h) against llama.cpp's own test
// cases for it (models/ggml-vocab-NAME.gguf.inp and .out, as its
// test-tokenizer-0 runs them: no BOS, special tokens not parsed), and
// decode(encode(text)) == text:
//
//   gguf_vocab_driver VOCAB.gguf
//
// Prints each mismatch and a summary; exit 1 on any mismatch. With
// `--encode TEXTS.jsonl` (one JSON string per line) it prints instead the
// ids of each text, one line each, special tokens recognised as the
// tokenizers library does (tests/e2e/tokenizer/gguf_vs_tokenizers.py).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "claw/ckpt/gguf.h"
#include "claw/ckpt/gguf_tokenizer.h"
#include "claw/core/error.h"
#include "claw/data/file_io.h"

#include <nlohmann/json.hpp>

namespace {

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 2 && !(argc == 4 && std::string(argv[2]) == "--encode")) {
    std::fprintf(stderr, "usage: gguf_vocab_driver VOCAB.gguf [--encode TEXTS.jsonl]\n");
    return 2;
  }
  const std::string path = argv[1];
  const claw::ckpt::gguf::Reader r(path);
  const claw::ckpt::GgufVocabulary g = claw::ckpt::gguf_vocabulary(r.metadata(), path);
  if (argc == 4) {
    std::ifstream in(argv[3]);
    std::string out;
    for (std::string line; std::getline(in, line);) {
      const std::string text = nlohmann::json::parse(line).get<std::string>();
      // As the tokenizers library: added (special) tokens matched in the text.
      out += join(g.tokenizer->encode(text, claw::data::SpecialTokens::recognise)) + "\n";
      if (out.size() > (1 << 20)) std::fputs(out.c_str(), stdout), out.clear();
    }
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  const std::string inp = claw::data::read_file(path + ".inp", "llama.cpp cases"), out = claw::data::read_file(path + ".out", "llama.cpp cases");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  for (size_t at = 0;;) {
    const size_t next = inp.find(sep, at);
    if (next == std::string::npos) break;  // the file ends with a separator
    cases.push_back(inp.substr(at, next - at));
    at = next + sep.size();
  }
  std::istringstream lines(out);
  int ok = 0, bad = 0, round_trips = 0;
  std::string want;
  for (const std::string& text : cases) {
    std::getline(lines, want);
    const std::vector<int32_t> ids = g.tokenizer->encode(text, claw::data::SpecialTokens::as_text);
    // Newer .out files write the ids without the leading space.
    if (join(ids) == want || join(ids) == " " + want) {
      ++ok;
    } else {
      ++bad;
      std::printf("MISMATCH %s\n  text %s\n  want%s\n  got %s\n", path.c_str(), text.c_str(), want.c_str(),
                  join(ids).c_str());
    }
    round_trips += g.tokenizer->decode(ids) == text;
  }
  std::printf("%s (pre %s, %d tokens): %d of %zu llama.cpp cases equal, %d round trips\n", path.c_str(),
              g.pre.c_str(), g.tokenizer->vocab_size(), ok, cases.size(), round_trips);
  return bad == 0 && round_trips == static_cast<int>(cases.size()) ? 0 : 1;
} catch (const claw::Error& e) {
  std::fprintf(stderr, "claw: error: %s\n", e.what());
  return 1;
}
