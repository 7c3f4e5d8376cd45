// GPTQ and AWQ checkpoints (src/io/pretrained_gptq.cc): tiny Qwen2 folders whose decoder Linears
// are packed as those formats pack them (tests/io/gen_quantized_fixtures.py, run on the GPU
// machine with transformers 5.17; tiny_qwen2_gptq: 4 bits asymmetric in groups of 16, zero
// points 0 and 15 among them, AutoGPTQ's zeros stored minus one; tiny_qwen2_awq: AutoAWQ's gemm
// layout; tiny_qwen2_gptq8: 8 bits, desc_act's scattered groups). The Family tests of
// pretrained_family_test.cc check their logits, greedy ids and cached decoding against
// transformers'; here: 4-bit files load as 4-bit parameters exactly, the v2 zero points, save, and
// the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "folder_util.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;
namespace fs = std::filesystem;
using tg_test::data_dir;

const char* const kDecoderLinears[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                       "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                       "mlp.down_proj"};

// Our name of layer l's Linear `which` (nn::Llama's parameters are Hugging Face's without "model.").
std::vector<std::string> linear_weights() {
  std::vector<std::string> out;
  for (int l = 0; l < 2; ++l)
    for (const char* which : kDecoderLinears)
      out.push_back("layers." + std::to_string(l) + "." + which + ".weight");
  return out;
}

std::string param_name(const pretrained::Model& m, const std::string& suffix) {
  for (const auto& [name, t] : m.weights)
    if (name.ends_with(suffix)) return name;
  ADD_FAILURE() << "no parameter ending in " << suffix;
  return suffix;
}

// The values a quantized model computes with (its i8 weights dequantized, the bf16 ones widened).
std::map<std::string, HostTensor> computed_weights(const pretrained::Model& q) {
  std::map<std::string, HostTensor> out;
  for (const Param* p : q.module->parameters()) {
    if (p->scales() != nullptr) continue;
    const HostTensor& t = q.weights.at(p->path());
    out[p->path()] =
        p->dtype() == DType::kI8 ? dequantize_param(p->path(), p->bits(), t, q.weights) : t.to(DType::kF32);
  }
  return out;
}

// The relative difference of `lm`'s logits (as loaded) on the fixture's ids from those of the
// f32 model `f32` given the weights `w`.
double logits_rel_diff(const pretrained::Model& lm, const pretrained::Model& f32,
                       const std::map<std::string, HostTensor>& w, const std::string& folder) {
  const HostTensor ids = read_safetensors(data_dir(folder) + "/logits.safetensors").at("ids");
  auto run = [&](const pretrained::Model& m, const std::map<std::string, HostTensor>* weights) {
    Program p = compile_forward(*m.module, [&m](Tensor x) { return m.logits(x); },
                                {.inputs = {{"ids", ids.shape(), DType::kI32}}, .device = Device::cpu()});
    if (weights)
      p.upload_params(*weights);
    else
      m.upload(p);
    return p.run({{"ids", ids.i32()}}).f32();
  };
  return tg::testing::rel_diff(run(lm, nullptr), run(f32, &w));
}

// A copy of tests/data/<folder> with its tensors and config.json's text changed by `edit`.
fs::path edited_folder(const std::string& folder, const std::string& name,
                       const std::function<void(std::map<std::string, HostTensor>&, std::string&)>& edit) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::map<std::string, HostTensor> tensors = read_safetensors(data_dir(folder) + "/model.safetensors");
  std::string config = tg_test::file_bytes(data_dir(folder) + "/config.json");
  edit(tensors, config);
  save_safetensors((dir / "model.safetensors").string(), tensors);
  std::ofstream(dir / "config.json") << config;
  return dir;
}

