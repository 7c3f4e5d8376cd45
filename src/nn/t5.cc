// nn::T5: the encoder-decoder of T5 and Flan-T5 (see tensorgrad/t5.h).
#include "tensorgrad/t5.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "ir/graph.h"
#include "nn/heads.h"
#include "tensorgrad/errors.h"

namespace tg::nn {
namespace {

// transformers' _relative_position_bucket for key position minus query position `rel`: exact
// buckets for the nearest max_exact distances, logarithmic ones up to max_distance, the last
// bucket beyond; bidirectional splits the buckets between keys before and after the query.
// The logarithm is taken in float32, as transformers takes it, so that the boundaries agree.
int32_t bucket(int64_t rel, bool bidirectional, int64_t buckets, int64_t max_distance) {
  int64_t out = 0, n = buckets;
  if (bidirectional) {
    n /= 2;
    if (rel > 0) out += n;
    rel = std::abs(rel);
  } else {
    rel = -std::min<int64_t>(rel, 0);
  }
  const int64_t max_exact = n / 2;
  if (rel < max_exact) return static_cast<int32_t>(out + rel);
  const float ratio = static_cast<float>(rel) / static_cast<float>(max_exact);
  const float scale =
      static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const auto large =
      max_exact + static_cast<int64_t>(std::log(ratio) / scale * static_cast<float>(n - max_exact));
  return static_cast<int32_t>(out + std::min(large, n - 1));
}

Tensor activation(const Tensor& x, T5Activation act, Loc loc) {
  switch (act) {
    case T5Activation::kRelu: return relu(x, loc);
    case T5Activation::kGelu: return gelu(x, GeluApprox::kErf, loc);
    case T5Activation::kGeluTanh: return gelu(x, GeluApprox::kTanh, loc);
    case T5Activation::kSilu: return silu(x, loc);
  }
  return x;
}

// Hugging Face's T5 initialisation (initializer_factor 1): q normal((d·d_kv)^-½), k, v, o and wo
// by their input width^-½, wi by d^-½, the shared embedding and the position table normal(1)
// and normal(d^-½).
LinearOptions no_bias(double std) { return {.bias = false, .weight_init = init::normal(std)}; }
double inv_sqrt(double x) { return 1.0 / std::sqrt(x); }

}  // namespace

T5Attention::T5Attention(Module& parent, std::string name, const T5Config& c, bool position_bias)
    : Module(parent, std::move(name)),
      q(*this, "q", c.d_model, c.heads * c.d_kv, no_bias(inv_sqrt(static_cast<double>(c.d_model * c.d_kv)))),
      k(*this, "k", c.d_model, c.heads * c.d_kv, no_bias(inv_sqrt(static_cast<double>(c.d_model)))),
      v(*this, "v", c.d_model, c.heads * c.d_kv, no_bias(inv_sqrt(static_cast<double>(c.d_model)))),
      o(*this, "o", c.heads * c.d_kv, c.d_model, no_bias(inv_sqrt(static_cast<double>(c.heads * c.d_kv)))),
      config_(c) {
  if (position_bias)
    relative_attention_bias =
        std::make_unique<Embedding>(*this, "relative_attention_bias", c.buckets, c.heads,
                                    init::normal(inv_sqrt(static_cast<double>(c.d_model))));
}

Tensor T5Attention::operator()(const Tensor& x, const Tensor& kv, const std::optional<Tensor>& bias,
                               const Tensor& keep, Loc loc) const {
  const Tensor qh = split_heads(q(x, loc), config_.heads, loc);
  const Tensor kh = split_heads(k(kv, loc), config_.heads, loc);
  const Tensor vh = split_heads(v(kv, loc), config_.heads, loc);
  Tensor scores = matmul(qh, transpose(kh, -2, -1, loc), loc);  // [B, H, T, S], no 1/√d
  if (bias) scores = add(scores, *bias, loc);
  scores = where(keep, scores, std::numeric_limits<float>::lowest(), loc);
  const Tensor p = dropout(softmax(scores, -1, false, loc), config_.dropout, loc);
  return o(merge_heads(matmul(p, vh, loc), loc), loc);
}

Tensor T5Attention::over_memory(const Tensor& x, const T5Memory& memory, Loc loc) const {
  // Training with dropout drops attention probabilities, which only the composite has.
  if (is_training() && config_.dropout > 0) return (*this)(x, memory.hidden, std::nullopt, memory.keep, loc);
  const Tensor qh = split_heads(q(x, loc), config_.heads, loc);
  const Tensor kh = split_heads(k(memory.hidden, loc), config_.heads, loc);
  const Tensor vh = split_heads(v(memory.hidden, loc), config_.heads, loc);
  const Tensor a = tg::attention(
      qh, kh, vh, AttentionOptions{.causal = false, .scale = 1.0, .key_mask = memory.mask}, loc);
  return o(merge_heads(a, loc), loc);
}

T5FeedForward::T5FeedForward(Module& parent, std::string name, const T5Config& c)
    : Module(parent, std::move(name)), config_(c) {
  const double in_std = inv_sqrt(static_cast<double>(c.d_model));
  if (c.gated) {
    wi_0 = std::make_unique<Linear>(*this, "wi_0", c.d_model, c.d_ff, no_bias(in_std));
    wi_1 = std::make_unique<Linear>(*this, "wi_1", c.d_model, c.d_ff, no_bias(in_std));
  } else {
    wi = std::make_unique<Linear>(*this, "wi", c.d_model, c.d_ff, no_bias(in_std));
  }
  wo = std::make_unique<Linear>(*this, "wo", c.d_ff, c.d_model,
                                no_bias(inv_sqrt(static_cast<double>(c.d_ff))));
}

Tensor T5FeedForward::operator()(const Tensor& x, Loc loc) const {
  const Tensor h = config_.gated ? mul(activation((*wi_0)(x, loc), config_.act, loc), (*wi_1)(x, loc), loc)
                                 : activation((*wi)(x, loc), config_.act, loc);
  return (*wo)(dropout(h, config_.dropout, loc), loc);
}

// One block: layer.0 self-attention, (decoder) layer.1 cross-attention, then the feed-forward,
// each with its norm.
struct T5Block : Module {
  T5Block(Module& parent, std::string name, const T5Config& c, bool decoder, bool position_bias)
      : Module(parent, std::move(name)), self_layer(*this, "layer.0"), config(c) {
    self_attention = std::make_unique<T5Attention>(self_layer, "SelfAttention", c, position_bias);
    self_norm = std::make_unique<RMSNorm>(self_layer, "layer_norm", c.d_model, c.eps);
    if (decoder) {
      cross_layer = std::make_unique<Module>(*this, "layer.1");
      cross_attention = std::make_unique<T5Attention>(*cross_layer, "EncDecAttention", c, false);
      cross_norm = std::make_unique<RMSNorm>(*cross_layer, "layer_norm", c.d_model, c.eps);
    }
    ff_layer = std::make_unique<Module>(*this, decoder ? "layer.2" : "layer.1");
    ff = std::make_unique<T5FeedForward>(*ff_layer, "DenseReluDense", c);
    ff_norm = std::make_unique<RMSNorm>(*ff_layer, "layer_norm", c.d_model, c.eps);
  }

