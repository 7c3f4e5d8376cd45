// char_lm: a character-level GPT trained on real text — the Debian `fortunes` corpus (jokes,
// quotes and poems; installed with apt-get when missing and run as root) — then sampled
// through the KV-cached decode path (tg::Generator).
//
// Training reports loss and tokens/s as it goes and the validation loss on the held-out 10%
// of the fortunes against the unigram baseline (a model that ignores context); at the end it
// writes a checkpoint (parameters + vocabulary + configuration in its metadata), a loss-curve
// SVG, and samples text from a prompt. `--generate` only loads a checkpoint and samples.
//
//   ./char_lm [--device cpu|cuda] [--config cpu|gpu] [--steps N] [--checkpoint char_lm.safetensors]
//             [--plot char_lm_loss.svg] [--prompt TEXT] [--tokens 500] [--temperature 0.8]
//             [--top-k 0] [--top-p 0.95] [--seed 0] [--generate] [--max-val-loss X]
//             [--corpus /usr/share/games/fortunes]
//
// Configurations: `cpu` (the default on the CPU) is 4 layers, d 192, 6 heads, windows of 128
// characters, batch 16, 2000 steps — about six minutes on two cores. `gpu` (the default on a GPU)
// is 6 layers, d 384, 6 heads, windows of 256, batch 64, dropout 0.2, 3000 steps.
// (examples/text_lm.h is the driver this shares with mamba_lm.)
#include "text_lm.h"

namespace {

struct Config {
  std::string name;
  int64_t layers, d_model, heads, seq, batch, steps;
  double lr, dropout;
};

Config config_named(const std::string& name) {
  if (name == "cpu") return {"cpu", 4, 192, 6, 128, 16, 2000, 2e-3, 0.0};
  if (name == "gpu") return {"gpu", 6, 384, 6, 256, 64, 3000, 1e-3, 0.2};
  throw std::runtime_error("unknown --config " + name + " (cpu or gpu)");
}

struct Model : tg::Module {
  explicit Model(const tg::nn::GptConfig& c) : gpt(*this, "gpt", c) {}
  tg::nn::Gpt gpt;
};

text_lm::Setup setup(const Config& c, Model& m, int64_t steps) {
  char line[128];
  std::snprintf(line, sizeof line, "GPT, %lld layers, d %lld, %lld heads", static_cast<long long>(c.layers),
                static_cast<long long>(c.d_model), static_cast<long long>(c.heads));
  return {.program = "char_lm", .config_name = c.name, .model_line = line, .seq = c.seq, .batch = c.batch, .steps = steps,
          .warmup = 100, .eval_every = 250, .eval_batches = c.name == "gpu" ? 32 : 16, .lr = c.lr, .prefill = true,
          .loss = [&m](const tg::Tensor& ids, const tg::Tensor& targets) { return m.gpt.loss(ids, targets); },
          .step = [&m](const tg::Tensor& ids, const tg::Tensor& pos, int64_t n) { return m.gpt.logits_cached(ids, pos, n); }};
}

tg::nn::GptConfig gpt_config(const Config& c, int64_t vocab) {
  return {.vocab = vocab, .seq_len = c.seq, .layers = c.layers, .d_model = c.d_model, .heads = c.heads, .dropout = c.dropout};
}

}  // namespace

int main(int argc, char** argv) {
  return text_lm::guarded("char_lm", [&] {
    const text_lm::Args args = text_lm::Args::parse(argc, argv);
    const bool gpu = args.device().kind == tg::Device::Kind::kCuda;
    if (args.has("generate")) {
      const auto meta = text_lm::checkpoint_metadata(args, "char_lm");
      const fortunes::Vocab vocab = fortunes::Vocab::from_hex(meta.at("vocab"));
      const Config c = config_named(meta.at("config"));
      Model model(gpt_config(c, vocab.size()));
      return text_lm::generate_only(args, setup(c, model, c.steps), model, vocab, meta);
    }
    const Config c = config_named(args.get("config", gpu ? "gpu" : "cpu"));
    const fortunes::Corpus corpus = fortunes::Corpus::load(args.get("corpus", fortunes::kDir));
    Model model(gpt_config(c, corpus.vocab.size()));
    return text_lm::train(args, setup(c, model, static_cast<int64_t>(args.num("steps", static_cast<double>(c.steps)))), model, corpus);
  });
}
