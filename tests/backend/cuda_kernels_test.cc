// The CUDA kernel templates of backend/cuda/kernels.h (reductions, gather / scatter_add,
// randomness, softmax, cross entropy, norms): every generator's source compiles through NVRTC
// for sm_90 (runs wherever NVRTC is installed), and on a GPU every kernel is launched on
// random data and compared with host loops in double that follow the reference backend's
// rules (backend/ref). Without a GPU the GPU tests are skipped with a message saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ir/strides.h"
#include "backend/cuda/codegen.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda_test_util.h"
#include "backend/philox.h"
#include "tensorgrad/errors.h"

namespace {

using namespace tg;
namespace cuda = tg::backend::cuda;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

cuda::Operand dense_operand(DType t, const Shape& s) { return {t, s, contiguous_strides(s)}; }

/// Number of elements a strided operand spans (its buffer size).
int64_t span(const cuda::Operand& op) {
  int64_t last = 0;
  for (size_t i = 0; i < op.shape.size(); ++i) {
    if (op.shape[i] == 0) return 0;
    last += (op.shape[i] - 1) * op.strides[i];
  }
  return last + 1;
}

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t i = shape.size(); i-- > 0;) {
    idx[i] = flat % shape[i];
    flat /= shape[i];
  }
  return idx;
}

int64_t offset_of(const std::vector<int64_t>& idx, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (size_t i = 0; i < idx.size(); ++i) off += idx[i] * strides[i];
  return off;
}

// ---- GPU plumbing -------------------------------------------------------------------------

template <class T>
cuda::DeviceMemory to_device(const std::vector<T>& v, size_t extra_bytes = 0) {
  cuda::DeviceMemory m(std::max<size_t>(v.size() * sizeof(T) + extra_bytes, 16));
  if (!v.empty()) m.upload(v.data(), v.size() * sizeof(T));
  return m;
}

template <class T>
std::vector<T> from_device(const cuda::DeviceMemory& m, size_t n) {
  std::vector<T> v(n);
  if (n > 0) m.download(v.data(), n * sizeof(T));
  return v;
}

