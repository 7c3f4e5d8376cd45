// Benchmark: a BERT-base encoder (vocab 30522, width 768, 12 layers of 12 heads, MLP 3072;
// random weights), the shapes of bert-base-uncased and of the larger sentence-embedding models.
//   bert_embed   inference: a batch of texts of different lengths padded to 128 tokens (row i
//                holds 64 + (53·i mod 65) tokens), the attention mask, mean pooling and unit
//                length: sentence embeddings. Batch 32 on a GPU, 8 on the CPU.
//   bert_full    the same batch with every row a full 128 tokens and no mask (the fused
//                attention kernel).
//   bert_train   one AdamW step fine-tuning a 2-label classifier on the pooler (the masked batch).
// Under bf16 the inference programs hold the weights in bf16 (as load({.dtype = kBF16}) does);
// training keeps f32 masters under Precision::kBf16. The peer is bench/bert_peer.py (Hugging
// Face's BertModel / BertForSequenceClassification on the same shapes and lengths). Prints, in
// the torch_peer.py format:
//   <workload> tg_<fp32|bf16> <ms> ms/step <sequences/s> seq/s
//
//   ./bert_bench [cpu|cuda] [fp32|bf16] [embed,full,train]
#include <tensorgrad/tensorgrad.h>

#include "timing.h"

#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

tg::nn::BertConfig base_config(int64_t labels) {
  return {.vocab = 30522, .d_model = 768, .layers = 12, .heads = 12, .mlp_hidden = 3072, .max_positions = 512,
          .pooler = labels > 0, .labels = labels};
}

struct Batch {
  std::vector<int32_t> ids, mask, labels;
};

Batch make_batch(int64_t batch, int64_t seq, bool full) {
  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> tok(1000, 30000);
  Batch b;
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t len = full ? seq : 64 + (53 * i) % 65;
    for (int64_t t = 0; t < seq; ++t) {
      b.ids.push_back(t < len ? (t == 0 ? 101 : tok(rng)) : 0);
      b.mask.push_back(t < len ? 1 : 0);
    }
    b.labels.push_back(static_cast<int32_t>(i % 2));
  }
  return b;
}

void report(const char* workload, bool bf16, double sec, int64_t batch) {
  std::printf("%-14s %-10s %10.3f ms/step %10.1f seq/s\n", workload, bf16 ? "tg_bf16" : "tg_fp32", sec * 1e3,
              static_cast<double>(batch) / sec);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string where = argc > 1 ? argv[1] : "cpu", precision = argc > 2 ? argv[2] : "fp32";
  const std::string which = argc > 3 ? argv[3] : "embed,full,train";
  if ((where != "cpu" && where != "cuda") || (precision != "fp32" && precision != "bf16")) {
    std::fprintf(stderr, "usage: bert_bench [cpu|cuda] [fp32|bf16] [embed,full,train]\n");
    return 2;
  }
  const bool gpu = where == "cuda", bf16 = precision == "bf16";
  const tg::Device device = gpu ? tg::Device::cuda() : tg::Device::cpu();
  const tg::Precision prec = bf16 ? tg::Precision::kBf16 : tg::Precision::kFp32;
  const int64_t batch = gpu ? 32 : 8, seq = 128;
  const int warm = gpu ? 5 : 1, iters = gpu ? 20 : 2;
  const tg::Shape shape{batch, seq};

  for (const char* workload : {"embed", "full"}) {
    if (which.find(workload) == std::string::npos) continue;
    const bool full = std::string(workload) == "full";
    tg::nn::Bert model(base_config(0));
    if (bf16) model.store_params_as(tg::DType::kBF16);
    const Batch b = make_batch(batch, seq, full);
    tg::Program p =
        full ? tg::compile_forward(
                   model,
                   [&](tg::Tensor ids) {
                     const tg::Tensor h = model.hidden(ids);
                     return tg::nn::l2_normalize(tg::mean(h, {1}));
                   },
                   {.inputs = {{"ids", shape, tg::DType::kI32}}, .device = device, .precision = prec})
             : tg::compile_forward(
                   model,
                   [&](tg::Tensor ids, tg::Tensor mask) {
                     return tg::nn::l2_normalize(tg::nn::mean_pool(model.hidden(ids, mask), mask));
                   },
                   {.inputs = {{"ids", shape, tg::DType::kI32}, {"mask", shape, tg::DType::kI32}},
                    .device = device,
                    .precision = prec});
    p.init_params(0);
    const tg::Feeds feeds = full ? tg::Feeds{{"ids", b.ids}} : tg::Feeds{{"ids", b.ids}, {"mask", b.mask}};
    const double sec = median_seconds_per_step([&] { p.run(feeds); }, warm, iters);
    report(full ? "bert_full" : "bert_embed", bf16, sec, batch);
  }

  if (which.find("train") != std::string::npos) {
    tg::nn::Bert model(base_config(2));
    const Batch b = make_batch(batch, seq, false);
    tg::Program train = tg::compile_train(
        model,
        [&](tg::Tensor ids, tg::Tensor mask, tg::Tensor labels) {
          return tg::cross_entropy(model.classify(model.hidden(ids, mask)), labels);
        },
        {.inputs = {{"ids", shape, tg::DType::kI32},
                    {"mask", shape, tg::DType::kI32},
                    {"labels", {batch}, tg::DType::kI32}},
         .optimizer = tg::AdamW{.lr = 2e-5},
         .device = device,
         .precision = prec});
    train.init_params(0);
    const tg::Feeds feeds{{"ids", b.ids}, {"mask", b.mask}, {"labels", b.labels}};
    const double sec = median_seconds_per_step([&] { train.step(feeds); }, warm, iters);
    report("bert_train", bf16, sec, batch);
    std::printf("%-14s %-10s planned peak %.0f MiB\n", "bert_train", bf16 ? "tg_bf16" : "tg_fp32",
                static_cast<double>(train.memory_report().planned_peak()) / (1 << 20));
  }
  return 0;
}
