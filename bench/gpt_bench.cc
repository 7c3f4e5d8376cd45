// Benchmark: the GPT reference workloads of ../shared/bench/README.md, in the torch_peer.py
// format:  <workload> <mode> <ms/step> ms/step <tokens/s> tokens/s
// Same shapes and optimizer as the peer (AdamW lr 3e-4, wd 0.1, random ids and targets) and
// the peer's batch for the device (the CPU runs char_6L384 at batch 8); timing as the peer's:
// 3 warm-up steps, then the median of 3 runs of 20 steps (5 on the CPU and for gpt2_124M).
// Each step reads the loss back, as the peer's step synchronises at the end of its timing.
//
//   ./gpt_bench [addition_3L,char_6L384,gpt2_124M] [cpu|cuda] [fp32|tf32|tf32x3|bf16|f16]
//               [recompute|zero|skip|noscale]
// Started by a launcher (torchrun-style RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT, one
// process per GPU), every rank trains data-parallel on GPU LOCAL_RANK with the per-GPU batch of
// the peer (weak scaling, as torch_ddp_peer.py): rank 0 prints the mode as ddp<N>_<mode> and the
// tokens/s of all GPUs together.
// `recompute` recomputes every block's activations in the backward (GptConfig::recompute); the
// mode then reads e.g. fp32+recompute, and the `planned_mib` line shows what it saves. `zero`
// (data parallel only) shards the optimizer state over the ranks (TrainOptions::shard_optimizer).
// `skip` turns on TrainOptions::skip_nonfinite; `noscale` turns f16's loss scaling off (what
// the two cost).
// bf16 is mixed precision (tg::Precision::kBf16), the peer's *_bf16_autocast modes; its CPU
// products run on AMX where the CPU has it, on vdpbf16ps with TG_CPU_AMX=off. f16 is the same
// policy in IEEE half precision with dynamic loss scaling (tg::Precision::kF16).
#include <tensorgrad/tensorgrad.h>

#include "backend/cpu/gemm_amx.h"
#include "timing.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>

namespace {

struct Workload {
  const char* name;
  tg::nn::GptConfig config;
  int64_t cpu_batch, gpu_batch;  // the peer's
};

const Workload kWorkloads[] = {
    {"addition_3L", {.vocab = 16, .seq_len = 8, .layers = 3, .d_model = 64, .heads = 4}, 512, 512},
    {"char_6L384", {.vocab = 65, .seq_len = 256, .layers = 6, .d_model = 384, .heads = 6}, 8, 64},
    {"gpt2_124M", {.vocab = 50257, .seq_len = 1024, .layers = 12, .d_model = 768, .heads = 12}, 16, 16},
};

void run(const Workload& w, const tg::Device& device, tg::Precision precision, const std::string& extra) {
  const bool recompute = extra == "recompute", zero = extra == "zero";
  const tg::distributed::World world = tg::distributed::world();
  const bool gpu = device.kind == tg::Device::Kind::kCuda;
  const int64_t B = gpu ? w.gpu_batch : w.cpu_batch, T = w.config.seq_len;
  tg::nn::GptConfig config = w.config;
  config.recompute = recompute;
  tg::nn::Gpt model(config);
  const auto t0 = std::chrono::steady_clock::now();
  auto train = tg::compile_train(
      model, [&](tg::Tensor ids, tg::Tensor targets) { return model.loss(ids, targets); },
      {.inputs = {{"ids", {B, T}, tg::DType::kI32}, {"targets", {B, T}, tg::DType::kI32}},
       .optimizer = tg::AdamW{.lr = 3e-4, .weight_decay = 0.1},
       .device = device,
       .precision = precision,
       .skip_nonfinite = extra == "skip",
       .loss_scaling = extra == "noscale" ? std::optional<tg::LossScaling>(tg::LossScaling{.enabled = false})
                                          : std::nullopt,
       .data_parallel = world.size > 1,
       .shard_optimizer = zero && world.size > 1});
  const double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(w.config.vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(B * T)), targets(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = tok(rng);
    targets[i] = tok(rng);
  }
  auto step = [&] { train.step({{"ids", ids}, {"targets", targets}}); };
  const int iters = gpu && std::string(w.name) != "gpt2_124M" ? 20 : 5;
  const double sec = median_seconds_per_step(step, 3, iters);
  std::string mode = precision == tg::Precision::kTf32     ? "tf32"
                     : precision == tg::Precision::kTf32x3 ? "tf32x3"
                     : precision == tg::Precision::kBf16   ? "bf16"
                     : precision == tg::Precision::kF16    ? "f16"
                                                           : "fp32";
  if (!extra.empty()) mode += "+" + extra;
  if (world.size > 1) mode = "ddp" + std::to_string(world.size) + "_" + mode;
  if (world.rank != 0) return;
  std::printf("%-22s %-26s %10.3f ms/step %14.1f tokens/s\n", w.name, mode.c_str(), sec * 1e3,
              static_cast<double>(B * T * world.size) / sec);
  std::fflush(stdout);
  report_compiled(w.name, train);
  std::printf("# %s optimizer_state_mib %.1f\n", w.name,
              static_cast<double>(train.memory_report().optimizer_state) / (1 << 20));
  std::printf("# %s compile_s %.2f (trace, passes, codegen, NVRTC or its disk cache, graph capture)\n",
              w.name, compile_s);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "addition_3L,char_6L384";
  const tg::distributed::World world = tg::distributed::init();
  const tg::Device device =
      argc > 2 && std::string(argv[2]) == "cuda" ? tg::Device::cuda(world.local_rank) : tg::Device::cpu();
  const std::string mode = argc > 3 ? argv[3] : "fp32";
  const std::string extra = argc > 4 ? argv[4] : "";
  if (!extra.empty() && extra != "recompute" && extra != "zero" && extra != "skip" && extra != "noscale") {
    std::fprintf(stderr, "gpt_bench: unknown option '%s' (recompute, zero, skip or noscale)\n",
                 extra.c_str());
    return 2;
  }
  if (mode != "fp32" && mode != "tf32" && mode != "tf32x3" && mode != "bf16" && mode != "f16") {
    std::fprintf(stderr, "gpt_bench: unknown precision '%s' (fp32, tf32, tf32x3, bf16 or f16)\n",
                 mode.c_str());
    return 2;
  }
  const tg::Precision precision = mode == "tf32"     ? tg::Precision::kTf32
                                  : mode == "tf32x3" ? tg::Precision::kTf32x3
                                  : mode == "bf16"   ? tg::Precision::kBf16
                                  : mode == "f16"    ? tg::Precision::kF16
                                                     : tg::Precision::kFp32;
  if (precision == tg::Precision::kBf16 && device.kind != tg::Device::Kind::kCuda)
    std::fprintf(stderr, "# bf16 CPU products on AMX: %s\n",
                 tg::backend::cpu::bf16_amx_enabled()     ? "on"
                 : tg::backend::cpu::bf16_amx_supported() ? "off (TG_CPU_AMX=off)"
                                                          : tg::backend::cpu::bf16_amx_unavailable_reason());
  std::stringstream list(only);
  std::string name;
  while (std::getline(list, name, ',')) {
    bool found = false;
    for (const Workload& w : kWorkloads)
      if (name == w.name) {
        run(w, device, precision, extra);
        found = true;
      }
    if (!found) std::fprintf(stderr, "gpt_bench: unknown workload '%s'\n", name.c_str());
  }
  tg::distributed::finalize();
  return 0;
}
