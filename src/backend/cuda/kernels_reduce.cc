// CUDA kernel templates for reductions (Sum, Max, Min, Argmax), Gather, ScatterAdd, Random and
// Dropout; see kernels.h for the contract. Each function writes one kernel specialised to its
// node: shapes and strides are baked in as constants, so every index computation divides by
// compile-time constants (multiply-shift, no hardware division).
//
// Reductions pick one of three parallel schemes from the (simplified) layout:
//   - warp per output: the reduced elements of an output are innermost (stride 1) and there are
//     many outputs; the lanes of a warp read consecutive elements (float4/int4 when the run is
//     16-byte aligned) and combine through a shuffle tree;
//   - block per output: same layout but few, long outputs; 256 threads share one output, and
//     when even that leaves the GPU idle the reduced range is cut into chunks over blockIdx.y;
//   - column: the kept axes are innermost (bias gradient: [N, C] summed over N); the 32 lanes
//     of a warp own 32 consecutive outputs (coalesced loads) and blockDim.y = 8 splits the
//     reduced range, combined through shared memory; chunks over blockIdx.y as above.
// Chunked reductions stay deterministic: every chunk writes its partial to a __device__ array
// of the kernel's own module, and the last block to finish (a grid-wide counter) merges the
// partials of each output in chunk order, then resets the counter for the next launch. (Two
// concurrent launches of one loaded module would share that array; the executable loads one
// module per node and runs a node once at a time.)
//
// Device code in kernels/: the chunked reductions' end (reduce.cuh) and Philox (philox.cuh).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {

// Grid-stride kernels launch at most this many blocks of 256 threads (a million threads, more
// than any GPU holds at once); each thread then loops over the rest.
constexpr int64_t kMaxGrid = 4096;

const char* ctype(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kI32: return "int";
    case DType::kBool: return "unsigned char";
    case DType::kBF16:
    case DType::kF16: break;                // reductions read no bf16 or f16 (ir/graph.cc)
    case DType::kI8: return "signed char";  // copied by layout ops only
  }
  return "float";
}

unsigned grid_for(int64_t work, int64_t block) {
  return static_cast<unsigned>(std::clamp<int64_t>(ceil_div(work, block), 1, kMaxGrid));
}

struct Dim {
  int64_t size = 1, stride = 0;
};

/// Merges neighbours of `dims` (outer → inner) whose strides compose, so that a dense run
/// becomes one dimension; extent-1 dimensions must already be gone.
std::vector<Dim> merge_dims(const std::vector<Dim>& dims) {
  std::vector<Dim> out;
  for (const Dim& d : dims) {
    if (!out.empty() && out.back().stride == d.stride * d.size) {
      out.back().size *= d.size;
      out.back().stride = d.stride;
    } else {
      out.push_back(d);
    }
  }
  return out;
}

/// `long long NAME(long long i)`: the offset of flat index i over `dims` (outer → inner).
std::string offset_fn(const std::string& fn, const std::vector<Dim>& dims) {
  std::string s = "__device__ __forceinline__ long long " + fn + "(long long i) {\n  long long off = 0;\n";
  for (size_t k = dims.size(); k-- > 0;) {
    if (k == 0) {
      s += "  off += i * " + ll(dims[k].stride) + ";\n";
    } else {
      s += "  off += (i % " + ll(dims[k].size) + ") * " + ll(dims[k].stride) + ";\n";
      s += "  i /= " + ll(dims[k].size) + ";\n";
    }
  }
  return s + "  (void)i;\n  return off;\n}\n";
}

// ---- reductions ----------------------------------------------------------------------------

