// nn::Linear and nn::Mlp.
#include <cmath>

#include "tensorgrad/errors.h"
#include "tensorgrad/nn.h"

namespace tg::nn {
namespace {
// PyTorch's nn.Linear default: kaiming_uniform(a=√5) on W, i.e. U(±1/√in), and the same
// bound for the bias.
Init torch_linear_init(int64_t in_features) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  return init::uniform(-bound, bound);
}
}  // namespace

Linear::Linear(Module& parent, std::string name, int64_t in, int64_t out, LinearOptions options)
    : Module(parent, std::move(name)),
      in_features(in),
      out_features(out),
      weight(*this, "weight", {out, in}, options.weight_init.value_or(torch_linear_init(in))) {
  if (options.bias)
    bias.emplace(*this, "bias", Shape{out}, options.bias_init.value_or(torch_linear_init(in)));
}

Linear::~Linear() = default;  // here, where LoRA is complete

Tensor Linear::operator()(const Tensor& x, Loc loc) const {
  if (x.rank() == 0 || x.shape().back() != in_features)
    throw ShapeError("[Linear] '" + path() + "' expects [..., " + std::to_string(in_features) + "], got " +
                     shape_str(x.shape()) + " (at " + std::string(loc.file_name()) + ":" +
                     std::to_string(loc.line()) + ")");
  Tensor y = matmul(x, transpose(weight.tensor(loc), -2, -1, loc), loc);
  if (bias) y = add(y, bias->tensor(loc), loc);
  return lora_ ? add(y, (*lora_)(x, loc), loc) : y;
}

Mlp::Mlp(Module& parent, std::string name, std::vector<int64_t> widths, Activation activation)
    : Module(parent, std::move(name)), activation_(std::move(activation)) {
  if (widths.size() < 2) throw Error("[Mlp] '" + path() + "' needs at least two widths (in and out)");
  for (size_t i = 0; i + 1 < widths.size(); ++i)
    layers_.push_back(
        std::make_unique<Linear>(*this, "layers." + std::to_string(i), widths[i], widths[i + 1]));
}

Tensor Mlp::operator()(const Tensor& x, Loc loc) const {
  Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    h = (*layers_[i])(h, loc);
    if (i + 1 < layers_.size()) h = activation_(h);
  }
  return h;
}

}  // namespace tg::nn
