// CUDA's conv kernels in tf32 programs, both kinds (the shared-memory tile kernels and the
// gathering implicit GEMMs, TG_CUDA_CONV=gather), against the double-precision reference:
// y = conv2d(x, w), and the gradients dx, dw of sum(y · dy).
//
// Bound. tf32 keeps 10 fraction bits and the kernels round both operands to nearest, so each
// product x̃·w̃ errs from x·w by at most (2·2^-11 + 2^-22)·|x·w| = (2^-10 + 2^-22)·|x·w|; a sum
// of K terms rounded to f32 at each step adds at most K·2^-24·Σ|terms| (the tensor cores'
// accumulation is not specified to round to nearest: this part is the usual model, which the
// measured errors sit well inside). With B = the same op over |x|, |w|, |dy| (conv2d(|x|, |w|),
// its input gradient at |dy|, its weight gradient at |x|, |dy|: the same program fed absolute
// values, on ref), each element must satisfy |cuda − ref| ≤ 1.1·(2^-10 + K·2^-24)·B + 1e-6 (the
// 1.1 covers the 2^-22).
// (bf16 programs: tests/ops/half_op_test.cc, exact products there.)
#include <gtest/gtest.h>

#include <cmath>
#include <array>
#include <cstdlib>
#include <map>

#include "backend/cuda/kernels.h"
#include "backend/cuda/capabilities.h"
#include "backend/cuda/driver.h"
#include "cuda_test_util.h"
#include "ir/window.h"
#include "ops/op_harness.h"
#include "test_util.h"
#include "tensorgrad/functional.h"

