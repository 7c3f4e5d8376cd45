// Mamba layers (mamba.h): the mixer and the language model, written with tensorgrad ops and the
// selective_scan primitive. Initialisation follows state-spaces/mamba: PyTorch's Linear and
// Conv1d defaults, dt_proj's weight U(±dt_rank^−½) and bias the inverse softplus of a dt drawn
// log-uniformly in [dt_min, dt_max] (floored), A_log = log(1 … N) per channel, D = 1, and
// out_proj's weight divided by √layers; A_log and D carry no weight decay.
#include "tensorgrad/mamba.h"

#include <cmath>
#include <random>

#include "tensorgrad/errors.h"

namespace tg::nn {
namespace {

LinearOptions no_bias() { return {.bias = false}; }

int64_t rank_of(const MambaConfig& c) { return c.dt_rank > 0 ? c.dt_rank : (c.d_model + 15) / 16; }

MambaConfig checked(MambaConfig c) {
  if (c.d_model <= 0 || c.d_state <= 0 || c.d_conv <= 0 || c.expand <= 0)
    throw Error("[Mamba] d_model, d_state, d_conv and expand must be positive");
  if (!(c.dt_min > 0 && c.dt_max >= c.dt_min)) throw Error("[Mamba] needs 0 < dt_min <= dt_max");
  return c;
}

/// dt_proj.bias: softplus⁻¹(dt) with dt = exp(U·(log dt_max − log dt_min) + log dt_min) ≥ floor.
Init dt_bias_init(const MambaConfig& c) {
  return init::callable([c](std::span<float> values, const Shape&, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (float& v : values) {
      const double dt = std::max(
          std::exp(u(rng) * (std::log(c.dt_max) - std::log(c.dt_min)) + std::log(c.dt_min)), c.dt_init_floor);
      v = static_cast<float>(dt + std::log(-std::expm1(-dt)));
    }
  });
}

}  // namespace

CausalConv1d::CausalConv1d(Module& parent, std::string name, int64_t channels, int64_t kernel, bool with_bias)
    : Module(parent, std::move(name)),
      weight(*this, "weight", {channels, kernel},
             init::uniform(-1.0 / std::sqrt(static_cast<double>(kernel)),
                           1.0 / std::sqrt(static_cast<double>(kernel)))) {
  if (with_bias)
    bias.emplace(*this, "bias", Shape{channels},
                 init::uniform(-1.0 / std::sqrt(static_cast<double>(kernel)),
                               1.0 / std::sqrt(static_cast<double>(kernel))));
}

Tensor CausalConv1d::operator()(const Tensor& x, Loc loc) const {
  return causal_conv1d(x, weight.tensor(loc), bias ? bias->tensor(loc) : Tensor(), loc);
}

Mamba::Mamba(Module& parent, std::string name, MambaConfig c)
    : Module(parent, std::move(name)),
      config(checked(c)),
      d_inner(c.expand * c.d_model),
      dt_rank(rank_of(c)),
      in_proj(*this, "in_proj", c.d_model, 2 * c.expand * c.d_model, {.bias = c.bias}),
      conv1d(*this, "conv1d", c.expand * c.d_model, c.d_conv, c.conv_bias),
      x_proj(*this, "x_proj", c.expand * c.d_model, rank_of(c) + 2 * c.d_state, no_bias()),
      dt_proj(*this, "dt_proj", rank_of(c), c.expand * c.d_model,
              {.weight_init = init::uniform(-1.0 / std::sqrt(static_cast<double>(rank_of(c))),
                                            1.0 / std::sqrt(static_cast<double>(rank_of(c)))),
               .bias_init = dt_bias_init(c)}),
      A_log(*this, "A_log", {c.expand * c.d_model, c.d_state},
            init::callable([](std::span<float> values, const Shape& shape, uint64_t) {
              for (size_t i = 0; i < values.size(); ++i)
                values[i] =
                    static_cast<float>(std::log(static_cast<double>(i % static_cast<size_t>(shape[1]) + 1)));
            }),
            {.decay = false}),
      D(*this, "D", {c.expand * c.d_model}, init::ones(), {.decay = false}),
      out_proj(*this, "out_proj", c.expand * c.d_model, c.d_model,
               {.bias = c.bias,
                .weight_init = init::uniform(
                    -1.0 / std::sqrt(static_cast<double>(c.expand * c.d_model *
                                                         std::max<int64_t>(c.rescale_layers, 1))),
                    1.0 / std::sqrt(static_cast<double>(c.expand * c.d_model *
                                                        std::max<int64_t>(c.rescale_layers, 1))))}) {}

Tensor Mamba::operator()(const Tensor& x, Loc loc) const {
  if (x.rank() != 3 || x.shape()[2] != config.d_model)
    throw ShapeError("[Mamba] '" + path() + "' expects [B, L, " + std::to_string(config.d_model) + "], got " +
                     shape_str(x.shape()) + " (at " + loc.file_name() + ":" + std::to_string(loc.line()) +
                     ")");
  const int64_t n = config.d_state, r = dt_rank, di = d_inner;
  const Tensor xz = permute(in_proj(x, loc), {0, 2, 1}, loc);  // [B, 2·di, L]
  const Tensor xs = silu(conv1d(slice(xz, 1, 0, di, 1, loc), loc), loc);
  const Tensor z = slice(xz, 1, di, 2 * di, 1, loc);
  const Tensor x_dbl = x_proj(permute(xs, {0, 2, 1}, loc), loc);  // [B, L, r + 2n]
  // dt_proj's product here; its bias is the scan's delta_bias (inside the softplus).
  const Tensor delta =
      permute(matmul(slice(x_dbl, 2, 0, r, 1, loc), transpose(dt_proj.weight.tensor(loc), 0, 1, loc), loc),
              {0, 2, 1}, loc);
  const Tensor Bm = permute(slice(x_dbl, 2, r, r + n, 1, loc), {0, 2, 1}, loc);  // [B, n, L]
  const Tensor Cm = permute(slice(x_dbl, 2, r + n, r + 2 * n, 1, loc), {0, 2, 1}, loc);
  const Tensor A = neg(exp(A_log.tensor(loc), loc), loc);
  const SelectiveScanResult s = selective_scan(
      xs, delta, A, Bm, Cm,
      {.D = D.tensor(loc), .z = z, .delta_bias = dt_proj.bias->tensor(loc), .delta_softplus = true}, loc);
  return out_proj(permute(s.y, {0, 2, 1}, loc), loc);
}

Tensor Mamba::step(const Tensor& x, Loc loc) const {
  if (x.rank() != 3 || x.shape()[1] != 1 || x.shape()[2] != config.d_model)
    throw ShapeError("[Mamba] '" + path() + "' steps one token: expects [B, 1, " +
                     std::to_string(config.d_model) + "], got " + shape_str(x.shape()) + " (at " +
                     loc.file_name() + ":" + std::to_string(loc.line()) + ")");
  const int64_t batch = x.shape()[0], n = config.d_state, r = dt_rank, di = d_inner, k = config.d_conv;
  const Tensor xz = reshape(in_proj(x, loc), {batch, 2 * di}, loc);
  const Tensor xs = slice(xz, 1, 0, di, 1, loc), z = slice(xz, 1, di, 2 * di, 1, loc);
  // The conv's window: its last k − 1 inputs (state) and this one.
  Tensor window = reshape(xs, {batch, di, 1}, loc);
  if (k > 1) {
    const Tensor conv_state = state(path() + ".conv_state", {batch, di, k - 1});
    window = concat({conv_state, window}, 2, loc);
    assign(conv_state, slice(window, 2, 1, k, 1, loc), loc);
  }
  Tensor xc = sum(mul(window, conv1d.weight.tensor(loc), loc), {2}, false, loc);  // [B, di]
  if (conv1d.bias) xc = add(xc, conv1d.bias->tensor(loc), loc);
  const Tensor xa = silu(xc, loc);
  const Tensor x_dbl = x_proj(xa, loc);                                             // [B, r + 2n]
  const Tensor delta = softplus(dt_proj(slice(x_dbl, 1, 0, r, 1, loc), loc), loc);  // [B, di], bias inside
  const Tensor Bm = reshape(slice(x_dbl, 1, r, r + n, 1, loc), {batch, 1, n}, loc);
  const Tensor Cm = reshape(slice(x_dbl, 1, r + n, r + 2 * n, 1, loc), {batch, 1, n}, loc);
  const Tensor A = neg(exp(A_log.tensor(loc), loc), loc);  // [di, n]
  const Tensor d3 = reshape(delta, {batch, di, 1}, loc);
  const Tensor h = state(path() + ".ssm_state", {batch, di, n});
  const Tensor h_new = add(mul(exp(mul(d3, A, loc), loc), h, loc),
                           mul(mul(d3, reshape(xa, {batch, di, 1}, loc), loc), Bm, loc), loc);
  assign(h, h_new, loc);
  Tensor y = add(sum(mul(h_new, Cm, loc), {2}, false, loc), mul(xa, D.tensor(loc), loc), loc);
  y = mul(y, silu(z, loc), loc);
  return reshape(out_proj(y, loc), {batch, 1, config.d_model}, loc);
}

MambaLM::Layer::Layer(Module& parent, std::string name, const MambaLMConfig& c, int64_t layers)
    : Module(parent, std::move(name)),
      norm(*this, "norm", c.d_model, c.norm_eps),
      mixer(*this, "mixer",
            {.d_model = c.d_model,
             .d_state = c.d_state,
             .d_conv = c.d_conv,
             .expand = c.expand,
             .rescale_layers = layers}) {}

MambaLM::MambaLM(MambaLMConfig c) : config(c) { build(); }
MambaLM::MambaLM(Module& parent, std::string name, MambaLMConfig c)
    : Module(parent, std::move(name)), config(c) {
  build();
}

void MambaLM::build() {
  const MambaLMConfig& c = config;
  if (c.vocab <= 0 || c.layers <= 0 || c.d_model <= 0)
    throw Error("[MambaLM] vocab, layers and d_model must be positive");
  embedding_ = std::make_unique<Embedding>(*this, "embedding", c.vocab, c.d_model, init::normal(0.02));
  for (int64_t i = 0; i < c.layers; ++i)
    layers_.push_back(std::make_unique<Layer>(*this, "layers." + std::to_string(i), c, c.layers));
  norm_f_ = std::make_unique<RMSNorm>(*this, "norm_f", c.d_model, c.norm_eps);
}

Tensor MambaLM::logits(const Tensor& ids, Loc loc) const {
  if (ids.rank() != 2 || ids.dtype() != DType::kI32)
    throw ShapeError("[MambaLM] '" + path() + "' expects i32 ids [B, L], got " + dtype_name(ids.dtype()) +
                     shape_str(ids.shape()) + " (at " + loc.file_name() + ":" + std::to_string(loc.line()) +
                     ")");
  Tensor h = (*embedding_)(ids, loc);
  for (const auto& layer : layers_) {
    const Recompute region(config.recompute);
    h = add(h, layer->mixer(layer->norm(h, loc), loc), loc);
  }
  return matmul((*norm_f_)(h, loc), transpose(embedding_->weight.tensor(loc), 0, 1, loc), loc);
}

Tensor MambaLM::logits_step(const Tensor& ids, Loc loc) const {
  if (ids.rank() != 2 || ids.dtype() != DType::kI32 || ids.shape()[1] != 1)
    throw ShapeError("[MambaLM] '" + path() + "' steps one token per sequence: expects i32 ids [B, 1], got " +
                     dtype_name(ids.dtype()) + shape_str(ids.shape()) + " (at " + loc.file_name() + ":" +
                     std::to_string(loc.line()) +
                     "); with tg::Generator, set GeneratorOptions{.prefill = false}");
  Tensor h = (*embedding_)(ids, loc);
  for (const auto& layer : layers_) h = add(h, layer->mixer.step(layer->norm(h, loc), loc), loc);
  return matmul((*norm_f_)(h, loc), transpose(embedding_->weight.tensor(loc), 0, 1, loc), loc);
}

Tensor MambaLM::logits_cached(const Tensor& ids, const Tensor&, int64_t, Loc loc) const {
  return logits_step(ids, loc);
}

Tensor MambaLM::loss(const Tensor& ids, const Tensor& targets, int32_t ignore_index, Loc loc) const {
  const Tensor l = logits(ids, loc);
  const int64_t v = config.vocab;
  return cross_entropy(reshape(l, {-1, v}, loc), reshape(targets, {-1}, loc), {.ignore_index = ignore_index},
                       loc);
}

}  // namespace tg::nn
