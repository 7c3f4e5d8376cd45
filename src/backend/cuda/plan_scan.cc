// Placement of selective_scan and its gradient for the CUDA executable (see executable.h):
// the forward kernel (keeping the states entering each chunk when the program also runs the
// gradient), the backward and the reduce of its partials (selective_scan.cc), with D and
// delta_bias read in place when broadcast and the gradient's cotangent read in its parts.
#include <algorithm>
#include <initializer_list>
#include <optional>
#include <utility>
#include <vector>

#include "backend/cuda/executable.h"
#include "backend/cuda/plan_util.h"

// GCC 13 at -O3 reports the copies of Places here (their strides: std::vectors of one or
// more elements) as memmoves past a vector's bounds, a false positive of its flow analysis
// through libstdc++'s inlined copy (GCC 12 reports nothing; the same code compiled cleanly in
// plan.cc before it moved here).
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"

namespace tg::backend::cuda {

using ir::Op;
using namespace plan_util;

void CudaExecutable::plan_scan(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  auto in = [&](size_t k) -> Slot& { return slots_[static_cast<size_t>(n.inputs[k])]; };
  const Shape& us = in(0).shape;
  const Shape& bs = in(3).shape;
  ScanShape sh{us[0], us[1], us[2], bs[1], bs[2], n.attrs.values.at(0) != 0.0};
  if (sh.batch == 0 || sh.channels == 0 || sh.length == 0 || sh.states == 0) {
    // Nothing to scan: every output is empty or zero (the state after no steps, y and the
    // gradients: sums over no steps).
    add_zero(own_node(g, id), n.numel() * dtype_size(n.dtype));
    return;
  }
  const ScanLayout lay = scan_layout(sh);
  auto scratch = [&](int64_t floats) { return own(n, std::max<int64_t>(floats, 1) * 4, {floats}, Category::kScratch); };
  auto with = [](std::vector<Arg> args, std::initializer_list<Place> more) {
    for (const Place& p : more) args.push_back({p});
    return args;
  };
  std::vector<Arg> ops;
  for (size_t i = 0; i < 7; ++i) {
    // D (5) and delta_bias (6) broadcast from one value are read with stride 0, not copied.
    const Place& p = in(i).place;
    const bool broadcast = (i == 5 || i == 6) && p.strides.size() == 1 && p.strides[0] == 0;
    if (broadcast) (i == 5 ? sh.d_stride : sh.bias_stride) = 0;
    ops.push_back({broadcast ? p : dense(g, id, n.inputs[i])});
  }
  // The gradient's cotangent: its parts where autograd made them (an unslice or concat that
  // only packs them is not run), else the packed [dy | dlast] as one dense buffer.
  Place dy, dlast;
  if (n.op == Op::kSelectiveScanGrad) {
    const int64_t nu = numel(us);
    if (const auto parts = scan_cotangents_.find(n.inputs[7]); parts != scan_cotangents_.end()) {
      const auto [y_part, last_part] = parts->second;
      if (y_part < 0) {
        sh.dy = ScanShape::Dy::kZero;
      } else if (const Place& p = slots_[static_cast<size_t>(y_part)].place;
                 std::all_of(p.strides.begin(), p.strides.end(), [](int64_t st) { return st == 0; })) {
        sh.dy = ScanShape::Dy::kOne;  // one value broadcast: the gradient of a plain sum
        dy = p;
      } else {
        dy = dense(g, id, y_part);
      }
      sh.dlast = last_part >= 0;
      if (sh.dlast) dlast = dense(g, id, last_part);
    } else {
      dy = dense(g, id, n.inputs[7]);
      dlast = dy;
      dlast.offset += nu * 4;
    }
  }
  // Rows of u, delta, B, C (and dy) load four steps at a time when all start 16-byte aligned.
  auto aligned = [](const Place& p) { return p.offset % 16 == 0 && p.fixed % 16 == 0; };
  sh.vec = aligned(ops[0].place) && aligned(ops[1].place) && aligned(ops[3].place) && aligned(ops[4].place) &&
           (n.op == Op::kSelectiveScan || sh.dy != ScanShape::Dy::kRows || aligned(dy));
  const Place out = own_node(g, id);
  if (n.op == Op::kSelectiveScan) {
    // When this program also runs the gradient (reading this node as its forward), the
    // kernel keeps the states entering each chunk for it.
    bool keep = false;
    for (int32_t c : consumers_[static_cast<size_t>(id)]) {
      const ir::Node& cn = g.node(c);
      keep = keep || (cn.op == Op::kSelectiveScanGrad && cn.inputs.size() == 9 && cn.inputs[8] == id && cn.inputs[7] != id &&
                      std::equal(n.inputs.begin(), n.inputs.end(), cn.inputs.begin()) && cn.attrs.values == n.attrs.values);
    }
    Place hs = out;  // unused without keep
    if (keep) hs = scan_states_[id] = own(n, lay.state_floats * 4, {lay.state_floats}, Category::kActivation);
    add_kernel({id}, scan_forward_kernel(kKernelName, sh, keep), with(ops, {out, hs}));
    return;
  }
  const auto kept = scan_states_.find(n.inputs[8]);
  Place hs;
  if (kept != scan_states_.end()) {
    hs = kept->second;
  } else {  // the forward ran elsewhere: run it again for its states
    hs = scratch(lay.state_floats);
    add_kernel({id}, scan_forward_kernel(kKernelName, sh, true), with(ops, {scratch(numel(in(8).shape)), hs}));
  }
  const Place da = scratch(lay.da_floats), dbc = scratch(lay.dbc_floats), ddb = scratch(lay.dd_floats);
  // Absent parts are not read; their parameters get any valid place.
  if (sh.dy == ScanShape::Dy::kZero) dy = hs;
  if (!sh.dlast) dlast = hs;
  add_kernel({id}, scan_backward_kernel(kKernelName, sh), with(ops, {dy, dlast, hs, out, da, dbc, ddb}));
  add_kernel({id}, scan_reduce_kernel(kKernelName, sh), {{da}, {dbc}, {ddb}, {out}});
}

// Autograd gives selective_scan_grad the packed [dy | dlast]: an unslice of dy alone (only y
// reaches the loss), of dlast alone, or a concat of both (fold.cc's unslice-sum rewrite). When
// scan gradients are its only readers, they read the parts and the packing is not run.
std::optional<std::pair<int32_t, int32_t>> CudaExecutable::scan_cotangent_parts(const ir::Graph& g, int32_t id) const {
  const ir::Node& n = g.node(id);
  if (n.shape.size() != 1 || n.attrs.axes.empty() || n.attrs.axes[0] != 0 || escapes(g, id) || consumers_[static_cast<size_t>(id)].empty())
    return std::nullopt;
  int64_t nu = -1;  // y's elements: the consumers' u
  for (int32_t c : consumers_[static_cast<size_t>(id)]) {
    const ir::Node& cn = g.node(c);
    if (cn.op != Op::kSelectiveScanGrad || std::count(cn.inputs.begin(), cn.inputs.end(), id) != 1 || cn.inputs[7] != id) return std::nullopt;
    const int64_t u = g.node(cn.inputs[0]).numel();
    if (nu >= 0 && u != nu) return std::nullopt;
    nu = u;
  }
  auto size = [&](size_t k) { return g.node(n.inputs[k]).numel(); };
  if (n.op == Op::kUnslice && n.attrs.values.at(1) == 1.0) {
    const auto start = static_cast<int64_t>(n.attrs.values.at(0));
    if (start == 0 && size(0) == nu) return std::pair{n.inputs[0], -1};
    if (start == nu && size(0) == n.numel() - nu) return std::pair{-1, n.inputs[0]};
  }
  if (n.op == Op::kConcat && n.inputs.size() == 2 && size(0) == nu) return std::pair{n.inputs[0], n.inputs[1]};
  return std::nullopt;
}

bool CudaExecutable::defer_scan_cotangent(const ir::Graph& g, int32_t id) {
  const auto parts = scan_cotangent_parts(g, id);
  if (parts) scan_cotangents_[id] = *parts;
  return parts.has_value();
}

}  // namespace tg::backend::cuda
