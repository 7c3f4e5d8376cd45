// Benchmark: a ViT-B/16 image classifier (224 × 224 images in 16 × 16 patches: 197 tokens, width
// 768, 12 layers of 12 heads, MLP 3072, 1000 labels; random weights), the shapes of
// google/vit-base-patch16-224.
//   vit_infer   inference: the logits of a batch of images. Batch 64 on a GPU, 4 on the CPU.
//   vit_train   one AdamW step fine-tuning every parameter on cross-entropy. Batch 32 on a GPU,
//               2 on the CPU.
// Under bf16 the inference program holds the weights in bf16 (as load({.dtype = kBF16}) does);
// training keeps f32 masters under Precision::kBf16. The peer is bench/vit_peer.py (Hugging
// Face's ViTForImageClassification on the same shapes). Prints, in the torch_peer.py format:
//   <workload> tg_<fp32|bf16> <ms> ms/step <images/s> img/s
//
//   ./vit_bench [cpu|cuda] [fp32|bf16] [infer,train]
#include <tensorgrad/tensorgrad.h>

#include "timing.h"

#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr tg::nn::ViTConfig kBase{.labels = 1000};

std::vector<float> images(int64_t batch) {
  std::mt19937 rng(0);
  std::normal_distribution<float> pixel(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(batch * 3 * 224 * 224));
  for (float& v : x) v = pixel(rng);
  return x;
}

void report(const char* workload, bool bf16, double sec, int64_t batch) {
  std::printf("%-14s %-10s %10.3f ms/step %10.1f img/s\n", workload, bf16 ? "tg_bf16" : "tg_fp32", sec * 1e3,
              static_cast<double>(batch) / sec);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string where = argc > 1 ? argv[1] : "cpu", precision = argc > 2 ? argv[2] : "fp32";
  const std::string which = argc > 3 ? argv[3] : "infer,train";
  if ((where != "cpu" && where != "cuda") || (precision != "fp32" && precision != "bf16")) {
    std::fprintf(stderr, "usage: vit_bench [cpu|cuda] [fp32|bf16] [infer,train]\n");
    return 2;
  }
  const bool gpu = where == "cuda", bf16 = precision == "bf16";
  const tg::Device device = gpu ? tg::Device::cuda() : tg::Device::cpu();
  const tg::Precision prec = bf16 ? tg::Precision::kBf16 : tg::Precision::kFp32;
  const int warm = gpu ? 5 : 1, iters = gpu ? 20 : 2;

  if (which.find("infer") != std::string::npos) {
    const int64_t batch = gpu ? 64 : 4;
    tg::nn::ViT model(kBase);
    if (bf16) model.store_params_as(tg::DType::kBF16);
    tg::Program p = tg::compile_forward(
        model, [&](tg::Tensor x) { return model.classify(model.hidden(x)); },
        {.inputs = {{"pixels", {batch, 3, 224, 224}, tg::DType::kF32}}, .device = device, .precision = prec});
    p.init_params(0);
    const std::vector<float> pixels = images(batch);  // Feeds borrow their data: it must outlive them
    const tg::Feeds feeds{{"pixels", pixels}};
    report("vit_infer", bf16, median_seconds_per_step([&] { p.run(feeds); }, warm, iters), batch);
  }
  if (which.find("train") != std::string::npos) {
    const int64_t batch = gpu ? 32 : 2;
    tg::nn::ViT model(kBase);
    std::vector<int32_t> labels;
    for (int64_t i = 0; i < batch; ++i) labels.push_back(static_cast<int32_t>((i * 37) % 1000));
    tg::Program train = tg::compile_train(
        model,
        [&](tg::Tensor x, tg::Tensor y) { return tg::cross_entropy(model.classify(model.hidden(x)), y); },
        {.inputs = {{"pixels", {batch, 3, 224, 224}, tg::DType::kF32}, {"labels", {batch}, tg::DType::kI32}},
         .optimizer = tg::AdamW{.lr = 1e-4},
         .device = device,
         .precision = prec});
    train.init_params(0);
    const std::vector<float> pixels = images(batch);
    const tg::Feeds feeds{{"pixels", pixels}, {"labels", labels}};
    report("vit_train", bf16, median_seconds_per_step([&] { train.step(feeds); }, warm, iters), batch);
    std::printf("%-14s %-10s planned peak %.0f MiB\n", "vit_train", bf16 ? "tg_bf16" : "tg_fp32",
                static_cast<double>(train.memory_report().planned_peak()) / (1 << 20));
  }
  return 0;
}
