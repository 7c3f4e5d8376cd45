// The CUDA attention kernels (backend/cuda/attention.cc): their sources compile with NVRTC for
// a spread of head dims, masks and layouts (wherever NVRTC is installed), and on a GPU the
// forward and the three backward launches agree with a double-precision host reference
// (naive softmax(q kᵀ·scale) v and its gradient formulas) on random data: strided q/k/v views
// of one packed buffer, grouped-query heads, causal masks with T ≠ S, D ∈ {16, 64, 80, ...}.
// The small-problem path and the TF32 tensor-core path (tolerance 2e-3) are checked the same
// way. The output and its gradient (out, dout) are also checked as strided views: permuted
// views of a [B, T, Hq, D] buffer and padded ones whose gaps must stay untouched. With a key
// mask (bool [B, S]) sequences 0, 1, 2 of a case keep random keys (key 0 hidden), a prefix,
// and none: a query left with no key must get zeros and pass no gradient.
// BenchmarkShapesTiming prints the time of the GPT-2, char and tiny shapes in fp32 and tf32
// (not an assertion); TileSweep (TG_ATTN_SWEEP=1) times tile overrides. Without a GPU the GPU
// tests are skipped with a message saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ir/strides.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/kernels.h"
#include "tensorgrad/errors.h"
#include "backend/cuda_test_util.h"

namespace {

using namespace tg;
namespace cuda = tg::backend::cuda;

using tg::testing::have_nvrtc;

/// Layouts of out (forward) and dout (backward), both [B, Hq, T, D] views of their buffer.
enum OutLayout {
  kDenseOut,     // dense [B, Hq, T, D]
  kPermutedOut,  // a [B, T, Hq, D] buffer: strides {T·Hq·D, D, Hq·D, 1}
  kPaddedOut,    // [B, T, Hq, D + 3] rows, 5 more floats per batch, the view 2 floats in
};

struct Case {
  int64_t b, hq, hkv, t, s, d;
  bool causal;
  bool packed;             // q, k, v are head ranges of one [B, T, Hq + 2·Hkv, D] buffer (needs t == s)
  bool tf32 = false;       // AttentionShape::tf32: tensor cores, looser tolerance
  int layout = kDenseOut;  // of out and dout (see OutLayout)
  bool masked = false;     // AttentionShape::key_mask (see make_problem)
};

std::string describe(const Case& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "B=%lld Hq=%lld Hkv=%lld T=%lld S=%lld D=%lld%s%s",
                static_cast<long long>(c.b), static_cast<long long>(c.hq), static_cast<long long>(c.hkv),
                static_cast<long long>(c.t), static_cast<long long>(c.s), static_cast<long long>(c.d),
                c.causal ? " causal" : "", c.packed ? " packed" : "");
  std::string r = buf;
  if (c.tf32) r += " tf32";
  if (c.layout == kPermutedOut) r += " out[B,T,H,D]";
  if (c.layout == kPaddedOut) r += " out-padded";
  if (c.masked) r += " key-mask";
  return r;
}

/// One problem: the host buffer holding q, k and v, the three views into it, dout (dense, as
/// the reference reads it) and the layout `o` of out and dout on the device.
struct Problem {
  Case c;
  cuda::AttentionShape shape;
  cuda::Operand q, k, v, o;
  int64_t q_off = 0, k_off = 0, v_off = 0;  // elements into `data`
  int64_t o_off = 0, o_size = 0;            // the view's offset in its buffer, the buffer's size
  std::vector<float> data, dout;
  std::vector<unsigned char> mask;  // [B, S] with c.masked
};

Problem make_problem(const Case& c, unsigned seed) {
  Problem p;
  p.c = c;
  p.shape = {c.b, c.hq, c.hkv, c.t, c.s, c.d, 1.0 / std::sqrt(static_cast<double>(c.d)), c.causal, c.tf32};
  p.shape.sm_count = tg::testing::sm90_device().sm_count;  // launch sizing only: any value runs anywhere
  const Shape qs{c.b, c.hq, c.t, c.d}, ks{c.b, c.hkv, c.s, c.d};
  p.q = {DType::kF32, qs, contiguous_strides(qs)};
  p.k = {DType::kF32, ks, contiguous_strides(ks)};
  p.v = p.k;
  p.o = {DType::kF32, qs, contiguous_strides(qs)};
  p.o_size = numel(qs);
  if (c.layout == kPermutedOut) {
    p.o.strides = {c.t * c.hq * c.d, c.d, c.hq * c.d, 1};
  } else if (c.layout == kPaddedOut) {
    const int64_t row = c.d + 3;
    p.o.strides = {c.t * c.hq * row + 5, row, c.hq * row, 1};
    p.o_off = 2;
    p.o_size = p.o_off + c.b * p.o.strides[0] + 4;
  }
  if (c.packed) {  // [B, T, W, D] with W = Hq + 2·Hkv heads side by side
    const int64_t w = c.hq + 2 * c.hkv;
    const std::vector<int64_t> st{c.t * w * c.d, c.d, w * c.d, 1};
    p.q.strides = p.k.strides = p.v.strides = st;
    p.k_off = c.hq * c.d;
    p.v_off = (c.hq + c.hkv) * c.d;
    p.data.resize(static_cast<size_t>(c.b * c.t * w * c.d));
  } else {
    p.k_off = numel(qs);
    p.v_off = numel(qs) + numel(ks);
    p.data.resize(static_cast<size_t>(numel(qs) + 2 * numel(ks)));
  }
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& x : p.data) x = normal(rng);
  p.dout.resize(static_cast<size_t>(numel(qs)));
  for (float& x : p.dout) x = normal(rng);
  p.shape.key_mask = c.masked;
  p.mask.assign(static_cast<size_t>(c.b * c.s), 1);
  if (c.masked)
    for (int64_t b = 0; b < c.b; ++b)
      for (int64_t j = 0; j < c.s; ++j) {
        const bool kept = b % 3 == 0 ? j > 0 && rng() % 4 != 0 : b % 3 == 1 && j < (c.s + 1) / 2;
        p.mask[static_cast<size_t>(b * c.s + j)] = kept ? 1 : 0;
      }
  return p;
}

