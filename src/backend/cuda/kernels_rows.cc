// CUDA kernel templates for the row kernels over dense f32 data: softmax / log-softmax
// (optionally causal), cross entropy and its gradient, layer norm, RMS norm and their
// gradients; see kernels.h for the contract. Rows and columns are baked in as constants.
//
// Parallel scheme: a row belongs to one warp (short rows, 8 rows per 256-thread block) or to
// one block of 128…1024 threads (long rows), chosen so that each thread holds a handful of the
// row's values in registers. Row-wide sums and maxima are a shuffle tree inside each warp and,
// for block rows, the warps' results through shared memory, re-reduced by every warp in the
// same order — fixed orders throughout, so results are deterministic and every thread of a
// row sees bit-identical statistics. The cached kernels read their row once into registers
// (16-byte loads when cols % 4 == 0 and the pointers are 16-byte aligned, checked at run time)
// and write it once. Rows too long to cache (cross entropy over a vocabulary, anything beyond
// 1024 threads × 32 values) are streamed: one pass computes an online (max, Σexp) pair per
// thread, merged across the row, and a second pass (an L2 hit for one row) writes the result;
// the streaming loops peel up to three elements so that the body uses aligned 16-byte loads
// whatever the row's alignment (cols = 50257 gives rows at every alignment).
//
// The shared device helpers are in kernels/rows.cuh.
#include <algorithm>
#include <cstdio>
#include <string>

#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {

constexpr int kMaxCache = 32;      // floats per thread per cached tensor (forward kernels)
constexpr int kMaxCacheGrad = 16;  // gradients cache two tensors (x and dy)

struct RowPlan {
  int threads = 32;        // per row: 32 = a warp, else the whole block
  int rows_per_block = 8;  // warp rows only
  int cache = 0;           // floats per thread per tensor; 0 = streamed
  bool vec = false;        // cols % 4 == 0: 16-byte loads possible
};

int cache_for(int64_t cols, int threads, bool vec) {
  const int64_t c = vec ? 4 * ceil_div(cols, 4 * static_cast<int64_t>(threads)) : ceil_div(cols, threads);
  return static_cast<int>(std::max<int64_t>(c, vec ? 4 : 1));
}

/// Threads per row and register cache. Warp rows while a lane's share fits the cache; else
/// the smallest block giving ≤ 8 values per thread; else 1024 threads, cached while half the
/// cache holds a thread's share.
RowPlan plan_rows(int64_t cols, int max_cache, bool streamed) {
  RowPlan p;
  p.vec = cols % 4 == 0;
  if (streamed) {
    p.threads = cols <= 1024 ? 32 : cols >= 16384 ? 1024 : cols >= 4096 ? 512 : 256;
    p.rows_per_block = p.threads == 32 ? 8 : 1;
    return p;
  }
  if (cache_for(cols, 32, p.vec) <= max_cache) {
    p.cache = cache_for(cols, 32, p.vec);
    return p;
  }
  p.rows_per_block = 1;
  for (int t : {128, 256, 512, 1024}) {
    if (cache_for(cols, t, p.vec) <= 8) {
      p.threads = t;
      p.cache = cache_for(cols, t, p.vec);
      return p;
    }
  }
  // 1024 threads leave a thread 64 registers: half the cache at most (a full one, 32 floats of
  // x alone, failed to launch: "too many resources requested"), else streamed.
  p.threads = 1024;
  p.cache = cache_for(cols, 1024, p.vec) <= max_cache / 2 ? cache_for(cols, 1024, p.vec) : 0;
  return p;
}

void set_launch(Launch& l, const RowPlan& p, int64_t rows) {
  if (p.threads == 32) {
    l.block[0] = static_cast<unsigned>(32 * p.rows_per_block);
    l.grid[0] = static_cast<unsigned>(std::max<int64_t>(ceil_div(rows, p.rows_per_block), 1));
  } else {
    l.block[0] = static_cast<unsigned>(p.threads);
    l.grid[0] = static_cast<unsigned>(std::max<int64_t>(rows, 1));
  }
}

std::string flit(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9ef", v);
  return buf;
}

