// Norms fused with the elementwise work around them.
//
// Forward: an affine norm z = norm(x)·w + b traces as the norm and a group {mul, add}; when
// nothing else reads the normalised value (remat recomputes it for the backward), the norm
// kernel applies w and b itself and writes z: one kernel, one pass over the row.
//
// Backward: autograd leaves, per affine norm,
//   dy = dz·w (a mul), x̂ = norm(x) again (remat recomputes it), dw = Σrows dz·x̂ (a mul and a
//   sum), db = Σrows dz (a sum), dx = norm_grad(x, dy)
// — five kernels that read dz four times and x twice. The planner recognises that shape and
// plans one row kernel that reads x and dz once, writes dx, and accumulates per-column
// partials of dz·x̂ and dz in registers across the rows each block walks; a second small
// kernel adds each column's block partials in block order (deterministic: no atomics). The
// parts are optional: without a mul, dy is dz; without the sums, no partials.
//
// A backward match is taken only when every node it absorbs belongs to a group it absorbs
// whole, its inputs are computed before the first of those groups (where the fused step
// runs), and the row fits the warp-per-row scheme (≤ 1024 columns).
//
// The backward kernel's device code is in kernels/norm_backward.cuh.
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <string>

#include "backend/cuda/lowering.h"
#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/plan_util.h"
#include "ir/strides.h"
#include "util/switches.h"

namespace tg::backend::cuda {

using ir::Op;
using plan_util::kKernelName;

namespace {

constexpr int kRowsPerBlock = 8;                  // one warp per row
constexpr int64_t kBlocksPerSm = 2;               // enough to fill the device; the partials stay few
constexpr int64_t kMaxCols = 1024;

bool is_norm_grad(Op op) { return op == Op::kLayerNormGrad || op == Op::kRmsNormGrad; }
Op forward_of(Op grad) { return grad == Op::kLayerNormGrad ? Op::kLayerNorm : Op::kRmsNorm; }

std::string ll(int64_t v) { return std::to_string(v) + "LL"; }

}  // namespace

Launch norm_backward_kernel(const std::string& name, int64_t rows, int64_t cols, double eps, bool layer, bool has_w, bool dw,
                            bool db, int64_t blocks) {
  const int64_t per_lane = (cols + 31) / 32;
  Launch l;
  l.name = name;
  char e[64];
  std::snprintf(e, sizeof e, "%.9ef", eps);
  std::string s = "// norm backward (norm_fusion.cc)\n";
  s += "constexpr long long ROWS = " + ll(rows) + ";\nconstexpr int C = " + std::to_string(cols) + ";\n";
  s += "constexpr int J = " + std::to_string(per_lane) + ";  // columns per lane\n";
  s += "constexpr int G = " + std::to_string(blocks) + ";\nconstexpr float EPS = " + e + ";\n";
  s += std::string("constexpr bool LAYER = ") + (layer ? "true" : "false") + ", DW = " + (dw ? "true" : "false") +
       ", DB = " + (db ? "true" : "false") + ";\n";
  s += kernel_source("norm_backward.cuh", "helpers");
  s += "extern \"C\" __global__ void __launch_bounds__(256) " + name + "(const float* __restrict__ x, const float* __restrict__ dz, ";
  s += has_w ? "const float* __restrict__ w, " : "";
  s += "float* __restrict__ dx, float* __restrict__ part) {\n";
  s += kernel_source("norm_backward.cuh", "rows");
  s += has_w ? "      g[j] *= __ldg(w + c);\n" : "";
  s += kernel_source("norm_backward.cuh", "tail");
  l.source = std::move(s);
  l.block[0] = 32 * kRowsPerBlock;
  l.grid[0] = static_cast<unsigned>(blocks);
  return l;
}

Launch norm_partials_kernel(const std::string& name, int64_t cols, int64_t blocks, bool dw, bool db) {
  Launch l;
  l.name = name;
  std::string s = "// norm backward partials (norm_fusion.cc)\n";
  s += "constexpr int C = " + std::to_string(cols) + ", G = " + std::to_string(blocks) + ";\n";
  s += "extern \"C\" __global__ void " + name + "(const float* __restrict__ part";
  if (dw) s += ", float* __restrict__ dw";
  if (db) s += ", float* __restrict__ db";
  s += ") {\n  const int c = blockIdx.x * 32 + threadIdx.x;\n";
  s += std::string("  const int k = ") + (dw && db ? "blockIdx.y" : dw ? "0" : "1") + ";\n";
  s += R"(  float a = 0.0f;
  if (c < C)
    for (int b = threadIdx.y; b < G; b += 8) a += part[((long long)k * G + b) * C + c];
  __shared__ float sh[8][32];
  sh[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int r = 1; r < 8; ++r) a += sh[r][threadIdx.x];
)";
  if (dw && db) s += "  (k == 0 ? dw : db)[c] = a;\n}\n";
  else s += std::string("  ") + (dw ? "dw" : "db") + "[c] = a;\n}\n";
  l.source = std::move(s);
  l.block[0] = 32;
  l.block[1] = 8;
  l.grid[0] = static_cast<unsigned>((cols + 31) / 32);
  l.grid[1] = dw && db ? 2 : 1;
  return l;
}