/// The device definitions of the accumulator `A` for `op` over inputs of type `T`:
/// init(), fold(a, x, r) (r = index along the reduced axis, for argmax), merge(a, b) (a's
/// elements come first), shfl(a, lane mask) and finish(a) → the output type `R`.
std::string accumulator(const std::string& op, DType t) {
  const bool f = t == DType::kF32;
  std::string s = std::string("typedef ") + ctype(t) + " T;\n";
  s += f ? "typedef float4 T4;\n" : "typedef int4 T4;\n";
  if (op == "argmax") {
    // Value and index; index −1 marks "nothing yet". A NaN loses to any number, two NaNs keep
    // the later index and equal values the earlier one: the reference's sequential rule
    // (first maximum, NaN ignored unless all are NaN, then the last index) as an associative
    // merge.
    s += "typedef int R;\nstruct A { T v; int i; };\n"
         "__device__ __forceinline__ A init() { A a; a.v = 0; a.i = -1; return a; }\n"
         "__device__ __forceinline__ A merge(A a, A b) {\n"
         "  if (a.i < 0) return b;\n  if (b.i < 0) return a;\n"
         "  const bool an = a.v != a.v, bn = b.v != b.v;\n"
         "  if (an && bn) return a.i > b.i ? a : b;\n"
         "  if (an) return b;\n  if (bn) return a;\n"
         "  if (a.v > b.v) return a;\n  if (b.v > a.v) return b;\n"
         "  return a.i < b.i ? a : b;\n}\n"
         "__device__ __forceinline__ A fold(A a, T x, long long r) { A b; b.v = x; b.i = (int)r; return "
         "merge(a, b); }\n"
         "__device__ __forceinline__ A shfl(A a, int m) {\n"
         "  a.v = __shfl_xor_sync(0xffffffffu, a.v, m);\n  a.i = __shfl_xor_sync(0xffffffffu, a.i, m);\n  "
         "return a;\n}\n"
         "__device__ __forceinline__ R finish(A a) { return a.i < 0 ? 0 : a.i; }\n";
    return s;
  }
  std::string acc = f ? "float" : (op == "sum" ? "unsigned int" : "int");
  s += "typedef T R;\ntypedef " + acc + " A;\n";
  std::string init, merge;
  if (op == "sum") {
    init = "0";
    merge = "a + b";  // i32: unsigned, so overflow wraps as on the CPU
  } else if (op == "max") {
    init = f ? "__int_as_float(0x7fffffff)" : "(-2147483647 - 1)";
    merge = f ? "fmaxf(a, b)" : "max(a, b)";  // fmaxf ignores a NaN unless both are: the reference's rule
  } else if (op == "min") {
    init = f ? "__int_as_float(0x7fffffff)" : "2147483647";
    merge = f ? "fminf(a, b)" : "min(a, b)";
  } else {
    throw Error("[cuda] reduce_kernel: unknown op '" + op + "'");
  }
  s += "__device__ __forceinline__ A init() { return " + init + "; }\n";
  s += "__device__ __forceinline__ A merge(A a, A b) { return " + merge + "; }\n";
  s += "__device__ __forceinline__ A fold(A a, T x, long long) { return merge(a, (A)x); }\n";
  s += "__device__ __forceinline__ A shfl(A a, int m) { return __shfl_xor_sync(0xffffffffu, a, m); }\n";
  s += "__device__ __forceinline__ R finish(A a) { return (R)a; }\n";
  return s;
}

/// Partials of chunked reductions: `parts` accumulators in a __device__ array of this module,
/// read back with __ldcg (L2, never a stale L1 line), plus the grid-wide arrival counter.
std::string partial_storage(const std::string& op, int64_t parts) {
  const std::string n = std::to_string(std::max<int64_t>(parts, 1));
  std::string s = "__device__ unsigned int g_done;\n";
  if (op == "argmax") {
    s += "__device__ T g_pv[" + n + "];\n__device__ int g_pi[" + n + "];\n";
    s += "__device__ __forceinline__ void store_part(long long q, A a) { g_pv[q] = a.v; g_pi[q] = a.i; }\n";
    s += "__device__ __forceinline__ A load_part(long long q) { A a; a.v = __ldcg(&g_pv[q]); a.i = "
         "__ldcg(&g_pi[q]); return a; }\n";
  } else {
    s += "__device__ A g_pv[" + n + "];\n";
    s += "__device__ __forceinline__ void store_part(long long q, A a) { g_pv[q] = a; }\n";
    s += "__device__ __forceinline__ A load_part(long long q) { return __ldcg(&g_pv[q]); }\n";
  }
  return s;
}

struct ReducePlan {
  std::vector<Dim> kept, red;  // simplified: kept in output order, reduced by falling stride
  int64_t outs = 1, count = 1;
};

