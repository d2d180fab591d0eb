// The quantized linear panel for AVX-512 VNNI (vpdpbusd on 256-bit
// registers; compiled with those flags whatever the build's -march; chosen at
// run time, quant.cc).
#if defined(__x86_64__)
#define CLAW_QUANT_VNNI 1
#define CLAW_QUANT_PANEL panel_avx512_vnni
#include "claw/kernels/cpu/quant_panel_x86.inc"
#endif
