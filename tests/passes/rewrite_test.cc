// The rewriting passes (simplification, constant folding, unslice sums → concat, CSE): each
// fires where it should and never changes a result (checked on the reference backend
// against the unrewritten graph).
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <cmath>
#include <random>

#include "backend/ref/ref_backend.h"
#include "ir/api_util.h"
#include "passes/dce.h"
#include "passes/rewrite.h"
#include "passes/fusion.h"
#include "autograd/grad.h"

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
      xs.push_back(ir::named_leaf(trace.graph, ir::Op::kInput, "x" + std::to_string(i), shapes[i],
                                  DType::kF32, Loc::current()));
      b.inputs.push_back(xs.back().id());
    }
    trace.graph.outputs = {fn(xs).id()};
  }
  b.graph = trace.graph;
  return b;
}

std::vector<double> run(const ir::Graph& g, const std::vector<int32_t>& inputs,
                        const std::vector<std::vector<double>>& values) {
  auto backend = backend::make_ref_backend();
  auto exec = backend->prepare(g, {});
  auto* ref = dynamic_cast<backend::RefExecutable*>(exec.get());
  for (size_t i = 0; i < inputs.size(); ++i) ref->set_input_f64(inputs[i], values[i]);
  ref->execute();
  return ref->value_f64(g.outputs[0]);
}

/// Rewrites with the whole pipeline (passes::optimize, as lower() runs it) and checks the
/// result equals the original's exactly.
ir::Graph rewrite_and_check(const Built& b, uint64_t seed = 1) {
  std::vector<int32_t> remap;
  ir::Graph d = passes::optimize(b.graph, remap);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.5, 2.0);
  std::vector<std::vector<double>> values;
  std::vector<int32_t> new_inputs;
  for (int32_t in : b.inputs) {
    values.emplace_back(static_cast<size_t>(b.graph.node(in).numel()));
    for (double& v : values.back()) v = u(rng);
    new_inputs.push_back(remap[static_cast<size_t>(in)]);
  }
  const std::vector<double> want = run(b.graph, b.inputs, values), got = run(d, new_inputs, values);
  EXPECT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size() && i < got.size(); ++i)
    if (!(std::isnan(want[i]) && std::isnan(got[i]))) {
      EXPECT_EQ(want[i], got[i]) << "element " << i;
    }
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

/// Appends a raw node (for ops or forms the public API never emits, like unslice or a cast
/// to the same dtype) to `like`'s graph.
Tensor raw(const Tensor& like, ir::Op op, std::vector<int32_t> inputs, Shape shape, ir::Attrs attrs = {},
           DType dtype = DType::kF32) {
  ir::Node n = ir::make_node(op, std::move(inputs), Loc::current());
  n.shape = std::move(shape);
  n.attrs = std::move(attrs);
  n.dtype = dtype;
  return ir::emit(*like.graph(), std::move(n));
}

Tensor unslice(const Tensor& x, int64_t axis, int64_t start, int64_t step, Shape big) {
  ir::Attrs a;
  a.axes = {axis};
  a.values = {static_cast<double>(start), static_cast<double>(step)};
  return raw(x, ir::Op::kUnslice, {x.id()}, std::move(big), a);
}

bool all_constants_are_fills(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes())
    if (n.op == ir::Op::kConstant && n.attrs.values.size() != 1) return false;
  return true;
}

TEST(Rewrite, NewIdentitiesDisappear) {
  Built b = build({{2, 6}}, [](const std::vector<Tensor>& x) {
    Tensor y = neg(neg(x[0]));
    y = raw(y, ir::Op::kBroadcastTo, {y.id()}, {2, 6});  // to its own shape
    ir::Attrs to_f32;
    to_f32.dtype = DType::kF32;
    y = raw(y, ir::Op::kCast, {y.id()}, {2, 6}, to_f32);  // to its own dtype
    ir::Attrs full_range;
    full_range.axes = {1};
    full_range.values = {0.0, 1.0};
    y = raw(y, ir::Op::kSlice, {y.id()}, {2, 6}, full_range);
    y = unslice(y, 1, 0, 1, {2, 6});
    Tensor z = broadcast_to(broadcast_to(reshape(x[0], {2, 1, 6}), {2, 3, 6}), {4, 2, 3, 6});
    return y * 2.0 + sum(z, {0, 2});
  });
  const int before = b.graph.size();
  ir::Graph g = rewrite_and_check(b);
  EXPECT_LT(g.size(), before);
  for (ir::Op op : {ir::Op::kNeg, ir::Op::kCast, ir::Op::kSlice, ir::Op::kUnslice})
    EXPECT_EQ(count(g, op), 0);
  // Only the scalar fills' broadcasts and one broadcast of x (the two merged) remain.
  int x_broadcasts = 0;
  for (const ir::Node& n : g.nodes())
    x_broadcasts += n.op == ir::Op::kBroadcastTo && g.node(n.inputs[0]).op != ir::Op::kConstant;
  EXPECT_EQ(x_broadcasts, 1);
}

