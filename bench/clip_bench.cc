// Benchmark: CLIP ViT-B/32 (openai/clip-vit-base-patch32's shapes, random weights: a text tower
// of 12 layers, width 512, 8 heads, 77 positions; an image tower of 12 layers, width 768, 12
// heads over 224 × 224 images in 32 × 32 patches, 50 tokens; projections to 512).
//   clip_infer  zero-shot scoring: logits_per_image of a batch of images against as many
//               captions of 77 tokens. 64 of each on a GPU, 4 on the CPU.
//   clip_train  one AdamW step on CLIP's contrastive loss over image-caption pairs. 32 pairs on
//               a GPU, 2 on the CPU.
// Under bf16 the inference program holds the weights in bf16 (as load({.dtype = kBF16}) does);
// training keeps f32 masters under Precision::kBf16. The peer is bench/clip_peer.py (Hugging
// Face's CLIPModel on the same shapes). Prints, in the torch_peer.py format:
//   <workload> tg_<fp32|bf16> <ms> ms/step <pairs/s> pairs/s
//
//   ./clip_bench [cpu|cuda] [fp32|bf16] [infer,train]
#include <tensorgrad/tensorgrad.h>

#include "timing.h"

#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int64_t kTokens = 77;

struct Batch {
  std::vector<float> pixels;
  std::vector<int32_t> ids, mask;
};

// Random images and captions, each caption ending in the end-of-text token (where it pools).
Batch batch_of(int64_t n, const tg::nn::ClipConfig& c) {
  std::mt19937 rng(0);
  std::normal_distribution<float> pixel(0.f, 1.f);
  std::uniform_int_distribution<int32_t> token(0, c.text.eos_id - 2);
  Batch b;
  b.pixels.resize(static_cast<size_t>(n * 3 * 224 * 224));
  for (float& v : b.pixels) v = pixel(rng);
  for (int64_t i = 0; i < n * kTokens; ++i)
    b.ids.push_back(i % kTokens == kTokens - 1 ? c.text.eos_id : token(rng));
  b.mask.assign(b.ids.size(), 1);
  return b;
}

void report(const char* workload, bool bf16, double sec, int64_t batch) {
  std::printf("%-14s %-10s %10.3f ms/step %10.1f pairs/s\n", workload, bf16 ? "tg_bf16" : "tg_fp32",
              sec * 1e3, static_cast<double>(batch) / sec);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string where = argc > 1 ? argv[1] : "cpu", precision = argc > 2 ? argv[2] : "fp32";
  const std::string which = argc > 3 ? argv[3] : "infer,train";
  if ((where != "cpu" && where != "cuda") || (precision != "fp32" && precision != "bf16")) {
    std::fprintf(stderr, "usage: clip_bench [cpu|cuda] [fp32|bf16] [infer,train]\n");
    return 2;
  }
  const bool gpu = where == "cuda", bf16 = precision == "bf16";
  const tg::Device device = gpu ? tg::Device::cuda() : tg::Device::cpu();
  const tg::Precision prec = bf16 ? tg::Precision::kBf16 : tg::Precision::kFp32;
  const int warm = gpu ? 5 : 1, iters = gpu ? 20 : 2;
  const tg::nn::ClipConfig config{};  // ViT-B/32's sizes are ClipConfig's defaults
  const auto inputs = [](int64_t n) {
    return std::vector<tg::InputSpec>{{"pixels", {n, 3, 224, 224}, tg::DType::kF32},
                                      {"ids", {n, kTokens}, tg::DType::kI32},
                                      {"mask", {n, kTokens}, tg::DType::kI32}};
  };
  for (const bool train : {false, true}) {
    if (which.find(train ? "train" : "infer") == std::string::npos) continue;
    const int64_t n = train ? (gpu ? 32 : 2) : (gpu ? 64 : 4);
    tg::nn::Clip model(config);
    const auto logits = [&](tg::Tensor x, tg::Tensor ids, tg::Tensor mask) {
      return model.logits_per_image(model.image_features(x), model.text_features(ids, mask));
    };
    const Batch b = batch_of(n, config);  // Feeds borrow their data: it must outlive them
    const tg::Feeds feeds{{"pixels", b.pixels}, {"ids", b.ids}, {"mask", b.mask}};
    if (!train) {
      if (bf16) model.store_params_as(tg::DType::kBF16);
      tg::Program p =
          tg::compile_forward(model, logits, {.inputs = inputs(n), .device = device, .precision = prec});
      p.init_params(0);
      report("clip_infer", bf16, median_seconds_per_step([&] { p.run(feeds); }, warm, iters), n);
      continue;
    }
    tg::Program p = tg::compile_train(
        model,
        [&](tg::Tensor x, tg::Tensor ids, tg::Tensor mask) {
          return tg::nn::Clip::contrastive_loss(logits(x, ids, mask));
        },
        {.inputs = inputs(n), .optimizer = tg::AdamW{.lr = 1e-5}, .device = device, .precision = prec});
    p.init_params(0);
    report("clip_train", bf16, median_seconds_per_step([&] { p.step(feeds); }, warm, iters), n);
    std::printf("%-14s %-10s planned peak %.0f MiB\n", "clip_train", bf16 ? "tg_bf16" : "tg_fp32",
                static_cast<double>(p.memory_report().planned_peak()) / (1 << 20));
  }
  return 0;
}
