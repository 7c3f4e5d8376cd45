// CUDA C++ generation from the op table: every elementwise row's expression column (valid
// C++ and CUDA by ops.def's rule) is pasted into device code, so no elementwise op is written
// twice. This is the seed of the CUDA backend's code generator (issue 5).
#pragma once
#include <string>

#include "ir/graph.h"

namespace tg::backend::cuda {

/// The expression column of an elementwise row of ops.def, verbatim ("" for other ops).
const char* op_expression(ir::Op op);

/// A kernel `extern "C" __global__ void <name>(const float* a, const float* b, float* out, long long n)`
/// computing out[i] = <op>(a[i][, b[i]]) in f32 for a unary or binary float row.
std::string elementwise_kernel(ir::Op op, const std::string& name);

}  // namespace tg::backend::cuda
