// tg::pretrained::save and from_config. The reference is transformers itself: every fixture
// folder's model.safetensors was written by save_pretrained (transformers 5.17), and a folder
// load() read and save() wrote back must hold the same tensors bit for bit, with the same
// names, shapes and dtypes (and the same config.json). Folders written from the library's own
// configurations load back into the same model (config and logits). With TG_EXPORT_DIR set,
// the exported folders are kept there with our logits (tg_check.safetensors), for
// tests/nn/check_hf_export.py to run through transformers on the GPU machine.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensorgrad/pretrained.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;
namespace fs = std::filesystem;
using tg::testing::slurp;
using Params = std::map<std::string, HostTensor>;

std::string save_fixture(const std::string& name) { return std::string(TG_TEST_DATA_DIR) + "/" + name; }

// A fresh folder under the temp directory, removed at the end.
struct SaveFolder {
  SaveFolder()
      : path(fs::temp_directory_path() /
             ("tg_save_" + std::to_string(getpid()) + "_" + std::to_string(n++))) {}
  ~SaveFolder() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
  fs::path path;
  static inline int n = 0;
};

// The same floats, bit for bit.
bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

const char* const kFixtures[] = {"tiny_llama",
                                 "tiny_gpt2",
                                 "tiny_mamba",
                                 "tiny_mamba_untied",
                                 "tiny_mamba2",
                                 "tiny_mamba2_tied",
                                 "tiny_granite_hybrid",
                                 "tiny_granite_hybrid_rope",
                                 "tiny_granite_hybrid_moe",
                                 "tiny_bamba",
                                 "tiny_nemotron_h",
                                 "tiny_llama3",
                                 "tiny_qwen2",
                                 "tiny_qwen3",
                                 "tiny_mistral",
                                 "tiny_phi3",
                                 "tiny_gemma",
                                 "tiny_phi3_longrope",
                                 "tiny_mistral_window",
                                 "tiny_qwen2_window",
                                 "tiny_gemma2",
                                 "tiny_gemma3",
                                 "tiny_mixtral",
                                 "tiny_qwen2_moe",
                                 "tiny_qwen3_moe",
                                 "tiny_granite",
                                 "tiny_olmo2",
                                 "tiny_olmo3",
                                 "tiny_gpt_neox",
                                 "tiny_gpt_neox_sequential",
                                 "tiny_phi",
                                 "tiny_stablelm",
                                 "tiny_stablelm_parallel",
                                 "tiny_starcoder2",
                                 "tiny_gpt_oss",
                                 "tiny_bert",
                                 "tiny_bert_pooler",
                                 "tiny_roberta",
                                 "tiny_bert_cls",
                                 "tiny_roberta_cls",
                                 "tiny_bert_token",
                                 "tiny_bert_qa",
                                 "tiny_roberta_qa",
                                 "tiny_distilbert",
                                 "tiny_distilbert_base",
                                 "tiny_distilbert_cls",
                                 "tiny_distilbert_token",
                                 "tiny_distilbert_qa",
                                 "tiny_xlm_roberta"};

class Resave : public ::testing::TestWithParam<const char*> {};

