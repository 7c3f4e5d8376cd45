// Weights quantized to 8 and 4 bits (tensorgrad/quantize.h, Module::store_params_as(DType::kI8[, group,
// 4])): the host arithmetic against its definition computed here in double; a quantized model must
// compute what the f32 model computes with the dequantized weights, on every backend, in f32 and
// under the precision policy, holding only the i8 values (or packed 4-bit codes), their scales (and
// offsets) and the bf16 embeddings on the device; LoRA trains over a quantized base and leaves it
// bit-identical; misuse is a clear error.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/stored_weights.h"
#include "test_util.h"

namespace tg {
namespace detail {
const ir::Graph& compiled_graph(const Program& program);
}
namespace {

using testing::rel_diff;

constexpr int64_t kQuantBatch = testing::kStoredBatch, kQuantSeq = testing::kStoredSeq;
constexpr int64_t kGroup = 16;

nn::LlamaConfig quant_config() { return testing::stored_config(/*tied_head=*/false); }
std::vector<int32_t> quant_ids(int shift = 0) { return testing::stored_ids(shift); }
Program quant_logits_program(nn::Llama& model, Device device, Precision precision) {
  return testing::stored_logits_program(model, device, precision);
}

TEST(QuantizeInt8, ScalesAndValuesFollowTheDefinition) {
  // Three groups of 4: mixed signs, a group of zeros, one whose largest value is negative.
  const HostTensor w =
      HostTensor::f32({0.5f, -1.0f, 0.25f, 0.003f, 0, 0, 0, 0, 2.0f, -8.0f, 7.9f, 1e-3f}, {2, 6});
  const std::vector<float> v(w.f32().begin(), w.f32().end());
  EXPECT_THROW(quantize_int8(w, 4), InputError);  // 4 does not divide 6
  const QuantizedTensor qt = quantize_int8(HostTensor::f32(v, {3, 4}), 4);
  ASSERT_EQ(qt.q.dtype(), DType::kI8);
  ASSERT_EQ(qt.scale.shape(), (Shape{3, 1}));
  const auto* q = static_cast<const int8_t*>(qt.q.data());
  for (int g = 0; g < 3; ++g) {
    double amax = 0;
    for (int i = 0; i < 4; ++i) amax = std::max(amax, std::fabs(double(v[size_t(4 * g + i)])));
    const double s = amax / 127;
    EXPECT_NEAR(qt.scale.f32()[size_t(g)], s, 1e-7 * s) << "group " << g;
    for (int i = 0; i < 4; ++i) {
      const double x = v[size_t(4 * g + i)];
      EXPECT_EQ(q[4 * g + i], s == 0 ? 0 : static_cast<int>(std::nearbyint(x / s))) << g << "," << i;
      EXPECT_LE(std::fabs(q[4 * g + i] * s - x), s / 2 + 1e-7) << g << "," << i;
    }
  }
  EXPECT_EQ(q[1], -127);  // the largest magnitude maps to ±127
  EXPECT_EQ(q[9], -127);
  const HostTensor back = dequantize_int8(qt.q, qt.scale);
  for (int64_t i = 0; i < 12; ++i)
    EXPECT_EQ(back.f32()[size_t(i)], float(q[i]) * qt.scale.f32()[size_t(i / 4)]);
  EXPECT_THROW(dequantize_int8(qt.scale, qt.q), InputError);
  EXPECT_THROW(quantize_int8(HostTensor::i32({1, 2}, {2}), 2), InputError);
  EXPECT_THROW(quantize_int8(HostTensor::f32({1, NAN}, {2}), 2), InputError);  // only finite values
  int8_t raw[4];
  float raw_scale[2];
  const std::vector<float> three = {1, 2, 3};
  EXPECT_THROW(quantize_int8(three, 2, raw, raw_scale), InputError);  // 2 does not divide 3
  EXPECT_THROW(quantize_int8(three, 0, raw, raw_scale), InputError);
  // i8 values widen to their integers; nothing rounds into i8 but the quantizer.
  EXPECT_EQ(qt.q.to(DType::kF32).f32()[1], -127.0f);
  EXPECT_THROW(w.to(DType::kI8), InputError);
}

/// The f32 model's weights drawn by init_params(seed), and the same weights as a quantized model
/// computes with them: every Linear's weight quantized and dequantized, the embeddings rounded to bf16.
struct Weights {
  std::map<std::string, HostTensor> f32, effective;
};

Weights weights(const nn::Llama& shape_of) {
  nn::Llama model(quant_config());
  Program p = quant_logits_program(model, Device::cpu(), Precision::kFp32);
  p.init_params(7);
  Weights w{p.download_params(), {}};
  for (const Param* param : shape_of.parameters()) {
    if (param->scales() != nullptr) continue;
    const HostTensor& t = w.f32.at(param->path());
    if (param->dtype() == DType::kI8) {
      const QuantizedTensor qt = quantize_int8(t, param->group());
      w.effective[param->path()] = dequantize_int8(qt.q, qt.scale);
    } else {
      w.effective[param->path()] = param->dtype() == DType::kBF16 ? t.to(DType::kBF16).to(DType::kF32) : t;
    }
  }
  return w;
}

class Quantized : public ::testing::TestWithParam<Device> {};

Program batch_program(nn::Llama& model, int64_t batch, Device device, Precision precision) {
  return compile_forward(
      model, [&](Tensor x) { return model.logits(x); },
      {.inputs = {{"ids", {batch, kQuantSeq}, DType::kI32}}, .device = device, .precision = precision});
}

std::vector<int32_t> batch_ids(int64_t batch, int shift = 0) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < batch * kQuantSeq; ++i) v.push_back(static_cast<int32_t>((i * 7 + 3 + shift) % 48));
  return v;
}

