// Multi-output nodes (ir::Node::results): attention, selective_scan and their gradients are one node each
// with several typed results, read through kResult nodes; autograd gathers a gradient per
// result and hands the rule all of them, so no slice, unslice or concat packs or unpacks
// results anywhere in the graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "autograd/grad.h"
#include "ir/api_util.h"
#include "ops/op_harness.h"
#include "tensorgrad/functional.h"
#include "test_util.h"

namespace tg::op_test {
namespace {

using ir::Op;

Traced scan_loss(bool y, bool last) {
  return trace_fn(
      {uni({2, 4, 7}), uni({2, 4, 7}, 0.1, 0.8), uni({4, 3}, -1.5, -0.2), uni({2, 3, 7}), uni({2, 3, 7})},
      [&](const Ts& x) {
        const SelectiveScanResult r = selective_scan(x[0], x[1], x[2], x[3], x[4]);
        if (y && last) return sum(r.y) + sum(r.last_state * 2.0f);
        return y ? sum(r.y) : sum(r.last_state);
      });
}

int32_t only(const ir::Graph& g, Op op) {
  int32_t found = -1, count = 0;
  for (int32_t id = 0; id < g.size(); ++id)
    if (g.node(id).op == op) found = id, ++count;
  EXPECT_EQ(count, 1) << ir::op_name(op);
  return found;
}

TEST(MultiOutput, SelectiveScanHasTypedResults) {
  const Traced t = scan_loss(true, true);
  const ir::Graph& g = t.graph;
  const ir::Node& scan = g.node(only(g, Op::kSelectiveScan));
  ASSERT_EQ(scan.results.size(), 3u);
  EXPECT_EQ(scan.results[0], (ir::ValueType{DType::kF32, {2, 4, 7}}));  // y
  EXPECT_EQ(scan.results[1], (ir::ValueType{DType::kF32, {2, 4, 3}}));  // last state
  EXPECT_EQ(scan.results[2], (ir::ValueType{DType::kF32, {0}}));        // saved: sized by the backend
  EXPECT_EQ(scan.shape, (Shape{2 * 4 * 7 + 2 * 4 * 3}));                // the results' one allocation
  EXPECT_EQ(ir::result_offset(scan, 1), 2 * 4 * 7);
  for (const ir::Node& n : g.nodes()) EXPECT_NE(n.op, Op::kSlice) << "no slice unpacks the results";
  EXPECT_NE(g.to_string().find("(f32[2, 4, 7], f32[2, 4, 3], f32[0])"), std::string::npos) << g.to_string();
}

TEST(MultiOutput, GradientReadsEachCotangentAndGivesEachInputItsResult) {
  for (const auto& [y, last] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
    Traced t = scan_loss(y, last);
    autograd::append_gradients(t.graph, t.out, t.inputs);
    const ir::Graph& g = t.graph;
    const ir::Node& grad = g.node(only(g, Op::kSelectiveScanGrad));
    ASSERT_EQ(grad.results.size(), 7u);
    for (size_t i = 0; i < 7; ++i) EXPECT_EQ(grad.results[i].shape, g.node(grad.inputs[i]).shape);
    // dy and dlast: the cotangents themselves, a known zero where a result reaches no loss.
    EXPECT_EQ(ir::constant_value(g, grad.inputs[7]) == 0.0, !y);
    EXPECT_EQ(ir::constant_value(g, grad.inputs[8]) == 0.0, !last);
    EXPECT_EQ(g.node(grad.inputs[9]).op, Op::kResult);
    EXPECT_EQ(g.node(grad.inputs[9]).attrs.axes, (std::vector<int64_t>{2}));
    for (const ir::Node& n : g.nodes()) {
      EXPECT_NE(n.op, Op::kUnslice) << "no unslice packs the cotangents";
      EXPECT_NE(n.op, Op::kConcat) << "no concat packs the cotangents";
      EXPECT_NE(n.op, Op::kSlice) << "no slice unpacks the gradients";
    }
  }
}

TEST(MultiOutput, AttentionAndItsGradient) {
  Traced t = trace_fn({uni({2, 4, 5, 8}), uni({2, 2, 5, 8}), uni({2, 2, 5, 8})},
                      [](const Ts& x) { return sum(attention(x[0], x[1], x[2], {.causal = true})); });
  autograd::append_gradients(t.graph, t.out, t.inputs);
  const ir::Graph& g = t.graph;
  const ir::Node& fwd = g.node(only(g, Op::kAttention));
  ASSERT_EQ(fwd.results.size(), 2u);
  EXPECT_EQ(fwd.results[0].shape, (Shape{2, 4, 5, 8}));  // out
  EXPECT_EQ(fwd.results[1].shape, (Shape{0}));           // saved: sized by the backend
  const ir::Node& grad = g.node(only(g, Op::kAttentionGrad));
  ASSERT_EQ(grad.results.size(), 3u);
  EXPECT_EQ(grad.results[0].shape, (Shape{2, 4, 5, 8}));                    // dq
  EXPECT_EQ(grad.results[1].shape, (Shape{2, 2, 5, 8}));                    // dk
  EXPECT_EQ(grad.results[2].shape, (Shape{2, 2, 5, 8}));                    // dv
  EXPECT_EQ(g.node(grad.inputs[4]).op, Op::kResult);                        // the forward's out
  EXPECT_EQ(g.node(grad.inputs[5]).attrs.axes, (std::vector<int64_t>{1}));  // and its saved result
  for (const ir::Node& n : g.nodes()) EXPECT_NE(n.op, Op::kSlice) << "no slice unpacks the gradients";
}

TEST(MultiOutput, OnlyResultNodesReadAMultiOutputNode) {
  Traced t = scan_loss(true, false);
  const int32_t scan = only(t.graph, Op::kSelectiveScan);
  ir::Node bad = ir::make_node(Op::kNeg, {scan}, Loc::current());
  const std::string msg = tg::testing::message_of<ShapeError>([&] { t.graph.add(bad); });
  EXPECT_NE(msg.find("reads a multi-output node directly"), std::string::npos) << msg;
  ir::Node out_of_range = ir::make_node(Op::kResult, {scan}, Loc::current());
  out_of_range.attrs.axes = {3};
  const std::string msg2 = tg::testing::message_of<ShapeError>([&] { t.graph.add(out_of_range); });
  EXPECT_NE(msg2.find("[result] must name one result"), std::string::npos) << msg2;
}

}  // namespace
}  // namespace tg::op_test
