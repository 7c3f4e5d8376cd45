// The character-level language-model driver shared by the char_lm (GPT) and mamba_lm (Mamba)
// examples: command-line options, training on the fortunes corpus with a progress display and
// held-out validation against the unigram baseline, a checkpoint whose metadata carries the
// vocabulary and configuration, the loss-curve SVG, and sampling through tg::Generator (also
// alone, from a checkpoint, with --generate).
#pragma once
#include <tensorgrad/tensorgrad.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "fortunes.h"
#include "loss_plot.h"

namespace text_lm {

using Args = example::Args;

/// What a model brings to the driver.
struct Setup {
  std::string program;      // "char_lm"
  std::string config_name;  // "cpu" / "gpu", stored in the checkpoint
  std::string model_line;   // printed: "GPT, 4 layers, d 192, …"
  int64_t seq = 128, batch = 16, steps = 1000, warmup = 100, eval_every = 250, eval_batches = 16;
  double lr = 1e-3;
  std::string decoder = "KV-cached";  // printed before the sample: how the model decodes
  std::function<tg::Tensor(const tg::Tensor& ids, const tg::Tensor& targets)> loss;
  tg::CachedLm step;
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Samples `tokens` characters after `prompt`, streaming them to stdout. The cache holds one
/// window of the model's context; when it is full the generation continues from the last half
/// window of text (a fresh start of the Generator), so any length can be produced.
inline void sample_text(tg::Generator& gen, const fortunes::Vocab& vocab, const std::string& prompt,
                        int64_t tokens, const tg::GenerateOptions& base) {
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
}

inline tg::Generator generator(tg::Module& model, const Setup& s, tg::Device device,
                               tg::Precision precision) {
  return tg::Generator(model, s.step, {.cache_len = s.seq, .device = device, .precision = precision});
}

/// --generate: samples from the checkpoint's parameters (the model was built from its metadata).
inline int generate_only(const Args& args, const Setup& s, tg::Module& model, const fortunes::Vocab& vocab,
                         const std::map<std::string, std::string>& meta) {
  const std::string checkpoint = args.get("checkpoint", s.program + ".safetensors");
  const tg::Device device = args.device();
  tg::Generator gen = generator(model, s, device, args.precision());
  tg::load_safetensors(checkpoint, gen.decode());
  const tg::GenerateOptions sampling = args.sampling();
  std::printf(
      "%s: %s (config %s, %s steps, validation loss %s) on %s; temperature %.2f, top-k %d, top-p %.2f, seed "
      "%u\n\n",
      s.program.c_str(), checkpoint.c_str(), s.config_name.c_str(),
      meta.count("steps") ? meta.at("steps").c_str() : "?",
      meta.count("val_loss") ? meta.at("val_loss").c_str() : "?", device.str().c_str(),
      static_cast<double>(sampling.temperature), sampling.top_k, static_cast<double>(sampling.top_p),
      sampling.seed);
  sample_text(gen, vocab, args.get("prompt", ""), static_cast<int64_t>(args.num("tokens", 500)), sampling);
  return 0;
}

/// Reads a checkpoint's metadata and checks it was written by `program`.
inline std::map<std::string, std::string> checkpoint_metadata(const Args& args, const std::string& program) {
  const std::string checkpoint = args.get("checkpoint", program + ".safetensors");
  const auto meta = tg::read_safetensors_metadata(checkpoint);
  if (!meta.count("vocab") || !meta.count("config") || meta.count("program") == 0 ||
      meta.at("program") != program)
    throw std::runtime_error(checkpoint + " has no " + program +
                             " metadata (program, vocab, config): was it written by " + program + "?");
  return meta;
}

/// Trains on the corpus with a progress display and validation, writes the checkpoint and the
/// loss curve, then samples. Returns the exit code (1 when --max-val-loss is not reached).
///
/// --distributed: one process of a data-parallel group (started by torchrun-style variables,
/// one GPU each, or by mpirun on the CPU): every rank draws the same global batch and trains
/// on its share of the rows; rank 0 reports, evaluates, writes the files and samples, the
/// other ranks train silently. --micro-batches k splits each rank's share further (gradient
/// accumulation).
inline int train(const Args& args, const Setup& s, tg::Module& model, const fortunes::Corpus& corpus) {
  const bool distributed = args.has("distributed");
  const tg::distributed::World world = distributed ? tg::distributed::init() : tg::distributed::World{};
  const bool lead = world.rank == 0;
  if (!lead && std::freopen("/dev/null", "w", stdout) == nullptr) return 1;  // rank 0 speaks for all
  tg::Device device = args.device();
  if (device.kind == tg::Device::Kind::kCuda && distributed) device = tg::Device::cuda(world.local_rank);
  const int64_t micro = static_cast<int64_t>(args.num("micro-batches", 1));
  if (s.batch % world.size != 0 || (s.batch / world.size) % micro != 0)
    throw std::runtime_error("the batch of " + std::to_string(s.batch) + " does not split into " +
                             std::to_string(world.size) + " ranks of " + std::to_string(micro) +
                             " micro-batches");
  const int64_t rows = s.batch / world.size;  // this rank's share of each global batch
  const tg::Precision precision = args.precision();
  const auto t0 = std::chrono::steady_clock::now();
  const double unigram = corpus.unigram_baseline();
  std::printf(
      "%s: %zu fortunes, %zu training / %zu held-out characters, vocabulary of %lld bytes; unigram baseline "
      "%.3f nats/char\n",
      s.program.c_str(), corpus.fortunes, corpus.train.size(), corpus.val.size(),
      static_cast<long long>(corpus.vocab.size()), unigram);
  std::printf(
      "model: %s, context %lld; batch %lld, %lld steps, AdamW lr %.0e (warmup + cosine), on %s (config %s, "
      "%s)\n",
      s.model_line.c_str(), static_cast<long long>(s.seq), static_cast<long long>(s.batch),
      static_cast<long long>(s.steps), s.lr, device.str().c_str(), s.config_name.c_str(),
      args.get("precision", "fp32").c_str());
  if (distributed || micro > 1)
    std::printf("data parallel over %d ranks (%s), %lld rows each, in %lld micro-batches\n", world.size,
                world.engine.c_str(), static_cast<long long>(rows), static_cast<long long>(micro));
  const std::vector<tg::InputSpec> inputs{{"ids", {rows, s.seq}, tg::DType::kI32},
                                          {"targets", {rows, s.seq}, tg::DType::kI32}};
  tg::Program train = tg::compile_train(
      model, [&](tg::Tensor ids, tg::Tensor targets) { return s.loss(ids, targets); },
      {.inputs = inputs,
       .optimizer = tg::AdamW{.lr = s.lr, .weight_decay = 0.1},
       .schedule = tg::lr::warmup(s.warmup, tg::lr::cosine(std::max<int64_t>(1, s.steps - s.warmup), 0.1)),
       .clip_grad_norm = 1.0,
       .device = device,
       .precision = precision,
       .micro_batches = micro,
       .data_parallel = distributed});
  train.init_params(0);
  tg::Program eval = tg::compile_forward(
      model, [&](tg::Tensor ids, tg::Tensor targets) { return s.loss(ids, targets); },
      {.inputs = {{"ids", {s.batch, s.seq}, tg::DType::kI32}, {"targets", {s.batch, s.seq}, tg::DType::kI32}},
       .device = device,
       .precision = precision});
  std::printf("compiled in %.1f s: %lld kernels per training step\n", seconds_since(t0),
              static_cast<long long>(train.kernel_count()));

  std::vector<int32_t> ids, targets, my_ids, my_targets;
  auto val_loss = [&] {
    double sum = 0;
    for (int64_t i = 0; i < s.eval_batches; ++i) {
      fortunes::Corpus::windows(corpus.val, s.batch, s.seq, nullptr, i, s.eval_batches, ids, targets);
      sum += eval.run({{"ids", ids}, {"targets", targets}}).f32()[0];
    }
    return sum / static_cast<double>(s.eval_batches);
  };
  std::mt19937 rng(7);
  loss_plot::Series train_curve, val_curve;
  double smooth = 0, last_val = 0, eval_seconds = 0;
  const auto t_train = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= s.steps; ++step) {
    fortunes::Corpus::windows(corpus.train, s.batch, s.seq, &rng, 0, 0, ids, targets);
    const auto mine = [&](const std::vector<int32_t>& all, std::vector<int32_t>& out) {
      const auto first = all.begin() + world.rank * rows * s.seq;
      out.assign(first, first + rows * s.seq);
    };
    mine(ids, my_ids);
    mine(targets, my_targets);
    const double loss = train.step({{"ids", my_ids}, {"targets", my_targets}});
    smooth = step == 1 ? loss : 0.95 * smooth + 0.05 * loss;
    if (step % 10 == 0 || step == 1) train_curve.emplace_back(static_cast<double>(step), smooth);
    if (step % 50 == 0 || step == s.steps) {
      const double secs = seconds_since(t_train) - eval_seconds;
      std::printf("  step %5lld/%lld  loss %.3f  %8.0f tokens/s  %6.1f s elapsed, about %.0f s to go\n",
                  static_cast<long long>(step), static_cast<long long>(s.steps), smooth,
                  static_cast<double>(step * s.batch * s.seq) / secs, seconds_since(t0),
                  secs / static_cast<double>(step) * static_cast<double>(s.steps - step));
      std::fflush(stdout);
    }
    if (lead && (step % s.eval_every == 0 || step == s.steps)) {
      const auto te = std::chrono::steady_clock::now();
      last_val = val_loss();
      eval_seconds += seconds_since(te);
      val_curve.emplace_back(static_cast<double>(step), last_val);
      std::printf("  validation loss %.3f nats/char (unigram baseline %.3f)\n", last_val, unigram);
    }
  }
  std::printf(
      "trained %lld steps in %.1f s; validation loss %.3f against the unigram baseline %.3f (%.0f%% lower)\n",
      static_cast<long long>(s.steps), seconds_since(t_train), last_val, unigram,
      100 * (1 - last_val / unigram));
  if (!lead) {  // the files and the sample are rank 0's
    tg::distributed::finalize();
    return 0;
  }

