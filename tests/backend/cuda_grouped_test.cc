// The grouped-product kernels of the CUDA backend (kernels_grouped.cc: grouped_matmul and its
// weight gradient) launched on random data in each operand type, weight layout and kernel
// (tiles: on tensor cores for 16-bit operands where the GPU has them, and on f32 FMAs; gemv,
// one chunk of rows or several), with empty experts, segments that straddle tiles, reduction
// lengths that are not a multiple of the tensor cores' 16 (or of a vector's 8) and odd widths,
// against host loops in double; offsets that do not rise from 0 to the rows set the error word.
// Without a GPU the tests are skipped with a message saying why.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/codegen.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda_test_util.h"
#include "tensorgrad/dtype.h"
#include "tensorgrad/errors.h"

namespace {

using namespace tg;
namespace cuda = tg::backend::cuda;

/// Values of `dtype` as the device holds them (f32, or 16-bit words) and as doubles.
struct HostValues {
  std::vector<float> f32;
  std::vector<uint16_t> half;
  std::vector<double> exact;
};

HostValues random_values(DType t, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  HostValues v;
  for (size_t i = 0; i < n; ++i) {
    const float f = d(rng);
    if (t == DType::kF32) {
      v.f32.push_back(f);
      v.exact.push_back(f);
    } else {
      const uint16_t h = t == DType::kBF16 ? bf16_from_f32(f) : f16_from_f32(f);
      v.half.push_back(h);
      v.exact.push_back(t == DType::kBF16 ? f32_from_bf16(h) : f32_from_f16(h));
    }
  }
  return v;
}

cuda::DeviceMemory upload(const HostValues& v) {
  const size_t bytes = v.f32.empty() ? v.half.size() * 2 : v.f32.size() * 4;
  cuda::DeviceMemory m(std::max<size_t>(bytes, 16));
  if (bytes > 0) m.upload(v.f32.empty() ? static_cast<const void*>(v.half.data()) : v.f32.data(), bytes);
  return m;
}

cuda::DeviceMemory upload_ints(const std::vector<int>& v) {
  cuda::DeviceMemory m(std::max<size_t>(v.size() * 4, 16));
  m.upload(v.data(), v.size() * 4);
  return m;
}

cuda::Kernel compile(const cuda::Launch& l) {
  const cuda::DeviceInfo info = cuda::open_device(0);
  return cuda::Kernel(cuda::compile_cubin(l.source, l.name, info.sm_major, info.sm_minor), l.name,
                      l.shared_bytes);
}

void launch(const cuda::Kernel& k, const cuda::Launch& l, std::vector<cuda::CUdeviceptr> ptrs) {
  std::vector<void*> args;
  for (cuda::CUdeviceptr& p : ptrs) args.push_back(&p);
  k.launch(l.grid, l.block, l.shared_bytes, nullptr, args.data());
}

/// ops.def's grouped_matmul (b = w) or grouped_matmul_grad_weight (b = dy), and Σ|terms| of
/// each output (the scale of its rounding error).
void reference(const cuda::GroupedShape& s, const std::vector<double>& x, const std::vector<double>& b,
               const std::vector<int>& off, std::vector<double>& out, std::vector<double>& mag) {
  const int64_t k = s.k, n = s.n;
  out.assign(static_cast<size_t>(s.grad_weight ? s.experts * n * k : s.rows * n), 0.0);
  mag = out;
  for (int64_t e = 0; e < s.experts; ++e)
    for (int64_t r = off[static_cast<size_t>(e)]; r < off[static_cast<size_t>(e + 1)]; ++r)
      for (int64_t c = 0; c < n; ++c)
        for (int64_t j = 0; j < k; ++j) {
          const double xv = x[static_cast<size_t>(r * k + j)];
          double t = 0;
          size_t at = 0;
          if (s.grad_weight) {
            t = xv * b[static_cast<size_t>(r * n + c)];
            at = static_cast<size_t>(e * n * k + (s.w_nk ? c * k + j : j * n + c));
          } else {
            t = xv * b[static_cast<size_t>(s.w_nk ? (e * n + c) * k + j : (e * k + j) * n + c)];
            at = static_cast<size_t>(r * n + c);
          }
          out[at] += t;
          mag[at] += std::fabs(t);
        }
}

std::vector<int> offsets_of(const std::vector<int>& counts) {
  std::vector<int> off{0};
  for (int c : counts) off.push_back(off.back() + c);
  return off;
}

struct GroupCase {
  std::string tag;
  int64_t k, n;
  std::vector<int> counts;  // rows per expert
  bool aligned;
  cuda::GroupedPath path;
  bool one_sm = false;  // generate as for a GPU of one SM: the widest gemv blocks at any size
};

// Rows that straddle 64-row tiles, empty experts (first, middle, last), odd and aligned extents;
// K (the forward's reduction) and the rows of an expert (the weight gradient's) not multiples of
// 16 or 32 (the tensor-core slabs) nor of 8 (a 16-byte vector), or multiples of 4 but not of 8.
// Gemv: segments of more than 16 rows (several register chunks), up to 64 rows in all (kAuto:
// gemv for w [E, N, K], tiles for w [E, K, N]), and the widest column blocks.
const GroupCase kCases[] = {
    {"tiles odd", 77, 51, {70, 0, 130, 1, 99}, false, cuda::GroupedPath::kTiles},
    {"tiles aligned", 128, 96, {0, 65, 64, 71, 0}, true, cuda::GroupedPath::kTiles},
    {"tiles one expert", 40, 130, {150}, true, cuda::GroupedPath::kTiles},
    {"tiles k tail", 200, 72, {33, 17, 0, 129, 64}, true, cuda::GroupedPath::kTiles},
    {"tiles even, not 8", 76, 50, {63, 2, 95}, true, cuda::GroupedPath::kTiles},
    {"tiles short k", 5, 9, {3, 66, 0, 20}, false, cuda::GroupedPath::kTiles},
    {"fma tiles odd", 77, 51, {70, 0, 130, 1, 99}, false, cuda::GroupedPath::kFmaTiles},
    {"fma tiles aligned", 128, 96, {0, 65, 64, 71, 0}, true, cuda::GroupedPath::kFmaTiles},
    {"gemv odd", 77, 51, {2, 0, 3, 1, 1, 0}, false, cuda::GroupedPath::kGemv},
    {"gemv aligned", 264, 200, {0, 2, 0, 5, 1, 0}, true, cuda::GroupedPath::kGemv},
    {"gemv all rows in one", 512, 72, {0, 16, 0}, true, cuda::GroupedPath::kGemv},
    {"gemv chunks", 256, 136, {0, 40, 3, 0, 21}, true, cuda::GroupedPath::kGemv},
    {"gemv chunks odd", 77, 51, {17, 0, 33, 1}, false, cuda::GroupedPath::kGemv},
    {"auto, 64 rows in one", 128, 64, {64, 0}, true, cuda::GroupedPath::kAuto},
    // w [E, K, N] gemv blocks of 512 columns (64 threads along N × 8): more than the block's
    // threads, so each thread stores two.
    {"gemv widest blocks", 64, 1032, {3, 0, 5}, true, cuda::GroupedPath::kGemv, true},
};

TEST(CudaGrouped, MatchesTheReference) {
  REQUIRE_GPU();
  uint32_t seed = 1;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16})
    for (const bool w_nk : {true, false})
      for (const bool grad : {false, true})
        for (const GroupCase& c : kCases) {
          if (grad && c.path != cuda::GroupedPath::kTiles && c.path != cuda::GroupedPath::kFmaTiles) continue;
          const std::vector<int> off = offsets_of(c.counts);
          cuda::GroupedShape s{.rows = off.back(),
                               .k = c.k,
                               .n = c.n,
                               .experts = static_cast<int64_t>(c.counts.size()),
                               .w_nk = w_nk,
                               .grad_weight = grad,
                               .dtype = t,
                               .aligned = c.aligned};
          const std::string what =
              c.tag + " " + dtype_name(t) + (w_nk ? " nk" : " kn") + (grad ? " grad" : "");
          const HostValues x = random_values(t, static_cast<size_t>(s.rows * s.k), seed++);
          const HostValues b =
              random_values(t, static_cast<size_t>(grad ? s.rows * s.n : s.experts * s.n * s.k), seed++);
          std::vector<double> want, mag;
          reference(s, x.exact, b.exact, off, want, mag);
          cuda::DeviceInfo dev = cuda::open_device(0);
          if (c.one_sm) dev.sm_count = 1;
          const cuda::Launch l = cuda::grouped_matmul_kernel("grouped", s, dev, c.path);
          const cuda::DeviceMemory dx = upload(x), db = upload(b), doff = upload_ints(off),
                                   dout(std::max<size_t>(want.size() * 4, 16)), derr = upload_ints({0});
          // NaN everywhere first: every output element must be written.
          cuda::check(cuda::driver().cuMemsetD32Async(dout.get(), 0x7fc00000u, want.size(), nullptr),
                      "memset");
          const cuda::Kernel k = compile(l);
          launch(k, l, {dx.get(), db.get(), doff.get(), dout.get(), derr.get()});
          cuda::check(cuda::driver().cuCtxSynchronize(), "cuCtxSynchronize");
          std::vector<float> got(want.size());
          if (!got.empty()) dout.download(got.data(), got.size() * 4);
          int err = -1;
          derr.download(&err, 4);
          EXPECT_EQ(err, 0) << what;
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 1e-5 * mag[i] + 1e-6) << what << " at " << i;
          // Deterministic: a second run gives the same bits.
          launch(k, l, {dx.get(), db.get(), doff.get(), dout.get(), derr.get()});
          cuda::check(cuda::driver().cuCtxSynchronize(), "cuCtxSynchronize");
          std::vector<float> again(want.size());
          if (!again.empty()) dout.download(again.data(), again.size() * 4);
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(again[i]))
                << what << " at " << i;
        }
}

