// An elementwise group with reduction sinks as one CUDA kernel (see fused_sinks.h).
//
// Scheme. Every sink of the group has a width W_k = numel(sink) that is a product of trailing
// extents of the group's shape, so each W_k divides the widest, W. The group's flat index i
// is viewed as [rows, L] with L a multiple of W (L = W when W is a multiple of 32, else the
// least common multiple of W and 32 while that stays ≤ 4096, so that a warp's lanes fill one
// 128-byte line; then widened to at least 512 columns, so that a narrow sink still spreads
// over 16 column tiles): i = row·L + j, and the sink column of i is j mod W_k. The last row
// may be partial.
//   - Blocks are 32 × 8 threads. The 32 lanes own 32 consecutive columns j (coalesced loads
//     and stores, as in kernels_reduce.cc's column scheme); blockIdx.x tiles the columns;
//     blockIdx.y picks a chunk of CH consecutive rows, which threadIdx.y splits (rows
//     ty, ty + 8, …). A thread issues the loads of `unroll` rows together, then computes each
//     element in registers, stores the group's elementwise outputs and adds each sink's value
//     to its own float accumulator, in row order.
//   - The 8 accumulators of a column combine through shared memory in threadIdx.y order. With
//     one chunk that is the column's sum; otherwise each chunk writes its partial to a
//     __device__ array, and the last block of the column tile to arrive (a per-tile counter,
//     reset by that block) sums the chunks' partials in chunk order (split over threadIdx.y,
//     again combined in order).
//   - A sink narrower than L then folds its L column sums into its W_k outputs (output c sums
//     the column sums q·W_k + c: strided over a power-of-two group of threads, then a fixed
//     pairwise tree in shared memory), done by the last column tile to finish (a grid-wide
//     counter, reset by that block).
// Every sum is taken in an order fixed by the shapes alone, so results are bit-identical from
// run to run; no float atomics.
#include "backend/cuda/fused_sinks.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "backend/cuda/codegen.h"
#include "backend/cuda/kernel_sources.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {

constexpr int kLanes = 32, kRows = 8, kThreads = kLanes * kRows;
constexpr int64_t kMaxL = 4096, kMinL = 512;

/// The group as the kernel sees it, checked against fused_sinks_kernel's contract.
struct SinkGroup {
  std::vector<int32_t> inputs;   // external inputs, group_inputs order
  Shape shape;                   // the elementwise nodes' shape
  int64_t n_total = 0;           // numel(shape): the flat index runs over [0, n_total)
  std::vector<int32_t> sinks;    // the Sum nodes, group.nodes order
  std::vector<int64_t> widths;   // W_k = numel(sink k)
  int64_t w_max = 1;             // W, the widest sink: every W_k divides it
  std::vector<int32_t> outputs;  // non-sink outputs, group.outputs order
};

