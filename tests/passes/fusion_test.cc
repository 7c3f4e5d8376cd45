// Fusion and the CPU backend's arena, checked on the example models and on random graphs:
//  - the arena the CPU backend actually runs with never lets two buffers that are live at the
//    same kernel overlap, and every kernel only touches buffers planned live at it;
//  - fused + reused execution gives the same numbers as one kernel per node with one buffer
//    per value (optimize = false), step after step;
//  - the kernel count per training step stays under a pinned bound per example model, so a
//    change that silently breaks fusion fails here.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <map>
#include <random>
#include <span>

#include "../../examples/sin_mlp.h"
#include "backend/backend.h"
#include "ir/api_util.h"
#include "passes/fusion.h"
#include "test_util.h"

namespace {

using namespace tg;

/// Overlap check of every pair of buffers live at a common kernel; returns the peak live sum.
int64_t simulate(const backend::ArenaLayout& layout) {
  for (size_t k = 0; k < layout.kernel_buffers.size(); ++k)
    for (int32_t b : layout.kernel_buffers[k]) {
      const auto& e = layout.buffers[static_cast<size_t>(b)];
      EXPECT_TRUE(e.first <= static_cast<int32_t>(k) && static_cast<int32_t>(k) <= e.last)
          << "kernel " << k << " touches buffer " << b << " planned live only for [" << e.first << ", "
          << e.last << "]";
    }
  int64_t peak = 0;
  const int32_t kernels = static_cast<int32_t>(layout.kernel_buffers.size());
  for (int32_t t = 0; t <= kernels; ++t) {
    std::vector<size_t> live;
    int64_t bytes = 0;
    for (size_t i = 0; i < layout.buffers.size(); ++i)
      if (layout.buffers[i].bytes > 0 && layout.buffers[i].first <= t && t <= layout.buffers[i].last) {
        live.push_back(i);
        bytes += layout.buffers[i].bytes;
      }
    peak = std::max(peak, bytes);
    for (size_t i = 0; i < live.size(); ++i)
      for (size_t j = i + 1; j < live.size(); ++j) {
        const auto& a = layout.buffers[live[i]];
        const auto& b = layout.buffers[live[j]];
        if (a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes) {
          ADD_FAILURE() << "buffers " << live[i] << " and " << live[j]
                        << " overlap while both live at kernel " << t;
          return peak;
        }
      }
  }
  for (const auto& e : layout.buffers) EXPECT_LE(e.offset + e.bytes, layout.arena_bytes);
  return peak;
}

struct Example {
  const char* name;
  int64_t max_kernels;  // pinned upper bound (seen + a little slack; see RESULTS.md)
  std::function<Program(bool optimize)> compile;
  std::function<float(Program&, int)> step;
};

std::vector<Example> examples(Device device = Device::cpu()) {
  auto sin_model = std::make_shared<SinMlp>();
  auto gpt = [device](const char* name, int64_t max_kernels, nn::GptConfig config, int64_t batch) {
    auto model = std::make_shared<nn::Gpt>(config);
    const int64_t T = config.seq_len;
    return Example{name, max_kernels,
                   [model, batch, T, device](bool optimize) {
                     return compile_train(
                         *model, [model](Tensor ids, Tensor targets) { return model->loss(ids, targets); },
                         {.inputs = {{"ids", {batch, T}, DType::kI32}, {"targets", {batch, T}, DType::kI32}},
                          .optimizer = AdamW{.lr = 1e-3, .weight_decay = 0.1},
                          .clip_grad_norm = 1.0,
                          .device = device,
                          .optimize = optimize});
                   },
                   [batch, T, vocab = config.vocab](Program& p, int step) {
                     std::vector<int32_t> ids(static_cast<size_t>(batch * T)), targets(ids.size());
                     for (size_t i = 0; i < ids.size(); ++i) {
                       ids[i] = static_cast<int32_t>((i * 7 + static_cast<size_t>(step) * 3) %
                                                     static_cast<size_t>(vocab));
                       targets[i] = static_cast<int32_t>((i * 5 + 1) % static_cast<size_t>(vocab));
                     }
                     return p.step({{"ids", ids}, {"targets", targets}});
                   }};
  };
  return {
      {"mlp_sin", 16,
       [sin_model, device](bool optimize) {
         return compile_train(*sin_model,
                              [sin_model](Tensor x, Tensor y) {
                                Tensor d = (*sin_model)(x)-y;
                                return mean(d * d);
                              },
                              {.inputs = {{"x", {256, 1}}, {"y", {256, 1}}},
                               .optimizer = Adam{.lr = 5e-3},
                               .device = device,
                               .optimize = optimize});
       },
       [](Program& p, int step) {
         std::vector<float> x(256), y(256);
         for (size_t i = 0; i < x.size(); ++i) {
           x[i] = -3.f + 6.f * static_cast<float>((i * 37 + static_cast<size_t>(step) * 11) % 256) / 255.f;
           y[i] = std::sin(x[i]);
         }
         return p.step({{"x", x}, {"y", y}});
       }},
      gpt("addition_3L", 150, {.vocab = 16, .seq_len = 8, .layers = 3, .d_model = 64, .heads = 4}, 32),
      gpt("char_6L (small)", 280, {.vocab = 65, .seq_len = 32, .layers = 6, .d_model = 48, .heads = 6}, 2),
  };
}

TEST(Fusion, ArenaOfEveryExampleNeverOverlapsAndReuses) {
  for (const Example& e : examples()) {
    Program p = e.compile(true);
    const backend::ArenaLayout layout = detail::compiled_executable(p).arena_layout();
    ASSERT_FALSE(layout.buffers.empty()) << e.name;
    const int64_t peak = simulate(layout);
    const MemoryReport m = p.memory_report();
    std::printf(
        "%-16s kernels %3lld  arena %9lld B  no-reuse %9lld B  peak live %9lld B  planned peak / all tensors "
        "%.3f\n",
        e.name, static_cast<long long>(p.kernel_count()), static_cast<long long>(m.arena),
        static_cast<long long>(m.arena_without_reuse), static_cast<long long>(peak),
        static_cast<double>(m.planned_peak()) / static_cast<double>(m.all_tensors));
    EXPECT_GE(m.arena, peak) << e.name;
    EXPECT_LT(m.arena, m.arena_without_reuse) << e.name;
    EXPECT_LT(static_cast<double>(m.planned_peak()), 0.6 * static_cast<double>(m.all_tensors)) << e.name;
  }
}

TEST(Fusion, KernelCountStaysUnderThePinnedBound) {
  for (const Example& e : examples()) {
    Program fused = e.compile(true), plain = e.compile(false);
    EXPECT_LE(fused.kernel_count(), e.max_kernels) << e.name << "\n" << fused.describe();
    // Fusion must actually fuse: at least a third fewer kernels than one per node.
    EXPECT_LT(3 * fused.kernel_count(), 2 * plain.kernel_count()) << e.name;
  }
}

TEST(Fusion, FusedAndReusedEqualsOneKernelPerNode) {
  for (const Example& e : examples()) {
    // Both programs train the model's one set of parameters: run each from the same start.
    Program fused = e.compile(true), plain = e.compile(false);
    const auto start = fused.download_params();
    std::vector<float> losses[2];
    std::map<std::string, HostTensor> after[2];
    for (int optimized = 0; optimized < 2; ++optimized) {
      Program& p = optimized ? fused : plain;
      p.upload_params(start);
      for (int step = 0; step < 3; ++step) losses[optimized].push_back(e.step(p, step));
      after[optimized] = p.download_params();
    }
    for (size_t i = 0; i < losses[0].size(); ++i)
      EXPECT_NEAR(losses[1][i], losses[0][i], 2e-5 * std::max(1.f, std::abs(losses[0][i])))
          << e.name << " step " << i;
    for (const auto& [name, t] : after[0]) {
      const std::span<const float> x = after[1].at(name).f32(), y = t.f32();
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_NEAR(x[i], y[i], 2e-5f * std::max(1.f, std::abs(y[i])))
            << e.name << " " << name << "[" << i << "]";
    }
  }
}

// The example models on the GPU against the double-precision reference: 3 training steps
// from the same parameters, losses and parameters after (skipped without a GPU).
TEST(Fusion, ExampleModelsOnCudaMatchRef) {
  if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::vector<Example> ref = examples(Device::ref()), gpu = examples(Device::cuda());
  for (size_t m = 0; m < ref.size(); ++m) {
    Program want = ref[m].compile(true), got = gpu[m].compile(true);
    got.upload_params(want.download_params());
    std::printf("[ cuda     ] %s: %lld kernels per step\n", gpu[m].name,
                static_cast<long long>(got.kernel_count()));
    for (int step = 0; step < 3; ++step) {
      const float a = ref[m].step(want, step), b = gpu[m].step(got, step);
      EXPECT_NEAR(b, a, 1e-4 * std::max(1.f, std::abs(a))) << ref[m].name << " step " << step;
    }
    const auto pa = want.download_params(), pb = got.download_params();
    for (const auto& [name, t] : pa) {
      const std::span<const float> x = pb.at(name).f32(), y = t.f32();
      double worst = 0;
      for (size_t i = 0; i < x.size(); ++i)
        worst = std::max(worst, std::abs(double(x[i]) - y[i]) / std::max(1.0, std::abs(double(y[i]))));
      EXPECT_LT(worst, 1e-4) << ref[m].name << " " << name;
    }
  }
}

TEST(Fusion, RandomGraphsMatchUnfusedAndNeverOverlap) {
  for (uint64_t seed = 0; seed < 30; ++seed) {
    std::mt19937_64 rng(seed);
    ir::Trace trace;
    std::vector<int32_t> inputs;
    {
      ir::TraceScope scope(trace);
      std::vector<Tensor> pool;
      for (int i = 0; i < 3; ++i) {
        pool.push_back(ir::named_leaf(trace.graph, ir::Op::kInput, "x" + std::to_string(i), {8, 4},
                                      DType::kF32, Loc::current()));
        inputs.push_back(pool.back().id());
      }
      for (int step = 0; step < 30; ++step) {
        const Tensor& a = pool[rng() % pool.size()];
        const Tensor& b = pool[rng() % pool.size()];
        switch (rng() % 9) {
          case 0: pool.push_back(sum(a, {0}, true) + b); break;
          case 1: pool.push_back(exp(a * 0.1) * 0.5 - b); break;
          case 2: {
            const auto start = static_cast<int64_t>(rng() % 8);
            pool.push_back(slice(concat({a, b}, 0), 0, start, start + 8, 1));
            break;
          }
          case 3: pool.push_back(slice(matmul(a, transpose(b)), 1, 0, 4, 1)); break;
          case 4: pool.push_back(where(a > b, a * b, tanh(a))); break;
          case 5: pool.push_back(transpose(transpose(a) + 1.0)); break;
          case 7:  // a reshape of strided views: split rows of a column slice, split a transpose's axis
            pool.push_back(reshape(reshape(slice(concat({a, b}, 1), 1, 0, 4, 1), {2, 4, 4}) * 2.0, {8, 4}) +
                           reshape(reshape(transpose(a), {4, 2, 4}) - 1.0, {8, 4}));
            break;
          default: pool.push_back(maximum(a, b) / (abs(b) + 1.0)); break;
        }
      }
      trace.graph.outputs = {pool.back().id(), pool[pool.size() / 2].id(), pool[pool.size() - 3].id()};
    }
    std::vector<std::vector<float>> feeds(3, std::vector<float>(32));
    for (auto& f : feeds)
      for (float& v : f) v = std::uniform_real_distribution<float>(-2.f, 2.f)(rng);
    auto be = backend::make_cpu_backend();
    std::vector<std::vector<float>> results[2];
    for (int optimized = 0; optimized < 2; ++optimized) {
      backend::PrepareOptions o;
      o.fuse = o.reuse_memory = optimized == 1;
      auto exe = be->prepare(trace.graph, {}, o);
      if (optimized) simulate(exe->arena_layout());
      for (size_t i = 0; i < inputs.size(); ++i) exe->set_input(inputs[i], feeds[i].data());
      exe->execute();
      for (int32_t out : trace.graph.outputs) {
        std::vector<float> v(static_cast<size_t>(trace.graph.node(out).numel()));
        exe->read_output(out, v.data());
        results[optimized].push_back(v);
      }
    }
    // Both against the double-precision reference backend.
    std::vector<std::vector<float>> want;
    {
      auto ref = backend::make_ref_backend();
      auto exe = ref->prepare(trace.graph, {});
      for (size_t i = 0; i < inputs.size(); ++i) exe->set_input(inputs[i], feeds[i].data());
      exe->execute();
      for (int32_t out : trace.graph.outputs) {
        std::vector<float> v(static_cast<size_t>(trace.graph.node(out).numel()));
        exe->read_output(out, v.data());
        want.push_back(v);
      }
    }
    for (int optimized = 0; optimized < 2; ++optimized)
      for (size_t o = 0; o < want.size(); ++o)
        for (size_t i = 0; i < want[o].size(); ++i) {
          const float a = want[o][i], b = results[optimized][o][i];
          if (std::isnan(a)) {
            EXPECT_TRUE(std::isnan(b));
          } else {
            ASSERT_NEAR(b, a, 1e-4f * std::max(1.f, std::abs(a)))
                << "seed " << seed << " optimized " << optimized << " output " << o << " [" << i << "]";
          }
        }
  }
}

TEST(Fusion, ChainsBecomeOneGroupAndOrderRespectsDependencies) {
  ir::Trace trace;
  {
    ir::TraceScope scope(trace);
    Tensor x = ir::named_leaf(trace.graph, ir::Op::kInput, "x", {4, 4}, DType::kF32, Loc::current());
    Tensor y = tanh(x * 2.0 + 1.0);              // one group
    Tensor s = sum(y, {1}, true);                // a reduction reading the group
    Tensor z = y * broadcast_to(s, {4, 4}) + x;  // a second group that needs the reduction
    trace.graph.outputs = {z.id()};
  }
  const passes::Fusion f = passes::fuse(trace.graph);
  int elementwise = 0;
  for (const passes::KernelGroup& g : f.groups)
    elementwise += g.kind == passes::KernelGroup::Kind::kElementwise;
  EXPECT_EQ(elementwise, 2);
  for (int32_t id = 0; id < trace.graph.size(); ++id) {
    if (f.group_of[static_cast<size_t>(id)] < 0) continue;
    for (int32_t in : trace.graph.node(id).inputs)
      EXPECT_LE(f.group_of[static_cast<size_t>(in)], f.group_of[static_cast<size_t>(id)]) << "node %" << id;
  }
}

}  // namespace

