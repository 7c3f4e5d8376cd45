// Elementwise groups with reduction sinks as one CUDA kernel (backend/cuda/fused_sinks.h):
// generated for graphs whose fusion sinks a Sum into its producer's group, compiled through
// NVRTC (without a GPU too), run on the GPU and compared with the reference backend, checked
// for run-to-run determinism, and timed on a bias-gradient-sized group.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>

#include <tensorgrad/tensorgrad.h>

#include "ir/strides.h"
#include "backend/backend.h"
#include "backend/cuda/codegen.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/fused_sinks.h"
#include "ir/api_util.h"
#include "passes/fusion.h"
#include "tensorgrad/errors.h"
#include "backend/cuda_test_util.h"

namespace {

using namespace tg;
namespace cuda = tg::backend::cuda;

using tg::testing::have_nvrtc;

// clang-format off
#define TG_NEED_GPU()                                                                  \
  do {                                                                                 \
    const std::string why_ = cuda::unavailable_reason(0);                             \
    if (!why_.empty()) GTEST_SKIP() << "no usable GPU, GPU tests skipped: " << why_;  \
  } while (0)
// clang-format on

/// A traced graph: its kInput leaves (with shapes) and the values it outputs.
struct Built {
  ir::Trace trace;
  std::vector<int32_t> inputs;
  std::vector<Shape> input_shapes;
};
using Body = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

std::unique_ptr<Built> build(const std::vector<Shape>& input_shapes, const Body& body) {
  auto b = std::make_unique<Built>();
  ir::TraceScope scope(b->trace);
  std::vector<Tensor> ins;
  for (size_t i = 0; i < input_shapes.size(); ++i) {
    ins.push_back(ir::named_leaf(b->trace.graph, ir::Op::kInput, "x" + std::to_string(i), input_shapes[i],
                                 DType::kF32, Loc::current()));
    b->inputs.push_back(ins.back().id());
  }
  b->input_shapes = input_shapes;
  for (const Tensor& t : body(ins)) b->trace.graph.outputs.push_back(t.id());
  return b;
}

Tensor gelu_grad(const Tensor& a, const Tensor& b) {
  return ir::binary(ir::Op::kGeluTanhGrad, a, b, Loc::current());
}

std::vector<std::vector<float>> random_feeds(const Built& b, uint64_t seed) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::vector<std::vector<float>> feeds;
  for (const Shape& s : b.input_shapes) {
    feeds.emplace_back(static_cast<size_t>(numel(s)));
    for (float& v : feeds.back()) v = std::uniform_real_distribution<float>(-2.f, 2.f)(rng);
  }
  return feeds;
}

bool has_sink(const ir::Graph& g, const passes::KernelGroup& group) {
  if (group.kind != passes::KernelGroup::Kind::kElementwise) return false;
  for (int32_t id : group.nodes)
    if (g.node(id).op == ir::Op::kSum) return true;
  return false;
}

/// The graph run on the GPU, group by group: leaves and broadcasts become buffers with
/// strides, elementwise groups one generated kernel each (fused_sinks_kernel when they hold
/// sinks). The launches stay loaded for timing.
struct GpuRun {
  const ir::Graph* g = nullptr;
  std::map<int32_t, cuda::DeviceMemory> mem;
  tg::testing::DevicePlaces place;  // node → (buffer node, strides)
  struct Step {
    cuda::Launch launch;
    std::unique_ptr<cuda::Kernel> kernel;
    std::vector<cuda::CUdeviceptr> ptrs;
    long long n = -1;  // fused_group_kernel's trailing element count; -1 for a sink kernel (none)
    bool sinks = false;
    void run() {
      std::vector<void*> args;
      for (cuda::CUdeviceptr& p : ptrs) args.push_back(&p);
      if (n >= 0) args.push_back(&n);
      kernel->launch(launch.grid, launch.block, launch.shared_bytes, nullptr, args.data());
    }
  };
  std::vector<Step> steps;
  int sink_groups = 0;

