// mamba_lm: the char_lm task (the Debian `fortunes` corpus, character level) with a Mamba
// language model (nn::MambaLM: selective state-space mixers, pre-RMSNorm residual blocks, a
// tied head), then sampled through the recurrent decoder: one step program whose conv and SSM
// states are tg::state tensors (tg::Generator with prefill = false).
//
//   ./mamba_lm [--device cpu] [--config cpu] [--steps N] [--checkpoint mamba_lm.safetensors]
//              [--plot mamba_lm_loss.svg] [--prompt TEXT] [--tokens 500] [--temperature 0.8]
//              [--top-k 0] [--top-p 0.95] [--seed 0] [--generate] [--max-val-loss X]
//              [--corpus /usr/share/games/fortunes]
//
// Configuration `cpu`: 4 layers, d_model 128 (d_inner 256), d_state 16, windows of 128
// characters, batch 16, 1500 steps. It runs on the CPU unless --device cuda is given (the CUDA
// selective scan is its first version, serial in time).
#include "text_lm.h"

namespace {

struct Config {
  std::string name;
  int64_t layers, d_model, d_state, seq, batch, steps;
  double lr;
};

Config config_named(const std::string& name) {
  if (name == "cpu") return {"cpu", 4, 128, 16, 128, 16, 1500, 2e-3};
  throw std::runtime_error("unknown --config " + name + " (cpu)");
}

struct Model : tg::Module {
  explicit Model(const tg::nn::MambaLMConfig& c) : lm(*this, "lm", c) {}
  tg::nn::MambaLM lm;
};

text_lm::Setup setup(const Config& c, Model& m, int64_t steps) {
  char line[128];
  std::snprintf(line, sizeof line, "Mamba, %lld layers, d_model %lld, d_state %lld", static_cast<long long>(c.layers),
                static_cast<long long>(c.d_model), static_cast<long long>(c.d_state));
  return {.program = "mamba_lm", .config_name = c.name, .model_line = line, .seq = c.seq, .batch = c.batch, .steps = steps,
          .warmup = 100, .eval_every = 250, .eval_batches = 16, .lr = c.lr, .prefill = false,
          .loss = [&m](const tg::Tensor& ids, const tg::Tensor& targets) { return m.lm.loss(ids, targets); },
          .step = [&m](const tg::Tensor& ids, const tg::Tensor& pos, int64_t n) { return m.lm.logits_cached(ids, pos, n); }};
}

tg::nn::MambaLMConfig lm_config(const Config& c, int64_t vocab) {
  return {.vocab = vocab, .layers = c.layers, .d_model = c.d_model, .d_state = c.d_state};
}

}  // namespace

int main(int argc, char** argv) {
  return text_lm::guarded("mamba_lm", [&] {
    text_lm::Args args = text_lm::Args::parse(argc, argv);
    if (!args.has("device")) args.kv["device"] = "cpu";
    if (args.has("generate")) {
      const auto meta = text_lm::checkpoint_metadata(args, "mamba_lm");
      const fortunes::Vocab vocab = fortunes::Vocab::from_hex(meta.at("vocab"));
      const Config c = config_named(meta.at("config"));
      Model model(lm_config(c, vocab.size()));
      return text_lm::generate_only(args, setup(c, model, c.steps), model, vocab, meta);
    }
    const Config c = config_named(args.get("config", "cpu"));
    const fortunes::Corpus corpus = fortunes::Corpus::load(args.get("corpus", fortunes::kDir));
    Model model(lm_config(c, corpus.vocab.size()));
    return text_lm::train(args, setup(c, model, static_cast<int64_t>(args.num("steps", static_cast<double>(c.steps)))), model, corpus);
  });
}