bool Lowering::plan_norm_forward(int32_t id) {
  const ir::Node& f = g_.node(id);
  auto group = [&](int32_t n) { return fusion_.group_of[static_cast<size_t>(n)]; };
  auto escapes = [&](int32_t x) { return this->escapes(x); };
  auto sole_consumer = [&](int32_t x) -> int32_t {
    const auto& cs = consumers_[static_cast<size_t>(x)];
    return !escapes(x) && cs.size() == 1 ? cs[0] : -1;
  };
  const int64_t cols = f.shape.back();
  // The [C] param a broadcast operand of `op` (other than `self`) reads, or -1.
  auto vector_param = [&](const ir::Node& op, int32_t self) {
    const int32_t other = op.inputs[0] == self ? op.inputs[1] : op.inputs[0];
    if (op.inputs[0] == op.inputs[1]) return -1;
    const int32_t src = view_source(other);
    const ir::Node& p = g_.node(src);
    return p.op == Op::kParam && p.dtype == DType::kF32 && p.numel() == cols ? src : -1;
  };
  if (!options_.fuse || f.dtype != DType::kF32 || cols > 16384) return false;
  const int32_t mul = sole_consumer(id);
  if (mul < 0 || g_.node(mul).op != Op::kMul || g_.node(mul).shape != f.shape || group(mul) < 0) return false;
  const int32_t w = vector_param(g_.node(mul), id);
  if (w < 0) return false;
  int32_t add = sole_consumer(mul), b = -1;
  if (add >= 0 && (g_.node(add).op != Op::kAdd || g_.node(add).shape != f.shape || group(add) != group(mul))) add = -1;
  if (add >= 0 && (b = vector_param(g_.node(add), mul)) < 0) add = -1;
  std::vector<int32_t> absorbed = add >= 0 ? std::vector<int32_t>{mul, add} : std::vector<int32_t>{mul};
  std::vector<int32_t> have = fusion_.groups[static_cast<size_t>(group(mul))].nodes;
  std::sort(have.begin(), have.end());
  if (have != absorbed) return false;
  const int32_t last = absorbed.back();
  const int64_t rows = f.numel() / std::max<int64_t>(cols, 1);
  const double eps = f.attrs.values.at(0);
  const NormAffine affine{true, add >= 0};
  const Place x = dense(f.inputs[0]);
  const Place wp = slots_[static_cast<size_t>(w)].place, bp = add >= 0 ? slots_[static_cast<size_t>(b)].place : wp;
  std::vector<int32_t> nodes{id};
  nodes.insert(nodes.end(), absorbed.begin(), absorbed.end());
  DeferredNorm dn{id, nodes, x, wp, bp, affine, rows, cols, eps, f.op == Op::kLayerNorm};
  for (const int32_t x : nodes)  // every node but the last, which holds the value, is absorbed
    if (x != last) slots_[static_cast<size_t>(x)].placed = true;
  // A decode step's few rows feeding a product: let the product normalise them (plan_matmul).
  static const bool defer_off = env::equals(env::Switch::kCudaGemvNorm, "off");
  // Not when x is a state (or a view of one): an update planned before the product could write
  // it in place before the deferred norm reads it.
  const int32_t x_source = view_source(f.inputs[0]);
  const bool x_updated = g_.node(x_source).op == Op::kState ||
                         std::any_of(g_.updates.begin(), g_.updates.end(), [&](const ir::Graph::Update& u) { return u.target == x_source; });
  if (const int32_t reader = sole_consumer(last);
      !defer_off && !x_updated && rows <= 8 && reader >= 0 && g_.node(reader).op == Op::kMatmul && g_.node(reader).inputs[0] == last &&
      g_.node(reader).inputs[1] != last) {
    own_node(last);  // placed now, so its group (a gain-only norm's lone ·w) is not planned again
    deferred_norms_[last] = std::move(dn);
    return true;
  }
  plan_deferred_norm(dn);
  return true;
}