/// softmax(q kᵀ·scale) v and [dq | dk | dv] in double, as the reference backend computes them.
struct Reference {
  std::vector<double> out, grads;
};

Reference reference(const Problem& p) {
  const Case& c = p.c;
  auto at = [&](const cuda::Operand& op, int64_t off, int64_t b, int64_t h, int64_t r, int64_t d) {
    return static_cast<double>(p.data[static_cast<size_t>(off + b * op.strides[0] + h * op.strides[1] +
                                                          r * op.strides[2] + d * op.strides[3])]);
  };
  const int64_t nq = c.b * c.hq * c.t * c.d, nk = c.b * c.hkv * c.s * c.d;
  Reference ref;
  ref.out.assign(static_cast<size_t>(nq), 0.0);
  ref.grads.assign(static_cast<size_t>(nq + 2 * nk), 0.0);
  const double scale = p.shape.scale;
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t h = 0; h < c.hq; ++h) {
      const int64_t g = h / (c.hq / c.hkv);
      for (int64_t t = 0; t < c.t; ++t) {
        const int64_t visible = c.causal ? t + (c.s - c.t) + 1 : c.s;
        const size_t row = static_cast<size_t>(((b * c.hq + h) * c.t + t) * c.d);
        std::vector<double> prob(static_cast<size_t>(visible)), dp(static_cast<size_t>(visible));
        double mx = -INFINITY, total = 0, weighted = 0;
        auto hidden = [&](int64_t j) { return p.mask[static_cast<size_t>(b * c.s + j)] == 0; };
        for (int64_t j = 0; j < visible; ++j) {
          if (hidden(j)) {
            prob[static_cast<size_t>(j)] = -INFINITY;
            continue;
          }
          double dot = 0;
          for (int64_t d = 0; d < c.d; ++d)
            dot += at(p.q, p.q_off, b, h, t, d) * at(p.k, p.k_off, b, g, j, d);
          prob[static_cast<size_t>(j)] = dot * scale;
          mx = std::max(mx, dot * scale);
        }
        if (mx == -INFINITY) continue;  // no key left: out, dq 0, no gradient for any key
        for (double& x : prob) total += (x = std::exp(x - mx));
        for (double& x : prob) x /= total;
        for (int64_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < c.d; ++d) {
            ref.out[row + static_cast<size_t>(d)] +=
                prob[static_cast<size_t>(j)] * at(p.v, p.v_off, b, g, j, d);
            dot += p.dout[row + static_cast<size_t>(d)] * at(p.v, p.v_off, b, g, j, d);
          }
          dp[static_cast<size_t>(j)] = dot;
          weighted += prob[static_cast<size_t>(j)] * dot;
        }
        for (int64_t j = 0; j < visible; ++j) {
          const double pj = prob[static_cast<size_t>(j)], ds = pj * (dp[static_cast<size_t>(j)] - weighted);
          const size_t krow = static_cast<size_t>(((b * c.hkv + g) * c.s + j) * c.d);
          for (int64_t d = 0; d < c.d; ++d) {
            const size_t dd = static_cast<size_t>(d);
            ref.grads[row + dd] += scale * ds * at(p.k, p.k_off, b, g, j, d);
            ref.grads[static_cast<size_t>(nq) + krow + dd] += scale * ds * at(p.q, p.q_off, b, h, t, d);
            ref.grads[static_cast<size_t>(nq + nk) + krow + dd] += pj * p.dout[row + dd];
          }
        }
      }
    }
  return ref;
}

/// max |got − want| / max(max |want|, 0.01) over [begin, end), and the count of non-finite
/// results. (The floor: with a single visible key dq and dk are exactly 0 in the reference and
/// rounding noise of the size of dO·v remains on the GPU.)
struct Error2 {
  double rel = 0;
  int64_t nonfinite = 0;
};

Error2 compare(const std::vector<float>& got, const std::vector<double>& want, size_t begin, size_t end) {
  double diff = 0, mag = 1e-2;
  Error2 e;
  for (size_t i = begin; i < end; ++i) {
    if (!std::isfinite(got[i]))
      ++e.nonfinite;
    else
      diff = std::max(diff, std::fabs(got[i] - want[i]));
    mag = std::max(mag, std::fabs(want[i]));
  }
  e.rel = diff / mag;
  return e;
}

/// The kernels of a problem (forward, then the backward plan's launches). `kept`: as a training
/// step runs them, the forward keeps its row statistics, the backward reads them and the
/// forward's output, and writes the gradients [B, T, H, D] (grads_bthd), or when T = S packed
/// per token as [B, T, (Hq + 2 Hkv)·D] (grads_packed).
struct Kernels {
  cuda::Launch forward;
  cuda::AttentionGradPlan backward;
  bool kept = false, packed = false;
};