ReducePlan plan_reduce(const Operand& in, const std::vector<int>& axes) {
  if (in.strides.size() != in.shape.size())
    throw Error("[cuda] reduce_kernel: strides do not match the shape");
  ReducePlan p;
  std::vector<Dim> kept, red;
  for (size_t i = 0; i < in.shape.size(); ++i) {
    const bool reduced = std::find(axes.begin(), axes.end(), static_cast<int>(i)) != axes.end();
    if (reduced)
      p.count *= in.shape[i];
    else
      p.outs *= in.shape[i];
    if (in.shape[i] == 1) continue;
    (reduced ? red : kept).push_back({in.shape[i], in.strides[i]});
  }
  // The order in which an output's elements are visited is free (argmax has one axis), so
  // visit them innermost-stride last: that is what makes a run contiguous.
  std::stable_sort(red.begin(), red.end(), [](const Dim& a, const Dim& b) { return a.stride > b.stride; });
  p.kept = merge_dims(kept);
  p.red = merge_dims(red);
  return p;
}

/// Warp per output (or block per output, chunked): the reduced run is the fast axis.
std::string row_kernel_body(bool block, int threads, int64_t chunk, bool vec) {
  std::string s;
  if (!block) {
    s += "  const long long o = (long long)blockIdx.x * " + std::to_string(threads / 32) +
         " + (threadIdx.x >> 5);\n";
    s += "  if (o >= OUTS) return;\n  const int t = threadIdx.x & 31;\n  const int nt = 32;\n";
    s += "  const long long r0 = 0, r1 = COUNT;\n";
  } else {
    s += "  const long long o = blockIdx.x;\n  const int t = threadIdx.x;\n  const int nt = " +
         std::to_string(threads) + ";\n";
    s += "  const long long r0 = (long long)blockIdx.y * " + ll(chunk) + ";\n";
    s += "  const long long r1 = min(COUNT, r0 + " + ll(chunk) + ");\n";
  }
  s += "  const T* base = in + kept_off(o);\n  A a = init();\n";
  if (vec) {
    // One contiguous run whose start is 16-byte aligned when the base pointer is (kept
    // strides and chunk starts are multiples of 4): 4-wide loads.
    s += "  if ((((unsigned long long)base) & 15) == 0) {\n"
         "    const T4* b4 = (const T4*)(base + r0);\n"
         "    const long long n4 = (r1 - r0) >> 2;\n"
         "    A a1 = init(), a2 = init(), a3 = init();  // one accumulator per lane of the vector: four "
         "chains\n"
         "#pragma unroll 4\n"
         "    for (long long k = t; k < n4; k += nt) {\n"
         "      const T4 q = b4[k];\n      const long long r = r0 + 4 * k;\n"
         "      a = fold(a, q.x, r);\n      a1 = fold(a1, q.y, r + 1);\n      a2 = fold(a2, q.z, r + 2);\n   "
         "   a3 = fold(a3, q.w, r + 3);\n"
         "    }\n"
         "    a = merge(merge(a, a1), merge(a2, a3));\n"
         "    for (long long r = r0 + 4 * n4 + t; r < r1; r += nt) a = fold(a, base[r], r);\n"
         "  } else {\n"
         "    for (long long r = r0 + t; r < r1; r += nt) a = fold(a, base[r], r);\n"
         "  }\n";
  } else {
    s +=
        "#pragma unroll 4\n  for (long long r = r0 + t; r < r1; r += nt) a = fold(a, base[red_off(r)], r);\n";
  }
  s += "  for (int m = 16; m > 0; m >>= 1) a = merge(a, shfl(a, m));\n";
  if (!block) return s + "  if (t == 0) out[o] = finish(a);\n";
  // Warps' results in warp order through shared memory; every warp merges them identically.
  s += "  __shared__ A warps[" + std::to_string(threads / 32) + "];\n";
  s += "  if ((t & 31) == 0) warps[t >> 5] = a;\n  __syncthreads();\n";
  s += "  if (t == 0) {\n    a = warps[0];\n    for (int w = 1; w < " + std::to_string(threads / 32) +
       "; ++w) a = merge(a, warps[w]);\n";
  s += "    if (CHUNKS == 1) out[o] = finish(a);\n    else store_part((long long)blockIdx.y * OUTS + o, "
       "a);\n  }\n";
  s += "  if (CHUNKS > 1) finish_chunks(out);\n";
  return s;
}

