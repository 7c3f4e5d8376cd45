// CUDA kernel template for attention_at (ops.def): a few new queries over KV caches, each
// sequence seeing only its valid prefix. A decode step has one query per (sequence, head) and
// a short cache, so one block of 8 warps owns one (query, head, sequence), and the work is laid
// out for loads in flight rather than arithmetic: warp w scores keys w, w + 8, … four at a time
// (lanes across D, a shuffle sum per key), the block takes the softmax over the visible keys,
// then warp w sums its keys' values four at a time (lanes across D again) and the 8 partial
// rows meet in shared memory in warp order. Every operand is read through its strides (baked
// in); out is dense [B, Hq, T, D]. A position outside [0, S − T] sets *err and writes zeros.
//
// The device code is in kernels/attention_at.cuh.
#include <algorithm>
#include <string>

#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {}  // namespace

Launch attention_at_kernel(const std::string& name, const Operand& q, const Operand& k, const Operand& v,
                           const Operand& pos, double scale) {
  constexpr int kWarps = 8;
  const int64_t B = q.shape[0], Hq = q.shape[1], T = q.shape[2], D = q.shape[3], Hkv = k.shape[1],
                S = k.shape[2];
  if (D > 1024) throw Error("[cuda] attention_at supports head sizes up to 1024, got " + std::to_string(D));
  // A row of scores [S] (dynamic) plus q and the warps' partial rows (static) in shared memory.
  if (S * 4 + (kWarps + 1) * D * 4 + kWarps * 4 > (200 << 10))
    throw Error("[cuda] attention_at keeps a row of scores in shared memory: " + std::to_string(S) +
                " cache positions with head size " + std::to_string(D) + " need more than 200 KiB");
  Launch l;
  l.name = name;
  l.block[0] = kWarps * 32;
  l.grid[0] = static_cast<unsigned>(std::max<int64_t>(T, 1));
  l.grid[1] = static_cast<unsigned>(std::max<int64_t>(Hq, 1));
  l.grid[2] = static_cast<unsigned>(std::max<int64_t>(B, 1));
  l.shared_bytes = static_cast<unsigned>(std::max<int64_t>(S, 1) * 4);
  char sc[32];
  std::snprintf(sc, sizeof sc, "%.9ef", scale);
  std::string s = "// attention_at (attention_at.cc)\n#define INFINITY __int_as_float(0x7f800000)\n";
  s += "constexpr int T = " + std::to_string(T) + ", S = " + std::to_string(S) +
       ", D = " + std::to_string(D) + ", DC = " + std::to_string((D + 31) / 32) +
       ", GROUP = " + std::to_string(Hkv == 0 ? 1 : Hq / Hkv) + ", HQ = " + std::to_string(Hq) +
       ", NW = " + std::to_string(kWarps) + ";\n";
  auto strides = [&](const char* p, const Operand& o) {
    std::string r;
    for (int d = 0; d < 4; ++d)
      r += std::string("constexpr long long ") + p + std::to_string(d) + " = " +
           ll(o.strides[static_cast<size_t>(d)]) + ";\n";
    return r;
  };
  s += strides("QS", q) + strides("KS", k) + strides("VS", v);
  s += "constexpr long long PS = " + ll(pos.strides.empty() ? 1 : pos.strides[0]) + ";\n";
  s += std::string("constexpr float SCALE = ") + sc + ";\n";
  s += "extern \"C\" __global__ void __launch_bounds__(NW * 32) " + name +
       "(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v, const int* "
       "__restrict__ pos, "
       "float* __restrict__ out, int* err) {\n";
  s += kernel_source("attention_at.cuh", "body");
  l.source = std::move(s);
  return l;
}

}  // namespace tg::backend::cuda