/// Constants and the device helpers every row kernel shares.
std::string prelude(const std::string& what, const RowPlan& p, int64_t rows, int64_t cols) {
  std::string s = "// " + what + " (kernels_rows.cc)\n";
  s += "#define NEG_INF __int_as_float(0xff800000)\n#define NAN_F __int_as_float(0x7fffffff)\n";
  s += "#define LOWEST (-3.402823466e+38f)\n";
  s += "constexpr long long ROWS = " + std::to_string(rows) + "LL;\n";
  s += "constexpr int COLS = " + std::to_string(cols) + ";\n";
  s += "constexpr int P = " + std::to_string(p.threads) + ";  // threads per row\n";
  s += "constexpr int RPB = " + std::to_string(p.rows_per_block) + ";  // rows per block\n";
  s += "constexpr int CACHE = " + std::to_string(std::max(p.cache, 1)) + ";  // cached floats per thread\n";
  s += std::string("constexpr bool VEC = ") + (p.vec ? "true" : "false") + ";\n";
  s += kernel_source("rows.cuh", "helpers");
  return s;
}

/// The kernel entry of a cached row kernel with params (const float* a, [const float* b,]
/// float* y): picks the 16-byte instantiation of run<V> when every pointer allows it.
std::string cached_entry(const std::string& name, bool two_inputs, const std::string& extra_args = "",
                         const std::string& extra_params = "") {
  std::string s = "extern \"C\" __global__ void " + name + "(const float* __restrict__ x, ";
  if (two_inputs) s += "const float* __restrict__ dy, ";
  s += extra_params + "float* __restrict__ y) {\n";
  s += "  const long long row = row_index();\n  if (row >= ROWS) return;\n  const int tid = row_tid();\n";
  s += "  const long long o = row * COLS;\n";
  const std::string args =
      two_inputs ? "x + o, dy + o, y + o, tid" + extra_args : "x + o, y + o, tid" + extra_args;
  s += std::string("  if (VEC && aligned16(x) && aligned16(y)") + (two_inputs ? " && aligned16(dy)" : "") +
       ")\n";
  s += "    run<VEC ? 4 : 1>(" + args + ");\n  else\n    run<1>(" + args + ");\n}\n";
  return s;
}