/// Column scheme: lanes own consecutive outputs, threadIdx.y splits the reduced range.
std::string column_kernel_body(int64_t chunk) {
  std::string s;
  s += "  const long long o = (long long)blockIdx.x * 32 + threadIdx.x;\n";
  s += "  const long long r0 = (long long)blockIdx.y * " + ll(chunk) + ";\n";
  s += "  const long long r1 = min(COUNT, r0 + " + ll(chunk) + ");\n";
  s += "  A a = init();\n";
  s += "  if (o < OUTS) {\n    const T* base = in + kept_off(o);\n";
  s += "#pragma unroll 4\n    for (long long r = r0 + threadIdx.y; r < r1; r += 8) a = fold(a, "
       "base[red_off(r)], r);\n  }\n";
  s += "  __shared__ A rows[8][32];\n  rows[threadIdx.y][threadIdx.x] = a;\n  __syncthreads();\n";
  s += "  if (threadIdx.y == 0 && o < OUTS) {\n";
  s += "    for (int y = 1; y < 8; ++y) a = merge(a, rows[y][threadIdx.x]);\n";
  s += "    if (CHUNKS == 1) out[o] = finish(a);\n    else store_part((long long)blockIdx.y * OUTS + o, "
       "a);\n  }\n";
  s += "  if (CHUNKS > 1) finish_chunks(out);\n";
  return s;
}

}  // namespace

Launch reduce_kernel(const std::string& name, const std::string& op, const Operand& in,
                     const std::vector<int>& axes, const DeviceInfo& dev) {
  if (in.dtype != DType::kF32 && in.dtype != DType::kI32)
    throw Error("[cuda] reduce_kernel: f32 or i32 input only");
  const ReducePlan p = plan_reduce(in, axes);
  // Enough blocks to fill the device: four per SM.
  const int64_t target_blocks = 4 * static_cast<int64_t>(dev.sm_count);
  Launch l;
  l.name = name;

  // Which axis is fast in memory decides between the row schemes and the column scheme.
  const bool has_red = !p.red.empty();
  const int64_t red_inner = has_red ? p.red.back().stride : 0;
  const int64_t kept_inner = p.kept.empty() ? 0 : p.kept.back().stride;
  const bool row =
      has_red && (p.kept.empty() || red_inner == 1 || (kept_inner != 1 && red_inner < kept_inner));

  int64_t chunks = 1, chunk = std::max<int64_t>(p.count, 1);
  std::string body;
  if (row) {
    const bool contiguous = p.red.size() == 1 && red_inner == 1;
    bool kept_aligned = true;
    for (const Dim& d : p.kept) kept_aligned = kept_aligned && d.stride % 4 == 0;
    // A warp per output when the outputs' warps alone fill every SM's threads.
    const bool warp =
        p.count <= 1024 || p.outs * 32 >= static_cast<int64_t>(dev.sm_count) * dev.threads_per_sm;
    if (warp) {
      const bool vec = contiguous && p.count % 4 == 0 && kept_aligned;
      body = row_kernel_body(false, 256, chunk, vec);
      l.block[0] = 256;
      l.grid[0] = static_cast<unsigned>(std::max<int64_t>(ceil_div(p.outs, 8), 1));
    } else {
      if (p.outs < target_blocks) {
        chunks = std::clamp<int64_t>(ceil_div(target_blocks, p.outs), 1, ceil_div(p.count, 4096));
        chunk = (ceil_div(p.count, chunks) + 3) / 4 * 4;  // chunk starts stay 16-byte aligned
        chunks = ceil_div(p.count, chunk);
      }
      const bool vec = contiguous && kept_aligned && (chunks == 1 || chunk % 4 == 0);
      body = row_kernel_body(true, 256, chunk, vec);
      l.block[0] = 256;
      l.grid[0] = static_cast<unsigned>(std::max<int64_t>(p.outs, 1));
      l.grid[1] = static_cast<unsigned>(chunks);
    }
  } else {
    const int64_t gx = std::max<int64_t>(ceil_div(p.outs, 32), 1);
    if (gx < target_blocks) {
      chunks =
          std::clamp<int64_t>(ceil_div(target_blocks, gx), 1, std::max<int64_t>(ceil_div(p.count, 256), 1));
      chunk = ceil_div(std::max<int64_t>(p.count, 1), chunks);
      chunks = ceil_div(std::max<int64_t>(p.count, 1), chunk);
    }
    body = column_kernel_body(chunk);
    l.block[0] = 32;
    l.block[1] = 8;
    l.grid[0] = static_cast<unsigned>(gx);
    l.grid[1] = static_cast<unsigned>(chunks);
  }

  std::string s = "// " + op + " reduction (kernels_reduce.cc), " + (row ? "row" : "column") + " scheme\n";
  s += "constexpr long long OUTS = " + ll(p.outs) + ", COUNT = " + ll(p.count) + ";\n";
  s += "constexpr int CHUNKS = " + std::to_string(chunks) + ";\n";
  s += accumulator(op, in.dtype);
  s += partial_storage(op, chunks > 1 ? chunks * p.outs : 1);
  s += kernel_source("reduce.cuh", "finish_chunks");
  s += offset_fn("kept_off", p.kept);
  s += offset_fn("red_off", p.red);
  s += "extern \"C\" __global__ void " + name + "(const T* __restrict__ in, R* __restrict__ out) {\n" + body +
       "}\n";
  l.source = std::move(s);
  return l;
}

