// Mixtures of experts (functional.h): the grouped product and the dispatch order it reads; the
// product over 8-bit weights.
#include <limits>
#include <string>

#include "ir/api_util.h"
#include "tensorgrad/functional.h"

namespace tg {
using namespace ir;

Tensor grouped_matmul(const Tensor& x, const Tensor& w, const Tensor& offsets, bool transpose_w, Loc loc) {
  Arg ax(x, loc), aw(w, loc), ao(offsets, loc);
  Graph& g = graph_for("grouped_matmul", {&ax, &aw, &ao}, loc);
  if (x.rank() != 2 || w.rank() != 3)
    api_fail("grouped_matmul",
             "x must be [rows, K] and w [experts, K, N] (or [experts, N, K] with transpose_w), got " +
                 shape_str(x.shape()) + " and " + shape_str(w.shape()),
             loc);
  if (offsets.dtype() != DType::kI32 || offsets.rank() != 1 || offsets.shape()[0] != w.shape()[0] + 1)
    api_fail("grouped_matmul",
             "offsets must be i32 [" + std::to_string(w.shape()[0] + 1) + "] (experts + 1), got " +
                 dtype_name(offsets.dtype()) + shape_str(offsets.shape()),
             loc);
  // A half operand (a mixture's stacked half weights) makes the product half, the other operand
  // cast to its type (matmul would compute such a pair in f32); two f32 operands follow the
  // trace's precision policy, as matmul's do.
  const DType type = is_half(w.dtype()) ? w.dtype() : is_half(x.dtype()) ? x.dtype() : DType::kF32;
  Tensor tx = cast(x, type, loc);
  Tensor tw = cast(w, type, loc);
  if (type == DType::kF32) {
    const DType half = policy_operand_dtype(tx);
    if (half != DType::kF32 && policy_operand_dtype(tw) == half) {
      tx = cast(tx, half, loc);
      tw = cast(tw, half, loc);
    }
  }
  Node n = make_node(Op::kGroupedMatmul, {tx.id(), tw.id(), offsets.id()}, loc);
  n.attrs.axes = {transpose_w ? 2 : 1};
  return emit(g, std::move(n));
}

namespace {
/// quant_matmul's x as the product reads it: cast to the precision policy's operand type.
Tensor policy_x(const Tensor& x, const Loc& loc) {
  const DType half = policy_operand_dtype(x);
  return x.dtype() == DType::kF32 && half != DType::kF32 ? cast(x, half, loc) : x;
}
}  // namespace

Tensor quant_matmul(const Tensor& x, const Tensor& q, const Tensor& scale, Loc loc) {
  Arg ax(x, loc), aq(q, loc), as(scale, loc);
  Graph& g = graph_for("quant_matmul", {&ax, &aq, &as}, loc);
  return emit(g, make_node(Op::kQuantMatmul, {policy_x(x, loc).id(), q.id(), scale.id()}, loc));
}

Tensor quant_matmul(const Tensor& x, const Tensor& q, const Tensor& scale, const Tensor& offset, Loc loc) {
  Arg ax(x, loc), aq(q, loc), as(scale, loc), ao(offset, loc);
  Graph& g = graph_for("quant_matmul", {&ax, &aq, &as, &ao}, loc);
  return emit(g, make_node(Op::kQuantMatmul, {policy_x(x, loc).id(), q.id(), scale.id(), offset.id()}, loc));
}

namespace ir {
Tensor unpack_int4(const Tensor& packed, const Shape& out, const Loc& loc) {
  const Tensor s = cast(packed, DType::kF32, loc);
  const Tensor b = where(lt(s, 0.0, loc), add(s, 256.0, loc), s, loc);
  const Tensor high = cast(cast(mul(b, 1.0 / 16, loc), DType::kI32, loc), DType::kF32, loc);
  const Tensor low = sub(b, mul(high, 16.0, loc), loc);
  Shape pair = packed.shape();
  pair.push_back(1);
  return reshape(concat({reshape(low, pair, loc), reshape(high, pair, loc)}, -1, loc), out, loc);
}

Tensor quantized_values(const Tensor& q, const Shape& out, int bits, const Loc& loc) {
  return bits == 4 ? unpack_int4(q, out, loc) : cast(reshape(q, out, loc), DType::kF32, loc);
}
}  // namespace ir

ExpertOrder sort_by_expert(const Tensor& ids, int64_t experts, Loc loc) {
  if (ids.dtype() != DType::kI32 || ids.rank() != 1)
    api_fail("sort_by_expert",
             "ids must be i32 [rows], got " + std::string(dtype_name(ids.dtype())) + shape_str(ids.shape()),
             loc);
  if (experts < 1 || experts > std::numeric_limits<int32_t>::max())
    api_fail("sort_by_expert", "experts must be in [1, 2^31 - 1], got " + std::to_string(experts), loc);
  // hit[r, e] = (ids[r] == e); its running count down the rows gives each row's place among its
  // expert's rows (a stable counting sort, with static shapes: no host round trip).
  Tensor hit =
      cast(eq(unsqueeze(ids, -1, loc), arange(0, static_cast<double>(experts), 1, DType::kI32, loc), loc),
           DType::kI32, loc);                   // [R, E]
  Tensor counts = sum(hit, {0}, false, loc);    // [E]
  Tensor ends = cumsum(counts, 0, false, loc);  // [E]
  // An id outside [0, experts) fails in this gather when the program runs.
  Tensor seen = take_along_axis(cumsum(hit, 0, false, loc), unsqueeze(ids, -1, loc), 1, loc);  // [R, 1], ≥ 1
  Tensor first = take_along_axis(sub(ends, counts, loc), ids, 0, loc);                         // [R]
  ExpertOrder order;
  order.position = add(first, sub(reshape(seen, {ids.shape()[0]}, loc), 1, loc), loc);
  order.offsets = concat({zeros({1}, DType::kI32, loc), ends}, 0, loc);
  return order;
}

}  // namespace tg
