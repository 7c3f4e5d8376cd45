// BERT-family encoders → nn::Bert:
//   BertModel, BertForMaskedLM         bert.* (BertModel files often without the prefix); the
//                                      masked-LM head cls.predictions.{transform.dense,
//                                      transform.LayerNorm, bias}, its decoder tied to the word
//                                      embeddings; the pooler when the file has pooler.dense
//   RobertaModel, RobertaForMaskedLM   roberta.*, positions counted from pad_token_id + 1; the
//                                      head lm_head.{dense, layer_norm, bias} (the erf GELU)
//   BertForSequenceClassification,     classifier (BERT's on the pooler; RoBERTa's
//   RobertaForSequenceClassification   classifier.{dense, out_proj} on the first token); the
//                                      number of labels is id2label's (else num_labels, else 2)
//   Bert/RobertaForTokenClassification classifier on every token (labels as above)
//   Bert/RobertaForQuestionAnswering   qa_outputs: start and end logits per token
// The library's parameter names are BertModel's (nn::Bert). Older files' LayerNorm.gamma /
// LayerNorm.beta are read as weight / bias, as transformers renames them; what transformers
// skips is skipped: the position_ids buffer older files carry (int64: read_weights leaves it
// out; converted to a type the library reads: skipped here), a tied
// decoder's copy, and the next-sentence head cls.seq_relationship that pretraining checkpoints
// (bert-base-uncased) keep. A file with the decoder's bias only gives it as the head's bias.
//   XLMRoberta*                        RoBERTa's five under XLM-RoBERTa's names (the same layout)
//   DistilBert* (the same five)        distilbert.*, renamed onto BERT's (distil_source): no token
//                                      types, q_lin / k_lin / v_lin / out_lin, sa_layer_norm,
//                                      ffn.lin1 / lin2, output_layer_norm; the head vocab_transform,
//                                      vocab_layer_norm, vocab_projector (tied); the sequence
//                                      classifier pre_classifier + classifier
// Relative position embeddings, decoders (is_decoder, cross-attention) and an untied head are
// refused.
#include <string>
#include <utility>

#include "io/pretrained_internal.h"
#include "tensorgrad/bert.h"
#include "tensorgrad/errors.h"

