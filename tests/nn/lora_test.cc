// Freezing (TrainOptions::frozen) and LoRA adapters (nn::add_lora, lora_frozen, merge_lora,
// unmerge_lora): frozen parameters get no gradient capture and no optimizer moments (the
// optimizer state is exactly the trainable parameters' moments), stay bit-identical through
// steps (with weight decay and micro-batches) while the others train; entries and targets that
// match nothing are errors; a fresh adapter changes no logit; a LoRA fine-tune of the tiny
// Llama (tests/data/tiny_llama, transformers' weights) lowers a held-out loss with the base
// weights bit-identical, and its merged weights give the adapter form's logits. Every backend
// this machine has.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;

struct LoraNet : Module {
  nn::Linear fc1{*this, "fc1", 4, 8};
  nn::Linear fc2{*this, "fc2", 8, 2};
  Tensor loss(const Tensor& x, const Tensor& y) const { return mse_loss(fc2(tanh(fc1(x))), y); }
};

class LoraDevices : public ::testing::TestWithParam<Device> {};

int64_t numel_of(const Param& p) { return numel(p.shape()); }

// Bytes per stored f32 value on the program's device (the ref backend keeps doubles), from
// the parameters' bytes and their count.
int64_t element_bytes(const Program& p, int64_t param_count) {
  const int64_t bytes = p.memory_report().params / param_count;
  EXPECT_TRUE(bytes == 4 || bytes == 8) << bytes;
  return bytes;
}

std::vector<float> values(const std::map<std::string, HostTensor>& params, const std::string& name) {
  const std::span<const float> v = params.at(name).f32();
  return {v.begin(), v.end()};
}

Program train_net(LoraNet& net, const Device& device, std::vector<std::string> frozen,
                  int64_t micro_batches = 1) {
  return compile_train(net, [&net](Tensor x, Tensor y) { return net.loss(x, y); },
                       {.inputs = {{"x", {4, 4}}, {"y", {4, 2}}},
                        .optimizer = AdamW{.lr = 1e-2, .weight_decay = 0.1},
                        .device = device,
                        .frozen = std::move(frozen),
                        .micro_batches = micro_batches});
}

TEST_P(LoraDevices, FrozenParamsGetNoGradientNoMomentsAndStayBitIdentical) {
  for (const int64_t k : {int64_t{1}, int64_t{2}}) {
    LoraNet net;
    Program all = train_net(net, GetParam(), {}, k);
    Program p = train_net(net, GetParam(), {"fc1", "fc2.bias"}, k);
    p.init_params(3);
    // AdamW keeps m and v per trained parameter, nothing else: exactly fc2.weight's here.
    const int64_t total = numel_of(net.fc1.weight) + numel_of(*net.fc1.bias) + numel_of(net.fc2.weight) + 2;
    const int64_t elem = element_bytes(p, total);
    EXPECT_EQ(p.memory_report().optimizer_state, 2 * elem * numel_of(net.fc2.weight));
    EXPECT_EQ(all.memory_report().optimizer_state, 2 * elem * total);
    const std::vector<float> x = tg::testing::uniform_values(16, 1), y = tg::testing::uniform_values(8, 2);
    const auto before = p.download_params();
    Captures caps;
    for (int i = 0; i < 5; ++i) p.step({{"x", x}, {"y", y}}, {.captures = &caps});
    EXPECT_EQ(caps.count("grad/fc2.weight"), 1u);
    EXPECT_EQ(caps.count("grad/fc1.weight"), 0u);
    EXPECT_EQ(caps.count("grad/fc1.bias"), 0u);
    EXPECT_EQ(caps.count("grad/fc2.bias"), 0u);
    EXPECT_EQ(p.training_state().moments.size(), 2u);  // m and v of fc2.weight
    const auto after = p.download_params();
    for (const char* name : {"fc1.weight", "fc1.bias", "fc2.bias"})
      EXPECT_EQ(values(after, name), values(before, name)) << name << " changed (micro_batches " << k << ")";
    EXPECT_NE(values(after, "fc2.weight"), values(before, "fc2.weight"));
  }
}

