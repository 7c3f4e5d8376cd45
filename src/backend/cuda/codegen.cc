// Kernel source generation from ops.def (see codegen.h).
#include "backend/cuda/codegen.h"

#include <algorithm>
#include <sstream>

#include "backend/cuda/kernel_sources.h"
#include "ir/strides.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {

const char* op_expression(ir::Op op) {
  // clang-format off
  switch (op) {
#define TG_UNARY(Name, str, dtypes, expr) case ir::Op::k##Name: return #expr;
#define TG_BINARY(Name, str, dtypes, expr) case ir::Op::k##Name: return #expr;
#define TG_COMPARE(Name, str, dtypes, expr) case ir::Op::k##Name: return #expr;
#include "ir/ops.def"
    default: return "";
  }
  // clang-format on
}

std::string elementwise_kernel(ir::Op op, const std::string& name) {
  const ir::OpKind kind = ir::op_info(op).kind;
  if (kind != ir::OpKind::kUnary && kind != ir::OpKind::kBinary)
    throw Error(std::string("[cuda] no elementwise kernel for ") + ir::op_name(op));
  const bool binary = kind == ir::OpKind::kBinary;
  // `T` and the unqualified math functions resolve to CUDA's float overloads.
  return "typedef float T;\n"
         "extern \"C\" __global__ void " +
         name +
         "(const float* __restrict__ pa, const float* __restrict__ pb, float* __restrict__ out, long long n) "
         "{\n"
         "  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  if (i >= n) return;\n"
         "  const T a = pa[i];\n" +
         std::string(binary ? "  const T b = pb[i];\n" : "  (void)pb;\n") + "  out[i] = (float)(" +
         op_expression(op) +
         ");\n"
         "}\n";
}

namespace {

/// Device helpers every group kernel starts with (kernels/prelude.cuh).
std::string_view prelude() {
  static const std::string text = std::string(kernel_source("prelude.cuh", "widen")) +
                                  std::string(kernel_source("prelude.cuh", "prelude"));
  return text;
}

const char* storage_type(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kI32: return "int";
    case DType::kBool: return "unsigned char";
    case DType::kBF16: return "unsigned short";  // raw bits; tg_bf2f / tg_f2bf convert
    case DType::kF16: return "unsigned short";   // raw bits; tg_h2f / tg_f2h convert
    case DType::kI8: return "signed char";       // quantized weights, read by casts to f32
  }
  return "?";
}
/// The type an op's expression computes in (`T` in ops.def).
const char* compute_type(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kI32: return "W32";
    case DType::kBool: return "unsigned char";
    case DType::kBF16:  // bf16 and f16 are read only by casts, shape ops and products
    case DType::kF16:   // (ir/graph.cc): no expression computes in them
    case DType::kI8:    // (nor in i8)
      break;
  }
  return "?";
}

std::string cast_expr(DType from, DType to, const std::string& x) {
  if (from == to) return x;
  // bf16 and f16 are cast only from and to f32 (ir/graph.cc).
  if (to == DType::kBF16) return "tg_f2bf(" + x + ")";
  if (from == DType::kBF16) return "tg_bf2f(" + x + ")";
  if (to == DType::kF16) return "tg_f2h(" + x + ")";
  if (from == DType::kF16) return "tg_h2f(" + x + ")";
  if (to == DType::kBool) return "(unsigned char)(" + x + " != 0)";
  if (to == DType::kI32 && from == DType::kF32) return "tg_f2i(" + x + ")";
  return std::string("(") + storage_type(to) + ")(" + x + ")";
}

}  // namespace

std::vector<int32_t> group_inputs(const ir::Graph& graph, const passes::KernelGroup& group) {
  std::vector<int32_t> inputs;
  for (int32_t id : group.nodes)
    for (int32_t in : graph.node(id).inputs)
      if (std::find(group.nodes.begin(), group.nodes.end(), in) == group.nodes.end() &&
          std::find(inputs.begin(), inputs.end(), in) == inputs.end())
        inputs.push_back(in);
  return inputs;
}