// ---- gather / scatter_add ------------------------------------------------------------------

namespace {

void check_operand(const Operand& op, const char* what) {
  if (op.strides.size() != op.shape.size())
    throw Error(std::string("[cuda] ") + what + ": strides do not match the shape");
}

/// Statements decomposing `var` (a flat index over `shape`, consumed) into coordinates,
/// adding coordinate·stride to each offset of `targets` (name, strides); the coordinate on
/// `axis` goes to `axis_var` instead (when not empty), and axes of extent 1 are skipped.
std::string decompose(const std::string& var, const Shape& shape, int axis, const std::string& axis_var,
                      const std::vector<std::pair<std::string, std::vector<int64_t>>>& targets) {
  std::string s;
  for (size_t k = shape.size(); k-- > 0;) {
    if (shape[k] == 1) continue;
    s += "    { const long long c = " + var + " % " + ll(shape[k]) + "; " + var + " /= " + ll(shape[k]) + ";";
    if (static_cast<int>(k) == axis) {
      if (!axis_var.empty()) s += " " + axis_var + " = c;";
    } else {
      for (const auto& [off, st] : targets)
        if (st[k] != 0) s += " " + off + " += c * " + ll(st[k]) + ";";
    }
    s += " }\n";
  }
  return s;
}

std::vector<int64_t> dense_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

}  // namespace

// One thread per output element (grid-stride): coordinates from the constant shape, the index
// read through idx's strides (a broadcast idx, as in an embedding lookup, hits the same word
// across the row, served from L1), then the element of x. Consecutive threads write
// consecutive outputs and, along a contiguous axis of x, read consecutive elements.
Launch gather_kernel(const std::string& name, const Operand& x, const Operand& idx, int axis) {
  check_operand(x, "gather_kernel");
  check_operand(idx, "gather_kernel");
  const int64_t n = numel(idx.shape);
  const auto ax = static_cast<size_t>(axis);
  Launch l;
  l.name = name;
  l.block[0] = 256;
  l.grid[0] = grid_for(n, 256);
  std::string s = "// gather along axis " + std::to_string(axis) + " (kernels_reduce.cc)\n";
  // Moves bits only: a bf16 or f16 table (a half-stored embedding) gathers as 16-bit words.
  s += std::string("typedef ") + (is_half(x.dtype) ? "unsigned short" : ctype(x.dtype)) + " T;\n";
  s += "extern \"C\" __global__ void " + name +
       "(const T* __restrict__ x, const int* __restrict__ idx, T* __restrict__ out, int* err) {\n";
  s += "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < " + ll(n) +
       "; i += (long long)gridDim.x * blockDim.x) {\n";
  s += "    long long rest = i, xo = 0, io = 0;\n";
  // The axis coordinate still moves idx (its own strides); x's comes from the index value.
  std::vector<int64_t> xs = x.strides;
  xs[ax] = 0;
  s += decompose("rest", idx.shape, -1, "", {{"xo", xs}, {"io", idx.strides}});
  s += "    const int v = idx[io];\n";
  s += "    if (v < 0 || v >= " + std::to_string(x.shape[ax]) + ") { *err = 1; out[i] = T(); continue; }\n";
  s += "    out[i] = x[xo + (long long)v * " + ll(x.strides[ax]) + "];\n  }\n}\n";
  l.source = std::move(s);
  return l;
}

