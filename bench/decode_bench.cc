// Benchmark: greedy decoding with a KV cache, random weights, a 16-token prompt per sequence:
// one prefill program, then one single-token decode program per new token; the argmax is taken
// in the graph, so only the token ids leave the device. New tokens: 256 on a GPU, 32 on the
// CPU (as the peers). Models:
//   gpt2       GPT-2 124M shapes (gpt2_decode of ../shared/bench/README.md; peer: torch_peer.py)
//   tinyllama  TinyLlama-1.1B shapes: 22 layers, d 2048, 32 heads, 4 KV heads, MLP 5632, vocab
//              32000 (peer: bench/decode_peer_gpu.py, Hugging Face generate)
//   qwen2      Qwen2.5-0.5B shapes: 24 layers, d 896, 14 heads, 2 KV heads, MLP 4864, vocab 151936,
//              q/k/v biases, tied head (peer: the same script)
//   qwen3      Qwen3-0.6B shapes: 28 layers, d 1024, 16 heads of 128 (2048 wide), 8 KV heads,
//              MLP 3072, vocab 151936, q/k norms, tied head (peer: the same script)
//   moe        a mixture of experts in Qwen3-MoE's form, scaled to fit the CPU machine: 8 layers,
//              d 1024, 16 heads, 4 KV heads, 32 experts of width 512, top 4 renormalised, vocab
//              32000 (403 M expert parameters, 50 M of them active per token); each expert runs
//              on its own tokens (Experts::Dispatch::kSorted). moe_dense: the same model with
//              every expert on every token (kDense), the first tokens printed must agree.
//   gpt_oss    gpt-oss-20b shapes: 24 layers, d 2880, 64 heads of 64, 8 KV heads, attention sinks,
//              windows of 128 in every other layer, YaRN, 32 biased experts of width 2880, top 4
//              (20.9 B parameters, 3.6 B active per token), vocab 201088; fits an H200 as bf16held
//              (peer: decode_peer_gpu.py, whose MoE floor counts the active experts only)
// With bf16 the products read bf16 weights and activations (Precision::kBf16; an inference
// program keeps the weights' bf16 copies between runs, so they are read, not converted, per token).
// bf16held: the same with the matrices stored as bf16 (Module::store_params_as): no f32 masters
// beside the copies, the products read the parameters themselves (the "model storage" printed).
// int8: every Linear's weight quantized to 8 bits in groups of 32 (store_params_as(kI8)), the
// embeddings bf16, bf16 products; the decode step's products read the i8 weights (quant_matmul),
// the prefill's a copy dequantized in the step. int4: the same with 4-bit weights (store_params_as(kI8,
// 32, 4): packed codes with a scale and an offset per 32 values).
// Prints, in the torch_peer.py format, the whole generation's tokens/s (all sequences) and the
// median per-token latency of the decode calls:
//   <model>_decode <mode> <ms> ms/step <tokens/s> tokens/s
//
// With a sixth argument `generator`, the same decoding through tg::Generator (its sample op,
// min-p and repetition-penalty state included), greedy, with the penalty off and at 1.1:
//   <model>_decode tg_generator_… <ms> ms/step <tokens/s> tokens/s
//
// With `beam` instead, beam search of `batch` beams over one prompt (Generator::beam_search, no
// stop token: every step runs) against greedy decoding of `batch` prompts, per step:
//   <model>_decode tg_beam_search_<beams> <ms> ms/step <steps/s> steps/s
//
//   ./decode_bench [cpu|cuda] [new tokens (0: default)] [fp32|bf16|bf16held|int8|int4]
//   [gpt2|tinyllama|qwen2|qwen3|moe|moe_dense|gpt_oss] [batch]
//                  [generator | beam]
#include <tensorgrad/tensorgrad.h>

#include "timing.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

struct Setup {
  tg::Device device;
  tg::Precision precision;
  int64_t prompt_len, fresh, batch;
  std::string name, mode;
  tg::DType held = tg::DType::kF32;  // bf16held, int8, int4: how the matrices are stored (store_params_as)
  int bits = 8;                      // int4: 4
  bool beam = false;                 // sixth argument `beam`: beam search of `batch` beams
};