TEST(CudaGrouped, OffsetsThatDoNotRiseFromZeroToTheRowsSetTheErrorWord) {
  REQUIRE_GPU();
  const int rows = 9;
  const std::vector<std::vector<int>> bad = {
      {1, 3, 6, 9},   // does not start at 0
      {0, 5, 3, 9},   // falls
      {0, 3, 6, 8},   // ends short of the rows
      {0, 3, 6, 12},  // ends past them
      {0, -4, 6, 9},  // negative
  };
  for (const DType t : {DType::kF32, DType::kBF16})
    for (const bool grad : {false, true})
      for (const cuda::GroupedPath path :
           {cuda::GroupedPath::kTiles, cuda::GroupedPath::kFmaTiles, cuda::GroupedPath::kGemv}) {
        if (grad && path == cuda::GroupedPath::kGemv) continue;
        if (t == DType::kF32 && path == cuda::GroupedPath::kFmaTiles) continue;  // kTiles' kernels
        for (const bool w_nk : {true, false}) {
          const cuda::GroupedShape s{.rows = rows,
                                     .k = 40,
                                     .n = 24,
                                     .experts = 3,
                                     .w_nk = w_nk,
                                     .grad_weight = grad,
                                     .dtype = t,
                                     .aligned = true};
          const cuda::Launch l = cuda::grouped_matmul_kernel("grouped", s, cuda::open_device(0), path);
          const cuda::Kernel k = compile(l);
          const HostValues x = random_values(t, rows * 40, 5),
                           b = random_values(t, grad ? rows * 24 : 3 * 24 * 40, 6);
          const cuda::DeviceMemory dx = upload(x), db = upload(b), dout((grad ? 3 * 24 * 40 : rows * 24) * 4);
          for (const std::vector<int>& off : bad) {
            const cuda::DeviceMemory doff = upload_ints(off), derr = upload_ints({0});
            launch(k, l, {dx.get(), db.get(), doff.get(), dout.get(), derr.get()});
            cuda::check(cuda::driver().cuCtxSynchronize(), "cuCtxSynchronize");
            int err = 0;
            derr.download(&err, 4);
            EXPECT_NE(err, 0) << "offsets " << off[0] << "," << off[1] << "," << off[2] << "," << off[3]
                              << " " << dtype_name(t) << (grad ? " grad" : "")
                              << (path == cuda::GroupedPath::kGemv       ? " gemv"
                                  : path == cuda::GroupedPath::kFmaTiles ? " fma tiles"
                                                                         : " tiles");
          }
        }
      }
}

}  // namespace
