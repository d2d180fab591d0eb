#include "claw/data/pretokenizer_unicode.h"

#include <unicode/uchar.h>

#include <cstring>
#include <memory>

namespace claw::data::unicode {

uint8_t code_point_flags(int32_t c) {
  if (c < 0) return 0;
  uint8_t f = 0;
  if (u_hasBinaryProperty(c, UCHAR_WHITE_SPACE)) f |= kSpace;
  if (c == '\r' || c == '\n') f |= kNewline;
  const uint32_t gc = U_GET_GC_MASK(c);
  if (gc & U_GC_L_MASK) f |= kLetter;
  if (gc & U_GC_N_MASK) f |= kNumber;
  if (gc & (U_GC_LU_MASK | U_GC_LT_MASK | U_GC_LM_MASK | U_GC_LO_MASK | U_GC_M_MASK)) f |= kUpperish;
  if (gc & (U_GC_LL_MASK | U_GC_LM_MASK | U_GC_LO_MASK | U_GC_M_MASK)) f |= kLowerish;
  return f;
}

const uint8_t* build_bmp_flags() {
  static const std::unique_ptr<uint8_t[]> table = [] {
    auto t = std::make_unique<uint8_t[]>(0x10000);
    for (int32_t c = 0; c < 0x10000; ++c) t[c] = code_point_flags(c);
    return t;
  }();
  return table.get();
}

size_t first_invalid_utf8(std::string_view s) {
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // Eight ASCII bytes at a time: most text is mostly ASCII.
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t left = n - i;
    const int32_t len = static_cast<int32_t>(left < 4 ? left : 4);
    int32_t j = 0;
    UChar32 c;
    U8_NEXT(s.data() + i, j, len, c);
    if (c < 0) return i;
    i += static_cast<size_t>(j);
  }
  return n;
}

}  // namespace claw::data::unicode
