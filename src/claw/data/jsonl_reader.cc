#include "claw/data/jsonl_reader.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "claw/core/error.h"
#include "claw/data/zstd_stream.h"

namespace claw::data {
namespace {

constexpr size_t kBlock = size_t{1} << 20;  // one read(2) or one decompression step

}  // namespace

JsonlReader::JsonlReader(const std::string& path, const char* what)
    : path_(path), what_(what), fd_(open_regular_file(path, what)) {
  input_size_ = regular_file_size(fd_, path_, what);
  compressed_.resize(kBlock);
  compressed_end_ = read_input(compressed_.data(), compressed_.size());
  if (has_zstd_magic({compressed_.data(), compressed_end_})) {
    zstd_ = std::make_unique<ZstdDecoder>(fmt::format("{} {}", what_, path_));
    return;
  }
  if (path_.ends_with(".zst"))
    fail("{} {}: the name ends in .zst but the file does not start with the zstd magic bytes 28 B5 2F FD", what_,
         path_);
  // Plain text: the bytes read to look for the magic are the first text.
  carry_.assign(compressed_.data(), compressed_end_);
  compressed_ = {};
  compressed_end_ = 0;
}

JsonlReader::~JsonlReader() = default;

size_t JsonlReader::read_input(char* dst, size_t n) {
  if (input_done_) return 0;
  const size_t got = read_some(fd_, dst, n, path_, what_.c_str());
  input_read_ += got;
  if (got < n) input_done_ = true;
  return got;
}

size_t JsonlReader::read_text(char* dst, size_t n) {
  if (!zstd_) return read_input(dst, n);
  while (true) {
    if (compressed_pos_ == compressed_end_ && !input_done_) {
      compressed_pos_ = 0;
      compressed_end_ = read_input(compressed_.data(), compressed_.size());
    }
    const size_t produced = zstd_->decode({compressed_.data(), compressed_end_}, compressed_pos_, {dst, n});
    if (produced > 0) return produced;
    if (input_done_ && compressed_pos_ == compressed_end_) {
      zstd_->check_complete();
      return 0;
    }
  }
}

bool JsonlReader::next(LineChunk& chunk, size_t target_bytes) {
  std::string& text = chunk.text;
  text.clear();
  text.reserve(std::max(target_bytes, carry_.size()) + kBlock);
  text.append(carry_);
  carry_.clear();
  // Cut after the first newline at or past byte target_bytes - 1; text
  // before scan_from was searched already.
  size_t scan_from = std::max<size_t>(target_bytes, 1) - 1;
  while (true) {
    if (text.size() > scan_from) {
      if (const void* nl = std::memchr(text.data() + scan_from, '\n', text.size() - scan_from)) {
        const size_t cut = static_cast<size_t>(static_cast<const char*>(nl) - text.data()) + 1;
        carry_.assign(text, cut);
        text.resize(cut);
        break;
      }
      scan_from = text.size();
    }
    if (eof_) break;
    const size_t old = text.size();
    text.resize(old + kBlock);
    const size_t got = read_text(text.data() + old, kBlock);
    text.resize(old + got);
    if (got == 0) eof_ = true;
  }
  // A UTF-8 byte order mark before the first record (editors on Windows
  // write one) is not part of it: records are handed on as text, and one
  // wrapped in another JSON object would not parse with the mark inside.
  if (next_line_ == 1 && text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
  if (text.empty()) return false;
  chunk.first_line = next_line_;
  chunk.num_lines = std::count(text.begin(), text.end(), '\n') + (text.back() != '\n' ? 1 : 0);
  chunk.input_offset = input_read_;
  next_line_ += chunk.num_lines;
  return true;
}

}  // namespace claw::data
