// The CUDA foundation (issue 5, first brick): run-time loading of the driver and NVRTC, device
// discovery, NVRTC compilation with its disk cache, and kernels generated from ops.def checked
// against the reference backend's scalar semantics on the GPU. Without a GPU the GPU tests are
// skipped with a message saying why; the NVRTC tests still run wherever NVRTC is installed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "backend/cuda/codegen.h"
#include "backend/cuda/driver.h"
#include "backend/ref/ref_scalar.h"
#include "tensorgrad/errors.h"
#include "../test_util.h"

namespace {

using namespace tg;
using tg::testing::message_of;
namespace cuda = tg::backend::cuda;

bool have_nvrtc(std::string& why) {
  try {
    cuda::nvrtc();
    return true;
  } catch (const DeviceError& e) {
    why = e.what();
    return false;
  }
}

TEST(CudaDriver, AnUnusableDeviceSaysWhy) {
  const std::string why = cuda::unavailable_reason(0);
  if (why.empty()) GTEST_SKIP() << "cuda:0 is usable here; this test covers machines without one";
  const std::string msg = message_of<DeviceError>([] { cuda::open_device(0); });
  EXPECT_NE(msg.find("cuda:0 is unusable"), std::string::npos) << msg;
  EXPECT_NE(msg.find(why), std::string::npos) << msg;
}

TEST(CudaDriver, NoSuchDeviceIndex) {
  if (!cuda::unavailable_reason(0).empty()) GTEST_SKIP() << "no usable GPU: " << cuda::unavailable_reason(0);
  EXPECT_NE(cuda::unavailable_reason(4096).find("there is no cuda:4096"), std::string::npos);
}

TEST(CudaNvrtc, CompileErrorsShowTheLogAndTheNumberedSource) {
  std::string why;
  if (!have_nvrtc(why)) GTEST_SKIP() << why;
  setenv("TG_CUDA_CACHE", "off", 1);
  const std::string msg = message_of<DeviceError>([] {
    cuda::compile_cubin("extern \"C\" __global__ void broken() {\n  undefined_name += 1;\n}\n", "broken", 9, 0);
  });
  EXPECT_NE(msg.find("could not compile kernel 'broken'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("undefined_name"), std::string::npos) << msg;
  EXPECT_NE(msg.find("   2    undefined_name += 1;"), std::string::npos) << msg;
  unsetenv("TG_CUDA_CACHE");
}

TEST(CudaNvrtc, CubinsAreCachedOnDisk) {
  std::string why;
  if (!have_nvrtc(why)) GTEST_SKIP() << why;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("tg_cuda_cache_test_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  setenv("TG_CUDA_CACHE", dir.c_str(), 1);
  const std::string src = cuda::elementwise_kernel(ir::Op::kGeluTanh, "gelu");
  const std::vector<char> first = cuda::compile_cubin(src, "gelu", 9, 0);
  ASSERT_FALSE(first.empty());
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.path().extension() == ".cubin";
  EXPECT_EQ(files, 1u);
  EXPECT_EQ(cuda::compile_cubin(src, "gelu", 9, 0), first);          // served from the cache
  EXPECT_NE(cuda::compile_cubin(src, "gelu", 8, 0), first);          // another architecture: another entry
  std::filesystem::remove_all(dir);
  unsetenv("TG_CUDA_CACHE");
}

TEST(CudaKernels, GeneratedElementwiseKernelsMatchTheReference) {
  const std::string why = cuda::unavailable_reason(0);
  if (!why.empty()) GTEST_SKIP() << "no usable GPU, GPU tests skipped: " << why;
  const cuda::DeviceInfo info = cuda::open_device(0);
  std::printf("cuda:0 = %s, sm_%d%d, %.1f GiB, driver %d\n", info.name.c_str(), info.sm_major, info.sm_minor,
              static_cast<double>(info.total_bytes) / (1 << 30), info.driver_version);
  const cuda::Driver& d = cuda::driver();
  constexpr long long n = 4097;  // not a multiple of the block
  std::vector<float> a(n), b(n);
  for (long long i = 0; i < n; ++i) {
    a[static_cast<size_t>(i)] = -3.0f + 6.0f * static_cast<float>(i) / static_cast<float>(n - 1);
    b[static_cast<size_t>(i)] = 0.25f + 2.0f * static_cast<float>((i * 37) % n) / static_cast<float>(n);
  }
  cuda::DeviceMemory da(n * 4), db(n * 4), dout(n * 4);
  da.upload(a.data(), n * 4);
  db.upload(b.data(), n * 4);
  const ir::Op ops[] = {ir::Op::kExp,  ir::Op::kTanh,     ir::Op::kSigmoid, ir::Op::kErf,
                        ir::Op::kGeluTanh, ir::Op::kRelu, ir::Op::kAdd,     ir::Op::kMul,
                        ir::Op::kDiv,  ir::Op::kMaximum,  ir::Op::kGeluTanhGrad, ir::Op::kReluGrad};
  for (ir::Op op : ops) {
    const std::string name = std::string("k_") + ir::op_name(op);
    const std::vector<char> cubin = cuda::compile_cubin(cuda::elementwise_kernel(op, name), name, info.sm_major, info.sm_minor);
    cuda::CUmodule mod = nullptr;
    cuda::check(d.cuModuleLoadData(&mod, cubin.data()), "cuModuleLoadData");
    cuda::CUfunction fn = nullptr;
    cuda::check(d.cuModuleGetFunction(&fn, mod, name.c_str()), "cuModuleGetFunction");
    cuda::CUdeviceptr pa = da.get(), pb = db.get(), po = dout.get();
    long long count = n;
    void* args[] = {&pa, &pb, &po, &count};
    cuda::check(d.cuLaunchKernel(fn, static_cast<unsigned>((n + 255) / 256), 1, 1, 256, 1, 1, 0, nullptr, args, nullptr),
                "cuLaunchKernel");
    cuda::check(d.cuCtxSynchronize(), "cuCtxSynchronize");
    std::vector<float> out(n);
    dout.download(out.data(), n * 4);
    const bool binary = ir::op_info(op).kind == ir::OpKind::kBinary;
    for (size_t i = 0; i < out.size(); ++i) {
      const double want = binary ? backend::ref::binary(op, a[i], b[i]) : backend::ref::unary(op, a[i]);
      ASSERT_NEAR(out[i], want, 2e-6 * std::max(1.0, std::fabs(want))) << ir::op_name(op) << " at " << a[i] << ", " << b[i];
    }
  }
}

}  // namespace
