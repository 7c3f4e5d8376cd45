// PyTorch parity of tg::group_norm and nn::GroupNorm: tests/data/group_norm_golden.safetensors
// (written by gen_group_norm_golden.py with F.group_norm in float64) holds, per case, x, the
// affine weight and bias, y, a cotangent dy and the gradients of sum(y · dy). Each backend must
// agree to 1e-5 relative (per tensor: max |ours − theirs| / max |theirs|).
#include <gtest/gtest.h>

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

const std::string kGolden = std::string(TG_TEST_DATA_DIR) + "/group_norm_golden.safetensors";

std::vector<float> to_f32(const std::vector<double>& v) { return {v.begin(), v.end()}; }
HostTensor feed(const tg::HostTensor& h) { return {DType::kF32, {h.f32().begin(), h.f32().end()}}; }

TEST(GroupNormParity, OutputAndGradientsMatchPyTorch) {
  const std::map<std::string, tg::HostTensor> t = tg::read_safetensors(kGolden);
  const io::JsonValue cases = io::parse_json(tg::read_safetensors_metadata(kGolden).at("cases"));
  std::vector<std::unique_ptr<backend::Backend>> backends = both_backends();
  if (tg::testing::gpu_skip_reason().empty()) backends.push_back(backend::make_cuda_backend(0));
  ASSERT_EQ(cases.array.size(), 3u);
  for (const io::JsonValue& c : cases.array) {
    const std::string name = c.array.at(0).string;
    const io::JsonValue& args = c.array.at(1);
    const int64_t groups = args.find("groups")->integer;
    const double eps = args.find("eps")->number;
    const bool affine = args.find("affine")->boolean;
    const tg::HostTensor& x = t.at(name + "/x");
    const int64_t ch = x.shape()[1];
    std::vector<InputSpec> specs = {uni(x.shape()), uni(t.at(name + "/dy").shape())};
    std::vector<HostTensor> feeds = {feed(x), feed(t.at(name + "/dy"))};
    if (affine) {
      specs.push_back(uni({ch}));
      specs.push_back(uni({ch}));
      feeds.push_back(feed(t.at(name + "/weight")));
      feeds.push_back(feed(t.at(name + "/bias")));
    }
    Traced tr = trace_fn(specs, [&](const Ts& v) {
      return sum(group_norm(v[0], groups, affine ? v[2] : Tensor(), affine ? v[3] : Tensor(), eps) * v[1]);
    });
    std::vector<int32_t> wrt = {tr.inputs[0]};
    if (affine) wrt.insert(wrt.end(), {tr.inputs[2], tr.inputs[3]});
    const std::vector<int32_t> grads = autograd::append_gradients(tr.graph, tr.out, wrt);
    int32_t y = -1;  // the normalised value: the multiply by dy's other operand
    for (int32_t id = 0; id < tr.graph.size(); ++id)
      if (tr.graph.node(id).op == ir::Op::kMul && tr.graph.node(id).inputs[1] == tr.inputs[1] && y < 0)
        y = tr.graph.node(id).inputs[0];
    ASSERT_GE(y, 0) << name;
    tr.graph.outputs = {y};
    tr.graph.outputs.insert(tr.graph.outputs.end(), grads.begin(), grads.end());
    const std::vector<std::string> what = {"y", "dx", "dweight", "dbias"};
    for (const auto& be : backends) {
      const auto got = run_graph(*be, tr.graph, tr.inputs, feeds);
      ASSERT_EQ(got.size(), affine ? 4u : 2u);
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_LT(tg::testing::rel_diff(to_f32(got[i]), t.at(name + "/" + what[i]).f32()), 1e-5)
            << name << " " << what[i] << " on " << be->name();
    }
  }
}

TEST(GroupNormLayer, ParametersAndErrors) {
  Module root;
  nn::GroupNorm gn(root, "gn", 2, 6);
  ASSERT_TRUE(gn.weight && gn.bias);
  EXPECT_EQ(gn.weight->path(), "gn.weight");
  EXPECT_EQ(gn.weight->shape(), (Shape{6}));
  EXPECT_FALSE(nn::GroupNorm(root, "plain", 2, 6, {.affine = false}).weight.has_value());
  EXPECT_THROW(nn::GroupNorm(root, "bad", 4, 6), ShapeError);
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const ShapeError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto traced = [](Shape s, int64_t groups) {
    return [s, groups] { trace_fn({uni(s)}, [&](const Ts& v) { return group_norm(v[0], groups, {}, {}); }); };
  };
  EXPECT_NE(message(traced({2, 6, 3}, 4)).find("do not divide into 4 groups"), std::string::npos);
  EXPECT_NE(message(traced({6}, 2)).find("[N, C, ...]"), std::string::npos);
}

}  // namespace
}  // namespace tg::op_test