TEST(Rewrite, TimesZeroIsKept) {
  // x·0 is NaN for x = ±inf or NaN: never rewritten to 0.
  Built b = build({{3}}, [](const std::vector<Tensor>& x) { return x[0] * 0.0; });
  ir::Graph g = rewrite_and_check(b);
  EXPECT_EQ(count(g, ir::Op::kMul), 1);
}

TEST(Rewrite, FoldsFillsToFills) {
  Built b = build({{2, 3}}, [](const std::vector<Tensor>& x) {
    Tensor c = exp(full({}, 0.5)) * 3.0 - sqrt(full({2, 3}, 2.0));          // fills through broadcasts
    Tensor mask = where(full({2, 3}, 1.0) > 0.5, full({2, 3}, 4.0), -1.0);  // compare, where
    Tensor i = cast(full({2, 3}, 7, DType::kI32) * 3 - 1, DType::kF32);     // i32 arithmetic, cast
    return x[0] * c + mask + i + tanh(full({}, -0.25));
  });
  const int before = b.graph.size();
  ir::Graph g = rewrite_and_check(b);
  EXPECT_LT(g.size(), before / 2);
  for (ir::Op op :
       {ir::Op::kExp, ir::Op::kSqrt, ir::Op::kSub, ir::Op::kGt, ir::Op::kWhere, ir::Op::kCast, ir::Op::kTanh})
    EXPECT_EQ(count(g, op), 0) << ir::op_name(op);
  EXPECT_EQ(count(g, ir::Op::kMul), 1);  // x·c
  EXPECT_EQ(count(g, ir::Op::kAdd), 3);
  EXPECT_TRUE(all_constants_are_fills(g)) << g.to_string();
}

TEST(Rewrite, FoldsSmallDenseConstants) {
  Built b = build({{2, 3}}, [](const std::vector<Tensor>& x) {
    const std::vector<float> v = {0.5f, -1.0f, 2.0f, 3.0f, -0.25f, 1.5f};
    Tensor c = constant(v, {2, 3});
    Tensor rows = reshape(cast(arange(0, 2), DType::kF32), {2, 1});  // broadcast along columns
    Tensor d = log1p(abs(c)) * rows + maximum(c, 0.0);
    Tensor causal = where(reshape(arange(0, 3), {1, 3}) > reshape(arange(0, 2), {2, 1}), -1e9, d);
    return x[0] + causal;
  });
  ir::Graph g = rewrite_and_check(b);
  EXPECT_EQ(count(g, ir::Op::kLog1p) + count(g, ir::Op::kWhere) + count(g, ir::Op::kMaximum), 0);
  EXPECT_EQ(count(g, ir::Op::kArange), 0);
  EXPECT_EQ(count(g, ir::Op::kAdd), 1);  // only x + constant
}

TEST(Rewrite, FoldingStopsAtItsLimits) {
  // A dense constant over the size limit stays as it is.
  Built big = build({{70, 70}}, [](const std::vector<Tensor>& x) {
    std::vector<float> v(70 * 70);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 13) * 0.1f;
    return x[0] + exp(constant(v, {70, 70}));
  });
  EXPECT_EQ(count(rewrite_and_check(big), ir::Op::kExp), 1);
  // ... but a fill of that size folds (it stays one value).
  Built fill = build({{70, 70}}, [](const std::vector<Tensor>& x) {
    return x[0] + exp(full({70, 70}, 0.3));
  });
  ir::Graph gf = rewrite_and_check(fill);
  EXPECT_EQ(count(gf, ir::Op::kExp), 0);
  EXPECT_TRUE(all_constants_are_fills(gf));
  // i32 overflow is left to run time (the ref backend keeps it in double, the CPU wraps).
  Built wrap =
      build({{1}}, [](const std::vector<Tensor>&) { return full({2}, 2147483647.0, DType::kI32) + 1; });
  EXPECT_EQ(count(rewrite_and_check(wrap), ir::Op::kAdd), 1);
  // Anything that reads an input, or randomness, is never folded.
  Built live =
      build({{4}}, [](const std::vector<Tensor>& x) { return exp(x[0] * 0.0 + 1.0) + exp(full({4}, 1.0)); });
  ir::Graph gl = rewrite_and_check(live);
  EXPECT_EQ(count(gl, ir::Op::kExp), 1);
  EXPECT_EQ(count(gl, ir::Op::kMul), 1);
}

