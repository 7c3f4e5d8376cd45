// GGUF files (llama.cpp's format): models, their tokenizers and chat templates, every block type
// read, and the errors. Fixtures: tests/data/gguf, written from the tests' Hugging Face folders by
// tests/io/gen_gguf_fixtures.py (a GGUF writer and numpy dequantizers of its own).
#include "io/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "../text/golden_ids.h"
#include "text/tokenizer_impl.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;
namespace fs = std::filesystem;

const std::string kData = TG_TEST_DATA_DIR;
const std::string kGguf = kData + "/gguf";

std::vector<float> logits_of(const pretrained::Model& lm, const HostTensor& ids, Device device) {
  Program p = compile_forward(*lm.module, [&lm](Tensor x) { return lm.logits(x); },
                              {.inputs = {{"ids", ids.shape(), DType::kI32}}, .device = device});
  lm.upload(p);
  return p.run({{"ids", ids.i32()}}).f32();
}

// The largest |a − b| over the largest |b|.
double max_rel(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, top = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
    top = std::max(top, static_cast<double>(std::abs(b[i])));
  }
  return top > 0 ? diff / top : diff;
}

class GgufDevices : public ::testing::TestWithParam<Device> {};

// Each GGUF, converted as llama.cpp converts (q/k rows reordered for "llama", Llama 3.1's RoPE as
// rope_freqs.weight, Qwen3's yarn and head size as metadata), gives the logits transformers
// computed for its folder.
TEST_P(GgufDevices, ModelsGiveTransformersLogits) {
  for (const char* name : {"tiny_llama", "tiny_llama3", "tiny_qwen2", "tiny_qwen3", "tiny_mixtral",
                           "tiny_qwen2_moe", "tiny_qwen3_moe", "tiny_phi3", "tiny_phi3_longrope",
                           "tiny_gemma", "tiny_gemma2", "tiny_gemma3", "tiny_gpt2"}) {
    // Gemma 2 and 3: folders with the settings llama.cpp derives for a GGUF file.
    const std::string source = std::string(name) == "tiny_gemma2"   ? kGguf + "/src_gemma2"
                               : std::string(name) == "tiny_gemma3" ? kGguf + "/src_gemma3"
                                                                    : kData + "/" + name;
    const pretrained::Model lm = pretrained::load(kGguf + "/" + name + ".gguf");
    const pretrained::Model folder = pretrained::load(source);
    EXPECT_EQ(lm.architecture, folder.architecture) << name;
    EXPECT_EQ(lm.context, folder.context) << name;
    std::vector<int32_t> eos = folder.eos_ids;
    if (std::string(name) == "tiny_qwen2") eos.push_back(3);  // its tokenizer.ggml.eot_token_id
    EXPECT_EQ(lm.eos_ids, eos) << name;
    const auto golden = read_safetensors(source + "/logits.safetensors");
    const double d =
        tg::testing::rel_diff(logits_of(lm, golden.at("ids"), GetParam()), golden.at("logits").f32());
    EXPECT_LT(d, 1e-4) << name;
    std::printf("  %s on %s: relative logit difference to transformers %.2e\n", name,
                GetParam().str().c_str(), d);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, GgufDevices, ::testing::ValuesIn(tg::testing::all_devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

// Every block type read gives the values numpy's dequantizer gives for the same random blocks
// (to a rounding: ggml's d·s·q − m may be fused into one multiply-add).
TEST(Gguf, BlockTypesDequantizeAsNumpy) {
  const io::GgufFile g = io::read_gguf(kGguf + "/blocks.gguf");
  const auto expected = read_safetensors(kGguf + "/blocks_expected.safetensors");
  ASSERT_EQ(g.tensors.size(), 10u);
  std::ifstream in(g.path, std::ios::binary);
  for (const io::GgufTensor& t : g.tensors) {
    const HostTensor v = io::read_gguf_tensor(g, t, in);
    EXPECT_EQ(v.shape(), (Shape{2, 512})) << t.name;
    EXPECT_LT(max_rel(v.f32(), expected.at(t.name).f32()), 1e-6)
        << t.name << " (" << io::ggml_type_name(t.type) << ")";
  }
}

// A model whose matrices are Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, F16 and BF16 loads as their values,
// by transformers' names and layouts; its logits stay near the f32 model's.
// So does a mixture whose stacked experts are Q8_0, Q4_1 and F16, each expert's slice read
// alone.
TEST(Gguf, QuantizedModelLoadsItsDequantizedValues) {
  for (const char* name : {"tiny_qwen2_moe_quant", "tiny_llama_quant"}) {
    const pretrained::Model m = pretrained::load(kGguf + "/" + name + ".gguf");
    const auto expected = read_safetensors(kGguf + "/" + name + "_expected.safetensors");
    ASSERT_EQ(m.weights.size(), expected.size()) << name;
    for (const auto& [weight, want] : expected) {
      ASSERT_TRUE(m.weights.count(weight)) << weight;
      EXPECT_LT(max_rel(m.weights.at(weight).to(DType::kF32).f32(), want.f32()), 1e-6) << weight;
    }
  }
  const pretrained::Model lm = pretrained::load(kGguf + "/tiny_llama_quant.gguf");
  const auto golden = read_safetensors(kData + "/tiny_llama/logits.safetensors");
  const double d =
      tg::testing::rel_diff(logits_of(lm, golden.at("ids"), Device::cpu()), golden.at("logits").f32());
  EXPECT_LT(d, 0.2);
  EXPECT_GT(d, 1e-4);  // the quantization did change the model
  std::printf("  quantized tiny_llama: relative logit difference to the f32 model %.3f\n", d);
}

// Under LoadOptions{kI8, group 32} a Q8_0 matrix keeps its integers and scales: ggml's quantizer
// maps each block's largest magnitude to ±127, and quantize_int8 finds the same scale again.
TEST(Gguf, Q8_0MatricesLoadAsInt8Exactly) {
  const pretrained::Model f32 = pretrained::load(kGguf + "/tiny_llama_quant.gguf");
  const pretrained::Model i8 =
      pretrained::load(kGguf + "/tiny_llama_quant.gguf", {.dtype = DType::kI8, .group = 32});
  for (const char* name :
       {"model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.up_proj.weight", "lm_head.weight"}) {
    const HostTensor& q = i8.weights.at(name);
    ASSERT_EQ(q.dtype(), DType::kI8) << name;
    const HostTensor back = dequantize_int8(q, i8.weights.at(std::string(name) + "_scale"));
    const std::span<const float> a = back.f32(), b = f32.weights.at(name).f32();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << name << " [" << i << "]";
  }
}

// Q4_0, Q4_1 and Q4_K blocks are 4-bit codes with a scale and an offset per 32 values exactly:
// their dequantization is ggml's, to the bit. Under LoadOptions{kI8, group 32, 4 bits} such a
// matrix is taken as it is (Llama's k rows reordered too); a matrix the file holds in more bits
// (Q5_0, Q5_1, Q8_0) keeps 8 (Q8_0's integers exactly); and the model computes what its f32 load
// computes with the values it holds.
TEST(Gguf, FourBitBlocksLoadAsInt4Exactly) {
  const io::GgufFile g = io::read_gguf(kGguf + "/blocks.gguf");
  std::ifstream in(g.path, std::ios::binary);
  int four = 0;
  for (const io::GgufTensor& t : g.tensors) {
    if (!io::ggml_is_int4(t.type)) {
      EXPECT_THROW(io::read_gguf_tensor_int4(g, t, in), CheckpointError) << t.name;
      continue;
    }
    ++four;
    const Quantized4Tensor q = io::read_gguf_tensor_int4(g, t, in);
    const HostTensor want = io::read_gguf_tensor(g, t, in), got = dequantize_int4(q.q, q.scale, q.offset);
    ASSERT_EQ(got.shape(), want.shape()) << t.name;
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_EQ(got.f32()[size_t(i)], want.f32()[size_t(i)]) << t.name << " [" << i << "]";
  }
  EXPECT_EQ(four, 3);
  const pretrained::Model f32 = pretrained::load(kGguf + "/tiny_llama_quant.gguf");
  const pretrained::Model q4 =
      pretrained::load(kGguf + "/tiny_llama_quant.gguf", {.dtype = DType::kI8, .group = 32, .bits = 4});
  // attn_k is Q4_0 (rows reordered), attn_v Q4_1, attn_q and ffn_up Q8_0 in the file.
  std::map<std::string, int> bits;
  for (const Param* p : q4.module->parameters()) bits[p->path()] = p->bits();
  EXPECT_EQ(bits.at("model.layers.0.self_attn.k_proj.weight"), 4);
  EXPECT_EQ(bits.at("model.layers.1.self_attn.v_proj.weight"), 4);
  EXPECT_EQ(bits.at("model.layers.0.self_attn.o_proj.weight"), 8);  // Q5_0
  EXPECT_EQ(bits.at("model.layers.1.mlp.gate_proj.weight"), 8);     // Q5_1
  EXPECT_EQ(bits.at("lm_head.weight"), 8);                          // Q8_0
  for (const char* name : {"model.layers.0.self_attn.k_proj.weight", "model.layers.1.self_attn.v_proj.weight",
                           "model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.up_proj.weight"}) {
    const HostTensor back = dequantize_param(name, bits.at(name), q4.weights.at(name), q4.weights);
    const std::span<const float> a = back.f32(), b = f32.weights.at(name).f32();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << name << " [" << i << "]";
  }
  // The 4-bit model against the f32 model given the values it holds.
  std::map<std::string, HostTensor> held;
  for (const Param* p : q4.module->parameters())
    if (p->scales() == nullptr)
      held[p->path()] = p->bits() != 0
                            ? dequantize_param(p->path(), p->bits(), q4.weights.at(p->path()), q4.weights)
                            : q4.weights.at(p->path()).to(DType::kF32);
  pretrained::Model same = pretrained::load(kGguf + "/tiny_llama_quant.gguf");
  same.weights = held;
  const auto golden = read_safetensors(kData + "/tiny_llama/logits.safetensors");
  const std::vector<float> got = logits_of(q4, golden.at("ids"), Device::cpu());
  EXPECT_LT(tg::testing::rel_diff(got, logits_of(same, golden.at("ids"), Device::cpu())), 1e-5);
  const double d = tg::testing::rel_diff(got, golden.at("logits").f32());
  EXPECT_LT(d, 0.3);
  std::printf("  tiny_llama_quant in 4 bits: relative logit difference to the f32 model %.3f\n", d);
}

// Each tokenizer as GGUF metadata encodes the golden texts as `tokenizers` does with the
// tokenizer.json it came from, and decodes them back the same way.
TEST(Gguf, TokenizersEncodeAsTheirTokenizerJson) {
  for (const char* name : {"gpt2", "llama3", "qwen2", "llama2"}) {
    const Tokenizer tok = Tokenizer::load(kGguf + "/tok_" + name + ".gguf");
    const Tokenizer json = Tokenizer::load(kData + "/tokenizer/" + name);
    EXPECT_EQ(tok.vocab_size(), json.vocab_size()) << name;
    const auto cases = tg_test::read_golden(kData + "/tokenizer/" + name + "/golden.txt");
    ASSERT_GT(cases.size(), 10u) << name;
    for (const tg_test::GoldenCase& c : cases) {
      const std::vector<int32_t> ids = tok.encode(c.text, c.add_special);
      EXPECT_EQ(ids, c.ids) << name << ": \"" << c.text << "\" add_special " << c.add_special;
      if (c.decoded) {
        EXPECT_EQ(tok.decode(ids), *c.decoded) << name << ": \"" << c.text << "\"";
      }
    }
  }
  // The model file's tokenizer (tiny_llama's stand-in byte-level BPE) and chat template.
  const std::string model = kGguf + "/tiny_llama.gguf";
  const Tokenizer tok = Tokenizer::load(model), json = Tokenizer::load(kData + "/tiny_llama");
  for (const char* text : {"the cat sat, didn't it?", "hello world 42."})
    EXPECT_EQ(tok.encode(text, true), json.encode(text, true)) << text;
  const std::vector<ChatMessage> chat = {{"system", "be brief"}, {"user", "what is it"}};
  EXPECT_EQ(ChatTemplate::load(model).render(chat), ChatTemplate::load(kData + "/tiny_llama").render(chat));
}

// Saved as a Hugging Face folder, a GGUF model gives transformers' logits again, with a
// tokenizer.json and the chat template written from its metadata.
TEST(Gguf, SavesAsAHuggingFaceFolder) {
  const fs::path dir = fs::temp_directory_path() / ("tg_gguf_save_" + std::to_string(getpid()));
  fs::remove_all(dir);
  for (const char* name : {"tiny_llama3", "tiny_qwen3"}) {  // Llama 3.1's divisors, Qwen3's yarn
    const pretrained::Model m = pretrained::load(kGguf + "/" + name + ".gguf");
    pretrained::save(m, m.weights, dir.string());
    const auto want = read_safetensors(kData + "/" + name + "/logits.safetensors");
    const pretrained::Model saved = pretrained::load(dir.string());
    EXPECT_LT(tg::testing::rel_diff(logits_of(saved, want.at("ids"), Device::cpu()), want.at("logits").f32()),
              1e-4)
        << name;
  }
  const pretrained::Model lm = pretrained::load(kGguf + "/tiny_llama.gguf");
  pretrained::save(lm, lm.weights, dir.string());
  const pretrained::Model back = pretrained::load(dir.string());
  const auto golden = read_safetensors(kData + "/tiny_llama/logits.safetensors");
  EXPECT_LT(
      tg::testing::rel_diff(logits_of(back, golden.at("ids"), Device::cpu()), golden.at("logits").f32()),
      1e-4);
  EXPECT_EQ(Tokenizer::load(dir.string()).encode("the cat", true),
            Tokenizer::load(kData + "/tiny_llama").encode("the cat", true));
  EXPECT_NO_THROW(ChatTemplate::load(dir.string()));
  fs::remove_all(dir);
}

// A small GGUF writer for the error cases.
struct Writer {
  std::string bytes = "GGUF";
  template <typename T>
  Writer& put(T v) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Writer& str(const std::string& s) {
    put<uint64_t>(s.size());
    bytes += s;
    return *this;
  }
  // Header, one string key-value, `tensors` tensors of `ne` (innermost first) and `type`, all at
  // offset 0 (token_embd.weight, then copies).
  static std::string file(const std::string& arch, uint32_t type, std::vector<uint64_t> ne,
                          uint64_t data_bytes, uint32_t version = 3, int tensors = 1) {
    Writer w;
    w.put<uint32_t>(version).put<uint64_t>(static_cast<uint64_t>(tensors)).put<uint64_t>(1);
    w.str("general.architecture").put<uint32_t>(8).str(arch);
    for (int i = 0; i < tensors; ++i) {
      w.str(i == 0 ? "token_embd.weight" : "copy").put<uint32_t>(static_cast<uint32_t>(ne.size()));
      for (uint64_t e : ne) w.put<uint64_t>(e);
      w.put<uint32_t>(type).put<uint64_t>(0);
    }
    w.bytes.resize((w.bytes.size() + 31) / 32 * 32, '\0');
    w.bytes.append(data_bytes, '\0');
    return w.bytes;
  }
};

std::string write(const std::string& name, const std::string& bytes) {
  const std::string path =
      (fs::temp_directory_path() / ("tg_gguf_" + std::to_string(getpid()) + "_" + name)).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(Gguf, Errors) {
  const auto load_error = [](const std::string& path) {
    const std::string e = tg::testing::message_of<CheckpointError>([&] { pretrained::load(path); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_EQ(e.find("[pretrained::load] [pretrained::load]"), std::string::npos) << e;
    fs::remove(path);
    return e;
  };
  // Truncated anywhere: in the metadata, in the tensor infos, in the data.
  const std::string whole = tg_test::read_file(kGguf + "/tiny_llama.gguf");
  EXPECT_HAS(load_error(write("cut", whole.substr(0, 3))), "neither a folder nor a GGUF file");
  EXPECT_HAS(load_error(write("cut", whole.substr(0, 30))),
             "the tensor count 21 is more than the file can hold");
  for (size_t cut : {size_t{2000}, whole.size() - 100})
    EXPECT_HAS(load_error(write("cut", whole.substr(0, cut))), "truncated");
  EXPECT_HAS(load_error(write("v1", Writer::file("llama", 0, {32, 64}, 8192, 1))), "GGUF version 1");
  EXPECT_HAS(load_error(write("arch", Writer::file("bert", 0, {32, 64}, 8192))),
             "general.architecture is \"bert\"; the GGUF architectures read: llama, qwen2, qwen3, qwen2moe, "
             "qwen3moe, phi3, gemma, gemma2, gemma3, gpt2");
  EXPECT_HAS(load_error(write("iq", Writer::file("llama", 16, {256, 4}, 1024))),
             "is IQ2_XXS, which is not read");
  EXPECT_HAS(load_error(write("blocks", Writer::file("llama", 12, {32, 4}, 1024))),
             "Q4_K with rows of 32 values, not whole blocks of 256");
  EXPECT_HAS(load_error(write("sizes", Writer::file("llama", 0, {32, 64}, 8192))),
             "no llama.embedding_length");
  // A model file without a tokenizer or a chat template.
  const std::string blocks = kGguf + "/blocks.gguf";
  EXPECT_HAS(tg::testing::message_of<TokenizerError>([&] { Tokenizer::load(blocks); }), "holds no tokenizer");
  EXPECT_HAS(tg::testing::message_of<TemplateError>([&] { ChatTemplate::load(kGguf + "/tok_gpt2.gguf"); }),
             "no tokenizer.chat_template");
  EXPECT_HAS(
      tg::testing::message_of<TokenizerError>([&] { Tokenizer::load(kGguf + "/tok_gpt2_no_pre.gguf"); }),
      "tokenizer.ggml.pre \"default\" (read: gpt-2, llama-bpe, llama3, qwen2, deepseek-r1-qwen; a file "
      "without the key has llama.cpp's default split, not GPT-2's)");
  // Two tensors over the same bytes.
  EXPECT_HAS(load_error(write("overlap", Writer::file("llama", 0, {32, 64}, 8192, 3, 2))),
             "tensors 'token_embd.weight' and 'copy' overlap");
}

}  // namespace

namespace {

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("tg_gguf_" + std::to_string(getpid()) + "_" + name)).string();
}

// save_gguf writes what load reads back: transformers' logits again (f32), the tokenizer and the
// chat template; Llama 3.1's rescaling as rope_freqs.weight, Qwen3's yarn as rope.scaling.*.
TEST(GgufSave, RoundTripsThroughLoad) {
  for (const char* name : {"tiny_llama", "tiny_llama3", "tiny_qwen2", "tiny_qwen3"}) {
    const pretrained::Model lm = pretrained::load(kData + "/" + name);
    const std::string path = temp_path(std::string(name) + ".gguf");
    pretrained::save_gguf(lm, lm.weights, path, {.dtype = DType::kF32});
    const pretrained::Model back = pretrained::load(path);
    EXPECT_EQ(back.architecture, lm.architecture);
    EXPECT_EQ(back.eos_ids, lm.eos_ids) << name;
    const auto golden = read_safetensors(kData + "/" + name + "/logits.safetensors");
    EXPECT_LT(
        tg::testing::rel_diff(logits_of(back, golden.at("ids"), Device::cpu()), golden.at("logits").f32()),
        1e-4)
        << name;
    if (std::string(name) == "tiny_llama") {
      for (const char* text : {"the cat sat, didn't it?", "hello world 42."})
        EXPECT_EQ(Tokenizer::load(path).encode(text, true),
                  Tokenizer::load(kData + "/tiny_llama").encode(text, true));
      const std::vector<ChatMessage> chat = {{"system", "be brief"}, {"user", "what is it"}};
      EXPECT_EQ(ChatTemplate::load(path).render(chat),
                ChatTemplate::load(kData + "/tiny_llama").render(chat));
    }
    fs::remove(path);
  }
}

// Q8_0: ggml's quantizer, whose integers and scales a kI8 load keeps; F16 and BF16 round.
TEST(GgufSave, HalfAndQ8_0Matrices) {
  const pretrained::Model lm = pretrained::load(kData + "/tiny_llama");
  const auto golden = read_safetensors(kData + "/tiny_llama/logits.safetensors");
  for (DType dt : {DType::kF16, DType::kBF16, DType::kI8}) {
    const std::string path = temp_path("tiny_llama_half.gguf");
    pretrained::save_gguf(lm, lm.weights, path, {.dtype = dt});
    const pretrained::Model back = pretrained::load(path);
    const double d =
        tg::testing::rel_diff(logits_of(back, golden.at("ids"), Device::cpu()), golden.at("logits").f32());
    EXPECT_LT(d, dt == DType::kF16 ? 2e-3 : 3e-2) << dtype_name(dt);
    EXPECT_GT(d, 1e-6) << dtype_name(dt);  // rounded
    if (dt == DType::kI8) {
      const pretrained::Model i8 = pretrained::load(path, {.dtype = DType::kI8, .group = 32});
      const char* w = "model.layers.1.mlp.up_proj.weight";
      const HostTensor deq = dequantize_int8(i8.weights.at(w), i8.weights.at(std::string(w) + "_scale"));
      EXPECT_EQ(max_rel(deq.f32(), back.weights.at(w).f32()), 0.0);
    }
    fs::remove(path);
  }
}

// Q4_0 (.bits = 4): ggml's rule, each value within its block's d = max|x| / 8 (and d's f16
// rounding) of the written one, rows of 48 values written F16; loaded in 4 bits, exactly its codes.
TEST(GgufSave, Q4_0Matrices) {
  const pretrained::Model lm = pretrained::load(kData + "/tiny_llama");
  const std::string path = temp_path("tiny_llama_q4.gguf");
  pretrained::save_gguf(lm, lm.weights, path, {.dtype = DType::kI8, .bits = 4});
  const io::GgufFile g = io::read_gguf(path);
  int q4 = 0;
  for (const io::GgufTensor& t : g.tensors) {
    if (t.shape.size() != 2) continue;
    EXPECT_EQ(t.type, t.shape[1] % 32 == 0 ? 2u : 1u) << t.name;
    q4 += t.type == 2;
  }
  EXPECT_GT(q4, 8);
  const pretrained::Model back = pretrained::load(path);
  for (const char* name : {"model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.gate_proj.weight"}) {
    const std::span<const float> a = lm.weights.at(name).f32(), b = back.weights.at(name).f32();
    ASSERT_EQ(a.size(), b.size());
    for (size_t block = 0; block < a.size() / 32; ++block) {
      float amax = 0;
      for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::abs(a[block * 32 + j]));
      for (size_t j = 0; j < 32; ++j)
        ASSERT_LE(std::abs(a[block * 32 + j] - b[block * 32 + j]), amax / 8 * 1.01f)
            << name << " [" << block * 32 + j << "]";
    }
  }
  const pretrained::Model four = pretrained::load(path, {.dtype = DType::kI8, .bits = 4});
  const char* w = "model.layers.1.mlp.up_proj.weight";
  EXPECT_EQ(max_rel(dequantize_param(w, 4, four.weights.at(w), four.weights).f32(), back.weights.at(w).f32()),
            0.0);
  const auto golden = read_safetensors(kData + "/tiny_llama/logits.safetensors");
  const double d =
      tg::testing::rel_diff(logits_of(back, golden.at("ids"), Device::cpu()), golden.at("logits").f32());
  EXPECT_LT(d, 0.5);  // Q4_0 of a tiny random model: 31 % (the values' bounds above are the real check)
  EXPECT_GT(d, 1e-3);
  EXPECT_HAS(tg::testing::message_of<CheckpointError>(
                 [&] { pretrained::save_gguf(lm, lm.weights, path, {.dtype = DType::kF16, .bits = 4}); }),
             "GgufOptions::bits is 4");
  fs::remove(path);
}

// Each tokenizer fixture written as GGUF metadata encodes the golden texts as its tokenizer.json.
// A Metaspace tokenizer with prepend_scheme "first" (newer Llama 2 and Mistral files) puts "▁"
// before the text only where it does not start with a space and not after special tokens; GGUF's
// add_space_prefix, as llama.cpp applies it, puts it before every piece of text: the cases where
// the two differ are left out for that file (and counted, so that the rest is a real check).
TEST(GgufSave, TokenizerMetadataEncodesAsTheFile) {
  for (const char* name : {"gpt2", "llama3", "qwen2", "llama2", "metaspace"}) {
    const std::string file = kData + "/tokenizer/" + name + "/tokenizer.json";
    const std::string path = temp_path(std::string("tok_") + name + ".gguf");
    io::write_gguf(path, text::gguf_tokenizer_kvs(nlohmann::json::parse(tg_test::read_file(file)), file), {});
    const Tokenizer tok = Tokenizer::load(path), json = Tokenizer::load(file);
    int compared = 0;
    for (const tg_test::GoldenCase& c : tg_test::read_golden(kData + "/tokenizer/" + name + "/golden.txt")) {
      const bool special_inside = std::any_of(c.ids.begin() + (c.add_special ? 1 : 0), c.ids.end(),
                                              [&](int32_t id) { return json.is_special(id); });
      if (std::string(name) == "metaspace" && (c.text.starts_with(" ") || special_inside)) continue;
      EXPECT_EQ(tok.encode(c.text, c.add_special), c.ids) << name << ": \"" << c.text << "\"";
      ++compared;
    }
    EXPECT_GT(compared, 20) << name;
    fs::remove(path);
  }
}

// The tokens are padded to the model's vocabulary with unused [PADi] tokens (llama.cpp sizes
// the embedding by them); a folder without a tokenizer gets llama.cpp's vocabulary type "none";
// the ids that end generation (eos, end of turn) are kept.
TEST(GgufSave, VocabularyAndEndIds) {
  const std::string file = kData + "/tokenizer/gpt2/tokenizer.json";
  const nlohmann::json root = nlohmann::json::parse(tg_test::read_file(file));
  const auto kvs = text::gguf_tokenizer_kvs(root, file, 600);
  for (const io::GgufKv& kv : kvs) {
    if (kv.key == "tokenizer.ggml.tokens") {
      EXPECT_EQ(kv.value.size(), 600u);
    }
    if (kv.key == "tokenizer.ggml.token_type") {
      EXPECT_EQ(kv.value[599], 5);
    }
  }
  EXPECT_HAS(tg::testing::message_of<TokenizerError>([&] { text::gguf_tokenizer_kvs(root, file, 500); }),
             "beyond the model's vocabulary of 500");
  const pretrained::Model qwen = pretrained::load(kGguf + "/tiny_qwen2.gguf");  // eos 2, end of turn 3
  const std::string path = temp_path("qwen2_ends.gguf");
  pretrained::save_gguf(qwen, qwen.weights, path);
  EXPECT_EQ(pretrained::load(path).eos_ids, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(io::read_gguf(path).meta.at("tokenizer.ggml.model"), "none");
  fs::remove(path);
}

TEST(GgufSave, Errors) {
  const auto error = [](const pretrained::Model& m, DType dt = DType::kF16) {
    return tg::testing::message_of<CheckpointError>(
        [&] { pretrained::save_gguf(m, m.weights, temp_path("bad.gguf"), {.dtype = dt}); });
  };
  EXPECT_HAS(error(pretrained::load(kData + "/tiny_gemma")),
             "GemmaForCausalLM is not written as GGUF (written: LlamaForCausalLM, Qwen2ForCausalLM, "
             "Qwen3ForCausalLM)");
  EXPECT_HAS(error(pretrained::load(kData + "/tiny_qwen2_window")),
             "GGUF's qwen2 cannot express sliding windows");
  EXPECT_HAS(error(pretrained::load(kData + "/tiny_llama"), DType::kI32), "GgufOptions::dtype is i32");
  EXPECT_FALSE(fs::exists(temp_path("bad.gguf")));
}

}  // namespace
