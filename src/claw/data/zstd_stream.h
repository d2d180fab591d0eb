// Streaming zstd decompression (Debian's libzstd), for corpora shipped as
// .jsonl.zst, and compression, for the shards `claw curate` writes. A file may hold several frames back to back (what `zstd`
// writes for concatenated inputs and what many corpus shards are); they
// decompress as one stream.
//
// Errors are claw::Error naming the source and the compressed byte offset:
// corrupt data, and input that ends inside a frame (a truncated download).
//
// Thread-safety: one decoder belongs to one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

struct ZSTD_DCtx_s;
struct ZSTD_CCtx_s;

namespace claw::data {

// True if `head` (the first bytes of a file) starts a zstd frame: the magic
// 28 B5 2F FD, or that of a skippable frame.
bool has_zstd_magic(std::span<const char> head);

class ZstdDecoder {
 public:
  // `source` names the input in error messages (e.g. "--input x.jsonl.zst").
  explicit ZstdDecoder(std::string source);
  ZstdDecoder(const ZstdDecoder&) = delete;
  ZstdDecoder& operator=(const ZstdDecoder&) = delete;
  ~ZstdDecoder();

  // Decompresses from `in`, starting at in[consumed], into `out`; advances
  // `consumed` and returns the bytes written. Returns 0 only when it needs
  // more input (consumed == in.size()) or `out` is empty.
  size_t decode(std::span<const char> in, size_t& consumed, std::span<char> out);

  // Call once the compressed input has ended: claw::Error if it ended inside
  // a frame.
  void check_complete() const;

 private:
  std::string source_;
  ZSTD_DCtx_s* ctx_;
  uint64_t compressed_offset_ = 0;  // compressed bytes consumed so far
  bool in_frame_ = false;           // a frame is begun and not yet complete
};

// One zstd frame written piece by piece: compress() appends the compressed
// form of `in` to `out` (possibly nothing yet), finish() ends the frame.
class ZstdEncoder {
 public:
  // `dest` names the output in error messages; level as the zstd tool's.
  explicit ZstdEncoder(std::string dest, int level = 3);
  ZstdEncoder(const ZstdEncoder&) = delete;
  ZstdEncoder& operator=(const ZstdEncoder&) = delete;
  ~ZstdEncoder();

  void compress(std::string_view in, std::string& out);
  void finish(std::string& out);

 private:
  void run(std::string_view in, std::string& out, int mode);

  std::string dest_;
  ZSTD_CCtx_s* ctx_;
};

}  // namespace claw::data
