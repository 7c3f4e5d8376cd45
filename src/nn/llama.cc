// The Llama-family decoder: RMSNorm pre-norm layers, RoPE grouped-query attention with separate
// q/k/v/o projections and a SwiGLU MLP, under Hugging Face LlamaForCausalLM's parameter names;
// hybrid models swap the attention of some layers for a Mamba-2 block.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "ir/trace.h"
#include "nn/heads.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/mamba.h"
#include "tensorgrad/nn.h"

namespace tg::nn {
namespace {

int64_t kv_heads_of(const LlamaConfig& c) { return c.kv_heads == 0 ? c.heads : c.kv_heads; }

std::string at_of(const Loc& loc) { return std::string(loc.file_name()) + ":" + std::to_string(loc.line()); }

}  // namespace

LlamaAttention::LlamaAttention(Module& parent, std::string name, const LlamaConfig& c)
    : Module(parent, std::move(name)),
      heads(c.heads),
      kv_heads(kv_heads_of(c)),
      head_dim(c.head_size()),
      rotary_dim(c.rotary_dim == 0 ? head_dim : c.rotary_dim),
      window(c.sliding_window),
      scale(c.attention_scale),
      softcap(c.attention_softcap),
      rope_theta(c.rope_theta),
      rope_scaling(c.rope_scaling),
      nope(c.nope),
      q_proj(*this, "q_proj", c.d_model, heads * head_dim, normal_linear(c.attention_bias || c.qkv_bias)),
      k_proj(*this, "k_proj", c.d_model, kv_heads * head_dim, normal_linear(c.attention_bias || c.qkv_bias)),
      v_proj(*this, "v_proj", c.d_model, kv_heads * head_dim, normal_linear(c.attention_bias || c.qkv_bias)),
      o_proj(*this, "o_proj", heads * head_dim, c.d_model, normal_linear(c.attention_bias)) {
  // Hugging Face's _init_weights draws the sinks as it draws the weights: normal(0, 0.02).
  if (c.attention_sinks) sinks.emplace(*this, "sinks", Shape{heads}, init::normal(0.02));
  if (c.qk_norm) {
    const int64_t q_width = c.qk_norm_whole ? heads * head_dim : head_dim,
                  k_width = c.qk_norm_whole ? kv_heads * head_dim : head_dim;
    q_norm = std::make_unique<RMSNorm>(*this, "q_norm", q_width, c.rms_eps, c.gemma);
    k_norm = std::make_unique<RMSNorm>(*this, "k_norm", k_width, c.rms_eps, c.gemma);
  }
}

// The projection, normalised per head (Qwen3, Gemma 3) or across the heads (OLMo 2: the norm's
// width tells), split into heads.
Tensor LlamaAttention::queries_keys(const Tensor& x, bool keys, Loc loc) const {
  Tensor t = (keys ? k_proj : q_proj)(x, loc);
  const std::unique_ptr<RMSNorm>& norm = keys ? k_norm : q_norm;
  const bool whole = norm && norm->weight.shape()[0] != head_dim;
  if (whole) t = (*norm)(t, loc);
  t = split_heads(t, keys ? kv_heads : heads, loc);
  return norm && !whole ? (*norm)(t, loc) : t;
}

Tensor LlamaAttention::rotated(const Tensor& t, const std::function<Tensor(const Tensor&)>& rotate,
                               Loc loc) const {
  if (nope) return t;
  if (rotary_dim == head_dim) return rotate(t);
  return concat({rotate(slice(t, -1, 0, rotary_dim, 1, loc)), slice(t, -1, rotary_dim, head_dim, 1, loc)}, -1,
                loc);
}

AttentionOptions LlamaAttention::options(const Loc& loc) const {
  return {.causal = true,
          .scale = scale > 0 ? std::optional<double>(scale) : std::nullopt,
          .window = window,
          .softcap = softcap,
          .sinks = sinks ? std::optional<Tensor>(sinks->tensor(loc)) : std::nullopt};
}

Tensor LlamaAttention::operator()(const Tensor& x, Loc loc) const {
  const auto rotate = [&](const Tensor& t) { return rope(t, rope_theta, rope_scaling, 0, loc); };
  Tensor q = rotated(queries_keys(x, false, loc), rotate, loc);  // [B, H, T, D]
  Tensor k = rotated(queries_keys(x, true, loc), rotate, loc);   // [B, Hkv, T, D]
  Tensor v = split_heads(v_proj(x, loc), kv_heads, loc);         // [B, Hkv, T, D]
  return o_proj(merge_heads(attention(q, k, v, options(loc), loc), loc), loc);
}

Tensor LlamaAttention::cached(const Tensor& x, const Tensor& pos, int64_t cache_len, Loc loc) const {
  const int64_t B = x.shape()[0], T = x.shape()[1];
  if (T > cache_len)
    throw ShapeError("[LlamaAttention] '" + path() + "': " + std::to_string(T) +
                     " new tokens do not fit a cache of " + std::to_string(cache_len) + " (at " + at_of(loc) +
                     ")");
  // The new tokens sit at pos[b] … pos[b] + T − 1: rotated there, their keys then cached.
  Tensor positions = token_positions(pos, T, loc);  // [B, T]
  const auto rotate = [&](const Tensor& t) {
    return rope_at(t, positions, cache_len, rope_theta, rope_scaling, loc);
  };
  Tensor q = rotated(queries_keys(x, false, loc), rotate, loc);
  Tensor k = rotated(queries_keys(x, true, loc), rotate, loc);
  Tensor v = split_heads(v_proj(x, loc), kv_heads, loc);
  Tensor k_cache = state(path() + ".k_cache", {B, kv_heads, cache_len, head_dim}),
         v_cache = state(path() + ".v_cache", {B, kv_heads, cache_len, head_dim});
  Tensor k_all = update_slice(k_cache, k, pos, 2, loc), v_all = update_slice(v_cache, v, pos, 2, loc);
  assign(k_cache, k_all, loc);
  assign(v_cache, v_all, loc);
  return o_proj(merge_heads(attention_at(q, k_all, v_all, pos, options(loc), loc), loc), loc);
}

LlamaNorm::LlamaNorm(Module& parent, std::string name, int64_t dim, const LlamaConfig& c)
    : Module(parent, std::move(name)),
      eps(c.rms_eps),
      plus_one(c.gemma),
      weight(*this, "weight", {dim}, c.gemma ? init::zeros() : init::ones()) {
  if (c.layer_norm) bias.emplace(*this, "bias", Shape{dim}, init::zeros());
}

Tensor LlamaNorm::operator()(const Tensor& x, Loc loc) const {
  if (bias) return layer_norm(x, weight.tensor(loc), bias->tensor(loc), eps, loc);
  Tensor w = weight.tensor(loc);
  return rms_norm(x, plus_one ? add(w, 1.0, loc) : w, eps, loc);
}

LlamaMlp::LlamaMlp(Module& parent, std::string name, const LlamaConfig& c, int64_t hidden)
    : Module(parent, std::move(name)),
      gate(c.gate),
      gate_proj(c.gated_mlp
                    ? std::make_unique<Linear>(*this, "gate_proj", c.d_model, hidden ? hidden : c.mlp_hidden,
                                               normal_linear(c.mlp_bias))
                    : nullptr),
      up_proj(*this, "up_proj", c.d_model, hidden ? hidden : c.mlp_hidden, normal_linear(c.mlp_bias)),
      down_proj(*this, "down_proj", hidden ? hidden : c.mlp_hidden, c.d_model, normal_linear(c.mlp_bias)) {}

namespace {

// The gated unit of gate and up (an MLP's, or an expert's rows).
Tensor activate(LlamaConfig::Gate gate, const Tensor& g, const Loc& loc);
Tensor gated(LlamaConfig::Gate gate, const Tensor& g, const Tensor& up, const Loc& loc) {
  if (gate != LlamaConfig::Gate::kClampedSwiglu) return mul(activate(gate, g, loc), up, loc);
  const Tensor gc = clamp(g, -std::numeric_limits<double>::infinity(), 7.0, loc);
  const Tensor glu = mul(gc, sigmoid(mul(gc, 1.702, loc), loc), loc);
  return mul(glu, add(clamp(up, -7.0, 7.0, loc), 1.0, loc), loc);
}

Tensor activate(LlamaConfig::Gate gate, const Tensor& g, const Loc& loc) {
  switch (gate) {
    case LlamaConfig::Gate::kClampedSwiglu:  // gated only (LlamaConfig's check)
    case LlamaConfig::Gate::kSilu: return silu(g, loc);
    case LlamaConfig::Gate::kGeluTanh: return gelu(g, GeluApprox::kTanh, loc);
    case LlamaConfig::Gate::kGelu: return gelu(g, GeluApprox::kErf, loc);
    case LlamaConfig::Gate::kRelu2: {
      const Tensor r = relu(g, loc);
      return mul(r, r, loc);
    }
  }
  return g;
}

}  // namespace

Tensor LlamaMlp::operator()(const Tensor& x, Loc loc) const {
  if (!gate_proj) return down_proj(activate(gate, up_proj(x, loc), loc), loc);
  return down_proj(gated(gate, (*gate_proj)(x, loc), up_proj(x, loc), loc), loc);
}

LlamaMoe::LlamaMoe(Module& parent, std::string name, const LlamaConfig& c)
    : Module(parent, std::move(name)),
      top_k(c.experts.top_k),
      normalize(c.experts.normalize),
      dispatch(c.experts.dispatch),
      gate(*this, "gate", c.d_model, c.experts.count, normal_linear(c.experts.router_bias)) {
  for (int64_t e = 0; e < c.experts.count; ++e)
    experts.push_back(std::make_unique<LlamaMlp>(*this, "experts." + std::to_string(e), c,
                                                 c.experts.hidden ? c.experts.hidden : c.mlp_hidden));
  if (c.experts.shared_hidden > 0) {
    shared_expert = std::make_unique<LlamaMlp>(*this, "shared_expert", c, c.experts.shared_hidden);
    if (c.experts.shared_gate)
      shared_expert_gate =
          std::make_unique<Linear>(*this, "shared_expert_gate", c.d_model, 1, normal_linear(false));
  }
}

// The top_k experts by router probability, as k rounds of argmax with each winner struck out
// (probabilities are ≥ 0, so −1 strikes): of equal ones the lowest index wins.
Tensor LlamaMoe::forward(const Tensor& x, MoeRouting* routing, Loc loc) const {
  const auto count = static_cast<int64_t>(experts.size());
  Tensor probs = softmax(gate(x, loc), -1, false, loc);  // [..., count]
  Tensor ids = arange(0, static_cast<double>(count), 1, DType::kI32, loc);
  Tensor remaining = probs;
  std::vector<Tensor> picks;  // each [..., 1]
  for (int64_t i = 0; i < top_k; ++i) {
    picks.push_back(argmax(remaining, -1, true, loc));
    remaining = where(eq(ids, picks.back(), loc), -1.0, remaining, loc);
  }
  Tensor choice = concat(picks, -1, loc);                    // [..., top_k] i32
  Tensor weights = take_along_axis(probs, choice, -1, loc);  // [..., top_k]
  if (normalize) weights = div(weights, sum(weights, {-1}, true, loc), loc);
  if (routing != nullptr) {
    const int64_t tokens = x.numel() / x.shape().back();
    Tensor counts = sum(reshape(one_hot(choice, count, loc), {tokens * top_k, count}, loc), {0}, false, loc);
    Tensor mass = sum(reshape(probs, {tokens, count}, loc), {0}, false, loc);
    routing->picks = routing->tokens == 0 ? counts : add(routing->picks, counts, loc);
    routing->probs = routing->tokens == 0 ? mass : add(routing->probs, mass, loc);
    routing->tokens += tokens;
  }
  Tensor out = sorted_dispatch() ? sorted(x, choice, weights, loc) : dense(x, choice, weights, loc);
  if (shared_expert) {
    Tensor shared = (*shared_expert)(x, loc);
    if (shared_expert_gate) shared = mul(sigmoid((*shared_expert_gate)(x, loc), loc), shared, loc);
    out = add(out, shared, loc);
  }
  return out;
}

bool LlamaMoe::sorted_dispatch() const {
  if (dispatch == LlamaConfig::Experts::Dispatch::kDense) return false;
  for (const auto& e : experts)
    for (const Linear* l : {e->gate_proj.get(), &e->up_proj, &e->down_proj})
      if (l->lora() != nullptr) return false;
  return true;
}

// Every expert on every token, weighted by zero where not chosen.
Tensor LlamaMoe::dense(const Tensor& x, const Tensor& choice, const Tensor& weights, Loc loc) const {
  Tensor out;
  for (int64_t e = 0; e < static_cast<int64_t>(experts.size()); ++e) {
    Tensor w = sum(where(eq(choice, static_cast<double>(e), loc), weights, 0.0, loc), {-1}, true, loc);
    Tensor term = mul(w, (*experts[static_cast<size_t>(e)])(x, loc), loc);
    out = e == 0 ? term : add(out, term, loc);
  }
  return out;
}

// The R = tokens·top_k (token, choice) rows sorted by expert, each expert's three products on its
// own rows (grouped_matmul over the experts' stacked weights), and the results back in row order,
// summed over each token's choices with their weights.
Tensor LlamaMoe::sorted(const Tensor& x, const Tensor& choice, const Tensor& weights, Loc loc) const {
  const int64_t d = x.shape().back(), tokens = x.numel() / d, rows = tokens * top_k;
  const ExpertOrder order =
      sort_by_expert(reshape(choice, {rows}, loc), static_cast<int64_t>(experts.size()), loc);
  Tensor place = unsqueeze(order.position, -1, loc);  // [R, 1]
  Tensor xr = reshape(broadcast_to(unsqueeze(reshape(x, {tokens, d}, loc), 1, loc), {tokens, top_k, d}, loc),
                      {rows, d}, loc);
  Tensor xs = scatter_add(xr, broadcast_to(place, {rows, d}, loc), 0, rows, loc);
  // [E, out, in]: each weight in the precision policy's type (the update's half copy under
  // mixed precision), then stacked.
  auto stacked = [&](auto pick) {
    std::vector<Tensor> ws;
    for (const auto& e : experts) ws.push_back(pick(*e).weight.tensor(loc));
    DType type = ir::policy_operand_dtype(ws.front());
    for (const Tensor& w : ws) type = ir::policy_operand_dtype(w) == type ? type : DType::kF32;
    for (Tensor& w : ws) w = unsqueeze(type == DType::kF32 ? w : cast(w, type, loc), 0, loc);
    return concat(ws, 0, loc);
  };
  // Biased experts (gpt-oss): each sorted row gets its expert's bias, gathered from the biases
  // stacked [E, out] by the expert of the row (the choices put in sorted order as xs is).
  Tensor expert_of_row;
  if (experts.front()->up_proj.bias)
    expert_of_row = cast(
        reshape(scatter_add(cast(reshape(choice, {rows, 1}, loc), DType::kF32, loc), place, 0, rows, loc),
                {rows}, loc),
        DType::kI32, loc);
  auto product = [&](const Tensor& in, auto pick) {
    Tensor y = grouped_matmul(in, stacked(pick), order.offsets, true, loc);
    if (!expert_of_row.valid()) return y;
    std::vector<Tensor> bs;
    for (const auto& e : experts) bs.push_back(unsqueeze(pick(*e).bias->tensor(loc), 0, loc));
    return add(y, embedding(concat(bs, 0, loc), expert_of_row, loc), loc);
  };
  const LlamaConfig::Gate act = experts.front()->gate;
  Tensor g = product(xs, [](const LlamaMlp& m) -> const Linear& { return *m.gate_proj; });
  Tensor u = product(xs, [](const LlamaMlp& m) -> const Linear& { return m.up_proj; });
  Tensor ys = product(gated(act, g, u, loc),
                      [](const LlamaMlp& m) -> const Linear& { return m.down_proj; });  // [R, d], sorted
  Tensor y = reshape(take_along_axis(ys, place, 0, loc), {tokens, top_k, d}, loc);      // row order
  Shape out_shape = x.shape();
  return reshape(
      sum(mul(y, unsqueeze(reshape(weights, {tokens, top_k}, loc), -1, loc), loc), {1}, false, loc),
      out_shape, loc);
}

LlamaDecoderLayer::LlamaDecoderLayer(Module& parent, std::string name, const LlamaConfig& c, bool with_mamba,
                                     LlamaConfig::Block block)
    : Module(parent, std::move(name)), block(block) {
  if (!c.post_norms) input_layernorm = std::make_unique<LlamaNorm>(*this, "input_layernorm", c.d_model, c);
  residual_multiplier = c.residual_multiplier;
  parallel = c.parallel;
  if (block == LlamaConfig::Block::kMlp) {  // one block: the MLP after input_layernorm
    mlp = std::make_unique<LlamaMlp>(*this, "mlp", c);
    return;
  }
  if (with_mamba) {
    Mamba2Config m = c.mamba;
    m.d_model = c.d_model;
    m.norm_eps = c.rms_eps;
    mamba = std::make_unique<Mamba2>(*this, "mamba", m);
  } else {
    self_attn = std::make_unique<LlamaAttention>(*this, "self_attn", c);
  }
  if (block == LlamaConfig::Block::kMixer) return;  // one block: the mixer after input_layernorm
  if (c.parallel != LlamaConfig::Parallel::kShared)
    post_attention_layernorm = std::make_unique<LlamaNorm>(*this, "post_attention_layernorm", c.d_model, c);
  if (c.experts.count > 0)
    moe = std::make_unique<LlamaMoe>(*this, "mlp", c);
  else
    mlp = std::make_unique<LlamaMlp>(*this, "mlp", c);
  if (c.sandwich_norms)
    pre_feedforward_layernorm = std::make_unique<LlamaNorm>(*this, "pre_feedforward_layernorm", c.d_model, c);
  if (c.sandwich_norms || c.post_norms)
    post_feedforward_layernorm =
        std::make_unique<LlamaNorm>(*this, "post_feedforward_layernorm", c.d_model, c);
}

// Llama: h = x + attn, out = h + mlp(post_attention_layernorm(h)). Sandwich (Gemma 2, 3):
// h = x + post_attention_layernorm(attn), out = h + post_ff(mlp(pre_ff(h))). Post (OLMo 2):
// h = x + post_attention_layernorm(attn), out = h + post_ff(mlp(h)). Each branch is scaled by
// residual_multiplier first (Granite; 1 elsewhere). Parallel (Phi, GPT-NeoX): out = x + attn +
// mlp(n(x)), n being input_layernorm (`normed`) or post_attention_layernorm.
Tensor LlamaDecoderLayer::residuals(const Tensor& x, const Tensor& normed, const Tensor& attended,
                                    MoeRouting* routing, Loc loc) const {
  const auto mlp = [this, routing](const Tensor& h, Loc l) {
    return moe ? moe->forward(h, routing, l) : (*this->mlp)(h, l);
  };
  const auto branch = [&](const Tensor& t) {
    return residual_multiplier == 1.0 ? t : mul(t, residual_multiplier, loc);
  };
  if (parallel != LlamaConfig::Parallel::kNone) {
    Tensor in = post_attention_layernorm ? (*post_attention_layernorm)(x, loc) : normed;
    return add(add(x, branch(attended), loc), branch(mlp(in, loc)), loc);
  }
  if (!post_feedforward_layernorm) {
    Tensor h = add(x, branch(attended), loc);
    return add(h, branch(mlp((*post_attention_layernorm)(h, loc), loc)), loc);
  }
  Tensor h = add(x, branch((*post_attention_layernorm)(attended, loc)), loc);
  Tensor in = pre_feedforward_layernorm ? (*pre_feedforward_layernorm)(h, loc) : h;
  return add(h, branch((*post_feedforward_layernorm)(mlp(in, loc), loc)), loc);
}

LlamaDecoderLayer::~LlamaDecoderLayer() = default;

// A one-block layer (Nemotron-H): x + block(input_layernorm(x)).
Tensor LlamaDecoderLayer::single(const Tensor& x, const Tensor& out, Loc loc) const {
  return add(x, residual_multiplier == 1.0 ? out : mul(out, residual_multiplier, loc), loc);
}

Tensor LlamaDecoderLayer::forward(const Tensor& x, MoeRouting* routing, Loc loc) const {
  const Tensor normed = input_layernorm ? (*input_layernorm)(x, loc) : x;
  if (block == LlamaConfig::Block::kMlp) return single(x, (*mlp)(normed, loc), loc);
  const Tensor mixed = mamba ? (*mamba)(normed, loc) : (*self_attn)(normed, loc);
  if (block == LlamaConfig::Block::kMixer) return single(x, mixed, loc);
  return residuals(x, normed, mixed, routing, loc);
}

// A Mamba-2 block steps its states by the T tokens (Mamba2::step).
Tensor LlamaDecoderLayer::cached(const Tensor& x, const Tensor& pos, int64_t cache_len, Loc loc) const {
  const Tensor normed = input_layernorm ? (*input_layernorm)(x, loc) : x;
  if (block == LlamaConfig::Block::kMlp) return single(x, (*mlp)(normed, loc), loc);
  const Tensor mixed = mamba ? mamba->step(normed, loc) : self_attn->cached(normed, pos, cache_len, loc);
  if (block == LlamaConfig::Block::kMixer) return single(x, mixed, loc);
  return residuals(x, normed, mixed, nullptr, loc);
}

Llama::Llama(LlamaConfig c) : config(c) { build(); }
Llama::Llama(Module& parent, std::string name, LlamaConfig c) : Module(parent, std::move(name)), config(c) {
  build();
}

void Llama::build() {
  const LlamaConfig& c = config;
  const std::string where = "[Llama] '" + path() + "'";
  if (c.vocab <= 0 || c.seq_len <= 0 || c.layers <= 0 || c.mlp_hidden <= 0)
    throw ShapeError(where + ": vocab, seq_len, layers and mlp_hidden must be positive");
  if (c.heads <= 0 || c.d_model <= 0 || c.head_dim < 0 || (c.head_dim == 0 && c.d_model % c.heads != 0))
    throw ShapeError(where + ": d_model " + std::to_string(c.d_model) +
                     " must be a positive multiple of heads " + std::to_string(c.heads) +
                     " (or head_dim given), head_dim >= 0");
  const int64_t kv = kv_heads_of(c);
  if (kv <= 0 || c.heads % kv != 0)
    throw ShapeError(where + ": heads " + std::to_string(c.heads) + " must be a multiple of kv_heads " +
                     std::to_string(kv));
  const int64_t rotary = c.rotary_dim == 0 ? c.head_size() : c.rotary_dim;
  if (rotary % 2 != 0 || rotary < 0 || rotary > c.head_size())
    throw ShapeError(where + ": rotary positions need an even rotary_dim within the head (" +
                     std::to_string(c.head_size()) + "), got " + std::to_string(rotary));
  rope_frequencies(rotary, c.rope_theta, c.rope_scaling);  // the scaling's own checks
  if (c.rope_local_theta != 0) rope_frequencies(rotary, c.rope_local_theta);
  if (c.attention_scale < 0 || c.attention_softcap < 0 || c.logit_softcap < 0 || c.rope_local_theta < 0)
    throw ShapeError(where +
                     ": attention_scale, attention_softcap, logit_softcap and rope_local_theta must be >= 0");
  const auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(c.embedding_multiplier) || !positive(c.residual_multiplier) || !positive(c.logits_scaling))
    throw ShapeError(where +
                     ": embedding_multiplier, residual_multiplier and logits_scaling must be finite and > 0");
  if (c.sandwich_norms && c.post_norms)
    throw ShapeError(where + ": sandwich_norms and post_norms exclude each other");
  if (c.qk_norm_whole && !c.qk_norm) throw ShapeError(where + ": qk_norm_whole needs qk_norm");
  if (c.parallel != LlamaConfig::Parallel::kNone && (c.sandwich_norms || c.post_norms))
    throw ShapeError(where + ": a parallel layer has no sandwich_norms or post_norms");
  if (c.layer_norm && c.gemma) throw ShapeError(where + ": layer_norm excludes gemma's 1 + w norms");
  if (c.head_bias && c.tied_head) throw ShapeError(where + ": head_bias needs an untied head (lm_head)");
  if (c.experts.count > 0 && !c.gated_mlp)
    throw ShapeError(where + ": experts are gated MLPs; gated_mlp false is for the dense MLP only");
  if (c.gate == LlamaConfig::Gate::kClampedSwiglu && !c.gated_mlp)
    throw ShapeError(where + ": the gate kClampedSwiglu needs gated_mlp (it reads gate and up)");
  embed_tokens_ =
      std::make_unique<Embedding>(*this, "model.embed_tokens", c.vocab, c.d_model, init::normal(0.02));
  if (c.sliding_window < 0 ||
      (!c.sliding_layers.empty() && static_cast<int64_t>(c.sliding_layers.size()) != c.layers))
    throw ShapeError(where +
                     ": sliding_window must be >= 0 and sliding_layers empty or one flag per layer (" +
                     std::to_string(c.layers) + "), got " + std::to_string(c.sliding_layers.size()));
  const LlamaConfig::Experts& x = c.experts;
  if (x.count < 0 ||
      (x.count > 0 && (x.top_k < 1 || x.top_k > x.count || x.hidden < 0 || x.shared_hidden < 0)) ||
      (!c.moe_layers.empty() && static_cast<int64_t>(c.moe_layers.size()) != c.layers))
    throw ShapeError(where +
                     ": experts need count >= 0, 1 <= top_k <= count, hidden and shared_hidden >= 0, " +
                     "and moe_layers empty or one flag per layer (" + std::to_string(c.layers) +
                     "); got count " + std::to_string(x.count) + ", top_k " + std::to_string(x.top_k) + ", " +
                     std::to_string(c.moe_layers.size()) + " moe_layers");
  if (!c.blocks.empty() && static_cast<int64_t>(c.blocks.size()) != c.layers)
    throw ShapeError(where + ": blocks must be empty or one per layer (" + std::to_string(c.layers) +
                     "), got " + std::to_string(c.blocks.size()));
  if (!c.blocks.empty() &&
      (c.sandwich_norms || c.post_norms || c.parallel != LlamaConfig::Parallel::kNone || c.experts.count > 0))
    throw ShapeError(where +
                     ": one-block layers (blocks) have no sandwich_norms, post_norms, parallel or experts");
  for (size_t i = 0; i < c.blocks.size() && i < c.mamba_layers.size(); ++i)
    if (c.blocks[i] == LlamaConfig::Block::kMlp && c.mamba_layers[i])
      throw ShapeError(where + ": layer " + std::to_string(i) +
                       " is an MLP block (blocks) and a Mamba-2 layer");
  if (!c.mamba_layers.empty() && static_cast<int64_t>(c.mamba_layers.size()) != c.layers)
    throw ShapeError(where + ": mamba_layers must be empty or one flag per layer (" +
                     std::to_string(c.layers) + "), got " + std::to_string(c.mamba_layers.size()));
  for (int64_t i = 0; i < c.layers; ++i) {
    LlamaConfig layer = c;  // the window (and Gemma 3's local RoPE) only where the layer slides
    if (!c.moe_layers.empty() && !c.moe_layers[static_cast<size_t>(i)]) layer.experts.count = 0;
    if (!c.sliding_layers.empty() && !c.sliding_layers[static_cast<size_t>(i)]) layer.sliding_window = 0;
    if (layer.sliding_window > 0 && c.rope_local_theta > 0) {
      layer.rope_theta = c.rope_local_theta;
      layer.rope_scaling = {};
    }
    const bool mamba = !c.mamba_layers.empty() && c.mamba_layers[static_cast<size_t>(i)];
    const LlamaConfig::Block block =
        c.blocks.empty() ? LlamaConfig::Block::kFull : c.blocks[static_cast<size_t>(i)];
    layers_.push_back(
        std::make_unique<LlamaDecoderLayer>(*this, "model.layers." + std::to_string(i), layer, mamba, block));
  }
  norm_ = std::make_unique<LlamaNorm>(*this, "model.norm", c.d_model, c);
  if (!c.tied_head)
    lm_head_ = std::make_unique<Linear>(*this, "lm_head", c.d_model, c.vocab, normal_linear(c.head_bias));
}