/// `kept` on a path that keeps no statistics (the short-sequence one): packed gradients only.
Kernels generate(const Problem& p, const std::string& tag, bool kept = false) {
  cuda::AttentionShape bwd = p.shape;
  const bool stats = kept && cuda::attention_keeps_stats(p.shape);
  bwd.grads_bthd = stats;
  bwd.grads_packed = kept && p.shape.t == p.shape.s;
  return {cuda::attention_kernel("attn_fwd_" + tag, p.shape, p.q, p.k, p.v, p.o, stats),
          cuda::attention_grad_kernels("attn_bwd_" + tag, bwd, p.q, p.k, p.v, p.o, stats ? &p.o : nullptr),
          stats, bwd.grads_packed};
}

/// [dq | dk | dv] written [B, T, H, D] each (grads_bthd), or packed per token (grads_packed),
/// back in the dense [B, H, T, D] order.
std::vector<float> grads_to_bhtd(const std::vector<float>& g, const Case& c, bool packed) {
  std::vector<float> out(g.size());
  size_t base = 0;
  const int64_t rs = (c.hq + 2 * c.hkv) * c.d;
  for (int part = 0; part < 3; ++part) {
    const int64_t H = part == 0 ? c.hq : c.hkv, T = part == 0 ? c.t : c.s;
    const int64_t col = part == 0 ? 0 : part == 1 ? c.hq * c.d : (c.hq + c.hkv) * c.d;
    for (int64_t b = 0; b < c.b; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < c.d; ++d)
            out[base + static_cast<size_t>(((b * H + h) * T + t) * c.d + d)] =
                packed ? g[static_cast<size_t>((b * T + t) * rs + col + h * c.d + d)]
                       : g[base + static_cast<size_t>(((b * T + t) * H + h) * c.d + d)];
    base += static_cast<size_t>(c.b * H * T * c.d);
  }
  return out;
}

/// Where element i of dense [B, Hq, T, D] lies in the buffer of out and dout.
std::vector<size_t> out_positions(const Problem& p) {
  const Case& c = p.c;
  std::vector<size_t> pos;
  pos.reserve(static_cast<size_t>(c.b * c.hq * c.t * c.d));
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t t = 0; t < c.t; ++t)
        for (int64_t d = 0; d < c.d; ++d)
          pos.push_back(static_cast<size_t>(p.o_off + b * p.o.strides[0] + h * p.o.strides[1] +
                                            t * p.o.strides[2] + d * p.o.strides[3]));
  return pos;
}

std::vector<cuda::KernelSource> sources(const Kernels& k) {
  std::vector<cuda::KernelSource> out{{k.forward.name, k.forward.source}};
  for (const cuda::Launch& l : k.backward.launches) out.push_back({l.name, l.source});
  return out;
}

void launch(const cuda::Launch& l, const std::vector<char>& cubin, void** args,
            cuda::CUstream stream = nullptr) {
  cuda::Kernel kernel(cubin, l.name, l.shared_bytes);
  kernel.launch(l.grid, l.block, l.shared_bytes, stream, args);
}

// ---- host-side checks --------------------------------------------------------------------

TEST(CudaAttention, OperandsNeedUnitStrideAlongTheHeadDim) {
  const Shape s{2, 3, 5, 8};
  EXPECT_TRUE(cuda::attention_operand_ok({DType::kF32, s, contiguous_strides(s)}));
  EXPECT_TRUE(
      cuda::attention_operand_ok({DType::kF32, s, {5 * 3 * 3 * 8, 8, 3 * 3 * 8, 1}}));  // packed qkv view
  EXPECT_TRUE(cuda::attention_operand_ok({DType::kF32, s, {0, 0, 8, 1}}));              // broadcast
  EXPECT_FALSE(cuda::attention_operand_ok({DType::kF32, s, {120, 1, 24, 3}}));
  EXPECT_FALSE(cuda::attention_operand_ok({DType::kI32, s, contiguous_strides(s)}));
  EXPECT_FALSE(cuda::attention_operand_ok({DType::kF32, {2, 3, 40}, {120, 40, 1}}));
}

TEST(CudaAttention, LaunchGeometryAndScratch) {
  for (int64_t d : {1, 16, 64, 80, 128, 200, 256, 512}) {
    const Problem p = make_problem({3, 4, 2, 130, 257, d, true, false}, 1);
    const Kernels k = generate(p, "geom");
    EXPECT_LE(k.forward.shared_bytes, 227u * 1024) << d;
    EXPECT_EQ(k.forward.block[0], 128u);
    ASSERT_EQ(k.backward.launches.size(), 3u);
    for (const cuda::Launch& l : k.backward.launches) {
      EXPECT_LE(l.shared_bytes, 227u * 1024) << d << " " << l.name;
      EXPECT_NE(l.source.find("void __launch_bounds__(NT) " + l.name + "("), std::string::npos) << l.name;
    }
    EXPECT_EQ(k.backward.scratch_floats, 2 * 3 * 4 * 130);
  }
  // Small problems: one backward launch, no scratch, whole kv groups per block.
  const Kernels small = generate(make_problem({512, 4, 4, 8, 8, 16, true, false}, 1), "small");
  EXPECT_EQ(small.backward.launches.size(), 1u);
  EXPECT_EQ(small.backward.scratch_floats, 0);
  EXPECT_EQ(small.forward.block[0] % 32, 0u);
  // The TF32 path keeps the three launches.
  Case tc{2, 4, 2, 130, 257, 64, true, false};
  tc.tf32 = true;
  const Kernels tf = generate(make_problem(tc, 1), "tf32");
  EXPECT_EQ(tf.backward.launches.size(), 3u);
  EXPECT_NE(tf.forward.source.find("mma.sync"), std::string::npos);
}