// Both ways a product reads the quantized weight: quant_matmul (16 rows) and the dequantized copy
// with a GEMM (64 rows).
TEST_P(Quantized, ComputesTheDequantizedModel) {
  const Device device = GetParam();
  nn::Llama stored(quant_config());
  stored.store_params_as(DType::kI8, kGroup);
  const Weights w = weights(stored);
  int quantized = 0;
  for (const Param* p : stored.parameters()) quantized += p->dtype() == DType::kI8;
  EXPECT_EQ(quantized, 2 * 7 + 1);  // q, k, v, o, gate, up, down in each layer, and the head
  for (const int64_t batch : {kQuantBatch, 4 * kQuantBatch})
    for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
      SCOPED_TRACE(std::to_string(batch * kQuantSeq) + " rows, " +
                   (precision == Precision::kFp32 ? "f32 products" : "bf16 products"));
      nn::Llama reference(quant_config());
      Program a = batch_program(reference, batch, device, precision),
              b = batch_program(stored, batch, device, precision);
      a.upload_params(w.effective);
      b.upload_params(w.f32);  // quantized as it is uploaded
      // Downloads give the i8 values and scales the host quantizer makes, exactly.
      const std::map<std::string, HostTensor> back = b.download_params();
      for (const Param* p : stored.parameters()) {
        if (p->dtype() != DType::kI8) continue;
        const QuantizedTensor qt = quantize_int8(w.f32.at(p->path()), kGroup);
        const HostTensor& q = back.at(p->path());
        ASSERT_EQ(q.dtype(), DType::kI8) << p->path();
        EXPECT_EQ(0, std::memcmp(q.data(), qt.q.data(), size_t(q.numel()))) << p->path();
        EXPECT_EQ(0, rel_diff(back.at(p->scale()->path()).f32(), qt.scale.f32())) << p->path();
      }
      const std::vector<int32_t> x = batch_ids(batch), other = batch_ids(batch, 5);
      const std::vector<float> want = a.run({{"ids", x}}).f32(), got = b.run({{"ids", x}}).f32();
      if (precision == Precision::kFp32) {
        // The same products of the same values; only the kernels' order of accumulation may differ.
        EXPECT_LT(rel_diff(got, want), 2e-6);
      } else if (batch == kQuantBatch) {
        EXPECT_LT(rel_diff(got, want), 3e-2);  // the dequantized model with its weights rounded to bf16
        // quant_matmul reads the dequantized weights in f32, where the copy's product rounds them
        // to bf16: against the same program on the reference backend instead (its double sums
        // may round an activation to the neighbouring bf16 value, 2⁻⁸ apart).
        nn::Llama ref_model(quant_config());
        ref_model.store_params_as(DType::kI8, kGroup);
        Program r = batch_program(ref_model, batch, Device::ref(), precision);
        r.upload_params(w.f32);
        EXPECT_LT(rel_diff(got, r.run({{"ids", x}}).f32()), 1e-2);
      } else {
        EXPECT_LT(rel_diff(got, want), 1e-3);
      }
      EXPECT_GT(rel_diff(b.run({{"ids", other}}).f32(), got),
                1e-3);  // the logits depend on the ids
      // And close to the f32 model itself: 8 bits in groups of 16 lose little.
      nn::Llama exact(quant_config());
      Program c = batch_program(exact, batch, device, precision);
      c.upload_params(w.f32);
      EXPECT_LT(rel_diff(got, c.run({{"ids", x}}).f32()), 3e-2);
    }
}

