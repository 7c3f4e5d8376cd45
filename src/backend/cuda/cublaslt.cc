// cuBLASLt loaded at run time and the product planner (see cublaslt.h).
#include "backend/cuda/cublaslt.h"

#include <dlfcn.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensorgrad/errors.h"
#include "util/switches.h"

namespace tg::backend::cuda {
namespace {

using Status = int;
using Handle = void*;
constexpr int kR32F = 0, kR16F = 2, kR16BF = 14;  // CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF
constexpr int kCompute32F = 68, kCompute32FTf32 = 77,
              kCompute32FBf16x9 = 78;  // CUBLAS_COMPUTE_32F(_FAST_TF32, _EMULATED_16BFX9)
constexpr int kOpN = 0, kOpT = 1;
constexpr int kDescTransA = 3, kDescTransB = 4;  // CUBLASLT_MATMUL_DESC_TRANSA/B
constexpr int kLayoutBatchCount = 5, kLayoutBatchStride = 6;
constexpr int kPrefMaxWorkspace = 1;
constexpr int kDescEpilogue = 7, kDescBiasPointer = 8;  // CUBLASLT_MATMUL_DESC_EPILOGUE / _BIAS_POINTER
constexpr uint32_t kEpilogueBias = 4;                   // CUBLASLT_EPILOGUE_BIAS

struct HeuristicResult {  // cublasLtMatmulHeuristicResult_t
  uint64_t algo[8];
  size_t workspace_size;
  Status state;
  float waves;
  int reserved[4];
};

struct Lt {
  Status (*create)(Handle*);
  Status (*desc_create)(void**, int, int);
  Status (*desc_destroy)(void*);
  Status (*desc_set)(void*, int, const void*, size_t);
  Status (*layout_create)(void**, int, uint64_t, uint64_t, int64_t);
  Status (*layout_destroy)(void*);
  Status (*layout_set)(void*, int, const void*, size_t);
  Status (*pref_create)(void**);
  Status (*pref_destroy)(void*);
  Status (*pref_set)(void*, int, const void*, size_t);
  Status (*heuristic)(Handle, void*, void*, void*, void*, void*, void*, int, HeuristicResult*, int*);
  Status (*matmul)(Handle, void*, const void*, const void*, void*, const void*, void*, const void*,
                   const void*, void*, void*, void*, const void*, void*, size_t, CUstream);
  Handle handle = nullptr;
  std::string error;
};

template <class F>
bool bind(void* lib, F& fn, const char* symbol, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(lib, symbol));
  if (!fn && error.empty()) error = std::string("libcublasLt has no ") + symbol;
  return fn != nullptr;
}

const Lt& lt() {
  static const Lt loaded = [] {
    Lt l{};
    void* lib = nullptr;
    std::string tried;
    for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
      tried += (tried.empty() ? "" : ", ") + std::string(name);
    }
    if (!lib) {
      l.error = "cuBLASLt is not installed (tried " + tried + ")";
      return l;
    }
    bind(lib, l.create, "cublasLtCreate", l.error);
    bind(lib, l.desc_create, "cublasLtMatmulDescCreate", l.error);
    bind(lib, l.desc_destroy, "cublasLtMatmulDescDestroy", l.error);
    bind(lib, l.desc_set, "cublasLtMatmulDescSetAttribute", l.error);
    bind(lib, l.layout_create, "cublasLtMatrixLayoutCreate", l.error);
    bind(lib, l.layout_destroy, "cublasLtMatrixLayoutDestroy", l.error);
    bind(lib, l.layout_set, "cublasLtMatrixLayoutSetAttribute", l.error);
    bind(lib, l.pref_create, "cublasLtMatmulPreferenceCreate", l.error);
    bind(lib, l.pref_destroy, "cublasLtMatmulPreferenceDestroy", l.error);
    bind(lib, l.pref_set, "cublasLtMatmulPreferenceSetAttribute", l.error);
    bind(lib, l.heuristic, "cublasLtMatmulAlgoGetHeuristic", l.error);
    bind(lib, l.matmul, "cublasLtMatmul", l.error);
    if (l.error.empty() && l.create(&l.handle) != 0) l.error = "cublasLtCreate failed";
    return l;
  }();
  return loaded;
}

