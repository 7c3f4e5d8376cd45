// nn::Conv1d, nn::Conv2d, nn::ConvTranspose2d, nn::BatchNorm2d, nn::GroupNorm and nn::Flatten.
#include <algorithm>
#include <cmath>

#include "tensorgrad/errors.h"
#include "tensorgrad/nn.h"

namespace tg::nn {
namespace {

std::string conv_at(const Loc& loc) {
  return " (at " + std::string(loc.file_name()) + ":" + std::to_string(loc.line()) + ")";
}

// PyTorch's nn.Conv2d default, kaiming_uniform(a=√5): U(±1/√fan_in), fan_in = in/groups·kh·kw,
// for the weight and the bias (nn.ConvTranspose2d: the same with out for in).
Init torch_conv_init(int64_t in, int64_t groups, Size2 kernel) {
  const int64_t fan_in =
      std::max<int64_t>(1, groups > 0 ? in / groups : in) * std::max<int64_t>(1, kernel.h * kernel.w);
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return init::uniform(-bound, bound);
}

// The channel and kernel checks of a convolution layer's construction and call.
void check_channels(const char* layer, const std::string& path, int64_t in, int64_t out, Size2 kernel,
                    int64_t groups) {
  if (in < 1 || out < 1 || kernel.h < 1 || kernel.w < 1 || groups < 1 || in % groups != 0 ||
      out % groups != 0)
    throw ShapeError("[" + std::string(layer) + "] '" + path + "': " + std::to_string(in) + " → " +
                     std::to_string(out) + " channels in " + std::to_string(groups) + " groups with a " +
                     std::to_string(kernel.h) + "×" + std::to_string(kernel.w) +
                     " kernel (channels must be positive multiples of groups)");
}
void check_input(const char* layer, const std::string& path, const Tensor& x, int64_t in, const Loc& loc) {
  if (x.rank() != 4 || x.shape()[1] != in)
    throw ShapeError("[" + std::string(layer) + "] '" + path + "' expects [N, " + std::to_string(in) +
                     ", H, W], got " + shape_str(x.shape()) + conv_at(loc));
}

}  // namespace

Conv2d::Conv2d(Module& parent, std::string name, int64_t in, int64_t out, Size2 kernel, Conv2dLayerOptions o)
    : Module(parent, std::move(name)),
      in_channels(in),
      out_channels(out),
      conv{o.stride, o.padding, o.dilation, o.groups},
      weight(*this, "weight", {out, o.groups > 0 ? in / o.groups : in, kernel.h, kernel.w},
             o.weight_init.value_or(torch_conv_init(in, o.groups, kernel))) {
  check_channels("Conv2d", path(), in, out, kernel, o.groups);
  if (o.bias)
    bias.emplace(*this, "bias", Shape{out}, o.bias_init.value_or(torch_conv_init(in, o.groups, kernel)));
}

Tensor Conv2d::operator()(const Tensor& x, Loc loc) const {
  check_input("Conv2d", path(), x, in_channels, loc);
  return conv2d(x, weight.tensor(loc), bias ? bias->tensor(loc) : Tensor(), conv, loc);
}

Conv1d::Conv1d(Module& parent, std::string name, int64_t in, int64_t out, int64_t kernel,
               Conv1dLayerOptions o)
    : Module(parent, std::move(name)),
      in_channels(in),
      out_channels(out),
      conv{o.stride, o.padding, o.dilation, o.groups},
      weight(*this, "weight", {out, o.groups > 0 ? in / o.groups : in, kernel},
             o.weight_init.value_or(torch_conv_init(in, o.groups, {1, kernel}))) {
  check_channels("Conv1d", path(), in, out, {1, kernel}, o.groups);
  if (o.bias)
    bias.emplace(*this, "bias", Shape{out}, o.bias_init.value_or(torch_conv_init(in, o.groups, {1, kernel})));
}

Tensor Conv1d::operator()(const Tensor& x, Loc loc) const {
  if (x.rank() != 3 || x.shape()[1] != in_channels)
    throw ShapeError("[Conv1d] '" + path() + "' expects [N, " + std::to_string(in_channels) + ", L], got " +
                     shape_str(x.shape()) + conv_at(loc));
  return conv1d(x, weight.tensor(loc), bias ? bias->tensor(loc) : Tensor(), conv, loc);
}

ConvTranspose2d::ConvTranspose2d(Module& parent, std::string name, int64_t in, int64_t out, Size2 kernel,
                                 ConvTranspose2dLayerOptions o)
    : Module(parent, std::move(name)),
      in_channels(in),
      out_channels(out),
      conv{o.stride, o.padding, o.output_padding, o.dilation, o.groups},
      weight(*this, "weight", {in, o.groups > 0 ? out / o.groups : out, kernel.h, kernel.w},
             o.weight_init.value_or(torch_conv_init(out, o.groups, kernel))) {
  check_channels("ConvTranspose2d", path(), in, out, kernel, o.groups);
  if (o.bias)
    bias.emplace(*this, "bias", Shape{out}, o.bias_init.value_or(torch_conv_init(out, o.groups, kernel)));
}

Tensor ConvTranspose2d::operator()(const Tensor& x, Loc loc) const {
  check_input("ConvTranspose2d", path(), x, in_channels, loc);
  return conv_transpose2d(x, weight.tensor(loc), bias ? bias->tensor(loc) : Tensor(), conv, loc);
}

BatchNorm2d::BatchNorm2d(Module& parent, std::string name, int64_t c, BatchNormOptions o)
    : Module(parent, std::move(name)), channels(c), options(o) {
  if (c < 1) throw ShapeError("[BatchNorm2d] '" + path() + "' needs at least one channel");
  if (!(o.eps >= 0) || !(o.momentum >= 0 && o.momentum <= 1))
    throw InputError("[BatchNorm2d] '" + path() + "': eps must be >= 0 and momentum in [0, 1]");
  if (o.affine) {
    weight.emplace(*this, "weight", Shape{c}, init::constant(1.0));
    bias.emplace(*this, "bias", Shape{c}, init::constant(0.0));
  }
}

GroupNorm::GroupNorm(Module& parent, std::string name, int64_t g, int64_t c, GroupNormOptions o)
    : Module(parent, std::move(name)), groups(g), channels(c), options(o) {
  if (g < 1 || c < 1 || c % g != 0)
    throw ShapeError("[GroupNorm] '" + path() + "': " + std::to_string(c) + " channels do not divide into " +
                     std::to_string(g) + " groups");
  if (!(o.eps >= 0)) throw InputError("[GroupNorm] '" + path() + "': eps must be >= 0");
  if (o.affine) {
    weight.emplace(*this, "weight", Shape{c}, init::constant(1.0));
    bias.emplace(*this, "bias", Shape{c}, init::constant(0.0));
  }
}

Tensor GroupNorm::operator()(const Tensor& x, Loc loc) const {
  if (x.rank() < 2 || x.shape()[1] != channels)
    throw ShapeError("[GroupNorm] '" + path() + "' expects [N, " + std::to_string(channels) + ", ...], got " +
                     shape_str(x.shape()) + conv_at(loc));
  return group_norm(x, groups, weight ? weight->tensor(loc) : Tensor(), bias ? bias->tensor(loc) : Tensor(),
                    options.eps, loc);
}

Tensor BatchNorm2d::operator()(const Tensor& x, Loc loc) const {
  if (x.rank() < 2 || x.shape()[1] != channels)
    throw ShapeError("[BatchNorm2d] '" + path() + "' expects [N, " + std::to_string(channels) +
                     ", ...], got " + shape_str(x.shape()) + conv_at(loc));
  const Tensor running_mean = state(path() + ".running_mean", {channels}, DType::kF32, 0.0, loc);
  const Tensor running_var = state(path() + ".running_var", {channels}, DType::kF32, 1.0, loc);
  const Tensor w = weight ? weight->tensor(loc) : Tensor(), b = bias ? bias->tensor(loc) : Tensor();
  if (!is_training()) return batch_norm(x, running_mean, running_var, w, b, options.eps, loc);
  Axes axes{0};
  for (int64_t a = 2; a < x.rank(); ++a) axes.push_back(a);
  const int64_t m = x.numel() / channels;
  if (m < 2)
    throw ShapeError("[BatchNorm2d] '" + path() + "' needs more than one value per channel to train, got " +
                     shape_str(x.shape()) + conv_at(loc));
  const Tensor mean_b = mean(x, axes, /*keepdim=*/false, loc);
  Shape kept(static_cast<size_t>(x.rank()), 1);
  kept[1] = channels;
  const Tensor centred = x - reshape(mean_b, kept, loc);
  const Tensor var_b = mean(centred * centred, axes, /*keepdim=*/false, loc);
  const double mo = options.momentum;
  assign(running_mean, stop_gradient(running_mean * (1 - mo) + mean_b * mo, loc), loc);
  assign(
      running_var,
      stop_gradient(
          running_var * (1 - mo) + var_b * (mo * static_cast<double>(m) / static_cast<double>(m - 1)), loc),
      loc);
  Tensor scale = rsqrt(reshape(var_b, kept, loc) + options.eps, loc);
  if (w.valid()) scale = scale * reshape(w, kept, loc);
  Tensor y = centred * scale;
  if (b.valid()) y = y + reshape(b, kept, loc);
  return y;
}

Tensor Flatten::operator()(const Tensor& x, Loc loc) const {
  if (x.rank() < 1) throw ShapeError("[Flatten] needs at least one axis" + conv_at(loc));
  return reshape(x, {x.shape()[0], -1}, loc);
}

}  // namespace tg::nn
