// Benchmark: the GPT reference workloads of ../shared/bench/README.md on the CPU, in the
// torch_peer.py format:  <workload> fp32 <ms/step> ms/step <tokens/s> tokens/s
// Same shapes and optimizer as the peer (AdamW lr 3e-4, wd 0.1, random ids and targets);
// timing as the peer's: 3 warm-up steps, then the median of 3 runs of 5 steps.
//
//   ./gpt_bench [addition_3L,char_6L384]
#include <tensorgrad/tensorgrad.h>

#include "timing.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>

namespace {

struct Workload {
  const char* name;
  tg::nn::GptConfig config;
  int64_t batch;  // the peer's CPU batch
};

const Workload kWorkloads[] = {
    {"addition_3L", {.vocab = 16, .seq_len = 8, .layers = 3, .d_model = 64, .heads = 4}, 512},
    {"char_6L384", {.vocab = 65, .seq_len = 256, .layers = 6, .d_model = 384, .heads = 6}, 8},
};

void run(const Workload& w) {
  const int64_t B = w.batch, T = w.config.seq_len;
  tg::nn::Gpt model(w.config);
  auto train = tg::compile_train(
      model, [&](tg::Tensor ids, tg::Tensor targets) { return model.loss(ids, targets); },
      {.inputs = {{"ids", {B, T}, tg::DType::kI32}, {"targets", {B, T}, tg::DType::kI32}},
       .optimizer = tg::AdamW{.lr = 3e-4, .weight_decay = 0.1}});
  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(w.config.vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(B * T)), targets(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = tok(rng);
    targets[i] = tok(rng);
  }
  auto step = [&] { train.step({{"ids", ids}, {"targets", targets}}); };
  const double sec = median_seconds_per_step(step, 3, 5);
  std::printf("%-22s %-26s %10.3f ms/step %14.1f tokens/s\n", w.name, "fp32", sec * 1e3, static_cast<double>(B * T) / sec);
  std::fflush(stdout);
  report_compiled(w.name, train);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "addition_3L,char_6L384";
  std::stringstream list(only);
  std::string name;
  while (std::getline(list, name, ',')) {
    bool found = false;
    for (const Workload& w : kWorkloads)
      if (name == w.name) {
        run(w);
        found = true;
      }
    if (!found) std::fprintf(stderr, "gpt_bench: unknown workload '%s'\n", name.c_str());
  }
  return 0;
}
