// nn::ViT: Vision Transformers (see tensorgrad/vit.h).
#include "tensorgrad/vit.h"

#include <string>

#include "tensorgrad/bert.h"
#include "nn/heads.h"
#include "tensorgrad/errors.h"

namespace tg::nn {
ViTLayer::ViTLayer(Module& parent, std::string name, const ViTConfig& c)
    : Module(parent, std::move(name)),
      attention(*this, "attention"),
      self(attention, "attention"),
      attention_output(attention, "output"),
      intermediate(*this, "intermediate"),
      output(*this, "output"),
      query(self, "query", c.d_model, c.d_model, normal_linear(c.qkv_bias)),
      key(self, "key", c.d_model, c.d_model, normal_linear(c.qkv_bias)),
      value(self, "value", c.d_model, c.d_model, normal_linear(c.qkv_bias)),
      attention_dense(attention_output, "dense", c.d_model, c.d_model, normal_linear(true)),
      norm_before(*this, "layernorm_before", c.d_model, c.ln_eps),
      norm_after(*this, "layernorm_after", c.d_model, c.ln_eps),
      intermediate_dense(intermediate, "dense", c.d_model, c.mlp_hidden, normal_linear(true)),
      output_dense(output, "dense", c.mlp_hidden, c.d_model, normal_linear(true)),
      config_(c) {}

Tensor ViTLayer::operator()(const Tensor& x, Loc loc) const {
  const Tensor n = norm_before(x, loc);
  const Tensor q = split_heads(query(n, loc), config_.heads, loc);
  const Tensor k = split_heads(key(n, loc), config_.heads, loc);
  const Tensor v = split_heads(value(n, loc), config_.heads, loc);
  const Tensor a = merge_heads(tg::attention(q, k, v, AttentionOptions{.causal = false}, loc), loc);
  const Tensor h = add(x, dropout(attention_dense(a, loc), config_.hidden_dropout, loc), loc);
  const Tensor m = output_dense(gelu(intermediate_dense(norm_after(h, loc), loc), config_.gelu, loc), loc);
  return add(h, dropout(m, config_.hidden_dropout, loc), loc);
}

ViT::ViT(ViTConfig c) : config(c) { build(); }
ViT::ViT(Module& parent, std::string name, ViTConfig c) : Module(parent, std::move(name)), config(c) {
  build();
}

void ViT::build() {
  const ViTConfig& c = config;
  if (c.image_size <= 0 || c.patch_size <= 0 || c.channels <= 0 || c.d_model <= 0 || c.layers <= 0 ||
      c.heads <= 0 || c.mlp_hidden <= 0 || c.labels < 0)
    throw ShapeError(
        "[ViT] image_size, patch_size, channels, d_model, layers, heads and mlp_hidden must be positive, "
        "labels "
        "≥ 0 (0: no classifier)");
  if (c.image_size % c.patch_size != 0)
    throw ShapeError("[ViT] image_size " + std::to_string(c.image_size) +
                     " is not a multiple of patch_size " + std::to_string(c.patch_size));
  if (c.d_model % c.heads != 0)
    throw ShapeError("[ViT] d_model " + std::to_string(c.d_model) + " is not divisible by heads " +
                     std::to_string(c.heads));
  if (!(c.hidden_dropout >= 0 && c.hidden_dropout < 1))
    throw Error("[ViT] a dropout probability of " + std::to_string(c.hidden_dropout) +
                ": expected one in [0, 1)");
  // Hugging Face's initialisation: normal(0.02) weights, tokens and positions (transformers
  // truncates at 2σ), zero biases.
  embeddings_ = std::make_unique<Module>(*this, "embeddings");
  cls_token_.emplace(*embeddings_, "cls_token", Shape{1, 1, c.d_model}, init::normal(0.02));
  if (c.distillation_head && (!c.distillation_token || c.labels == 0))
    throw Error("[ViT] distillation_head needs distillation_token and labels");
  if (c.distillation_token)
    distillation_token_.emplace(*embeddings_, "distillation_token", Shape{1, 1, c.d_model},
                                init::normal(0.02));
  position_.emplace(*embeddings_, "position_embeddings", Shape{1, c.tokens(), c.d_model}, init::normal(0.02));
  patch_embeddings_ = std::make_unique<Module>(*embeddings_, "patch_embeddings");
  projection_ = std::make_unique<Conv2d>(
      *patch_embeddings_, "projection", c.channels, c.d_model, Size2(c.patch_size),
      Conv2dLayerOptions{
          .stride = Size2(c.patch_size), .weight_init = init::normal(0.02), .bias_init = init::zeros()});
  encoder_ = std::make_unique<Module>(*this, "encoder");
  for (int64_t i = 0; i < c.layers; ++i)
    layers_.push_back(std::make_unique<ViTLayer>(*encoder_, "layer." + std::to_string(i), c));
  norm_ = std::make_unique<LayerNorm>(*this, "layernorm", c.d_model, c.ln_eps);
  if (c.pooler) {
    pooler_ = std::make_unique<Module>(*this, "pooler");
    pooler_dense_ = std::make_unique<Linear>(*pooler_, "dense", c.d_model, c.d_model, normal_linear(true));
  }
  if (c.labels > 0 && c.distillation_head) {
    classifier_ = std::make_unique<Linear>(*this, "cls_classifier", c.d_model, c.labels, normal_linear(true));
    distillation_classifier_ =
        std::make_unique<Linear>(*this, "distillation_classifier", c.d_model, c.labels, normal_linear(true));
  } else if (c.labels > 0) {
    classifier_ = std::make_unique<Linear>(*this, "classifier", c.d_model, c.labels, normal_linear(true));
  }
}

Tensor ViT::hidden(const Tensor& pixels, Loc loc) const {
  const ViTConfig& c = config;
  const Shape& s = pixels.shape();
  if (s.size() != 4 || s[1] != c.channels || s[2] != c.image_size || s[3] != c.image_size)
    throw ShapeError("[ViT] pixels must be [B, " + std::to_string(c.channels) + ", " +
                     std::to_string(c.image_size) + ", " + std::to_string(c.image_size) + "], got " +
                     shape_str(s) + " at " + loc.file_name() + ":" + std::to_string(loc.line()));
  const int64_t B = s[0];
  // The patches as tokens [B, n, d], [CLS] (and DeiT's distillation token) in front.
  const Tensor patches = patch_tokens(*projection_, pixels, loc);
  std::vector<Tensor> parts{broadcast_to(cls_token_->tensor(loc), {B, 1, c.d_model}, loc)};
  if (distillation_token_)
    parts.push_back(broadcast_to(distillation_token_->tensor(loc), {B, 1, c.d_model}, loc));
  parts.push_back(patches);
  Tensor x = add(concat(std::span<const Tensor>(parts), 1, loc), position_->tensor(loc), loc);
  x = dropout(x, c.hidden_dropout, loc);
  for (const auto& layer : layers_) x = (*layer)(x, loc);
  return (*norm_)(x, loc);
}

Tensor ViT::pooled(const Tensor& hidden, Loc loc) const {
  if (!pooler_dense_) throw Error("[ViT] pooled(): this model has no pooler (ViTConfig::pooler)");
  return tanh((*pooler_dense_)(first_token(hidden, loc), loc), loc);
}

Tensor ViT::classify(const Tensor& hidden, Loc loc) const {
  if (!classifier_) throw Error("[ViT] classify(): this model has no classifier (ViTConfig::labels)");
  const Tensor logits = (*classifier_)(first_token(hidden, loc), loc);
  if (!distillation_classifier_) return logits;
  const Shape& s = hidden.shape();
  const Tensor dist = reshape(slice(hidden, 1, 1, 2, 1, loc), {s[0], s[2]}, loc);  // [DIST]
  return mul(add(logits, (*distillation_classifier_)(dist, loc), loc), 0.5, loc);
}

}  // namespace tg::nn
