// nn::Clip: CLIP's text and image encoders (see tensorgrad/clip.h).
#include "tensorgrad/clip.h"

#include <cmath>
#include <string>

#include "ir/graph.h"
#include "nn/heads.h"
#include "tensorgrad/bert.h"
#include "tensorgrad/errors.h"

namespace tg::nn {
namespace {

// Hugging Face's CLIP initialisation (initializer_factor 1): projections into the attention
// normal(d^-½ (2·layers)^-½), its output normal(d^-½), fc1 normal((2d)^-½), fc2 as the
// attention's inputs; biases zero.
double in_proj_std(const ClipEncoderConfig& c) {
  return std::pow(static_cast<double>(c.d_model), -0.5) * std::pow(2.0 * static_cast<double>(c.layers), -0.5);
}

Tensor activation(const Tensor& x, ClipActivation act, Loc loc) {
  switch (act) {
    case ClipActivation::kQuickGelu: return mul(x, sigmoid(mul(x, 1.702, loc), loc), loc);
    case ClipActivation::kGelu: return gelu(x, GeluApprox::kErf, loc);
    case ClipActivation::kGeluTanh: return gelu(x, GeluApprox::kTanh, loc);
  }
  return x;
}

void check_encoder(const ClipEncoderConfig& c, const char* tower) {
  const std::string t = tower;
  if (c.d_model <= 0 || c.layers <= 0 || c.heads <= 0 || c.mlp_hidden <= 0)
    throw ShapeError("[Clip] the " + t + " tower's d_model, layers, heads and mlp_hidden must be positive");
  if (c.d_model % c.heads != 0)
    throw ShapeError("[Clip] the " + t + " tower's d_model " + std::to_string(c.d_model) +
                     " is not divisible by its heads " + std::to_string(c.heads));
}

}  // namespace

ClipLayer::ClipLayer(Module& parent, std::string name, const ClipEncoderConfig& c)
    : Module(parent, std::move(name)),
      self_attn(*this, "self_attn"),
      mlp(*this, "mlp"),
      k_proj(self_attn, "k_proj", c.d_model, c.d_model, normal_linear(true, in_proj_std(c))),
      v_proj(self_attn, "v_proj", c.d_model, c.d_model, normal_linear(true, in_proj_std(c))),
      q_proj(self_attn, "q_proj", c.d_model, c.d_model, normal_linear(true, in_proj_std(c))),
      out_proj(self_attn, "out_proj", c.d_model, c.d_model,
               normal_linear(true, std::pow(static_cast<double>(c.d_model), -0.5))),
      layer_norm1(*this, "layer_norm1", c.d_model, c.ln_eps),
      fc1(mlp, "fc1", c.d_model, c.mlp_hidden,
          normal_linear(true, std::pow(2.0 * static_cast<double>(c.d_model), -0.5))),
      fc2(mlp, "fc2", c.mlp_hidden, c.d_model, normal_linear(true, in_proj_std(c))),
      layer_norm2(*this, "layer_norm2", c.d_model, c.ln_eps),
      config_(c) {}

Tensor ClipLayer::operator()(const Tensor& x, bool causal, const std::optional<Tensor>& key_mask,
                             Loc loc) const {
  const Tensor n = layer_norm1(x, loc);
  const Tensor q = split_heads(q_proj(n, loc), config_.heads, loc);
  const Tensor k = split_heads(k_proj(n, loc), config_.heads, loc);
  const Tensor v = split_heads(v_proj(n, loc), config_.heads, loc);
  const Tensor a =
      merge_heads(tg::attention(q, k, v, AttentionOptions{.causal = causal, .key_mask = key_mask}, loc), loc);
  const Tensor h = add(x, out_proj(a, loc), loc);
  return add(h, fc2(activation(fc1(layer_norm2(h, loc), loc), config_.act, loc), loc), loc);
}

Clip::Clip(ClipConfig c) : config(c) { build(); }
Clip::Clip(Module& parent, std::string name, ClipConfig c) : Module(parent, std::move(name)), config(c) {
  build();
}

void Clip::build() {
  const ClipConfig& c = config;
  if (!c.has_text && !c.has_vision) throw Error("[Clip] a model needs a text or a vision tower");
  if (c.projections && c.projection_dim <= 0) throw ShapeError("[Clip] projection_dim must be positive");
  if (c.has_text) build_text();
  if (c.has_vision) build_vision();
  if (c.projections) {
    if (c.has_text)
      text_projection_ = std::make_unique<Linear>(
          *this, "text_projection", c.text.encoder.d_model, c.projection_dim,
          normal_linear(false, std::pow(static_cast<double>(c.text.encoder.d_model), -0.5)));
    if (c.has_vision)
      visual_projection_ = std::make_unique<Linear>(
          *this, "visual_projection", c.vision.encoder.d_model, c.projection_dim,
          normal_linear(false, std::pow(static_cast<double>(c.vision.encoder.d_model), -0.5)));
  }
  if (c.has_text && c.has_vision && c.projections)
    logit_scale_.emplace(*this, "logit_scale", Shape{}, init::constant(c.logit_scale_init));
}

void Clip::build_text() {
  const ClipTextConfig& t = config.text;
  check_encoder(t.encoder, "text");
  if (t.vocab <= 0 || t.positions <= 0)
    throw ShapeError("[Clip] the text tower's vocab and positions must be positive");
  text_model_ = std::make_unique<Module>(*this, "text_model");
  text_embeddings_ = std::make_unique<Module>(*text_model_, "embeddings");
  token_embedding_ = std::make_unique<Embedding>(*text_embeddings_, "token_embedding", t.vocab,
                                                 t.encoder.d_model, init::normal(0.02));
  text_positions_ = std::make_unique<Embedding>(*text_embeddings_, "position_embedding", t.positions,
                                                t.encoder.d_model, init::normal(0.02));
  text_encoder_ = std::make_unique<Module>(*text_model_, "encoder");
  for (int64_t i = 0; i < t.encoder.layers; ++i)
    text_layers_.push_back(
        std::make_unique<ClipLayer>(*text_encoder_, "layers." + std::to_string(i), t.encoder));
  final_layer_norm_ =
      std::make_unique<LayerNorm>(*text_model_, "final_layer_norm", t.encoder.d_model, t.encoder.ln_eps);
}

void Clip::build_vision() {
  const ClipVisionConfig& v = config.vision;
  check_encoder(v.encoder, "vision");
  if (v.image_size <= 0 || v.patch_size <= 0 || v.channels <= 0)
    throw ShapeError("[Clip] the vision tower's image_size, patch_size and channels must be positive");
  if (v.image_size % v.patch_size != 0)
    throw ShapeError("[Clip] image_size " + std::to_string(v.image_size) +
                     " is not a multiple of patch_size " + std::to_string(v.patch_size));
  const int64_t d = v.encoder.d_model;
  vision_model_ = std::make_unique<Module>(*this, "vision_model");
  vision_embeddings_ = std::make_unique<Module>(*vision_model_, "embeddings");
  class_embedding_.emplace(*vision_embeddings_, "class_embedding", Shape{d},
                           init::normal(std::pow(static_cast<double>(d), -0.5)));
  patch_embedding_ = std::make_unique<Conv2d>(
      *vision_embeddings_, "patch_embedding", v.channels, d, Size2(v.patch_size),
      Conv2dLayerOptions{.stride = Size2(v.patch_size), .bias = false, .weight_init = init::normal(0.02)});
  vision_positions_ = std::make_unique<Embedding>(*vision_embeddings_, "position_embedding", v.tokens(), d,
                                                  init::normal(0.02));
  pre_layrnorm_ = std::make_unique<LayerNorm>(*vision_model_, "pre_layrnorm", d, v.encoder.ln_eps);
  vision_encoder_ = std::make_unique<Module>(*vision_model_, "encoder");
  for (int64_t i = 0; i < v.encoder.layers; ++i)
    vision_layers_.push_back(
        std::make_unique<ClipLayer>(*vision_encoder_, "layers." + std::to_string(i), v.encoder));
  post_layernorm_ = std::make_unique<LayerNorm>(*vision_model_, "post_layernorm", d, v.encoder.ln_eps);
}

Tensor Clip::encode(const std::vector<std::unique_ptr<ClipLayer>>& layers, Tensor x, bool causal,
                    const std::optional<Tensor>& mask, Loc loc) const {
  for (const auto& layer : layers) x = (*layer)(x, causal, mask, loc);
  return x;
}

Tensor Clip::text_hidden(const Tensor& ids, const std::optional<Tensor>& mask, Loc loc) const {
  if (!text_model_) throw Error("[Clip] text_hidden(): this model has no text tower" + at(loc));
  const Shape& s = ids.shape();
  if (s.size() != 2 || ids.dtype() != DType::kI32)
    throw ShapeError("[Clip] ids must be i32 [B, T], got " + shape_str(s) + at(loc));
  if (s[1] > config.text.positions)
    throw ShapeError("[Clip] a text of " + std::to_string(s[1]) + " tokens is longer than the model's " +
                     std::to_string(config.text.positions) + " positions" + at(loc));
  if (mask && mask->shape() != s)
    throw ShapeError("[Clip] the mask must be " + shape_str(s) + " as the ids, got " +
                     shape_str(mask->shape()) + at(loc));
  const Tensor positions = slice(text_positions_->weight.tensor(loc), 0, 0, s[1], 1, loc);
  const Tensor x = add((*token_embedding_)(ids, loc), positions, loc);
  return (*final_layer_norm_)(encode(text_layers_, x, /*causal=*/true, mask, loc), loc);
}

Tensor Clip::text_pooled(const Tensor& hidden, const Tensor& ids, Loc loc) const {
  if (!text_model_) throw Error("[Clip] text_pooled(): this model has no text tower" + at(loc));
  const Shape& s = hidden.shape();
  if (s.size() != 3 || ids.shape().size() != 2 || ids.dtype() != DType::kI32 || ids.shape()[0] != s[0] ||
      ids.shape()[1] != s[1] || s[2] != config.text.encoder.d_model)
    throw ShapeError("[Clip] text_pooled takes hidden [B, T, " + std::to_string(config.text.encoder.d_model) +
                     "] and their i32 ids [B, T], got " + shape_str(s) + " and " + shape_str(ids.shape()) +
                     at(loc));
  // transformers' rule: eos_token_id 2 (configs older than the field's fix) takes the largest
  // id's position, else the first end-of-text token's.
  const Tensor index =
      config.text.eos_id == 2
          ? argmax(ids, 1, /*keepdim=*/true, loc)
          : argmax(cast(eq(ids, config.text.eos_id, loc), DType::kI32, loc), 1, /*keepdim=*/true, loc);
  const Tensor rows = broadcast_to(reshape(index, {s[0], 1, 1}, loc), {s[0], 1, s[2]}, loc);
  return reshape(take_along_axis(hidden, rows, 1, loc), {s[0], s[2]}, loc);
}

Tensor Clip::text_features(const Tensor& ids, const std::optional<Tensor>& mask, Loc loc) const {
  if (!text_projection_) throw Error("[Clip] text_features(): this model has no text_projection" + at(loc));
  return (*text_projection_)(text_pooled(text_hidden(ids, mask, loc), ids, loc), loc);
}

Tensor Clip::vision_hidden(const Tensor& pixels, Loc loc) const {
  if (!vision_model_) throw Error("[Clip] vision_hidden(): this model has no vision tower" + at(loc));
  const ClipVisionConfig& v = config.vision;
  const Shape& s = pixels.shape();
  if (s.size() != 4 || s[1] != v.channels || s[2] != v.image_size || s[3] != v.image_size)
    throw ShapeError("[Clip] pixels must be [B, " + std::to_string(v.channels) + ", " +
                     std::to_string(v.image_size) + ", " + std::to_string(v.image_size) + "], got " +
                     shape_str(s) + at(loc));
  const int64_t B = s[0], d = v.encoder.d_model;
  const Tensor patches = patch_tokens(*patch_embedding_, pixels, loc);
  const Tensor cls = broadcast_to(reshape(class_embedding_->tensor(loc), {1, 1, d}, loc), {B, 1, d}, loc);
  const Tensor x =
      add(concat(std::vector<Tensor>{cls, patches}, 1, loc), vision_positions_->weight.tensor(loc), loc);
  return encode(vision_layers_, (*pre_layrnorm_)(x, loc), /*causal=*/false, std::nullopt, loc);
}

Tensor Clip::vision_pooled(const Tensor& hidden, Loc loc) const {
  if (!post_layernorm_) throw Error("[Clip] vision_pooled(): this model has no vision tower" + at(loc));
  return (*post_layernorm_)(first_token(hidden, loc), loc);
}

Tensor Clip::image_features(const Tensor& pixels, Loc loc) const {
  if (!visual_projection_)
    throw Error("[Clip] image_features(): this model has no visual_projection" + at(loc));
  return (*visual_projection_)(vision_pooled(vision_hidden(pixels, loc), loc), loc);
}

Tensor Clip::logits_per_image(const Tensor& image_features, const Tensor& text_features, Loc loc) const {
  if (!logit_scale_)
    throw Error("[Clip] logits_per_image(): this model has no logit_scale (CLIPModel's)" + at(loc));
  const Tensor sim =
      matmul(l2_normalize(image_features, loc), transpose(l2_normalize(text_features, loc), 0, 1, loc), loc);
  return mul(sim, exp(logit_scale_->tensor(loc), loc), loc);
}

Tensor Clip::contrastive_loss(const Tensor& logits_per_image, Loc loc) {
  const Shape& s = logits_per_image.shape();
  if (s.size() != 2 || s[0] != s[1])
    throw ShapeError("[Clip] contrastive_loss needs square logits [N, N] (image i with text i), got " +
                     shape_str(s) + at(loc));
  const Tensor targets = arange(0, static_cast<double>(s[0]), 1, DType::kI32, loc);
  const Tensor image_loss = cross_entropy(logits_per_image, targets, {}, loc);
  const Tensor text_loss = cross_entropy(transpose(logits_per_image, 0, 1, loc), targets, {}, loc);
  return mul(add(image_loss, text_loss, loc), 0.5, loc);
}

}  // namespace tg::nn
