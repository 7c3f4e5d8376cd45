// The small-product kernel of backend/cuda/small_matmul.h: its sources compile through NVRTC
// (wherever NVRTC is installed); on a GPU every layout combination (a and b row- or
// column-major, with leading-dimension padding), odd sizes, batches with broadcast operands,
// padded output rows and every split-K path are compared with a double-precision host product,
// and the training shapes it is meant for are timed against cuBLASLt inside CUDA graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cublaslt.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/small_matmul.h"
#include "tensorgrad/errors.h"
#include "backend/cuda_test_util.h"

namespace {

using namespace tg;
namespace cuda = tg::backend::cuda;

using tg::testing::have_nvrtc;

/// One product: shapes, layouts (row- or column-major with a padded leading dimension) and
/// batch strides (0 = broadcast).
struct SmallCase {
  int64_t batch, m, n, k;
  bool a_row, b_row;
  int64_t pad = 0;  // extra leading-dimension elements of both operands
  bool a_bcast = false, b_bcast = false;
  int64_t out_pad = 0;  // out_row_stride = n + out_pad
  cuda::SmallMatmulConfig cfg{};
  bool explicit_cfg = false;

  cuda::MatOperand a() const {
    cuda::MatOperand o{m, k, 0, 0, 0};
    if (a_row) {
      o.row_stride = k + pad;
      o.col_stride = 1;
    } else {
      o.row_stride = 1;
      o.col_stride = m + pad;
    }
    o.batch_stride = a_bcast ? 0 : span1(o);
    return o;
  }
  cuda::MatOperand b() const {
    cuda::MatOperand o{k, n, 0, 0, 0};
    if (b_row) {
      o.row_stride = n + pad;
      o.col_stride = 1;
    } else {
      o.row_stride = 1;
      o.col_stride = k + pad;
    }
    o.batch_stride = b_bcast ? 0 : span1(o);
    return o;
  }
  static int64_t span1(const cuda::MatOperand& o) {
    return (o.rows - 1) * o.row_stride + (o.cols - 1) * o.col_stride + 1;
  }
  static int64_t span(const cuda::MatOperand& o, int64_t batch) {
    return (batch - 1) * o.batch_stride + span1(o);
  }
  int64_t ors() const { return n + out_pad; }
  std::string str() const {
    char buf[256];
    std::snprintf(buf, sizeof buf, "[%lld] %lldx%lldx%lld a:%s b:%s pad %lld%s%s ors %lld", (long long)batch,
                  (long long)m, (long long)n, (long long)k, a_row ? "row" : "col", b_row ? "row" : "col",
                  (long long)pad, a_bcast ? " a-bcast" : "", b_bcast ? " b-bcast" : "", (long long)ors());
    std::string s = buf;
    if (explicit_cfg)
      s += " cfg " + std::to_string(cfg.bm) + "x" + std::to_string(cfg.bn) + "x" + std::to_string(cfg.bk) +
           "/" + std::to_string(cfg.tm) + "x" + std::to_string(cfg.tn) + " ks" + std::to_string(cfg.ks) +
           " cl" + std::to_string(cfg.cl);
    return s;
  }
  cuda::Launch launch(const std::string& name) const {
    return explicit_cfg ? cuda::small_matmul_kernel_with(cfg, name, batch, m, n, k, a(), b(), ors())
                        : cuda::small_matmul_kernel(name, batch, m, n, k, a(), b(), false, ors(),
                                                    tg::testing::sm90_device());
  }
};

std::vector<SmallCase> layout_cases() {
  const std::vector<std::vector<int64_t>> sizes = {
      {1, 1, 1},     {7, 33, 100},   {33, 7, 1},     {100, 64, 7},   {64, 100, 33},
      {4096, 7, 33}, {7, 4096, 64},  {33, 64, 4096}, {1, 100, 4096}, {100, 1, 64},
      {64, 64, 64},  {4096, 64, 16}, {64, 1, 100},   {1, 7, 7}};
  std::vector<SmallCase> cases;
  int i = 0;
  for (const auto& s : sizes)
    for (int lay = 0; lay < 4; ++lay, ++i) {
      SmallCase c{1, s[0], s[1], s[2], (lay & 1) != 0, (lay & 2) != 0};
      c.pad = (i % 3 == 1) ? 3 : 0;
      c.out_pad = (i % 5 == 2) ? 5 : 0;
      cases.push_back(c);
    }
  return cases;
}

std::vector<SmallCase> batch_cases() {
  std::vector<SmallCase> cases;
  for (int lay = 0; lay < 4; ++lay) {
    SmallCase c{3, 33, 65, 100, (lay & 1) != 0, (lay & 2) != 0};
    c.a_bcast = lay == 1;
    c.b_bcast = lay != 1;
    c.out_pad = lay == 2 ? 3 : 0;
    c.pad = lay == 3 ? 2 : 0;
    cases.push_back(c);
  }
  cases.push_back(SmallCase{512, 8, 64, 64, true, true, 0, false, false, 0});
  cases.push_back(SmallCase{512, 8, 8, 64, true, false, 0, false, true, 0});
  cases.push_back(SmallCase{5, 7, 33, 1000, false, true, 1, false, false, 2});
  return cases;
}

/// Every split-K path and tile shape, forced.
std::vector<SmallCase> config_cases() {
  const std::vector<cuda::SmallMatmulConfig> cfgs = {
      {64, 64, 32, 4, 4, 1, 1}, {32, 64, 32, 2, 4, 1, 1},  {64, 32, 16, 4, 2, 2, 1}, {32, 32, 64, 4, 4, 4, 8},
      {32, 32, 32, 4, 4, 2, 4}, {64, 128, 16, 4, 8, 1, 1}, {16, 16, 16, 1, 1, 1, 2}, {8, 64, 32, 1, 2, 4, 1},
      {32, 32, 64, 4, 4, 8, 8}, {64, 64, 32, 4, 4, 1, 8}};
  std::vector<SmallCase> cases;
  int i = 0;
  for (const auto& cfg : cfgs)
    for (const std::vector<int64_t>& s :
         {std::vector<int64_t>{64, 256, 4096}, std::vector<int64_t>{33, 100, 777}})
      for (int lay : {0, 3}) {
        SmallCase c{(i % 3 == 2) ? 2 : 1, s[0], s[1], s[2], (lay & 1) != 0, (lay & 2) != 0};
        c.cfg = cfg;
        c.explicit_cfg = true;
        c.out_pad = (i % 4 == 1) ? 1 : 0;
        ++i;
        cases.push_back(c);
      }
  return cases;
}

TEST(CudaSmallMatmulNvrtc, SourcesCompile) {
  std::string why;
  if (!have_nvrtc(why)) GTEST_SKIP() << "NVRTC not available: " << why;
  std::vector<cuda::KernelSource> ks;
  int i = 0;
  for (const std::vector<SmallCase>& group : {layout_cases(), batch_cases(), config_cases()})
    for (const SmallCase& c : group) {
      const std::string name = "smm" + std::to_string(i++);
      const cuda::Launch l = c.launch(name);
      EXPECT_EQ(l.name, name);
      EXPECT_GT(l.block[0], 0u);
      ks.push_back({l.name, l.source});
    }
  const auto cubins = cuda::compile_cubins(ks, 9, 0);
  for (const auto& cb : cubins) EXPECT_FALSE(cb.empty());
}

TEST(CudaSmallMatmulNvrtc, ConfigChoicesAreValid) {
  for (int64_t batch : {1, 4, 512})
    for (int64_t m : {1, 7, 8, 64, 256, 4096})
      for (int64_t n : {1, 7, 64, 192, 256})
        for (int64_t k : {1, 16, 64, 256, 4096}) {
          const cuda::SmallMatmulConfig c =
              cuda::small_matmul_config(batch, m, n, k, tg::testing::sm90_device());
          EXPECT_EQ(c.bm % c.tm, 0);
          EXPECT_EQ(c.bn % c.tn, 0);
          EXPECT_EQ(c.bk % (8 * c.ks), 0);
          EXPECT_GE(c.threads(), 32);
          EXPECT_LE(c.threads(), 1024);
          EXPECT_GE(c.cl, 1);
          EXPECT_LE(c.cl, 8);
          const cuda::SmallMatmulConfig old =
              cuda::small_matmul_config(batch, m, n, k, tg::testing::sm90_device(8));
          EXPECT_EQ(old.cl, 1);
        }
}

// ---- GPU ----------------------------------------------------------------------------------

std::vector<float> uniform_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

constexpr float kSentinel = 1234.5f;

/// Runs every case (compiled together) and checks each against a host product in double.
void check_cases(const std::vector<SmallCase>& cases, const std::string& label) {
  const cuda::DeviceInfo info = cuda::open_device(0);
  std::vector<cuda::Launch> launches;
  std::vector<cuda::KernelSource> srcs;
  for (size_t i = 0; i < cases.size(); ++i) {
    launches.push_back(cases[i].launch(label + std::to_string(i)));
    srcs.push_back({launches.back().name, launches.back().source});
  }
  const auto cubins = cuda::compile_cubins(srcs, info.sm_major, info.sm_minor);
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const SmallCase& c = cases[ci];
    const cuda::MatOperand A = c.a(), B = c.b();
    const int64_t na = SmallCase::span(A, c.batch), nb = SmallCase::span(B, c.batch);
    const int64_t no = c.batch * c.m * c.ors();
    const std::vector<float> ha = uniform_floats(static_cast<size_t>(na), 11 + static_cast<uint32_t>(ci));
    const std::vector<float> hb = uniform_floats(static_cast<size_t>(nb), 97 + static_cast<uint32_t>(ci));
    std::vector<float> ho(static_cast<size_t>(no), kSentinel);
    cuda::DeviceMemory da(static_cast<size_t>(na) * 4), db(static_cast<size_t>(nb) * 4),
        dout(static_cast<size_t>(no) * 4);
    da.upload(ha.data(), ha.size() * 4);
    db.upload(hb.data(), hb.size() * 4);
    dout.upload(ho.data(), ho.size() * 4);
    const cuda::Launch& l = launches[ci];
    const cuda::Kernel kern(cubins[ci], l.name, l.shared_bytes);
    cuda::CUdeviceptr pa = da.get(), pb = db.get(), po = dout.get();
    void* args[] = {&pa, &pb, &po};
    kern.launch(l.grid, l.block, l.shared_bytes, nullptr, args);
    cuda::check(cuda::driver().cuCtxSynchronize(), "cuCtxSynchronize");
    dout.download(ho.data(), ho.size() * 4);
    int64_t bad = 0;
    for (int64_t bt = 0; bt < c.batch && bad < 5; ++bt)
      for (int64_t i = 0; i < c.m && bad < 5; ++i)
        for (int64_t j = 0; j < c.ors() && bad < 5; ++j) {
          const float got = ho[static_cast<size_t>((bt * c.m + i) * c.ors() + j)];
          if (j >= c.n) {
            if (got != kSentinel) {
              ADD_FAILURE() << c.str() << ": padding [" << bt << ", " << i << ", " << j << "] overwritten";
              ++bad;
            }
            continue;
          }
          double want = 0, mag = 0;
          for (int64_t kk = 0; kk < c.k; ++kk) {
            const double x =
                ha[static_cast<size_t>(bt * A.batch_stride + i * A.row_stride + kk * A.col_stride)];
            const double y =
                hb[static_cast<size_t>(bt * B.batch_stride + kk * B.row_stride + j * B.col_stride)];
            want += x * y;
            mag += std::fabs(x * y);
          }
          const double tol = 8 * std::sqrt(static_cast<double>(c.k)) * 6e-8 * mag + 1e-30;
          if (!(std::fabs(got - want) <= tol)) {
            ADD_FAILURE() << c.str() << ": [" << bt << ", " << i << ", " << j << "] got " << got << " want "
                          << want << " (tol " << tol << ")";
            ++bad;
          }
        }
  }
}