TEST(Lora, FrozenEntryMatchingNothingIsAnInputError) {
  LoraNet net;
  EXPECT_THROW(train_net(net, Device::ref(), {"fc3"}), InputError);
  EXPECT_THROW(train_net(net, Device::ref(), {"fc"}), InputError);  // not at a '.' boundary
  EXPECT_THROW(train_net(net, Device::ref(), {"fc1.weigh"}), InputError);
  EXPECT_NO_THROW(train_net(net, Device::ref(), {"fc1.weight"}));
  // Everything frozen: the step computes the loss and changes nothing.
  Program p = train_net(net, Device::cpu(), {"fc1", "fc2"});
  EXPECT_EQ(p.memory_report().optimizer_state, 0);
  const auto before = p.download_params();
  const std::vector<float> x = tg::testing::uniform_values(16, 1), y = tg::testing::uniform_values(8, 2);
  EXPECT_GT(p.step({{"x", x}, {"y", y}}), 0.f);
  for (const auto& [name, value] : before) EXPECT_EQ(values(p.download_params(), name), values(before, name));
}

// ---- LoRA on the tiny Llama --------------------------------------------------------------
const nn::LlamaConfig kLoraConfig{
    .vocab = 64, .seq_len = 16, .layers = 2, .d_model = 32, .heads = 4, .kv_heads = 2, .mlp_hidden = 48};

TEST(Lora, AddLoraNamesParamsAsPeftAndChecksTargets) {
  nn::Llama model(kLoraConfig);
  const std::vector<std::string> adapted = nn::add_lora(model, {.targets = {"q_proj", "v_proj"}, .rank = 4});
  EXPECT_EQ(adapted.size(), 4u);
  std::map<std::string, Shape> shapes;
  for (const Param* p : model.parameters()) shapes[p->path()] = p->shape();
  EXPECT_EQ(shapes.at("model.layers.0.self_attn.q_proj.lora_A.weight"), (Shape{4, 32}));
  EXPECT_EQ(shapes.at("model.layers.1.self_attn.v_proj.lora_B.weight"), (Shape{16, 4}));
  EXPECT_EQ(shapes.count("model.layers.0.self_attn.k_proj.lora_A.weight"), 0u);
  const std::vector<std::string> frozen = nn::lora_frozen(model);
  EXPECT_EQ(frozen.size() + 8, model.parameters().size());
  EXPECT_THROW(nn::add_lora(model, {.targets = {"q_proj"}}), InputError);  // already adapted
  EXPECT_THROW(nn::add_lora(model, {.targets = {"proj"}}), InputError);    // names no Linear
  EXPECT_THROW(nn::add_lora(model, {.targets = {"k_proj"}, .rank = 0}), InputError);
  nn::Llama plain(kLoraConfig);
  EXPECT_THROW(nn::lora_frozen(plain), InputError);
}

// The tiny Llama's weights: transformers' (tests/data/tiny_llama) when present.
std::string tiny_llama() { return std::string(TG_TEST_DATA_DIR) + "/tiny_llama/model.safetensors"; }

Program logits_program(nn::Llama& model, const Device& device, int64_t t) {
  return compile_forward(model, [&model](Tensor ids) { return model.logits(ids); },
                         {.inputs = {{"ids", {1, t}, DType::kI32}}, .device = device});
}

TEST_P(LoraDevices, FreshAdapterLeavesLogitsUnchanged) {
  nn::Llama base(kLoraConfig), adapted(kLoraConfig);
  nn::add_lora(adapted, {.targets = {"q_proj", "v_proj", "down_proj"}, .rank = 4, .alpha = 8});
  Program b = logits_program(base, GetParam(), 10), a = logits_program(adapted, GetParam(), 10);
  b.init_params(5);
  a.init_params(5);  // A random, B zero
  a.upload_params(b.download_params(), {.partial = true});
  const std::vector<int32_t> ids{1, 5, 9, 2, 33, 63, 0, 7, 7, 12};
  const std::vector<float> want = b.run({{"ids", ids}}).f32(), got = a.run({{"ids", ids}}).f32();
  EXPECT_LE(tg::testing::rel_diff(got, want), 1e-6);
}

// A periodic sequence: the training window and a held-out window at another offset.
std::vector<int32_t> pattern(int64_t offset, int64_t n) {
  const std::vector<int32_t> period{3, 17, 42, 8, 25, 60, 11};
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(period[static_cast<size_t>((offset + i) % 7)]);
  return out;
}