TEST(CudaAttention, BadShapesAreRefused) {
  const Problem p = make_problem({1, 4, 2, 8, 8, 16, false, false}, 1);
  cuda::AttentionShape s = p.shape;
  s.kv_heads = 3;
  EXPECT_THROW(cuda::attention_kernel("x", s, p.q, p.k, p.v, p.o), Error);
  s = p.shape;
  s.t = 9;  // q's operand says 8
  EXPECT_THROW(cuda::attention_kernel("x", s, p.q, p.k, p.v, p.o), Error);
  s = p.shape;
  s.scale = 3e38;  // finite in double and f32, but scale·log2 e is not a finite f32
  EXPECT_THROW(cuda::attention_kernel("x", s, p.q, p.k, p.v, p.o), Error);
  EXPECT_THROW(cuda::attention_grad_kernels("x", s, p.q, p.k, p.v, p.o), Error);
  s.scale = 1e30;
  EXPECT_NO_THROW(cuda::attention_kernel("x", s, p.q, p.k, p.v, p.o));
  const Problem wide = make_problem({1, 1, 1, 2, 2, 520, false, false}, 1);
  EXPECT_THROW(cuda::attention_grad_kernels("x", wide.shape, wide.q, wide.k, wide.v, wide.o), Error);
  // out / dout: [B, Hq, T, D] f32 with unit stride along D.
  cuda::Operand o = p.o;
  o.shape = {1, 4, 8, 8};
  EXPECT_THROW(cuda::attention_kernel("x", p.shape, p.q, p.k, p.v, o), Error);
  o = p.o;
  o.strides = {512, 16, 64, 2};
  EXPECT_THROW(cuda::attention_kernel("x", p.shape, p.q, p.k, p.v, o), Error);
  EXPECT_THROW(cuda::attention_grad_kernels("x", p.shape, p.q, p.k, p.v, o), Error);
  o = p.o;
  o.dtype = DType::kI32;
  EXPECT_THROW(cuda::attention_grad_kernels("x", p.shape, p.q, p.k, p.v, o), Error);
  o = p.o;
  o.strides = {8 * 4 * 16, 16, 4 * 16, 1};  // [B, T, Hq, D] view
  EXPECT_NO_THROW(cuda::attention_kernel("x", p.shape, p.q, p.k, p.v, o));
  EXPECT_NO_THROW(cuda::attention_grad_kernels("x", p.shape, p.q, p.k, p.v, o));
}

TEST(CudaAttention, OutStridesAreBakedIn) {
  Case c{2, 4, 2, 130, 130, 64, true, false};
  c.layout = kPermutedOut;
  for (bool tf32 : {false, true}) {
    c.tf32 = tf32;
    const Kernels k = generate(make_problem(c, 1), "strides");
    EXPECT_NE(k.forward.source.find("O2 = 256LL"), std::string::npos);
    for (const cuda::Launch& l : k.backward.launches)
      EXPECT_NE(l.source.find("O1 = 64LL"), std::string::npos) << l.name;
  }
}

// ---- NVRTC: the generated sources compile ------------------------------------------------

TEST(CudaAttentionNvrtc, SourcesCompileForManyShapes) {
  std::string why;
  if (!have_nvrtc(why)) GTEST_SKIP() << why;
  const Case cases[] = {
      {2, 12, 12, 1024, 1024, 64, true, true},  // GPT-2
      {64, 6, 6, 256, 256, 64, true, true},     // char model
      {512, 4, 4, 8, 8, 16, true, false},       // tiny
      {2, 4, 2, 7, 130, 32, true, false},
      {1, 4, 1, 130, 7, 80, false, true},
      {1, 2, 2, 5, 9, 1, true, false},
      {1, 2, 1, 33, 65, 7, false, false},
      {1, 2, 2, 64, 64, 128, true, true},
      {1, 2, 1, 64, 130, 200, true, false},
      {1, 2, 2, 40, 40, 256, false, false},
      {1, 1, 1, 16, 16, 512, true, false},
      {2, 4, 2, 130, 257, 64, true, false, false, kPermutedOut},
      {3, 6, 3, 20, 33, 7, true, false, false, kPaddedOut},
      {3, 4, 2, 130, 257, 64, true, false, false, kDenseOut, true},
  };
  std::vector<cuda::KernelSource> all;
  int n = 0;
  for (bool tf32 : {false, true})
    for (Case c : cases) {
      c.tf32 = tf32;
      const Problem p = make_problem(c, 1);
      for (bool kept : {false, true}) {
        if (kept && !cuda::attention_keeps_stats(p.shape) && p.shape.t != p.shape.s) continue;
        const std::vector<cuda::KernelSource> s = sources(generate(p, "nvrtc" + std::to_string(n++), kept));
        all.insert(all.end(), s.begin(), s.end());
      }
    }
  const std::vector<std::vector<char>> cubins = cuda::compile_cubins(all, 9, 0);
  ASSERT_EQ(cubins.size(), all.size());
  for (size_t i = 0; i < cubins.size(); ++i) EXPECT_FALSE(cubins[i].empty()) << all[i].name;
}

// ---- GPU: against the host reference -----------------------------------------------------