std::string norm_kernel(const std::string& name, int64_t rows, int64_t cols, double eps, bool layer,
                        bool grad, const NormAffine& affine = {}) {
  const RowPlan p = plan_rows(cols, grad ? kMaxCacheGrad : kMaxCache, false);
  std::string s =
      prelude(std::string(layer ? "layer_norm" : "rms_norm") + (grad ? "_grad" : ""), p, rows, cols);
  s += "constexpr float EPS = " + flit(eps) + ";\n";
  s += std::string("constexpr bool LAYER = ") + (layer ? "true" : "false") + ";\n";
  // The forward's affine epilogue: y = x̂ · w + b (either part optional; params w, b always).
  s += std::string("constexpr bool AFF_W = ") + (affine.w ? "true" : "false") +
       ", AFF_B = " + (affine.b ? "true" : "false") + ";\n";
  const bool aff = affine.w || affine.b;
  const std::string aff_params = aff ? "const float* __restrict__ w, const float* __restrict__ b, " : "";
  if (p.cache > 0) {
    // Statistics from the cached row: mean (layer norm only), then the centred second moment.
    s += R"(
template <int V> __device__ __forceinline__ void stats(const float (&v)[CACHE], int tid, float& mean, float& rstd) {
  mean = 0.0f;
  if (LAYER) {
    float t = 0.0f;
#pragma unroll
    for (int k = 0; k < CACHE; ++k) t += v[k];
    mean = row_sum(t) / COLS;
  }
  float q = 0.0f;
#pragma unroll
  for (int k = 0; k < CACHE; ++k)
    if (col_of<V>(tid, k) < COLS) q += (v[k] - mean) * (v[k] - mean);
  rstd = rsqrtf(row_sum(q) / COLS + EPS);
}
)";
    if (!grad) {
      s += R"(
template <int V> __device__ __forceinline__ void run(const float* x, float* y, int tid, const float* w = nullptr,
                                                    const float* b = nullptr) {
  float v[CACHE];
  load_row<V>(x, tid, v);
  float mean, rstd;
  stats<V>(v, tid, mean, rstd);
#pragma unroll
  for (int k = 0; k < CACHE; ++k) {
    v[k] = (v[k] - mean) * rstd;
    const int c = col_of<V>(tid, k);
    if (AFF_W && c < COLS) v[k] *= __ldg(w + c);
    if (AFF_B && c < COLS) v[k] += __ldg(b + c);
  }
  store_row<V>(y, tid, v);
}
)";
    } else {
      // layer: dx = rstd (dy − mean(dy) − x̂ mean(dy x̂));  rms: dx = rstd (dy − x̂ mean(dy x̂)).
      s += R"(
template <int V> __device__ __forceinline__ void run(const float* x, const float* dy, float* y, int tid) {
  float v[CACHE], g[CACHE];
  load_row<V>(x, tid, v);
  load_row<V>(dy, tid, g);
  float mean, rstd;
  stats<V>(v, tid, mean, rstd);
  float sg = 0.0f, sgx = 0.0f;
#pragma unroll
  for (int k = 0; k < CACHE; ++k) {
    if (col_of<V>(tid, k) >= COLS) continue;
    sg += g[k];
    sgx += g[k] * (v[k] - mean) * rstd;
  }
  const float mg = LAYER ? row_sum(sg) / COLS : 0.0f, mgx = row_sum(sgx) / COLS;
#pragma unroll
  for (int k = 0; k < CACHE; ++k) v[k] = rstd * (g[k] - mg - (v[k] - mean) * rstd * mgx);
  store_row<V>(y, tid, v);
}
)";
    }
    s += grad || !aff ? cached_entry(name, grad) : cached_entry(name, false, ", w, b", aff_params);
  } else {
    // Streamed (rows beyond 1024 threads × the cache): plain strided passes over global memory.
    s += "extern \"C\" __global__ void " + name + "(const float* __restrict__ x, ";
    s += grad ? "const float* __restrict__ dy, float* __restrict__ y) {\n"
              : aff_params + "float* __restrict__ y) {\n";
    s += R"(  const long long row = row_index();
  if (row >= ROWS) return;
  const int tid = row_tid();
  x += row * COLS;
  y += row * COLS;
  float mean = 0.0f;
  if (LAYER) {
    float t = 0.0f;
    for (int c = tid; c < COLS; c += P) t += x[c];
    mean = row_sum(t) / COLS;
  }
  float q = 0.0f;
  for (int c = tid; c < COLS; c += P) q += (x[c] - mean) * (x[c] - mean);
  const float rstd = rsqrtf(row_sum(q) / COLS + EPS);
)";
    if (!grad) {
      s += "  for (int c = tid; c < COLS; c += P) {\n    float v = (x[c] - mean) * rstd;\n";
      if (aff) s += "    if (AFF_W) v *= __ldg(w + c);\n    if (AFF_B) v += __ldg(b + c);\n";
      s += "    y[c] = v;\n  }\n}\n";
    } else {
      s += R"(  dy += row * COLS;
  float sg = 0.0f, sgx = 0.0f;
  for (int c = tid; c < COLS; c += P) {
    sg += dy[c];
    sgx += dy[c] * (x[c] - mean) * rstd;
  }
  const float mg = LAYER ? row_sum(sg) / COLS : 0.0f, mgx = row_sum(sgx) / COLS;
  for (int c = tid; c < COLS; c += P) y[c] = rstd * (dy[c] - mg - (x[c] - mean) * rstd * mgx);
}
)";
    }
  }
  return s;
}

std::string ce_kernel(const std::string& name, int64_t rows, int64_t cols, int64_t ignore_index, bool grad,
                      int64_t logits_ld, int64_t dlogits_ld) {
  const RowPlan p = plan_rows(cols, kMaxCache, true);
  std::string s = prelude(grad ? "cross_entropy_grad" : "cross_entropy", p, rows, cols);
  s += "constexpr long long IGNORE = " + std::to_string(ignore_index) + "LL;\n";
  // Row strides (elements): rows may be padded apart, e.g. a vocabulary of 50257 laid out in
  // rows of 50304 so that the products around it stay aligned.
  s += "constexpr long long LD_IN = " + std::to_string(logits_ld) +
       "LL, LD_OUT = " + std::to_string(dlogits_ld) + "LL;\n";
  s += "extern \"C\" __global__ void " + name +
       "(const float* __restrict__ logits, const int* __restrict__ targets, ";
  s += grad ? "const float* __restrict__ dloss, float* __restrict__ dlogits, int* err) {\n"
            : "float* __restrict__ loss, int* err) {\n";
  s += R"(  const long long row = row_index();
  if (row >= ROWS) return;
  const int tid = row_tid();
  const int t = targets[row];
)";
  if (!grad) {
    s += R"(  if ((long long)t == IGNORE) {
    if (tid == 0) loss[row] = 0.0f;
    return;
  }
  if (t < 0 || t >= COLS) {
    if (tid == 0) {
      loss[row] = NAN_F;
      *err = 1;
    }
    return;
  }
)";
  } else {
    // The padding between rows is zeroed, so a product may read the rows LD_OUT wide (padded k).
    s += R"(  float* y = dlogits + row * LD_OUT;
  for (long long c = COLS + tid; c < LD_OUT; c += P) y[c] = 0.0f;
  if ((long long)t == IGNORE) {
    row_fill(y, tid, 0.0f);
    return;
  }
  if (t < 0 || t >= COLS) {
    row_fill(y, tid, NAN_F);
    if (tid == 0) *err = 1;
    return;
  }
)";
  }
  s += R"(  const float* x = logits + row * LD_IN;
  float m = LOWEST, s = 0.0f;
  row_scan(x, tid, [&](int, float v) { online(m, s, v); });
  row_pair(m, s);
  const float lse = m + logf(s);
)";
  if (!grad) {
    s += "  if (tid == 0) loss[row] = lse - x[t];\n}\n";
  } else {
    s += R"(  const float g = dloss[row];
  row_map(x, y, tid, [&](int c, float v) { return (expf(v - lse) - (c == t ? 1.0f : 0.0f)) * g; });
}
)";
  }
  return s;
}

