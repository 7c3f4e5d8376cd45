// Machinery behind the op table test (op_table_test.cc): describing a case's inputs,
// generating deterministic values for them, tracing a case into an ir::Graph exactly the
// way the runtime does, running a graph on a backend, and comparing results.
//
// The reference backend computes in double precision and is the oracle; the CPU backend
// is compared against it. Gradients are checked on the reference backend against central
// finite differences evaluated in double, so neither side of that comparison involves
// f32 rounding.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad.h"
#include "backend/backend.h"
#include "backend/ref/ref_backend.h"
#include "ir/api_util.h"
#include "ir/trace.h"
#include "passes/dce.h"
#include "tensorgrad/tensor.h"

namespace tg::op_test {

using Ts = std::vector<Tensor>;
using BuildFn = std::function<Tensor(const Ts&)>;

// ---- describing inputs -------------------------------------------------------------------

/// How an input's values are drawn. Ranges are chosen per op so that nothing sits on a
/// kink or singularity, where a finite difference would not measure the derivative.
enum class Dist {
  kUniform,   // uniform in [lo, hi]
  kAwayZero,  // magnitude uniform in [lo, hi] (lo > 0), random sign: abs/relu/sign/1/x
  kDistinct,  // all kDistinct inputs of a case together take distinct values from a jittered
              // grid over [lo, hi], so max/min/maximum/argmax have no ties (gaps ≫ FD eps)
  kInt,       // integers in [lo, hi] (also for f32 inputs that should hold whole numbers)
  kBool,      // 0 or 1
};

struct InputSpec {
  Shape shape;
  DType dtype = DType::kF32;
  Dist dist = Dist::kUniform;
  double lo = -1;
  double hi = 1;
};

inline InputSpec uni(Shape s, double lo = -1, double hi = 1) {
  return {std::move(s), DType::kF32, Dist::kUniform, lo, hi};
}
inline InputSpec away0(Shape s, double lo = 0.2, double hi = 2) {
  return {std::move(s), DType::kF32, Dist::kAwayZero, lo, hi};
}
inline InputSpec distinct(Shape s, double lo = -2, double hi = 2) {
  return {std::move(s), DType::kF32, Dist::kDistinct, lo, hi};
}
inline InputSpec ints(Shape s, double lo = -5, double hi = 5, DType t = DType::kI32) {
  return {std::move(s), t, Dist::kInt, lo, hi};
}
inline InputSpec bools(Shape s) { return {std::move(s), DType::kBool, Dist::kBool, 0, 1}; }
/// i32 indices in [0, n): gather/embedding indices, class targets.
inline InputSpec indices(Shape s, int64_t n) { return ints(std::move(s), 0, static_cast<double>(n - 1)); }

/// Element-wise acceptance |got - want| <= abs + rel * |want|. {0, 0} means bit-exact.
struct Tol {
  double rel = 0;
  double abs = 0;
};
constexpr Tol kExact{0, 0};                 // integer, bool, shape-only and selection ops
constexpr Tol kArith{1e-6, 1e-7};           // one or two correctly rounded f32 operations
constexpr Tol kReduce{1e-6, 1e-6};          // f32 sums of a few dozen O(1) terms
constexpr Tol kTranscendental{1e-5, 1e-6};  // libm / vectorised approximations of exp, sin, …
constexpr Tol kMatmul{1e-5, 1e-6};          // BLAS sgemm, any summation order
constexpr Tol kLargeSum{1e-5, 1e-4};        // f32 sums of hundreds of O(1) terms, any order

enum class Grad {
  kNo,
  kYes,      // autograd vs finite differences on ref, then the backward graph cpu vs ref
  kCpuOnly,  // backward graph cpu vs ref only: the row is too big for finite differences
};

/// One row of the op table.
struct OpCase {
  std::string name;  // [A-Za-z0-9_], used as the GoogleTest parameter name
  std::vector<InputSpec> inputs;
  BuildFn build;
  Shape shape;            // expected output shape …
  DType dtype;            // … and dtype (checked at trace time)
  Tol tol;                // cpu vs ref, forward
  Grad grad;              // check d(sum(f(x) * w))/dx against finite differences
  bool training = false;  // traced as compile_train does (dropout active), else as compile_forward
};

/// GoogleTest prints a failing parameter with this instead of its bytes.
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

// ---- deterministic values ------------------------------------------------------------------

/// splitmix64: tiny, and its sequence does not depend on the standard library in use.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53;
  }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t state_;
};

