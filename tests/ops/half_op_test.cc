// Mixed precision op by op: every op that reads bf16 or f16 (casts, shape ops, matmul,
// grouped_matmul, attention, convolutions), traced under Precision::kBf16's and kF16's
// policy, on each backend against the double-precision reference running the same graph.
// Every row runs in both types ("bf16_…" and "f16_…"); below, "bf16" stands for either, with
// u = 2^-8 for bf16 (8 significant bits) and 2^-11 for f16 (11).
//
// The casts to bf16 round identically everywhere (round to nearest even), so backend and
// reference multiply the same bf16 operands; what is left is how each accumulates. The
// tolerance table says how far each op may then differ, and why:
//
//   op (backend)              rel     abs     why
//   cast, shape ops           0       0       rounding is exact and specified; copies are copies
//   matmul (cpu)              1e-5    1e-6    f32 accumulation of exact bf16 products, any order
//   matmul (cuda)             1e-5    1e-6    the same on the tensor cores (f32 accumulate)
//   grouped_matmul            1e-5    1e-6    as matmul (CUDA: tensor cores for bf16 and f16)
//   conv2d (cpu, cuda)        1e-5    1e-6    as matmul (CUDA: tf32 tensor cores, exact for
//                                               bf16 and f16)
//   attention (cpu)           1e-5    1e-6    f32 softmax and f32 products of bf16 q, k, v
//   attention (cuda)          the bf16 rounding bound below
//   gradients                 as the forward, with an absolute floor of 1e-5 (the f32
//                             gradient is summed in a different order on each backend)
//
// Attention on cuda (flash attention on the tensor cores, as FlashAttention-2) rounds the
// probabilities P and dS = P ∘ (dP − delta) to bf16 once for their products with v, dout, q
// and k. Rounding to bf16 (to nearest) errs by at most u relative,
// so each term P·x of a sum errs by at most u·|P·x|; with P, dS the exact values (computed
// here in double from the bf16 operands, dout = w rounded to bf16, scale s) the differences
// from ref are bounded elementwise by
//   out[t]    u · Σ_j P_tj |v_j|            =: u·A[t]  (≤ u · max|v|: each row of P sums to 1)
//   dv[j]     u · Σ_t P_tj |dout_t|
//   dk[j]     u · s · Σ_t F_tj |q_t|        F_tj = |dS_tj| + P_tj · Σ_d |dout_td|·A_td, the
//   dq[t]     u · s · Σ_j F_tj |k_j|        second term the error delta = Σ_d dout·out inherits
//                                           from the forward's output
// (terms in u² dropped). The rest is f32 arithmetic: score sums of D products, exp2, sums of
// S or T terms, each relative error under 1% of u at these sizes, so the check is
// |cuda − ref| ≤ 1.1·bound + 1e-6, elementwise. The rows with T, S ≤ 64 take the exact f32
// short-sequence kernels on cuda and land far inside the bound; the longer ones take the bf16
// tensor-core kernels. Each cuda attention row prints its largest error and error / allowed.
//
// A second check measures the policy itself: the bf16 program's output and gradients on ref
// against the f32 program's, normwise within 2u (a few roundings of O(1) values).
#include <gtest/gtest.h>

#include <optional>

#include "ops/op_harness.h"
#include "test_util.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/functional.h"

