// The CUDA backend's context: one device, one stream, cuBLAS handles and a
// small workspace for reductions. A kernel call reaches the GPU when the
// CpuCtx it receives carries one (CpuCtx::gpu); the model, optimizer and
// schedules pass the same context either way and do not change.
//
// This header needs no CUDA headers: handles are held as void*, so layers
// above kernels/ include it in builds with and without CUDA. Everything but
// cuda_built() exists only in a build configured with CLAW_CUDA (the macro
// CLAW_WITH_CUDA is then defined for every target).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "claw/core/memory_resource.h"

namespace claw {

struct GpuCtx {
  int device = 0;
  void* stream = nullptr;   // cudaStream_t: every kernel and cuBLAS call runs on it, in order
  void* blas = nullptr;     // cublasHandle_t bound to the stream
  void* workspace = nullptr;  // device bytes for the kernels' reductions (cuBLAS has its own)
  size_t workspace_bytes = 0;
  double* host_result = nullptr;  // pinned host doubles for scalar results (reductions)
  const float* ones = nullptr;    // device [ones_n] of 1.0f (bias gradients as a GEMV)
  int64_t ones_n = 0;
  void* scratch = nullptr;  // the Device's grow-only operand buffers (kernels::cuda::scratch_buffer)
  // true: fp32 GEMMs may use TF32 tensor cores (faster, ~1e-3 relative);
  // false (the default): IEEE fp32, results equal the CPU backend to rounding.
  bool allow_tf32 = false;
  // true (--bf16): attention runs on the tensor cores with bf16 operands
  // (attention_bf16.cu) where the head dim allows; false: the fp32 kernels.
  bool bf16_attention = false;
};

namespace kernels::cuda {

// Whether this binary was built with the CUDA backend.
constexpr bool cuda_built() {
#ifdef CLAW_WITH_CUDA
  return true;
#else
  return false;
#endif
}

struct DeviceInfo {
  int index = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int cc_major = 0, cc_minor = 0;
  int multiprocessors = 0;
  size_t total_bytes = 0, free_bytes = 0;
  int driver_version = 0, runtime_version = 0;  // e.g. 13000
};

// Devices visible to this process (0 when there is no driver or no GPU).
int device_count();
DeviceInfo device_info(int device);

// Owns the stream, handles and workspace of one device; ctx() is what
// kernels receive (through CpuCtx::gpu). Throws claw::Error when the device
// cannot be opened.
class Device {
 public:
  explicit Device(int index = 0);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  const GpuCtx& ctx() const { return ctx_; }
  GpuCtx& ctx() { return ctx_; }
  const DeviceInfo& info() const { return info_; }
  // Waits for all work queued on the stream; throws on a kernel failure.
  void synchronize() const;
  // Device memory for arenas (zero-filled like the CPU's anonymous mappings).
  const MemoryResource& memory() const;

 private:
  GpuCtx ctx_;
  DeviceInfo info_;
};

// Copies between host and device memory on the context's stream (blocking:
// returns once the bytes have arrived).
void copy_to_device(const GpuCtx& ctx, void* dst, const void* src, size_t bytes);
void copy_to_host(const GpuCtx& ctx, void* dst, const void* src, size_t bytes);
void fill_zero(const GpuCtx& ctx, void* dst, size_t bytes);                         // asynchronous
// Throws claw::Error naming `what` if the stream saw a failure.
void check_stream(const GpuCtx& ctx, const char* what);

// A device buffer of at least `bytes` for operands a layer converts on the
// way into a product (bf16 copies of activations and output gradients):
// kScratchSlots independent slots per device, each grown (never shrunk) on
// demand. Valid until the next call for the same slot with more bytes;
// growing waits for the stream, so work queued on the old buffer finishes
// first. Slots 0 and 1 are the linear layers' two operands, 2 and 3 the
// output layer's.
inline constexpr int kScratchSlots = 4;
void* scratch_buffer(const GpuCtx& ctx, int slot, size_t bytes);
// x[0, n) rounded to bf16 bit patterns (nearest even) in scratch slot `slot`;
// queued on the stream like a kernel.
const uint16_t* bf16_in_scratch(const GpuCtx& ctx, const float* x, int64_t n, int slot);

// Measured BF16 GEMM throughput (cuBLASLt, fp32 accumulation) in TFLOP/s:
// best of `reps` timed n x n x n products on random data after a warm-up.
double measure_bf16_gemm_tflops(const GpuCtx& ctx, int64_t n = 8192, int reps = 20);
// The same for fp32 (IEEE, no TF32).
double measure_fp32_gemm_tflops(const GpuCtx& ctx, int64_t n = 8192, int reps = 10);

}  // namespace kernels::cuda
}  // namespace claw