/// Compiles `l` for device 0 and runs it once on `ptrs` (the kernel's params, in order).
void run(const cuda::Launch& l, std::vector<cuda::CUdeviceptr> ptrs) {
  const cuda::DeviceInfo info = cuda::open_device(0);
  const cuda::Kernel k(cuda::compile_cubin(l.source, l.name, info.sm_major, info.sm_minor), l.name,
                       l.shared_bytes);
  std::vector<void*> args;
  for (cuda::CUdeviceptr& p : ptrs) args.push_back(&p);
  k.launch(l.grid, l.block, l.shared_bytes, nullptr, args.data());
  cuda::check(cuda::driver().cuCtxSynchronize(), "cuCtxSynchronize");
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -3.f, float hi = 3.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<int> random_ints(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int> v(n);
  for (int& x : v) x = d(rng);
  return v;
}

// ---- NVRTC: every generator's source compiles -------------------------------------------

std::vector<cuda::Launch> sample_launches() {
  std::vector<cuda::Launch> ls;
  int n = 0;
  auto name = [&n] { return "k" + std::to_string(n++); };
  for (const char* op : {"sum", "max", "min", "argmax"}) {
    for (DType t : {DType::kF32, DType::kI32}) {
      ls.push_back(
          cuda::reduce_kernel(name(), op, dense_operand(t, {37, 1000}), {1}, tg::testing::sm90_device()));
      ls.push_back(
          cuda::reduce_kernel(name(), op, dense_operand(t, {4, 50304}), {1}, tg::testing::sm90_device()));
      ls.push_back(
          cuda::reduce_kernel(name(), op, dense_operand(t, {3000, 64}), {0}, tg::testing::sm90_device()));
      ls.push_back(
          cuda::reduce_kernel(name(), op, dense_operand(t, {6, 513, 7}), {1}, tg::testing::sm90_device()));
      if (std::string(op) != "argmax") {
        ls.push_back(
            cuda::reduce_kernel(name(), op, dense_operand(t, {5, 6, 7}), {0, 2}, tg::testing::sm90_device()));
        ls.push_back(cuda::reduce_kernel(name(), op, dense_operand(t, {1}), {0}, tg::testing::sm90_device()));
      }
    }
  }
  ls.push_back(
      cuda::reduce_kernel(name(), "sum", {DType::kF32, {48, 64}, {1, 48}}, {1}, tg::testing::sm90_device()));
  ls.push_back(
      cuda::gather_kernel(name(), dense_operand(DType::kF32, {50, 64}), {DType::kI32, {200, 64}, {1, 0}}, 0));
  ls.push_back(cuda::gather_kernel(name(), dense_operand(DType::kI32, {7, 9, 5}),
                                   dense_operand(DType::kI32, {7, 4, 5}), 1));
  ls.push_back(cuda::update_slice_kernel(name(), dense_operand(DType::kF32, {4, 12, 1024, 64}),
                                         dense_operand(DType::kF32, {4, 12, 1, 64}),
                                         dense_operand(DType::kI32, {4}), 2));
  ls.push_back(cuda::update_slice_kernel(name(), dense_operand(DType::kI32, {5, 3}),
                                         dense_operand(DType::kI32, {2, 3}), dense_operand(DType::kI32, {}),
                                         0));
  ls.push_back(cuda::update_rows_kernel(name(), dense_operand(DType::kF32, {4, 12, 1024, 64}),
                                        dense_operand(DType::kF32, {4, 12, 1, 64}),
                                        dense_operand(DType::kI32, {4}), 2));
  ls.push_back(cuda::update_rows_kernel(name(), dense_operand(DType::kI32, {5, 3}),
                                        dense_operand(DType::kI32, {2, 3}), dense_operand(DType::kI32, {}),
                                        0));
  const cuda::Operand qkv_rows{DType::kF32, {4, 12, 1, 64}, {2304, 64, 2304, 1}},
      rotated_rows = dense_operand(DType::kF32, {4, 12, 1, 64});
  ls.push_back(cuda::update_rows_kernel(name(), dense_operand(DType::kF32, {4, 12, 1024, 64}), qkv_rows,
                                        dense_operand(DType::kI32, {4}), 2, &qkv_rows));
  ls.push_back(cuda::update_rows_kernel(name(), dense_operand(DType::kF32, {4, 12, 1024, 64}), rotated_rows,
                                        dense_operand(DType::kI32, {4}), 2, &qkv_rows));
  ls.push_back(cuda::scatter_add_kernel(name(), dense_operand(DType::kF32, {300, 32}),
                                        {DType::kI32, {300, 32}, {1, 0}}, {50, 32}, 0));
  ls.push_back(cuda::scatter_add_kernel(name(), dense_operand(DType::kI32, {4000, 5}),
                                        dense_operand(DType::kI32, {4000, 5}), {4000, 9}, 1));
  ls.push_back(cuda::random_kernel(name(), 1001, 0x123456789abcdefull));
  // The layout kernels in 32-bit and (offsets past 2^31) 64-bit index arithmetic.
  ls.push_back(cuda::unslice_kernel(name(), {DType::kF32, {5, 3}, {0, 0}}, {5, 9}, 1, 2, 3));
  ls.push_back(cuda::unslice_kernel(name(), dense_operand(DType::kI32, {4, 3}), {6, 3}, 0, 0, 1));
  ls.push_back(
      cuda::unslice_kernel(name(), dense_operand(DType::kF32, {70000, 20000}), {70000, 40000}, 1, 1, 2));
  ls.push_back(cuda::concat_kernel(
      name(), {dense_operand(DType::kF32, {3, 4}), {DType::kF32, {3, 2}, {1, 3}}}, {3, 6}, 1));
  ls.push_back(cuda::concat_kernel(
      name(), {dense_operand(DType::kF32, {70000, 20000}), dense_operand(DType::kF32, {70000, 20000})},
      {140000, 20000}, 0));
  ls.push_back(cuda::copy_kernel(name(), {DType::kF32, {30, 20}, {1, 30}}));
  ls.push_back(cuda::copy_kernel(name(), {DType::kF32, {70000, 40000}, {1, 70000}}));
  ls.push_back(cuda::product_kernel(name(), {8, 9}, {9, 1}, {0, 1}));
  ls.push_back(cuda::sample_kernel(name(), 4, 50257));
  for (const cuda::ScanShape& sh :
       {cuda::ScanShape{8, 1536, 1024, 1, 16, true}, cuda::ScanShape{1, 6, 5, 3, 2},
        cuda::ScanShape{2, 96, 70, 1, 32, true}, cuda::ScanShape{3, 5, 33, 1, 3},
        cuda::ScanShape{1, 64, 40, 2, 64, true}, cuda::ScanShape{2, 64, 1024, 1, 16, true, true},
        cuda::ScanShape{1, 8, 20, 1, 128}}) {
    for (const bool keep : {false, true}) ls.push_back(cuda::scan_forward_kernel(name(), sh, keep));
    ls.push_back(cuda::scan_backward_kernel(name(), sh));
    ls.push_back(cuda::scan_reduce_kernel(name(), sh));
  }
  // The backward's other cotangent forms: dy one value or absent, the last state's absent.
  for (const auto dy : {cuda::ScanShape::Dy::kOne, cuda::ScanShape::Dy::kZero}) {
    cuda::ScanShape sh{8, 1536, 1024, 1, 16, true, true};
    sh.dy = dy;
    sh.dlast = dy == cuda::ScanShape::Dy::kZero;
    ls.push_back(cuda::scan_backward_kernel(name(), sh));
  }
  ls.push_back(cuda::attention_at_kernel(
      name(), {DType::kF32, {2, 12, 1, 64}, {2304, 64, 2304, 1}}, dense_operand(DType::kF32, {2, 4, 272, 64}),
      dense_operand(DType::kF32, {2, 4, 272, 64}), dense_operand(DType::kI32, {2}), 0.125));
  ls.push_back(cuda::attention_at_kernel(
      name(), dense_operand(DType::kF32, {1, 2, 5, 200}), dense_operand(DType::kF32, {1, 2, 9, 200}),
      dense_operand(DType::kF32, {1, 2, 9, 200}), dense_operand(DType::kI32, {1}), 0.07));
  ls.push_back(cuda::dropout_kernel(name(), dense_operand(DType::kF32, {1003}), 0.3, 7));
  ls.push_back(cuda::dropout_kernel(name(), {DType::kF32, {20, 30}, {1, 20}}, 0.5, 7));
  for (bool log : {false, true}) {
    ls.push_back(cuda::softmax_kernel(name(), 37, 1000, 1, log, false, 1));
    ls.push_back(cuda::softmax_kernel(name(), 37, 1001, 1, log, false, 1));
    ls.push_back(cuda::softmax_kernel(name(), 5, 3000, 1, log, false, 1));
    ls.push_back(cuda::softmax_kernel(name(), 3, 40000, 1, log, false, 1));
    ls.push_back(cuda::softmax_kernel(name(), 32, 24, 1, log, true, 16));
    ls.push_back(cuda::softmax_kernel(name(), 3, 50, 7, log, false, 1));
  }
  for (int64_t cols : {100, 50257, 50304}) {
    ls.push_back(cuda::cross_entropy_kernel(name(), 9, cols, -100));
    ls.push_back(cuda::cross_entropy_grad_kernel(name(), 9, cols, -100));
  }
  for (int64_t cols : {64, 768, 1001, 3072, 40000}) {
    ls.push_back(cuda::layer_norm_kernel(name(), 13, cols, 1e-5));
    ls.push_back(cuda::layer_norm_grad_kernel(name(), 13, cols, 1e-5));
    ls.push_back(cuda::rms_norm_kernel(name(), 13, cols, 1e-6));
    ls.push_back(cuda::rms_norm_grad_kernel(name(), 13, cols, 1e-6));
  }
  return ls;
}

TEST(CudaScanLayout, SplitsTheWorkAndRefusesWhatItCannotHold) {
  // b 8, d 1536, l 1024, n 16: 8 lanes per channel (two states each, two channels a thread),
  // 32 channels per 128-thread block, 128 chunks of 8 steps; dB/dC partials are one per block.
  const cuda::ScanLayout lay = cuda::scan_layout({8, 1536, 1024, 1, 16});
  EXPECT_EQ(lay.lanes, 8);
  EXPECT_EQ(lay.channels_per_block, 32);
  EXPECT_EQ(lay.blocks, 1536 / 32);
  EXPECT_EQ(lay.chunks, 128);
  EXPECT_EQ(lay.state_floats, 8 * 1536 * 128 * 16);
  EXPECT_EQ(lay.dbc_floats, (1536 / 32) * 8 * 2 * 16 * 1024);
  // Groups of 2 channels: a block never straddles a group.
  const cuda::ScanLayout grouped = cuda::scan_layout({1, 6, 5, 3, 2});
  EXPECT_EQ(grouped.lanes, 1);
  EXPECT_EQ(grouped.channels_per_block, 2);
  EXPECT_EQ(grouped.chunks, 1);
  EXPECT_EQ(cuda::scan_layout({1, 64, 40, 1, 128}).lanes, 32);
  try {
    cuda::scan_layout({1, 4, 8, 1, 129});
    FAIL() << "129 states fit no warp";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("d_state up to 128, got 129"), std::string::npos) << e.what();
  }
}

