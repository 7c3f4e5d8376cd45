// Causal self-attention, the pre-norm transformer block and the GPT model.
#include <cmath>
#include <limits>

#include "ir/trace.h"
#include "nn/heads.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/nn.h"

namespace tg::nn {
namespace {

int64_t kv_heads_of(const AttentionConfig& c) { return c.kv_heads == 0 ? c.heads : c.kv_heads; }

AttentionConfig checked(AttentionConfig c, const std::string& where) {
  if (c.heads <= 0 || c.d_model <= 0 || c.d_model % c.heads != 0)
    throw Error("[CausalSelfAttention] '" + where + "': d_model " + std::to_string(c.d_model) +
                " must be a positive multiple of heads " + std::to_string(c.heads));
  const int64_t kv = kv_heads_of(c);
  if (kv <= 0 || c.heads % kv != 0)
    throw Error("[CausalSelfAttention] '" + where + "': heads " + std::to_string(c.heads) +
                " must be a multiple of kv_heads " + std::to_string(kv));
  if (c.rotary && (c.d_model / c.heads) % 2 != 0)
    throw Error("[CausalSelfAttention] '" + where + "': rotary positions need an even head size");
  return c;
}

}  // namespace

std::string at(const Loc& loc) { return " at " + ir::loc_str(loc); }

LinearOptions normal_linear(bool bias, double std) {
  return {.bias = bias, .weight_init = init::normal(std), .bias_init = init::zeros()};
}

Tensor split_heads(const Tensor& x, int64_t heads, const Loc& loc) {
  const Shape& s = x.shape();
  return permute(reshape(x, {s[0], s[1], heads, s[2] / heads}, loc), {0, 2, 1, 3}, loc);
}

Tensor merge_heads(const Tensor& x, const Loc& loc) {
  const Shape& s = x.shape();
  return reshape(permute(x, {0, 2, 1, 3}, loc), {s[0], s[2], s[1] * s[3]}, loc);
}

Tensor patch_tokens(const Conv2d& projection, const Tensor& pixels, const Loc& loc) {
  const Tensor p = projection(pixels, loc);  // [B, d, side, side]
  const Shape& s = p.shape();
  return permute(reshape(p, {s[0], s[1], s[2] * s[3]}, loc), {0, 2, 1}, loc);
}

std::vector<int32_t> shift_tokens_right(std::span<const int32_t> labels, int64_t rows, int32_t start_id,
                                        int32_t pad_id, const char* model) {
  if (rows <= 0 || labels.size() % static_cast<size_t>(rows) != 0)
    throw InputError("[" + std::string(model) + "] shift_right: " + std::to_string(labels.size()) +
                     " labels are not " + std::to_string(rows) + " equal rows");
  const size_t T = labels.size() / static_cast<size_t>(rows);
  std::vector<int32_t> out(labels.size());
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    out[r * T] = start_id;
    for (size_t t = 1; t < T; ++t) {
      const int32_t l = labels[r * T + t - 1];
      out[r * T + t] = l == -100 ? pad_id : l;
    }
  }
  return out;
}

Tensor token_positions(const Tensor& pos, int64_t tokens, const Loc& loc) {
  const int64_t B = pos.shape()[0];
  return add(reshape(pos, {B, 1}, loc),
             reshape(arange(0, static_cast<double>(tokens), 1, DType::kI32, loc), {1, tokens}, loc), loc);
}

std::pair<Tensor, Tensor> append_kv_cache(const std::string& path, const Tensor& k, const Tensor& v,
                                          const Tensor& pos, int64_t cache_len, const Loc& loc) {
  Shape shape = k.shape();
  shape[2] = cache_len;
  const Tensor k_cache = state(path + ".k_cache", shape, DType::kF32, 0.0, loc);
  const Tensor v_cache = state(path + ".v_cache", shape, DType::kF32, 0.0, loc);
  Tensor k_all = update_slice(k_cache, k, pos, 2, loc), v_all = update_slice(v_cache, v, pos, 2, loc);
  assign(k_cache, k_all, loc);
  assign(v_cache, v_all, loc);
  return {std::move(k_all), std::move(v_all)};
}

CausalSelfAttention::CausalSelfAttention(Module& parent, std::string name, AttentionConfig c)
    : Module(parent, std::move(name)),
      config(checked(c, path())),
      head_dim(c.d_model / c.heads),
      qkv(*this, "qkv", c.d_model, (c.heads + 2 * kv_heads_of(c)) * (c.d_model / c.heads),
          normal_linear(c.bias, 0.02)),
      proj(*this, "proj", c.d_model, c.d_model, normal_linear(c.bias, c.proj_init_std)) {}