namespace tg::op_test {
namespace {

/// An attention row's cuda check: within the bound of the table (attention(x0, x1, x2) with
/// the default scale; with `masked` x3 is the key mask, bool [B, S]).
struct Flash {
  bool causal;
  bool masked = false;
};

struct HalfCase {
  std::string name;
  DType half;  // the operands' type under the policy: bf16 or f16
  std::vector<InputSpec> inputs;
  BuildFn build;
  Tol cpu;
  Tol cuda;                         // rows without `flash`
  std::optional<Flash> flash = {};  // attention rows: the bound on cuda instead of `cuda`
};
void PrintTo(const HalfCase& c, std::ostream* os) { *os << c.name; }

constexpr Tol kProduct{1e-5, 1e-6};

/// grouped_matmul's offsets as an i32 constant.
Tensor expert_offsets(std::initializer_list<int32_t> o) {
  const std::vector<int32_t> v(o);
  return constant(std::span<const int32_t>(v), {static_cast<int64_t>(v.size())});
}

HalfCase flash_case(std::string name, DType half, Shape q, Shape kv, bool causal, bool masked = false) {
  std::vector<InputSpec> in{uni(q), uni(kv), uni(kv)};
  if (masked) in.push_back(bools({kv[0], kv[2]}));
  return {std::move(name),
          half,
          std::move(in),
          [causal, masked](const Ts& x) {
            return attention(x[0], x[1], x[2],
                             {.causal = causal, .key_mask = masked ? std::optional(x[3]) : std::nullopt});
          },
          kProduct,
          kExact,
          Flash{causal, masked}};
}

/// The table's rows with `half` operands (names prefixed with the type).
std::vector<HalfCase> cases(DType half) {
  std::vector<HalfCase> rows{
      {"matmul",
       half,
       {uni({5, 7}), uni({7, 3})},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kProduct,
       kProduct},
      {"matmul_long_k",
       half,
       {uni({9, 300}), uni({300, 11})},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kProduct,
       kProduct},
      {"matmul_weight_broadcast",
       half,
       {uni({2, 5, 16}), uni({16, 8})},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kProduct,
       kProduct},
      {"matmul_batched",
       half,
       {uni({2, 3, 5, 6}), uni({2, 3, 6, 4})},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kProduct,
       kProduct},
      {"matmul_transposed",
       half,
       {uni({6, 5}), uni({4, 6})},
       [](const Ts& x) { return matmul(transpose(x[0], 0, 1), transpose(x[1], 0, 1)); },
       kProduct,
       kProduct},
      {"matmul_vector",
       half,
       {uni({7}), uni({7, 3})},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kProduct,
       kProduct},
      {"linear_bias_gelu",
       half,
       {uni({4, 6, 32}), uni({32, 48}), uni({48})},
       [](const Ts& x) { return gelu(matmul(x[0], x[1]) + x[2]); },
       kProduct,
       kProduct},
      // grouped_matmul reads bf16 like a product: an empty expert, a segment across the CUDA
      // tiles, and a decode-sized call (two rows: the gemv kernels).
      {"grouped_matmul",
       half,
       {uni({7, 24}), uni({3, 10, 24})},
       [](const Ts& x) {
         return grouped_matmul(x[0], x[1], expert_offsets({0, 2, 2, 7}), true);
       },
       kProduct,
       kProduct},
      {"grouped_matmul_tiles",
       half,
       {uni({130, 40}), uni({3, 40, 70})},
       [](const Ts& x) {
         return grouped_matmul(x[0], x[1], expert_offsets({0, 65, 66, 130}));
       },
       kProduct,
       kProduct},
      {"grouped_matmul_decode",
       half,
       {uni({2, 64}), uni({4, 48, 64})},
       [](const Ts& x) {
         return grouped_matmul(x[0], x[1], expert_offsets({0, 0, 1, 1, 2}), true);
       },
       kProduct,
       kProduct},
      // conv2d reads bf16 like a product: exact products (bf16 values are exact in the tf32 the
      // CUDA tensor cores take), f32 sums.
      {"conv2d",
       half,
       {uni({2, 3, 7, 6}), uni({4, 3, 3, 3})},
       [](const Ts& x) { return conv2d(x[0], x[1], Tensor(), {.padding = 1}); },
       kProduct,
       kProduct},
      {"conv2d_strided_grouped",
       half,
       {uni({3, 4, 9, 9}), uni({6, 2, 3, 3})},
       [](const Ts& x) { return conv2d(x[0], x[1], Tensor(), {.stride = 2, .groups = 2}); },
       kProduct,
       kProduct},
      // The shapes below take CUDA's shared-memory tile kernels in every direction (the input's
      // gradient only at stride 1): dilation and a rectangular kernel; images split into bands of
      // rows; channels in several chunks, output channels over two tiles and the weight gradient
      // over three column tiles; depthwise groups. Sums of hundreds of terms: kLargeSum.
      {"conv2d_dilated_rect",
       half,
       {uni({2, 3, 11, 10}), uni({5, 3, 3, 2})},
       [](const Ts& x) {
         return conv2d(x[0], x[1], Tensor(), {.padding = {2, 1}, .dilation = {2, 1}});
       },
       kProduct,
       kProduct},
      {"conv2d_bands",
       half,
       {uni({1, 2, 40, 40}), uni({3, 2, 5, 5})},
       [](const Ts& x) { return conv2d(x[0], x[1], Tensor(), {.padding = 2}); },
       kLargeSum,
       kLargeSum},
      {"conv2d_channel_chunks",
       half,
       {uni({1, 96, 6, 6}), uni({80, 96, 3, 3})},
       [](const Ts& x) { return conv2d(x[0], x[1], Tensor(), {.padding = 1}); },
       kLargeSum,
       kLargeSum},
      {"conv2d_depthwise",
       half,
       {uni({2, 4, 8, 8}), uni({4, 1, 3, 3})},
       [](const Ts& x) { return conv2d(x[0], x[1], Tensor(), {.padding = 1, .groups = 4}); },
       kProduct,
       kProduct},
      // conv_transpose2d is conv2d's input gradient as a forward op (tiles at stride 1 on CUDA).
      {"conv_transpose2d",
       half,
       {uni({2, 4, 5, 5}), uni({4, 3, 3, 3})},
       [](const Ts& x) { return conv_transpose2d(x[0], x[1], Tensor(), {.padding = 1}); },
       kProduct,
       kProduct},
      {"conv_transpose2d_stride2",
       half,
       {uni({2, 4, 5, 5}), uni({4, 3, 3, 3})},
       [](const Ts& x) {
         return conv_transpose2d(x[0], x[1], Tensor(), {.stride = 2, .padding = 1, .output_padding = 1});
       },
       kProduct,
       kProduct},
      {"linear_residual",
       half,
       {uni({24, 64}), uni({64, 64}), uni({24, 64})},
       [](const Ts& x) { return x[2] + matmul(x[0], x[1]); },
       kProduct,
       kProduct},
      flash_case("attention_causal", half, {2, 2, 9, 16}, {2, 2, 9, 16}, true),
      flash_case("attention_gqa", half, {1, 4, 7, 8}, {1, 2, 7, 8}, true),
      flash_case("attention_cross", half, {2, 2, 5, 16}, {2, 2, 12, 16}, false),
      flash_case("attention_long", half, {1, 2, 130, 64}, {1, 2, 130, 64}, true),
      // The tensor-core kernels on grouped queries, fewer queries than keys (causal: query t
      // sees keys j ≤ t + S − T) and partial tiles.
      flash_case("attention_long_gqa_cross", half, {1, 4, 70, 32}, {1, 2, 100, 32}, true),
      // A random key mask (bool [B, S]) on the tensor-core kernels: hidden keys inside and across
      // tiles, and causal queries left with no key (out 0, no gradient).
      flash_case("attention_long_key_mask", half, {2, 4, 70, 32}, {2, 2, 100, 32}, true, true),
      {"cast_round_trip",
       half,
       {uni({3, 37}, -300, 300)},
       [half](const Ts& x) { return cast(cast(x[0], half), DType::kF32); },
       kExact,
       kExact},
      {"shape_ops",
       half,
       {uni({4, 6}), uni({4, 2})},
       [half](const Ts& x) {
         Tensor a = cast(x[0], half), b = cast(x[1], half);
         Tensor c = concat({slice(permute(a, {1, 0}), 0, 1, 5), transpose(b, 0, 1)}, 0);  // [6, 4]
         Tensor d = broadcast_to(reshape(c, {1, 24}), {3, 24});
         return cast(d, DType::kF32) * 2.0;
       },
       kExact,
       kExact},
  };
  for (HalfCase& row : rows) row.name = std::string(dtype_name(half)) + "_" + row.name;
  return rows;
}

std::vector<HalfCase> all_cases() {
  std::vector<HalfCase> rows = cases(DType::kBF16), f16 = cases(DType::kF16);
  rows.insert(rows.end(), f16.begin(), f16.end());
  return rows;
}

class HalfOp : public ::testing::TestWithParam<HalfCase> {};

/// Output and gradients (of sum(y·w) for fixed w) of a case traced with its half type or in
/// f32; `operands`, when given, receives the inputs' values and then w.
std::vector<std::vector<double>> run_case(backend::Backend& be, const HalfCase& row, bool half,
                                          std::vector<std::vector<double>>* operands = nullptr) {
  return run_weighted(be, seed_of(row.name), row.inputs, row.build, half ? row.half : DType::kF32, 0xbf16ull,
                      true, operands);
}

TEST_P(HalfOp, PolicyCastsTheOperands) {
  const HalfCase& row = GetParam();
  const Traced t = trace_fn(row.inputs, row.build, false, row.half);
  int half_values = 0, other = 0;
  for (const ir::Node& n : t.graph.nodes()) {
    half_values += n.dtype == row.half;
    other += is_half(n.dtype) && n.dtype != row.half;
  }
  EXPECT_GT(half_values, 0) << t.graph.to_string();
  EXPECT_EQ(other, 0) << t.graph.to_string();
}

TEST_P(HalfOp, CpuMatchesRef) {
  const HalfCase& row = GetParam();
  auto ref = backend::make_ref_backend();
  auto cpu = backend::make_cpu_backend();
  const auto want = run_case(*ref, row, true);
  const auto got = run_case(*cpu, row, true);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(all_close(got[0], want[0], row.cpu)) << "forward";
  const Tol grad_tol{std::max(row.cpu.rel, 1e-5), std::max(row.cpu.abs, 1e-5)};
  for (size_t i = 1; i < want.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], grad_tol)) << "gradient " << i;
}