namespace {

/// update_slice_kernel (in_place false: one thread per element of the result, from src in
/// the rows [p, p + len) of the axis, else from dst) and update_rows_kernel (in_place: one
/// thread per element of src, written into dst's rows). p: the offset of the element's row.
Launch update_kernel(const std::string& name, const Operand& dst, const Operand& src, const Operand& pos,
                     int axis, bool in_place, const Operand* src2 = nullptr) {
  const bool pair = src2 != nullptr;
  check_operand(dst, "update_slice_kernel");
  check_operand(src, "update_slice_kernel");
  const Operand& walked = in_place ? src : dst;
  const int64_t n = numel(walked.shape), len = src.shape[static_cast<size_t>(axis)];
  const auto ax = static_cast<size_t>(axis);
  Launch l;
  l.name = name;
  l.block[0] = 256;
  l.grid[0] = grid_for(std::max<int64_t>(n, 1), 256);
  std::string s = std::string("// update_slice") + (in_place ? " in place" : "") + " along axis " +
                  std::to_string(axis) + " (kernels_reduce.cc)\n";
  s += std::string("typedef ") + ctype(dst.dtype) + " T;\n";
  s += "extern \"C\" __global__ void " + name +
       (in_place
            ? std::string("(const T* __restrict__ src, const int* __restrict__ pos, T* __restrict__ dst, ") +
                  (pair ? "const T* __restrict__ src2, T* __restrict__ dst2, " : "") + "int* err) {\n"
            : "(const T* __restrict__ dst, const T* __restrict__ src, const int* __restrict__ pos, T* "
              "__restrict__ out, int* err) {\n");
  s += "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < " + ll(n) +
       "; i += (long long)gridDim.x * blockDim.x) {\n";
  // ca: the element's coordinate on the axis; every other coordinate moves dst and src alike.
  s += std::string("    long long rest = i, d_off = 0, s_off = 0, ") + (pair ? "s2_off = 0, " : "") +
       "ca = 0;\n";
  std::vector<int64_t> ds = dst.strides, ss = src.strides, ss2 = pair ? src2->strides : src.strides;
  ds[ax] = ss[ax] = ss2[ax] = 0;
  s += decompose(
      "rest", walked.shape, axis, "ca",
      pair ? std::vector<std::pair<std::string, std::vector<int64_t>>>{{"d_off", ds},
                                                                       {"s_off", ss},
                                                                       {"s2_off", ss2}}
           : std::vector<std::pair<std::string, std::vector<int64_t>>>{{"d_off", ds}, {"s_off", ss}});
  if (!pos.shape.empty())
    s += "    const long long row = i / " + ll(n / std::max<int64_t>(walked.shape[0], 1)) + ";\n";
  s += "    const int p = pos[" + (pos.shape.empty() ? std::string("0") : "row * " + ll(pos.strides[0])) +
       "];\n";
  s += "    const bool bad = p < 0 || p + " + ll(len) + " > " + ll(dst.shape[ax]) + ";\n";
  s += "    if (bad) *err = 1;\n";
  if (in_place) {
    s += "    if (!bad) dst[d_off + (p + ca) * " + ll(dst.strides[ax]) + "] = src[s_off + ca * " +
         ll(src.strides[ax]) + "];\n";
    if (pair)
      s += "    if (!bad) dst2[d_off + (p + ca) * " + ll(dst.strides[ax]) + "] = src2[s2_off + ca * " +
           ll(src2->strides[ax]) + "];\n";
  } else {
    s += "    const T old = dst[d_off + ca * " + ll(dst.strides[ax]) + "];\n";
    s += "    out[i] = !bad && ca >= p && ca < p + " + ll(len) + " ? src[s_off + (ca - p) * " +
         ll(src.strides[ax]) + "] : old;\n";
  }
  s += "  }\n}\n";
  l.source = std::move(s);
  return l;
}

}  // namespace

Launch update_slice_kernel(const std::string& name, const Operand& dst, const Operand& src,
                           const Operand& pos, int axis) {
  return update_kernel(name, dst, src, pos, axis, false);
}

Launch update_rows_kernel(const std::string& name, const Operand& dst, const Operand& src, const Operand& pos,
                          int axis, const Operand* src2) {
  return update_kernel(name, dst, src, pos, axis, true, src2);
}

