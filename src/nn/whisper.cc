// nn::Whisper: the speech encoder-decoder (see tensorgrad/whisper.h).
#include "tensorgrad/whisper.h"

#include <cmath>
#include <limits>
#include <string>

#include "ir/graph.h"
#include "nn/heads.h"
#include "tensorgrad/errors.h"

namespace tg::nn {
namespace {

constexpr double kEps = 1e-5;  // nn.LayerNorm's default, which Whisper keeps

// Whisper's sinusoidal positions: row t is [sin(t·f_i), cos(t·f_i)] over d/2 frequencies
// f_i = 10000^(−i / (d/2 − 1)), as transformers' sinusoids() builds the encoder's table.
Init sinusoids() {
  return init::callable([](std::span<float> v, const Shape& s, uint64_t) {
    const int64_t half = s[1] / 2;
    const double step = std::log(10000.0) / static_cast<double>(std::max<int64_t>(1, half - 1));
    for (int64_t t = 0; t < s[0]; ++t)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(t) * std::exp(-step * static_cast<double>(i));
        v[static_cast<size_t>(t * s[1] + i)] = static_cast<float>(std::sin(angle));
        v[static_cast<size_t>(t * s[1] + half + i)] = static_cast<float>(std::cos(angle));
      }
  });
}

}  // namespace

WhisperAttention::WhisperAttention(Module& parent, std::string name, int64_t d, int64_t h, double p)
    : Module(parent, std::move(name)),
      q_proj(*this, "q_proj", d, d, normal_linear(true)),
      k_proj(*this, "k_proj", d, d, normal_linear(false)),
      v_proj(*this, "v_proj", d, d, normal_linear(true)),
      out_proj(*this, "out_proj", d, d, normal_linear(true)),
      heads(h),
      dropout(p) {}

Tensor WhisperAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                Loc loc) const {
  Tensor y;
  if (is_training() && dropout > 0) {  // dropped probabilities: the composite, its scores stored
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.shape()[3]));
    const Tensor scores = mul(matmul(q, transpose(k, -2, -1, loc), loc), scale, loc);
    y = matmul(tg::dropout(softmax(scores, -1, causal, loc), dropout, loc), v, loc);
  } else {
    y = attention(q, k, v, {.causal = causal}, loc);
  }
  return out_proj(merge_heads(y, loc), loc);
}

Tensor WhisperAttention::operator()(const Tensor& x, const Tensor& kv, bool causal, Loc loc) const {
  return attend(split_heads(q_proj(x, loc), heads, loc), split_heads(k_proj(kv, loc), heads, loc),
                split_heads(v_proj(kv, loc), heads, loc), causal, loc);
}

// One layer of either stack: self-attention, (decoder) cross-attention, the feed-forward, each
// pre-norm with its residual.
struct WhisperLayer : Module {
  WhisperLayer(Module& parent, std::string name, const WhisperConfig& c, bool decoder)
      : Module(parent, std::move(name)),
        self_attn(*this, "self_attn", c.d_model, decoder ? c.decoder_heads : c.encoder_heads,
                  c.attention_dropout),
        self_attn_layer_norm(*this, "self_attn_layer_norm", c.d_model, kEps),
        fc1(*this, "fc1", c.d_model, decoder ? c.decoder_ffn : c.encoder_ffn, normal_linear(true)),
        fc2(*this, "fc2", decoder ? c.decoder_ffn : c.encoder_ffn, c.d_model, normal_linear(true)),
        final_layer_norm(*this, "final_layer_norm", c.d_model, kEps),
        config(c) {
    if (decoder) {
      encoder_attn = std::make_unique<WhisperAttention>(*this, "encoder_attn", c.d_model, c.decoder_heads,
                                                        c.attention_dropout);
      encoder_attn_layer_norm =
          std::make_unique<LayerNorm>(*this, "encoder_attn_layer_norm", c.d_model, kEps);
    }
  }

  Tensor feed_forward(const Tensor& x, Loc loc) const {
    const Tensor h = tg::dropout(gelu(fc1(final_layer_norm(x, loc), loc), GeluApprox::kErf, loc),
                                 config.activation_dropout, loc);
    return add(x, tg::dropout(fc2(h, loc), config.dropout, loc), loc);
  }

  // The whole sequence: encoder (memory null, bidirectional) or decoder (causal, over memory).
  Tensor operator()(Tensor x, const Tensor* memory, Loc loc) const {
    const Tensor n = self_attn_layer_norm(x, loc);
    x = add(x, tg::dropout(self_attn(n, n, memory != nullptr, loc), config.dropout, loc), loc);
    if (memory) {
      const Tensor c = (*encoder_attn_layer_norm)(x, loc);
      x = add(x, tg::dropout((*encoder_attn)(c, *memory, false, loc), config.dropout, loc), loc);
    }
    return feed_forward(x, loc);
  }

  // The states holding this layer's cross-attention keys or values of the remembered encoder output.
  Tensor memory_state(const char* which, int64_t B, Loc loc) const {
    const int64_t H = config.decoder_heads;
    return state(encoder_attn->path() + "." + which + "_memory",
                 {B, H, config.source_positions, config.d_model / H}, DType::kF32, 0.0, loc);
  }

