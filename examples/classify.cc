// classify: fine-tunes a BERT-family Hugging Face folder (tg::pretrained::load: BERT, RoBERTa,
// XLM-RoBERTa, DistilBERT, MiniLM, …) as a text classifier, as transformers'
// BertForSequenceClassification does: the encoder's weights from the folder, a new classifier on
// top (BERT's on the pooler, RoBERTa's on <s>, DistilBERT's through pre_classifier), every
// weight trained with AdamW. The data is a file of "label<TAB>text" lines, or by
// default a real task from the Debian fortunes corpus: which of four files (computers, science,
// politics, men-women) a fortune comes from. Shows the loss, sequences/s and time left as it
// trains, the held-out accuracy after each epoch and a confusion matrix, and with --save writes
// the fine-tuned model as a …ForSequenceClassification folder of its family that transformers
// reads.
//
//   ./classify --model <folder> [--data labeled.tsv] [--epochs 3] [--batch 16] [--lr 5e-5]
//              [--max-len 64] [--limit 0] [--device cpu|cuda] [--precision fp32|bf16]
//              [--save <folder>] [--min-accuracy 0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "args.h"
#include "fortunes.h"

namespace {

constexpr const char* kUsage =
    "usage: classify --model FOLDER [--data FILE] [--epochs 3] [--batch 16] [--lr 5e-5] [--max-len 64]\n"
    "                [--limit 0] [--device cpu|cuda] [--precision fp32|bf16] [--save FOLDER]\n"
    "                [--min-accuracy 0]\n"
    "\n"
    "Fine-tunes a BERT-family model folder (config.json, model.safetensors, tokenizer.json) as a\n"
    "sequence classifier. FILE holds one example a line, \"label<TAB>text\"; without it the task is\n"
    "telling fortunes of the Debian corpus (computers, science, politics, men-women) apart. A tenth\n"
    "of the examples (by a fixed shuffle) is held out. Texts are cut to --max-len tokens; --limit N\n"
    "keeps the first N examples of the shuffle. --save writes a BertForSequenceClassification (or\n"
    "Roberta…, XLMRoberta…, DistilBert…) folder with the labels in its config.json. --min-accuracy A exits "
    "with status 1\n"
    "when the final held-out accuracy is below A (for tests).\n";

struct Example {
  int32_t label;
  std::string text;
};

std::vector<Example> read_data(const example::Args& args, std::vector<std::string>& labels) {
  std::vector<Example> out;
  if (args.has("data")) {
    std::ifstream in(args.get("data", ""));
    if (!in) throw std::runtime_error("cannot read " + args.get("data", ""));
    std::map<std::string, int32_t> ids;
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
      if (line.empty()) continue;
      const size_t tab = line.find('\t');
      if (tab == std::string::npos || tab == 0)
        throw std::runtime_error(args.get("data", "") + ":" + std::to_string(line_no) +
                                 ": expected label<TAB>text");
      const std::string label = line.substr(0, tab);
      if (!ids.count(label)) ids[label] = static_cast<int32_t>(labels.size()), labels.push_back(label);
      out.push_back({ids[label], line.substr(tab + 1)});
    }
  } else {
    const std::filesystem::path dir = fortunes::locate();
    for (const char* name : {"computers", "science", "politics", "men-women"}) {
      std::vector<std::string> texts;
      fortunes::read_file(dir / name, texts);
      for (std::string& t : texts) {
        std::replace(t.begin(), t.end(), '\n', ' ');
        out.push_back({static_cast<int32_t>(labels.size()), t});
      }
      labels.push_back(name);
    }
  }
  if (out.empty()) throw std::runtime_error("the data holds no examples");
  if (labels.size() < 2) throw std::runtime_error("the data names fewer than two labels");
  std::shuffle(out.begin(), out.end(), std::mt19937(1234));
  const double limit = args.num("limit", 0);
  if (!(limit >= 0)) throw std::runtime_error("--limit must be 0 (every example) or positive");
  if (limit > 0 && static_cast<size_t>(limit) < out.size()) out.resize(static_cast<size_t>(limit));
  return out;
}

// ids and mask rows of `batch` examples from `first` (rows past the end are padding, mask 0).
void fill_batch(const std::vector<std::vector<int32_t>>& ids, size_t first, int64_t batch, int64_t T,
                int32_t pad, std::vector<int32_t>& x, std::vector<int32_t>& mask) {
  x.assign(static_cast<size_t>(batch * T), pad);
  mask.assign(x.size(), 0);
  for (int64_t b = 0; b < batch && first + b < ids.size(); ++b)
    for (size_t t = 0; t < ids[first + b].size(); ++t) x[b * T + t] = ids[first + b][t], mask[b * T + t] = 1;
}