template <class Model>
int bench(Model& model, int64_t vocab, const Setup& s) {
  if (s.held != tg::DType::kF32) model.store_params_as(s.held, 32, s.bits);
  const int64_t cache = s.prompt_len + s.fresh, B = s.batch;
  // The greedy choice of each sequence's last position, in the graph: [B] i32.
  auto next_token = [&](tg::Tensor ids, tg::Tensor pos) {
    tg::Tensor logits = model.logits_cached(ids, pos, cache);  // [B, T, vocab]
    const int64_t T = ids.shape()[1];
    return tg::argmax(tg::reshape(tg::slice(logits, 1, T - 1, T), {B, vocab}), -1);
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto compile = [&](int64_t T) {
    return tg::compile_forward(model, next_token,
                               {.inputs = {{"ids", {B, T}, tg::DType::kI32}, {"pos", {B}, tg::DType::kI32}},
                                .device = s.device,
                                .precision = s.precision});
  };
  tg::Program prefill = compile(s.prompt_len);
  tg::Program decode = compile(1);
  const double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(B * s.prompt_len));
  for (int32_t& t : prompt) t = tok(rng);

  std::vector<double> per_token;
  std::vector<int32_t> generated;
  auto generate = [&] {
    generated.clear();
    per_token.clear();
    std::vector<int32_t> next =
        prefill.run({{"ids", prompt}, {"pos", std::vector<int32_t>(static_cast<size_t>(B), 0)}}).i32();
    for (int64_t step = 0; step < s.fresh; ++step) {
      generated.push_back(next[0]);
      if (step + 1 == s.fresh) break;
      const auto a = std::chrono::steady_clock::now();
      next = decode
                 .run({{"ids", next},
                       {"pos", std::vector<int32_t>(static_cast<size_t>(B),
                                                    static_cast<int32_t>(s.prompt_len + step))}})
                 .i32();
      per_token.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
  };
  // As the peers: one warm-up generation, then the median of three.
  const double sec = median_seconds_per_step(generate, 1, 1);
  std::sort(per_token.begin(), per_token.end());
  const double latency = per_token.empty() ? 0 : per_token[per_token.size() / 2];
  std::printf("%-22s %-26s %10.3f ms/step %14.1f tokens/s\n", s.name.c_str(), s.mode.c_str(), sec * 1e3,
              static_cast<double>(s.fresh * B) / sec);
  std::printf(
      "# %s per-token latency (median decode call) %.3f ms; compile_s %.2f; model storage %.1f MiB; first "
      "tokens",
      s.name.c_str(), latency * 1e3, compile_s,
      static_cast<double>(decode.memory_report().model_storage) / (1 << 20));
  for (size_t i = 0; i < std::min<size_t>(8, generated.size()); ++i) std::printf(" %d", generated[i]);
  std::printf("\n");
  report_compiled((s.name + "(decode program)").c_str(), decode);
  return 0;
}

// The same decoding through tg::Generator: greedy, repetition penalty off and at 1.1.
template <class Model>
int bench_generator(Model& model, int64_t vocab, const Setup& s) {
  if (s.held != tg::DType::kF32) model.store_params_as(s.held, 32, s.bits);
  tg::Generator gen(model,
                    [&model](const tg::Tensor& ids, const tg::Tensor& pos, int64_t cache) {
                      return model.logits_cached(ids, pos, cache);
                    },
                    {.batch = s.batch,
                     .cache_len = s.prompt_len + s.fresh,
                     .prefill_len = s.prompt_len,
                     .device = s.device,
                     .precision = s.precision});
  gen.decode().init_params(0);
  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(s.batch));
  for (auto& p : prompts)
    for (int64_t t = 0; t < s.prompt_len; ++t) p.push_back(tok(rng));
  if (s.beam) {  // beam search over the first prompt, against greedy decoding of `batch` prompts
    const double greedy = median_seconds_per_step(
        [&] { gen.generate(prompts, {.max_new_tokens = s.fresh, .temperature = 0}); }, 1, 1);
    const double beam =
        median_seconds_per_step([&] { gen.beam_search(prompts.front(), {.max_new_tokens = s.fresh}); }, 1, 1);
    for (const auto& [mode, sec] :
         {std::pair{"tg_generator_greedy_b", greedy}, std::pair{"tg_beam_search_", beam}})
      std::printf("%-22s %s%lld%-10s %10.3f ms/step %14.1f steps/s\n", s.name.c_str(), mode,
                  static_cast<long long>(s.batch), s.precision == tg::Precision::kBf16 ? "_bf16" : "",
                  sec * 1e3 / static_cast<double>(s.fresh), static_cast<double>(s.fresh) / sec);
    return 0;
  }
  for (const float penalty : {1.0f, 1.1f}) {
    const double sec = median_seconds_per_step(
        [&] {
          gen.generate(prompts, {.max_new_tokens = s.fresh, .temperature = 0, .repetition_penalty = penalty});
        },
        1, 1);
    char mode[96];
    std::snprintf(mode, sizeof mode, "tg_generator_penalty%.1f_b%lld%s", static_cast<double>(penalty),
                  static_cast<long long>(s.batch), s.precision == tg::Precision::kBf16 ? "_bf16" : "");
    std::printf("%-22s %-26s %10.3f ms/step %14.1f tokens/s\n", s.name.c_str(), mode, sec * 1e3,
                static_cast<double>(s.fresh * s.batch) / sec);
  }
  return 0;
}

}  // namespace

