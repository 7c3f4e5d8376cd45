// Optimizers, gradient clipping and learning-rate schedules. The optimizer is part of the
// compiled program (its update is graph nodes, its moments are persistent state); the
// learning rate and bias corrections are scalar inputs fed on each step, so changing the lr
// or following a schedule never rebuilds anything. Defaults and update rules are exactly
// those of PyTorch's torch.optim classes of the same name, with one deliberate difference:
// weight decay (SGD's and Adam's L2 term as well as AdamW's decoupled decay) applies only to
// parameters whose decay flag is set — by default matrices, not biases, norm gains or
// constant-initialised parameters. Give every Param `{.decay = true}` for PyTorch's
// decay-everything behaviour.
#pragma once
#include <cstdint>
#include <functional>
#include <string_view>
#include <variant>
#include <vector>

namespace tg {

/// torch.optim.SGD: g += wd·p; buf = momentum·buf + (1-dampening)·g (buf = g on the first
/// step); g = nesterov ? g + momentum·buf : buf; p -= lr·g.
struct SGD {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

/// torch.optim.Adam (L2 penalty: g += wd·p before the moments).
/// m = β1 m + (1-β1) g; v = β2 v + (1-β2) g²; p -= lr/(1-β1ᵗ) · m / (√v/√(1-β2ᵗ) + eps).
struct Adam {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

/// torch.optim.AdamW: decoupled decay p *= 1 - lr·wd, then Adam's step without the penalty.
/// Decay applies to parameters whose ParamOptions::decay flag is set (by default: rank ≥ 2
/// and not constant-initialised); `decay_filter`, if given, decides by parameter name instead.
struct AdamW {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  std::function<bool(std::string_view name)> decay_filter = {};
};

/// No update: each step computes the loss and every parameter's gradient and leaves the
/// parameters as they are. The gradients are outputs of the step, kept on the device; read
/// them with StepOptions::captures ("grad/<param path>", no second program variant is
/// prepared for them). For your own update rule, gradient checks, or timing forward + backward
/// alone. There is no learning rate: set_lr throws, and clip_grad_norm is refused.
struct GradientsOnly {};

using Optimizer = std::variant<SGD, Adam, AdamW, GradientsOnly>;

/// A learning-rate schedule: step index (0 for the first step) → factor applied to the
/// optimizer's lr. Any callable works; the factories below match PyTorch's schedulers.
using Schedule = std::function<double(int64_t step)>;

namespace lr {
Schedule constant();
/// torch LinearLR: factor goes linearly from start_factor to end_factor over total_steps, then stays.
Schedule linear(double start_factor, double end_factor, int64_t total_steps);
/// torch CosineAnnealingLR (closed form): min_factor + (1-min_factor)(1+cos(π t/T))/2,
/// held at min_factor after T steps (PyTorch would start rising again).
Schedule cosine(int64_t total_steps, double min_factor = 0.0);
/// Linear warmup (step t < steps: (t+1)/steps), then `after` from its own step 0.
Schedule warmup(int64_t steps, Schedule after = constant());
/// torch StepLR: gamma^⌊t/step_size⌋.
Schedule step(int64_t step_size, double gamma = 0.1);
/// torch MultiStepLR: gamma^(number of milestones ≤ t).
Schedule multi_step(std::vector<int64_t> milestones, double gamma = 0.1);
}  // namespace lr

}  // namespace tg