/// Runs every case's forward and backward launches and compares with the reference; returns
/// how many runs failed (some output beyond `tol`).
int run_cases(const std::vector<Case>& cases, double tol, const char* label) {
  const cuda::DeviceInfo info = cuda::open_device(0);
  const cuda::Driver& drv = cuda::driver();
  std::vector<Problem> problems;
  std::vector<Kernels> kernels;
  std::vector<cuda::KernelSource> all;
  std::vector<size_t> first;  // index of each problem's forward cubin
  // Every case as the backward alone runs it, and again the training step's way: with the
  // statistics the forward kept where its path keeps them, and packed gradients where T = S.
  for (const Case& c : cases)
    for (bool kept : {false, true}) {
      const Problem p = make_problem(c, static_cast<unsigned>(problems.size() + 7));
      if (kept && !cuda::attention_keeps_stats(p.shape) && p.shape.t != p.shape.s) continue;
      problems.push_back(p);
      kernels.push_back(
          generate(problems.back(), std::string(label) + std::to_string(problems.size()), kept));
      const std::vector<cuda::KernelSource> s =
          sources(kernels.back());  // (label: no spaces, it names kernels)
      first.push_back(all.size());
      all.insert(all.end(), s.begin(), s.end());
    }
  const std::vector<std::vector<char>> cubins = cuda::compile_cubins(all, info.sm_major, info.sm_minor);

  int passed = 0;
  double worst = 0;
  for (size_t n = 0; n < problems.size(); ++n) {
    const Problem& p = problems[n];
    const Kernels& k = kernels[n];
    const int64_t nq = static_cast<int64_t>(p.dout.size());
    const int64_t ngrads = nq + 2 * p.c.b * p.c.hkv * p.c.s * p.c.d;
    const size_t no = static_cast<size_t>(p.o_size);
    cuda::DeviceMemory data(p.data.size() * 4), dout(no * 4), out(no * 4), mask(p.mask.size()),
        grads(static_cast<size_t>(ngrads) * 4),
        scratch(static_cast<size_t>(std::max<int64_t>(k.backward.scratch_floats, 1)) * 4);
    data.upload(p.data.data(), p.data.size() * 4);
    mask.upload(p.mask.data(), p.mask.size());
    // out and dout in their layout. dout's gaps are NaN (reading one poisons the gradients);
    // out's elements are NaN (every one must be written), its gaps a pattern that must survive.
    const std::vector<size_t> pos = out_positions(p);
    std::vector<float> dout_buf(no, NAN), out_init(no);
    for (size_t i = 0; i < no; ++i) out_init[i] = 1000.f + static_cast<float>(i % 13);
    for (size_t i = 0; i < pos.size(); ++i) dout_buf[pos[i]] = p.dout[i], out_init[pos[i]] = NAN;
    dout.upload(dout_buf.data(), no * 4);
    out.upload(out_init.data(), no * 4);
    const std::vector<float> nan_g(static_cast<size_t>(ngrads), NAN);
    grads.upload(nan_g.data(), nan_g.size() * 4);
    cuda::CUdeviceptr pq = data.get() + static_cast<cuda::CUdeviceptr>(p.q_off * 4),
                      pk = data.get() + static_cast<cuda::CUdeviceptr>(p.k_off * 4),
                      pv = data.get() + static_cast<cuda::CUdeviceptr>(p.v_off * 4),
                      po = out.get() + static_cast<cuda::CUdeviceptr>(p.o_off * 4),
                      pdo = dout.get() + static_cast<cuda::CUdeviceptr>(p.o_off * 4), pg = grads.get(),
                      ps = scratch.get(), pm = mask.get();
    // ps is a parameter of a forward that keeps statistics only; the key mask comes last.
    void* fwd_args[] = {&pq, &pk, &pv, &po, k.kept ? &ps : &pm, &pm};
    launch(k.forward, cubins[first[n]], fwd_args);
    void* bwd_args[] = {&pq, &pk, &pv, &pdo, &pg, &ps, &pm};
    void* delta_args[] = {&po, &pdo, &ps};
    for (size_t l = 0; l < k.backward.launches.size(); ++l)
      launch(k.backward.launches[l], cubins[first[n] + 1 + l],
             l == 0 && k.backward.delta_from_out ? delta_args : bwd_args);
    cuda::check(drv.cuCtxSynchronize(), "cuCtxSynchronize");
    std::vector<float> out_buf(no), got_out(static_cast<size_t>(nq)), got_grads(static_cast<size_t>(ngrads));
    out.download(out_buf.data(), no * 4);
    grads.download(got_grads.data(), got_grads.size() * 4);
    if (k.kept || k.packed) got_grads = grads_to_bhtd(got_grads, p.c, k.packed);
    for (size_t i = 0; i < pos.size(); ++i) got_out[i] = out_buf[pos[i]], out_buf[pos[i]] = out_init[pos[i]];
    int64_t gaps_touched = 0;  // out_buf now equals out_init unless a gap was written
    for (size_t i = 0; i < no; ++i) gaps_touched += !(out_buf[i] == out_init[i]) && !std::isnan(out_init[i]);
    EXPECT_EQ(gaps_touched, 0) << describe(p.c) << ": writes outside the out view";

    const Reference ref = reference(p);
    const size_t q_end = static_cast<size_t>(nq), k_end = q_end + static_cast<size_t>((ngrads - nq) / 2);
    const Error2 e[4] = {compare(got_out, ref.out, 0, q_end), compare(got_grads, ref.grads, 0, q_end),
                         compare(got_grads, ref.grads, q_end, k_end),
                         compare(got_grads, ref.grads, k_end, static_cast<size_t>(ngrads))};
    const char* what[4] = {"out", "dq", "dk", "dv"};
    bool ok = gaps_touched == 0;
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(e[i].nonfinite, 0) << describe(p.c) << ": " << what[i];
      EXPECT_LE(e[i].rel, tol) << describe(p.c) << ": " << what[i];
      ok = ok && e[i].nonfinite == 0 && e[i].rel <= tol;
      worst = std::max(worst, e[i].rel);
    }
    passed += ok;
    std::printf("%-64s rel err out %.1e dq %.1e dk %.1e dv %.1e (%zu bwd launches%s)\n",
                describe(p.c).c_str(), e[0].rel, e[1].rel, e[2].rel, e[3].rel, k.backward.launches.size(),
                k.packed ? ", forward's statistics, packed"
                : k.kept ? ", forward's statistics"
                         : "");
  }
  std::printf("%s: %d of %zu runs within %.0e (worst %.2e)\n", label, passed, problems.size(), tol, worst);
  return static_cast<int>(problems.size()) - passed;
}

