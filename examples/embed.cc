// embed: sentence embeddings and masked-word filling with a BERT-family Hugging Face folder
// (config.json, model.safetensors, tokenizer.json): BERT, RoBERTa and the sentence-transformers
// models built on them (all-MiniLM-L6-v2, BGE, E5, …), read by tg::pretrained::load.
//
//   ./embed --model <folder> [--file texts.txt] [--query "a question"] [--pooling mean|cls]
//           [--batch 32] [--device cpu|cuda] [--precision fp32|bf16]
//   ./embed --model <masked-LM folder> --fill "Paris is the [MASK] of France."
//
// Embedding: each text (a line of --file, else a built-in set) becomes one unit vector — the
// encoder's hidden states pooled over its tokens (sentence-transformers' mean pooling, or the
// first token's state with --pooling cls; the default is what the folder's 1_Pooling/config.json
// says, else mean) — and the example draws their cosine similarities as a shaded matrix, or with
// --query ranks the texts by similarity to it. --fill prints the five likeliest tokens at each
// mask token of the text (a BertForMaskedLM / RobertaForMaskedLM folder).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <system_error>
#include <vector>

#include "args.h"

namespace {

constexpr const char* kUsage =
    "usage: embed --model FOLDER [--file TEXTS] [--query TEXT] [--pooling mean|cls] [--batch 32]\n"
    "             [--device cpu|cuda] [--precision fp32|bf16]\n"
    "       embed --model FOLDER --fill \"TEXT WITH [MASK]\"\n"
    "\n"
    "Embeds each line of TEXTS (else a built-in set of sentences) with a BERT-family model folder\n"
    "(BERT's, RoBERTa's, XLM-RoBERTa's or DistilBERT's Model, ForMaskedLM or\n"
    "ForSequenceClassification: config.json, model.safetensors, tokenizer.json), pooling its hidden\n"
    "states over each text's tokens (mean, or the first token with cls; default: the folder's\n"
    "1_Pooling/config.json, else mean) into unit vectors, and draws their cosine similarities;\n"
    "--query ranks the texts by similarity to TEXT.\n"
    "A text longer than the model's context (or sentence_bert_config.json's max_seq_length) is\n"
    "cut to it, with a note.\n"
    "--fill: the five likeliest tokens at each mask token of TEXT (a masked-LM folder).\n";

const std::vector<std::string> kTexts = {
    "A man is playing a guitar.",        "Someone is playing an instrument.",
    "The cat sleeps on the sofa.",       "A kitten is napping on the couch.",
    "Stock markets fell sharply today.", "Shares dropped in heavy trading.",
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// What a sentence-transformers folder says about its pooling (1_Pooling/config.json: mean or
// the first token; another mode is refused, not replaced) and its longest input
// (sentence_bert_config.json's max_seq_length; 0 when it names none).
struct SentenceConfig {
  std::string pooling = "mean";
  int64_t max_len = 0;
};
SentenceConfig sentence_config(const std::string& folder) {
  namespace fs = std::filesystem;
  SentenceConfig c;
  const auto read = [](const fs::path& p) {
    std::ifstream in(p);
    return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  };
  if (const fs::path p = fs::path(folder) / "1_Pooling" / "config.json"; fs::exists(p)) {
    const nlohmann::json j = read(p);
    if (!j.is_object()) throw std::runtime_error(p.string() + " is not a JSON object");
    for (const char* mode : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                             "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"})
      if (j.value(mode, false))
        throw std::runtime_error(p.string() + ": " + mode + " is not implemented (mean or cls)");
    if (j.value("pooling_mode_cls_token", false)) c.pooling = "cls";
  }
  if (const fs::path p = fs::path(folder) / "sentence_bert_config.json"; fs::exists(p)) {
    const nlohmann::json j = read(p);
    if (j.is_object() && j.contains("max_seq_length") && j["max_seq_length"].is_number_integer())
      c.max_len = j["max_seq_length"].get<int64_t>();
  }
  return c;
}

// The texts as one batch padded with the model's pad_id (RoBERTa reads its positions off it),
// cut to `context` tokens with a note.
tg::EncodedBatch tokenize(const tg::Tokenizer& tok, const std::vector<std::string>& texts, int64_t context,
                          int32_t pad) {
  const tg::EncodedBatch b = tok.encode_batch(texts, {.max_length = context, .pad_id = pad});
  if (b.truncated > 0)
    std::fprintf(stderr, "note: %lld text(s) cut to the model's context of %lld tokens\n",
                 static_cast<long long>(b.truncated), static_cast<long long>(context));
  return b;
}

// One unit vector per text: batches of `batch` rows of the padded texts (one program).
std::vector<std::vector<float>> embed(const tg::pretrained::Model& m, const tg::EncodedBatch& texts,
                                      const std::string& pooling, int64_t batch, const example::Args& args) {
  const auto& bert = static_cast<const tg::nn::Bert&>(*m.module);
  const int64_t T = texts.length, n = texts.rows;
  batch = std::min<int64_t>(batch, n);
  tg::Program p = tg::compile_forward(
      *m.module,
      [&](tg::Tensor x, tg::Tensor mask) {
        const tg::Tensor h = bert.hidden(x, mask);
        const tg::Tensor pooled = pooling == "cls"
                                      ? tg::reshape(tg::slice(h, 1, 0, 1), {batch, bert.config.d_model})
                                      : tg::nn::mean_pool(h, mask);
        return tg::nn::l2_normalize(pooled);
      },
      {.inputs = {{"ids", {batch, T}, tg::DType::kI32}, {"mask", {batch, T}, tg::DType::kI32}},
       .device = args.device(),
       .precision = args.precision()});
  m.upload(p);
  std::vector<std::vector<float>> out;
  for (int64_t first = 0; first < n; first += batch) {
    // The last batch's missing rows: padding, masked out.
    std::vector<int32_t> x(static_cast<size_t>(batch * T), bert.config.pad_id), mask(x.size(), 0);
    const int64_t rows = std::min(batch, n - first);
    std::copy_n(texts.ids.begin() + first * T, rows * T, x.begin());
    std::copy_n(texts.mask.begin() + first * T, rows * T, mask.begin());
    const std::vector<float> y = p.run({{"ids", x}, {"mask", mask}}).f32();
    const int64_t d = bert.config.d_model;
    for (int64_t b = 0; b < rows; ++b) out.emplace_back(y.begin() + b * d, y.begin() + (b + 1) * d);
  }
  return out;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

// The cosine similarity matrix as numbers on a shaded ground: darker is more alike.
void draw(const std::vector<std::string>& texts, const std::vector<std::vector<float>>& e) {
  const char* shades[] = {"  ", "\u2591\u2591", "\u2592\u2592", "\u2593\u2593", "\u2588\u2588"};
  std::printf("\ncosine similarity (rows and columns: the texts below; \u2588\u2588 = most alike)\n\n     ");
  for (size_t j = 0; j < texts.size(); ++j) std::printf("  %6zu", j);
  std::printf("\n");
  double lo = 1, hi = -1;
  for (size_t i = 0; i < e.size(); ++i)
    for (size_t j = 0; j < e.size(); ++j)
      if (i != j) lo = std::min(lo, dot(e[i], e[j])), hi = std::max(hi, dot(e[i], e[j]));
  for (size_t i = 0; i < e.size(); ++i) {
    std::printf("%4zu ", i);
    for (size_t j = 0; j < e.size(); ++j) {
      const double s = dot(e[i], e[j]);
      const int shade = i == j ? 4 : hi > lo ? static_cast<int>((s - lo) / (hi - lo) * 3.999) : 0;
      std::printf(" %s%+.2f", shades[shade], s);
    }
    std::printf("\n");
  }
  std::printf("\n");
  for (size_t i = 0; i < texts.size(); ++i) std::printf("%4zu  %s\n", i, texts[i].c_str());
}

int fill(const tg::pretrained::Model& m, const tg::Tokenizer& tok, const std::string& text,
         const example::Args& args) {
  const auto& bert = static_cast<const tg::nn::Bert&>(*m.module);
  if (!bert.config.mlm_head)
    throw std::runtime_error(m.architecture + " has no masked-LM head: --fill needs a *ForMaskedLM folder");
  std::vector<int32_t> ids = tokenize(tok, {text}, m.context, bert.config.pad_id).ids;
  std::vector<size_t> masks;
  for (const char* name : {"[MASK]", "<mask>"})
    if (const auto id = tok.token_to_id(name))
      for (size_t t = 0; t < ids.size(); ++t)
        if (ids[t] == *id) masks.push_back(t);
  if (masks.empty()) throw std::runtime_error("--fill: the text has no [MASK] (or <mask>) token");
  const int64_t T = static_cast<int64_t>(ids.size()), V = bert.config.vocab;
  tg::Program p = tg::compile_forward(
      *m.module, [&](tg::Tensor x) { return tg::softmax(bert.mlm_logits(bert.hidden(x)), -1); },
      {.inputs = {{"ids", {1, T}, tg::DType::kI32}}, .device = args.device()});
  m.upload(p);
  const std::vector<float> probs = p.run({{"ids", ids}}).f32();
  for (size_t t : masks) {
    std::vector<int32_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    const float* row = probs.data() + t * V;
    std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                      [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    std::printf("mask at token %zu:\n", t);
    for (int k = 0; k < 5; ++k) {
      const int bar = static_cast<int>(row[order[k]] * 40 + 0.5);
      std::printf("  %-16s %5.1f%%  %s\n", tok.id_to_token(order[k]).c_str(), 100 * row[order[k]],
                  std::string(static_cast<size_t>(bar), '#').c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (example::Args::wants_help(argc, argv)) {
      std::printf("%s", kUsage);
      return 0;
    }
    const example::Args args = example::Args::parse(argc, argv);
    args.allow_only({"model", "file", "query", "pooling", "batch", "device", "precision", "fill"});
    if (!args.has("model")) {
      std::fprintf(stderr, "embed: --model is required\n%s", kUsage);
      return 2;
    }
    const std::string folder = args.get("model", "");
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::path(folder) / "tokenizer.json", ec))
      throw std::runtime_error(
          folder + " has no tokenizer.json: embed needs the model's tokenizer beside its weights");
    const tg::Tokenizer tok = tg::Tokenizer::load(folder);
    const auto t0 = std::chrono::steady_clock::now();
    const tg::pretrained::Model m = tg::pretrained::load(folder);
    if (!std::holds_alternative<tg::nn::BertConfig>(m.config))
      throw std::runtime_error(
          m.architecture +
          " is not a BERT-family encoder (BertModel, BertForMaskedLM, BertForSequenceClassification "
          "or RoBERTa's): for text generation use ./generate");
    const auto& c = std::get<tg::nn::BertConfig>(m.config);
    std::printf("%s from %s: %lld layers, width %lld, %lld positions (loaded in %.2f s)\n",
                m.architecture.c_str(), folder.c_str(), static_cast<long long>(c.layers),
                static_cast<long long>(c.d_model), static_cast<long long>(m.context), seconds_since(t0));
    if (args.has("fill")) return fill(m, tok, args.get("fill", ""), args);

    std::vector<std::string> texts = kTexts;
    if (args.has("file")) {
      std::ifstream in(args.get("file", ""));
      if (!in) throw std::runtime_error("cannot read " + args.get("file", ""));
      texts.clear();
      for (std::string line; std::getline(in, line);)
        if (!line.empty()) texts.push_back(line);
      if (texts.empty()) throw std::runtime_error(args.get("file", "") + " has no text lines");
    }
    const SentenceConfig sc = sentence_config(folder);
    const std::string pooling = args.get("pooling", sc.pooling);
    if (pooling != "mean" && pooling != "cls")
      throw std::runtime_error("--pooling takes mean or cls, not " + pooling);
    const double batch = args.num("batch", 32);
    if (!(batch >= 1 && batch <= 4096)) throw std::runtime_error("--batch must be from 1 to 4096");
    std::vector<std::string> all = texts;
    if (args.has("query")) all.push_back(args.get("query", ""));
    const auto t1 = std::chrono::steady_clock::now();
    const int64_t max_len = sc.max_len > 0 ? std::min(sc.max_len, m.context) : m.context;
    const int32_t pad = std::get<tg::nn::BertConfig>(m.config).pad_id;
    const auto e = embed(m, tokenize(tok, all, max_len, pad), pooling, static_cast<int64_t>(batch), args);
    const double s = seconds_since(t1);
    std::printf("embedded %zu texts (%s pooling) in %.3f s, compile included: %.1f texts/s\n", all.size(),
                pooling.c_str(), s, static_cast<double>(all.size()) / s);
    if (!args.has("query")) {
      draw(texts, e);
      return 0;
    }
    std::vector<size_t> order(texts.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return dot(e[a], e.back()) > dot(e[b], e.back()); });
    std::printf("\nmost similar to \"%s\":\n", all.back().c_str());
    for (size_t i : order) {
      const double sim = dot(e[i], e.back());
      std::printf("  %+.3f  %-20s  %s\n", sim,
                  std::string(static_cast<size_t>(std::max(0.0, sim) * 20 + 0.5), '#').c_str(),
                  texts[i].c_str());
    }
    return 0;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "embed: %s\n", ex.what());
    return 1;
  }
}