TEST(CudaSmallMatmul, AllLayoutsAndOddSizes) {
  REQUIRE_GPU();
  check_cases(layout_cases(), "smm_layout");
}

TEST(CudaSmallMatmul, BatchesAndBroadcast) {
  REQUIRE_GPU();
  check_cases(batch_cases(), "smm_batch");
}

TEST(CudaSmallMatmul, EverySplitPath) {
  REQUIRE_GPU();
  check_cases(config_cases(), "smm_cfg");
}

TEST(CudaSmallMatmul, Deterministic) {
  REQUIRE_GPU();
  const cuda::DeviceInfo info = cuda::open_device(0);
  for (const cuda::SmallMatmulConfig& cfg :
       {cuda::SmallMatmulConfig{32, 32, 64, 4, 4, 4, 8}, cuda::small_matmul_config(1, 64, 256, 4096, info)}) {
    SmallCase c{1, 64, 256, 4096, false, true};
    c.cfg = cfg;
    c.explicit_cfg = true;
    const cuda::Launch l = c.launch("smm_det");
    const cuda::Kernel kern(cuda::compile_cubin(l.source, l.name, info.sm_major, info.sm_minor), l.name,
                            l.shared_bytes);
    const std::vector<float> ha = uniform_floats(static_cast<size_t>(SmallCase::span(c.a(), 1)), 5);
    const std::vector<float> hb = uniform_floats(static_cast<size_t>(SmallCase::span(c.b(), 1)), 6);
    cuda::DeviceMemory da(ha.size() * 4), db(hb.size() * 4), dout(static_cast<size_t>(c.m * c.n) * 4);
    da.upload(ha.data(), ha.size() * 4);
    db.upload(hb.data(), hb.size() * 4);
    cuda::CUdeviceptr pa = da.get(), pb = db.get(), po = dout.get();
    void* args[] = {&pa, &pb, &po};
    std::vector<float> first(static_cast<size_t>(c.m * c.n)), again(first.size());
    for (int rep = 0; rep < 5; ++rep) {
      kern.launch(l.grid, l.block, l.shared_bytes, nullptr, args);
      cuda::check(cuda::driver().cuCtxSynchronize(), "cuCtxSynchronize");
      dout.download((rep ? again : first).data(), first.size() * 4);
      if (rep) {
        ASSERT_EQ(std::memcmp(first.data(), again.data(), first.size() * 4), 0) << c.str() << " run " << rep;
      }
    }
  }
}