const std::vector<Case>& tiled_cases() {
  static const std::vector<Case> cases = {
      {2, 4, 2, 64, 128, 64, true, false},   {2, 4, 2, 130, 256, 64, true, false},
      {1, 4, 2, 256, 130, 64, false, false}, {2, 4, 4, 256, 256, 64, false, true},
      {1, 4, 2, 1, 130, 16, true, false},    {1, 4, 2, 7, 130, 16, true, false},
      {2, 4, 2, 130, 7, 16, false, false},   {3, 4, 2, 96, 96, 16, true, true},
      {1, 4, 2, 256, 256, 80, true, false},  {1, 4, 2, 70, 130, 80, false, false},
      {2, 4, 1, 77, 77, 80, true, true},     {1, 4, 2, 1, 256, 80, true, false},
      {1, 2, 2, 130, 130, 32, false, true},  {1, 2, 1, 33, 65, 7, true, false},
      {1, 2, 2, 64, 130, 128, true, false},  {1, 2, 1, 70, 70, 200, true, true},
      {1, 2, 2, 40, 80, 256, false, false},  {1, 1, 1, 20, 80, 512, true, false},
      {1, 4, 2, 7, 80, 64, false, false},    {2, 4, 2, 80, 7, 64, false, false},
      {2, 6, 6, 256, 256, 64, true, true},
  };
  return cases;
}

// The small-problem path (T, S ≤ 64, D ≤ 64; backward D ≤ 32): whole kv groups per block.
const std::vector<Case>& small_cases() {
  static const std::vector<Case> cases = {
      {2, 4, 2, 64, 64, 64, true, true},   {1, 4, 2, 1, 1, 16, true, false},
      {3, 4, 2, 64, 64, 16, true, true},   {2, 4, 1, 7, 7, 80, true, true},
      {1, 4, 2, 7, 64, 64, false, false},  {2, 4, 2, 64, 7, 64, false, true},
      {37, 4, 4, 8, 8, 16, true, false},   {600, 4, 4, 8, 8, 16, true, true},
      {5, 8, 2, 5, 13, 16, true, false},   {3, 6, 3, 20, 33, 7, true, false},
      {2, 16, 1, 16, 16, 32, true, false}, {4, 2, 2, 13, 9, 1, false, false},
      {2, 4, 2, 33, 33, 32, true, true},   {9, 3, 1, 12, 40, 24, true, false},
      {2, 4, 2, 64, 64, 32, false, true},
  };
  return cases;
}

TEST(CudaAttentionGpu, ForwardAndBackwardMatchTheReference) {
  const std::string why = cuda::unavailable_reason(0);
  if (!why.empty()) GTEST_SKIP() << "no usable GPU, GPU tests skipped: " << why;
  const std::vector<Case>& cases = tiled_cases();
  EXPECT_EQ(run_cases(cases, 1e-4, "fp32_tiled"), 0);
}

TEST(CudaAttentionGpu, SmallProblemsMatchTheReference) {
  const std::string why = cuda::unavailable_reason(0);
  if (!why.empty()) GTEST_SKIP() << "no usable GPU, GPU tests skipped: " << why;
  const std::vector<Case>& cases = small_cases();
  EXPECT_EQ(run_cases(cases, 1e-4, "small"), 0);
  // With the TF32 flag: the small path stays exact, the larger heads go to tensor cores.
  std::vector<Case> tf = small_cases();
  for (Case& c : tf) c.tf32 = true;
  EXPECT_EQ(run_cases(tf, 2e-3, "small_tf32"), 0);
}

// Key masks on every tiled and tensor-core kernel: the tiled cases with three sequences each
// (random keys, a prefix, none; see make_problem), and short ones, which a mask keeps off the
// small path.
TEST(CudaAttentionGpu, KeyMaskMatchesTheReference) {
  const std::string why = cuda::unavailable_reason(0);
  if (!why.empty()) GTEST_SKIP() << "no usable GPU, GPU tests skipped: " << why;
  std::vector<Case> cases = tiled_cases();
  for (const size_t i : {size_t{0}, size_t{3}, size_t{7}}) cases.push_back(small_cases().at(i));
  for (Case& c : cases) c.b = 3, c.masked = true;
  EXPECT_EQ(run_cases(cases, 1e-4, "masked_fp32"), 0);
  for (Case& c : cases) c.tf32 = true;
  EXPECT_EQ(run_cases(cases, 2e-3, "masked_tf32"), 0);
}

TEST(CudaAttentionGpu, Tf32MatchesTheReferenceLoosely) {
  const std::string why = cuda::unavailable_reason(0);
  if (!why.empty()) GTEST_SKIP() << "no usable GPU, GPU tests skipped: " << why;
  std::vector<Case> cases = tiled_cases();
  for (Case& c : cases) c.tf32 = true;
  EXPECT_EQ(run_cases(cases, 2e-3, "tf32"), 0);
}

// out / dout as strided views, in every path: the cases of `base` numbered in `pick`, each
// with a permuted [B, T, Hq, D] layout and with a padded one.
std::vector<Case> with_out_layouts(const std::vector<Case>& base, std::initializer_list<size_t> pick,
                                   bool tf32) {
  std::vector<Case> out;
  for (size_t i : pick)
    for (int layout : {kPermutedOut, kPaddedOut}) {
      Case c = base.at(i);
      c.layout = layout;
      c.tf32 = tf32;
      out.push_back(c);
    }
  return out;
}

