// Activation recomputation (tg::Recompute, GptConfig::recompute): which values the backward
// recomputes and which it reads from the forward, that training is unchanged by it (dropout
// masks included), and how much planned memory it saves.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "ir/graph.h"
#include "ir/trace.h"
#include "passes/fusion.h"
#include "test_util.h"

namespace {

using tg::ir::Graph;
using tg::ir::Node;
using tg::ir::Stage;

tg::nn::GptConfig small_gpt(int64_t layers, bool recompute, double dropout = 0.0) {
  return {.vocab = 11,
          .seq_len = 6,
          .layers = layers,
          .d_model = 16,
          .heads = 4,
          .kv_heads = 2,
          .dropout = dropout,
          .recompute = recompute};
}

tg::Program compile_gpt(tg::nn::Gpt& m, tg::Device device, int64_t batch, tg::Optimizer optimizer) {
  const int64_t T = m.config.seq_len;
  return tg::compile_train(
      m, [&](tg::Tensor ids, tg::Tensor targets) { return m.loss(ids, targets); },
      {.inputs = {{"ids", {batch, T}, tg::DType::kI32}, {"targets", {batch, T}, tg::DType::kI32}},
       .seed = 7,
       .optimizer = optimizer,
       .clip_grad_norm = std::holds_alternative<tg::GradientsOnly>(optimizer) ? 0.0 : 1.0,
       .device = device});
}

bool is_leaf(const Node& n) { return tg::ir::op_info(n.op).kind == tg::ir::OpKind::kLeaf; }

/// Forward values of a region (non-leaf) that a backward or optimizer node reads directly.
std::set<int32_t> region_values_read_by_backward(const Graph& g) {
  std::set<int32_t> read;
  for (const Node& n : g.nodes())
    if (n.stage != Stage::kForward)
      for (int32_t in : n.inputs) {
        const Node& x = g.node(in);
        if (x.stage == Stage::kForward && x.recompute >= 0 && !is_leaf(x)) read.insert(in);
      }
  return read;
}

/// Forward values (non-leaf) any backward or optimizer node reads directly: what is stored.
int count_forward_values_read_by_backward(const Graph& g) {
  std::set<int32_t> read;
  for (const Node& n : g.nodes())
    if (n.stage != Stage::kForward)
      for (int32_t in : n.inputs)
        if (g.node(in).stage == Stage::kForward && !is_leaf(g.node(in))) read.insert(in);
  return static_cast<int>(read.size());
}

TEST(Recompute, BackwardReadsOnlyTheBlockOutputsAndRecomputesTheRest) {
  constexpr int64_t kLayers = 3, kBatch = 2;
  tg::nn::Gpt with(small_gpt(kLayers, true)), without(small_gpt(kLayers, false));
  const tg::Program p = compile_gpt(with, tg::Device::ref(), kBatch, tg::AdamW{});
  const tg::Program q = compile_gpt(without, tg::Device::ref(), kBatch, tg::AdamW{});
  const Graph& g = tg::detail::compiled_graph(p);

  // The region values the backward still reads are the blocks' outputs, one [B, T, C] per
  // block: each is the next block's input (or the final norm's) and is read by forward ops
  // outside its own region, so it is stored, as a block's input is.
  const std::set<int32_t> read = region_values_read_by_backward(g);
  EXPECT_EQ(static_cast<int64_t>(read.size()), kLayers);
  for (int32_t id : read) {
    EXPECT_EQ(g.node(id).shape, (tg::Shape{kBatch, 6, 16})) << tg::ir::op_name(g.node(id).op);
    bool read_outside = false;
    for (const Node& n : g.nodes())
      if (n.stage == Stage::kForward && n.recompute != g.node(id).recompute)
        read_outside = read_outside || std::count(n.inputs.begin(), n.inputs.end(), id) > 0;
    EXPECT_TRUE(read_outside) << "%" << id << " is not a region output";
  }
  // Without recomputation the backward reads many more forward values (norm outputs, q, k,
  // v, the attention's results, the MLP's pre- and post-activation, …).
  const Graph& plain = tg::detail::compiled_graph(q);
  EXPECT_GE(count_forward_values_read_by_backward(plain), 6 * kLayers);
  EXPECT_LT(count_forward_values_read_by_backward(g), count_forward_values_read_by_backward(plain));

  // Every block is recomputed (one attention per region in the backward), and block i after
  // block i + 1's backward has read its own recomputed values: only one block's recomputed
  // activations are alive at a time.
  std::map<int32_t, std::vector<int32_t>> copies;  // region → its recomputed copies
  for (int32_t id = 0; id < g.size(); ++id)
    if (g.node(id).stage == Stage::kBackward && g.node(id).recompute >= 0)
      copies[g.node(id).recompute].push_back(id);
  ASSERT_EQ(static_cast<int64_t>(copies.size()), kLayers);
  for (const auto& [region, ids] : copies) {
    const auto attention = std::count_if(ids.begin(), ids.end(),
                                         [&](int32_t id) { return g.node(id).op == tg::ir::Op::kAttention; });
    EXPECT_EQ(attention, 1) << "region " << region;
  }
  for (int32_t r = 0; r + 1 < kLayers; ++r) {
    int32_t last_reader_of_next = -1;  // the last node that reads a copy of region r + 1
    for (int32_t id = 0; id < g.size(); ++id)
      for (int32_t in : g.node(id).inputs)
        if (g.node(in).stage == Stage::kBackward && g.node(in).recompute == r + 1 &&
            g.node(id).recompute != r + 1)
          last_reader_of_next = id;
    EXPECT_GT(copies[r].front(), last_reader_of_next) << "region " << r;
  }
}

/// Three training steps (AdamW, clipping) of two copies of one GPT, with and without
/// recomputation, from the same weights and batch: the losses, gradients and parameters
/// agree within `tol` (relative for the losses).
void check_gpt_recompute_trains_identically(tg::Device device, double dropout, double tol) {
  tg::nn::Gpt with(small_gpt(2, true, dropout)), without(small_gpt(2, false, dropout));
  tg::Program p = compile_gpt(with, device, 3, tg::AdamW{.lr = 1e-2, .weight_decay = 0.1});
  tg::Program q = compile_gpt(without, device, 3, tg::AdamW{.lr = 1e-2, .weight_decay = 0.1});
  p.init_params(3);
  q.upload_params(p.download_params());
  std::vector<int32_t> ids(18), targets(18);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 7) % 11);
    targets[i] = static_cast<int32_t>((i * 5 + 3) % 11);
  }
  for (int step = 0; step < 3; ++step) {
    tg::Captures cp, cq;
    const float a = p.step({{"ids", ids}, {"targets", targets}}, {.captures = &cp});
    const float b = q.step({{"ids", ids}, {"targets", targets}}, {.captures = &cq});
    EXPECT_NEAR(a, b, tol * std::fabs(b)) << "step " << step;
    for (const auto& [name, t] : cq)
      EXPECT_LE(tg::testing::rel_diff(cp.at(name).f32(), t.f32()), tol) << name << " at step " << step;
  }
  const auto pa = p.download_params(), pb = q.download_params();
  for (const auto& [name, t] : pb) EXPECT_LE(tg::testing::rel_diff(pa.at(name).f32(), t.f32()), tol) << name;
}