namespace {

/// One group as a device function `<fn>(in…, out…, i)` computing element i (i: unsigned when every
/// offset fits in 31 bits, else long long), plus
/// the per-node functions it calls (named after node ids, so parts of one graph never clash).
struct GroupPart {
  std::string functions, body, params;  // params: the part's parameter list
  std::vector<int32_t> inputs;
};

GroupPart group_part(const ir::Graph& graph, const passes::KernelGroup& group,
                     const std::vector<std::vector<int64_t>>& input_strides, const std::string& fn) {
  if (group.kind != passes::KernelGroup::Kind::kElementwise) throw Error("[cuda] not an elementwise group");
  GroupPart part;
  part.inputs = group_inputs(graph, group);
  // One stride list per input, then optionally one per stored output (dense when absent).
  if (input_strides.size() != part.inputs.size() &&
      input_strides.size() != part.inputs.size() + group.outputs.size())
    throw Error("[cuda] fused_group_kernel: one stride list per input (and per output) needed");
  const Shape shape = graph.node(group.nodes.front()).shape;
  for (int32_t id : group.nodes)
    if (graph.node(id).op == ir::Op::kSum)
      throw Error("[cuda] a group with reduction sinks needs fused_sinks_kernel");
  auto value = [&](int32_t id) {
    const auto at = std::find(part.inputs.begin(), part.inputs.end(), id);
    return at != part.inputs.end() ? "x" + std::to_string(at - part.inputs.begin())
                                   : "v" + std::to_string(id);
  };
  const NodeCode code = group_node_code(graph, group, value, "  ");
  std::ostringstream params;
  for (size_t i = 0; i < part.inputs.size(); ++i)
    params << "const " << storage_type(graph.node(part.inputs[i]).dtype) << "* __restrict__ in" << i << ", ";
  for (size_t o = 0; o < group.outputs.size(); ++o)
    params << storage_type(graph.node(group.outputs[o]).dtype) << "* __restrict__ out" << o << ", ";
  part.params = params.str();
  std::ostringstream src;
  // 32-bit index arithmetic when every offset fits: broadcast and transposed inputs unravel
  // the index with constant divisions, a multiply-high each instead of a dozen instructions.
  const bool narrow = narrow_index(numel(shape), shape, input_strides);
  src << "__device__ __forceinline__ void " << fn << "(" << part.params << (narrow ? "unsigned" : "long long")
      << " i) {\n";
  for (size_t i = 0; i < part.inputs.size(); ++i)
    src << "  const " << storage_type(graph.node(part.inputs[i]).dtype) << " x" << i << " = in" << i << "["
        << strided_offset(shape, input_strides[i], "i", narrow ? "u" : "LL") << "];\n";
  src << code.body;
  // int32 results leave their functions as W32; storing them needs the int inside.
  for (size_t o = 0; o < group.outputs.size(); ++o) {
    const size_t k = part.inputs.size() + o;
    const bool strided = k < input_strides.size() && !is_contiguous_strides(input_strides[k], shape);
    if (!strided) {
      src << "  out" << o << "[i] = " << value(group.outputs[o]) << ";\n";
      continue;
    }
    const std::vector<int64_t>& st = input_strides[k];
    src << "  {\n    const long long at = " << strided_offset(shape, st, "i", narrow ? "u" : "LL")
        << ";\n    out" << o << "[at] = " << value(group.outputs[o]) << ";\n";
    // Rows padded to `ld` (the schedule's group_output_strides): the thread of each row's
    // last element zeroes the padding, which products may read as zeros.
    const size_t r = shape.size();
    const int64_t cols = shape.back(), ld = r >= 2 ? st[r - 2] : cols;
    if (r >= 2 && st[r - 1] == 1 && ld > cols)
      src << "    if ((long long)(i) % " << cols << "LL == " << cols - 1
          << "LL)\n      for (int z = 1; z <= " << ld - cols << "; ++z) out" << o << "[at + z] = 0;\n";
    src << "  }\n";
  }
  src << "}\n";
  part.functions = code.functions;
  part.body = src.str();
  return part;
}

/// "in0, in1, …, out0, …" for a part's call.
std::string part_arguments(const GroupPart& part, size_t outputs, const std::string& prefix) {
  std::string args;
  for (size_t i = 0; i < part.inputs.size(); ++i) args += prefix + "in" + std::to_string(i) + ", ";
  for (size_t o = 0; o < outputs; ++o) args += prefix + "out" + std::to_string(o) + ", ";
  return args;
}

std::string prefixed_params(const std::string& params, const std::string& prefix) {
  std::string out = params;
  for (const char* name : {"in", "out"}) {
    const std::string from = std::string("__restrict__ ") + name,
                      to = std::string("__restrict__ ") + prefix + name;
    for (size_t at = out.find(from); at != std::string::npos; at = out.find(from, at + to.size()))
      out.replace(at, from.size(), to);
  }
  return out;
}

}  // namespace

