// T5 → nn::T5, names as in the file:
//   T5ForConditionalGeneration   the encoder, the decoder and the head (lm_head, or shared when
//                                tie_word_embeddings)
//   T5EncoderModel               the encoder alone
// The stacks' embed_tokens copies that untied files hold (transformers 4 tied them to shared, 5
// writes them) must equal shared, as must a tied file's lm_head. Refused: another feed-forward
// activation, is_decoder models.
#include <string>
#include <utility>

#include "io/pretrained_internal.h"
#include "tensorgrad/t5.h"

namespace tg::pretrained::detail {

void load_t5(Model& m, const json& c) {
  const std::string& f = m.folder;
  nn::T5Config t;
  t.vocab = required(c, f, "vocab_size");
  t.d_model = field<int64_t>(c, f, "d_model", t.d_model);
  t.d_kv = field<int64_t>(c, f, "d_kv", t.d_kv);
  t.d_ff = field<int64_t>(c, f, "d_ff", t.d_ff);
  t.heads = field<int64_t>(c, f, "num_heads", t.heads);
  t.layers = field<int64_t>(c, f, "num_layers", t.layers);
  t.decoder_layers = field<int64_t>(c, f, "num_decoder_layers", t.layers);
  t.buckets = field<int64_t>(c, f, "relative_attention_num_buckets", t.buckets);
  t.max_distance = field<int64_t>(c, f, "relative_attention_max_distance", t.max_distance);
  t.eps = field<double>(c, f, "layer_norm_epsilon", t.eps);
  t.dropout = field<double>(c, f, "dropout_rate", 0.1);
  t.start_id = field<int32_t>(c, f, "decoder_start_token_id", 0);
  t.pad_id = field<int32_t>(c, f, "pad_token_id", 0);
  const std::vector<int32_t> eos = eos_of(c);
  t.eos_id = eos.empty() ? 1 : eos.front();
  if (field<bool>(c, f, "is_decoder", false))
    fail(f, "config.json: is_decoder true (a T5 decoder alone) is not implemented");
  // feed_forward_proj: "relu", "gated-gelu" (…), its activation by name; transformers reads
  // "gated-gelu" as the tanh GELU, and a dense_act_fn in the file (transformers 4 lets it) as the
  // activation.
  const std::string proj = field<std::string>(c, f, "feed_forward_proj", "relu");
  t.gated = proj.starts_with("gated-");
  const std::string named = t.gated ? proj.substr(6) : proj;
  const std::string act = field<std::string>(c, f, "dense_act_fn", proj == "gated-gelu" ? "gelu_new" : named);
  if (act == "relu") {
    t.act = nn::T5Activation::kRelu;
  } else if (act == "gelu") {
    t.act = nn::T5Activation::kGelu;
  } else if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    t.act = nn::T5Activation::kGeluTanh;
  } else if (act == "silu" || act == "swish") {
    t.act = nn::T5Activation::kSilu;
  } else {
    fail(f, "config.json: the feed-forward activation \"" + act + "\" (feed_forward_proj \"" + proj +
                "\") is not implemented by nn::T5 (relu, gelu, gelu_new, gelu_pytorch_tanh, silu, swish)");
  }
  t.tied = field<bool>(c, f, "tie_word_embeddings", true);
  t.scale_decoder_outputs = field<bool>(c, f, "scale_decoder_outputs", t.tied);
  t.decoder = m.architecture == "T5ForConditionalGeneration";
  m.context = 0;  // relative positions: no limit of the model's own
  m.eos_ids = eos.empty() ? std::vector<int32_t>{t.eos_id} : eos;
  m.config = t;
  m.module = std::make_unique<nn::T5>(t);

  Weights file = read_weights(f);
  for (const char* copy : {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"}) {
    if (std::string(copy) == "lm_head.weight" && !(t.tied && t.decoder)) continue;
    if (!tied_copy_ok(file.tensors, copy, "shared.weight"))
      fail(f, std::string(copy) + " differs from shared.weight (nn::T5 embeds both stacks with shared" +
                  (t.tied ? " and reads its head from it)" : ")"));
  }
  map_weights(
      m, std::move(file), [](const std::string& p) { return Source{p}; },
      [&t](const std::string& n) {
        return n == "encoder.embed_tokens.weight" || n == "decoder.embed_tokens.weight" ||
               (t.tied && n == "lm_head.weight");
      });
}

// T5Config's fields: what load_t5 reads.
std::string config_json_of(const nn::T5Config& t) {
  std::string act;
  switch (t.act) {
    case nn::T5Activation::kRelu: act = "relu"; break;
    case nn::T5Activation::kGelu: act = "gelu"; break;
    case nn::T5Activation::kGeluTanh: act = "gelu_new"; break;
    case nn::T5Activation::kSilu: act = "silu"; break;
  }
  const json j{{"architectures", {t.decoder ? "T5ForConditionalGeneration" : "T5EncoderModel"}},
               {"model_type", "t5"},
               {"vocab_size", t.vocab},
               {"d_model", t.d_model},
               {"d_kv", t.d_kv},
               {"d_ff", t.d_ff},
               {"num_heads", t.heads},
               {"num_layers", t.layers},
               {"num_decoder_layers", t.decoder_layers},
               {"relative_attention_num_buckets", t.buckets},
               {"relative_attention_max_distance", t.max_distance},
               {"layer_norm_epsilon", t.eps},
               {"feed_forward_proj",
                t.gated ? (t.act == nn::T5Activation::kGeluTanh ? "gated-gelu" : "gated-" + act) : act},
               {"dense_act_fn", act},
               {"tie_word_embeddings", t.tied},
               {"scale_decoder_outputs", t.scale_decoder_outputs},
               {"dropout_rate", t.dropout},
               {"decoder_start_token_id", t.start_id},
               {"pad_token_id", t.pad_id},
               {"eos_token_id", t.eos_id},
               {"is_encoder_decoder", t.decoder},
               {"torch_dtype", "float32"}};
  return j.dump(2);
}

// The file's tensors of an nn::T5's parameters: the names are the module's; an untied model's
// files also hold each stack's embed_tokens, a copy of shared (as transformers 5 writes them).
std::map<std::string, HostTensor> t5_file_tensors(const Model& m, std::map<std::string, HostTensor> w) {
  const nn::T5Config& t = std::get<nn::T5Config>(m.config);
  if (!t.tied && w.count("shared.weight")) {
    w["encoder.embed_tokens.weight"] = w.at("shared.weight");
    if (t.decoder) w["decoder.embed_tokens.weight"] = w.at("shared.weight");
  }
  return w;
}

}  // namespace tg::pretrained::detail
