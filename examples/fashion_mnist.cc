// Trains a small convolutional network on Fashion-MNIST (28×28 grey images of clothes, 10
// classes) and reports the test accuracy after every epoch, a confusion matrix at the end, a
// loss and accuracy plot, a picture of misclassified test images and a training checkpoint.
//
// The data is Debian's `dataset-fashion-mnist` package (scripts/setup.sh installs it): the
// gzip-compressed IDX files under /usr/share/datasets/fashion-mnist/ (read with zlib), or the
// same files uncompressed in --data.
//
// The network: two blocks of conv 3×3 → batch norm → relu → 2×2 max pool (1 → 32 → 64
// channels), then linear 3136 → 128 → relu → dropout → linear 128 → 10; Adam with a cosine
// learning-rate decay, shuffled mini-batches, pixels scaled to zero mean and unit variance.
//
//   ./fashion_mnist [--device cpu|cuda] [--precision fp32|tf32|bf16|f16] [--epochs 5] [--batch 128]
//                   [--lr 2e-3] [--train-limit N] [--data DIR] [--out fashion_mnist]
//                   [--min-accuracy 0.91]
// --train-limit trains on the first N training images only (a short run); --min-accuracy makes
// the program fail (exit status 1) when the final test accuracy is below it.
#include <tensorgrad/tensorgrad.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "args.h"
#include "loss_plot.h"

#if TG_EXAMPLE_HAVE_ZLIB
#include <zlib.h>
#endif

