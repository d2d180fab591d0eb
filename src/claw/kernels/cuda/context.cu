// The CUDA backend's device, stream, handles, memory and copies.
#include <algorithm>
#include <vector>

#include "claw/kernels/cuda/check.cuh"
#include "claw/kernels/cuda/ops.h"

namespace claw::kernels::cuda {

namespace {

// Device memory for arenas: cudaMalloc (never managed memory), zeroed.
class DeviceMemory final : public MemoryResource {
 public:
  explicit DeviceMemory(int device) : device_(device), name_("cuda:" + std::to_string(device)) {}
  void* allocate(size_t bytes) const override {
    CLAW_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error state of a failed allocation
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      fail("cudaMalloc of {} bytes: {} ({} bytes free of {})", bytes, cudaGetErrorString(e), free_b, total_b);
    }
    // cudaMemset runs on the legacy default stream, which claw's non-blocking
    // stream does not wait for: without the synchronisation a large arena's
    // zeroing could still be running when the first copy or kernel on the
    // stream writes into it (seen: weights uploaded into a 5 GB arena came
    // out partly zero).
    CLAW_CUDA_CHECK(cudaMemset(p, 0, bytes));
    CLAW_CUDA_CHECK(cudaDeviceSynchronize());
    return p;
  }
  void deallocate(void* p, size_t) const override { cudaFree(p); }
  const char* name() const override { return name_.c_str(); }
  bool host_accessible() const override { return false; }

 private:
  int device_;
  std::string name_;
};

__global__ void fill_kernel(float* x, float value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = value;
}

// Uniform values in [-1, 1) from an integer hash (benchmark inputs: never
// zeros); bf16 elements take the value's top 16 bits.
__device__ inline float hashed_uniform(int64_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return static_cast<float>(h >> 8) * (1.0f / 8388608.0f) - 1.0f;
}
__device__ inline void store(float* x, int64_t i, float v) { x[i] = v; }
__device__ inline void store(uint16_t* x, int64_t i, float v) { x[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16); }

template <typename T>
__global__ void random_kernel(T* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    store(x, i, hashed_uniform(i, seed));
}

constexpr size_t kWorkspaceBytes = size_t{64} << 20;
constexpr int64_t kOnes = int64_t{1} << 20;

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

DeviceInfo device_info(int device) {
  cudaDeviceProp p{};
  CLAW_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceInfo d;
  d.index = device;
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.multiprocessors = p.multiProcessorCount;
  d.total_bytes = p.totalGlobalMem;
  CLAW_CUDA_CHECK(cudaSetDevice(device));
  size_t free_b = 0, total_b = 0;
  CLAW_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  d.free_bytes = free_b;
  cudaDriverGetVersion(&d.driver_version);
  cudaRuntimeGetVersion(&d.runtime_version);
  return d;
}

namespace {
struct ScratchBuffers {
  void* ptr[kScratchSlots] = {};
  size_t bytes[kScratchSlots] = {};
};
}  // namespace

void* scratch_buffer(const GpuCtx& ctx, int slot, size_t bytes) {
  CLAW_CHECK(ctx.scratch && slot >= 0 && slot < kScratchSlots, "scratch slot {} of a context without buffers", slot);
  auto& s = *static_cast<ScratchBuffers*>(ctx.scratch);
  if (s.bytes[slot] >= bytes) return s.ptr[slot];
  CLAW_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  if (s.ptr[slot]) CLAW_CUDA_CHECK(cudaFree(s.ptr[slot]));
  s.ptr[slot] = nullptr;
  s.bytes[slot] = 0;
  const size_t grown = std::max(bytes, size_t{1} << 20);
  if (cudaError_t e = cudaMalloc(&s.ptr[slot], grown); e != cudaSuccess) {
    cudaGetLastError();
    fail("cudaMalloc of {} bytes for operand scratch: {}", grown, cudaGetErrorString(e));
  }
  s.bytes[slot] = grown;
  return s.ptr[slot];
}

const uint16_t* bf16_in_scratch(const GpuCtx& ctx, const float* x, int64_t n, int slot) {
  auto* bits = static_cast<uint16_t*>(scratch_buffer(ctx, slot, static_cast<size_t>(n) * sizeof(uint16_t)));
  to_bf16(ctx, bits, x, n);
  return bits;
}

Device::Device(int index) {
  const int n = device_count();
  if (n == 0) fail("CUDA backend: no CUDA device is visible (no driver, or CUDA_VISIBLE_DEVICES hides them)");
  if (index < 0 || index >= n) fail("CUDA backend: device {} asked for, but this machine has {} CUDA device(s)", index, n);
  info_ = device_info(index);
  ctx_.device = index;
  CLAW_CUDA_CHECK(cudaSetDevice(index));
  cudaStream_t s = nullptr;
  CLAW_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ctx_.stream = s;
  cublasHandle_t h = nullptr;
  CLAW_CUBLAS_CHECK(cublasCreate(&h));
  CLAW_CUBLAS_CHECK(cublasSetStream(h, s));
  ctx_.blas = h;
  // The first half is the kernels' scratch (reductions, attention's Delta,
  // norm partials), the second cuBLAS's: neither can clobber the other.
  CLAW_CUDA_CHECK(cudaMalloc(&ctx_.workspace, 2 * kWorkspaceBytes));
  ctx_.workspace_bytes = kWorkspaceBytes;
  CLAW_CUBLAS_CHECK(cublasSetWorkspace(h, static_cast<char*>(ctx_.workspace) + kWorkspaceBytes, kWorkspaceBytes));
  CLAW_CUDA_CHECK(cudaMallocHost(&ctx_.host_result, 64 * sizeof(double)));
  float* ones = nullptr;
  CLAW_CUDA_CHECK(cudaMalloc(&ones, kOnes * sizeof(float)));
  fill_kernel<<<grid_for(kOnes, 256), 256, 0, s>>>(ones, 1.0f, kOnes);
  CLAW_CUDA_LAUNCH_CHECK();
  ctx_.ones = ones;
  ctx_.ones_n = kOnes;
  ctx_.scratch = new ScratchBuffers;
  CLAW_CUDA_CHECK(cudaStreamSynchronize(s));
}

Device::~Device() {
  cudaSetDevice(ctx_.device);
  if (ctx_.stream) cudaStreamSynchronize(stream_of(ctx_));
  if (ctx_.ones) cudaFree(const_cast<float*>(ctx_.ones));
  if (ctx_.host_result) cudaFreeHost(ctx_.host_result);
  if (ctx_.workspace) cudaFree(ctx_.workspace);
  if (auto* buffers = static_cast<ScratchBuffers*>(ctx_.scratch)) {
    for (void* p : buffers->ptr)
      if (p) cudaFree(p);
    delete buffers;
  }
  if (ctx_.blas) cublasDestroy(blas_of(ctx_));
  if (ctx_.stream) cudaStreamDestroy(stream_of(ctx_));
}

void Device::synchronize() const { check_stream(ctx_, "synchronize"); }

const MemoryResource& Device::memory() const {
  // One resource per device index, alive for the process (arenas may outlive a Device).
  static std::vector<std::unique_ptr<DeviceMemory>> resources;
  while (static_cast<int>(resources.size()) <= ctx_.device)
    resources.push_back(std::make_unique<DeviceMemory>(static_cast<int>(resources.size())));
  return *resources[ctx_.device];
}

void copy_to_device(const GpuCtx& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CLAW_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_of(ctx)));
  CLAW_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
}

