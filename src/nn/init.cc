// Parameter initialisers. Each parameter draws from its own stream, seeded by a hash of
// (seed, parameter path), so values do not shift when other parameters are added, and the
// same seed gives the same values on every device (the host fills, then uploads).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "nn/init.h"
#include "tensorgrad/errors.h"

namespace tg {
namespace init {
Init normal(double std, double mean) { return {Init::Kind::kNormal, mean, std, {}}; }
Init uniform(double low, double high) { return {Init::Kind::kUniform, low, high, {}}; }
Init zeros() { return constant(0.0); }
Init ones() { return constant(1.0); }
Init constant(double value) { return {Init::Kind::kConstant, value, 0, {}}; }
Init kaiming_normal(double gain) { return {Init::Kind::kKaimingNormal, gain, 0, {}}; }
Init kaiming_uniform(double gain) { return {Init::Kind::kKaimingUniform, gain, 0, {}}; }
Init xavier_normal(double gain) { return {Init::Kind::kXavierNormal, gain, 0, {}}; }
Init xavier_uniform(double gain) { return {Init::Kind::kXavierUniform, gain, 0, {}}; }
Init callable(std::function<void(std::span<float>, const Shape&, uint64_t)> fn) {
  return {Init::Kind::kCallable, 0, 0, std::move(fn)};
}
}  // namespace init

namespace detail {
namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

/// splitmix64: a small, well-mixed 64-bit generator (one state word, full period). Its state
/// after k draws is the seed + k·γ, so any point of a stream is one multiply away (see fill).
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += kGamma);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Standard normal by Box–Muller (one value per call; simple beats fast here).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
};

uint64_t hash_path(uint64_t seed, const std::string& path) {
  uint64_t h = 0xCBF29CE484222325ull ^ seed;  // FNV-1a over the path, keyed by the seed
  for (unsigned char c : path) h = (h ^ c) * 0x100000001B3ull;
  return SplitMix64{h}.next();
}

std::pair<double, double> fans(const Shape& s) {
  if (s.empty()) return {1, 1};
  if (s.size() == 1) return {static_cast<double>(s[0]), static_cast<double>(s[0])};
  double receptive = 1;
  for (size_t i = 2; i < s.size(); ++i) receptive *= static_cast<double>(s[i]);
  return {static_cast<double>(s[1]) * receptive, static_cast<double>(s[0]) * receptive};
}

/// Fills `values` with the stream `stream`, `block(rng, out, count)` writing `count` values
/// that take exactly `draws` draws each. Large fills run in chunks over the OpenMP threads: a
/// chunk starting at element b starts from the state the sequential pass would have there
/// (stream + b·draws·γ), so every value is bit-for-bit the sequential one (GPT-2's 124M
/// Box–Muller normals take seconds on one core).
template <class Block>
void fill(std::span<float> values, uint64_t stream, uint64_t draws, Block block) {
  constexpr int64_t kChunk = int64_t{1} << 15;
  const auto n = static_cast<int64_t>(values.size());
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  float* out = values.data();
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    SplitMix64 rng{stream + static_cast<uint64_t>(begin) * draws * kGamma};
    block(rng, out + begin, end - begin);
  }
}

/// `count` values mean + std·normal(), exactly as one rng.normal() per value computes them,
/// staged through small arrays so the log, cos and sqrt of neighbouring values overlap
/// instead of each value waiting on its own chain.
void normal_block(SplitMix64& rng, float* out, int64_t count, double mean, double std) {
  constexpr int64_t kBlock = 64;
  double radius[kBlock], angle[kBlock];
  for (int64_t begin = 0; begin < count; begin += kBlock) {
    const int64_t m = std::min(kBlock, count - begin);
    for (int64_t j = 0; j < m; ++j) {
      double u1 = rng.uniform(), u2 = rng.uniform();
      if (u1 < 1e-300) u1 = 1e-300;
      radius[j] = u1;
      angle[j] = 2.0 * std::numbers::pi * u2;
    }
    for (int64_t j = 0; j < m; ++j) radius[j] = std::log(radius[j]);
    for (int64_t j = 0; j < m; ++j) angle[j] = std::cos(angle[j]);
    for (int64_t j = 0; j < m; ++j) {
      const double z = std::sqrt(-2.0 * radius[j]) * angle[j];
      out[begin + j] = static_cast<float>(mean + std * z);
    }
  }
}

}  // namespace

void fill_init(const Init& init, std::span<float> values, const Shape& shape, uint64_t seed,
               const std::string& path) {
  const uint64_t stream = hash_path(seed, path);
  const auto [fan_in, fan_out] = fans(shape);
  auto fill_normal = [&](double mean, double std) {  // normal() takes two draws
    fill(values, stream, 2, [mean, std](SplitMix64& rng, float* out, int64_t count) {
      normal_block(rng, out, count, mean, std);
    });
  };
  auto fill_uniform = [&](double lo, double hi) {
    fill(values, stream, 1, [lo, hi](SplitMix64& rng, float* out, int64_t count) {
      for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(lo + (hi - lo) * rng.uniform());
    });
  };
  switch (init.kind) {
    case Init::Kind::kNormal: fill_normal(init.a, init.b); return;
    case Init::Kind::kUniform: fill_uniform(init.a, init.b); return;
    case Init::Kind::kConstant:
      for (float& v : values) v = static_cast<float>(init.a);
      return;
    case Init::Kind::kKaimingNormal: fill_normal(0, init.a / std::sqrt(fan_in)); return;
    case Init::Kind::kKaimingUniform: {
      const double bound = init.a * std::sqrt(3.0 / fan_in);
      fill_uniform(-bound, bound);
      return;
    }
    case Init::Kind::kXavierNormal: fill_normal(0, init.a * std::sqrt(2.0 / (fan_in + fan_out))); return;
    case Init::Kind::kXavierUniform: {
      const double bound = init.a * std::sqrt(6.0 / (fan_in + fan_out));
      fill_uniform(-bound, bound);
      return;
    }
    case Init::Kind::kCallable:
      if (!init.fn) throw Error("[init] '" + path + "' has a callable init without a function");
      std::fill(values.begin(), values.end(),
                0.0f);  // what it leaves unwritten reads as 0, whatever the buffer held
      init.fn(values, shape, stream);
      return;
  }
}

}  // namespace detail
}  // namespace tg