TEST(CudaKernelsNvrtc, EveryGeneratorCompiles) {
  try {
    cuda::nvrtc();
  } catch (const DeviceError& e) {
    GTEST_SKIP() << "no NVRTC: " << e.what();
  }
  std::vector<cuda::KernelSource> sources;
  for (const cuda::Launch& l : sample_launches()) {
    EXPECT_TRUE(l.source.find("__global__ void " + l.name + "(") != std::string::npos ||
                l.source.find(") " + l.name + "(") != std::string::npos)
        << l.source;
    EXPECT_GE(l.grid[0] * l.grid[1] * l.grid[2], 1u);
    EXPECT_LE(l.block[0] * l.block[1] * l.block[2], 1024u);
    sources.push_back({l.name, l.source});
  }
  const std::vector<std::vector<char>> cubins = cuda::compile_cubins(sources, 9, 0);
  ASSERT_EQ(cubins.size(), sources.size());
  for (size_t i = 0; i < cubins.size(); ++i) EXPECT_FALSE(cubins[i].empty()) << sources[i].name;
}

// ---- reductions ---------------------------------------------------------------------------

/// The reference backend's reduction (ref_backend.cc), over a strided operand in double.
std::vector<double> ref_reduce(const std::string& op, const std::vector<double>& buf, const cuda::Operand& in,
                               const std::vector<int>& axes) {
  Shape kept_shape;
  std::vector<bool> reduced(in.shape.size(), false);
  for (int a : axes) reduced[static_cast<size_t>(a)] = true;
  for (size_t i = 0; i < in.shape.size(); ++i)
    if (!reduced[i]) kept_shape.push_back(in.shape[i]);
  std::vector<double> out(static_cast<size_t>(numel(kept_shape)), op == "sum" ? 0.0 : kNaN),
      best(out.size(), kNaN);
  for (int64_t flat = 0; flat < numel(in.shape); ++flat) {
    const std::vector<int64_t> idx = unravel(flat, in.shape);
    int64_t o = 0;
    for (size_t i = 0; i < idx.size(); ++i)
      if (!reduced[i]) o = o * in.shape[i] + idx[i];
    const double v = buf[static_cast<size_t>(offset_of(idx, in.strides))];
    double& r = out[static_cast<size_t>(o)];
    if (op == "sum")
      r += v;
    else if (op == "max")
      r = std::isnan(r) || v > r ? v : r;
    else if (op == "min")
      r = std::isnan(r) || v < r ? v : r;
    else if (std::isnan(best[static_cast<size_t>(o)]) || v > best[static_cast<size_t>(o)]) {
      best[static_cast<size_t>(o)] = v;
      r = static_cast<double>(idx[static_cast<size_t>(axes[0])]);
    }
  }
  return out;
}

/// Runs reduce_kernel on `buf` (read from element `offset` on) and checks it against ref_reduce.
template <class T>
void check_reduce(const std::string& op, const std::vector<T>& buf, const cuda::Operand& in,
                  const std::vector<int>& axes, size_t offset = 0) {
  SCOPED_TRACE(op + " of " + str(in.shape) + " (" + dtype_name(in.dtype) + ") over " +
               std::to_string(axes.size()) + " axes from axis " + std::to_string(axes[0]) + ", offset " +
               std::to_string(offset));
  std::vector<double> host(buf.size() - offset);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<double>(buf[i + offset]);
  const std::vector<double> want = ref_reduce(op, host, in, axes);
  const cuda::DeviceMemory din = to_device(buf);
  const cuda::DeviceMemory dout(std::max<size_t>(want.size() * 4, 4));
  const cuda::Launch l = cuda::reduce_kernel("reduce", op, in, axes, tg::testing::sm90_device());
  run(l, {din.get() + offset * sizeof(T), dout.get()});
  // Sum tolerance: f32 rounding of a sum of |x| (the inputs are O(1)).
  std::vector<double> scale(want.size(), 0.0);
  if (op == "sum") {
    std::vector<double> absbuf(host.size());
    for (size_t i = 0; i < host.size(); ++i) absbuf[i] = std::fabs(host[i]);
    scale = ref_reduce("sum", absbuf, in, axes);
  }
  if (op == "argmax" || in.dtype == DType::kI32) {
    const std::vector<int> got = from_device<int>(dout, want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], static_cast<int>(want[i])) << "output " << i;
    return;
  }
  const std::vector<float> got = from_device<float>(dout, want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << "output " << i << " = " << got[i];
      continue;
    }
    ASSERT_NEAR(got[i], want[i], 4e-6 * scale[i] + 1e-6 * std::fabs(want[i]) + 1e-30) << "output " << i;
  }
}

struct ReduceCase {
  cuda::Operand in;
  std::vector<int> axes;
};

std::vector<ReduceCase> reduce_cases(DType t) {
  return {
      {dense_operand(t, {37, 1000}), {1}},       // inner, warp per output, 16-byte loads
      {dense_operand(t, {37, 1001}), {1}},       // inner, odd length
      {dense_operand(t, {4, 50304}), {1}},       // inner, few long outputs: chunked blocks
      {dense_operand(t, {1000003}), {0}},        // everything: chunked blocks
      {dense_operand(t, {3000, 64}), {0}},       // outer (bias gradient): column scheme, chunked
      {dense_operand(t, {6, 513, 7}), {1}},      // middle
      {dense_operand(t, {5, 6, 7}), {0, 2}},     // two separate axes
      {dense_operand(t, {2, 3, 4}), {0, 1, 2}},  // all of a small tensor
      {dense_operand(t, {1}), {0}},              // one element
      {dense_operand(t, {9, 1, 4}), {1}},        // an extent-1 axis
      {{t, {48, 64}, {1, 48}}, {1}},             // transposed view
      {{t, {48, 64}, {1, 48}}, {0}},             // transposed view, the other axis
      {{t, {5, 300}, {1, 0}}, {1}},              // broadcast along the reduced axis
      {{t, {300, 5}, {0, 1}}, {1}},              // broadcast along the kept axis
  };
}