  void prepare(const ir::Graph& graph, const Built& b, const std::vector<std::vector<float>>& feeds,
               const cuda::SinkTuning& tuning = {}) {
    g = &graph;
    const cuda::DeviceInfo info = cuda::open_device(0);
    const passes::Fusion f = passes::fuse(graph);
    for (size_t gi = 0; gi < f.groups.size(); ++gi) {
      const passes::KernelGroup& group = f.groups[gi];
      if (group.kind == passes::KernelGroup::Kind::kSingle) {
        const int32_t id = group.nodes.front();
        const size_t which =
            static_cast<size_t>(std::find(b.inputs.begin(), b.inputs.end(), id) - b.inputs.begin());
        const std::string missing = tg::testing::place_leaf(
            graph, id, which < feeds.size() ? feeds[which] : std::vector<float>{}, mem, place);
        ASSERT_TRUE(missing.empty()) << "unexpected single node " << missing << " (an unsunk sum?)";
        continue;
      }
      std::vector<std::vector<int64_t>> strides;
      const std::vector<int32_t> ins = cuda::group_inputs(graph, group);
      for (int32_t in : ins) strides.push_back(place.at(in).second);
      const std::string name = "group" + std::to_string(gi);
      Step st;
      st.sinks = has_sink(graph, group);
      std::vector<int32_t> outs, sinks;
      if (st.sinks) {
        ++sink_groups;
        st.launch = cuda::fused_sinks_kernel(graph, group, strides, name, tuning);
        for (int32_t o : group.outputs)
          if (graph.node(o).op != ir::Op::kSum) outs.push_back(o);
        for (int32_t id : group.nodes)
          if (graph.node(id).op == ir::Op::kSum) sinks.push_back(id);
      } else {
        const cuda::GroupKernel k = cuda::fused_group_kernel(graph, group, strides, name);
        st.launch.name = k.name;
        st.launch.source = k.source;
        st.n = graph.node(group.nodes.front()).numel();
        cuda::elementwise_launch(st.launch, st.n);
        outs = group.outputs;
      }
      st.kernel = std::make_unique<cuda::Kernel>(
          cuda::compile_cubin(st.launch.source, name, info.sm_major, info.sm_minor), name,
          st.launch.shared_bytes);
      for (int32_t in : ins) st.ptrs.push_back(mem.at(place.at(in).first).get());
      for (int32_t o : outs) {
        const ir::Node& n = graph.node(o);
        st.ptrs.push_back(
            mem.emplace(o, cuda::DeviceMemory(static_cast<size_t>(std::max<int64_t>(1, n.numel()) * 4)))
                .first->second.get());
        place[o] = {o, contiguous_strides(n.shape)};
      }
      for (int32_t s : sinks) {
        const ir::Node& n = graph.node(s);
        // Poisoned, so that an output the kernel forgets shows.
        std::vector<float> nan(static_cast<size_t>(std::max<int64_t>(1, n.numel())), std::nanf(""));
        cuda::DeviceMemory m(nan.size() * 4);
        m.upload(nan.data(), nan.size() * 4);
        st.ptrs.push_back(mem.emplace(s, std::move(m)).first->second.get());
        place[s] = {s, contiguous_strides(n.shape)};
      }
      steps.push_back(std::move(st));
    }
  }
  void run() {
    for (Step& s : steps) s.run();
    cuda::check(cuda::driver().cuCtxSynchronize(), "cuCtxSynchronize");
  }
  std::vector<float> read(int32_t node) const {
    std::vector<float> out(static_cast<size_t>(g->node(node).numel()));
    if (!out.empty()) mem.at(place.at(node).first).download(out.data(), out.size() * 4);
    return out;
  }
};

struct SinkReference {
  std::map<int32_t, std::vector<float>> values;  // outputs and every sink's input
};