  const std::string checkpoint = args.get("checkpoint", s.program + ".safetensors");
  char val_text[32];
  std::snprintf(val_text, sizeof val_text, "%.4f", last_val);
  tg::save_safetensors(checkpoint, train,
                       {{"program", s.program},
                        {"vocab", corpus.vocab.hex()},
                        {"config", s.config_name},
                        {"steps", std::to_string(s.steps)},
                        {"val_loss", val_text}});
  const std::string plot = args.get("plot", s.program + "_loss.svg");
  char title[160];
  std::snprintf(title, sizeof title, "%s on fortunes (%s config): validation %.3f vs unigram %.3f nats/char",
                s.program.c_str(), s.config_name.c_str(), last_val, unigram);
  loss_plot::write_svg(plot, title, train_curve, val_curve, unigram, "unigram baseline");
  std::printf("checkpoint: %s   loss curve: %s\n", checkpoint.c_str(), plot.c_str());

  tg::Generator gen = generator(model, s, device, precision);
  const tg::GenerateOptions sampling = args.sampling();
  const int64_t tokens = static_cast<int64_t>(args.num("tokens", 500));
  std::printf("\nsample (temperature %.2f, top-p %.2f, seed %u), through the %s decoder:\n\n",
              static_cast<double>(sampling.temperature), static_cast<double>(sampling.top_p), sampling.seed,
              s.decoder.c_str());
  const auto ts = std::chrono::steady_clock::now();
  sample_text(gen, corpus.vocab, args.get("prompt", ""), tokens, sampling);
  std::printf("\n(%lld characters in %.2f s; total time %.1f s)\n", static_cast<long long>(tokens),
              seconds_since(ts), seconds_since(t0));
  if (distributed) tg::distributed::finalize();
  const double max_val_loss = args.num("max-val-loss", -1);
  if (max_val_loss > 0 && !(last_val <= max_val_loss)) {
    std::printf("FAIL: validation loss %.3f is above the bound %.3f\n", last_val, max_val_loss);
    return 1;
  }
  return 0;
}

/// A model built for a configuration, with what it brings to the driver (setup refers to it).
struct Built {
  std::unique_ptr<tg::Module> model;
  Setup setup;
};

/// An example's whole main(): options; with --generate, the model of the checkpoint's
/// configuration sampled from it; else the model of --config (default: `default_config` for
/// the device) trained and sampled. `build(config, vocab)` makes the model; --device defaults
/// to `default_device` ("auto": the GPU when there is one); exceptions become a message and
/// exit code 1.
inline int main_of(const std::string& program, int argc, char** argv,
                   const std::function<std::string(const Args&)>& default_config,
                   const std::function<Built(const std::string& config, int64_t vocab)>& build,
                   const std::string& default_device = "auto") {
  try {
    Args args = Args::parse(argc, argv);
    if (!args.has("device")) args.kv["device"] = default_device;
    if (args.has("generate")) {
      const auto meta = checkpoint_metadata(args, program);
      const fortunes::Vocab vocab = fortunes::Vocab::from_hex(meta.at("vocab"));
      Built b = build(meta.at("config"), vocab.size());
      return generate_only(args, b.setup, *b.model, vocab, meta);
    }
    const fortunes::Corpus corpus = fortunes::Corpus::load(args.get("corpus", fortunes::kDir));
    Built b = build(args.get("config", default_config(args)), corpus.vocab.size());
    b.setup.steps = static_cast<int64_t>(args.num("steps", static_cast<double>(b.setup.steps)));
    return train(args, b.setup, *b.model, corpus);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), e.what());
    return 1;
  }
}

}  // namespace text_lm
