// The op correctness table's rows (op_table_test.cc runs them): one row per case; together
// they reach every op in src/ir/ops.def through the public API. Included by op_table_test.cc
// alone, inside its anonymous namespace.
#pragma once
#include <array>
#include <vector>

#include "ops/op_harness.h"
#include "tensorgrad/functional.h"

// The op table keeps one row per line: not formatted (.clang-format).
// clang-format off

namespace tg::op_test {
namespace {

using enum DType;
constexpr Grad kGrad = Grad::kYes;
constexpr Grad kNoGrad = Grad::kNo;
constexpr Grad kCpuOnly = Grad::kCpuOnly;

/// The body of a row: an expression in the row's input tensors x[0], x[1], ….
#define FN(...) [](const Ts& x) -> Tensor { (void)x; return __VA_ARGS__; }

constexpr std::array<float, 6> kConstF32 = {0.5f, -1.25f, 2.0f, 0.0f, 3.5f, -0.75f};
constexpr std::array<int32_t, 4> kConstI32 = {3, -1, 0, 7};

// Composite rows: common layers whose gradients exercise accumulation across consumers
// and reductions feeding broadcasts.
Tensor softmax_last(const Ts& x) {
  Tensor e = exp(x[0] - max(x[0], {-1}, true));
  return e / sum(e, {-1}, true);
}
Tensor log_softmax_last(const Ts& x) {
  Tensor shifted = x[0] - max(x[0], {-1}, true);
  return shifted - log(sum(exp(shifted), {-1}, true));
}
Tensor layer_norm_last(const Ts& x) {
  Tensor centered = x[0] - mean(x[0], {-1}, true);
  return centered * rsqrt(mean(centered * centered, {-1}, true) + 1e-5) * x[1] + x[2];
}
Tensor linear_tanh(const Ts& x) { return tanh(matmul(x[0], x[1]) + x[2]); }

// NN rows (functional.h).
/// `targets` with every third element, from the second on, replaced by `ignore`, so every
/// cross-entropy row below has ignored rows whatever its random targets are.
Tensor with_ignored(const Tensor& targets, int32_t ignore) {
  std::vector<int32_t> mask(static_cast<size_t>(targets.numel()));
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = i % 3 == 1 ? 1 : 0;
  return where(cast(constant(std::span<const int32_t>(mask), targets.shape()), kBool), ignore, targets);
}
/// A causal log_softmax is −∞ at masked entries; rows compare (and weight) its finite part.
Tensor finite_part(const Tensor& y) { return where(y > -1e30, y, 0.0); }
/// Second derivatives of the window ops: with L1 = Σ op(x, …)·u, the gradients of L1 (made by
/// conv2d_grad_input and conv2d_grad_weight, or avg_pool2d's adjoint) dotted with directions
/// v, q; the row's own gradient check then differentiates those gradient ops.
Tensor conv_gradient_dot(const Ts& x) {
  ir::Graph& g = *x[0].graph();
  const Tensor l1 = sum(conv2d(x[0], x[1], Tensor(), {.stride = 2, .padding = 1, .groups = 2}) * x[2]);
  const std::vector<int32_t> d = autograd::append_gradients(g, l1.id(), std::vector<int32_t>{x[0].id(), x[1].id()});
  return sum(Tensor(&g, d[0]) * x[3]) + sum(Tensor(&g, d[1]) * x[4]);
}
Tensor avg_pool_gradient_dot(const Ts& x) {
  ir::Graph& g = *x[0].graph();
  const Tensor l1 = sum(avg_pool2d(x[0] * x[0], {.kernel = 3, .stride = 2, .padding = 1}) * x[1]);
  const std::vector<int32_t> d = autograd::append_gradients(g, l1.id(), std::vector<int32_t>{x[0].id()});
  return sum(Tensor(&g, d[0]) * x[2]);
}
/// attention over [B, T, H, D] operands, permuted to [B, H, T, D] (views on the CPU backend).
Tensor attention_bthd(const Ts& x) {
  return attention(permute(x[0], {0, 2, 1, 3}), permute(x[1], {0, 2, 1, 3}), permute(x[2], {0, 2, 1, 3}));
}

/// Expert offsets (grouped_matmul's third operand) as an i32 constant.
Tensor offsets(std::initializer_list<int32_t> o) {
  const std::vector<int32_t> v(o);
  return constant(std::span<const int32_t>(v), {static_cast<int64_t>(v.size())});
}
/// A mixture's round trip on rows x[0] [R, K] with expert ids x[1] [R] in [0, 3): sorted by
/// expert, each expert's product with w x[2] [3, N, K], back in the rows' order.
Tensor expert_round_trip(const Ts& x) {
  const ExpertOrder order = sort_by_expert(x[1], 3);
  const Tensor pos = broadcast_to(unsqueeze(order.position, -1), x[0].shape());
  const Tensor sorted = scatter_add(x[0], pos, 0, x[0].shape()[0]);
  const Tensor y = grouped_matmul(sorted, x[2], order.offsets, true);
  return take_along_axis(y, unsqueeze(order.position, -1), 0);
}
/// grouped_matmul's second derivatives, as conv_gradient_dot: the gradients of
/// Σ grouped_matmul(x, w)·u dotted with directions, so the row differentiates grad_weight.
Tensor grouped_gradient_dot(const Ts& x) {
  ir::Graph& g = *x[0].graph();
  const Tensor l1 = sum(grouped_matmul(x[0], x[1], offsets({0, 3, 3, 5}), true) * x[2]);
  const std::vector<int32_t> d = autograd::append_gradients(g, l1.id(), std::vector<int32_t>{x[0].id(), x[1].id()});
  return sum(Tensor(&g, d[0]) * x[3]) + sum(Tensor(&g, d[1]) * x[4]);
}

// Each section of rows is built by a function of its own: GCC's time for one initializer list
// grows faster than its length under the sanitizers (400+ rows in one function: minutes).
// ---- elementwise unary ---------------------------------------------------------------
std::vector<OpCase> unary_rows() {
  return {
      {"neg", {uni({2, 3}, -2, 2)}, FN(neg(x[0])), {2, 3}, kF32, kExact, kGrad},
      {"neg_operator", {uni({3, 1, 4})}, FN(-x[0]), {3, 1, 4}, kF32, kExact, kGrad},
      {"neg_i32", {ints({2, 3})}, FN(neg(x[0])), {2, 3}, kI32, kExact, kNoGrad},
      {"abs", {away0({3, 1, 4}, 0.1, 2)}, FN(abs(x[0])), {3, 1, 4}, kF32, kExact, kGrad},
      {"abs_i32", {ints({2, 3})}, FN(abs(x[0])), {2, 3}, kI32, kExact, kNoGrad},
      // sign is piecewise constant: autograd passes no gradient and the FD is exactly 0.
      {"sign", {away0({2, 3})}, FN(sign(x[0])), {2, 3}, kF32, kExact, kGrad},
      {"sign_i32_with_zeros", {ints({2, 4}, -2, 2)}, FN(sign(x[0])), {2, 4}, kI32, kExact, kNoGrad},
      {"sign_bool", {bools({5})}, FN(sign(x[0])), {5}, kI32, kExact, kNoGrad},
      {"exp", {uni({2, 3}, -2, 2)}, FN(exp(x[0])), {2, 3}, kF32, kTranscendental, kGrad},
      {"exp_of_i32_promotes", {ints({4}, -3, 3)}, FN(exp(x[0])), {4}, kF32, kTranscendental, kNoGrad},
      {"log", {uni({3, 1, 4}, 0.5, 2)}, FN(log(x[0])), {3, 1, 4}, kF32, kTranscendental, kGrad},
      {"sqrt", {uni({2, 3}, 0.5, 2)}, FN(sqrt(x[0])), {2, 3}, kF32, kArith, kGrad},
      {"rsqrt", {uni({2, 3}, 0.5, 2)}, FN(rsqrt(x[0])), {2, 3}, kF32, kTranscendental, kGrad},
      {"sin", {uni({2, 3}, -3, 3)}, FN(sin(x[0])), {2, 3}, kF32, kTranscendental, kGrad},
      {"cos", {uni({2, 3}, -3, 3)}, FN(cos(x[0])), {2, 3}, kF32, kTranscendental, kGrad},
      {"tanh", {uni({4, 1}, -2, 2)}, FN(tanh(x[0])), {4, 1}, kF32, kTranscendental, kGrad},
      {"sigmoid", {uni({2, 3}, -3, 3)}, FN(sigmoid(x[0])), {2, 3}, kF32, kTranscendental, kGrad},
      {"relu", {away0({3, 1, 4}, 0.1, 2)}, FN(relu(x[0])), {3, 1, 4}, kF32, kExact, kGrad},
      {"relu_i32", {ints({2, 3})}, FN(relu(x[0])), {2, 3}, kI32, kExact, kNoGrad},
      {"erf", {uni({2, 3}, -2, 2)}, FN(erf(x[0])), {2, 3}, kF32, kTranscendental, kGrad},
      {"log1p", {uni({2, 3}, -0.5, 2)}, FN(log1p(x[0])), {2, 3}, kF32, kTranscendental, kGrad},
      {"reciprocal", {away0({2, 3}, 0.5, 2)}, FN(reciprocal(x[0])), {2, 3}, kF32, kArith, kGrad},
      {"logical_not", {bools({2, 3})}, FN(logical_not(x[0])), {2, 3}, kBool, kExact, kNoGrad},
      {"logical_not_operator", {bools({4, 1})}, FN(!x[0]), {4, 1}, kBool, kExact, kNoGrad},
      {"logical_not_of_i32", {ints({2, 3}, -1, 1)}, FN(logical_not(x[0])), {2, 3}, kBool, kExact, kNoGrad},
      {"logical_not_of_f32", {ints({2, 3}, -1, 1, kF32)}, FN(logical_not(x[0])), {2, 3}, kBool, kExact, kNoGrad},
      // Forward only here: the FD of an identity is 1 while its defined gradient is 0;
      // the StopGradient tests below check that no gradient flows.
      {"stop_gradient", {uni({2, 3})}, FN(stop_gradient(x[0])), {2, 3}, kF32, kExact, kNoGrad},
      {"stop_gradient_i32", {ints({3})}, FN(stop_gradient(x[0])), {3}, kI32, kExact, kNoGrad},
      {"cast_f32_to_i32_truncates", {uni({2, 3}, -3, 3)}, FN(cast(x[0], kI32)), {2, 3}, kI32, kExact, kNoGrad},
      {"cast_f32_to_bool", {ints({2, 3}, -1, 1, kF32)}, FN(cast(x[0], kBool)), {2, 3}, kBool, kExact, kNoGrad},
      {"cast_i32_to_f32", {ints({3, 1}, -100, 100)}, FN(cast(x[0], kF32)), {3, 1}, kF32, kExact, kNoGrad},
      {"cast_i32_to_bool", {ints({2, 3}, -2, 2)}, FN(cast(x[0], kBool)), {2, 3}, kBool, kExact, kNoGrad},
      {"cast_bool_to_f32", {bools({2, 3})}, FN(cast(x[0], kF32)), {2, 3}, kF32, kExact, kNoGrad},
      {"cast_bool_to_i32", {bools({4})}, FN(cast(x[0], kI32)), {4}, kI32, kExact, kNoGrad},
  };
}

// ---- elementwise binary (NumPy broadcasting) ------------------------------------------
std::vector<OpCase> binary_rows() {
  return {
      {"add_broadcast_row", {uni({2, 3}), uni({3})}, FN(add(x[0], x[1])), {2, 3}, kF32, kArith, kGrad},
      {"add_broadcast_both", {uni({2, 1, 4}), uni({3, 1})}, FN(x[0] + x[1]), {2, 3, 4}, kF32, kArith, kGrad},
      {"add_i32", {ints({2, 3}), ints({2, 1})}, FN(x[0] + x[1]), {2, 3}, kI32, kExact, kNoGrad},
      {"add_i32_f32_promotes", {ints({2, 3}), uni({3})}, FN(x[0] + x[1]), {2, 3}, kF32, kArith, kGrad},
      {"add_bool_bool_is_i32", {bools({2, 3}), bools({2, 3})}, FN(add(x[0], x[1])), {2, 3}, kI32, kExact, kNoGrad},
      {"sub_outer", {uni({4, 1}), uni({1, 4})}, FN(sub(x[0], x[1])), {4, 4}, kF32, kArith, kGrad},
      {"sub_i32", {ints({3}), ints({2, 3})}, FN(x[0] - x[1]), {2, 3}, kI32, kExact, kNoGrad},
      {"mul_by_rank0", {uni({2, 3}), uni({})}, FN(mul(x[0], x[1])), {2, 3}, kF32, kArith, kGrad},
      {"mul_broadcast_size1", {uni({3, 1, 2}), uni({1, 4, 1})}, FN(x[0] * x[1]), {3, 4, 2}, kF32, kArith, kGrad},
      {"mul_i32", {ints({2, 3}), ints({3})}, FN(x[0] * x[1]), {2, 3}, kI32, kExact, kNoGrad},
      {"mul_same_operand", {uni({2, 3}, -2, 2)}, FN(x[0] * x[0]), {2, 3}, kF32, kArith, kGrad},
      {"div_broadcast", {uni({2, 3}), away0({2, 1}, 0.5, 2)}, FN(div(x[0], x[1])), {2, 3}, kF32, kArith, kGrad},
      {"div_i32_promotes", {ints({2, 3}), ints({3}, 1, 4)}, FN(x[0] / x[1]), {2, 3}, kF32, kArith, kNoGrad},
      {"pow_broadcast", {uni({2, 3}, 0.5, 2), uni({3}, -2, 2)}, FN(pow(x[0], x[1])), {2, 3}, kF32, kTranscendental, kGrad},
      {"pow_scalar_exponent", {uni({3, 1}, 0.5, 2)}, FN(pow(x[0], 3)), {3, 1}, kF32, kTranscendental, kGrad},
      {"pow_scalar_base", {uni({2, 2}, -1, 1.5)}, FN(pow(2.0, x[0])), {2, 2}, kF32, kTranscendental, kGrad},
      {"maximum_broadcast", {distinct({2, 3}), distinct({3})}, FN(maximum(x[0], x[1])), {2, 3}, kF32, kExact, kGrad},
      {"maximum_scalar", {distinct({2, 4})}, FN(maximum(x[0], 0.25)), {2, 4}, kF32, kExact, kGrad},
      {"maximum_i32_ties", {ints({2, 3}, 0, 2), ints({2, 3}, 0, 2)}, FN(maximum(x[0], x[1])), {2, 3}, kI32, kExact, kNoGrad},
      {"minimum_broadcast", {distinct({3, 1}), distinct({1, 4})}, FN(minimum(x[0], x[1])), {3, 4}, kF32, kExact, kGrad},
      {"minimum_scalar_left", {distinct({5})}, FN(minimum(0.5, x[0])), {5}, kF32, kExact, kGrad},
      {"minimum_i32_ties", {ints({4}, 0, 2), ints({2, 4}, 0, 2)}, FN(minimum(x[0], x[1])), {2, 4}, kI32, kExact, kNoGrad},
  };
}

// ---- comparisons and logic -----------------------------------------------------------
std::vector<OpCase> comparisons_rows() {
  return {
      {"eq_f32_ties", {ints({2, 3}, 0, 2, kF32), ints({3}, 0, 2, kF32)}, FN(eq(x[0], x[1])), {2, 3}, kBool, kExact, kNoGrad},
      {"eq_i32_scalar", {ints({2, 3}, 0, 2)}, FN(eq(x[0], 1)), {2, 3}, kBool, kExact, kNoGrad},
      {"eq_bool", {bools({2, 3}), bools({2, 1})}, FN(eq(x[0], x[1])), {2, 3}, kBool, kExact, kNoGrad},
      {"ne_i32", {ints({3, 1}, 0, 2), ints({1, 3}, 0, 2)}, FN(ne(x[0], x[1])), {3, 3}, kBool, kExact, kNoGrad},
      {"ne_bool", {bools({4}), bools({4})}, FN(ne(x[0], x[1])), {4}, kBool, kExact, kNoGrad},
      {"lt", {distinct({2, 3}), distinct({3})}, FN(lt(x[0], x[1])), {2, 3}, kBool, kExact, kNoGrad},
      {"lt_operator_scalar", {uni({2, 3})}, FN(x[0] < 0.25), {2, 3}, kBool, kExact, kNoGrad},
      {"le_i32_ties", {ints({2, 3}, 0, 2), ints({2, 1}, 0, 2)}, FN(le(x[0], x[1])), {2, 3}, kBool, kExact, kNoGrad},
      {"le_operator", {ints({4}, 0, 2, kF32), ints({4}, 0, 2, kF32)}, FN(x[0] <= x[1]), {4}, kBool, kExact, kNoGrad},
      {"gt", {distinct({3, 1}), distinct({1, 2})}, FN(gt(x[0], x[1])), {3, 2}, kBool, kExact, kNoGrad},
      {"gt_operator_scalar_left", {uni({5})}, FN(0 > x[0]), {5}, kBool, kExact, kNoGrad},
      {"ge_i32_ties", {ints({2, 3}, 0, 2), ints({3}, 0, 2)}, FN(ge(x[0], x[1])), {2, 3}, kBool, kExact, kNoGrad},
      {"ge_operator_i32_vs_float", {ints({4}, -2, 2)}, FN(x[0] >= 0.5), {4}, kBool, kExact, kNoGrad},
      {"logical_and", {bools({2, 3}), bools({3})}, FN(logical_and(x[0], x[1])), {2, 3}, kBool, kExact, kNoGrad},
      {"logical_and_operator", {bools({2, 1}), bools({1, 3})}, FN(x[0] && x[1]), {2, 3}, kBool, kExact, kNoGrad},
      {"logical_and_of_i32", {ints({2, 3}, -1, 1), bools({2, 3})}, FN(logical_and(x[0], x[1])), {2, 3}, kBool, kExact, kNoGrad},
      {"logical_or", {bools({3, 1}), bools({3, 4})}, FN(logical_or(x[0], x[1])), {3, 4}, kBool, kExact, kNoGrad},
      {"logical_or_operator", {bools({4}), bools({4})}, FN(x[0] || x[1]), {4}, kBool, kExact, kNoGrad},
      {"where_broadcast", {bools({2, 1}), uni({1, 3}), uni({})}, FN(where(x[0], x[1], x[2])), {2, 3}, kF32, kExact, kGrad},
      {"where_scalar_branch", {bools({2, 3}), uni({2, 3})}, FN(where(x[0], x[1], 0.0)), {2, 3}, kF32, kExact, kGrad},
      {"where_both_scalars_i32", {bools({4})}, FN(where(x[0], 1, -1)), {4}, kI32, kExact, kNoGrad},
      {"where_both_scalars_f32", {bools({4})}, FN(where(x[0], 0.5, 2)), {4}, kF32, kExact, kNoGrad},
      {"where_i32", {bools({3, 1}), ints({3, 4}), ints({4})}, FN(where(x[0], x[1], x[2])), {3, 4}, kI32, kExact, kNoGrad},
      {"where_i32_cond_is_cast", {ints({2, 3}, 0, 2), uni({2, 3}), uni({3})}, FN(where(x[0], x[1], x[2])), {2, 3}, kF32, kExact, kGrad},
      {"where_leaky_relu", {away0({2, 3}, 0.1, 2)}, FN(where(x[0] > 0, x[0], x[0] * 0.1)), {2, 3}, kF32, kArith, kGrad},
      {"leaky_relu", {away0({2, 3}, 0.1, 2)}, FN(leaky_relu(x[0], 0.2)), {2, 3}, kF32, kArith, kGrad},
      {"elu", {away0({2, 3}, 0.1, 2)}, FN(elu(x[0], 1.5)), {2, 3}, kF32, kTranscendental, kGrad},
      {"clamp", {distinct({3, 4}, -2, 2)}, FN(clamp(x[0], -0.55, 0.65)), {3, 4}, kF32, kExact, kGrad},
      {"hardsigmoid", {distinct({3, 4}, -5, 5)}, FN(hardsigmoid(x[0])), {3, 4}, kF32, kArith, kGrad},
      {"hardswish", {distinct({3, 4}, -5, 5)}, FN(hardswish(x[0])), {3, 4}, kF32, kArith, kGrad},
      {"mish", {uni({3, 4}, -4, 4)}, FN(mish(x[0])), {3, 4}, kF32, kTranscendental, kGrad},
      {"logsigmoid", {uni({3, 4}, -30, 30)}, FN(logsigmoid(x[0])), {3, 4}, kF32, kTranscendental, kGrad},
  };
}

// ---- operators with numbers ----------------------------------------------------------
std::vector<OpCase> number_operators_rows() {
  return {
      {"scalar_two_x_plus_one", {uni({2, 3})}, FN(2.0f * x[0] + 1), {2, 3}, kF32, kArith, kGrad},
      {"scalar_one_minus_x", {uni({3, 1})}, FN(1 - x[0]), {3, 1}, kF32, kArith, kGrad},
      {"scalar_x_div_three", {uni({2, 3})}, FN(x[0] / 3), {2, 3}, kF32, kArith, kGrad},
      {"scalar_three_div_x", {away0({4}, 0.5, 2)}, FN(3.0 / x[0]), {4}, kF32, kArith, kGrad},
      {"scalar_chain", {uni({2, 3})}, FN((x[0] - 0.5) * x[0] * 0.25 + x[0] / 2.0), {2, 3}, kF32, kArith, kGrad},
      {"scalar_i32_two_x_plus_one", {ints({2, 3})}, FN(2 * x[0] + 1), {2, 3}, kI32, kExact, kNoGrad},
      {"scalar_i32_plus_float_promotes", {ints({2, 3})}, FN(x[0] + 0.5), {2, 3}, kF32, kExact, kNoGrad},
      {"scalar_i32_div_int_promotes", {ints({2, 3})}, FN(x[0] / 2), {2, 3}, kF32, kExact, kNoGrad},
  };
}

// ---- reductions -----------------------------------------------------------------------
std::vector<OpCase> reductions_rows() {
  return {
      {"sum_all", {uni({2, 3, 4})}, FN(sum(x[0])), {}, kF32, kReduce, kGrad},
      {"sum_axis1", {uni({2, 3, 4})}, FN(sum(x[0], {1})), {2, 4}, kF32, kReduce, kGrad},
      {"sum_neg_axis_keepdim", {uni({2, 3, 4})}, FN(sum(x[0], {-1}, true)), {2, 3, 1}, kF32, kReduce, kGrad},
      {"sum_axes_0_2", {uni({2, 3, 4})}, FN(sum(x[0], {0, 2})), {3}, kF32, kReduce, kGrad},
      {"sum_axes_unsorted_neg_keepdim", {uni({2, 3, 4})}, FN(sum(x[0], {-1, 0}, true)), {1, 3, 1}, kF32, kReduce, kGrad},
      {"sum_size1_axis", {uni({3, 1, 4})}, FN(sum(x[0], {1})), {3, 4}, kF32, kReduce, kGrad},
      {"sum_i32", {ints({2, 3, 4})}, FN(sum(x[0], {0})), {3, 4}, kI32, kExact, kNoGrad},
      {"sum_bool_counts", {bools({2, 5})}, FN(sum(x[0], {1})), {2}, kI32, kExact, kNoGrad},
      {"mean_all", {uni({2, 3, 4})}, FN(mean(x[0])), {}, kF32, kReduce, kGrad},
      {"mean_neg_axis", {uni({2, 3, 4})}, FN(mean(x[0], {-2})), {2, 4}, kF32, kReduce, kGrad},
      {"mean_axes_keepdim", {uni({2, 3, 4})}, FN(mean(x[0], {0, 2}, true)), {1, 3, 1}, kF32, kReduce, kGrad},
      {"mean_i32_is_f32", {ints({3, 4})}, FN(mean(x[0], {1})), {3}, kF32, kReduce, kNoGrad},
      {"max_all", {distinct({2, 3, 4})}, FN(max(x[0])), {}, kF32, kExact, kGrad},
      {"max_axis1", {distinct({2, 3, 4})}, FN(max(x[0], {1})), {2, 4}, kF32, kExact, kGrad},
      {"max_axes_keepdim", {distinct({2, 3, 4})}, FN(max(x[0], {0, -1}, true)), {1, 3, 1}, kF32, kExact, kGrad},
      {"max_size1_axis", {distinct({3, 1, 4})}, FN(max(x[0], {1})), {3, 4}, kF32, kExact, kGrad},
      {"max_i32_ties", {ints({2, 3, 4}, 0, 3)}, FN(max(x[0], {2})), {2, 3}, kI32, kExact, kNoGrad},
      {"min_all", {distinct({3, 4})}, FN(min(x[0])), {}, kF32, kExact, kGrad},
      {"min_neg_axis", {distinct({2, 3, 4})}, FN(min(x[0], {-3})), {3, 4}, kF32, kExact, kGrad},
      {"min_axes_keepdim", {distinct({2, 3, 4})}, FN(min(x[0], {1, 2}, true)), {2, 1, 1}, kF32, kExact, kGrad},
      {"min_i32_ties", {ints({4, 3}, 0, 2)}, FN(min(x[0], {0})), {3}, kI32, kExact, kNoGrad},
      {"argmax_axis1", {distinct({2, 3, 4})}, FN(argmax(x[0], 1)), {2, 4}, kI32, kExact, kNoGrad},
      {"argmax_neg_axis_keepdim", {distinct({2, 3, 4})}, FN(argmax(x[0], -1, true)), {2, 3, 1}, kI32, kExact, kNoGrad},
      {"argmax_flat", {distinct({2, 3, 4})}, FN(argmax(x[0])), {}, kI32, kExact, kNoGrad},
      {"argmax_flat_keepdim", {distinct({2, 3})}, FN(argmax(x[0], std::nullopt, true)), {1, 1}, kI32, kExact, kNoGrad},
      {"argmax_i32_ties_first", {ints({4, 5}, 0, 2)}, FN(argmax(x[0], 1)), {4}, kI32, kExact, kNoGrad},
      {"argmax_bool", {bools({3, 4})}, FN(argmax(x[0], 0)), {4}, kI32, kExact, kNoGrad},
  };
}

// ---- prefix sums ----------------------------------------------------------------------
std::vector<OpCase> prefix_sums_rows() {
  return {
      {"cumsum_last", {uni({2, 3, 5})}, FN(cumsum(x[0], -1)), {2, 3, 5}, kF32, kReduce, kGrad},
      {"cumsum_middle", {uni({2, 4, 3})}, FN(cumsum(x[0], 1)), {2, 4, 3}, kF32, kReduce, kGrad},
      {"cumsum_first_reverse", {uni({5, 3})}, FN(cumsum(x[0], 0, true)), {5, 3}, kF32, kReduce, kGrad},
      {"cumsum_1d_reverse", {uni({7})}, FN(cumsum(x[0], 0, true)), {7}, kF32, kReduce, kGrad},
      {"cumsum_size1_axis", {uni({3, 1, 4})}, FN(cumsum(x[0], 1)), {3, 1, 4}, kF32, kExact, kGrad},
      {"cumsum_of_permuted", {uni({3, 4, 2})}, FN(cumsum(permute(x[0], {2, 0, 1}), 2)), {2, 3, 4}, kF32, kReduce, kGrad},
      {"cumsum_i32", {ints({3, 6})}, FN(cumsum(x[0], 1)), {3, 6}, kI32, kExact, kNoGrad},
      {"cumsum_i32_reverse", {ints({4, 3})}, FN(cumsum(x[0], 0, true)), {4, 3}, kI32, kExact, kNoGrad},
  };
}

// ---- shape ------------------------------------------------------------------------------
std::vector<OpCase> shape_rows() {
  return {
      {"reshape", {uni({2, 3, 4})}, FN(reshape(x[0], {4, 6})), {4, 6}, kF32, kExact, kGrad},
      {"reshape_infer", {uni({2, 3, 4})}, FN(reshape(x[0], {-1, 4})), {6, 4}, kF32, kExact, kGrad},
      {"reshape_flatten", {uni({2, 3, 4})}, FN(reshape(x[0], {-1})), {24}, kF32, kExact, kGrad},
      {"reshape_size1_axes", {uni({2, 6})}, FN(reshape(x[0], {2, 1, 6, 1})), {2, 1, 6, 1}, kF32, kExact, kGrad},
      {"reshape_i32", {ints({2, 3})}, FN(reshape(x[0], {3, -1})), {3, 2}, kI32, kExact, kNoGrad},
      {"permute", {uni({2, 3, 4})}, FN(permute(x[0], {2, 0, 1})), {4, 2, 3}, kF32, kExact, kGrad},
      {"permute_neg_axes", {uni({2, 3, 4})}, FN(permute(x[0], {1, -1, 0})), {3, 4, 2}, kF32, kExact, kGrad},
      {"permute_size1", {uni({3, 1, 4})}, FN(permute(x[0], {1, 2, 0})), {1, 4, 3}, kF32, kExact, kGrad},
      {"permute_4d", {uni({2, 3, 1, 2})}, FN(permute(x[0], {3, 1, 0, 2})), {2, 3, 2, 1}, kF32, kExact, kGrad},
      {"transpose_default", {uni({2, 3, 4})}, FN(transpose(x[0])), {2, 4, 3}, kF32, kExact, kGrad},
      {"transpose_0_2", {uni({2, 3, 4})}, FN(transpose(x[0], 0, 2)), {4, 3, 2}, kF32, kExact, kGrad},
      {"transpose_bool", {bools({2, 3})}, FN(transpose(x[0])), {3, 2}, kBool, kExact, kNoGrad},
      {"broadcast_to_size1", {uni({3, 1})}, FN(broadcast_to(x[0], {2, 3, 4})), {2, 3, 4}, kF32, kExact, kGrad},
      {"broadcast_to_rank_up", {uni({4})}, FN(broadcast_to(x[0], {3, 4})), {3, 4}, kF32, kExact, kGrad},
      {"broadcast_to_from_rank0", {uni({})}, FN(broadcast_to(x[0], {2, 2})), {2, 2}, kF32, kExact, kGrad},
      {"broadcast_to_middle", {uni({2, 1, 3})}, FN(broadcast_to(x[0], {2, 4, 3})), {2, 4, 3}, kF32, kExact, kGrad},
      {"broadcast_to_i32", {ints({1, 3})}, FN(broadcast_to(x[0], {2, 3})), {2, 3}, kI32, kExact, kNoGrad},
      {"slice_axis0", {uni({5, 3})}, FN(slice(x[0], 0, 1, 4)), {3, 3}, kF32, kExact, kGrad},
      {"slice_step2", {uni({3, 7})}, FN(slice(x[0], 1, 0, 7, 2)), {3, 4}, kF32, kExact, kGrad},
      {"slice_negative_start", {uni({6, 2})}, FN(slice(x[0], 0, -4, 6)), {4, 2}, kF32, kExact, kGrad},
      {"slice_neg_axis_step3_stop_clamped", {uni({2, 3, 8})}, FN(slice(x[0], -1, 1, 100, 3)), {2, 3, 3}, kF32, kExact, kGrad},
      {"slice_negative_start_stop_step2", {uni({2, 9})}, FN(slice(x[0], 1, -7, -1, 2)), {2, 3}, kF32, kExact, kGrad},
      {"slice_middle_axis", {uni({2, 5, 3})}, FN(slice(x[0], 1, 2, 4)), {2, 2, 3}, kF32, kExact, kGrad},
      {"slice_i32", {ints({4, 3})}, FN(slice(x[0], 0, 1, 4, 2)), {2, 3}, kI32, kExact, kNoGrad},
      {"concat_axis0", {uni({2, 3}), uni({1, 3})}, FN(concat({x[0], x[1]}, 0)), {3, 3}, kF32, kExact, kGrad},
      {"concat_neg_axis_three", {uni({2, 1}), uni({2, 3}), uni({2, 2})}, FN(concat({x[0], x[1], x[2]}, -1)), {2, 6}, kF32, kExact, kGrad},
      {"concat_middle_axis", {uni({2, 1, 3}), uni({2, 2, 3})}, FN(concat({x[0], x[1]}, 1)), {2, 3, 3}, kF32, kExact, kGrad},
      {"concat_span", {uni({1, 2}), uni({3, 2})}, FN(concat(std::span<const Tensor>(x), 0)), {4, 2}, kF32, kExact, kGrad},
      {"concat_i32_f32_promotes", {ints({2, 2}), uni({2, 1})}, FN(concat({x[0], x[1]}, 1)), {2, 3}, kF32, kExact, kGrad},
      {"concat_bool", {bools({2}), bools({3})}, FN(concat({x[0], x[1]}, 0)), {5}, kBool, kExact, kNoGrad},
      {"unsqueeze_front", {uni({2, 3})}, FN(unsqueeze(x[0], 0)), {1, 2, 3}, kF32, kExact, kGrad},
      {"unsqueeze_neg", {uni({2, 3})}, FN(unsqueeze(x[0], -1)), {2, 3, 1}, kF32, kExact, kGrad},
      {"squeeze_middle", {uni({2, 1, 3})}, FN(squeeze(x[0], 1)), {2, 3}, kF32, kExact, kGrad},
      {"squeeze_neg", {uni({2, 3, 1})}, FN(squeeze(x[0], -1)), {2, 3}, kF32, kExact, kGrad},
  };
}

// ---- matmul -----------------------------------------------------------------------------
std::vector<OpCase> matmul_rows() {
  return {
      {"matmul_2d", {uni({2, 3}), uni({3, 4})}, FN(matmul(x[0], x[1])), {2, 4}, kF32, kMatmul, kGrad},
      {"matmul_batch_broadcast", {uni({2, 1, 3, 4}), uni({5, 4, 2})}, FN(matmul(x[0], x[1])), {2, 5, 3, 2}, kF32, kMatmul, kGrad},
      {"matmul_batched_both", {uni({3, 2, 4}), uni({3, 4, 2})}, FN(matmul(x[0], x[1])), {3, 2, 2}, kF32, kMatmul, kGrad},
      {"matmul_batched_lhs_only", {uni({2, 3, 4}), uni({4, 5})}, FN(matmul(x[0], x[1])), {2, 3, 5}, kF32, kMatmul, kGrad},
      {"matmul_vec_left", {uni({3}), uni({3, 4})}, FN(matmul(x[0], x[1])), {4}, kF32, kMatmul, kGrad},
      {"matmul_vec_right", {uni({2, 3}), uni({3})}, FN(matmul(x[0], x[1])), {2}, kF32, kMatmul, kGrad},
      {"matmul_vec_vec", {uni({5}), uni({5})}, FN(matmul(x[0], x[1])), {}, kF32, kMatmul, kGrad},
      {"matmul_vec_batched", {uni({4}), uni({2, 4, 3})}, FN(matmul(x[0], x[1])), {2, 3}, kF32, kMatmul, kGrad},
      {"matmul_transposed_rhs", {uni({2, 3}), uni({4, 3})}, FN(matmul(x[0], transpose(x[1]))), {2, 4}, kF32, kMatmul, kGrad},
      {"matmul_transposed_lhs", {uni({3, 2}), uni({3, 4})}, FN(matmul(transpose(x[0]), x[1])), {2, 4}, kF32, kMatmul, kGrad},
      {"matmul_batched_transposed", {uni({2, 4, 3}), uni({2, 4, 5})}, FN(matmul(transpose(x[0], 1, 2), x[1])), {2, 3, 5}, kF32, kMatmul, kGrad},
      // grouped_matmul: rows sorted by expert, an expert without rows, both weight layouts.
      {"grouped_matmul_transposed_w", {uni({7, 3}), uni({3, 4, 3})}, FN(grouped_matmul(x[0], x[1], offsets({0, 2, 2, 7}), true)), {7, 4}, kF32, kMatmul, kGrad},
      {"grouped_matmul_w_kn", {uni({6, 4}), uni({2, 4, 5})}, FN(grouped_matmul(x[0], x[1], offsets({0, 4, 6}))), {6, 5}, kF32, kMatmul, kGrad},
      {"grouped_matmul_one_expert", {uni({5, 3}), uni({1, 2, 3})}, FN(grouped_matmul(x[0], x[1], offsets({0, 5}), true)), {5, 2}, kF32, kMatmul, kGrad},
      {"grouped_matmul_all_rows_in_one", {uni({4, 3}), uni({3, 3, 2})}, FN(grouped_matmul(x[0], x[1], offsets({0, 0, 4, 4}))), {4, 2}, kF32, kMatmul, kGrad},
      {"grouped_matmul_no_rows", {uni({0, 3}), uni({2, 4, 3})}, FN(grouped_matmul(x[0], x[1], offsets({0, 0, 0}), true)), {0, 4}, kF32, kExact, kNoGrad},
      // quant_matmul: x · (q·scale)ᵀ, groups of 32 (the 16-byte CUDA path) and of 4 (the scalar one).
      {"quant_matmul", {uni({3, 64}), ints({5, 64}, -127, 127, DType::kI8), away0({5, 2}, 0.01, 0.05)}, FN(quant_matmul(x[0], x[1], x[2])), {3, 5}, kF32, kMatmul, kGrad},
      {"quant_matmul_batched_groups_of_4", {uni({2, 2, 12}), ints({7, 12}, -127, 127, DType::kI8), away0({7, 3}, 0.01, 0.05)}, FN(quant_matmul(x[0], x[1], x[2])), {2, 2, 7}, kF32, kMatmul, kGrad},
      // 4 bits: x · (c·scale + offset)ᵀ with the codes packed two a byte (any byte), groups of 32
      // (the vector paths) and of 4.
      {"quant_matmul_4bit", {uni({3, 64}), ints({5, 32}, -128, 127, DType::kI8), away0({5, 2}, 0.01, 0.05), uni({5, 2})}, FN(quant_matmul(x[0], x[1], x[2], x[3])), {3, 5}, kF32, kMatmul, kGrad},
      {"quant_matmul_4bit_groups_of_4", {uni({2, 2, 12}), ints({7, 6}, -128, 127, DType::kI8), away0({7, 3}, 0.01, 0.05), uni({7, 3})}, FN(quant_matmul(x[0], x[1], x[2], x[3])), {2, 2, 7}, kF32, kMatmul, kGrad},
      {"grouped_matmul_grad_weight_dot", {uni({5, 3}), uni({3, 4, 3}), uni({5, 4}), uni({5, 3}), uni({3, 4, 3})}, grouped_gradient_dot, {}, kF32, kReduce, kGrad},
      {"sort_by_expert_position", {indices({9}, 4)}, FN(sort_by_expert(x[0], 4).position), {9}, kI32, kExact, kNoGrad},
      {"sort_by_expert_offsets", {indices({9}, 4)}, FN(sort_by_expert(x[0], 4).offsets), {5}, kI32, kExact, kNoGrad},
      {"expert_round_trip", {uni({8, 3}), indices({8}, 3), uni({3, 2, 3})}, expert_round_trip, {8, 2}, kF32, kMatmul, kGrad},
      {"matmul_i32_operands", {ints({2, 3}), ints({3, 2})}, FN(matmul(x[0], x[1])), {2, 2}, kF32, kExact, kNoGrad},
  };
}

// ---- leaves ----------------------------------------------------------------------------
std::vector<OpCase> leaves_rows() {
  return {
      {"full_f32", {}, FN(full({2, 3}, 1.5)), {2, 3}, kF32, kExact, kNoGrad},
      {"full_i32", {}, FN(full({4}, -7, kI32)), {4}, kI32, kExact, kNoGrad},
      {"full_bool", {}, FN(full({2, 2}, 1, kBool)), {2, 2}, kBool, kExact, kNoGrad},
      {"zeros", {}, FN(zeros({3, 1})), {3, 1}, kF32, kExact, kNoGrad},
      {"ones_i32", {}, FN(ones({2}, kI32)), {2}, kI32, kExact, kNoGrad},
      {"constant_f32", {}, FN(constant(kConstF32, {2, 3})), {2, 3}, kF32, kExact, kNoGrad},
      {"constant_i32", {}, FN(constant(kConstI32, {2, 2})), {2, 2}, kI32, kExact, kNoGrad},
      {"arange_i32", {}, FN(arange(0, 5)), {5}, kI32, kExact, kNoGrad},
      {"arange_f32_fractional_step", {}, FN(arange(1, 2, 0.25, kF32)), {4}, kF32, kExact, kNoGrad},
      {"arange_negative_step", {}, FN(arange(5, 0, -2)), {3}, kI32, kExact, kNoGrad},
      {"leaves_with_input", {uni({2, 3})}, FN(x[0] * constant(kConstF32, {2, 3}) + full({3}, 0.5) - ones({2, 1})), {2, 3}, kF32, kArith, kGrad},
      {"arange_times_input", {uni({4})}, FN(x[0] * arange(0, 4)), {4}, kF32, kArith, kGrad},
  };
}

// ---- composites ------------------------------------------------------------------------
std::vector<OpCase> composites_rows() {
  return {
      {"softmax", {uni({2, 3, 4}, -3, 3)}, softmax_last, {2, 3, 4}, kF32, kTranscendental, kGrad},
      {"log_softmax", {uni({3, 5}, -3, 3)}, log_softmax_last, {3, 5}, kF32, kTranscendental, kGrad},
      {"layer_norm", {uni({3, 4}, -2, 2), uni({4}, 0.5, 1.5), uni({4})}, layer_norm_last, {3, 4}, kF32, kTranscendental, kGrad},
      {"linear_tanh", {uni({3, 4}), uni({4, 2}), uni({2})}, linear_tanh, {3, 2}, kF32, kTranscendental, kGrad},
      {"mse", {uni({2, 3}), uni({2, 3})}, FN(mean((x[0] - x[1]) * (x[0] - x[1]))), {}, kF32, kReduce, kGrad},
  };
}

// ---- large: past the CPU backend's parallel grain (2^12 elements for libm ops, 2^15
// otherwise), so chunk boundaries fall inside broadcast, strided and reduced loops ----
std::vector<OpCase> large_rows() {
  return {
      {"large_exp_broadcast", {uni({70, 130}, -2, 2), uni({130})}, FN(exp(x[0]) * x[1]), {70, 130}, kF32, kTranscendental, kNoGrad},
      {"large_add_broadcast_size1", {uni({20, 1, 60}), uni({1, 30, 60})}, FN(x[0] + x[1]), {20, 30, 60}, kF32, kArith, kCpuOnly},
      {"large_permute", {uni({20, 30, 60})}, FN(permute(x[0], {2, 0, 1})), {60, 20, 30}, kF32, kExact, kNoGrad},
      {"large_slice_step3", {uni({200, 200})}, FN(slice(x[0], 1, 1, 200, 3)), {200, 67}, kF32, kExact, kCpuOnly},
      {"large_concat", {uni({100, 170}), uni({100, 190})}, FN(concat({x[0], x[1]}, 1)), {100, 360}, kF32, kExact, kNoGrad},
      {"large_where", {bools({300, 1}), uni({300, 120}), uni({120})}, FN(where(x[0], x[1], x[2])), {300, 120}, kF32, kExact, kNoGrad},
      {"large_cast_to_i32", {uni({200, 200}, -100, 100)}, FN(cast(x[0], kI32)), {200, 200}, kI32, kExact, kNoGrad},
      {"large_sum_axis0", {uni({600, 64})}, FN(sum(x[0], {0})), {64}, kF32, kLargeSum, kCpuOnly},
      {"large_sum_axis1_keepdim", {uni({64, 600})}, FN(sum(x[0], {1}, true)), {64, 1}, kF32, kLargeSum, kNoGrad},
      {"large_mean_all", {uni({240, 160})}, FN(mean(x[0])), {}, kF32, kReduce, kNoGrad},
      {"large_max_axis1", {distinct({200, 180})}, FN(max(x[0], {1})), {200}, kF32, kExact, kCpuOnly},
      {"large_argmax_axis0", {distinct({180, 200})}, FN(argmax(x[0], 0)), {200}, kI32, kExact, kNoGrad},
      // Rows of 600 and 300 × 270 inner columns (several blocks of columns a line).
      {"large_cumsum_last", {uni({40, 600})}, FN(cumsum(x[0], 1)), {40, 600}, kF32, kLargeSum, kCpuOnly},
      {"large_cumsum_axis0_reverse", {uni({300, 270})}, FN(cumsum(x[0], 0, true)), {300, 270}, kF32, kLargeSum, kCpuOnly},
      {"large_cumsum_i32", {ints({3, 5000}, -1000, 1000)}, FN(cumsum(x[0], 1)), {3, 5000}, kI32, kExact, kNoGrad},
      {"large_matmul_batched", {uni({2, 65, 33}), uni({33, 47})}, FN(matmul(x[0], x[1])), {2, 65, 47}, kF32, kMatmul, kCpuOnly},
      // Rows of a Llama vocabulary (32000) and of 20000: 1024 threads a row on cuda, too wide to
      // cache in registers.
      {"large_log_softmax_32000", {uni({2, 32000}, -3, 3)}, FN(log_softmax(x[0])), {2, 32000}, kF32, kTranscendental, kNoGrad},
      {"large_softmax_20000", {uni({3, 20000}, -3, 3)}, FN(softmax(x[0])), {3, 20000}, kF32, kTranscendental, kNoGrad},
  };
}

// ---- NN: indexing (gather; scatter_add is its VJP) ---------------------------------------
std::vector<OpCase> nn_indexing_rows() {
  return {
      // Indices with more entries than the indexed extent repeat, so the gradient's scatter-add
      // accumulates several contributions into one element.
      {"take_along_axis_axis1", {uni({3, 5}), indices({3, 7}, 5)}, FN(take_along_axis(x[0], x[1], 1)), {3, 7}, kF32, kExact, kGrad},
      {"take_along_axis_axis0", {uni({4, 3}), indices({6, 3}, 4)}, FN(take_along_axis(x[0], x[1], 0)), {6, 3}, kF32, kExact, kGrad},
      {"take_along_axis_neg_axis_3d", {uni({2, 3, 5}), indices({2, 3, 7}, 5)}, FN(take_along_axis(x[0], x[1], -1)), {2, 3, 7}, kF32, kExact, kGrad},
      {"take_along_axis_middle_axis", {uni({2, 4, 3}), indices({2, 6, 3}, 4)}, FN(take_along_axis(x[0], x[1], 1)), {2, 6, 3}, kF32, kExact, kGrad},
      {"take_along_axis_fewer_indices", {uni({4, 6}), indices({4, 2}, 6)}, FN(take_along_axis(x[0], x[1], 1)), {4, 2}, kF32, kExact, kGrad},
      // scatter_add: repeated indices (7 into 5 slots) add up; its gradient is the gather.
      {"scatter_add_axis1", {uni({3, 7}), indices({3, 7}, 5)}, FN(scatter_add(x[0], x[1], 1, 5)), {3, 5}, kF32, kReduce, kGrad},
      {"scatter_add_axis0_3d", {uni({6, 2, 3}), indices({6, 2, 3}, 4)}, FN(scatter_add(x[0], x[1], 0, 4)), {4, 2, 3}, kF32, kReduce, kGrad},
      {"take_along_axis_broadcast_indices", {uni({3, 5}), indices({1, 7}, 5)}, FN(take_along_axis(x[0], x[1], 1)), {3, 7}, kF32, kExact, kGrad},
      {"take_along_axis_broadcast_indices_3d", {uni({2, 3, 4}), indices({1, 5, 1}, 3)}, FN(take_along_axis(x[0], x[1], 1)), {2, 5, 4}, kF32, kExact, kGrad},
      {"take_along_axis_i32_data", {ints({3, 4}), indices({3, 5}, 4)}, FN(take_along_axis(x[0], x[1], 1)), {3, 5}, kI32, kExact, kNoGrad},
      {"embedding", {uni({5, 4}), indices({2, 3}, 5)}, FN(embedding(x[0], x[1])), {2, 3, 4}, kF32, kExact, kGrad},
      {"embedding_repeated_ids", {uni({3, 4}), indices({4, 5}, 3)}, FN(embedding(x[0], x[1])), {4, 5, 4}, kF32, kExact, kGrad},
      {"embedding_3d_table", {uni({6, 2, 3}), indices({4}, 6)}, FN(embedding(x[0], x[1])), {4, 2, 3}, kF32, kExact, kGrad},
      {"embedding_scalar_id", {uni({5, 4}), indices({}, 5)}, FN(embedding(x[0], x[1])), {4}, kF32, kExact, kGrad},
      {"update_slice_scalar_offset", {uni({2, 6, 3}), uni({2, 2, 3}), indices({}, 5)}, FN(update_slice(x[0], x[1], x[2], 1)), {2, 6, 3}, kF32, kExact, kNoGrad},
      {"update_slice_axis0", {uni({5, 3}), uni({2, 3}), indices({}, 4)}, FN(update_slice(x[0], x[1], x[2], 0)), {5, 3}, kF32, kExact, kNoGrad},
      {"update_slice_per_row_kv_cache", {uni({3, 2, 7, 4}), uni({3, 2, 1, 4}), indices({3}, 7)}, FN(update_slice(x[0], x[1], x[2], 2)), {3, 2, 7, 4}, kF32, kExact, kNoGrad},
      {"update_slice_per_row_prefill", {uni({2, 2, 8, 4}), uni({2, 2, 3, 4}), indices({2}, 6)}, FN(update_slice(x[0], x[1], x[2], -2)), {2, 2, 8, 4}, kF32, kExact, kNoGrad},
      {"update_slice_i32_whole", {ints({4, 3}), ints({4, 3}), indices({}, 1)}, FN(update_slice(x[0], x[1], x[2], 1)), {4, 3}, kI32, kExact, kNoGrad},
      {"update_slice_of_a_view", {uni({6, 4})}, FN(update_slice(transpose(x[0]), cf({7, 8, 9, 10}, {4, 1}), ci({2}, {}), 1)), {4, 6}, kF32, kExact, kNoGrad},
      // sample: params {temperature, top_k, top_p[, min_p]}, key {seed, counter}; the same ids on
      // every backend
      {"sample_greedy", {uni({4, 37}, -3, 3)}, FN(sample(x[0], cf({0, 0, 1}, {3}), ci({7, 1}, {2}))), {4}, kI32, kExact, kNoGrad},
      {"sample_temperature", {uni({4, 37}, -3, 3)}, FN(sample(x[0], cf({0.8, 0, 1}, {3}), ci({7, 1}, {2}))), {4}, kI32, kExact, kNoGrad},
      {"sample_top_k", {uni({4, 37}, -3, 3)}, FN(sample(x[0], cf({1, 5, 1}, {3}), ci({7, 2}, {2}))), {4}, kI32, kExact, kNoGrad},
      {"sample_top_p", {uni({4, 37}, -3, 3)}, FN(sample(x[0], cf({1.3, 0, 0.7}, {3}), ci({3, 9}, {2}))), {4}, kI32, kExact, kNoGrad},
      {"sample_min_p", {uni({4, 37}, -3, 3)}, FN(sample(x[0], cf({1.3, 0, 1, 0.2}, {4}), ci({3, 9}, {2}))), {4}, kI32, kExact, kNoGrad},
      {"sample_min_p_above_one", {uni({4, 37}, -3, 3)}, FN(sample(x[0], cf({1, 0, 1, 2}, {4}), ci({3, 9}, {2}))), {4}, kI32, kExact, kNoGrad},
      {"sample_top_k_top_p_key_input", {uni({6, 37}, -3, 3), ints({2}, 0, 1000)}, FN(sample(x[0], cf({0.7, 9, 0.8}, {3}), x[1])), {6}, kI32, kExact, kNoGrad},
      {"sample_large_vocab", {uni({3, 3000}, -4, 4)}, FN(sample(x[0], cf({1, 50, 0.9}, {3}), ci({11, 4}, {2}))), {3}, kI32, kExact, kNoGrad},
      {"sample_ties_at_the_cuts", {ints({5, 40}, 0, 3, kF32)}, FN(sample(x[0], cf({1, 7, 0.5}, {3}), ci({5, 6}, {2}))), {5}, kI32, kExact, kNoGrad},
      {"sample_top_p_zero_keeps_the_top", {ints({5, 40}, 0, 3, kF32)}, FN(sample(x[0], cf({1, 0, 0}, {3}), ci({5, 6}, {2}))), {5}, kI32, kExact, kNoGrad},
      {"sample_rank3_of_a_view", {uni({11, 2, 3}, -2, 2)}, FN(sample(permute(x[0], {1, 2, 0}), cf({2, 0, 1}, {3}), ci({1, 1}, {2}))), {2, 3}, kI32, kExact, kNoGrad},
      {"one_hot", {indices({2, 3}, 5)}, FN(one_hot(x[0], 5)), {2, 3, 5}, kF32, kExact, kNoGrad},
      {"one_hot_times_input", {indices({4}, 3), uni({4, 3})}, FN(one_hot(x[0], 3) * x[1]), {4, 3}, kF32, kExact, kGrad},
  };
}

// ---- NN: softmax family --------------------------------------------------------------------
std::vector<OpCase> nn_softmax_rows() {
  return {
      {"softmax_axis0", {uni({3, 4, 5}, -3, 3)}, FN(softmax(x[0], 0)), {3, 4, 5}, kF32, kTranscendental, kGrad},
      {"softmax_axis1", {uni({3, 4, 5}, -3, 3)}, FN(softmax(x[0], 1)), {3, 4, 5}, kF32, kTranscendental, kGrad},
      {"softmax_axis_last", {uni({3, 4, 5}, -3, 3)}, FN(softmax(x[0], -1)), {3, 4, 5}, kF32, kTranscendental, kGrad},
      {"softmax_rank1_default_axis", {uni({7}, -3, 3)}, FN(softmax(x[0])), {7}, kF32, kTranscendental, kGrad},
      {"softmax_wide_logits", {uni({3, 6}, -60, 60)}, FN(softmax(x[0])), {3, 6}, kF32, kTranscendental, kGrad},
      {"softmax_of_i32_promotes", {ints({2, 5}, -3, 3)}, FN(softmax(x[0])), {2, 5}, kF32, kTranscendental, kNoGrad},
      {"log_softmax_axis0", {uni({3, 4, 5}, -3, 3)}, FN(log_softmax(x[0], 0)), {3, 4, 5}, kF32, kTranscendental, kGrad},
      {"log_softmax_axis1", {uni({3, 4, 5}, -3, 3)}, FN(log_softmax(x[0], 1)), {3, 4, 5}, kF32, kTranscendental, kGrad},
      {"log_softmax_axis_last", {uni({3, 4, 5}, -3, 3)}, FN(log_softmax(x[0], -1)), {3, 4, 5}, kF32, kTranscendental, kGrad},
      {"log_softmax_wide_logits", {uni({3, 6}, -60, 60)}, FN(log_softmax(x[0])), {3, 6}, kF32, kTranscendental, kGrad},
      // causal: [.., T, S], key j of query i is masked when j > i + (S − T)
      {"softmax_causal_T_lt_S", {uni({2, 4, 6}, -3, 3)}, FN(softmax(x[0], -1, true)), {2, 4, 6}, kF32, kTranscendental, kGrad},
      {"softmax_causal_T_eq_S", {uni({2, 5, 5}, -3, 3)}, FN(softmax(x[0], 2, true)), {2, 5, 5}, kF32, kTranscendental, kGrad},
      {"softmax_causal_4d", {uni({2, 2, 3, 4}, -3, 3)}, FN(softmax(x[0], -1, true)), {2, 2, 3, 4}, kF32, kTranscendental, kGrad},
      {"log_softmax_causal_T_lt_S", {uni({2, 4, 6}, -3, 3)}, FN(finite_part(log_softmax(x[0], -1, true))), {2, 4, 6}, kF32, kTranscendental, kGrad},
      {"log_softmax_causal_T_eq_S", {uni({3, 5, 5}, -3, 3)}, FN(finite_part(log_softmax(x[0], -1, true))), {3, 5, 5}, kF32, kTranscendental, kGrad},
  };
}

// ---- NN: losses --------------------------------------------------------------------------
std::vector<OpCase> nn_losses_rows() {
  return {
      {"cross_entropy_mean", {uni({6, 5}, -3, 3), indices({6}, 5)}, FN(cross_entropy(x[0], x[1])), {}, kF32, kTranscendental, kGrad},
      {"cross_entropy_mean_ignore", {uni({6, 5}, -3, 3), indices({6}, 5)}, FN(cross_entropy(x[0], with_ignored(x[1], -100))), {}, kF32, kTranscendental, kGrad},
      {"cross_entropy_sum_ignore", {uni({6, 5}, -3, 3), indices({6}, 5)}, FN(cross_entropy(x[0], with_ignored(x[1], -100), {.reduction = Reduction::kSum})), {}, kF32, kTranscendental, kGrad},
      {"cross_entropy_none_ignore", {uni({6, 5}, -3, 3), indices({6}, 5)}, FN(cross_entropy(x[0], with_ignored(x[1], -100), {.reduction = Reduction::kNone})), {6}, kF32, kTranscendental, kGrad},
      // ignore_index inside [0, C): rows whose target is that class are ignored as well
      {"cross_entropy_ignore_index_in_range", {uni({8, 4}, -3, 3), indices({8}, 4)}, FN(cross_entropy(x[0], with_ignored(x[1], 2), {.ignore_index = 2})), {}, kF32, kTranscendental, kGrad},
      {"cross_entropy_3d_mean_ignore", {uni({2, 3, 5}, -3, 3), indices({2, 3}, 5)}, FN(cross_entropy(x[0], with_ignored(x[1], -1), {.ignore_index = -1})), {}, kF32, kTranscendental, kGrad},
      {"cross_entropy_3d_sum", {uni({2, 3, 5}, -3, 3), indices({2, 3}, 5)}, FN(cross_entropy(x[0], x[1], {.reduction = Reduction::kSum})), {}, kF32, kTranscendental, kGrad},
      {"cross_entropy_3d_none_ignore", {uni({2, 3, 5}, -3, 3), indices({2, 3}, 5)}, FN(cross_entropy(x[0], with_ignored(x[1], -100), {.reduction = Reduction::kNone})), {2, 3}, kF32, kTranscendental, kGrad},
      {"cross_entropy_wide_logits", {uni({4, 6}, -40, 40), indices({4}, 6)}, FN(cross_entropy(x[0], x[1], {.reduction = Reduction::kNone})), {4}, kF32, kTranscendental, kGrad},
      // A vocabulary past 1024 that is not a multiple of 64: the cuda backend lays the logits
      // and their gradient out in padded rows (the products around them stay aligned).
      {"cross_entropy_vocab_1100_from_matmul", {uni({2, 3, 8}, -1, 1), uni({8, 1100}, -1, 1), indices({2, 3}, 1100)},
       FN(cross_entropy(matmul(x[0], x[1]), x[2])), {}, kF32, kTranscendental, kCpuOnly},
      {"cross_entropy_rank1_logits", {uni({5}, -3, 3), indices({}, 5)}, FN(cross_entropy(x[0], x[1])), {}, kF32, kTranscendental, kGrad},
      {"mse_loss", {uni({2, 3}), uni({2, 3})}, FN(mse_loss(x[0], x[1])), {}, kF32, kReduce, kGrad},
      {"mse_loss_broadcast_target", {uni({3, 4}), uni({4})}, FN(mse_loss(x[0], x[1])), {}, kF32, kReduce, kGrad},
      {"mse_loss_none", {uni({3, 4}), uni({4})}, FN(mse_loss(x[0], x[1], Reduction::kNone)), {3, 4}, kF32, kArith, kGrad},
      {"l1_loss_sum", {distinct({3, 4}), distinct({3, 4})}, FN(l1_loss(x[0], x[1], Reduction::kSum)), {}, kF32, kReduce, kGrad},
      {"smooth_l1_loss", {uni({3, 4}, -2, 2), uni({3, 4}, -2, 2)}, FN(smooth_l1_loss(x[0], x[1], 0.5)), {}, kF32, kReduce, kGrad},
      {"huber_loss_none", {uni({3, 4}, -2, 2), uni({4}, -2, 2)}, FN(huber_loss(x[0], x[1], 0.7, Reduction::kNone)), {3, 4}, kF32, kArith, kGrad},
      {"binary_cross_entropy", {uni({3, 4}, 0.05, 0.95), uni({3, 4}, 0, 1)}, FN(binary_cross_entropy(x[0], x[1])), {}, kF32, kTranscendental, kGrad},
      {"bce_with_logits_pos_weight", {uni({3, 4}, -4, 4), uni({3, 4}, 0, 1), uni({4}, 0.5, 3)}, FN(binary_cross_entropy_with_logits(x[0], x[1], {.pos_weight = x[2]})), {}, kF32, kTranscendental, kGrad},
      {"nll_loss_ignore", {uni({6, 5}, -4, 0), indices({6}, 5)}, FN(nll_loss(x[0], with_ignored(x[1], -100))), {}, kF32, kReduce, kGrad},
      {"cross_entropy_label_smoothing", {uni({6, 5}, -3, 3), indices({6}, 5)}, FN(cross_entropy(x[0], with_ignored(x[1], -100), {.label_smoothing = 0.2})), {}, kF32, kTranscendental, kGrad},
  };
}

// ---- NN: normalisation -------------------------------------------------------------------
std::vector<OpCase> nn_normalisation_rows() {
  return {
      {"layer_norm_plain", {uni({3, 8}, -2, 2)}, FN(layer_norm(x[0], Tensor(), Tensor())), {3, 8}, kF32, kTranscendental, kGrad},
      {"layer_norm_weight", {uni({3, 8}, -2, 2), uni({8}, 0.5, 1.5)}, FN(layer_norm(x[0], x[1], Tensor())), {3, 8}, kF32, kTranscendental, kGrad},
      {"layer_norm_bias", {uni({3, 8}, -2, 2), uni({8})}, FN(layer_norm(x[0], Tensor(), x[1])), {3, 8}, kF32, kTranscendental, kGrad},
      {"layer_norm_weight_bias_3d", {uni({2, 3, 8}, -2, 2), uni({8}, 0.5, 1.5), uni({8})}, FN(layer_norm(x[0], x[1], x[2])), {2, 3, 8}, kF32, kTranscendental, kGrad},
      // a variance comparable to eps, so eps matters
      {"layer_norm_eps", {uni({4, 5}, -0.1, 0.1)}, FN(layer_norm(x[0], Tensor(), Tensor(), 0.01)), {4, 5}, kF32, kTranscendental, kGrad},
      {"rms_norm_plain", {uni({3, 8}, -2, 2)}, FN(rms_norm(x[0], Tensor())), {3, 8}, kF32, kTranscendental, kGrad},
      {"rms_norm_weight", {uni({3, 8}, -2, 2), uni({8}, 0.5, 1.5)}, FN(rms_norm(x[0], x[1])), {3, 8}, kF32, kTranscendental, kGrad},
      {"rms_norm_weight_3d_eps", {uni({2, 3, 6}, -0.1, 0.1), uni({6})}, FN(rms_norm(x[0], x[1], 0.01)), {2, 3, 6}, kF32, kTranscendental, kGrad},
      {"rms_norm_rank1", {uni({7}, -2, 2)}, FN(rms_norm(x[0], Tensor())), {7}, kF32, kTranscendental, kGrad},
  };
}

// ---- NN: randomness (the runtime key is fed by the harness) --------------------------------
std::vector<OpCase> nn_randomness_rows() {
  return {
      // random_uniform's bits are a pure function of (seed, key, index): cpu equals ref exactly.
      {"random_uniform", {}, FN(random_uniform({4, 5})), {4, 5}, kF32, kExact, kNoGrad},
      {"random_uniform_two_sites", {uni({3, 4})}, FN(x[0] * random_uniform({3, 4}) + random_uniform({4})), {3, 4}, kF32, kArith, kGrad},
      {"dropout", {uni({4, 12})}, FN(dropout(x[0], 0.3)), {4, 12}, kF32, kArith, kGrad, true},
      {"dropout_of_transposed_view", {uni({6, 8})}, FN(dropout(transpose(x[0]), 0.5)), {8, 6}, kF32, kArith, kGrad, true},
      {"dropout_two_sites", {uni({3, 5})}, FN(dropout(x[0], 0.2) + dropout(x[0] * 2, 0.6)), {3, 5}, kF32, kArith, kGrad, true},
  };
}

// ---- NN: convolutional networks (NCHW; weights [O, C/groups, KH, KW]) -----------------------
std::vector<OpCase> nn_conv_rows() {
  return {
      {"conv2d_basic", {uni({2, 3, 5, 6}), uni({4, 3, 3, 3})}, FN(conv2d(x[0], x[1])), {2, 4, 3, 4}, kF32, kMatmul, kGrad},
      {"conv2d_bias_pad1", {uni({1, 2, 5, 5}), uni({3, 2, 3, 3}), uni({3})}, FN(conv2d(x[0], x[1], x[2], {.padding = 1})), {1, 3, 5, 5}, kF32, kMatmul, kGrad},
      {"conv2d_stride2_pad1_odd", {uni({2, 2, 7, 6}), uni({3, 2, 3, 3})}, FN(conv2d(x[0], x[1], Tensor(), {.stride = 2, .padding = 1})), {2, 3, 4, 3}, kF32, kMatmul, kGrad},
      {"conv2d_dilation2", {uni({1, 2, 7, 7}), uni({2, 2, 3, 3})}, FN(conv2d(x[0], x[1], Tensor(), {.dilation = 2})), {1, 2, 3, 3}, kF32, kMatmul, kGrad},
      {"conv2d_groups2", {uni({2, 4, 5, 5}), uni({6, 2, 3, 3})}, FN(conv2d(x[0], x[1], Tensor(), {.padding = 1, .groups = 2})), {2, 6, 5, 5}, kF32, kMatmul, kGrad},
      {"conv2d_depthwise_stride2", {uni({1, 3, 6, 6}), uni({3, 1, 3, 3}), uni({3})}, FN(conv2d(x[0], x[1], x[2], {.stride = 2, .groups = 3})), {1, 3, 2, 2}, kF32, kMatmul, kGrad},
      {"conv2d_1x1", {uni({2, 4, 3, 3}), uni({5, 4, 1, 1})}, FN(conv2d(x[0], x[1])), {2, 5, 3, 3}, kF32, kMatmul, kGrad},
      {"conv2d_rect_kernel_mixed_stride_pad", {uni({1, 2, 6, 5}), uni({2, 2, 2, 3})}, FN(conv2d(x[0], x[1], Tensor(), {.stride = {1, 2}, .padding = {1, 0}})), {1, 2, 7, 2}, kF32, kMatmul, kGrad},
      {"conv2d_strided_1x1_pad", {uni({1, 3, 5, 5}), uni({2, 3, 1, 1})}, FN(conv2d(x[0], x[1], Tensor(), {.stride = 2, .padding = 1})), {1, 2, 4, 4}, kF32, kMatmul, kGrad},
      {"conv2d_of_permuted_input", {uni({2, 5, 4, 3})}, FN(conv2d(permute(x[0], {0, 3, 1, 2}), constant(std::vector<float>(2 * 3 * 2 * 2, 0.25f), {2, 3, 2, 2}))), {2, 2, 4, 3}, kF32, kMatmul, kGrad},
      {"conv_transpose2d_basic", {uni({1, 2, 3, 3}), uni({2, 3, 3, 3})}, FN(conv_transpose2d(x[0], x[1])), {1, 3, 5, 5}, kF32, kMatmul, kGrad},
      {"conv_transpose2d_stride2_outpad_bias", {uni({2, 3, 4, 5}), uni({3, 2, 3, 3}), uni({2})}, FN(conv_transpose2d(x[0], x[1], x[2], {.stride = 2, .padding = 1, .output_padding = 1})), {2, 2, 8, 10}, kF32, kMatmul, kGrad},
      {"conv_transpose2d_groups_dilation", {uni({1, 4, 3, 3}), uni({4, 3, 2, 3})}, FN(conv_transpose2d(x[0], x[1], Tensor(), {.dilation = {2, 1}, .groups = 2})), {1, 6, 5, 5}, kF32, kMatmul, kGrad},
      {"interpolate_nearest_size", {uni({1, 2, 3, 4})}, FN(interpolate(x[0], {.size = {5, 7}})), {1, 2, 5, 7}, kF32, kExact, kGrad},
      {"interpolate_bilinear_scale", {uni({2, 1, 4, 3})}, FN(interpolate(x[0], {.scale = 1.5, .mode = InterpolateMode::kBilinear})), {2, 1, 6, 4}, kF32, kReduce, kGrad},
      {"interpolate_bilinear_corners_down", {uni({1, 2, 5, 6})}, FN(interpolate(x[0], {.size = {3, 4}, .mode = InterpolateMode::kBilinear, .align_corners = true})), {1, 2, 3, 4}, kF32, kReduce, kGrad},
      {"adaptive_avg_pool2d_overlap", {uni({2, 2, 5, 4})}, FN(adaptive_avg_pool2d(x[0], {3, 6})), {2, 2, 3, 6}, kF32, kReduce, kGrad},
      {"pad_reflect", {uni({1, 2, 4, 5})}, FN(pad(x[0], {2, 1, 1, 2}, {.mode = PadMode::kReflect})), {1, 2, 7, 8}, kF32, kExact, kGrad},
      {"pad_replicate", {uni({3, 4})}, FN(pad(x[0], {0, 3}, {.mode = PadMode::kReplicate})), {3, 7}, kF32, kExact, kGrad},
      {"pad_constant_value", {uni({2, 3, 4})}, FN(pad(x[0], {1, 0, 0, 2}, {.value = -1})), {2, 5, 5}, kF32, kExact, kGrad},
      {"group_norm_affine", {uni({2, 4, 3, 2}), uni({4}), uni({4})}, FN(group_norm(x[0], 2, x[1], x[2])), {2, 4, 3, 2}, kF32, kTranscendental, kGrad},
      {"conv2d_batch1_wide", {uni({1, 16, 12, 12}), uni({8, 16, 3, 3}, -0.2, 0.2), uni({8})}, FN(conv2d(x[0], x[1], x[2], {.padding = 1})), {1, 8, 12, 12}, kF32, kLargeSum, kCpuOnly},
      {"conv2d_large_image_chunks", {uni({2, 3, 40, 40}), uni({4, 3, 5, 5}, -0.2, 0.2)}, FN(conv2d(x[0], x[1], Tensor(), {.padding = 2})), {2, 4, 40, 40}, kF32, kLargeSum, kCpuOnly},
      {"conv2d_second_derivative", {uni({2, 4, 5, 5}), uni({6, 2, 3, 3}), uni({2, 6, 3, 3}), uni({2, 4, 5, 5}), uni({6, 2, 3, 3})}, conv_gradient_dot, {}, kF32, kLargeSum, kGrad},
      {"avg_pool2d_second_derivative", {uni({1, 2, 7, 7}), uni({1, 2, 4, 4}), uni({1, 2, 7, 7})}, avg_pool_gradient_dot, {}, kF32, kReduce, kGrad},
      {"max_pool2d_2x2", {distinct({2, 3, 6, 6})}, FN(max_pool2d(x[0], {.kernel = 2})), {2, 3, 3, 3}, kF32, kExact, kGrad},
      {"max_pool2d_2x2_uncovered_edges", {distinct({2, 3, 7, 5})}, FN(max_pool2d(x[0], {.kernel = 2})), {2, 3, 3, 2}, kF32, kExact, kGrad},
      {"max_pool2d_3x3_tiling_uncovered", {distinct({1, 2, 8, 10})}, FN(max_pool2d(x[0], {.kernel = 3})), {1, 2, 2, 3}, kF32, kExact, kGrad},
      {"max_pool2d_2x2_wide_rows", {distinct({1, 1, 4, 602})}, FN(max_pool2d(x[0], {.kernel = 2})), {1, 1, 2, 301}, kF32, kExact, kGrad},
      {"max_pool2d_3x3_s2_p1_overlapping", {distinct({1, 2, 7, 7})}, FN(max_pool2d(x[0], {.kernel = 3, .stride = 2, .padding = 1})), {1, 2, 4, 4}, kF32, kExact, kGrad},
      {"max_pool2d_dilation2", {distinct({1, 1, 7, 7})}, FN(max_pool2d(x[0], {.kernel = 2, .stride = 1, .dilation = 2})), {1, 1, 5, 5}, kF32, kExact, kGrad},
      {"max_pool2d_rect_odd", {distinct({2, 1, 5, 7})}, FN(max_pool2d(x[0], {.kernel = {2, 3}, .stride = {2, 1}})), {2, 1, 2, 5}, kF32, kExact, kGrad},
      {"avg_pool2d_2x2", {uni({2, 3, 6, 6})}, FN(avg_pool2d(x[0], {.kernel = 2})), {2, 3, 3, 3}, kF32, kArith, kGrad},
      {"avg_pool2d_3x3_s2_p1_count_pad", {uni({1, 2, 7, 7})}, FN(avg_pool2d(x[0], {.kernel = 3, .stride = 2, .padding = 1})), {1, 2, 4, 4}, kF32, kReduce, kGrad},
      {"avg_pool2d_3x3_s2_p1_exclude_pad", {uni({1, 2, 7, 7})}, FN(avg_pool2d(x[0], {.kernel = 3, .stride = 2, .padding = 1, .count_include_pad = false})), {1, 2, 4, 4}, kF32, kReduce, kGrad},
      {"avg_pool2d_rect", {uni({1, 2, 6, 7})}, FN(avg_pool2d(x[0], {.kernel = {2, 3}, .stride = {2, 1}})), {1, 2, 3, 5}, kF32, kReduce, kGrad},
      {"global_avg_pool2d", {uni({2, 3, 4, 5})}, FN(global_avg_pool2d(x[0])), {2, 3}, kF32, kReduce, kGrad},
      {"batch_norm_given_statistics", {uni({2, 3, 4, 4}), uni({3}), uni({3}, 0.5, 1.5), uni({3}, 0.5, 1.5), uni({3})}, FN(batch_norm(x[0], x[1], x[2], x[3], x[4])), {2, 3, 4, 4}, kF32, kTranscendental, kGrad},
      {"conv_pool_stack", {uni({2, 1, 8, 8}), uni({4, 1, 3, 3}), uni({4}), uni({6, 4, 3, 3}, -0.3, 0.3)},
       FN(avg_pool2d(relu(conv2d(max_pool2d(relu(conv2d(x[0], x[1], x[2], {.padding = 1})), {.kernel = 2}), x[3], Tensor(), {.padding = 1})), {.kernel = 2})), {2, 6, 2, 2}, kF32, kLargeSum, kCpuOnly},
  };
}

// ---- NN: attention (q [B, Hq, T, D], k/v [B, Hkv, S, D]) -----------------------------------
std::vector<OpCase> nn_attention_rows() {
  return {
      // Mamba: the selective scan (u, delta > 0, A < 0, B, C) and the causal depthwise convolution
      {"selective_scan_y", {uni({2, 4, 7}), uni({2, 4, 7}, 0.1, 0.8), uni({4, 3}, -1.5, -0.2), uni({2, 3, 7}), uni({2, 3, 7})}, FN(selective_scan(x[0], x[1], x[2], x[3], x[4]).y), {2, 4, 7}, kF32, kTranscendental, kGrad},
      {"selective_scan_last_state", {uni({2, 4, 7}), uni({2, 4, 7}, 0.1, 0.8), uni({4, 3}, -1.5, -0.2), uni({2, 3, 7}), uni({2, 3, 7})}, FN(selective_scan(x[0], x[1], x[2], x[3], x[4]).last_state), {2, 4, 3}, kF32, kTranscendental, kGrad},
      // Both results reach the loss: autograd gathers a gradient for each and the rule gets both.
      {"selective_scan_y_and_last_state", {uni({2, 4, 7}), uni({2, 4, 7}, 0.1, 0.8), uni({4, 3}, -1.5, -0.2), uni({2, 3, 7}), uni({2, 3, 7})},
       FN([&] { const SelectiveScanResult r = selective_scan(x[0], x[1], x[2], x[3], x[4]); return concat({r.y, r.last_state * 2.0f}, 2); }()),
       {2, 4, 10}, kF32, kTranscendental, kGrad},
      {"selective_scan_grouped_bc", {uni({1, 6, 5}), uni({1, 6, 5}, 0.1, 0.8), uni({6, 2}, -1.5, -0.2), uni({1, 3, 2, 5}), uni({1, 3, 2, 5})}, FN(selective_scan(x[0], x[1], x[2], x[3], x[4]).y), {1, 6, 5}, kF32, kTranscendental, kGrad},
      {"selective_scan_gate_skip_bias_softplus", {uni({2, 3, 6}), uni({2, 3, 6}, -2, 2), uni({3, 4}, -1.5, -0.2), uni({2, 4, 6}), uni({2, 4, 6}), uni({3}), uni({2, 3, 6}), uni({3}, -0.5, 0.5)},
       FN(selective_scan(x[0], x[1], x[2], x[3], x[4], {.D = x[5], .z = x[6], .delta_bias = x[7], .delta_softplus = true}).y), {2, 3, 6}, kF32, kTranscendental, kGrad},
      {"selective_scan_long", {uni({2, 3, 70}), uni({2, 3, 70}, 0.05, 0.5), uni({3, 4}, -1.0, -0.1), uni({2, 4, 70}), uni({2, 4, 70})}, FN(selective_scan(x[0], x[1], x[2], x[3], x[4]).y), {2, 3, 70}, kF32, kTranscendental, kCpuOnly},
      // The CUDA kernels' layouts (two states per lane up to 64 states, else four; two channels a
      // thread where the block's channels allow; chunks of 8 steps): 16 states (8 lanes per
      // channel), 32-channel blocks of a group, L = 100 (12 chunks and a tail); 32 states (16
      // lanes); 5 states (4 lanes, three padded states) in one-channel blocks; 33 states (32
      // lanes, 31 padded) and 64; 80 (four a lane: 32 lanes, 48 padded); the fused bias,
      // softplus and D skip over several chunks.
      {"selective_scan_wide_grouped", {uni({2, 64, 100}), uni({2, 64, 100}, 0.05, 0.5), uni({64, 16}, -1.0, -0.1), uni({2, 2, 16, 100}), uni({2, 2, 16, 100})}, FN(selective_scan(x[0], x[1], x[2], x[3], x[4]).y), {2, 64, 100}, kF32, kLargeSum, kCpuOnly},
      {"selective_scan_32_states_last", {uni({1, 8, 40}), uni({1, 8, 40}, 0.05, 0.5), uni({8, 32}, -1.0, -0.1), uni({1, 32, 40}), uni({1, 32, 40})}, FN(selective_scan(x[0], x[1], x[2], x[3], x[4]).last_state), {1, 8, 32}, kF32, kLargeSum, kCpuOnly},
      {"selective_scan_5_states", {uni({3, 5, 33}), uni({3, 5, 33}, 0.05, 0.5), uni({5, 5}, -1.0, -0.1), uni({3, 5, 33}), uni({3, 5, 33})}, FN(selective_scan(x[0], x[1], x[2], x[3], x[4]).y), {3, 5, 33}, kF32, kLargeSum, kCpuOnly},
      {"selective_scan_33_states_last", {uni({1, 4, 20}), uni({1, 4, 20}, 0.05, 0.5), uni({4, 33}, -1.0, -0.1), uni({1, 33, 20}), uni({1, 33, 20})}, FN(selective_scan(x[0], x[1], x[2], x[3], x[4]).last_state), {1, 4, 33}, kF32, kLargeSum, kCpuOnly},
      {"selective_scan_80_states_last", {uni({1, 4, 12}), uni({1, 4, 12}, 0.05, 0.5), uni({4, 80}, -1.0, -0.1), uni({1, 80, 12}), uni({1, 80, 12})}, FN(selective_scan(x[0], x[1], x[2], x[3], x[4]).last_state), {1, 4, 80}, kF32, kLargeSum, kCpuOnly},
      {"selective_scan_64_states", {uni({2, 4, 21}), uni({2, 4, 21}, 0.05, 0.5), uni({4, 64}, -1.0, -0.1), uni({2, 64, 21}), uni({2, 64, 21})}, FN(selective_scan(x[0], x[1], x[2], x[3], x[4]).y), {2, 4, 21}, kF32, kLargeSum, kCpuOnly},
      {"selective_scan_wide_skip_bias_softplus", {uni({2, 64, 50}), uni({2, 64, 50}, -3, 1), uni({64, 16}, -1.0, -0.1), uni({2, 16, 50}), uni({2, 16, 50}), uni({64}), uni({64}, -0.5, 0.5)},
       FN(selective_scan(x[0], x[1], x[2], x[3], x[4], {.D = x[5], .delta_bias = x[6], .delta_softplus = true}).y), {2, 64, 50}, kF32, kLargeSum, kCpuOnly},
      {"selective_scan_bias_skip_no_softplus", {uni({2, 3, 6}), uni({2, 3, 6}, 0.1, 0.8), uni({3, 4}, -1.5, -0.2), uni({2, 4, 6}), uni({2, 4, 6}), uni({3}), uni({3}, 0.0, 0.3)},
       FN(selective_scan(x[0], x[1], x[2], x[3], x[4], {.D = x[5], .delta_bias = x[6]}).y), {2, 3, 6}, kF32, kTranscendental, kGrad},
      {"selective_scan_softplus_bias_last_state", {uni({2, 3, 6}), uni({2, 3, 6}, -2, 2), uni({3, 4}, -1.5, -0.2), uni({2, 4, 6}), uni({2, 4, 6}), uni({3}, -0.5, 0.5)},
       FN(selective_scan(x[0], x[1], x[2], x[3], x[4], {.delta_bias = x[5], .delta_softplus = true}).last_state), {2, 3, 4}, kF32, kTranscendental, kGrad},
      // Empty extents: no steps leave the last state at zero; no sequences give empty outputs.
      {"selective_scan_no_steps", {uni({2, 3, 0}), uni({2, 3, 0}), uni({3, 4}), uni({2, 4, 0}), uni({2, 4, 0})}, FN(selective_scan(x[0], x[1], x[2], x[3], x[4]).last_state), {2, 3, 4}, kF32, kExact, kGrad},
      {"selective_scan_no_sequences", {uni({0, 3, 5}), uni({0, 3, 5}), uni({3, 4}), uni({0, 4, 5}), uni({0, 4, 5})}, FN(selective_scan(x[0], x[1], x[2], x[3], x[4]).y), {0, 3, 5}, kF32, kExact, kNoGrad},
      // Very negative delta: Δ = softplus(x) ≈ e^x down to ~1e-13 (the CUDA kernels' series branch).
      {"selective_scan_small_delta_softplus", {uni({1, 3, 9}), uni({1, 3, 9}, -30, -8), uni({3, 2}, -1.0, -0.1), uni({1, 2, 9}), uni({1, 2, 9}), uni({3}, -1, 1)},
       FN(selective_scan(x[0], x[1], x[2], x[3], x[4], {.D = x[5], .delta_softplus = true}).y), {1, 3, 9}, kF32, kTranscendental, kGrad},
      {"selective_scan_large_delta_softplus", {uni({1, 2, 4}), uni({1, 2, 4}, 90, 120), uni({2, 2}, -1.0, -0.1), uni({1, 2, 4}), uni({1, 2, 4})}, FN(selective_scan(x[0], x[1], x[2], x[3], x[4], {.delta_softplus = true}).y), {1, 2, 4}, kF32, kTranscendental, kNoGrad},
      {"conv1d_stride2_pad1", {uni({2, 3, 9}), uni({4, 3, 3}), uni({4})}, FN(conv1d(x[0], x[1], x[2], {.stride = 2, .padding = 1})), {2, 4, 5}, kF32, kReduce, kGrad},
      {"conv1d_grouped_dilated", {uni({1, 4, 10}), uni({6, 2, 2})}, FN(conv1d(x[0], x[1], Tensor(), {.dilation = 3, .groups = 2})), {1, 6, 7}, kF32, kReduce, kGrad},
      {"causal_conv1d", {uni({2, 3, 9}), uni({3, 4}), uni({3})}, FN(causal_conv1d(x[0], x[1], x[2])), {2, 3, 9}, kF32, kReduce, kGrad},
      {"causal_conv1d_no_bias_k1", {uni({1, 2, 5}), uni({2, 1})}, FN(causal_conv1d(x[0], x[1])), {1, 2, 5}, kF32, kReduce, kGrad},
      {"causal_conv1d_k_longer_than_l", {uni({1, 2, 3}), uni({2, 5}), uni({2})}, FN(causal_conv1d(x[0], x[1], x[2])), {1, 2, 3}, kF32, kReduce, kGrad},
      // attention_at: queries at per-sequence positions of KV caches (inference; no gradient)
      {"attention_at_decode_gqa", {uni({2, 4, 1, 8}), uni({2, 2, 7, 8}), uni({2, 2, 7, 8}), indices({2}, 7)}, FN(attention_at(x[0], x[1], x[2], x[3])), {2, 4, 1, 8}, kF32, kMatmul, kNoGrad},
      {"attention_at_prefill", {uni({2, 2, 3, 8}), uni({2, 2, 9, 8}), uni({2, 2, 9, 8}), indices({2}, 7)}, FN(attention_at(x[0], x[1], x[2], x[3])), {2, 2, 3, 8}, kF32, kMatmul, kNoGrad},
      {"attention_at_strided_q_scale", {uni({2, 3, 4, 8}), uni({2, 4, 10, 8}), uni({2, 4, 10, 8}), indices({2}, 8)}, FN(attention_at(permute(x[0], {0, 2, 1, 3}), x[1], x[2], x[3], 0.3)), {2, 4, 3, 8}, kF32, kMatmul, kNoGrad},
      {"attention_at_head_dim_64", {uni({1, 6, 1, 64}), uni({1, 2, 40, 64}), uni({1, 2, 40, 64}), indices({1}, 40)}, FN(attention_at(x[0], x[1], x[2], x[3])), {1, 6, 1, 64}, kF32, kMatmul, kNoGrad},
      {"attention_at_head_dim_160", {uni({1, 1, 2, 160}), uni({1, 1, 5, 160}), uni({1, 1, 5, 160}), indices({1}, 4)}, FN(attention_at(x[0], x[1], x[2], x[3])), {1, 1, 2, 160}, kF32, kMatmul, kNoGrad},
      {"attention_gqa_causal", {uni({2, 4, 5, 8}), uni({2, 2, 5, 8}), uni({2, 2, 5, 8})}, FN(attention(x[0], x[1], x[2])), {2, 4, 5, 8}, kF32, kMatmul, kGrad},
      // A key mask (bool [B, S]): hidden keys leave the softmax, and a query left with none gets 0
      // (random masks leave some rows so: every causal row 0 whose key 0 is hidden). An i32 mask
      // counts nonzero as kept. With a window or a softcap the mask joins the composite; on
      // attention_at it makes the composite over the cache. The long row takes the CUDA tiled
      // kernels with keys masked inside and across their 32-key tiles.
      {"attention_key_mask_gqa", {uni({2, 4, 5, 8}), uni({2, 2, 6, 8}), uni({2, 2, 6, 8}), bools({2, 6})}, FN(attention(x[0], x[1], x[2], {.causal = false, .key_mask = x[3]})), {2, 4, 5, 8}, kF32, kMatmul, kGrad},
      {"attention_key_mask_causal", {uni({3, 2, 6, 8}), uni({3, 2, 6, 8}), uni({3, 2, 6, 8}), bools({3, 6})}, FN(attention(x[0], x[1], x[2], {.key_mask = x[3]})), {3, 2, 6, 8}, kF32, kMatmul, kGrad},
      {"attention_key_mask_i32", {uni({2, 2, 4, 8}), uni({2, 2, 6, 8}), uni({2, 2, 6, 8}), ints({2, 6}, -1, 1)}, FN(attention(x[0], x[1], x[2], {.key_mask = x[3]})), {2, 2, 4, 8}, kF32, kMatmul, kGrad},
      {"attention_key_mask_window", {uni({2, 2, 6, 8}), uni({2, 2, 6, 8}), uni({2, 2, 6, 8}), bools({2, 6})}, FN(attention(x[0], x[1], x[2], {.window = 2, .key_mask = x[3]})), {2, 2, 6, 8}, kF32, kMatmul, kGrad},
      {"attention_key_mask_softcap", {uni({2, 2, 4, 8}, -2, 2), uni({2, 1, 5, 8}, -2, 2), uni({2, 1, 5, 8}), bools({2, 5})}, FN(attention(x[0], x[1], x[2], {.causal = false, .softcap = 2.0, .key_mask = x[3]})), {2, 2, 4, 8}, kF32, kMatmul, kGrad},
      {"attention_at_key_mask", {uni({2, 2, 2, 8}), uni({2, 2, 7, 8}), uni({2, 2, 7, 8}), indices({2}, 6), bools({2, 7})}, FN(attention_at(x[0], x[1], x[2], x[3], AttentionOptions{.key_mask = x[4]})), {2, 2, 2, 8}, kF32, kMatmul, kNoGrad},
      {"attention_key_mask_long", {uni({2, 2, 70, 16}), uni({2, 2, 130, 16}), uni({2, 2, 130, 16}), bools({2, 130})}, FN(attention(x[0], x[1], x[2], {.causal = false, .key_mask = x[3]})), {2, 2, 70, 16}, kF32, kLargeSum, kCpuOnly},
      // A sliding window below S and a softcap run as the composite (matmul, mask, softmax);
      // self-attention with a window well below T in blocks of 2W keys (ir/api_nn.cc's
      // attention_banded; T = 11 pads to 12), with W = 3 at T = 5 as the composite.
      {"attention_window_banded_padded", {uni({1, 4, 11, 4}), uni({1, 2, 11, 4}), uni({1, 2, 11, 4})}, FN(attention(x[0], x[1], x[2], {.window = 3})), {1, 4, 11, 4}, kF32, kMatmul, kGrad},
      {"attention_window_T_eq_S_composite", {uni({1, 2, 5, 8}), uni({1, 2, 5, 8}), uni({1, 2, 5, 8})}, FN(attention(x[0], x[1], x[2], {.window = 3})), {1, 2, 5, 8}, kF32, kMatmul, kGrad},
      {"attention_window_gqa_T_lt_S", {uni({2, 4, 5, 8}), uni({2, 2, 6, 8}), uni({2, 2, 6, 8})}, FN(attention(x[0], x[1], x[2], {.window = 3})), {2, 4, 5, 8}, kF32, kMatmul, kGrad},
      {"attention_softcap_noncausal", {uni({1, 2, 4, 8}, -2, 2), uni({1, 2, 5, 8}, -2, 2), uni({1, 2, 5, 8})}, FN(attention(x[0], x[1], x[2], {.causal = false, .softcap = 2.0})), {1, 2, 4, 8}, kF32, kMatmul, kGrad},
      {"attention_window_softcap_scale", {uni({1, 2, 6, 8}, -2, 2), uni({1, 1, 6, 8}, -2, 2), uni({1, 1, 6, 8})}, FN(attention(x[0], x[1], x[2], {.scale = 0.5, .window = 2, .softcap = 1.5})), {1, 2, 6, 8}, kF32, kMatmul, kGrad},
      {"attention_at_window", {uni({2, 4, 2, 8}), uni({2, 2, 9, 8}), uni({2, 2, 9, 8}), indices({2}, 8)}, FN(attention_at(x[0], x[1], x[2], x[3], AttentionOptions{.window = 3})), {2, 4, 2, 8}, kF32, kMatmul, kNoGrad},
      {"attention_at_softcap", {uni({1, 2, 1, 8}, -2, 2), uni({1, 1, 7, 8}, -2, 2), uni({1, 1, 7, 8}), indices({1}, 7)}, FN(attention_at(x[0], x[1], x[2], x[3], AttentionOptions{.softcap = 3.0})), {1, 2, 1, 8}, kF32, kMatmul, kNoGrad},
      // Attention sinks [Hq] (gpt-oss's): one more softmax column a head, as the composite (with a
      // gradient for the sinks), alone, in the blocks of a window, beside a key mask (a query with
      // no key left puts all its weight on the sink: zeros), and over caches.
      {"attention_sinks_gqa_causal", {uni({2, 4, 5, 8}), uni({2, 2, 5, 8}), uni({2, 2, 5, 8}), uni({4}, -1, 2)}, FN(attention(x[0], x[1], x[2], {.sinks = x[3]})), {2, 4, 5, 8}, kF32, kMatmul, kGrad},
      {"attention_sinks_window_banded", {uni({1, 4, 11, 4}), uni({1, 2, 11, 4}), uni({1, 2, 11, 4}), uni({4}, -1, 2)}, FN(attention(x[0], x[1], x[2], {.window = 3, .sinks = x[3]})), {1, 4, 11, 4}, kF32, kMatmul, kGrad},
      {"attention_sinks_key_mask", {uni({2, 2, 4, 8}), uni({2, 2, 6, 8}), uni({2, 2, 6, 8}), bools({2, 6}), uni({2}, -1, 2)}, FN(attention(x[0], x[1], x[2], {.causal = false, .key_mask = x[3], .sinks = x[4]})), {2, 2, 4, 8}, kF32, kMatmul, kGrad},
      {"attention_at_sinks", {uni({2, 4, 2, 8}), uni({2, 2, 9, 8}), uni({2, 2, 9, 8}), indices({2}, 8), uni({4}, -1, 2)}, FN(attention_at(x[0], x[1], x[2], x[3], AttentionOptions{.window = 3, .sinks = x[4]})), {2, 4, 2, 8}, kF32, kMatmul, kNoGrad},
      {"attention_gqa_causal_T_lt_S", {uni({2, 4, 3, 8}), uni({2, 2, 6, 8}), uni({2, 2, 6, 8})}, FN(attention(x[0], x[1], x[2], {.causal = true})), {2, 4, 3, 8}, kF32, kMatmul, kGrad},
      {"attention_gqa_noncausal_T_lt_S", {uni({2, 4, 4, 8}), uni({2, 2, 6, 8}), uni({2, 2, 6, 8})}, FN(attention(x[0], x[1], x[2], {.causal = false})), {2, 4, 4, 8}, kF32, kMatmul, kGrad},
      {"attention_mqa_causal", {uni({2, 4, 4, 8}), uni({2, 1, 4, 8}), uni({2, 1, 4, 8})}, FN(attention(x[0], x[1], x[2])), {2, 4, 4, 8}, kF32, kMatmul, kGrad},
      {"attention_mqa_noncausal_T_lt_S", {uni({2, 4, 3, 8}), uni({2, 1, 5, 8}), uni({2, 1, 5, 8})}, FN(attention(x[0], x[1], x[2], {.causal = false})), {2, 4, 3, 8}, kF32, kMatmul, kGrad},
      {"attention_mha_causal_T_lt_S", {uni({2, 4, 3, 8}), uni({2, 4, 5, 8}), uni({2, 4, 5, 8})}, FN(attention(x[0], x[1], x[2])), {2, 4, 3, 8}, kF32, kMatmul, kGrad},
      {"attention_mha_noncausal", {uni({2, 4, 4, 8}), uni({2, 4, 4, 8}), uni({2, 4, 4, 8})}, FN(attention(x[0], x[1], x[2], {.causal = false})), {2, 4, 4, 8}, kF32, kMatmul, kGrad},
      {"attention_noncausal_T_gt_S", {uni({2, 4, 6, 8}), uni({2, 2, 3, 8}), uni({2, 2, 3, 8})}, FN(attention(x[0], x[1], x[2], {.causal = false})), {2, 4, 6, 8}, kF32, kMatmul, kGrad},
      {"attention_custom_scale", {uni({1, 2, 4, 8}, -2, 2), uni({1, 1, 4, 8}, -2, 2), uni({1, 1, 4, 8})}, FN(attention(x[0], x[1], x[2], {.causal = true, .scale = 0.7})), {1, 2, 4, 8}, kF32, kMatmul, kGrad},
      {"attention_single_key", {uni({1, 2, 3, 8}), uni({1, 2, 1, 8}), uni({1, 2, 1, 8})}, FN(attention(x[0], x[1], x[2], {.causal = false})), {1, 2, 3, 8}, kF32, kMatmul, kGrad},
      {"attention_odd_head_dim", {uni({1, 2, 3, 5}), uni({1, 2, 4, 5}), uni({1, 2, 4, 5})}, FN(attention(x[0], x[1], x[2])), {1, 2, 3, 5}, kF32, kMatmul, kGrad},
      {"attention_permuted_heads", {uni({1, 5, 4, 8}), uni({1, 5, 2, 8}), uni({1, 5, 2, 8})}, attention_bthd, {1, 4, 5, 8}, kF32, kMatmul, kGrad},
  };
}

// ---- NN: activations and small composites ------------------------------------------------
std::vector<OpCase> nn_activations_rows() {
  return {
      {"gelu_erf", {uni({3, 5}, -3, 3)}, FN(gelu(x[0])), {3, 5}, kF32, kTranscendental, kGrad},
      {"gelu_tanh", {uni({3, 5}, -3, 3)}, FN(gelu(x[0], GeluApprox::kTanh)), {3, 5}, kF32, kTranscendental, kGrad},
      {"silu", {uni({3, 5}, -4, 4)}, FN(silu(x[0])), {3, 5}, kF32, kTranscendental, kGrad},
      {"softplus", {uni({4, 5}, -20, 20)}, FN(softplus(x[0])), {4, 5}, kF32, kTranscendental, kGrad},
      {"softplus_large_magnitude", {away0({2, 10}, 30, 100)}, FN(softplus(x[0])), {2, 10}, kF32, kTranscendental, kGrad},
      {"swiglu", {uni({3, 6}, -3, 3), uni({3, 6})}, FN(swiglu(x[0], x[1])), {3, 6}, kF32, kTranscendental, kGrad},
      {"rope", {uni({2, 3, 5, 8})}, FN(rope(x[0])), {2, 3, 5, 8}, kF32, kTranscendental, kGrad},
      {"rope_offset_base", {uni({4, 6})}, FN(rope(x[0], 100.0, 7)), {4, 6}, kF32, kTranscendental, kGrad},
      {"rope_large_offset", {uni({1, 2, 6, 4})}, FN(rope(x[0], 10000.0, 1000)), {1, 2, 6, 4}, kF32, kTranscendental, kGrad},
      {"rotary", {uni({2, 3, 8}), uni({2, 3, 8}), uni({2, 3, 8})}, FN(rotary(x[0], x[1], x[2])), {2, 3, 8}, kF32, kArith, kGrad},
      {"rotary_tables_broadcast", {uni({2, 4, 3, 6}), uni({2, 1, 3, 6}), uni({3, 6})}, FN(rotary(x[0], x[1], x[2])), {2, 4, 3, 6}, kF32, kArith, kGrad},
      {"rotary_of_permuted", {uni({4, 2, 3})}, FN(rotary(permute(x[0], {1, 2, 0}), cos(permute(x[0], {1, 2, 0})), reshape(sin(x[0] * 2.0), {2, 3, 4}))), {2, 3, 4}, kF32, kTranscendental, kGrad},
      {"rotary_of_slice", {uni({3, 10}), uni({3, 4})}, FN(rotary(slice(x[0], 1, 2, 10, 2), x[1], x[1])), {3, 4}, kF32, kArith, kGrad},
      {"pad_axis1", {uni({2, 3})}, FN(pad(x[0], 1, 2, 1)), {2, 6}, kF32, kExact, kGrad},
      {"pad_axis0_before_value", {uni({2, 3})}, FN(pad(x[0], 0, 3, 0, 0.5)), {5, 3}, kF32, kExact, kGrad},
      {"pad_neg_axis_after_value", {uni({2, 3, 4})}, FN(pad(x[0], -1, 0, 2, -1.0)), {2, 3, 6}, kF32, kExact, kGrad},
      {"pad_i32", {ints({2, 3})}, FN(pad(x[0], 1, 1, 1, 7)), {2, 5}, kI32, kExact, kNoGrad},
  };
}

// ---- NN, large: past the CPU kernels' blocking (attention row blocks of 64 queries,
// random chunks of 4096 elements, scatter-add blocks of 256 inner positions) ----------------
std::vector<OpCase> nn_large_rows() {
  return {
      {"large_softmax_rows", {uni({70, 300}, -4, 4)}, FN(softmax(x[0])), {70, 300}, kF32, kTranscendental, kCpuOnly},
      {"large_log_softmax_axis0", {uni({300, 70}, -4, 4)}, FN(log_softmax(x[0], 0)), {300, 70}, kF32, kTranscendental, kCpuOnly},
      {"large_softmax_causal", {uni({2, 70, 90}, -4, 4)}, FN(softmax(x[0], -1, true)), {2, 70, 90}, kF32, kTranscendental, kCpuOnly},
      {"large_log_softmax_causal", {uni({2, 70, 70}, -4, 4)}, FN(finite_part(log_softmax(x[0], -1, true))), {2, 70, 70}, kF32, kTranscendental, kCpuOnly},
      {"large_cross_entropy", {uni({300, 50}, -4, 4), indices({300}, 50)}, FN(cross_entropy(x[0], with_ignored(x[1], -100))), {}, kF32, kTranscendental, kCpuOnly},
      {"large_layer_norm", {uni({70, 300}, -2, 2), uni({300}, 0.5, 1.5), uni({300})}, FN(layer_norm(x[0], x[1], x[2])), {70, 300}, kF32, kTranscendental, kCpuOnly},
      {"large_rms_norm", {uni({130, 200}, -2, 2), uni({200}, 0.5, 1.5)}, FN(rms_norm(x[0], x[1])), {130, 200}, kF32, kTranscendental, kCpuOnly},
      {"large_rotary", {uni({8, 40, 256}), uni({40, 256}), uni({40, 256})}, FN(rotary(x[0], x[1], x[2])), {8, 40, 256}, kF32, kArith, kNoGrad},
      {"large_embedding", {uni({64, 300}), indices({4, 100}, 64)}, FN(embedding(x[0], x[1])), {4, 100, 300}, kF32, kExact, kCpuOnly},
      {"large_take_along_axis0", {uni({50, 300}), indices({400, 300}, 50)}, FN(take_along_axis(x[0], x[1], 0)), {400, 300}, kF32, kExact, kCpuOnly},
      {"large_take_along_axis1", {uni({300, 100}), indices({300, 150}, 100)}, FN(take_along_axis(x[0], x[1], 1)), {300, 150}, kF32, kExact, kCpuOnly},
      {"large_random_uniform", {}, FN(random_uniform({3, 3001})), {3, 3001}, kF32, kExact, kNoGrad},
      {"large_grouped_matmul_tiles", {uni({150, 70}), uni({5, 90, 70})}, FN(grouped_matmul(x[0], x[1], offsets({0, 40, 40, 100, 101, 150}), true)), {150, 90}, kF32, kLargeSum, kCpuOnly},
      {"large_grouped_matmul_w_kn", {uni({130, 66}), uni({3, 66, 80})}, FN(grouped_matmul(x[0], x[1], offsets({0, 65, 65, 130}))), {130, 80}, kF32, kLargeSum, kCpuOnly},
      {"large_quant_matmul_decode", {uni({2, 2048}), ints({96, 2048}, -127, 127, DType::kI8), away0({96, 64}, 0.001, 0.01)}, FN(quant_matmul(x[0], x[1], x[2])), {2, 96}, kF32, kLargeSum, kCpuOnly},
      {"large_quant_matmul_wide", {uni({3, 64}), ints({4101, 64}, -127, 127, DType::kI8), away0({4101, 2}, 0.001, 0.01)}, FN(quant_matmul(x[0], x[1], x[2])), {3, 4101}, kF32, kLargeSum, kCpuOnly},
      {"large_quant_matmul_rows", {uni({40, 256}), ints({70, 256}, -20, 20, DType::kI8), away0({70, 8}, 0.001, 0.01)}, FN(quant_matmul(x[0], x[1], x[2])), {40, 70}, kF32, kLargeSum, kCpuOnly},
      {"large_grouped_matmul_decode", {uni({2, 300}), uni({8, 96, 300})}, FN(grouped_matmul(x[0], x[1], offsets({0, 0, 1, 1, 1, 2, 2, 2, 2}), true)), {2, 96}, kF32, kLargeSum, kCpuOnly},
      {"large_dropout", {uni({70, 131})}, FN(dropout(x[0], 0.1)), {70, 131}, kF32, kArith, kCpuOnly, true},
      {"large_dropout_of_transposed_view", {uni({70, 131})}, FN(dropout(transpose(x[0]), 0.4)), {131, 70}, kF32, kArith, kCpuOnly, true},
      {"large_attention_gqa_causal_T70", {uni({2, 4, 70, 8}), uni({2, 2, 70, 8}), uni({2, 2, 70, 8})}, FN(attention(x[0], x[1], x[2])), {2, 4, 70, 8}, kF32, kMatmul, kCpuOnly},
      {"large_attention_gqa_causal_T66_S72", {uni({2, 4, 66, 8}), uni({2, 2, 72, 8}), uni({2, 2, 72, 8})}, FN(attention(x[0], x[1], x[2])), {2, 4, 66, 8}, kF32, kMatmul, kCpuOnly},
      {"large_attention_gqa_noncausal_T70", {uni({2, 4, 70, 8}), uni({2, 2, 70, 8}), uni({2, 2, 70, 8})}, FN(attention(x[0], x[1], x[2], {.causal = false})), {2, 4, 70, 8}, kF32, kMatmul, kCpuOnly},
      {"large_attention_mqa_causal_T70", {uni({2, 4, 70, 8}), uni({2, 1, 70, 8}), uni({2, 1, 70, 8})}, FN(attention(x[0], x[1], x[2])), {2, 4, 70, 8}, kF32, kMatmul, kCpuOnly},
      {"large_attention_mqa_noncausal_T67_S70", {uni({2, 4, 67, 8}), uni({2, 1, 70, 8}), uni({2, 1, 70, 8})}, FN(attention(x[0], x[1], x[2], {.causal = false})), {2, 4, 67, 8}, kF32, kMatmul, kCpuOnly},
      {"large_attention_mha_causal_T65_S70", {uni({2, 4, 65, 8}), uni({2, 4, 70, 8}), uni({2, 4, 70, 8})}, FN(attention(x[0], x[1], x[2])), {2, 4, 65, 8}, kF32, kMatmul, kCpuOnly},
      {"large_attention_mha_noncausal_T70", {uni({2, 4, 70, 8}), uni({2, 4, 70, 8}), uni({2, 4, 70, 8})}, FN(attention(x[0], x[1], x[2], {.causal = false})), {2, 4, 70, 8}, kF32, kMatmul, kCpuOnly},
      {"large_attention_mqa_causal_T130_S140", {uni({1, 2, 130, 8}), uni({1, 1, 140, 8}), uni({1, 1, 140, 8})}, FN(attention(x[0], x[1], x[2])), {1, 2, 130, 8}, kF32, kMatmul, kCpuOnly},
      {"large_attention_permuted_heads_T70", {uni({2, 70, 4, 8}), uni({2, 70, 2, 8}), uni({2, 70, 2, 8})}, attention_bthd, {2, 4, 70, 8}, kF32, kMatmul, kCpuOnly},
  };
}

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> all;
    for (auto rows : {&unary_rows, &binary_rows, &comparisons_rows, &number_operators_rows, &reductions_rows,
                      &prefix_sums_rows, &shape_rows, &matmul_rows, &leaves_rows, &composites_rows,
                      &large_rows, &nn_indexing_rows, &nn_softmax_rows, &nn_losses_rows, &nn_normalisation_rows,
                      &nn_randomness_rows, &nn_conv_rows, &nn_attention_rows, &nn_activations_rows, &nn_large_rows}) {
      std::vector<OpCase> section = rows();
      all.insert(all.end(), std::make_move_iterator(section.begin()), std::make_move_iterator(section.end()));
    }
    return all;
  }();
  return cases;
}

std::vector<OpCase> grad_cases() {
  std::vector<OpCase> out;
  for (const OpCase& c : op_cases())
    if (c.grad != kNoGrad) out.push_back(c);
  return out;
}

}  // namespace
}  // namespace tg::op_test
// clang-format on