TEST(CudaAttentionGpu, StridedOutputMatchesTheReference) {
  const std::string why = cuda::unavailable_reason(0);
  if (!why.empty()) GTEST_SKIP() << "no usable GPU, GPU tests skipped: " << why;
  // Tiled: multi-tile causal GQA, T > S, D 16 with one query, odd D (7, 80), D 200, packed q/k/v.
  const std::vector<Case> tiled = with_out_layouts(tiled_cases(), {1, 2, 4, 10, 13, 15, 20}, false);
  EXPECT_EQ(run_cases(tiled, 1e-4, "strided_fp32"), 0);
  const std::vector<Case> tf = with_out_layouts(tiled_cases(), {1, 2, 4, 10, 13, 20}, true);
  EXPECT_EQ(run_cases(tf, 2e-3, "strided_tf32"), 0);
  // Small: D 64 (forward only small), 16 with many groups, 7, 1, 32 with 16 heads per kv head, 24.
  const std::vector<Case> small = with_out_layouts(small_cases(), {0, 7, 9, 10, 11, 13}, false);
  EXPECT_EQ(run_cases(small, 1e-4, "strided_small"), 0);
}

// ---- GPU: timing of the benchmark shapes (printed, not asserted) -------------------------

struct Timing {
  double fwd = 0, bwd = 0;
  std::vector<double> parts;  // per backward launch
};

/// Average time of the forward and of the backward launches, q/k/v views of a packed
/// [B, T, 3, H, D] buffer as a fused qkv projection leaves them; out and dout dense, or with
/// `permuted_out` views of a [B, T, H, D] buffer.
Timing time_shape(int64_t B, int64_t H, int64_t T, int64_t D, bool causal, bool tf32, const std::string& tag,
                  int reps, bool permuted_out = false, bool kept = false, const std::string& tiles = "") {
  const cuda::DeviceInfo info = cuda::open_device(0);
  const cuda::Driver& drv = cuda::driver();
  const std::vector<int64_t> st{T * 3 * H * D, D, 3 * H * D, 1};
  const cuda::Operand op{DType::kF32, {B, H, T, D}, st};
  cuda::AttentionShape shape{B, H, H, T, T, D, 1.0 / std::sqrt(static_cast<double>(D)), causal, tf32};
  shape.sm_count = info.sm_count;
  shape.tiles = tiles;
  cuda::Operand o{DType::kF32, {B, H, T, D}, contiguous_strides({B, H, T, D})};
  if (permuted_out) o.strides = {T * H * D, D, H * D, 1};
  kept = kept && cuda::attention_keeps_stats(shape);
  const cuda::Launch fwd = cuda::attention_kernel("time_fwd_" + tag, shape, op, op, op, o, kept);
  cuda::AttentionShape bwd_shape = shape;
  bwd_shape.grads_bthd = kept;
  const cuda::AttentionGradPlan bwd =
      cuda::attention_grad_kernels("time_bwd_" + tag, bwd_shape, op, op, op, o, kept ? &o : nullptr);
  std::vector<cuda::KernelSource> src{{fwd.name, fwd.source}};
  for (const cuda::Launch& l : bwd.launches) src.push_back({l.name, l.source});
  const std::vector<std::vector<char>> cubins = cuda::compile_cubins(src, info.sm_major, info.sm_minor);
  std::vector<const cuda::Launch*> launches{&fwd};
  for (const cuda::Launch& l : bwd.launches) launches.push_back(&l);
  std::vector<cuda::Kernel> k;
  for (size_t i = 0; i < launches.size(); ++i)
    k.emplace_back(cubins[i], launches[i]->name, launches[i]->shared_bytes);

  const int64_t n = B * T * 3 * H * D, nq = B * H * T * D;
  std::vector<float> host(static_cast<size_t>(n));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& x : host) x = normal(rng);
  cuda::DeviceMemory qkv(static_cast<size_t>(n) * 4), dout(static_cast<size_t>(nq) * 4),
      out(static_cast<size_t>(nq) * 4), grads(static_cast<size_t>(3 * nq) * 4),
      scratch(static_cast<size_t>(std::max<int64_t>(bwd.scratch_floats, 1)) * 4);
  qkv.upload(host.data(), static_cast<size_t>(n) * 4);
  dout.upload(host.data(), static_cast<size_t>(nq) * 4);
  cuda::CUdeviceptr pq = qkv.get(), pk = pq + static_cast<cuda::CUdeviceptr>(H * D * 4),
                    pv = pq + static_cast<cuda::CUdeviceptr>(2 * H * D * 4), po = out.get(), pdo = dout.get(),
                    pg = grads.get(), ps = scratch.get();
  void* fwd_args[] = {&pq, &pk, &pv, &po, &ps};
  void* bwd_args[] = {&pq, &pk, &pv, &pdo, &pg, &ps};
  void* delta_args[] = {&po, &pdo, &ps};
  const size_t nl = launches.size();
  std::vector<cuda::CUevent> ev(nl + 1);
  for (cuda::CUevent& e : ev) cuda::check(drv.cuEventCreate(&e, 0), "cuEventCreate");
  std::vector<double> ms(nl, 0.0);
  for (int rep = -1; rep < reps; ++rep) {  // rep −1 warms up
    cuda::check(drv.cuEventRecord(ev[0], nullptr), "cuEventRecord");
    for (size_t i = 0; i < nl; ++i) {
      void** args = i == 0 ? fwd_args : i == 1 && bwd.delta_from_out ? delta_args : bwd_args;
      k[i].launch(launches[i]->grid, launches[i]->block, launches[i]->shared_bytes, nullptr, args);
      cuda::check(drv.cuEventRecord(ev[i + 1], nullptr), "cuEventRecord");
    }
    cuda::check(drv.cuEventSynchronize(ev[nl]), "cuEventSynchronize");
    for (size_t i = 0; rep >= 0 && i < nl; ++i) {
      float t = 0;
      cuda::check(drv.cuEventElapsedTime(&t, ev[i], ev[i + 1]), "cuEventElapsedTime");
      ms[i] += t / reps;
    }
  }
  for (cuda::CUevent& e : ev) drv.cuEventDestroy(e);
  Timing r;
  r.fwd = ms[0];
  for (size_t i = 1; i < nl; ++i) r.bwd += ms[i], r.parts.push_back(ms[i]);
  return r;
}

