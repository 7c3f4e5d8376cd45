// The CUDA kernel templates (src/backend/cuda/kernels/*.cuh, embedded by cmake/embed_kernels.cmake)
// compile: every generator is called with parameter sets that cover each branch that changes the
// generated text, and each source is compiled by NVRTC for sm_90. No GPU is needed, only NVRTC;
// without it the test is skipped with a message saying why. Every embedded piece must appear in
// at least one of the compiled sources, so that a template nobody instantiates is noticed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "ir/strides.h"
#include "backend/cuda/executable.h"
#include "backend/cuda/codegen.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/small_matmul.h"
#include "cuda_test_util.h"
#include "tensorgrad/errors.h"

namespace {

using namespace tg;
namespace cuda = tg::backend::cuda;

struct Instance {
  std::string label, name, source;
};

cuda::Operand dense(DType t, const Shape& s) { return {t, s, contiguous_strides(s)}; }

std::vector<Instance> template_instances() {
  std::vector<Instance> out;
  auto add = [&](const std::string& label, const cuda::Launch& l) {
    out.push_back({label, l.name, l.source});
  };
  const DType f32 = DType::kF32, i32 = DType::kI32;
  const int kSms = tg::testing::sm90_device().sm_count;  // launch sizing only

  // Reductions: warp rows (vector loads or not), chunked block rows, columns; every op.
  add("reduce sum rows",
      cuda::reduce_kernel("reduce_rows", "sum", dense(f32, {37, 1000}), {1}, tg::testing::sm90_device()));
  add("reduce max chunked",
      cuda::reduce_kernel("reduce_chunked", "max", dense(f32, {4, 50304}), {1}, tg::testing::sm90_device()));
  add("reduce min i32 columns",
      cuda::reduce_kernel("reduce_cols", "min", dense(i32, {3000, 64}), {0}, tg::testing::sm90_device()));
  add("reduce argmax strided", cuda::reduce_kernel("reduce_argmax", "argmax", dense(f32, {6, 513, 7}), {1},
                                                   tg::testing::sm90_device()));
  add("gather", cuda::gather_kernel("gather", dense(f32, {50, 64}), {i32, {200, 64}, {1, 0}}, 0));
  add("update_slice", cuda::update_slice_kernel("update_slice", dense(f32, {4, 12, 64, 64}),
                                                dense(f32, {4, 12, 1, 64}), dense(i32, {4}), 2));
  const cuda::Operand qkv_rows{f32, {4, 12, 1, 64}, {2304, 64, 2304, 1}};
  add("update_rows pair", cuda::update_rows_kernel("update_rows", dense(f32, {4, 12, 64, 64}), qkv_rows,
                                                   dense(i32, {4}), 2, &qkv_rows));
  add("update_rows pair, sources laid out apart",
      cuda::update_rows_kernel("update_rows", dense(f32, {4, 12, 64, 64}), dense(f32, {4, 12, 1, 64}),
                               dense(i32, {4}), 2, &qkv_rows));
  add("rotary of a qkv view, tables broadcast",
      cuda::rotary_kernel("rotary", {f32, {1, 16, 1, 64}, {2560, 64, 2560, 1}},
                          {f32, {1, 16, 1, 64}, {0, 0, 64, 1}}, {f32, {1, 16, 1, 64}, {0, 0, 64, 1}}));
  add("rotary odd count, 64-bit offsets",
      cuda::rotary_kernel("rotary", dense(f32, {3, 1 << 30, 2}), dense(f32, {3, 1 << 30, 2}),
                          dense(f32, {3, 1 << 30, 2})));
  add("scatter_add",
      cuda::scatter_add_kernel("scatter_add", dense(f32, {300, 32}), {i32, {300, 32}, {1, 0}}, {50, 32}, 0));
  add("random", cuda::random_kernel("random", 1001, 0x123456789abcdefull));
  add("dropout", cuda::dropout_kernel("dropout", {f32, {20, 30}, {1, 20}}, 0.5, 7));
  add("sample", cuda::sample_kernel("sample", 4, 50257));
  add("cumsum rows", cuda::cumsum_kernel("cumsum_rows", dense(f32, {4, 50257}), 1, false));
  add("cumsum rows i32 reverse strided",
      cuda::cumsum_kernel("cumsum_rows_rev", {i32, {300, 70}, {1, 300}}, 1, true));
  add("cumsum lines", cuda::cumsum_kernel("cumsum_lines", dense(f32, {3, 40, 17}), 1, true));
  // quant_matmul: the 16-byte path (f32 and bf16 x), the scalar one (f16 x, groups of 4), many rows.
  add("quant_matmul vec f32",
      cuda::quant_matmul_kernel("quant_vec_f32", f32, 1, 2304, 768, 24, false, true, true));
  add("quant_matmul vec bf16",
      cuda::quant_matmul_kernel("quant_vec_bf16", DType::kBF16, 8, 5632, 2048, 64, false, true, true));
  add("quant_matmul vec, x unaligned",
      cuda::quant_matmul_kernel("quant_vec_x", DType::kBF16, 2, 64, 64, 2, false, true, false));
  add("quant_matmul scalar f16",
      cuda::quant_matmul_kernel("quant_scalar_f16", DType::kF16, 3, 7, 12, 3, false, false, false));
  add("quant_matmul rows", cuda::quant_matmul_kernel("quant_rows", f32, 40, 70, 256, 8, false, true, true));
  // 4 bits: the vector path (f32 and bf16 x) and the scalar one (groups of 2).
  add("quant_matmul 4-bit vec",
      cuda::quant_matmul_kernel("quant4_vec", f32, 1, 2304, 768, 24, true, true, true));
  add("quant_matmul 4-bit vec bf16 rows",
      cuda::quant_matmul_kernel("quant4_vec_bf16", DType::kBF16, 8, 512, 2048, 64, true, true, true));
  add("quant_matmul 4-bit scalar",
      cuda::quant_matmul_kernel("quant4_scalar", f32, 3, 7, 12, 6, true, false, false));

  // Row kernels: cached rows (warp and block), streamed rows, columns, causal; norms with and
  // without the affine epilogue, and their gradients.
  for (const bool log : {false, true}) {
    const std::string tag = log ? "log_softmax" : "softmax";
    add(tag + " cached", cuda::softmax_kernel(tag + "_cached", 37, 1000, 1, log, false, 1));
    add(tag + " streamed", cuda::softmax_kernel(tag + "_streamed", 3, 40000, 1, log, false, 1));
    add(tag + " causal", cuda::softmax_kernel(tag + "_causal", 32, 24, 1, log, true, 16));
    add(tag + " columns", cuda::softmax_kernel(tag + "_columns", 3, 50, 7, log, false, 1));
  }
  add("cross_entropy", cuda::cross_entropy_kernel("cross_entropy", 9, 50257, -100));
  add("cross_entropy_grad",
      cuda::cross_entropy_grad_kernel("cross_entropy_grad", 9, 50304, -100, -1, 50304 + 64));
  for (const int64_t cols : {768, 40000}) {
    const std::string c = std::to_string(cols);
    add("layer_norm " + c, cuda::layer_norm_kernel("layer_norm_" + c, 13, cols, 1e-5, {true, true}));
    add("layer_norm_grad " + c, cuda::layer_norm_grad_kernel("layer_norm_grad_" + c, 13, cols, 1e-5));
    add("rms_norm " + c, cuda::rms_norm_kernel("rms_norm_" + c, 13, cols, 1e-6));
    add("rms_norm_grad " + c, cuda::rms_norm_grad_kernel("rms_norm_grad_" + c, 13, cols, 1e-6));
  }
  add("norm_backward layer w",
      cuda::norm_backward_kernel("norm_backward_w", 4096, 768, 1e-5, true, true, true, true, 264));
  add("norm_backward rms",
      cuda::norm_backward_kernel("norm_backward", 4096, 100, 1e-5, false, false, false, true, 264));
  add("norm_partials", cuda::norm_partials_kernel("norm_partials", 768, 264, true, true));

  // Products: the small-matmul tilings (plain, in-block split K, cluster split K) and gemv
  // (vector rows or not, with a norm, with every epilogue).
  const cuda::MatOperand a{64, 256, 256, 1, 0}, b{256, 96, 96, 1, 0};
  add("small_matmul",
      cuda::small_matmul_kernel_with({64, 64, 32, 4, 4, 1, 1}, "small_matmul", 1, 64, 96, 256, a, b, 0));
  add("small_matmul ks", cuda::small_matmul_kernel_with({32, 32, 32, 4, 4, 2, 1}, "small_matmul_ks", 2, 64,
                                                        96, 256, a, {256, 96, 1, 256, 0}, 100));
  add("small_matmul cluster", cuda::small_matmul_kernel_with({32, 32, 64, 4, 4, 2, 4}, "small_matmul_cl", 1,
                                                             64, 96, 256, {64, 256, 1, 64, 0}, b, 0));
  add("small_matmul auto",
      cuda::small_matmul_kernel("small_matmul_auto", 1, 33, 100, 777, {33, 777, 777, 1, 0},
                                {777, 100, 100, 1, 0}, false, 0, tg::testing::sm90_device()));
  add("gemv", cuda::gemv_kernel("gemv", 4, 3072, 768, {4, 768, 768, 1, 0}, {768, 3072, 1, 768, 0},
                                {true, true, true}, 0, kSms));
  add("gemv layer norm",
      cuda::gemv_kernel("gemv_layer", 1, 2304, 768, {1, 768, 768, 1, 0}, {768, 2304, 1, 768, 0},
                        {true, false, false}, 0, kSms, {true, true, true, true, 1e-5}));
  add("gemv rms unaligned",
      cuda::gemv_kernel("gemv_rms", 3, 1000, 333, {3, 333, 1, 3, 0}, {333, 1000, 1, 333, 0},
                        {false, false, false}, 1024, kSms, {true, false, true, false, 1e-6}));
  add("gemv bf16 W, x layer-normed and rounded",
      cuda::gemv_kernel("gemv_bf16_norm", 1, 2304, 768, {1, 768, 768, 1, 0}, {768, 2304, 1, 768, 0},
                        {true, false, false}, 0, kSms, {true, true, true, true, 1e-5}, 0,
                        {.b_bf16 = true, .round_a = true}));
  add("gemv bf16 W and x",
      cuda::gemv_kernel("gemv_bf16", 4, 3072, 768, {4, 768, 768, 1, 0}, {768, 3072, 1, 768, 0},
                        {true, true, true}, 0, kSms, {}, 0, {.a_bf16 = true, .b_bf16 = true}));
  // Products without a norm whose direct grid is one resident wave take the direct kernel.
  add("gemv direct", cuda::gemv_kernel("gemv_direct", 1, 2048, 2048, {1, 2048, 2048, 1, 0},
                                       {2048, 2048, 1, 2048, 0}, {false, true, false}, 0, kSms));
  add("gemv direct bf16 W",
      cuda::gemv_kernel("gemv_direct_bf16", 1, 2048, 2048, {1, 2048, 2048, 1, 0}, {2048, 2048, 1, 2048, 0},
                        {false, true, false}, 0, kSms, {}, 0, {.b_bf16 = true, .round_a = true}));
  add("gemv bf16 unaligned",
      cuda::gemv_kernel("gemv_bf16_odd", 3, 1000, 333, {3, 333, 1, 3, 0}, {333, 1000, 1, 333, 0},
                        {false, false, false}, 1024, kSms, {}, 0, {.b_bf16 = true, .round_a = true}));
  // 4-bit W (codes, scales and offsets): staged with a norm and the rounding cast, and with bf16 x
  // and every epilogue.
  add("gemv 4-bit W, x rms-normed and rounded",
      cuda::gemv_kernel("gemv_i4_norm", 1, 2048, 2048, {1, 2048, 2048, 1, 0}, {2048, 2048, 1, 2048, 0},
                        {false, true, false}, 0, kSms, {true, false, true, false, 1e-5}, 0,
                        {.round_a = true, .b_fixed = true, .b_i8 = true, .b_i4 = true, .group = 32}));
  add("gemv 4-bit W, bf16 x", cuda::gemv_kernel("gemv_i4_bf16", 1, 5632, 2048, {1, 2048, 2048, 1, 0},
                                                {2048, 5632, 1, 2048, 0}, {true, true, true}, 0, kSms, {}, 0,
                                                {.a_bf16 = true, .b_i8 = true, .b_i4 = true, .group = 64}));
  EXPECT_THROW(
      cuda::gemv_kernel("gemv_i4_wide", 1, 64, 16384, {1, 16384, 16384, 1, 0}, {16384, 64, 1, 16384, 0},
                        {false, false, false}, 0, kSms, {}, 0, {.b_i8 = true, .b_i4 = true, .group = 32}),
      Error);
  // int8 W (quant_matmul's q with its scales): staged with a norm and the rounding cast, staged
  // with bf16 x and every epilogue, direct (eight rows of 2048), and groups of 8 (scalar loads).
  add("gemv int8 W, x rms-normed and rounded",
      cuda::gemv_kernel("gemv_i8_norm", 1, 2048, 2048, {1, 2048, 2048, 1, 0}, {2048, 2048, 1, 2048, 0},
                        {false, true, false}, 0, kSms, {true, false, true, false, 1e-6}, 0,
                        {.round_a = true, .b_fixed = true, .b_i8 = true, .group = 32}));
  add("gemv int8 W, bf16 x",
      cuda::gemv_kernel("gemv_i8_bf16", 4, 3072, 768, {4, 768, 768, 1, 0}, {768, 3072, 1, 768, 0},
                        {true, true, true}, 0, kSms, {}, 0, {.a_bf16 = true, .b_i8 = true, .group = 64}));
  add("gemv int8 W direct",
      cuda::gemv_kernel("gemv_i8_direct", 8, 5632, 2048, {8, 2048, 2048, 1, 0}, {2048, 5632, 1, 2048, 0},
                        {false, true, false}, 0, kSms, {true, false, true, false, 1e-6}, 0,
                        {.round_a = true, .b_i8 = true, .group = 32}));
  add("gemv int8 W, groups of 8",
      cuda::gemv_kernel("gemv_i8_g8", 3, 1000, 336, {3, 336, 336, 1, 0}, {336, 1000, 1, 336, 0},
                        {false, false, false}, 0, kSms, {}, 0, {.b_i8 = true, .group = 8}));

  // Selective scan: two or four states a thread, groups, vector rows, broadcast D and bias; the
  // backward's cotangent forms.
  for (cuda::ScanShape sh : {cuda::ScanShape{8, 1536, 1024, 1, 16, true, true},
                             cuda::ScanShape{1, 6, 5, 3, 2}, cuda::ScanShape{1, 8, 20, 1, 128}}) {
    const std::string n = std::to_string(sh.states);
    add("scan_forward " + n, cuda::scan_forward_kernel("scan_forward_" + n, sh, false));
    add("scan_forward keep " + n, cuda::scan_forward_kernel("scan_forward_keep_" + n, sh, true));
    add("scan_backward " + n, cuda::scan_backward_kernel("scan_backward_" + n, sh));
    add("scan_reduce " + n, cuda::scan_reduce_kernel("scan_reduce_" + n, sh));
  }
  {
    cuda::ScanShape sh{2, 64, 40, 2, 64, true};
    sh.d_stride = 0, sh.bias_stride = 0, sh.dy = cuda::ScanShape::Dy::kOne, sh.dlast = false;
    add("scan_backward dy one", cuda::scan_backward_kernel("scan_backward_one", sh));
    sh.dy = cuda::ScanShape::Dy::kZero, sh.dlast = true;
    add("scan_backward dy zero", cuda::scan_backward_kernel("scan_backward_zero", sh));
  }

  // Attention: the short-sequence path, the fp32 tiled path (causal or not, kept statistics,
  // gradient layouts, large heads) and the TF32 path.
  add("attention_at", cuda::attention_at_kernel("attention_at", {f32, {2, 12, 1, 64}, {2304, 64, 2304, 1}},
                                                dense(f32, {2, 4, 272, 64}), dense(f32, {2, 4, 272, 64}),
                                                dense(i32, {2}), 0.125));
  struct AttentionCase {
    std::string tag;
    cuda::AttentionShape s;
    bool kept;
  };
  const AttentionCase cases[] = {
      {"small causal", {2, 4, 2, 16, 16, 32, 0.17, true}, false},
      {"small", {1, 2, 1, 33, 50, 48, 0.14, false}, false},
      {"tiled causal", {2, 4, 2, 130, 130, 64, 0.125, true}, false},
      {"tiled kept", {1, 4, 4, 257, 300, 80, 0.11, false}, true},
      {"tiled bthd", {1, 2, 2, 200, 200, 200, 0.07, true, false, true}, true},
      {"tiled packed", {2, 2, 1, 100, 100, 7, 0.3, true, false, false, true}, false},
      {"mma causal", {2, 4, 2, 300, 300, 64, 0.125, true, true}, false},
      {"mma kept", {1, 4, 2, 600, 600, 128, 0.09, false, true}, true},
  };
  for (const AttentionCase& c : cases) {
    cuda::AttentionShape s = c.s;
    s.sm_count = kSms;
    const cuda::Operand q = dense(f32, {s.batch, s.q_heads, s.t, s.d}),
                        kv = dense(f32, {s.batch, s.kv_heads, s.s, s.d});
    const std::string name = "attention_" + std::to_string(out.size());
    add("attention " + c.tag, cuda::attention_kernel(name, s, q, kv, kv, q, c.kept));
    const cuda::AttentionGradPlan plan =
        cuda::attention_grad_kernels(name + "_grad", s, q, kv, kv, q, c.kept ? &q : nullptr);
    for (const cuda::Launch& l : plan.launches) add("attention grad " + c.tag + " " + l.name, l);
  }
  // bf16 and f16 q, k, v and dout (widened on load; the forward's out stays f32): each path.
  const AttentionCase half_cases[] = {
      {"small causal", {2, 4, 2, 16, 16, 32, 0.17, true}, false},
      {"tiled", {1, 2, 2, 200, 200, 200, 0.07, true}, true},
      {"mma causal", {2, 4, 2, 300, 300, 64, 0.125, true}, false},
      {"mma kept", {1, 4, 2, 600, 600, 128, 0.09, false}, true},
  };
  for (DType half : {DType::kBF16, DType::kF16})
    for (const AttentionCase& c : half_cases) {
      cuda::AttentionShape s = c.s;
      s.sm_count = kSms;
      const cuda::Operand q = dense(half, {s.batch, s.q_heads, s.t, s.d}),
                          kv = dense(half, {s.batch, s.kv_heads, s.s, s.d}),
                          o = dense(f32, {s.batch, s.q_heads, s.t, s.d});
      const std::string name = "attention_" + std::to_string(out.size());
      const std::string tag = std::string(dtype_name(half)) + " " + c.tag;
      add("attention " + tag, cuda::attention_kernel(name, s, q, kv, kv, o, c.kept));
      const cuda::AttentionGradPlan plan =
          cuda::attention_grad_kernels(name + "_grad", s, q, kv, kv, q, c.kept ? &o : nullptr);
      for (const cuda::Launch& l : plan.launches) add("attention grad " + tag + " " + l.name, l);
    }

  // The layout kernels of codegen.h.
  add("copy", cuda::copy_kernel("copy", {f32, {30, 20}, {1, 30}}));
  add("pad_copy", cuda::pad_copy_kernel("pad_copy", 30, 20, 1, 30, 32, 24, true));
  add("split_copy", cuda::split_copy_kernel("split_copy", 30, 20, 20, 1, 32, 24, false, 1, true));
  add("product", cuda::product_kernel("product", {8, 9}, {9, 1}, {0, 1}));
  add("product bf16", cuda::product_kernel("product_bf16", {8, 9}, {9, 1}, {0, 1}, DType::kBF16));
  add("product f16", cuda::product_kernel("product_f16", {8, 9}, {9, 1}, {0, 1}, DType::kF16));
  add("copy f16", cuda::copy_kernel("copy_f16", {DType::kF16, {30, 20}, {1, 30}}));
  add("copy bf16", cuda::copy_kernel("copy_bf16", {DType::kBF16, {30, 20}, {1, 30}}));
  add("concat bf16",
      cuda::concat_kernel("concat_bf16", {dense(DType::kBF16, {3, 4}), {DType::kBF16, {3, 2}, {1, 3}}},
                          {3, 6}, 1));
  add("concat", cuda::concat_kernel("concat", {dense(f32, {3, 4}), {f32, {3, 2}, {1, 3}}}, {3, 6}, 1));
  add("unslice", cuda::unslice_kernel("unslice", {f32, {5, 3}, {0, 0}}, {5, 9}, 1, 2, 3));
  add("elementwise", {"elementwise", cuda::elementwise_kernel(ir::Op::kAdd, "elementwise")});

  // The window ops: each conv mode in f32 and bf16 (the weight gradient split and not), each pool.
  ir::Window win{.kh = 3, .kw = 3, .sh = 2, .sw = 1, .ph = 1, .pw = 1, .dh = 1, .dw = 2, .groups = 2};
  const ir::WindowGeom conv{8,  4, 9, 10, 6, ir::window_out(9, 3, 2, 1, 1), ir::window_out(10, 3, 1, 1, 2),
                            win};
  // Gathering implicit GEMMs (SIMT and tensor cores) and shared-memory tiles (tf32 or bf16).
  const ir::WindowGeom wide{512, 32, 14, 14, 64, 14, 14, ir::Window{.kh = 3, .kw = 3, .ph = 1, .pw = 1}};
  for (ir::Op op : {ir::Op::kConv2d, ir::Op::kConv2dGradInput, ir::Op::kConv2dGradWeight})
    for (DType t : {f32, DType::kBF16, DType::kF16})
      for (bool tiles : {false, true})
        for (const bool is_wide : {false, true}) {  // the small one in exact f32, the wide one in tf32
          const std::string what = std::string("conv ") + ir::op_name(op) + " " + dtype_name(t) +
                                   (tiles ? " tiles" : " gather") + (is_wide ? " wide" : "");
          const cuda::ConvPlan plan = cuda::conv_kernels("conv", op, is_wide ? wide : conv, t,
                                                         /*tf32=*/is_wide, tg::testing::sm90_device(), tiles);
          for (const cuda::Launch& l : plan.launches) add(what, l);
        }
  const cuda::ConvPlan split = cuda::conv_kernels("conv_gw_split", ir::Op::kConv2dGradWeight, wide, f32, true,
                                                  tg::testing::sm90_device(), /*tiles=*/false);
  EXPECT_EQ(split.launches.size(), 2u) << "a long weight-gradient reduction is split";
  for (const cuda::Launch& l : split.launches) add("conv grad_weight split", l);
  const cuda::ConvPlan tiled_split = cuda::conv_kernels("conv_gw_tiles", ir::Op::kConv2dGradWeight, wide, f32,
                                                        true, tg::testing::sm90_device(), /*tiles=*/true);
  EXPECT_EQ(tiled_split.launches.size(), 2u) << "the tile kernels split a long weight gradient too";
  EXPECT_GT(tiled_split.launches[0].shared_bytes, 48u * 1024) << "the tiles hold a whole 14 × 14 image";
  // Grouped products (mixtures of experts): each kernel in each operand type, both weight
  // layouts, vector access and not, the gemv kernels' column groupings and row chunks; 16-bit
  // tiles on tensor cores (the default on sm_90) and on f32 FMAs.
  for (DType t : {f32, DType::kBF16, DType::kF16})
    for (const bool w_nk : {true, false}) {
      const std::string tag = std::string(dtype_name(t)) + (w_nk ? " nk" : " kn");
      const std::string base = "grouped_" + std::to_string(out.size());
      auto grouped = [&](const std::string& what, cuda::GroupedShape s, cuda::GroupedPath path) {
        s.dtype = t, s.w_nk = w_nk;
        add("grouped " + what + " " + tag,
            cuda::grouped_matmul_kernel(base + "_" + std::to_string(out.size()), s,
                                        tg::testing::sm90_device(), path));
      };
      for (const cuda::GroupedPath tiles : {cuda::GroupedPath::kTiles, cuda::GroupedPath::kFmaTiles}) {
        if (t == f32 && tiles == cuda::GroupedPath::kFmaTiles) continue;  // the same kernels
        const std::string fma = tiles == cuda::GroupedPath::kFmaTiles ? " fma" : "";
        grouped("tiles" + fma, {.rows = 4096, .k = 1024, .n = 768, .experts = 8, .aligned = true}, tiles);
        grouped("tiles odd" + fma, {.rows = 300, .k = 77, .n = 51, .experts = 5}, tiles);
        grouped("tiles even, not 16-byte" + fma,
                {.rows = 300, .k = 76, .n = 50, .experts = 5, .aligned = true}, tiles);
        grouped("grad_weight" + fma,
                {.rows = 4096, .k = 1024, .n = 768, .experts = 8, .grad_weight = true, .aligned = true},
                tiles);
        grouped("grad_weight odd" + fma, {.rows = 300, .k = 77, .n = 51, .experts = 5, .grad_weight = true},
                tiles);
      }
      grouped("gemv decode", {.rows = 8, .k = 4096, .n = 1536, .experts = 128, .aligned = true},
              cuda::GroupedPath::kAuto);
      grouped("gemv wide", {.rows = 16, .k = 2048, .n = 6000, .experts = 64, .aligned = true},
              cuda::GroupedPath::kGemv);
      grouped("gemv chunks", {.rows = 64, .k = 1024, .n = 512, .experts = 32, .aligned = true},
              cuda::GroupedPath::kAuto);
      grouped("gemv odd", {.rows = 3, .k = 77, .n = 51, .experts = 4}, cuda::GroupedPath::kAuto);
    }
  const cuda::DeviceInfo sm90 = tg::testing::sm90_device(), sm75 = tg::testing::sm90_device(7);
  EXPECT_TRUE(cuda::grouped_uses_gemv({.rows = 8, .k = 64, .n = 64, .experts = 4}, sm90));
  EXPECT_TRUE(cuda::grouped_uses_gemv({.rows = 64, .k = 64, .n = 64, .experts = 4}, sm90));
  EXPECT_FALSE(cuda::grouped_uses_gemv({.rows = 65, .k = 64, .n = 64, .experts = 4}, sm90));
  EXPECT_FALSE(
      cuda::grouped_uses_gemv({.rows = 8, .k = 64, .n = 64, .experts = 4, .grad_weight = true}, sm90));
  // w [E, K, N]: 16 rows, 8 where 16-bit tiles run on tensor cores.
  EXPECT_TRUE(cuda::grouped_uses_gemv({.rows = 16, .k = 64, .n = 64, .experts = 4, .w_nk = false}, sm90));
  EXPECT_FALSE(cuda::grouped_uses_gemv({.rows = 17, .k = 64, .n = 64, .experts = 4, .w_nk = false}, sm90));
  EXPECT_FALSE(cuda::grouped_uses_gemv(
      {.rows = 16, .k = 64, .n = 64, .experts = 4, .w_nk = false, .dtype = DType::kBF16}, sm90));
  EXPECT_TRUE(cuda::grouped_uses_gemv(
      {.rows = 8, .k = 64, .n = 64, .experts = 4, .w_nk = false, .dtype = DType::kF16}, sm90));
  EXPECT_TRUE(cuda::grouped_uses_gemv(
      {.rows = 16, .k = 64, .n = 64, .experts = 4, .w_nk = false, .dtype = DType::kBF16}, sm75));
  EXPECT_THROW(
      cuda::grouped_matmul_kernel("g", {.rows = 8, .k = 8, .n = 8, .experts = 2, .grad_weight = true},
                                  tg::testing::sm90_device(), cuda::GroupedPath::kGemv),
      Error);
  // Tensor cores for 16-bit operands from sm_80 on; f32 stays on FMAs.
  const cuda::GroupedShape half{.rows = 256, .k = 64, .n = 64, .experts = 4, .dtype = DType::kBF16};
  EXPECT_TRUE(cuda::grouped_uses_tensor_cores(half, sm90));
  EXPECT_TRUE(cuda::grouped_uses_tensor_cores(half, tg::testing::sm90_device(8)));
  EXPECT_FALSE(cuda::grouped_uses_tensor_cores(half, sm75));
  EXPECT_FALSE(cuda::grouped_uses_tensor_cores({.rows = 256, .k = 64, .n = 64, .experts = 4}, sm90));
  const std::string mma = cuda::grouped_matmul_kernel("g", half, sm90).source,
                    fma = cuda::grouped_matmul_kernel("g", half, sm75).source;
  EXPECT_NE(mma.find("mma.sync.aligned.m16n8k16.row.col.f32.bf16"), std::string::npos);
  EXPECT_EQ(fma.find("mma.sync"), std::string::npos);
  ir::Window pool{.kh = 3, .kw = 2, .sh = 2, .sw = 2, .ph = 1, .pw = 1, .count_pad = false};
  const ir::WindowGeom pg{2, 3, 7, 8, 3, ir::window_out(7, 3, 2, 1, 1), ir::window_out(8, 2, 2, 1, 1), pool};
  const ir::WindowGeom tiled{2, 3, 8, 6, 3, 4, 3, ir::Window{.kh = 2, .kw = 2, .sh = 2, .sw = 2}};
  for (ir::Op op : {ir::Op::kMaxPool2d, ir::Op::kMaxPool2dGrad, ir::Op::kAvgPool2d, ir::Op::kAvgPool2dGrad}) {
    add(std::string("pool ") + ir::op_name(op),
        cuda::pool_kernel(ir::op_name(op), op, pg, tg::testing::sm90_device()));
    add(std::string("pool tiled ") + ir::op_name(op),
        cuda::pool_kernel(ir::op_name(op), op, tiled, tg::testing::sm90_device()));
  }
  return out;
}

/// Whether `source` holds `piece`, where the words a generator substitutes (philox.cuh's
/// SEED_LO and SEED_HI, replaced by the seed) may stand for anything: the piece's text between
/// them must appear in order.
bool contains_piece(const std::string& source, std::string_view piece) {
  size_t at = 0;
  while (!piece.empty()) {
    size_t cut = piece.size(), skip = 0;
    for (std::string_view word : {"SEED_LO", "SEED_HI"})
      if (const size_t w = piece.find(word); w < cut) cut = w, skip = word.size();
    at = source.find(piece.substr(0, cut), at);
    if (at == std::string::npos) return false;
    at += cut;
    piece.remove_prefix(cut + skip);
  }
  return true;
}

TEST(CudaTemplates, EveryPieceIsNamedAndUnknownOnesThrow) {
  ASSERT_FALSE(cuda::kernel_pieces().empty());
  for (const cuda::KernelPiece& p : cuda::kernel_pieces()) {
    EXPECT_FALSE(p.text.empty()) << p.file << ":" << p.piece;
    EXPECT_EQ(cuda::kernel_source(p.file, p.piece).data(), p.text.data()) << p.file << ":" << p.piece;
  }
  EXPECT_THROW(cuda::kernel_source("attention_mma.cuh", "no_such_piece"), Error);
  EXPECT_THROW(cuda::kernel_source("no_such_file.cuh", "mma"), Error);
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
constexpr bool kSanitized = __has_feature(address_sanitizer);
#else
constexpr bool kSanitized = false;
#endif

TEST(CudaTemplatesNvrtc, EveryInstantiationCompiles) {
  // NVRTC's own work (a minute of the suite's CPU time) gains nothing from the sanitizers; the
  // release build's suite compiles every instantiation, and CudaAttentionNvrtc runs the same
  // host path under them.
  if (kSanitized) GTEST_SKIP() << "sanitizer build: every template is compiled in the release build's suite";
  setenv("TG_CUDA_CACHE", "off", 1);  // compile for real, not from an earlier run's cache
  std::string why;
  if (!tg::testing::have_nvrtc(why)) GTEST_SKIP() << "NVRTC not available, templates not compiled: " << why;
  const std::vector<Instance> instances = template_instances();
  // As an sm_90 device compiles them: prepared for programmatic dependent launches (each kernel
  // waits for the one before it and lets the next one start early; see cuda/executable.cc).
  std::vector<cuda::KernelSource> sources;
  for (const Instance& i : instances) {
    bool early = false;
    sources.push_back({i.name, cuda::pdl_source(i.source, 9, early)});
    EXPECT_TRUE(early) << i.label;
    EXPECT_NE(sources.back().source.find("griddepcontrol.launch_dependents"), std::string::npos) << i.label;
  }
  const std::vector<std::vector<char>> cubins = cuda::compile_cubins(sources, 9, 0);
  ASSERT_EQ(cubins.size(), instances.size());
  for (size_t i = 0; i < cubins.size(); ++i) EXPECT_FALSE(cubins[i].empty()) << instances[i].label;

  for (const cuda::KernelPiece& p : cuda::kernel_pieces()) {
    bool used = false;
    for (const Instance& i : instances) used = used || contains_piece(i.source, p.text);
    EXPECT_TRUE(used) << "kernels/" << p.file << ", piece " << p.piece
                      << ": no instantiation of this test uses it (add a parameter set that does)";
  }
}

}  // namespace