  Tensor operator()(Tensor x, const std::optional<Tensor>& bias, const Tensor& keep, const T5Memory* memory,
                    Loc loc) const {
    const double p = config.dropout;
    const Tensor n = (*self_norm)(x, loc);
    x = add(x, dropout((*self_attention)(n, n, bias, keep, loc), p, loc), loc);
    if (cross_attention) {
      const Tensor c = (*cross_norm)(x, loc);
      x = add(x, dropout(cross_attention->over_memory(c, *memory, loc), p, loc), loc);
    }
    return add(x, dropout((*ff)((*ff_norm)(x, loc), loc), p, loc), loc);
  }

  // KV-cached decoding of x [B, T, d] at positions pos[b] …: self-attention over the cache_len
  // cached keys with `bias` [B, H, T, cache_len] and `keep` [B, 1, T, cache_len] (the keys at or
  // before each query), cross-attention over the remembered encoder states.
  Tensor cached(Tensor x, const Tensor& pos, int64_t cache_len, const Tensor& bias, const Tensor& keep,
                const Tensor& memory_mask, Loc loc) const {
    const int64_t S = memory_mask.shape()[1];
    const T5Attention& a = *self_attention;
    const int64_t B = x.shape()[0], H = config.heads;
    const Tensor n = (*self_norm)(x, loc);
    const auto [k_all, v_all] = append_kv_cache(a.path(), split_heads(a.k(n, loc), H, loc),
                                                split_heads(a.v(n, loc), H, loc), pos, cache_len, loc);
    Tensor scores =
        add(matmul(split_heads(a.q(n, loc), H, loc), transpose(k_all, -2, -1, loc), loc), bias, loc);
    scores = where(keep, scores, std::numeric_limits<float>::lowest(), loc);
    x = add(x, a.o(merge_heads(matmul(softmax(scores, -1, false, loc), v_all, loc), loc), loc), loc);
    const T5Attention& c = *cross_attention;
    const Tensor q = split_heads(c.q((*cross_norm)(x, loc), loc), H, loc);
    const Tensor y =
        tg::attention(q, memory_state("k", B, S, loc), memory_state("v", B, S, loc),
                      AttentionOptions{.causal = false, .scale = 1.0, .key_mask = memory_mask}, loc);
    x = add(x, c.o(merge_heads(y, loc), loc), loc);
    return add(x, (*ff)((*ff_norm)(x, loc), loc), loc);
  }