/// FNV-1a, so each row has its own fixed seed independent of its position in the table.
inline uint64_t seed_of(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

/// Host values of one tensor, held as doubles that are exactly representable in `dtype`.
struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<double> values;
};

inline double round_to(DType t, double v) {
  switch (t) {
    case DType::kF32: return static_cast<double>(static_cast<float>(v));
    case DType::kI32: return static_cast<double>(static_cast<int32_t>(v));
    case DType::kBool: return v != 0 ? 1.0 : 0.0;
    case DType::kBF16: return f32_from_bf16(bf16_from_f32(static_cast<float>(v)));
    case DType::kF16: return f32_from_f16(f16_from_f32(static_cast<float>(v)));
    case DType::kI8: return std::max(-128.0, std::min(127.0, std::trunc(v)));
  }
  return v;
}

inline std::vector<HostTensor> make_inputs(const std::vector<InputSpec>& specs, uint64_t seed) {
  Rng rng(seed);
  // The shared grid of every kDistinct input, shuffled, then dealt out in order.
  std::vector<double> pool;
  double lo = 0, hi = 0;
  bool any = false;
  for (const InputSpec& s : specs) {
    if (s.dist != Dist::kDistinct) continue;
    lo = any ? std::min(lo, s.lo) : s.lo;
    hi = any ? std::max(hi, s.hi) : s.hi;
    any = true;
    pool.resize(pool.size() + static_cast<size_t>(numel(s.shape)));
  }
  const double step = pool.empty() ? 0 : (hi - lo) / static_cast<double>(pool.size());
  for (size_t k = 0; k < pool.size(); ++k)
    pool[k] = lo + (static_cast<double>(k) + 0.5 + rng.uniform(-0.2, 0.2)) * step;
  for (size_t k = pool.size(); k > 1; --k)
    std::swap(pool[k - 1], pool[static_cast<size_t>(rng.below(static_cast<int64_t>(k)))]);
  size_t next_pooled = 0;

  std::vector<HostTensor> out;
  for (const InputSpec& s : specs) {
    HostTensor h{s.dtype, std::vector<double>(static_cast<size_t>(numel(s.shape)))};
    for (double& v : h.values) {
      switch (s.dist) {
        case Dist::kUniform: v = rng.uniform(s.lo, s.hi); break;
        case Dist::kAwayZero: v = rng.uniform(s.lo, s.hi) * (rng.below(2) == 0 ? -1.0 : 1.0); break;
        case Dist::kDistinct: v = pool[next_pooled++]; break;
        case Dist::kInt:
          v = s.lo + static_cast<double>(rng.below(static_cast<int64_t>(s.hi - s.lo) + 1));
          break;
        case Dist::kBool: v = static_cast<double>(rng.below(2)); break;
      }
      v = round_to(s.dtype, v);
    }
    out.push_back(std::move(h));
  }
  return out;
}

// ---- tracing and running ---------------------------------------------------------------------

/// A traced program: its graph, its kInput leaves in declaration order, and its result.
/// When the program draws random numbers, the runtime key input (ir::kRngKeyInput, created
/// by the first random op) comes last in `inputs` and is also named by `rng_key`; make_feeds
/// supplies its value.
struct Traced {
  ir::Graph graph;
  std::vector<int32_t> inputs;
  int32_t out = -1;
  int32_t rng_key = -1;
};

/// The runtime key a row's program is fed with (any fixed value will do).
constexpr int32_t kRowKey = 20240607;

/// Traces `fn` over fresh kInput leaves the way compile_forward does (a Trace made current
/// only while the function runs), or compile_train with `training`; graph.outputs = {result}.
/// `half` (bf16 or f16) traces under Precision::kBf16's or kF16's policy (products and
/// attention read copies of that type); kF32 traces without mixed precision.
inline Traced trace_fn(const std::vector<InputSpec>& specs, const BuildFn& fn, bool training = false,
                       DType half = DType::kF32) {
  ir::Trace trace;
  trace.training = training;
  trace.half = half;
  Traced t;
  Tensor result;
  {
    ir::TraceScope scope(trace);
    Ts xs;
    for (size_t i = 0; i < specs.size(); ++i) {
      // snprintf, not "x" + std::to_string(i): GCC 12 warns falsely (-Wrestrict) on that.
      char name[24];
      std::snprintf(name, sizeof name, "x%zu", i);
      xs.push_back(
          ir::named_leaf(trace.graph, ir::Op::kInput, name, specs[i].shape, specs[i].dtype, Loc::current()));
      t.inputs.push_back(xs.back().id());
    }
    result = fn(xs);
  }
  if (!result.valid() || result.graph() != &trace.graph)
    throw std::logic_error("case did not return a traced tensor");
  t.graph = trace.graph;
  t.out = result.id();
  t.graph.outputs = {t.out};
  if (trace.rng_key >= 0) {
    const ir::Node& key = t.graph.node(trace.rng_key);
    if (key.op != ir::Op::kInput || key.dtype != DType::kI32 || key.numel() != 1 ||
        key.name != ir::kRngKeyInput)
      throw std::logic_error("the random key is not an i32 scalar input named " +
                             std::string(ir::kRngKeyInput));
    t.rng_key = trace.rng_key;
    t.inputs.push_back(t.rng_key);
  }
  return t;
}