GroupKernel fused_group_kernel(const ir::Graph& graph, const passes::KernelGroup& group,
                               const std::vector<std::vector<int64_t>>& input_strides,
                               const std::string& name) {
  const GroupPart part = group_part(graph, group, input_strides, "part");
  GroupKernel k;
  k.name = name;
  k.inputs = part.inputs;
  // kGroupPerThread elements per thread, blockDim apart (each access still coalesced): one
  // element per thread keeps too few loads in flight to reach the memory bandwidth.
  const std::string per = std::to_string(kGroupPerThread);
  k.source = std::string(prelude()) + part.functions + part.body + "extern \"C\" __global__ void " + name +
             "(" + part.params +
             "long long n) {\n  const long long base = (long long)blockIdx.x * blockDim.x * " + per +
             " + threadIdx.x;\n#pragma unroll\n  for (int k = 0; k < " + per +
             "; ++k) {\n    const long long i = base + (long long)k * blockDim.x;\n    if (i < n) part(" +
             part_arguments(part, group.outputs.size(), "") + "i);\n  }\n}\n";
  return k;
}

void fused_group_launch(Launch& l, int64_t n) {
  constexpr int64_t kThreads = 256;
  l.block[0] = static_cast<unsigned>(kThreads);
  l.grid[0] = static_cast<unsigned>(
      std::max<int64_t>(1, (n + kThreads * kGroupPerThread - 1) / (kThreads * kGroupPerThread)));
}

Launch batched_groups_kernel(const ir::Graph& graph, const std::vector<const passes::KernelGroup*>& groups,
                             const std::vector<std::vector<std::vector<int64_t>>>& input_strides,
                             const std::string& name) {
  constexpr int64_t kThreads = 256;
  std::string functions, bodies, params, dispatch;
  int64_t first_block = 0;
  for (size_t p = 0; p < groups.size(); ++p) {
    const std::string fn = "part" + std::to_string(p), prefix = "p" + std::to_string(p) + "_";
    const GroupPart part = group_part(graph, *groups[p], input_strides[p], fn);
    functions += part.functions;
    bodies += part.body;
    params += prefixed_params(part.params, prefix);
    const int64_t n = graph.node(groups[p]->nodes.front()).numel();
    const int64_t blocks = std::max<int64_t>(1, (n + kThreads - 1) / kThreads);
    dispatch += "  if (b < " + std::to_string(first_block + blocks) + "LL) {\n    const long long i = (b - " +
                std::to_string(first_block) + "LL) * " + std::to_string(kThreads) +
                "LL + threadIdx.x;\n    if (i < " + std::to_string(n) + "LL) " + fn + "(" +
                part_arguments(part, groups[p]->outputs.size(), prefix) + "i);\n    return;\n  }\n";
    first_block += blocks;
  }
  params.resize(params.size() - 2);  // the last ", "
  Launch l;
  l.name = name;
  l.source = std::string(prelude()) + functions + bodies + "extern \"C\" __global__ void " + name + "(" +
             params + ") {\n  const long long b = blockIdx.x;\n" + dispatch + "}\n";
  l.block[0] = static_cast<unsigned>(kThreads);
  l.grid[0] = static_cast<unsigned>(first_block);
  return l;
}

}  // namespace tg::backend::cuda