  // KV-cached decoding of x [B, T, d] at positions pos[b] … (see Whisper::logits_cached).
  Tensor cached(Tensor x, const Tensor& pos, int64_t cache_len, Loc loc) const {
    const int64_t B = x.shape()[0], H = config.decoder_heads;
    const Tensor n = self_attn_layer_norm(x, loc);
    const Tensor q = split_heads(self_attn.q_proj(n, loc), H, loc);
    const auto [k_all, v_all] =
        append_kv_cache(self_attn.path(), split_heads(self_attn.k_proj(n, loc), H, loc),
                        split_heads(self_attn.v_proj(n, loc), H, loc), pos, cache_len, loc);
    x = add(x,
            self_attn.out_proj(merge_heads(attention_at(q, k_all, v_all, pos, std::nullopt, loc), loc), loc),
            loc);
    const Tensor c = (*encoder_attn_layer_norm)(x, loc);
    const Tensor qc = split_heads(encoder_attn->q_proj(c, loc), H, loc);
    x = add(x, encoder_attn->attend(qc, memory_state("k", B, loc), memory_state("v", B, loc), false, loc),
            loc);
    return feed_forward(x, loc);
  }

  WhisperAttention self_attn;
  LayerNorm self_attn_layer_norm;
  std::unique_ptr<WhisperAttention> encoder_attn;
  std::unique_ptr<LayerNorm> encoder_attn_layer_norm;
  Linear fc1, fc2;
  LayerNorm final_layer_norm;
  const WhisperConfig& config;
};

struct Whisper::Encoder : Module {
  Encoder(Module& parent, const WhisperConfig& c)
      : Module(parent, "encoder"),
        conv1(*this, "conv1", c.mels, c.d_model, 3,
              {.padding = 1, .weight_init = init::normal(0.02), .bias_init = init::zeros()}),
        conv2(*this, "conv2", c.d_model, c.d_model, 3,
              {.stride = 2, .padding = 1, .weight_init = init::normal(0.02), .bias_init = init::zeros()}),
        embed_positions(*this, "embed_positions", c.source_positions, c.d_model, sinusoids()) {
    for (int64_t i = 0; i < c.encoder_layers; ++i)
      layers.push_back(std::make_unique<WhisperLayer>(*this, "layers." + std::to_string(i), c, false));
    layer_norm = std::make_unique<LayerNorm>(*this, "layer_norm", c.d_model, kEps);
  }
  Conv1d conv1, conv2;
  Embedding embed_positions;
  std::vector<std::unique_ptr<WhisperLayer>> layers;
  std::unique_ptr<LayerNorm> layer_norm;
};

struct Whisper::Decoder : Module {
  Decoder(Module& parent, const WhisperConfig& c)
      : Module(parent, "decoder"),
        embed_tokens(*this, "embed_tokens", c.vocab, c.d_model, init::normal(0.02)),
        embed_positions(*this, "embed_positions", c.target_positions, c.d_model, init::normal(0.02)) {
    for (int64_t i = 0; i < c.decoder_layers; ++i)
      layers.push_back(std::make_unique<WhisperLayer>(*this, "layers." + std::to_string(i), c, true));
    layer_norm = std::make_unique<LayerNorm>(*this, "layer_norm", c.d_model, kEps);
  }
  Embedding embed_tokens, embed_positions;
  std::vector<std::unique_ptr<WhisperLayer>> layers;
  std::unique_ptr<LayerNorm> layer_norm;
};

Whisper::Whisper(WhisperConfig c) : config(c), model_(*this, "model") { build(); }
Whisper::Whisper(Module& parent, std::string name, WhisperConfig c)
    : Module(parent, std::move(name)), config(c), model_(*this, "model") {
  build();
}
Whisper::~Whisper() = default;

void Whisper::build() {
  const WhisperConfig& c = config;
  if (c.vocab <= 0 || c.mels <= 0 || c.d_model <= 0 || c.encoder_layers <= 0 || c.decoder_layers <= 0 ||
      c.encoder_ffn <= 0 || c.decoder_ffn <= 0 || c.source_positions <= 0 || c.target_positions <= 0)
    throw ShapeError(
        "[Whisper] vocab, mels, d_model, layers, feed-forward widths and positions must be positive");
  for (const int64_t h : {c.encoder_heads, c.decoder_heads})
    if (h <= 0 || c.d_model % h != 0)
      throw ShapeError("[Whisper] " + std::to_string(h) + " attention heads do not divide d_model " +
                       std::to_string(c.d_model));
  if (c.d_model % 2 != 0) throw ShapeError("[Whisper] d_model must be even (the sinusoidal positions)");
  for (const double p : {c.dropout, c.attention_dropout, c.activation_dropout})
    if (!(p >= 0 && p < 1))
      throw Error("[Whisper] a dropout probability of " + std::to_string(p) + ": expected one in [0, 1)");
  encoder_ = std::make_unique<Encoder>(model_, c);
  decoder_ = std::make_unique<Decoder>(model_, c);
}

