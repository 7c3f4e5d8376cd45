// Mamba-2 checkpoints (Mamba2ForCausalLM), the Mamba options transformers writes (in/out
// projection biases, no conv bias, untied heads, time_step_limit) and the Granite 4.0 hybrids
// (GraniteMoeHybridForCausalLM: Mamba-2 and attention layers), Bamba and Nemotron-H, against
// tests/data/tiny_mamba2, tiny_mamba2_tied, tiny_mamba_untied, tiny_granite_hybrid(_rope, _moe), tiny_bamba
// and tiny_nemotron_h (tests/nn/gen_hf_mamba2_golden.py, transformers 5.17): the logits to 1e-4 on every
// backend; the loss with the ids as labels and every parameter's gradient of it to 1e-4; tg::Generator's
// greedy tokens (token by token through the states, or prefilled in windows) equal transformers' cached
// generate, and the cached step over windows gives transformers' logits; and the errors
// of configs the library cannot build. (pretrained_save_test writes the folders back byte for byte.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "io/pretrained_internal.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;
namespace fs = std::filesystem;
using tg::testing::slurp;

const char* const kFolders[] = {"tiny_mamba2",         "tiny_mamba2_tied",         "tiny_mamba_untied",
                                "tiny_granite_hybrid", "tiny_granite_hybrid_rope", "tiny_granite_hybrid_moe",
                                "tiny_bamba",          "tiny_nemotron_h"};

std::string fixture(const std::string& name) { return std::string(TG_TEST_DATA_DIR) + "/" + name; }

// ids [B, T] → its first T − 1 columns, or its last T − 1 (transformers' shifted labels).
HostTensor columns(const HostTensor& ids, bool last) {
  const int64_t b = ids.shape()[0], t = ids.shape()[1];
  const std::span<const int32_t> all = ids.i32();
  std::vector<int32_t> out;
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = last ? 1 : 0; j < (last ? t : t - 1); ++j)
      out.push_back(all[static_cast<size_t>(i * t + j)]);
  return HostTensor::i32(std::move(out), {b, t - 1});
}

class Mamba2Pretrained : public ::testing::TestWithParam<Device> {};

TEST_P(Mamba2Pretrained, LogitsLossAndGradientsEqualTransformers) {
  for (const std::string name : kFolders) {
    SCOPED_TRACE(name);
    const pretrained::Model lm = pretrained::load(fixture(name));
    const auto golden = read_safetensors(fixture(name) + "/logits.safetensors");
    const HostTensor& ids = golden.at("ids");
    {
      Program p = compile_forward(*lm.module, [&lm](Tensor x) { return lm.logits(x); },
                                  {.inputs = {{"ids", ids.shape(), DType::kI32}}, .device = GetParam()});
      lm.upload(p);
      const double d = tg::testing::rel_diff(p.run({{"ids", ids.i32()}}).f32(), golden.at("logits").f32());
      EXPECT_LT(d, 1e-4);
      std::printf("  %s on %s: relative logit difference to transformers %.2e\n", name.c_str(),
                  GetParam().str().c_str(), d);
    }
    const HostTensor in = columns(ids, false), targets = columns(ids, true);
    const int64_t vocab = golden.at("logits").shape()[2];
    Program train =
        compile_train(*lm.module,
                      [&](Tensor i, Tensor t) {
                        return cross_entropy(reshape(lm.logits(i), {-1, vocab}), reshape(t, {-1}));
                      },
                      {.inputs = {{"ids", in.shape(), DType::kI32}, {"targets", in.shape(), DType::kI32}},
                       .optimizer = GradientsOnly{},
                       .device = GetParam()});
    lm.upload(train);
    Captures caps;
    const float loss = train.step({{"ids", in.i32()}, {"targets", targets.i32()}}, {.captures = &caps});
    const float want = golden.at("loss").f32()[0];
    EXPECT_LT(std::abs(loss - want) / want, 1e-5) << loss << " vs transformers' " << want;
    // Our gradients under the file's names and layouts (save()'s mapping: fused and renamed).
    std::map<std::string, HostTensor> ours;
    for (const auto& [param, value] : lm.weights) ours[param] = caps.at("grad/" + param);
    size_t compared = 0;
    double worst = 0;
    for (const auto& [name, grad] : pretrained::detail::file_tensors(lm, std::move(ours))) {
      const std::string g = "grad/" + name;
      ASSERT_TRUE(golden.count(g)) << g;
      EXPECT_EQ(grad.shape(), golden.at(g).shape()) << g;
      const double e = tg::testing::rel_diff(grad.f32(), golden.at(g).f32());
      EXPECT_LT(e, 1e-4) << "gradient of " << name;
      worst = std::max(worst, e);
      ++compared;
    }
    size_t theirs = 0;
    for (const auto& [n, t] : golden) theirs += n.starts_with("grad/");
    EXPECT_EQ(compared, theirs);  // every gradient transformers has, ours has
    std::printf("  %s on %s: loss %.7f (transformers %.7f), worst gradient error %.2e\n", name.c_str(),
                GetParam().str().c_str(), loss, want, worst);
  }
}

