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
#include <tensorgrad/tensorgrad.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "fortunes.h"
#include "loss_plot.h"

namespace {

struct Config {
  std::string name;
  int64_t layers, d_model, heads, seq, batch, steps;
  double lr, dropout;
  int64_t warmup, eval_every, eval_batches;
};

Config config_named(const std::string& name) {
  if (name == "cpu") return {"cpu", 4, 192, 6, 128, 16, 2000, 2e-3, 0.0, 100, 250, 16};
  if (name == "gpu") return {"gpu", 6, 384, 6, 256, 64, 3000, 1e-3, 0.2, 200, 250, 32};
  throw std::runtime_error("unknown --config " + name + " (cpu or gpu)");
}

struct Model : tg::Module {
  explicit Model(const tg::nn::GptConfig& c) : gpt(*this, "gpt", c) {}
  tg::nn::Gpt gpt;
};

tg::nn::GptConfig gpt_config(const Config& c, int64_t vocab) {
  return {.vocab = vocab, .seq_len = c.seq, .layers = c.layers, .d_model = c.d_model, .heads = c.heads, .dropout = c.dropout};
}

struct Args {
  std::map<std::string, std::string> kv;
  bool has(const std::string& k) const { return kv.count(k) > 0; }
  std::string get(const std::string& k, const std::string& fallback) const { return has(k) ? kv.at(k) : fallback; }
  double num(const std::string& k, double fallback) const { return has(k) ? std::stod(kv.at(k)) : fallback; }
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0) throw std::runtime_error("unexpected argument " + k + " (options are --name value)");
    k = k.substr(2);
    if (k == "generate") {
      a.kv[k] = "1";
    } else {
      if (i + 1 >= argc) throw std::runtime_error("--" + k + " needs a value");
      a.kv[k] = argv[++i];
    }
  }
  return a;
}