namespace tg::backend::cuda {

const char* cuda_type(DType t) { return storage_type(t); }
std::string_view group_prelude() { return prelude(); }

NodeCode group_node_code(const ir::Graph& graph, const passes::KernelGroup& group,
                         const std::function<std::string(int32_t)>& value, const std::string& indent) {
  NodeCode code;
  std::ostringstream fns, body;
  for (int32_t id : group.nodes) {
    const ir::Node& n = graph.node(id);
    if (n.op == ir::Op::kSum) continue;  // a reduction sink: its generator accumulates it
    const DType in_t = graph.node(n.inputs[n.op == ir::Op::kWhere ? 1 : 0]).dtype;
    std::string expr;
    if (n.op == ir::Op::kCast) {
      expr = cast_expr(in_t, n.dtype, value(n.inputs[0]));
    } else if (n.op == ir::Op::kWhere) {
      expr = "(" + value(n.inputs[0]) + " ? " + value(n.inputs[1]) + " : " + value(n.inputs[2]) + ")";
    } else {
      const ir::OpKind kind = ir::op_info(n.op).kind;
      const bool binary = kind == ir::OpKind::kBinary || kind == ir::OpKind::kCompare;
      const std::string ct = compute_type(in_t), st = storage_type(in_t);
      fns << "__device__ __forceinline__ " << storage_type(n.dtype) << " f" << id << "(" << st << " ra"
          << (binary ? ", " + st + " rb" : "") << ") {\n  typedef " << ct << " T;\n  const T a = T(ra);\n"
          << (binary ? "  const T b = T(rb);\n" : "") << "  return (" << storage_type(n.dtype) << ")("
          << (kind == ir::OpKind::kCompare ? std::string(op_expression(n.op))
                                           : "(" + std::string(op_expression(n.op)) + ")")
          << ");\n}\n";
      expr = "f" + std::to_string(id) + "(" + value(n.inputs[0]) + (binary ? ", " + value(n.inputs[1]) : "") +
             ")";
    }
    body << indent << "const " << storage_type(n.dtype) << " v" << id << " = " << expr << ";\n";
  }
  code.functions = fns.str();
  code.body = body.str();
  return code;
}

std::string strided_offset(const Shape& shape, const std::vector<int64_t>& strides, const std::string& i,
                           const char* suffix) {
  if (is_contiguous_strides(strides, shape)) return "(" + i + ")";
  int64_t dense = 1;
  std::string offset;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != 0) {
      std::string coord =
          dense == 1 ? "(" + i + ")" : "((" + i + ") / " + std::to_string(dense) + suffix + ")";
      if (dense * shape[d] < numel(shape))
        coord = "(" + coord + " % " + std::to_string(shape[d]) + suffix + ")";
      offset += (offset.empty() ? "" : " + ") + coord +
                (strides[d] == 1 ? "" : " * " + std::to_string(strides[d]) + suffix);
    }
    dense *= shape[d];
  }
  return offset.empty() ? std::string("0") + suffix : offset;
}

bool narrow_index(int64_t n, const Shape& shape, const std::vector<std::vector<int64_t>>& strides) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  if (n >= kLimit) return false;
  for (const std::vector<int64_t>& st : strides) {
    int64_t top = 0;
    for (size_t d = 0; d < shape.size() && d < st.size(); ++d) {
      if (st[d] < 0) return false;
      top += (shape[d] - 1) * st[d];
    }
    if (top >= kLimit) return false;
  }
  return true;
}

void elementwise_launch(Launch& l, int64_t n) {
  constexpr int64_t kThreads = 256;
  l.block[0] = static_cast<unsigned>(kThreads);
  l.grid[0] = static_cast<unsigned>(std::max<int64_t>(1, (n + kThreads - 1) / kThreads));
}

