// Public elementwise ops: dtype promotion and NumPy broadcasting happen here, so the IR's
// elementwise nodes always see identical shapes and dtypes.
#include "ir/api_util.h"

namespace tg {
using namespace ir;

namespace ir {

Tensor unary(Op op, const Tensor& x, const Loc& loc) {
  Arg ax(x, loc);
  Graph& g = graph_for(op_name(op), {&ax}, loc);
  Tensor in = x;
  DTypes allowed = op_info(op).dtypes;
  // Math functions on integers compute in f32 (as PyTorch does); logical ops see `x != 0`.
  if (allowed == DTypes::kFloat && x.dtype() != DType::kF32) in = cast(x, DType::kF32, loc);
  if (allowed == DTypes::kLogical && x.dtype() != DType::kBool) in = cast(x, DType::kBool, loc);
  if (allowed == DTypes::kNumeric && x.dtype() == DType::kBool) in = cast(x, DType::kI32, loc);
  return emit(g, make_node(op, {in.id()}, loc));
}

Tensor binary(Op op, const Arg& a, const Arg& b, const Loc& loc) {
  const char* name = op_name(op);
  if (!a.is_tensor() && !b.is_tensor()) api_fail(name, "needs at least one tensor operand", loc);
  Graph& g = graph_for(name, {&a, &b}, loc);
  DType t = common_dtype(a, b);
  switch (op_info(op).dtypes) {
    case DTypes::kFloat: t = DType::kF32; break;
    case DTypes::kLogical: t = DType::kBool; break;
    case DTypes::kNumeric:
      if (t == DType::kBool) t = DType::kI32;
      break;
    case DTypes::kAll: break;
  }
  Tensor ta = as_tensor(g, a, t, loc);
  Tensor tb = as_tensor(g, b, t, loc);
  Shape out = broadcast_shapes(name, ta.shape(), tb.shape(), loc);
  ta = broadcast_if_needed(ta, out, loc);
  tb = broadcast_if_needed(tb, out, loc);
  return emit(g, make_node(op, {ta.id(), tb.id()}, loc));
}

}  // namespace ir

Tensor neg(const Tensor& x, Loc loc) { return unary(Op::kNeg, x, loc); }
Tensor abs(const Tensor& x, Loc loc) { return unary(Op::kAbs, x, loc); }
Tensor sign(const Tensor& x, Loc loc) { return unary(Op::kSign, x, loc); }
Tensor exp(const Tensor& x, Loc loc) { return unary(Op::kExp, x, loc); }
Tensor log(const Tensor& x, Loc loc) { return unary(Op::kLog, x, loc); }
Tensor sqrt(const Tensor& x, Loc loc) { return unary(Op::kSqrt, x, loc); }
Tensor rsqrt(const Tensor& x, Loc loc) { return unary(Op::kRsqrt, x, loc); }
Tensor sin(const Tensor& x, Loc loc) { return unary(Op::kSin, x, loc); }
Tensor cos(const Tensor& x, Loc loc) { return unary(Op::kCos, x, loc); }
Tensor tanh(const Tensor& x, Loc loc) { return unary(Op::kTanh, x, loc); }
Tensor sigmoid(const Tensor& x, Loc loc) { return unary(Op::kSigmoid, x, loc); }
Tensor relu(const Tensor& x, Loc loc) { return unary(Op::kRelu, x, loc); }
Tensor erf(const Tensor& x, Loc loc) { return unary(Op::kErf, x, loc); }
Tensor log1p(const Tensor& x, Loc loc) { return unary(Op::kLog1p, x, loc); }
Tensor reciprocal(const Tensor& x, Loc loc) { return unary(Op::kReciprocal, x, loc); }
Tensor logical_not(const Tensor& x, Loc loc) { return unary(Op::kLogicalNot, x, loc); }
Tensor stop_gradient(const Tensor& x, Loc loc) { return unary(Op::kStopGradient, x, loc); }

namespace {

/// The f32 cast of a bf16 or f16 value that `x` is layout views of (a half-stored parameter as
/// Param::tensor reads it, transposed or reshaped), else -1; `chain` gets the views, outermost
/// first.
int32_t widening_under_views(const Graph& g, int32_t x, std::vector<int32_t>& chain) {
  for (;;) {
    const Node& n = g.node(x);
    if (n.op == Op::kCast && n.dtype == DType::kF32 && is_half(g.node(n.inputs[0]).dtype)) return x;
    const bool view =
        n.op == Op::kReshape || n.op == Op::kPermute || n.op == Op::kBroadcastTo || n.op == Op::kSlice;
    if (!view || n.inputs.size() != 1) return -1;
    chain.push_back(x);
    x = n.inputs[0];
  }
}

}  // namespace

DType ir::widened_half(const Tensor& x) {
  std::vector<int32_t> chain;
  const int32_t c = widening_under_views(*x.graph(), x.id(), chain);
  return c < 0 ? DType::kF32 : x.graph()->node(x.graph()->node(c).inputs[0]).dtype;
}

Tensor cast(const Tensor& x, DType to, Loc loc) {
  Arg ax(x, loc);
  Graph& g = graph_for("cast", {&ax}, loc);
  if (x.dtype() == to) return x;
  // Widening a bf16 or f16 value to f32 and rounding it back is exact: read the value itself
  // through the same views (a product under the precision policy reads a half-stored weight).
  std::vector<int32_t> chain;
  if (const int32_t c = is_half(to) ? widening_under_views(g, x.id(), chain) : -1;
      c >= 0 && g.node(g.node(c).inputs[0]).dtype == to) {
    int32_t v = g.node(c).inputs[0];
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      Node n = make_node(g.node(*it).op, {v}, loc);
      n.attrs = g.node(*it).attrs;
      n.shape = g.node(*it).shape;  // reshape's and broadcast_to's target
      v = g.add(std::move(n));
    }
    return Tensor(&g, v);
  }
  Node n = make_node(Op::kCast, {x.id()}, loc);
  n.attrs.dtype = to;
  return emit(g, std::move(n));
}