/// Splits the group into elementwise nodes (one shape) and sinks, and throws unless every Sum
/// is a reduction sink of an f32 value of the group, no node reads a sink, the sink widths
/// divide the widest and there is one stride list of the group's rank per input.
SinkGroup check_group(const ir::Graph& graph, const passes::KernelGroup& group,
                      const std::vector<std::vector<int64_t>>& input_strides, const std::string& where) {
  if (group.kind != passes::KernelGroup::Kind::kElementwise || group.nodes.empty())
    throw Error(where + "not an elementwise group");
  SinkGroup sg;
  sg.inputs = group_inputs(graph, group);
  const std::vector<int32_t>& inputs = sg.inputs;
  if (input_strides.size() != inputs.size())
    throw Error(where + "one stride list per input needed (" + std::to_string(inputs.size()) + " inputs, " +
                std::to_string(input_strides.size()) + " lists)");
  auto in_group = [&](int32_t id) {
    return std::find(group.nodes.begin(), group.nodes.end(), id) != group.nodes.end();
  };

  // The group's shape is that of its elementwise nodes; sinks are its Sum nodes.
  Shape& shape = sg.shape;
  bool have_shape = false;
  std::vector<int32_t>& sinks = sg.sinks;
  for (int32_t id : group.nodes) {
    const ir::Node& n = graph.node(id);
    if (n.op == ir::Op::kSum) {
      sinks.push_back(id);
      continue;
    }
    if (!passes::fusible(n.op))
      throw Error(where + "node %" + std::to_string(id) + " (" + ir::op_name(n.op) + ") is not elementwise");
    if (!have_shape)
      shape = n.shape, have_shape = true;
    else if (n.shape != shape)
      throw Error(where + "the group's elementwise nodes differ in shape");
  }
  if (!have_shape) throw Error(where + "the group has no elementwise node");
  for (size_t k = 0; k < inputs.size(); ++k)
    if (input_strides[k].size() != shape.size())
      throw Error(where + "input " + std::to_string(k) + "'s strides do not match the group's rank");
  sg.n_total = numel(shape);
  for (int32_t id : sinks) {
    const ir::Node& n = graph.node(id);
    const int32_t in = n.inputs[0];
    if (!passes::reduction_sink(graph, n) || !in_group(in) || graph.node(in).shape != shape ||
        graph.node(in).dtype != DType::kF32)
      throw Error(where + "sum %" + std::to_string(id) + " is not a reduction sink of this group");
    sg.widths.push_back(n.numel());
    sg.w_max = std::max(sg.w_max, n.numel());
  }
  for (int32_t id : group.nodes)
    for (int32_t in : graph.node(id).inputs)
      if (std::find(sinks.begin(), sinks.end(), in) != sinks.end())
        throw Error(where + "sum %" + std::to_string(in) + " is read inside its own group");
  for (size_t k = 0; k < sinks.size(); ++k)
    if (sg.widths[k] > 0 && sg.w_max % sg.widths[k] != 0)
      throw Error(where + "sink widths " + std::to_string(sg.widths[k]) + " and " + std::to_string(sg.w_max) +
                  " do not divide (not reduction sinks of one shape)");
  for (int32_t o : group.outputs)
    if (std::find(sinks.begin(), sinks.end(), o) == sinks.end()) sg.outputs.push_back(o);
  return sg;
}

/// The kernel's parameter list: in<k>, out<o>, sink<k> (fused_sinks.h), comma-separated.
std::string param_list(const ir::Graph& graph, const SinkGroup& sg) {
  std::ostringstream params;
  for (size_t k = 0; k < sg.inputs.size(); ++k)
    params << "const " << cuda_type(graph.node(sg.inputs[k]).dtype) << "* __restrict__ in" << k << ", ";
  for (size_t o = 0; o < sg.outputs.size(); ++o)
    params << cuda_type(graph.node(sg.outputs[o]).dtype) << "* __restrict__ out" << o << ", ";
  for (size_t k = 0; k < sg.sinks.size(); ++k) params << "float* __restrict__ sink" << k << ", ";
  std::string list = params.str();
  if (!list.empty()) list.resize(list.size() - 2);
  return list;
}

/// The [rows, L] view of the flat index and the grid over it (the file's header): gx column
/// tiles of kLanes columns by gy chunks of `chunk` rows, kRows · per_thread rows a chunk.
struct SinkGeometry {
  int64_t L = 0, rows = 0;   // the view: flat index i = row · L + j
  int unroll = 1;            // rows whose loads a thread issues together
  int64_t gx = 0, gy = 0;    // grid: column tiles × row chunks
  int64_t chunk = 0;         // rows per chunk (blockIdx.y)
  bool chunked = false;      // gy > 1: chunks' partials merge through g_part<k>
  std::vector<bool> folded;  // per sink: W_k < L, so its L column sums fold into W_k outputs
  bool any_fold = false;
};

SinkGeometry plan_geometry(const SinkGroup& sg, const SinkTuning& tuning, const std::string& where) {
  SinkGeometry geo;
  // L: W when W is a multiple of 32, else lcm(W, 32) while ≤ kMaxL (a warp fills one line).
  const int64_t lcm32 = std::lcm(sg.w_max, int64_t{32});
  int64_t L = sg.w_max % 32 == 0 ? sg.w_max : (lcm32 <= kMaxL ? lcm32 : sg.w_max);
  // At least kMinL columns, so that even a narrow sink spreads over 16 column tiles and each
  // tile's last block merges few chunk partials per thread.
  if (L < kMinL) L *= ceil_div(kMinL, L);
  geo.L = L;
  geo.rows = ceil_div(sg.n_total, L);
  geo.unroll = std::clamp(tuning.unroll, 1, 16);
  geo.gx = ceil_div(L, kLanes);
  // Enough chunks for about target_blocks blocks, each thread taking at least rows_per_thread
  // rows, rounded up to whole unrolled steps.
  const int64_t chunks_wanted = std::max<int64_t>(1, tuning.target_blocks / geo.gx);
  int64_t per_thread =
      std::max<int64_t>(std::max(tuning.rows_per_thread, 1), ceil_div(geo.rows, kRows * chunks_wanted));
  per_thread = ceil_div(per_thread, geo.unroll) * geo.unroll;
  geo.chunk = kRows * per_thread;
  geo.gy = ceil_div(geo.rows, geo.chunk);
  if (geo.gy > 65535) throw Error(where + "group too large for its grid");
  geo.chunked = geo.gy > 1;
  geo.folded.resize(sg.sinks.size());
  for (size_t k = 0; k < sg.sinks.size(); ++k) {
    geo.folded[k] = sg.widths[k] < L;
    geo.any_fold = geo.any_fold || geo.folded[k];
  }
  return geo;
}