Tensor Whisper::encode(const Tensor& features, Loc loc) const {
  const Shape& s = features.shape();
  const int64_t frames = 2 * config.source_positions;
  if (s.size() != 3 || s[1] != config.mels || s[2] != frames)
    throw ShapeError("[Whisper] input_features must be [B, " + std::to_string(config.mels) + ", " +
                     std::to_string(frames) + "] (" + std::to_string(config.source_positions) +
                     " positions, each of two frames), got " + shape_str(s) + at(loc));
  const Encoder& e = *encoder_;
  Tensor x = gelu(e.conv1(features, loc), GeluApprox::kErf, loc);
  x = gelu(e.conv2(x, loc), GeluApprox::kErf, loc);                             // [B, d, S]
  x = add(transpose(x, 1, 2, loc), e.embed_positions.weight.tensor(loc), loc);  // [B, S, d]
  x = tg::dropout(x, config.dropout, loc);
  for (const auto& layer : e.layers) x = (*layer)(x, nullptr, loc);
  return (*e.layer_norm)(x, loc);
}

namespace {
void check_ids(const Tensor& ids, int64_t most, Loc loc) {
  if (ids.rank() != 2 || ids.dtype() != DType::kI32 || ids.shape()[1] > most)
    throw ShapeError("[Whisper] decoder ids must be i32 [B, T] with T <= max_target_positions " +
                     std::to_string(most) + ", got " + dtype_name(ids.dtype()) + shape_str(ids.shape()) +
                     at(loc));
}
}  // namespace

Tensor Whisper::decode(const Tensor& ids, const Tensor& encoder_hidden, Loc loc) const {
  check_ids(ids, config.target_positions, loc);
  const Shape& h = encoder_hidden.shape();
  if (h.size() != 3 || h[0] != ids.shape()[0] || h[2] != config.d_model)
    throw ShapeError("[Whisper] encoder_hidden must be [" + std::to_string(ids.shape()[0]) + ", S, " +
                     std::to_string(config.d_model) + "], got " + shape_str(h) + at(loc));
  const Decoder& d = *decoder_;
  const int64_t T = ids.shape()[1];
  Tensor x = d.embed_tokens(ids, loc);
  x = add(x, slice(d.embed_positions.weight.tensor(loc), 0, 0, T, 1, loc), loc);
  x = tg::dropout(x, config.dropout, loc);
  for (const auto& layer : d.layers) x = (*layer)(x, &encoder_hidden, loc);
  return (*d.layer_norm)(x, loc);
}

Tensor Whisper::logits(const Tensor& decoder_hidden, Loc loc) const {
  return matmul(decoder_hidden, transpose(decoder_->embed_tokens.weight.tensor(loc), 0, 1, loc), loc);
}

Tensor Whisper::remember(const Tensor& encoder_hidden, Loc loc) const {
  const Shape& h = encoder_hidden.shape();
  if (h.size() != 3 || h[1] != config.source_positions || h[2] != config.d_model)
    throw ShapeError("[Whisper] remember() takes the encoder's output [B, " +
                     std::to_string(config.source_positions) + ", " + std::to_string(config.d_model) +
                     "], got " + shape_str(h) + at(loc));
  for (const auto& layer : decoder_->layers) {
    const WhisperAttention& a = *layer->encoder_attn;
    assign(layer->memory_state("k", h[0], loc), split_heads(a.k_proj(encoder_hidden, loc), a.heads, loc),
           loc);
    assign(layer->memory_state("v", h[0], loc), split_heads(a.v_proj(encoder_hidden, loc), a.heads, loc),
           loc);
  }
  return encoder_hidden;
}

Tensor Whisper::logits_cached(const Tensor& ids, const Tensor& pos, int64_t cache_len, Loc loc) const {
  check_ids(ids, config.target_positions, loc);
  const int64_t B = ids.shape()[0], T = ids.shape()[1];
  if (pos.dtype() != DType::kI32 || pos.shape() != Shape{B})
    throw ShapeError("[Whisper] positions must be i32 [" + std::to_string(B) + "], got " +
                     dtype_name(pos.dtype()) + shape_str(pos.shape()) + at(loc));
  if (cache_len < T || cache_len > config.target_positions)
    throw ShapeError("[Whisper] a cache of " + std::to_string(cache_len) + " positions: it must hold the " +
                     std::to_string(T) + " new tokens and at most max_target_positions " +
                     std::to_string(config.target_positions) + at(loc));
  const Decoder& d = *decoder_;
  Tensor x = d.embed_tokens(ids, loc);
  x = add(x, embedding(d.embed_positions.weight.tensor(loc), token_positions(pos, T, loc), loc), loc);
  for (const auto& layer : d.layers) x = layer->cached(x, pos, cache_len, loc);
  return logits((*d.layer_norm)(x, loc), loc);
}

std::vector<int32_t> Whisper::shift_right(std::span<const int32_t> labels, int64_t rows) const {
  return shift_tokens_right(labels, rows, config.start_id, config.pad_id, "Whisper");
}

}  // namespace tg::nn
