// A program outside the tensorgrad tree: trains a one-parameter model y = w·x to w = 3.
#include <tensorgrad/tensorgrad.h>

#include <cmath>
#include <cstdio>

struct Scale : tg::Module {
  tg::Param w{*this, "w", {1}, tg::init::zeros()};
};

int main() {
  Scale model;
  auto train = tg::compile_train(
      model, [&](tg::Tensor x, tg::Tensor y) { return tg::mean(tg::pow(x * model.w - y, 2)); },
      {.inputs = {{"x", {4}}, {"y", {4}}}, .optimizer = tg::SGD{.lr = 0.05}});
  std::vector<float> x{1, 2, 3, 4}, y{3, 6, 9, 12};
  for (int i = 0; i < 200; ++i) train.step({{"x", x}, {"y", y}});
  const float w = train.download_params().at("w").f32()[0];
  std::printf("consumer: learned w = %.4f (want 3)\n", static_cast<double>(w));
  return std::fabs(w - 3.0f) < 1e-3f ? 0 : 1;
}
