// Parameters stored as bf16 or f16 (Param::set_dtype, Module::store_params_as): a model whose
// matrices are stored half must compute what the f32 model computes with those matrices rounded
// to the same type, on every backend, in f32 and under the precision policy; it must hold no f32
// copy of them on the device; training must refuse to update one and train around it when it is
// frozen (LoRA), leaving it bit-identical.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "runtime/stored_weights.h"
#include "test_util.h"

namespace tg {
namespace {

using testing::rel_diff;

constexpr int64_t kDtypeBatch = testing::kStoredBatch, kDtypeSeq = testing::kStoredSeq;

nn::LlamaConfig dtype_config() { return testing::stored_config(/*tied_head=*/true); }
std::vector<int32_t> dtype_ids(int shift = 0) { return testing::stored_ids(shift); }
Program logits_program(nn::Llama& model, Device device, Precision precision) {
  return testing::stored_logits_program(model, device, precision);
}

/// Weights drawn by init_params(seed) on the f32 model, each matrix rounded through `half`.
std::map<std::string, HostTensor> rounded_weights(Device device, DType half) {
  nn::Llama f32_model(dtype_config());
  Program p = logits_program(f32_model, device, Precision::kFp32);
  p.init_params(7);
  std::map<std::string, HostTensor> w = p.download_params();
  for (auto& [name, t] : w)
    if (t.shape().size() >= 2) t = t.to(half).to(DType::kF32);
  return w;
}

struct Case {
  Device device;
  DType half;
};

class ParamDtype : public ::testing::TestWithParam<Case> {};

TEST_P(ParamDtype, HalfStoredMatricesComputeTheRoundedModel) {
  const auto [device, half] = GetParam();
  const std::map<std::string, HostTensor> w = rounded_weights(device, half);
  const Precision policy = half == DType::kBF16 ? Precision::kBf16 : Precision::kF16;
  for (const Precision precision : {Precision::kFp32, policy}) {
    SCOPED_TRACE(precision == Precision::kFp32 ? "f32 products" : "half products");
    nn::Llama reference(dtype_config()), stored(dtype_config());
    stored.store_params_as(half);
    Program a = logits_program(reference, device, precision), b = logits_program(stored, device, precision);
    a.upload_params(w);
    b.upload_params(w);  // f32 values, already representable: stored exactly
    // Matrices come back in the stored type, vectors (the norms' gains) as f32.
    const std::map<std::string, HostTensor> back = b.download_params();
    for (const auto& [name, t] : back) {
      EXPECT_EQ(t.dtype(), w.at(name).shape().size() >= 2 ? half : DType::kF32) << name;
      const HostTensor widened = t.to(DType::kF32);
      EXPECT_EQ(0, rel_diff(widened.f32(), w.at(name).f32())) << name;
    }
    const std::vector<float> want = a.run({{"ids", dtype_ids()}}).f32(),
                             got = b.run({{"ids", dtype_ids()}}).f32();
    // The same products of the same values; only the kernels' order of accumulation may differ.
    EXPECT_LT(rel_diff(got, want), 2e-6);
    EXPECT_GT(rel_diff(b.run({{"ids", dtype_ids(5)}}).f32(), got),
              1e-3);  // the logits depend on the ids
  }
}

TEST_P(ParamDtype, NoF32CopyOfAHalfStoredMatrixUnderThePolicy) {
  const auto [device, half] = GetParam();
  const Precision policy = half == DType::kBF16 ? Precision::kBf16 : Precision::kF16;
  nn::Llama reference(dtype_config()), stored(dtype_config());
  stored.store_params_as(half);
  Program a = logits_program(reference, device, policy), b = logits_program(stored, device, policy);
  int64_t matrices = 0, vectors = 0;
  for (const Param* p : stored.parameters())
    (p->shape().size() >= 2 ? matrices : vectors) += numel(p->shape());
  // The stored model holds each matrix once, in 2 bytes, and nothing converted from it (the
  // embedding is gathered as stored, the tied head reads it directly): the parameters alone.
  EXPECT_EQ(b.memory_report().model_storage, 2 * matrices + 4 * vectors);
  // The f32 model keeps its f32 masters and their half copies (the tied table's too).
  EXPECT_GE(a.memory_report().model_storage, 6 * matrices + 4 * vectors);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const Device& d : testing::all_devices())
    for (DType h : {DType::kBF16, DType::kF16}) out.push_back({d, h});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Devices, ParamDtype, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string d = info.param.device.str();
  for (char& c : d)
    if (c == ':') c = '_';
  return d + "_" + dtype_name(info.param.half);
});

