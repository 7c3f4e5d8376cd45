// CLIP (Radford et al. 2021): a text encoder and an image encoder trained so that a caption and
// its image map to nearby unit vectors. Hugging Face's parameter names and layouts, so
// tg::pretrained::load maps a CLIPModel folder (or one tower's: CLIPTextModel[WithProjection],
// CLIPVisionModel[WithProjection]) onto it name by name:
//
//   text_model.embeddings.{token_embedding, position_embedding}   (Embeddings [vocab | positions, d])
//   text_model.encoder.layers.<i>.…, text_model.final_layer_norm
//   vision_model.embeddings.{class_embedding [d], patch_embedding (Conv2d, no bias),
//                            position_embedding [patches + 1, d]}
//   vision_model.pre_layrnorm, vision_model.encoder.layers.<i>.…, vision_model.post_layernorm
//   text_projection, visual_projection (Linears without bias to projection_dim), logit_scale []
//
// Each encoder layer (both towers) is pre-norm:
//   h = x + out_proj(attention(q_proj, k_proj, v_proj of layer_norm1(x)))
//   y = h + fc2(act(fc1(layer_norm2(h))))
// with act quick_gelu (x·σ(1.702x), the original CLIP's) or GELU. The text tower is causal; its
// pooled state is the final norm's output at the end-of-text token (the first eos_id in each
// row; eos_id 2, as old configs say, picks the largest id instead, which in CLIP's vocabulary is
// the end-of-text token too). The image tower pools post_layernorm([CLS]'s state).
// logits_per_image(i, t) = exp(logit_scale) · ⟨î, t̂⟩ over the unit-length projections.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "tensorgrad/nn.h"

namespace tg::nn {

/// The encoder layers' activation (hidden_act): "quick_gelu", "gelu" (erf) or "gelu_new" /
/// "gelu_pytorch_tanh" (tanh).
enum class ClipActivation { kQuickGelu, kGelu, kGeluTanh };

/// One tower's transformer: config.json's text_config or vision_config (hidden_size,
/// num_hidden_layers, num_attention_heads, intermediate_size, layer_norm_eps, hidden_act).
struct ClipEncoderConfig {
  int64_t d_model = 512, layers = 12, heads = 8, mlp_hidden = 2048;
  double ln_eps = 1e-5;
  ClipActivation act = ClipActivation::kQuickGelu;
};

struct ClipTextConfig {
  ClipEncoderConfig encoder = {};
  /// vocab_size, max_position_embeddings (the longest text), eos_token_id (where the text is
  /// pooled; 2, as configs written before transformers fixed the field say, pools at each row's
  /// largest id instead, which in CLIP's vocabulary is the end-of-text token too).
  int64_t vocab = 49408, positions = 77;
  int32_t eos_id = 49407;
};

struct ClipVisionConfig {
  ClipEncoderConfig encoder{.d_model = 768, .layers = 12, .heads = 12, .mlp_hidden = 3072};
  int64_t image_size = 224, patch_size = 32, channels = 3;
  /// Tokens per image: [CLS] and the patches.
  int64_t tokens() const { return (image_size / patch_size) * (image_size / patch_size) + 1; }
};

struct ClipConfig {
  ClipTextConfig text = {};
  ClipVisionConfig vision = {};
  /// Which towers the model has (CLIPModel: both; CLIPTextModel…: text; CLIPVisionModel…: vision).
  bool has_text = true, has_vision = true;
  /// text_projection and visual_projection to projection_dim (CLIPModel and the …WithProjection
  /// classes; the plain tower classes have none).
  bool projections = true;
  int64_t projection_dim = 512;
  /// logit_scale's initial value (logit_scale_init_value: log(1 / 0.07)).
  double logit_scale_init = 2.6592;
};

/// One encoder layer (encoder.layers.<i>).
class ClipLayer : public Module {
 public:
  ClipLayer(Module& parent, std::string name, const ClipEncoderConfig& c);
  /// x [B, T, d] → [B, T, d]; causal for the text tower; key_mask bool [B, T] or none.
  Tensor operator()(const Tensor& x, bool causal, const std::optional<Tensor>& key_mask, Loc loc) const;

