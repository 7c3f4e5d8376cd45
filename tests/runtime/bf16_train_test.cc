// Mixed precision (Precision::kBf16, and kF16 with its default loss scaling) through the whole
// runtime: a GPT's training steps on the CPU against the double-precision reference running
// the same program, the policy's distance from f32 training, what keep_f32 exempts, and the
// errors for misuse.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "test_util.h"

namespace tg {
namespace detail {
const ir::Graph& compiled_graph(const Program& program);
}
namespace {

constexpr int64_t kBatch = 4, kSeq = 8;

nn::GptConfig small_gpt(bool tied = true) {
  return {.vocab = 16, .seq_len = kSeq, .layers = 2, .d_model = 32, .heads = 4, .tied_head = tied};
}

struct Batch {
  std::vector<int32_t> ids, targets;
};

Batch fixed_batch() {
  Batch b;
  for (int64_t i = 0; i < kBatch * kSeq; ++i) {
    b.ids.push_back(static_cast<int32_t>((i * 7 + 3) % 16));
    b.targets.push_back(static_cast<int32_t>((i * 5 + 1) % 16));
  }
  return b;
}

struct TrainRun {
  std::vector<float> losses;
  std::map<std::string, HostTensor> params;
};

TrainRun train(Device device, Precision precision, int steps, std::vector<std::string> keep_f32 = {}) {
  nn::Gpt model(small_gpt());
  Program p = compile_train(
      model, [&](Tensor ids, Tensor targets) { return model.loss(ids, targets); },
      {.inputs = {{"ids", {kBatch, kSeq}, DType::kI32}, {"targets", {kBatch, kSeq}, DType::kI32}},
       // SGD: parameter differences stay proportional to gradient differences (Adam's
       // g/√v would blow up the rounding noise of near-zero gradients).
       .optimizer = SGD{.lr = 0.1, .momentum = 0.9},
       .clip_grad_norm = 1.0,
       .device = device,
       .precision = precision,
       .keep_f32 = std::move(keep_f32)});
  p.init_params(7);
  const Batch b = fixed_batch();
  TrainRun r;
  for (int s = 0; s < steps; ++s) r.losses.push_back(p.step({{"ids", b.ids}, {"targets", b.targets}}));
  r.params = p.download_params();
  return r;
}

double normwise(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

/// The same bf16 (f16) program on a backend and on ref: both round the same f32 values to
/// bf16 (f16), so they differ only where an f32 value lies within its f32 rounding of a
/// rounding boundary and in summation order. Such a value flips to the neighbouring 16-bit
/// value on one side only: a bf16 boundary catches an f32 value within an ulp with odds 2^-15
/// (none of these runs' operands does), an f16 boundary, 3 bits finer, with odds 2^-12 (a few
/// of the thousands of operands per product do), and three training steps carry each flip
/// into every parameter behind it: the biases, sums over all rows, move by about as much as
/// the f16 policy itself moves them from f32. The op-level tables (tests/ops/half_op_test.cc,
/// tests/backend/cpu_f16_test.cc) check the kernels to 1e-5; here: losses to 1e-4, parameters
/// normwise within 1e-4 (bf16) or within twice the policy's own distance (the f16 run against
/// the f32 run on ref; a product reading its operands as the wrong type moves them by bf16's
/// distance, 8 times f16's, or far more).
void expect_matches_ref(Device device, Precision precision) {
  SCOPED_TRACE(precision == Precision::kBf16 ? "bf16" : "f16");
  const TrainRun want = train(Device::ref(), precision, 3);
  const TrainRun got = train(device, precision, 3);
  const TrainRun f32_run =
      precision == Precision::kF16 ? train(Device::ref(), Precision::kFp32, 3) : TrainRun{};
  for (size_t s = 0; s < want.losses.size(); ++s)
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-4 * std::abs(want.losses[s])) << "step " << s + 1;
  for (const auto& [name, w] : want.params) {
    const double policy = f32_run.params.empty() ? 0.0 : normwise(w.f32(), f32_run.params.at(name).f32());
    EXPECT_LT(normwise(got.params.at(name).f32(), w.f32()), std::max(1e-4, 2 * policy)) << name;
  }
}

TEST(Bf16Train, CpuMatchesRefOnGptSteps) {
  expect_matches_ref(Device::cpu(), Precision::kBf16);
  expect_matches_ref(Device::cpu(), Precision::kF16);
}

TEST(Bf16Train, CudaMatchesRefOnGptSteps) {
  if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  expect_matches_ref(Device::cuda(), Precision::kBf16);
  expect_matches_ref(Device::cuda(), Precision::kF16);
}

TEST(Bf16Train, StaysCloseToF32ButIsNotF32) {
  const TrainRun f32_run = train(Device::ref(), Precision::kFp32, 3);
  // f16 keeps 3 more bits than bf16: a tighter bound.
  for (const auto& [precision, bound] :
       {std::pair{Precision::kBf16, 1e-2}, std::pair{Precision::kF16, 2e-3}}) {
    const TrainRun mixed = train(Device::ref(), precision, 3);
    for (size_t s = 0; s < f32_run.losses.size(); ++s) {
      EXPECT_NEAR(mixed.losses[s], f32_run.losses[s], bound * std::abs(f32_run.losses[s]))
          << "step " << s + 1;
      EXPECT_NE(mixed.losses[s], f32_run.losses[s]) << "step " << s + 1 << ": the rounding left no trace";
    }
  }
}

int bf16_products(const Program& p, DType half = DType::kBF16) {
  const ir::Graph& g = detail::compiled_graph(p);
  int n = 0;
  for (const ir::Node& node : g.nodes())
    if (node.op == ir::Op::kMatmul && g.node(node.inputs[0]).dtype == half) ++n;
  return n;
}

TEST(Bf16Train, Bf16ValuesCanBeCapturedOnEveryDevice) {
  struct Empty : Module {
  } m;
  const std::vector<float> x{1.0f, -2.5f, 3.14159f, 1e-3f, 65504.0f, -0.0f};
  const HostTensor want = HostTensor::f32(x, {2, 3}).to(DType::kBF16);
  for (const Device& d : testing::all_devices()) {
    SCOPED_TRACE(d.str());
    Program p = compile_forward(
        m,
        [](Tensor v) {
          Tensor b = capture("b", transpose(cast(v, DType::kBF16), 0, 1));  // a bf16 view, read back dense
          return cast(b, DType::kF32);
        },
        {.inputs = {{"v", {2, 3}}}, .device = d});
    Captures caps;
    const HostTensor out = p.run({{"v", x}}, {.captures = &caps});
    const HostTensor& b = caps.at("b");
    ASSERT_EQ(b.dtype(), DType::kBF16);
    ASSERT_EQ(b.shape(), (Shape{3, 2}));
    const auto* got = static_cast<const uint16_t*>(b.data());
    const auto* ref = static_cast<const uint16_t*>(want.data());
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(got[j * 2 + i], ref[i * 3 + j]) << i << "," << j;
    EXPECT_EQ(out.f32()[1], f32_from_bf16(ref[3]));  // out[0][1] = x[1][0] rounded
  }
}

TEST(Bf16Train, PolicyAndKeepF32) {
  auto compile = [](nn::Gpt& model, Precision precision, std::vector<std::string> keep) {
    return compile_forward(model, [&](Tensor ids) { return model.logits(ids); },
                           {.inputs = {{"ids", {kBatch, kSeq}, DType::kI32}},
                            .device = Device::ref(),
                            .precision = precision,
                            .keep_f32 = std::move(keep)});
  };
  nn::Gpt model(small_gpt(/*tied=*/false));
  // Per layer: the qkv, projection, fc and fc2 products (attention is one node), and the head.
  EXPECT_EQ(bf16_products(compile(model, Precision::kFp32, {})), 0);
  const int all = bf16_products(compile(model, Precision::kBf16, {}));
  EXPECT_EQ(all, 2 * 4 + 1);
  EXPECT_EQ(bf16_products(compile(model, Precision::kBf16, {"head"})), all - 1);
  EXPECT_EQ(bf16_products(compile(model, Precision::kBf16, {"blocks.0"})), all - 4);
  EXPECT_EQ(bf16_products(compile(model, Precision::kBf16, {"blocks.0.fc.weight"})), all - 1);
  // kF16: the same products, read as f16.
  EXPECT_EQ(bf16_products(compile(model, Precision::kF16, {}), DType::kF16), all);
  EXPECT_EQ(bf16_products(compile(model, Precision::kF16, {"head"}), DType::kF16), all - 1);
  EXPECT_EQ(bf16_products(compile(model, Precision::kF16, {}), DType::kBF16), 0);
  // A prefix must end at a path component and name something.
  EXPECT_THROW(compile(model, Precision::kBf16, {"hea"}), InputError);
  EXPECT_THROW(compile(model, Precision::kBf16, {"nothing"}), InputError);
}

}  // namespace
}  // namespace tg