class ParamDtypeTrain : public ::testing::TestWithParam<Device> {};

TEST_P(ParamDtypeTrain, LoRAOverAFrozenBf16BaseLeavesItBitIdentical) {
  nn::Llama model(dtype_config());
  model.store_params_as(DType::kBF16);
  nn::add_lora(model, {.targets = {"q_proj", "v_proj"}, .rank = 4, .alpha = 8});
  auto loss = [&](Tensor x, Tensor y) { return model.loss(x, y); };
  const std::vector<InputSpec> inputs = {{"ids", {kDtypeBatch, kDtypeSeq}, DType::kI32},
                                         {"targets", {kDtypeBatch, kDtypeSeq}, DType::kI32}};
  // Training a half-stored parameter is refused, naming it.
  try {
    compile_train(model, loss, {.inputs = inputs, .optimizer = AdamW{.lr = 1e-2}, .device = GetParam()});
    ADD_FAILURE() << "compile_train accepted a trainable bf16 parameter";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("stored as bf16"), std::string::npos) << e.what();
  }
  Program train = compile_train(model, loss,
                                {.inputs = inputs,
                                 .optimizer = AdamW{.lr = 1e-2},
                                 .device = GetParam(),
                                 .precision = Precision::kBf16,
                                 .frozen = nn::lora_frozen(model)});
  train.init_params(2);
  const std::map<std::string, HostTensor> before = train.download_params();
  const std::vector<int32_t> x = dtype_ids(), y = dtype_ids(1);
  const Feeds feeds = {{"ids", x}, {"targets", y}};
  const float first = train.step(feeds);
  float last = first;
  for (int i = 0; i < 30; ++i) last = train.step(feeds);
  EXPECT_LT(last, 0.95f * first);  // a random base: the adapters on q and v move it slowly
  const std::map<std::string, HostTensor> after = train.download_params();
  for (const auto& [name, t] : before) {
    if (name.find("lora") != std::string::npos) continue;
    EXPECT_EQ(t.dtype(), after.at(name).dtype());
    EXPECT_EQ(0, std::memcmp(t.data(), after.at(name).data(),
                             static_cast<size_t>(t.numel() * dtype_size(t.dtype()))))
        << name << " changed";
  }
  // A training checkpoint keeps the base as stored: a fresh program of the same model resumes
  // from it with the same next loss.
  // One file per device: ctest runs the devices' cases side by side.
  const std::string path = ::testing::TempDir() + "param_dtype_checkpoint_" +
                           testing::device_test_name(GetParam()) + ".safetensors";
  save_checkpoint(path, train);
  EXPECT_EQ(read_safetensors(path).at("model.layers.0.self_attn.q_proj.weight").dtype(), DType::kBF16);
  Program resumed =
      compile_train(model, loss,
                    {.inputs = inputs,
                     .optimizer = AdamW{.lr = 1e-2},
                     .device = GetParam().kind == Device::Kind::kRef ? Device::cpu() : Device::ref(),
                     .precision = Precision::kBf16,
                     .frozen = nn::lora_frozen(model)});
  load_checkpoint(path, resumed);
  // The same checkpoint loads into the model stored as f32 (the held values widened exactly).
  nn::Llama wide(dtype_config());
  nn::add_lora(wide, {.targets = {"q_proj", "v_proj"}, .rank = 4, .alpha = 8});
  Program wide_train = compile_train(wide, [&](Tensor x, Tensor y) { return wide.loss(x, y); },
                                     {.inputs = inputs,
                                      .optimizer = AdamW{.lr = 1e-2},
                                      .device = Device::cpu(),
                                      .frozen = nn::lora_frozen(wide)});
  load_checkpoint(path, wide_train);
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  EXPECT_EQ(0, rel_diff(wide_train.download_params().at(q).f32(), after.at(q).to(DType::kF32).f32()));
  EXPECT_NEAR(resumed.step(feeds), train.step(feeds), 1e-4);
  std::remove(path.c_str());
  // Moments for the adapters alone: two values (4 bytes, 8 on ref) for each of their elements,
  // nothing for the base's many more.
  int64_t adapters = 0, base = 0;
  for (const auto& [name, t] : before)
    (name.find("lora") != std::string::npos ? adapters : base) += t.numel();
  ASSERT_GT(base, 10 * adapters);
  EXPECT_GE(train.memory_report().optimizer_state, 8 * adapters);
  EXPECT_LT(train.memory_report().optimizer_state, 16 * adapters + 64);
}

