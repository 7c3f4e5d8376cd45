// CSE and algebraic simplification: the rewrites fire where they should and never change
// a result (checked on the reference backend against the unrewritten graph).
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <cmath>
#include <random>

#include "backend/ref/ref_backend.h"
#include "ir/api_util.h"
#include "passes/dce.h"
#include "passes/rewrite.h"

namespace {

using namespace tg;

struct Built {
  ir::Graph graph;
  std::vector<int32_t> inputs;
};

template <class F>
Built build(const std::vector<Shape>& shapes, F&& fn) {
  ir::Trace trace;
  Built b;
  {
    ir::TraceScope scope(trace);
    std::vector<Tensor> xs;
    for (size_t i = 0; i < shapes.size(); ++i) {
      xs.push_back(ir::named_leaf(trace.graph, ir::Op::kInput, "x" + std::to_string(i), shapes[i], DType::kF32,
                                  Loc::current()));
      b.inputs.push_back(xs.back().id());
    }
    trace.graph.outputs = {fn(xs).id()};
  }
  b.graph = trace.graph;
  return b;
}

std::vector<double> run(const ir::Graph& g, const std::vector<int32_t>& inputs, const std::vector<std::vector<double>>& values) {
  auto backend = backend::make_ref_backend();
  auto exec = backend->prepare(g, {});
  auto* ref = dynamic_cast<backend::RefExecutable*>(exec.get());
  for (size_t i = 0; i < inputs.size(); ++i) ref->set_input_f64(inputs[i], values[i]);
  ref->execute();
  return ref->value_f64(g.outputs[0]);
}

/// Rewrites with simplify → CSE → DCE and checks the result equals the original's.
ir::Graph rewrite_and_check(const Built& b, uint64_t seed = 1) {
  std::vector<int32_t> r1, r2, r3;
  ir::Graph s = passes::simplify(b.graph, r1);
  ir::Graph c = passes::eliminate_common_subexpressions(s, r2);
  ir::Graph d = passes::eliminate_dead_code(c, r3);
  const std::vector<int32_t> remap = passes::compose(passes::compose(r1, r2), r3);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.5, 2.0);
  std::vector<std::vector<double>> values;
  std::vector<int32_t> new_inputs;
  for (int32_t in : b.inputs) {
    values.emplace_back(static_cast<size_t>(b.graph.node(in).numel()));
    for (double& v : values.back()) v = u(rng);
    new_inputs.push_back(remap[static_cast<size_t>(in)]);
  }
  EXPECT_EQ(run(b.graph, b.inputs, values), run(d, new_inputs, values));
  for (int32_t id = 0; id < d.size(); ++id)
    for (int32_t in : d.node(id).inputs) EXPECT_LT(in, id);
  return d;
}

int count(const ir::Graph& g, ir::Op op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += node.op == op;
  return n;
}

TEST(Rewrite, CseMergesRepeatedWork) {
  Built b = build({{4, 3}}, [](const std::vector<Tensor>& x) {
    return exp(x[0]) * sum(x[0], {1}, true) + exp(x[0]) * sum(x[0], {1}, true);
  });
  ir::Graph g = rewrite_and_check(b);
  EXPECT_EQ(count(g, ir::Op::kExp), 1);
  EXPECT_EQ(count(g, ir::Op::kSum), 1);
  EXPECT_EQ(count(g, ir::Op::kMul), 1);
}

TEST(Rewrite, AlgebraicIdentitiesDisappear) {
  Built b = build({{2, 6}}, [](const std::vector<Tensor>& x) {
    Tensor y = (x[0] * 1.0 + 0.0 - 0.0) / 1.0;
    y = reshape(reshape(y, {3, 4}), {12});
    y = reshape(y, {2, 6});
    return permute(permute(y, {1, 0}), {1, 0}) * 3.0;
  });
  ir::Graph g = rewrite_and_check(b);
  EXPECT_EQ(count(g, ir::Op::kAdd) + count(g, ir::Op::kSub) + count(g, ir::Op::kDiv), 0);
  EXPECT_EQ(count(g, ir::Op::kReshape), 0);
  EXPECT_EQ(count(g, ir::Op::kPermute), 0);
  EXPECT_EQ(count(g, ir::Op::kMul), 1);  // only ·3 remains
}

