// Symbolic tensors and the ops a model is written with.
//
// A `Tensor` is a handle to one node of the graph being traced by compile_train /
// compile_forward: writing `relu(x * w + b)` records nodes, it computes nothing. Every op
// infers and checks shapes and dtypes on the spot and records the caller's file:line, so a
// mistake throws `tg::ShapeError` pointing at the user's code.
//
// Broadcasting follows NumPy; scalars mix with tensors (`2.0f * x + 1`). Arithmetic
// promotes bool < i32 < f32 like PyTorch; math functions (exp, log, …) and `/` promote
// integers to f32.
#pragma once
#include <initializer_list>
#include <optional>
#include <source_location>
#include <span>
#include <type_traits>
#include <vector>

#include "tensorgrad/dtype.h"

namespace tg {
namespace ir {
class Graph;
}
namespace backend {
class Executable;
}

class Tensor {
 public:
  Tensor() = default;
  Tensor(ir::Graph* graph, int32_t id);

  const Shape& shape() const;
  DType dtype() const;
  int64_t rank() const { return static_cast<int64_t>(shape().size()); }
  int64_t numel() const { return tg::numel(shape()); }
  /// Extent of one axis; negative axes count from the end.
  int64_t size(int64_t axis) const;
  bool valid() const { return graph_ != nullptr; }

  ir::Graph* graph() const { return graph_; }
  int32_t id() const { return id_; }
  /// The serial number of the graph this tensor was made in (graphs are numbered when
  /// created, so a tensor kept from a finished trace is recognised without touching it).
  uint64_t graph_serial() const { return serial_; }

 private:
  ir::Graph* graph_ = nullptr;
  int32_t id_ = -1;
  uint64_t serial_ = 0;
};

using Loc = std::source_location;

/// An op operand: a tensor (or anything convertible to one, such as a module parameter) or
/// a plain number. It also remembers where in the user's code it was written, which is how
/// C++ operators (which cannot take a defaulted location argument) report file:line.
class Arg {
 public:
  template <class T>
  requires std::is_convertible_v<const T&, Tensor> Arg(const T& t, Loc loc = Loc::current())
      : tensor_(t), loc_(loc) {}  // NOLINT: implicit
  template <class T>
  requires std::is_arithmetic_v<T> Arg(T v, Loc loc = Loc::current())  // NOLINT: implicit
      : scalar_(static_cast<double>(v)), integral_(std::is_integral_v<T>), loc_(loc) {}

  bool is_tensor() const { return tensor_.valid(); }
  const Tensor& tensor() const { return tensor_; }
  double scalar() const { return scalar_; }
  bool scalar_is_integral() const { return integral_; }
  const Loc& loc() const { return loc_; }

