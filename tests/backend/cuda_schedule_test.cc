// The schedule with the CUDA backend's capabilities, on the CPU machine (no GPU needed): the
// fused steps it makes for a GPT training step (norms with their affine, norm gradients with
// their neighbours, products with bias and residual epilogues, attention's packed gradients),
// the scratch each product step asks for matching the plan the emitter will run, and an arena
// in which no two buffers live at a common launch overlap.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include "backend/cuda/capabilities.h"
#include "backend/cuda_test_util.h"
#include "ir/api_util.h"
#include "passes/schedule.h"

namespace {

using namespace tg;
using passes::Step;

const ir::Graph& gpt_training_graph(Program& train) { return detail::compiled_graph(train); }

int count_steps(const passes::Schedule& s, const std::function<bool(const Step&)>& pred) {
  return static_cast<int>(std::count_if(s.steps.begin(), s.steps.end(), pred));
}

TEST(CudaSchedule, GptTrainingStepFusesNormsProductsAndAttentionGradients) {
  nn::Gpt gpt({.vocab = 50, .seq_len = 16, .layers = 2, .d_model = 64, .heads = 4});
  auto train = compile_train(gpt, [&](Tensor ids, Tensor targets) { return gpt.loss(ids, targets); },
                             {.inputs = {{"ids", {4, 16}, DType::kI32}, {"targets", {4, 16}, DType::kI32}},
                              .optimizer = AdamW{.lr = 1e-3},
                              .clip_grad_norm = 1.0,
                              .device = Device::ref()});
  const ir::Graph& g = gpt_training_graph(train);
  for (bool tf32 : {false, true}) {
    backend::PrepareOptions options;
    options.tf32 = tf32;
    const backend::cuda::CudaCapabilities caps(tg::testing::sm90_device(), options);
    const passes::Schedule s = passes::schedule(g, caps);
    // Every layer norm (two per block and the final one) writes its affine value itself.
    EXPECT_EQ(count_steps(s, [](const Step& st) { return st.fused.mul >= 0; }), 2 * 2 + 1);
    // Their gradients take dy = dz·w and the Σ dz, Σ dz·x̂ reductions along.
    EXPECT_EQ(
        count_steps(
            s, [](const Step& st) { return st.fused.dw >= 0 && st.fused.db >= 0 && st.fused.dy_mul >= 0; }),
        2 * 2 + 1);
    // x·W + b products carry the bias; some carry a residual connection.
    EXPECT_GE(count_steps(s, [](const Step& st) { return st.fused.bias_add >= 0; }), 2 * 2);
    EXPECT_GE(count_steps(s, [](const Step& st) { return st.fused.residual_add >= 0; }), 1);
    // No elementwise group still holds a node a fused step computes.
    for (const Step& st : s.steps)
      if (st.kind == Step::Kind::kGroup)
        for (int32_t id : st.nodes)
          for (const Step& other : s.steps)
            if (other.kind == Step::Kind::kNode && &other != &st) {
              EXPECT_EQ(std::count(other.nodes.begin() + 1, other.nodes.end(), id), 0) << "node %" << id;
            }
    // Each product step's scratch is what the emitter's plan will use.
    for (const Step& st : s.steps) {
      if (st.kind != Step::Kind::kNode || g.node(st.node).op != ir::Op::kMatmul) continue;
      passes::ProductCandidates c;
      c.bias_add = st.fused.bias_add, c.gelu = st.fused.gelu, c.residual_add = st.fused.residual_add;
      const backend::cuda::ProductPlan p = backend::cuda::plan_product(
          g, st.node, {st.in[0], st.in[1]}, s.buffers, c, tg::testing::sm90_device(), options);
      EXPECT_EQ(p.choice.scratch.size(), st.scratch.size()) << "product %" << st.node;
      EXPECT_EQ(p.choice.bias, st.fused.bias_add >= 0);
      EXPECT_EQ(p.choice.residual, st.fused.residual_add >= 0);
    }
    // The arena: every buffer a step touches (its scratch too) is live at its launch, and
    // buffers live at a common launch never overlap.
    for (const Step& st : s.steps)
      for (const auto* places : {&st.in, &st.out, &st.scratch})
        for (const passes::Place& p : *places) {
          const passes::Buffer& b = s.buffers[static_cast<size_t>(p.buffer)];
          if (b.home != passes::Buffer::Home::kArena) continue;
          EXPECT_TRUE(b.first <= st.launch && st.launch <= b.last)
              << "launch " << st.launch << ", buffer live [" << b.first << ", " << b.last << "]";
        }
    for (int32_t t = 0; t <= s.launches; ++t) {
      std::vector<const passes::Buffer*> live;
      for (const passes::Buffer& b : s.buffers)
        if (b.home == passes::Buffer::Home::kArena && b.bytes > 0 && b.first <= t && t <= b.last)
          live.push_back(&b);
      for (size_t i = 0; i < live.size(); ++i)
        for (size_t j = i + 1; j < live.size(); ++j)
          ASSERT_FALSE(live[i]->offset < live[j]->offset + live[j]->bytes &&
                       live[j]->offset < live[i]->offset + live[i]->bytes)
              << "two buffers overlap at launch " << t;
    }
  }
}

TEST(CudaSchedule, Bf16ProductOperandsHaveAlignedRows) {
  // A vocabulary of 1030 (≥ 1024, not a multiple of 8): the bf16 copies of the logits'
  // gradient [64, 1030] and of the tied head's wteᵀ [64, 1030] would have 2060-byte rows; the
  // groups casting them write them padded to 1088 elements.
  nn::Gpt gpt({.vocab = 1030, .seq_len = 16, .layers = 1, .d_model = 64, .heads = 4});
  auto train = compile_train(gpt, [&](Tensor ids, Tensor targets) { return gpt.loss(ids, targets); },
                             {.inputs = {{"ids", {4, 16}, DType::kI32}, {"targets", {4, 16}, DType::kI32}},
                              .device = Device::ref(),
                              .precision = Precision::kBf16});
  const ir::Graph& g = gpt_training_graph(train);
  const backend::cuda::CudaCapabilities caps(tg::testing::sm90_device(), {});
  const passes::Schedule s = passes::schedule(g, caps);
  int products = 0, padded = 0;
  for (const Step& st : s.steps) {
    if (st.kind != Step::Kind::kNode || g.node(st.node).op != ir::Op::kMatmul) continue;
    if (g.node(g.node(st.node).inputs[0]).dtype != DType::kBF16) continue;
    ++products;
    for (size_t k = 0; k < 2; ++k) {  // the operands (epilogue inputs follow)
      const passes::Place& p = st.in[k];
      const size_t r = p.strides.size();
      // The larger of the last two strides is the leading dimension (row- or column-major).
      const int64_t ld = std::max(p.strides[r - 2], p.strides[r - 1]);
      EXPECT_EQ(ld * 2 % 16, 0) << "product %" << st.node << " reads bf16 rows " << ld << " elements apart";
      EXPECT_EQ(p.offset % 16, 0) << "product %" << st.node;
      padded += ld == 1088;
      // Padded rows are zero-filled by the group that writes them, so a product can pad its
      // reduction axis in place.
      if (ld == 1088) {
        EXPECT_EQ(s.buffers[static_cast<size_t>(p.buffer)].pad_ld, 1088);
        EXPECT_EQ(s.buffers[static_cast<size_t>(p.buffer)].pad_cols, 1030);
      }
    }
    // The head's products run on aligned extents with no padded copies.
    const backend::cuda::ProductPlan plan = backend::cuda::plan_product(
        g, st.node, {st.in[0], st.in[1]}, s.buffers, {}, tg::testing::sm90_device(), {});
    EXPECT_FALSE(plan.pad_copy[0] || plan.pad_copy[1]) << "product %" << st.node;
    for (int64_t extent : {plan.pm, plan.pn, plan.pk})
      EXPECT_TRUE(extent < 1024 || extent % 64 == 0) << "product %" << st.node << " extent " << extent;
  }
  EXPECT_EQ(products, 3 * 4 + 3);  // per block qkv, proj, fc, fc2 (each forward, dx, dw); the head
  // The head's forward reads the bf16 copy of wteᵀ [64, 1030] (padded too), dx reads the
  // gradient and that copy transposed, dw reads the gradient.
  EXPECT_EQ(padded, 4);
}

}  // namespace

