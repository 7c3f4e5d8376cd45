// Dead-code elimination keeps exactly what outputs and updates read (plus every input),
// renumbers consistently, and leaves results unchanged.
#include <gtest/gtest.h>

#include "backend/ref/ref_backend.h"
#include "ir/api_util.h"
#include "passes/dce.h"

namespace {

using namespace tg;

TEST(Dce, RemovesUnreadNodesAndKeepsResults) {
  ir::Trace trace;
  ir::TraceScope scope(trace);
  ir::Graph& g = trace.graph;
  auto input = [&](const char* name) {
    return ir::named_leaf(g, ir::Op::kInput, name, {3}, DType::kF32, Loc::current());
  };
  Tensor a = input("a"), unused = input("unused");
  Tensor dead = exp(a) * 3.0;  // never read
  Tensor out = a * 2.0 + 1.0;
  (void)dead;
  g.outputs = {out.id()};
  std::vector<int32_t> remap;
  ir::Graph pruned = passes::eliminate_dead_code(g, remap);
  // Kept: a, unused (inputs are always kept), 2.0, broadcast, mul, 1.0, broadcast, add.
  EXPECT_EQ(pruned.size(), g.size() - 4);  // exp, 3.0, its broadcast, mul are gone
  EXPECT_EQ(remap[static_cast<size_t>(unused.id())], 1);
  EXPECT_EQ(remap[static_cast<size_t>(dead.id())], -1);
  for (int32_t id = 0; id < pruned.size(); ++id)
    for (int32_t in : pruned.node(id).inputs) EXPECT_LT(in, id);

  auto backend = backend::make_ref_backend();
  auto exec = backend->prepare(pruned, {});
  auto* ref = dynamic_cast<backend::RefExecutable*>(exec.get());
  ASSERT_NE(ref, nullptr);
  const std::vector<double> av{1, 2, 3}, zero{0, 0, 0};
  ref->set_input_f64(remap[static_cast<size_t>(a.id())], av);
  ref->set_input_f64(remap[static_cast<size_t>(unused.id())], zero);
  ref->execute();
  EXPECT_EQ(ref->value_f64(pruned.outputs[0]), (std::vector<double>{3, 5, 7}));
}

}  // namespace
