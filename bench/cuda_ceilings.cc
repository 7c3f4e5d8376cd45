// The GPU's measured ceilings, for the roofline notes in RESULTS.md: device memory bandwidth
// (a 1 GiB device-to-device copy: read + write bytes over time) and the matrix-product rate
// of cuBLASLt on a large square product in f32, TF32 and bf16 (bf16 operands, f32 accumulation
// and result, as Precision::kBf16's products run): the best the backend can call.
//
//   ./cuda_ceilings            (needs a GPU; prints one line per ceiling)
#include <cstdio>
#include <string>

#include "backend/cuda/cublaslt.h"
#include "backend/cuda/driver.h"
#include "cuda_timing.h"

namespace cuda = tg::backend::cuda;

int main() {
  if (const std::string why = cuda::unavailable_reason(0); !why.empty()) {
    std::printf("cuda_ceilings: no usable GPU: %s\n", why.c_str());
    return 0;
  }
  const cuda::DeviceInfo info = cuda::open_device(0);
  std::printf("# %s (sm_%d%d)\n", info.name.c_str(), info.sm_major, info.sm_minor);
  const cuda::Driver& d = cuda::driver();

  const size_t bytes = size_t{1} << 30;
  cuda::DeviceMemory src(bytes), dst(bytes);
  const float copy_ms = cuda_time_ms(
      [&] { cuda::check(d.cuMemcpyDtoDAsync(dst.get(), src.get(), bytes, nullptr), "copy"); }, 20);
  std::printf("memory bandwidth (1 GiB device copy, read + write)  %8.0f GB/s\n",
              2.0 * static_cast<double>(bytes) / (copy_ms * 1e6));

  const int64_t n = 8192;
  cuda::DeviceMemory a(static_cast<size_t>(n * n * 4)), b(static_cast<size_t>(n * n * 4)),
      c(static_cast<size_t>(n * n * 4));
  cuda::DeviceMemory workspace(size_t{32} << 20);
  const cuda::MatOperand dense{n, n, n, 1, 0};
  for (const auto mode : {cuda::MathMode::kFp32, cuda::MathMode::kTf32}) {
    cuda::LtMatmul mm(1, n, n, n, dense, dense, mode, size_t{32} << 20);
    mm.tune(a.get(), b.get(), c.get(), workspace.get(), nullptr);
    const float ms = cuda_time_ms([&] { mm.run(a.get(), b.get(), c.get(), workspace.get(), nullptr); }, 5);
    std::printf("cuBLASLt %s product 8192^3                        %8.1f TFLOP/s\n",
                mode == cuda::MathMode::kTf32 ? "tf32" : "fp32",
                2.0 * static_cast<double>(n * n * n) / (ms * 1e9));
  }
  {
    cuda::LtMatmul mm(1, n, n, n, dense, dense, cuda::MathMode::kFp32, size_t{32} << 20, false, 0,
                      tg::DType::kBF16);
    mm.tune(a.get(), b.get(), c.get(), workspace.get(), nullptr);
    const float ms = cuda_time_ms([&] { mm.run(a.get(), b.get(), c.get(), workspace.get(), nullptr); }, 5);
    std::printf("cuBLASLt bf16 product 8192^3 (f32 accumulate/out)  %8.1f TFLOP/s\n",
                2.0 * static_cast<double>(n * n * n) / (ms * 1e9));
  }
  return 0;
}