void Lowering::plan_deferred_norm(const DeferredNorm& dn) {
  const int32_t last = dn.nodes.back();
  if (!slots_[static_cast<size_t>(last)].placed) own_node(last);
  add_kernel(dn.nodes, dn.layer ? layer_norm_kernel(kKernelName, dn.rows, dn.cols, dn.eps, dn.affine)
                                : rms_norm_kernel(kKernelName, dn.rows, dn.cols, dn.eps, dn.affine),
             {{dn.x}, {dn.w}, {dn.b}, {slots_[static_cast<size_t>(last)].place}});
}

/// The node a chain of BroadcastTo / Reshape views starts from.
int32_t Lowering::view_source(int32_t id) const {
  while (g_.node(id).op == Op::kBroadcastTo || g_.node(id).op == Op::kReshape) id = g_.node(id).inputs[0];
  return id;
}

void Lowering::match_norm_backwards() {
  auto group = [&](int32_t id) { return fusion_.group_of[static_cast<size_t>(id)]; };
  auto escapes = [&](int32_t x) { return this->escapes(x); };
  auto only_consumer = [&](int32_t x, int32_t c) {
    const auto& cs = consumers_[static_cast<size_t>(x)];
    return !escapes(x) && cs.size() == 1 && cs[0] == c;
  };
  auto group_is = [&](int32_t gi, std::vector<int32_t> nodes) {
    std::vector<int32_t> have = fusion_.groups[static_cast<size_t>(gi)].nodes;
    std::sort(nodes.begin(), nodes.end());
    std::sort(have.begin(), have.end());
    return have == nodes;
  };
  // A sum over every axis but the last of a [..., C] value, to [1, …, 1, C] or [C].
  auto column_sum_of = [&](int32_t s, int32_t input, int64_t cols) {
    const ir::Node& n = g_.node(s);
    if (n.op != Op::kSum || n.inputs[0] != input || n.dtype != DType::kF32 || n.shape.empty() || n.shape.back() != cols ||
        n.numel() != cols)
      return false;
    const size_t rank = g_.node(input).shape.size();
    return n.attrs.axes.size() + 1 == rank;
  };
  for (int32_t id = 0; id < g_.size(); ++id) {
    const ir::Node& lg = g_.node(id);
    if (!is_norm_grad(lg.op) || group(id) < 0 || lg.dtype != DType::kF32) continue;
    const int64_t cols = lg.shape.back();
    if (cols > kMaxCols || cols < 1) continue;
    NormBackward m;
    m.grad = id;
    m.x = lg.inputs[0];
    m.dz = lg.inputs[1];
    std::vector<int32_t> groups{group(id)};
    // dy = dz · broadcast(w [C]) read only here: folded in.
    if (const ir::Node& mul = g_.node(m.dz); mul.op == Op::kMul && mul.shape == lg.shape && only_consumer(m.dz, id) &&
                                             group(m.dz) >= 0 && group_is(group(m.dz), {m.dz})) {
      for (int side = 0; side < 2; ++side) {
        const int32_t w = mul.inputs[static_cast<size_t>(side)], other = mul.inputs[static_cast<size_t>(1 - side)];
        const int32_t src = view_source(w);
        if (g_.node(other).shape != lg.shape || g_.node(src).numel() != cols || g_.node(src).dtype != DType::kF32) continue;
        if (g_.node(src).op != Op::kParam) continue;  // bound, dense, placed from the start
        m.mul = m.dz;
        m.w = src;
        m.dz = other;
        groups.push_back(group(m.mul));
        break;
      }
    }
    // db = Σ dz and dw = Σ dz · norm(x), each a group of its own.
    for (int32_t c : consumers_[static_cast<size_t>(m.dz)]) {
      if (m.db < 0 && column_sum_of(c, m.dz, cols) && group_is(group(c), {c})) {
        m.db = c;
        continue;
      }
      const ir::Node& p = g_.node(c);
      if (m.dw >= 0 || p.op != Op::kMul || p.shape != lg.shape || consumers_[static_cast<size_t>(c)].size() != 1 || escapes(c))
        continue;
      const int32_t xh = p.inputs[0] == m.dz ? p.inputs[1] : p.inputs[0];
      const ir::Node& f = g_.node(xh);
      if (f.op != forward_of(lg.op) || f.inputs[0] != m.x || f.attrs.values.at(0) != lg.attrs.values.at(0)) continue;
      const int32_t s = consumers_[static_cast<size_t>(c)][0];
      if (!column_sum_of(s, c, cols)) continue;
      if (group(s) == group(c) && group_is(group(s), {c, s})) {
        m.dw = s;
        m.dw_mul = c;
        // The recomputed norm goes too when nothing else reads it.
        if (only_consumer(xh, c) && group(xh) >= 0 && group_is(group(xh), {xh})) m.recompute = xh;
      }
    }
    if (m.db >= 0) groups.push_back(group(m.db));
    if (m.dw >= 0) groups.push_back(group(m.dw));
    if (m.recompute >= 0) groups.push_back(group(m.recompute));
    if (m.mul < 0 && m.dw < 0 && m.db < 0) continue;  // nothing to gain over the plain kernel
    const int32_t first = *std::min_element(groups.begin(), groups.end());
    // Inputs ready before the first absorbed group: computed by an earlier group or bound.
    auto ready = [&](int32_t v) {
      const int32_t src = view_source(v);
      return slots_[static_cast<size_t>(src)].placed || (group(src) >= 0 && group(src) < first);
    };
    if (!ready(m.x) || !ready(m.dz)) continue;
    m.at_group = first;
    for (int32_t gi : groups) absorbed_groups_.insert(gi);
    norm_backwards_.push_back(m);
  }
}

