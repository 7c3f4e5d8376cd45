// text2text: T5 and Flan-T5 from a Hugging Face folder (T5ForConditionalGeneration:
// config.json, model.safetensors, tokenizer.json), e.g. google/flan-t5-base or t5-small: each
// prompt is encoded, then the decoder writes the answer token by token (greedy by default).
//
//   ./text2text --model <folder> --prompt "translate English to German: The house is wonderful."
//               [--max-new-tokens 64] [--temperature 0] [--top-k 0] [--top-p 1] [--seed 0]
//               [--device cpu|cuda] [--precision fp32|bf16] [--ids] [--beams 4 [--length-penalty 1]]
//
// Without --prompt every line of stdin is one prompt. --ids also prints the generated token ids.
// --beams N searches N beams (Hugging Face's num_beams, as translation usually runs T5) and
// prints the best hypothesis.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "args.h"

namespace {

constexpr const char* kUsage =
    "usage: text2text --model FOLDER [--prompt TEXT] [--max-new-tokens 64] [--temperature 0]\n"
    "                 [--top-k 0] [--top-p 1] [--min-p 0] [--seed 0] [--device cpu|cuda]\n"
    "                 [--precision fp32|bf16] [--ids] [--beams N [--length-penalty 1]]\n"
    "\n"
    "Runs a T5ForConditionalGeneration folder (T5, Flan-T5: config.json, model.safetensors and\n"
    "tokenizer.json) on each prompt (--prompt, else every line of stdin) and prints its answer:\n"
    "greedy with --temperature 0 (the default), else sampled; --beams N searches N beams instead\n"
    "(the best hypothesis by summed log-probability over length^--length-penalty).\n";

}  // namespace

int main(int argc, char** argv) {
  try {
    if (example::Args::wants_help(argc, argv)) {
      std::printf("%s", kUsage);
      return 0;
    }
    const example::Args args = example::Args::parse(argc, argv);
    args.allow_only({"model", "prompt", "max-new-tokens", "temperature", "top-k", "top-p", "min-p", "seed",
                     "device", "precision", "ids", "beams", "length-penalty"});
    if (!args.has("model")) {
      std::fprintf(stderr, "text2text: --model is required\n%s", kUsage);
      return 2;
    }
    const std::string folder = args.get("model", "");
    const auto max_new = static_cast<int64_t>(args.num("max-new-tokens", 64));
    if (max_new < 1) throw std::runtime_error("--max-new-tokens must be at least 1");
    tg::GenerateOptions sampling = args.sampling();
    sampling.temperature = static_cast<float>(args.num("temperature", 0));
    sampling.top_p = static_cast<float>(args.num("top-p", 1));
    sampling.max_new_tokens = max_new;
    const int64_t beams = args.has("beams") ? static_cast<int64_t>(args.num("beams", 1)) : 0;
    if (args.has("beams") && (beams < 1 || beams > 64))
      throw std::runtime_error("--beams takes 1 to 64 beams");
    if (args.has("length-penalty") && !args.has("beams"))
      throw std::runtime_error("--length-penalty needs --beams");
    if (beams > 0 && (args.has("temperature") || args.has("top-k") || args.has("top-p") || args.has("min-p")))
      throw std::runtime_error("--beams searches without sampling: drop the sampling options");

    const auto t0 = std::chrono::steady_clock::now();
    const tg::pretrained::Model m = tg::pretrained::load(folder);
    if (!std::holds_alternative<tg::nn::T5Config>(m.config) || !std::get<tg::nn::T5Config>(m.config).decoder)
      throw std::runtime_error(m.architecture + " is not a T5ForConditionalGeneration");
    auto& t5 = static_cast<tg::nn::T5&>(*m.module);
    const tg::nn::T5Config& c = t5.config;
    const tg::Tokenizer tok = tg::Tokenizer::load(folder);
    std::vector<std::string> prompts;
    if (args.has("prompt")) {
      prompts.push_back(args.get("prompt", ""));
    } else {
      for (std::string line; std::getline(std::cin, line);)
        if (!line.empty()) prompts.push_back(line);
    }
    if (prompts.empty()) throw std::runtime_error("no prompt: give --prompt or lines on stdin");
    std::vector<std::vector<int32_t>> sources;
    int64_t longest = 1;
    for (const std::string& p : prompts) {
      sources.push_back(tok.encode(p, /*add_special=*/true));
      longest = std::max<int64_t>(longest, static_cast<int64_t>(sources.back().size()));
    }
    tg::T5Generator gen(t5, {.batch = std::max<int64_t>(beams, 1),
                             .source_len = longest,
                             .max_new_tokens = max_new,
                             .device = args.device(),
                             .precision = args.precision()});
    m.upload(gen.encoder());
    std::printf("%s from %s: %lld + %lld blocks, width %lld, %lld heads; compiled for %s in %.2f s\n",
                m.architecture.c_str(), folder.c_str(), static_cast<long long>(c.layers),
                static_cast<long long>(c.decoder_layers), static_cast<long long>(c.d_model),
                static_cast<long long>(c.heads), gen.encoder().device().str().c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::printf("> %s\n", prompts[i].c_str());
      const auto t1 = std::chrono::steady_clock::now();
      std::vector<int32_t> out;
      if (beams > 0) {
        const tg::BeamHypothesis best =
            gen.beam_search(sources[i],
                            {.max_new_tokens = max_new, .length_penalty = args.num("length-penalty", 1)})
                .front();
        std::printf("(the best of %lld beams: score %.4f)\n", static_cast<long long>(beams), best.score);
        out = best.tokens;
      } else {
        out = gen.generate({sources[i]}, sampling).front();
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      std::printf("%s\n", tok.decode(out, /*skip_special=*/true).c_str());
      if (args.has("ids")) {
        std::printf("ids:");
        for (int32_t id : out) std::printf(" %d", id);
        std::printf("\n");
      }
      std::printf("(%zu tokens in %.2f s, %.1f tokens/s)\n", out.size(), s,
                  static_cast<double>(out.size()) / s);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "text2text: %s\n", e.what());
    return 1;
  }
}
