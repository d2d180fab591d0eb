#include "claw/data/zstd_stream.h"

#include <zstd.h>

#include <cstring>

#include "claw/core/error.h"

namespace claw::data {

bool has_zstd_magic(std::span<const char> head) {
  if (head.size() < 4) return false;
  uint32_t magic;
  std::memcpy(&magic, head.data(), 4);  // little-endian, like the format
  return magic == ZSTD_MAGICNUMBER || (magic & ZSTD_MAGIC_SKIPPABLE_MASK) == ZSTD_MAGIC_SKIPPABLE_START;
}

ZstdDecoder::ZstdDecoder(std::string source) : source_(std::move(source)), ctx_(ZSTD_createDCtx()) {
  if (ctx_ == nullptr) fail("{}: cannot create a zstd decompression context (out of memory)", source_);
}

ZstdDecoder::~ZstdDecoder() { ZSTD_freeDCtx(ctx_); }

size_t ZstdDecoder::decode(std::span<const char> in, size_t& consumed, std::span<char> out) {
  ZSTD_outBuffer ob{out.data(), out.size(), 0};
  while (ob.pos < ob.size) {
    ZSTD_inBuffer ib{in.data(), in.size(), consumed};
    const size_t in_before = ib.pos, out_before = ob.pos;
    // Called with no new input too: the context may still hold decoded
    // bytes that did not fit the previous output buffer.
    const size_t r = ZSTD_decompressStream(ctx_, &ob, &ib);
    if (ZSTD_isError(r))
      fail("{}: corrupt zstd data near compressed byte {}: {}", source_, compressed_offset_, ZSTD_getErrorName(r));
    compressed_offset_ += ib.pos - in_before;
    consumed = ib.pos;
    if (ib.pos == in_before && ob.pos == out_before) break;  // needs more input
    in_frame_ = r != 0;  // 0: a frame ended and every byte of it was flushed
  }
  return ob.pos;
}

void ZstdDecoder::check_complete() const {
  if (in_frame_)
    fail("{}: the zstd data ends inside a frame after {} compressed bytes; the file is truncated", source_,
         compressed_offset_);
}

ZstdEncoder::ZstdEncoder(std::string dest, int level) : dest_(std::move(dest)), ctx_(ZSTD_createCCtx()) {
  if (ctx_ == nullptr) fail("{}: cannot create a zstd compression context (out of memory)", dest_);
  ZSTD_CCtx_setParameter(ctx_, ZSTD_c_compressionLevel, level);
}

ZstdEncoder::~ZstdEncoder() { ZSTD_freeCCtx(ctx_); }

void ZstdEncoder::run(std::string_view in, std::string& out, int mode) {
  ZSTD_inBuffer ib{in.data(), in.size(), 0};
  while (true) {
    const size_t old = out.size(), room = ZSTD_CStreamOutSize();
    out.resize(old + room);
    ZSTD_outBuffer ob{out.data() + old, room, 0};
    const size_t r = ZSTD_compressStream2(ctx_, &ob, &ib, static_cast<ZSTD_EndDirective>(mode));
    out.resize(old + ob.pos);
    if (ZSTD_isError(r)) fail("{}: zstd compression failed: {}", dest_, ZSTD_getErrorName(r));
    if (mode == ZSTD_e_continue ? ib.pos == ib.size : r == 0) break;
  }
}

void ZstdEncoder::compress(std::string_view in, std::string& out) { run(in, out, ZSTD_e_continue); }
void ZstdEncoder::finish(std::string& out) { run({}, out, ZSTD_e_end); }

}  // namespace claw::data
