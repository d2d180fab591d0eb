// ggml's tensor element types (the ones GGUF files carry), byte for byte as
// llama.cpp lays them out, and the arithmetic of its CPU matrix products
// over them.
//
// Blocks (all little endian; d, dmin, m, s are f16 unless said):
//   q4_0   32: d, 16 bytes of nibbles (low: elements 0..15, high: 16..31);
//              x = d (q - 8)                                       18 bytes
//   q4_1   32: d, m, nibbles as q4_0; x = d q + m                  20
//   q5_0   32: d, u32 of fifth bits (bit i: element i), nibbles;
//              x = d (q - 16)                                      22
//   q5_1   32: d, m, fifth bits, nibbles; x = d q + m              24
//   q8_0   32: d, 32 int8; x = d q                                 34
//   iq4_nl 32: d, nibbles as q4_0; x = d kv[q] (kv: 16 int8 levels) 18
// and super-blocks of 256 in sub-blocks of 16 or 32 with integer scales:
//   q2_K   16 bytes of 4-bit scale | 4-bit min per 16, 64 bytes of 2-bit
//          quants, d, dmin; x = d sc q - dmin m                    84
//   q3_K   32 bytes of third bits, 64 of 2-bit quants, 12 of 6-bit scales
//          (biased by 32), d; x = d sc (q - 4 [bit clear])        110
//   q4_K   d, dmin, 12 bytes of 6-bit scales and mins per 32, 128 of
//          nibbles; x = d sc q - dmin m                           144
//   q5_K   as q4_K with 32 bytes of fifth bits                    176
//   q6_K   128 bytes of low nibbles, 64 of high 2 bits, 16 int8 scales
//          per 16, d; x = d sc (q - 32)                           210
//   iq4_xs d, 16 bits of the scales' high 2 bits, 4 bytes of their low
//          nibbles (6-bit per 32, biased by 32), 128 of nibbles;
//          x = d sc kv[q]                                         136
// Within a super-block, 32-byte (or 64-byte) runs of quants interleave
// consecutive sub-blocks by bit position (ggml_quants.cc's decoders say
// exactly how).
//
// Matrix products follow llama.cpp's CPU backend: each activation row is
// first quantized to the weight type's "vec-dot type" (q8_0 for the blocks
// of 32 but q4_1/q5_1, whose is q8_1; q8_K for the super-blocks; f16 for
// f16), then each output is integer dot products of the quants combined
// with the scales in fp32. The quants, scales and integer sums equal
// llama.cpp's; the fp32 sums differ from its in order only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace claw::kernels {

enum class GgmlType : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9, q2_K = 10, q3_K = 11,
  q4_K = 12, q5_K = 13, q6_K = 14, q8_K = 15, iq4_nl = 20, iq4_xs = 23, bf16 = 30
};

constexpr int64_t kSuperBlock = 256;  // QK_K

struct GgmlTypeInfo {
  const char* name;    // as llama.cpp prints it: "Q4_K"
  int64_t block;       // elements a block
  size_t block_bytes;  // bytes a block
};
// The types claw reads; nullptr for others (ggml_type_label names any id).
const GgmlTypeInfo* ggml_type_info(uint32_t type);
std::string ggml_type_label(uint32_t type);  // "Q4_K", or "type 39 (MXFP4)" for one claw does not read
// The types claw reads, comma-separated (for errors).
std::string ggml_readable_types();

// The type each activation row is quantized to for a product with weights of
// type w (f32 for f32 and bf16: no quantization).
GgmlType ggml_vec_dot_type(GgmlType w);

// The types claw writes as llama.cpp's reference quantizers do (what
// llama-quantize makes without an importance matrix), byte for byte:
// q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, and iq4_nl/iq4_xs by the
// search llama-quantize runs (ggml_quantize.cc; q8_0 and q4_0 are quant.h's
// own).
bool ggml_quantizable(GgmlType t);
// n weights (whole blocks) to t (ggml_quantizable).
void ggml_quantize_weights(GgmlType t, const float* x, void* dst, int64_t n);

// n elements (whole blocks) of type t to fp32, as gguf-py's dequantize does
// (the same float operations in the same order: bitwise equal).
void ggml_dequantize(GgmlType t, const void* src, float* dst, int64_t n);

// n activations (whole blocks) to t in {q8_0, q8_1, q8_K, f16, f32}, as
// llama.cpp's x86 CPU backend does (q8_0/q8_1: d = max|x| / 127 kept in
// f16, q = x (127 / max|x|) rounded half to even; q8_K: d = max / -127 of
// the element of largest magnitude, kept in fp32, q = nearest(x / d),
// clamped at 127, with its sums per 16).
void ggml_quantize_activations(GgmlType t, const float* x, void* dst, int64_t n);
// One block of 32 as llama.cpp's q8_0 (above): the quants, the scale d =
// max|x| / 127 in fp32 (stored rounded to f16; q8_1's s is d sum(q) before
// that rounding), and the sum of the quants. The one definition behind the
// activations of every q8_0/q8_1 product and the q8_0 KV cache.
int32_t ggml_quantize_q8_0_block(const float* x, int8_t q[32], float* d);
size_t ggml_row_bytes(GgmlType t, int64_t n);

// out[m * ldo + n] = sum_k W[n, k] x[m, k] (+ bias[n]) for the weight rows
// [n0, n1) of type w (row_bytes bytes each, from W) and M activation rows xq
// in ggml_vec_dot_type(w) (xb bytes each): each weight row decoded once for
// the M rows, then per block the integer dot products and the scales in
// fp32. The AVX2 build or the portable one, chosen at run time
// (CLAW_QUANT_ISA=generic forces the latter); the same bits either way.
void ggml_rows_panel(GgmlType w, const uint8_t* W, size_t row_bytes, int64_t n0, int64_t n1, int64_t K,
                     const uint8_t* xq, size_t xb, int64_t M, float* out, int64_t ldo, const float* bias);
std::string ggml_kernel_isa();  // "avx2" or "generic"
// One row by one activation row (ggml_rows_panel with n0 = 0, n1 = M = 1).
float ggml_vec_dot(GgmlType w, const void* wrow, const void* xrow, int64_t K);

}  // namespace claw::kernels
