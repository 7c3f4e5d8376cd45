// The pointwise losses and nll_loss of functional.h, composites of elementwise ops and
// reductions (cross_entropy, a fused primitive, is in api_nn.cc).
#include <string>

#include "ir/api_util.h"
#include "tensorgrad/functional.h"

namespace tg {
using namespace ir;
namespace {

Tensor reduce(const Tensor& per_element, Reduction reduction, const Loc& loc) {
  switch (reduction) {
    case Reduction::kNone: return per_element;
    case Reduction::kSum: return sum(per_element, {}, false, loc);
    case Reduction::kMean: return mean(per_element, {}, false, loc);
  }
  return per_element;
}

// Whether `from` broadcasts to exactly `to` (trailing axes equal or 1).
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t i = 1; i <= from.size(); ++i)
    if (from[from.size() - i] != 1 && from[from.size() - i] != to[to.size() - i]) return false;
  return true;
}

// prediction − target, the target broadcast to the prediction's shape (not the other way).
Tensor difference(const char* op, const Tensor& prediction, const Tensor& target, const Loc& loc) {
  Arg ap(prediction, loc), at(target, loc);
  graph_for(op, {&ap, &at}, loc);
  if (!broadcasts_to(target.shape(), prediction.shape()))
    api_fail(op,
             "target " + shape_str(target.shape()) + " must broadcast to the prediction's shape " +
                 shape_str(prediction.shape()),
             loc);
  return sub(prediction, target, loc);
}

}  // namespace

Tensor mse_loss(const Tensor& prediction, const Tensor& target, Reduction reduction, Loc loc) {
  Tensor d = difference("mse_loss", prediction, target, loc);
  return reduce(mul(d, d, loc), reduction, loc);
}

Tensor l1_loss(const Tensor& prediction, const Tensor& target, Reduction reduction, Loc loc) {
  return reduce(abs(difference("l1_loss", prediction, target, loc), loc), reduction, loc);
}

Tensor smooth_l1_loss(const Tensor& prediction, const Tensor& target, double beta, Reduction reduction,
                      Loc loc) {
  if (!(beta >= 0)) api_fail("smooth_l1_loss", "beta must be >= 0", loc);
  Tensor a = abs(difference("smooth_l1_loss", prediction, target, loc), loc);
  if (beta == 0) return reduce(a, reduction, loc);
  Tensor inner = div(mul(mul(a, a, loc), 0.5, loc), beta, loc);
  return reduce(where(lt(a, beta, loc), inner, sub(a, 0.5 * beta, loc), loc), reduction, loc);
}

Tensor huber_loss(const Tensor& prediction, const Tensor& target, double delta, Reduction reduction,
                  Loc loc) {
  if (!(delta > 0)) api_fail("huber_loss", "delta must be > 0", loc);
  Tensor a = abs(difference("huber_loss", prediction, target, loc), loc);
  Tensor inner = mul(mul(a, a, loc), 0.5, loc);
  return reduce(where(lt(a, delta, loc), inner, mul(sub(a, 0.5 * delta, loc), delta, loc), loc), reduction,
                loc);
}

Tensor binary_cross_entropy(const Tensor& p, const Tensor& target, Reduction reduction, Loc loc) {
  difference("binary_cross_entropy", p, target, loc);  // the shape checks
  Tensor log_p = maximum(log(p, loc), -100.0, loc), log_q = maximum(log1p(neg(p, loc), loc), -100.0, loc);
  Tensor t = broadcast_to(target, p.shape(), loc);
  return reduce(neg(add(mul(t, log_p, loc), mul(sub(1.0, t, loc), log_q, loc), loc), loc), reduction, loc);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        BceWithLogitsOptions options, Loc loc) {
  difference("binary_cross_entropy_with_logits", logits, target, loc);
  Tensor t = broadcast_to(target, logits.shape(), loc);
  const Tensor& w = options.pos_weight;
  if (w.valid() && !broadcasts_to(w.shape(), logits.shape()))
    api_fail("binary_cross_entropy_with_logits",
             "pos_weight " + shape_str(w.shape()) + " must broadcast to the logits' shape " +
                 shape_str(logits.shape()),
             loc);
  Tensor log_term = softplus(neg(logits, loc), loc);  // −log σ(x)
  if (w.valid()) log_term = mul(add(mul(sub(w, 1.0, loc), t, loc), 1.0, loc), log_term, loc);
  return reduce(add(mul(sub(1.0, t, loc), logits, loc), log_term, loc), options.reduction, loc);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, CrossEntropyOptions options, Loc loc) {
  Arg al(log_probs, loc), at(targets, loc);
  graph_for("nll_loss", {&al, &at}, loc);
  if (log_probs.rank() < 1) api_fail("nll_loss", "log_probs need rank >= 1", loc);
  if (targets.dtype() != DType::kI32) api_fail("nll_loss", "targets must be i32 class indices", loc);
  if (options.label_smoothing != 0.0) api_fail("nll_loss", "label_smoothing is cross_entropy's alone", loc);
  const Shape batch(log_probs.shape().begin(), log_probs.shape().end() - 1);
  if (targets.shape() != batch)
    api_fail("nll_loss",
             "targets " + shape_str(targets.shape()) +
                 " must have log_probs' shape without the class axis, " + shape_str(batch),
             loc);
  Tensor kept = ne(targets, options.ignore_index, loc);
  Tensor safe = where(kept, targets, 0, loc);  // an ignored row reads class 0, then counts 0
  Tensor picked = squeeze(take_along_axis(log_probs, unsqueeze(safe, -1, loc), -1, loc), -1, loc);
  Tensor per_row = where(kept, neg(picked, loc), 0.0, loc);
  if (options.reduction == Reduction::kMean)
    return div(sum(per_row, {}, false, loc), sum(cast(kept, DType::kF32, loc), {}, false, loc), loc);
  return reduce(per_row, options.reduction, loc);
}

}  // namespace tg