const Lt& lt_checked() {
  const Lt& l = lt();
  if (!l.error.empty()) throw DeviceError("[cuda] " + l.error);
  return l;
}

void ok(Status s, const char* what) {
  if (s != 0)
    throw DeviceError(std::string("[cuda] ") + what + " failed with cuBLAS status " + std::to_string(s));
}

/// The column-major view of the transpose of row-major `op`: (rows, cols, ld) of the layout
/// cuBLASLt reads and whether it must apply op T to get opᵀ.
struct ColMajor {
  int64_t rows, cols, ld;
  int op;
};
ColMajor transposed_view(const MatOperand& x) {
  // Row-major x[r][c] with unit column stride is column-major xᵀ (c × r, ld = row stride).
  if (x.col_stride == 1 || x.cols == 1)
    return {x.cols, x.rows, std::max<int64_t>(x.row_stride, x.cols), kOpN};
  // Unit row stride: x itself is column-major (r × c, ld = column stride); op T gives xᵀ.
  return {x.rows, x.cols, std::max<int64_t>(x.col_stride, x.rows), kOpT};
}

}  // namespace

std::string cublaslt_unavailable_reason() { return lt().error; }

bool lt_readable(const MatOperand& x) {
  if (x.col_stride == 1 || x.cols == 1) return x.rows == 1 || x.row_stride >= x.cols;
  if (x.row_stride == 1 || x.rows == 1) return x.cols == 1 || x.col_stride >= x.rows;
  return false;
}