/// The table's elementwise bounds on |cuda − ref| for an attention row: out, dq, dk, dv (the
/// order run_case returns them in), from q, k, v and w (`x`, rounded to the row's type here as
/// the kernels read them).
std::vector<std::vector<double>> flash_bound(const HalfCase& row, std::vector<std::vector<double>> x) {
  const double u = row.half == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
  const Shape &qs = row.inputs[0].shape, &ks = row.inputs[1].shape;
  const int64_t nb = qs[0], hq = qs[1], nt = qs[2], nd = qs[3], hkv = ks[1], ns = ks[2];
  for (std::vector<double>& values : x)
    for (double& e : values) e = round_to(row.half, e);
  const std::vector<double>&q = x[0], &k = x[1], &v = x[2], &g = x.back();  // x[3]: the key mask, if any
  const double scale = 1 / std::sqrt(static_cast<double>(nd));
  std::vector<double> bo(q.size()), bq(q.size()), bk(k.size()), bv(v.size()), p(ns), f(ns), o(nd), a(nd);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t t = 0; t < nt; ++t) {
        const int64_t qr = ((b * hq + h) * nt + t) * nd, k0 = (b * hkv + h / (hq / hkv)) * ns * nd;
        const int64_t seen = row.flash->causal ? std::clamp<int64_t>(t + ns - nt + 1, 0, ns) : ns;
        if (seen == 0) continue;
        double m = -HUGE_VAL, l = 0, delta = 0, e = 0;
        for (int64_t j = 0; j < seen; ++j) {
          p[j] = 0;
          for (int64_t d = 0; d < nd; ++d) p[j] += scale * q[qr + d] * k[k0 + j * nd + d];
          if (row.flash->masked && x[3][static_cast<size_t>(b * ns + j)] == 0) p[j] = -HUGE_VAL;
          m = std::max(m, p[j]);
        }
        if (m == -HUGE_VAL) continue;  // no key left: 0 out, no gradient
        for (int64_t j = 0; j < seen; ++j) l += (p[j] = std::exp(p[j] - m));
        std::fill(o.begin(), o.end(), 0.0);
        std::fill(a.begin(), a.end(), 0.0);
        for (int64_t j = 0; j < seen; ++j)
          for (int64_t d = 0; d < nd; ++d) {
            o[d] += p[j] / l * v[k0 + j * nd + d];
            a[d] += p[j] / l * std::abs(v[k0 + j * nd + d]);
          }
        for (int64_t d = 0; d < nd; ++d) {
          bo[qr + d] = u * a[d];
          delta += g[qr + d] * o[d];
          e += std::abs(g[qr + d]) * a[d];
        }
        for (int64_t j = 0; j < seen; ++j) {
          const double pj = p[j] / l;
          double dp = 0;
          for (int64_t d = 0; d < nd; ++d) dp += g[qr + d] * v[k0 + j * nd + d];
          f[j] = std::abs(pj * (dp - delta)) + pj * e;
          for (int64_t d = 0; d < nd; ++d) {
            bq[qr + d] += u * scale * f[j] * std::abs(k[k0 + j * nd + d]);
            bk[k0 + j * nd + d] += u * scale * f[j] * std::abs(q[qr + d]);
            bv[k0 + j * nd + d] += u * pj * std::abs(g[qr + d]);
          }
        }
      }
  return {bo, bq, bk, bv};
}