struct BenchShape {
  const char* name;
  int64_t b, h, t, d;
  int reps;
};
const BenchShape kBench[] = {
    {"GPT-2", 16, 12, 1024, 64, 10},
    {"char", 64, 6, 256, 64, 20},
    {"tiny", 512, 4, 8, 16, 50},
};

TEST(CudaAttentionGpu, BenchmarkShapesTiming) {
  const std::string why = cuda::unavailable_reason(0);
  if (!why.empty()) GTEST_SKIP() << "no usable GPU, GPU tests skipped: " << why;
  const cuda::DeviceInfo info = cuda::open_device(0);
  std::printf(
      "attention timing on %s (causal, packed qkv views; out/dout dense, then [B,T,H,D] views with the\n"
      "backward reading the forward's statistics, as a training step runs it):\n",
      info.name.c_str());
  for (bool permuted : {false, true})
    for (const BenchShape& b : kBench)
      for (bool tf32 : {false, true}) {
        const std::string tag = std::string(b.name == kBench[0].name   ? "g"
                                            : b.name == kBench[1].name ? "c"
                                                                       : "t") +
                                (tf32 ? "32" : "fp") + (permuted ? "p" : "");
        const Timing t = time_shape(b.b, b.h, b.t, b.d, true, tf32, tag, b.reps, permuted, permuted);
        const double flops = 4.0 * b.b * b.h * b.t * b.t * b.d / 2;
        std::printf(
            "  %-5s B=%lld H=%lld T=S=%lld D=%lld %s%s: forward %8.4f ms (%5.1f TFLOP/s)  backward %8.4f ms "
            "(",
            b.name, static_cast<long long>(b.b), static_cast<long long>(b.h), static_cast<long long>(b.t),
            static_cast<long long>(b.d), tf32 ? "tf32" : "fp32", permuted ? " out[B,T,H,D]" : "", t.fwd,
            flops / t.fwd * 1e-9, t.bwd);
        for (size_t i = 0; i < t.parts.size(); ++i) std::printf("%s%.4f", i ? " + " : "", t.parts[i]);
        std::printf(")\n");
      }
}

// Tile sweep (tuning aid): TG_ATTN_SWEEP=1 times tile overrides on the GPT-2 and char shapes.
TEST(CudaAttentionGpu, TileSweep) {
  const std::string why = cuda::unavailable_reason(0);
  if (!why.empty()) GTEST_SKIP() << "no usable GPU, GPU tests skipped: " << why;
  if (!std::getenv("TG_ATTN_SWEEP")) GTEST_SKIP() << "set TG_ATTN_SWEEP=1 to run the tile sweep";
  // Per path: the label and kernel-name prefix, and its tile configurations (AttentionShape::tiles).
  struct Sweep {
    const char* label;
    const char* prefix;
    bool tf32;
    std::vector<const char*> cfgs;
  };
  const Sweep sweeps[] = {
      {"fp32",
       "swf",
       false,
       {"f:4,4,4;k:8,4,4;q:8,4,4", "f:4,2,4;k:4,4,4;q:4,4,4", "f:2,4,4;k:8,2,4;q:8,2,4",
        "f:8,2,4;k:4,2,4;q:4,2,4", "f:4,4,8;k:8,4,8;q:8,4,8", "f:4,2,8;k:4,4,8;q:4,4,8",
        "f:8,1,4;k:16,1,4;q:16,1,4", "f:2,2,4;k:2,4,4;q:2,4,4"}},
      {"tf32",
       "swm",
       true,
       {"f:8,32;k:8,64;q:4,32", "f:4,64;k:4,32;q:4,32", "f:4,32;k:4,64;q:4,64", "f:8,64;k:8,32;q:8,32",
        "f:2,64;k:2,32;q:2,32", "f:8,32;k:8,64;q:8,64", "f:4,128;k:2,64;q:2,64", "f:8,32;k:4,64;q:8,32",
        "f:8,32;k:16,32;q:8,64", "f:8,32;k:8,32;q:2,64", "f:16,32;k:4,32;q:16,32"}}};
  int n = 0;
  for (const BenchShape& b : kBench) {
    if (b.t < 256) continue;
    for (const Sweep& sw : sweeps) {
      for (const char* cfg : sw.cfgs) {
        // As a training step runs it: out in [B, T, H, D], the backward reading the forward's statistics.
        const Timing t = time_shape(b.b, b.h, b.t, b.d, true, sw.tf32, sw.prefix + std::to_string(n++), 5,
                                    true, true, cfg);
        std::printf("  sweep %-5s %s %-28s fwd %.4f  bwd %.4f (", b.name, sw.label, cfg, t.fwd, t.bwd);
        for (size_t i = 0; i < t.parts.size(); ++i) std::printf("%s%.4f", i ? " + " : "", t.parts[i]);
        std::printf(")\n");
      }
    }
  }
}

}  // namespace