namespace tg::pretrained::detail {
namespace {

// transformers' names for the old TensorFlow-converted LayerNorm parameters.
void rename_gamma_beta(Weights& w) {
  std::map<std::string, HostTensor> renamed;
  for (auto& [name, t] : w.tensors) {
    std::string to = name;
    if (name.ends_with("LayerNorm.gamma")) to = name.substr(0, name.size() - 5) + "weight";
    if (name.ends_with("LayerNorm.beta")) to = name.substr(0, name.size() - 4) + "bias";
    if (to != name) w.file_of[to] = w.file_of[name];
    renamed.emplace(to, std::move(t));
  }
  w.tensors = std::move(renamed);
}

}  // namespace

Source bert_source(bool roberta, const std::string& prefix, const std::string& p) {
  if (p.rfind("classifier", 0) == 0 || p.rfind("qa_outputs", 0) == 0) return {p};
  if (p.rfind("cls.", 0) != 0) return {prefix + p};
  if (!roberta) return {p};
  std::string rest = p.substr(16);  // after "cls.predictions."
  if (rest.rfind("transform.", 0) == 0) rest = rest.substr(10);
  if (rest.rfind("LayerNorm.", 0) == 0) rest = "layer_norm." + rest.substr(10);
  return {"lm_head." + rest};
}

Source distil_source(const std::string& prefix, const std::string& p) {
  static const std::pair<const char*, const char*> kLayer[] = {
      {"attention.self.query.", "attention.q_lin."},
      {"attention.self.key.", "attention.k_lin."},
      {"attention.self.value.", "attention.v_lin."},
      {"attention.output.dense.", "attention.out_lin."},
      {"attention.output.LayerNorm.", "sa_layer_norm."},
      {"intermediate.dense.", "ffn.lin1."},
      {"output.dense.", "ffn.lin2."},
      {"output.LayerNorm.", "output_layer_norm."}};
  static const std::pair<const char*, const char*> kHead[] = {
      {"cls.predictions.transform.dense.", "vocab_transform."},
      {"cls.predictions.transform.LayerNorm.", "vocab_layer_norm."},
      {"cls.predictions.bias", "vocab_projector.bias"}};
  for (const auto& [ours, theirs] : kHead)
    if (p.starts_with(ours)) return {theirs + p.substr(std::string(ours).size())};
  if (p.starts_with("encoder.layer.")) {
    const size_t dot = p.find('.', 14);  // after the layer's number
    const std::string rest = p.substr(dot + 1);
    for (const auto& [ours, theirs] : kLayer)
      if (rest.starts_with(ours))
        return {prefix + "transformer.layer." + p.substr(14, dot - 14) + "." + theirs +
                rest.substr(std::string(ours).size())};
  }
  if (p.starts_with("embeddings.")) return {prefix + p};
  return {p};  // pre_classifier, classifier, qa_outputs
}

// The head the architecture names into b (…ForMaskedLM, …ForTokenClassification,
// …ForSequenceClassification, …ForQuestionAnswering; none for …Model), with a classifier's
// labels: id2label's count, else num_labels, else 2.
void read_head(const Model& m, const json& c, nn::BertConfig& b) {
  const std::string& a = m.architecture;
  b.mlm_head = a.ends_with("ForMaskedLM");
  b.per_token = a.ends_with("ForTokenClassification");
  b.qa_head = a.ends_with("ForQuestionAnswering");
  if (!b.per_token && !a.ends_with("ForSequenceClassification")) return;
  b.labels = field<int64_t>(c, m.folder, "num_labels", 2);
  if (c.contains("id2label") && c["id2label"].is_object())
    b.labels = static_cast<int64_t>(c["id2label"].size());
  if (b.labels <= 0) fail(m.folder, "config.json: a classifier with " + std::to_string(b.labels) + " labels");
}

void load_distilbert(Model& m, const json& c) {
  const std::string& f = m.folder;
  nn::BertConfig b;
  read_head(m, c, b);
  const bool mlm = b.mlm_head, per_token = b.per_token;
  b.distil = true;
  b.vocab = required(c, f, "vocab_size");
  b.d_model = required(c, f, "dim");
  b.layers = required(c, f, "n_layers");
  b.heads = required(c, f, "n_heads");
  b.mlp_hidden = required(c, f, "hidden_dim");
  b.max_positions = field<int64_t>(c, f, "max_position_embeddings", 512);
  b.type_vocab = 0;
  b.pad_id = static_cast<int32_t>(field<int64_t>(c, f, "pad_token_id", 0));
  b.hidden_dropout = field<double>(c, f, "dropout", 0.1);
  b.attention_dropout = field<double>(c, f, "attention_dropout", 0.1);
  b.classifier_dropout = per_token ? b.hidden_dropout : field<double>(c, f, "seq_classif_dropout", 0.2);
  b.qa_dropout = field<double>(c, f, "qa_dropout", 0.1);
  const std::string act = field<std::string>(c, f, "activation", "gelu");
  if (act != "gelu") fail(f, "config.json: activation \"" + act + "\" is not implemented by nn::Bert (gelu)");
  if (mlm && !field<bool>(c, f, "tie_weights_", true))
    fail(f, "config.json: tie_weights_ false (an untied masked-LM projector) is not implemented");

  Weights file = read_weights(f);
  const std::string prefix =
      file.tensors.count("distilbert.embeddings.word_embeddings.weight") ? "distilbert." : "";
  m.context = b.context();
  m.config = b;
  m.module = std::make_unique<nn::Bert>(b);
  if (mlm &&
      !tied_copy_ok(file.tensors, "vocab_projector.weight", prefix + "embeddings.word_embeddings.weight"))
    fail(f, "vocab_projector.weight differs from " + prefix +
                "embeddings.word_embeddings.weight (the masked-LM projector is tied to it)");
  map_weights(
      m, std::move(file), [&](const std::string& p) { return distil_source(prefix, p); },
      [&](const std::string& n) {
        return n == "vocab_projector.weight" || n.ends_with("embeddings.position_ids");
      });
}

void load_bert_family(Model& m, const json& c) {
  if (m.architecture.starts_with("DistilBert")) return load_distilbert(m, c);
  const std::string& f = m.folder;
  const bool roberta = m.architecture.rfind("Roberta", 0) == 0 || m.architecture.rfind("XLMRoberta", 0) == 0;
  nn::BertConfig b;
  read_head(m, c, b);
  const bool mlm = b.mlm_head, classifier = b.labels > 0 && !b.per_token;
  b.vocab = required(c, f, "vocab_size");
  b.d_model = required(c, f, "hidden_size");
  b.layers = required(c, f, "num_hidden_layers");
  b.heads = required(c, f, "num_attention_heads");
  b.mlp_hidden = required(c, f, "intermediate_size");
  b.max_positions = field<int64_t>(c, f, "max_position_embeddings", 512);
  b.type_vocab = field<int64_t>(c, f, "type_vocab_size", 2);
  b.ln_eps = field<double>(c, f, "layer_norm_eps", 1e-12);
  b.roberta_positions = roberta;
  b.pad_id = static_cast<int32_t>(field<int64_t>(c, f, "pad_token_id", roberta ? 1 : 0));
  // transformers' defaults (0.1) when missing; a null classifier_dropout is hidden_dropout_prob.
  b.hidden_dropout = field<double>(c, f, "hidden_dropout_prob", 0.1);
  b.attention_dropout = field<double>(c, f, "attention_probs_dropout_prob", 0.1);
  b.classifier_dropout = field<double>(c, f, "classifier_dropout", -1.0);
  const std::string act = field<std::string>(c, f, "hidden_act", "gelu");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    b.gelu = GeluApprox::kTanh;
  } else if (act != "gelu") {
    fail(f, "config.json: hidden_act \"" + act +
                "\" is not implemented by nn::Bert (gelu, gelu_new, gelu_pytorch_tanh)");
  }
  const std::string positions = field<std::string>(c, f, "position_embedding_type", "absolute");
  if (positions != "absolute")
    fail(f, "config.json: position_embedding_type \"" + positions + "\" is not implemented (absolute only)");
  if (field<bool>(c, f, "is_decoder", false) || field<bool>(c, f, "add_cross_attention", false))
    fail(f,
         "config.json: is_decoder / add_cross_attention (a BERT decoder) is not implemented; nn::Bert is an "
         "encoder");
  if (mlm && !field<bool>(c, f, "tie_word_embeddings", true))
    fail(f, "config.json: tie_word_embeddings false (an untied masked-LM decoder) is not implemented");

