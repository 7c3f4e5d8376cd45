// BERT-family encoders (BERT, RoBERTa, XLM-RoBERTa, DistilBERT, and the sentence-embedding
// models built on them: all-MiniLM, BGE, E5, …) with Hugging Face's parameter names and layouts
// (DistilBERT's files are renamed onto BERT's as they load), so
// tg::pretrained::load maps a BertModel, BertForMaskedLM, BertForSequenceClassification,
// BertForTokenClassification or BertForQuestionAnswering folder (and RoBERTa's five) onto it
// name by name:
//
//   embeddings.{word_embeddings, position_embeddings, token_type_embeddings, LayerNorm}
//   encoder.layer.<i>.attention.self.{query, key, value}, attention.output.{dense, LayerNorm},
//   encoder.layer.<i>.intermediate.dense, output.{dense, LayerNorm}
//   pooler.dense                                    (BertConfig::pooler)
//   cls.predictions.{transform.dense, transform.LayerNorm, bias}   (BertConfig::mlm_head; the
//                                                    decoder is tied to word_embeddings)
//   classifier                                      (BertConfig::labels: BERT's Linear on the
//                                                    pooler's output; RoBERTa's
//                                                    classifier.{dense, out_proj}; with
//                                                    per_token a Linear on every token)
//   qa_outputs                                      (BertConfig::qa_head)
//   pre_classifier, classifier                      (DistilBERT's sequence classifier)
//
// Post-norm layers: h = LayerNorm(x + attn(x)), then LayerNorm(h + W2·gelu(W1·h)). Attention is
// bidirectional; an attention mask leaves padding keys out, as transformers' does (padding
// queries still get outputs, which nothing should read). Training programs apply transformers'
// dropouts where the config asks for them (BertConfig::hidden_dropout and the two after it).
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "tensorgrad/nn.h"

namespace tg::nn {

/// The sizes and variants of a BERT-family encoder. Named after config.json's fields
/// (vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
/// max_position_embeddings, type_vocab_size, layer_norm_eps, hidden_act). type_vocab 0: no
/// token-type embeddings (DistilBERT).
struct BertConfig {
  int64_t vocab = 30522, d_model = 768, layers = 12, heads = 12, mlp_hidden = 3072;
  int64_t max_positions = 512, type_vocab = 2;
  double ln_eps = 1e-12;
  /// hidden_act: "gelu" is the erf GELU, "gelu_new" / "gelu_pytorch_tanh" the tanh one.
  GeluApprox gelu = GeluApprox::kErf;
  /// RoBERTa: a token's position is pad_id + 1 + the number of tokens that are not pad_id
  /// before it (padding itself sits at pad_id), read from the ids; BERT (false): 0, 1, …, T − 1.
  bool roberta_positions = false;
  int32_t pad_id = 0;
  /// pooler.dense: pooled() is tanh(dense(the first token's hidden state)) (BertModel's).
  bool pooler = false;
  /// The masked-LM head: mlm_logits(). RoBERTa's head applies the erf GELU whatever hidden_act
  /// says (roberta_positions selects that too).
  bool mlm_head = false;
  /// A sequence classifier with this many outputs (*ForSequenceClassification's num_labels):
  /// classify(). BERT's reads the pooler's output (so it needs `pooler`), RoBERTa's the first
  /// token's hidden state through classifier.dense and tanh. 0: none.
  int64_t labels = 0;
  /// The classifier reads every token's hidden state instead (*ForTokenClassification: a
  /// Linear named classifier for BERT and RoBERTa alike); classify() gives [B, T, labels].
  bool per_token = false;
  /// qa_outputs (*ForQuestionAnswering): answer_span() gives every token's start and end logits.
  bool qa_head = false;
  /// DistilBERT: no dropout after the attention's projection, and a sequence classifier that
  /// reads relu(pre_classifier(first token)) (no pooler). Its files have no token types
  /// (type_vocab 0) and their own names (pretrained::load maps them).
  bool distil = false;
  /// Dropout probabilities, as transformers applies them in training (tg::dropout: training
  /// programs only; inference programs compute without them). hidden_dropout
  /// (hidden_dropout_prob): after the embeddings' LayerNorm and after each layer's two dense
  /// projections, before their residual LayerNorms. attention_dropout
  /// (attention_probs_dropout_prob): on the attention weights; a training program then computes
  /// softmax(q·kᵀ/√d)·v in steps rather than by the fused attention op. classifier_dropout
  /// (config.json's classifier_dropout; negative, as its null: hidden_dropout): before
  /// classify()'s projections (RoBERTa's: before both). pretrained::load reads all three; a
  /// config built in code starts without dropout.
  double hidden_dropout = 0.0, attention_dropout = 0.0, classifier_dropout = -1.0;
  /// Before answer_span()'s projection (DistilBERT's qa_dropout; BERT has none).
  double qa_dropout = 0.0;

