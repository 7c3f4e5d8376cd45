// PyTorch parity of the losses and activations of functional.h: tests/data/loss_golden.safetensors
// (gen_loss_golden.py, torch.nn.functional in float64 from float32 inputs) holds, per case, the
// inputs, the "none" reduction, the "mean" and "sum" ones (losses), a cotangent dy and the
// gradient of sum(none · dy). Each backend (ref, cpu, and cuda where there is a GPU) must agree
// to 1e-5 relative per tensor. The inputs sit on the branch points (0, ±3, |d| = beta, the BCE
// clamp at p = 0 and 1), so the gradient conventions there are PyTorch's.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/grad.h"
#include "io/json.h"
#include "ops/op_harness.h"
#include "tensorgrad/functional.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace tg::op_test {
namespace {

const std::string kLossGolden = std::string(TG_TEST_DATA_DIR) + "/loss_golden.safetensors";

HostTensor loss_feed(const tg::HostTensor& h) {
  if (h.dtype() == DType::kI32) return {DType::kI32, {h.i32().begin(), h.i32().end()}};
  return {DType::kF32, {h.f32().begin(), h.f32().end()}};
}

// The case's function of (x, t, w) with the reduction given.
Tensor call(const std::string& fn, const io::JsonValue& p, const Ts& v, Reduction r) {
  const auto num = [&](const char* key) { return p.find(key)->number; };
  const Tensor& x = v[0];
  if (fn == "mse_loss") return mse_loss(x, v[1], r);
  if (fn == "l1_loss") return l1_loss(x, v[1], r);
  if (fn == "smooth_l1_loss") return smooth_l1_loss(x, v[1], num("beta"), r);
  if (fn == "huber_loss") return huber_loss(x, v[1], num("delta"), r);
  if (fn == "binary_cross_entropy") return binary_cross_entropy(x, v[1], r);
  if (fn == "binary_cross_entropy_with_logits")
    return binary_cross_entropy_with_logits(x, v[1],
                                            {.pos_weight = v.size() > 3 ? v[3] : Tensor(), .reduction = r});
  const auto ignore = [&] { return static_cast<int32_t>(p.find("ignore_index")->integer); };
  if (fn == "nll_loss") return nll_loss(x, v[1], {.ignore_index = ignore(), .reduction = r});
  if (fn == "cross_entropy")
    return cross_entropy(
        x, v[1], {.ignore_index = ignore(), .reduction = r, .label_smoothing = num("label_smoothing")});
  if (fn == "leaky_relu") return leaky_relu(x, num("slope"));
  if (fn == "elu") return elu(x, num("alpha"));
  if (fn == "clamp") return clamp(x, num("lo"), num("hi"));
  if (fn == "hardsigmoid") return hardsigmoid(x);
  if (fn == "hardswish") return hardswish(x);
  if (fn == "mish") return mish(x);
  if (fn == "logsigmoid") return logsigmoid(x);
  ADD_FAILURE() << "unknown function " << fn;
  return x;
}

TEST(LossParity, OutputsAndGradientsMatchPyTorch) {
  const std::map<std::string, tg::HostTensor> t = tg::read_safetensors(kLossGolden);
  const io::JsonValue cases = io::parse_json(tg::read_safetensors_metadata(kLossGolden).at("cases"));
  std::vector<std::unique_ptr<backend::Backend>> backends = both_backends();
  if (tg::testing::gpu_skip_reason().empty()) backends.push_back(backend::make_cuda_backend(0));
  ASSERT_EQ(cases.array.size(), 19u);
  for (const io::JsonValue& c : cases.array) {
    const std::string name = c.array.at(0).string, fn = c.array.at(1).string;
    const io::JsonValue& params = c.array.at(2);
    const bool loss = t.count(name + "/mean") > 0;
    // Inputs: x, dy, then t and w where the case has them.
    std::vector<std::string> fed = {"x", "dy"};
    for (const char* k : {"t", "w"})
      if (t.count(name + "/" + k)) fed.push_back(k);
    std::vector<InputSpec> specs;
    std::vector<HostTensor> feeds;
    for (const std::string& k : fed) {
      const tg::HostTensor& h = t.at(name + "/" + k);
      specs.push_back(h.dtype() == DType::kI32 ? ints(h.shape()) : uni(h.shape()));
      feeds.push_back(loss_feed(h));
    }
    int32_t none = -1, mean_id = -1, sum_id = -1;
    Traced tr = trace_fn(specs, [&](const Ts& in) {
      Ts v = {in[0]};  // (x, t, -, w) in call()'s order
      if (in.size() > 2) v.push_back(in[2]);
      if (in.size() > 3) v.insert(v.end(), {Tensor(), in[3]});
      Tensor y = call(fn, params, v, Reduction::kNone);
      none = y.id();
      if (loss) {
        mean_id = call(fn, params, v, Reduction::kMean).id();
        sum_id = call(fn, params, v, Reduction::kSum).id();
      }
      return sum(y * in[1]);
    });
    const std::vector<int32_t> wrt = {tr.inputs[0]};
    const std::vector<int32_t> grads = autograd::append_gradients(tr.graph, tr.out, wrt);
    tr.graph.outputs = {none, grads.at(0)};
    std::vector<std::string> what = {"none", "dx"};
    if (loss) {
      tr.graph.outputs.insert(tr.graph.outputs.end(), {mean_id, sum_id});
      what.insert(what.end(), {"mean", "sum"});
    }
    for (const auto& be : backends) {
      const auto got = run_graph(*be, tr.graph, tr.inputs, feeds);
      ASSERT_EQ(got.size(), what.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_LT(tg::testing::rel_diff(std::vector<float>(got[i].begin(), got[i].end()),
                                        t.at(name + "/" + what[i]).f32()),
                  1e-5)
            << name << " " << what[i] << " on " << be->name();
    }
  }
}

// The clamp where PyTorch's golden cases cannot show it (p = 0 meets t = 0 there): a log of 0
// counts −100, so p = 0 with t = 0.3 costs 30 and p = 1 with t = 0.25 costs 75.
TEST(LossParity, BinaryCrossEntropyClampsTheLogsAtMinus100) {
  expect_known(
      [] {
        return binary_cross_entropy(cf({0.0f, 1.0f}, {2}), cf({0.3f, 0.25f}, {2}), Reduction::kNone);
      },
      {2}, DType::kF32, {30.0, 75.0}, 1e-5);
}

TEST(LossParity, Errors) {
  const auto error = [](const std::function<Tensor(const Ts&)>& f, const std::vector<InputSpec>& specs) {
    return tg::testing::message_of<ShapeError>([&] { trace_fn(specs, f); });
  };
  EXPECT_NE(error([](const Ts& v) { return l1_loss(v[0], v[1]); }, {uni({3}), uni({2, 3})})
                .find("target [2, 3] must broadcast to the prediction's shape [3]"),
            std::string::npos);
  EXPECT_NE(error([](const Ts& v) { return huber_loss(v[0], v[1], 0.0); }, {uni({3}), uni({3})})
                .find("delta must be > 0"),
            std::string::npos);
  EXPECT_NE(error([](const Ts& v) { return clamp(v[0], 1.0, -1.0); }, {uni({3})}).find("needs lo <= hi"),
            std::string::npos);
  EXPECT_NE(error([](const Ts& v) { return cross_entropy(v[0], v[1], {.label_smoothing = 1.5}); },
                  {uni({2, 3}), indices({2}, 3)})
                .find("label_smoothing must be in [0, 1]"),
            std::string::npos);
  EXPECT_NE(error([](const Ts& v) { return nll_loss(v[0], v[1]); }, {uni({2, 3}), indices({3}, 3)})
                .find("must have log_probs' shape without the class axis, [2]"),
            std::string::npos);
  EXPECT_NE(
      error([](const Ts& v) { return binary_cross_entropy_with_logits(v[0], v[1], {.pos_weight = v[2]}); },
            {uni({2, 3}), uni({2, 3}), uni({4})})
          .find("pos_weight [4] must broadcast"),
      std::string::npos);
}

}  // namespace
}  // namespace tg::op_test
