// tg::pretrained::load_adapter and save_adapter: PEFT's LoRA adapter folders (tests/data/peft_*,
// made by peft 0.21 over the tiny transformers models: tests/nn/gen_hf_peft_golden.py) give the
// logits peft's PeftModel gives, on every backend, unmerged and merged; saved adapters read back
// to the model that wrote them (and, with TG_EXPORT_DIR set, are kept for
// tests/nn/check_peft_export.py to run through peft); every error names what is wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;
namespace fs = std::filesystem;
using tg::testing::slurp;
using Params = std::map<std::string, HostTensor>;

std::string data(const std::string& name) { return std::string(TG_TEST_DATA_DIR) + "/" + name; }

struct TempFolder {
  explicit TempFolder(const std::string& name)
      : path(fs::temp_directory_path() / ("tg_adapter_" + std::to_string(getpid()) + "_" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempFolder() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
  fs::path path;
};

// What the model gives for the golden inputs: a causal LM's logits [B, T, vocab], a BERT
// classifier's [B, labels] for its ids, mask and token types.
std::vector<float> outputs_of(const pretrained::Model& m, const Params& weights, const Params& golden,
                              const Device& device) {
  const Shape shape = golden.at("ids").shape();
  Feeds feeds{{"ids", golden.at("ids").i32()}};
  ForwardOptions options{.inputs = {{"ids", shape, DType::kI32}}, .device = device};
  std::optional<Program> p;
  if (const auto* bert = dynamic_cast<const nn::Bert*>(m.module.get())) {
    options.inputs.push_back({"mask", shape, DType::kI32});
    options.inputs.push_back({"types", shape, DType::kI32});
    feeds.push_back({"mask", golden.at("mask").i32()});
    feeds.push_back({"types", golden.at("types").i32()});
    p.emplace(compile_forward(
        *m.module,
        [bert](Tensor ids, Tensor mask, Tensor types) {
          return bert->classify(bert->hidden(ids, mask, types));
        },
        options));
  } else {
    p.emplace(compile_forward(
        *m.module, [&m](Tensor ids) { return m.logits(ids); }, options));
  }
  p->upload_params(weights);
  return p->run(feeds).f32();
}

bool has_adapters(const Module& model) {
  for (Module* sub : const_cast<Module&>(model).modules())
    if (const auto* l = dynamic_cast<const nn::Linear*>(sub); l != nullptr && l->lora() != nullptr)
      return true;
  return false;
}

struct AdapterCase {
  const char* adapter;
  const char* base;
  size_t adapted;  // Linears the adapter reaches
};
const AdapterCase kCases[] = {{"peft_llama", "tiny_llama", 14}, {"peft_gpt2", "tiny_gpt2", 8},
                              {"peft_phi3", "tiny_phi3", 12},   {"peft_neox", "tiny_gpt_neox", 8},
                              {"peft_mamba", "tiny_mamba", 2},  {"peft_bert_cls", "tiny_bert_cls", 4}};

class PeftAdapters : public ::testing::TestWithParam<AdapterCase> {};

// peft's own logits, on every backend; the adapter moves them far from the base's (so a lost
// adapter shows).
TEST_P(PeftAdapters, GivePeftLogits) {
  const AdapterCase& c = GetParam();
  const Params golden = read_safetensors(data(c.adapter) + "/logits.safetensors");
  const Params base = read_safetensors(data(c.base) + "/logits.safetensors");
  EXPECT_GT(tg::testing::rel_diff(golden.at("logits").f32(), base.at("logits").f32()), 0.1);
  for (const Device& device : tg::testing::all_devices()) {
    pretrained::Model m = pretrained::load(data(c.base));
    const std::vector<std::string> adapted = pretrained::load_adapter(m, data(c.adapter));
    EXPECT_EQ(adapted.size(), c.adapted) << c.adapter;
    const double d =
        tg::testing::rel_diff(outputs_of(m, m.weights, golden, device), golden.at("logits").f32());
    EXPECT_LT(d, 1e-4) << c.adapter << " on " << device.str();
    std::printf("  %s on %s: relative difference to peft %.2e\n", c.adapter, device.str().c_str(), d);
  }
}

// Merged into the weights, nothing attached: the same logits.
TEST_P(PeftAdapters, MergedGivesTheSameLogits) {
  const AdapterCase& c = GetParam();
  const Params golden = read_safetensors(data(c.adapter) + "/logits.safetensors");
  pretrained::Model m = pretrained::load(data(c.base));
  pretrained::load_adapter(m, data(c.adapter), {.merge = true});
  EXPECT_FALSE(has_adapters(*m.module));
  for (const auto& [name, t] : m.weights) EXPECT_EQ(name.find("lora_"), std::string::npos) << name;
  const double d =
      tg::testing::rel_diff(outputs_of(m, m.weights, golden, Device::cpu()), golden.at("logits").f32());
  EXPECT_LT(d, 1e-4) << c.adapter;
}

// Over a base held in bf16 or quantized to 8 or 4 bits, the adapter kept apart computes what it
// computes over the f32 weights those hold (the reference: the f32 model given the base's
// dequantized values). Merged, the weights are held as before (rounded, or quantized again, which
// rounds the adapter's change too: seen 1.0e-2 bf16, 2.9e-2 8 bits, 0.41 4 bits from peft's f32
// logits, for this adapter that moves them by 100%).
TEST(PeftAdapter, OverAHalfOrQuantizedBase) {
  const Params golden = read_safetensors(data("peft_llama") + "/logits.safetensors");
  struct Held {
    DType dtype;
    int bits;
    double merged;  // tolerance against peft's f32 logits
  };
  for (const Held& h : {Held{DType::kBF16, 8, 2e-2}, Held{DType::kI8, 8, 5e-2}, Held{DType::kI8, 4, 0.6}}) {
    const std::string what = std::string(dtype_name(h.dtype)) + " " + std::to_string(h.bits) + " bits";
    pretrained::Model held = pretrained::load(data("tiny_llama"), {.dtype = h.dtype, .bits = h.bits});
    Params values;  // the f32 values the held base stands for
    for (const Param* p : held.module->parameters()) {
      if (p->scales() != nullptr) continue;
      const HostTensor& t = held.weights.at(p->path());
      values[p->path()] = t.dtype() == DType::kI8 ? dequantize_param(p->path(), p->bits(), t, held.weights)
                                                  : t.to(DType::kF32);
    }
    pretrained::Model ref = pretrained::load(data("tiny_llama"));
    ref.weights = values;
    pretrained::load_adapter(ref, data("peft_llama"));
    pretrained::load_adapter(held, data("peft_llama"));
    const double apart = tg::testing::rel_diff(outputs_of(held, held.weights, golden, Device::cpu()),
                                               outputs_of(ref, ref.weights, golden, Device::cpu()));
    EXPECT_LT(apart, 1e-5) << what;

    pretrained::Model merged = pretrained::load(data("tiny_llama"), {.dtype = h.dtype, .bits = h.bits});
    pretrained::load_adapter(merged, data("peft_llama"), {.merge = true});
    EXPECT_EQ(merged.weights.at("model.layers.0.self_attn.q_proj.weight").dtype(), h.dtype) << what;
    const double d = tg::testing::rel_diff(outputs_of(merged, merged.weights, golden, Device::cpu()),
                                           golden.at("logits").f32());
    EXPECT_LT(d, h.merged) << what;
    std::printf("  over %s: apart within %.1e of the f32 reference; merged %.2e from peft's f32 logits\n",
                what.c_str(), apart, d);
  }
}

// Written back, the adapter is the file it was read from: every tensor equal (a fused module's
// parts share the file's A and so are written as that one module again), the same rank and scaling.
TEST_P(PeftAdapters, SavesBackAsRead) {
  const AdapterCase& c = GetParam();
  pretrained::Model m = pretrained::load(data(c.base));
  pretrained::load_adapter(m, data(c.adapter));
  TempFolder dir(c.adapter);
  const bool cls = std::string(c.adapter) == "peft_bert_cls";
  pretrained::save_adapter(
      m, m.weights, dir.str(),
      {.base_model = c.base,
       .modules_to_save = cls ? std::vector<std::string>{"classifier"} : std::vector<std::string>{}});
  const Params want = read_safetensors(data(c.adapter) + "/adapter_model.safetensors");
  const Params got = read_safetensors(dir.str() + "/adapter_model.safetensors");
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_EQ(tg::testing::rel_diff(got.at(name).f32(), t.f32()), 0.0) << name;
  }
  pretrained::Model back = pretrained::load(data(c.base));
  pretrained::load_adapter(back, dir.str());
  const Params golden = read_safetensors(data(c.adapter) + "/logits.safetensors");
  EXPECT_LT(
      tg::testing::rel_diff(outputs_of(back, back.weights, golden, Device::cpu()), golden.at("logits").f32()),
      1e-4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PeftAdapters, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<AdapterCase>& info) {
                           return std::string(info.param.adapter);
                         });

// Adapters of the library's own (nn::add_lora, values drawn here), with ranks and scalings that
// differ by module, on Linears the file fuses (Phi-3's q/k/v_proj and gate/up_proj, GPT-NeoX's
// per-head query_key_value with k_proj left out) and on GPT-2's Conv1D: written as PEFT adapters,
// they read back onto the base to the logits of the model that wrote them.
struct Own {
  const char* name;
  const char* base;
  std::vector<nn::LoRAOptions> adapters;
};

class OwnAdapters : public ::testing::TestWithParam<Own> {};

TEST_P(OwnAdapters, ReadBackToTheSameLogits) {
  const Own& c = GetParam();
  pretrained::Model m = pretrained::load(data(c.base));
  for (const nn::LoRAOptions& o : c.adapters) nn::add_lora(*m.module, o);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  for (const Param* p : m.module->parameters())
    if (p->path().find(".lora_") != std::string::npos) {
      std::vector<float> v(static_cast<size_t>(numel(p->shape())));
      for (float& x : v) x = u(rng);
      m.weights[p->path()] = HostTensor::f32(std::move(v), p->shape());
    }
  const Params golden = read_safetensors(data(c.base) + "/logits.safetensors");
  const std::vector<float> want = outputs_of(m, m.weights, golden, Device::cpu());
  const char* keep = std::getenv("TG_EXPORT_DIR");
  TempFolder temp(c.name);
  const fs::path dir = keep ? fs::path(keep) / c.name : temp.path;
  pretrained::save_adapter(m, m.weights, dir.string(), {.base_model = c.base});
  pretrained::Model back = pretrained::load(data(c.base));
  pretrained::load_adapter(back, dir.string());
  const std::vector<float> got = outputs_of(back, back.weights, golden, Device::cpu());
  const double d = tg::testing::rel_diff(got, want);
  EXPECT_LT(d, 1e-5) << c.name;
  EXPECT_GT(tg::testing::rel_diff(want, golden.at("logits").f32()), 0.1) << c.name;  // the adapters matter
  std::printf("  %s: read back within %.1e of the model that wrote it\n", c.name, d);
  if (keep) {  // the ids and our logits, for check_peft_export.py
    const Shape ids = golden.at("ids").shape();
    const int64_t vocab = static_cast<int64_t>(want.size()) / (ids[0] * ids[1]);
    save_safetensors((dir / "tg_check.safetensors").string(),
                     {{"ids", golden.at("ids")}, {"logits", HostTensor::f32(want, {ids[0], ids[1], vocab})}});
  }
}

const Own kOwn[] = {
    {"own_phi3",
     "tiny_phi3",
     {{.targets = {"q_proj", "k_proj"}, .rank = 4, .alpha = 8},
      {.targets = {"gate_proj"}, .rank = 2, .alpha = 3},
      {.targets = {"o_proj"}, .rank = 3, .alpha = 6}}},
    {"own_neox", "tiny_gpt_neox", {{.targets = {"q_proj", "v_proj"}, .rank = 2, .alpha = 4}}},
    // Hybrids: the attention, the Mamba-2 blocks' projections and (Granite 4.0-H
    // with experts) the shared expert, whose gate and up the file fuses.
    {"own_granite_moe",
     "tiny_granite_hybrid_moe",
     {{.targets = {"q_proj", "in_proj", "out_proj"}, .rank = 4, .alpha = 8},
      {.targets = {"shared_expert.gate_proj"}, .rank = 2, .alpha = 3}}},
    {"own_bamba", "tiny_bamba", {{.targets = {"v_proj", "in_proj", "up_proj"}, .rank = 2, .alpha = 4}}},
    {"own_gpt2", "tiny_gpt2", {{.targets = {"qkv", "fc"}, .rank = 4, .alpha = 16}}},
    {"own_llama",
     "tiny_llama",
     {{.targets = {"q_proj", "v_proj"}, .rank = 4, .alpha = 8},
      {.targets = {"down_proj"}, .rank = 2, .alpha = 8},
      {.targets = {"model.layers.1.self_attn.o_proj"}, .rank = 4, .alpha = 2}}}};

INSTANTIATE_TEST_SUITE_P(Models, OwnAdapters, ::testing::ValuesIn(kOwn),
                         [](const ::testing::TestParamInfo<Own>& info) {
                           return std::string(info.param.name);
                         });

// ---- errors --------------------------------------------------------------------------------

// A copy of tests/data/peft_llama with its config's `from` replaced by `to` (when given) and its
// tensors changed by `edit`.
struct EditedAdapter : TempFolder {
  EditedAdapter(const std::string& name, const std::string& from, const std::string& to,
                const std::function<void(Params&)>& edit = {})
      : TempFolder(name) {
    std::string config = slurp(data("peft_llama") + "/adapter_config.json");
    if (!from.empty()) {
      const size_t at = config.find(from);
      EXPECT_NE(at, std::string::npos) << from;
      config.replace(at, from.size(), to);
    }
    std::ofstream(path / "adapter_config.json") << config;
    Params t = read_safetensors(data("peft_llama") + "/adapter_model.safetensors");
    if (edit) edit(t);
    save_safetensors((path / "adapter_model.safetensors").string(), t);
  }
};

std::string load_error(const std::string& folder) {
  return tg::testing::message_of<CheckpointError>([&] {
    pretrained::Model m = pretrained::load(data("tiny_llama"));
    pretrained::load_adapter(m, folder);
  });
}

const std::string kQ = "base_model.model.model.layers.0.self_attn.q_proj.";

TEST(PeftAdapterErrors, EachNamesWhatIsWrong) {
  EXPECT_HAS(load_error(data("tiny_llama")), "no adapter_config.json");
  EXPECT_HAS(load_error(data("tiny_llama")), "model folder");
  EXPECT_HAS(load_error(EditedAdapter("ia3", "\"peft_type\": \"LORA\"", "\"peft_type\": \"IA3\"").str()),
             "only LoRA adapters");
  EXPECT_HAS(load_error(EditedAdapter("dora", "\"use_dora\": false", "\"use_dora\": true").str()),
             "use_dora");
  EXPECT_HAS(load_error(EditedAdapter("rank", "\"r\": 4", "\"r\": 8").str()), "rank 8");
  EXPECT_HAS(load_error(EditedAdapter("json", "{", "[").str()), "not valid JSON");
  EXPECT_HAS(
      load_error(EditedAdapter("nomodule", "", "",
                               [](Params& t) {
                                 t[std::string("base_model.model.model.layers.0.mlp.nope.lora_A.weight")] =
                                     t.at(kQ + "lora_A.weight");
                                 t[std::string("base_model.model.model.layers.0.mlp.nope.lora_B.weight")] =
                                     t.at(kQ + "lora_B.weight");
                               })
                     .str()),
      "model.layers.0.mlp.nope.weight");
  EXPECT_HAS(
      load_error(EditedAdapter("shape", "", "",
                               [](Params& t) {
                                 t[kQ + "lora_B.weight"] = HostTensor::f32(std::vector<float>(20), {5, 4});
                               })
                     .str()),
      "has shape [5, 4], expected [32, 4]");
  EXPECT_HAS(
      load_error(EditedAdapter("half", "", "", [](Params& t) { t.erase(kQ + "lora_B.weight"); }).str()),
      "without its lora_B");
  EXPECT_HAS(load_error(EditedAdapter("embed", "", "",
                                      [](Params& t) {
                                        t["base_model.model.model.embed_tokens.lora_embedding_A"] =
                                            HostTensor::f32(std::vector<float>(4 * 64), {4, 64});
                                      })
                            .str()),
             "adapts an embedding");
  {
    TempFolder bin("bin");
    fs::copy_file(data("peft_llama") + "/adapter_config.json", bin.path / "adapter_config.json");
    std::ofstream(bin.path / "adapter_model.bin") << "pickle";
    EXPECT_HAS(load_error(bin.str()), "adapter_model.bin");
  }
  // Where the error is: the folder.
  EXPECT_HAS(load_error(EditedAdapter("named", "\"r\": 4", "\"r\": 8").str()), "tg_adapter_");
  EXPECT_HAS(
      load_error(
          EditedAdapter("pattern", "\"rank_pattern\": {}", "\"rank_pattern\": {\"q_proj\": 4.5}").str()),
      "not an integer");
  // A failed load changes nothing.
  {
    pretrained::Model m = pretrained::load(data("tiny_llama"));
    const Params before = m.weights;
    EditedAdapter bad("atomic", "", "", [](Params& t) {
      t[kQ + "lora_B.weight"] = HostTensor::f32(std::vector<float>(20), {5, 4});
    });
    EXPECT_THROW(pretrained::load_adapter(m, bad.str()), CheckpointError);
    EXPECT_FALSE(has_adapters(*m.module));
    EXPECT_EQ(m.weights.size(), before.size());
    EXPECT_THROW(pretrained::load_adapter(m, bad.str(), {.merge = true}), CheckpointError);
    for (const auto& [name, t] : before)
      EXPECT_EQ(tg::testing::rel_diff(m.weights.at(name).f32(), t.f32()), 0.0) << name;
  }
  // Twice onto one model.
  pretrained::Model m = pretrained::load(data("tiny_llama"));
  pretrained::load_adapter(m, data("peft_llama"));
  EXPECT_HAS(
      tg::testing::message_of<CheckpointError>([&] { pretrained::load_adapter(m, data("peft_llama")); }),
      "has a LoRA adapter already");
  // Saving a model without adapters.
  const pretrained::Model plain = pretrained::load(data("tiny_llama"));
  TempFolder out("noadapters");
  EXPECT_HAS(tg::testing::message_of<CheckpointError>(
                 [&] { pretrained::save_adapter(plain, plain.weights, out.str()); }),
             "no LoRA adapters");
  EXPECT_HAS(tg::testing::message_of<CheckpointError>([&] {
               pretrained::save_adapter(m, m.weights, out.str(), {.modules_to_save = {"no_such"}});
             }),
             "no module 'no_such'");
  Params partial = m.weights;
  partial.erase("model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_HAS(
      tg::testing::message_of<CheckpointError>([&] { pretrained::save_adapter(m, partial, out.str()); }),
      "no value for 'model.layers.0.self_attn.q_proj.lora_A.weight'");
}

// An adapter_config.json of older peft, without rank_pattern and alpha_pattern: the same logits.
TEST(PeftAdapter, ConfigWithoutPatterns) {
  EditedAdapter old("old", "\"alpha_pattern\": {},", "");
  const std::string config = slurp(old.path / "adapter_config.json");
  std::ofstream(old.path / "adapter_config.json")
      << config.substr(0, config.find("\"rank_pattern\": {},")) +
             config.substr(config.find("\"rank_pattern\": {},") +
                           std::string("\"rank_pattern\": {},").size());
  ASSERT_EQ(slurp(old.path / "adapter_config.json").find("rank_pattern"), std::string::npos);
  pretrained::Model m = pretrained::load(data("tiny_llama"));
  pretrained::load_adapter(m, old.str());
  const Params golden = read_safetensors(data("peft_llama") + "/logits.safetensors");
  EXPECT_LT(tg::testing::rel_diff(outputs_of(m, m.weights, golden, Device::cpu()), golden.at("logits").f32()),
            1e-4);
}

}  // namespace