/// The register naming `id`'s value inside the kernel: x<k> for the k-th external input, else
/// v<id>.
std::string value_name(const std::vector<int32_t>& inputs, int32_t id) {
  const auto at = std::find(inputs.begin(), inputs.end(), id);
  return at != inputs.end() ? "x" + std::to_string(at - inputs.begin()) : "v" + std::to_string(id);
}

/// Module-level state of the deterministic merge: per-chunk partials (g_part<k>, [gy, L]) and
/// the column sums a folded sink reads (g_col<k>, [L]), with the arrival counters.
void emit_merge_state(std::ostringstream& src, const SinkGeometry& geo, size_t K) {
  for (size_t k = 0; k < K; ++k) {
    if (geo.chunked) src << "__device__ float g_part" << k << "[" << geo.gy * geo.L << "];\n";
    if (geo.folded[k]) src << "__device__ float g_col" << k << "[" << geo.L << "];\n";
  }
  if (geo.chunked && K) src << "__device__ unsigned int g_tile[" << geo.gx << "];\n";
  if (geo.any_fold && geo.gx > 1) src << "__device__ unsigned int g_fold;\n";
}

/// The kernel's head and its main loop: each thread walks its column j over rows r0 + ty,
/// r0 + ty + 8, … of its chunk, `unroll` rows at a time, stores the elementwise outputs and
/// adds each sink's value to acc<k>. `idx`/`sfx` are the index type and its literal suffix.
void emit_accumulation(std::ostringstream& src, const ir::Graph& graph, const SinkGroup& sg,
                       const SinkGeometry& geo, const std::vector<std::vector<int64_t>>& input_strides,
                       const std::string& body, const std::string& name, const std::string& params,
                       const char* idx, const char* sfx) {
  const int64_t L = geo.L, n_total = sg.n_total;
  const int unroll = geo.unroll;
  src << "extern \"C\" __global__ void __launch_bounds__(" << kThreads << ") " << name << "(" << params
      << ") {\n";
  src << "  const int tx = threadIdx.x, ty = threadIdx.y, tid = tx + " << kLanes << " * ty;\n"
      << "  const int j = blockIdx.x * " << kLanes << " + tx;\n"
      << "  const " << idx << " r0 = (" << idx << ")blockIdx.y * " << geo.chunk << sfx << ";\n"
      << "  const " << idx << " r1 = min((" << idx << ")" << geo.rows << sfx << ", r0 + " << geo.chunk << sfx
      << ");\n"
      << "  (void)tid; (void)r1;\n";
  for (size_t k = 0; k < sg.sinks.size(); ++k) src << "  float acc" << k << " = 0.f;\n";
  src << "  if (j < " << L << ") {\n"
      << "    for (" << idx << " r = r0 + ty; r < r1; r += " << kRows * unroll << ") {\n"
      << "      " << idx << " ix[" << unroll << "];\n      bool ok[" << unroll << "];\n"
      << "#pragma unroll\n      for (int u = 0; u < " << unroll << "; ++u) {\n"
      << "        const " << idx << " rr = r + u * " << kRows << ", e = rr * " << L << sfx << " + j;\n"
      << "        ok[u] = rr < r1"
      << (n_total % L ? " && e < " + std::to_string(n_total) + sfx : std::string()) << ";\n"
      << "        ix[u] = ok[u] ? e : (" << idx << ")0;\n      }\n";
  // Loads of every unrolled row first (independent, so they are in flight together).
  for (size_t k = 0; k < sg.inputs.size(); ++k) {
    const std::string t = cuda_type(graph.node(sg.inputs[k]).dtype);
    src << "      " << t << " ld" << k << "[" << unroll << "];\n"
        << "#pragma unroll\n      for (int u = 0; u < " << unroll << "; ++u) ld" << k << "[u] = in" << k
        << "[" << strided_offset(sg.shape, input_strides[k], "ix[u]", sfx) << "];\n";
  }
  src << "#pragma unroll\n      for (int u = 0; u < " << unroll << "; ++u) {\n";
  for (size_t k = 0; k < sg.inputs.size(); ++k)
    src << "        const " << cuda_type(graph.node(sg.inputs[k]).dtype) << " x" << k << " = ld" << k
        << "[u];\n";
  src << body << "        if (ok[u]) {\n";
  for (size_t o = 0; o < sg.outputs.size(); ++o)
    src << "          out" << o << "[ix[u]] = " << value_name(sg.inputs, sg.outputs[o]) << ";\n";
  for (size_t k = 0; k < sg.sinks.size(); ++k)
    src << "          acc" << k << " += " << value_name(sg.inputs, graph.node(sg.sinks[k]).inputs[0])
        << ";\n";
  src << "        }\n      }\n    }\n  }\n";
}

