// Mamba layers (mamba.h): the Mamba and Mamba-2 mixers and the language model, written with
// tensorgrad ops and the selective_scan primitive. Initialisation follows state-spaces/mamba:
// PyTorch's Linear and Conv1d defaults, dt_proj's weight U(±dt_rank^−½) and bias (Mamba-2:
// dt_bias) the inverse softplus of a dt drawn log-uniformly in [dt_min, dt_max] (floored),
// A_log = log(1 … N) per channel (Mamba-2: log(1 … heads), as transformers), D = 1, and
// out_proj's weight divided by √layers; A_log, D and dt_bias carry no weight decay.
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

/// dt_proj.bias (Mamba-2: dt_bias): softplus⁻¹(dt) with dt = exp(U·(log dt_max − log dt_min) +
/// log dt_min) ≥ floor.
template <typename Config>
Init dt_bias_init(const Config& c) {
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

/// U(±1/√(fan_in · layers)): out_proj's init, rescaled by the number of layers.
Init out_proj_init(int64_t fan_in, int64_t layers) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in * std::max<int64_t>(layers, 1)));
  return init::uniform(-bound, bound);
}

Mamba2Config checked(Mamba2Config c) {
  if (c.d_model <= 0 || c.d_state <= 0 || c.d_conv <= 0 || c.expand <= 0 || c.head_dim <= 0 || c.groups <= 0)
    throw Error("[Mamba2] d_model, d_state, d_conv, expand, head_dim and groups must be positive");
  if (c.d_inner < 0 || c.norm_groups <= 0) throw Error("[Mamba2] needs d_inner >= 0 and norm_groups > 0");
  const int64_t inner = c.d_inner > 0 ? c.d_inner : c.expand * c.d_model;
  if (inner % c.head_dim != 0)
    throw Error("[Mamba2] d_inner " + std::to_string(inner) + " is not a multiple of head_dim " +
                std::to_string(c.head_dim));
  if (inner % c.norm_groups != 0)
    throw Error("[Mamba2] d_inner " + std::to_string(inner) + " does not split into " +
                std::to_string(c.norm_groups) + " norm groups");
  if ((inner / c.head_dim) % c.groups != 0)
    throw Error("[Mamba2] " + std::to_string(inner / c.head_dim) + " heads do not split into " +
                std::to_string(c.groups) + " groups");
  if (!(c.dt_min > 0 && c.dt_max >= c.dt_min)) throw Error("[Mamba2] needs 0 < dt_min <= dt_max");
  if (!(c.dt_limit_min <= c.dt_limit_max) || c.dt_limit_max <= 0)
    throw Error("[Mamba2] needs dt_limit_min <= dt_limit_max and dt_limit_max > 0");
  return c;
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

Tensor CausalConv1d::step(const Tensor& x, const std::string& state_name, Loc loc) const {
  const int64_t batch = x.shape()[0], channels = weight.shape()[0], k = weight.shape()[1];
  // The window: the last k − 1 inputs (the state) and this one.
  Tensor window = reshape(x, {batch, channels, 1}, loc);
  if (k > 1) {
    const Tensor conv_state = state(state_name, {batch, channels, k - 1});
    window = concat({conv_state, window}, 2, loc);
    assign(conv_state, slice(window, 2, 1, k, 1, loc), loc);
  }
  const Tensor y = sum(mul(window, weight.tensor(loc), loc), {2}, false, loc);
  return bias ? add(y, bias->tensor(loc), loc) : y;
}

Tensor CausalConv1d::steps(const Tensor& x, const std::string& state_name, Loc loc) const {
  const int64_t batch = x.shape()[0], channels = weight.shape()[0], k = weight.shape()[1], len = x.shape()[2];
  if (k == 1) return (*this)(x, loc);
  // The state's k − 1 inputs, then the window's; the conv's first k − 1 outputs (over the zero
  // padding) are dropped, and the last k − 1 inputs are the new state.
  const Tensor conv_state = state(state_name, {batch, channels, k - 1});
  const Tensor all = concat({conv_state, x}, 2, loc);
  assign(conv_state, slice(all, 2, len, len + k - 1, 1, loc), loc);
  return slice((*this)(all, loc), 2, k - 1, len + k - 1, 1, loc);
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
               {.bias = c.bias, .weight_init = out_proj_init(c.expand * c.d_model, c.rescale_layers)}) {}

Tensor Mamba::operator()(const Tensor& x, Loc loc) const {
  if (x.rank() != 3 || x.shape()[2] != config.d_model)
    throw ShapeError("[Mamba] '" + path() + "' expects [B, L, " + std::to_string(config.d_model) + "], got " +
                     shape_str(x.shape()) + " (at " + loc.file_name() + ":" + std::to_string(loc.line()) +
                     ")");
  const int64_t di = d_inner;
  const Tensor xz = permute(in_proj(x, loc), {0, 2, 1}, loc);  // [B, 2·di, L]
  const Tensor xa = silu(conv1d(slice(xz, 1, 0, di, 1, loc), loc), loc);
  const Tensor y = mul(scan(xa, loc).scan.y, silu(slice(xz, 1, di, 2 * di, 1, loc), loc), loc);
  return out_proj(permute(y, {0, 2, 1}, loc), loc);
}

Mamba::Scanned Mamba::scan(const Tensor& xa, Loc loc) const {
  const int64_t n = config.d_state, r = dt_rank;
  const Tensor x_dbl = x_proj(permute(xa, {0, 2, 1}, loc), loc);  // [B, L, r + 2n]
  // dt_proj's product here; its bias is the scan's delta_bias (inside the softplus).
  const Tensor delta =
      permute(matmul(slice(x_dbl, 2, 0, r, 1, loc), transpose(dt_proj.weight.tensor(loc), 0, 1, loc), loc),
              {0, 2, 1}, loc);
  const Tensor Bm = permute(slice(x_dbl, 2, r, r + n, 1, loc), {0, 2, 1}, loc);  // [B, n, L]
  const Tensor Cm = permute(slice(x_dbl, 2, r + n, r + 2 * n, 1, loc), {0, 2, 1}, loc);
  const Tensor A = neg(exp(A_log.tensor(loc), loc), loc);
  return {selective_scan(
              xa, delta, A, Bm, Cm,
              {.D = D.tensor(loc), .delta_bias = dt_proj.bias->tensor(loc), .delta_softplus = true}, loc),
          delta, Cm};
}

Tensor Mamba::step(const Tensor& x, Loc loc) const {
  if (x.rank() != 3 || x.shape()[1] < 1 || x.shape()[2] != config.d_model)
    throw ShapeError("[Mamba] '" + path() + "' steps tokens: expects [B, T, " +
                     std::to_string(config.d_model) + "], got " + shape_str(x.shape()) + " (at " +
                     loc.file_name() + ":" + std::to_string(loc.line()) + ")");
  if (x.shape()[1] > 1) return window(x, loc);
  const int64_t batch = x.shape()[0], n = config.d_state, r = dt_rank, di = d_inner;
  const Tensor xz = reshape(in_proj(x, loc), {batch, 2 * di}, loc);
  const Tensor xs = slice(xz, 1, 0, di, 1, loc), z = slice(xz, 1, di, 2 * di, 1, loc);
  const Tensor xa = silu(conv1d.step(xs, path() + ".conv_state", loc), loc);        // [B, di]
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

// T > 1 tokens from the states h₀ (ssm) and the conv's. The scan is linear in its state: from
// h₀, h_l = h_l|₀ + exp(A·c_l) ⊙ h₀ with c_l = Δ_0 + … + Δ_l, where h_l|₀ is the scan's from
// zero over the window. So y_l gains Σ_n C_l,n · exp(A_n·c_l) · h₀_n, and the last h_l is the
// new state.
Tensor Mamba::window(const Tensor& x, Loc loc) const {
  const int64_t batch = x.shape()[0], len = x.shape()[1], n = config.d_state, di = d_inner;
  const Tensor xz = permute(in_proj(x, loc), {0, 2, 1}, loc);  // [B, 2·di, T]
  const Tensor xa = silu(conv1d.steps(slice(xz, 1, 0, di, 1, loc), path() + ".conv_state", loc), loc);
  const Scanned sc = scan(xa, loc);
  const Tensor delta = softplus(add(sc.delta, reshape(dt_proj.bias->tensor(loc), {di, 1}, loc), loc), loc);
  const Tensor A = neg(exp(A_log.tensor(loc), loc), loc);  // [di, n]
  const Tensor h0 = state(path() + ".ssm_state", {batch, di, n});
  const Tensor decay = exp(
      mul(reshape(cumsum(delta, 2, false, loc), {batch, di, len, 1}, loc), reshape(A, {di, 1, n}, loc), loc),
      loc);  // [B, di, T, n]
  const Tensor c = reshape(permute(sc.C, {0, 2, 1}, loc), {batch, 1, len, n}, loc);
  const Tensor carried =
      sum(mul(mul(decay, reshape(h0, {batch, di, 1, n}, loc), loc), c, loc), {3}, false, loc);
  assign(h0,
         add(sc.scan.last_state,
             mul(reshape(slice(decay, 2, len - 1, len, 1, loc), {batch, di, n}, loc), h0, loc), loc),
         loc);
  const Tensor y = mul(add(sc.scan.y, carried, loc), silu(slice(xz, 1, di, 2 * di, 1, loc), loc), loc);
  return out_proj(permute(y, {0, 2, 1}, loc), loc);
}

Mamba2::Mamba2(Module& parent, std::string name, Mamba2Config c)
    : Module(parent, std::move(name)),
      config(checked(c)),
      d_inner(c.d_inner > 0 ? c.d_inner : c.expand * c.d_model),
      heads(d_inner / c.head_dim),
      conv_channels(d_inner + 2 * c.groups * c.d_state),
      in_proj(*this, "in_proj", c.d_model, 2 * d_inner + 2 * c.groups * c.d_state + heads, {.bias = c.bias}),
      conv1d(*this, "conv1d", conv_channels, c.d_conv, c.conv_bias),
      dt_bias(*this, "dt_bias", {heads}, dt_bias_init(c), {.decay = false}),
      A_log(*this, "A_log", {heads}, init::callable([](std::span<float> values, const Shape&, uint64_t) {
        for (size_t i = 0; i < values.size(); ++i)  // A = −(1 … heads), transformers' init
          values[i] = static_cast<float>(std::log(static_cast<double>(i + 1)));
      }),
            {.decay = false}),
      D(*this, "D", {heads}, init::ones(), {.decay = false}),
      norm(*this, "norm", d_inner, c.norm_eps),
      out_proj(*this, "out_proj", d_inner, c.d_model,
               {.bias = c.bias, .weight_init = out_proj_init(d_inner, c.rescale_layers)}) {}

Tensor Mamba2::clamp_dt(const Tensor& dt, Loc loc) const {
  const int64_t rank = dt.rank();
  Shape bias_shape(static_cast<size_t>(rank - 1), 1);  // [heads, 1, …] against dt's [B, heads, …]
  bias_shape[0] = heads;
  const Tensor delta = softplus(add(dt, reshape(dt_bias.tensor(loc), bias_shape, loc), loc), loc);
  // softplus is ≥ 0: a lower limit ≤ 0 and an infinite upper one change nothing.
  if (config.dt_limit_min <= 0 && std::isinf(config.dt_limit_max)) return delta;
  return clamp(delta, config.dt_limit_min, config.dt_limit_max, loc);
}

Tensor Mamba2::gated_norm(const Tensor& y, Loc loc) const {
  if (config.norm_groups == 1) return norm(y, loc);
  Shape grouped = y.shape();  // [..., d_inner] → [..., groups, d_inner / groups]
  grouped.back() = config.norm_groups;
  grouped.push_back(d_inner / config.norm_groups);
  const Tensor t = reshape(y, grouped, loc);
  const Tensor scaled =
      mul(t, rsqrt(add(mean(mul(t, t, loc), {-1}, true, loc), config.norm_eps, loc), loc), loc);
  return mul(reshape(scaled, y.shape(), loc), norm.weight.tensor(loc), loc);
}

Tensor Mamba2::operator()(const Tensor& x, Loc loc) const {
  if (x.rank() != 3 || x.shape()[2] != config.d_model)
    throw ShapeError("[Mamba2] '" + path() + "' expects [B, L, " + std::to_string(config.d_model) +
                     "], got " + shape_str(x.shape()) + " (at " + loc.file_name() + ":" +
                     std::to_string(loc.line()) + ")");
  const Tensor proj = in_proj(x, loc);  // [B, L, di + conv_channels + heads]
  const Tensor xbc = silu(conv1d(conv_input(proj, loc), loc), loc);
  return finish(proj, scan(proj, xbc, loc).scan.y, loc);
}

Tensor Mamba2::conv_input(const Tensor& proj, Loc loc) const {
  return permute(slice(proj, 2, d_inner, d_inner + conv_channels, 1, loc), {0, 2, 1}, loc);
}

Tensor Mamba2::finish(const Tensor& proj, const Tensor& y, Loc loc) const {
  const Tensor z = permute(slice(proj, 2, 0, d_inner, 1, loc), {0, 2, 1}, loc);
  return out_proj(gated_norm(permute(mul(y, silu(z, loc), loc), {0, 2, 1}, loc), loc), loc);
}

Mamba2::Scanned Mamba2::scan(const Tensor& proj, const Tensor& xbc, Loc loc) const {
  const int64_t batch = proj.shape()[0], len = proj.shape()[1], n = config.d_state, g = config.groups;
  const int64_t di = d_inner, p = config.head_dim, gn = g * n;
  const Tensor u = slice(xbc, 1, 0, di, 1, loc);  // [B, di, L], channel h·head_dim + p
  const Tensor Bm = reshape(slice(xbc, 1, di, di + gn, 1, loc), {batch, g, n, len}, loc);
  const Tensor Cm = reshape(slice(xbc, 1, di + gn, di + 2 * gn, 1, loc), {batch, g, n, len}, loc);
  const Tensor dh = clamp_dt(
      permute(slice(proj, 2, di + conv_channels, di + conv_channels + heads, 1, loc), {0, 2, 1}, loc), loc);
  // A head's Δ, decay and skip, repeated over its head_dim channels.
  const auto per_channel = [&](const Tensor& v) {  // [heads] → [di]
    return reshape(broadcast_to(reshape(v, {heads, 1}, loc), {heads, p}, loc), {di}, loc);
  };
  const Tensor delta =
      reshape(broadcast_to(reshape(dh, {batch, heads, 1, len}, loc), {batch, heads, p, len}, loc),
              {batch, di, len}, loc);
  const Tensor A = reshape(
      broadcast_to(reshape(neg(exp(A_log.tensor(loc), loc), loc), {heads, 1, 1}, loc), {heads, p, n}, loc),
      {di, n}, loc);
  return {selective_scan(u, delta, A, Bm, Cm, {.D = per_channel(D.tensor(loc))}, loc), dh, Cm};
}

Tensor Mamba2::step(const Tensor& x, Loc loc) const {
  if (x.rank() != 3 || x.shape()[1] < 1 || x.shape()[2] != config.d_model)
    throw ShapeError("[Mamba2] '" + path() + "' steps tokens: expects [B, T, " +
                     std::to_string(config.d_model) + "], got " + shape_str(x.shape()) + " (at " +
                     loc.file_name() + ":" + std::to_string(loc.line()) + ")");
  if (x.shape()[1] > 1) return window(x, loc);
  const int64_t batch = x.shape()[0], n = config.d_state, g = config.groups;
  const int64_t di = d_inner, p = config.head_dim, gn = g * n, hg = heads / g;
  const Tensor proj = reshape(in_proj(x, loc), {batch, di + conv_channels + heads}, loc);
  const Tensor z = slice(proj, 1, 0, di, 1, loc);
  const Tensor xa =
      silu(conv1d.step(slice(proj, 1, di, di + conv_channels, 1, loc), path() + ".conv_state", loc),
           loc);  // [B, conv_channels]
  // [B, groups, heads per group, head_dim, d_state]: a group's B and C against its heads' states.
  const Tensor u = reshape(slice(xa, 1, 0, di, 1, loc), {batch, g, hg, p, 1}, loc);
  const Tensor Bm = reshape(slice(xa, 1, di, di + gn, 1, loc), {batch, g, 1, 1, n}, loc);
  const Tensor Cm = reshape(slice(xa, 1, di + gn, di + 2 * gn, 1, loc), {batch, g, 1, 1, n}, loc);
  const Tensor delta =
      reshape(clamp_dt(slice(proj, 1, di + conv_channels, di + conv_channels + heads, 1, loc), loc),
              {batch, g, hg, 1, 1}, loc);
  const Tensor A = reshape(neg(exp(A_log.tensor(loc), loc), loc), {g, hg, 1, 1}, loc);
  const Tensor h = state(path() + ".ssm_state", {batch, di, n});
  const Tensor h_new = add(mul(exp(mul(delta, A, loc), loc), reshape(h, {batch, g, hg, p, n}, loc), loc),
                           mul(mul(delta, u, loc), Bm, loc), loc);
  assign(h, reshape(h_new, {batch, di, n}, loc), loc);
  Tensor y = sum(mul(h_new, Cm, loc), {4}, false, loc);  // [B, g, hg, p]
  y = add(y, mul(reshape(u, {batch, g, hg, p}, loc), reshape(D.tensor(loc), {g, hg, 1}, loc), loc), loc);
  y = mul(reshape(y, {batch, di}, loc), silu(z, loc), loc);
  return reshape(out_proj(gated_norm(y, loc), loc), {batch, 1, config.d_model}, loc);
}

// T > 1 tokens from the states, as Mamba::window; a head's decay is one number, so the carried
// state's part of y is exp(A_h·c_l) times the product of h₀ [.., head_dim, n] with C [n, T].
Tensor Mamba2::window(const Tensor& x, Loc loc) const {
  const int64_t batch = x.shape()[0], len = x.shape()[1], n = config.d_state, g = config.groups;
  const int64_t di = d_inner, p = config.head_dim;
  const Tensor proj = in_proj(x, loc);  // [B, T, di + conv_channels + heads]
  const Tensor xbc = silu(conv1d.steps(conv_input(proj, loc), path() + ".conv_state", loc), loc);
  const Scanned sc = scan(proj, xbc, loc);
  const Tensor h0 = state(path() + ".ssm_state", {batch, di, n});
  const Tensor Ah = reshape(neg(exp(A_log.tensor(loc), loc), loc), {heads, 1}, loc);
  const Tensor decay = exp(mul(cumsum(sc.delta, 2, false, loc), Ah, loc), loc);  // [B, heads, T]
  const Tensor hc = matmul(reshape(h0, {batch, g, di / g, n}, loc), sc.C, loc);  // [B, g, di / g, T]
  const Tensor carried =
      reshape(mul(reshape(hc, {batch, heads, p, len}, loc), reshape(decay, {batch, heads, 1, len}, loc), loc),
              {batch, di, len}, loc);
  const Tensor last = reshape(slice(decay, 2, len - 1, len, 1, loc), {batch, heads, 1, 1}, loc);
  assign(h0,
         add(sc.scan.last_state,
             reshape(mul(reshape(h0, {batch, heads, p, n}, loc), last, loc), {batch, di, n}, loc), loc),
         loc);
  return finish(proj, add(sc.scan.y, carried, loc), loc);
}

MambaLM::Layer::Layer(Module& parent, std::string name, const MambaLMConfig& c, int64_t layers)
    : Module(parent, std::move(name)), norm(*this, "norm", c.d_model, c.norm_eps) {
  if (c.version == 1)
    mamba = std::make_unique<Mamba>(*this, "mixer",
                                    MambaConfig{.d_model = c.d_model,
                                                .d_state = c.d_state,
                                                .d_conv = c.d_conv,
                                                .expand = c.expand,
                                                .conv_bias = c.conv_bias,
                                                .bias = c.bias,
                                                .rescale_layers = layers});
  else
    mamba2 = std::make_unique<Mamba2>(*this, "mixer",
                                      Mamba2Config{.d_model = c.d_model,
                                                   .d_state = c.d_state,
                                                   .d_conv = c.d_conv,
                                                   .expand = c.expand,
                                                   .head_dim = c.head_dim,
                                                   .groups = c.groups,
                                                   .norm_eps = c.norm_eps,
                                                   .dt_limit_min = c.dt_limit_min,
                                                   .dt_limit_max = c.dt_limit_max,
                                                   .conv_bias = c.conv_bias,
                                                   .bias = c.bias,
                                                   .rescale_layers = layers});
}

MambaLM::MambaLM(MambaLMConfig c) : config(c) { build(); }
MambaLM::MambaLM(Module& parent, std::string name, MambaLMConfig c)
    : Module(parent, std::move(name)), config(c) {
  build();
}

void MambaLM::build() {
  const MambaLMConfig& c = config;
  if (c.vocab <= 0 || c.layers <= 0 || c.d_model <= 0)
    throw Error("[MambaLM] vocab, layers and d_model must be positive");
  if (c.version != 1 && c.version != 2)
    throw Error("[MambaLM] version is 1 (Mamba) or 2 (Mamba-2), got " + std::to_string(c.version));
  embedding_ = std::make_unique<Embedding>(*this, "embedding", c.vocab, c.d_model, init::normal(0.02));
  for (int64_t i = 0; i < c.layers; ++i)
    layers_.push_back(std::make_unique<Layer>(*this, "layers." + std::to_string(i), c, c.layers));
  norm_f_ = std::make_unique<RMSNorm>(*this, "norm_f", c.d_model, c.norm_eps);
  if (!c.tied_head) lm_head_ = std::make_unique<Linear>(*this, "lm_head", c.d_model, c.vocab, no_bias());
}

Tensor MambaLM::head(const Tensor& h, Loc loc) const {
  const Tensor normed = (*norm_f_)(h, loc);
  if (lm_head_) return (*lm_head_)(normed, loc);
  return matmul(normed, transpose(embedding_->weight.tensor(loc), 0, 1, loc), loc);
}

Tensor MambaLM::logits(const Tensor& ids, Loc loc) const {
  if (ids.rank() != 2 || ids.dtype() != DType::kI32)
    throw ShapeError("[MambaLM] '" + path() + "' expects i32 ids [B, L], got " + dtype_name(ids.dtype()) +
                     shape_str(ids.shape()) + " (at " + loc.file_name() + ":" + std::to_string(loc.line()) +
                     ")");
  Tensor h = (*embedding_)(ids, loc);
  for (const auto& layer : layers_) {
    const Recompute region(config.recompute);
    h = add(h, layer->mix(layer->norm(h, loc), loc), loc);
  }
  return head(h, loc);
}

Tensor MambaLM::logits_step(const Tensor& ids, Loc loc) const {
  if (ids.rank() != 2 || ids.dtype() != DType::kI32 || ids.shape()[1] < 1)
    throw ShapeError("[MambaLM] '" + path() + "' steps tokens: expects i32 ids [B, T], got " +
                     dtype_name(ids.dtype()) + shape_str(ids.shape()) + " (at " + loc.file_name() + ":" +
                     std::to_string(loc.line()) + ")");
  Tensor h = (*embedding_)(ids, loc);
  for (const auto& layer : layers_) h = add(h, layer->step(layer->norm(h, loc), loc), loc);
  return head(h, loc);
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