  // The states holding this block's cross-attention keys or values of the remembered encoder output.
  Tensor memory_state(const char* which, int64_t B, int64_t S, Loc loc) const {
    return state(cross_attention->path() + "." + which + "_memory", {B, config.heads, S, config.d_kv},
                 DType::kF32, 0.0, loc);
  }

  Module self_layer;
  std::unique_ptr<Module> cross_layer, ff_layer;
  std::unique_ptr<T5Attention> self_attention, cross_attention;
  std::unique_ptr<RMSNorm> self_norm, cross_norm, ff_norm;
  std::unique_ptr<T5FeedForward> ff;
  T5Config config;
};

// The encoder or the decoder: its blocks and final norm.
struct T5::Stack {
  Stack(Module& parent, const char* name, const T5Config& c, bool decoder)
      : module(parent, name), decoder(decoder) {
    const int64_t n = decoder ? c.decoder_layers : c.layers;
    for (int64_t i = 0; i < n; ++i)
      blocks.push_back(std::make_unique<T5Block>(module, "block." + std::to_string(i), c, decoder, i == 0));
    final_layer_norm = std::make_unique<RMSNorm>(module, "final_layer_norm", c.d_model, c.eps);
  }

  // The position bias [1, H, T, S] of block 0's table for T queries over S keys.
  Tensor position_bias(int64_t T, int64_t S, const T5Config& c, Loc loc) const {
    std::vector<int32_t> index(static_cast<size_t>(T * S));
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < S; ++j)
        index[static_cast<size_t>(i * S + j)] = bucket(j - i, !decoder, c.buckets, c.max_distance);
    const Tensor table = blocks.front()->self_attention->relative_attention_bias->weight.tensor(loc);
    const Tensor b =
        embedding(table, constant(std::span<const int32_t>(index), {T, S}, loc), loc);  // [T, S, H]
    return reshape(permute(b, {2, 0, 1}, loc), {1, c.heads, T, S}, loc);
  }

  // The position bias [B, H, T, L] of the causal decoder's queries at positions qp i32 [B, T] over
  // a cache's keys 0 … L − 1: the bucket of the distance max(p − j, 0) (keys after a query are
  // masked anyway) from a table of L of them (exact in f32), then block 0's bias for it.
  Tensor cached_bias(const Tensor& qp, int64_t L, const T5Config& c, Loc loc) const {
    std::vector<float> by_distance(static_cast<size_t>(L));
    for (int64_t d = 0; d < L; ++d)
      by_distance[static_cast<size_t>(d)] = static_cast<float>(bucket(-d, false, c.buckets, c.max_distance));
    const Shape& q = qp.shape();
    const Tensor keys = reshape(arange(0, static_cast<double>(L), 1, DType::kI32, loc), {1, 1, L}, loc);
    const Tensor distance = maximum(sub(reshape(qp, {q[0], q[1], 1}, loc), keys, loc), 0, loc);  // [B, T, L]
    const Tensor table_of = constant(std::span<const float>(by_distance), {L, 1}, loc);
    const Tensor rows =
        cast(reshape(embedding(table_of, distance, loc), {q[0], q[1], L}, loc), DType::kI32, loc);
    const Tensor table = blocks.front()->self_attention->relative_attention_bias->weight.tensor(loc);
    return permute(embedding(table, rows, loc), {0, 3, 1, 2}, loc);  // [B, T, L, H] → [B, H, T, L]
  }

  Tensor operator()(Tensor x, const Tensor& keep, const T5Config& c, const T5Memory* memory, Loc loc) const {
    const Tensor bias = position_bias(x.shape()[1], x.shape()[1], c, loc);
    x = dropout(x, c.dropout, loc);
    for (const auto& block : blocks) x = (*block)(x, bias, keep, memory, loc);
    return dropout((*final_layer_norm)(x, loc), c.dropout, loc);
  }