LtMatmul::LtMatmul(int64_t batch, int64_t m, int64_t n, int64_t k, const MatOperand& a, const MatOperand& b,
                   MathMode mode, size_t workspace_bytes, bool with_bias, int64_t out_row_stride,
                   DType operands)
    : flops_(2 * batch * m * n * k), bias_(with_bias) {
  const Lt& l = lt_checked();
  if (!lt_readable(a) || !lt_readable(b)) throw Error("[cuda] matmul operand layout cuBLASLt cannot read");
  if (operands != DType::kF32 && !is_half(operands))
    throw Error(std::string("[cuda] cuBLASLt products of ") + dtype_name(operands) + " operands");
  const bool half = is_half(operands);
  // bf16 or f16 operands: exact products accumulated in f32 (CUDA_R_16BF or CUDA_R_16F A and
  // B, CUDA_R_32F C and D).
  const int compute = half                        ? kCompute32F
                      : mode == MathMode::kTf32   ? kCompute32FTf32
                      : mode == MathMode::kBf16x9 ? kCompute32FBf16x9
                                                  : kCompute32F;
  const int ab_type = operands == DType::kBF16 ? kR16BF : operands == DType::kF16 ? kR16F : kR32F;
  ok(l.desc_create(&desc_, compute, kR32F), "cublasLtMatmulDescCreate");
  // Cᵀ (n × m) = bᵀ (n × k) · aᵀ (k × m).
  const ColMajor lb = transposed_view(b), la = transposed_view(a);
  ok(l.desc_set(desc_, kDescTransA, &lb.op, sizeof(int)), "cublasLtMatmulDescSetAttribute");
  ok(l.desc_set(desc_, kDescTransB, &la.op, sizeof(int)), "cublasLtMatmulDescSetAttribute");
  if (with_bias) {
    // Column-major D is n × m: a bias of n entries, one per row of D = per column of ours.
    ok(l.desc_set(desc_, kDescEpilogue, &kEpilogueBias, sizeof(kEpilogueBias)),
       "cublasLtMatmulDescSetAttribute");
    const void* placeholder = reinterpret_cast<const void*>(uintptr_t{256});
    ok(l.desc_set(desc_, kDescBiasPointer, &placeholder, sizeof(placeholder)),
       "cublasLtMatmulDescSetAttribute");
  }
  ok(l.layout_create(&layout_[0], ab_type, static_cast<uint64_t>(lb.rows), static_cast<uint64_t>(lb.cols),
                     lb.ld),
     "cublasLtMatrixLayoutCreate");
  ok(l.layout_create(&layout_[1], ab_type, static_cast<uint64_t>(la.rows), static_cast<uint64_t>(la.cols),
                     la.ld),
     "cublasLtMatrixLayoutCreate");
  const int64_t ldc = out_row_stride > 0 ? out_row_stride : n;
  ok(l.layout_create(&layout_[2], kR32F, static_cast<uint64_t>(n), static_cast<uint64_t>(m), ldc),
     "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    const int64_t strides[3] = {b.batch_stride, a.batch_stride, m * ldc};
    for (int i = 0; i < 3; ++i) {
      ok(l.layout_set(layout_[i], kLayoutBatchCount, &count, sizeof(count)),
         "cublasLtMatrixLayoutSetAttribute");
      ok(l.layout_set(layout_[i], kLayoutBatchStride, &strides[i], sizeof(int64_t)),
         "cublasLtMatrixLayoutSetAttribute");
    }
  }
  void* pref = nullptr;
  ok(l.pref_create(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = workspace_bytes;
  ok(l.pref_set(pref, kPrefMaxWorkspace, &ws, sizeof(ws)), "cublasLtMatmulPreferenceSetAttribute");
  constexpr int kCandidates = 16;
  HeuristicResult results[kCandidates] = {};
  int found = 0;
  const Status s = l.heuristic(l.handle, desc_, layout_[0], layout_[1], layout_[2], layout_[2], pref,
                               kCandidates, results, &found);
  l.pref_destroy(pref);
  if (s != 0 || found == 0)
    throw DeviceError("[cuda] cuBLASLt has no algorithm for the product [" + std::to_string(batch) + ", " +
                      std::to_string(m) + ", " + std::to_string(k) + "] @ [" + std::to_string(k) + ", " +
                      std::to_string(n) + "] (status " + std::to_string(s) + ")");
  for (int i = 0; i < found; ++i) {
    if (results[i].state != 0) continue;
    Candidate c{};
    std::copy(results[i].algo, results[i].algo + 8, c.algo);
    c.workspace = results[i].workspace_size;
    candidates_.push_back(c);
  }
  if (candidates_.empty()) throw DeviceError("[cuda] cuBLASLt returned no usable algorithm");
  workspace_ = candidates_[0].workspace;
  key_ = std::to_string(batch) + "," + std::to_string(m) + "," + std::to_string(n) + "," + std::to_string(k) +
         "," + std::to_string(a.row_stride) + "," + std::to_string(a.col_stride) + "," +
         std::to_string(a.batch_stride) + "," + std::to_string(b.row_stride) + "," +
         std::to_string(b.col_stride) + "," + std::to_string(b.batch_stride) + "," +
         std::to_string(static_cast<int>(mode)) + "," + std::to_string(ldc) + "," +
         std::to_string(with_bias) + (half ? std::string(",") + dtype_name(operands) : "");
}

LtMatmul::~LtMatmul() {
  const Lt& l = lt();
  for (void* layout : layout_)
    if (layout) l.layout_destroy(layout);
  if (desc_) l.desc_destroy(desc_);
}

void LtMatmul::run(CUdeviceptr a, CUdeviceptr b, CUdeviceptr out, CUdeviceptr workspace, CUstream stream,
                   CUdeviceptr bias, float beta, CUdeviceptr c) const {
  const Lt& l = lt();
  if (bias_) {
    const void* p = reinterpret_cast<const void*>(bias);
    ok(l.desc_set(desc_, kDescBiasPointer, &p, sizeof(p)), "cublasLtMatmulDescSetAttribute");
  }
  const float one = 1.0f;
  ok(l.matmul(l.handle, desc_, &one, reinterpret_cast<const void*>(b), layout_[0],
              reinterpret_cast<const void*>(a), layout_[1], &beta, reinterpret_cast<const void*>(c ? c : out),
              layout_[2], reinterpret_cast<void*>(out), layout_[2], candidates_[chosen_].algo,
              reinterpret_cast<void*>(workspace), workspace_, stream),
     "cublasLtMatmul");
}

void LtMatmul::tune(CUdeviceptr a, CUdeviceptr b, CUdeviceptr out, CUdeviceptr workspace, CUstream stream,
                    CUdeviceptr bias, float beta, CUdeviceptr addend) {
  static std::mutex mutex;
  static std::unordered_map<std::string, size_t> tuned;  // layout and candidates → candidate index
  static bool loaded = false;
  // Choices persist in the cache directory (one "key<TAB>index" line each), so a later process
  // compiling the same products skips the timing: the key is the product's layout and a hash of
  // the heuristic's candidate list, which changes with the GPU, the driver and the library.
  // TG_CUDA_TUNE=all times every candidate of every product, =off none (the heuristic's first
  // choice); either leaves the file alone.
  static const std::string policy = env::value(env::Switch::kCudaTune);
  const std::filesystem::path dir = policy.empty() ? cache_dir() : std::filesystem::path();
  const std::filesystem::path file = dir.empty() ? std::filesystem::path() : dir / "cublaslt_tuning.txt";
  uint64_t h = 1469598103934665603ull;
  for (const Candidate& c : candidates_)
    for (uint64_t w : c.algo) {
      h ^= w;
      h *= 1099511628211ull;
    }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  const std::string key = key_ + "," + std::to_string(candidates_.size()) + "," + hex;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!loaded && !file.empty()) {
      std::ifstream in(file);
      std::string line;
      while (std::getline(in, line)) {  // a malformed or torn line is skipped
        const size_t tab = line.find('\t');
        size_t index = 0;
        if (tab == std::string::npos) continue;
        const auto [end, ec] = std::from_chars(line.data() + tab + 1, line.data() + line.size(), index);
        if (ec == std::errc() && end == line.data() + line.size()) tuned[line.substr(0, tab)] = index;
      }
    }
    loaded = true;
    if (auto it = tuned.find(key); it != tuned.end() && it->second < candidates_.size()) {
      chosen_ = it->second;
      workspace_ = candidates_[chosen_].workspace;
      if (env::is_set(env::Switch::kCudaTuneTrace))
        std::fprintf(stderr, "[tune] %s loaded %zu\n", key.c_str(), chosen_);
      return;
    }
  }
  // Every candidate of products under 8 GFLOP is timed; of larger ones only the heuristic's
  // first four: its later picks are rarely the fastest on large products, and each costs up to
  // milliseconds of compilation.
  constexpr int64_t kTuneAllBelowFlops = int64_t{8} << 30;
  const size_t timed = policy == "off" ? 1
                       : policy == "all" || flops_ < kTuneAllBelowFlops
                           ? candidates_.size()
                           : std::min<size_t>(candidates_.size(), 4);
  if (timed > 1) {
    const Driver& d = driver();
    CUevent start = nullptr, stop = nullptr;
    check(d.cuEventCreate(&start, 0), "cuEventCreate");
    check(d.cuEventCreate(&stop, 0), "cuEventCreate");
    float best = 0;
    size_t best_index = 0;
    for (size_t c = 0; c < timed; ++c) {
      chosen_ = c;
      workspace_ = candidates_[c].workspace;
      run(a, b, out, workspace, stream, bias, beta, addend);  // warm-up
      check(d.cuEventRecord(start, stream), "cuEventRecord");
      constexpr int kRuns = 3;
      for (int r = 0; r < kRuns; ++r) run(a, b, out, workspace, stream, bias, beta, addend);
      check(d.cuEventRecord(stop, stream), "cuEventRecord");
      check(d.cuEventSynchronize(stop), "cuEventSynchronize");
      float ms = 0;
      d.cuEventElapsedTime(&ms, start, stop);
      if (c == 0 || ms < best) {
        best = ms;
        best_index = c;
      }
    }
    d.cuEventDestroy(start);
    d.cuEventDestroy(stop);
    chosen_ = best_index;
    workspace_ = candidates_[chosen_].workspace;
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (env::is_set(env::Switch::kCudaTuneTrace))
    std::fprintf(stderr, "[tune] %s timed %zu of %zu\n", key.c_str(), chosen_, timed);
  tuned[key] = chosen_;
  if (timed > 1 && !file.empty()) {  // a best-effort cache: a failed write only costs a re-tune
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    std::ofstream(file, std::ios::app) << key << '\t' << chosen_ << '\n';
  }
}

}  // namespace tg::backend::cuda
