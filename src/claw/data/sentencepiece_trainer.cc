#include "claw/data/sentencepiece_trainer.h"

#include <sentencepiece_trainer.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/data/file_io.h"
#include "claw/data/pretokenizer_unicode.h"

namespace claw::data {
namespace {

// SentencePiece's default --max_sentence_length.
constexpr size_t kMaxSentenceBytes = 4192;

// Longest line read: a line is one text or one JSON document, and a file
// without newlines (/dev/zero) would otherwise grow one line without bound.
constexpr size_t kMaxLineBytes = size_t{64} << 20;

[[noreturn]] void line_too_long(const std::string& path, int64_t line_no) {
  fail("--input {} line {}: longer than {} bytes (one text or JSON document per line)", path, line_no, kMaxLineBytes);
}

// std::getline with that bound; false at the end of the input.
bool getline_bounded(std::istream& in, std::string& line, const std::string& path, int64_t line_no) {
  line.clear();
  char buf[1 << 16];
  for (;;) {
    in.getline(buf, sizeof buf);
    const auto got = static_cast<size_t>(in.gcount());  // with the '\n' when one was extracted
    if (in.bad()) return false;
    if (in.fail() && !in.eof() && got == sizeof buf - 1) {  // the buffer filled before a '\n'
      line.append(buf, got);
      if (line.size() > kMaxLineBytes) line_too_long(path, line_no);
      in.clear();
      continue;
    }
    if (in.eof()) {
      line.append(buf, got);
      return !line.empty();
    }
    line.append(buf, got - 1);
    if (line.size() > kMaxLineBytes) line_too_long(path, line_no);
    return true;
  }
}

bool is_jsonl(const std::string& path) { return path.ends_with(".jsonl") || path.ends_with(".json"); }

// Streams the sentences of all input files into the trainer. The trainer's
// interface has no exceptions: an input error ends the iteration, and the
// message is kept for train_sentencepiece() to raise as claw::Error.
class CorpusSentences final : public sentencepiece::SentenceIterator {
 public:
  explicit CorpusSentences(const SentencePieceTrainOptions& o) : o_(o) { advance(); }

  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return sentence_; }
  sentencepiece::util::Status status() const override {
    if (error_.empty()) return sentencepiece::util::Status();
    return sentencepiece::util::Status(sentencepiece::util::StatusCode::kInvalidArgument, error_);
  }
  const std::string& error() const { return error_; }
  int64_t count() const { return count_; }

 private:
  // Moves to the next non-empty sentence, opening files and splitting
  // lines and JSON values as needed.
  void advance() {
    try {
      while (!pending_.empty() || next_line()) {
        if (pending_.empty()) continue;
        const size_t eol = std::min(pending_.find('\n', pending_pos_), pending_.size());
        const size_t end = sentence_end(pending_pos_, eol);
        sentence_.assign(pending_, pending_pos_, end - pending_pos_);
        // Past the line break or the space where a long line was cut.
        pending_pos_ = end < eol && pending_[end] != ' ' ? end : end + 1;
        if (pending_pos_ >= pending_.size()) {
          pending_.clear();
          pending_pos_ = 0;
        }
        if (sentence_.empty()) continue;
        ++count_;
        return;
      }
      done_ = true;
    } catch (const Error& e) {
      error_ = e.what();
      done_ = true;
    }
  }

  // End of the sentence that starts at `begin` in a line ending at `eol`:
  // the line, or for a line longer than the trainer accepts (it would skip
  // it), the last space before the limit, else the last character boundary.
  size_t sentence_end(size_t begin, size_t eol) const {
    if (eol - begin <= kMaxSentenceBytes) return eol;
    const size_t limit = begin + kMaxSentenceBytes;
    const size_t space = pending_.rfind(' ', limit);
    if (space != std::string::npos && space > begin) return space;
    size_t cut = limit;
    while (cut > begin && (static_cast<unsigned char>(pending_[cut]) & 0xC0) == 0x80) --cut;
    return cut;
  }

  // Reads the next line of input into pending_ (the text to split into
  // sentences); false after the last file.
  bool next_line() {
    for (;;) {
      if (!file_.is_open()) {
        if (file_index_ >= o_.inputs.size()) return false;
        path_ = o_.inputs[file_index_++];
        file_.open(path_, std::ios::binary);
        if (!file_) fail("--input {}: cannot open ({})", path_, std::strerror(errno));
        line_no_ = 0;
      }
      if (!getline_bounded(file_, line_, path_, line_no_ + 1)) {
        if (file_.bad()) fail("--input {}: read error", path_);
        file_.close();
        continue;
      }
      ++line_no_;
      if (!line_.empty() && line_.back() == '\r') line_.pop_back();
      pending_pos_ = 0;
      if (!is_jsonl(path_)) {
        if (size_t bad = unicode::first_invalid_utf8(line_); bad != line_.size())
          fail("--input {} line {}: invalid UTF-8 at byte {}", path_, line_no_, bad + 1);
        pending_.swap(line_);
        return true;
      }
      if (line_.find_first_not_of(" \t") == std::string::npos) continue;
      nlohmann::json doc;
      try {
        doc = nlohmann::json::parse(line_);
      } catch (const nlohmann::json::exception& e) {
        fail("--input {} line {}: not a JSON object ({})", path_, line_no_, e.what());
      }
      if (!doc.is_object()) fail("--input {} line {}: not a JSON object", path_, line_no_);
      pending_.clear();
      for (const std::string& key : o_.json_keys) {
        auto it = doc.find(key);
        if (it == doc.end() || !it->is_string())
          fail("--input {} line {}: no string field \"{}\" (--json-keys)", path_, line_no_, key);
        pending_ += it->get_ref<const std::string&>();
        pending_ += '\n';
      }
      return true;
    }
  }