/// Where a column's total `v` goes: the sink itself, or the column sums a narrower sink folds.
std::string deliver(const SinkGeometry& geo, size_t k, const std::string& v) {
  return geo.folded[k] ? "g_col" + std::to_string(k) + "[j] = " + v + ";"
                       : "sink" + std::to_string(k) + "[j] = " + v + ";";
}

/// Each column's total: the 8 accumulators of a column combine through shared memory in
/// threadIdx.y order; with several chunks, each writes its partial to g_part<k> and the last
/// block of the column tile to arrive sums the partials in chunk order.
void emit_column_sums(std::ostringstream& src, const SinkGeometry& geo, size_t K) {
  const int64_t L = geo.L, gy = geo.gy;
  auto ll = [](int64_t v) { return std::to_string(v) + "LL"; };
  src << "  __shared__ float red[" << K << "][" << kRows << "][" << kLanes << "];\n";
  for (size_t k = 0; k < K; ++k) src << "  red[" << k << "][ty][tx] = acc" << k << ";\n";
  src << "  __syncthreads();\n  if (ty == 0 && j < " << L << ") {\n";
  for (size_t k = 0; k < K; ++k) {
    src << "    {\n      float a = red[" << k << "][0][tx];\n      for (int y = 1; y < " << kRows
        << "; ++y) a += red[" << k << "][y][tx];\n      ";
    if (geo.chunked)
      src << "g_part" << k << "[(long long)blockIdx.y * " << ll(L) << " + j] = a;";
    else
      src << deliver(geo, k, "a");
    src << "\n    }\n";
  }
  src << "  }\n";
  if (!geo.chunked) return;
  // The last chunk of this column tile sums the chunks' partials in chunk order.
  src << "  __shared__ bool last;\n  __threadfence();\n  __syncthreads();\n"
      << "  if (tid == 0) last = atomicAdd(&g_tile[blockIdx.x], 1u) == " << gy - 1 << "u;\n"
      << "  __syncthreads();\n  if (!last) return;\n  __threadfence();\n";
  for (size_t k = 0; k < K; ++k)
    src << "  {\n    float a = 0.f;\n    if (j < " << L << ") for (int b = ty; b < " << gy
        << "; b += " << kRows << ") a += __ldcg(&g_part" << k << "[(long long)b * " << ll(L)
        << " + j]);\n    red[" << k << "][ty][tx] = a;\n  }\n";
  src << "  __syncthreads();\n  if (ty == 0 && j < " << L << ") {\n";
  for (size_t k = 0; k < K; ++k)
    src << "    {\n      float a = red[" << k << "][0][tx];\n      for (int y = 1; y < " << kRows
        << "; ++y) a += red[" << k << "][y][tx];\n      " << deliver(geo, k, "a") << "\n    }\n";
  src << "  }\n  if (tid == 0) g_tile[blockIdx.x] = 0;  // ready for the next launch\n";
}

