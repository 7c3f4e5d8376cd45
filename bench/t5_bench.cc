// Benchmark: Flan-T5-base (google/flan-t5-base's shapes, random weights: 12 + 12 blocks, width
// 768, 12 heads of 64, gated-GELU feed-forward of 2048, 32 relative-position buckets, vocab
// 32128, an untied head).
//   t5_train     one AdamW step of teacher-forced fine-tuning: sources of 256 tokens, targets of
//                64. 16 pairs on a GPU, 1 on the CPU.
//   t5_generate  greedy decoding of 64 new tokens for one source of 256 tokens (tg::T5Generator:
//                the encoder once, then a KV-cached one-token step a token).
// Under bf16, training runs under Precision::kBf16 (f32 masters); decoding holds the weights in
// bf16. The peer is bench/t5_peer.py (transformers' T5ForConditionalGeneration, generate() with
// its KV cache). Prints, in the torch_peer.py format:
//   <workload> tg_<fp32|bf16> <ms> ms/step <items/s> <unit>
//
//   ./t5_bench [cpu|cuda] [fp32|bf16] [train,generate]
#include <tensorgrad/tensorgrad.h>

#include "timing.h"

#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

const tg::nn::T5Config kFlanBase{.vocab = 32128,
                                 .d_model = 768,
                                 .d_kv = 64,
                                 .d_ff = 2048,
                                 .heads = 12,
                                 .layers = 12,
                                 .decoder_layers = 12,
                                 .gated = true,
                                 .act = tg::nn::T5Activation::kGeluTanh,
                                 .tied = false,
                                 .scale_decoder_outputs = false};
constexpr int64_t kSource = 256, kTarget = 64;

std::vector<int32_t> tokens(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(3, 32000);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = id(rng);
  return v;
}

void report(const char* workload, bool bf16, double sec, double items, const char* unit) {
  std::printf("%-14s %-10s %10.3f ms/step %10.1f %s\n", workload, bf16 ? "tg_bf16" : "tg_fp32", sec * 1e3,
              items / sec, unit);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string where = argc > 1 ? argv[1] : "cpu", precision = argc > 2 ? argv[2] : "fp32";
  const std::string which = argc > 3 ? argv[3] : "train,generate";
  if ((where != "cpu" && where != "cuda") || (precision != "fp32" && precision != "bf16")) {
    std::fprintf(stderr, "usage: t5_bench [cpu|cuda] [fp32|bf16] [train,generate]\n");
    return 2;
  }
  const bool gpu = where == "cuda", bf16 = precision == "bf16";
  const tg::Device device = gpu ? tg::Device::cuda() : tg::Device::cpu();
  const tg::Precision prec = bf16 ? tg::Precision::kBf16 : tg::Precision::kFp32;
  if (which.find("train") != std::string::npos) {
    const int64_t B = gpu ? 16 : 1;
    tg::nn::T5 model(kFlanBase);
    const std::vector<int32_t> ids = tokens(B * kSource, 1), labels = tokens(B * kTarget, 2);
    const std::vector<int32_t> mask(ids.size(), 1), dec = model.shift_right(labels, B);
    tg::Program p =
        tg::compile_train(model,
                          [&](tg::Tensor x, tg::Tensor m, tg::Tensor d, tg::Tensor y) {
                            return tg::cross_entropy(model.logits(model.decode(d, model.encode(x, m), m)), y);
                          },
                          {.inputs = {{"ids", {B, kSource}, tg::DType::kI32},
                                      {"mask", {B, kSource}, tg::DType::kI32},
                                      {"dec", {B, kTarget}, tg::DType::kI32},
                                      {"labels", {B, kTarget}, tg::DType::kI32}},
                           .optimizer = tg::AdamW{.lr = 1e-4},
                           .device = device,
                           .precision = prec});
    p.init_params(0);
    const tg::Feeds feeds{{"ids", ids}, {"mask", mask}, {"dec", dec}, {"labels", labels}};
    const int warm = gpu ? 3 : 1, iters = gpu ? 10 : 1;
    report("t5_train", bf16, median_seconds_per_step([&] { p.step(feeds); }, warm, iters),
           static_cast<double>(B * (kSource + kTarget)), "tok/s");
    std::printf("%-14s %-10s planned peak %.0f MiB\n", "t5_train", bf16 ? "tg_bf16" : "tg_fp32",
                static_cast<double>(p.memory_report().planned_peak()) / (1 << 20));
  }
  if (which.find("generate") != std::string::npos) {
    tg::nn::T5 model(kFlanBase);
    if (bf16) model.store_params_as(tg::DType::kBF16);
    tg::T5Generator gen(
        model, {.source_len = kSource, .max_new_tokens = kTarget, .device = device, .precision = prec});
    gen.encoder().init_params(0);
    const std::vector<int32_t> source = tokens(kSource, 3);
    // Every one of the 64 tokens is decoded (no stop token), as the peer's min_new_tokens.
    const tg::GenerateOptions greedy{.max_new_tokens = kTarget, .stop_tokens = {-1}};
    report("t5_generate", bf16,
           median_seconds_per_step([&] { gen.generate({source}, greedy); }, 1, gpu ? 3 : 1),
           static_cast<double>(kTarget), "tok/s");
  }
  return 0;
}