namespace {

// The flat index i of the thread's element: `unsigned` with narrow (see narrow_index), the
// suffix of its literals being "u", else long long and "LL".
std::string kernel_head(const std::string& name, const std::string& params, int64_t n, bool narrow = false) {
  const std::string idx = narrow ? "unsigned" : "long long";
  return "extern \"C\" __global__ void " + name + "(" + params + ") {\n" + "  const " + idx + " i = (" + idx +
         ")blockIdx.x * blockDim.x + threadIdx.x;\n" + "  if (i >= " + std::to_string(n) +
         (narrow ? "u" : "LL") + ") return;\n";
}

// A kernel out[i] = value(i) for the n elements of a dense output of type t, `value` being the
// body of a device lambda over the flat index i (IDX: unsigned with narrow, else long long;
// literals take the suffix "u" or "LL"). With 4-byte elements and n a multiple of 4 a thread
// writes four consecutive elements, one 16-byte store when `out` is aligned: a quarter of the
// blocks and of the store instructions (one element per thread keeps too few stores in flight
// to reach the memory bandwidth).
Launch per_element_kernel(const std::string& name, const std::string& params, const std::string& t, int64_t n,
                          bool narrow, const std::string& value_body) {
  const bool vec = (t == "float" || t == "int") && n % 4 == 0;
  const std::string idx = narrow ? "unsigned" : "long long", sfx = narrow ? "u" : "LL";
  std::string s = "extern \"C\" __global__ void " + name + "(" + params + ") {\n  typedef " + idx + " IDX;\n";
  s += "  auto value = [&](IDX i) -> " + t + " {\n" + value_body + "  };\n";
  s += "  const IDX q = (IDX)blockIdx.x * blockDim.x + threadIdx.x;\n";
  if (vec) {
    const std::string t4 = t + "4";
    s += "  const IDX i = q * 4" + sfx + ";\n  if (i >= " + std::to_string(n) + sfx + ") return;\n";
    s += "  const " + t + " a = value(i), b = value(i + 1), c = value(i + 2), d = value(i + 3);\n";
    s += "  if ((reinterpret_cast<unsigned long long>(out) & 15) == 0) {\n";
    s += "    *reinterpret_cast<" + t4 + "*>(out + i) = make_" + t4 + "(a, b, c, d);\n";
    s += "  } else {\n    out[i] = a;\n    out[i + 1] = b;\n    out[i + 2] = c;\n    out[i + 3] = d;\n  "
         "}\n}\n";
  } else {
    s += "  if (q >= " + std::to_string(n) + sfx + ") return;\n  out[q] = value(q);\n}\n";
  }
  Launch l;
  l.name = name;
  l.source = std::move(s);
  elementwise_launch(l, vec ? n / 4 : n);
  return l;
}

}  // namespace

Launch copy_kernel(const std::string& name, const Operand& in) {
  const std::string t = storage_type(in.dtype);
  const bool narrow = narrow_index(numel(in.shape), in.shape, {in.strides});
  return per_element_kernel(
      name, "const " + t + "* __restrict__ in, " + t + "* __restrict__ out", t, numel(in.shape), narrow,
      "    return in[" + strided_offset(in.shape, in.strides, "i", narrow ? "u" : "LL") + "];\n");
}

Launch pad_copy_kernel(const std::string& name, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                       int64_t rows_p, int64_t cols_p, bool col_major, DType dtype) {
  auto c = [](int64_t x) { return std::to_string(x) + "LL"; };
  const std::string t = storage_type(dtype);
  Launch l;
  l.name = name;
  l.source =
      kernel_head(name, "const " + t + "* __restrict__ in, " + t + "* __restrict__ out", rows_p * cols_p) +
      (col_major ? "  const long long r = i % " + c(rows_p) + ", c = i / " + c(rows_p) + ";\n"
                 : "  const long long r = i / " + c(cols_p) + ", c = i % " + c(cols_p) + ";\n") +
      "  out[i] = r < " + c(rows) + " && c < " + c(cols) + " ? in[r * " + c(rs) + " + c * " + c(cs) +
      "] : (" + t + ")0;\n}\n";
  elementwise_launch(l, rows_p * cols_p);
  return l;
}

