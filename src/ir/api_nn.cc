// Public NN ops (functional.h): the fused primitives' front doors, which canonicalise their
// arguments, and the composites written with primitives.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <utility>

#include "ir/api_util.h"
#include "tensorgrad/functional.h"

namespace tg {
using namespace ir;

namespace {

Trace& trace_for(const char* op, const Loc& loc) {
  Trace* t = current_trace();
  if (t == nullptr)
    throw Error(std::string("[") + op + "] called outside of compile_train/compile_forward (at " +
                loc_str(loc) + ")");
  return *t;
}

Graph& graph_of(const char* op, const Tensor& x, const Loc& loc) {
  Arg a(x, loc);
  return graph_for(op, {&a}, loc);
}

/// The runtime-advanced key all random ops of a program read.
Tensor rng_key(Trace& t, const Loc& loc) {
  if (t.rng_key < 0) {
    t.rng_key = named_leaf(t.graph, Op::kInput, kRngKeyInput, {}, DType::kI32, loc).id();
  }
  return Tensor(&t.graph, t.rng_key);
}

}  // namespace

Tensor take_along_axis(const Tensor& x, const Tensor& idx, int64_t axis, Loc loc) {
  Arg ax(x, loc), ai(idx, loc);
  Graph& g = graph_for("take_along_axis", {&ax, &ai}, loc);
  if (idx.rank() != x.rank())
    api_fail("take_along_axis",
             "indices " + shape_str(idx.shape()) + " must have the rank of " + shape_str(x.shape()), loc);
  const int64_t a = normalize_axis("take_along_axis", axis, x.rank(), loc);
  Shape target = x.shape();
  target[static_cast<size_t>(a)] = idx.shape()[static_cast<size_t>(a)];
  Tensor i = broadcast_if_needed(cast(idx, DType::kI32, loc), target, loc);
  Node n = make_node(Op::kGather, {x.id(), i.id()}, loc);
  n.attrs.axes = {a};
  return emit(g, std::move(n));
}

Tensor update_slice(const Tensor& dst, const Tensor& src, const Tensor& pos, int64_t axis, Loc loc) {
  Arg ad(dst, loc), as(src, loc), ap(pos, loc);
  Graph& g = graph_for("update_slice", {&ad, &as, &ap}, loc);
  const int64_t a = normalize_axis("update_slice", axis, dst.rank(), loc);
  if (pos.dtype() != DType::kI32) api_fail("update_slice", "the offset must be i32", loc);
  Node n = make_node(Op::kUpdateSlice, {dst.id(), src.id(), pos.id()}, loc);
  n.attrs.axes = {a};
  return emit(g, std::move(n));
}

Tensor scatter_add(const Tensor& src, const Tensor& idx, int64_t axis, int64_t size, Loc loc) {
  Arg as(src, loc), ai(idx, loc);
  Graph& g = graph_for("scatter_add", {&as, &ai}, loc);
  if (src.dtype() != DType::kF32 || idx.dtype() != DType::kI32 || src.shape() != idx.shape())
    api_fail("scatter_add",
             "src f32 and idx i32 of one shape, got " + std::string(dtype_name(src.dtype())) +
                 shape_str(src.shape()) + " and " + dtype_name(idx.dtype()) + shape_str(idx.shape()),
             loc);
  const int64_t a = normalize_axis("scatter_add", axis, src.rank(), loc);
  if (size < 1) api_fail("scatter_add", "size must be >= 1, got " + std::to_string(size), loc);
  Node n = make_node(Op::kScatterAdd, {src.id(), idx.id()}, loc);
  n.shape = src.shape();
  n.shape[static_cast<size_t>(a)] = size;
  n.attrs.axes = {a};
  return emit(g, std::move(n));
}

Tensor sample(const Tensor& logits, const Tensor& params, const Tensor& key, Loc loc) {
  Arg al(logits, loc), ap(params, loc), ak(key, loc);
  Graph& g = graph_for("sample", {&al, &ap, &ak}, loc);
  if (logits.dtype() != DType::kF32) api_fail("sample", "logits must be f32", loc);
  if (params.dtype() != DType::kF32 || (params.shape() != Shape{3} && params.shape() != Shape{4}))
    api_fail("sample",
             "params must be f32 [4] = {temperature, top_k, top_p, min_p} (or [3], min_p 0), got " +
                 std::string(dtype_name(params.dtype())) + " " + shape_str(params.shape()),
             loc);
  if (key.dtype() != DType::kI32 || key.shape() != Shape{2})
    api_fail("sample",
             "key must be i32 [2] = {seed, counter}, got " + std::string(dtype_name(key.dtype())) + " " +
                 shape_str(key.shape()),
             loc);
  const Tensor p4 =
      params.shape() == Shape{4} ? params : concat({params, zeros({1}, DType::kF32, loc)}, 0, loc);
  return emit(g, make_node(Op::kSample, {logits.id(), p4.id(), key.id()}, loc));
}

Tensor embedding(const Tensor& table, const Tensor& ids, Loc loc) {
  if (table.rank() < 1) api_fail("embedding", "the table needs rank >= 1", loc);
  if (ids.dtype() != DType::kI32) api_fail("embedding", "ids must be i32", loc);
  Shape rest(table.shape().begin() + 1, table.shape().end());
  const int64_t row = numel(rest);
  Tensor flat_table = reshape(table, {table.shape()[0], row}, loc);
  Tensor flat_ids = broadcast_to(reshape(ids, {ids.numel(), 1}, loc), {ids.numel(), row}, loc);
  // A half-stored table (Param::set_dtype) is gathered as stored and only its rows widened.
  const DType stored = ir::widened_half(flat_table);
  Tensor rows = stored == DType::kF32 ? take_along_axis(flat_table, flat_ids, 0, loc)  // [N, row]
                                      : cast(take_along_axis(cast(flat_table, stored, loc), flat_ids, 0, loc),
                                             DType::kF32, loc);
  Shape out = ids.shape();
  out.insert(out.end(), rest.begin(), rest.end());
  return reshape(rows, out, loc);
}

Tensor one_hot(const Tensor& ids, int64_t classes, Loc loc) {
  Graph& g = graph_of("one_hot", ids, loc);
  if (ids.dtype() != DType::kI32) api_fail("one_hot", "ids must be i32", loc);
  if (classes <= 0 || classes > std::numeric_limits<int32_t>::max())
    api_fail("one_hot", "classes must be in [1, 2^31 - 1] (ids are i32), got " + std::to_string(classes),
             loc);
  // 0, 1, …, classes - 1 as an arange leaf: no host array of `classes` values.
  Node range = make_node(Op::kArange, {}, loc);
  range.dtype = DType::kI32;
  range.shape = {classes};
  range.attrs.values = {0.0, 1.0};
  Tensor cls = emit(g, std::move(range));
  return cast(eq(unsqueeze(ids, -1, loc), cls, loc), DType::kF32, loc);
}

namespace {
Tensor softmax_like(Op op, const Tensor& x, int64_t axis, bool causal, const Loc& loc) {
  Graph& g = graph_of(op_name(op), x, loc);
  if (x.rank() == 0) api_fail(op_name(op), "needs rank >= 1", loc);
  Node n = make_node(op, {cast(x, DType::kF32, loc).id()}, loc);
  n.attrs.axes = {normalize_axis(op_name(op), axis, x.rank(), loc)};
  n.attrs.causal = causal;
  return emit(g, std::move(n));
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t axis, bool causal, Loc loc) {
  return softmax_like(Op::kSoftmax, x, axis, causal, loc);
}
Tensor log_softmax(const Tensor& x, int64_t axis, bool causal, Loc loc) {
  return softmax_like(Op::kLogSoftmax, x, axis, causal, loc);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options, Loc loc) {
  Arg al(logits, loc), at(targets, loc);
  Graph& g = graph_for("cross_entropy", {&al, &at}, loc);
  if (logits.rank() < 1) api_fail("cross_entropy", "logits need rank >= 1", loc);
  if (targets.dtype() != DType::kI32) api_fail("cross_entropy", "targets must be i32 class indices", loc);
  Shape batch(logits.shape().begin(), logits.shape().end() - 1);
  if (targets.shape() != batch)
    api_fail("cross_entropy",
             "targets " + shape_str(targets.shape()) +
                 " must have the logits' shape without the class axis, " + shape_str(batch),
             loc);
  const int64_t rows = numel(batch);
  Tensor flat_logits = reshape(cast(logits, DType::kF32, loc), {rows, logits.shape().back()}, loc);
  Tensor flat_targets = reshape(targets, {rows}, loc);
  if (!(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0))
    api_fail("cross_entropy", "label_smoothing must be in [0, 1]", loc);
  Node n = make_node(Op::kCrossEntropy, {flat_logits.id(), flat_targets.id()}, loc);
  n.attrs.values = {static_cast<double>(options.ignore_index)};
  Tensor per_row = emit(g, std::move(n));
  if (options.label_smoothing > 0.0) {
    // PyTorch's: (1 − ε)·(−log p_target) + ε·mean over the classes of −log p, 0 where ignored.
    const double e = options.label_smoothing;
    Tensor uniform = neg(mean(log_softmax(flat_logits, -1, false, loc), {-1}, false, loc), loc);
    Tensor kept = ne(flat_targets, options.ignore_index, loc);
    per_row = add(mul(per_row, 1.0 - e, loc), where(kept, mul(uniform, e, loc), 0.0, loc), loc);
  }
  switch (options.reduction) {
    case Reduction::kNone: return reshape(per_row, batch, loc);
    case Reduction::kSum: return sum(per_row, {}, false, loc);
    case Reduction::kMean: {
      Tensor counted = cast(ne(flat_targets, options.ignore_index, loc), DType::kF32, loc);
      return div(sum(per_row, {}, false, loc), sum(counted, {}, false, loc), loc);
    }
  }
  return per_row;
}

namespace {
Tensor norm(Op op, const Tensor& x, double eps, const Loc& loc) {
  Graph& g = graph_of(op_name(op), x, loc);
  if (x.rank() == 0) api_fail(op_name(op), "needs rank >= 1", loc);
  Node n = make_node(op, {cast(x, DType::kF32, loc).id()}, loc);
  n.attrs.values = {eps};
  return emit(g, std::move(n));
}
void check_affine(const char* op, const Tensor& x, const Tensor& p, const Loc& loc) {
  if (p.valid() && p.shape() != Shape{x.shape().back()})
    api_fail(op,
             "weight/bias " + shape_str(p.shape()) + " must be [" + std::to_string(x.shape().back()) +
                 "] for input " + shape_str(x.shape()),
             loc);
}
}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Loc loc) {
  Tensor y = norm(Op::kLayerNorm, x, eps, loc);
  check_affine("layer_norm", x, weight, loc);
  check_affine("layer_norm", x, bias, loc);
  if (weight.valid()) y = mul(y, weight, loc);
  if (bias.valid()) y = add(y, bias, loc);
  return y;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps, Loc loc) {
  Tensor y = norm(Op::kRmsNorm, x, eps, loc);
  check_affine("rms_norm", x, weight, loc);
  return weight.valid() ? mul(y, weight, loc) : y;
}

Tensor random_uniform(Shape shape, Loc loc) {
  Trace& t = trace_for("random_uniform", loc);
  Tensor key = rng_key(t, loc);
  Node n = make_node(Op::kRandom, {key.id()}, loc);
  n.shape = std::move(shape);
  n.attrs.seed = t.next_seed++;
  return emit(t.graph, std::move(n));
}

Tensor dropout(const Tensor& x, double p, Loc loc) {
  Trace& t = trace_for("dropout", loc);
  if (!(p >= 0 && p < 1)) api_fail("dropout", "p must be in [0, 1), got " + std::to_string(p), loc);
  (void)graph_of("dropout", x, loc);
  if (!t.training || p == 0) return x;
  Tensor key = rng_key(t, loc);
  Node n = make_node(Op::kDropout, {cast(x, DType::kF32, loc).id(), key.id()}, loc);
  n.attrs.values = {p};
  n.attrs.seed = t.next_seed++;
  return emit(t.graph, std::move(n));
}

bool is_training() {
  const Trace* t = current_trace();
  return t != nullptr && t->training;
}

SelectiveScanResult selective_scan(const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B,
                                   const Tensor& C, const SelectiveScanOptions& options, Loc loc) {
  Arg au(u, loc), ad(delta, loc), aa(A, loc), ab(B, loc), ac(C, loc);
  Graph& g = graph_for("selective_scan", {&au, &ad, &aa, &ab, &ac}, loc);
  if (u.rank() != 3) api_fail("selective_scan", "u must be [B, D, L], got " + shape_str(u.shape()), loc);
  if (A.rank() != 2) api_fail("selective_scan", "A must be [D, N], got " + shape_str(A.shape()), loc);
  const int64_t channels = u.shape()[1];
  auto grouped = [&](const Tensor& x, const char* what) {
    if (x.rank() == 3) return reshape(x, {x.shape()[0], 1, x.shape()[1], x.shape()[2]}, loc);
    if (x.rank() != 4)
      api_fail("selective_scan",
               std::string(what) + " must be [B, N, L] or [B, G, N, L], got " + shape_str(x.shape()), loc);
    return x;
  };
  auto per_channel = [&](const Tensor& x, const char* what) {
    if (!x.valid()) return zeros({channels}, DType::kF32, loc);
    if (x.shape() != Shape{channels})
      api_fail("selective_scan",
               std::string(what) + " must be [D] = [" + std::to_string(channels) + "], got " +
                   shape_str(x.shape()),
               loc);
    return cast(x, DType::kF32, loc);
  };
  // delta_bias, the softplus and the D skip are part of the primitive (ops.def); an absent D
  // or delta_bias is a zero vector.
  Node n = make_node(Op::kSelectiveScan,
                     {cast(u, DType::kF32, loc).id(), cast(delta, DType::kF32, loc).id(),
                      cast(A, DType::kF32, loc).id(), grouped(B, "B").id(), grouped(C, "C").id(),
                      per_channel(options.D, "D").id(), per_channel(options.delta_bias, "delta_bias").id()},
                     loc);
  n.attrs.values = {options.delta_softplus ? 1.0 : 0.0};
  const int32_t scan = emit(g, std::move(n)).id();
  SelectiveScanResult r;
  r.y = result(g, scan, 0, loc);
  r.last_state = result(g, scan, 1, loc);
  if (options.z.valid()) {
    if (options.z.shape() != u.shape())
      api_fail("selective_scan",
               "z must have u's shape " + shape_str(u.shape()) + ", got " + shape_str(options.z.shape()),
               loc);
    r.y = mul(r.y, silu(options.z, loc), loc);
  }
  return r;
}

Tensor causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Loc loc) {
  if (x.rank() != 3) api_fail("causal_conv1d", "x must be [B, D, L], got " + shape_str(x.shape()), loc);
  const int64_t channels = x.shape()[1], len = x.shape()[2];
  if (weight.rank() != 2 || weight.shape()[0] != channels || weight.shape()[1] < 1)
    api_fail(
        "causal_conv1d",
        "weight must be [D, K] = [" + std::to_string(channels) + ", K], got " + shape_str(weight.shape()),
        loc);
  const int64_t taps = weight.shape()[1];
  const Tensor padded = pad(x, 2, taps - 1, 0, 0.0, loc);
  Tensor y;
  for (int64_t k = 0; k < taps; ++k) {
    const Tensor term = mul(slice(padded, 2, k, k + len, 1, loc), slice(weight, 1, k, k + 1, 1, loc), loc);
    y = y.valid() ? add(y, term, loc) : term;
  }
  if (bias.valid()) {
    if (bias.shape() != Shape{channels})
      api_fail("causal_conv1d",
               "bias must be [D] = [" + std::to_string(channels) + "], got " + shape_str(bias.shape()), loc);
    y = add(y, reshape(bias, {channels, 1}, loc), loc);
  }
  return y;
}