void copy_to_host(const GpuCtx& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CLAW_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_of(ctx)));
  CLAW_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
}

void fill_zero(const GpuCtx& ctx, void* dst, size_t bytes) {
  if (bytes == 0) return;
  CLAW_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_of(ctx)));
}

void check_stream(const GpuCtx& ctx, const char* what) {
  const cudaError_t e = cudaStreamSynchronize(stream_of(ctx));
  if (e != cudaSuccess) fail("CUDA backend: {}: {}", what, cudaGetErrorString(e));
}

namespace {
template <typename Launch>
double best_tflops(const GpuCtx& ctx, int64_t n, int reps, Launch&& launch) {
  cudaStream_t s = stream_of(ctx);
  for (int i = 0; i < 3; ++i) launch();
  cudaEvent_t a, b;
  CLAW_CUDA_CHECK(cudaEventCreate(&a));
  CLAW_CUDA_CHECK(cudaEventCreate(&b));
  float best_ms = 1e30f;
  for (int r = 0; r < reps; ++r) {
    CLAW_CUDA_CHECK(cudaEventRecord(a, s));
    launch();
    CLAW_CUDA_CHECK(cudaEventRecord(b, s));
    CLAW_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CLAW_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    best_ms = std::min(best_ms, ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return 2.0 * double(n) * n * n / (best_ms * 1e-3) / 1e12;
}

// n x n x n products on random operands of type T (fp32 C), best of `reps`.
template <typename T, typename Gemm>
double measure_gemm(const GpuCtx& ctx, int64_t n, int reps, Gemm&& gemm) {
  T *A = nullptr, *B = nullptr;
  float* C = nullptr;
  CLAW_CUDA_CHECK(cudaMalloc(&A, n * n * sizeof(T)));
  CLAW_CUDA_CHECK(cudaMalloc(&B, n * n * sizeof(T)));
  CLAW_CUDA_CHECK(cudaMalloc(&C, n * n * sizeof(float)));
  random_kernel<<<grid_for(n * n, 256), 256, 0, stream_of(ctx)>>>(A, n * n, 1u);
  random_kernel<<<grid_for(n * n, 256), 256, 0, stream_of(ctx)>>>(B, n * n, 2u);
  CLAW_CUDA_LAUNCH_CHECK();
  const double t = best_tflops(ctx, n, reps, [&] { gemm(A, B, C); });
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  return t;
}
}  // namespace

double measure_bf16_gemm_tflops(const GpuCtx& ctx, int64_t n, int reps) {
  return measure_gemm<uint16_t>(ctx, n, reps, [&](const uint16_t* A, const uint16_t* B, float* C) {
    gemm_bf16(ctx, false, false, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
  });
}

double measure_fp32_gemm_tflops(const GpuCtx& ctx, int64_t n, int reps) {
  return measure_gemm<float>(ctx, n, reps, [&](const float* A, const float* B, float* C) {
    gemm(ctx, false, false, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
  });
}

}  // namespace claw::kernels::cuda
