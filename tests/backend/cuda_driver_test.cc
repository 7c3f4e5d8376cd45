// The CUDA foundation (issue 5, first brick): run-time loading of the driver and NVRTC, device
// discovery, NVRTC compilation with its disk cache, and kernels generated from ops.def checked
// against the reference backend's scalar semantics on the GPU. Without a GPU the GPU tests are
// skipped with a message saying why; the NVRTC tests still run wherever NVRTC is installed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <map>
#include <random>

#include <tensorgrad/tensorgrad.h>

#include "backend/backend.h"
#include "backend/cuda/codegen.h"
#include "ir/api_util.h"
#include "passes/fusion.h"
#include "backend/cuda/driver.h"
#include "ir/scalar.h"
#include "tensorgrad/errors.h"
#include "../test_util.h"
#include "backend/cuda_test_util.h"

namespace {

using namespace tg;
using tg::testing::message_of;
namespace cuda = tg::backend::cuda;

using tg::testing::have_nvrtc;

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
    cuda::compile_cubin("extern \"C\" __global__ void broken() {\n  undefined_name += 1;\n}\n", "broken", 9,
                        0);
  });
  EXPECT_NE(msg.find("could not compile kernel 'broken'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("undefined_name"), std::string::npos) << msg;
  EXPECT_NE(msg.find("   2    undefined_name += 1;"), std::string::npos) << msg;
  unsetenv("TG_CUDA_CACHE");
}

TEST(CudaNvrtc, CubinsAreCachedOnDisk) {
  std::string why;
  if (!have_nvrtc(why)) GTEST_SKIP() << why;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tg_cuda_cache_test_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  setenv("TG_CUDA_CACHE", dir.c_str(), 1);
  const std::string src = cuda::elementwise_kernel(ir::Op::kGeluTanh, "gelu");
  const std::vector<char> first = cuda::compile_cubin(src, "gelu", 9, 0);
  ASSERT_FALSE(first.empty());
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.path().extension() == ".cubin";
  EXPECT_EQ(files, 1u);
  EXPECT_EQ(cuda::compile_cubin(src, "gelu", 9, 0), first);  // served from the cache
  EXPECT_NE(cuda::compile_cubin(src, "gelu", 8, 0), first);  // another architecture: another entry
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
  const ir::Op ops[] = {ir::Op::kExp,      ir::Op::kTanh,    ir::Op::kSigmoid,      ir::Op::kErf,
                        ir::Op::kGeluTanh, ir::Op::kRelu,    ir::Op::kAdd,          ir::Op::kMul,
                        ir::Op::kDiv,      ir::Op::kMaximum, ir::Op::kGeluTanhGrad, ir::Op::kReluGrad};
  for (ir::Op op : ops) {
    const std::string name = std::string("k_") + ir::op_name(op);
    const std::vector<char> cubin =
        cuda::compile_cubin(cuda::elementwise_kernel(op, name), name, info.sm_major, info.sm_minor);
    cuda::CUmodule mod = nullptr;
    cuda::check(d.cuModuleLoadData(&mod, cubin.data()), "cuModuleLoadData");
    cuda::CUfunction fn = nullptr;
    cuda::check(d.cuModuleGetFunction(&fn, mod, name.c_str()), "cuModuleGetFunction");
    cuda::CUdeviceptr pa = da.get(), pb = db.get(), po = dout.get();
    long long count = n;
    void* args[] = {&pa, &pb, &po, &count};
    cuda::check(d.cuLaunchKernel(fn, static_cast<unsigned>((n + 255) / 256), 1, 1, 256, 1, 1, 0, nullptr,
                                 args, nullptr),
                "cuLaunchKernel");
    cuda::check(d.cuCtxSynchronize(), "cuCtxSynchronize");
    std::vector<float> out(n);
    dout.download(out.data(), n * 4);
    const bool binary = ir::op_info(op).kind == ir::OpKind::kBinary;
    for (size_t i = 0; i < out.size(); ++i) {
      const double want = binary ? ir::eval_binary(op, a[i], b[i]) : ir::eval_unary(op, a[i]);
      ASSERT_NEAR(out[i], want, 2e-6 * std::max(1.0, std::fabs(want)))
          << ir::op_name(op) << " at " << a[i] << ", " << b[i];
    }
  }
}

/// Random elementwise graphs (f32 arithmetic and transcendentals, compares, where, an int32
/// chain through casts, scalar constants broadcast), fused, each group generated as one CUDA
/// kernel, run on the GPU in group order and compared with the CPU backend.
struct RandomGraph {
  ir::Trace trace;
  std::vector<int32_t> inputs;
};

void build_random(RandomGraph& r, uint64_t seed) {
  std::mt19937_64 rng(seed);
  ir::TraceScope scope(r.trace);
  std::vector<Tensor> pool;
  for (int i = 0; i < 3; ++i) {
    pool.push_back(ir::named_leaf(r.trace.graph, ir::Op::kInput, "x" + std::to_string(i), {8, 5}, DType::kF32,
                                  Loc::current()));
    r.inputs.push_back(pool.back().id());
  }
  const Tensor ints = cast(pool[0], DType::kI32);  // truncation of exact inputs: identical everywhere
  for (int step = 0; step < 24; ++step) {
    const Tensor& a = pool[rng() % pool.size()];
    const Tensor& b = pool[rng() % pool.size()];
    switch (rng() % 8) {
      case 0: pool.push_back(a * 0.5 + b); break;
      case 1: pool.push_back(tanh(a) - exp(b * 0.1)); break;
      case 2: pool.push_back(where(a > b, a, sigmoid(b))); break;
      case 3: pool.push_back(maximum(a, b) / (abs(b) + 1.0)); break;
      case 4: pool.push_back(gelu(a, GeluApprox::kTanh) * relu(b)); break;
      case 5: pool.push_back(cast(ints * 3 - 7, DType::kF32) + a); break;
      case 6: pool.push_back(cast(logical_and(a > 0.0, b < 0.5), DType::kF32) + a); break;
      default: pool.push_back(erf(a) + neg(b)); break;
    }
  }
  r.trace.graph.outputs = {pool.back().id(), pool[pool.size() / 2].id(), pool[pool.size() - 5].id()};
}

TEST(CudaKernels, FusedGroupsMatchTheCpuBackend) {
  const std::string why = cuda::unavailable_reason(0);
  if (!why.empty()) GTEST_SKIP() << "no usable GPU, GPU tests skipped: " << why;
  const cuda::DeviceInfo info = cuda::open_device(0);
  const cuda::Driver& d = cuda::driver();
  for (uint64_t seed = 0; seed < 12; ++seed) {
    RandomGraph r;
    build_random(r, seed);
    const ir::Graph& g = r.trace.graph;
    std::mt19937 rng(static_cast<unsigned>(seed));
    std::vector<std::vector<float>> feeds(r.inputs.size(), std::vector<float>(40));
    for (auto& f : feeds)
      for (float& v : f) v = std::uniform_real_distribution<float>(-3.f, 3.f)(rng);

    // The CPU backend's answer.
    auto cpu = backend::make_cpu_backend();
    auto exe = cpu->prepare(g, {});
    for (size_t i = 0; i < r.inputs.size(); ++i) exe->set_input(r.inputs[i], feeds[i].data());
    exe->execute();

    // The GPU's: leaves and broadcasts become buffers with strides, each group one kernel.
    const passes::Fusion f = passes::fuse(g);
    std::map<int32_t, cuda::DeviceMemory> mem;
    tg::testing::DevicePlaces place;  // node → (buffer node, strides)
    auto dense_strides = [](const Shape& s) { return contiguous_strides(s); };
    for (size_t gi = 0; gi < f.groups.size(); ++gi) {
      const passes::KernelGroup& group = f.groups[gi];
      if (group.kind == passes::KernelGroup::Kind::kSingle) {
        const int32_t id = group.nodes.front();
        const size_t which =
            static_cast<size_t>(std::find(r.inputs.begin(), r.inputs.end(), id) - r.inputs.begin());
        const std::string missing = tg::testing::place_leaf(
            g, id, which < feeds.size() ? feeds[which] : std::vector<float>{}, mem, place);
        ASSERT_TRUE(missing.empty()) << "unexpected single node " << missing;
        continue;
      }
      std::vector<std::vector<int64_t>> strides;
      for (int32_t in : cuda::group_inputs(g, group)) strides.push_back(place.at(in).second);
      const std::string name = "group" + std::to_string(gi);
      const cuda::GroupKernel k = cuda::fused_group_kernel(g, group, strides, name);
      const std::vector<char> cubin = cuda::compile_cubin(k.source, name, info.sm_major, info.sm_minor);
      cuda::CUmodule mod = nullptr;
      cuda::check(d.cuModuleLoadData(&mod, cubin.data()), "cuModuleLoadData");
      cuda::CUfunction fn = nullptr;
      cuda::check(d.cuModuleGetFunction(&fn, mod, name.c_str()), "cuModuleGetFunction");
      std::vector<cuda::CUdeviceptr> ptrs;
      for (int32_t in : k.inputs) ptrs.push_back(mem.at(place.at(in).first).get());
      for (int32_t out : group.outputs) {
        const ir::Node& n = g.node(out);
        ptrs.push_back(
            mem.emplace(out, cuda::DeviceMemory(static_cast<size_t>(n.numel() * dtype_size(n.dtype))))
                .first->second.get());
        place[out] = {out, dense_strides(n.shape)};
      }
      long long count = g.node(group.nodes.front()).numel();
      std::vector<void*> args;
      for (cuda::CUdeviceptr& p : ptrs) args.push_back(&p);
      args.push_back(&count);
      cuda::check(d.cuLaunchKernel(fn, static_cast<unsigned>((count + 127) / 128), 1, 1, 128, 1, 1, 0,
                                   nullptr, args.data(), nullptr),
                  "cuLaunchKernel");
    }
    cuda::check(d.cuCtxSynchronize(), "cuCtxSynchronize");
    for (int32_t out : g.outputs) {
      std::vector<float> want(40), got(40);
      exe->read_output(out, want.data());
      mem.at(place.at(out).first).download(got.data(), 160);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5f * std::max(1.f, std::fabs(want[i])))
            << "seed " << seed << " output %" << out << "[" << i << "]";
    }
  }
}

