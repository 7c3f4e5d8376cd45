// The op table's scalar expressions instantiated with T = double (see scalar.h).
#include "ir/scalar.h"

#include <algorithm>
#include <cmath>

#include "tensorgrad/errors.h"

namespace tg::ir {

double to_dtype(double v, DType t) {
  switch (t) {
    case DType::kF32: return v;
    case DType::kI32: return std::trunc(v);
    case DType::kBool: return v != 0.0 ? 1.0 : 0.0;
    case DType::kBF16: return f32_from_bf16(bf16_from_f32(static_cast<float>(v)));
    case DType::kF16: return f32_from_f16(f16_from_f32(static_cast<float>(v)));
    case DType::kI8: return std::clamp(std::trunc(v), -128.0, 127.0);
  }
  return v;
}

double eval_unary(Op op, double a) {
  using T = double;
  using std::cos;
  using std::erf;
  using std::exp;
  using std::log;
  using std::log1p;
  using std::sin;
  using std::sqrt;
  using std::tanh;
  // clang-format off
  switch (op) {
#define TG_UNARY(Name, str, dtypes, expr) case Op::k##Name: return expr;
#include "ir/ops.def"
    default: break;
  }
  // clang-format on
  throw Error(std::string("[") + op_name(op) + "] is not a unary op");
}

double eval_binary(Op op, double a, double b) {
  using T = double;
  using std::pow;
  using std::tanh;  // gelu_tanh_grad
  // clang-format off
  switch (op) {
#define TG_BINARY(Name, str, dtypes, expr) case Op::k##Name: return expr;
#define TG_COMPARE(Name, str, dtypes, expr) case Op::k##Name: return (expr) ? 1.0 : 0.0;
#include "ir/ops.def"
    default: break;
  }
  // clang-format on
  throw Error(std::string("[") + op_name(op) + "] is not a binary op");
}

}  // namespace tg::ir