namespace {

constexpr int64_t kSide = 28, kPixels = kSide * kSide, kClasses = 10;
constexpr const char* kDefaultData = "/usr/share/datasets/fashion-mnist";
constexpr std::array<const char*, kClasses> kNames = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
// The training set's pixel mean and standard deviation (of values in [0, 1]).
constexpr float kMean = 0.2860f, kStd = 0.3530f;

// ---- IDX files -------------------------------------------------------------------------------

/// The bytes of `dir/name` (.gz through zlib, else the uncompressed file); empty if neither opens.
std::vector<uint8_t> read_file(const std::string& dir, const std::string& name) {
  std::vector<uint8_t> out;
#if TG_EXAMPLE_HAVE_ZLIB
  if (gzFile f = gzopen((dir + "/" + name + ".gz").c_str(), "rb")) {
    uint8_t buf[1 << 16];
    int n;
    while ((n = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + n);
    const bool ok = n == 0;
    gzclose(f);
    if (!ok) throw std::runtime_error(dir + "/" + name + ".gz: not a readable gzip file");
    return out;
  }
#endif
  std::ifstream f(dir + "/" + name, std::ios::binary);
  if (f) out.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return out;
}

uint32_t big_endian(const std::vector<uint8_t>& b, size_t at) {
  return uint32_t{b[at]} << 24 | uint32_t{b[at + 1]} << 16 | uint32_t{b[at + 2]} << 8 | b[at + 3];
}

/// An IDX file's payload after checking its magic number (0x0801 labels, 0x0803 images) and sizes.
std::vector<uint8_t> read_idx(const std::string& dir, const std::string& name, bool images, int64_t& count) {
  std::vector<uint8_t> b = read_file(dir, name);
  if (b.empty())
    throw std::runtime_error(
        "cannot read " + dir + "/" + name +
        "(.gz). Fashion-MNIST comes with Debian's dataset-fashion-mnist package: `apt-get install "
        "dataset-fashion-mnist` (scripts/setup.sh does), or pass --data DIR holding the four IDX files "
        "(train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, "
        "gzip-compressed or not)");
  const size_t header = images ? 16 : 8;
  if (b.size() < header || big_endian(b, 0) != (images ? 0x803u : 0x801u))
    throw std::runtime_error(dir + "/" + name + " is not an IDX " + (images ? "image" : "label") + " file");
  count = big_endian(b, 4);
  if (images && (big_endian(b, 8) != kSide || big_endian(b, 12) != kSide))
    throw std::runtime_error(dir + "/" + name + ": images are not 28×28");
  if (b.size() != header + static_cast<size_t>(count) * (images ? kPixels : 1))
    throw std::runtime_error(dir + "/" + name + ": truncated");
  return {b.begin() + static_cast<std::ptrdiff_t>(header), b.end()};
}

struct Split {
  std::vector<uint8_t> images, labels;
  int64_t size = 0;
};

Split load(const std::string& dir, const std::string& prefix) {
  Split s;
  int64_t labels = 0;
  s.images = read_idx(dir, prefix + "-images-idx3-ubyte", true, s.size);
  s.labels = read_idx(dir, prefix + "-labels-idx1-ubyte", false, labels);
  if (labels != s.size) throw std::runtime_error(prefix + ": image and label counts differ");
  return s;
}

/// Images idx[0..n) of `s`, normalised, into x [n, 1, 28, 28] and their labels into y.
void gather(const Split& s, const int64_t* idx, int64_t n, std::vector<float>& x, std::vector<int32_t>& y) {
  x.resize(static_cast<size_t>(n * kPixels));
  y.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* img = s.images.data() + idx[i] * kPixels;
    for (int64_t p = 0; p < kPixels; ++p)
      x[static_cast<size_t>(i * kPixels + p)] = (img[p] / 255.f - kMean) / kStd;
    y[static_cast<size_t>(i)] = s.labels[static_cast<size_t>(idx[i])];
  }
}

// ---- the network -------------------------------------------------------------------------------

struct Net : tg::Module {
  Net()
      : conv1(*this, "conv1", 1, 32, 3, {.padding = 1, .bias = false}),
        bn1(*this, "bn1", 32),
        conv2(*this, "conv2", 32, 64, 3, {.padding = 1, .bias = false}),
        bn2(*this, "bn2", 64),
        fc1(*this, "fc1", 64 * 7 * 7, 128),
        fc2(*this, "fc2", 128, kClasses) {}
  tg::Tensor logits(const tg::Tensor& x) const {
    tg::Tensor h = tg::max_pool2d(tg::relu(bn1(conv1(x))), {.kernel = 2});  // [N, 32, 14, 14]
    h = tg::max_pool2d(tg::relu(bn2(conv2(h))), {.kernel = 2});             // [N, 64, 7, 7]
    h = tg::dropout(tg::relu(fc1(tg::nn::Flatten{}(h))), 0.25);
    return fc2(h);
  }
  tg::nn::Conv2d conv1;
  tg::nn::BatchNorm2d bn1;
  tg::nn::Conv2d conv2;
  tg::nn::BatchNorm2d bn2;
  tg::nn::Linear fc1, fc2;
};

// ---- pictures ----------------------------------------------------------------------------------

/// Up to 40 misclassified test images in a grid, each with "true → predicted" under it.
void write_mistakes_svg(const std::string& path, const Split& test, const std::vector<int32_t>& pred) {
  constexpr int kCols = 8, kScale = 3, kCell = kSide * kScale, kW = kCell + 16, kH = kCell + 34;
  std::vector<int64_t> wrong;
  for (int64_t i = 0; i < test.size && wrong.size() < 40; ++i)
    if (pred[static_cast<size_t>(i)] != test.labels[static_cast<size_t>(i)]) wrong.push_back(i);
  const int rows = static_cast<int>((wrong.size() + kCols - 1) / kCols);
  std::ofstream f(path);
  f << "<svg xmlns='http://www.w3.org/2000/svg' width='" << kCols * kW << "' height='" << rows * kH + 30
    << "' font-family='sans-serif' font-size='9'>\n<rect width='100%' height='100%' fill='white'/>\n"
    << "<text x='6' y='18' font-size='13'>Misclassified test images: true class → predicted</text>\n";
  for (size_t k = 0; k < wrong.size(); ++k) {
    const int64_t i = wrong[k];
    const int x0 = static_cast<int>(k % kCols) * kW + 8, y0 = static_cast<int>(k / kCols) * kH + 30;
    f << "<g transform='translate(" << x0 << "," << y0 << ")'><rect width='" << kCell << "' height='" << kCell
      << "' fill='black'/>";
    for (int64_t p = 0; p < kPixels; ++p) {
      const int v = test.images[static_cast<size_t>(i * kPixels + p)];
      if (v < 8) continue;  // the black background
      f << "<rect x='" << p % kSide * kScale << "' y='" << p / kSide * kScale << "' width='" << kScale
        << "' height='" << kScale << "' fill='rgb(" << v << "," << v << "," << v << ")'/>";
    }
    f << "<text y='" << kCell + 12 << "'>" << kNames[test.labels[static_cast<size_t>(i)]]
      << " →</text><text y='" << kCell + 24 << "' fill='#c00'>"
      << kNames[static_cast<size_t>(pred[static_cast<size_t>(i)])] << "</text></g>\n";
  }
  f << "</svg>\n";
}

int64_t parameter_count(const tg::Module& m) {
  int64_t n = 0;
  for (const tg::Param* p : m.parameters()) n += tg::numel(p->shape());
  return n;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(const example::Args& args) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string dir = args.get("data", kDefaultData), out = args.get("out", "fashion_mnist");
  const tg::Device device = args.device();
  const int64_t epochs = static_cast<int64_t>(args.num("epochs", 5)),
                batch = static_cast<int64_t>(args.num("batch", 128));
  const double lr = args.num("lr", 2e-3);
  Split train_set = load(dir, "train"), test = load(dir, "t10k");
  const int64_t n_train =
      std::min<int64_t>(train_set.size, static_cast<int64_t>(args.num("train-limit", 1e12)));
  const int64_t steps_per_epoch = n_train / batch, steps = steps_per_epoch * epochs;
  if (epochs < 1 || batch < 1 || steps_per_epoch < 1)
    throw std::runtime_error(
        "--epochs and --batch must be at least 1, and --batch at most the training images");
  std::printf("fashion_mnist: %lld training and %lld test images of %lldx%lld pixels, %lld classes (%s)\n",
              static_cast<long long>(n_train), static_cast<long long>(test.size),
              static_cast<long long>(kSide), static_cast<long long>(kSide), static_cast<long long>(kClasses),
              dir.c_str());

  Net net;
  const std::vector<tg::InputSpec> inputs{{"x", {batch, 1, kSide, kSide}, tg::DType::kF32},
                                          {"y", {batch}, tg::DType::kI32}};
  tg::Program train =
      tg::compile_train(net, [&](tg::Tensor x, tg::Tensor y) { return tg::cross_entropy(net.logits(x), y); },
                        {.inputs = inputs,
                         .optimizer = tg::Adam{.lr = lr},
                         .schedule = tg::lr::cosine(steps, 0.05),
                         .device = device,
                         .precision = args.precision()});
  train.init_params(0);
  constexpr int64_t kEvalBatch = 500;
  tg::Program eval = tg::compile_forward(net, [&](tg::Tensor x) { return net.logits(x); },
                                         {.inputs = {{"x", {kEvalBatch, 1, kSide, kSide}, tg::DType::kF32}},
                                          .device = device,
                                          .precision = args.precision()});
  std::printf(
      "model: conv3x3(1→32) bn relu maxpool, conv3x3(32→64) bn relu maxpool, linear 3136→128 relu dropout, "
      "linear 128→10 (%lld parameters)\n"
      "training: %lld epochs of %lld batches of %lld, Adam lr %.0e with cosine decay, on %s (%s); compiled "
      "in "
      "%.1f s\n",
      static_cast<long long>(parameter_count(net)), static_cast<long long>(epochs),
      static_cast<long long>(steps_per_epoch), static_cast<long long>(batch), lr, device.str().c_str(),
      args.get("precision", "fp32").c_str(), seconds_since(t0));

  std::vector<float> x;
  std::vector<int32_t> y, pred(static_cast<size_t>(test.size));
  std::vector<int64_t> order(static_cast<size_t>(n_train));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(1);
  // Test accuracy (and the predictions in `pred`) over every test image; 10000 = 20 × 500.
  auto evaluate = [&](double& test_loss) {
    int64_t correct = 0;
    double loss = 0;
    std::vector<int64_t> idx(kEvalBatch);
    for (int64_t b0 = 0; b0 + kEvalBatch <= test.size; b0 += kEvalBatch) {
      std::iota(idx.begin(), idx.end(), b0);
      gather(test, idx.data(), kEvalBatch, x, y);
      const std::vector<float> logits = eval.run({{"x", x}}).f32();
      for (int64_t i = 0; i < kEvalBatch; ++i) {
        const float* row = logits.data() + i * kClasses;
        const int32_t p = static_cast<int32_t>(std::max_element(row, row + kClasses) - row);
        const float m = *std::max_element(row, row + kClasses);
        double z = 0;
        for (int64_t c = 0; c < kClasses; ++c) z += std::exp(row[c] - m);
        loss += m + std::log(z) - row[y[static_cast<size_t>(i)]];
        pred[static_cast<size_t>(b0 + i)] = p;
        correct += p == y[static_cast<size_t>(i)] ? 1 : 0;
      }
    }
    const int64_t evaluated = test.size / kEvalBatch * kEvalBatch;
    test_loss = loss / static_cast<double>(evaluated);
    return static_cast<double>(correct) / static_cast<double>(evaluated);
  };

  loss_plot::Series train_curve, test_curve, accuracy_curve;
  double smooth = 0, accuracy = 0, eval_seconds = 0;
  const auto t_train = std::chrono::steady_clock::now();
  for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      gather(train_set, order.data() + s * batch, batch, x, y);
      const double loss = train.step({{"x", x}, {"y", y}});
      const int64_t step = (epoch - 1) * steps_per_epoch + s + 1;
      smooth = step == 1 ? loss : 0.98 * smooth + 0.02 * loss;
      if (step % 20 == 0 || step == 1)
        train_curve.emplace_back(static_cast<double>(step) / steps_per_epoch, smooth);
      if (step % 100 == 0 || s + 1 == steps_per_epoch) {
        const double secs = seconds_since(t_train) - eval_seconds;
        std::printf(
            "  epoch %lld/%lld  batch %4lld/%lld  loss %.3f  %7.0f images/s  %5.1f s elapsed, about %.0f s "
            "to go\n",
            static_cast<long long>(epoch), static_cast<long long>(epochs), static_cast<long long>(s + 1),
            static_cast<long long>(steps_per_epoch), smooth, static_cast<double>(step * batch) / secs,
            seconds_since(t0), secs / static_cast<double>(step) * static_cast<double>(steps - step));
        std::fflush(stdout);
      }
    }
    const auto te = std::chrono::steady_clock::now();
    double test_loss = 0;
    accuracy = evaluate(test_loss);
    eval_seconds += seconds_since(te);
    test_curve.emplace_back(static_cast<double>(epoch), test_loss);
    accuracy_curve.emplace_back(static_cast<double>(epoch), accuracy);
    std::printf("epoch %lld: test accuracy %.2f%%, test loss %.3f\n", static_cast<long long>(epoch),
                100 * accuracy, test_loss);
  }
  std::printf("trained %lld epochs in %.1f s (%.1f s in all)\n", static_cast<long long>(epochs),
              seconds_since(t_train), seconds_since(t0));

  // Confusion matrix: rows are the true classes, columns the predictions.
  std::vector<int64_t> confusion(kClasses * kClasses, 0);
  for (int64_t i = 0; i < test.size / kEvalBatch * kEvalBatch; ++i)
    ++confusion[static_cast<size_t>(test.labels[static_cast<size_t>(i)] * kClasses +
                                    pred[static_cast<size_t>(i)])];
  std::printf("\nconfusion matrix (rows: true class, columns: predicted)\n%12s", "");
  for (int64_t c = 0; c < kClasses; ++c) std::printf(" %5lld", static_cast<long long>(c));
  std::printf("   recall\n");
  for (int64_t r = 0; r < kClasses; ++r) {
    std::printf("%d %-10s", static_cast<int>(r), kNames[static_cast<size_t>(r)]);
    int64_t total = 0;
    for (int64_t c = 0; c < kClasses; ++c) {
      std::printf(" %5lld", static_cast<long long>(confusion[static_cast<size_t>(r * kClasses + c)]));
      total += confusion[static_cast<size_t>(r * kClasses + c)];
    }
    std::printf("   %5.1f%%\n", 100.0 *
                                    static_cast<double>(confusion[static_cast<size_t>(r * kClasses + r)]) /
                                    static_cast<double>(std::max<int64_t>(total, 1)));
  }

  char title[160];
  std::snprintf(title, sizeof title, "fashion_mnist: training and test loss (final test accuracy %.2f%%)",
                100 * accuracy);
  loss_plot::write_svg(out + "_loss.svg", title, train_curve, test_curve, -1, "",
                       {.x = "epoch", .y = "cross-entropy (nats)", .val = "test loss"});
  loss_plot::write_svg(out + "_accuracy.svg", "fashion_mnist: test accuracy after each epoch", {},
                       accuracy_curve, 0.91, "91%",
                       {.x = "epoch", .y = "test accuracy", .val = "test accuracy"});
  write_mistakes_svg(out + "_mistakes.svg", test, pred);
  char acc_text[32];
  std::snprintf(acc_text, sizeof acc_text, "%.4f", accuracy);
  tg::save_checkpoint(out + ".ckpt", train,
                      {{"epochs", std::to_string(epochs)}, {"test_accuracy", acc_text}});
  std::printf("\nwrote %s_loss.svg, %s_accuracy.svg, %s_mistakes.svg and the checkpoint %s.ckpt\n",
              out.c_str(), out.c_str(), out.c_str(), out.c_str());
  const double min_accuracy = args.num("min-accuracy", -1);
  if (min_accuracy > 0 && !(accuracy >= min_accuracy)) {
    std::printf("FAIL: test accuracy %.4f is below the bound %.4f\n", accuracy, min_accuracy);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(example::Args::parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 2;
  }
}
