// Benchmark: host-side compile time of the GPT-2 124M training step (vocab 50257, seq 1024,
// 12 layers, d_model 768, 12 heads, AdamW) — tracing, autograd, the optimizer graph, the
// rewriting passes, parameter initialisation and the backend's preparation — without running
// a step. Set TG_PROFILE=1 for the per-stage times (printed by compile_train on stderr).
//
//   ./compile_bench [batch=1] [cpu|ref|cuda] [repeats=3]
//
// The CPU backend's prepare allocates the step's arena (about 1.1 GB per sequence of the
// batch), so batch 1 keeps the measurement within a small machine's memory; the graph, and
// so every pass before prepare, has the same size at every batch.
#include <tensorgrad/tensorgrad.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const int64_t B = argc > 1 ? std::atoll(argv[1]) : 1;
  const std::string dev = argc > 2 ? argv[2] : "cpu";
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
  const tg::Device device = dev == "cuda"  ? tg::Device::cuda()
                            : dev == "ref" ? tg::Device::ref()
                                           : tg::Device::cpu();
  const tg::nn::GptConfig config{.vocab = 50257, .seq_len = 1024, .layers = 12, .d_model = 768, .heads = 12};
  const int64_t T = config.seq_len;
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    tg::nn::Gpt model(config);  // a fresh model each time: its parameters are initialised again
    const auto t0 = std::chrono::steady_clock::now();
    tg::Program train =
        tg::compile_train(model, [&](tg::Tensor ids, tg::Tensor targets) { return model.loss(ids, targets); },
                          {.inputs = {{"ids", {B, T}, tg::DType::kI32}, {"targets", {B, T}, tg::DType::kI32}},
                           .optimizer = tg::AdamW{.lr = 3e-4, .weight_decay = 0.1},
                           .device = device});
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::printf("compile %d: %.3f s (%lld kernels)\n", r, times.back(),
                static_cast<long long>(train.kernel_count()));
    std::fflush(stdout);
  }
  std::sort(times.begin(), times.end());
  std::printf("gpt2_124M batch %lld on %s: compile_train median %.3f s, best %.3f s\n",
              static_cast<long long>(B), device.str().c_str(), times[times.size() / 2], times.front());
  return 0;
}