Tensor gelu(const Tensor& x, GeluApprox approx, Loc loc) {
  if (approx == GeluApprox::kErf)  // x·Φ(x) = ½x(1 + erf(x/√2))
    return mul(mul(x, 0.5, loc), add(erf(mul(x, std::numbers::sqrt2 / 2, loc), loc), 1.0, loc), loc);
  return ir::unary(Op::kGeluTanh, x, loc);  // ½x(1 + tanh(√(2/π)(x + 0.044715x³))): one primitive
}

Tensor silu(const Tensor& x, Loc loc) { return mul(x, sigmoid(x, loc), loc); }

Tensor softplus(const Tensor& x, Loc loc) {
  return add(maximum(x, 0.0, loc), log1p(exp(neg(abs(x, loc), loc), loc), loc), loc);
}

Tensor swiglu(const Tensor& gate, const Tensor& up, Loc loc) { return mul(silu(gate, loc), up, loc); }

// The piecewise activations pick their branch with `where`, so each boundary point takes the
// gradient PyTorch gives it (noted per function).
Tensor leaky_relu(const Tensor& x, double negative_slope, Loc loc) {
  return where(gt(x, 0.0, loc), x, mul(x, negative_slope, loc), loc);  // at 0: the slope
}

Tensor elu(const Tensor& x, double alpha, Loc loc) {
  return where(gt(x, 0.0, loc), x, mul(sub(exp(x, loc), 1.0, loc), alpha, loc), loc);  // at 0: alpha
}

