// Layers built from Params and ops. Weights use PyTorch's layouts and default inits, so a
// state dict moves between the two unchanged.
#pragma once
#include <functional>

#include "tensorgrad/module.h"

namespace tg::nn {

struct LinearOptions {
  bool bias = true;
  /// Default: PyTorch's, U(-1/√in, 1/√in) for weight and bias.
  std::optional<Init> weight_init = {};
  std::optional<Init> bias_init = {};
};

/// y = x Wᵀ + b, with W of shape [out, in] (PyTorch's layout) and x of shape [..., in].
class Linear : public Module {
 public:
  Linear(Module& parent, std::string name, int64_t in_features, int64_t out_features, LinearOptions options = {});
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;

  const int64_t in_features, out_features;
  Param weight;
  std::optional<Param> bias;
};

using Activation = std::function<Tensor(const Tensor&)>;

/// A stack of Linear layers ("layers.0", "layers.1", …) of the given widths, with
/// `activation` between them (not after the last).
class Mlp : public Module {
 public:
  Mlp(Module& parent, std::string name, std::vector<int64_t> widths,
      Activation activation = [](const Tensor& x) { return relu(x); });
  Tensor operator()(const Tensor& x) const;
  size_t num_layers() const { return layers_.size(); }
  const Linear& layer(size_t i) const { return *layers_.at(i); }

 private:
  std::vector<std::unique_ptr<Linear>> layers_;
  Activation activation_;
};

}  // namespace tg::nn