/// Samples `tokens` characters after `prompt`, streaming them to stdout. The cache holds one
/// window of the model's context; when it is full the generation continues from the last half
/// window of text (a fresh prefill), so any length can be produced.
std::string sample_text(tg::Generator& gen, const fortunes::Vocab& vocab, const std::string& prompt, int64_t tokens,
                        const tg::GenerateOptions& base) {
  const int64_t window = gen.options().cache_len;
  std::vector<int32_t> text = vocab.encode(prompt.empty() ? std::string("\n") : prompt);
  std::printf("%s", prompt.c_str());
  int64_t produced = 0;
  uint32_t round = 0;
  while (produced < tokens) {
    const size_t keep = std::min<size_t>(text.size(), static_cast<size_t>(window / 2));
    const std::vector<int32_t> context(text.end() - static_cast<long>(keep), text.end());
    tg::GenerateOptions o = base;
    o.seed = base.seed + round++;
    o.max_new_tokens = tokens - produced;
    o.on_token = [&](int64_t, int32_t t) {
      std::putchar(vocab.bytes[static_cast<size_t>(t)]);
      std::fflush(stdout);
      return true;
    };
    const std::vector<int32_t> more = gen.generate(context, o);
    text.insert(text.end(), more.begin(), more.end());
    produced += static_cast<int64_t>(more.size());
    if (more.empty()) break;
  }
  std::printf("\n");
  return vocab.decode(text);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(const Args& args) {
  const std::string dev = args.get("device", "auto");
  const tg::Device device = dev == "cpu" ? tg::Device::cpu() : dev == "cuda" ? tg::Device::cuda() : tg::Device::best();
  const bool gpu = device.kind == tg::Device::Kind::kCuda;
  const std::string checkpoint = args.get("checkpoint", "char_lm.safetensors");
  tg::GenerateOptions sampling{.temperature = static_cast<float>(args.num("temperature", 0.8)),
                               .top_k = static_cast<int32_t>(args.num("top-k", 0)),
                               .top_p = static_cast<float>(args.num("top-p", 0.95)),
                               .seed = static_cast<uint32_t>(args.num("seed", 0))};
  const int64_t tokens = static_cast<int64_t>(args.num("tokens", 500));
  const std::string prompt = args.get("prompt", "");

  if (args.has("generate")) {  // load a checkpoint and sample
    const auto meta = tg::read_safetensors_metadata(checkpoint);
    if (!meta.count("vocab") || !meta.count("config"))
      throw std::runtime_error(checkpoint + " has no char_lm metadata (vocab, config): was it written by char_lm?");
    const fortunes::Vocab vocab = fortunes::Vocab::from_hex(meta.at("vocab"));
    const Config c = config_named(meta.at("config"));
    Model model(gpt_config(c, vocab.size()));
    tg::Generator gen(
        model, [&](const tg::Tensor& ids, const tg::Tensor& pos, int64_t n) { return model.gpt.logits_cached(ids, pos, n); },
        {.cache_len = c.seq, .device = device});
    tg::load_safetensors(checkpoint, gen.prefill());
    std::printf("char_lm: %s (config %s, %s steps, validation loss %s) on %s; temperature %.2f, top-k %d, top-p %.2f, seed %u\n\n",
                checkpoint.c_str(), c.name.c_str(), meta.count("steps") ? meta.at("steps").c_str() : "?",
                meta.count("val_loss") ? meta.at("val_loss").c_str() : "?", gpu ? "cuda" : "cpu",
                static_cast<double>(sampling.temperature), sampling.top_k, static_cast<double>(sampling.top_p), sampling.seed);
    sample_text(gen, vocab, prompt, tokens, sampling);
    return 0;
  }

  Config c = config_named(args.get("config", gpu ? "gpu" : "cpu"));
  if (args.has("steps")) c.steps = static_cast<int64_t>(args.num("steps", 0));
  const double max_val_loss = args.num("max-val-loss", -1);
  const auto t0 = std::chrono::steady_clock::now();
  const fortunes::Corpus corpus = fortunes::Corpus::load(args.get("corpus", fortunes::kDir));
  const double unigram = corpus.unigram_baseline();
  std::printf("char_lm: %zu fortunes, %zu training / %zu held-out characters, vocabulary of %lld bytes; unigram baseline %.3f "
              "nats/char\n",
              corpus.fortunes, corpus.train.size(), corpus.val.size(), static_cast<long long>(corpus.vocab.size()), unigram);
  std::printf("model: GPT, %lld layers, d %lld, %lld heads, context %lld; batch %lld, %lld steps, AdamW lr %.0e (warmup + "
              "cosine), on %s (config %s)\n",
              static_cast<long long>(c.layers), static_cast<long long>(c.d_model), static_cast<long long>(c.heads),
              static_cast<long long>(c.seq), static_cast<long long>(c.batch), static_cast<long long>(c.steps), c.lr,
              gpu ? "cuda" : "cpu", c.name.c_str());

  Model model(gpt_config(c, corpus.vocab.size()));
  const std::vector<tg::InputSpec> inputs{{"ids", {c.batch, c.seq}, tg::DType::kI32}, {"targets", {c.batch, c.seq}, tg::DType::kI32}};
  tg::Program train = tg::compile_train(
      model, [&](tg::Tensor ids, tg::Tensor targets) { return model.gpt.loss(ids, targets); },
      {.inputs = inputs, .optimizer = tg::AdamW{.lr = c.lr, .weight_decay = 0.1},
       .schedule = tg::lr::warmup(c.warmup, tg::lr::cosine(std::max<int64_t>(1, c.steps - c.warmup), 0.1)),
       .clip_grad_norm = 1.0, .device = device});
  train.init_params(0);
  tg::Program eval = tg::compile_forward(
      model, [&](tg::Tensor ids, tg::Tensor targets) { return model.gpt.loss(ids, targets); }, {.inputs = inputs, .device = device});
  std::printf("compiled in %.1f s: %lld kernels per training step\n", seconds_since(t0), static_cast<long long>(train.kernel_count()));

  std::vector<int32_t> ids, targets;
  auto val_loss = [&] {
    double sum = 0;
    for (int64_t i = 0; i < c.eval_batches; ++i) {
      fortunes::Corpus::windows(corpus.val, c.batch, c.seq, nullptr, i, c.eval_batches, ids, targets);
      sum += eval.run({{"ids", ids}, {"targets", targets}}).f32()[0];
    }
    return sum / static_cast<double>(c.eval_batches);
  };

  std::mt19937 rng(7);
  loss_plot::Series train_curve, val_curve;
  double smooth = 0, last_val = 0;
  const auto t_train = std::chrono::steady_clock::now();
  double eval_seconds = 0;
  for (int64_t step = 1; step <= c.steps; ++step) {
    fortunes::Corpus::windows(corpus.train, c.batch, c.seq, &rng, 0, 0, ids, targets);
    const double loss = train.step({{"ids", ids}, {"targets", targets}});
    smooth = step == 1 ? loss : 0.95 * smooth + 0.05 * loss;
    if (step % 10 == 0 || step == 1) train_curve.emplace_back(static_cast<double>(step), smooth);
    if (step % 50 == 0 || step == c.steps) {
      const double secs = seconds_since(t_train) - eval_seconds;
      const double tok_s = static_cast<double>(step * c.batch * c.seq) / secs;
      std::printf("  step %5lld/%lld  loss %.3f  %8.0f tokens/s  %6.1f s elapsed, about %.0f s to go\n", static_cast<long long>(step),
                  static_cast<long long>(c.steps), smooth, tok_s, seconds_since(t0),
                  secs / static_cast<double>(step) * static_cast<double>(c.steps - step));
      std::fflush(stdout);
    }
    if (step % c.eval_every == 0 || step == c.steps) {
      const auto te = std::chrono::steady_clock::now();
      last_val = val_loss();
      eval_seconds += seconds_since(te);
      val_curve.emplace_back(static_cast<double>(step), last_val);
      std::printf("  validation loss %.3f nats/char (unigram baseline %.3f)\n", last_val, unigram);
    }
  }
  const double train_seconds = seconds_since(t_train);
  std::printf("trained %lld steps in %.1f s; validation loss %.3f against the unigram baseline %.3f (%.0f%% lower)\n",
              static_cast<long long>(c.steps), train_seconds, last_val, unigram, 100 * (1 - last_val / unigram));

  char val_text[32];
  std::snprintf(val_text, sizeof val_text, "%.4f", last_val);
  tg::save_safetensors(checkpoint, train,
                       {{"vocab", corpus.vocab.hex()}, {"config", c.name}, {"steps", std::to_string(c.steps)}, {"val_loss", val_text}});
  const std::string plot = args.get("plot", "char_lm_loss.svg");
  char title[160];
  std::snprintf(title, sizeof title, "char_lm on fortunes (%s config): validation %.3f vs unigram %.3f nats/char", c.name.c_str(),
                last_val, unigram);
  loss_plot::write_svg(plot, title, train_curve, val_curve, unigram, "unigram baseline");
  std::printf("checkpoint: %s   loss curve: %s\n", checkpoint.c_str(), plot.c_str());

  tg::Generator gen(
      model, [&](const tg::Tensor& ids_, const tg::Tensor& pos, int64_t n) { return model.gpt.logits_cached(ids_, pos, n); },
      {.cache_len = c.seq, .device = device});
  std::printf("\nsample (temperature %.2f, top-p %.2f, seed %u), through the KV-cached decoder:\n\n",
              static_cast<double>(sampling.temperature), static_cast<double>(sampling.top_p), sampling.seed);
  const auto ts = std::chrono::steady_clock::now();
  sample_text(gen, corpus.vocab, prompt, tokens, sampling);
  std::printf("\n(%lld characters in %.2f s; total time %.1f s)\n", static_cast<long long>(tokens), seconds_since(ts), seconds_since(t0));
  if (max_val_loss > 0 && !(last_val <= max_val_loss)) {
    std::printf("FAIL: validation loss %.3f is above the bound %.3f\n", last_val, max_val_loss);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "char_lm: %s\n", e.what());
    return 1;
  }
}