/// The reference backend's outputs, plus the inputs of the graph's sums (for tolerances).
SinkReference reference(Built& b, const std::vector<std::vector<float>>& feeds) {
  ir::Graph& g = b.trace.graph;
  const std::vector<int32_t> outputs = g.outputs;
  for (int32_t id = 0; id < g.size(); ++id)
    if (g.node(id).op == ir::Op::kSum && std::find(outputs.begin(), outputs.end(), id) != outputs.end())
      g.outputs.push_back(g.node(id).inputs[0]);
  auto ref = backend::make_ref_backend();
  auto exe = ref->prepare(g, {});
  for (size_t i = 0; i < b.inputs.size(); ++i) exe->set_input(b.inputs[i], feeds[i].data());
  exe->execute();
  SinkReference r;
  for (int32_t o : g.outputs) {
    std::vector<float> v(static_cast<size_t>(g.node(o).numel()));
    exe->read_output(o, v.data());
    r.values[o] = std::move(v);
  }
  g.outputs = outputs;
  return r;
}

/// Runs the graph both ways and compares: elementwise outputs within 1e-5 relative, each sink
/// element within 2e-5 of the sum of the magnitudes it adds. Returns the GPU run.
std::unique_ptr<GpuRun> check_against_reference(Built& b, uint64_t seed, const std::string& what,
                                                const cuda::SinkTuning& tuning = {}) {
  const ir::Graph& g = b.trace.graph;
  const auto feeds = random_feeds(b, seed);
  const SinkReference ref = reference(b, feeds);
  auto run = std::make_unique<GpuRun>();
  run->prepare(g, b, feeds, tuning);
  EXPECT_GE(run->sink_groups, 1) << what << ": fusion made no group with a sink\n" << g.to_string();
  run->run();
  for (int32_t o : g.outputs) {
    const std::vector<float> got = run->read(o);
    const std::vector<float>& want = ref.values.at(o);
    const ir::Node& n = g.node(o);
    if (n.op == ir::Op::kSum) {
      const std::vector<float>& y = ref.values.at(n.inputs[0]);
      const size_t w = want.size();
      std::vector<double> mag(w, 0.0);
      for (size_t i = 0; i < y.size(); ++i) mag[i % w] += std::fabs(y[i]);
      for (size_t c = 0; c < w; ++c)
        if (!(std::fabs(got[c] - want[c]) <= 2e-5 * mag[c] + 1e-6)) {
          ADD_FAILURE() << what << ": sink %" << o << "[" << c << "] = " << got[c] << ", want " << want[c]
                        << " (sum of |y| " << mag[c] << ")";
          return run;
        }
    } else {
      for (size_t i = 0; i < want.size(); ++i)
        if (!(std::fabs(got[i] - want[i]) <= 1e-5 * std::max(1.f, std::fabs(want[i])))) {
          ADD_FAILURE() << what << ": output %" << o << "[" << i << "] = " << got[i] << ", want " << want[i];
          return run;
        }
    }
  }
  return run;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// ---- without a GPU: generation and NVRTC -------------------------------------------------------

TEST(CudaSinksNvrtc, GeneratedSinkKernelsCompile) {
  std::string why;
  if (!have_nvrtc(why)) GTEST_SKIP() << why;
  setenv("TG_CUDA_CACHE", "off", 1);
  const std::vector<std::pair<std::vector<Shape>, Body>> cases = {
      {{{1000, 768}, {1000, 768}},
       [](const std::vector<Tensor>& x) {
         const Tensor y = gelu_grad(x[0], x[1]);
         return std::vector<Tensor>{y, sum(y, {0})};
       }},
      {{{64, 8, 33}, {33}},
       [](const std::vector<Tensor>& x) {  // broadcast input, two widths, keepdim
         const Tensor y = x[0] * x[1] + 1.0;
         return std::vector<Tensor>{sum(y, {0, 1}, true), sum(y * y, {0}), sum(y)};
       }},
      {{{5000, 3}},
       [](const std::vector<Tensor>& x) {  // int32 inside the group
         const Tensor y = cast(cast(x[0] * 10.0, DType::kI32) * 3 - 7, DType::kF32) + x[0];
         return std::vector<Tensor>{sum(y, {0})};
       }},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    auto b = build(cases[c].first, cases[c].second);
    const ir::Graph& g = b->trace.graph;
    const passes::Fusion f = passes::fuse(g);
    int generated = 0;
    for (const passes::KernelGroup& group : f.groups) {
      if (!has_sink(g, group)) continue;
      std::vector<std::vector<int64_t>> strides;
      const Shape& gs = g.node(group.nodes.front()).shape;
      for (int32_t in : cuda::group_inputs(g, group)) {
        std::vector<int64_t> st = contiguous_strides(gs);
        if (g.node(in).op == ir::Op::kBroadcastTo) st[0] = 0;  // a broadcast input: strided reads
        strides.push_back(st);
      }
      const cuda::Launch l = cuda::fused_sinks_kernel(g, group, strides, "sinks" + std::to_string(c));
      if (std::getenv("TG_SINKS_DUMP")) std::printf("%s\n", l.source.c_str());
      EXPECT_FALSE(cuda::compile_cubin(l.source, l.name, 9, 0).empty()) << l.source;
      ++generated;
    }
    EXPECT_EQ(generated, 1) << "case " << c << "\n" << g.to_string();
  }
  unsetenv("TG_CUDA_CACHE");
}

TEST(CudaSinksNvrtc, RefusesWhatIsNotASinkGroup) {
  auto b = build({{64, 32}}, [](const std::vector<Tensor>& x) {
    const Tensor y = exp(x[0]);
    return std::vector<Tensor>{sum(y, {1}), sum(y, {0})};
  });
  const ir::Graph& g = b->trace.graph;
  // exp, then sum over the trailing axis (kept axis before the reduced one: not a sink).
  const int32_t y = g.node(g.outputs[0]).inputs[0];
  passes::KernelGroup bad;
  bad.kind = passes::KernelGroup::Kind::kElementwise;
  bad.nodes = {y, g.outputs[0]};
  bad.outputs = {g.outputs[0]};
  try {
    cuda::fused_sinks_kernel(g, bad, {{32, 1}}, "bad");
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a reduction sink"), std::string::npos) << e.what();
  }
  passes::KernelGroup single;
  single.nodes = {y};
  EXPECT_THROW(cuda::fused_sinks_kernel(g, single, {{32, 1}}, "single"), Error);
  passes::KernelGroup good;
  good.kind = passes::KernelGroup::Kind::kElementwise;
  good.nodes = {y, g.outputs[1]};
  good.outputs = {g.outputs[1]};
  EXPECT_THROW(cuda::fused_sinks_kernel(g, good, {}, "strides"), Error);  // one stride list per input
  EXPECT_NO_THROW(cuda::fused_sinks_kernel(g, good, {{32, 1}}, "good"));
}

// ---- on the GPU ------------------------------------------------------------------------------

TEST(CudaSinks, BiasGradientShapesMatchTheReference) {
  TG_NEED_GPU();
  for (int64_t n : {16, 1000, 16384})
    for (int64_t c : {1, 64, 768, 4096}) {
      auto b = build({{n, c}, {n, c}}, [](const std::vector<Tensor>& x) {
        const Tensor y = gelu_grad(x[0], x[1]);
        return std::vector<Tensor>{y, sum(y, {0})};
      });
      check_against_reference(*b, static_cast<uint64_t>(n * 7 + c),
                              "gelu_tanh_grad + sum over " + shape_str({n, c}));
    }
}

TEST(CudaSinks, KeepdimOnlySinksAndOddWidths) {
  TG_NEED_GPU();
  // keepdim, no elementwise output (the group's only output is its sink), widths that are no
  // multiple of 32 (folded or not), a scalar sum.
  for (int64_t c : {1, 3, 33, 100, 768, 1000, 4095}) {
    auto b = build({{2000, c}}, [](const std::vector<Tensor>& x) {
      return std::vector<Tensor>{sum(tanh(x[0]) * 2.0 - 0.5, {0}, true)};
    });
    check_against_reference(*b, static_cast<uint64_t>(c),
                            "keepdim sum over [2000, " + std::to_string(c) + "]");
  }
  auto b = build({{333, 77}},
                 [](const std::vector<Tensor>& x) { return std::vector<Tensor>{sum(exp(x[0] * 0.3))}; });
  check_against_reference(*b, 5, "scalar sum over [333, 77]");
}

TEST(CudaSinks, ThreeDimensionalGroupsSumTheLeadingAxes) {
  TG_NEED_GPU();
  for (const Shape& s : std::vector<Shape>{{8, 128, 768}, {4, 50, 64}, {3, 7, 5}, {2, 16, 1}}) {
    auto b = build({s, {s[2]}}, [](const std::vector<Tensor>& x) {
      const Tensor y = gelu(x[0] + x[1], GeluApprox::kTanh);  // a broadcast bias: a strided input
      return std::vector<Tensor>{y, sum(y, {0, 1})};
    });
    check_against_reference(*b, 11, "sum over the leading axes of " + shape_str(s));
  }
  // Several sinks of different widths on one group: [C], [T, C] and a scalar.
  auto b = build({{16, 24, 40}}, [](const std::vector<Tensor>& x) {
    const Tensor y = sigmoid(x[0]) * x[0];
    return std::vector<Tensor>{sum(y, {0, 1}), sum(y * y, {0}), sum(y), y};
  });
  check_against_reference(*b, 12, "three sinks of widths 40, 960, 1");
}

TEST(CudaSinks, IntegerAndBooleanValuesInsideTheGroup) {
  TG_NEED_GPU();
  auto b = build({{4096, 48}, {4096, 48}}, [](const std::vector<Tensor>& x) {
    // Scaling by a power of two is exact everywhere, so the truncation agrees with the reference.
    const Tensor i = cast(x[0] * 64.0, DType::kI32) * 3 - 7;
    const Tensor y = cast(i, DType::kF32) * 0.001 + where(x[1] > 0.5, x[1], x[0]);
    return std::vector<Tensor>{y, sum(y, {0}), cast(x[0] > x[1], DType::kF32)};
  });
  check_against_reference(*b, 21, "int32 chain, compare and where");
}

TEST(CudaSinks, RunsAreBitIdentical) {
  TG_NEED_GPU();
  for (const Shape& s : std::vector<Shape>{{16384, 768}, {4096, 64}, {5000, 1}}) {
    auto b = build({s, s}, [](const std::vector<Tensor>& x) {
      const Tensor y = gelu_grad(x[0], x[1]);
      return std::vector<Tensor>{y, sum(y, {0}), sum(y)};
    });
    auto run = check_against_reference(*b, 3, "determinism " + shape_str(s));
    const ir::Graph& g = b->trace.graph;
    std::vector<std::vector<float>> first;
    for (int32_t o : g.outputs) first.push_back(run->read(o));
    for (int rep = 0; rep < 5; ++rep) {
      run->run();
      for (size_t k = 0; k < g.outputs.size(); ++k) {
        const std::vector<float> again = run->read(g.outputs[k]);
        ASSERT_EQ(std::memcmp(again.data(), first[k].data(), again.size() * 4), 0)
            << shape_str(s) << ": output " << k << " differs on run " << rep + 2;
      }
    }
  }
}

/// Microseconds per launch of the graph's last kernel, averaged.
double time_kernel(GpuRun& run, int reps) {
  const cuda::Driver& d = cuda::driver();
  if (run.steps.empty()) return 0;
  GpuRun::Step* sink_step = &run.steps.back();
  for (int i = 0; i < 10; ++i) sink_step->run();
  cuda::CUevent e0 = nullptr, e1 = nullptr;
  cuda::check(d.cuEventCreate(&e0, 0), "cuEventCreate");
  cuda::check(d.cuEventCreate(&e1, 0), "cuEventCreate");
  cuda::check(d.cuEventRecord(e0, nullptr), "cuEventRecord");
  for (int i = 0; i < reps; ++i) sink_step->run();
  cuda::check(d.cuEventRecord(e1, nullptr), "cuEventRecord");
  cuda::check(d.cuEventSynchronize(e1), "cuEventSynchronize");
  float ms = 0;
  cuda::check(d.cuEventElapsedTime(&ms, e0, e1), "cuEventElapsedTime");
  d.cuEventDestroy(e0);
  d.cuEventDestroy(e1);
  return 1000.0 * ms / reps;
}

void throughput(const Shape& s, const cuda::SinkTuning& tuning, const char* label, bool check = true) {
  auto b = build({s, s}, [](const std::vector<Tensor>& x) {
    const Tensor y = gelu_grad(x[0], x[1]);
    return std::vector<Tensor>{y, sum(y, {0})};
  });
  std::unique_ptr<GpuRun> run;
  if (check) {
    run = check_against_reference(*b, 9, std::string("throughput ") + shape_str(s), tuning);
  } else {
    run = std::make_unique<GpuRun>();
    run->prepare(b->trace.graph, *b, random_feeds(*b, 9), tuning);
    run->run();
  }
  const ir::Graph& g = b->trace.graph;
  std::vector<float> before = run->read(g.outputs[1]);
  const double us = time_kernel(*run, 50);
  // The timed launches leave the merge counters reset and the result unchanged.
  const std::vector<float> after = run->read(g.outputs[1]);
  EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * 4), 0);
  const double bytes = 3.0 * static_cast<double>(numel(s)) * 4 + static_cast<double>(s.back()) * 4;
  std::printf(
      "[sinks] %-10s %-14s rows/thread>=%-3d blocks<=%-5d unroll %d: grid %ux%u, %8.2f us, %7.1f GB/s "
      "(%.0f%% of 4.8 TB/s)\n",
      label, shape_str(s).c_str(), tuning.rows_per_thread, tuning.target_blocks, tuning.unroll,
      run->steps.back().launch.grid[0], run->steps.back().launch.grid[1], us, bytes / us / 1e3,
      100.0 * bytes / us / 4.8e6);
}