// An inference program's products of at most kQuantizedProductRows rows (a decode step's) read
// the i8 values and scales themselves (quant_matmul); wider ones dequantize and run a GEMM.
TEST_P(Quantized, SkinnyProductsReadTheInt8WeightsThemselves) {
  nn::Llama stored(quant_config());
  stored.store_params_as(DType::kI8, kGroup);
  auto count = [&](int64_t batch) {
    Program p = compile_forward(stored, [&](Tensor x) { return stored.logits(x); },
                                {.inputs = {{"ids", {batch, kQuantSeq}, DType::kI32}},
                                 .device = GetParam(),
                                 .precision = Precision::kBf16});
    const ir::Graph& g = detail::compiled_graph(p);
    int products = 0, dequantized = 0;
    for (const ir::Node& n : g.nodes()) {
      products += n.op == ir::Op::kQuantMatmul;
      dequantized += n.op == ir::Op::kCast && g.node(n.inputs[0]).dtype == DType::kI8;
    }
    return std::pair{products, dequantized};
  };
  EXPECT_EQ(count(kQuantBatch), (std::pair{2 * 7 + 1, 0}));  // 16 rows
  const auto [products, dequantized] = count(4 * kQuantBatch);
  EXPECT_EQ(products, 0);
  EXPECT_GT(dequantized, 0);
}

/// A decode step's block in miniature: x + down(gelu(up(rms_norm(x)))), up with a bias.
struct DecodeBlock : Module {
  static constexpr int64_t kWidth = 256;
  Param gain{*this, "gain", {kWidth}, init::normal(1.0, 0.2)};
  nn::Linear up{*this, "up", kWidth, 2 * kWidth};
  nn::Linear down{*this, "down", 2 * kWidth, kWidth, {.bias = false}};
  Tensor forward(const Tensor& x) const {
    return x + down(gelu(up(rms_norm(x, gain.tensor())), GeluApprox::kTanh));
  }
};

// Products of a few rows over 8- or 4-bit weights with what a decode step fuses into them (the
// norm and the rounding cast of x, the bias, GELU and the residual; widths 256 and 512, groups of
// 32: the vector paths): `device` against the reference backend's double sums. On CUDA one row runs
// as the skinny-product kernel with those fused.
void decode_block_matches_reference(Device device, int bits) {
  DecodeBlock block;
  block.store_params_as(DType::kI8, 32, bits);
  for (const int64_t rows : {1, 3, 8})
    for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
      SCOPED_TRACE(std::to_string(rows) + " rows, " + (precision == Precision::kFp32 ? "f32" : "bf16"));
      auto program = [&](Device on) {
        Program p = compile_forward(
            block, [&](Tensor x) { return block.forward(x); },
            {.inputs = {{"x", {rows, DecodeBlock::kWidth}}}, .device = on, .precision = precision});
        p.init_params(3);
        return p;
      };
      Program got = program(device), want = program(Device::ref());
      got.upload_params(want.download_params());
      std::vector<float> x(size_t(rows * DecodeBlock::kWidth));
      for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(0.37 * double(i)) * 2.0);
      const std::vector<float> y = got.run({{"x", x}}).f32();
      EXPECT_LT(rel_diff(y, want.run({{"x", x}}).f32()), precision == Precision::kFp32 ? 1e-5 : 1e-2);
      EXPECT_GT(rel_diff(y, x), 1e-2);  // the block adds something to x
      if (device.kind == Device::Kind::kCuda && rows == 1) {
        const std::string steps = got.describe();
        std::string line;
        for (size_t at = 0; (at = steps.find("quant_matmul", at)) != std::string::npos; ++at) {
          const size_t from = steps.rfind('\n', at) + 1;
          line = steps.substr(from, steps.find('\n', at) - from);
          if (line.find("rms_norm") != std::string::npos) break;
        }
        EXPECT_NE(line.find("rms_norm"), std::string::npos) << "the norm is not fused:\n" << steps;
        EXPECT_NE(steps.find("gelu_tanh"), std::string::npos);
      }
    }
}