Tensor CausalSelfAttention::operator()(const Tensor& x, Loc loc) const {
  if (x.rank() != 3 || x.shape()[2] != config.d_model)
    throw ShapeError("[CausalSelfAttention] '" + path() + "' expects [B, T, " +
                     std::to_string(config.d_model) + "], got " + shape_str(x.shape()) + " (at " +
                     loc.file_name() + ":" + std::to_string(loc.line()) + ")");
  const int64_t hq = config.heads, hkv = kv_heads_of(config), d = head_dim;
  Tensor packed = qkv(x, loc);  // [B, T, (hq + 2 hkv)·d]: q heads, then k heads, then v heads
  Tensor q = split_heads(slice(packed, -1, 0, hq * d, 1, loc), hq, loc);
  Tensor k = split_heads(slice(packed, -1, hq * d, (hq + hkv) * d, 1, loc), hkv, loc);
  Tensor v = split_heads(slice(packed, -1, (hq + hkv) * d, (hq + 2 * hkv) * d, 1, loc), hkv, loc);
  if (config.rotary) {
    q = rope(q, config.rope_base, 0, loc);
    k = rope(k, config.rope_base, 0, loc);
  }
  // Offered for inspection only: the probabilities, materialised just when captured.
  {
    const Shape& ks = k.shape();
    Tensor k_all = reshape(broadcast_to(unsqueeze(k, 2, loc), {ks[0], hkv, hq / hkv, ks[2], d}, loc),
                           {ks[0], hq, ks[2], d}, loc);
    Tensor scores =
        mul(matmul(q, transpose(k_all, -2, -1, loc), loc), 1.0 / std::sqrt(static_cast<double>(d)), loc);
    const ir::Trace* trace = ir::current_trace();
    const std::string name = trace ? ir::unused_capture_name(*trace, path() + ".probs") : path() + ".probs";
    capture(name, softmax(scores, -1, /*causal=*/true, loc), loc);
  }
  Tensor y = attention(q, k, v, {.causal = true}, loc);  // [B, hq, T, d]
  const Shape& ys = y.shape();
  y = reshape(permute(y, {0, 2, 1, 3}, loc), {ys[0], ys[2], hq * d}, loc);
  return dropout(proj(y, loc), config.dropout, loc);
}

Tensor CausalSelfAttention::cached(const Tensor& x, const Tensor& pos, int64_t cache_len, Loc loc) const {
  const std::string at = "[CausalSelfAttention] '" + path() + "'";
  if (x.rank() != 3 || x.shape()[2] != config.d_model)
    throw ShapeError(at + " expects [B, T, " + std::to_string(config.d_model) + "], got " +
                     shape_str(x.shape()) + " (at " + loc.file_name() + ":" + std::to_string(loc.line()) +
                     ")");
  const int64_t B = x.shape()[0], T = x.shape()[1], hq = config.heads, hkv = kv_heads_of(config),
                d = head_dim;
  if (T > cache_len)
    throw ShapeError(at + ": " + std::to_string(T) + " new tokens do not fit a cache of " +
                     std::to_string(cache_len));
  Tensor packed = qkv(x, loc);
  Tensor q = split_heads(slice(packed, -1, 0, hq * d, 1, loc), hq, loc);                // [B, hq, T, d]
  Tensor k = split_heads(slice(packed, -1, hq * d, (hq + hkv) * d, 1, loc), hkv, loc);  // [B, hkv, T, d]
  Tensor v = split_heads(slice(packed, -1, (hq + hkv) * d, (hq + 2 * hkv) * d, 1, loc), hkv, loc);
  if (config.rotary) {  // rotated at their own positions before the keys are cached
    Tensor at_pos = token_positions(pos, T, loc);
    q = rope_at(q, at_pos, cache_len, config.rope_base, loc);
    k = rope_at(k, at_pos, cache_len, config.rope_base, loc);
  }
  // The new rows go into the caches at each sequence's position; attention reads the caches.
  Tensor k_cache = state(path() + ".k_cache", {B, hkv, cache_len, d}),
         v_cache = state(path() + ".v_cache", {B, hkv, cache_len, d});
  Tensor k_all = update_slice(k_cache, k, pos, 2, loc), v_all = update_slice(v_cache, v, pos, 2, loc);
  assign(k_cache, k_all, loc);
  assign(v_cache, v_all, loc);
  // Query i of sequence b sits at pos[b] + i and sees keys 0 … pos[b] + i: the valid prefix
  // (grouped heads: query head h reads kv head h / (hq / hkv)).
  Tensor y = attention_at(q, k_all, v_all, pos, std::nullopt, loc);  // [B, hq, T, d]
  y = reshape(permute(y, {0, 2, 1, 3}, loc), {B, T, hq * d}, loc);
  return proj(y, loc);
}

TransformerBlock::TransformerBlock(Module& parent, std::string name, const GptConfig& c)
    : Module(parent, std::move(name)),
      ln1(*this, "ln1", c.d_model, c.ln_eps, c.bias),
      attn(*this, "attn",
           {.d_model = c.d_model,
            .heads = c.heads,
            .kv_heads = c.kv_heads,
            .rotary = c.rotary,
            .rope_base = c.rope_theta,
            .dropout = c.dropout,
            .bias = c.bias,
            .proj_init_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers))}),
      ln2(*this, "ln2", c.d_model, c.ln_eps, c.bias),
      fc(*this, "fc", c.d_model, c.mlp_hidden == 0 ? 4 * c.d_model : c.mlp_hidden,
         normal_linear(c.bias, 0.02)),
      fc2(*this, "fc2", c.mlp_hidden == 0 ? 4 * c.d_model : c.mlp_hidden, c.d_model,
          normal_linear(c.bias, 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers)))),
      drop{c.dropout} {}