TEST(Rewrite, FoldedNanAndSignedZerosStayDistinct) {
  // Folding makes NaN, ±inf and -0.0 fills of one shape; CSE must keep them apart (it
  // compares constants by their bits: NaN is unordered and -0.0 == 0.0).
  Built b = build({{3}}, [](const std::vector<Tensor>& x) {
    Tensor nan = log(full({3}, -1.0));
    Tensor neg_zero = neg(full({3}, 0.0));
    return concat({where(x[0] > 1.0, nan, 1.0 / neg_zero), where(x[0] > 1.0, 1.0 / full({3}, 0.0), neg_zero)},
                  0);
  });
  ir::Graph g = rewrite_and_check(b);
  EXPECT_EQ(count(g, ir::Op::kDiv) + count(g, ir::Op::kLog) + count(g, ir::Op::kNeg), 0);
  const std::vector<double> v = run(g, {0}, {{0.5, 1.5, 0.5}});
  EXPECT_EQ(v[0], -INFINITY);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(v[3], 0.0);
  EXPECT_TRUE(std::signbit(v[3]));
  EXPECT_EQ(v[4], INFINITY);
}

TEST(Rewrite, UnsliceSumsBecomeOneConcat) {
  // Three pieces tiling the axis, summed out of order: one concat of the pieces in order.
  Built b = build({{2, 3, 4}, {2, 3, 3}, {2, 3, 3}}, [](const std::vector<Tensor>& x) {
    const Shape big = {2, 3, 10};
    Tensor s =
        add(add(unslice(x[1], 2, 4, 1, big), unslice(x[2], 2, 7, 1, big)), unslice(x[0], 2, 0, 1, big));
    return s * 2.0;
  });
  ir::Graph g = rewrite_and_check(b);
  EXPECT_EQ(count(g, ir::Op::kUnslice), 0);
  EXPECT_EQ(count(g, ir::Op::kAdd), 0);
  ASSERT_EQ(count(g, ir::Op::kConcat), 1);
  for (const ir::Node& n : g.nodes())
    if (n.op == ir::Op::kConcat) {
      ASSERT_EQ(n.inputs.size(), 3u);
      for (size_t i = 0; i < 3; ++i) EXPECT_EQ(g.node(n.inputs[i]).op, ir::Op::kInput);
      EXPECT_EQ(g.node(n.inputs[0]).name, "x0");
      EXPECT_EQ(g.node(n.inputs[1]).name, "x1");
      EXPECT_EQ(g.node(n.inputs[2]).name, "x2");
    }
}

TEST(Rewrite, UnsliceSumsWithGapsGetZeroFills) {
  Built b = build({{3, 2}, {1, 2}}, [](const std::vector<Tensor>& x) {
    const Shape big = {8, 2};
    return unslice(x[1], 0, 5, 1, big) + unslice(x[0], 0, 1, 1, big);  // rows 1-3 and 5 of 8
  });
  ir::Graph g = rewrite_and_check(b);
  EXPECT_EQ(count(g, ir::Op::kUnslice), 0);
  ASSERT_EQ(count(g, ir::Op::kConcat), 1);
  for (const ir::Node& n : g.nodes())
    if (n.op == ir::Op::kConcat) {
      ASSERT_EQ(n.inputs.size(), 5u);  // zeros[1], x0, zeros[1], x1, zeros[2]
      const std::vector<int64_t> rows = {1, 3, 1, 1, 2};
      for (size_t i = 0; i < 5; ++i) EXPECT_EQ(g.node(n.inputs[i]).shape[0], rows[i]);
      for (size_t i : {0, 2, 4}) {
        EXPECT_EQ(g.node(n.inputs[i]).op, ir::Op::kConstant);
        EXPECT_EQ(g.node(n.inputs[i]).attrs.values, std::vector<double>{0.0});
      }
    }
}