INSTANTIATE_TEST_SUITE_P(Devices, ParamDtypeTrain, ::testing::ValuesIn(testing::all_devices()),
                         [](const auto& info) { return testing::device_test_name(info.param); });

// Under f32 products a held weight is widened where it is read. A LoRA step keeps less than the
// f32 model: the backward widens each weight again instead of keeping the forward's f32 copy.
// An inference program keeps the widened copies (hoisting; no concatenated q/k/v copy on top):
// the held bf16 value and its f32 copy, 6 bytes a weight against the f32 model's 4.
TEST(ParamDtypeMemory, HeldUnderF32Products) {
  const std::vector<InputSpec> inputs = {{"ids", {kDtypeBatch, kDtypeSeq}, DType::kI32},
                                         {"targets", {kDtypeBatch, kDtypeSeq}, DType::kI32}};
  auto report = [&](bool held, bool training) {
    nn::LlamaConfig c = dtype_config();
    c.d_model = 256;
    c.mlp_hidden = 512;
    nn::Llama model(c);
    if (held) model.store_params_as(DType::kBF16);
    nn::add_lora(model, {.targets = {"q_proj", "v_proj"}, .rank = 4, .alpha = 8});
    auto loss = [&](Tensor x, Tensor y) { return model.loss(x, y); };
    if (!training)
      return compile_forward(model, [&](Tensor x) { return model.logits(x); },
                             {.inputs = {inputs[0]}, .device = Device::cpu()})
          .memory_report();
    return compile_train(model, loss,
                         {.inputs = inputs,
                          .optimizer = AdamW{.lr = 1e-3},
                          .device = Device::cpu(),
                          .frozen = nn::lora_frozen(model)})
        .memory_report();
  };
  for (const bool training : {false, true}) {
    const MemoryReport f32 = report(false, training), held = report(true, training);
    SCOPED_TRACE(training ? "LoRA step" : "inference");
    if (training)
      EXPECT_LT(held.model_storage + held.arena, f32.model_storage + f32.arena);
    else
      EXPECT_LE(held.model_storage, f32.model_storage * 3 / 2 + 4096);  // + the adapters' f32 copies
  }
}

TEST(ParamDtypeErrors, SetBeforeTheFirstProgramAndOnlyFloatTypes) {
  nn::Llama model(dtype_config());
  EXPECT_THROW(model.store_params_as(DType::kI32), Error);
  Program p = logits_program(model, Device::cpu(), Precision::kFp32);
  try {
    model.store_params_as(DType::kBF16);
    ADD_FAILURE() << "the storage type changed after a program was compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("before the first program"), std::string::npos) << e.what();
  }
  EXPECT_EQ(model.parameters().front()->dtype(), DType::kF32);
}

}  // namespace
}  // namespace tg