Launch split_copy_kernel(const std::string& name, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                         int64_t rows_p, int64_t cols_p, bool col_major, int k_axis, bool lo_first) {
  auto c = [](int64_t x) { return std::to_string(x) + "LL"; };
  // Position of (r, c) in half h of the stacked buffer, in its orientation.
  const std::string R = c(rows_p), C = c(cols_p);
  auto at = [&](const std::string& h) {
    if (!col_major)
      return k_axis == 1 ? "r * 2 * " + C + " + " + h + " * " + C + " + c"
                         : "(" + h + " * " + R + " + r) * " + C + " + c";
    return k_axis == 1 ? "(" + h + " * " + C + " + c) * " + R + " + r"
                       : "c * 2 * " + R + " + " + h + " * " + R + " + r";
  };
  Launch l;
  l.name = name;
  l.source = kernel_head(name, "const float* __restrict__ in, float* __restrict__ out", rows_p * cols_p) +
             (col_major ? "  const long long r = i % " + R + ", c = i / " + R + ";\n"
                        : "  const long long r = i / " + C + ", c = i % " + C + ";\n") +
             "  const float x = r < " + c(rows) + " && c < " + c(cols) + " ? in[r * " + c(rs) + " + c * " +
             c(cs) + "] : 0.0f;\n" +
             "  unsigned hi, lo;\n"
             "  asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(hi) : \"f\"(x));\n"
             "  asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(lo) : \"f\"(x - __uint_as_float(hi)));\n" +
             "  out[" + at(lo_first ? "1" : "0") + "] = __uint_as_float(hi);\n" + "  out[" +
             at(lo_first ? "0" : "1") + "] = __uint_as_float(lo);\n}\n";
  elementwise_launch(l, rows_p * cols_p);
  return l;
}

Launch product_kernel(const std::string& name, const Shape& shape, const std::vector<int64_t>& a_strides,
                      const std::vector<int64_t>& b_strides, DType operands) {
  Launch l;
  l.name = name;
  const bool narrow = narrow_index(numel(shape), shape, {a_strides, b_strides});
  const char* sfx = narrow ? "u" : "LL";
  // bf16 and f16 operands are widened exactly and multiplied in f32.
  const std::string t = storage_type(operands), widen = operands == DType::kBF16  ? "tg_bf2f"
                                                        : operands == DType::kF16 ? "tg_h2f"
                                                                                  : "";
  l.source =
      (is_half(operands) ? std::string(prelude()) : std::string()) +
      kernel_head(name,
                  "const " + t + "* __restrict__ a, const " + t + "* __restrict__ b, float* __restrict__ out",
                  numel(shape), narrow) +
      "  out[i] = " + widen + "(a[" + strided_offset(shape, a_strides, "i", sfx) + "]) * " + widen + "(b[" +
      strided_offset(shape, b_strides, "i", sfx) + "]);\n}\n";
  elementwise_launch(l, numel(shape));
  return l;
}

Launch concat_kernel(const std::string& name, const std::vector<Operand>& ins, const Shape& out_shape,
                     int axis) {
  const std::string t = storage_type(ins.at(0).dtype);
  const auto ax = static_cast<size_t>(axis);
  int64_t inner = 1;
  for (size_t d = ax + 1; d < out_shape.size(); ++d) inner *= out_shape[d];
  std::string params;
  for (size_t k = 0; k < ins.size(); ++k)
    params += "const " + t + "* __restrict__ in" + std::to_string(k) + ", ";
  params += t + "* __restrict__ out";
  // Every input's offsets stay below its own size, which the output's extent bounds.
  const bool narrow = narrow_index(numel(out_shape), out_shape, {}) &&
                      std::all_of(ins.begin(), ins.end(), [](const Operand& o) {
                        return narrow_index(numel(o.shape), o.shape, {o.strides});
                      });
  const std::string sfx = narrow ? "u" : "LL";
  std::ostringstream body;
  // The coordinate along the axis picks the input; the flat index within that input keeps the
  // outer and inner coordinates and shifts the axis one.
  body << "    const IDX outer = i / " << inner * out_shape[ax] << sfx << ", c = (i / " << inner << sfx
       << ") % " << out_shape[ax] << sfx << ", inner = i % " << inner << sfx << ";\n";
  int64_t start = 0;
  for (size_t k = 0; k < ins.size(); ++k) {
    const int64_t len = ins[k].shape[ax];
    body << "    if (c < " << start + len << sfx << ") {\n      const IDX j = (outer * " << len << sfx
         << " + (c - " << start << sfx << ")) * " << inner << sfx << " + inner;\n      return in" << k << "["
         << strided_offset(ins[k].shape, ins[k].strides, "j", sfx.c_str()) << "];\n    }\n";
    start += len;
  }
  body << "    return (" << t << ")0;  // not reached: the inputs cover the axis\n";
  return per_element_kernel(name, params, t, numel(out_shape), narrow, body.str());
}