// ---- skinny products (gemv_kernel) ---------------------------------------------------------

struct GemvCase {
  int64_t m, n, k, ldb_pad;
  cuda::GemvEpilogue epi;
  int64_t out_ld;      // ≤ 0: n
  bool a_col = false;  // x read column-major (a transposed view)
  cuda::GemvNorm norm = {};
  cuda::GemvTypes types = {};  // bf16 W / x, or x rounded to bf16 as it is read
};

std::vector<GemvCase> gemv_cases() {
  return {
      {1, 2304, 768, 0, {.bias = true}, 0},                    // GPT-2's qkv, one sequence
      {4, 768, 3072, 0, {.bias = true, .residual = true}, 0},  // fc2 + residual, four sequences
      {1, 3072, 768, 0, {.bias = true, .gelu = true}, 0},      // fc + GELU
      {3, 50257, 768, 0, {}, 50260},                           // the tied head, padded output rows
      {8, 500, 1001, 0, {.gelu = true}, 0},                    // odd k: scalar loads
      {2, 300, 640, 3, {.bias = true}, 0},                     // a leading dimension not a multiple of 4
      {5, 256, 512, 0, {.residual = true}, 0, true},           // x column-major
      {1, 2304, 768, 0, {.bias = true}, 0, false, {.on = true, .w = true, .b = true}},  // ln1 → qkv
      {4,
       3072,
       768,
       0,
       {.bias = true, .gelu = true},
       0,
       false,
       {.on = true, .w = true, .b = true, .eps = 1e-3}},
      {3, 512, 768, 0, {}, 0, false, {.on = true, .layer = false, .w = true}},  // RMS norm, no bias
      {2, 300, 501, 0, {}, 0, false, {.on = true}},                             // odd k, no affine
      // bf16 weights (a decode step under Precision::kBf16): x rounded as read, or bf16 itself.
      {1,
       2304,
       768,
       0,
       {.bias = true},
       0,
       false,
       {.on = true, .w = true, .b = true},
       {.b_bf16 = true, .round_a = true}},
      {4, 3072, 768, 0, {.bias = true, .gelu = true}, 0, false, {}, {.a_bf16 = true, .b_bf16 = true}},
      {2,
       4096,
       1024,
       0,
       {.residual = true},
       0,
       false,
       {.on = true, .layer = false, .w = true},
       {.b_bf16 = true, .round_a = true}},
      {3, 1000, 333, 0, {}, 0, false, {}, {.b_bf16 = true, .round_a = true}},  // odd k: scalar loads
      {2, 300, 640, 3, {.bias = true}, 0, false, {}, {.a_bf16 = true, .b_bf16 = true}},  // ldb not a multiple
                                                                                         // of 8
      // The staged kernel with a column split over four warps (TinyLlama's down projection), with
      // columns left over after whole turns of the grid, and with f32 weights split four ways.
      {1, 2048, 5632, 0, {.residual = true}, 0, false, {}, {.b_bf16 = true, .round_a = true}},
      {1,
       11270,
       2048,
       0,
       {},
       0,
       false,
       {.on = true, .layer = false, .w = true, .eps = 1e-6},
       {.b_bf16 = true, .round_a = true}},
      {2, 1000, 4096, 0, {.bias = true}, 0},
      // A narrow product reading a norm (TinyLlama's k or v projection): one column a turn.
      {1,
       256,
       2048,
       0,
       {},
       0,
       false,
       {.on = true, .layer = false, .w = true, .eps = 1e-6},
       {.b_bf16 = true, .round_a = true}},
  };
}

