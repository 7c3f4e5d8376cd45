// The memory plan, simulated: no two buffers that are live at the same time may overlap,
// on the example models' training graphs and on random graphs; and reuse must pay off.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <random>

#include "ir/api_util.h"
#include "passes/memory_plan.h"

namespace {

using namespace tg;

/// Checks every pair of simultaneously live buffers for overlap; returns the peak of the
/// sum of live bytes (a lower bound for any plan without in-place reuse).
int64_t simulate(const ir::Graph& g, const passes::MemoryPlan& plan) {
  const int32_t n = g.size();
  auto end_of = [&](int32_t id) { return std::max(plan.last_use[static_cast<size_t>(id)], id); };
  int64_t peak_live = 0;
  for (int32_t t = 0; t < n; ++t) {
    std::vector<int32_t> live;
    int64_t live_bytes = 0;
    for (int32_t id = 0; id <= t; ++id)
      if (plan.offset[static_cast<size_t>(id)] >= 0 && end_of(id) >= t) {
        live.push_back(id);
        live_bytes += plan.bytes[static_cast<size_t>(id)];
      }
    peak_live = std::max(peak_live, live_bytes);
    for (size_t i = 0; i < live.size(); ++i)
      for (size_t j = i + 1; j < live.size(); ++j) {
        const int64_t a0 = plan.offset[static_cast<size_t>(live[i])],
                      a1 = a0 + plan.bytes[static_cast<size_t>(live[i])];
        const int64_t b0 = plan.offset[static_cast<size_t>(live[j])],
                      b1 = b0 + plan.bytes[static_cast<size_t>(live[j])];
        if (a0 < b1 && b0 < a1) {
          ADD_FAILURE() << "nodes %" << live[i] << " and %" << live[j] << " overlap while both live at %"
                        << t;
          return peak_live;
        }
      }
  }
  for (int32_t id = 0; id < n; ++id) {
    if (plan.offset[static_cast<size_t>(id)] < 0) continue;
    EXPECT_LE(plan.offset[static_cast<size_t>(id)] + plan.bytes[static_cast<size_t>(id)], plan.arena_bytes);
  }
  return peak_live;
}

TEST(MemoryPlan, ExampleTrainingGraphsNeverOverlapAndReuseMemory) {
  tg::nn::Gpt gpt({.vocab = 16, .seq_len = 8, .layers = 3, .d_model = 64, .heads = 4});
  auto train =
      tg::compile_train(gpt, [&](tg::Tensor ids, tg::Tensor targets) { return gpt.loss(ids, targets); },
                        {.inputs = {{"ids", {32, 8}, tg::DType::kI32}, {"targets", {32, 8}, tg::DType::kI32}},
                         .optimizer = tg::AdamW{.lr = 1e-3},
                         .clip_grad_norm = 1.0,
                         .device = tg::Device::ref()});
  const ir::Graph& g = tg::detail::compiled_graph(train);
  const passes::MemoryPlan plan = passes::plan_memory(g);
  const int64_t peak_live = simulate(g, plan);
  EXPECT_GE(plan.arena_bytes, peak_live);
  // Reuse: the arena is a fraction of one-buffer-per-node (seen: see the printed ratio).
  const double ratio = static_cast<double>(plan.arena_bytes) / static_cast<double>(plan.total_bytes);
  std::printf(
      "addition_3L (batch 32) train step: arena %lld bytes, no-reuse %lld bytes, ratio %.3f, peak live "
      "%lld\n",
      static_cast<long long>(plan.arena_bytes), static_cast<long long>(plan.total_bytes), ratio,
      static_cast<long long>(peak_live));
  EXPECT_LT(ratio, 0.6);
}

TEST(MemoryPlan, RandomGraphsNeverOverlap) {
  for (uint64_t seed = 0; seed < 30; ++seed) {
    std::mt19937_64 rng(seed);
    ir::Trace trace;
    {
      ir::TraceScope scope(trace);
      std::vector<Tensor> pool;
      for (int i = 0; i < 3; ++i) {
        // One shape, so any two values combine.
        pool.push_back(ir::named_leaf(trace.graph, ir::Op::kInput, "x" + std::to_string(i), {4, 4},
                                      DType::kF32, Loc::current()));
      }
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
          default: pool.push_back(tanh(a)); break;
        }
      }
      trace.graph.outputs = {pool.back().id(), pool[pool.size() / 2].id()};
    }
    const passes::MemoryPlan plan = passes::plan_memory(trace.graph);
    EXPECT_GE(plan.arena_bytes, simulate(trace.graph, plan));
    EXPECT_LE(plan.arena_bytes, plan.total_bytes);
  }
}

}  // namespace