namespace tg::op_test {
namespace {

struct ConvCase {
  std::string name;
  Shape x, w;
  Conv2dOptions opts;
  // Whether the forward, the input's gradient and the weight's take the tile kernels (else the
  // gathering ones: a strided input gradient, rows wider than a block).
  std::array<bool, 3> tiles = {true, true, true};
};
void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

std::vector<ConvCase> conv_cases() {
  return {
      {"cnn_layer2", {8, 32, 14, 14}, {64, 32, 3, 3}, {.padding = 1}},
      {"cnn_layer1_k9", {6, 1, 28, 28}, {32, 1, 3, 3}, {.padding = 1}},
      {"dilated_rect", {2, 3, 11, 10}, {5, 3, 3, 2}, {.padding = {2, 1}, .dilation = {2, 1}}},
      {"bands", {1, 2, 40, 40}, {3, 2, 5, 5}, {.padding = 2}},
      {"channel_chunks", {1, 96, 6, 6}, {80, 96, 3, 3}, {.padding = 1}},
      {"depthwise", {2, 4, 8, 8}, {4, 1, 3, 3}, {.padding = 1, .groups = 4}},
      {"many_images", {601, 8, 6, 6}, {16, 8, 3, 3}, {.padding = 1}},  // a last, partial group of images
      {"strided_grouped", {3, 4, 9, 9}, {6, 2, 3, 3}, {.stride = 2, .groups = 2}, {true, false, true}},
      {"wide_rows", {1, 2, 3, 1200}, {2, 1, 3, 3}, {.padding = 1, .groups = 2}, {false, false, true}},
  };
}

class CudaConvTf32 : public ::testing::TestWithParam<ConvCase> {};

/// TG_CUDA_CONV=gather while it lives (when `on`), unset after.
struct GatherKernels {
  explicit GatherKernels(bool on) {
    if (on) setenv("TG_CUDA_CONV", "gather", 1);
  }
  ~GatherKernels() { unsetenv("TG_CUDA_CONV"); }
  GatherKernels(const GatherKernels&) = delete;
  GatherKernels& operator=(const GatherKernels&) = delete;
};

// y, dx, dw of `row` on `be` for the given x, w, dy values (y of shape `ys`).
std::vector<std::vector<double>> run(backend::Backend& be, const ConvCase& row, const Shape& ys,
                                     const std::vector<HostTensor>& feeds,
                                     const backend::PrepareOptions& options) {
  const Conv2dOptions opts = row.opts;
  Traced l = trace_fn({uni(row.x), uni(row.w), uni(ys)},
                      [&](const Ts& v) { return sum(conv2d(v[0], v[1], Tensor(), opts) * v[2]); });
  const std::vector<int32_t> wrt = {l.inputs[0], l.inputs[1]};
  const std::vector<int32_t> grads = autograd::append_gradients(l.graph, l.out, wrt);
  int32_t y = -1;
  for (int32_t id = 0; id < l.graph.size(); ++id)
    if (l.graph.node(id).op == ir::Op::kConv2d && y < 0) y = id;
  l.graph.outputs = {y, grads[0], grads[1]};
  return run_graph(be, l.graph, l.inputs, feeds, options);
}

ir::WindowGeom geometry(const ConvCase& row) {
  const ir::Window win{.kh = row.w[2],
                       .kw = row.w[3],
                       .sh = row.opts.stride.h,
                       .sw = row.opts.stride.w,
                       .ph = row.opts.padding.h,
                       .pw = row.opts.padding.w,
                       .dh = row.opts.dilation.h,
                       .dw = row.opts.dilation.w,
                       .groups = row.opts.groups};
  return {row.x[0],
          row.x[1],
          row.x[2],
          row.x[3],
          row.w[0],
          ir::window_out(row.x[2], win.kh, win.sh, win.ph, win.dh),
          ir::window_out(row.x[3], win.kw, win.sw, win.pw, win.dw),
          win};
}

// A generated constant ("constexpr int NAME = v;") of a kernel source, or -1.
int64_t constant(const std::string& source, const std::string& name) {
  const std::string key = "constexpr int " + name + " = ";
  const size_t at = source.find(key);
  return at == std::string::npos ? -1 : std::stoll(source.substr(at + key.size()));
}

// Which kernel each op of a row takes on an sm_90 device (no GPU needed), and that the rows
// reach the tile kernels' several paths: bands, channel chunks, several images a block, split
// weight gradients over several column tiles.
TEST_P(CudaConvTf32, RowsTakeTheKernelsTheyAreMeantFor) {
  const ConvCase& row = GetParam();
  const ir::WindowGeom geom = geometry(row);
  std::map<ir::Op, std::string> src;
  for (ir::Op op : {ir::Op::kConv2d, ir::Op::kConv2dGradInput, ir::Op::kConv2dGradWeight}) {
    src[op] = backend::cuda::conv_kernels("k", op, geom, DType::kF32, true, tg::testing::sm90_device(), true)
                  .launches[0]
                  .source;
    const bool tiles = src[op].find("shared-memory tiles") != std::string::npos;
    EXPECT_EQ(tiles, row.tiles[src.size() - 1]) << ir::op_name(op);
  }
  const std::string& fwd = src[ir::Op::kConv2d];
  const std::string& gw = src[ir::Op::kConv2dGradWeight];
  const std::string& gi = src[ir::Op::kConv2dGradInput];
  const std::multimap<std::string, std::pair<std::string, int64_t>> paths = {
      {"bands", {"forward BANDS", constant(fwd, "BANDS")}},
      {"bands", {"weight gradient BANDS", constant(gw, "BANDS")}},
      {"channel_chunks", {"forward NCH", constant(fwd, "NCH")}},
      {"channel_chunks", {"input gradient NCH", constant(gi, "NCH")}},
      {"many_images", {"forward IPB", constant(fwd, "IPB")}},
      {"cnn_layer2", {"weight gradient SPLITS", constant(gw, "SPLITS")}}};
  for (auto [it, end] = paths.equal_range(row.name); it != end; ++it)
    EXPECT_GE(it->second.second, 2) << it->second.first;
  if (row.name == "many_images") {
    EXPECT_NE(row.x[0] % constant(fwd, "IPB"), 0) << "the last block has fewer images";
  }
  if (row.name == "channel_chunks") {
    EXPECT_LT(constant(gw, "BN"), 96 * 9) << "the weight gradient over several column tiles";
  }
}

TEST_P(CudaConvTf32, TileAndGatherKernelsWithinTf32Rounding) {
  if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const ConvCase& row = GetParam();
  const ir::WindowGeom geom = geometry(row);
  const int64_t oh = geom.oh, ow = geom.ow;
  const Shape ys{row.x[0], row.w[0], oh, ow};
  std::vector<HostTensor> feeds = make_inputs({uni(row.x), uni(row.w), uni(ys)}, seed_of(row.name));
  std::vector<HostTensor> abs_feeds = feeds;
  for (HostTensor& h : abs_feeds)
    for (double& v : h.values) v = std::abs(v);
  auto ref = backend::make_ref_backend();
  const auto want = run(*ref, row, ys, feeds, {});
  const auto bound = run(*ref, row, ys, abs_feeds, {});
  // The k of each output: y's C/G·KH·KW, dx's O/G·KH·KW, dw's N·OH·OW.
  const int64_t khw = row.w[2] * row.w[3];
  const int64_t ks[3] = {row.w[1] * khw, row.w[0] / row.opts.groups * khw, row.x[0] * oh * ow};
  const char* what[3] = {"y", "dx", "dw"};
  auto gpu = backend::make_cuda_backend(0);
  for (const char* kernels : {"tiles", "gather"}) {
    const GatherKernels force(std::string(kernels) == "gather");
    const auto got = run(*gpu, row, ys, feeds, {.tf32 = true});
    ASSERT_EQ(got.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(got[i].size(), want[i].size());
      const double rel = std::ldexp(1.0, -10) + static_cast<double>(ks[i]) * std::ldexp(1.0, -24);
      double worst = 0;
      int bad = 0;
      for (size_t e = 0; e < want[i].size(); ++e) {
        const double err = std::abs(got[i][e] - want[i][e]), allowed = 1.1 * rel * bound[i][e] + 1e-6;
        worst = std::max(worst, err / allowed);
        if (!(err <= allowed) && ++bad <= 3)
          ADD_FAILURE() << kernels << " " << what[i] << "[" << e << "]: got " << got[i][e] << ", ref "
                        << want[i][e] << ", allowed " << allowed;
      }
      EXPECT_EQ(bad, 0) << kernels << " " << what[i];
      std::printf("  %s %s %s: max error / allowed %.3f\n", row.name.c_str(), kernels, what[i], worst);
    }
  }
}

// An infinity in x gives exactly the infinities (and NaNs) the reference gives, in y and dw,
// with both kernel kinds. The tile kernels' last, partial k step (K = 27 here, 49 pixels a band
// for dw) reads, for the k past the chunk's end, the window at k = 0's offset: without its mask
// an output whose k = 0 term is the infinity would add 0·∞ = NaN to a sum that is ±∞.
TEST(CudaConvTf32Infinity, StaysWhereItBelongs) {
  if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const ConvCase row{"inf", {2, 3, 7, 7}, {4, 3, 3, 3}, {.padding = 1}};
  const Shape ys{2, 4, 7, 7};
  std::vector<HostTensor> feeds = make_inputs({uni(row.x), uni(row.w), uni(ys)}, seed_of(row.name));
  feeds[0].values[(0 * 3 + 0) * 49 + 1 * 7 + 1] = HUGE_VAL;  // image 0, channel 0, (1, 1)
  auto ref = backend::make_ref_backend();
  const auto want = run(*ref, row, ys, feeds, {});
  auto gpu = backend::make_cuda_backend(0);
  for (const bool gather : {false, true}) {
    const GatherKernels force(gather);
    const auto got = run(*gpu, row, ys, feeds, {.tf32 = true});
    for (const size_t i : {size_t{0}, size_t{2}}) {
      // 0 finite, 1 +∞, 2 −∞, 3 NaN
      const auto kind = [](double v) { return std::isnan(v) ? 3 : std::isinf(v) ? (v > 0 ? 1 : 2) : 0; };
      int infinite = 0, bad = 0;
      for (size_t e = 0; e < want[i].size(); ++e) {
        infinite += kind(want[i][e]) == 1 || kind(want[i][e]) == 2;
        bad += kind(got[i][e]) != kind(want[i][e]);
      }
      EXPECT_EQ(bad, 0) << (gather ? "gather " : "tiles ") << (i == 0 ? "y" : "dw");
      EXPECT_GT(infinite, 0) << "the infinity reaches some outputs as ±∞";
    }
  }
}

// bf16 values that only convolutions read are written dense (no padded rows to copy away);
// one that also leaves the program keeps the padded rows products want.
TEST(CudaConvLayout, Bf16OperandsOfConvolutionsAreDense) {
  const backend::cuda::CudaCapabilities caps(tg::testing::sm90_device(), {});
  for (const bool escapes : {false, true}) {
    Traced t = trace_fn({uni({2, 3, 14, 14}), uni({4, 3, 3, 3})}, [](const Ts& v) {
      return conv2d(cast(v[0], DType::kBF16), cast(v[1], DType::kBF16), Tensor(), {.padding = 1});
    });
    int32_t xb = -1;
    for (int32_t id = 0; id < t.graph.size(); ++id)
      if (t.graph.node(id).op == ir::Op::kCast && t.graph.node(id).shape == Shape{2, 3, 14, 14}) xb = id;
    ASSERT_GE(xb, 0);
    if (escapes) t.graph.outputs.push_back(xb);
    EXPECT_EQ(caps.group_output_strides(t.graph, xb).empty(), !escapes)
        << (escapes ? "escaping" : "conv only");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaConvTf32, ::testing::ValuesIn(conv_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace tg::op_test