/// The values of a traced row's inputs: make_inputs(specs, seed), then the runtime key
/// `key` when the program has one.
inline std::vector<HostTensor> make_feeds(const std::vector<InputSpec>& specs, const Traced& t, uint64_t seed,
                                          int32_t key = kRowKey) {
  std::vector<HostTensor> feeds = make_inputs(specs, seed);
  if (t.rng_key >= 0) feeds.push_back({DType::kI32, {static_cast<double>(key)}});
  if (feeds.size() != t.inputs.size())
    throw std::logic_error("make_feeds: the specs do not match the traced inputs");
  return feeds;
}

/// Host bytes in the backend format (f32 → float, i32 → int32_t, bool → uint8_t).
inline std::vector<std::byte> to_host(const HostTensor& h) {
  std::vector<std::byte> bytes(h.values.size() * static_cast<size_t>(dtype_size(h.dtype)));
  for (size_t i = 0; i < h.values.size(); ++i) {
    const double v = h.values[i];
    if (h.dtype == DType::kF32) {
      const auto f = static_cast<float>(v);
      std::memcpy(bytes.data() + 4 * i, &f, 4);
    } else if (h.dtype == DType::kI32) {
      const auto n = static_cast<int32_t>(v);
      std::memcpy(bytes.data() + 4 * i, &n, 4);
    } else if (h.dtype == DType::kI8) {
      bytes[i] = static_cast<std::byte>(static_cast<int8_t>(v));
    } else {
      bytes[i] = static_cast<std::byte>(v != 0 ? 1 : 0);
    }
  }
  return bytes;
}

inline std::vector<double> from_host(DType t, const std::vector<std::byte>& bytes, int64_t n) {
  std::vector<double> out(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t == DType::kF32) {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      out[i] = f;
    } else if (t == DType::kI32) {
      int32_t v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      out[i] = v;
    } else {
      out[i] = static_cast<double>(std::to_integer<uint8_t>(bytes[i]));
    }
  }
  return out;
}

/// Runs `graph` on `be` (prepared with `options`) and returns every graph.outputs entry at host
/// precision. The graph goes through dead-code elimination first, as the runtime does before
/// prepare().
inline std::vector<std::vector<double>> run_graph(backend::Backend& be, const ir::Graph& graph,
                                                  const std::vector<int32_t>& inputs,
                                                  const std::vector<HostTensor>& feeds,
                                                  const backend::PrepareOptions& options = {}) {
  if (feeds.size() != inputs.size())
    throw std::logic_error("run_graph: one feed per input needed (the random key too)");
  std::vector<int32_t> remap;
  const ir::Graph g = passes::eliminate_dead_code(graph, remap);
  for (const ir::Node& n : g.nodes())
    if (!be.supports(n.op))
      throw std::runtime_error(std::string(be.name()) + " backend does not support op " + ir::op_name(n.op));
  std::unique_ptr<backend::Executable> exe = be.prepare(g, {}, options);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<std::byte> bytes = to_host(feeds[i]);
    exe->set_input(remap[static_cast<size_t>(inputs[i])], bytes.data());
  }
  exe->execute();
  std::vector<std::vector<double>> outs;
  for (int32_t o : g.outputs) {
    const ir::Node& n = g.node(o);
    std::vector<std::byte> bytes(static_cast<size_t>(n.numel() * dtype_size(n.dtype)) + 1);
    exe->read_output(o, bytes.data());
    outs.push_back(from_host(n.dtype, bytes, n.numel()));
  }
  return outs;
}