  Weights file = read_weights(f);
  rename_gamma_beta(file);
  const std::string base = roberta ? "roberta." : "bert.";
  // BertModel / RobertaModel files are usually saved without the prefix; heads' files with it.
  const std::string prefix = file.tensors.count(base + "embeddings.word_embeddings.weight") ? base : "";
  b.pooler = file.tensors.count(prefix + "pooler.dense.weight") > 0;
  if (classifier && !roberta && !b.pooler)
    fail(f, prefix + "pooler.dense.weight is missing: BERT's classifier reads the pooler's output");
  m.context = b.context();
  m.config = b;
  m.module = std::make_unique<nn::Bert>(b);

  const std::string head = roberta ? "lm_head." : "cls.predictions.";
  if (mlm &&
      !tied_copy_ok(file.tensors, head + "decoder.weight", prefix + "embeddings.word_embeddings.weight"))
    fail(f, head + "decoder.weight differs from " + prefix +
                "embeddings.word_embeddings.weight (the masked-LM decoder is tied to it)");
  const auto source_of = [&](const std::string& p) { return bert_source(roberta, prefix, p); };
  if (mlm && !file.tensors.count(head + "bias") && file.tensors.count(head + "decoder.bias")) {
    file.tensors.emplace(head + "bias", file.tensors.at(head + "decoder.bias"));
    file.file_of[head + "bias"] = file.file_of[head + "decoder.bias"];
  }
  map_weights(m, std::move(file), source_of, [&](const std::string& n) {
    return n.ends_with("embeddings.position_ids") || n == head + "decoder.weight" ||
           n == head + "decoder.bias" || n.starts_with("cls.seq_relationship.");
  });
}

}  // namespace tg::pretrained::detail
