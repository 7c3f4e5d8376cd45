// char_lm: a character-level GPT trained on real text — the Debian `fortunes` corpus (jokes,
// quotes and poems; installed with apt-get when missing and run as root) — then sampled
// through the KV-cached decode path (tg::Generator).
//
// Training reports loss and tokens/s as it goes and the validation loss on the held-out 10%
// of the fortunes against the unigram baseline (a model that ignores context); at the end it
// writes a checkpoint (parameters + vocabulary + configuration in its metadata), a loss-curve
// SVG, and samples text from a prompt. `--generate` only loads a checkpoint and samples.
//
//   ./char_lm [--device cpu|cuda] [--config cpu|gpu] [--precision fp32|tf32|bf16|f16] [--steps N]
//   [--checkpoint char_lm.safetensors]
//             [--plot char_lm_loss.svg] [--prompt TEXT] [--tokens 500] [--temperature 0.8]
//             [--top-k 0] [--top-p 0.95] [--seed 0] [--generate] [--max-val-loss X]
//             [--corpus /usr/share/games/fortunes]
//             [--distributed] [--micro-batches K]
//
// Configurations: `cpu` (the default on the CPU) is 4 layers, d 192, 6 heads, windows of 128
// characters, batch 16, 2000 steps — about six minutes on two cores. `gpu` (the default on a GPU)
// is 6 layers, d 384, 6 heads, windows of 256, batch 64, dropout 0.2, 3000 steps.
// (examples/text_lm.h is the driver this shares with mamba_lm.)
#include "text_lm.h"

namespace {

struct Model : tg::Module {
  explicit Model(const tg::nn::GptConfig& c) : gpt(*this, "gpt", c) {}
  tg::nn::Gpt gpt;
};

text_lm::Built build(const std::string& config, int64_t vocab) {
  if (config != "cpu" && config != "gpu")
    throw std::runtime_error("unknown --config " + config + " (cpu or gpu)");
  const bool gpu = config == "gpu";
  const tg::nn::GptConfig c{.vocab = vocab,
                            .seq_len = gpu ? 256 : 128,
                            .layers = gpu ? 6 : 4,
                            .d_model = gpu ? 384 : 192,
                            .heads = 6,
                            .dropout = gpu ? 0.2 : 0.0};
  auto model = std::make_unique<Model>(c);
  Model& m = *model;
  char line[128];
  std::snprintf(line, sizeof line, "GPT, %lld layers, d %lld, %lld heads", static_cast<long long>(c.layers),
                static_cast<long long>(c.d_model), static_cast<long long>(c.heads));
  text_lm::Setup s{
      .program = "char_lm",
      .config_name = config,
      .model_line = line,
      .seq = c.seq_len,
      .batch = gpu ? 64 : 16,
      .steps = gpu ? 3000 : 2000,
      .warmup = 100,
      .eval_every = 250,
      .eval_batches = gpu ? 32 : 16,
      .lr = gpu ? 1e-3 : 2e-3,
      .loss = [&m](const tg::Tensor& ids, const tg::Tensor& targets) { return m.gpt.loss(ids, targets); },
      .step = [&m](const tg::Tensor& ids, const tg::Tensor& pos,
                   int64_t n) { return m.gpt.logits_cached(ids, pos, n); }};
  return {std::move(model), std::move(s)};
}

}  // namespace

int main(int argc, char** argv) {
  return text_lm::main_of(
      "char_lm", argc, argv,
      [](const text_lm::Args& a) { return a.device().kind == tg::Device::Kind::kCuda ? "gpu" : "cpu"; },
      build);
}
