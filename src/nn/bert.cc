// nn::Bert: BERT-family encoders (see tensorgrad/bert.h).
#include "tensorgrad/bert.h"

#include <cmath>

#include "nn/heads.h"
#include "tensorgrad/errors.h"

namespace tg::nn {
namespace {

void check_ids(const char* what, const Tensor& t, const Shape& want, const Loc& loc) {
  if (t.shape() != want)
    throw ShapeError(std::string("[Bert] ") + what + " has shape " + shape_str(t.shape()) + ", expected " +
                     shape_str(want) + " (that of the ids) at " + loc.file_name() + ":" +
                     std::to_string(loc.line()));
}

}  // namespace

BertLayer::BertLayer(Module& parent, std::string name, const BertConfig& c)
    : Module(parent, std::move(name)),
      attention(*this, "attention"),
      self(attention, "self"),
      attention_output(attention, "output"),
      intermediate(*this, "intermediate"),
      output(*this, "output"),
      query(self, "query", c.d_model, c.d_model, normal_linear(true)),
      key(self, "key", c.d_model, c.d_model, normal_linear(true)),
      value(self, "value", c.d_model, c.d_model, normal_linear(true)),
      attention_dense(attention_output, "dense", c.d_model, c.d_model, normal_linear(true)),
      attention_norm(attention_output, "LayerNorm", c.d_model, c.ln_eps),
      intermediate_dense(intermediate, "dense", c.d_model, c.mlp_hidden, normal_linear(true)),
      output_dense(output, "dense", c.mlp_hidden, c.d_model, normal_linear(true)),
      output_norm(output, "LayerNorm", c.d_model, c.ln_eps),
      config_(c) {}

Tensor BertLayer::operator()(const Tensor& x, const std::optional<Tensor>& key_mask, Loc loc) const {
  const Shape& s = x.shape();
  const Tensor q = split_heads(query(x, loc), config_.heads, loc);
  const Tensor k = split_heads(key(x, loc), config_.heads, loc);
  const Tensor v = split_heads(value(x, loc), config_.heads, loc);
  Tensor a;
  if (config_.attention_dropout > 0 && is_training()) {  // dropout on the probabilities: in steps
    const double scale = 1.0 / std::sqrt(static_cast<double>(s[2] / config_.heads));
    Tensor scores = mul(matmul(q, transpose(k, -2, -1, loc), loc), scale, loc);
    if (key_mask) {
      // Scores of padding keys become the lowest finite value of their type before the softmax
      // (transformers' finfo.min): their weights are exactly 0 beside any token's, and a row
      // without a token (a padding row of a batch) gets uniform weights rather than NaN.
      const double lowest = scores.dtype() == DType::kF16    ? -65504.0
                            : scores.dtype() == DType::kBF16 ? -3.3895313892515355e38
                                                             : -3.4028234663852886e38;
      scores = where(reshape(*key_mask, {s[0], 1, 1, s[1]}, loc), scores, lowest, loc);
    }
    a = matmul(dropout(softmax(scores, -1, false, loc), config_.attention_dropout, loc), v, loc);
  } else {  // one fused primitive, padding keys left out by the mask
    a = tg::attention(q, k, v, AttentionOptions{.causal = false, .key_mask = key_mask}, loc);
  }
  a = merge_heads(a, loc);
  const Tensor projected = attention_dense(a, loc);  // DistilBERT drops nothing here
  const Tensor h = attention_norm(
      add(x, config_.distil ? projected : dropout(projected, config_.hidden_dropout, loc), loc), loc);
  const Tensor m = output_dense(gelu(intermediate_dense(h, loc), config_.gelu, loc), loc);
  return output_norm(add(h, dropout(m, config_.hidden_dropout, loc), loc), loc);
}

Bert::Bert(BertConfig c) : config(c) { build(); }
Bert::Bert(Module& parent, std::string name, BertConfig c) : Module(parent, std::move(name)), config(c) {
  build();
}

void Bert::build() {
  const BertConfig& c = config;
  if (c.vocab <= 0 || c.d_model <= 0 || c.layers <= 0 || c.heads <= 0 || c.mlp_hidden <= 0 ||
      c.type_vocab < 0)
    throw ShapeError(
        "[Bert] vocab, d_model, layers, heads and mlp_hidden must be positive, type_vocab ≥ 0 (0: no token "
        "types)");
  if (c.d_model % c.heads != 0)
    throw ShapeError("[Bert] d_model " + std::to_string(c.d_model) + " is not divisible by heads " +
                     std::to_string(c.heads));
  for (const double p : {c.hidden_dropout, c.attention_dropout, c.classifier_p(), c.qa_dropout})
    if (!(p >= 0 && p < 1))
      throw Error("[Bert] a dropout probability of " + std::to_string(p) + ": expected one in [0, 1)");
  if (c.context() <= 0)
    throw ShapeError("[Bert] max_positions " + std::to_string(c.max_positions) + " leaves no position" +
                     (c.roberta_positions ? " after the pad_id + 1 RoBERTa skips" : ""));
  embeddings_ = std::make_unique<Module>(*this, "embeddings");
  word_ =
      std::make_unique<Embedding>(*embeddings_, "word_embeddings", c.vocab, c.d_model, init::normal(0.02));
  position_ = std::make_unique<Embedding>(*embeddings_, "position_embeddings", c.max_positions, c.d_model,
                                          init::normal(0.02));
  if (c.type_vocab > 0)
    token_type_ = std::make_unique<Embedding>(*embeddings_, "token_type_embeddings", c.type_vocab, c.d_model,
                                              init::normal(0.02));
  embedding_norm_ = std::make_unique<LayerNorm>(*embeddings_, "LayerNorm", c.d_model, c.ln_eps);
  encoder_ = std::make_unique<Module>(*this, "encoder");
  for (int64_t i = 0; i < c.layers; ++i)
    layers_.push_back(std::make_unique<BertLayer>(*encoder_, "layer." + std::to_string(i), c));
  if (c.pooler) {
    pooler_ = std::make_unique<Module>(*this, "pooler");
    pooler_dense_ = std::make_unique<Linear>(*pooler_, "dense", c.d_model, c.d_model, normal_linear(true));
  }
  if (c.mlm_head) {
    cls_ = std::make_unique<Module>(*this, "cls");
    predictions_ = std::make_unique<Module>(*cls_, "predictions");
    transform_ = std::make_unique<Module>(*predictions_, "transform");
    head_dense_ = std::make_unique<Linear>(*transform_, "dense", c.d_model, c.d_model, normal_linear(true));
    head_norm_ = std::make_unique<LayerNorm>(*transform_, "LayerNorm", c.d_model, c.ln_eps);
    head_bias_.emplace(*predictions_, "bias", Shape{c.vocab}, init::zeros());
  }
  if (c.labels < 0) throw ShapeError("[Bert] labels must be ≥ 0 (0: no classifier)");
  if (c.per_token && c.labels <= 0) throw Error("[Bert] per_token needs labels > 0");
  if (c.labels > 0 && c.per_token) {
    classifier_ = std::make_unique<Linear>(*this, "classifier", c.d_model, c.labels, normal_linear(true));
  } else if (c.labels > 0 && c.distil) {
    pre_classifier_ =
        std::make_unique<Linear>(*this, "pre_classifier", c.d_model, c.d_model, normal_linear(true));
    classifier_ = std::make_unique<Linear>(*this, "classifier", c.d_model, c.labels, normal_linear(true));
  } else if (c.labels > 0 && c.roberta_positions) {
    classifier_module_ = std::make_unique<Module>(*this, "classifier");
    classifier_dense_ =
        std::make_unique<Linear>(*classifier_module_, "dense", c.d_model, c.d_model, normal_linear(true));
    classifier_ =
        std::make_unique<Linear>(*classifier_module_, "out_proj", c.d_model, c.labels, normal_linear(true));
  } else if (c.labels > 0) {
    if (!c.pooler)
      throw Error("[Bert] BERT's classifier reads the pooler's output: set BertConfig::pooler too");
    classifier_ = std::make_unique<Linear>(*this, "classifier", c.d_model, c.labels, normal_linear(true));
  }
  if (c.qa_head)
    qa_outputs_ = std::make_unique<Linear>(*this, "qa_outputs", c.d_model, 2, normal_linear(true));
}

Tensor Bert::hidden(const Tensor& ids, const std::optional<Tensor>& mask, const std::optional<Tensor>& types,
                    Loc loc) const {
  const BertConfig& c = config;
  if (ids.shape().size() != 2 || ids.dtype() != DType::kI32)
    throw ShapeError("[Bert] ids must be i32 [B, T], got " + std::string(dtype_name(ids.dtype())) + " " +
                     shape_str(ids.shape()));
  const int64_t T = ids.shape()[1];
  if (T > c.context())
    throw ShapeError("[Bert] " + std::to_string(T) + " tokens is more than the model's " +
                     std::to_string(c.context()) + " positions");
  Tensor x = (*word_)(ids, loc);
  if (c.roberta_positions) {
    // create_position_ids_from_input_ids: pad_id + (running count of tokens) on tokens, pad_id on padding.
    const Tensor token = cast(ne(ids, c.pad_id, loc), DType::kI32, loc);
    const Tensor pos = add(mul(cumsum(token, 1, false, loc), token, loc), c.pad_id, loc);
    x = add(x, (*position_)(pos, loc), loc);
  } else {
    x = add(x, slice(position_->weight.tensor(loc), 0, 0, T, 1, loc), loc);
  }
  if (types && !token_type_) {
    throw ShapeError("[Bert] token types given, but the model has none (type_vocab 0) at " +
                     std::string(loc.file_name()) + ":" + std::to_string(loc.line()));
  } else if (types) {
    check_ids("types", *types, ids.shape(), loc);
    x = add(x, (*token_type_)(*types, loc), loc);
  } else if (token_type_) {
    x = add(x, slice(token_type_->weight.tensor(loc), 0, 0, 1, 1, loc), loc);
  }
  x = dropout((*embedding_norm_)(x, loc), c.hidden_dropout, loc);
  std::optional<Tensor> key_mask;
  if (mask) {
    check_ids("mask", *mask, ids.shape(), loc);
    key_mask = ne(*mask, 0.0, loc);
  }
  for (const auto& layer : layers_) x = (*layer)(x, key_mask, loc);
  return x;
}

Tensor first_token(const Tensor& hidden, Loc loc) {
  const Shape& s = hidden.shape();
  if (s.size() != 3) throw ShapeError("[first_token] hidden [B, T, d] expected, got " + shape_str(s));
  return reshape(slice(hidden, 1, 0, 1, 1, loc), {s[0], s[2]}, loc);
}

Tensor Bert::pooled(const Tensor& hidden, Loc loc) const {
  if (!pooler_dense_) throw Error("[Bert] pooled(): this model has no pooler (BertConfig::pooler)");
  return tanh((*pooler_dense_)(first_token(hidden, loc), loc), loc);
}

Tensor Bert::mlm_logits(const Tensor& hidden, Loc loc) const {
  if (!head_dense_)
    throw Error("[Bert] mlm_logits(): this model has no masked-LM head (BertConfig::mlm_head)");
  const GeluApprox act = config.roberta_positions ? GeluApprox::kErf : config.gelu;
  const Tensor h = (*head_norm_)(gelu((*head_dense_)(hidden, loc), act, loc), loc);
  return add(matmul(h, transpose(word_->weight.tensor(loc), -2, -1, loc), loc), head_bias_->tensor(loc), loc);
}

Tensor Bert::classify(const Tensor& hidden, Loc loc) const {
  if (!classifier_) throw Error("[Bert] classify(): this model has no classifier (BertConfig::labels)");
  const double p = config.classifier_p();
  if (config.per_token) return (*classifier_)(dropout(hidden, p, loc), loc);
  if (pre_classifier_) {  // DistilBERT
    const Tensor h = relu((*pre_classifier_)(first_token(hidden, loc), loc), loc);
    return (*classifier_)(dropout(h, p, loc), loc);
  }
  if (!classifier_dense_) return (*classifier_)(dropout(pooled(hidden, loc), p, loc), loc);
  // RoBERTa: the first token (<s>) through dense and tanh.
  const Tensor h = tanh((*classifier_dense_)(dropout(first_token(hidden, loc), p, loc), loc), loc);
  return (*classifier_)(dropout(h, p, loc), loc);
}

Tensor Bert::answer_span(const Tensor& hidden, Loc loc) const {
  if (!qa_outputs_) throw Error("[Bert] answer_span(): this model has no qa_outputs (BertConfig::qa_head)");
  return (*qa_outputs_)(dropout(hidden, config.qa_dropout, loc), loc);
}

Tensor mean_pool(const Tensor& hidden, const Tensor& mask, Loc loc) {
  const Shape& s = hidden.shape();
  if (s.size() != 3 || mask.shape() != Shape{s[0], s[1]})
    throw ShapeError("[mean_pool] hidden [B, T, d] and mask [B, T] expected, got " + shape_str(s) + " and " +
                     shape_str(mask.shape()));
  const Tensor w = cast(ne(mask, 0.0, loc), DType::kF32, loc);  // [B, T]
  const Tensor total = sum(mul(hidden, unsqueeze(w, 2, loc), loc), {1}, false, loc);
  return div(total, maximum(sum(w, {1}, true, loc), 1e-9, loc), loc);
}

Tensor l2_normalize(const Tensor& x, Loc loc) {
  const Tensor norm = sqrt(sum(mul(x, x, loc), {-1}, true, loc), loc);
  return div(x, maximum(norm, 1e-12, loc), loc);
}

}  // namespace tg::nn