Tensor TransformerBlock::operator()(const Tensor& x, Loc loc) const {
  Tensor h = add(x, attn(ln1(x, loc), loc), loc);
  return add(h, drop(fc2(gelu(fc(ln2(h, loc), loc), GeluApprox::kTanh, loc), loc), loc), loc);
}

Tensor TransformerBlock::cached(const Tensor& x, const Tensor& pos, int64_t cache_len, Loc loc) const {
  Tensor h = add(x, attn.cached(ln1(x, loc), pos, cache_len, loc), loc);
  return add(h, fc2(gelu(fc(ln2(h, loc), loc), GeluApprox::kTanh, loc), loc), loc);
}

Gpt::Gpt(GptConfig c) : config(c) { build(); }
Gpt::Gpt(Module& parent, std::string name, GptConfig c) : Module(parent, std::move(name)), config(c) {
  build();
}

void Gpt::build() {
  const GptConfig& c = config;
  if (c.vocab <= 0 || c.seq_len <= 0 || c.layers <= 0)
    throw Error("[Gpt] vocab, seq_len and layers must be positive");
  wte_ = std::make_unique<Embedding>(*this, "wte", c.vocab, c.d_model, init::normal(0.02));
  if (!c.rotary) wpe_ = std::make_unique<Embedding>(*this, "wpe", c.seq_len, c.d_model, init::normal(0.02));
  for (int64_t i = 0; i < c.layers; ++i)
    blocks_.push_back(std::make_unique<TransformerBlock>(*this, "blocks." + std::to_string(i), c));
  lnf_ = std::make_unique<LayerNorm>(*this, "lnf", c.d_model, c.ln_eps, c.bias);
  if (!c.tied_head)
    head_ = std::make_unique<Linear>(*this, "head", c.d_model, c.vocab, normal_linear(false, 0.02));
}

Tensor Gpt::logits(const Tensor& ids, Loc loc) const {
  if (ids.rank() != 2 || ids.dtype() != DType::kI32 || ids.shape()[1] > config.seq_len)
    throw ShapeError("[Gpt] '" + path() +
                     "' expects i32 ids [B, T] with T <= " + std::to_string(config.seq_len) + ", got " +
                     dtype_name(ids.dtype()) + shape_str(ids.shape()) + " (at " + loc.file_name() + ":" +
                     std::to_string(loc.line()) + ")");
  Tensor x = (*wte_)(ids, loc);  // [B, T, C]
  if (wpe_) x = add(x, slice(wpe_->weight.tensor(loc), 0, 0, ids.shape()[1], 1, loc), loc);
  x = dropout(x, config.dropout, loc);
  for (const auto& block : blocks_) {
    const Recompute region(config.recompute);
    x = (*block)(x, loc);
  }
  return head(x, loc);
}

Tensor Gpt::head(const Tensor& x, Loc loc) const {
  Tensor y = (*lnf_)(x, loc);
  return head_ ? (*head_)(y, loc) : matmul(y, transpose(wte_->weight.tensor(loc), -2, -1, loc), loc);
}

Tensor Gpt::logits_cached(const Tensor& ids, const Tensor& pos, int64_t cache_len, Loc loc) const {
  const std::string where = "[Gpt] '" + path() + "'";
  if (ids.rank() != 2 || ids.dtype() != DType::kI32)
    throw ShapeError(where + " expects i32 ids [B, T], got " + dtype_name(ids.dtype()) +
                     shape_str(ids.shape()) + " (at " + loc.file_name() + ":" + std::to_string(loc.line()) +
                     ")");
  const int64_t B = ids.shape()[0], T = ids.shape()[1];
  if (pos.dtype() != DType::kI32 || pos.shape() != Shape{B})
    throw ShapeError(where + " expects i32 positions [" + std::to_string(B) + "], got " +
                     dtype_name(pos.dtype()) + shape_str(pos.shape()) + " (at " + loc.file_name() + ":" +
                     std::to_string(loc.line()) + ")");
  if (cache_len < 1 || (wpe_ && cache_len > config.seq_len))
    throw ShapeError(where + ": a cache of " + std::to_string(cache_len) +
                     " positions; it must be 1 … seq_len " + std::to_string(config.seq_len));
  Tensor x = (*wte_)(ids, loc);
  if (wpe_) {  // each token's own position: pos[b] + i
    x = add(x, embedding(wpe_->weight.tensor(loc), token_positions(pos, T, loc), loc), loc);
  }
  for (const auto& block : blocks_) x = block->cached(x, pos, cache_len, loc);
  return head(x, loc);
}

Tensor Gpt::loss(const Tensor& ids, const Tensor& targets, int32_t ignore_index, Loc loc) const {
  return cross_entropy(logits(ids, loc), targets, {.ignore_index = ignore_index}, loc);
}

}  // namespace tg::nn