  /// The longest sequence: max_positions, less the pad_id + 1 positions RoBERTa skips.
  int64_t context() const { return roberta_positions ? max_positions - pad_id - 1 : max_positions; }
  /// The classifier's dropout probability (classifier_dropout, or hidden_dropout when negative).
  double classifier_p() const { return classifier_dropout < 0 ? hidden_dropout : classifier_dropout; }
};

/// One encoder layer (encoder.layer.<i>).
class BertLayer : public Module {
 public:
  BertLayer(Module& parent, std::string name, const BertConfig& c);
  /// x [B, T, d]; key_mask: bool [B, T] (true: a token), or none.
  Tensor operator()(const Tensor& x, const std::optional<Tensor>& key_mask, Loc loc) const;

  Module attention, self, attention_output, intermediate, output;
  Linear query, key, value, attention_dense;
  LayerNorm attention_norm;
  Linear intermediate_dense, output_dense;
  LayerNorm output_norm;

 private:
  BertConfig config_;  // the sizes, activation and dropouts the layer reads
};

class Bert : public Module {
 public:
  explicit Bert(BertConfig config);
  Bert(Module& parent, std::string name, BertConfig config);

  /// The last layer's hidden states [B, T, d_model] for ids [B, T] (i32, T ≤ config.context()).
  /// mask [B, T] (any numeric or bool type: nonzero marks a token, zero padding; transformers'
  /// attention_mask) leaves padding out of every token's attention (the fused attention's key
  /// mask: a row of padding only gets zeros, where transformers spreads its weights evenly, as
  /// a training program with attention dropout does, which computes the attention in steps);
  /// without one every key is seen. types [B, T] i32 (token_type_ids, < type_vocab) default to 0.
  Tensor hidden(const Tensor& ids, const std::optional<Tensor>& mask = std::nullopt,
                const std::optional<Tensor>& types = std::nullopt, Loc loc = Loc::current()) const;
  /// BertModel's pooler_output [B, d_model] from hidden states (needs config.pooler).
  Tensor pooled(const Tensor& hidden, Loc loc = Loc::current()) const;
  /// The masked-LM logits [B, T, vocab] from hidden states (needs config.mlm_head).
  Tensor mlm_logits(const Tensor& hidden, Loc loc = Loc::current()) const;
  /// The classifier's logits from hidden states (needs config.labels): [B, labels], or
  /// [B, T, labels] with config.per_token. DistilBERT's reads relu(pre_classifier(first token)).
  Tensor classify(const Tensor& hidden, Loc loc = Loc::current()) const;
  /// Question answering's logits [B, T, 2] from hidden states: [..., 0] where the answer starts,
  /// [..., 1] where it ends (needs config.qa_head).
  Tensor answer_span(const Tensor& hidden, Loc loc = Loc::current()) const;

  const BertConfig config;

 private:
  void build();
  std::unique_ptr<Module> embeddings_, encoder_, pooler_, cls_, predictions_, transform_, classifier_module_;
  std::unique_ptr<Embedding> word_, position_, token_type_;
  std::unique_ptr<LayerNorm> embedding_norm_, head_norm_;
  std::vector<std::unique_ptr<BertLayer>> layers_;
  std::unique_ptr<Linear> pooler_dense_, head_dense_, classifier_, classifier_dense_, pre_classifier_,
      qa_outputs_;
  std::optional<Param> head_bias_;
};

/// The first token's hidden state ([CLS] or <s>) of hidden [B, T, d]: [B, d] (CLS pooling).
Tensor first_token(const Tensor& hidden, Loc loc = Loc::current());
/// Sentence-transformers' mean pooling: the mean of hidden [B, T, d] over the tokens mask
/// [B, T] marks (nonzero), [B, d].
Tensor mean_pool(const Tensor& hidden, const Tensor& mask, Loc loc = Loc::current());
/// x [..., d] divided by its L2 norm over the last axis (max(‖x‖, 1e-12), as
/// torch.nn.functional.normalize): cosine similarity becomes a dot product.
Tensor l2_normalize(const Tensor& x, Loc loc = Loc::current());

}  // namespace tg::nn