// Two schemes. Column (deterministic, no atomics): one thread per position of the non-scatter
// axes walks the scatter axis in order, so each output element is summed by one thread in a
// fixed order; used when there are enough such positions to fill the GPU or the walk is short.
// Atomic: one thread per source element, atomicAdd into out — for few, long walks (embedding
// backward: [tokens, C] into [vocab, C] along axis 0). Integer sums are exact either way; f32
// sums from the atomic scheme are added in an order that can change from run to run.
Launch scatter_add_kernel(const std::string& name, const Operand& src, const Operand& idx,
                          const Shape& out_shape, int axis) {
  check_operand(src, "scatter_add_kernel");
  check_operand(idx, "scatter_add_kernel");
  const auto ax = static_cast<size_t>(axis);
  const int64_t walk = src.shape[ax], positions = walk == 0 ? 0 : numel(src.shape) / walk;
  const std::vector<int64_t> ost = dense_strides(out_shape);
  const bool column = positions >= 16384 || walk <= 16;
  Launch l;
  l.name = name;
  l.block[0] = 256;
  std::string s = "// scatter_add along axis " + std::to_string(axis) + " (kernels_reduce.cc), " +
                  (column ? "column scheme (deterministic)" : "atomic scheme") + "\n";
  s += std::string("typedef ") + ctype(src.dtype) + " T;\n";
  s += "extern \"C\" __global__ void " + name +
       "(const T* __restrict__ src, const int* __restrict__ idx, T* __restrict__ out, int* err) {\n";
  const std::string range = std::to_string(out_shape[ax]);
  if (column) {
    l.grid[0] = grid_for(positions, 256);
    Shape rest_shape = src.shape;
    rest_shape[ax] = 1;  // decompose the position over the other axes
    s += "  for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < " + ll(positions) +
         "; p += (long long)gridDim.x * blockDim.x) {\n";
    s += "    long long rest = p, so = 0, io = 0, oo = 0;\n";
    s += decompose("rest", rest_shape, -1, "", {{"so", src.strides}, {"io", idx.strides}, {"oo", ost}});
    s += "    for (long long n = 0; n < " + ll(walk) + "; ++n) {\n";
    s += "      const int v = idx[io + n * " + ll(idx.strides[ax]) + "];\n";
    s += "      if (v < 0 || v >= " + range + ") { *err = 1; continue; }\n";
    s += "      out[oo + (long long)v * " + ll(ost[ax]) + "] += src[so + n * " + ll(src.strides[ax]) + "];\n";
    s += "    }\n  }\n}\n";
  } else {
    const int64_t n = numel(src.shape);
    l.grid[0] = grid_for(n, 256);
    s += "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < " + ll(n) +
         "; i += (long long)gridDim.x * blockDim.x) {\n";
    s += "    long long rest = i, so = 0, io = 0, oo = 0;\n";
    std::vector<int64_t> ost_no_axis = ost;
    ost_no_axis[ax] = 0;
    s +=
        decompose("rest", src.shape, -1, "", {{"so", src.strides}, {"io", idx.strides}, {"oo", ost_no_axis}});
    s += "    const int v = idx[io];\n";
    s += "    if (v < 0 || v >= " + range + ") { *err = 1; continue; }\n";
    s += "    atomicAdd(&out[oo + (long long)v * " + ll(ost[ax]) + "], src[so]);\n  }\n}\n";
  }
  l.source = std::move(s);
  return l;
}

// ---- randomness ----------------------------------------------------------------------------

std::string philox_source(uint64_t seed) {
  std::string s(kernel_source("philox.cuh", "philox"));
  const auto replace = [&s](const std::string& from, const std::string& to) {
    s.replace(s.find(from), from.size(), to);
  };
  replace("SEED_LO", std::to_string(static_cast<uint32_t>(seed)) + "u");
  replace("SEED_HI", std::to_string(static_cast<uint32_t>(seed >> 32)) + "u");
  return s;
}

