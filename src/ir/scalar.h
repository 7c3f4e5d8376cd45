// Per-element semantics of the op table in double precision: the reference backend computes
// with them and constant folding (passes/fold.cc) uses them, so a folded constant holds exactly
// the value the reference interpreter would compute for the node it replaces.
#pragma once
#include "ir/graph.h"

namespace tg::ir {

/// A stored value as `t` holds it: f32 stays in double (the ref backend never rounds to
/// float), i32 truncates, bool is 0 or 1.
double to_dtype(double v, DType t);
/// A TG_UNARY row's expression with T = double.
double eval_unary(Op op, double a);
/// A TG_BINARY row's expression with T = double, or a TG_COMPARE row's as 1.0 / 0.0.
double eval_binary(Op op, double a, double b);

}  // namespace tg::ir