Tensor add(const Arg& a, const Arg& b, Loc loc) { return binary(Op::kAdd, a, b, loc); }
Tensor sub(const Arg& a, const Arg& b, Loc loc) { return binary(Op::kSub, a, b, loc); }
Tensor mul(const Arg& a, const Arg& b, Loc loc) { return binary(Op::kMul, a, b, loc); }
Tensor div(const Arg& a, const Arg& b, Loc loc) { return binary(Op::kDiv, a, b, loc); }
Tensor pow(const Arg& a, const Arg& b, Loc loc) { return binary(Op::kPow, a, b, loc); }
Tensor maximum(const Arg& a, const Arg& b, Loc loc) { return binary(Op::kMaximum, a, b, loc); }
Tensor minimum(const Arg& a, const Arg& b, Loc loc) { return binary(Op::kMinimum, a, b, loc); }
Tensor eq(const Arg& a, const Arg& b, Loc loc) { return binary(Op::kEq, a, b, loc); }
Tensor ne(const Arg& a, const Arg& b, Loc loc) { return binary(Op::kNe, a, b, loc); }
Tensor lt(const Arg& a, const Arg& b, Loc loc) { return binary(Op::kLt, a, b, loc); }
Tensor le(const Arg& a, const Arg& b, Loc loc) { return binary(Op::kLe, a, b, loc); }
Tensor gt(const Arg& a, const Arg& b, Loc loc) { return binary(Op::kGt, a, b, loc); }
Tensor ge(const Arg& a, const Arg& b, Loc loc) { return binary(Op::kGe, a, b, loc); }
Tensor logical_and(const Arg& a, const Arg& b, Loc loc) { return binary(Op::kLogicalAnd, a, b, loc); }
Tensor logical_or(const Arg& a, const Arg& b, Loc loc) { return binary(Op::kLogicalOr, a, b, loc); }

Tensor where(const Tensor& cond, const Arg& a, const Arg& b, Loc loc) {
  Arg ac(cond, loc);
  Graph& g = graph_for("where", {&ac, &a, &b}, loc);
  if (!a.is_tensor() && !b.is_tensor()) {
    // Both branches are numbers: compute in f32 unless both are integral.
    Arg fa = a, fb = b;
    DType t = a.scalar_is_integral() && b.scalar_is_integral() ? DType::kI32 : DType::kF32;
    Tensor ta = scalar_constant(g, fa.scalar(), t, loc);
    return where(cond, ta, fb, loc);
  }
  DType t = common_dtype(a, b);
  Tensor tc = cond.dtype() == DType::kBool ? cond : cast(cond, DType::kBool, loc);
  Tensor ta = as_tensor(g, a, t, loc);
  Tensor tb = as_tensor(g, b, t, loc);
  Shape out =
      broadcast_shapes("where", broadcast_shapes("where", tc.shape(), ta.shape(), loc), tb.shape(), loc);
  tc = broadcast_if_needed(tc, out, loc);
  ta = broadcast_if_needed(ta, out, loc);
  tb = broadcast_if_needed(tb, out, loc);
  return emit(g, make_node(Op::kWhere, {tc.id(), ta.id(), tb.id()}, loc));
}

Tensor operator-(const Arg& x) {
  if (!x.is_tensor()) ir::api_fail("neg", "needs a tensor operand", x.loc());
  return neg(x.tensor(), x.loc());
}
Tensor operator+(const Arg& a, const Arg& b) { return add(a, b, a.loc()); }
Tensor operator-(const Arg& a, const Arg& b) { return sub(a, b, a.loc()); }
Tensor operator*(const Arg& a, const Arg& b) { return mul(a, b, a.loc()); }
Tensor operator/(const Arg& a, const Arg& b) { return div(a, b, a.loc()); }
Tensor operator<(const Arg& a, const Arg& b) { return lt(a, b, a.loc()); }
Tensor operator<=(const Arg& a, const Arg& b) { return le(a, b, a.loc()); }
Tensor operator>(const Arg& a, const Arg& b) { return gt(a, b, a.loc()); }
Tensor operator>=(const Arg& a, const Arg& b) { return ge(a, b, a.loc()); }
Tensor operator&&(const Arg& a, const Arg& b) { return logical_and(a, b, a.loc()); }
Tensor operator||(const Arg& a, const Arg& b) { return logical_or(a, b, a.loc()); }
Tensor operator!(const Arg& x) {
  if (!x.is_tensor()) ir::api_fail("logical_not", "needs a tensor operand", x.loc());
  return logical_not(x.tensor(), x.loc());
}

}  // namespace tg
