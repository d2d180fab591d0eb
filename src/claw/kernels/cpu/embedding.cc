#include "claw/kernels/cpu/embedding.h"
#include "claw/kernels/cpu/route.h"

#include <algorithm>

#include "claw/core/storage.h"

namespace claw::kernels {

template <typename T>
void embedding_forward(const CpuCtx& ctx, T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                       int64_t T_, int64_t C, const int32_t* positions) {
  CLAW_ROUTE_TO_GPU(ctx, T, embedding_forward, out, tokens, wte, wpe, B, T_, C, positions);
  int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(C, 1));
  parallel_for(ctx, B * T_, grain, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const T* tok = wte + static_cast<int64_t>(tokens[n]) * C;
      T* o = out + n * C;
      if (wpe) {
        const T* pos = wpe + (positions ? positions[n] : n % T_) * C;
        for (int64_t c = 0; c < C; ++c) o[c] = narrow<T>(widen(tok[c]) + widen(pos[c]));
      } else {
        std::copy(tok, tok + C, o);
      }
    }
  });
}

template <typename T>
void embedding_backward(const CpuCtx& ctx, acc_t<T>* dwte, acc_t<T>* dwpe, const T* dout, const int32_t* tokens,
                        int64_t B, int64_t T_, int64_t C, const int32_t* positions) {
  CLAW_ROUTE_TO_GPU(ctx, T, embedding_backward, dwte, dwpe, dout, tokens, B, T_, C, positions);
  using A = acc_t<T>;
  // Threads own slices of whole 64-byte lines of channels, so two threads
  // never write the same line of dwte/dwpe, and every (row, channel) sum is
  // taken in row order whatever the thread count.
  constexpr int64_t kLine = 64 / sizeof(A);
  int64_t lines = (C + kLine - 1) / kLine;
  parallel_for(ctx, lines, 4, [&](int64_t lb, int64_t le) {
    int64_t cb = lb * kLine, ce = std::min(C, le * kLine);
    for (int64_t n = 0; n < B * T_; ++n) {
      const T* d = dout + n * C;
      if (dwte) {
        A* w = dwte + static_cast<int64_t>(tokens[n]) * C;
        for (int64_t c = cb; c < ce; ++c) w[c] += widen(d[c]);
      }
      if (dwpe) {
        A* p = dwpe + (positions ? positions[n] : n % T_) * C;
        for (int64_t c = cb; c < ce; ++c) p[c] += widen(d[c]);
      }
    }
  });
}

#define CLAW_INSTANTIATE(T)                                                                                    \
  template void embedding_forward<T>(const CpuCtx&, T*, const int32_t*, const T*, const T*, int64_t, int64_t, \
                                     int64_t, const int32_t*);                                                 \
  template void embedding_backward<T>(const CpuCtx&, acc_t<T>*, acc_t<T>*, const T*, const int32_t*, int64_t,  \
                                      int64_t, int64_t, const int32_t*);
CLAW_INSTANTIATE(float)
CLAW_INSTANTIATE(double)
CLAW_INSTANTIATE(bfloat16)
CLAW_INSTANTIATE(float16)
#undef CLAW_INSTANTIATE

}  // namespace claw::kernels
