// Times every cuBLASLt candidate algorithm for products whose shape we care about (the GPT-2
// LM head: vocabulary 50257, 16384 tokens, d 768), in the layouts the cuda backend plans them,
// with the output rows dense or padded to a multiple of 64. For finding why a product runs
// below the ceiling that bench/cuda_ceilings measures.
//
//   ./cuda_product_probe [fp32|tf32|bf16x9]     (needs a GPU; bf16x9: cuBLAS's emulated FP32)
#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "backend/cuda/cublaslt.h"
#include "backend/cuda/driver.h"
#include "cuda_timing.h"

namespace cuda = tg::backend::cuda;

namespace {

struct Case {
  const char* name;
  int64_t m, n, k;
  cuda::MatOperand a, b;
  int64_t ldc;
};

}  // namespace

int main(int argc, char** argv) {
  if (const std::string why = cuda::unavailable_reason(0); !why.empty()) {
    std::printf("cuda_product_probe: no usable GPU: %s\n", why.c_str());
    return 0;
  }
  const std::string want = argc > 1 ? argv[1] : "tf32";
  const cuda::MathMode mode = want == "fp32"     ? cuda::MathMode::kFp32
                              : want == "bf16x9" ? cuda::MathMode::kBf16x9
                                                 : cuda::MathMode::kTf32;
  cuda::open_device(0);
  const int64_t V = 50257, Vp = 50304, N = 16384, C = 768;
  const Case cases[] = {
      // logits [N, V] = x [N, C] · wteᵀ (wte [V, C] read transposed)
      {"logits = x·wteT, out ld V", N, V, C, {N, C, C, 1, 0}, {C, V, 1, C, 0}, V},
      {"logits = x·wteT, out ld Vp", N, V, C, {N, C, C, 1, 0}, {C, V, 1, C, 0}, Vp},
      {"logits padded n = Vp", N, Vp, C, {N, C, C, 1, 0}, {C, Vp, 1, C, 0}, Vp},
      // dx [N, C] = dlogits [N, V] · wte [V, C]
      {"dx = dlogits·wte, dlogits ld V", N, C, V, {N, V, V, 1, 0}, {V, C, C, 1, 0}, C},
      {"dx = dlogits·wte, dlogits ld Vp", N, C, V, {N, V, Vp, 1, 0}, {V, C, C, 1, 0}, C},
      {"dx padded k = Vp", N, C, Vp, {N, Vp, Vp, 1, 0}, {Vp, C, C, 1, 0}, C},
      // dwte [V, C] = dlogitsᵀ [V, N] · x [N, C]
      {"dW = dlogitsT·x, dlogits ld V", V, C, N, {V, N, 1, V, 0}, {N, C, C, 1, 0}, C},
      {"dW = dlogitsT·x, dlogits ld Vp", V, C, N, {V, N, 1, Vp, 0}, {N, C, C, 1, 0}, C},
      {"dW padded m = Vp", Vp, C, N, {Vp, N, 1, Vp, 0}, {N, C, C, 1, 0}, C},
      // an MLP product of the same model: [N, C] · [C, 4C]
      {"mlp x·W1", N, 4 * C, C, {N, C, C, 1, 0}, {C, 4 * C, 4 * C, 1, 0}, 4 * C},
  };
  cuda::DeviceMemory a(static_cast<size_t>(N * Vp * 4)), b(static_cast<size_t>(N * Vp * 4)),
      c(static_cast<size_t>(N * Vp * 4));
  cuda::check(cuda::driver().cuMemsetD8Async(a.get(), 0, static_cast<size_t>(N * Vp * 4), nullptr), "memset");
  cuda::check(cuda::driver().cuMemsetD8Async(b.get(), 0, static_cast<size_t>(N * Vp * 4), nullptr), "memset");
  const size_t ws_bytes = size_t{32} << 20;
  cuda::DeviceMemory workspace(ws_bytes);
  for (const Case& cs : cases) {
    std::unique_ptr<cuda::LtMatmul> planned;
    try {
      planned =
          std::make_unique<cuda::LtMatmul>(1, cs.m, cs.n, cs.k, cs.a, cs.b, mode, ws_bytes, false, cs.ldc);
    } catch (const std::exception& e) {
      std::printf("%-34s %s\n", cs.name, e.what());
      continue;
    }
    cuda::LtMatmul& mm = *planned;
    const double flops =
        2.0 * static_cast<double>(cs.m) * static_cast<double>(cs.n) * static_cast<double>(cs.k);
    std::printf("%-34s", cs.name);
    for (size_t i = 0; i < mm.candidates(); ++i) {
      mm.choose(i);
      const float ms = cuda_time_ms([&] { mm.run(a.get(), b.get(), c.get(), workspace.get(), nullptr); }, 5);
      std::printf(" %6.2f ms (%3.0f)", ms, flops / (ms * 1e9));
    }
    std::printf("   [ms (TFLOP/s) per candidate, heuristic order]\n");
  }
  return 0;
}