cuda::Launch gemv_launch(const GemvCase& c, const std::string& name) {
  const cuda::MatOperand a =
      c.a_col ? cuda::MatOperand{c.m, c.k, 1, c.m, 0} : cuda::MatOperand{c.m, c.k, c.k, 1, 0};
  return cuda::gemv_kernel(name, c.m, c.n, c.k, a, {c.k, c.n, 1, c.k + c.ldb_pad, 0}, c.epi, c.out_ld,
                           tg::testing::sm90_device().sm_count, c.norm, 0, c.types);
}

TEST(CudaGemvNvrtc, SourcesCompile) {
  std::string why;
  if (!have_nvrtc(why)) GTEST_SKIP() << "NVRTC not available: " << why;
  std::vector<cuda::KernelSource> ks;
  const std::vector<GemvCase> cases = gemv_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    const GemvCase& c = cases[i];
    const cuda::Launch l = gemv_launch(c, "gemv" + std::to_string(i));
    EXPECT_TRUE(cuda::gemv_applies(1, c.m, c.n, c.k, {}, {c.k, c.n, 1, c.k + c.ldb_pad, 0}));
    ks.push_back({l.name, l.source});
  }
  for (const auto& cb : cuda::compile_cubins(ks, 9, 0)) EXPECT_FALSE(cb.empty());
}