namespace {

TEST(Fusion, InPlaceUpdateNeverHidesTheOldValueFromAnotherUpdate) {
  // update(prev ← w) and update(w ← w·0.5): w's new value must not be written over w before
  // prev has taken the old one, fused or not.
  for (int optimized = 0; optimized < 2; ++optimized) {
    ir::Graph g;
    const int32_t w = ir::named_leaf(g, ir::Op::kParam, "w", {4, 4}, DType::kF32, Loc::current()).id();
    const int32_t prev = ir::named_leaf(g, ir::Op::kState, "prev", {4, 4}, DType::kF32, Loc::current()).id();
    ir::Node half;
    half.op = ir::Op::kConstant;
    half.dtype = DType::kF32;
    half.shape = {4, 4};
    half.attrs.values = {0.5};
    const int32_t h = g.add(half);
    ir::Node mul;
    mul.op = ir::Op::kMul;
    mul.inputs = {w, h};
    const int32_t scaled = g.add(mul);
    g.updates = {{prev, w}, {w, scaled}};
    auto be = backend::make_cpu_backend();
    auto wb = be->allocate(DType::kF32, 16), pb = be->allocate(DType::kF32, 16);
    std::vector<float> init(16);
    for (size_t i = 0; i < init.size(); ++i) init[i] = static_cast<float>(i + 1);
    be->upload(*wb, init.data());
    backend::PrepareOptions o;
    o.fuse = o.reuse_memory = optimized == 1;
    auto exe = be->prepare(g, {{w, wb.get()}, {prev, pb.get()}}, o);
    exe->execute();
    std::vector<float> got_w(16), got_prev(16);
    be->download(*wb, got_w.data());
    be->download(*pb, got_prev.data());
    for (size_t i = 0; i < 16; ++i) {
      EXPECT_EQ(got_prev[i], init[i]) << "optimized " << optimized << " [" << i << "]";
      EXPECT_EQ(got_w[i], 0.5f * init[i]) << "optimized " << optimized << " [" << i << "]";
    }
  }
}

}  // namespace