// load → save: transformers' own file back, tensor for tensor and byte for byte (the tied
// heads' files hold no lm_head, as save_pretrained leaves it out: the whole file is equal).
TEST_P(Resave, WritesTransformersFileBack) {
  const std::string name = GetParam();
  const pretrained::Model m = pretrained::load(save_fixture(name));
  SaveFolder out;
  pretrained::save(m, m.weights, out.str());
  const Params theirs = read_safetensors(save_fixture(name) + "/model.safetensors");
  const Params ours = read_safetensors((out.path / "model.safetensors").string());
  std::set<std::string> expected;
  for (const auto& [n, t] : theirs) {
    // What save_pretrained may write that the model does not hold: GPT-2's attention-mask
    // buffers, and a tied head's copy of the embedding.
    const bool tied = n == "lm_head.weight" && !ours.count(n);
    if (!n.ends_with(".attn.bias") && !n.ends_with(".attn.masked_bias") && !tied) expected.insert(n);
  }
  std::set<std::string> got;
  for (const auto& [n, t] : ours) got.insert(n);
  EXPECT_EQ(got, expected) << name;
  for (const std::string& n : expected) {
    const HostTensor &a = ours.at(n), &b = theirs.at(n);
    ASSERT_EQ(a.dtype(), b.dtype()) << n;
    ASSERT_EQ(a.shape(), b.shape()) << n;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel() * dtype_size(a.dtype()))), 0)
        << name << ": " << n;
  }
  EXPECT_EQ(read_safetensors_metadata((out.path / "model.safetensors").string()).at("format"), "pt");
  // The whole file too: the same header, order and padding as the safetensors writer's.
  EXPECT_EQ(slurp(out.path / "model.safetensors"), slurp(save_fixture(name) + "/model.safetensors")) << name;
  for (const char* file : {"tokenizer.json", "generation_config.json"})
    EXPECT_EQ(fs::exists(out.path / file), fs::exists(save_fixture(name) + "/" + file))
        << name << " " << file;

  // And load() reads it into the same model.
  const pretrained::Model back = pretrained::load(out.str());
  EXPECT_EQ(back.architecture, m.architecture);
  EXPECT_EQ(back.context, m.context);
  ASSERT_EQ(back.weights.size(), m.weights.size());
  for (const auto& [n, t] : m.weights)
    EXPECT_TRUE(same_bits(back.weights.at(n).f32(), t.f32())) << name << ": " << n;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Resave, ::testing::ValuesIn(kFixtures),
                         [](const auto& info) { return std::string(info.param); });

// bf16 and f16 files hold each weight rounded to nearest even, and config.json says so.
TEST(PretrainedSave, HalfPrecisionRoundsEachWeight) {
  const pretrained::Model m = pretrained::load(save_fixture("tiny_phi3"));
  for (DType dt : {DType::kBF16, DType::kF16}) {
    SaveFolder out;
    pretrained::save(m, m.weights, out.str(), {.dtype = dt});
    for (const auto& [n, t] : read_safetensors((out.path / "model.safetensors").string()))
      EXPECT_EQ(t.dtype(), dt) << n;
    EXPECT_EQ(read_json(out.path / "config.json")["dtype"], dt == DType::kBF16 ? "bfloat16" : "float16");
    const pretrained::Model back = pretrained::load(out.str());
    for (const auto& [n, t] : m.weights)
      EXPECT_TRUE(same_bits(back.weights.at(n).f32(), t.to(dt).to(DType::kF32).f32())) << n;
  }
}

// Shards as save_pretrained's max_shard_size: an index naming every tensor's shard, the total
// size; saving again unsharded removes the shards.
TEST(PretrainedSave, ShardsWithAnIndex) {
  const pretrained::Model m = pretrained::load(save_fixture("tiny_llama"));
  SaveFolder out;
  pretrained::save(m, m.weights, out.str(), {.max_shard_bytes = 16 * 1024});
  const nlohmann::json index = read_json(out.path / "model.safetensors.index.json");
  std::set<std::string> files;
  int64_t total = 0;
  for (const auto& [n, file] : index["weight_map"].items()) {
    files.insert(file.get<std::string>());
    const HostTensor t = read_safetensors((out.path / file.get<std::string>()).string()).at(n);
    total += t.numel() * 4;
  }
  EXPECT_GE(files.size(), 4u);
  EXPECT_TRUE(files.count("model-00001-of-" + std::string(5 - std::to_string(files.size()).size(), '0') +
                          std::to_string(files.size()) + ".safetensors"));
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
  EXPECT_FALSE(fs::exists(out.path / "model.safetensors"));
  const pretrained::Model back = pretrained::load(out.str());
  for (const auto& [n, t] : m.weights) EXPECT_TRUE(same_bits(back.weights.at(n).f32(), t.f32())) << n;

  pretrained::save(m, m.weights, out.str());
  for (const auto& e : fs::directory_iterator(out.path))
    EXPECT_FALSE(e.path().filename().string().starts_with("model-")) << e.path();
  EXPECT_FALSE(fs::exists(out.path / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(out.path / "model.safetensors"));
}

// Random values for every parameter of `module` (seeded), as a trained model's would be.
Params random_weights(const Module& module, uint32_t seed) {
  Params w;
  for (const Param* p : module.parameters()) {
    std::vector<float> v = tg::testing::uniform_values(static_cast<size_t>(numel(p->shape())), seed++);
    for (float& x : v) x *= 0.3f;
    w[p->path()] = HostTensor::f32(std::move(v), p->shape());
  }
  return w;
}

// Our logits of `m` with `weights` for ids [2, T] on the cpu backend.
HostTensor logits_of(const pretrained::Model& m, const Params& weights, const HostTensor& ids) {
  Program p = compile_forward(*m.module, [&m](Tensor x) { return m.logits(x); },
                              {.inputs = {{"ids", ids.shape(), DType::kI32}}, .device = Device::cpu()});
  p.upload_params(weights);
  return p.run({{"ids", ids.i32()}});
}

HostTensor ids_for(int64_t vocab, int64_t t) {
  std::vector<int32_t> v;
  std::mt19937 rng(7);
  for (int64_t i = 0; i < 2 * t; ++i) v.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab)));
  return HostTensor::i32(std::move(v), {2, t});
}