TEST(CudaKernels, ReductionsMatchTheReference) {
  REQUIRE_GPU();
  for (const char* op : {"sum", "max", "min", "argmax"}) {
    for (const ReduceCase& c : reduce_cases(DType::kF32)) {
      if (std::string(op) == "argmax" && c.axes.size() != 1) continue;
      const std::vector<float> buf = random_floats(static_cast<size_t>(span(c.in)) + 1, 11);
      check_reduce(op, buf, c.in, c.axes);
    }
    for (ReduceCase c : reduce_cases(DType::kI32)) {
      if (std::string(op) == "argmax" && c.axes.size() != 1) continue;
      const std::vector<int> buf =
          random_ints(static_cast<size_t>(span(c.in)) + 1, 12, -50, 50);  // ties for argmax
      check_reduce(op, buf, c.in, c.axes);
    }
  }
  // A base pointer off the 16-byte grid: the 4-wide loads must step aside.
  const std::vector<float> buf = random_floats(37 * 1000 + 1, 13);
  check_reduce("sum", buf, dense_operand(DType::kF32, {37, 1000}), {1}, 1);
  check_reduce("argmax", buf, dense_operand(DType::kF32, {4, 9000}), {1}, 1);
}

TEST(CudaKernels, BiasGradientAndFullSumsAreDeterministic) {
  REQUIRE_GPU();
  const cuda::Operand in = dense_operand(DType::kF32, {16384, 768});
  const std::vector<float> buf = random_floats(16384 * 768, 21);
  check_reduce("sum", buf, in, {0});
  const cuda::DeviceMemory din = to_device(buf), dout(768 * 4);
  std::vector<float> first;
  for (int rep = 0; rep < 3; ++rep) {
    run(cuda::reduce_kernel("bias", "sum", in, {0}, tg::testing::sm90_device()), {din.get(), dout.get()});
    const std::vector<float> got = from_device<float>(dout, 768);
    if (rep == 0)
      first = got;
    else
      ASSERT_EQ(std::memcmp(got.data(), first.data(), 768 * 4), 0) << "run " << rep << " differs";
  }
  // A full sum (a loss): chunk partials merged by the last block, the same bits every run.
  const cuda::Operand all = dense_operand(DType::kF32, {1 << 22});
  const std::vector<float> big = random_floats(1 << 22, 22);
  check_reduce("sum", big, all, {0});
  const cuda::DeviceMemory dbig = to_device(big), dsum(4);
  float first_sum = 0;
  for (int rep = 0; rep < 3; ++rep) {
    run(cuda::reduce_kernel("total", "sum", all, {0}, tg::testing::sm90_device()), {dbig.get(), dsum.get()});
    const float got = from_device<float>(dsum, 1)[0];
    if (rep == 0)
      first_sum = got;
    else
      ASSERT_EQ(std::memcmp(&got, &first_sum, 4), 0) << "run " << rep << " differs";
  }
}

TEST(CudaKernels, ReductionsHandleNaNAsTheReference) {
  REQUIRE_GPU();
  // Rows: NaN first, NaN in the middle, all NaN (argmax: the last index), ties; short rows
  // (warp per output) and long ones (chunked blocks, the merge across chunks).
  for (int64_t cols : {5, 20000}) {
    const int64_t rows = 6;
    std::vector<float> x = random_floats(static_cast<size_t>(rows * cols), 31);
    auto at = [&](int64_t r, int64_t c) -> float& { return x[static_cast<size_t>(r * cols + c)]; };
    const float nan = std::numeric_limits<float>::quiet_NaN();
    at(0, 0) = nan;
    at(1, cols / 2) = nan;
    for (int64_t c = 0; c < cols; ++c) at(2, c) = nan;
    for (int64_t c = 0; c < cols; c += 2) at(3, c) = nan;
    at(4, 1) = 7.f;
    at(4, cols - 1) = 7.f;                                  // a tie: the first index wins
    for (int64_t c = 0; c + 1 < cols; ++c) at(5, c) = nan;  // one number, last
    std::vector<float> xt(x.size());  // the transpose, reduced over its outer axis: column scheme
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) xt[static_cast<size_t>(c * rows + r)] = at(r, c);
    for (const char* op : {"max", "min", "argmax", "sum"}) {
      check_reduce(op, x, dense_operand(DType::kF32, {rows, cols}), {1});
      check_reduce(op, xt, dense_operand(DType::kF32, {cols, rows}), {0});
    }
  }
}

// ---- gather / scatter_add -------------------------------------------------------------------

template <class T>
std::vector<double> ref_gather(const std::vector<T>& x, const cuda::Operand& xo, const std::vector<int>& idx,
                               const cuda::Operand& io, int axis) {
  std::vector<double> out(static_cast<size_t>(numel(io.shape)));
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<int64_t> c = unravel(static_cast<int64_t>(i), io.shape);
    const int v = idx[static_cast<size_t>(offset_of(c, io.strides))];
    c[static_cast<size_t>(axis)] = v;
    out[i] = static_cast<double>(x[static_cast<size_t>(offset_of(c, xo.strides))]);
  }
  return out;
}

TEST(CudaKernels, GatherMatchesTheReference) {
  REQUIRE_GPU();
  // Embedding lookup: token ids [200] broadcast along the feature axis.
  {
    const cuda::Operand xo = dense_operand(DType::kF32, {50, 64}), io{DType::kI32, {200, 64}, {1, 0}};
    const std::vector<float> x = random_floats(50 * 64, 41);
    const std::vector<int> idx = random_ints(200, 42, 0, 49);
    const std::vector<double> want = ref_gather(x, xo, idx, io, 0);
    const cuda::DeviceMemory dx = to_device(x), di = to_device(idx), dout(want.size() * 4),
                             derr = to_device(std::vector<int>{0});
    run(cuda::gather_kernel("gather", xo, io, 0), {dx.get(), di.get(), dout.get(), derr.get()});
    const std::vector<float> got = from_device<float>(dout, want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(want[i])) << i;
    EXPECT_EQ(from_device<int>(derr, 1)[0], 0);
  }
  // take_along_axis of i32 along a middle axis, x a transposed view; then a bad index.
  {
    const cuda::Operand xo{DType::kI32, {7, 9, 5}, {1, 35, 7}}, io = dense_operand(DType::kI32, {7, 4, 5});
    const std::vector<int> x = random_ints(7 * 9 * 5, 43, -1000, 1000);
    std::vector<int> idx = random_ints(7 * 4 * 5, 44, 0, 8);
    const std::vector<double> want = ref_gather(x, xo, idx, io, 1);
    const cuda::DeviceMemory dx = to_device(x), dout(want.size() * 4), derr = to_device(std::vector<int>{0});
    {
      const cuda::DeviceMemory di = to_device(idx);
      run(cuda::gather_kernel("gather", xo, io, 1), {dx.get(), di.get(), dout.get(), derr.get()});
      const std::vector<int> got = from_device<int>(dout, want.size());
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], static_cast<int>(want[i])) << i;
      EXPECT_EQ(from_device<int>(derr, 1)[0], 0);
    }
    idx[17] = 9;  // out of [0, 9)
    idx[3] = -1;
    const cuda::DeviceMemory di = to_device(idx);
    run(cuda::gather_kernel("gather", xo, io, 1), {dx.get(), di.get(), dout.get(), derr.get()});
    EXPECT_NE(from_device<int>(derr, 1)[0], 0) << "an index out of range must set err";
  }
}