// A copy of tests/data/<folder> with config.json's text changed by `edit` and the first `from` of
// model.safetensors' bytes (its header) replaced by `to`, of the same length (none when empty).
fs::path raw_edited_folder(const std::string& folder, const std::string& name,
                           const std::function<void(std::string&)>& edit, const std::string& from = "",
                           const std::string& to = "") {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string bytes = tg_test::file_bytes(data_dir(folder) + "/model.safetensors");
  std::string config = tg_test::file_bytes(data_dir(folder) + "/config.json");
  EXPECT_EQ(from.size(), to.size());
  if (!from.empty()) {
    const size_t at = bytes.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) bytes.replace(at, from.size(), to);
  }
  edit(config);
  std::ofstream(dir / "model.safetensors", std::ios::binary) << bytes;
  std::ofstream(dir / "config.json") << config;
  return dir;
}

void replace(std::string& text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
}

// Loaded as 4-bit parameters in the files' groups (16), the Linears hold the files' codes: their
// dequantized values equal the f32 load's bit for bit, and the logits are transformers'.
TEST(Gptq, FourBitFilesLoadAsFourBitParametersExactly) {
  for (const char* folder : {"tiny_qwen2_gptq", "tiny_qwen2_awq"}) {
    const pretrained::Model f32 = pretrained::load(data_dir(folder));
    const pretrained::Model q4 = pretrained::load(data_dir(folder), {.dtype = DType::kI8, .bits = 4});
    EXPECT_EQ(q4.group, 16);  // group 0, the default: the file's
    for (const std::string& w : linear_weights()) {
      const std::string name = param_name(q4, w);
      ASSERT_TRUE(q4.weights.count(name + "_offset")) << folder << " " << name << " is not held in 4 bits";
      const HostTensor values = dequantize_param(name, 4, q4.weights.at(name), q4.weights);
      const std::span<const float> a = values.f32(), b = f32.weights.at(name).f32();
      ASSERT_EQ(a.size(), b.size());
      EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << folder << " " << name;
    }
    // Under kI8 the embeddings are held in bf16 and the head, a Linear of the library's that the
    // file holds unquantized, is quantized from its values: the program computes what the f32
    // model computes with those weights.
    EXPECT_LT(logits_rel_diff(q4, f32, computed_weights(q4), folder), 1e-5) << folder;
    // Other groups take the values and quantize them again (as for a GGUF file's blocks).
    const pretrained::Model g32 =
        pretrained::load(data_dir(folder), {.dtype = DType::kI8, .group = 32, .bits = 4});
    EXPECT_TRUE(g32.weights.count(param_name(g32, "layers.0.self_attn.q_proj.weight") + "_offset"));
  }
}

// An 8-bit file keeps 8 bits under .bits = 4 (as a GGUF file's Q8_0 matrices do); its values in
// desc_act's scattered groups are quantized again into contiguous ones.
TEST(Gptq, EightBitFilesStayEightBit) {
  const pretrained::Model q =
      pretrained::load(data_dir("tiny_qwen2_gptq8"), {.dtype = DType::kI8, .group = 16, .bits = 4});
  for (const std::string& w : linear_weights()) {
    const std::string name = param_name(q, w);
    EXPECT_TRUE(q.weights.count(name + "_scale")) << name;
    EXPECT_FALSE(q.weights.count(name + "_offset")) << name << " went to 4 bits";
  }
  // Each value is quantized again within half its group's new step.
  const pretrained::Model f32 = pretrained::load(data_dir("tiny_qwen2_gptq8"));
  const std::map<std::string, HostTensor> eff = computed_weights(q);
  for (const std::string& w : linear_weights()) {
    const std::string name = param_name(q, w);
    const std::span<const float> a = eff.at(name).f32(), b = f32.weights.at(name).f32(),
                                 scale = q.weights.at(name + "_scale").f32();
    const size_t in = static_cast<size_t>(f32.weights.at(name).shape()[1]);
    for (size_t e = 0; e < a.size(); ++e)
      ASSERT_LE(std::fabs(a[e] - b[e]), 0.5f * scale[e / in * (in / 16) + e % in / 16] * (1 + 1e-4f))
          << name << " element " << e;
  }
  EXPECT_LT(logits_rel_diff(q, f32, eff, "tiny_qwen2_gptq8"), 1e-5);
}