TEST(Recompute, GptTrainsIdenticallyOnRef) {
  check_gpt_recompute_trains_identically(tg::Device::ref(), 0.0, 0.0);
}

TEST(Recompute, GptWithDropoutRecomputesTheSameMasksOnRef) {
  // A different mask in the backward would change every gradient by O(1), not by rounding.
  check_gpt_recompute_trains_identically(tg::Device::ref(), 0.2, 0.0);
}

TEST(Recompute, GptTrainsIdenticallyOnCpu) {
  check_gpt_recompute_trains_identically(tg::Device::cpu(), 0.2, 0.0);
}

TEST(Recompute, MambaTrainsIdenticallyOnRef) {
  // The selective scan is a multi-output node: its copy is one node read by copied results.
  auto config = [](bool recompute) {
    return tg::nn::MambaLMConfig{.vocab = 9, .layers = 2, .d_model = 8, .d_state = 4, .recompute = recompute};
  };
  tg::nn::MambaLM with(config(true)), without(config(false));
  auto compile = [](tg::nn::MambaLM& m) {
    return tg::compile_train(
        m, [&](tg::Tensor ids, tg::Tensor targets) { return m.loss(ids, targets); },
        {.inputs = {{"ids", {2, 5}, tg::DType::kI32}, {"targets", {2, 5}, tg::DType::kI32}},
         .optimizer = tg::AdamW{.lr = 1e-2},
         .device = tg::Device::ref()});
  };
  tg::Program p = compile(with), q = compile(without);
  p.init_params(1);
  q.upload_params(p.download_params());
  const std::vector<int32_t> ids{1, 2, 3, 4, 5, 6, 7, 8, 0, 1}, targets{2, 3, 4, 5, 6, 7, 8, 0, 1, 2};
  int scans = 0;
  const Graph& g = tg::detail::compiled_graph(p);
  for (const Node& n : g.nodes())
    scans += n.stage == Stage::kBackward && n.op == tg::ir::Op::kSelectiveScan && n.recompute >= 0;
  EXPECT_EQ(scans, 2);  // one recomputed scan per layer
  for (int step = 0; step < 2; ++step)
    EXPECT_EQ(p.step({{"ids", ids}, {"targets", targets}}), q.step({{"ids", ids}, {"targets", targets}}));
  const auto pa = p.download_params(), pb = q.download_params();
  for (const auto& [name, t] : pb) EXPECT_EQ(tg::testing::rel_diff(pa.at(name).f32(), t.f32()), 0.0) << name;
}

