// CLIP → nn::Clip, names as in the file (the module is laid out as transformers' classes):
//   CLIPModel                       text_config and vision_config, both towers, projections
//                                   and logit_scale
//   CLIPTextModel, CLIPVisionModel  one tower (its config at the top level), no projection
//   CLIPTextModelWithProjection, CLIPVisionModelWithProjection
//                                   one tower and its projection
// A field a config leaves out takes transformers' default (CLIPTextConfig's, CLIPVisionConfig's).
// The position_ids buffers older files carry are ignored. Refused: attention dropout (the fused
// attention has none), another activation, images that are not square.
#include <string>
#include <utility>

#include "io/pretrained_internal.h"
#include "tensorgrad/clip.h"

namespace tg::pretrained::detail {
namespace {

nn::ClipActivation activation_of(const json& c, const std::string& f) {
  const std::string act = field<std::string>(c, f, "hidden_act", "quick_gelu");
  if (act == "quick_gelu") return nn::ClipActivation::kQuickGelu;
  if (act == "gelu") return nn::ClipActivation::kGelu;
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return nn::ClipActivation::kGeluTanh;
  fail(f, "config.json: hidden_act \"" + act +
              "\" is not implemented by nn::Clip (quick_gelu, gelu, gelu_new, gelu_pytorch_tanh)");
}

nn::ClipEncoderConfig encoder_of(const json& c, const std::string& f, nn::ClipEncoderConfig e) {
  e.d_model = field<int64_t>(c, f, "hidden_size", e.d_model);
  e.layers = field<int64_t>(c, f, "num_hidden_layers", e.layers);
  e.heads = field<int64_t>(c, f, "num_attention_heads", e.heads);
  e.mlp_hidden = field<int64_t>(c, f, "intermediate_size", e.mlp_hidden);
  e.ln_eps = field<double>(c, f, "layer_norm_eps", e.ln_eps);
  e.act = activation_of(c, f);
  if (const double p = field<double>(c, f, "attention_dropout", 0.0); p != 0)
    fail(f, "config.json: attention_dropout " + std::to_string(p) +
                " is not implemented (nn::Clip's attention is the fused primitive, without dropout)");
  return e;
}

nn::ClipTextConfig text_of(const json& c, const std::string& f) {
  nn::ClipTextConfig t;
  t.encoder = encoder_of(c, f, t.encoder);
  t.vocab = field<int64_t>(c, f, "vocab_size", t.vocab);
  t.positions = field<int64_t>(c, f, "max_position_embeddings", t.positions);
  t.eos_id = field<int32_t>(c, f, "eos_token_id", t.eos_id);
  return t;
}

nn::ClipVisionConfig vision_of(const json& c, const std::string& f) {
  nn::ClipVisionConfig v;
  v.encoder = encoder_of(c, f, v.encoder);
  if (c.contains("image_size") && c["image_size"].is_array())
    fail(f,
         "config.json: image_size " + c["image_size"].dump() + " (nn::Clip takes square images: one size)");
  v.image_size = field<int64_t>(c, f, "image_size", v.image_size);
  v.patch_size = field<int64_t>(c, f, "patch_size", v.patch_size);
  v.channels = field<int64_t>(c, f, "num_channels", v.channels);
  return v;
}

// A sub-config (text_config, vision_config) of CLIPModel's: an object or absent (defaults).
json sub_config(const json& c, const std::string& f, const char* key) {
  if (!c.contains(key) || c[key].is_null()) return json::object();
  if (!c[key].is_object()) fail(f, std::string("config.json: \"") + key + "\" is not an object");
  return c[key];
}

}  // namespace

void load_clip(Model& m, const json& c) {
  const std::string& f = m.folder;
  const std::string& a = m.architecture;
  nn::ClipConfig cc;
  cc.has_text = a == "CLIPModel" || a.starts_with("CLIPText");
  cc.has_vision = a == "CLIPModel" || a.starts_with("CLIPVision");
  cc.projections = a == "CLIPModel" || a.ends_with("WithProjection");
  cc.projection_dim = field<int64_t>(c, f, "projection_dim", cc.projection_dim);
  cc.logit_scale_init = field<double>(c, f, "logit_scale_init_value", cc.logit_scale_init);
  if (a == "CLIPModel") {
    cc.text = text_of(sub_config(c, f, "text_config"), f);
    cc.vision = vision_of(sub_config(c, f, "vision_config"), f);
  } else if (cc.has_text) {
    cc.text = text_of(c, f);
  } else {
    cc.vision = vision_of(c, f);
  }
  m.context = cc.has_text ? cc.text.positions : cc.vision.tokens();
  // An eos_token_id of 2 is no token's id (old configs, see ClipTextConfig::eos_id).
  if (cc.has_text && cc.text.eos_id != 2) m.eos_ids = {cc.text.eos_id};
  m.config = cc;
  m.module = std::make_unique<nn::Clip>(cc);
  map_weights(
      m, read_weights(f), [](const std::string& p) { return Source{p}; },
      [](const std::string& name) { return name.ends_with("embeddings.position_ids"); });
}

std::string clip_architecture(const nn::ClipConfig& c) {
  if (c.has_text && c.has_vision) {
    if (!c.projections)
      throw CheckpointError(
          "[pretrained::from_config] a CLIP of both towers without projections: CLIPModel has them "
          "(ClipConfig::projections)");
    return "CLIPModel";
  }
  const std::string tower = c.has_text ? "CLIPTextModel" : "CLIPVisionModel";
  return c.projections ? tower + "WithProjection" : tower;
}

namespace {
const char* act_name(nn::ClipActivation a) {
  switch (a) {
    case nn::ClipActivation::kQuickGelu: return "quick_gelu";
    case nn::ClipActivation::kGelu: return "gelu";
    case nn::ClipActivation::kGeluTanh: return "gelu_new";
  }
  return "quick_gelu";
}

json encoder_json(const nn::ClipEncoderConfig& e) {
  return {{"hidden_size", e.d_model},       {"num_hidden_layers", e.layers},
          {"num_attention_heads", e.heads}, {"intermediate_size", e.mlp_hidden},
          {"layer_norm_eps", e.ln_eps},     {"hidden_act", act_name(e.act)},
          {"attention_dropout", 0.0}};
}

json text_json(const nn::ClipConfig& c) {
  json j = encoder_json(c.text.encoder);
  j["model_type"] = "clip_text_model";
  j["vocab_size"] = c.text.vocab;
  j["max_position_embeddings"] = c.text.positions;
  j["eos_token_id"] = c.text.eos_id;
  j["projection_dim"] = c.projection_dim;
  return j;
}

json vision_json(const nn::ClipConfig& c) {
  json j = encoder_json(c.vision.encoder);
  j["model_type"] = "clip_vision_model";
  j["image_size"] = c.vision.image_size;
  j["patch_size"] = c.vision.patch_size;
  j["num_channels"] = c.vision.channels;
  j["projection_dim"] = c.projection_dim;
  return j;
}
}  // namespace

// ClipConfig's fields: what load_clip reads.
std::string config_json_of(const nn::ClipConfig& c) {
  const std::string architecture = clip_architecture(c);
  json j;
  if (c.has_text && c.has_vision) {
    j = {{"model_type", "clip"},
         {"text_config", text_json(c)},
         {"vision_config", vision_json(c)},
         {"projection_dim", c.projection_dim},
         {"logit_scale_init_value", c.logit_scale_init}};
  } else {
    j = c.has_text ? text_json(c) : vision_json(c);
  }
  j["architectures"] = {architecture};
  j["torch_dtype"] = "float32";
  return j.dump(2);
}

}  // namespace tg::pretrained::detail
