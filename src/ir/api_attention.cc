// Public attention ops (functional.h): the fused primitives (attention, attention_at) and the
// composites a sliding window, a softcap, a key mask or sinks make of them (matmul, mask,
// softmax), with self-attention under a short window in blocks.
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ir/api_util.h"
#include "tensorgrad/functional.h"

namespace tg {
using namespace ir;

namespace {

// The softmax of scores [B, Hkv, G, …, S] over the keys (the last axis), with the sinks' logits
// [Hq] (AttentionOptions::sinks; none when invalid) as one more column that is dropped after.
Tensor keys_softmax(const Tensor& scores, const Tensor& sinks, const Loc& loc) {
  if (!sinks.valid()) return softmax(scores, -1, false, loc);
  Shape column = scores.shape(), per_head(scores.rank(), 1);
  column.back() = 1;
  per_head[1] = scores.shape()[1];
  per_head[2] = scores.shape()[2];
  const Tensor sink = broadcast_to(reshape(cast(sinks, scores.dtype(), loc), per_head, loc), column, loc);
  const int64_t S = scores.shape().back();
  return slice(softmax(concat({scores, sink}, -1, loc), -1, false, loc), -1, 0, S, 1, loc);
}

// AttentionOptions::sinks checked against q [B, Hq, T, D]: f32 (or half) [Hq].
Tensor sinks_of(const std::optional<Tensor>& sinks, const Tensor& q, const char* api, const Loc& loc) {
  if (!sinks) return {};
  Arg as(*sinks, loc), aq(q, loc);
  graph_for(api, {&aq, &as}, loc);
  if ((sinks->dtype() != DType::kF32 && !is_half(sinks->dtype())) || q.rank() != 4 ||
      sinks->shape() != Shape{q.shape()[1]})
    api_fail(api,
             "sinks must be a float [Hq] (q " + shape_str(q.shape()) + "), got " + shape_str(sinks->shape()) +
                 " " + dtype_name(sinks->dtype()),
             loc);
  return *sinks;
}

// Attention written out (a sliding window, a softcap or sinks): scores q·kᵀ·scale
// [B, Hkv, G, T, S] with the G = Hq/Hkv query heads of each kv head side by side, softcapped,
// `allowed` (broadcast to that) kept and the rest −∞, softmax over the keys (and the sinks),
// then ·v. With a key mask `keys` (bool [B, S]) hidden scores are the lowest finite f32
// instead, so that a query left with no key has a finite softmax, and every hidden probability
// is then set to 0: such a query gets zeros, as from the fused primitive.
Tensor attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, Tensor allowed, double scale,
                           double softcap, const Loc& loc, const Tensor& keys = {},
                           const Tensor& sinks = {}) {
  const int64_t B = q.shape()[0], Hq = q.shape()[1], T = q.shape()[2], D = q.shape()[3];
  const int64_t Hkv = k.rank() == 4 ? k.shape()[1] : 0;
  if (k.rank() != 4 || v.rank() != 4 || k.shape()[0] != B || k.shape()[3] != D || v.shape() != k.shape() ||
      Hkv < 1 || Hq % Hkv != 0)
    api_fail("attention",
             "q [B, Hq, T, D] with k, v [B, Hkv, S, D] and Hq a multiple of Hkv, got q " +
                 shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " + shape_str(v.shape()),
             loc);
  Tensor qg = reshape(q, {B, Hkv, Hq / Hkv, T, D}, loc);
  Tensor kt = unsqueeze(transpose(k, -2, -1, loc), 2, loc);  // [B, Hkv, 1, D, S]
  Tensor scores = mul(matmul(qg, kt, loc), scale, loc);
  if (softcap > 0) scores = mul(tanh(div(scores, softcap, loc), loc), softcap, loc);
  Tensor p;
  if (keys.valid()) {
    const Tensor kept = reshape(keys, {B, 1, 1, 1, k.shape()[2]}, loc);
    allowed = allowed.valid() ? logical_and(allowed, kept, loc) : kept;
    scores = where(allowed, scores, static_cast<double>(std::numeric_limits<float>::lowest()), loc);
    p = where(allowed, keys_softmax(scores, sinks, loc), 0.0, loc);
  } else {
    if (allowed.valid()) scores = where(allowed, scores, -std::numeric_limits<double>::infinity(), loc);
    p = keys_softmax(scores, sinks, loc);
  }
  Tensor out = matmul(p, unsqueeze(v, 2, loc), loc);  // [B, Hkv, G, T, D]
  return reshape(out, {B, Hq, T, D}, loc);
}

// AttentionOptions::key_mask as the primitive reads it: bool [B, S] (nonzero kept).
Tensor key_mask_of(const std::optional<Tensor>& mask, const Tensor& q, const Tensor& k, const char* api,
                   const Loc& loc) {
  if (!mask) return {};
  Arg am(*mask, loc), aq(q, loc);
  graph_for(api, {&aq, &am}, loc);
  if (q.rank() != 4 || k.rank() != 4)
    api_fail(api,
             "q and k must be [B, H, T or S, D] with a key mask, got q " + shape_str(q.shape()) + ", k " +
                 shape_str(k.shape()),
             loc);
  const Shape want{q.shape()[0], k.shape()[2]};
  if (mask->shape() != want)
    api_fail(api, "key_mask must be [B, S] = " + shape_str(want) + ", got " + shape_str(mask->shape()), loc);
  if (mask->dtype() == DType::kBool) return *mask;
  // Comparisons read f32 and i32: other types (bf16, f16, i8) are widened first.
  const bool direct = mask->dtype() == DType::kF32 || mask->dtype() == DType::kI32;
  return ne(direct ? *mask : cast(*mask, DType::kF32, loc), 0.0, loc);
}

// Self-attention (T = S) with a window W well below T, in blocks: queries in blocks of W
// (positions iW … iW + W − 1, T padded to Tp = nb·W), each against the 2W keys from (i − 1)W
// (k and v padded with W zero rows in front) — every key a query sees lies there. Scores
// [B, Hkv, G, nb, W, 2W]: O(T·W) memory and work instead of the composite's O(T·S). Query a
// of a block sees key c of its 2W when a < c ≤ a + W (position p − W < j ≤ p), except the
// padding in front of block 0 (c < W there). Padded queries compute rows that are sliced off.
Tensor attention_banded(const Tensor& q, const Tensor& k, const Tensor& v, int64_t W, double scale,
                        double softcap, const Tensor& sinks, const Loc& loc) {
  const int64_t B = q.shape()[0], Hq = q.shape()[1], T = q.shape()[2], D = q.shape()[3];
  const int64_t Hkv = k.shape()[1], G = Hq / Hkv, nb = (T + W - 1) / W, Tp = nb * W;
  const auto padded = [&](const Tensor& x, int64_t heads, int64_t front) {  // [.., front + T + (Tp − T), D]
    std::vector<Tensor> parts;
    if (front > 0) parts.push_back(zeros({B, heads, front, D}, x.dtype(), loc));
    parts.push_back(x);
    if (Tp > T) parts.push_back(zeros({B, heads, Tp - T, D}, x.dtype(), loc));
    return parts.size() == 1 ? x : concat(std::span<const Tensor>(parts), 2, loc);
  };
  // The 2W keys of each query block: blocks i and i + 1 of the front-padded [nb + 1, W] blocks.
  const auto two_blocks = [&](const Tensor& x) {  // [B, Hkv, 1, nb, 2W, D]
    Tensor b = reshape(padded(x, Hkv, W), {B, Hkv, nb + 1, W, D}, loc);
    Tensor pair = concat({slice(b, 2, 0, nb, 1, loc), slice(b, 2, 1, nb + 1, 1, loc)}, 3, loc);
    return unsqueeze(pair, 2, loc);
  };
  Tensor qb = reshape(padded(q, Hq, 0), {B, Hkv, G, nb, W, D}, loc);
  Tensor scores = mul(matmul(qb, transpose(two_blocks(k), -2, -1, loc), loc), scale, loc);  // [.., nb, W, 2W]
  if (softcap > 0) scores = mul(tanh(div(scores, softcap, loc), loc), softcap, loc);
  Tensor a = reshape(arange(0, static_cast<double>(W), 1, DType::kI32, loc), {W, 1}, loc);
  Tensor c = arange(0, static_cast<double>(2 * W), 1, DType::kI32, loc);
  Tensor block = reshape(arange(0, static_cast<double>(nb), 1, DType::kI32, loc), {nb, 1, 1}, loc);
  Tensor band = logical_and(gt(c, a, loc), le(c, add(a, static_cast<double>(W), loc), loc), loc);  // [W, 2W]
  Tensor real = logical_or(gt(block, 0.0, loc), ge(c, static_cast<double>(W), loc), loc);  // [nb, 1, 2W]
  scores = where(logical_and(band, real, loc), scores, -std::numeric_limits<double>::infinity(), loc);
  Tensor out = matmul(keys_softmax(scores, sinks, loc), two_blocks(v), loc);  // [B, Hkv, G, nb, W, D]
  out = reshape(out, {B, Hq, Tp, D}, loc);
  return Tp > T ? slice(out, 2, 0, T, 1, loc) : out;
}

// Keys j a query at position p sees: j ≤ p, and j > p − window with a window.
Tensor visible(const Tensor& query_pos, const Tensor& key_pos, int64_t window, const Loc& loc) {
  Tensor seen = le(key_pos, query_pos, loc);
  return window > 0
             ? logical_and(seen, gt(key_pos, sub(query_pos, static_cast<double>(window), loc), loc), loc)
             : seen;
}

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, AttentionOptions options, Loc loc) {
  Arg aq(q, loc), ak(k, loc), av(v, loc);
  Graph& g = graph_for("attention", {&aq, &ak, &av}, loc);
  if (q.rank() != 4) api_fail("attention", "q must be [B, H, T, D], got " + shape_str(q.shape()), loc);
  if (options.window < 0 || options.softcap < 0)
    api_fail("attention", "window and softcap must be >= 0", loc);
  if (options.window > 0 && !options.causal)
    api_fail("attention", "a sliding window needs causal attention", loc);
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.shape().back())));
  const Tensor keys = key_mask_of(options.key_mask, q, k, "attention", loc);
  const Tensor sinks = sinks_of(options.sinks, q, "attention", loc);
  if ((options.window > 0 && k.rank() == 4 && options.window < k.shape()[2]) || options.softcap > 0 ||
      sinks.valid()) {
    if (k.rank() != 4) api_fail("attention", "k must be [B, Hkv, S, D], got " + shape_str(k.shape()), loc);
    const int64_t T = q.shape()[2], S = k.shape()[2], W = options.window;
    // Blocks when they hold fewer scores than the T × S of the composite below (not with a key
    // mask, whose keys the blocks would have to rearrange too).
    const bool same_shapes = k.shape()[0] == q.shape()[0] && k.shape()[3] == q.shape()[3] &&
                             v.shape() == k.shape() && k.shape()[1] >= 1 && q.shape()[1] % k.shape()[1] == 0;
    if (W > 0 && T == S && same_shapes && !keys.valid() && 2 * W * ((T + W - 1) / W) * W < T * S)
      return attention_banded(q, k, v, W, scale, options.softcap, sinks, loc);
    Tensor allowed;
    if (options.causal) {
      if (T > S) api_fail("attention", "a causal mask needs at least as many keys as queries", loc);
      // Query i sits at position i + S − T: [T, 1] against the keys' [S].
      Tensor query_pos = reshape(
          arange(static_cast<double>(S - T), static_cast<double>(S), 1, DType::kI32, loc), {T, 1}, loc);
      allowed =
          visible(query_pos, arange(0, static_cast<double>(S), 1, DType::kI32, loc), options.window, loc);
    }
    return attention_composite(q, k, v, allowed, scale, options.softcap, loc, keys, sinks);
  }
  Node n = make_node(Op::kAttention, {q.id(), k.id(), v.id()}, loc);
  const DType half = ir::policy_operand_dtype(q);
  if (half != DType::kF32 && ir::policy_operand_dtype(k) == half && ir::policy_operand_dtype(v) == half)
    n.inputs = {cast(q, half, loc).id(), cast(k, half, loc).id(), cast(v, half, loc).id()};
  if (keys.valid()) n.inputs.push_back(keys.id());
  n.attrs.causal = options.causal;
  n.attrs.values = {scale};
  return result(g, emit(g, std::move(n)).id(), 0, loc);
}

