// PyTorch parity of tg::interpolate, tg::adaptive_avg_pool2d and tg::pad:
// tests/data/resize_golden.safetensors (written by gen_resize_golden.py with F.interpolate,
// F.adaptive_avg_pool2d and F.pad in float64) holds x, and per case y, a cotangent dy and the
// gradient dx of sum(y · dy). Nearest and bilinear, by size and by scale, up and down, with and
// without align_corners; adaptive pools down, overlapping and global; constant, reflect and
// replicate pads. Each backend must agree to 1e-5 relative (per tensor: max |ours − theirs| /
// max |theirs|; f32 weights against PyTorch's float64 ones).
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/json.h"
#include "ops/op_harness.h"
#include "tensorgrad/functional.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace tg::op_test {
namespace {

const std::string kResizeGolden = std::string(TG_TEST_DATA_DIR) + "/resize_golden.safetensors";

std::vector<float> resize_to_f32(const std::vector<double>& v) { return {v.begin(), v.end()}; }

TEST(ResizeParity, InterpolateAdaptivePoolAndPadMatchPyTorch) {
  const std::map<std::string, tg::HostTensor> t = tg::read_safetensors(kResizeGolden);
  const io::JsonValue cases = io::parse_json(tg::read_safetensors_metadata(kResizeGolden).at("cases"));
  const tg::HostTensor& x = t.at("x");
  std::vector<std::unique_ptr<backend::Backend>> backends = both_backends();
  if (tg::testing::gpu_skip_reason().empty()) backends.push_back(backend::make_cuda_backend(0));
  ASSERT_EQ(cases.array.size(), 16u);
  for (const io::JsonValue& c : cases.array) {
    const std::string name = c.array.at(0).string;
    const io::JsonValue& args = c.array.at(1);
    const std::string fn = args.find("fn")->string;
    std::function<Tensor(const Tensor&)> op;
    if (fn == "interpolate") {
      InterpolateOptions o;
      if (const io::JsonValue* size = args.find("size"))
        o.size = Size2(size->array.at(0).integer, size->array.at(1).integer);
      if (const io::JsonValue* scale = args.find("scale")) o.scale = scale->number;
      o.mode =
          args.find("mode")->string == "bilinear" ? InterpolateMode::kBilinear : InterpolateMode::kNearest;
      if (const io::JsonValue* corners = args.find("align_corners")) o.align_corners = corners->boolean;
      op = [o](const Tensor& v) { return interpolate(v, o); };
    } else if (fn == "adaptive_avg_pool2d") {
      const Size2 size(args.find("size")->array.at(0).integer, args.find("size")->array.at(1).integer);
      op = [size](const Tensor& v) { return adaptive_avg_pool2d(v, size); };
    } else {
      std::vector<int64_t> pads;
      for (const io::JsonValue& p : args.find("pads")->array) pads.push_back(p.integer);
      const std::string mode = args.find("mode")->string;
      PadOptions o{.mode = mode == "reflect"     ? PadMode::kReflect
                           : mode == "replicate" ? PadMode::kReplicate
                                                 : PadMode::kConstant};
      if (const io::JsonValue* value = args.find("value")) o.value = value->number;
      op = [pads, o](const Tensor& v) { return pad(v, pads, o); };
    }
    const tg::HostTensor &y = t.at(name + "/y"), &dy = t.at(name + "/dy"), &dx = t.at(name + "/dx");
    Traced tr =
        trace_fn({uni(x.shape()), uni(dy.shape())}, [&](const Ts& v) { return sum(op(v[0]) * v[1]); });
    const std::vector<int32_t> wrt = {tr.inputs[0]};
    const int32_t grad = autograd::append_gradients(tr.graph, tr.out, wrt)[0];
    int32_t out = -1;  // the interpolated value: the multiply's other operand
    for (int32_t id = 0; id < tr.graph.size(); ++id)
      if (tr.graph.node(id).op == ir::Op::kMul && tr.graph.node(id).inputs[1] == tr.inputs[1] && out < 0)
        out = tr.graph.node(id).inputs[0];
    ASSERT_GE(out, 0) << name;
    tr.graph.outputs = {out, grad};
    for (const auto& be : backends) {
      const auto got = run_graph(*be, tr.graph, tr.inputs,
                                 {{DType::kF32, {x.f32().begin(), x.f32().end()}},
                                  {DType::kF32, {dy.f32().begin(), dy.f32().end()}}});
      ASSERT_EQ(got[0].size(), y.f32().size()) << name << ": output shape";
      EXPECT_LT(tg::testing::rel_diff(resize_to_f32(got[0]), y.f32()), 1e-5)
          << name << " y on " << be->name();
      EXPECT_LT(tg::testing::rel_diff(resize_to_f32(got[1]), dx.f32()), 1e-5)
          << name << " dx on " << be->name();
    }
  }
}

TEST(ResizeErrors, SayWhatIsWrong) {
  const auto fails = [](const std::function<void()>& f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one saying " << what;
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  const auto traced = [](Shape s, InterpolateOptions o) {
    return [s, o] { trace_fn({uni(s)}, [&](const Ts& v) { return interpolate(v[0], o); }); };
  };
  fails(traced({1, 2, 3}, {.scale = 2}), "[N, C, H, W]");
  fails(traced({1, 1, 3, 3}, {}), "size or a positive scale");
  fails(traced({1, 1, 3, 3}, {.size = {0, 2}}), "at least 1×1");
  fails(traced({1, 1, 3, 3}, {.scale = 0.2}), "empty");
  fails(traced({1, 1, 3, 3}, {.scale = 2, .align_corners = true}), "bilinear mode only");
  const auto padded = [](Shape s, std::vector<int64_t> pads, PadOptions o) {
    return [s, pads, o] { trace_fn({uni(s)}, [&](const Ts& v) { return pad(v[0], pads, o); }); };
  };
  fails(padded({2, 3}, {1}, {}), "(before, after) pairs");
  fails(padded({2, 3}, {1, 1, 1, 1, 1, 1}, {}), "(before, after) pairs");
  fails(padded({2, 3}, {-1, 0}, {}), "negative padding");
  fails(padded({2, 3}, {3, 0}, {.mode = PadMode::kReflect}), "reflect padding");
  fails(
      [] {
        trace_fn({uni({1, 2, 3})}, [](const Ts& v) { return adaptive_avg_pool2d(v[0], 2); });
      },
      "[N, C, H, W]");
  fails(
      [] {
        trace_fn({uni({1, 2, 3, 3})}, [](const Ts& v) { return adaptive_avg_pool2d(v[0], {0, 2}); });
      },
      "at least 1×1");
}

}  // namespace
}  // namespace tg::op_test
