// addition: a 3-layer GPT (d 64, 4 heads) learns two-digit addition from examples.
//
// Each example is the token sequence  a₁ a₀ + b₁ b₀ = s₀ s₁ s₂  — the sum's digits written
// least-significant first, the order in which carries are computed, which makes the task
// far easier to learn. The model reads the first 8 tokens and is trained to predict the
// next token at every position, with the loss masked to the three answer digits. 10% of the
// 10,000 pairs are held out and never trained on; accuracy is exact match on those, decoding
// the answer greedily one digit at a time. Along the way: progress and loss every 100 steps,
// sample predictions, an attention map read back through captures, and a checkpoint saved
// and reloaded into a fresh model with identical accuracy.
//
//   ./addition [steps=700] [max_final_loss] [--bf16 | --f16] [--device cpu|cuda|ref]
// With a bound, exit 1 if the loss ends above it. --bf16 trains and predicts in mixed
// precision (tg::Precision::kBf16), --f16 in f16 mixed precision with dynamic loss scaling
// (tg::Precision::kF16); the default device is the fastest available.
#include <tensorgrad/tensorgrad.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

namespace {

constexpr int64_t kSeq = 8, kVocab = 16, kPlus = 10, kEquals = 11;
constexpr int32_t kIgnore = -100;

tg::nn::GptConfig config() {
  return {.vocab = kVocab, .seq_len = kSeq, .layers = 3, .d_model = 64, .heads = 4};
}

struct Pair {
  int a, b;
};

/// The 9 tokens of a + b; the model sees tokens[0..8) and predicts tokens[1..9).
std::array<int32_t, 9> tokens_of(Pair p) {
  const int s = p.a + p.b;
  return {p.a / 10, p.a % 10, kPlus, p.b / 10, p.b % 10, kEquals, s % 10, s / 10 % 10, s / 100};
}

char glyph(int32_t t) {
  return t < 10 ? static_cast<char>('0' + t) : t == kPlus ? '+' : t == kEquals ? '=' : '?';
}

/// Greedy decoding of the three answer digits of every pair, with a forward program that
/// maps ids [N, 8] to the argmax token at every position.
std::vector<std::array<int32_t, 3>> answer(tg::Program& predict, const std::vector<Pair>& pairs, int64_t n,
                                           tg::Captures* captures = nullptr) {
  std::vector<int32_t> ids(static_cast<size_t>(n * kSeq), 0);
  for (int64_t i = 0; i < static_cast<int64_t>(pairs.size()); ++i) {
    auto t = tokens_of(pairs[static_cast<size_t>(i)]);
    std::copy(t.begin(), t.begin() + 6, ids.begin() + i * kSeq);
  }
  std::vector<std::array<int32_t, 3>> out(pairs.size());
  for (int digit = 0; digit < 3; ++digit) {  // position 5+digit predicts answer digit `digit`
    tg::HostTensor next = predict.run({{"ids", ids}}, {.captures = digit == 2 ? captures : nullptr});
    for (size_t i = 0; i < pairs.size(); ++i) {
      const int32_t tok = next.i32()[i * kSeq + 5 + static_cast<size_t>(digit)];
      out[i][static_cast<size_t>(digit)] = tok;
      if (digit < 2) ids[i * kSeq + 6 + static_cast<size_t>(digit)] = tok;
    }
  }
  return out;
}

double accuracy(tg::Program& predict, const std::vector<Pair>& pairs, int64_t n) {
  auto got = answer(predict, pairs, n);
  int correct = 0;
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto t = tokens_of(pairs[i]);
    correct += got[i][0] == t[6] && got[i][1] == t[7] && got[i][2] == t[8];
  }
  return static_cast<double>(correct) / static_cast<double>(pairs.size());
}

struct Model : tg::Module {
  tg::nn::Gpt gpt{*this, "gpt", config()};
};

struct Settings {
  int steps = 700;
  double max_final_loss = -1;
  tg::Device device = tg::Device::best();
  tg::Precision precision = tg::Precision::kFp32;
};

Settings parse(int argc, char** argv) {
  Settings s;
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bf16") {
      s.precision = tg::Precision::kBf16;
    } else if (a == "--f16") {
      s.precision = tg::Precision::kF16;
    } else if (a == "--device" && i + 1 < argc) {
      const std::string d = argv[++i];
      s.device = d == "cuda" ? tg::Device::cuda() : d == "ref" ? tg::Device::ref() : tg::Device::cpu();
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "addition: unknown option %s\n", a.c_str());
      std::exit(2);
    } else if (positional++ == 0) {
      s.steps = std::atoi(a.c_str());
    } else {
      s.max_final_loss = std::atof(a.c_str());
    }
  }
  return s;
}

tg::Program compile_predict(Model& m, int64_t n, const Settings& s) {
  return tg::compile_forward(
      m, [&](tg::Tensor ids) { return tg::argmax(m.gpt.logits(ids), -1); },
      {.inputs = {{"ids", {n, kSeq}, tg::DType::kI32}}, .device = s.device, .precision = s.precision});
}

}  // namespace