struct TwoLayerMlp : tg::Module {
  tg::nn::Linear l1{*this, "l1", 3, 8}, l2{*this, "l2", 8, 8}, l3{*this, "l3", 8, 1};
  tg::Tensor operator()(const tg::Tensor& x) const {
    tg::Tensor h;
    {
      tg::Recompute region;
      h = tg::tanh(l1(x));
      {
        tg::Recompute inner;  // joins the outer region
        h = tg::tanh(l2(h)) * h;
      }
    }
    return l3(h);
  }
};

TEST(Recompute, MlpGradientsMatchFiniteDifferences) {
  TwoLayerMlp model;
  auto loss = [&](tg::Tensor x, tg::Tensor y) {
    tg::Tensor d = model(x) - y;
    return tg::mean(d * d);
  };
  const std::vector<tg::InputSpec> inputs{{"x", {5, 3}}, {"y", {5, 1}}};
  tg::Program train = tg::compile_train(
      model, loss, {.inputs = inputs, .optimizer = tg::GradientsOnly{}, .device = tg::Device::ref()});
  tg::Program eval = tg::compile_forward(model, loss, {.inputs = inputs, .device = tg::Device::ref()});
  train.init_params(5);
  const Graph& g = tg::detail::compiled_graph(train);
  std::set<int32_t> regions;
  for (const Node& n : g.nodes())
    if (n.recompute >= 0) regions.insert(n.recompute);
  EXPECT_EQ(regions, (std::set<int32_t>{0}));  // the nested scope opened no region of its own
  EXPECT_FALSE(region_values_read_by_backward(g).size() > 1);

  std::vector<float> x(15), y(5);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * static_cast<float>(i));
  for (size_t i = 0; i < y.size(); ++i) y[i] = std::cos(1.3f * static_cast<float>(i));
  const tg::Feeds feeds{{"x", x}, {"y", y}};
  tg::Captures grads;
  train.step(feeds, {.captures = &grads});
  // Central differences of the f32 parameters; the ref backend computes in double, so the
  // error is the O(h²) truncation (and the parameters' f32 rounding of w ± h).
  auto params = train.download_params();
  for (const char* name : {"l1.weight", "l2.weight", "l2.bias"}) {
    for (size_t k : {size_t{0}, size_t{5}}) {
      const float w = params.at(name).f32()[k], h = 1e-2f;
      auto at = [&](float v) {
        std::map<std::string, tg::HostTensor> one{{name, params.at(name)}};
        one.at(name).f32()[k] = v;
        train.upload_params(one, {.partial = true});
        return static_cast<double>(eval.run(feeds).f32()[0]);
      };
      const double fd = (at(w + h) - at(w - h)) / (2.0 * static_cast<double>(h));
      at(w);
      EXPECT_NEAR(grads.at(std::string("grad/") + name).f32()[k], fd, 1e-3 * std::max(1.0, std::fabs(fd)))
          << name << "[" << k << "]";
    }
  }
}

