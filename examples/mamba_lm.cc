// mamba_lm: the char_lm task (the Debian `fortunes` corpus, character level) with a Mamba
// language model (nn::MambaLM: selective state-space mixers, pre-RMSNorm residual blocks, a
// tied head), then sampled through the recurrent decoder: one step program whose conv and SSM
// states are tg::state tensors (tg::Generator prefills the prompt's whole windows, then steps).
//
//   ./mamba_lm [--device cpu] [--config cpu] [--precision fp32|tf32|bf16|f16] [--steps N] [--checkpoint
//   mamba_lm.safetensors]
//              [--plot mamba_lm_loss.svg] [--prompt TEXT] [--tokens 500] [--temperature 0.8]
//              [--top-k 0] [--top-p 0.95] [--seed 0] [--generate] [--max-val-loss X]
//              [--corpus /usr/share/games/fortunes]
//             [--distributed] [--micro-batches K]
//
// Configuration `cpu`: 4 layers, d_model 128 (d_inner 256), d_state 16, windows of 128
// characters, batch 16, 1500 steps. It runs on the CPU unless --device cuda is given (the CUDA
// selective scan is its first version, serial in time).
#include "text_lm.h"

namespace {

struct Model : tg::Module {
  explicit Model(const tg::nn::MambaLMConfig& c) : lm(*this, "lm", c) {}
  tg::nn::MambaLM lm;
};

text_lm::Built build(const std::string& config, int64_t vocab) {
  if (config != "cpu") throw std::runtime_error("unknown --config " + config + " (cpu)");
  const tg::nn::MambaLMConfig c{.vocab = vocab, .layers = 4, .d_model = 128, .d_state = 16};
  auto model = std::make_unique<Model>(c);
  Model& m = *model;
  char line[128];
  std::snprintf(line, sizeof line, "Mamba, %lld layers, d_model %lld, d_state %lld",
                static_cast<long long>(c.layers), static_cast<long long>(c.d_model),
                static_cast<long long>(c.d_state));
  text_lm::Setup s{
      .program = "mamba_lm",
      .config_name = config,
      .model_line = line,
      .seq = 128,
      .batch = 16,
      .steps = 1500,
      .warmup = 100,
      .eval_every = 250,
      .eval_batches = 16,
      .lr = 2e-3,
      .decoder = "recurrent",
      .loss = [&m](const tg::Tensor& ids, const tg::Tensor& targets) { return m.lm.loss(ids, targets); },
      .step = [&m](const tg::Tensor& ids, const tg::Tensor& pos,
                   int64_t n) { return m.lm.logits_cached(ids, pos, n); }};
  return {std::move(model), std::move(s)};
}

}  // namespace

int main(int argc, char** argv) {
  return text_lm::main_of(
      "mamba_lm", argc, argv, [](const text_lm::Args&) { return "cpu"; }, build, "cpu");
}