  Module module;
  bool decoder;
  std::vector<std::unique_ptr<T5Block>> blocks;
  std::unique_ptr<RMSNorm> final_layer_norm;
};

T5::T5(T5Config c) : config(c) { build(); }
T5::T5(Module& parent, std::string name, T5Config c) : Module(parent, std::move(name)), config(c) { build(); }
T5::~T5() = default;

void T5::build() {
  const T5Config& c = config;
  if (c.vocab <= 0 || c.d_model <= 0 || c.d_kv <= 0 || c.d_ff <= 0 || c.heads <= 0 || c.layers <= 0 ||
      (c.decoder && c.decoder_layers <= 0))
    throw ShapeError("[T5] vocab, d_model, d_kv, d_ff, heads, layers and decoder_layers must be positive");
  // The logarithmic buckets start past the exact ones: buckets / 4 of them each way in the
  // encoder, buckets / 2 in the causal decoder; max_distance must lie beyond.
  const int64_t exact = c.decoder ? c.buckets / 2 : c.buckets / 4;
  if (c.buckets < 4 || c.max_distance <= exact)
    throw ShapeError("[T5] relative_attention_num_buckets " + std::to_string(c.buckets) +
                     " and relative_attention_max_distance " + std::to_string(c.max_distance) +
                     ": at least 4 buckets, and a distance beyond the " + std::to_string(exact) +
                     " exact ones");
  if (!(c.dropout >= 0 && c.dropout < 1))
    throw Error("[T5] a dropout probability of " + std::to_string(c.dropout) + ": expected one in [0, 1)");
  shared_ = std::make_unique<Embedding>(*this, "shared", c.vocab, c.d_model, init::normal(1.0));
  encoder_ = std::make_unique<Stack>(*this, "encoder", c, false);
  if (c.decoder) {
    decoder_ = std::make_unique<Stack>(*this, "decoder", c, true);
    if (!c.tied) lm_head_ = std::make_unique<Linear>(*this, "lm_head", c.d_model, c.vocab, no_bias(1.0));
  }
}

Tensor T5::embed(const Tensor& ids, Loc loc) const {
  if (ids.shape().size() != 2 || ids.dtype() != DType::kI32)
    throw ShapeError("[T5] ids must be i32 [B, T], got " + shape_str(ids.shape()) + at(loc));
  return (*shared_)(ids, loc);
}

namespace {
// Which keys each query sees: the mask's nonzero entries [B, 1, 1, S], or every key.
Tensor keep_of(const std::optional<Tensor>& mask, const Shape& ids, Loc loc) {
  if (!mask) return full({1, 1, 1, ids[1]}, 1.0, DType::kBool, loc);
  if (mask->shape() != ids)
    throw ShapeError("[T5] the mask must be " + shape_str(ids) + " as the ids, got " +
                     shape_str(mask->shape()) + at(loc));
  return reshape(ne(*mask, 0, loc), {ids[0], 1, 1, ids[1]}, loc);
}
}  // namespace

Tensor T5::encode(const Tensor& ids, const std::optional<Tensor>& mask, Loc loc) const {
  const Tensor x = embed(ids, loc);
  return (*encoder_)(x, keep_of(mask, ids.shape(), loc), config, nullptr, loc);
}

Tensor T5::decode(const Tensor& decoder_ids, const Tensor& encoder_hidden,
                  const std::optional<Tensor>& encoder_mask, Loc loc) const {
  if (!decoder_) throw Error("[T5] decode(): this model has no decoder (T5EncoderModel)" + at(loc));
  const Shape& h = encoder_hidden.shape();
  if (h.size() != 3 || h[2] != config.d_model)
    throw ShapeError("[T5] encoder_hidden must be [B, S, " + std::to_string(config.d_model) + "], got " +
                     shape_str(h) + at(loc));
  const Tensor x = embed(decoder_ids, loc);
  if (decoder_ids.shape()[0] != h[0])
    throw ShapeError("[T5] decoder_ids " + shape_str(decoder_ids.shape()) + " and encoder_hidden " +
                     shape_str(h) + " differ in batch" + at(loc));
  const int64_t T = decoder_ids.shape()[1];
  const Tensor causal =
      reshape(le(reshape(arange(0, static_cast<double>(T), 1, DType::kI32, loc), {1, T}, loc),
                 reshape(arange(0, static_cast<double>(T), 1, DType::kI32, loc), {T, 1}, loc), loc),
              {1, 1, T, T}, loc);
  const T5Memory memory{encoder_hidden, encoder_mask, keep_of(encoder_mask, {h[0], h[1]}, loc)};
  return (*decoder_)(x, causal, config, &memory, loc);
}

