// Command-line options of the examples: --name value pairs, and the flags --generate,
// --distributed, --merge, --check and --chat.
#pragma once
#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include <tensorgrad/tensorgrad.h>

namespace example {

/// --name value options (and the flags, which take no value).
struct Args {
  static bool is_flag(const std::string& k) {
    return k == "generate" || k == "distributed" || k == "merge" || k == "check" || k == "chat" ||
           k == "int8" || k == "int4" || k == "ids";
  }
  std::map<std::string, std::string> kv;
  bool has(const std::string& k) const { return kv.count(k) > 0; }
  std::string get(const std::string& k, const std::string& fallback) const {
    return has(k) ? kv.at(k) : fallback;
  }
  /// A number; anything else (or trailing text: "1e-3x") is an error naming the option.
  double num(const std::string& k, double fallback) const {
    if (!has(k)) return fallback;
    const std::string& v = kv.at(k);
    size_t used = 0;
    double x = 0;
    try {
      x = std::stod(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size())
      throw std::runtime_error("--" + k + " takes a number, not '" + v + "'");
    return x;
  }
  /// Throws for an option not in `known` (a misspelt option would otherwise be ignored).
  void allow_only(const std::set<std::string>& known) const {
    for (const auto& [k, v] : kv)
      if (!known.count(k)) throw std::runtime_error("unknown option --" + k);
  }

  /// Whether the command line asks for the usage text (--help or -h anywhere).
  static bool wants_help(int argc, char** argv) {
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") return true;
    return false;
  }

  static Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
      std::string k = argv[i];
      if (k.rfind("--", 0) != 0)
        throw std::runtime_error("unexpected argument " + k + " (options are --name value)");
      k = k.substr(2);
      if (is_flag(k)) {
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
  /// --precision fp32 (default), tf32, bf16 or f16 (mixed precision; f16 with loss scaling).
  tg::Precision precision() const {
    const std::string p = get("precision", "fp32");
    if (p == "fp32") return tg::Precision::kFp32;
    if (p == "tf32") return tg::Precision::kTf32;
    if (p == "bf16") return tg::Precision::kBf16;
    if (p == "f16") return tg::Precision::kF16;
    throw std::runtime_error("--precision takes fp32, tf32, bf16 or f16, not " + p);
  }
  tg::GenerateOptions sampling() const {
    return {.temperature = static_cast<float>(num("temperature", 0.8)),
            .top_k = static_cast<int32_t>(num("top-k", 0)),
            .top_p = static_cast<float>(num("top-p", 0.95)),
            .min_p = static_cast<float>(num("min-p", 0)),
            .repetition_penalty = static_cast<float>(num("repetition-penalty", 1)),
            .seed = static_cast<uint32_t>(num("seed", 0))};
  }
};

}  // namespace example
