// The schedule (passes/schedule.h) on its own, with a made-up backend's capabilities: views
// stay views only for readers that take their strides, optimizer updates are written in
// place only when nothing reads the old value afterwards, outputs are settled dense, group
// steps batch only without hazards, and the arena never lets two buffers live at a common
// launch overlap (simulated on the Schedule of a GPT training step and of random graphs).
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <random>

#include "ir/api_util.h"
#include "ir/strides.h"
#include "passes/schedule.h"

namespace {

using namespace tg;
using passes::Step;

/// A backend whose reductions and products want dense inputs; everything else reads any strides.
class DenseReductions final : public passes::Capabilities {
 public:
  bool reads(const ir::Graph& g, const ir::Node& consumer, size_t index,
             const std::vector<int64_t>& strides) const override {
    const Shape& shape = g.node(consumer.inputs[index]).shape;
    if (consumer.op == ir::Op::kSum || consumer.op == ir::Op::kMatmul)
      return is_contiguous_strides(strides, shape);
    return true;
  }
};

Tensor input(ir::Trace& t, const char* name, Shape shape) {
  return ir::named_leaf(t.graph, ir::Op::kInput, name, std::move(shape), DType::kF32, Loc::current());
}
Tensor param(ir::Trace& t, const char* name, Shape shape) {
  return ir::named_leaf(t.graph, ir::Op::kParam, name, std::move(shape), DType::kF32, Loc::current());
}

int count(const passes::Schedule& s, Step::Kind kind) {
  return static_cast<int>(
      std::count_if(s.steps.begin(), s.steps.end(), [&](const Step& st) { return st.kind == kind; }));
}

/// Every arena buffer a launch touches is planned live there; no two arena buffers live at a
/// common launch overlap. Returns the peak of live bytes.
int64_t simulate(const passes::Schedule& s) {
  for (const Step& st : s.steps)
    for (const auto* places : {&st.in, &st.out, &st.scratch})
      for (const passes::Place& p : *places) {
        const passes::Buffer& b = s.buffers[static_cast<size_t>(p.buffer)];
        if (b.home != passes::Buffer::Home::kArena) continue;
        EXPECT_TRUE(b.first <= st.launch && st.launch <= b.last)
            << "launch " << st.launch << " touches a buffer live [" << b.first << ", " << b.last << "]";
      }
  int64_t peak = 0;
  for (int32_t t = 0; t <= s.launches; ++t) {
    std::vector<const passes::Buffer*> live;
    int64_t bytes = 0;
    for (const passes::Buffer& b : s.buffers)
      if (b.home == passes::Buffer::Home::kArena && b.bytes > 0 && b.first <= t && t <= b.last) {
        live.push_back(&b);
        bytes += b.bytes;
      }
    peak = std::max(peak, bytes);
    for (size_t i = 0; i < live.size(); ++i)
      for (size_t j = i + 1; j < live.size(); ++j)
        if (live[i]->offset < live[j]->offset + live[j]->bytes &&
            live[j]->offset < live[i]->offset + live[i]->bytes) {
          ADD_FAILURE() << "two buffers overlap while both live at launch " << t;
          return peak;
        }
  }
  for (const passes::Buffer& b : s.buffers)
    if (b.home == passes::Buffer::Home::kArena) {
      EXPECT_LE(b.offset + b.bytes, s.arena.bytes);
    }
  return peak;
}

TEST(Schedule, ViewsStayViewsOnlyForReadersThatTakeTheirStrides) {
  ir::Trace t;
  int32_t xt = -1, strided = -1, dense = -1;
  {
    ir::TraceScope scope(t);
    Tensor x = input(t, "x", {4, 6});
    Tensor y = transpose(x) * 2.0;           // an elementwise reader: the transpose stays a view
    Tensor z = sum(transpose(exp(x)), {1});  // a reduction wanting dense rows: a copy
    xt = y.id();
    strided = z.id();
    t.graph.outputs = {y.id(), z.id()};
  }
  const passes::Schedule s = passes::schedule(t.graph, DenseReductions{});
  EXPECT_EQ(count(s, Step::Kind::kCopy), 1);
  for (const Step& st : s.steps) {
    if (st.kind == Step::Kind::kNode && st.node == strided) {
      EXPECT_TRUE(is_contiguous_strides(st.in[0].strides, {6, 4}));
      dense = st.in[0].buffer;
    }
    if (st.kind == Step::Kind::kGroup && std::count(st.nodes.begin(), st.nodes.end(), xt)) {
      EXPECT_EQ(st.in[0].strides, (std::vector<int64_t>{1, 6}));  // x read through the transpose
    }
  }
  EXPECT_GE(dense, 0);
}

TEST(Schedule, UpdatesAreWrittenInPlaceOnlyWhenNothingReadsTheOldValue) {
  for (bool old_is_output : {false, true}) {
    ir::Trace t;
    {
      ir::TraceScope scope(t);
      Tensor w = param(t, "w", {8, 8}), g = input(t, "g", {8, 8});
      Tensor next = w - g * 0.1;
      t.graph.updates.push_back({w.id(), next.id()});
      t.graph.outputs = {old_is_output ? w.id() : sum(next).id()};
    }
    const passes::Schedule s = passes::schedule(t.graph, DenseReductions{});
    ASSERT_EQ(s.updates.size(), 1u);
    EXPECT_EQ(s.updates[0].in_place, !old_is_output);
    const int32_t w_buffer = s.places[static_cast<size_t>(s.updates[0].target)].buffer;
    EXPECT_EQ(s.buffers[static_cast<size_t>(w_buffer)].home, passes::Buffer::Home::kBound);
    EXPECT_EQ(s.places[static_cast<size_t>(s.updates[0].value)].buffer == w_buffer, !old_is_output);
    // The old value read after the step is copied aside before the update lands.
    if (old_is_output) {
      EXPECT_NE(s.output_places[0].buffer, w_buffer);
    }
  }
}

TEST(Schedule, OutputsAreSettledDense) {
  ir::Trace t;
  {
    ir::TraceScope scope(t);
    Tensor x = input(t, "x", {3, 5});
    t.graph.outputs = {transpose(exp(x)).id()};
  }
  const passes::Schedule s = passes::schedule(t.graph, DenseReductions{});
  ASSERT_EQ(s.outputs.size(), 1u);
  EXPECT_TRUE(is_contiguous_strides(s.output_places[0].strides, {5, 3}));
  EXPECT_EQ(count(s, Step::Kind::kCopy), 1);
  EXPECT_TRUE(s.buffers[static_cast<size_t>(s.output_places[0].buffer)].to_end);
}

TEST(Schedule, IndependentGroupsShareALaunchAndDependentOnesDoNot) {
  ir::Trace t;
  {
    ir::TraceScope scope(t);
    Tensor a = param(t, "a", {16}), b = param(t, "b", {32}), g = input(t, "g", {16}), h = input(t, "h", {32});
    t.graph.updates.push_back({a.id(), (a - g * 0.5).id()});
    t.graph.updates.push_back({b.id(), (b - h * 0.5).id()});
    Tensor e = exp(g);                        // a group
    t.graph.outputs = {(sum(e) * 1.0).id()};  // its reader
  }
  for (bool fuse : {true, false}) {
    const passes::Schedule s =
        passes::schedule(t.graph, DenseReductions{}, {.fuse = fuse, .reuse_memory = true});
    std::vector<int32_t> update_launch;
    for (const Step& st : s.steps)
      if (st.kind == Step::Kind::kGroup &&
          s.buffers[static_cast<size_t>(st.out[0].buffer)].home == passes::Buffer::Home::kBound)
        update_launch.push_back(st.launch);  // an update written in place
    if (fuse) {
      ASSERT_EQ(update_launch.size(), 2u);
      EXPECT_EQ(update_launch[0], update_launch[1]);
    }
    for (size_t i = 1; i < s.steps.size(); ++i) {  // a step never shares a launch with a step it reads from
      if (s.steps[i].launch != s.steps[i - 1].launch) continue;
      for (const passes::Place& r : s.steps[i].in)
        for (const passes::Place& w : s.steps[i - 1].out) EXPECT_NE(r.buffer, w.buffer);
    }
    if (!fuse) {
      EXPECT_EQ(s.launches, static_cast<int32_t>(s.steps.size()));
    }
  }
}

TEST(Schedule, ArenaOfAGptTrainingStepNeverOverlaps) {
  nn::Gpt gpt({.vocab = 16, .seq_len = 8, .layers = 3, .d_model = 64, .heads = 4});
  auto train = compile_train(gpt, [&](Tensor ids, Tensor targets) { return gpt.loss(ids, targets); },
                             {.inputs = {{"ids", {32, 8}, DType::kI32}, {"targets", {32, 8}, DType::kI32}},
                              .optimizer = AdamW{.lr = 1e-3},
                              .clip_grad_norm = 1.0,
                              .device = Device::ref()});
  const ir::Graph& g = detail::compiled_graph(train);
  for (bool reuse : {true, false}) {
    const passes::Schedule s = passes::schedule(g, DenseReductions{}, {.fuse = true, .reuse_memory = reuse});
    const int64_t peak = simulate(s);
    EXPECT_GE(s.arena.bytes, peak);
    if (reuse)
      EXPECT_LT(static_cast<double>(s.arena.bytes), 0.6 * static_cast<double>(s.arena.no_reuse));
    else
      EXPECT_EQ(s.arena.bytes, s.arena.no_reuse);
  }
}

TEST(Schedule, ArenaOfRandomGraphsNeverOverlaps) {
  for (uint64_t seed = 0; seed < 30; ++seed) {
    std::mt19937_64 rng(seed);
    ir::Trace t;
    {
      ir::TraceScope scope(t);
      std::vector<Tensor> pool;
      for (int i = 0; i < 3; ++i) pool.push_back(input(t, i == 0 ? "x0" : i == 1 ? "x1" : "x2", {4, 4}));
      for (int step = 0; step < 25; ++step) {
        const Tensor& a = pool[rng() % pool.size()];
        const Tensor& b = pool[rng() % pool.size()];
        switch (rng() % 5) {
          case 0: pool.push_back(sum(a, {0}, true) + b); break;
          case 1: pool.push_back(exp(a) * 0.5); break;
          case 2: {
            const auto start = static_cast<int64_t>(rng() % 5);
            pool.push_back(slice(concat({a, b}, 0), 0, start, start + 4, 1));
            break;
          }
          case 3: pool.push_back(matmul(transpose(a), b)); break;
          default: pool.push_back(tanh(transpose(a))); break;
        }
      }
      t.graph.outputs = {pool.back().id(), pool[pool.size() / 2].id()};
    }
    const passes::Schedule s = passes::schedule(t.graph, DenseReductions{});
    EXPECT_GE(s.arena.bytes, simulate(s)) << "seed " << seed;
    for (const Step& st : s.steps)  // products and sums got the dense operands they asked for
      if (st.kind == Step::Kind::kNode)
        for (size_t k = 0; k < st.in.size(); ++k)
          if (t.graph.node(st.node).op == ir::Op::kMatmul) {
            EXPECT_TRUE(
                is_contiguous_strides(st.in[k].strides, t.graph.node(t.graph.node(st.node).inputs[k]).shape));
          }
  }
}

}  // namespace
