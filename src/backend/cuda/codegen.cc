// Kernel source generation from ops.def (see codegen.h).
#include "backend/cuda/codegen.h"

#include "tensorgrad/errors.h"

namespace tg::backend::cuda {

const char* op_expression(ir::Op op) {
  switch (op) {
#define TG_UNARY(Name, str, dtypes, expr) case ir::Op::k##Name: return #expr;
#define TG_BINARY(Name, str, dtypes, expr) case ir::Op::k##Name: return #expr;
#define TG_COMPARE(Name, str, dtypes, expr) case ir::Op::k##Name: return #expr;
#include "ir/ops.def"
    default:
      return "";
  }
}

std::string elementwise_kernel(ir::Op op, const std::string& name) {
  const ir::OpKind kind = ir::op_info(op).kind;
  if (kind != ir::OpKind::kUnary && kind != ir::OpKind::kBinary)
    throw Error(std::string("[cuda] no elementwise kernel for ") + ir::op_name(op));
  const bool binary = kind == ir::OpKind::kBinary;
  // `T` and the unqualified math functions resolve to CUDA's float overloads.
  return "typedef float T;\n"
         "extern \"C\" __global__ void " + name +
         "(const float* __restrict__ pa, const float* __restrict__ pb, float* __restrict__ out, long long n) {\n"
         "  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  if (i >= n) return;\n"
         "  const T a = pa[i];\n" +
         std::string(binary ? "  const T b = pb[i];\n" : "  (void)pb;\n") +
         "  out[i] = (float)(" + op_expression(op) + ");\n"
         "}\n";
}

}  // namespace tg::backend::cuda
