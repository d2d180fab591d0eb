// The CUDA backend's entry points in a build without it (CLAW_CUDA off or no
// CUDA compiler found): no devices, and a clear error for anyone who asks
// for one. The kernels themselves are never referenced (route.h).
#include "claw/core/error.h"
#include "claw/kernels/cuda/context.h"

namespace claw::kernels::cuda {

namespace {
[[noreturn]] void absent() {
  fail("this claw was built without the CUDA backend: rebuild on a machine with a CUDA toolkit "
       "(cmake -DCLAW_CUDA=ON; scripts/cuda-toolkit fetches one from PyPI), or use --device cpu");
}
}  // namespace

int device_count() { return 0; }
DeviceInfo device_info(int) { absent(); }
Device::Device(int) { absent(); }
Device::~Device() = default;
void Device::synchronize() const { absent(); }
const MemoryResource& Device::memory() const { absent(); }
void copy_to_device(const GpuCtx&, void*, const void*, size_t) { absent(); }
void copy_to_host(const GpuCtx&, void*, const void*, size_t) { absent(); }
void fill_zero(const GpuCtx&, void*, size_t) { absent(); }
void check_stream(const GpuCtx&, const char*) { absent(); }
void* scratch_buffer(const GpuCtx&, int, size_t) { absent(); }
const uint16_t* bf16_in_scratch(const GpuCtx&, const float*, int64_t, int) { absent(); }
double measure_bf16_gemm_tflops(const GpuCtx&, int64_t, int) { absent(); }
double measure_fp32_gemm_tflops(const GpuCtx&, int64_t, int) { absent(); }

}  // namespace claw::kernels::cuda