/// The folds of sinks narrower than L, by the last column tile to finish: output c of sink k
/// is Σ_q g_col<k>[q · W_k + c] over the q = L / W_k column sums that land on it.
void emit_folds(std::ostringstream& src, const SinkGroup& sg, const SinkGeometry& geo) {
  const int64_t L = geo.L, gx = geo.gx;
  if (gx > 1) {
    src << "  __shared__ bool last_tile;\n  __threadfence();\n  __syncthreads();\n"
        << "  if (tid == 0) last_tile = atomicAdd(&g_fold, 1u) == " << gx - 1 << "u;\n"
        << "  __syncthreads();\n  if (!last_tile) return;\n  __threadfence();\n  if (tid == 0) g_fold = 0;\n";
  } else {
    src << "  __syncthreads();\n";
  }
  src << "  __shared__ float flat[" << kThreads << "];\n";
  for (size_t k = 0; k < sg.sinks.size(); ++k) {
    if (!geo.folded[k]) continue;
    const int64_t w = sg.widths[k];
    if (w == 0) continue;
    // p outputs at a time, each summed by g threads (a power of two: strided partial sums,
    // then a fixed pairwise tree).
    const int64_t q = L / w, p = std::min<int64_t>(w, kThreads);
    int64_t g = 1;
    while (g * 2 * p <= kThreads && g * 2 <= q) g *= 2;
    src << "  {  // sink " << k << ": " << w << " outputs, each the sum of " << q << " column sums\n"
        << "    const int s = tid / " << g << ", g = tid % " << g << ";\n"
        << "    for (int c0 = 0; c0 < " << w << "; c0 += " << p << ") {\n"
        << "      const int c = c0 + s;\n      float a = 0.f;\n"
        << "      if (s < " << p << " && c < " << w << ") for (int q = g; q < " << q << "; q += " << g
        << ") a += __ldcg(&g_col" << k << "[q * " << w << " + c]);\n"
        << "      flat[tid] = a;\n      __syncthreads();\n";
    if (g > 1)
      src << "      for (int h = " << g / 2 << "; h > 0; h >>= 1) {\n"
          << "        if (g < h) flat[tid] += flat[tid + h];\n        __syncthreads();\n      }\n";
    src << "      if (g == 0 && s < " << p << " && c < " << w << ") sink" << k << "[c] = flat[tid];\n"
        << "      __syncthreads();\n    }\n  }\n";
  }
}

}  // namespace

Launch fused_sinks_kernel(const ir::Graph& graph, const passes::KernelGroup& group,
                          const std::vector<std::vector<int64_t>>& input_strides, const std::string& name) {
  return fused_sinks_kernel(graph, group, input_strides, name, SinkTuning{});
}

Launch fused_sinks_kernel(const ir::Graph& graph, const passes::KernelGroup& group,
                          const std::vector<std::vector<int64_t>>& input_strides, const std::string& name,
                          const SinkTuning& tuning) {
  const std::string where = "[cuda] fused_sinks_kernel '" + name + "': ";
  const SinkGroup sg = check_group(graph, group, input_strides, where);
  const std::string params = param_list(graph, sg);

  Launch l;
  l.name = name;
  l.block[0] = kLanes;
  l.block[1] = kRows;
  if (sg.n_total == 0) {  // only empty sinks can sit on an empty group (reduction_sink)
    l.source = "extern \"C\" __global__ void " + name + "(" + params + ") {}\n";
    return l;
  }
  const SinkGeometry geo = plan_geometry(sg, tuning, where);
  l.grid[0] = static_cast<unsigned>(geo.gx);
  l.grid[1] = static_cast<unsigned>(geo.gy);

  // 32-bit indices when every flat index and every input offset fits.
  const std::vector<std::vector<int64_t>> read_strides(
      input_strides.begin(), input_strides.begin() + static_cast<std::ptrdiff_t>(sg.inputs.size()));
  const bool narrow = narrow_index(sg.n_total, sg.shape, read_strides);
  const char* idx = narrow ? "unsigned" : "long long";
  const char* sfx = narrow ? "u" : "LL";

  // Per-node device functions and the per-element body.
  const NodeCode code = group_node_code(
      graph, group, [&](int32_t id) { return value_name(sg.inputs, id); }, "        ");
  const size_t K = sg.sinks.size();
  std::ostringstream src;
  src << group_prelude() << code.functions;
  emit_merge_state(src, geo, K);
  emit_accumulation(src, graph, sg, geo, input_strides, code.body, name, params, idx, sfx);
  if (K > 0) {
    emit_column_sums(src, geo, K);
    if (geo.any_fold) emit_folds(src, sg, geo);
  }
  src << "}\n";
  l.source = src.str();
  return l;
}

}  // namespace tg::backend::cuda