TEST_P(Mamba2Pretrained, GreedyTokensEqualTransformersGenerate) {
  for (const std::string name : kFolders) {
    SCOPED_TRACE(name);
    const pretrained::Model lm = pretrained::load(fixture(name));
    ASSERT_TRUE(lm.recurrent());
    const auto golden = read_safetensors(fixture(name) + "/logits.safetensors");
    const std::span<const int32_t> all = golden.at("greedy").i32();
    const std::vector<int32_t> prompt(golden.at("prompt").i32().begin(), golden.at("prompt").i32().end());
    const std::vector<int32_t> want(all.begin() + static_cast<long>(prompt.size()), all.end());
    // Token by token, and with a window of 2 prefilled (the third prompt token through the
    // decode program).
    for (const bool prefill : {false, true}) {
      Generator gen(*lm.module, lm.step(),
                    {.cache_len = 16, .prefill_len = 2, .device = GetParam(), .prefill = prefill});
      lm.upload(gen.decode());
      EXPECT_EQ(gen.generate(prompt, {.max_new_tokens = static_cast<int64_t>(want.size())}), want)
          << (prefill ? "prefilled" : "token by token");
    }
  }
}

// The cached step over windows of 3, 3 and 1 tokens (attention layers at positions 0, 3, 6;
// Mamba layers from their states) gives transformers' logits of the whole sequence.
TEST_P(Mamba2Pretrained, WindowsGiveTransformersLogits) {
  for (const std::string name : kFolders) {
    SCOPED_TRACE(name);
    const pretrained::Model lm = pretrained::load(fixture(name));
    const auto golden = read_safetensors(fixture(name) + "/logits.safetensors");
    const HostTensor& ids = golden.at("ids");
    const int64_t b = ids.shape()[0], len = ids.shape()[1], v = golden.at("logits").shape()[2];
    const CachedLm step = lm.step();
    auto compile = [&](int64_t t) {
      Program p = compile_forward(
          *lm.module, [&](Tensor x, Tensor pos) { return step(x, pos, len); },
          {.inputs = {{"ids", {b, t}, DType::kI32}, {"pos", {b}, DType::kI32}}, .device = GetParam()});
      lm.upload(p);
      return p;
    };
    Program window = compile(3), one = compile(1);
    window.reset_state();
    double worst = 0;
    for (int64_t start = 0; start < len;) {
      const int64_t t = start + 3 <= len ? 3 : 1;
      std::vector<int32_t> cols;
      for (int64_t r = 0; r < b; ++r)
        for (int64_t j = 0; j < t; ++j) cols.push_back(ids.i32()[static_cast<size_t>(r * len + start + j)]);
      const std::vector<float> got =
          (t == 3 ? window : one)
              .run({{"ids", cols},
                    {"pos", std::vector<int32_t>(static_cast<size_t>(b), static_cast<int32_t>(start))}})
              .f32();
      for (int64_t r = 0; r < b; ++r)
        for (int64_t j = 0; j < t; ++j) {
          const auto at = static_cast<size_t>((r * t + j) * v),
                     want_at = static_cast<size_t>((r * len + start + j) * v);
          worst = std::max(worst, tg::testing::rel_diff(
                                      std::span(got).subspan(at, static_cast<size_t>(v)),
                                      golden.at("logits").f32().subspan(want_at, static_cast<size_t>(v))));
        }
      start += t;
    }
    EXPECT_LT(worst, 1e-4);
    std::printf("  %s on %s, windows of 3: worst relative logit difference %.2e\n", name.c_str(),
                GetParam().str().c_str(), worst);
  }
}

