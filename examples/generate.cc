// generate: text from a Hugging Face model folder (config.json, model.safetensors or its shards,
// tokenizer.json) — a Llama-family, GPT-2 or Mamba checkpoint (tg::pretrained::load) — streamed
// to the terminal as it is sampled, then the speed in tokens/s.
//
//   ./generate --model <folder> --prompt "Once upon a time" [--max-new-tokens 100]
//              [--temperature 0.8] [--top-k 0] [--top-p 0.95] [--seed 0]
//              [--device cpu|cuda] [--precision fp32|bf16]
//
// --temperature 0 is greedy. Generation stops at the tokenizer's end-of-sequence token (else the
// config's eos_token_id), after --max-new-tokens, or when prompt and text fill the model's
// context. A prompt longer than the context is an error, as is a folder without tokenizer.json.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "args.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t parameter_count(const tg::pretrained::Model& lm) {
  int64_t n = 0;
  for (const auto& [name, t] : lm.weights) n += t.numel();
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const example::Args args = example::Args::parse(argc, argv);
    if (!args.has("model") || !args.has("prompt"))
      throw std::runtime_error(
          "usage: generate --model <Hugging Face folder> --prompt TEXT [--max-new-tokens 100] [--temperature "
          "0.8] "
          "[--top-k 0] [--top-p 0.95] [--seed 0] [--device cpu|cuda] [--precision fp32|bf16]");
    const std::string folder = args.get("model", "");
    // The tokenizer first: without it there is nothing to generate, however good the weights.
    if (!std::filesystem::exists(std::filesystem::path(folder) / "tokenizer.json"))
      throw std::runtime_error(
          folder + " has no tokenizer.json: generate needs the model's tokenizer beside its weights");
    const tg::Tokenizer tokenizer = tg::Tokenizer::load(folder);

    auto t0 = std::chrono::steady_clock::now();
    const tg::pretrained::Model lm = tg::pretrained::load(folder);
    std::printf("%s from %s: %.4g M parameters, context %s, loaded in %.1f s\n", lm.architecture.c_str(),
                folder.c_str(), static_cast<double>(parameter_count(lm)) / 1e6,
                lm.context > 0 ? std::to_string(lm.context).c_str() : "unlimited (recurrent)",
                seconds_since(t0));

    // add_special: the prompt as the model saw text in training (Llama 3: <|begin_of_text|> first).
    const std::string prompt = args.get("prompt", "");
    const std::vector<int32_t> ids = tokenizer.encode(prompt, /*add_special=*/true);
    if (ids.empty()) throw std::runtime_error("the prompt encodes to no tokens");
    const int64_t n = static_cast<int64_t>(ids.size());
    if (lm.context > 0 && n > lm.context)
      throw std::runtime_error("the prompt is " + std::to_string(n) +
                               " tokens, more than the model's context of " + std::to_string(lm.context));
    const int64_t max_new = static_cast<int64_t>(args.num("max-new-tokens", 100));
    if (max_new < 1) throw std::runtime_error("--max-new-tokens must be at least 1");
    // Caches only as long as this text needs (a Llama's context can be 128k positions).
    const int64_t cache_len = lm.context > 0 ? std::min(lm.context, n + max_new) : n + max_new;
    const tg::Precision precision = args.precision();
    if (precision == tg::Precision::kTf32) throw std::runtime_error("--precision takes fp32 or bf16");

    t0 = std::chrono::steady_clock::now();
    tg::Generator gen(*lm.module, lm.step(),
                      {.cache_len = cache_len,
                       .device = args.device(),
                       .precision = precision,
                       .prefill = !lm.recurrent()});
    lm.upload(gen.decode());  // the prefill program shares the decode program's parameters
    std::printf("compiled for %s in %.1f s; %lld prompt tokens\n\n", gen.decode().device().str().c_str(),
                seconds_since(t0), static_cast<long long>(n));

    tg::GenerateOptions options = args.sampling();
    options.max_new_tokens = max_new;
    if (tokenizer.eos_id())
      options.stop_tokens = {*tokenizer.eos_id()};
    else
      options.stop_tokens = lm.eos_ids;
    // Each token's bytes as it comes: byte-level tokens concatenate to the text's bytes, so a
    // character split over two tokens is whole once both are printed.
    std::printf("%s", prompt.c_str());
    std::fflush(stdout);
    options.on_token = [&tokenizer](int64_t, int32_t token) {
      const std::string piece = tokenizer.decode(std::span<const int32_t>(&token, 1), /*skip_special=*/true);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    };
    t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> out = gen.generate(ids, options);
    const double s = seconds_since(t0);
    const char* why = static_cast<int64_t>(out.size()) == max_new ? "--max-new-tokens"
                      : n + static_cast<int64_t>(out.size()) >= cache_len && lm.context > 0
                          ? "the model's context"
                          : "end of sequence";
    std::printf("\n\n%zu tokens in %.2f s: %.1f tokens/s (the prompt's prefill included; stopped by %s)\n",
                out.size(), s, static_cast<double>(out.size()) / s, why);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 1;
  }
}
