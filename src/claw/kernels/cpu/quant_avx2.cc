// The quantized linear panel for AVX2 + FMA + F16C (compiled with those
// flags whatever the build's -march; chosen at run time, quant.cc).
#if defined(__x86_64__)
#define CLAW_QUANT_VNNI 0
#define CLAW_QUANT_PANEL panel_avx2
#include "claw/kernels/cpu/quant_panel_x86.inc"
#endif
