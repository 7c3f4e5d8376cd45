// Small helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>

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
    return std::string("no usable GPU (cuda:0 needs the CUDA driver, a GPU, NVRTC and cuBLASLt), GPU tests skipped");
  }();
  return why;
}

/// Every backend this machine runs: ref and cpu, and cuda when there is a usable GPU.
inline std::vector<tg::Device> all_devices() {
  std::vector<tg::Device> d{tg::Device::ref(), tg::Device::cpu()};
  if (gpu_skip_reason().empty()) d.push_back(tg::Device::cuda());
  return d;
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

}  // namespace tg::testing