/// |got − want| ≤ allowed = 1.1·bound + 1e-6 elementwise (see the table); prints the largest
/// error and the largest error / allowed.
::testing::AssertionResult within_bound(const std::vector<double>& got, const std::vector<double>& want,
                                        const std::vector<double>& bound, const std::string& what) {
  if (got.size() != want.size() || bound.size() != want.size())
    return ::testing::AssertionFailure() << what << ": sizes differ";
  double worst = 0, ratio = 0;
  int failures = 0;
  std::ostringstream bad;
  bad.precision(9);
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]), allowed = 1.1 * bound[i] + 1e-6;
    worst = std::max(worst, err);
    ratio = std::max(ratio, err / allowed);
    if (!(err <= allowed) && ++failures <= 6)
      bad << "\n  [" << i << "] got " << got[i] << ", expected " << want[i] << " (bound " << bound[i] << ")";
  }
  std::printf("  %s: max |cuda - ref| %.3g, max |cuda - ref| / allowed %.3g\n", what.c_str(), worst, ratio);
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << failures << " of " << got.size() << " beyond the bound" << bad.str();
}

TEST_P(HalfOp, CudaMatchesRef) {
  if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const HalfCase& row = GetParam();
  auto ref = backend::make_ref_backend();
  auto gpu = backend::make_cuda_backend(0);
  std::vector<std::vector<double>> operands;
  const auto want = run_case(*ref, row, true, &operands);
  const auto got = run_case(*gpu, row, true);
  ASSERT_EQ(got.size(), want.size());
  if (row.flash) {
    const auto bound = flash_bound(row, operands);
    ASSERT_EQ(want.size(), bound.size());
    const char* what[] = {"out", "dq", "dk", "dv"};
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(within_bound(got[i], want[i], bound[i], row.name + " " + what[i]));
    return;
  }
  EXPECT_TRUE(all_close(got[0], want[0], row.cuda)) << "forward";
  const Tol grad_tol{std::max(row.cuda.rel, 1e-5), std::max(row.cuda.abs, 1e-5)};
  for (size_t i = 1; i < want.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], grad_tol)) << "gradient " << i;
}