TEST(CudaKernels, UpdateSliceWritesPerRowOffsetsAndFlagsBadOnes) {
  REQUIRE_GPU();
  // A KV cache [2, 3, 6, 4] gets one new row per sequence at that sequence's position.
  const cuda::Operand dst_o = dense_operand(DType::kF32, {2, 3, 6, 4}),
                      src_o = dense_operand(DType::kF32, {2, 3, 1, 4}),
                      pos_o = dense_operand(DType::kI32, {2});
  const std::vector<float> dst = random_floats(2 * 3 * 6 * 4, 51), src = random_floats(2 * 3 * 4, 52);
  const cuda::DeviceMemory dd = to_device(dst), ds = to_device(src), dout(dst.size() * 4);
  for (const std::vector<int>& pos : {std::vector<int>{5, 0}, std::vector<int>{2, 6}}) {
    const bool bad = pos[1] == 6;
    const cuda::DeviceMemory dp = to_device(pos), derr = to_device(std::vector<int>{0});
    run(cuda::update_slice_kernel("update_slice", dst_o, src_o, pos_o, 2),
        {dd.get(), ds.get(), dp.get(), dout.get(), derr.get()});
    EXPECT_EQ(from_device<int>(derr, 1)[0] != 0, bad) << "offsets " << pos[0] << ", " << pos[1];
    if (bad) continue;
    std::vector<float> want = dst;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t d = 0; d < 4; ++d)
          want[static_cast<size_t>(((b * 3 + h) * 6 + pos[static_cast<size_t>(b)]) * 4 + d)] =
              src[static_cast<size_t>((b * 3 + h) * 4 + d)];
    const std::vector<float> got = from_device<float>(dout, want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << i;
  }
}