Tensor Llama::logits(const Tensor& ids, Loc loc) const { return head(hidden(ids, nullptr, loc), loc); }

Tensor Llama::hidden(const Tensor& ids, MoeRouting* routing, Loc loc) const {
  if (ids.rank() != 2 || ids.dtype() != DType::kI32 || ids.shape()[1] > config.seq_len)
    throw ShapeError("[Llama] '" + path() +
                     "' expects i32 ids [B, T] with T <= " + std::to_string(config.seq_len) + ", got " +
                     dtype_name(ids.dtype()) + shape_str(ids.shape()) + " (at " + at_of(loc) + ")");
  Tensor x = embed(ids, loc);  // [B, T, d_model]
  for (const auto& layer : layers_) {
    const Recompute region(config.recompute);
    x = layer->forward(x, routing, loc);
  }
  return x;
}

Tensor Llama::embed(const Tensor& ids, Loc loc) const {
  Tensor x = (*embed_tokens_)(ids, loc);
  // Gemma: × √d_model, the factor rounded to f32 first as Hugging Face's is.
  if (config.gemma) x = mul(x, static_cast<double>(std::sqrt(static_cast<float>(config.d_model))), loc);
  return config.embedding_multiplier == 1.0 ? x : mul(x, config.embedding_multiplier, loc);
}