TEST(Rewrite, UnsliceSumsThatDoNotTileAreKept) {
  const Shape big = {2, 6};
  // Overlapping ranges.
  Built overlap = build({{2, 4}, {2, 3}}, [&](const std::vector<Tensor>& x) {
    return unslice(x[0], 1, 0, 1, big) + unslice(x[1], 1, 3, 1, big);
  });
  EXPECT_EQ(count(rewrite_and_check(overlap), ir::Op::kUnslice), 2);
  // Step 2.
  Built strided = build({{2, 3}, {2, 3}}, [&](const std::vector<Tensor>& x) {
    return unslice(x[0], 1, 0, 2, big) + unslice(x[1], 1, 1, 2, big);
  });
  EXPECT_EQ(count(rewrite_and_check(strided), ir::Op::kConcat), 0);
  // Different axes.
  Built axes = build({{1, 6}, {2, 3}}, [&](const std::vector<Tensor>& x) {
    return unslice(x[0], 0, 0, 1, big) + unslice(x[1], 1, 3, 1, big);
  });
  EXPECT_EQ(count(rewrite_and_check(axes), ir::Op::kConcat), 0);
  // A leaf that is not an unslice.
  Built mixed = build({{2, 3}, {2, 6}},
                      [&](const std::vector<Tensor>& x) { return unslice(x[0], 1, 0, 1, big) + x[1]; });
  EXPECT_EQ(count(rewrite_and_check(mixed), ir::Op::kConcat), 0);
  // An inner add read elsewhere: the inner sum becomes a concat, the outer add stays.
  Built shared = build({{2, 2}, {2, 2}, {2, 2}}, [&](const std::vector<Tensor>& x) {
    Tensor inner = unslice(x[0], 1, 0, 1, big) + unslice(x[1], 1, 2, 1, big);
    return (inner + unslice(x[2], 1, 4, 1, big)) * inner;
  });
  ir::Graph g = rewrite_and_check(shared);
  EXPECT_EQ(count(g, ir::Op::kConcat), 1);
  EXPECT_EQ(count(g, ir::Op::kUnslice), 1);
  EXPECT_EQ(count(g, ir::Op::kAdd), 1);
}

TEST(Rewrite, RandomConstantGraphsKeepTheirResults) {
  // Random expressions mixing an input with fills, small dense constants and aranges: folding
  // must reproduce the reference backend's values exactly.
  for (uint64_t seed = 0; seed < 40; ++seed) {
    std::mt19937_64 rng(seed);
    Built b = build({{2, 3}}, [&](const std::vector<Tensor>& x) {
      const std::vector<float> v = {0.75f, -1.5f, 2.0f, 0.0f, -0.5f, 3.25f};
      std::vector<Tensor> pool = {x[0],
                                  full({2, 3}, 1.5),
                                  full({}, -2.0),
                                  constant(v, {2, 3}),
                                  reshape(cast(arange(0, 3), DType::kF32), {1, 3}),
                                  full({2, 3}, 0.0)};
      for (int step = 0; step < 14; ++step) {
        const Tensor& a = pool[rng() % pool.size()];
        const Tensor& c = pool[rng() % pool.size()];
        switch (rng() % 9) {
          case 0: pool.push_back(a + c); break;
          case 1: pool.push_back(a * c); break;
          case 2: pool.push_back(a - c * 1.0); break;
          case 3: pool.push_back(tanh(a)); break;
          case 4: pool.push_back(-(-a)); break;
          case 5: pool.push_back(where(a > c, a, c + 0.0)); break;
          case 6: pool.push_back(maximum(a, c) / 1.0); break;
          case 7: pool.push_back(cast(cast(a, DType::kI32) * 3, DType::kF32)); break;
          default: pool.push_back(exp(minimum(a, 2.0))); break;
        }
      }
      Tensor total = x[0];
      for (size_t i = 1; i < pool.size(); ++i) total = total + pool[i] * 0.01;
      return total;
    });
    rewrite_and_check(b, seed);
  }
}

}  // namespace