template <class T>
void check_scatter(const cuda::Operand& so, const cuda::Operand& io, const Shape& out_shape, int axis,
                   uint32_t seed, bool bad_index) {
  SCOPED_TRACE("scatter_add of " + str(so.shape) + " into " + str(out_shape));
  std::vector<T> src(static_cast<size_t>(span(so)));
  if constexpr (std::is_same_v<T, float>)
    src = random_floats(src.size(), seed);
  else
    src = random_ints(src.size(), seed, -100, 100);
  std::vector<int> idx = random_ints(static_cast<size_t>(span(io)), seed + 1, 0,
                                     static_cast<int>(out_shape[static_cast<size_t>(axis)]) - 1);
  if (bad_index) idx[idx.size() / 2] = static_cast<int>(out_shape[static_cast<size_t>(axis)]);
  std::vector<double> want(static_cast<size_t>(numel(out_shape)), 0.0), mag(want.size(), 0.0);
  const std::vector<int64_t> ost = contiguous_strides(out_shape);
  for (int64_t i = 0; i < numel(so.shape); ++i) {
    std::vector<int64_t> c = unravel(i, so.shape);
    const T v = src[static_cast<size_t>(offset_of(c, so.strides))];
    const int where = idx[static_cast<size_t>(offset_of(c, io.strides))];
    if (where < 0 || where >= out_shape[static_cast<size_t>(axis)]) continue;
    c[static_cast<size_t>(axis)] = where;
    want[static_cast<size_t>(offset_of(c, ost))] += static_cast<double>(v);
    mag[static_cast<size_t>(offset_of(c, ost))] += std::fabs(static_cast<double>(v));
  }
  const cuda::DeviceMemory ds = to_device(src), di = to_device(idx), derr = to_device(std::vector<int>{0});
  const cuda::DeviceMemory dout = to_device(std::vector<T>(want.size(), T(0)));
  run(cuda::scatter_add_kernel("scatter", so, io, out_shape, axis),
      {ds.get(), di.get(), dout.get(), derr.get()});
  EXPECT_EQ(from_device<int>(derr, 1)[0] != 0, bad_index);
  if (bad_index) return;
  const std::vector<T> got = from_device<T>(dout, want.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(static_cast<double>(got[i]), want[i], 1e-6 * mag[i]) << i;
}

TEST(CudaKernels, ScatterAddMatchesTheReference) {
  REQUIRE_GPU();
  // Embedding backward (atomic scheme): [300, 32] rows into a [50, 32] table by broadcast ids.
  check_scatter<float>(dense_operand(DType::kF32, {300, 32}), {DType::kI32, {300, 32}, {1, 0}}, {50, 32}, 0,
                       51, false);
  check_scatter<int>(dense_operand(DType::kI32, {300, 32}), {DType::kI32, {300, 32}, {1, 0}}, {50, 32}, 0, 52,
                     false);
  // Along the last axis (column scheme), src a transposed view.
  check_scatter<float>({DType::kF32, {4000, 5}, {1, 4000}}, dense_operand(DType::kI32, {4000, 5}), {4000, 9},
                       1, 53, false);
  check_scatter<int>(dense_operand(DType::kI32, {3, 4, 5}), dense_operand(DType::kI32, {3, 4, 5}), {3, 2, 5},
                     1, 54, false);
  // Bad indices set err in both schemes.
  check_scatter<float>(dense_operand(DType::kF32, {300, 32}), {DType::kI32, {300, 32}, {1, 0}}, {50, 32}, 0,
                       55, true);
  check_scatter<float>(dense_operand(DType::kF32, {4000, 5}), dense_operand(DType::kI32, {4000, 5}),
                       {4000, 9}, 1, 56, true);
}

// ---- randomness -----------------------------------------------------------------------------

TEST(CudaKernels, RandomIsBitIdenticalToPhilox) {
  REQUIRE_GPU();
  for (const auto& [n, seed, key] : std::vector<std::tuple<int64_t, uint64_t, int>>{
           {1, 0, 0}, {1001, 0x123456789abcdefull, 3}, {4099, 42, -5}, {1 << 20, 7, 123456}}) {
    const cuda::DeviceMemory dkey = to_device(std::vector<int>{key}), dout(static_cast<size_t>(n) * 4);
    run(cuda::random_kernel("rnd", n, seed), {dkey.get(), dout.get()});
    const std::vector<float> got = from_device<float>(dout, static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const float want = backend::philox_uniform(seed, static_cast<uint32_t>(key), static_cast<uint64_t>(i));
      ASSERT_EQ(std::memcmp(&got[static_cast<size_t>(i)], &want, 4), 0) << "element " << i << " of " << n;
    }
  }
}

TEST(CudaKernels, DropoutMatchesTheReference) {
  REQUIRE_GPU();
  for (const auto& [x_op, p] :
       std::vector<std::pair<cuda::Operand, double>>{{dense_operand(DType::kF32, {1003}), 0.3},
                                                     {dense_operand(DType::kF32, {64, 128}), 0.1},
                                                     {{DType::kF32, {20, 30}, {1, 20}}, 0.5},
                                                     {dense_operand(DType::kF32, {17}), 0.0}}) {
    const uint64_t seed = 99;
    const int key = 17;
    const int64_t n = numel(x_op.shape);
    const std::vector<float> x = random_floats(static_cast<size_t>(span(x_op)), 61);
    const cuda::DeviceMemory dx = to_device(x), dkey = to_device(std::vector<int>{key}),
                             dout(static_cast<size_t>(n) * 4);
    run(cuda::dropout_kernel("drop", x_op, p, seed), {dx.get(), dkey.get(), dout.get()});
    const std::vector<float> got = from_device<float>(dout, static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const double u = backend::philox_uniform(seed, key, static_cast<uint64_t>(i));
      const double v = x[static_cast<size_t>(offset_of(unravel(i, x_op.shape), x_op.strides))];
      const double want = u >= p ? v / (1.0 - p) : 0.0;
      ASSERT_NEAR(got[static_cast<size_t>(i)], want, 1e-6 * std::fabs(want))
          << "element " << i << ", p " << p;
      ASSERT_EQ(got[static_cast<size_t>(i)] == 0.0f, want == 0.0) << "element " << i;
    }
  }
}

// ---- softmax ------------------------------------------------------------------------------

/// ref_nn.cc's softmax over the middle axis of [outer, axis, inner]; causal as kernels.h says.
std::vector<double> ref_softmax(const std::vector<float>& x, int64_t outer, int64_t axis, int64_t inner,
                                bool log, bool causal, int64_t t) {
  std::vector<double> out(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * axis * inner + i;
      const int64_t visible = causal ? std::clamp<int64_t>(o % t + (axis - t) + 1, 0, axis) : axis;
      double mx = -INFINITY, total = 0;
      for (int64_t j = 0; j < visible; ++j)
        mx = std::max(mx, static_cast<double>(x[static_cast<size_t>(base + j * inner)]));
      for (int64_t j = 0; j < visible; ++j) total += std::exp(x[static_cast<size_t>(base + j * inner)] - mx);
      for (int64_t j = 0; j < axis; ++j) {
        const double v = x[static_cast<size_t>(base + j * inner)] - mx;
        out[static_cast<size_t>(base + j * inner)] =
            j >= visible ? (log ? -INFINITY : 0.0) : (log ? v - std::log(total) : std::exp(v) / total);
      }
    }
  return out;
}

TEST(CudaKernels, SoftmaxMatchesTheReference) {
  REQUIRE_GPU();
  struct Case {
    int64_t outer, axis, inner;
    bool causal;
    int64_t t;
  };
  const Case cases[] = {
      {37, 1000, 1, false, 1},  // warp rows, 16-byte loads
      {37, 1001, 1, false, 1},  // warp rows, odd length
      {5, 3000, 1, false, 1},   // block rows
      {3, 40000, 1, false, 1},  // streamed rows
      {3, 40001, 1, false, 1},  // streamed rows at every alignment
      {1, 1, 1, false, 1},      // one element
      {3, 50, 7, false, 1},     // a middle axis
      {2, 3000, 33, false, 1},  // a middle axis, several warps of columns
      {32, 16, 1, true, 16},    // causal, square
      {30, 24, 1, true, 10},    // causal, S > T
      {4, 2000, 1, true, 2},    // causal block rows
  };
  for (const Case& c : cases) {
    for (bool log : {false, true}) {
      SCOPED_TRACE("softmax [" + std::to_string(c.outer) + ", " + std::to_string(c.axis) + ", " +
                   std::to_string(c.inner) + "] log " + std::to_string(log) + " causal " +
                   std::to_string(c.causal));
      const size_t n = static_cast<size_t>(c.outer * c.axis * c.inner);
      const std::vector<float> x = random_floats(n, 71, -6.f, 6.f);
      const std::vector<double> want = ref_softmax(x, c.outer, c.axis, c.inner, log, c.causal, c.t);
      const cuda::DeviceMemory dx = to_device(x), dout(n * 4);
      run(cuda::softmax_kernel("softmax", c.outer, c.axis, c.inner, log, c.causal, c.t),
          {dx.get(), dout.get()});
      const std::vector<float> got = from_device<float>(dout, n);
      for (size_t i = 0; i < n; ++i) {
        if (std::isinf(want[i])) {
          ASSERT_TRUE(std::isinf(got[i]) && got[i] < 0) << i << ": " << got[i];
          continue;
        }
        ASSERT_NEAR(got[i], want[i], 2e-6 * std::max(1.0, std::fabs(want[i])) + 1e-7) << "element " << i;
      }
    }
  }
}

// ---- cross entropy ------------------------------------------------------------------------

TEST(CudaKernels, CrossEntropyAndItsGradientMatchTheReference) {
  REQUIRE_GPU();
  for (int64_t cols : {100, 50257, 50304}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const int64_t rows = 9, ignore = -100;
    const std::vector<float> x = random_floats(static_cast<size_t>(rows * cols), 81, -8.f, 8.f);
    std::vector<int> t = random_ints(static_cast<size_t>(rows), 82, 0, static_cast<int>(cols) - 1);
    t[2] = ignore;
    t[5] = static_cast<int>(cols) - 1;
    t[6] = 0;
    const std::vector<float> dloss = random_floats(static_cast<size_t>(rows), 83);
    std::vector<double> loss(static_cast<size_t>(rows), 0.0), grad(x.size(), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      if (t[static_cast<size_t>(r)] == ignore) continue;
      const float* row = &x[static_cast<size_t>(r * cols)];
      double mx = -INFINITY, total = 0;
      for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, static_cast<double>(row[c]));
      for (int64_t c = 0; c < cols; ++c) total += std::exp(row[c] - mx);
      const double lse = mx + std::log(total);
      loss[static_cast<size_t>(r)] = lse - row[t[static_cast<size_t>(r)]];
      for (int64_t c = 0; c < cols; ++c)
        grad[static_cast<size_t>(r * cols + c)] =
            (std::exp(row[c] - lse) - (c == t[static_cast<size_t>(r)])) * dloss[static_cast<size_t>(r)];
    }
    const cuda::DeviceMemory dx = to_device(x), dt = to_device(t), ddl = to_device(dloss),
                             derr = to_device(std::vector<int>{0});
    const cuda::DeviceMemory dloss_out(static_cast<size_t>(rows) * 4), dgrad(x.size() * 4);
    run(cuda::cross_entropy_kernel("ce", rows, cols, ignore),
        {dx.get(), dt.get(), dloss_out.get(), derr.get()});
    run(cuda::cross_entropy_grad_kernel("ce_grad", rows, cols, ignore),
        {dx.get(), dt.get(), ddl.get(), dgrad.get(), derr.get()});
    EXPECT_EQ(from_device<int>(derr, 1)[0], 0);
    const std::vector<float> got_loss = from_device<float>(dloss_out, static_cast<size_t>(rows));
    for (size_t r = 0; r < loss.size(); ++r)
      ASSERT_NEAR(got_loss[r], loss[r], 2e-5 * std::max(1.0, std::fabs(loss[r]))) << "row " << r;
    const std::vector<float> got_grad = from_device<float>(dgrad, x.size());
    for (size_t i = 0; i < grad.size(); ++i)
      ASSERT_NEAR(got_grad[i], grad[i], 1e-6 * std::max(1.0, std::fabs(grad[i]))) << i;

    // A target out of range: err is set.
    t[4] = static_cast<int>(cols);
    const cuda::DeviceMemory dbad = to_device(t);
    run(cuda::cross_entropy_kernel("ce", rows, cols, ignore),
        {dx.get(), dbad.get(), dloss_out.get(), derr.get()});
    EXPECT_NE(from_device<int>(derr, 1)[0], 0);
    const cuda::DeviceMemory derr2 = to_device(std::vector<int>{0});
    run(cuda::cross_entropy_grad_kernel("ce_grad", rows, cols, ignore),
        {dx.get(), dbad.get(), ddl.get(), dgrad.get(), derr2.get()});
    EXPECT_NE(from_device<int>(derr2, 1)[0], 0);
  }
}