/// y = build(inputs) traced with the `half` mixed-precision policy (kF32: none), and (with
/// `grads`) the gradients of sum(y·w) for a fixed random w drawn from `seed` ^ `salt` (the
/// inputs from `seed`), run on `be`: [y, d/dx0, …]. `operands`, when given, receives the
/// inputs' values and then w.
inline std::vector<std::vector<double>> run_weighted(backend::Backend& be, uint64_t seed,
                                                     const std::vector<InputSpec>& inputs,
                                                     const BuildFn& build, DType half, uint64_t salt,
                                                     bool grads = true,
                                                     std::vector<std::vector<double>>* operands = nullptr) {
  Rng weight_rng(seed ^ salt);
  Tensor y_out;
  Traced t = trace_fn(
      inputs,
      [&](const Ts& x) {
        Tensor y = build(x);
        std::vector<float> w(static_cast<size_t>(y.numel()));
        for (float& v : w) v = static_cast<float>(weight_rng.uniform(-1.5, 1.5));
        if (operands) operands->push_back(std::vector<double>(w.begin(), w.end()));
        y_out = y;
        return sum(y * constant(std::span<const float>(w), y.shape()));
      },
      false, half);
  const std::vector<HostTensor> feeds = make_feeds(inputs, t, seed);
  if (operands)
    for (size_t i = 0; i < inputs.size(); ++i) operands->insert(operands->end() - 1, feeds[i].values);
  const std::vector<int32_t> gs =
      grads ? autograd::append_gradients(t.graph, t.out, t.inputs) : std::vector<int32_t>{};
  t.graph.outputs = {y_out.id()};
  for (int32_t g : gs)
    if (g >= 0) t.graph.outputs.push_back(g);
  return run_graph(be, t.graph, t.inputs, feeds);
}

/// The oracle first, then the backend under test.
inline std::vector<std::unique_ptr<backend::Backend>> both_backends() {
  std::vector<std::unique_ptr<backend::Backend>> out;
  out.push_back(backend::make_ref_backend());
  out.push_back(backend::make_cpu_backend());
  return out;
}

/// A ref executable fed in double precision, for analytic gradients and finite differences.
struct RefRun {
  std::unique_ptr<backend::Executable> owner;
  backend::RefExecutable* exe = nullptr;

  RefRun(backend::Backend& ref, const ir::Graph& graph, const std::vector<int32_t>& inputs,
         const std::vector<HostTensor>& feeds)
      : owner(ref.prepare(graph, {})), exe(dynamic_cast<backend::RefExecutable*>(owner.get())) {
    if (exe == nullptr) throw std::logic_error("the ref backend did not return a RefExecutable");
    if (feeds.size() != inputs.size())
      throw std::logic_error("RefRun: one feed per input needed (the random key too)");
    for (size_t i = 0; i < inputs.size(); ++i) exe->set_input_f64(inputs[i], feeds[i].values);
    exe->execute();
  }
};

/// Central finite differences of the scalar output `loss` of `forward` with respect to every
/// element of input `which`, evaluated on the ref backend in double (no f32 rounding).
inline std::vector<double> finite_differences(backend::Backend& ref, const ir::Graph& forward, int32_t loss,
                                              const std::vector<int32_t>& inputs,
                                              const std::vector<HostTensor>& feeds, size_t which,
                                              double eps = 1e-6) {
  RefRun run(ref, forward, inputs, feeds);
  std::vector<double> x = feeds[which].values;
  std::vector<double> out(x.size());
  auto loss_at = [&](size_t k, double v) {
    x[k] = v;
    run.exe->set_input_f64(inputs[which], x);
    run.exe->execute();
    return run.exe->value_f64(loss).at(0);
  };
  for (size_t k = 0; k < x.size(); ++k) {
    const double x0 = x[k];
    out[k] = (loss_at(k, x0 + eps) - loss_at(k, x0 - eps)) / (2 * eps);
    x[k] = x0;
  }
  return out;
}

