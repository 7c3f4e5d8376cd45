// Small helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <tensorgrad/program.h>

namespace tg::testing {

/// A device as a test-name part ("cpu", "ref", "cuda0": GoogleTest names allow no ':').
inline std::string device_test_name(const tg::Device& d) {
  std::string s = d.str();
  std::erase(s, ':');
  return s;
}

/// "" when this machine runs the CUDA backend (Device::best() is then cuda:0), else why not:
/// GPU tests skip with it, so a CPU-only CI run says what it skipped.
inline std::string gpu_skip_reason() {
  static const std::string why = [] {
    if (tg::Device::best().kind == tg::Device::Kind::kCuda) return std::string();
    return std::string(
        "no usable GPU (cuda:0 needs the CUDA driver, a GPU, NVRTC and cuBLASLt), GPU tests skipped");
  }();
  return why;
}

/// Every backend this machine runs: ref and cpu, and cuda when there is a usable GPU.
inline std::vector<tg::Device> all_devices() {
  std::vector<tg::Device> d{tg::Device::ref(), tg::Device::cpu()};
  if (gpu_skip_reason().empty()) d.push_back(tg::Device::cuda());
  return d;
}

/// max |a − b| over max |b|: a norm-wise relative difference of two same-length rows (rows of
/// different lengths: infinity).
inline double rel_diff(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return worst / std::max(scale, 1e-30);
}

/// n values drawn uniformly from [-1, 1) by std::mt19937(seed).
inline std::vector<float> uniform_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

/// The largest rel_diff over the parameters of two programs of same-shaped models.
inline double param_difference(const tg::Program& a, const tg::Program& b) {
  double worst = 0;
  const auto pa = a.download_params(), pb = b.download_params();
  for (const auto& [name, t] : pa) worst = std::max(worst, rel_diff(t.f32(), pb.at(name).f32()));
  return worst;
}

/// Greedy continuation by a full-forward program over ids [1, window] → logits [1, window,
/// vocab]: the sequence padded with 0 goes through it, the first largest logit of its last
/// position is appended, until `steps` tokens or `window` positions.
inline std::vector<int32_t> greedy_by_full_forward(tg::Program& full, std::vector<int32_t> seq, int64_t steps,
                                                   int64_t window, int64_t vocab) {
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < steps && static_cast<int64_t>(seq.size()) < window) {
    std::vector<int32_t> padded = seq;
    padded.resize(static_cast<size_t>(window), 0);
    const std::vector<float> logits = full.run({{"ids", padded}}).f32();
    const auto row = logits.begin() + static_cast<long>((seq.size() - 1) * static_cast<size_t>(vocab));
    const auto best = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    out.push_back(best);
    seq.push_back(best);
  }
  return out;
}

/// Runs `fn`, which must throw E, and returns the exception's message.
template <class E, class F>
std::string message_of(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

/// A whole file's bytes ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace tg::testing

/// Expects the string `text` (evaluated once) to contain `part`, and prints it when it does not.
#define EXPECT_HAS(text, part)                         \
  do {                                                 \
    const std::string t_ = (text);                     \
    EXPECT_NE(t_.find(part), std::string::npos) << t_; \
  } while (0)