namespace {

/// The same model, weights and batch through two programs that differ only in the rewriting
/// passes: losses and parameters after three AdamW steps must agree, and the passes must
/// have turned the qkv gradient (a sum of three unslices per layer) into concats.
void check_gpt_passes_on_and_off(tg::Device device, double tol) {
  const tg::nn::GptConfig config{
      .vocab = 11, .seq_len = 6, .layers = 2, .d_model = 16, .heads = 4, .kv_heads = 2};
  tg::nn::Gpt on(config), off(config);
  auto compile = [&](tg::nn::Gpt& m, bool optimize) {
    return tg::compile_train(
        m, [&](tg::Tensor ids, tg::Tensor targets) { return m.loss(ids, targets); },
        {.inputs = {{"ids", {3, 6}, tg::DType::kI32}, {"targets", {3, 6}, tg::DType::kI32}},
         .optimizer = tg::AdamW{.lr = 1e-2, .weight_decay = 0.1},
         .clip_grad_norm = 1.0,
         .device = device,
         .optimize = optimize});
  };
  tg::Program p_on = compile(on, true), p_off = compile(off, false);
  EXPECT_LT(p_on.ir().size(), p_off.ir().size());  // the passes did remove nodes
  auto occurrences = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(occurrences(p_off.ir(), "= unslice("), 3 * config.layers);
  EXPECT_EQ(occurrences(p_on.ir(), "= unslice("), 0);
  EXPECT_EQ(occurrences(p_on.ir(), "= concat("), config.layers);
  p_off.upload_params(p_on.download_params());
  std::vector<int32_t> ids(18), targets(18);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 7) % 11);
    targets[i] = static_cast<int32_t>((i * 5 + 3) % 11);
  }
  for (int step = 0; step < 3; ++step) {
    const float a = p_on.step({{"ids", ids}, {"targets", targets}});
    const float b = p_off.step({{"ids", ids}, {"targets", targets}});
    EXPECT_NEAR(a, b, tol * std::fabs(b));
  }
  // The key bias (the k slice of each attn.qkv.bias) has an exactly-zero gradient (softmax is
  // invariant to it), so AdamW moves it by g/(|g| + eps) of rounding noise, which differs
  // between any two programs that round differently: it is held to the sum of the lrs
  // (gpt_parity_test says more).
  const int64_t head = config.d_model / config.heads, k_begin = config.d_model,
                k_end = k_begin + config.kv_heads * head;
  const auto pa = p_on.download_params(), pb = p_off.download_params();
  for (const auto& [name, t] : pa)
    for (size_t i = 0; i < t.f32().size(); ++i) {
      const bool key_bias = name.ends_with("attn.qkv.bias") && static_cast<int64_t>(i) >= k_begin &&
                            static_cast<int64_t>(i) < k_end;
      ASSERT_NEAR(t.f32()[i], pb.at(name).f32()[i], key_bias ? 3 * 1e-2 : tol) << name << "[" << i << "]";
    }
}

TEST(Rewrite, GptTrainingStepsAgreeWithPassesOnAndOff) {
  check_gpt_passes_on_and_off(tg::Device::ref(), 1e-6);
}

TEST(Rewrite, GptTrainingStepsAgreeWithPassesOnAndOffOnCpu) {
  // In float the two programs sum in different orders (fused reductions, (A·B)ᵀ = Bᵀ·Aᵀ), and
  // the key bias's gradient is zero in exact arithmetic (softmax ignores a per-row shift), so
  // AdamW turns that rounding noise into parameter differences of a few 1e-6.
  check_gpt_passes_on_and_off(tg::Device::cpu(), 1e-5);
}

}  // namespace

namespace {

TEST(Rewrite, BackwardRecomputesSmallForwardCones) {
  // loss = Σ tanh(2x + 1)²: the backward reads tanh's output (and through it 2x + 1). After
  // rematerialisation no backward elementwise node reads a forward elementwise value, so
  // fusion can keep the whole forward chain in registers.
  Built b = build({{4, 8}}, [](const std::vector<Tensor>& x) {
    Tensor t = tanh(x[0] * 2.0 + 1.0);
    return sum(t * t);
  });
  ir::Graph& g = b.graph;
  g.stage = ir::Stage::kBackward;
  const std::vector<int32_t> grads = autograd::append_gradients(g, g.outputs[0], b.inputs);
  g.outputs.push_back(grads[0]);
  auto crossing = [](const ir::Graph& graph) {
    int n = 0;
    for (const ir::Node& node : graph.nodes())
      if (node.stage == ir::Stage::kBackward && passes::fusible(node.op))
        for (int32_t in : node.inputs)
          n += graph.node(in).stage == ir::Stage::kForward && passes::fusible(graph.node(in).op);
    return n;
  };
  EXPECT_GT(crossing(g), 0);
  std::vector<int32_t> remap;
  const ir::Graph r = passes::rematerialize(g, remap);
  EXPECT_EQ(crossing(r), 0);
  // Same gradient, exactly (the copies compute the same expressions on the ref backend).
  std::vector<double> x(32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = -1.0 + 0.0625 * static_cast<double>(i);
  auto grad_of = [&](const ir::Graph& graph, int32_t input, int32_t out) {
    auto backend = backend::make_ref_backend();
    auto exec = backend->prepare(graph, {});
    auto* ref = dynamic_cast<backend::RefExecutable*>(exec.get());
    ref->set_input_f64(input, x);
    ref->execute();
    return ref->value_f64(out);
  };
  EXPECT_EQ(grad_of(g, b.inputs[0], g.outputs[1]),
            grad_of(r, remap[static_cast<size_t>(b.inputs[0])], r.outputs[1]));
}

}  // namespace