/// ‖a − b‖ / ‖b‖.
double normwise(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

TEST_P(HalfOp, PolicyStaysCloseToF32) {
  const HalfCase& row = GetParam();
  auto ref = backend::make_ref_backend();
  const auto mixed = run_case(*ref, row, true);
  const auto full = run_case(*ref, row, false);
  ASSERT_EQ(mixed.size(), full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    const double err = normwise(mixed[i], full[i]);
    EXPECT_LT(err, row.half == DType::kBF16 ? 1.0 / 128 : 1.0 / 1024)
        << (i == 0 ? "forward" : "gradient " + std::to_string(i));
    // The rounding must be visible: the policy is not a no-op (exact cases excepted).
    if (i == 0 && row.cpu.rel > 0) {
      EXPECT_GT(err, 1e-6);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Table, HalfOp, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Bf16Rules, ArithmeticOnBf16IsRefusedWithAHint) {
  ir::Trace trace;
  ir::TraceScope scope(trace);
  Tensor x = ir::named_leaf(trace.graph, ir::Op::kInput, "x", {4}, DType::kF32, Loc::current());
  Tensor b = cast(x, DType::kBF16);
  try {
    (void)(b + b);
    FAIL() << "bf16 + bf16 was accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("cast to f32 first"), std::string::npos) << e.what();
  }
  // Mixed with f32, or through a float function, bf16 is promoted to f32 first.
  EXPECT_EQ((b + x).dtype(), DType::kF32);
  EXPECT_EQ((b * 2.0).dtype(), DType::kF32);
  EXPECT_EQ(exp(b).dtype(), DType::kF32);
  EXPECT_THROW((void)sum(b), ShapeError);
  EXPECT_THROW((void)cast(cast(x, DType::kI32), DType::kBF16), ShapeError);
  // A product of bf16 and f32 multiplies in f32; two bf16 operands multiply as bf16.
  const Tensor mixed = matmul(reshape(b, {2, 2}), reshape(x, {2, 2}));
  for (int32_t in : trace.graph.node(mixed.id()).inputs) EXPECT_EQ(trace.graph.node(in).dtype, DType::kF32);
  EXPECT_EQ(matmul(reshape(b, {2, 2}), reshape(b, {2, 2})).dtype(), DType::kF32);
}

TEST(HalfRules, F16FollowsTheSameRulesAndTheTwoTypesDoNotMix) {
  ir::Trace trace;
  ir::TraceScope scope(trace);
  Tensor x = ir::named_leaf(trace.graph, ir::Op::kInput, "x", {4}, DType::kF32, Loc::current());
  Tensor h = cast(x, DType::kF16), b = cast(x, DType::kBF16);
  EXPECT_THROW((void)(h + h), ShapeError);
  EXPECT_THROW((void)sum(h), ShapeError);
  EXPECT_EQ((h + x).dtype(), DType::kF32);
  EXPECT_THROW((void)cast(h, DType::kBF16), ShapeError);  // through f32 only
  EXPECT_EQ(matmul(reshape(h, {2, 2}), reshape(h, {2, 2})).dtype(), DType::kF32);
  // f16 with bf16 multiplies in f32: neither type is silently reinterpreted as the other.
  const Tensor mixed = matmul(reshape(h, {2, 2}), reshape(b, {2, 2}));
  for (int32_t in : trace.graph.node(mixed.id()).inputs) EXPECT_EQ(trace.graph.node(in).dtype, DType::kF32);
  // A program's leaves cannot be f16 (the runtime converts f16 data on upload instead).
  EXPECT_THROW((void)ir::named_leaf(trace.graph, ir::Op::kInput, "y", {4}, DType::kF16, Loc::current()),
               ShapeError);
}

}  // namespace
}  // namespace tg::op_test
