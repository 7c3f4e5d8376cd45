// Inference programs keep what they compute from parameters alone (passes/hoist.h): under
// Precision::kBf16 each weight's bf16 copy is made once, not per run, and made again whenever the
// parameters change (a training step, upload_params, init_params). Checked on every backend
// against programs compiled after the change and against unoptimized programs (no hoisting).
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/storage.h"
#include "test_util.h"

namespace tg {
namespace detail {
const ir::Graph& compiled_graph(const Program& program);
}
namespace {

using testing::rel_diff;

constexpr int64_t kHoistBatch = 2, kHoistSeq = 8, kVocab = 32;

nn::GptConfig config() {
  return {.vocab = kVocab, .seq_len = kHoistSeq, .layers = 2, .d_model = 64, .heads = 4};
}

std::vector<int32_t> ids() {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < kHoistBatch * kHoistSeq; ++i)
    v.push_back(static_cast<int32_t>((i * 7 + 3) % kVocab));
  return v;
}

Program logits_program(nn::Gpt& model, Device device, bool optimize = true) {
  return compile_forward(model, [&](Tensor x) { return model.logits(x); },
                         {.inputs = {{"ids", {kHoistBatch, kHoistSeq}, DType::kI32}},
                          .device = device,
                          .optimize = optimize,
                          .precision = Precision::kBf16});
}

std::vector<float> run(Program& p) { return p.run({{"ids", ids()}}).f32(); }

class Hoist : public ::testing::TestWithParam<Device> {};

TEST_P(Hoist, Bf16WeightsAreReadNotConvertedPerRun) {
  nn::Gpt model(config());
  Program p = logits_program(model, GetParam());
  p.init_params(3);
  const ir::Graph& g = detail::compiled_graph(p);
  int hoisted = 0, param_casts = 0;
  for (const ir::Node& n : g.nodes()) {
    if (n.op == ir::Op::kState && n.name.starts_with("hoisted/")) ++hoisted;
    if (n.op == ir::Op::kCast && g.node(n.inputs[0]).op == ir::Op::kParam) ++param_casts;
  }
  EXPECT_GT(hoisted, 0);
  EXPECT_EQ(param_casts, 0) << g.to_string();
  // Same logits as the unoptimized program, which converts every weight in the run.
  Program plain = logits_program(model, GetParam(), false);
  const std::vector<float> a = run(p), b = run(plain), again = run(p);
  EXPECT_LT(rel_diff(a, b), 1e-5);
  EXPECT_EQ(a, again);
}

TEST_P(Hoist, ParameterChangesReachTheHoistedCopies) {
  nn::Gpt model(config());
  Program infer = logits_program(model, GetParam());
  Program train = compile_train(model, [&](Tensor x, Tensor y) { return model.loss(x, y); },
                                {.inputs = {{"ids", {kHoistBatch, kHoistSeq}, DType::kI32},
                                            {"targets", {kHoistBatch, kHoistSeq}, DType::kI32}},
                                 .optimizer = SGD{.lr = 0.5},
                                 .device = GetParam()});
  infer.init_params(1);
  const std::vector<float> before = run(infer);
  // Each change, then the long-lived program against one compiled after it.
  auto expect_fresh = [&](const char* what) {
    Program fresh = logits_program(model, GetParam());
    const std::vector<float> now = run(infer);
    EXPECT_GT(rel_diff(now, before), 1e-3) << what << ": the logits did not change";
    EXPECT_EQ(now, run(fresh)) << what;
  };
  train.step({{"ids", ids()}, {"targets", ids()}});
  expect_fresh("after a training step");
  infer.init_params(2);
  expect_fresh("after init_params");
  std::map<std::string, HostTensor> params = infer.download_params();
  for (float& v : params.at("blocks.0.fc.weight").f32()) v *= -1.0f;
  infer.upload_params(params);
  expect_fresh("after upload_params");
}

TEST_P(Hoist, MemoryReportCountsTheBf16Copies) {
  if (GetParam().kind == Device::Kind::kRef) GTEST_SKIP() << "the reference interpreter plans no memory";
  struct Net : Module {
    nn::Linear fc{*this, "fc", 256, 512, {.bias = false}};
  } net;
  Program p =
      compile_forward(net, [&](Tensor x) { return net.fc(x); },
                      {.inputs = {{"x", {4, 256}}}, .device = GetParam(), .precision = Precision::kBf16});
  // The weight's bf16 copy (2 bytes an element) instead of the f32 weight it comes from.
  EXPECT_EQ(p.memory_report().params, 256 * 512 * 2);
  Program f32 = compile_forward(net, [&](Tensor x) { return net.fc(x); },
                                {.inputs = {{"x", {4, 256}}}, .device = GetParam()});
  EXPECT_EQ(f32.memory_report().params, 256 * 512 * 4);
}

TEST_P(Hoist, SiblingProductsReadOneConcatenatedWeight) {
  // Llama's q/k/v and gate/up projections each read the same normed rows: one product each
  // group under bf16, over the concatenated bf16 copies; the cached logits are unchanged.
  const nn::LlamaConfig c{.vocab = kVocab,
                          .seq_len = 16,
                          .layers = 2,
                          .d_model = 64,
                          .heads = 4,
                          .kv_heads = 2,
                          .mlp_hidden = 96};
  nn::Llama model(c);
  auto program = [&](bool optimize) {
    return compile_forward(model, [&](Tensor ids, Tensor pos) { return model.logits_cached(ids, pos, 16); },
                           {.inputs = {{"ids", {2, 1}, DType::kI32}, {"pos", {2}, DType::kI32}},
                            .device = GetParam(),
                            .optimize = optimize,
                            .precision = Precision::kBf16});
  };
  Program merged = program(true);
  merged.init_params(5);
  int products = 0;
  for (const ir::Node& n : detail::compiled_graph(merged).nodes()) products += n.op == ir::Op::kMatmul;
  EXPECT_EQ(products, 4 * c.layers + 1);  // qkv, o, gate/up, down; the head
  Program plain = program(false);
  for (int32_t step = 0; step < 3; ++step) {  // the caches fill the same way
    const std::vector<int32_t> ids{step + 1, 7 - step}, pos{step, step};
    const Feeds feeds{{"ids", ids}, {"pos", pos}};
    const std::vector<float> a = merged.run(feeds).f32(), b = plain.run(feeds).f32();
    EXPECT_LT(rel_diff(a, b), 1e-5) << "step " << step;
  }
}

TEST_P(Hoist, ProgramsOfOneModelShareTheCopies) {
  // A generator's prefill and decode programs (other input shapes, the same weights) keep one
  // bf16 copy of each weight between them, not one each.
  nn::Gpt model(config());
  auto hoisted_leaves = [](const Program& p) {
    int n = 0;
    for (const ir::Node& node : detail::compiled_graph(p).nodes())
      n += node.op == ir::Op::kState && node.name.starts_with("hoisted/");
    return n;
  };
  Program a = logits_program(model, GetParam());
  const auto store = detail::device_store(model, GetParam());
  const size_t after_one = store->hoisted.size();
  Program b = compile_forward(
      model, [&](Tensor x) { return model.logits(x); },
      {.inputs = {{"ids", {1, 3}, DType::kI32}}, .device = GetParam(), .precision = Precision::kBf16});
  EXPECT_EQ(after_one, static_cast<size_t>(hoisted_leaves(a)));
  EXPECT_EQ(hoisted_leaves(b), hoisted_leaves(a));
  EXPECT_EQ(store->hoisted.size(), after_one);
  const std::vector<int32_t> three{1, 2, 3};
  b.init_params(4);
  const std::vector<float> before = b.run({{"ids", three}}).f32();
  run(a);  // a's prologue writes the shared copies again: same parameters, same values
  EXPECT_EQ(b.run({{"ids", three}}).f32(), before);
}

INSTANTIATE_TEST_SUITE_P(Devices, Hoist, ::testing::ValuesIn(testing::all_devices()),
                         [](const auto& info) { return testing::device_test_name(info.param); });

}  // namespace
}  // namespace tg