// "checkpoint_format": "gptq_v2" stores the zero points themselves: the v1 file with each zero
// point's field raised by one (wrapped to 4 bits) loads to the same weights.
TEST(Gptq, V2ZeroPointsAreTheZeroPoints) {
  const fs::path v2 = edited_folder("tiny_qwen2_gptq", "gptq_v2", [](auto& tensors, std::string& config) {
    for (auto& [name, t] : tensors) {
      if (!name.ends_with(".qzeros")) continue;
      for (int32_t& word : t.i32()) {
        uint32_t out = 0;
        for (int k = 0; k < 8; ++k) out |= (((static_cast<uint32_t>(word) >> (4 * k)) + 1u) & 15u) << (4 * k);
        word = static_cast<int32_t>(out);
      }
    }
    replace(config, "\"checkpoint_format\": \"gptq\"", "\"checkpoint_format\": \"gptq_v2\"");
  });
  EXPECT_TRUE(
      tg_test::same_weights(pretrained::load(v2.string()), pretrained::load(data_dir("tiny_qwen2_gptq"))));
}

// group_size -1: one group a row. The file with each Linear's first group (scales, zero points)
// standing for the whole row: its first 16 inputs keep their values, the others change.
TEST(Gptq, OneGroupARow) {
  const fs::path row = edited_folder("tiny_qwen2_gptq", "gptq_row", [](auto& tensors, std::string& config) {
    std::vector<std::string> gone;
    for (auto& [name, t] : tensors) {
      if (name.ends_with(".g_idx")) gone.push_back(name);
      if (!name.ends_with(".qzeros") && !name.ends_with(".scales")) continue;
      HostTensor first(t.dtype(), {1, t.shape()[1]});
      std::memcpy(first.data(), t.data(),
                  static_cast<size_t>(t.shape()[1]) * (name.ends_with(".scales") ? 2 : 4));
      t = std::move(first);
    }
    for (const std::string& name : gone) tensors.erase(name);
    replace(config, "\"group_size\": 16", "\"group_size\": -1");
  });
  const pretrained::Model a = pretrained::load(row.string()),
                          b = pretrained::load(data_dir("tiny_qwen2_gptq"));
  for (const std::string& w : linear_weights()) {
    const std::string name = param_name(a, w);
    const std::span<const float> x = a.weights.at(name).f32(), y = b.weights.at(name).f32();
    const size_t in = static_cast<size_t>(a.weights.at(name).shape()[1]);
    size_t changed = 0;
    for (size_t e = 0; e < x.size(); ++e) {
      if (e % in < 16) {
        ASSERT_EQ(x[e], y[e]) << name << " element " << e;
      }
      changed += x[e] != y[e];
    }
    EXPECT_GT(changed, 0u) << name;
  }
}

// save() writes the values as f32 ".weight" tensors and drops quantization_config: the folder
// loads again to the same weights.
TEST(Gptq, SavesTheDequantizedModel) {
  const pretrained::Model lm = pretrained::load(data_dir("tiny_qwen2_awq"));
  const fs::path out = fs::path(::testing::TempDir()) / "awq_saved";
  fs::remove_all(out);
  pretrained::save(lm, lm.weights, out.string());
  EXPECT_EQ(tg_test::file_bytes(out / "config.json").find("quantization_config"), std::string::npos);
  const std::map<std::string, HostTensor> file = read_safetensors((out / "model.safetensors").string());
  EXPECT_TRUE(file.count("model.layers.1.mlp.down_proj.weight"));
  EXPECT_FALSE(file.count("model.layers.1.mlp.down_proj.qweight"));
  EXPECT_TRUE(tg_test::same_weights(pretrained::load(out.string()), lm));
}