Launch rotary_kernel(const std::string& name, const Operand& x, const Operand& cos, const Operand& sin) {
  const Shape& shape = x.shape;
  const int64_t d = shape.back(), h = d / 2;
  const bool narrow = narrow_index(numel(shape), shape, {x.strides, cos.strides, sin.strides});
  const std::string sfx = narrow ? "u" : "LL";
  std::ostringstream body;  // (per_element_kernel's own locals are a, b, c, d, i, q)
  // Element i of a row pairs with i + D/2 (first half, negated) or i − D/2 (second half).
  body << "    const bool first = i % " << d << sfx << " < " << h << sfx << ";\n";
  body << "    const IDX p = first ? i + " << h << sfx << " : i - " << h << sfx << ";\n";
  body << "    const float xp = rx[" << strided_offset(shape, x.strides, "p", sfx.c_str()) << "];\n";
  body << "    return rx[" << strided_offset(shape, x.strides, "i", sfx.c_str()) << "] * rc["
       << strided_offset(shape, cos.strides, "i", sfx.c_str()) << "] + (first ? -xp : xp) * rs["
       << strided_offset(shape, sin.strides, "i", sfx.c_str()) << "];\n";
  return per_element_kernel(
      name,
      "const float* __restrict__ rx, const float* __restrict__ rc, const float* __restrict__ rs, "
      "float* __restrict__ out",
      "float", numel(shape), narrow, body.str());
}

Launch unslice_kernel(const std::string& name, const Operand& in, const Shape& out_shape, int axis,
                      int64_t start, int64_t step) {
  const std::string t = storage_type(in.dtype);
  const auto ax = static_cast<size_t>(axis);
  int64_t inner = 1;
  for (size_t d = ax + 1; d < out_shape.size(); ++d) inner *= out_shape[d];
  const int64_t count = in.shape[ax];
  const bool narrow =
      narrow_index(numel(out_shape), out_shape, {}) && narrow_index(numel(in.shape), in.shape, {in.strides});
  const std::string sfx = narrow ? "u" : "LL";
  std::ostringstream body;
  body << "    const IDX outer = i / " << inner * out_shape[ax] << sfx << ", c = (i / " << inner << sfx
       << ") % " << out_shape[ax] << sfx << ", inner = i % " << inner << sfx << ";\n"
       << "    if (" << (start > 0 ? "c < " + std::to_string(start) + sfx + " || " : "") << "(c - " << start
       << sfx << ") % " << step << sfx << " != 0 || (c - " << start << sfx << ") / " << step << sfx
       << " >= " << count << sfx << ") return (" << t << ")0;\n"
       << "    const IDX j = (outer * " << count << sfx << " + (c - " << start << sfx << ") / " << step << sfx
       << ") * " << inner << sfx << " + inner;\n"
       << "    return in[" << strided_offset(in.shape, in.strides, "j", sfx.c_str()) << "];\n";
  return per_element_kernel(name, "const " + t + "* __restrict__ in, " + t + "* __restrict__ out", t,
                            numel(out_shape), narrow, body.str());
}

}  // namespace tg::backend::cuda
