// ggml_dot.inc for AVX2 + FMA + F16C (compiled with those flags whatever the
// build's -march; chosen at run time, ggml_quants.cc).
#if defined(__x86_64__)
#define CLAW_GGML_PANEL rows_panel_avx2
#include "claw/kernels/cpu/ggml_dot.inc"
#endif