// Writes `m` with `weights` to TG_EXPORT_DIR/<name> when that is set (kept, with
// tg_check.safetensors: the ids and our logits, for check_hf_export.py), else to a temp
// folder; load() must give the model back: its logits within `tol` of `want` (m's own).
void export_and_reload(const std::string& name, const pretrained::Model& m, const Params& weights,
                       const HostTensor& ids, const HostTensor& want, double tol,
                       const pretrained::SaveOptions& options = {}) {
  const char* keep = std::getenv("TG_EXPORT_DIR");
  SaveFolder temp;
  const fs::path dir = keep ? fs::path(keep) / name : temp.path;
  pretrained::save(m, weights, dir.string(), options);
  const pretrained::Model back = pretrained::load(dir.string());
  EXPECT_EQ(back.architecture, m.architecture) << name;
  EXPECT_EQ(back.context, m.context) << name;
  const HostTensor ours = logits_of(back, back.weights, ids);
  const double d = tg::testing::rel_diff(ours.f32(), want.f32());
  EXPECT_LT(d, tol) << name;
  std::printf("  %s: reloaded logits within %.1e of the saved model's\n", name.c_str(), d);
  if (keep) save_safetensors((dir / "tg_check.safetensors").string(), {{"ids", ids}, {"logits", ours}});
}

Params rounded(Params w, DType dt) {
  for (auto& [n, t] : w) t = t.to(dt).to(DType::kF32);
  return w;
}