TEST(CudaSinks, Throughput) {
  TG_NEED_GPU();
  throughput({16384, 768}, {}, "default");
  {  // a broadcast bias read inside the group (strided), and two sinks: [C] and a scalar
    const Shape s{8, 2048, 768};
    auto b = build({s, s, {768}}, [](const std::vector<Tensor>& x) {
      const Tensor y = gelu_grad(x[0] + x[2], x[1]);
      return std::vector<Tensor>{y, sum(y, {0, 1}), sum(y * x[0])};
    });
    auto run = check_against_reference(*b, 4, "bias + gelu_tanh_grad [8, 2048, 768] with two sinks");
    const double us = time_kernel(*run, 50), bytes = 3.0 * static_cast<double>(numel(s)) * 4;
    std::printf(
        "[sinks] bias + gelu_tanh_grad %s, sinks [768] and []: grid %ux%u, %8.2f us, %7.1f GB/s (%.0f%% of "
        "4.8 TB/s)\n",
        shape_str(s).c_str(), run->steps.back().launch.grid[0], run->steps.back().launch.grid[1], us,
        bytes / us / 1e3, 100.0 * bytes / us / 4.8e6);
  }
  throughput({4096, 64}, {}, "default");
  throughput({16384, 4096}, {}, "default");
  throughput({65536, 1}, {}, "default");
}