// One thread per Philox block, i.e. per four consecutive elements (the block's four words),
// grid-stride; a 16-byte store when all four are in range.
Launch random_kernel(const std::string& name, int64_t numel, uint64_t seed) {
  const int64_t blocks = ceil_div(numel, 4);
  Launch l;
  l.name = name;
  l.block[0] = 256;
  l.grid[0] = grid_for(blocks, 256);
  std::string s = "// random uniform [0, 1) (kernels_reduce.cc)\n" + philox_source(seed);
  s += "extern \"C\" __global__ void " + name + "(const int* __restrict__ key, float* __restrict__ out) {\n";
  s += "  const unsigned int k = (unsigned int)key[0];\n";
  s += "  const bool aligned = (((unsigned long long)out) & 15) == 0;\n";
  s += "  for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < " + ll(blocks) +
       "; b += (long long)gridDim.x * blockDim.x) {\n";
  s += "    const uint4 w = philox_block((unsigned long long)b, k);\n";
  s += "    const long long i = 4 * b;\n";
  s += "    if (aligned && i + 3 < " + ll(numel) + ") {\n";
  s += "      *(float4*)(out + i) = make_float4(to_uniform(w.x), to_uniform(w.y), to_uniform(w.z), "
       "to_uniform(w.w));\n";
  s += "    } else {\n      const unsigned int ws[4] = {w.x, w.y, w.z, w.w};\n";
  s += "      for (int j = 0; j < 4 && i + j < " + ll(numel) +
       "; ++j) out[i + j] = to_uniform(ws[j]);\n    }\n  }\n}\n";
  l.source = std::move(s);
  return l;
}

// As random_kernel: one thread per four elements. The keep test is done on the integer
// (word >> 8) ≥ ⌈p·2²⁴⌉, which is exactly u ≥ p for u = (word >> 8)·2⁻²⁴ — no rounding of p.
// x may be any view: its offsets come from the constant strides; 16-byte loads when dense.
Launch dropout_kernel(const std::string& name, const Operand& x, double p, uint64_t seed) {
  check_operand(x, "dropout_kernel");
  const int64_t count = numel(x.shape);
  const int64_t blocks = ceil_div(count, 4);
  const bool dense = x.strides == dense_strides(x.shape);
  const double t = std::clamp(std::ceil(p * 16777216.0), 0.0, 16777216.0);
  char scale[64];
  std::snprintf(scale, sizeof scale, "%.9ef", p < 1 ? 1.0 / (1.0 - p) : 0.0);
  Launch l;
  l.name = name;
  l.block[0] = 256;
  l.grid[0] = grid_for(blocks, 256);
  std::string s = "// dropout (kernels_reduce.cc)\n" + philox_source(seed);
  s += "constexpr unsigned int THRESHOLD = " + std::to_string(static_cast<uint32_t>(t)) + "u;\n";
  s += std::string("constexpr float SCALE = ") + scale + ";\n";
  s += "__device__ __forceinline__ float drop(float v, unsigned int w) { return (w >> 8) >= THRESHOLD ? v * "
       "SCALE : 0.0f; }\n";
  std::vector<Dim> dims;
  for (size_t i = 0; i < x.shape.size(); ++i) dims.push_back({x.shape[i], x.strides[i]});
  s += offset_fn("x_off", dims);
  s += "extern \"C\" __global__ void " + name +
       "(const float* __restrict__ x, const int* __restrict__ key, float* __restrict__ out) {\n";
  s += "  const unsigned int k = (unsigned int)key[0];\n";
  s += std::string("  const bool vec = ") + (dense ? "true" : "false") +
       " && ((((unsigned long long)out) | ((unsigned long long)x)) & 15) == 0;\n";
  s += "  for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < " + ll(blocks) +
       "; b += (long long)gridDim.x * blockDim.x) {\n";
  s += "    const uint4 w = philox_block((unsigned long long)b, k);\n";
  s += "    const long long i = 4 * b;\n";
  s += "    if (vec && i + 3 < " + ll(count) + ") {\n";
  s += "      const float4 v = *(const float4*)(x + i);\n";
  s += "      *(float4*)(out + i) = make_float4(drop(v.x, w.x), drop(v.y, w.y), drop(v.z, w.z), drop(v.w, "
       "w.w));\n";
  s += "    } else {\n      const unsigned int ws[4] = {w.x, w.y, w.z, w.w};\n";
  s += "      for (int j = 0; j < 4 && i + j < " + ll(count) +
       "; ++j) out[i + j] = drop(x[x_off(i + j)], ws[j]);\n";
  s += "    }\n  }\n}\n";
  l.source = std::move(s);
  return l;
}

}  // namespace tg::backend::cuda
