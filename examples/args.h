// Command-line options of the examples: --name value pairs, and the flags --generate and --distributed.
#pragma once
#include <map>
#include <stdexcept>
#include <string>

#include <tensorgrad/tensorgrad.h>

namespace example {

/// --name value options (and the flags --generate and --distributed).
struct Args {
  std::map<std::string, std::string> kv;
  bool has(const std::string& k) const { return kv.count(k) > 0; }
  std::string get(const std::string& k, const std::string& fallback) const {
    return has(k) ? kv.at(k) : fallback;
  }
  double num(const std::string& k, double fallback) const { return has(k) ? std::stod(kv.at(k)) : fallback; }

  static Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
      std::string k = argv[i];
      if (k.rfind("--", 0) != 0)
        throw std::runtime_error("unexpected argument " + k + " (options are --name value)");
      k = k.substr(2);
      if (k == "generate" || k == "distributed") {
        a.kv[k] = "1";
      } else {
        if (i + 1 >= argc) throw std::runtime_error("--" + k + " needs a value");
        a.kv[k] = argv[++i];
      }
    }
    return a;
  }
  tg::Device device() const {
    const std::string d = get("device", "auto");
    return d == "cpu" ? tg::Device::cpu() : d == "cuda" ? tg::Device::cuda() : tg::Device::best();
  }
  /// --precision fp32 (default), tf32 or bf16 (mixed precision).
  tg::Precision precision() const {
    const std::string p = get("precision", "fp32");
    if (p == "fp32") return tg::Precision::kFp32;
    if (p == "tf32") return tg::Precision::kTf32;
    if (p == "bf16") return tg::Precision::kBf16;
    throw std::runtime_error("--precision takes fp32, tf32 or bf16, not " + p);
  }
  tg::GenerateOptions sampling() const {
    return {.temperature = static_cast<float>(num("temperature", 0.8)),
            .top_k = static_cast<int32_t>(num("top-k", 0)),
            .top_p = static_cast<float>(num("top-p", 0.95)),
            .seed = static_cast<uint32_t>(num("seed", 0))};
  }
};

}  // namespace example
