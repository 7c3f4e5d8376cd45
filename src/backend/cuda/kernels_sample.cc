// CUDA kernel template for sample (ops.def): decoding's sampling step, one block per row of
// logits. The rows of a decode step are few (the batch) and long (the vocabulary), so a block
// of 1024 threads strides over one row, and every row-wide quantity is a block reduction in a
// fixed order (deterministic). The cuts are found without sorting:
//   - top-k: the k-th largest logit by radix select over order-preserving 32-bit keys of the
//     floats (four passes of an 8-bit histogram in shared memory), exact;
//   - top-p: the smallest key v whose strictly larger candidates hold less than top_p of the
//     candidates' mass, by bisection over the key range [k-th key, max key] (≤ 32 passes of a
//     double sum); the candidates are then exactly the keys ≥ v, the ref backend's groups.
// The draw is Gumbel-max with scores in double over the shared Philox stream, so the ids
// match the cpu and ref backends for the same key.
//
// The device code is in kernels/sample.cuh.
#include <algorithm>
#include <string>

#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/kernels.h"

namespace tg::backend::cuda {

Launch sample_kernel(const std::string& name, int64_t rows, int64_t vocab) {
  constexpr int kThreads = 1024;
  Launch l;
  l.name = name;
  l.block[0] = kThreads;
  l.grid[0] = static_cast<unsigned>(std::max<int64_t>(rows, 1));
  std::string s = "// sample (kernels_sample.cc)\n" + philox_source(0);
  s += "constexpr int V = " + std::to_string(vocab) +
       ";\nconstexpr unsigned int ROWS = " + std::to_string(rows) +
       "u;\nconstexpr int NT = " + std::to_string(kThreads) + ";\n";
  s += kernel_source("sample.cuh", "helpers");
  s += "extern \"C\" __global__ void __launch_bounds__(NT) " + name +
       "(const float* __restrict__ logits, const float* __restrict__ params, const int* __restrict__ key, "
       "int* __restrict__ out) {\n";
  s += kernel_source("sample.cuh", "body");
  l.source = std::move(s);
  return l;
}

}  // namespace tg::backend::cuda