// ---- norms --------------------------------------------------------------------------------

/// ref_nn.cc's norm(): forward or, with dy, the gradient, per row in double.
std::vector<double> ref_norm(const std::vector<float>& x, const std::vector<float>* dy, int64_t rows,
                             int64_t d, double eps, bool layer) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = &x[static_cast<size_t>(r * d)];
    double mean = 0, sq = 0;
    for (int64_t i = 0; i < d; ++i) mean += xr[i] / static_cast<double>(d);
    if (!layer) mean = 0;
    for (int64_t i = 0; i < d; ++i) sq += (xr[i] - mean) * (xr[i] - mean) / static_cast<double>(d);
    const double rstd = 1.0 / std::sqrt(sq + eps);
    double* o = &out[static_cast<size_t>(r * d)];
    if (dy == nullptr) {
      for (int64_t i = 0; i < d; ++i) o[i] = (xr[i] - mean) * rstd;
      continue;
    }
    const float* g = &(*dy)[static_cast<size_t>(r * d)];
    double mg = 0, mgx = 0;
    for (int64_t i = 0; i < d; ++i) {
      mg += g[i] / static_cast<double>(d);
      mgx += g[i] * (xr[i] - mean) * rstd / static_cast<double>(d);
    }
    for (int64_t i = 0; i < d; ++i) o[i] = rstd * (g[i] - (layer ? mg : 0.0) - (xr[i] - mean) * rstd * mgx);
  }
  return out;
}

TEST(CudaKernels, NormsAndTheirGradientsMatchTheReference) {
  REQUIRE_GPU();
  const int64_t rows = 13;
  for (int64_t cols : {1, 64, 768, 1001, 3072, 3071, 40000}) {
    const size_t n = static_cast<size_t>(rows * cols);
    const std::vector<float> x = random_floats(n, 91, -2.f, 4.f), dy = random_floats(n, 92);
    const cuda::DeviceMemory dx = to_device(x), ddy = to_device(dy), dout(n * 4);
    for (bool layer : {true, false}) {
      for (bool grad : {false, true}) {
        SCOPED_TRACE(std::string(layer ? "layer" : "rms") + "_norm" + (grad ? "_grad" : "") + " cols " +
                     std::to_string(cols));
        const double eps = layer ? 1e-5 : 1e-6;
        const std::vector<double> want = ref_norm(x, grad ? &dy : nullptr, rows, cols, eps, layer);
        // (Not "norm": that is a CUDA math function, and an extern "C" kernel may not reuse it.)
        const cuda::Launch l = layer ? (grad ? cuda::layer_norm_grad_kernel("tg_norm", rows, cols, eps)
                                             : cuda::layer_norm_kernel("tg_norm", rows, cols, eps))
                                     : (grad ? cuda::rms_norm_grad_kernel("tg_norm", rows, cols, eps)
                                             : cuda::rms_norm_kernel("tg_norm", rows, cols, eps));
        if (grad)
          run(l, {dx.get(), ddy.get(), dout.get()});
        else
          run(l, {dx.get(), dout.get()});
        const std::vector<float> got = from_device<float>(dout, n);
        // A layer norm of one column is 0/sqrt(eps): exact. Otherwise f32 statistics.
        const double tol = grad ? 2e-4 : 2e-5;
        for (size_t i = 0; i < n; ++i)
          ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << "element " << i;
      }
    }
  }
}

// ---- throughput (run by hand: --gtest_also_run_disabled_tests) --------------------------------