Tensor Llama::head(const Tensor& x, Loc loc) const {
  Tensor y = (*norm_)(x, loc);
  Tensor logits = lm_head_ ? (*lm_head_)(y, loc)
                           : matmul(y, transpose(embed_tokens_->weight.tensor(loc), -2, -1, loc), loc);
  if (config.logits_scaling != 1.0) logits = div(logits, config.logits_scaling, loc);
  const double cap = config.logit_softcap;
  return cap > 0 ? mul(tanh(div(logits, cap, loc), loc), cap, loc) : logits;
}

Tensor Llama::logits_cached(const Tensor& ids, const Tensor& pos, int64_t cache_len, Loc loc) const {
  const std::string where = "[Llama] '" + path() + "'";
  if (ids.rank() != 2 || ids.dtype() != DType::kI32)
    throw ShapeError(where + " expects i32 ids [B, T], got " + dtype_name(ids.dtype()) +
                     shape_str(ids.shape()) + " (at " + at_of(loc) + ")");
  const int64_t B = ids.shape()[0];
  if (pos.dtype() != DType::kI32 || pos.shape() != Shape{B})
    throw ShapeError(where + " expects i32 positions [" + std::to_string(B) + "], got " +
                     dtype_name(pos.dtype()) + shape_str(pos.shape()) + " (at " + at_of(loc) + ")");
  if (cache_len < 1 || cache_len > config.seq_len)
    throw ShapeError(where + ": a cache of " + std::to_string(cache_len) +
                     " positions; it must be 1 … seq_len " + std::to_string(config.seq_len));
  Tensor x = embed(ids, loc);
  for (const auto& layer : layers_) x = layer->cached(x, pos, cache_len, loc);
  return head(x, loc);
}

// The load-balancing term over every mixture layer's tokens together (MoeRouting):
// count · Σ_e (picks_e / N)·(probs_e / N), N the tokens of all those layers.
Tensor Llama::loss(const Tensor& ids, const Tensor& targets, int32_t ignore_index, Loc loc) const {
  MoeRouting routing;
  const bool balance = config.experts.aux_loss_coef != 0.0;
  Tensor ce = cross_entropy(head(hidden(ids, balance ? &routing : nullptr, loc), loc), targets,
                            {.ignore_index = ignore_index}, loc);
  if (routing.tokens == 0) return ce;
  const double n = static_cast<double>(routing.tokens), count = static_cast<double>(config.experts.count);
  Tensor aux = mul(sum(mul(routing.picks, routing.probs, loc), {}, false, loc), count / (n * n), loc);
  return add(ce, mul(aux, config.experts.aux_loss_coef, loc), loc);
}

}  // namespace tg::nn
