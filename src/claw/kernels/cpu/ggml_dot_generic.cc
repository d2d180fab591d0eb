// ggml_dot.inc for the build's own instruction set.
#define CLAW_GGML_PANEL rows_panel_generic
#include "claw/kernels/cpu/ggml_dot.inc"
