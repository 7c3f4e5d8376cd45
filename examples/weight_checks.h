// What examples/finetune.cc checks weights with: which tensors changed, by how much, and a
// quantized weight's values.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <tensorgrad/tensorgrad.h>

namespace weight_checks {

using Params = std::map<std::string, tg::HostTensor>;

// The names of `want`'s tensors that `got` lacks or holds with another type or other bits.
inline std::vector<std::string> differing(const Params& want, const Params& got,
                                          const std::set<std::string>& skip = {}) {
  std::vector<std::string> out;
  for (const auto& [name, t] : want) {
    if (skip.count(name)) continue;
    const auto it = got.find(name);
    const auto bytes = static_cast<size_t>(t.numel() * tg::dtype_size(t.dtype()));
    if (it == got.end() || it->second.numel() != t.numel() || it->second.dtype() != t.dtype() ||
        std::memcmp(it->second.data(), t.data(), bytes) != 0)
      out.push_back(name);
  }
  return out;
}

// max |a − b| over max |b| of two float tensors (as f32), 1 when their sizes differ.
inline double relative_diff(const tg::HostTensor& a, const tg::HostTensor& b) {
  const tg::HostTensor x = a.to(tg::DType::kF32), y = b.to(tg::DType::kF32);
  if (x.numel() != y.numel()) return 1.0;
  double diff = 0, top = 0;
  for (size_t i = 0; i < x.f32().size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(x.f32()[i] - y.f32()[i])));
    top = std::max(top, static_cast<double>(std::abs(y.f32()[i])));
  }
  return top > 0 ? diff / top : diff;
}

// The values of quantized weight `name` of `weights` (4 bits where it has offsets).
inline tg::HostTensor dequantized(const std::string& name, const Params& weights) {
  return tg::dequantize_param(name, weights.count(tg::offset_name(name)) ? 4 : 8, weights.at(name), weights);
}

}  // namespace weight_checks
