// Loss scaling and skipped steps as graph nodes (see loss_scale.h).
#include "optim/loss_scale.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ir/api_util.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/functional.h"

namespace tg::optim {

std::optional<LossScaling> resolve_loss_scaling(const std::optional<LossScaling>& given, bool f16) {
  const LossScaling o = given.value_or(LossScaling{.enabled = f16});
  if (!o.enabled) return std::nullopt;
  auto fail = [](const char* field, const char* want, double got) {
    throw InputError(std::string("[TrainOptions] loss_scaling.") + field + " must be " + want + ", got " +
                     std::to_string(got));
  };
  // At least 1: 1/scale then never overflows f32, so the scaled gradients (which the
  // finiteness check reads) are finite exactly when the unscaled ones are.
  if (!(o.init_scale >= 1 && o.init_scale <= 3.4028234663852886e38))
    fail("init_scale", ">= 1 and at most the largest f32", o.init_scale);
  if (!(std::isfinite(o.growth_factor) && o.growth_factor >= 1))
    fail("growth_factor", "finite and >= 1", o.growth_factor);
  if (!(o.backoff_factor > 0 && o.backoff_factor <= 1)) fail("backoff_factor", "in (0, 1]", o.backoff_factor);
  // The count of good steps is an f32 state: exact up to 2^24.
  if (o.growth_interval < 1 || o.growth_interval > (int64_t{1} << 24))
    fail("growth_interval", "in [1, 2^24]", static_cast<double>(o.growth_interval));
  return o;
}

LossScale loss_scale(ir::Graph& g, const LossScaling& o) {
  const Tensor stored = state(g, kLossScaleState, {});
  const Tensor value = where(eq(stored, 0.0), o.init_scale, stored);
  // A scale that overflows f32 stays at the largest finite one (the gradients then overflow
  // and it backs off again); backing off stops at 1 (see resolve_loss_scaling).
  return {stored.id(), value.id(), (1.0 / value).id(),
          minimum(value * o.growth_factor, 3.4028234663852886e38).id(),
          maximum(value * o.backoff_factor, 1.0).id()};
}

std::vector<int32_t> unscale(ir::Graph& g, std::vector<int32_t>& grads, const LossScale& ls) {
  std::vector<int32_t> before = grads;
  const Tensor factor(&g, ls.unscale);
  // In the order the backward made the gradients (node ids), which ZeRO-1's buckets follow.
  std::vector<size_t> order(grads.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return before[a] < before[b]; });
  for (size_t i : order)
    if (grads[i] >= 0) grads[i] = (Tensor(&g, grads[i]) * factor).id();
  return before;
}

Tensor append_skip_nonfinite(ir::Graph& g, std::span<const ParamGrad> params, bool all_ranks) {
  const Loc loc = Loc::current();
  Tensor acc;
  for (const ParamGrad& p : params) {
    const Tensor z = sum(Tensor(&g, p.grad) * 0.0, {}, false, loc);
    acc = acc.valid() ? acc + z : z;
  }
  if (!acc.valid()) acc = full({}, 0.0, DType::kF32, loc);
  if (all_ranks) {  // each rank saw its part only: every rank must skip, or none
    const int32_t sums = ir::emit(g, ir::make_node(ir::Op::kAllReduce, {acc.id()}, loc)).id();
    acc = ir::result(g, sums, 0, loc);
  }
  const Tensor ok = eq(acc, 0.0, loc);
  for (ir::Graph::Update& u : g.updates) {
    const Tensor target(&g, u.target);
    u.value = where(broadcast_to(ok, target.shape(), loc), Tensor(&g, u.value), target, loc).id();
  }
  return ok;
}

std::map<std::string, HostTensor> with_loss_scale_state(std::map<std::string, HostTensor> moments,
                                                        bool scaling) {
  for (const char* name : {kLossScaleState, kLossScaleGoodSteps}) {
    if (!scaling)
      moments.erase(name);
    else if (moments.count(name) == 0)
      moments.emplace(name, HostTensor(DType::kF32, {1}));
  }
  return moments;
}

void append_loss_scale_update(ir::Graph& g, const LossScale& ls, const Tensor& finite, const LossScaling& o) {
  // good' = finite ? good + 1 : 0; at growth_interval the scale grows and the count restarts.
  const Tensor good = state(g, kLossScaleGoodSteps, {});
  const Tensor counted = where(finite, good + 1.0, 0.0);
  const Tensor grow = ge(counted, static_cast<double>(o.growth_interval));
  const Tensor next =
      where(finite, where(grow, Tensor(&g, ls.grown), Tensor(&g, ls.value)), Tensor(&g, ls.backed_off));
  g.updates.push_back({ls.stored, next.id()});
  g.updates.push_back({good.id(), where(grow, 0.0, counted).id()});
}

}  // namespace tg::optim
