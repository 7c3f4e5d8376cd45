// Placement of selective_scan and its gradient for the CUDA executable (see executable.h):
// the forward kernel (keeping the states entering each chunk as its `saved` result when the
// gradient reads it), the backward and the reduce of its partials (selective_scan.cc), with D
// and delta_bias read in place when broadcast and zero or broadcast cotangents not read as rows.
#include <algorithm>
#include <initializer_list>
#include <optional>
#include <utility>
#include <vector>

#include "backend/cuda/lowering.h"
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

void Lowering::plan_scan(int32_t id) {
  const ir::Node& n = g_.node(id);
  auto in = [&](size_t k) -> Slot& { return slots_[static_cast<size_t>(n.inputs[k])]; };
  const Shape& us = in(0).shape;
  const Shape& bs = in(3).shape;
  ScanShape sh{us[0], us[1], us[2], bs[1], bs[2], n.attrs.values.at(0) != 0.0};
  if (sh.batch == 0 || sh.channels == 0 || sh.length == 0 || sh.states == 0) {
    // Nothing to scan: every output is empty or zero (the state after no steps, y and the
    // gradients: sums over no steps).
    add_zero(own_node(id), n.numel() * dtype_size(n.dtype));
    return;
  }
  const ScanLayout lay = scan_layout(sh);
  auto scratch = [&](int64_t floats) { return own(std::max<int64_t>(floats, 1) * 4, {floats}, Category::kScratch); };
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
    ops.push_back({broadcast ? p : dense(n.inputs[i])});
  }
  // The gradient's cotangents: dy as rows, as one value broadcast (the gradient of a plain
  // sum) or a known zero; dlast as rows or a known zero (not read).
  Place dy, dlast;
  if (n.op == Op::kSelectiveScanGrad) {
    const int32_t dy_id = n.inputs[7], dlast_id = n.inputs[8];
    const Place& dyp = in(7).place;
    if (ir::constant_value(g_, dy_id) == 0.0) {
      sh.dy = ScanShape::Dy::kZero;
    } else if (std::all_of(dyp.strides.begin(), dyp.strides.end(), [](int64_t st) { return st == 0; })) {
      sh.dy = ScanShape::Dy::kOne;
      dy = dyp;
    } else {
      dy = dense(dy_id);
    }
    sh.dlast = ir::constant_value(g_, dlast_id) != 0.0;
    if (sh.dlast) dlast = dense(dlast_id);
  }
  // Rows of u, delta, B, C (and dy) load four steps at a time when all start 16-byte aligned.
  auto aligned = [](const Place& p) { return p.offset % 16 == 0 && p.fixed % 16 == 0; };
  sh.vec = aligned(ops[0].place) && aligned(ops[1].place) && aligned(ops[3].place) && aligned(ops[4].place) &&
           (n.op == Op::kSelectiveScan || sh.dy != ScanShape::Dy::kRows || aligned(dy));
  const Place out = own_node(id);
  if (n.op == Op::kSelectiveScan) {
    // Result 2 (saved) is the states entering each chunk, kept for a gradient that reads them;
    // with no reader the kernel does not write them.
    bool keep = false;
    for (int32_t r : results_of(id, 2)) keep = keep || !consumers_[static_cast<size_t>(r)].empty();
    Place hs = out;  // unused when nothing reads the states
    if (keep) {
      hs = own(lay.state_floats * 4, {lay.state_floats}, Category::kActivation);
      place_result(id, 2, hs, {1}, 0);
    }
    add_kernel({id}, scan_forward_kernel(kKernelName, sh, keep), with(ops, {out, hs}));
    return;
  }
  const Place hs = in(9).place;  // the forward's saved states (its result 2)
  const Place da = scratch(lay.da_floats), dbc = scratch(lay.dbc_floats), ddb = scratch(lay.dd_floats);
  // Absent parts are not read; their parameters get any valid place.
  if (sh.dy == ScanShape::Dy::kZero) dy = hs;
  if (!sh.dlast) dlast = hs;
  add_kernel({id}, scan_backward_kernel(kKernelName, sh), with(ops, {dy, dlast, hs, out, da, dbc, ddb}));
  add_kernel({id}, scan_reduce_kernel(kKernelName, sh), {{da}, {dbc}, {ddb}, {out}});
}

}  // namespace tg::backend::cuda