  Module self_attn, mlp;
  Linear k_proj, v_proj, q_proj, out_proj;
  LayerNorm layer_norm1;
  Linear fc1, fc2;
  LayerNorm layer_norm2;

 private:
  ClipEncoderConfig config_;
};

class Clip : public Module {
 public:
  explicit Clip(ClipConfig config);
  Clip(Module& parent, std::string name, ClipConfig config);

  /// The text tower's last_hidden_state [B, T, d_text] (after final_layer_norm) for ids i32
  /// [B, T] (T ≤ positions); mask [B, T] (transformers' attention_mask, any type, nonzero kept)
  /// leaves padding keys out.
  Tensor text_hidden(const Tensor& ids, const std::optional<Tensor>& mask = std::nullopt,
                     Loc loc = Loc::current()) const;
  /// pooler_output [B, d_text]: the hidden state at each row's end-of-text token.
  Tensor text_pooled(const Tensor& hidden, const Tensor& ids, Loc loc = Loc::current()) const;
  /// get_text_features: text_projection(text_pooled) [B, projection_dim], not normalised.
  Tensor text_features(const Tensor& ids, const std::optional<Tensor>& mask = std::nullopt,
                       Loc loc = Loc::current()) const;

  /// The image tower's last_hidden_state [B, tokens, d_vision] (before post_layernorm) for
  /// pixels [B, channels, image_size, image_size] (as the checkpoint's image processor gives).
  Tensor vision_hidden(const Tensor& pixels, Loc loc = Loc::current()) const;
  /// pooler_output [B, d_vision]: post_layernorm of [CLS]'s state.
  Tensor vision_pooled(const Tensor& hidden, Loc loc = Loc::current()) const;
  /// get_image_features: visual_projection(vision_pooled) [B, projection_dim], not normalised.
  Tensor image_features(const Tensor& pixels, Loc loc = Loc::current()) const;

  /// [images, texts]: exp(logit_scale) times the cosine similarity of each image's and each
  /// text's features (logits_per_text is its transpose).
  Tensor logits_per_image(const Tensor& image_features, const Tensor& text_features,
                          Loc loc = Loc::current()) const;
  /// CLIP's contrastive loss for a batch of matching pairs (image i with text i): the mean of
  /// the cross-entropies of logits_per_image and logits_per_text against the diagonal.
  static Tensor contrastive_loss(const Tensor& logits_per_image, Loc loc = Loc::current());

  const ClipConfig config;

 private:
  void build();
  void build_text();
  void build_vision();
  Tensor encode(const std::vector<std::unique_ptr<ClipLayer>>& layers, Tensor x, bool causal,
                const std::optional<Tensor>& mask, Loc loc) const;
  // Text tower.
  std::unique_ptr<Module> text_model_, text_embeddings_, text_encoder_;
  std::unique_ptr<Embedding> token_embedding_, text_positions_;
  std::vector<std::unique_ptr<ClipLayer>> text_layers_;
  std::unique_ptr<LayerNorm> final_layer_norm_;
  // Vision tower.
  std::unique_ptr<Module> vision_model_, vision_embeddings_, vision_encoder_;
  std::optional<Param> class_embedding_;
  std::unique_ptr<Conv2d> patch_embedding_;
  std::unique_ptr<Embedding> vision_positions_;
  std::unique_ptr<LayerNorm> pre_layrnorm_;
  std::vector<std::unique_ptr<ClipLayer>> vision_layers_;
  std::unique_ptr<LayerNorm> post_layernorm_;
  // Heads.
  std::unique_ptr<Linear> text_projection_, visual_projection_;
  std::optional<Param> logit_scale_;
};

}  // namespace tg::nn