namespace {
// f16 with its loss scaling, and any precision skipping non-finite steps, keep the fused
// norm gradients: the unscaling and the finiteness check read the parameters' gradients
// without splitting the groups the norm-backward match absorbs.
TEST(CudaSchedule, LossScalingKeepsTheFusedNormGradients) {
  for (const auto& [precision, skip] : {std::pair{Precision::kBf16, false}, std::pair{Precision::kBf16, true},
                                        std::pair{Precision::kF16, false}}) {
    nn::Gpt gpt({.vocab = 50, .seq_len = 16, .layers = 2, .d_model = 64, .heads = 4});
    auto train = compile_train(gpt, [&](Tensor ids, Tensor targets) { return gpt.loss(ids, targets); },
                               {.inputs = {{"ids", {4, 16}, DType::kI32}, {"targets", {4, 16}, DType::kI32}},
                                .optimizer = AdamW{.lr = 1e-3},
                                .device = Device::ref(),
                                .precision = precision,
                                .skip_nonfinite = skip});
    const ir::Graph& g = gpt_training_graph(train);
    const backend::cuda::CudaCapabilities caps(tg::testing::sm90_device(), {});
    const passes::Schedule s = passes::schedule(g, caps);
    EXPECT_EQ(count_steps(s, [](const Step& st) { return st.fused.dw >= 0 && st.fused.db >= 0; }), 2 * 2 + 1)
        << dtype_name(precision == Precision::kF16 ? DType::kF16 : DType::kBF16) << (skip ? " skip" : "");
  }
}
}  // namespace

