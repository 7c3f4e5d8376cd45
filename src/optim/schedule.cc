// Learning-rate schedules: plain functions of the step index, evaluated on the host each
// step and fed to the program as a scalar (so they never rebuild it).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "tensorgrad/errors.h"
#include "tensorgrad/optim.h"

namespace tg::lr {

Schedule constant() {
  return [](int64_t) { return 1.0; };
}

Schedule linear(double start_factor, double end_factor, int64_t total_steps) {
  if (total_steps <= 0) throw Error("[lr::linear] total_steps must be positive");
  return [=](int64_t t) {
    const double frac = static_cast<double>(std::min(t, total_steps)) / static_cast<double>(total_steps);
    return start_factor + (end_factor - start_factor) * frac;
  };
}

Schedule cosine(int64_t total_steps, double min_factor) {
  if (total_steps <= 0) throw Error("[lr::cosine] total_steps must be positive");
  return [=](int64_t t) {
    const double frac = static_cast<double>(std::min(t, total_steps)) / static_cast<double>(total_steps);
    return min_factor + (1.0 - min_factor) * (1.0 + std::cos(std::numbers::pi * frac)) / 2.0;
  };
}

Schedule warmup(int64_t steps, Schedule after) {
  if (steps <= 0) throw Error("[lr::warmup] steps must be positive");
  if (!after) after = constant();
  return [=](int64_t t) {
    return t < steps ? static_cast<double>(t + 1) / static_cast<double>(steps) : after(t - steps);
  };
}

Schedule step(int64_t step_size, double gamma) {
  if (step_size <= 0) throw Error("[lr::step] step_size must be positive");
  return [=](int64_t t) { return std::pow(gamma, static_cast<double>(t / step_size)); };
}

Schedule multi_step(std::vector<int64_t> milestones, double gamma) {
  std::sort(milestones.begin(), milestones.end());
  return [=](int64_t t) {
    const auto passed = std::upper_bound(milestones.begin(), milestones.end(), t) - milestones.begin();
    return std::pow(gamma, static_cast<double>(passed));
  };
}

}  // namespace tg::lr
