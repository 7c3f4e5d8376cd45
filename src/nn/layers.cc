// nn::Embedding, nn::LayerNorm, nn::RMSNorm.
#include "tensorgrad/errors.h"
#include "tensorgrad/nn.h"

namespace tg::nn {

Embedding::Embedding(Module& parent, std::string name, int64_t num, int64_t dim, Init init)
    : Module(parent, std::move(name)), weight(*this, "weight", {num, dim}, std::move(init)) {}

Tensor Embedding::operator()(const Tensor& ids, Loc loc) const {
  return embedding(weight.tensor(loc), ids, loc);
}

LayerNorm::LayerNorm(Module& parent, std::string name, int64_t dim, double eps_, bool with_bias)
    : Module(parent, std::move(name)), eps(eps_), weight(*this, "weight", {dim}, init::ones()) {
  if (with_bias) bias.emplace(*this, "bias", Shape{dim}, init::zeros());
}

Tensor LayerNorm::operator()(const Tensor& x, Loc loc) const {
  return layer_norm(x, weight.tensor(loc), bias ? bias->tensor(loc) : Tensor(), eps, loc);
}

RMSNorm::RMSNorm(Module& parent, std::string name, int64_t dim, double eps_, bool plus_one_)
    : Module(parent, std::move(name)),
      eps(eps_),
      plus_one(plus_one_),
      weight(*this, "weight", {dim}, plus_one_ ? init::zeros() : init::ones()) {}

Tensor RMSNorm::operator()(const Tensor& x, Loc loc) const {
  Tensor w = weight.tensor(loc);
  return rms_norm(x, plus_one ? add(w, 1.0, loc) : w, eps, loc);
}

}  // namespace tg::nn