bool Lowering::plan_norm_backward_at(int32_t group_index) {
  if (!absorbed_groups_.count(group_index)) return false;
  for (const NormBackward& m : norm_backwards_) {
    if (m.at_group != group_index) continue;
    const ir::Node& lg = g_.node(m.grad);
    const int64_t cols = lg.shape.back(), rows = lg.numel() / cols;
    // Views between a value and its source (a reshape of the residual stream) are placed now.
    for (int32_t v : {m.x, m.dz}) {
      std::vector<int32_t> chain;
      for (int32_t x = v; !slots_[static_cast<size_t>(x)].placed; x = g_.node(x).inputs[0]) chain.push_back(x);
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) plan_single(*it);
    }
    const Place x = dense(m.x), dz = dense(m.dz);
    const bool dw = m.dw >= 0, db = m.db >= 0;
    const int64_t blocks =
        std::min<int64_t>(kBlocksPerSm * info_.sm_count, (rows + kRowsPerBlock - 1) / kRowsPerBlock);
    std::vector<Arg> args{{x}, {dz}};
    if (m.w >= 0) args.push_back({slots_[static_cast<size_t>(m.w)].place});
    args.push_back({own_node(m.grad)});
    const Place part = own((dw || db ? 2 * blocks * cols : 1) * 4, {2 * blocks * cols}, Category::kScratch);
    args.push_back({part});
    std::vector<int32_t> nodes{m.grad};
    for (int32_t n : {m.mul, m.recompute, m.dw_mul})
      if (n >= 0) nodes.push_back(n);
    add_kernel(nodes, norm_backward_kernel(kKernelName, rows, cols, lg.attrs.values.at(0), lg.op == Op::kLayerNormGrad, m.w >= 0, dw, db, blocks),
               std::move(args));
    if (dw || db) {
      std::vector<Arg> pargs{{part}};
      std::vector<int32_t> sums;
      for (int32_t s : {m.dw, m.db})
        if (s >= 0) {
          pargs.push_back({own_node(s)});
          sums.push_back(s);
        }
      add_kernel(sums, norm_partials_kernel(kKernelName, cols, blocks, dw, db), std::move(pargs));
    }
    // What the absorbed nodes computed is now placed (or, for the folded mul and the
    // recomputed norm, no longer needed).
    for (int32_t n : {m.mul, m.recompute, m.dw_mul})
      if (n >= 0) slots_[static_cast<size_t>(n)].placed = true;
  }
  return true;
}

}  // namespace tg::backend::cuda