Tensor clamp(const Tensor& x, double lo, double hi, Loc loc) {
  if (!(lo <= hi)) api_fail("clamp", "needs lo <= hi", loc);
  return where(lt(x, lo, loc), lo, where(gt(x, hi, loc), hi, x, loc), loc);  // at lo, hi: 1; NaN stays
}

Tensor hardsigmoid(const Tensor& x, Loc loc) {  // at ±3: 0
  return where(le(x, -3.0, loc), 0.0, where(ge(x, 3.0, loc), 1.0, add(div(x, 6.0, loc), 0.5, loc), loc), loc);
}

Tensor hardswish(const Tensor& x, Loc loc) {  // at −3: −½ (the middle piece's slope), at 3: 1 (PyTorch's CPU)
  Tensor middle = div(mul(x, add(x, 3.0, loc), loc), 6.0, loc);
  return where(lt(x, -3.0, loc), 0.0, where(lt(x, 3.0, loc), middle, x, loc), loc);
}

Tensor mish(const Tensor& x, Loc loc) { return mul(x, tanh(softplus(x, loc), loc), loc); }

Tensor logsigmoid(const Tensor& x, Loc loc) { return neg(softplus(neg(x, loc), loc), loc); }

namespace {

/// RoPE's cos and sin tables [count, d] for positions first … first + count − 1: entry (t, i)
/// at angle t·inv_freq[i mod d/2], each frequency used by both halves (rotate-half pairing),
/// both times the attention factor.
std::pair<Tensor, Tensor> rope_tables(Graph& g, int64_t first, int64_t count, int64_t d, double base,
                                      const RopeScaling& scaling, const Loc& loc) {
  const RopeFrequencies f = rope_frequencies(d, base, scaling);
  const int64_t half = d / 2;
  std::vector<double> cos_table(static_cast<size_t>(count * d)), sin_table(cos_table.size());
  for (int64_t t = 0; t < count; ++t)
    for (int64_t i = 0; i < d; ++i) {
      const double theta = static_cast<double>(first + t) * f.inv_freq[static_cast<size_t>(i % half)];
      cos_table[static_cast<size_t>(t * d + i)] = f.attention_factor * std::cos(theta);
      sin_table[static_cast<size_t>(t * d + i)] = f.attention_factor * std::sin(theta);
    }
  return {constant_on(g, std::move(cos_table), {count, d}, DType::kF32, loc),
          constant_on(g, std::move(sin_table), {count, d}, DType::kF32, loc)};
}

// YaRN's ramp ends: the (fractional) pair dimension at which the original context turns
// `rotations` times, D·ln(L / (2π·rotations)) / (2 ln base).
double yarn_dimension(double rotations, int64_t d, double base, int64_t context) {
  return static_cast<double>(d) *
         std::log(static_cast<double>(context) / (rotations * 2.0 * std::numbers::pi)) /
         (2.0 * std::log(base));
}

}  // namespace