void expect_has(const std::string& message, const std::string& part) {
  EXPECT_NE(message.find(part), std::string::npos) << "message: " << message << "\nexpected in it: " << part;
}

std::string load_error(const fs::path& dir) {
  return tg::testing::message_of<CheckpointError>([&] { pretrained::load(dir.string()); });
}

TEST(Gptq, BadFilesAreClearErrors) {
  auto config_edit = [](const std::string& folder, const std::string& name, const std::string& from,
                        const std::string& to) {
    return load_error(edited_folder(folder, name, [&](auto&, std::string& c) { replace(c, from, to); }));
  };
  auto tensor_edit = [](const std::string& folder, const std::string& name,
                        const std::function<void(std::map<std::string, HostTensor>&)>& edit) {
    return load_error(edited_folder(folder, name, [&](auto& t, std::string&) { edit(t); }));
  };
  expect_has(config_edit("tiny_qwen2_gptq", "bnb", "\"quant_method\": \"gptq\"",
                         "\"quant_method\": \"bitsandbytes\""),
             "quant_method \"bitsandbytes\" is not read; tensorgrad reads GPTQ, AWQ and FP8");
  expect_has(config_edit("tiny_qwen2_gptq", "bits3", "\"bits\": 4", "\"bits\": 3"),
             "gptq with 3 bits is not read (4 and 8 bits are)");
  expect_has(config_edit("tiny_qwen2_gptq", "marlin", "\"checkpoint_format\": \"gptq\"",
                         "\"checkpoint_format\": \"marlin\""),
             "GPTQ checkpoint_format \"marlin\" is not read");
  expect_has(config_edit("tiny_qwen2_awq", "gemv", "\"version\": \"gemm\"", "\"version\": \"gemv\""),
             "AWQ version \"gemv\" (backend \"autoawq\") is not read");
  expect_has(config_edit("tiny_qwen2_awq", "group0", "\"group_size\": 16", "\"group_size\": 0"),
             "group_size is 0");
  expect_has(config_edit("tiny_qwen2_gptq", "group12", "\"group_size\": 16", "\"group_size\": 12"),
             "tensor 'model.layers.0.mlp.down_proj.qzeros' is I32 [3, 4], expected I32 [4, 4] (gptq, 4 bits, "
             "groups of 12)");
  expect_has(
      config_edit("tiny_qwen2_gptq", "noconfig", "\"quantization_config\"", "\"no_quantization\""),
      ".qweight' is a packed quantized weight, but config.json has no GPTQ or AWQ quantization_config");
  expect_has(tensor_edit("tiny_qwen2_gptq", "nozeros",
                         [](auto& t) { t.erase("model.layers.1.self_attn.k_proj.qzeros"); }),
             "tensor 'model.layers.1.self_attn.k_proj.qweight' has no "
             "'model.layers.1.self_attn.k_proj.qzeros' beside it");
  expect_has(tensor_edit("tiny_qwen2_awq", "scales",
                         [](auto& t) {
                           t["model.layers.0.mlp.up_proj.scales"] = HostTensor(DType::kF32, {2, 40});
                         }),
             "tensor 'model.layers.0.mlp.up_proj.scales' is F32 [2, 40], expected F16, BF16 or F32 "
             "[2, 48] (awq, 4 bits, groups of 16)");
  expect_has(tensor_edit("tiny_qwen2_gptq8", "gidx",
                         [](auto& t) { t["model.layers.0.mlp.down_proj.g_idx"].i32()[5] = 3; }),
             "'model.layers.0.mlp.down_proj.g_idx' puts input 5 in group 3 of 3");
  expect_has(tensor_edit("tiny_qwen2_gptq", "both",
                         [](auto& t) {
                           t["model.layers.0.mlp.up_proj.weight"] = HostTensor(DType::kF32, {48, 32});
                         }),
             "'model.layers.0.mlp.up_proj.weight' is there beside 'model.layers.0.mlp.up_proj.qweight'");
}