TEST_P(Quantized, DecodeShapedProductsMatchTheReference) { decode_block_matches_reference(GetParam(), 8); }

TEST_P(Quantized, HoldsTheInt8ValuesAndNoDequantizedCopy) {
  nn::Llama stored(quant_config());
  stored.store_params_as(DType::kI8, kGroup);
  int64_t expected = 0;
  for (const Param* p : stored.parameters()) expected += numel(p->shape()) * dtype_size(p->dtype());
  for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
    Program b = quant_logits_program(stored, GetParam(), precision);
    // Parameters alone: the dequantized weights live in the step's arena, never in a held copy.
    EXPECT_EQ(b.memory_report().model_storage, expected);
  }
}

/// Trains `train` (LoRA over a quantized base, its parameters drawn) 30 steps on `feeds`: the loss
/// falls, and every parameter but the adapters stays bit-identical.
void trains_only_the_adapters(Program& train, const Feeds& feeds) {
  const std::map<std::string, HostTensor> before = train.download_params();
  const float first = train.step(feeds);
  float last = first;
  for (int i = 0; i < 30; ++i) last = train.step(feeds);
  EXPECT_LT(last, 0.95f * first);
  const std::map<std::string, HostTensor> after = train.download_params();
  for (const auto& [name, t] : before) {
    if (name.find("lora") != std::string::npos) continue;
    EXPECT_EQ(0, std::memcmp(t.data(), after.at(name).data(), size_t(t.numel() * dtype_size(t.dtype()))))
        << name << " changed";
  }
}

TEST_P(Quantized, LoRAOverAQuantizedBaseLeavesItBitIdentical) {
  nn::Llama model(quant_config());
  model.store_params_as(DType::kI8, kGroup);
  nn::add_lora(model, {.targets = {"q_proj", "v_proj"}, .rank = 4, .alpha = 8});
  auto loss = [&](Tensor x, Tensor y) { return model.loss(x, y); };
  const std::vector<InputSpec> inputs = {{"ids", {kQuantBatch, kQuantSeq}, DType::kI32},
                                         {"targets", {kQuantBatch, kQuantSeq}, DType::kI32}};
  try {
    compile_train(model, loss, {.inputs = inputs, .optimizer = AdamW{.lr = 1e-2}, .device = GetParam()});
    ADD_FAILURE() << "compile_train accepted trainable quantized parameters";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("_scale"), std::string::npos) << e.what();
  }
  Program train = compile_train(model, loss,
                                {.inputs = inputs,
                                 .optimizer = AdamW{.lr = 1e-2},
                                 .device = GetParam(),
                                 .precision = Precision::kBf16,
                                 .frozen = nn::lora_frozen(model)});
  train.init_params(2);
  const std::vector<int32_t> x = quant_ids(), y = quant_ids(1);  // feeds borrow them
  const Feeds feeds = {{"ids", x}, {"targets", y}};
  trains_only_the_adapters(train, feeds);
  // A checkpoint keeps the i8 values and scales as they are: a program on another backend
  // resumes from it with the same next loss.
  // One file per device: ctest runs the devices' cases side by side.
  const std::string path =
      ::testing::TempDir() + "quantized_checkpoint_" + testing::device_test_name(GetParam()) + ".safetensors";
  save_checkpoint(path, train);
  EXPECT_EQ(read_safetensors(path).at("model.layers.0.self_attn.q_proj.weight").dtype(), DType::kI8);
  Program resumed =
      compile_train(model, loss,
                    {.inputs = inputs,
                     .optimizer = AdamW{.lr = 1e-2},
                     .device = GetParam().kind == Device::Kind::kRef ? Device::cpu() : Device::ref(),
                     .precision = Precision::kBf16,
                     .frozen = nn::lora_frozen(model)});
  load_checkpoint(path, resumed);
  EXPECT_NEAR(resumed.step(feeds), train.step(feeds), 1e-3);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Devices, Quantized, ::testing::ValuesIn(testing::all_devices()),
                         [](const auto& info) { return testing::device_test_name(info.param); });

