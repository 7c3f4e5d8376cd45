// place_collectives_early: a collective moves up to just after its last operand (so a backend
// can send a bucket of gradients while the backward goes on) and the order stays topological.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include "ir/api_util.h"
#include "passes/rewrite.h"

namespace {

using namespace tg;

TEST(Collectives, MoveUpToJustAfterTheirLastOperand) {
  ir::Trace trace;
  int32_t a = -1, b = -1, sums = -1;
  {
    ir::TraceScope scope(trace);
    const Tensor x = ir::named_leaf(trace.graph, ir::Op::kInput, "x", {4}, DType::kF32, Loc::current());
    const Tensor ta = x * 2.0, tb = exp(x);
    const Tensor later = (ta + tb) * 3.0;  // work the collectives need not wait for
    const Tensor more = sin(later) + cos(later);
    sums = ir::emit(trace.graph, ir::make_node(ir::Op::kAllReduce, {ta.id(), tb.id()}, Loc::current())).id();
    const Tensor r0 = ir::result(trace.graph, sums, 0, Loc::current());
    trace.graph.outputs = {(r0 + more).id()};
    a = ta.id();
    b = tb.id();
  }
  std::vector<int32_t> remap;
  const ir::Graph g = passes::place_collectives_early(trace.graph, remap);
  ASSERT_EQ(g.size(), trace.graph.size());
  const int32_t moved = remap[static_cast<size_t>(sums)];
  EXPECT_EQ(moved, std::max(remap[static_cast<size_t>(a)], remap[static_cast<size_t>(b)]) + 1);
  EXPECT_LT(moved, sums);
  for (int32_t id = 0; id < g.size(); ++id)
    for (int32_t in : g.node(id).inputs) EXPECT_LT(in, id) << "node " << id;
  EXPECT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.node(g.outputs[0]).op, ir::Op::kAdd);
  // The whole pipeline ends with it: the all_reduce still sits right after its operands.
  std::vector<int32_t> all;
  const ir::Graph o = passes::optimize(trace.graph, all);
  const int32_t at = all[static_cast<size_t>(sums)];
  EXPECT_EQ(at, std::max(all[static_cast<size_t>(a)], all[static_cast<size_t>(b)]) + 1);
}

// ZeRO's flat bucket (gradients reshaped, padded with zeros and concatenated) goes up with the
// reduce_scatter that reads it; other data movement stays.
TEST(Collectives, TheirFlatBucketMovesUpWithThem) {
  ir::Trace trace;
  int32_t g1 = -1, flat = -1, scattered = -1, shared = -1;
  {
    ir::TraceScope scope(trace);
    const Tensor x = ir::named_leaf(trace.graph, ir::Op::kInput, "x", {2, 3}, DType::kF32, Loc::current());
    const Tensor ga = x * 2.0, gb = exp(x);
    const Tensor later = sin((ga + gb) * 3.0);
    const Tensor seen = reshape(gb, {3, 2});  // data movement the collective does not read
    const Tensor pad = ir::constant_on(trace.graph, {0.0}, {2}, DType::kF32, Loc::current());
    const Tensor bucket = concat(std::vector<Tensor>{reshape(ga, {6}), reshape(gb, {6}), pad}, 0);
    ir::Node rs = ir::make_node(ir::Op::kReduceScatter, {bucket.id()}, Loc::current());
    rs.attrs.values = {2};
    const Tensor part = ir::emit(trace.graph, std::move(rs));
    trace.graph.outputs = {(sum(part) + sum(later) + sum(seen)).id()};
    g1 = gb.id();
    flat = bucket.id();
    scattered = part.id();
    shared = seen.id();
  }
  std::vector<int32_t> remap;
  const ir::Graph g = passes::place_collectives_early(trace.graph, remap);
  auto at = [&](int32_t id) { return remap[static_cast<size_t>(id)]; };
  EXPECT_LT(at(flat), at(g1) + 4) << "the bucket follows the last gradient closely";
  EXPECT_EQ(at(scattered), at(flat) + 1);
  EXPECT_GT(at(shared), at(scattered)) << "not read by a collective: it stays behind";
  for (int32_t id = 0; id < g.size(); ++id)
    for (int32_t in : g.node(id).inputs) EXPECT_LT(in, id) << "node " << id;
}

}  // namespace
