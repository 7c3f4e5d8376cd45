// SGD, Adam and AdamW as graph nodes, plus global-norm gradient clipping. The formulas
// and the order of operations follow torch.optim (single-tensor implementations) so the
// trajectories agree to float rounding.
#include "optim/optimizer.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "ir/api_util.h"

namespace tg::optim {

Tensor state(ir::Graph& g, const std::string& name, const Shape& shape) {
  return ir::named_leaf(g, ir::Op::kState, name, shape, DType::kF32, Loc::current());
}

namespace {

using ir::Graph;

Tensor scalar_input(Graph& g, UpdatePlan& plan, const std::string& name) {
  plan.hyper_names.push_back("__" + name);
  Tensor t = ir::named_leaf(g, ir::Op::kInput, plan.hyper_names.back(), {}, DType::kF32, Loc::current());
  plan.hyper_nodes.push_back(t.id());
  return t;
}

void write(Graph& g, const Tensor& target, const Tensor& value) {
  g.updates.push_back({target.id(), value.id()});
}

/// torch.nn.utils.clip_grad_norm_: total = ‖(‖g₁‖, …, ‖gₙ‖)‖₂; every g *= min(max/(total+1e-6), 1).
/// ranks > 1: the grads are this rank's shards, and the squares are summed over the ranks.
std::vector<Tensor> clip(Graph& g, const std::vector<Tensor>& grads, double max_norm, int ranks) {
  Tensor sumsq;
  for (const Tensor& d : grads) {
    Tensor s = sum(d * d);
    sumsq = sumsq.valid() ? sumsq + s : s;
  }
  if (ranks > 1) {
    const int32_t sums = ir::emit(g, ir::make_node(ir::Op::kAllReduce, {sumsq.id()}, Loc::current())).id();
    sumsq = ir::result(g, sums, 0, Loc::current());
  }
  Tensor coef = minimum(max_norm / (sqrt(sumsq) + 1e-6), 1.0);
  std::vector<Tensor> out;
  for (const Tensor& d : grads) out.push_back(d * coef);
  return out;
}

}  // namespace

namespace {

/// Throws InputError "[compile_train] <Optimizer>.<field> must be <rule>, got <value>" unless `ok`.
void require(bool ok, const char* optimizer, const char* field, const char* rule, double value) {
  if (ok) return;
  char text[64];
  std::snprintf(text, sizeof text, "%g", value);
  throw InputError(std::string("[compile_train] ") + optimizer + "." + field + " must be " + rule + ", got " +
                   text);
}

void require_lr_and_decay(const char* name, double lr, double weight_decay) {
  require(std::isfinite(lr) && lr >= 0, name, "lr", "finite and >= 0", lr);
  require(std::isfinite(weight_decay) && weight_decay >= 0, name, "weight_decay", "finite and >= 0",
          weight_decay);
}

template <class A>
void require_adam(const char* name, const A& a) {
  require_lr_and_decay(name, a.lr, a.weight_decay);
  require(a.beta1 >= 0 && a.beta1 < 1, name, "beta1", "in [0, 1)", a.beta1);
  require(a.beta2 >= 0 && a.beta2 < 1, name, "beta2", "in [0, 1)", a.beta2);
  require(std::isfinite(a.eps) && a.eps > 0, name, "eps", "finite and > 0", a.eps);
}

/// The settings PyTorch's optimizers would refuse, or that would silently give NaN.
void validate(const Optimizer& optimizer, std::optional<double> clip_grad_norm) {
  if (clip_grad_norm && !(std::isfinite(*clip_grad_norm) && *clip_grad_norm > 0))
    require(false, "TrainOptions", "clip_grad_norm", "finite and > 0", *clip_grad_norm);
  if (const auto* sgd = std::get_if<SGD>(&optimizer)) {
    require_lr_and_decay("SGD", sgd->lr, sgd->weight_decay);
    require(std::isfinite(sgd->momentum) && sgd->momentum >= 0, "SGD", "momentum", "finite and >= 0",
            sgd->momentum);
    require(sgd->dampening >= 0 && sgd->dampening <= 1, "SGD", "dampening", "in [0, 1]", sgd->dampening);
  } else if (const auto* adam = std::get_if<Adam>(&optimizer)) {
    require_adam("Adam", *adam);
  } else if (const auto* adamw = std::get_if<AdamW>(&optimizer)) {
    require_adam("AdamW", *adamw);
  }
}

}  // namespace

bool decays(const Optimizer& optimizer, const ParamGrad& p) {
  if (const auto* sgd = std::get_if<SGD>(&optimizer)) return sgd->weight_decay != 0 && p.decay;
  if (const auto* adam = std::get_if<Adam>(&optimizer)) return adam->weight_decay != 0 && p.decay;
  if (const auto* adamw = std::get_if<AdamW>(&optimizer)) {
    if (adamw->weight_decay == 0) return false;
    return adamw->decay_filter && !p.decay_decided ? adamw->decay_filter(p.name) : p.decay;
  }
  return false;  // GradientsOnly
}

UpdatePlan append_update(Graph& g, std::span<const ParamGrad> params, const Optimizer& optimizer,
                         std::optional<double> clip_grad_norm, int ranks) {
  validate(optimizer, clip_grad_norm);
  UpdatePlan plan;
  if (std::holds_alternative<GradientsOnly>(optimizer)) {
    if (clip_grad_norm)
      throw InputError(
          "[compile_train] clip_grad_norm needs an update: with tg::GradientsOnly the gradients are returned "
          "as computed");
    return plan;
  }
  std::vector<Tensor> grads;
  for (const ParamGrad& p : params) grads.emplace_back(&g, p.grad);
  if (clip_grad_norm) {
    if (*clip_grad_norm <= 0) throw Error("[compile_train] clip_grad_norm must be positive");
    if (!grads.empty()) grads = clip(g, grads, *clip_grad_norm, ranks);
  }

  if (const auto* sgd = std::get_if<SGD>(&optimizer)) {
    if (sgd->nesterov && (sgd->momentum <= 0 || sgd->dampening != 0))
      throw Error("[SGD] nesterov needs momentum > 0 and dampening = 0 (as in PyTorch)");
    Tensor lr = scalar_input(g, plan, "lr");
    // First step: buf = g. Later: buf = momentum·buf + (1-dampening)·g. Both are
    // buf = keep·buf + gain·g with (keep, gain) fed per step.
    Tensor keep = sgd->momentum != 0 ? scalar_input(g, plan, "momentum_keep") : Tensor();
    Tensor gain = sgd->momentum != 0 ? scalar_input(g, plan, "momentum_gain") : Tensor();
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor p(&g, params[i].param);
      Tensor d = grads[i];
      if (decays(optimizer, params[i])) d = d + p * sgd->weight_decay;
      if (sgd->momentum != 0) {
        Tensor buf = state(g, "sgd.momentum." + params[i].name, p.shape());
        Tensor new_buf = buf * keep + d * gain;
        write(g, buf, new_buf);
        d = sgd->nesterov ? d + new_buf * sgd->momentum : new_buf;
      }
      write(g, p, p - lr * d);
    }
    return plan;
  }