  const SentencePieceTrainOptions& o_;
  size_t file_index_ = 0;
  std::ifstream file_;
  std::string path_, line_, pending_, sentence_, error_;
  size_t pending_pos_ = 0;
  int64_t line_no_ = 0, count_ = 0;
  bool done_ = false;
};

// SentencePiece's status message, as users act on it: without the source
// location and condition its checks put first ("./src/x.cc(580) [cond]
// message"; the condition when there is no message), in claw's flag names.
std::string sentencepiece_reason(const std::string& raw) {
  std::string message = raw, condition;
  if (const size_t open = raw.find(") ["); open != std::string::npos && raw.rfind("./", 0) == 0) {
    const size_t close = raw.rfind("] ");
    const size_t end = close == std::string::npos || close < open ? raw.size() : close;
    condition = raw.substr(open + 3, end - open - 3);
    if (!condition.empty() && condition.back() == ']') condition.pop_back();
    message = end + 2 <= raw.size() ? raw.substr(end + 2) : "";
  }
  if (message.find_first_not_of(' ') == std::string::npos)
    return condition.empty() ? "no reason given" : fmt::format("its check ({}) failed", condition);
  const auto replace = [&](const std::string& from, const std::string& to) {
    for (size_t p = message.find(from); p != std::string::npos; p = message.find(from, p + to.size()))
      message.replace(p, from.size(), to);
  };
  replace(" with --character_coverage option", "");
  replace("vocab_size", "--vocab-size");
  replace("character_coverage", "--character-coverage");
  replace("Vocabulary size", "Vocabulary size (--vocab-size)");
  return message;
}

void validate(const SentencePieceTrainOptions& o) {
  if (o.inputs.empty()) fail("--input: give at least one text or JSONL file to train on");
  for (const std::string& p : o.inputs)
    if (!path_exists(p)) fail("--input {}: file not found", p);
  if (o.json_keys.empty()) fail("--json-keys: give at least one key");
  if (o.vocab_size < 8 || o.vocab_size > INT32_MAX) fail("--vocab-size {} must be in [8, {}]", o.vocab_size, INT32_MAX);
  if (o.model_type != "bpe" && o.model_type != "unigram")
    fail("--model-type '{}' is not one of: bpe, unigram", o.model_type);
  if (o.output_prefix.empty()) fail("--output-prefix must name the output files' prefix");
  // Checked before training, which would otherwise run to the end first.
  const std::string out_dir = std::filesystem::path(o.output_prefix).parent_path().string();
  if (!out_dir.empty() && !std::filesystem::is_directory(out_dir))
    fail("--output-prefix {}: directory {} does not exist", o.output_prefix, out_dir);
  if (!(o.character_coverage > 0 && o.character_coverage <= 1))
    fail("--character-coverage {} must be in (0, 1]", o.character_coverage);
  if (o.max_sentences < 0) fail("--max-sentences {} must be 0 (all) or positive", o.max_sentences);
  if (o.num_threads < 1) fail("--num-threads {} must be at least 1", o.num_threads);
  for (const std::string& c : o.control_symbols)
    if (c.empty() || c.find(',') != std::string::npos || c.find_first_of(" \t\n") != std::string::npos)
      fail("--control-symbols: '{}' is not a token (non-empty, no commas or spaces)", c);
}

}  // namespace

int64_t train_sentencepiece(const SentencePieceTrainOptions& o) {
  validate(o);
  std::unordered_map<std::string, std::string> args = {
      {"model_prefix", o.output_prefix},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"character_coverage", fmt::format("{}", o.character_coverage)},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(o.num_threads)},
      // Errors come back as a status (one claw::Error line); the library's
      // INFO and WARNING logs would bury it, and long lines, its usual
      // warning, are cut before they reach it.
      {"minloglevel", "2"},
  };
  if (!o.control_symbols.empty()) args["control_symbols"] = fmt::format("{}", fmt::join(o.control_symbols, ","));
  // The library's sampler draws from one process-wide generator.
  sentencepiece::SetRandomGeneratorSeed(o.seed);
  CorpusSentences sentences(o);
  const sentencepiece::util::Status status = sentencepiece::SentencePieceTrainer::Train(args, &sentences);
  if (!sentences.error().empty()) throw Error(sentences.error());
  if (!status.ok()) {
    // Its check on the sentences fails without a message: say why here.
    if (sentences.count() == 0)
      fail("--input {}: no text to train on (empty, or only blank lines{})", fmt::join(o.inputs, " "),
           std::any_of(o.inputs.begin(), o.inputs.end(), is_jsonl) ? " and empty --json-keys fields" : "");
    fail("train-tokenizer: SentencePiece training failed: {}", sentencepiece_reason(status.error_message()));
  }
  log::info("data", "trained a {} SentencePiece model of {} pieces on {} sentences: {}.model, {}.vocab",
            o.model_type, o.vocab_size, sentences.count(), o.output_prefix, o.output_prefix);
  return sentences.count();
}

}  // namespace claw::data
