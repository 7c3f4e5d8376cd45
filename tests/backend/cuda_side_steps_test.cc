// Side steps of the CUDA executable (Emitter::choose_side_steps, emit.cc): a step that nothing
// after it touches (here the loss sum of a selective scan's y, which the backward does not
// read) runs on the low-priority side stream beside the backward. The program must say so
// (describe()), and its loss and every gradient must equal, bit for bit, those of the same
// program built with side steps off (TG_CUDA_NO_SIDE), step after step, and match the reference
// backend. When a later step reads the summed value, the sum stays on the main stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <tensorgrad/tensorgrad.h>

#include "test_util.h"

namespace {

using namespace tg;

struct Scan : Module {
  Scan()
      : u(*this, "u", {2, 64, 40}),
        delta(*this, "delta", {2, 64, 40}),
        A(*this, "A", {64, 16}),
        B(*this, "B", {2, 16, 40}),
        C(*this, "C", {2, 16, 40}),
        D(*this, "D", {64}) {}
  Param u, delta, A, B, C, D;
};

struct StepsRun {
  std::vector<float> losses;
  Captures grads;
  std::string steps;
};

// Three steps of the program; the parameters move between them (plain SGD), so each step reads
// new values through the double-buffered graphs.
StepsRun run(const Device& device, bool side, bool loss_read_again) {
  if (side)
    unsetenv("TG_CUDA_NO_SIDE");
  else
    setenv("TG_CUDA_NO_SIDE", "1", 1);
  Scan m;
  Program train = compile_train(
      m,
      [&] {
        const Tensor y = selective_scan(m.u, m.delta, m.A, m.B, m.C, {.D = m.D, .delta_softplus = true}).y;
        const Tensor loss = sum(y);
        // loss_read_again: a later step reads the loss (its square joins the loss), so the
        // sum's result is needed before the end of the step.
        return loss_read_again ? loss + 1e-3f * loss * loss : loss;
      },
      {.optimizer = SGD{.lr = 1e-3}, .device = device});
  unsetenv("TG_CUDA_NO_SIDE");
  train.init_params(3);
  StepsRun r;
  r.steps = train.describe();
  for (int i = 0; i < 3; ++i) r.losses.push_back(train.step({}, {.captures = i == 2 ? &r.grads : nullptr}));
  return r;
}

// The describe() line of the first step that runs `op` ("" when none does).
std::string step_line(const std::string& steps, const std::string& op) {
  const size_t at = steps.find(op);
  if (at == std::string::npos) return "";
  const size_t begin = steps.rfind('\n', at), end = steps.find('\n', at);
  return steps.substr(begin == std::string::npos ? 0 : begin + 1,
                      end == std::string::npos ? std::string::npos : end - begin - 1);
}

TEST(CudaSideSteps, TheLossSumRunsBesideTheBackwardWithTheSameNumbers) {
  if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const StepsRun side = run(Device::cuda(), true, false), chain = run(Device::cuda(), false, false);
  const StepsRun ref = run(Device::ref(), true, false);
  EXPECT_NE(step_line(side.steps, "sum%").find("(side stream)"), std::string::npos) << side.steps;
  EXPECT_EQ(chain.steps.find("(side stream)"), std::string::npos) << chain.steps;
  ASSERT_EQ(side.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(side.losses[i], chain.losses[i]) << "step " << i;
    EXPECT_NEAR(side.losses[i], ref.losses[i], 2e-5 * std::abs(ref.losses[i]) + 1e-4) << "step " << i;
  }
  ASSERT_FALSE(ref.grads.empty());
  for (const auto& [name, t] : ref.grads) {
    if (name.rfind("grad/", 0) != 0) continue;
    ASSERT_TRUE(side.grads.count(name) && chain.grads.count(name)) << name;
    const auto a = side.grads.at(name).f32(), b = chain.grads.at(name).f32();
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << name;  // bit for bit
    EXPECT_LT(tg::testing::rel_diff(side.grads.at(name).f32(), t.f32()), 2e-5) << name;
  }
}

TEST(CudaSideSteps, ASumReadLaterStaysOnTheMainStream) {
  if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const StepsRun r = run(Device::cuda(), true, true), ref = run(Device::ref(), true, true);
  // The sum feeds the loss's square: a step after it reads it, so it stays on the chain.
  const std::string line = step_line(r.steps, "sum%");
  ASSERT_FALSE(line.empty()) << r.steps;
  EXPECT_EQ(line.find("(side stream)"), std::string::npos) << line;
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(r.losses[i], ref.losses[i], 2e-5 * std::abs(ref.losses[i]) + 1e-4) << "step " << i;
}

}  // namespace
