// Benchmark: Whisper base (openai/whisper-base's shapes, random weights: 6 + 6 layers, width 512,
// 8 heads, feed-forward 2048, 80 mel bins, 1500 source and 448 target positions, vocab 51865).
//   whisper_train       one AdamW step of teacher-forced fine-tuning on 30-s windows with 64-token
//                       transcripts (the encoder's positions frozen): 8 windows on a GPU, 1 on the CPU.
//   whisper_transcribe  one 30-s window, 64 new tokens greedy (tg::WhisperGenerator: the encoder
//                       once, then a KV-cached step per prompt token and per new token; end of text
//                       suppressed so that every run writes all 64).
// Under bf16, training runs under Precision::kBf16 (f32 masters); transcription holds the weights
// in bf16. The peer is bench/whisper_peer.py (transformers' WhisperForConditionalGeneration,
// generate() with its KV cache). Prints, in the torch_peer.py format:
//   <workload> tg_<fp32|bf16> <ms> ms/step <items/s> <unit>
//
//   ./whisper_bench [cpu|cuda] [fp32|bf16] [train,transcribe]
#include <tensorgrad/tensorgrad.h>

#include "timing.h"

#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

const tg::nn::WhisperConfig kBase{.vocab = 51865,
                                  .mels = 80,
                                  .d_model = 512,
                                  .encoder_layers = 6,
                                  .encoder_heads = 8,
                                  .encoder_ffn = 2048,
                                  .decoder_layers = 6,
                                  .decoder_heads = 8,
                                  .decoder_ffn = 2048};
constexpr int64_t kFrames = 3000, kTarget = 64;

std::vector<float> noise(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> x(0.0f, 0.5f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = x(rng);
  return v;
}

void report(const char* workload, bool bf16, double sec, double items, const char* unit) {
  std::printf("%-19s %-10s %10.3f ms/step %10.1f %s\n", workload, bf16 ? "tg_bf16" : "tg_fp32", sec * 1e3,
              items / sec, unit);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string where = argc > 1 ? argv[1] : "cpu", precision = argc > 2 ? argv[2] : "fp32";
  const std::string which = argc > 3 ? argv[3] : "train,transcribe";
  if ((where != "cpu" && where != "cuda") || (precision != "fp32" && precision != "bf16")) {
    std::fprintf(stderr, "usage: whisper_bench [cpu|cuda] [fp32|bf16] [train,transcribe]\n");
    return 2;
  }
  const bool gpu = where == "cuda", bf16 = precision == "bf16";
  const tg::Device device = gpu ? tg::Device::cuda() : tg::Device::cpu();
  const tg::Precision prec = bf16 ? tg::Precision::kBf16 : tg::Precision::kFp32;
  if (which.find("train") != std::string::npos) {
    const int64_t B = gpu ? 8 : 1;
    tg::nn::Whisper model(kBase);
    std::mt19937 rng(2);
    std::vector<int32_t> labels(static_cast<size_t>(B * kTarget));
    for (int32_t& id : labels) id = std::uniform_int_distribution<int32_t>(0, 50000)(rng);
    const std::vector<int32_t> dec = model.shift_right(labels, B);
    const std::vector<float> features = noise(B * 80 * kFrames, 1);
    tg::Program p =
        tg::compile_train(model,
                          [&](tg::Tensor f, tg::Tensor d, tg::Tensor y) {
                            return tg::cross_entropy(model.logits(model.decode(d, model.encode(f))), y);
                          },
                          {.inputs = {{"features", {B, 80, kFrames}},
                                      {"dec", {B, kTarget}, tg::DType::kI32},
                                      {"labels", {B, kTarget}, tg::DType::kI32}},
                           .optimizer = tg::AdamW{.lr = 1e-5},
                           .device = device,
                           .precision = prec,
                           .frozen = {"model.encoder.embed_positions"}});
    p.init_params(0);
    const tg::Feeds feeds{{"features", features}, {"dec", dec}, {"labels", labels}};
    const int warm = gpu ? 3 : 1, iters = gpu ? 10 : 1;
    report("whisper_train", bf16, median_seconds_per_step([&] { p.step(feeds); }, warm, iters),
           static_cast<double>(B * 30), "audio-s/s");
    std::printf("%-19s %-10s planned peak %.0f MiB\n", "whisper_train", bf16 ? "tg_bf16" : "tg_fp32",
                static_cast<double>(p.memory_report().planned_peak()) / (1 << 20));
  }
  if (which.find("transcribe") != std::string::npos) {
    tg::nn::Whisper model(kBase);
    if (bf16) model.store_params_as(tg::DType::kBF16);
    tg::WhisperTokens tokens;  // whisper-base's ids: <|startoftranscript|> 50258, <|notimestamps|> 50363
    tokens.languages = {{"en", 50259}};
    tokens.transcribe = 50359;
    tokens.translate = 50358;
    tokens.suppress = {tokens.eos};  // every run writes all 64 tokens, as the peer's min_new_tokens
    tg::WhisperGenerator gen(model, tokens, tg::LogMelFeatures{}, {.device = device, .precision = prec});
    gen.encoder().init_params(0);
    const tg::HostTensor features = tg::HostTensor::f32(noise(80 * kFrames, 3), {1, 80, kFrames});
    const tg::TranscribeOptions greedy{.language = "en", .max_new_tokens = kTarget};
    report("whisper_transcribe", bf16,
           median_seconds_per_step([&] { gen.transcribe_features(features, greedy); }, 1, gpu ? 3 : 1),
           static_cast<double>(kTarget), "tok/s");
  }
  return 0;
}