int main(int argc, char** argv) {
  const Settings settings = parse(argc, argv);
  const int steps = settings.steps;
  const double max_final_loss = settings.max_final_loss;
  constexpr int64_t kBatch = 256;
  const auto t0 = std::chrono::steady_clock::now();

  std::vector<Pair> all;
  for (int a = 0; a < 100; ++a)
    for (int b = 0; b < 100; ++b) all.push_back({a, b});
  std::mt19937 rng(1234);
  std::shuffle(all.begin(), all.end(), rng);
  const std::vector<Pair> held_out(all.begin(), all.begin() + 1000), train_set(all.begin() + 1000, all.end());
  std::printf(
      "addition: 3-layer GPT (d 64, 4 heads) on a+b for a, b < 100: %zu training pairs, %zu held out; "
      "batch %lld, %d steps, AdamW lr 2e-3 with warmup + cosine, on %s in %s\n",
      train_set.size(), held_out.size(), static_cast<long long>(kBatch), steps, settings.device.str().c_str(),
      settings.precision == tg::Precision::kBf16  ? "bf16 mixed precision"
      : settings.precision == tg::Precision::kF16 ? "f16 mixed precision with loss scaling"
                                                  : "f32");

  Model model;
  auto train = tg::compile_train(
      model, [&](tg::Tensor ids, tg::Tensor targets) { return model.gpt.loss(ids, targets, kIgnore); },
      {.inputs = {{"ids", {kBatch, kSeq}, tg::DType::kI32}, {"targets", {kBatch, kSeq}, tg::DType::kI32}},
       .optimizer = tg::AdamW{.lr = 2e-3, .weight_decay = 0.1},
       .schedule = tg::lr::warmup(100, tg::lr::cosine(std::max(1, steps - 100), 0.05)),
       .clip_grad_norm = 1.0,
       .device = settings.device,
       .precision = settings.precision});
  train.init_params(0);

  std::vector<int32_t> ids(kBatch * kSeq), targets(kBatch * kSeq);
  std::uniform_int_distribution<size_t> pick(0, train_set.size() - 1);
  double recent = 0;
  int recent_count = 0;
  for (int step = 1; step <= steps; ++step) {
    for (int64_t i = 0; i < kBatch; ++i) {
      auto t = tokens_of(train_set[pick(rng)]);
      for (int64_t j = 0; j < kSeq; ++j) {
        ids[static_cast<size_t>(i * kSeq + j)] = t[static_cast<size_t>(j)];
        targets[static_cast<size_t>(i * kSeq + j)] =
            j >= 5 ? t[static_cast<size_t>(j + 1)] : kIgnore;  // answer digits only
      }
    }
    const float loss = train.step({{"ids", ids}, {"targets", targets}});
    if (step > steps - 50) {
      recent += loss;
      ++recent_count;
    }
    if (step % 100 == 0 || step == steps) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("  step %5d/%d  loss %.4f  (%.1f s)\n", step, steps, static_cast<double>(loss), secs);
      std::fflush(stdout);
    }
  }
  const double final_loss = recent / std::max(1, recent_count);

  tg::Program predict = compile_predict(model, static_cast<int64_t>(held_out.size()), settings);
  const double acc = accuracy(predict, held_out, static_cast<int64_t>(held_out.size()));
  std::printf("held-out exact-match accuracy: %.2f%% (%zu pairs never seen in training)\n", 100 * acc,
              held_out.size());

  // A few predictions, and what the last layer's first head attends to on the first one.
  const std::vector<Pair> samples(held_out.begin(), held_out.begin() + 5);
  tg::Captures captures;
  tg::Program predict_few = compile_predict(model, static_cast<int64_t>(samples.size()), settings);
  auto got = answer(predict_few, samples, static_cast<int64_t>(samples.size()), &captures);
  for (size_t i = 0; i < samples.size(); ++i) {
    const int predicted = got[i][0] + 10 * got[i][1] + 100 * got[i][2];
    std::printf("  %2d + %2d = %3d  model: %3d  %s\n", samples[i].a, samples[i].b,
                samples[i].a + samples[i].b, predicted,
                predicted == samples[i].a + samples[i].b ? "ok" : "WRONG");
  }
  const tg::HostTensor& probs = captures.at("gpt.blocks.2.attn.probs");  // [5, heads, 8, 8]
  auto seq = tokens_of(samples[0]);
  std::printf(
      "attention of layer 2, head 0 on \"%d+%d\" (rows: query position, columns: key; darker = more):\n",
      samples[0].a, samples[0].b);
  const char* shades = " .:-=+*#%@";
  std::printf("      ");
  for (int64_t k = 0; k < kSeq; ++k) std::printf("%c", glyph(seq[static_cast<size_t>(k)]));
  std::printf("\n");
  for (int64_t q = 0; q < kSeq; ++q) {
    std::printf("   %c  ", glyph(seq[static_cast<size_t>(q)]));
    for (int64_t k = 0; k < kSeq; ++k) {
      const float p = probs.f32()[static_cast<size_t>(q * kSeq + k)];
      std::printf("%c", shades[std::clamp(static_cast<int>(p * 9.999f), 0, 9)]);
    }
    std::printf("\n");
  }

  // Save, reload into a fresh model, and check that nothing changed.
  const std::string path =
      (std::filesystem::temp_directory_path() / "tensorgrad_addition.safetensors").string();
  tg::save_safetensors(path, train);
  Model reloaded;
  tg::Program predict_reloaded = compile_predict(reloaded, static_cast<int64_t>(held_out.size()), settings);
  tg::load_safetensors(path, predict_reloaded);
  const double acc_reloaded = accuracy(predict_reloaded, held_out, static_cast<int64_t>(held_out.size()));
  std::printf("checkpoint %s reloaded into a fresh model: accuracy %.2f%% (%s)\n", path.c_str(),
              100 * acc_reloaded, acc_reloaded == acc ? "identical" : "DIFFERENT");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("total time %.1f s; final training loss (mean of the last 50 steps) %.4f\n", secs, final_loss);

  if (acc_reloaded != acc) return 1;
  if (max_final_loss >= 0 && !(final_loss <= max_final_loss)) {
    std::printf("FAIL: final loss %.4f is above the bound %.4f\n", final_loss, max_final_loss);
    return 1;
  }
  return 0;
}