// FP8 (pretrained_fp8.cc; tiny_qwen2_fp8: transformers' blocks of 20 × 24 with partial ones at
// the ends; tiny_qwen2_fp8_channel: compressed-tensors, a bf16 scale a row and a static
// input_scale left aside). Their logits are checked in pretrained_family_test.cc; here: held in
// 8 bits under kI8 whatever .bits says, and the errors.
TEST(Fp8, FilesHoldTheirValuesAndStayEightBitUnderInt4) {
  for (const char* folder : {"tiny_qwen2_fp8", "tiny_qwen2_fp8_channel"}) {
    const pretrained::Model q =
        pretrained::load(data_dir(folder), {.dtype = DType::kI8, .group = 16, .bits = 4});
    for (const std::string& w : linear_weights()) {
      const std::string name = param_name(q, w);
      EXPECT_TRUE(q.weights.count(name + "_scale")) << folder << " " << name;
      EXPECT_FALSE(q.weights.count(name + "_offset")) << folder << " " << name << " went to 4 bits";
    }
  }
}

TEST(Fp8, BadFilesAreClearErrors) {
  auto config = [](const std::string& folder, const std::string& name, const std::string& from,
                   const std::string& to) {
    return load_error(raw_edited_folder(folder, name, [&](std::string& c) { replace(c, from, to); }));
  };
  expect_has(config("tiny_qwen2_fp8", "e5m2", "\"fmt\": \"e4m3\"", "\"fmt\": \"e5m2\""),
             "FP8 fmt \"e5m2\" is not read (e4m3 is)");
  expect_has(
      config("tiny_qwen2_fp8", "block", "\"weight_block_size\": [\n      20,\n      24\n    ]",
             "\"weight_block_size\": [20, 8]"),
      "tensor 'model.layers.0.mlp.down_proj.weight_scale_inv' has shape [2, 2], expected [2, 6] (a scale "
      "per 20 × 8 block of model.layers.0.mlp.down_proj.weight [32, 48])");
  expect_has(config("tiny_qwen2_fp8", "nofp8", "\"quantization_config\"", "\"no_quantization\""),
             "holds F8_E4M3 values, but config.json has no FP8 quantization_config");
  expect_has(config("tiny_qwen2_fp8_channel", "int4", "\"num_bits\": 8,\n          \"strategy\": \"channel\"",
                    "\"num_bits\": 4,\n          \"strategy\": \"channel\""),
             "quantizes weights to 4-bit float values; 8-bit floats (FP8) are read");
  expect_has(config("tiny_qwen2_fp8_channel", "packed", "\"float-quantized\"", "\"pack-quantized\""),
             "compressed-tensors format \"pack-quantized\" is not read");
  expect_has(config("tiny_qwen2_fp8_channel", "kv", "\"kv_cache_scheme\": null", "\"kv_cache_scheme\": {}"),
             "kv_cache_scheme {} is not read (an FP8 KV cache)");
  const std::string scale = "model.layers.1.self_attn.o_proj.weight_scale_inv";
  expect_has(
      load_error(raw_edited_folder(
          "tiny_qwen2_fp8", "noscale", [](std::string&) {}, scale, scale.substr(0, scale.size() - 1) + "X")),
      "FP8 tensor 'model.layers.1.self_attn.o_proj.weight' has no '" + scale + "' beside it");
  expect_has(load_error(raw_edited_folder(
                 "tiny_qwen2_fp8", "e5m2_tensor", [](std::string&) {}, "\"F8_E4M3\"", "\"F8_E5M2\"")),
             "has dtype F8_E5M2, which is not read (F32, BF16, F16, I32, I8 and BOOL are; F8_E4M3 for an FP8 "
             "checkpoint's weights, U8 for MXFP4 parts)");
}

}  // namespace