/// Softmax over a strided middle axis ([outer, axis, inner], inner > 1): the 32 lanes own 32
/// consecutive (outer, inner) columns — consecutive addresses — and threadIdx.y = 0…7 splits
/// the axis; the eight online (max, Σexp) pairs of a column merge through shared memory in
/// threadIdx.y order, then each thread writes its share of the column.
std::string softmax_columns(const std::string& name, int64_t outer, int64_t axis, int64_t inner, bool log,
                            Launch& l) {
  const int64_t cols = outer * inner;
  l.block[0] = 32;
  l.block[1] = 8;
  l.grid[0] = static_cast<unsigned>(std::max<int64_t>(ceil_div(cols, 32), 1));
  RowPlan p;  // for the shared helpers only
  std::string s = prelude(log ? "log_softmax over a middle axis" : "softmax over a middle axis", p, 0, 0);
  s += "constexpr long long OUTER = " + std::to_string(outer) + "LL, AXIS = " + std::to_string(axis) +
       "LL, INNER = " + std::to_string(inner) + "LL;\n";
  s += std::string("constexpr bool LOG = ") + (log ? "true" : "false") + ";\n";
  s += "extern \"C\" __global__ void " + name + "(const float* __restrict__ in, float* __restrict__ out) {\n";
  s += R"(  const long long col = (long long)blockIdx.x * 32 + threadIdx.x;
  const bool ok = col < OUTER * INNER;
  const long long base = (col / INNER) * AXIS * INNER + col % INNER;
  float m = LOWEST, s = 0.0f;
  if (ok)
    for (long long j = threadIdx.y; j < AXIS; j += 8) online(m, s, in[base + j * INNER]);
  __shared__ float sm[8][32], ss[8][32];
  sm[threadIdx.y][threadIdx.x] = m;
  ss[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  m = sm[0][threadIdx.x];
  s = ss[0][threadIdx.x];
  for (int y = 1; y < 8; ++y) pair_merge(m, s, sm[y][threadIdx.x], ss[y][threadIdx.x]);
  if (!ok) return;
  const float lse = m + logf(s);
  for (long long j = threadIdx.y; j < AXIS; j += 8) {
    const float v = in[base + j * INNER];
    out[base + j * INNER] = LOG ? v - lse : expf(v - m) / s;
  }
}
)";
  return s;
}

}  // namespace

