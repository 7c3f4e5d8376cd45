// transcribe: speech to text with Whisper from a Hugging Face folder
// (WhisperForConditionalGeneration: config.json, model.safetensors, tokenizer.json,
// preprocessor_config.json, generation_config.json), e.g. openai/whisper-tiny or whisper-base:
// the WAV file is resampled to the model's rate if needed, cut into 30-second windows, and each
// window's text is printed as the decoder writes it.
//
//   ./transcribe --model <folder> --audio speech.wav [--language en] [--task transcribe|translate]
//                [--max-new-tokens 224] [--temperature 0] [--top-k 0] [--top-p 1] [--seed 0] [--device
//                cpu|cuda]
//                [--precision fp32|bf16] [--spectrogram mel.png] [--ids]
//
// --spectrogram draws the first window's log-mel spectrogram (what the encoder sees: time to the
// right, pitch upwards) into a PNG file.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "args.h"

namespace {

constexpr const char* kUsage =
    "usage: transcribe --model FOLDER --audio FILE.wav [--language CODE] [--task transcribe|translate]\n"
    "                  [--max-new-tokens 224] [--temperature 0] [--top-k 0] [--top-p 1] [--seed 0]\n"
    "                  [--device cpu|cuda] [--precision fp32|bf16] [--spectrogram FILE.png] [--ids]\n"
    "\n"
    "Transcribes a WAV file (any sample rate and channel count: resampled, channels averaged) with a\n"
    "WhisperForConditionalGeneration folder, one window of the model's chunk length (30 s) at a\n"
    "time, printing the text as it comes. Without --language a multilingual model detects it per\n"
    "window; --task translate writes English. Greedy with --temperature 0 (the default).\n";

// A color for v in [0, 1]: black, through purple and orange, to pale yellow.
std::array<uint8_t, 3> heat(double v) {
  v = std::clamp(v, 0.0, 1.0);
  const auto c = [](double x) { return static_cast<uint8_t>(std::clamp(x, 0.0, 1.0) * 255.0 + 0.5); };
  return {c(1.6 * v), c(1.6 * v - 0.55), c(v < 0.5 ? 0.9 * v : 3.0 * v - 2.0)};
}

// The window's features [mels, frames] as an image: frame t is column t, band 0 the bottom row.
tg::Image spectrogram(const tg::HostTensor& features) {
  const int64_t mels = features.shape()[1], frames = features.shape()[2];
  const std::span<const float> f = features.f32();
  const auto [lo, hi] = std::minmax_element(f.begin(), f.begin() + mels * frames);
  tg::Image im{.height = mels * 2, .width = frames, .channels = 3, .pixels = {}};
  im.pixels.resize(static_cast<size_t>(im.height * im.width * 3));
  for (int64_t y = 0; y < im.height; ++y)
    for (int64_t t = 0; t < frames; ++t) {
      const float v = f[static_cast<size_t>((mels - 1 - y / 2) * frames + t)];
      const auto rgb = heat((v - *lo) / std::max(1e-6f, *hi - *lo));
      std::copy(rgb.begin(), rgb.end(), im.pixels.begin() + (y * frames + t) * 3);
    }
  return im;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (example::Args::wants_help(argc, argv)) {
      std::printf("%s", kUsage);
      return 0;
    }
    const example::Args args = example::Args::parse(argc, argv);
    args.allow_only({"model", "audio", "language", "task", "max-new-tokens", "temperature", "top-k", "top-p",
                     "seed", "device", "precision", "spectrogram", "ids"});
    if (!args.has("model") || !args.has("audio")) {
      std::fprintf(stderr, "transcribe: --model and --audio are required\n%s", kUsage);
      return 2;
    }
    const std::string folder = args.get("model", "");
    const auto t0 = std::chrono::steady_clock::now();
    const tg::pretrained::Model m = tg::pretrained::load(folder);
    if (!std::holds_alternative<tg::nn::WhisperConfig>(m.config))
      throw std::runtime_error(m.architecture + " is not a WhisperForConditionalGeneration");
    auto& whisper = static_cast<tg::nn::Whisper&>(*m.module);
    const tg::nn::WhisperConfig& c = whisper.config;
    const tg::Tokenizer tok = tg::Tokenizer::load(folder);
    const tg::LogMelFeatures features = tg::LogMelFeatures::load(folder);

    tg::Audio audio = tg::read_wav(args.get("audio", ""));
    std::printf("%s: %.2f s at %lld Hz", args.get("audio", "").c_str(), audio.seconds(),
                static_cast<long long>(audio.sample_rate));
    if (audio.sample_rate != features.sample_rate) {
      audio = tg::resample(audio, features.sample_rate);
      std::printf(", resampled to %lld Hz", static_cast<long long>(features.sample_rate));
    }
    std::printf("\n");
    if (args.has("spectrogram")) {
      tg::Audio first = audio;
      first.samples.resize(std::min(first.samples.size(), static_cast<size_t>(features.n_samples())));
      tg::write_png(spectrogram(features({&first, 1})), args.get("spectrogram", ""));
      std::printf("the first window's log-mel spectrogram (%lld bands × %lld frames): %s\n",
                  static_cast<long long>(features.n_mels), static_cast<long long>(features.frames()),
                  args.get("spectrogram", "").c_str());
    }

    tg::WhisperGenerator gen(whisper, tg::WhisperTokens::load(folder), features,
                             {.device = args.device(), .precision = args.precision()});
    m.upload(gen.encoder());
    std::printf("%s from %s: %lld + %lld layers, width %lld; compiled for %s in %.2f s\n",
                m.architecture.c_str(), folder.c_str(), static_cast<long long>(c.encoder_layers),
                static_cast<long long>(c.decoder_layers), static_cast<long long>(c.d_model),
                gen.encoder().device().str().c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

    // The text so far, printed as it grows (the new bytes each token adds).
    std::vector<int32_t> tokens;
    std::string shown;
    tg::TranscribeOptions options{.language = args.get("language", ""),
                                  .task = args.get("task", ""),
                                  .max_new_tokens = static_cast<int64_t>(args.num("max-new-tokens", 224)),
                                  .temperature = static_cast<float>(args.num("temperature", 0)),
                                  .top_k = static_cast<int32_t>(args.num("top-k", 0)),
                                  .top_p = static_cast<float>(args.num("top-p", 1)),
                                  .seed = static_cast<uint32_t>(args.num("seed", 0)),
                                  .on_token = [&](int64_t, int32_t token) {
                                    tokens.push_back(token);
                                    const std::string text = tok.decode(tokens, /*skip_special=*/true);
                                    if (text.size() > shown.size() && text.starts_with(shown)) {
                                      std::printf("%s", text.substr(shown.size()).c_str());
                                      std::fflush(stdout);
                                      shown = text;
                                    }
                                    return true;
                                  }};
    const auto t1 = std::chrono::steady_clock::now();
    const tg::Transcript t = gen.transcribe({&audio, 1}, options).front();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::printf("\n");
    if (args.has("ids")) {
      std::printf("ids:");
      for (int32_t id : t.tokens) std::printf(" %d", id);
      std::printf("\n");
    }
    std::printf("(%s%zu tokens; %.2f s of audio in %.2f s, %.1fx real time)\n",
                t.language.empty() ? "" : ("language " + t.language + ", ").c_str(), t.tokens.size(),
                audio.seconds(), s, audio.seconds() / s);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transcribe: %s\n", e.what());
    return 1;
  }
}