// Every case against a double-precision host product with the same epilogue.
TEST(CudaGemv, MatchesTheHostProductWithEpilogues) {
  REQUIRE_GPU();
  const cuda::DeviceInfo info = cuda::open_device(0);
  const std::vector<GemvCase> cases = gemv_cases();
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const GemvCase& c = cases[ci];
    const int64_t ldb = c.k + c.ldb_pad, ld = c.out_ld > 0 ? c.out_ld : c.n;
    const cuda::Launch l = gemv_launch(c, "gemv_check");
    const cuda::Kernel kern(cuda::compile_cubin(l.source, l.name, info.sm_major, info.sm_minor), l.name,
                            l.shared_bytes);
    const std::vector<float> hnw = uniform_floats(static_cast<size_t>(c.k), 13),
                             hnb = uniform_floats(static_cast<size_t>(c.k), 15);
    std::vector<float> ha = uniform_floats(static_cast<size_t>(c.m * c.k), 3 + static_cast<uint32_t>(ci)),
                       hb = uniform_floats(static_cast<size_t>(c.n * ldb), 5 + static_cast<uint32_t>(ci));
    const std::vector<float> hbias = uniform_floats(static_cast<size_t>(c.n), 7),
                             hres = uniform_floats(static_cast<size_t>(c.m * c.n), 9);
    std::vector<float> ho(static_cast<size_t>(c.m * ld), kSentinel);
    // bf16 operands go up as bf16 bits; the host product reads the same rounded values.
    auto to_bf16 = [](std::vector<float>& v) {
      std::vector<uint16_t> bits(v.size());
      for (size_t i = 0; i < v.size(); ++i) v[i] = tg::f32_from_bf16(bits[i] = tg::bf16_from_f32(v[i]));
      return bits;
    };
    const std::vector<uint16_t> ha16 = c.types.a_bf16 ? to_bf16(ha) : std::vector<uint16_t>{},
                                hb16 = c.types.b_bf16 ? to_bf16(hb) : std::vector<uint16_t>{};
    cuda::DeviceMemory da(ha.size() * 4), db(hb.size() * 4), dbias(hbias.size() * 4), dres(hres.size() * 4),
        dout(ho.size() * 4), dnw(hnw.size() * 4), dnb(hnb.size() * 4);
    dnw.upload(hnw.data(), hnw.size() * 4);
    dnb.upload(hnb.data(), hnb.size() * 4);
    if (c.types.a_bf16)
      da.upload(ha16.data(), ha16.size() * 2);
    else
      da.upload(ha.data(), ha.size() * 4);
    if (c.types.b_bf16)
      db.upload(hb16.data(), hb16.size() * 2);
    else
      db.upload(hb.data(), hb.size() * 4);
    dbias.upload(hbias.data(), hbias.size() * 4);
    dres.upload(hres.data(), hres.size() * 4);
    dout.upload(ho.data(), ho.size() * 4);
    cuda::CUdeviceptr pa = da.get(), pb = db.get(), pbias = dbias.get(), pres = dres.get(), po = dout.get(),
                      pnw = dnw.get(), pnb = dnb.get();
    std::vector<void*> args{&pa};
    if (c.norm.on && (c.norm.w || c.norm.b)) args.insert(args.end(), {&pnw, &pnb});
    args.push_back(&pb);
    if (c.epi.bias) args.push_back(&pbias);
    if (c.epi.residual) args.push_back(&pres);
    args.push_back(&po);
    kern.launch(l.grid, l.block, l.shared_bytes, nullptr, args.data());
    cuda::check(cuda::driver().cuCtxSynchronize(), "cuCtxSynchronize");
    dout.download(ho.data(), ho.size() * 4);
    // The rows as the product sees them: normalised in double when the case asks.
    std::vector<double> x(static_cast<size_t>(c.m * c.k));
    for (int64_t i = 0; i < c.m; ++i) {
      double mean = 0, var = 0;
      for (int64_t kk = 0; kk < c.k; ++kk)
        x[static_cast<size_t>(i * c.k + kk)] =
            c.a_col ? ha[static_cast<size_t>(kk * c.m + i)] : ha[static_cast<size_t>(i * c.k + kk)];
      if (!c.norm.on) continue;
      for (int64_t kk = 0; kk < c.k && c.norm.layer; ++kk)
        mean += x[static_cast<size_t>(i * c.k + kk)] / static_cast<double>(c.k);
      for (int64_t kk = 0; kk < c.k; ++kk)
        var += std::pow(x[static_cast<size_t>(i * c.k + kk)] - mean, 2) / static_cast<double>(c.k);
      for (int64_t kk = 0; kk < c.k; ++kk) {
        double& e = x[static_cast<size_t>(i * c.k + kk)];
        e = (e - mean) / std::sqrt(var + c.norm.eps);
        if (c.norm.w) e *= hnw[static_cast<size_t>(kk)];
        if (c.norm.b) e += hnb[static_cast<size_t>(kk)];
      }
    }
    if (c.types.round_a)
      for (double& e : x) e = tg::f32_from_bf16(tg::bf16_from_f32(static_cast<float>(e)));
    int bad = 0;
    for (int64_t i = 0; i < c.m && bad < 5; ++i)
      for (int64_t j = 0; j < ld && bad < 5; ++j) {
        const float got = ho[static_cast<size_t>(i * ld + j)];
        if (j >= c.n) {
          if (got != kSentinel) ++bad, ADD_FAILURE() << "case " << ci << ": padding overwritten";
          continue;
        }
        double want = 0, mag = 0;
        for (int64_t kk = 0; kk < c.k; ++kk) {
          const double xv = x[static_cast<size_t>(i * c.k + kk)];
          const double y = hb[static_cast<size_t>(j * ldb + kk)];
          want += xv * y;
          mag += std::fabs(xv * y);
        }
        if (c.epi.bias) want += hbias[static_cast<size_t>(j)], mag += 1;
        if (c.epi.residual) want += hres[static_cast<size_t>(i * c.n + j)], mag += 1;
        if (c.epi.gelu)
          want = 0.5 * want * (1 + std::tanh(0.7978845608028654 * (want + 0.044715 * want * want * want)));
        // Rounded operands: the kernel's f32 norm may round an element the other way (2⁻⁸ of it).
        const double tol =
            c.types.round_a ? 1e-3 * mag + 1e-5 : 8 * std::sqrt(static_cast<double>(c.k)) * 6e-8 * mag + 1e-6;
        if (!(std::fabs(got - want) <= tol))
          ++bad, ADD_FAILURE() << "case " << ci << " [" << i << ", " << j << "] got " << got << " want "
                               << want << " (tol " << tol << ")";
      }
  }
}