TEST(Rewrite, ComposedPermutesStayCorrect) {
  Built b = build({{2, 3, 4}}, [](const std::vector<Tensor>& x) {
    return permute(permute(x[0], {2, 0, 1}), {0, 2, 1}) + 1.0;
  });
  ir::Graph g = rewrite_and_check(b);
  EXPECT_EQ(count(g, ir::Op::kPermute), 1);
}

TEST(Rewrite, RandomGraphsKeepTheirResults) {
  // Random chains over a few shared subterms, with identities sprinkled in.
  for (uint64_t seed = 0; seed < 40; ++seed) {
    std::mt19937_64 rng(seed);
    Built b = build({{3, 4}, {3, 4}}, [&](const std::vector<Tensor>& x) {
      std::vector<Tensor> pool = {x[0], x[1]};
      for (int step = 0; step < 12; ++step) {
        const Tensor& a = pool[rng() % pool.size()];
        const Tensor& c = pool[rng() % pool.size()];
        switch (rng() % 7) {
          case 0: pool.push_back(a + c); break;
          case 1: pool.push_back(a * c); break;
          case 2: pool.push_back(a * 1.0); break;
          case 3: pool.push_back(tanh(a)); break;
          case 4: pool.push_back(transpose(transpose(a))); break;
          case 5: pool.push_back(reshape(reshape(a, {12}), {3, 4}) + 0.0); break;
          default: pool.push_back(sum(a, {0}, true) * c); break;
        }
      }
      Tensor total = pool.back();
      for (size_t i = 2; i < pool.size(); ++i) total = total + pool[i] * 0.01;
      return total;
    });
    rewrite_and_check(b, seed);
  }
}

}  // namespace

namespace {

TEST(Rewrite, GptTrainingStepsAgreeWithPassesOnAndOff) {
  // The same model, weights and batch through two programs that differ only in the
  // rewriting passes: losses and parameters after three AdamW steps must agree.
  const tg::nn::GptConfig config{.vocab = 11, .seq_len = 6, .layers = 2, .d_model = 16, .heads = 4, .kv_heads = 2};
  tg::nn::Gpt on(config), off(config);
  auto compile = [&](tg::nn::Gpt& m, bool optimize) {
    return tg::compile_train(
        m, [&](tg::Tensor ids, tg::Tensor targets) { return m.loss(ids, targets); },
        {.inputs = {{"ids", {3, 6}, tg::DType::kI32}, {"targets", {3, 6}, tg::DType::kI32}},
         .optimizer = tg::AdamW{.lr = 1e-2, .weight_decay = 0.1}, .clip_grad_norm = 1.0,
         .device = tg::Device::ref(), .optimize = optimize});
  };
  tg::Program p_on = compile(on, true), p_off = compile(off, false);
  EXPECT_LT(p_on.ir().size(), p_off.ir().size());  // the passes did remove nodes
  p_off.upload_params(p_on.download_params());
  std::vector<int32_t> ids(18), targets(18);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 7) % 11);
    targets[i] = static_cast<int32_t>((i * 5 + 3) % 11);
  }
  for (int step = 0; step < 3; ++step) {
    const float a = p_on.step({{"ids", ids}, {"targets", targets}});
    const float b = p_off.step({{"ids", ids}, {"targets", targets}});
    EXPECT_NEAR(a, b, 1e-6 * std::fabs(b));
  }
  const auto pa = p_on.download_params(), pb = p_off.download_params();
  for (const auto& [name, t] : pa)
    for (size_t i = 0; i < t.f32().size(); ++i) ASSERT_NEAR(t.f32()[i], pb.at(name).f32()[i], 1e-6) << name;
}

}  // namespace