// A checkpoint of the f32 model loads into the quantized one: its weights are quantized as they
// load, and the scales they make need not be in the file (as upload_params and load_safetensors).
TEST(QuantizeCheckpoint, AnF32CheckpointLoadsIntoTheQuantizedModel) {
  const std::vector<InputSpec> inputs = {{"ids", {kQuantBatch, kQuantSeq}, DType::kI32},
                                         {"targets", {kQuantBatch, kQuantSeq}, DType::kI32}};
  auto train_program = [&](nn::Llama& m) {
    nn::add_lora(m, {.targets = {"q_proj"}, .rank = 2, .alpha = 4});
    return compile_train(m, [&](Tensor x, Tensor y) { return m.loss(x, y); },
                         {.inputs = inputs,
                          .optimizer = AdamW{.lr = 1e-2},
                          .device = Device::cpu(),
                          .frozen = nn::lora_frozen(m)});
  };
  nn::Llama full(quant_config()), quantized(quant_config());
  quantized.store_params_as(DType::kI8, kGroup);
  Program a = train_program(full), b = train_program(quantized);
  a.init_params(4);
  const std::string path = ::testing::TempDir() + "quantize_f32_checkpoint.safetensors";
  save_checkpoint(path, a);
  load_checkpoint(path, b);
  const std::string w = "model.layers.1.mlp.down_proj.weight";
  const QuantizedTensor want = quantize_int8(a.download_params().at(w), kGroup);
  const std::map<std::string, HostTensor> got = b.download_params();
  EXPECT_EQ(0, std::memcmp(got.at(w).data(), want.q.data(), size_t(want.q.numel())));
  EXPECT_EQ(0, rel_diff(got.at(w + "_scale").f32(), want.scale.f32()));
  std::remove(path.c_str());
}