/// Autograd vs finite differences: relative error < 1e-5 with an absolute floor of 1e-7.
inline ::testing::AssertionResult matches_fd(const std::vector<double>& exact,
                                             const std::vector<double>& numeric) {
  if (exact.size() != numeric.size()) return ::testing::AssertionFailure() << "size mismatch";
  std::ostringstream bad;
  bad.precision(12);
  int failures = 0;
  for (size_t k = 0; k < exact.size(); ++k) {
    const double scale = std::max(std::abs(exact[k]), std::abs(numeric[k]));
    if (std::abs(exact[k] - numeric[k]) <= 1e-5 * scale + 1e-7) continue;
    if (++failures <= 6)
      bad << "\n  [" << k << "] autograd " << exact[k] << ", finite difference " << numeric[k];
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << failures << " of " << exact.size() << " gradient elements disagree:" << bad.str();
}

// ---- comparing ---------------------------------------------------------------------------------

inline std::string shape_and_dtype(const Shape& s, DType t) {
  return std::string(dtype_name(t)) + shape_str(s);
}

/// Element-wise |got - want| <= tol.abs + tol.rel * |want| (NaN matches NaN, an infinity
/// itself), naming the first few offenders.
inline ::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& want,
                                            Tol tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs expected " << want.size();
  std::ostringstream bad;
  bad.precision(9);
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    const bool same_nan = std::isnan(g) && std::isnan(w);
    if (same_nan || g == w || std::abs(g - w) <= tol.abs + tol.rel * std::abs(w)) continue;
    if (++failures <= 6)
      bad << "\n  [" << i << "] got " << g << ", expected " << w << " (diff " << g - w << ")";
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << failures << " of " << got.size() << " elements differ beyond rel "
                                       << tol.rel << " / abs " << tol.abs << ":" << bad.str();
}

// ---- hand-computed expectations (pin the oracle itself) -----------------------------------------

inline Tensor cf(std::vector<float> v, Shape s) { return constant(std::span<const float>(v), std::move(s)); }
inline Tensor ci(std::vector<int32_t> v, Shape s) {
  return constant(std::span<const int32_t>(v), std::move(s));
}

/// Traces `fn` (built from constants), runs it on ref and cpu, and expects exactly `want`
/// (up to `abs_tol` for results that are not exactly representable or go through libm).
inline void expect_known(const std::function<Tensor()>& fn, const Shape& shape, DType dtype,
                         const std::vector<double>& want, double abs_tol = 0, Loc loc = Loc::current()) {
  const ::testing::ScopedTrace at(loc.file_name(), static_cast<int>(loc.line()), "expect_known");
  const Traced t = trace_fn({}, [&](const Ts&) { return fn(); });
  const ir::Node& out = t.graph.node(t.out);
  ASSERT_EQ(shape_and_dtype(out.shape, out.dtype), shape_and_dtype(shape, dtype));
  for (const auto& be : both_backends())
    EXPECT_TRUE(all_close(run_graph(*be, t.graph, {}, {}).at(0), want, {0, abs_tol}))
        << "backend " << be->name();
}

/// d loss / d x_i for f32 inputs of the given values, on `be`; a leaf the loss does not
/// depend on yields an empty vector.
inline std::vector<std::vector<double>> grads_on(backend::Backend& be, const std::vector<Shape>& shapes,
                                                 const std::vector<std::vector<double>>& values,
                                                 const BuildFn& loss) {
  std::vector<InputSpec> specs;
  std::vector<HostTensor> feeds;
  for (size_t i = 0; i < shapes.size(); ++i) {
    specs.push_back(uni(shapes[i]));
    feeds.push_back({DType::kF32, values[i]});
  }
  Traced t = trace_fn(specs, loss);
  const std::vector<int32_t> grads = autograd::append_gradients(t.graph, t.out, t.inputs);
  t.graph.outputs.clear();
  for (int32_t g : grads)
    if (g >= 0) t.graph.outputs.push_back(g);
  const auto outs = run_graph(be, t.graph, t.inputs, feeds);
  std::vector<std::vector<double>> result;
  size_t next = 0;
  for (int32_t g : grads) result.push_back(g >= 0 ? outs[next++] : std::vector<double>{});
  return result;
}

/// Runs grads_on on ref and cpu and expects `want` (an empty entry: no gradient at all).
inline void expect_grads(const std::vector<Shape>& shapes, const std::vector<std::vector<double>>& values,
                         const BuildFn& loss, const std::vector<std::vector<double>>& want,
                         double abs_tol = 1e-6, Loc loc = Loc::current()) {
  const ::testing::ScopedTrace at(loc.file_name(), static_cast<int>(loc.line()), "expect_grads");
  for (const auto& be : both_backends()) {
    const auto got = grads_on(*be, shapes, values, loss);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(all_close(got[i], want[i], {0, abs_tol})) << "d/dx" << i << " on " << be->name();
  }
}

}  // namespace tg::op_test
