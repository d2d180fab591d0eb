#include "claw/data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "claw/core/error.h"
#include "claw/data/file_io.h"

namespace claw::data {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path, const std::string& eod_piece)
    : path_(model_path), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  if (!path_exists(model_path))
    fail("SentencePiece model {} not found (train one with `claw train-tokenizer` or spm_train)", model_path);
  // Read the file ourselves so that a read error names the OS reason;
  // the library then only parses.
  const std::string bytes = read_file(model_path, "SentencePiece model");
  if (const auto status = sp_->LoadFromSerializedProto(bytes); !status.ok())
    fail("SentencePiece model {}: cannot load it ({}); expected a .model file written by spm_train or claw "
         "train-tokenizer",
         model_path, status.ToString());
  vocab_size_ = sp_->GetPieceSize();
  for (int32_t id = 0; id < vocab_size_; ++id)
    if (sp_->IsControl(id)) specials_.push_back(Special{sp_->IdToPiece(id), id});
  if (eod_piece.empty()) {
    eod_ = sp_->eos_id();
    if (eod_ < 0)
      fail("SentencePiece model {} has no end-of-sentence piece (trained with --eos_id=-1); name the piece to use "
           "as end of document",
           model_path);
  } else {
    eod_ = sp_->PieceToId(eod_piece);
    if (sp_->IdToPiece(eod_) != eod_piece)
      fail("SentencePiece model {} has no piece '{}' to use as end of document", model_path, eod_piece);
  }
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;
SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;

void SentencePieceTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<int> ids;
  if (const auto status = sp_->Encode(text, &ids); !status.ok())
    fail("SentencePiece model {}: cannot encode text ({})", path_, status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

std::vector<int32_t> SentencePieceTokenizer::encode_impl(std::string_view text, SpecialTokens special) const {
  std::vector<int32_t> out;
  if (special == SpecialTokens::as_text || specials_.empty()) {
    encode_ordinary(text, out);
    return out;
  }
  // Leftmost control piece, the longest among those starting there.
  for (size_t pos = 0;;) {
    size_t at = std::string_view::npos;
    const Special* found = nullptr;
    for (const Special& s : specials_) {
      const size_t p = text.find(s.text, pos);
      if (p < at || (p == at && p != std::string_view::npos && s.text.size() > found->text.size())) {
        at = p;
        found = &s;
      }
    }
    const std::string_view part = text.substr(pos, at == std::string_view::npos ? at : at - pos);
    if (!part.empty()) encode_ordinary(part, out);
    if (found == nullptr) return out;
    out.push_back(found->id);
    pos = at + found->text.size();
  }
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  for (int32_t id : ids)
    if (id < 0 || id >= vocab_size_)
      fail("token id {} is outside the vocabulary [0, {}) of SentencePiece model {}", id, vocab_size_, path_);
  // DecodeIds drops control ids; write those as their text between runs of
  // ordinary ids (a run decodes as a whole: pieces join across ids).
  std::string out;
  std::vector<int> run;
  auto flush = [&] {
    if (run.empty()) return;
    std::string text;
    if (const auto status = sp_->Decode(run, &text); !status.ok())
      fail("SentencePiece model {}: cannot decode ids ({})", path_, status.ToString());
    out += text;
    run.clear();
  };
  for (int32_t id : ids) {
    if (sp_->IsControl(id)) {
      flush();
      out += sp_->IdToPiece(id);
    } else {
      run.push_back(id);
    }
  }
  flush();
  return out;
}

std::string SentencePieceTokenizer::piece(int32_t id) const {
  if (id < 0 || id >= vocab_size_)
    fail("token id {} is outside the vocabulary [0, {}) of SentencePiece model {}", id, vocab_size_, path_);
  return sp_->IdToPiece(id);
}

}  // namespace claw::data