void confusion(const std::vector<std::string>& labels, const std::vector<std::vector<int>>& m) {
  std::printf("\nconfusion matrix (rows: true label, columns: predicted)\n%14s", "");
  for (size_t j = 0; j < labels.size(); ++j) std::printf(" %9.9s", labels[j].c_str());
  std::printf("\n");
  for (size_t i = 0; i < labels.size(); ++i) {
    const int total = std::accumulate(m[i].begin(), m[i].end(), 0);
    std::printf("%14.14s", labels[i].c_str());
    for (size_t j = 0; j < labels.size(); ++j) {
      const double share = total ? static_cast<double>(m[i][j]) / total : 0;
      const char* shade = share > 0.75   ? "\u2588"
                          : share > 0.5  ? "\u2593"
                          : share > 0.25 ? "\u2592"
                          : share > 0.05 ? "\u2591"
                                         : " ";
      std::printf(" %s%8d", shade, m[i][j]);
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (example::Args::wants_help(argc, argv)) {
      std::printf("%s", kUsage);
      return 0;
    }
    const example::Args args = example::Args::parse(argc, argv);
    args.allow_only({"model", "data", "epochs", "batch", "lr", "max-len", "limit", "device", "precision",
                     "save", "min-accuracy"});
    if (!args.has("model")) {
      std::fprintf(stderr, "classify: --model is required\n%s", kUsage);
      return 2;
    }
    const std::string folder = args.get("model", "");
    const auto epochs = static_cast<int>(args.num("epochs", 3));
    const auto batch = static_cast<int64_t>(args.num("batch", 16));
    const double lr = args.num("lr", 5e-5);
    if (epochs < 1 || batch < 1 || !(lr > 0))
      throw std::runtime_error("--epochs, --batch and --lr must be positive");
    const tg::Tokenizer tok = tg::Tokenizer::load(folder);
    const tg::pretrained::Model base = tg::pretrained::load(folder);
    if (!std::holds_alternative<tg::nn::BertConfig>(base.config))
      throw std::runtime_error(base.architecture +
                               " is not a BERT-family encoder: classify fine-tunes those");

    std::vector<std::string> labels;
    const std::vector<Example> data = read_data(args, labels);
    const auto K = static_cast<int64_t>(labels.size());
    // The classifier: the folder's encoder with a classifier of K labels (kept from the folder
    // when it already has one of that size, else new, as transformers' num_labels does).
    tg::nn::BertConfig c = std::get<tg::nn::BertConfig>(base.config);
    c.mlm_head = false;
    c.qa_head = false;
    c.per_token = false;
    c.pooler = !c.roberta_positions && !c.distil;  // BERT's classifier reads the pooler
    c.labels = K;
    auto model = std::make_unique<tg::nn::Bert>(c);
    const double max_len = args.num("max-len", 64);
    if (!(max_len >= 2))
      throw std::runtime_error("--max-len must be at least 2 (the [CLS] and [SEP] tokens)");
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(max_len), c.context());
    std::vector<std::string> texts;
    for (const Example& e : data) texts.push_back(e.text);
    // Each text's ids, cut to T as `tokenizers` truncates ([CLS] and [SEP] kept).
    const tg::EncodedBatch encoded = tok.encode_batch(texts, {.max_length = T, .pad_id = c.pad_id});
    std::vector<std::vector<int32_t>> ids;
    for (int64_t r = 0; r < encoded.rows; ++r) {
      const auto row = encoded.ids.begin() + r * encoded.length;
      ids.emplace_back(row, row + encoded.lengths[static_cast<size_t>(r)]);
    }
    const size_t held = std::max<size_t>(1, data.size() / 10), train_n = data.size() - held;
    if (train_n < static_cast<size_t>(batch))
      throw std::runtime_error("fewer training examples than --batch");
    std::printf(
        "%s from %s as a %lld-label classifier: %zu training and %zu held-out examples, %lld tokens each\n",
        base.architecture.c_str(), folder.c_str(), static_cast<long long>(K), train_n, held,
        static_cast<long long>(T));

    const tg::Shape shape{batch, T};
    const tg::Device device = args.device();
    tg::Program train =
        tg::compile_train(*model,
                          [&](tg::Tensor x, tg::Tensor mask, tg::Tensor y) {
                            return tg::cross_entropy(model->classify(model->hidden(x, mask)), y);
                          },
                          {.inputs = {{"ids", shape, tg::DType::kI32},
                                      {"mask", shape, tg::DType::kI32},
                                      {"labels", {batch}, tg::DType::kI32}},
                           .optimizer = tg::AdamW{.lr = lr, .weight_decay = 0.01},
                           .device = device,
                           .precision = args.precision()});
    tg::Program predict =
        tg::compile_forward(*model,
                            [&](tg::Tensor x, tg::Tensor mask) {
                              return tg::argmax(model->classify(model->hidden(x, mask)), -1);
                            },
                            {.inputs = {{"ids", shape, tg::DType::kI32}, {"mask", shape, tg::DType::kI32}},
                             .device = device,
                             .precision = args.precision()});
    train.init_params(0);  // the new classifier (and a pooler the folder lacks); then the folder's weights
    std::map<std::string, tg::HostTensor> weights;
    const std::vector<std::string> names = train.param_names();
    for (const auto& [name, t] : base.weights)
      if (std::find(names.begin(), names.end(), name) != names.end() &&
          (!name.starts_with("classifier") || std::get<tg::nn::BertConfig>(base.config).labels == K))
        weights.emplace(name, t);
    train.upload_params(weights, {.partial = true});
    std::printf("%zu of the model's %zu parameters from the folder, the others new\n", weights.size(),
                names.size());

    const int32_t pad = c.pad_id;
    std::vector<size_t> order(train_n);
    std::iota(order.begin(), order.end(), 0);
    std::mt19937 rng(7);
    std::vector<int32_t> x, mask, y(static_cast<size_t>(batch));
    double accuracy = 0;
    const int64_t steps_per_epoch = static_cast<int64_t>(train_n) / batch;
    const auto t0 = std::chrono::steady_clock::now();
    int64_t done = 0;
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      std::shuffle(order.begin(), order.end(), rng);
      double loss_sum = 0;
      for (int64_t s = 0; s < steps_per_epoch; ++s) {
        std::vector<std::vector<int32_t>> rows;
        for (int64_t b = 0; b < batch; ++b) {
          rows.push_back(ids[order[static_cast<size_t>(s * batch + b)]]);
          y[static_cast<size_t>(b)] = data[order[static_cast<size_t>(s * batch + b)]].label;
        }
        fill_batch(rows, 0, batch, T, pad, x, mask);
        loss_sum += train.step({{"ids", x}, {"mask", mask}, {"labels", y}});
        ++done;
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (done % 20 == 0 || s + 1 == steps_per_epoch) {
          const double left =
              sec / static_cast<double>(done) * static_cast<double>(epochs * steps_per_epoch - done);
          std::printf("\repoch %d  step %4lld/%lld  loss %.4f  %6.1f seq/s  %4.0f s left ", epoch,
                      static_cast<long long>(s + 1), static_cast<long long>(steps_per_epoch),
                      loss_sum / (s + 1), static_cast<double>(done * batch) / sec, left);
          std::fflush(stdout);
        }
      }
      // Held-out accuracy, and the confusion matrix after the last epoch.
      std::vector<std::vector<int>> matrix(static_cast<size_t>(K),
                                           std::vector<int>(static_cast<size_t>(K), 0));
      int right = 0;
      const std::vector<std::vector<int32_t>> held_ids(ids.begin() + static_cast<std::ptrdiff_t>(train_n),
                                                       ids.end());
      for (size_t first = 0; first < held; first += static_cast<size_t>(batch)) {
        fill_batch(held_ids, first, batch, T, pad, x, mask);
        const std::vector<int32_t> got = predict.run({{"ids", x}, {"mask", mask}}).i32();
        for (int64_t b = 0; b < batch && first + b < held; ++b) {
          const int32_t want = data[train_n + first + static_cast<size_t>(b)].label;
          right += got[static_cast<size_t>(b)] == want;
          ++matrix[static_cast<size_t>(want)][static_cast<size_t>(got[static_cast<size_t>(b)])];
        }
      }
      accuracy = static_cast<double>(right) / static_cast<double>(held);
      std::printf("\nepoch %d: held-out accuracy %.1f%% (%d of %zu)\n", epoch, 100 * accuracy, right, held);
      if (epoch == epochs) confusion(labels, matrix);
    }

    if (args.has("save")) {
      tg::pretrained::Model out;
      // The base's family (Bert, Roberta, XLMRoberta, DistilBert) with the classifier's head.
      const size_t head = std::min(base.architecture.find("For"), base.architecture.find("Model"));
      out.architecture = base.architecture.substr(0, head) + "ForSequenceClassification";
      out.config = c;
      nlohmann::json j = nlohmann::json::parse(base.config_json);
      j["architectures"] = {out.architecture};
      j.erase("problem_type");  // the base's, if it was a classifier: transformers infers it again
      j["id2label"] = nlohmann::json::object();
      j["label2id"] = nlohmann::json::object();
      for (size_t i = 0; i < labels.size(); ++i) {
        j["id2label"][std::to_string(i)] = labels[i];
        j["label2id"][labels[i]] = i;
      }
      out.config_json = j.dump(2);
      out.folder = folder;  // its tokenizer files are copied along
      out.module = std::move(model);
      tg::pretrained::save(out, train.download_params(), args.get("save", ""));
      std::printf("saved the classifier to %s\n", args.get("save", "").c_str());
    }
    const double need = args.num("min-accuracy", 0);
    if (accuracy < need) {
      std::fprintf(stderr, "classify: held-out accuracy %.3f is below --min-accuracy %.3f\n", accuracy, need);
      return 1;
    }
    return 0;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "classify: %s\n", ex.what());
    return 1;
  }
}