namespace {
// A decode step's RMSNorm read by several products (q, k and v; gate and up) is computed by
// each of them (gemv_kernel normalises the rows it reads) and emits no kernel of its own: with
// f32 weights (no concatenated copy is made), with weights held in bf16 (the products read the
// parameters themselves) and with f32 masters under bf16 (one concatenated copy per group).
/// RMSNorm steps that run as kernels of their own (no product computes them).
int norms_alone(const passes::Schedule& s, const ir::Graph& g) {
  return count_steps(s, [&](const Step& st) {
    return st.kind == Step::Kind::kNode && g.node(st.node).op == ir::Op::kRmsNorm && !st.absorbed;
  });
}

TEST(CudaSchedule, DecodeProductsSharingANormEachComputeIt) {
  constexpr int64_t kLayers = 2;
  for (const auto& [precision, held] :
       {std::pair{Precision::kFp32, false}, std::pair{Precision::kBf16, false},
        std::pair{Precision::kBf16, true}}) {
    nn::Llama model({.vocab = 256,
                     .seq_len = 16,
                     .layers = kLayers,
                     .d_model = 512,
                     .heads = 8,
                     .kv_heads = 2,
                     .mlp_hidden = 1024});
    if (held) model.store_params_as(DType::kBF16);
    auto decode =
        compile_forward(model, [&](Tensor ids, Tensor pos) { return model.logits_cached(ids, pos, 16); },
                        {.inputs = {{"ids", {1, 1}, DType::kI32}, {"pos", {1}, DType::kI32}},
                         .device = Device::ref(),
                         .precision = precision});
    const ir::Graph& g = detail::compiled_graph(decode);
    const backend::cuda::CudaCapabilities caps(tg::testing::sm90_device(), {});
    const passes::Schedule s = passes::schedule(g, caps);
    const std::string label =
        std::string(precision == Precision::kFp32 ? "f32" : "bf16") + (held ? " held" : "");
    // Every norm waits for the products that read it: none runs as a kernel of its own.
    EXPECT_EQ(norms_alone(s, g), 0) << label;
    // Products computing a norm: per layer the attention's and the MLP's readers, and the head.
    const int per_layer = precision == Precision::kBf16 && !held ? 2 : 3 + 2;
    EXPECT_EQ(count_steps(s, [](const Step& st) { return st.fused.norm_step >= 0; }), kLayers * per_layer + 1)
        << label;
  }
  // One KV head: the k and v products (64 columns) are too narrow for gemv_kernel, so the
  // attention's norm runs as a step of its own for them while q still computes it itself.
  nn::Llama narrow({.vocab = 256,
                    .seq_len = 16,
                    .layers = kLayers,
                    .d_model = 512,
                    .heads = 8,
                    .kv_heads = 1,
                    .mlp_hidden = 1024});
  auto decode = compile_forward(
      narrow, [&](Tensor ids, Tensor pos) { return narrow.logits_cached(ids, pos, 16); },
      {.inputs = {{"ids", {1, 1}, DType::kI32}, {"pos", {1}, DType::kI32}}, .device = Device::ref()});
  const ir::Graph& g = detail::compiled_graph(decode);
  const passes::Schedule s =
      passes::schedule(g, backend::cuda::CudaCapabilities(tg::testing::sm90_device(), {}));
  EXPECT_EQ(norms_alone(s, g), kLayers);
  EXPECT_EQ(count_steps(s, [](const Step& st) { return st.fused.norm_step >= 0; }), kLayers * (1 + 2) + 1);
}
// Every Sum an elementwise group accumulates is a reduction sink of that group: an f32 value the
// group computes, of the group's shape (what fused_sinks_kernel emits), also where a product
// step could take that value as its residual add: a BERT classifier's training step (padding
// mask, learned positions sliced to the sequence, token types, pooler) has such sums.
TEST(CudaSchedule, SinksAreReductionsOfTheirOwnGroup) {
  nn::Bert bert({.vocab = 60,
                 .d_model = 384,
                 .layers = 1,
                 .heads = 6,
                 .mlp_hidden = 1536,
                 .max_positions = 64,
                 .pooler = true,
                 .labels = 3});
  auto train = compile_train(bert,
                             [&](Tensor ids, Tensor mask, Tensor labels) {
                               return cross_entropy(bert.classify(bert.hidden(ids, mask)), labels);
                             },
                             {.inputs = {{"ids", {4, 64}, DType::kI32},
                                         {"mask", {4, 64}, DType::kI32},
                                         {"labels", {4}, DType::kI32}},
                              .optimizer = AdamW{.lr = 1e-3},
                              .device = Device::ref()});
  const ir::Graph& g = detail::compiled_graph(train);
  const backend::cuda::CudaCapabilities caps(tg::testing::sm90_device(), backend::PrepareOptions{});
  const passes::Schedule s = passes::schedule(g, caps);
  int sinks = 0;
  for (const Step& st : s.steps) {
    if (st.kind != Step::Kind::kGroup) continue;
    Shape shape;
    for (int32_t id : st.nodes)
      if (g.node(id).op != ir::Op::kSum) shape = g.node(id).shape;
    for (int32_t id : st.nodes) {
      const ir::Node& n = g.node(id);
      if (n.op != ir::Op::kSum) continue;
      ++sinks;
      const int32_t in = n.inputs[0];
      EXPECT_TRUE(passes::reduction_sink(g, n)) << "sum %" << id;
      EXPECT_NE(std::find(st.nodes.begin(), st.nodes.end(), in), st.nodes.end())
          << "sum %" << id << " reads %" << in << " (" << ir::op_name(g.node(in).op)
          << ") from outside its group";
      EXPECT_EQ(g.node(in).shape, shape) << "sum %" << id;
      EXPECT_EQ(g.node(in).dtype, DType::kF32) << "sum %" << id;
    }
  }
  EXPECT_GT(sinks, 0);
}

}  // namespace