  // Adam and AdamW share the moments and the bias-corrected step:
  //   m = β1 m + (1-β1) g;  v = β2 v + (1-β2) g²
  //   p -= (lr/(1-β1ᵗ)) · m / (√v / √(1-β2ᵗ) + eps)
  const bool decoupled = std::holds_alternative<AdamW>(optimizer);
  const Adam a = decoupled ? Adam{std::get<AdamW>(optimizer).lr, std::get<AdamW>(optimizer).beta1,
                                  std::get<AdamW>(optimizer).beta2, std::get<AdamW>(optimizer).eps,
                                  std::get<AdamW>(optimizer).weight_decay}
                           : std::get<Adam>(optimizer);
  Tensor step_size = scalar_input(g, plan, "step_size");                         // lr / (1-β1ᵗ)
  Tensor bc2_sqrt = scalar_input(g, plan, "bias_correction2_sqrt");              // √(1-β2ᵗ)
  Tensor shrink = decoupled ? scalar_input(g, plan, "decay_shrink") : Tensor();  // 1 - lr·wd
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor p(&g, params[i].param);
    Tensor d = grads[i];
    const bool decay = decays(optimizer, params[i]);
    if (!decoupled && decay) d = d + p * a.weight_decay;
    Tensor m = state(g, "adam.m." + params[i].name, p.shape());
    Tensor v = state(g, "adam.v." + params[i].name, p.shape());
    Tensor new_m = m * a.beta1 + d * (1.0 - a.beta1);
    Tensor new_v = v * a.beta2 + d * d * (1.0 - a.beta2);
    write(g, m, new_m);
    write(g, v, new_v);
    Tensor base = decoupled && decay ? p * shrink : p;
    write(g, p, base - step_size * new_m / (sqrt(new_v) / bc2_sqrt + a.eps));
  }
  return plan;
}

std::vector<float> hyper_values(const Optimizer& optimizer, int64_t t, double lr) {
  if (std::holds_alternative<GradientsOnly>(optimizer)) return {};
  if (const auto* sgd = std::get_if<SGD>(&optimizer)) {
    std::vector<float> v{static_cast<float>(lr)};
    if (sgd->momentum != 0) {
      v.push_back(t == 1 ? 0.0f : static_cast<float>(sgd->momentum));
      v.push_back(t == 1 ? 1.0f : static_cast<float>(1.0 - sgd->dampening));
    }
    return v;
  }
  const bool decoupled = std::holds_alternative<AdamW>(optimizer);
  const double beta1 = decoupled ? std::get<AdamW>(optimizer).beta1 : std::get<Adam>(optimizer).beta1;
  const double beta2 = decoupled ? std::get<AdamW>(optimizer).beta2 : std::get<Adam>(optimizer).beta2;
  const double td = static_cast<double>(t);
  std::vector<float> v{static_cast<float>(lr / (1.0 - std::pow(beta1, td))),
                       static_cast<float>(std::sqrt(1.0 - std::pow(beta2, td)))};
  if (decoupled) v.push_back(static_cast<float>(1.0 - lr * std::get<AdamW>(optimizer).weight_decay));
  return v;
}

double base_lr(const Optimizer& optimizer) {
  return std::visit(
      [](const auto& o) {
        if constexpr (std::is_same_v<std::decay_t<decltype(o)>, GradientsOnly>)
          return 0.0;
        else
          return o.lr;
      },
      optimizer);
}

std::string describe(const Optimizer& optimizer) {
  auto num = [](double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", v);
    return std::string(text);
  };
  if (const auto* sgd = std::get_if<SGD>(&optimizer))
    return "SGD(momentum=" + num(sgd->momentum) + ", dampening=" + num(sgd->dampening) +
           ", weight_decay=" + num(sgd->weight_decay) + ", nesterov=" + (sgd->nesterov ? "true" : "false") +
           ")";
  auto adam = [&](const char* name, const auto& a) {
    return std::string(name) + "(beta1=" + num(a.beta1) + ", beta2=" + num(a.beta2) + ", eps=" + num(a.eps) +
           ", weight_decay=" + num(a.weight_decay) + ")";
  };
  if (const auto* a = std::get_if<Adam>(&optimizer)) return adam("Adam", *a);
  if (const auto* a = std::get_if<AdamW>(&optimizer)) return adam("AdamW", *a);
  return "";
}

}  // namespace tg::optim