// The hybrids held in bf16 and in 8 bits (their Mamba-2 blocks' in_proj/out_proj quantized, the
// conv and the vectors as they are held) give transformers' f32 logits to the rounding, and
// decode through their states.
TEST_P(Mamba2Pretrained, HybridsHeldInHalfAndEightBits) {
  for (const std::string name : {"tiny_granite_hybrid_moe", "tiny_nemotron_h"}) {
    const auto golden = read_safetensors(fixture(name) + "/logits.safetensors");
    const HostTensor& ids = golden.at("ids");
    for (const DType dtype : {DType::kBF16, DType::kI8}) {
      SCOPED_TRACE(name + " " + std::string(dtype_name(dtype)));
      const pretrained::Model lm = pretrained::load(fixture(name), {.dtype = dtype});
      Program p = compile_forward(*lm.module, [&lm](Tensor x) { return lm.logits(x); },
                                  {.inputs = {{"ids", ids.shape(), DType::kI32}},
                                   .device = GetParam(),
                                   .precision = Precision::kBf16});
      lm.upload(p);
      const double d = tg::testing::rel_diff(p.run({{"ids", ids.i32()}}).f32(), golden.at("logits").f32());
      EXPECT_LT(d, 3e-2);
      std::printf("  %s %s on %s: relative logit difference to transformers' f32 %.2e\n", name.c_str(),
                  dtype_name(dtype), GetParam().str().c_str(), d);
      for (const bool prefill : {false, true}) {  // token by token, and a window of 2 first
        Generator gen(*lm.module, lm.step(),
                      {.cache_len = 16,
                       .prefill_len = 2,
                       .device = GetParam(),
                       .precision = Precision::kBf16,
                       .prefill = prefill});
        lm.upload(gen.decode());
        EXPECT_EQ(gen.generate(std::vector<int32_t>{3, 17, 42}, {.max_new_tokens = 4}).size(), 4u);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, Mamba2Pretrained, ::testing::ValuesIn(tg::testing::all_devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

TEST(Mamba2Pretrained, ReadsTheConfig) {
  const pretrained::Model lm = pretrained::load(fixture("tiny_mamba2"));
  EXPECT_EQ(lm.architecture, "Mamba2ForCausalLM");
  const auto& c = std::get<nn::MambaLMConfig>(lm.config);
  EXPECT_EQ(c.version, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.groups, 2);
  EXPECT_FALSE(c.tied_head);
  EXPECT_TRUE(std::isinf(c.dt_limit_max));
  const pretrained::Model tied_lm = pretrained::load(fixture("tiny_mamba2_tied"));
  const auto& tied = std::get<nn::MambaLMConfig>(tied_lm.config);
  EXPECT_TRUE(tied.tied_head && tied.bias && !tied.conv_bias);
  EXPECT_EQ(tied.dt_limit_max, 0.05);
  const pretrained::Model hybrid = pretrained::load(fixture("tiny_granite_hybrid"));
  EXPECT_TRUE(hybrid.recurrent());
  const auto& l = std::get<nn::LlamaConfig>(hybrid.config);
  EXPECT_EQ(l.mamba_layers, (std::vector<bool>{true, false, true}));
  EXPECT_TRUE(l.nope);
  EXPECT_EQ(l.mlp_hidden, 48);
  EXPECT_EQ(l.mamba.head_dim, 16);
  EXPECT_EQ(l.residual_multiplier, 0.5);
  const pretrained::Model rope = pretrained::load(fixture("tiny_granite_hybrid_rope"));
  EXPECT_FALSE(std::get<nn::LlamaConfig>(rope.config).nope);
  const pretrained::Model moe = pretrained::load(fixture("tiny_granite_hybrid_moe"));
  const nn::LlamaConfig::Experts& x = std::get<nn::LlamaConfig>(moe.config).experts;
  EXPECT_EQ(x.count, 4);
  EXPECT_EQ(x.top_k, 2);
  EXPECT_EQ(x.hidden, 24);
  EXPECT_EQ(x.shared_hidden, 32);
  EXPECT_FALSE(x.shared_gate);
  const pretrained::Model bamba = pretrained::load(fixture("tiny_bamba"));
  const auto& b = std::get<nn::LlamaConfig>(bamba.config);
  EXPECT_EQ(b.mamba_layers, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(b.rotary_dim, 4);  // half of each 8-wide head
  EXPECT_EQ(b.mamba.groups, 2);
  const pretrained::Model nemotron = pretrained::load(fixture("tiny_nemotron_h"));
  const auto& n = std::get<nn::LlamaConfig>(nemotron.config);
  using B = nn::LlamaConfig::Block;
  EXPECT_EQ(n.blocks, (std::vector<B>{B::kMixer, B::kMixer, B::kMlp, B::kMixer, B::kMlp}));
  EXPECT_EQ(n.mamba_layers, (std::vector<bool>{true, false, false, true, false}));
  EXPECT_EQ(n.mamba.d_inner, 48);
  EXPECT_EQ(n.mamba.norm_groups, 2);
  EXPECT_EQ(n.mamba.dt_limit_min, 0.02);
  EXPECT_TRUE(n.nope);
  EXPECT_EQ(n.gate, nn::LlamaConfig::Gate::kRelu2);
}

// A fresh folder under the temp directory holding a fixture's weights and `config`.
struct Mamba2Folder {
  explicit Mamba2Folder(const std::string& config, const std::string& from = "tiny_mamba2")
      : path(fs::temp_directory_path() / ("tg_mamba2_" + std::to_string(getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
    std::ofstream(path / "config.json") << config;
    fs::copy_file(fixture(from) + "/model.safetensors", path / "model.safetensors");
  }
  ~Mamba2Folder() { fs::remove_all(path); }
  fs::path path;
};

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

// transformers 4 (Python's json) writes an infinite limit as a bare Infinity, which JSON lacks.
TEST(Mamba2Pretrained, ReadsPythonsBareInfinity) {
  const std::string config = slurp(fixture("tiny_mamba2") + "/config.json");
  const std::string five = "{\n      \"__float__\": \"Infinity\"\n    }";
  const Mamba2Folder dir(replaced(config, five, "Infinity"));
  const pretrained::Model lm = pretrained::load(dir.path.string());
  EXPECT_TRUE(std::isinf(std::get<nn::MambaLMConfig>(lm.config).dt_limit_max));
}

// Older spellings the configuration classes still read: Bamba's rotation is half of each head
// without partial_rotary_factor (BambaConfig fixes it); Nemotron-H's mamba_n_groups and
// attention_head_dim.
TEST(Mamba2Pretrained, OlderConfigs) {
  std::string bamba = slurp(fixture("tiny_bamba") + "/config.json");
  bamba = replaced(bamba, "\"partial_rotary_factor\": 0.5,\n  \"rms_norm_eps\"", "\"rms_norm_eps\"");
  bamba = replaced(bamba, "\"partial_rotary_factor\": 0.5,", "");
  {
    const Mamba2Folder dir(bamba, "tiny_bamba");
    EXPECT_EQ(std::get<nn::LlamaConfig>(pretrained::load(dir.path.string()).config).rotary_dim, 4);
  }
  std::string nemotron = slurp(fixture("tiny_nemotron_h") + "/config.json");
  nemotron = replaced(nemotron, "\"n_groups\": 2", "\"mamba_n_groups\": 2");
  nemotron = replaced(nemotron, "\"head_dim\": 8", "\"attention_head_dim\": 8");
  const Mamba2Folder dir(nemotron, "tiny_nemotron_h");
  const pretrained::Model lm = pretrained::load(dir.path.string());
  const auto& c = std::get<nn::LlamaConfig>(lm.config);
  EXPECT_EQ(c.mamba.groups, 2);
  EXPECT_EQ(c.head_dim, 8);
}

TEST(Mamba2Pretrained, Errors) {
  const std::string config = slurp(fixture("tiny_mamba2") + "/config.json");
  const auto error = [](const std::string& text, const std::string& from = "tiny_mamba2") {
    const Mamba2Folder dir(text, from);
    return tg::testing::message_of<CheckpointError>([&] { pretrained::load(dir.path.string()); });
  };
  const auto has = [](const std::string& text, const std::string& part) {
    EXPECT_NE(text.find(part), std::string::npos) << text;
  };
  has(error(replaced(config, "\"head_dim\": 16", "\"head_dim\": 8")),
      "num_heads · head_dim = 32 is not expand · hidden_size = 64");
  has(error(replaced(config, "\"n_groups\": 2", "\"n_groups\": 3")), "4 heads do not split into 3 groups");
  has(error(replaced(config, "\"time_step_limit\": [", "\"time_step_limit\": [0.0, ")),
      "time_step_limit is [0.0,0.0,{\"__float__\":\"Infinity\"}], expected [min, max]");
  has(error(replaced(config, "\"time_step_limit\": [\n    0.0", "\"time_step_limit\": [\n    \"0\"")),
      "time_step_limit[0] is \"0\", expected a number");
  has(error(replaced(config, "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"")), "hidden_act \"gelu\"");
  // Said to be tied, but the file's head is not the embedding.
  has(error(replaced(config, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true")),
      "lm_head.weight differs from backbone.embeddings.weight");

  const std::string granite = slurp(fixture("tiny_granite_hybrid") + "/config.json");
  const auto hybrid_error = [&](const std::string& text) { return error(text, "tiny_granite_hybrid"); };
  has(hybrid_error(replaced(granite, "\"num_local_experts\": 0", "\"num_local_experts\": -1")),
      "num_local_experts -1 is negative");
  has(error(replaced(slurp(fixture("tiny_granite_hybrid_moe") + "/config.json"), "\"num_experts_per_tok\": 2",
                     "\"num_experts_per_tok\": 5"),
            "tiny_granite_hybrid_moe"),
      "num_experts_per_tok 5 is more than the 4 experts");
  has(hybrid_error(replaced(granite, "\"full_attention\"", "\"sliding_attention\"")),
      "expected 3 of \"mamba\" and \"attention\"");
  has(hybrid_error(replaced(granite, "\"position_embedding_type\": \"nope\"",
                            "\"position_embedding_type\": \"alibi\"")),
      "position_embedding_type \"alibi\" (implemented: rope, nope)");
  has(hybrid_error(replaced(granite, "\"mamba_d_head\": 16", "\"mamba_d_head\": 8")),
      "mamba_n_heads · mamba_d_head = 32 is not mamba_expand · hidden_size = 64");
  // transformers 4's names of the layer types, in an order the file's layers do not have.
  const std::string swapped = replaced(
      replaced(replaced(granite, "\"full_attention\"", "\"mamba\""), "\"linear_attention\"", "\"attention\""),
      "\"linear_attention\"", "\"attention\"");
  has(hybrid_error(swapped), "no tensor 'model.layers.0.self_attn.q_proj.weight'");

  const std::string nemotron = slurp(fixture("tiny_nemotron_h") + "/config.json");
  has(error(replaced(nemotron, "\"mlp\",\n    \"linear_attention\"", "\"moe\",\n    \"linear_attention\""),
            "tiny_nemotron_h"),
      "layer 2 is \"moe\" (implemented: linear_attention, full_attention, mlp; not the mixtures of experts)");
  // transformers 4's hybrid_override_pattern in place of the list reads the same layers.
  {
    std::string pattern = nemotron;
    const size_t from = pattern.find("\"layers_block_type\"");
    const size_t to = pattern.find("]", from) + 1;
    pattern.replace(from, to - from, "\"hybrid_override_pattern\": \"M*-M-\"");
    const Mamba2Folder dir(pattern, "tiny_nemotron_h");
    EXPECT_EQ(std::get<nn::LlamaConfig>(pretrained::load(dir.path.string()).config).blocks,
              std::get<nn::LlamaConfig>(pretrained::load(fixture("tiny_nemotron_h")).config).blocks);
  }
}

}  // namespace