/// Mean time of `reps` launches of `l` (after one warm-up), in microseconds.
double time_us(const cuda::Launch& l, std::vector<cuda::CUdeviceptr> ptrs, int reps = 20) {
  const cuda::Driver& d = cuda::driver();
  const cuda::DeviceInfo info = cuda::open_device(0);
  const cuda::Kernel k(cuda::compile_cubin(l.source, l.name, info.sm_major, info.sm_minor), l.name,
                       l.shared_bytes);
  std::vector<void*> args;
  for (cuda::CUdeviceptr& p : ptrs) args.push_back(&p);
  k.launch(l.grid, l.block, l.shared_bytes, nullptr, args.data());
  cuda::CUevent start = nullptr, stop = nullptr;
  cuda::check(d.cuEventCreate(&start, 0), "cuEventCreate");
  cuda::check(d.cuEventCreate(&stop, 0), "cuEventCreate");
  cuda::check(d.cuEventRecord(start, nullptr), "cuEventRecord");
  for (int i = 0; i < reps; ++i) k.launch(l.grid, l.block, l.shared_bytes, nullptr, args.data());
  cuda::check(d.cuEventRecord(stop, nullptr), "cuEventRecord");
  cuda::check(d.cuEventSynchronize(stop), "cuEventSynchronize");
  float ms = 0;
  cuda::check(d.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
  d.cuEventDestroy(start);
  d.cuEventDestroy(stop);
  return 1000.0 * ms / reps;
}

TEST(CudaKernels, DISABLED_Throughput) {
  REQUIRE_GPU();
  const int64_t big = int64_t{16384} * 50304;
  const cuda::DeviceMemory a(static_cast<size_t>(big) * 4), b(static_cast<size_t>(big) * 4),
      c(static_cast<size_t>(big) * 4);
  const cuda::DeviceMemory tgt = to_device(random_ints(16384, 1, 0, 50303)),
                           key = to_device(std::vector<int>{1});
  const cuda::DeviceMemory err = to_device(std::vector<int>{0});
  cuda::check(cuda::driver().cuMemsetD32Async(a.get(), 0x3f800000u, static_cast<size_t>(big), nullptr),
              "memset");
  cuda::check(cuda::driver().cuMemsetD32Async(b.get(), 0x3f000000u, static_cast<size_t>(big), nullptr),
              "memset");
  auto report = [](const char* what, double us, double bytes) {
    std::printf("%-44s %9.1f us  %7.0f GB/s\n", what, us, bytes / us * 1e-3);
  };
  const auto f = [](int64_t n) { return 4.0 * static_cast<double>(n); };
  report("sum [16384, 768] over 0 (bias grad)",
         time_us(cuda::reduce_kernel("k", "sum", dense_operand(DType::kF32, {16384, 768}), {0},
                                     tg::testing::sm90_device()),
                 {a.get(), c.get()}),
         f(16384 * 768));
  report("sum [16384, 50304] over 1",
         time_us(cuda::reduce_kernel("k", "sum", dense_operand(DType::kF32, {16384, 50304}), {1},
                                     tg::testing::sm90_device()),
                 {a.get(), c.get()}),
         f(big));
  report("sum [16384, 50304] over 0",
         time_us(cuda::reduce_kernel("k", "sum", dense_operand(DType::kF32, {16384, 50304}), {0},
                                     tg::testing::sm90_device()),
                 {a.get(), c.get()}),
         f(big));
  report("sum of 64M (all)",
         time_us(cuda::reduce_kernel("k", "sum", dense_operand(DType::kF32, {1 << 26}), {0},
                                     tg::testing::sm90_device()),
                 {a.get(), c.get()}),
         f(1 << 26));
  report("argmax [16384, 50304] over 1",
         time_us(cuda::reduce_kernel("k", "argmax", dense_operand(DType::kF32, {16384, 50304}), {1},
                                     tg::testing::sm90_device()),
                 {a.get(), c.get()}),
         f(big));
  report("softmax [98304, 1024] causal",
         time_us(cuda::softmax_kernel("k", 98304, 1024, 1, false, true, 1024), {a.get(), c.get()}),
         2 * f(98304 * 1024));
  report("log_softmax [16384, 50304]",
         time_us(cuda::softmax_kernel("k", 16384, 50304, 1, true, false, 1), {a.get(), c.get()}), 2 * f(big));
  report(
      "cross_entropy [16384, 50304]",
      time_us(cuda::cross_entropy_kernel("k", 16384, 50304, -100), {a.get(), tgt.get(), c.get(), err.get()}),
      f(big));
  report("cross_entropy_grad [16384, 50304]",
         time_us(cuda::cross_entropy_grad_kernel("k", 16384, 50304, -100),
                 {a.get(), tgt.get(), b.get(), c.get(), err.get()}),
         3 * f(big));
  report(
      "cross_entropy [16384, 50257]",
      time_us(cuda::cross_entropy_kernel("k", 16384, 50257, -100), {a.get(), tgt.get(), c.get(), err.get()}),
      f(16384 * 50257));
  report("layer_norm [16384, 768]",
         time_us(cuda::layer_norm_kernel("k", 16384, 768, 1e-5), {a.get(), c.get()}), 2 * f(16384 * 768));
  report("layer_norm_grad [16384, 768]",
         time_us(cuda::layer_norm_grad_kernel("k", 16384, 768, 1e-5), {a.get(), b.get(), c.get()}),
         3 * f(16384 * 768));
  report("rms_norm [16384, 3072]", time_us(cuda::rms_norm_kernel("k", 16384, 3072, 1e-5), {a.get(), c.get()}),
         2 * f(16384 * 3072));
  report("rms_norm_grad [16384, 3072]",
         time_us(cuda::rms_norm_grad_kernel("k", 16384, 3072, 1e-5), {a.get(), b.get(), c.get()}),
         3 * f(16384 * 3072));
  report("dropout 64M",
         time_us(cuda::dropout_kernel("k", dense_operand(DType::kF32, {1 << 26}), 0.1, 5),
                 {a.get(), key.get(), c.get()}),
         2 * f(1 << 26));
  report("random 64M", time_us(cuda::random_kernel("k", 1 << 26, 5), {key.get(), c.get()}), f(1 << 26));
  const cuda::DeviceMemory ids = to_device(random_ints(16384, 2, 0, 50303));
  report("gather [16384, 768] from [50304, 768]",
         time_us(cuda::gather_kernel("k", dense_operand(DType::kF32, {50304, 768}),
                                     {DType::kI32, {16384, 768}, {1, 0}}, 0),
                 {a.get(), ids.get(), c.get(), err.get()}),
         2 * f(16384 * 768));
  report("scatter_add [16384, 768] into [50304, 768]",
         time_us(cuda::scatter_add_kernel("k", dense_operand(DType::kF32, {16384, 768}),
                                          {DType::kI32, {16384, 768}, {1, 0}}, {50304, 768}, 0),
                 {a.get(), ids.get(), c.get(), err.get()}),
         2 * f(16384 * 768));
}

}  // namespace
