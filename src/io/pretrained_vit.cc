// Vision Transformers → nn::ViT:
//   ViTModel                     the encoder's names as they are (files usually without a
//                                prefix); the pooler when the file has pooler.dense
//   ViTForImageClassification    vit.* and classifier (on the [CLS] token); the number of labels
//                                is id2label's (else num_labels, else 2)
//   DeiTModel, DeiTForImageClassification, DeiTForImageClassificationWithTeacher
//                                the same under deit.*, with the distillation token; the
//                                teacher class's cls_classifier and distillation_classifier
// Refused: images that are not square (image_size a pair), attention dropout (the fused
// attention has none), a pooler of another activation or width than tanh over hidden_size.
#include <string>
#include <utility>

#include "io/pretrained_internal.h"
#include "tensorgrad/vit.h"

namespace tg::pretrained::detail {

std::string vit_base(const std::string& architecture) {
  return architecture.starts_with("DeiT") ? "deit." : "vit.";
}

Source vit_source(const std::string& prefix, const std::string& p) {
  const bool head = p.starts_with("classifier.") || p.starts_with("cls_classifier.") ||
                    p.starts_with("distillation_classifier.");
  return {head ? p : prefix + p};
}

void load_vit(Model& m, const json& c) {
  const std::string& f = m.folder;
  nn::ViTConfig v;
  v.image_size = required(c, f, "image_size");
  v.patch_size = required(c, f, "patch_size");
  v.channels = field<int64_t>(c, f, "num_channels", 3);
  v.d_model = required(c, f, "hidden_size");
  v.layers = required(c, f, "num_hidden_layers");
  v.heads = required(c, f, "num_attention_heads");
  v.mlp_hidden = required(c, f, "intermediate_size");
  v.ln_eps = field<double>(c, f, "layer_norm_eps", 1e-12);
  v.qkv_bias = field<bool>(c, f, "qkv_bias", true);
  v.hidden_dropout = field<double>(c, f, "hidden_dropout_prob", 0.0);
  if (const double p = field<double>(c, f, "attention_probs_dropout_prob", 0.0); p != 0)
    fail(f, "config.json: attention_probs_dropout_prob " + std::to_string(p) +
                " is not implemented (nn::ViT's attention is the fused primitive, without dropout)");
  const std::string act = field<std::string>(c, f, "hidden_act", "gelu");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    v.gelu = GeluApprox::kTanh;
  } else if (act != "gelu") {
    fail(f, "config.json: hidden_act \"" + act +
                "\" is not implemented by nn::ViT (gelu, gelu_new, gelu_pytorch_tanh)");
  }
  const bool deit = m.architecture.starts_with("DeiT");
  if (m.architecture.find("ForImageClassification") != std::string::npos) {
    v.labels = field<int64_t>(c, f, "num_labels", 2);
    if (c.contains("id2label") && c["id2label"].is_object())
      v.labels = static_cast<int64_t>(c["id2label"].size());
    if (v.labels <= 0) fail(f, "config.json: a classifier with " + std::to_string(v.labels) + " labels");
  }

  Weights file = read_weights(f);
  const std::string base = vit_base(m.architecture);
  const std::string prefix = file.tensors.count(base + "embeddings.cls_token") ? base : "";
  v.distillation_token = deit;
  v.distillation_head = m.architecture == "DeiTForImageClassificationWithTeacher";
  v.pooler = file.tensors.count(prefix + "pooler.dense.weight") > 0;
  if (v.pooler) {
    const std::string pooler_act = field<std::string>(c, f, "pooler_act", "tanh");
    const int64_t width = field<int64_t>(c, f, "pooler_output_size", v.d_model);
    if (pooler_act != "tanh" || width != v.d_model)
      fail(f, "config.json: a pooler of " + pooler_act + " over " + std::to_string(width) +
                  " outputs is not implemented (tanh over hidden_size)");
  }
  m.context = v.tokens();
  m.config = v;
  m.module = std::make_unique<nn::ViT>(v);
  map_weights(
      m, std::move(file), [&](const std::string& p) { return vit_source(prefix, p); },
      [](const std::string&) { return false; });
}

std::string vit_architecture(const nn::ViTConfig& c) {
  if (c.distillation_token && !c.distillation_head && c.labels > 0) return "DeiTForImageClassification";
  if (c.distillation_head) return "DeiTForImageClassificationWithTeacher";
  if (c.distillation_token) return "DeiTModel";
  return c.labels > 0 ? "ViTForImageClassification" : "ViTModel";
}

// ViTConfig's fields: what load_vit reads.
std::string config_json_of(const nn::ViTConfig& c) {
  json j{{"architectures", {vit_architecture(c)}},
         {"model_type", c.distillation_token ? "deit" : "vit"},
         {"image_size", c.image_size},
         {"patch_size", c.patch_size},
         {"num_channels", c.channels},
         {"hidden_size", c.d_model},
         {"num_hidden_layers", c.layers},
         {"num_attention_heads", c.heads},
         {"intermediate_size", c.mlp_hidden},
         {"layer_norm_eps", c.ln_eps},
         {"hidden_act", c.gelu == GeluApprox::kErf ? "gelu" : "gelu_new"},
         {"qkv_bias", c.qkv_bias},
         {"hidden_dropout_prob", c.hidden_dropout},
         {"attention_probs_dropout_prob", 0.0},
         {"pooler_act", "tanh"},
         {"pooler_output_size", c.d_model},
         {"encoder_stride", c.patch_size},
         {"torch_dtype", "float32"}};
  if (c.labels > 0) {
    if (c.pooler)
      throw CheckpointError(
          "[pretrained::from_config] " + vit_architecture(c) +
          " cannot express a pooler (its encoder has none); save a model with it through the "
          "Model load() gave for its folder");
    add_labels(j, c.labels);
  }
  return j.dump(2);
}

}  // namespace tg::pretrained::detail