TEST(Recompute, IsANoOpOutsideATrace) {
  const tg::Recompute region;  // nothing is being traced: nothing to stamp, nothing thrown
  tg::ir::Trace trace;
  {
    tg::ir::TraceScope scope(trace);
    const tg::Recompute off(false);
    EXPECT_EQ(trace.graph.recompute, -1);
    {
      const tg::Recompute on;
      EXPECT_EQ(trace.graph.recompute, 0);
    }
    EXPECT_EQ(trace.graph.recompute, -1);
    const tg::Recompute next;
    EXPECT_EQ(trace.graph.recompute, 1);  // each region its own id
  }
}

}  // namespace

namespace {

TEST(Recompute, DeepGptPlansLessMemory) {
  // u = one [B·T, C] f32 value. Without recomputation a block keeps 15 u from its forward to
  // its backward besides its input: ln1's output, q, k and v, the attention's output, the
  // residual h, ln2's output, fc's output (4 u, before the GELU) and the GELU's (4 u); all L
  // blocks' are alive when the backward starts. With it the step keeps the L block inputs,
  // one block's recomputed values (15 u) and that block's backward temporaries (≤ 16 u, as
  // many), and every parameter's gradient, alive until the optimizer runs after the backward.
  constexpr int64_t kLayers = 8, kBatch = 16, kT = 32, kC = 64;
  constexpr int64_t u = kBatch * kT * kC * 4;
  auto config = [](bool recompute) {
    return tg::nn::GptConfig{
        .vocab = 16, .seq_len = kT, .layers = kLayers, .d_model = kC, .heads = 4, .recompute = recompute};
  };
  tg::nn::Gpt with(config(true)), without(config(false));
  const tg::Program p = compile_gpt(with, tg::Device::cpu(), kBatch, tg::AdamW{});
  const tg::Program q = compile_gpt(without, tg::Device::cpu(), kBatch, tg::AdamW{});
  const tg::MemoryReport a = p.memory_report(), b = q.memory_report();
  std::printf("with recomputation:\n%s\nwithout:\n%s\n", a.to_string().c_str(), b.to_string().c_str());
  EXPECT_GE(b.activations, kLayers * 15 * u);
  EXPECT_LE(a.arena, (kLayers + 15 + 16) * u + a.params);
  // The target (a 40% smaller planned peak), here with 1.5 MiB of parameters and 3 MiB
  // of moments, which recomputation does not touch.
  EXPECT_LE(a.planned_peak(), 0.6 * static_cast<double>(b.planned_peak()));
}

/// Kernel groups that hold both forward nodes and recomputed copies (run in the forward, so
/// the copy would be stored after all).
int mixed_groups(const Graph& g) {
  int mixed = 0;
  for (const tg::passes::KernelGroup& group : tg::passes::fuse(g).groups) {
    bool forward = false, copy = false;
    for (int32_t id : group.nodes) {
      forward = forward || g.node(id).stage == Stage::kForward;
      copy = copy || (g.node(id).stage != Stage::kForward && g.node(id).recompute >= 0);
    }
    mixed += forward && copy;
  }
  return mixed;
}

struct ElementwiseIntoRegion : tg::Module {
  tg::nn::Linear l1{*this, "l1", 4, 16}, l2{*this, "l2", 16, 1};
  tg::Tensor operator()(const tg::Tensor& x) const {
    const tg::Tensor a = tg::relu(l1(x));  // an elementwise value made before the region
    tg::Tensor h;
    {
      tg::Recompute region;
      h = tg::tanh(a) * 2.0;  // its copy reads a alone: fusion could put it in a's group
    }
    return l2(h);
  }
};

TEST(Recompute, CopiesNeverFuseIntoForwardGroups) {
  ElementwiseIntoRegion model;
  const tg::Program p = tg::compile_train(
      model, [&](tg::Tensor x) { return tg::mean(model(x)); },
      {.inputs = {{"x", {8, 4}}}, .optimizer = tg::SGD{.lr = 0.1}, .device = tg::Device::cpu()});
  const Graph& g = tg::detail::compiled_graph(p);
  int copies = 0;
  for (const Node& n : g.nodes()) copies += n.stage == Stage::kBackward && n.recompute >= 0;
  EXPECT_GT(copies, 0);
  EXPECT_EQ(mixed_groups(g), 0);
  tg::nn::Gpt gpt(small_gpt(2, true, 0.1));
  EXPECT_EQ(mixed_groups(tg::detail::compiled_graph(compile_gpt(gpt, tg::Device::cpu(), 2, tg::AdamW{}))), 0);
}

}  // namespace