Tensor attention_at(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos,
                    AttentionOptions options, Loc loc) {
  Arg aq(q, loc), ak(k, loc), av(v, loc), ap(pos, loc);
  graph_for("attention_at", {&aq, &ak, &av, &ap}, loc);
  if (!options.causal) api_fail("attention_at", "attends causally over its caches: causal must be true", loc);
  if (options.window < 0 || options.softcap < 0)
    api_fail("attention_at", "window and softcap must be >= 0", loc);
  const bool windowed = options.window > 0 && k.rank() == 4 && options.window < k.shape()[2];
  if (!windowed && options.softcap == 0 && !options.key_mask && !options.sinks)
    return attention_at(q, k, v, pos, options.scale, loc);
  const Tensor keys = key_mask_of(options.key_mask, q, k, "attention_at", loc);
  const Tensor sinks = sinks_of(options.sinks, q, "attention_at", loc);
  if (q.rank() != 4 || k.rank() != 4)
    api_fail("attention_at", "q and the caches must be [B, H, T, D], [B, Hkv, S, D]", loc);
  const int64_t B = q.shape()[0], T = q.shape()[2], S = k.shape()[2];
  if (pos.dtype() != DType::kI32 || pos.shape() != Shape{B})
    api_fail("attention_at", "pos must be i32 [" + std::to_string(B) + "], got " + shape_str(pos.shape()),
             loc);
  if (T > S) api_fail("attention_at", "more new queries than cache positions", loc);
  // pos[b] + i per query, [B, 1, 1, T, 1] against the keys' [S]. The gather from an [S − T + 1]
  // table of zeros checks, as the fused kernel does, that pos[b] is in [0, S − T].
  Tensor in_range = reshape(embedding(zeros({S - T + 1, 1}, DType::kF32, loc), pos, loc), {B, 1, 1, 1}, loc);
  Tensor query_pos = add(reshape(pos, {B, 1, 1, 1, 1}, loc),
                         reshape(arange(0, static_cast<double>(T), 1, DType::kI32, loc), {T, 1}, loc), loc);
  Tensor allowed =
      visible(query_pos, arange(0, static_cast<double>(S), 1, DType::kI32, loc), options.window, loc);
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.shape().back())));
  Tensor out = attention_composite(q, k, v, allowed, scale, options.softcap, loc, keys, sinks);
  return add(out, in_range, loc);
}

Tensor attention_at(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos,
                    std::optional<double> scale, Loc loc) {
  Arg aq(q, loc), ak(k, loc), av(v, loc), ap(pos, loc);
  Graph& g = graph_for("attention_at", {&aq, &ak, &av, &ap}, loc);
  if (q.rank() != 4) api_fail("attention_at", "q must be [B, H, T, D], got " + shape_str(q.shape()), loc);
  Node n = make_node(Op::kAttentionAt, {q.id(), k.id(), v.id(), pos.id()}, loc);
  n.attrs.values = {scale.value_or(1.0 / std::sqrt(static_cast<double>(q.shape().back())))};
  return emit(g, std::move(n));
}

}  // namespace tg