TEST(CudaNvrtc, ParallelCompilationGivesTheSameCubinsInOrder) {
  std::string why;
  if (!have_nvrtc(why)) GTEST_SKIP() << why;
  setenv("TG_CUDA_CACHE", "off", 1);
  std::vector<cuda::KernelSource> kernels;
  for (ir::Op op : {ir::Op::kExp, ir::Op::kTanh, ir::Op::kAdd, ir::Op::kGeluTanh, ir::Op::kMul, ir::Op::kErf})
    kernels.push_back({std::string("k_") + ir::op_name(op),
                       cuda::elementwise_kernel(op, std::string("k_") + ir::op_name(op))});
  const std::vector<std::vector<char>> parallel = cuda::compile_cubins(kernels, 9, 0);
  ASSERT_EQ(parallel.size(), kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i)
    EXPECT_EQ(parallel[i], cuda::compile_cubin(kernels[i].source, kernels[i].name, 9, 0)) << kernels[i].name;
  kernels.push_back({"bad", "this is not CUDA"});
  EXPECT_THROW(cuda::compile_cubins(kernels, 9, 0), DeviceError);
  unsetenv("TG_CUDA_CACHE");
}

TEST(CudaNvrtc, GeneratedGroupKernelsCompile) {
  std::string why;
  if (!have_nvrtc(why)) GTEST_SKIP() << why;
  setenv("TG_CUDA_CACHE", "off", 1);
  for (uint64_t seed = 0; seed < 4; ++seed) {
    RandomGraph r;
    build_random(r, seed);
    const passes::Fusion f = passes::fuse(r.trace.graph);
    for (size_t gi = 0; gi < f.groups.size(); ++gi) {
      if (f.groups[gi].kind != passes::KernelGroup::Kind::kElementwise) continue;
      std::vector<std::vector<int64_t>> strides;
      for (int32_t in : cuda::group_inputs(r.trace.graph, f.groups[gi])) {
        (void)in;
        strides.push_back({5, 1});
      }
      const cuda::GroupKernel k = cuda::fused_group_kernel(r.trace.graph, f.groups[gi], strides, "g");
      EXPECT_FALSE(cuda::compile_cubin(k.source, "g", 9, 0).empty());
    }
  }
  unsetenv("TG_CUDA_CACHE");
}

}  // namespace