// A Llama of the library's own with the options LlamaForCausalLM has: grouped-query heads of a
// width of their own, Llama 3.1's RoPE, biases, a tied head; written in bf16.
TEST(PretrainedSave, LlamaFromConfig) {
  nn::LlamaConfig c{.vocab = 64,
                    .seq_len = 16,
                    .layers = 2,
                    .d_model = 32,
                    .heads = 4,
                    .kv_heads = 2,
                    .mlp_hidden = 48,
                    .rms_eps = 1e-5,
                    .rope_theta = 500000.0};
  c.rope_scaling = {.type = RopeScaling::Type::kLlama3, .factor = 8, .original_context = 8};
  c.head_dim = 16;
  c.attention_bias = true;
  c.mlp_bias = true;
  c.tied_head = true;
  const pretrained::Model m = pretrained::from_config(c);
  EXPECT_EQ(m.architecture, "LlamaForCausalLM");
  const Params w = random_weights(*m.module, 1);
  const HostTensor ids = ids_for(c.vocab, 6);
  export_and_reload("llama", m, w, ids, logits_of(m, rounded(w, DType::kBF16), ids), 1e-6,
                    {.dtype = DType::kBF16});
  SaveFolder out;
  pretrained::save(m, w, out.str());
  const nn::LlamaConfig back = std::get<nn::LlamaConfig>(pretrained::load(out.str()).config);
  EXPECT_EQ(back.kv_heads, 2);
  EXPECT_EQ(back.head_size(), 16);
  EXPECT_EQ(back.rope_theta, 500000.0);
  EXPECT_EQ(back.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(back.rope_scaling.factor, 8);
  EXPECT_EQ(back.rope_scaling.original_context, 8);
  EXPECT_TRUE(back.attention_bias && back.mlp_bias && back.tied_head);
  EXPECT_EQ(back.rms_eps, 1e-5);
}

TEST(PretrainedSave, Gpt2FromConfig) {
  const nn::GptConfig c{.vocab = 64, .seq_len = 16, .layers = 2, .d_model = 32, .heads = 4, .mlp_hidden = 80};
  const pretrained::Model m = pretrained::from_config(c);
  const Params w = random_weights(*m.module, 2);
  const HostTensor ids = ids_for(c.vocab, 6);
  export_and_reload("gpt2", m, w, ids, logits_of(m, w, ids), 1e-6);
}

TEST(PretrainedSave, MambaFromConfig) {
  nn::MambaLMConfig c{.vocab = 64, .layers = 2, .d_model = 32};
  const pretrained::Model m = pretrained::from_config(c);
  Params w = random_weights(*m.module, 3);
  for (auto& [n, t] : w)  // A = −exp(A_log): keep the recurrence stable (decay rates in (0.4, 1))
    if (n.ends_with("A_log"))
      t = HostTensor::f32(std::vector<float>(static_cast<size_t>(t.numel()), -0.5f), t.shape());
  const HostTensor ids = ids_for(c.vocab, 6);
  export_and_reload("mamba", m, w, ids, logits_of(m, w, ids), 1e-6);
}

// BERT-family encoders from the library's configuration: a BERT sequence classifier (pooler,
// labels), a RoBERTa masked-LM (positions past the padding id) and a BERT question-answering
// model; each folder loads back as that class with the same outputs. Two heads are refused.
TEST(PretrainedSave, BertFamilyFromConfig) {
  const nn::BertConfig base{
      .vocab = 64, .d_model = 32, .layers = 2, .heads = 4, .mlp_hidden = 48, .max_positions = 20};
  nn::BertConfig cls = base, mlm = base, qa = base, distil = base;
  cls.pooler = true, cls.labels = 3;
  distil.distil = true, distil.type_vocab = 0, distil.labels = 2, distil.hidden_dropout = 0.1;
  mlm.roberta_positions = true, mlm.pad_id = 1, mlm.type_vocab = 1, mlm.mlm_head = true,
  mlm.gelu = GeluApprox::kTanh;
  qa.qa_head = true;
  for (const auto& [name, c, arch] :
       {std::tuple{"bert_cls", cls, "BertForSequenceClassification"},
        std::tuple{"roberta_mlm", mlm, "RobertaForMaskedLM"},
        std::tuple{"bert_qa", qa, "BertForQuestionAnswering"},
        std::tuple{"distil_cls", distil, "DistilBertForSequenceClassification"}}) {
    const pretrained::Model m = pretrained::from_config(c);
    EXPECT_EQ(m.architecture, arch);
    const Params w = random_weights(*m.module, 4);
    const HostTensor ids = ids_for(c.vocab, 6);
    export_and_reload(name, m, w, ids, logits_of(m, w, ids), 1e-6);
    SaveFolder out;
    pretrained::save(m, w, out.str());
    const nn::BertConfig back = std::get<nn::BertConfig>(pretrained::load(out.str()).config);
    EXPECT_EQ(back.labels, c.labels);
    EXPECT_EQ(back.roberta_positions, c.roberta_positions);
    EXPECT_EQ(back.pad_id, c.pad_id);
    EXPECT_EQ(back.gelu, c.gelu);
    EXPECT_EQ(back.pooler, c.pooler);
    EXPECT_EQ(back.max_positions, 20);
    EXPECT_EQ(back.distil, c.distil);
    EXPECT_EQ(back.type_vocab, c.type_vocab);
    EXPECT_DOUBLE_EQ(back.hidden_dropout, c.hidden_dropout);
  }
  nn::BertConfig two = base;
  two.mlm_head = true, two.qa_head = true;
  EXPECT_THROW(pretrained::from_config(two), CheckpointError);
}

// A fine-tuned family model (Phi-3: the fused projections written back) with LoRA adapters:
// saved merged, it gives the adapted model's logits.
TEST(PretrainedSave, LoraAdaptersAreMerged) {
  pretrained::Model m = pretrained::load(save_fixture("tiny_phi3"));
  nn::add_lora(*m.module, {.targets = {"q_proj", "down_proj"}, .rank = 4});
  Params w = m.weights;
  for (const Param* p : m.module->parameters())
    if (!w.count(p->path())) w[p->path()] = random_weights(*m.module, 9).at(p->path());
  const HostTensor ids = ids_for(64, 6);
  const HostTensor adapted = logits_of(m, w, ids);
  EXPECT_GT(tg::testing::rel_diff(adapted.f32(), logits_of(
                                                     m,
                                                     [&] {
                                                       Params base = w;
                                                       for (auto& [n, t] : base)
                                                         if (n.find("lora_B") != std::string::npos)
                                                           t = HostTensor(DType::kF32, t.shape());
                                                       return base;
                                                     }(),
                                                     ids)
                                                     .f32()),
            1e-3);  // the adapters change the model
  export_and_reload("phi3_lora", m, w, ids, adapted, 1e-5);
}

// What save() and from_config() refuse, each a CheckpointError that says what and where.
void expect_error(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying: " << what;
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(PretrainedSave, ErrorsSayWhatIsWrong) {
  const pretrained::Model m = pretrained::load(save_fixture("tiny_llama"));
  SaveFolder out;
  Params missing = m.weights;
  missing.erase("model.norm.weight");
  expect_error([&] { pretrained::save(m, missing, out.str()); },
               "no value for the parameter 'model.norm.weight'");
  Params wrong = m.weights;
  wrong["model.norm.weight"] = HostTensor(DType::kF32, {3});
  expect_error([&] { pretrained::save(m, wrong, out.str()); },
               "'model.norm.weight' has shape [3], the model's is [32]");
  Params extra = m.weights;
  extra["model.layers.9.mlp.up_proj.weight"] = HostTensor(DType::kF32, {2, 2});
  expect_error([&] { pretrained::save(m, extra, out.str()); },
               "'model.layers.9.mlp.up_proj.weight' is no parameter");
  Params ints = m.weights;
  ints["model.norm.weight"] = HostTensor(DType::kI32, {32});
  expect_error([&] { pretrained::save(m, ints, out.str()); },
               "'model.norm.weight' is i32, not a float tensor");
  expect_error([&] { pretrained::save(m, m.weights, out.str(), {.dtype = DType::kI32}); },
               "SaveOptions::dtype i32");
  expect_error([&] { pretrained::save(m, m.weights, save_fixture("tiny_llama")); },
               "the folder the model was loaded from");
  EXPECT_FALSE(fs::exists(out.path / "config.json"));  // nothing written before the checks pass

  nn::LlamaConfig gemma{.vocab = 64, .seq_len = 16, .layers = 1, .d_model = 32, .heads = 4, .mlp_hidden = 48};
  gemma.gemma = true;
  expect_error([&] { pretrained::from_config(gemma); }, "LlamaForCausalLM cannot express Gemma's");
  nn::LlamaConfig longrope = gemma;
  longrope.gemma = false;
  longrope.rope_scaling = {.type = RopeScaling::Type::kLongRope, .factor = 2, .original_context = 8};
  expect_error([&] { pretrained::from_config(longrope); }, "rope_scaling longrope");
  const nn::GptConfig rotary{
      .vocab = 64, .seq_len = 16, .layers = 1, .d_model = 32, .heads = 4, .rotary = true};
  expect_error([&] { pretrained::from_config(rotary); }, "GPT2LMHeadModel cannot express rotary positions");
}

// config.json goes through a temporary file renamed over it, as the weights do: when the
// rename fails the error says so and no temporary file is left beside the weights.
TEST(PretrainedSave, AFailedConfigWriteLeavesNoTemporaryFile) {
  const pretrained::Model m = pretrained::load(save_fixture("tiny_gpt2"));
  SaveFolder out;
  fs::create_directories(out.path / "config.json" / "child");  // rename cannot replace a non-empty folder
  expect_error([&] { pretrained::save(m, m.weights, out.str()); }, "cannot rename");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out.path)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"config.json", "model.safetensors"}));
}

}  // namespace