TEST_P(LoraDevices, FineTuneLowersHeldOutLossKeepsBaseAndMerges) {
  if (!std::filesystem::exists(tiny_llama())) GTEST_SKIP() << tiny_llama() << " is missing";
  constexpr int64_t T = 12;
  nn::Llama model(kLoraConfig);
  nn::add_lora(model, {.targets = {"q_proj", "v_proj"}, .rank = 4, .alpha = 8});
  auto loss_fn = [&model](Tensor ids, Tensor targets) { return model.loss(ids, targets); };
  Program train = compile_train(model, loss_fn,
                                {.inputs = {{"ids", {1, T}, DType::kI32}, {"targets", {1, T}, DType::kI32}},
                                 .optimizer = Adam{.lr = 2e-2},
                                 .device = GetParam(),
                                 .frozen = nn::lora_frozen(model)});
  Program eval = compile_forward(
      model, loss_fn,
      {.inputs = {{"ids", {1, T}, DType::kI32}, {"targets", {1, T}, DType::kI32}}, .device = GetParam()});
  train.init_params(0);  // the adapters' A; B = 0
  load_safetensors(tiny_llama(), train, {.partial = true});
  // Only the adapters' moments: 8 matrices, q's A [4,32] B [32,4], v's A [4,32] B [16,4], 2 layers.
  int64_t count = 0;
  for (const Param* p : model.parameters()) count += numel_of(*p);
  EXPECT_EQ(train.memory_report().optimizer_state,
            2 * element_bytes(train, count) * 2 * (128 + 128 + 128 + 64));
  const std::vector<int32_t> seq = pattern(0, T + 1), held = pattern(4, T + 1);
  const std::vector<int32_t> ids(seq.begin(), seq.end() - 1), targets(seq.begin() + 1, seq.end());
  const std::vector<int32_t> held_ids(held.begin(), held.end() - 1),
      held_targets(held.begin() + 1, held.end());
  auto held_loss = [&] { return eval.run({{"ids", held_ids}, {"targets", held_targets}}).f32()[0]; };
  const float loss0 = held_loss();
  const auto before = train.download_params();
  for (int i = 0; i < 40; ++i) train.step({{"ids", ids}, {"targets", targets}});
  const float loss1 = held_loss();
  EXPECT_LT(loss1, 0.7f * loss0) << "held-out loss " << loss0 << " → " << loss1;
  std::printf("  %s: held-out loss %.4f → %.4f after 40 LoRA steps\n", GetParam().str().c_str(), loss0,
              loss1);
  const auto after = train.download_params();
  int changed = 0;
  for (const auto& [name, value] : before) {
    if (name.find(".lora_") == std::string::npos)
      EXPECT_EQ(values(after, name), values(before, name)) << name << " changed";
    else
      changed += values(after, name) != values(before, name);
  }
  EXPECT_EQ(changed, 8);
  // Merged into a model without adapters: the adapter form's logits, to float rounding.
  const std::map<std::string, HostTensor> merged = nn::merge_lora(model, after);
  EXPECT_EQ(merged.size() + 8, after.size());
  nn::Llama plain(kLoraConfig);
  Program a = logits_program(model, GetParam(), T), m = logits_program(plain, GetParam(), T);
  m.upload_params(merged);
  const std::vector<float> want = a.run({{"ids", held_ids}}).f32(), got = m.run({{"ids", held_ids}}).f32();
  EXPECT_LE(tg::testing::rel_diff(got, want), 1e-5);
  std::printf("  %s: merged vs adapter logits, relative difference %.2e\n", GetParam().str().c_str(),
              tg::testing::rel_diff(got, want));
  // Unmerging gives the base weights back.
  const std::map<std::string, HostTensor> base = nn::unmerge_lora(model, merged, after);
  for (const auto& [name, value] : base)
    EXPECT_LE(tg::testing::rel_diff(values(base, name), values(before, name)), 1e-6) << name;
  EXPECT_THROW(nn::merge_lora(model, merged), InputError);  // the adapters are gone
}

INSTANTIATE_TEST_SUITE_P(Devices, LoraDevices, ::testing::ValuesIn(tg::testing::all_devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

}  // namespace