int run(int argc, char** argv) {
  const std::string arg1 = argc > 1 ? argv[1] : "cpu", arg3 = argc > 3 ? argv[3] : "fp32",
                    arg4 = argc > 4 ? argv[4] : "gpt2";
  Setup s;
  s.device = arg1 == "cuda" ? tg::Device::cuda() : tg::Device::cpu();
  const bool gpu = s.device.kind == tg::Device::Kind::kCuda,
             bf16 = arg3 == "bf16" || arg3 == "bf16held" || arg3 == "int8" || arg3 == "int4";
  s.held = arg3 == "bf16held"                 ? tg::DType::kBF16
           : arg3 == "int8" || arg3 == "int4" ? tg::DType::kI8
                                              : tg::DType::kF32;
  s.bits = arg3 == "int4" ? 4 : 8;
  s.precision = bf16 ? tg::Precision::kBf16 : tg::Precision::kFp32;
  s.prompt_len = 16;
  s.fresh = argc > 2 && std::stoll(argv[2]) > 0 ? std::stoll(argv[2]) : gpu ? 256 : 32;
  s.batch = argc > 5 ? std::stoll(argv[5]) : 1;
  s.beam = argc > 6 && std::string(argv[6]) == "beam";
  const bool generator = argc > 6 && (std::string(argv[6]) == "generator" || s.beam);
  const bool known = arg4 == "gpt2" || arg4 == "tinyllama" || arg4 == "qwen2" || arg4 == "qwen3" ||
                     arg4 == "moe" || arg4 == "moe_dense" || arg4 == "gpt_oss";
  if (!known ||
      (arg3 != "fp32" && arg3 != "bf16" && arg3 != "bf16held" && arg3 != "int8" && arg3 != "int4") ||
      s.batch < 1) {
    std::fprintf(stderr,
                 "usage: decode_bench [cpu|cuda] [new tokens] [fp32|bf16|bf16held|int8|int4] "
                 "[gpt2|tinyllama|qwen2|qwen3|moe|moe_dense|gpt_oss] [batch]\n");
    return 2;
  }
  s.name = arg4 + "_decode";
  s.mode = std::string("tg_greedy_b") + std::to_string(s.batch) + "_" + std::to_string(s.fresh) + "tok" +
           (s.held == tg::DType::kBF16 ? "_bf16held"
            : s.held == tg::DType::kI8 ? (s.bits == 4 ? "_int4" : "_int8")
            : bf16                     ? "_bf16"
                                       : "");
  if (arg4 == "gpt2") {
    const tg::nn::GptConfig config{
        .vocab = 50257, .seq_len = 1024, .layers = 12, .d_model = 768, .heads = 12};
    tg::nn::Gpt model(config);
    return generator ? bench_generator(model, config.vocab, s) : bench(model, config.vocab, s);
  }
  tg::nn::LlamaConfig config{.vocab = 32000,
                             .seq_len = 2048,
                             .layers = 22,
                             .d_model = 2048,
                             .heads = 32,
                             .kv_heads = 4,
                             .mlp_hidden = 5632};
  if (arg4 == "qwen2")
    config = {.vocab = 151936,
              .seq_len = 2048,
              .layers = 24,
              .d_model = 896,
              .heads = 14,
              .kv_heads = 2,
              .mlp_hidden = 4864,
              .rms_eps = 1e-6,
              .rope_theta = 1e6,
              .qkv_bias = true,
              .tied_head = true};
  if (arg4 == "qwen3")
    config = {.vocab = 151936,
              .seq_len = 2048,
              .layers = 28,
              .d_model = 1024,
              .heads = 16,
              .kv_heads = 8,
              .mlp_hidden = 3072,
              .rms_eps = 1e-6,
              .rope_theta = 1e6,
              .head_dim = 128,
              .tied_head = true,
              .qk_norm = true};
  if (arg4 == "moe" || arg4 == "moe_dense") {
    config = {.vocab = 32000,
              .seq_len = 2048,
              .layers = 8,
              .d_model = 1024,
              .heads = 16,
              .kv_heads = 4,
              .mlp_hidden = 512,
              .rms_eps = 1e-6,
              .rope_theta = 1e6};
    config.experts = {.count = 32, .top_k = 4, .hidden = 512, .normalize = true};
    if (arg4 == "moe_dense") config.experts.dispatch = tg::nn::LlamaConfig::Experts::Dispatch::kDense;
  }
  if (arg4 == "gpt_oss") {
    config = {.vocab = 201088,
              .seq_len = 4096,
              .layers = 24,
              .d_model = 2880,
              .heads = 64,
              .kv_heads = 8,
              .mlp_hidden = 2880,
              .rope_theta = 150000,
              .rope_scaling = {.type = tg::RopeScaling::Type::kYarn,
                               .factor = 32,
                               .original_context = 4096,
                               .truncate = false},
              .attention_sinks = true,
              .head_dim = 64,
              .attention_bias = true,
              .mlp_bias = true,
              .sliding_window = 128};
    for (int64_t i = 0; i < config.layers; ++i) config.sliding_layers.push_back(i % 2 == 0);
    config.gate = tg::nn::LlamaConfig::Gate::kClampedSwiglu;
    config.experts = {.count = 32, .top_k = 4, .normalize = true, .router_bias = true};
  }
  tg::nn::Llama model(config);
  return generator ? bench_generator(model, config.vocab, s) : bench(model, config.vocab, s);
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_bench: %s\n", e.what());
    return 1;
  }
}