/// Times the last kernel of a graph over `streams` arrays of `s`'s size (reads + writes).
void time_graph(const char* label, const std::vector<Shape>& shapes, const Body& body, double streams,
                const cuda::SinkTuning& tuning = {}) {
  auto b = build(shapes, body);
  GpuRun run;
  run.prepare(b->trace.graph, *b, random_feeds(*b, 2), tuning);
  run.run();
  const double us = time_kernel(run, 100), bytes = streams * static_cast<double>(numel(shapes[0])) * 4;
  std::printf("[sinks] %-58s grid %4ux%-4u %8.2f us, %7.1f GB/s (%.0f%% of 4.8 TB/s)\n", label,
              run.steps.back().launch.grid[0], run.steps.back().launch.grid[1], us, bytes / us / 1e3,
              100.0 * bytes / us / 4.8e6);
}

/// Tuning sweep (run with --gtest_also_run_disabled_tests).
TEST(CudaSinks, DISABLED_TuningSweep) {
  TG_NEED_GPU();
  // Where the time of a bias-add + gelu backward group goes: variants one change apart.
  const Shape s3{8, 2048, 768}, s2{16384, 768};
  time_graph(
      "gelu_grad(a, b) [16384, 768] + sum [768]", {s2, s2},
      [](const std::vector<Tensor>& x) {
        const Tensor y = gelu_grad(x[0], x[1]);
        return std::vector<Tensor>{y, sum(y, {0})};
      },
      3);
  time_graph(
      "gelu_grad(a, b) [8, 2048, 768] + sum [768]", {s3, s3},
      [](const std::vector<Tensor>& x) {
        const Tensor y = gelu_grad(x[0], x[1]);
        return std::vector<Tensor>{y, sum(y, {0, 1})};
      },
      3);
  time_graph(
      "gelu_grad(a, b) + sums [768] and [] of y*a", {s3, s3},
      [](const std::vector<Tensor>& x) {
        const Tensor y = gelu_grad(x[0], x[1]);
        return std::vector<Tensor>{y, sum(y, {0, 1}), sum(y * x[0])};
      },
      3);
  time_graph(
      "gelu_grad(a + bias, b) + sum [768]", {s3, s3, {768}},
      [](const std::vector<Tensor>& x) {
        const Tensor y = gelu_grad(x[0] + x[2], x[1]);
        return std::vector<Tensor>{y, sum(y, {0, 1})};
      },
      3);
  time_graph(
      "gelu_grad(a + bias, b) + sums [768] and [] of y*a", {s3, s3, {768}},
      [](const std::vector<Tensor>& x) {
        const Tensor y = gelu_grad(x[0] + x[2], x[1]);
        return std::vector<Tensor>{y, sum(y, {0, 1}), sum(y * x[0])};
      },
      3);
  time_graph(
      "gelu_grad(a + c, b), c dense + sum [768]", {s3, s3, s3},
      [](const std::vector<Tensor>& x) {
        const Tensor y = gelu_grad(x[0] + x[2], x[1]);
        return std::vector<Tensor>{y, sum(y, {0, 1})};
      },
      4);
  time_graph(
      "a * b + sum [768] (no transcendental)", {s3, s3},
      [](const std::vector<Tensor>& x) {
        const Tensor y = x[0] * x[1];
        return std::vector<Tensor>{y, sum(y, {0, 1})};
      },
      3);
  time_graph(
      "(a + bias) * b + sum [768] (no transcendental)", {s3, s3, {768}},
      [](const std::vector<Tensor>& x) {
        const Tensor y = (x[0] + x[2]) * x[1];
        return std::vector<Tensor>{y, sum(y, {0, 1})};
      },
      3);
  time_graph(
      "gelu_grad(a + bias, b), no sink (fused_group_kernel)", {s3, s3, {768}},
      [](const std::vector<Tensor>& x) { return std::vector<Tensor>{gelu_grad(x[0] + x[2], x[1])}; }, 3);
  for (int unroll : {1, 2, 8})
    time_graph(("gelu_grad(a + bias, b) + 2 sums, unroll " + std::to_string(unroll)).c_str(), {s3, s3, {768}},
               [](const std::vector<Tensor>& x) {
                 const Tensor y = gelu_grad(x[0] + x[2], x[1]);
                 return std::vector<Tensor>{y, sum(y, {0, 1}), sum(y * x[0])};
               },
               3, {8, 1024, unroll});
  {  // the same group without its sink: fused_group_kernel's bandwidth, for comparison
    const Shape s{16384, 768};
    auto b = build({s, s},
                   [](const std::vector<Tensor>& x) { return std::vector<Tensor>{gelu_grad(x[0], x[1])}; });
    const auto feeds = random_feeds(*b, 1);
    GpuRun run;
    run.prepare(b->trace.graph, *b, feeds);
    run.run();
    const double us = time_kernel(run, 50), bytes = 3.0 * static_cast<double>(numel(s)) * 4;
    std::printf(
        "[sinks] no sink (fused_group_kernel) [16384, 768]: %8.2f us, %7.1f GB/s (%.0f%% of 4.8 TB/s)\n", us,
        bytes / us / 1e3, 100.0 * bytes / us / 4.8e6);
  }
  for (int unroll : {2, 4})
    for (int rpt : {8, 64})
      for (int target : {1024, 2048}) throughput({16384, 768}, {rpt, target, unroll}, "sweep", false);
  for (int unroll : {2, 4})
    for (int rpt : {4, 8, 16}) throughput({4096, 64}, {rpt, 2048, unroll}, "sweep", false);
}

}  // namespace