 private:
  Tensor tensor_;
  double scalar_ = 0;
  bool integral_ = false;
  Loc loc_;
};

// ---- elementwise unary -------------------------------------------------------------
Tensor neg(const Tensor& x, Loc loc = Loc::current());
Tensor abs(const Tensor& x, Loc loc = Loc::current());
Tensor sign(const Tensor& x, Loc loc = Loc::current());
Tensor exp(const Tensor& x, Loc loc = Loc::current());
Tensor log(const Tensor& x, Loc loc = Loc::current());
Tensor sqrt(const Tensor& x, Loc loc = Loc::current());
Tensor rsqrt(const Tensor& x, Loc loc = Loc::current());
Tensor sin(const Tensor& x, Loc loc = Loc::current());
Tensor cos(const Tensor& x, Loc loc = Loc::current());
Tensor tanh(const Tensor& x, Loc loc = Loc::current());
Tensor sigmoid(const Tensor& x, Loc loc = Loc::current());
Tensor relu(const Tensor& x, Loc loc = Loc::current());
Tensor erf(const Tensor& x, Loc loc = Loc::current());
Tensor log1p(const Tensor& x, Loc loc = Loc::current());
Tensor reciprocal(const Tensor& x, Loc loc = Loc::current());
Tensor logical_not(const Tensor& x, Loc loc = Loc::current());
/// Identity in the forward pass; no gradient flows through it.
Tensor stop_gradient(const Tensor& x, Loc loc = Loc::current());
/// Converts to another dtype (f32 → i32 truncates toward zero; anything → bool is `!= 0`).
Tensor cast(const Tensor& x, DType to, Loc loc = Loc::current());

// ---- elementwise binary (NumPy broadcasting; either side may be a number) -----------
Tensor add(const Arg& a, const Arg& b, Loc loc = Loc::current());
Tensor sub(const Arg& a, const Arg& b, Loc loc = Loc::current());
Tensor mul(const Arg& a, const Arg& b, Loc loc = Loc::current());
Tensor div(const Arg& a, const Arg& b, Loc loc = Loc::current());
Tensor pow(const Arg& a, const Arg& b, Loc loc = Loc::current());
Tensor maximum(const Arg& a, const Arg& b, Loc loc = Loc::current());
Tensor minimum(const Arg& a, const Arg& b, Loc loc = Loc::current());
Tensor eq(const Arg& a, const Arg& b, Loc loc = Loc::current());
Tensor ne(const Arg& a, const Arg& b, Loc loc = Loc::current());
Tensor lt(const Arg& a, const Arg& b, Loc loc = Loc::current());
Tensor le(const Arg& a, const Arg& b, Loc loc = Loc::current());
Tensor gt(const Arg& a, const Arg& b, Loc loc = Loc::current());
Tensor ge(const Arg& a, const Arg& b, Loc loc = Loc::current());
Tensor logical_and(const Arg& a, const Arg& b, Loc loc = Loc::current());
Tensor logical_or(const Arg& a, const Arg& b, Loc loc = Loc::current());
/// `cond ? a : b` elementwise; cond is bool; all three broadcast together.
Tensor where(const Tensor& cond, const Arg& a, const Arg& b, Loc loc = Loc::current());

Tensor operator-(const Arg& x);
Tensor operator+(const Arg& a, const Arg& b);
Tensor operator-(const Arg& a, const Arg& b);
Tensor operator*(const Arg& a, const Arg& b);
Tensor operator/(const Arg& a, const Arg& b);
Tensor operator<(const Arg& a, const Arg& b);
Tensor operator<=(const Arg& a, const Arg& b);
Tensor operator>(const Arg& a, const Arg& b);
Tensor operator>=(const Arg& a, const Arg& b);
Tensor operator&&(const Arg& a, const Arg& b);
Tensor operator||(const Arg& a, const Arg& b);
Tensor operator!(const Arg& x);

// ---- reductions (axes may be negative; empty axes = all axes) ------------------------
using Axes = std::vector<int64_t>;
Tensor sum(const Tensor& x, Axes axes = {}, bool keepdim = false, Loc loc = Loc::current());
Tensor mean(const Tensor& x, Axes axes = {}, bool keepdim = false, Loc loc = Loc::current());
Tensor max(const Tensor& x, Axes axes = {}, bool keepdim = false, Loc loc = Loc::current());
Tensor min(const Tensor& x, Axes axes = {}, bool keepdim = false, Loc loc = Loc::current());
/// Index (i32) of the first maximum along `axis`; without an axis, over the flattened tensor.
/// NaN handling (max, min, argmax): NaNs are skipped unless every element is NaN — unlike
/// PyTorch, which propagates them; check losses with std::isfinite.
Tensor argmax(const Tensor& x, std::optional<int64_t> axis = std::nullopt, bool keepdim = false,
              Loc loc = Loc::current());
/// Inclusive prefix sum along `axis` (out[i] = x[0] + … + x[i]); `reverse` sums from the end
/// (out[i] = x[i] + … + x[n-1]). f32 or i32 (bool: cast first); the shape is kept.
Tensor cumsum(const Tensor& x, int64_t axis, bool reverse = false, Loc loc = Loc::current());

// ---- shape ---------------------------------------------------------------------------
/// One extent may be -1 (inferred).
Tensor reshape(const Tensor& x, Shape shape, Loc loc = Loc::current());
Tensor permute(const Tensor& x, Axes order, Loc loc = Loc::current());
/// Swaps two axes (by default the last two).
Tensor transpose(const Tensor& x, int64_t axis0 = -2, int64_t axis1 = -1, Loc loc = Loc::current());
Tensor broadcast_to(const Tensor& x, Shape shape, Loc loc = Loc::current());
/// Elements start, start+step, … < stop along `axis` (Python semantics: negative and
/// out-of-range start/stop are clamped; step > 0).
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t stop, int64_t step = 1,
             Loc loc = Loc::current());
Tensor concat(std::span<const Tensor> xs, int64_t axis, Loc loc = Loc::current());
Tensor concat(std::initializer_list<Tensor> xs, int64_t axis, Loc loc = Loc::current());
Tensor unsqueeze(const Tensor& x, int64_t axis, Loc loc = Loc::current());
Tensor squeeze(const Tensor& x, int64_t axis, Loc loc = Loc::current());

/// Matrix product with NumPy/PyTorch semantics: [..., m, k] @ [..., k, n] with the batch
/// axes broadcast; a 1-D operand is treated as a row (left) or column (right) vector.
Tensor matmul(const Arg& a, const Arg& b, Loc loc = Loc::current());

// ---- leaves --------------------------------------------------------------------------
/// A tensor of `shape` filled with `value`.
Tensor full(Shape shape, double value, DType dtype = DType::kF32, Loc loc = Loc::current());
Tensor zeros(Shape shape, DType dtype = DType::kF32, Loc loc = Loc::current());
Tensor ones(Shape shape, DType dtype = DType::kF32, Loc loc = Loc::current());
/// A constant with the given values (row-major).
Tensor constant(std::span<const float> values, Shape shape, Loc loc = Loc::current());
Tensor constant(std::span<const int32_t> values, Shape shape, Loc loc = Loc::current());
/// start, start+step, … < stop (PyTorch's arange). Without a dtype: i32 when all three are
/// whole numbers, else f32.
Tensor arange(double start, double stop, double step = 1, std::optional<DType> dtype = std::nullopt,
              Loc loc = Loc::current());

}  // namespace tg