Tensor T5::logits(const Tensor& decoder_hidden, Loc loc) const {
  if (!decoder_) throw Error("[T5] logits(): this model has no decoder (T5EncoderModel)" + at(loc));
  Tensor h = decoder_hidden;
  if (config.scale_decoder_outputs) h = mul(h, inv_sqrt(static_cast<double>(config.d_model)), loc);
  if (lm_head_) return (*lm_head_)(h, loc);
  return matmul(h, transpose(shared_->weight.tensor(loc), 0, 1, loc), loc);
}

Tensor T5::remember(const Tensor& encoder_hidden, const std::optional<Tensor>& encoder_mask, Loc loc) const {
  if (!decoder_) throw Error("[T5] remember(): this model has no decoder (T5EncoderModel)" + at(loc));
  const Shape& h = encoder_hidden.shape();
  if (h.size() != 3 || h[2] != config.d_model)
    throw ShapeError("[T5] remember() takes the encoder's output [B, S, " + std::to_string(config.d_model) +
                     "], got " + shape_str(h) + at(loc));
  const Tensor mask = encoder_mask ? cast(ne(*encoder_mask, 0, loc), DType::kF32, loc)
                                   : full({h[0], h[1]}, 1.0, DType::kF32, loc);
  if (mask.shape() != Shape{h[0], h[1]})
    throw ShapeError("[T5] the mask must be [" + std::to_string(h[0]) + ", " + std::to_string(h[1]) +
                     "], got " + shape_str(mask.shape()) + at(loc));
  assign(state(decoder_->module.path() + ".memory_mask", {h[0], h[1]}, DType::kF32, 0.0, loc), mask, loc);
  for (const auto& block : decoder_->blocks) {
    const T5Attention& a = *block->cross_attention;
    assign(block->memory_state("k", h[0], h[1], loc),
           split_heads(a.k(encoder_hidden, loc), config.heads, loc), loc);
    assign(block->memory_state("v", h[0], h[1], loc),
           split_heads(a.v(encoder_hidden, loc), config.heads, loc), loc);
  }
  return encoder_hidden;
}

Tensor T5::logits_cached(const Tensor& ids, const Tensor& pos, int64_t cache_len, int64_t source_len,
                         Loc loc) const {
  if (!decoder_) throw Error("[T5] logits_cached(): this model has no decoder (T5EncoderModel)" + at(loc));
  const Tensor x = embed(ids, loc);
  const int64_t B = ids.shape()[0], T = ids.shape()[1];
  if (pos.dtype() != DType::kI32 || pos.shape() != Shape{B})
    throw ShapeError("[T5] positions must be i32 [" + std::to_string(B) + "], got " +
                     dtype_name(pos.dtype()) + shape_str(pos.shape()) + at(loc));
  if (cache_len < T || source_len < 1)
    throw ShapeError("[T5] a cache of " + std::to_string(cache_len) + " positions for " + std::to_string(T) +
                     " new tokens over " + std::to_string(source_len) + " encoder states" + at(loc));
  const Tensor qp = token_positions(pos, T, loc);  // [B, T]
  const Tensor bias = decoder_->cached_bias(qp, cache_len, config, loc);
  const Tensor keep =
      le(reshape(arange(0, static_cast<double>(cache_len), 1, DType::kI32, loc), {1, 1, 1, cache_len}, loc),
         reshape(qp, {B, 1, T, 1}, loc), loc);  // [B, 1, T, cache_len]: keys at or before the query
  const Tensor mask = state(decoder_->module.path() + ".memory_mask", {B, source_len}, DType::kF32, 0.0, loc);
  Tensor h = x;
  for (const auto& block : decoder_->blocks) h = block->cached(h, pos, cache_len, bias, keep, mask, loc);
  return logits((*decoder_->final_layer_norm)(h, loc), loc);
}

std::vector<int32_t> T5::shift_right(std::span<const int32_t> labels, int64_t rows) const {
  return shift_tokens_right(labels, rows, config.start_id, config.pad_id, "T5");
}

}  // namespace tg::nn