TEST(QuantizeErrors, ClearMessages) {
  nn::Llama model(quant_config());
  auto message = [](const auto& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  Param* found = nullptr;  // parameters are members of the model's (non-const) modules
  for (const Param* p : model.parameters())
    if (p->path() == "model.layers.0.self_attn.q_proj.weight") found = const_cast<Param*>(p);
  ASSERT_NE(found, nullptr);
  Param& w = *found;
  EXPECT_NE(message([&] { w.set_dtype(DType::kI8); }).find("quantize_int8"), std::string::npos);
  EXPECT_NE(message([&] { w.quantize_int8(5); }).find("pick a group that divides 32"), std::string::npos);
  w.quantize_int8(8);
  EXPECT_NE(message([&] { w.quantize_int8(16); }).find("quantized already"), std::string::npos);
  EXPECT_NE(message([&] { w.set_dtype(DType::kBF16); }).find("fixed"), std::string::npos);
  Program p = quant_logits_program(model, Device::cpu(), Precision::kFp32);
  EXPECT_NE(message([&] { model.store_params_as(DType::kI8); }).find("before the first program"),
            std::string::npos);
  // A float weight and the scales its quantization computes cannot both be given.
  const std::string q = w.path(), scale = w.scale()->path();
  std::map<std::string, HostTensor> both = {{q, HostTensor(DType::kF32, w.shape())},
                                            {scale, HostTensor(DType::kF32, w.scale()->shape())}};
  EXPECT_NE(message([&] { p.upload_params(both, {.partial = true}); }).find("holds the scales"),
            std::string::npos);
  // i8 values upload as they are (with or without their scales); i32 values are refused.
  std::map<std::string, HostTensor> raw = {{q, HostTensor(DType::kI8, w.shape())}};
  EXPECT_NO_THROW(p.upload_params(raw, {.partial = true}));
  raw[q] = HostTensor(DType::kI32, w.shape());
  EXPECT_NE(message([&] { p.upload_params(raw, {.partial = true}); }).find("quantized with their scales"),
            std::string::npos);
}

// ---- 4 bits -------------------------------------------------------------------------------

TEST(QuantizeInt4, CodesScalesAndOffsetsFollowTheDefinition) {
  // Two groups of 6: mixed values; a constant group (scale 0).
  const std::vector<float> v = {0.5f, -1.0f, 0.25f, 0.003f, 2.0f, -0.7f, 3, 3, 3, 3, 3, 3};
  const Quantized4Tensor qt = quantize_int4(HostTensor::f32(v, {2, 6}), 6);
  ASSERT_EQ(qt.q.dtype(), DType::kI8);
  ASSERT_EQ(qt.q.shape(), (Shape{2, 3}));
  ASSERT_EQ(qt.scale.shape(), (Shape{2, 1}));
  ASSERT_EQ(qt.offset.shape(), (Shape{2, 1}));
  const auto* bytes = static_cast<const uint8_t*>(qt.q.data());
  const HostTensor back = dequantize_int4(qt.q, qt.scale, qt.offset);
  ASSERT_EQ(back.shape(), (Shape{2, 6}));
  for (int g = 0; g < 2; ++g) {
    double lo = 1e9, hi = -1e9;
    for (int i = 0; i < 6; ++i)
      lo = std::min(lo, double(v[size_t(6 * g + i)])), hi = std::max(hi, double(v[size_t(6 * g + i)]));
    const double s = (hi - lo) / 15;
    EXPECT_NEAR(qt.scale.f32()[size_t(g)], s, 1e-7 * s) << "group " << g;
    EXPECT_EQ(qt.offset.f32()[size_t(g)], float(lo)) << "group " << g;
    for (int i = 0; i < 6; ++i) {
      const int j = 6 * g + i;
      const int code = (bytes[j / 2] >> (4 * (j % 2))) & 15;  // value 2j in byte j's low nibble
      EXPECT_EQ(code, s == 0 ? 0 : static_cast<int>(std::nearbyint((v[size_t(j)] - lo) / s))) << j;
      EXPECT_LE(std::fabs(code * s + lo - v[size_t(j)]), s / 2 + 1e-6) << j;
      EXPECT_NEAR(back.f32()[size_t(j)], code * s + lo, 1e-6) << j;
    }
  }
  EXPECT_EQ(bytes[0] >> 4, 0);                                             // the minimum, −1
  EXPECT_EQ(bytes[2] & 15, 15);                                            // the maximum, 2
  EXPECT_THROW(quantize_int4(HostTensor::f32(v, {2, 6}), 3), InputError);  // an odd group
  EXPECT_THROW(quantize_int4(HostTensor::f32(v, {3, 4}), 8), InputError);  // 8 does not divide 4
  EXPECT_THROW(quantize_int4(HostTensor::f32({1, NAN}, {2}), 2), InputError);
  EXPECT_THROW(dequantize_int4(qt.q, qt.scale, qt.q), InputError);
}

/// The f32 weights drawn by init_params(7), and what the 4-bit model computes with: every
/// quantized Linear's weight quantized and dequantized, the other matrices rounded to bf16.
Weights weights4(const nn::Llama& shape_of) {
  Weights w = weights(shape_of);  // (its i8 entries are redone below)
  for (const Param* param : shape_of.parameters())
    if (param->bits() == 4) {
      const Quantized4Tensor qt = quantize_int4(w.f32.at(param->path()), param->group());
      w.effective[param->path()] = dequantize_int4(qt.q, qt.scale, qt.offset);
    }
  return w;
}

class Quantized4 : public ::testing::TestWithParam<Device> {};

// Both ways a product reads a 4-bit weight: quant_matmul over the packed codes (16 rows) and the
// dequantized copy with a GEMM (64 rows).
TEST_P(Quantized4, ComputesTheDequantizedModel) {
  const Device device = GetParam();
  nn::Llama stored(quant_config());
  stored.store_params_as(DType::kI8, kGroup, 4);
  const Weights w = weights4(stored);
  int quantized = 0;
  for (const Param* p : stored.parameters()) quantized += p->bits() == 4;
  EXPECT_EQ(quantized, 2 * 7 + 1);
  for (const int64_t batch : {kQuantBatch, 4 * kQuantBatch}) {
    SCOPED_TRACE(std::to_string(batch * kQuantSeq) + " rows");
    nn::Llama reference(quant_config());
    Program a = batch_program(reference, batch, device, Precision::kFp32),
            b = batch_program(stored, batch, device, Precision::kFp32);
    a.upload_params(w.effective);
    b.upload_params(w.f32);  // quantized as it is uploaded
    const std::map<std::string, HostTensor> back = b.download_params();
    for (const Param* p : stored.parameters()) {
      if (p->bits() != 4) continue;
      const Quantized4Tensor qt = quantize_int4(w.f32.at(p->path()), kGroup);
      const HostTensor& q = back.at(p->path());
      ASSERT_EQ(q.shape(), p->stored_shape()) << p->path();
      EXPECT_EQ(0, std::memcmp(q.data(), qt.q.data(), size_t(q.numel()))) << p->path();
      EXPECT_EQ(0, rel_diff(back.at(p->offset()->path()).f32(), qt.offset.f32())) << p->path();
    }
    const std::vector<int32_t> x = batch_ids(batch);
    const std::vector<float> got = b.run({{"ids", x}}).f32();
    EXPECT_LT(rel_diff(got, a.run({{"ids", x}}).f32()), 2e-6);
    // Under the precision policy, against the same program on the reference backend.
    Program bf = batch_program(stored, batch, device, Precision::kBf16);
    nn::Llama ref_model(quant_config());
    ref_model.store_params_as(DType::kI8, kGroup, 4);
    Program r = batch_program(ref_model, batch, Device::ref(), Precision::kBf16);
    r.upload_params(w.f32);
    EXPECT_LT(rel_diff(bf.run({{"ids", x}}).f32(), r.run({{"ids", x}}).f32()), 1e-2);
    // And near the f32 model: 4 bits in groups of 16 lose more than 8, still little.
    nn::Llama exact(quant_config());
    Program c = batch_program(exact, batch, device, Precision::kFp32);
    c.upload_params(w.f32);
    EXPECT_LT(rel_diff(got, c.run({{"ids", x}}).f32()), 0.3);
    // The skinny program reads the codes themselves; the wide one dequantizes.
    int products = 0;
    for (const ir::Node& n : detail::compiled_graph(b).nodes())
      products += n.op == ir::Op::kQuantMatmul && n.inputs.size() == 4;
    EXPECT_EQ(products, batch == kQuantBatch ? 2 * 7 + 1 : 0);
  }
}

TEST_P(Quantized4, DecodeShapedProductsMatchTheReference) { decode_block_matches_reference(GetParam(), 4); }

TEST_P(Quantized4, HoldsThePackedCodesAndNoDequantizedCopy) {
  nn::Llama stored(quant_config());
  stored.store_params_as(DType::kI8, kGroup, 4);
  int64_t expected = 0;
  for (const Param* p : stored.parameters()) expected += numel(p->stored_shape()) * dtype_size(p->dtype());
  Program b = quant_logits_program(stored, GetParam(), Precision::kBf16);
  EXPECT_EQ(b.memory_report().model_storage, expected);
}

INSTANTIATE_TEST_SUITE_P(Devices, Quantized4, ::testing::ValuesIn(testing::all_devices()),
                         [](const auto& info) { return testing::device_test_name(info.param); });

// LoRA over a 4-bit base: the base stays bit-identical, a checkpoint keeps the packed codes, and an
// f32 checkpoint loads into the 4-bit model (quantized as it loads).
TEST(Quantize4Training, LoRAAndCheckpoints) {
  nn::Llama model(quant_config());
  model.store_params_as(DType::kI8, kGroup, 4);
  nn::add_lora(model, {.targets = {"q_proj", "v_proj"}, .rank = 4, .alpha = 8});
  auto loss = [&](Tensor x, Tensor y) { return model.loss(x, y); };
  const std::vector<InputSpec> inputs = {{"ids", {kQuantBatch, kQuantSeq}, DType::kI32},
                                         {"targets", {kQuantBatch, kQuantSeq}, DType::kI32}};
  const auto message = testing::message_of<InputError>([&] {
    compile_train(model, loss, {.inputs = inputs, .optimizer = AdamW{.lr = 1e-2}, .device = Device::cpu()});
  });
  EXPECT_NE(message.find("q_proj.weight_"), std::string::npos) << message;
  auto train_program = [&](Device device) {
    return compile_train(model, loss,
                         {.inputs = inputs,
                          .optimizer = AdamW{.lr = 1e-2},
                          .device = device,
                          .frozen = nn::lora_frozen(model)});
  };
  Program train = train_program(Device::cpu());
  train.init_params(2);
  const std::vector<int32_t> x = quant_ids(), y = quant_ids(1);
  const Feeds feeds = {{"ids", x}, {"targets", y}};
  trains_only_the_adapters(train, feeds);
  const std::string path = ::testing::TempDir() + "quantized4_checkpoint.safetensors";
  save_checkpoint(path, train);
  EXPECT_EQ(read_safetensors(path).at("model.layers.0.self_attn.q_proj.weight").shape(), (Shape{32, 16}));
  Program resumed = train_program(Device::ref());
  load_checkpoint(path, resumed);
  EXPECT_NEAR(resumed.step(feeds), train.step(feeds), 1e-3);
  // An f32 checkpoint of the same model (the dequantized weights as floats) loads too.
  nn::Llama full(quant_config());
  nn::add_lora(full, {.targets = {"q_proj", "v_proj"}, .rank = 4, .alpha = 8});
  Program f = compile_train(full, [&](Tensor a, Tensor b) { return full.loss(a, b); },
                            {.inputs = inputs,
                             .optimizer = AdamW{.lr = 1e-2},
                             .device = Device::cpu(),
                             .frozen = nn::lora_frozen(full)});
  f.init_params(4);
  save_checkpoint(path, f);
  load_checkpoint(path, resumed);
  const std::string w = "model.layers.1.mlp.down_proj.weight";
  const Quantized4Tensor want = quantize_int4(f.download_params().at(w), kGroup);
  EXPECT_EQ(0, std::memcmp(resumed.download_params().at(w).data(), want.q.data(), size_t(want.q.numel())));
  std::remove(path.c_str());
}

TEST(Quantize4Errors, ClearMessages) {
  nn::Llama model(quant_config());
  Param* w = nullptr;
  for (const Param* p : model.parameters())
    if (p->path() == "model.layers.0.self_attn.q_proj.weight") w = const_cast<Param*>(p);
  ASSERT_NE(w, nullptr);
  EXPECT_NE(testing::message_of<Error>([&] { w->quantize_int4(1); }).find("pick an even group"),
            std::string::npos);
  struct Odd : Module {
    Param w{*this, "w", {4, 3}};
  } odd;
  EXPECT_NE(testing::message_of<Error>([&] { odd.w.quantize_int4(3); }).find("last axis must be even"),
            std::string::npos);
  EXPECT_NE(
      testing::message_of<Error>([&] { model.store_params_as(DType::kBF16, 32, 4); }).find("DType::kI8"),
      std::string::npos);
  EXPECT_NE(testing::message_of<Error>([&] { model.store_params_as(DType::kI8, 32, 3); }).find("8 or 4 bits"),
            std::string::npos);
  w->quantize_int4(8);
  EXPECT_NE(testing::message_of<Error>([&] { w->quantize_int8(8); }).find("quantized already, to 4 bits"),
            std::string::npos);
  EXPECT_EQ(w->stored_shape(), (Shape{32, 16}));
  Program p = quant_logits_program(model, Device::cpu(), Precision::kFp32);
  // Packed bytes upload as [32, 16]; floats as [32, 32]; packed bytes of the float shape are refused.
  EXPECT_NO_THROW(p.upload_params({{w->path(), HostTensor(DType::kI8, {32, 16})}}, {.partial = true}));
  EXPECT_NO_THROW(p.upload_params({{w->path(), HostTensor(DType::kF32, {32, 32})}}, {.partial = true}));
  EXPECT_NE(testing::message_of<InputError>([&] {
              p.upload_params({{w->path(), HostTensor(DType::kI8, {32, 32})}}, {.partial = true});
            }).find("expects i8[32, 16]"),
            std::string::npos);
}

}  // namespace
}  // namespace tg