Launch softmax_kernel(const std::string& name, int64_t outer, int64_t axis, int64_t inner, bool log,
                      bool causal, int64_t t) {
  if (causal && inner != 1) throw Error("[cuda] softmax_kernel: causal needs inner == 1");
  if (causal && t <= 0) throw Error("[cuda] softmax_kernel: causal needs t > 0");
  Launch l;
  l.name = name;
  if (inner != 1) {
    l.source = softmax_columns(name, outer, axis, inner, log, l);
    return l;
  }
  const RowPlan p = plan_rows(axis, kMaxCache, false);
  set_launch(l, p, outer);
  std::string s = prelude(log ? "log_softmax" : "softmax", p, outer, axis);
  s += std::string("constexpr bool LOG = ") + (log ? "true" : "false") + ";\n";
  s += std::string("constexpr bool CAUSAL = ") + (causal ? "true" : "false") + ";\n";
  s += "constexpr long long T = " + std::to_string(causal ? t : 1) + "LL;\n";
  // Visible columns of a row: all, or (causal) j ≤ i + (COLS − T) for query i = row mod T.
  s += R"(
__device__ __forceinline__ int visible(long long row) {
  if (!CAUSAL) return COLS;
  const long long v = row % T + (COLS - T) + 1;
  return v < 0 ? 0 : v > COLS ? COLS : (int)v;
}
)";
  if (p.cache > 0) {
    s += R"(
template <int V> __device__ __forceinline__ void run(const float* x, float* y, int tid, int vis) {
  float v[CACHE];
  load_row<V>(x, tid, v);
  float m = NEG_INF;
#pragma unroll
  for (int k = 0; k < CACHE; ++k)
    if (col_of<V>(tid, k) < vis) m = fmaxf(m, v[k]);
  m = row_max(m);
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < CACHE; ++k) {
    if (col_of<V>(tid, k) >= vis) continue;
    v[k] -= m;
    const float e = expf(v[k]);
    s += e;
    if (!LOG) v[k] = e;
  }
  s = row_sum(s);
  const float ls = logf(s);
#pragma unroll
  for (int k = 0; k < CACHE; ++k) {
    const bool in = col_of<V>(tid, k) < vis;
    v[k] = LOG ? (in ? v[k] - ls : NEG_INF) : (in ? v[k] / s : 0.0f);
  }
  store_row<V>(y, tid, v);
}
)";
    s += cached_entry(name, false, ", visible(row)");
  } else {
    s += "extern \"C\" __global__ void " + name + "(const float* __restrict__ x, float* __restrict__ y) {\n";
    s += R"(  const long long row = row_index();
  if (row >= ROWS) return;
  const int tid = row_tid();
  x += row * COLS;
  y += row * COLS;
  const int vis = visible(row);
  float m = LOWEST, s = 0.0f;
  row_scan(x, tid, [&](int c, float v) {
    if (c < vis) online(m, s, v);
  });
  row_pair(m, s);
  const float lse = m + logf(s);
  row_map(x, y, tid, [&](int c, float v) { return LOG ? (c < vis ? v - lse : NEG_INF) : (c < vis ? expf(v - m) / s : 0.0f); });
}
)";
  }
  l.source = std::move(s);
  return l;
}

Launch cross_entropy_kernel(const std::string& name, int64_t rows, int64_t cols, int64_t ignore_index,
                            int64_t logits_ld) {
  Launch l;
  l.name = name;
  set_launch(l, plan_rows(cols, kMaxCache, true), rows);
  l.source = ce_kernel(name, rows, cols, ignore_index, false, logits_ld < 0 ? cols : logits_ld, cols);
  return l;
}

Launch cross_entropy_grad_kernel(const std::string& name, int64_t rows, int64_t cols, int64_t ignore_index,
                                 int64_t logits_ld, int64_t dlogits_ld) {
  Launch l;
  l.name = name;
  set_launch(l, plan_rows(cols, kMaxCache, true), rows);
  l.source = ce_kernel(name, rows, cols, ignore_index, true, logits_ld < 0 ? cols : logits_ld,
                       dlogits_ld < 0 ? cols : dlogits_ld);
  return l;
}

namespace {
Launch norm_launch(const std::string& name, int64_t rows, int64_t cols, double eps, bool layer, bool grad,
                   NormAffine affine = {}) {
  Launch l;
  l.name = name;
  set_launch(l, plan_rows(cols, grad ? kMaxCacheGrad : kMaxCache, false), rows);
  l.source = norm_kernel(name, rows, cols, eps, layer, grad, affine);
  return l;
}
}  // namespace

Launch layer_norm_kernel(const std::string& name, int64_t rows, int64_t cols, double eps, NormAffine affine) {
  return norm_launch(name, rows, cols, eps, true, false, affine);
}
Launch layer_norm_grad_kernel(const std::string& name, int64_t rows, int64_t cols, double eps) {
  return norm_launch(name, rows, cols, eps, true, true);
}
Launch rms_norm_kernel(const std::string& name, int64_t rows, int64_t cols, double eps, NormAffine affine) {
  return norm_launch(name, rows, cols, eps, false, false, affine);
}
Launch rms_norm_grad_kernel(const std::string& name, int64_t rows, int64_t cols, double eps) {
  return norm_launch(name, rows, cols, eps, false, true);
}

}  // namespace tg::backend::cuda
