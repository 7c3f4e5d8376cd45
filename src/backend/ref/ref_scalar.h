// The reference backend's per-element semantics, shared with constant folding
// (passes/fold.cc) so that a folded constant holds exactly the value the reference
// interpreter would compute for the node it replaces.
#pragma once
#include "ir/graph.h"

namespace tg::backend::ref {

/// A stored value as `t` holds it: f32 stays in double (the ref backend never rounds to
/// float), i32 truncates, bool is 0 or 1.
double to_dtype(double v, DType t);
/// A TG_UNARY row's expression with T = double.
double unary(ir::Op op, double a);
/// A TG_BINARY row's expression with T = double, or a TG_COMPARE row's as 1.0 / 0.0.
double binary(ir::Op op, double a, double b);

}  // namespace tg::backend::ref
