// Reading a JSONL corpus as chunks of whole lines, with bounded memory
// whatever the file size. The file is plain text or zstd-compressed (one or
// more frames), recognised by the zstd magic at its start, not by its name.
//
// A chunk ends with the first line that reaches `target_bytes` (or with the
// input), so lines never straddle chunks; a line longer than the target
// makes its chunk that long. Line numbers are 1-based and count
// every '\n'-terminated line plus a final unterminated one.
//
// Progress: input_bytes_read() / input_size() is the fraction of the file
// read, in compressed bytes for a zstd file (the only size known up front).
//
// Thread-safety: one reader belongs to one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "claw/data/file_io.h"

namespace claw::data {

class ZstdDecoder;

struct LineChunk {
  std::string text;          // whole lines; each ends in '\n' except possibly the input's last
  int64_t first_line = 1;    // number of the chunk's first line
  int64_t num_lines = 0;
  uint64_t input_offset = 0;  // input bytes (compressed for zstd) read when the chunk was cut
};

class JsonlReader {
 public:
  // `what` names the input in errors, e.g. "--input" -> "--input x.jsonl not found".
  JsonlReader(const std::string& path, const char* what);
  ~JsonlReader();

  // Fills `chunk` with the next lines; false at the end of the input.
  bool next(LineChunk& chunk, size_t target_bytes);

  bool compressed() const { return zstd_ != nullptr; }
  uint64_t input_size() const { return input_size_; }
  uint64_t input_bytes_read() const { return input_read_; }

 private:
  size_t read_text(char* dst, size_t n);
  size_t read_input(char* dst, size_t n);

  std::string path_, what_;
  FileDescriptor fd_;
  uint64_t input_size_ = 0, input_read_ = 0;
  std::unique_ptr<ZstdDecoder> zstd_;
  std::vector<char> compressed_;  // zstd input buffer: bytes [compressed_pos_, compressed_end_) are unread
  size_t compressed_pos_ = 0, compressed_end_ = 0;
  bool input_done_ = false;
  std::string carry_;  // text after the last newline of the previous chunk
  int64_t next_line_ = 1;
  bool eof_ = false;
};

}  // namespace claw::data