// ---- timing against cuBLASLt ---------------------------------------------------------------

/// Microseconds per launch of `enqueue` (which enqueues one product on the stream), measured
/// as a captured graph of `reps` launches.
template <class F>
double graph_us(cuda::CUstream stream, F enqueue, int reps = 100) {
  const cuda::Driver& d = cuda::driver();
  cuda::check(d.cuStreamBeginCapture(stream, 1), "cuStreamBeginCapture");
  for (int i = 0; i < reps; ++i) enqueue();
  cuda::CUgraph graph = nullptr;
  cuda::check(d.cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
  cuda::CUgraphExec exec = nullptr;
  cuda::check(d.cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
  cuda::CUevent e0 = nullptr, e1 = nullptr;
  cuda::check(d.cuEventCreate(&e0, 0), "cuEventCreate");
  cuda::check(d.cuEventCreate(&e1, 0), "cuEventCreate");
  cuda::check(d.cuGraphLaunch(exec, stream), "cuGraphLaunch");  // warm-up
  float best = 1e30f;
  for (int t = 0; t < 5; ++t) {
    cuda::check(d.cuEventRecord(e0, stream), "cuEventRecord");
    cuda::check(d.cuGraphLaunch(exec, stream), "cuGraphLaunch");
    cuda::check(d.cuEventRecord(e1, stream), "cuEventRecord");
    cuda::check(d.cuEventSynchronize(e1), "cuEventSynchronize");
    float ms = 0;
    cuda::check(d.cuEventElapsedTime(&ms, e0, e1), "cuEventElapsedTime");
    best = std::min(best, ms);
  }
  d.cuEventDestroy(e0);
  d.cuEventDestroy(e1);
  d.cuGraphExecDestroy(exec);
  d.cuGraphDestroy(graph);
  return 1000.0 * best / reps;
}

// Decode-step shapes (GPT-2 124M, one sequence) inside CUDA graphs: µs per product and the
// bandwidth of reading W, for each split of K over warps (ks) and with the norm prologue.
// A measurement, not a check: run it by name (--gtest_also_run_disabled_tests).
TEST(CudaGemv, DISABLED_Timing) {
  REQUIRE_GPU();
  const cuda::DeviceInfo info = cuda::open_device(0);
  const cuda::Driver& d = cuda::driver();
  cuda::CUstream stream = nullptr;
  cuda::check(d.cuStreamCreate(&stream, 1), "cuStreamCreate");
  struct Shape3 {
    int64_t m, n, k;
  };
  for (const Shape3 sh : {Shape3{1, 2304, 768}, Shape3{1, 768, 768}, Shape3{1, 3072, 768},
                          Shape3{1, 768, 3072}, Shape3{1, 50257, 768}, Shape3{4, 3072, 768}}) {
    const std::vector<float> ha = uniform_floats(static_cast<size_t>(sh.m * sh.k), 1),
                             hb = uniform_floats(static_cast<size_t>(sh.n * sh.k), 2);
    cuda::DeviceMemory da(ha.size() * 4), db(hb.size() * 4), dout(static_cast<size_t>(sh.m * sh.n) * 4),
        dv(static_cast<size_t>(sh.k) * 4);
    da.upload(ha.data(), ha.size() * 4);
    db.upload(hb.data(), hb.size() * 4);
    dv.upload(hb.data(), static_cast<size_t>(sh.k) * 4);
    for (const bool norm : {false, true})
      for (const int ks : {0, 1, 2, 4, 8}) {
        const cuda::GemvNorm gn{.on = norm, .w = norm, .b = norm};
        const cuda::Launch l = cuda::gemv_kernel("gemv_time", sh.m, sh.n, sh.k, {sh.m, sh.k, sh.k, 1, 0},
                                                 {sh.k, sh.n, 1, sh.k, 0}, {}, 0, info.sm_count, gn, ks);
        const cuda::Kernel kern(cuda::compile_cubin(l.source, l.name, info.sm_major, info.sm_minor), l.name,
                                l.shared_bytes);
        cuda::CUdeviceptr pa = da.get(), pb = db.get(), po = dout.get(), pw = dv.get();
        std::vector<void*> args{&pa};
        if (norm) args.insert(args.end(), {&pw, &pw});
        args.insert(args.end(), {&pb, &po});
        const double us =
            graph_us(stream, [&] { kern.launch(l.grid, l.block, l.shared_bytes, stream, args.data()); });
        std::printf("gemv m %lld n %5lld k %4lld norm %d ks %d%s: %6.2f us  %6.0f GB/s\n", (long long)sh.m,
                    (long long)sh.n, (long long)sh.k, norm, ks, ks == 0 ? " (chosen)" : "", us,
                    static_cast<double>(sh.n * sh.k * 4) / (us * 1e3));
      }
  }
  d.cuStreamDestroy(stream);
}

std::string cfg_str(const cuda::SmallMatmulConfig& c) {
  return std::to_string(c.bm) + "x" + std::to_string(c.bn) + "x" + std::to_string(c.bk) + "/" +
         std::to_string(c.tm) + "x" + std::to_string(c.tn) + "/ks" + std::to_string(c.ks) + "/cl" +
         std::to_string(c.cl);
}

TEST(CudaSmallMatmul, TimingVsCublasLt) {
  REQUIRE_GPU();
  const std::string lt_why = cuda::cublaslt_unavailable_reason();
  if (!lt_why.empty()) GTEST_SKIP() << "cuBLASLt unavailable: " << lt_why;
  const cuda::DeviceInfo info = cuda::open_device(0);
  const cuda::Driver& d = cuda::driver();
  cuda::CUstream stream = nullptr;
  cuda::check(d.cuStreamCreate(&stream, 1), "cuStreamCreate");
  const bool sweep =
      std::getenv("TG_SMM_SWEEP") == nullptr || std::string(std::getenv("TG_SMM_SWEEP")) != "0";
  // (batch, m, n, k, a row-major, b row-major): forward x·W, backward dY·Wᵀ (b column-major)
  // and weight gradients Xᵀ·dY (a column-major), then larger ones for the crossover.
  const std::vector<SmallCase> shapes = {
      {1, 4096, 64, 64, true, true},   {1, 4096, 256, 64, true, true},  {1, 4096, 64, 256, true, true},
      {1, 4096, 192, 16, true, true},  {1, 4096, 64, 256, true, false}, {1, 4096, 256, 64, true, false},
      {1, 4096, 16, 192, true, false}, {1, 4096, 64, 64, true, false},  {1, 64, 256, 4096, false, true},
      {1, 256, 64, 4096, false, true}, {1, 64, 64, 4096, false, true},  {1, 16, 192, 4096, false, true},
      {1, 256, 64, 64, true, true},    {1, 256, 256, 64, true, true},   {1, 256, 64, 256, true, true},
      {1, 256, 192, 16, true, true},   {1, 64, 256, 256, false, true},  {1, 64, 64, 256, false, true},
      {512, 8, 64, 64, true, true},    {512, 8, 8, 64, true, false},    {512, 64, 64, 8, false, true},
      {1, 4096, 256, 256, true, true}, {1, 4096, 512, 256, true, true}, {1, 256, 256, 4096, false, true},
      {1, 4096, 1024, 64, true, true}, {1, 8192, 256, 64, true, true},  {1, 128, 512, 8192, false, true},
  };
  const std::vector<cuda::SmallMatmulConfig> alternatives = {
      {64, 64, 32, 4, 4, 1, 1},  {32, 64, 32, 2, 4, 1, 1}, {64, 32, 32, 4, 2, 1, 1}, {32, 32, 32, 2, 2, 1, 1},
      {64, 128, 16, 4, 8, 1, 1}, {16, 64, 32, 1, 4, 1, 1}, {32, 32, 64, 4, 4, 4, 8}, {32, 32, 32, 4, 4, 2, 8},
      {64, 32, 64, 4, 2, 2, 8},  {32, 64, 64, 2, 4, 2, 4}, {64, 64, 64, 4, 4, 4, 8}, {32, 32, 32, 2, 2, 1, 8},
      {8, 64, 32, 1, 4, 1, 1},   {64, 64, 16, 4, 4, 1, 1}, {32, 64, 16, 2, 4, 1, 1}};
  // Compile everything at once.
  struct Item {
    size_t shape;
    cuda::SmallMatmulConfig cfg;
    bool chosen;
    cuda::Launch launch;
  };
  std::vector<Item> items;
  std::vector<cuda::KernelSource> srcs;
  for (size_t s = 0; s < shapes.size(); ++s) {
    const SmallCase& c = shapes[s];
    const cuda::SmallMatmulConfig chosen = cuda::small_matmul_config(c.batch, c.m, c.n, c.k, info);
    items.push_back({s, chosen, true,
                     cuda::small_matmul_kernel("smm_t" + std::to_string(items.size()), c.batch, c.m, c.n, c.k,
                                               c.a(), c.b(), false, c.ors(), info)});
    if (sweep)
      for (const cuda::SmallMatmulConfig& alt : alternatives) {
        if (cfg_str(alt) == cfg_str(chosen)) continue;
        if (alt.cl > 1 && (c.k / alt.cl < 64 || info.sm_major < 9)) continue;
        if (alt.bm / 2 >= c.m || alt.bn / 2 >= c.n) continue;
        items.push_back({s, alt, false,
                         cuda::small_matmul_kernel_with(alt, "smm_t" + std::to_string(items.size()), c.batch,
                                                        c.m, c.n, c.k, c.a(), c.b(), c.ors())});
      }
  }
  for (const Item& it : items) srcs.push_back({it.launch.name, it.launch.source});
  const auto cubins = cuda::compile_cubins(srcs, info.sm_major, info.sm_minor);

  constexpr size_t kWorkspace = 32u << 20;
  cuda::DeviceMemory ws(kWorkspace);
  std::printf("%-44s %9s %9s %9s %9s  %s\n", "product", "MFLOP", "lt fp32", "lt tf32", "small",
              "config (chosen)");
  size_t next = 0;
  int wins = 0, total = 0;
  for (size_t s = 0; s < shapes.size(); ++s) {
    const SmallCase& c = shapes[s];
    const cuda::MatOperand A = c.a(), B = c.b();
    cuda::DeviceMemory da(static_cast<size_t>(SmallCase::span(A, c.batch)) * 4),
        db(static_cast<size_t>(SmallCase::span(B, c.batch)) * 4),
        dout(static_cast<size_t>(c.batch * c.m * c.ors()) * 4);
    {
      const std::vector<float> ha = uniform_floats(da.bytes() / 4, 1), hb = uniform_floats(db.bytes() / 4, 2);
      da.upload(ha.data(), da.bytes());
      db.upload(hb.data(), db.bytes());
    }
    double lt_us[2] = {0, 0};
    for (int mode = 0; mode < 2; ++mode) {
      cuda::LtMatmul lt(c.batch, c.m, c.n, c.k, A, B, mode ? cuda::MathMode::kTf32 : cuda::MathMode::kFp32,
                        kWorkspace, false, c.ors());
      lt.tune(da.get(), db.get(), dout.get(), ws.get(), stream);
      lt_us[mode] = graph_us(stream, [&] { lt.run(da.get(), db.get(), dout.get(), ws.get(), stream); });
    }
    double chosen_us = 0;
    std::string chosen_cfg, sweep_line;
    double best_alt = 1e30;
    std::string best_alt_cfg;
    for (; next < items.size() && items[next].shape == s; ++next) {
      const Item& it = items[next];
      const cuda::Kernel kern(cubins[next], it.launch.name, it.launch.shared_bytes);
      cuda::CUdeviceptr pa = da.get(), pb = db.get(), po = dout.get();
      void* args[] = {&pa, &pb, &po};
      const double us = graph_us(stream, [&] {
        kern.launch(it.launch.grid, it.launch.block, it.launch.shared_bytes, stream, args);
      });
      if (it.chosen) {
        chosen_us = us;
        chosen_cfg = cfg_str(it.cfg);
      } else {
        char b[96];
        std::snprintf(b, sizeof b, " %s=%.2f", cfg_str(it.cfg).c_str(), us);
        sweep_line += b;
        if (us < best_alt) {
          best_alt = us;
          best_alt_cfg = cfg_str(it.cfg);
        }
      }
    }
    char name[64];
    std::snprintf(name, sizeof name, "[%lld] %lldx%lldx%lld a:%s b:%s", (long long)c.batch, (long long)c.m,
                  (long long)c.n, (long long)c.k, c.a_row ? "row" : "col", c.b_row ? "row" : "col");
    const double mflop = 2.0 * c.batch * c.m * c.n * c.k / 1e6;
    std::printf(
        "%-44s %9.1f %9.2f %9.2f %9.2f  %s  pref=%d%s\n", name, mflop, lt_us[0], lt_us[1], chosen_us,
        chosen_cfg.c_str(), cuda::small_matmul_preferred(c.batch, c.m, c.n, c.k) ? 1 : 0,
        best_alt < chosen_us ? (" best-alt " + best_alt_cfg + "=" + std::to_string(best_alt)).c_str() : "");
    if (sweep && !sweep_line.empty()) std::printf("    sweep:%s\n", sweep_line.c_str());
    ++total;
    if (chosen_us < lt_us[0]) ++wins;
  }
  std::printf("small kernel faster than cuBLASLt fp32 on %d of %d products\n", wins, total);
  std::fflush(stdout);
  d.cuStreamDestroy(stream);
}

}  // namespace
