// Vision Transformers (ViT: Dosovitskiy et al. 2020, and the checkpoints published in its
// layout) with Hugging Face's parameter names and layouts, so tg::pretrained::load maps a
// ViTModel or ViTForImageClassification folder onto it name by name:
//
//   embeddings.{cls_token [1, 1, d], position_embeddings [1, patches + 1, d]}
//   embeddings.patch_embeddings.projection     (Conv2d, kernel = stride = patch_size)
//   encoder.layer.<i>.attention.attention.{query, key, value}, attention.output.dense
//   encoder.layer.<i>.{layernorm_before, intermediate.dense, output.dense, layernorm_after}
//   layernorm                                   (the final norm: hidden() ends with it)
//   pooler.dense                                (ViTConfig::pooler: tanh(dense(the [CLS] state)))
//   classifier                                  (ViTConfig::labels: on the [CLS] state)
//   embeddings.distillation_token, cls_classifier, distillation_classifier
//                                               (ViTConfig::distillation_token and
//                                               distillation_head: DeiT's models)
//
// An image [B, C, H, W] (H = W = image_size) is cut into (image_size / patch)² patches, each
// projected to d, with the learned [CLS] token in front and the position embeddings added. The
// layers are pre-norm: h = x + attn(LN(x)), then h + W2·gelu(W1·LN(h)); attention is
// bidirectional (one fused primitive). Training programs apply transformers' hidden dropout
// where the config asks (after the embeddings and each layer's two projections).
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "tensorgrad/nn.h"

namespace tg::nn {

/// The sizes and variants of a ViT, named after config.json's fields (image_size, patch_size,
/// num_channels, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
/// layer_norm_eps, hidden_act, qkv_bias, num_labels).
struct ViTConfig {
  int64_t image_size = 224, patch_size = 16, channels = 3;
  int64_t d_model = 768, layers = 12, heads = 12, mlp_hidden = 3072;
  double ln_eps = 1e-12;
  /// hidden_act: "gelu" is the erf GELU, "gelu_new" / "gelu_pytorch_tanh" the tanh one.
  GeluApprox gelu = GeluApprox::kErf;
  /// Biases on the query, key and value projections.
  bool qkv_bias = true;
  /// pooler.dense (ViTModel's pooler): pooled() is tanh(dense([CLS]'s hidden state)).
  bool pooler = false;
  /// A classifier with this many outputs on the [CLS] token's hidden state
  /// (ViTForImageClassification's num_labels): classify(). 0: none.
  int64_t labels = 0;
  /// hidden_dropout_prob: after the embeddings and each layer's attention and MLP projections,
  /// in training programs only.
  double hidden_dropout = 0.0;
  /// DeiT's distillation token, after [CLS] (every DeiT* class of transformers has it).
  bool distillation_token = false;
  /// DeiTForImageClassificationWithTeacher's heads: the logits are the mean of cls_classifier on
  /// [CLS] and distillation_classifier on the distillation token (needs both flags before it).
  bool distillation_head = false;

  /// Patches per image side and per image, and tokens per image ([CLS], [DIST], then the patches).
  int64_t side() const { return image_size / patch_size; }
  int64_t tokens() const { return side() * side() + 1 + (distillation_token ? 1 : 0); }
};

/// One encoder layer (encoder.layer.<i>).
class ViTLayer : public Module {
 public:
  ViTLayer(Module& parent, std::string name, const ViTConfig& c);
  /// x [B, T, d] → [B, T, d].
  Tensor operator()(const Tensor& x, Loc loc) const;

  Module attention, self, attention_output, intermediate, output;
  Linear query, key, value, attention_dense;
  LayerNorm norm_before, norm_after;
  Linear intermediate_dense, output_dense;

 private:
  ViTConfig config_;
};

class ViT : public Module {
 public:
  explicit ViT(ViTConfig config);
  ViT(Module& parent, std::string name, ViTConfig config);

  /// The final hidden states [B, tokens, d_model] (after the last LayerNorm; token 0 is [CLS])
  /// for images [B, channels, image_size, image_size] (f32; transformers' pixel_values, already
  /// resized and normalized as the checkpoint's image processor says).
  Tensor hidden(const Tensor& pixels, Loc loc = Loc::current()) const;
  /// ViTModel's pooler_output [B, d_model] from hidden states (needs config.pooler).
  Tensor pooled(const Tensor& hidden, Loc loc = Loc::current()) const;
  /// The classifier's logits [B, labels] from hidden states (needs config.labels; distilled: the
  /// mean of the [CLS] and the distillation classifiers', as DeiT's inference).
  Tensor classify(const Tensor& hidden, Loc loc = Loc::current()) const;

  const ViTConfig config;

 private:
  void build();
  std::unique_ptr<Module> embeddings_, patch_embeddings_, encoder_, pooler_;
  std::optional<Param> cls_token_, distillation_token_, position_;
  std::unique_ptr<Conv2d> projection_;
  std::vector<std::unique_ptr<ViTLayer>> layers_;
  std::unique_ptr<LayerNorm> norm_;
  std::unique_ptr<Linear> pooler_dense_, classifier_, distillation_classifier_;
};

}  // namespace tg::nn