Tensor rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, Loc loc) {
  Arg ax(x, loc), ac(cos, loc), as(sin, loc);
  Graph& g = graph_for("rotary", {&ax, &ac, &as}, loc);
  if (x.rank() == 0 || x.shape().back() % 2 != 0)
    api_fail("rotary", "needs x [..., D] with D even, got " + shape_str(x.shape()), loc);
  if (x.dtype() != DType::kF32 || cos.dtype() != DType::kF32 || sin.dtype() != DType::kF32)
    api_fail("rotary", "x, cos and sin must be f32", loc);
  const Shape shape =
      broadcast_shapes("rotary", broadcast_shapes("rotary", cos.shape(), sin.shape(), loc), x.shape(), loc);
  if (shape != x.shape())
    api_fail("rotary",
             "cos " + shape_str(cos.shape()) + " and sin " + shape_str(sin.shape()) +
                 " must broadcast to x " + shape_str(x.shape()),
             loc);
  Tensor c = broadcast_if_needed(cos, shape, loc), s = broadcast_if_needed(sin, shape, loc);
  return emit(g, make_node(Op::kRotary, {x.id(), c.id(), s.id()}, loc));
}

RopeFrequencies rope_frequencies(int64_t d, double base, const RopeScaling& sc) {
  using T = RopeScaling::Type;
  const auto bad = [&](const std::string& why) { throw ShapeError("[rope_frequencies] " + why); };
  if (d < 2 || d % 2 != 0) bad("head_dim must be even and >= 2, got " + std::to_string(d));
  if (!(base > 1.0)) bad("base must be > 1");
  if (sc.type != T::kNone && !(sc.factor > 0.0)) bad("factor must be > 0");
  if (sc.type == T::kYarn && !(sc.beta_fast > 0.0 && sc.beta_slow > 0.0))
    bad("yarn needs beta_fast, beta_slow > 0");
  if ((sc.type == T::kLlama3 || sc.type == T::kYarn || sc.type == T::kLongRope) && sc.original_context < 1)
    bad("llama3, yarn and longrope scaling need the original context (>= 1)");
  if (sc.type == T::kLongRope &&
      (static_cast<int64_t>(sc.short_factor.size()) != d / 2 ||
       !std::all_of(sc.short_factor.begin(), sc.short_factor.end(), [](double f) { return f > 0; })))
    bad("longrope needs " + std::to_string(d / 2) + " positive short factors (one per pair), got " +
        std::to_string(sc.short_factor.size()));
  if (sc.type == T::kLlama3 && !(sc.high_freq_factor > sc.low_freq_factor && sc.low_freq_factor > 0))
    bad("llama3 scaling needs 0 < low_freq_factor < high_freq_factor");
  const int64_t half = d / 2;
  RopeFrequencies f;
  f.inv_freq.resize(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    f.inv_freq[static_cast<size_t>(i)] =
        std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
  const double L = static_cast<double>(sc.original_context);
  switch (sc.type) {
    case T::kNone: break;
    case T::kLinear:
      for (double& w : f.inv_freq) w /= sc.factor;
      break;
    case T::kLlama3: {
      const double long_wave = L / sc.low_freq_factor, short_wave = L / sc.high_freq_factor;
      for (double& w : f.inv_freq) {
        const double wavelength = 2.0 * std::numbers::pi / w;
        if (wavelength > long_wave) {
          w /= sc.factor;
        } else if (wavelength >= short_wave) {
          const double s = (L / wavelength - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor);
          w = (1.0 - s) * w / sc.factor + s * w;
        }
      }
      break;
    }
    case T::kYarn: {
      double lo = yarn_dimension(sc.beta_fast, d, base, sc.original_context);
      double hi = yarn_dimension(sc.beta_slow, d, base, sc.original_context);
      if (sc.truncate) lo = std::floor(lo), hi = std::ceil(hi);
      lo = std::max(lo, 0.0), hi = std::min(hi, static_cast<double>(d - 1));
      if (lo == hi) hi += 0.001;
      for (int64_t i = 0; i < half; ++i) {
        // ramp 0 up to lo (fast pairs keep their frequency), 1 from hi (slow ones are divided).
        const double ramp = std::clamp((static_cast<double>(i) - lo) / (hi - lo), 0.0, 1.0);
        double& w = f.inv_freq[static_cast<size_t>(i)];
        w = w / sc.factor * ramp + w * (1.0 - ramp);
      }
      const auto m = [&](double mscale) {
        return sc.factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(sc.factor) + 1.0;
      };
      f.attention_factor = sc.attention_factor > 0                    ? sc.attention_factor
                           : sc.mscale != 0 && sc.mscale_all_dim != 0 ? m(sc.mscale) / m(sc.mscale_all_dim)
                                                                      : m(1.0);
      break;
    }
    case T::kLongRope: {
      for (int64_t i = 0; i < half; ++i)
        f.inv_freq[static_cast<size_t>(i)] /= sc.short_factor[static_cast<size_t>(i)];
      f.attention_factor = sc.attention_factor > 0 ? sc.attention_factor
                           : sc.factor <= 1.0      ? 1.0
                                                   : std::sqrt(1.0 + std::log(sc.factor) / std::log(L));
      break;
    }
  }
  return f;
}

Tensor rope(const Tensor& x, double base, int64_t offset, Loc loc) {
  return rope(x, base, RopeScaling{}, offset, loc);
}

Tensor rope(const Tensor& x, double base, const RopeScaling& scaling, int64_t offset, Loc loc) {
  Graph& g = graph_of("rope", x, loc);
  if (x.rank() < 2 || x.shape().back() % 2 != 0)
    api_fail("rope", "needs [..., T, D] with D even, got " + shape_str(x.shape()), loc);
  const auto [c, s] =
      rope_tables(g, offset, x.shape()[x.shape().size() - 2], x.shape().back(), base, scaling, loc);
  return rotary(x, c, s, loc);
}

Tensor rope_at(const Tensor& x, const Tensor& positions, int64_t max_positions, double base, Loc loc) {
  return rope_at(x, positions, max_positions, base, RopeScaling{}, loc);
}

Tensor rope_at(const Tensor& x, const Tensor& positions, int64_t max_positions, double base,
               const RopeScaling& scaling, Loc loc) {
  Graph& g = graph_of("rope_at", x, loc);
  if (x.rank() != 4 || x.shape().back() % 2 != 0)
    api_fail("rope_at", "needs x [B, H, T, D] with D even, got " + shape_str(x.shape()), loc);
  const int64_t B = x.shape()[0], T = x.shape()[2], d = x.shape()[3];
  if (positions.dtype() != DType::kI32 || positions.shape() != Shape{B, T})
    api_fail("rope_at",
             "positions must be i32 [B, T] = " + shape_str({B, T}) + ", got " +
                 dtype_name(positions.dtype()) + shape_str(positions.shape()),
             loc);
  if (max_positions < 1) api_fail("rope_at", "max_positions must be >= 1", loc);
  const auto [table_cos, table_sin] = rope_tables(g, 0, max_positions, d, base, scaling, loc);
  // Each token's row of the tables, shared by the heads: [B, T, D] → [B, 1, T, D].
  Tensor c = unsqueeze(embedding(table_cos, positions, loc), 1, loc);
  Tensor s = unsqueeze(embedding(table_sin, positions, loc), 1, loc);
  return rotary(x, c, s, loc);
}

Tensor pad(const Tensor& x, int64_t axis, int64_t before, int64_t after, double value, Loc loc) {
  Graph& g = graph_of("pad", x, loc);
  if (x.rank() == 0) api_fail("pad", "cannot pad a scalar", loc);
  if (before < 0 || after < 0) api_fail("pad", "padding must be >= 0", loc);
  const int64_t a = normalize_axis("pad", axis, x.rank(), loc);
  std::vector<Tensor> parts;
  auto block = [&](int64_t len) {
    Shape s = x.shape();
    s[static_cast<size_t>(a)] = len;
    return constant_on(g, {value}, s, x.dtype(), loc);
  };
  if (before > 0) parts.push_back(block(before));
  parts.push_back(x);
  if (after > 0) parts.push_back(block(after));
  return concat(std::span<const Tensor>(parts), a, loc);
}

Tensor state(const std::string& name, Shape shape, DType dtype, double initial, Loc loc) {
  Trace& tr = trace_for("state", loc);
  if (name.empty()) api_fail("state", "names must be non-empty", loc);
  for (int64_t d : shape)
    if (d < 0) api_fail("state", "'" + name + "' has a negative extent in " + shape_str(shape), loc);
  const std::string full = std::string(kUserStatePrefix) + name;
  for (int32_t id = 0; id < tr.graph.size(); ++id) {
    const Node& n = tr.graph.node(id);
    if (n.op != Op::kState || n.name != full) continue;
    if (n.shape != shape || n.dtype != dtype || n.attrs.values.at(0) != initial)
      api_fail("state",
               "'" + name + "' was declared as " + shape_str(n.shape) + " " + dtype_name(n.dtype) +
                   " starting at " + std::to_string(n.attrs.values.at(0)) + ", now as " + shape_str(shape) +
                   " " + dtype_name(dtype) + " starting at " + std::to_string(initial),
               loc);
    if (auto it = tr.state_values.find(full); it != tr.state_values.end())
      return Tensor(&tr.graph, it->second);
    return Tensor(&tr.graph, id);
  }
  if (!std::isfinite(initial)) api_fail("state", "'" + name + "' needs a finite initial value", loc);
  Tensor t = named_leaf(tr.graph, Op::kState, full, std::move(shape), dtype, loc);
  tr.graph.node(t.id()).attrs.values = {initial};
  return t;
}

void assign(const Tensor& state_tensor, const Tensor& value, Loc loc) {
  Arg as(state_tensor, loc), av(value, loc);
  Graph& g = graph_for("assign", {&as, &av}, loc);
  // A later micro-batch reads the value the one before assigned: it targets that state's leaf.
  int32_t target_id = state_tensor.id();
  if (const Trace* tr = current_trace(); tr != nullptr && &tr->graph == &g)
    if (auto it = tr->state_leaf_of.find(target_id); it != tr->state_leaf_of.end()) target_id = it->second;
  const Node& target = g.node(target_id);
  if (target.op != Op::kState || target.name.rfind(kUserStatePrefix, 0) != 0)
    api_fail("assign", "the target is not a tensor made by tg::state()", loc);
  const std::string name = target.name.substr(std::string(kUserStatePrefix).size());
  if (value.shape() != target.shape || value.dtype() != target.dtype)
    api_fail("assign",
             "'" + name + "' is " + shape_str(target.shape) + " " + dtype_name(target.dtype) +
                 ", the value " + shape_str(value.shape()) + " " + dtype_name(value.dtype()),
             loc);
  for (const Graph::Update& u : g.updates)
    if (u.target == target_id) api_fail("assign", "'" + name + "' is assigned twice in one program", loc);
  g.updates.push_back({target_id, value.id()});
}

Tensor capture(const std::string& name, const Tensor& t, Loc loc) {
  Trace& tr = trace_for("capture", loc);
  if (t.graph() != &tr.graph)
    api_fail("capture", "'" + name + "' is not a tensor of the program being traced", loc);
  if (name.empty() || name.rfind("grad/", 0) == 0)
    api_fail("capture",
             "'" + name + "': names must be non-empty and not start with \"grad/\" (reserved for gradients)",
             loc);
  for (const auto& [existing, id] : tr.captures)
    if (existing == name && tr.micro_batch == 0)
      api_fail("capture", "the name '" + name + "' is used twice in one program", loc);
  if (tr.micro_batch == 0) tr.captures.emplace_back(name, t.id());
  return t;
}

}  // namespace tg
