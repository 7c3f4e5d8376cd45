// Bad input to tg::pretrained::load and tg::Generator, one case per test (issue 32): each ends
// in the library's own error type (never a std::filesystem or nlohmann exception, a crash or a
// silently wrong model) with a message that names the folder, the file, the tensor or key, and
// what was expected against what was found. Every bad folder is made here, from the tiny Llama
// of tests/data, in a temporary folder.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;
namespace fs = std::filesystem;
using tg::testing::slurp;

const std::string kLlama = std::string(TG_TEST_DATA_DIR) + "/tiny_llama";

// A copy of the tiny Llama folder (config.json, model.safetensors) under the temp directory,
// removed at the end of the test; each test breaks one thing in it.
struct Folder {
  explicit Folder(const std::string& name)
      : path(fs::temp_directory_path() / ("tg_pretrained_errors_" + std::to_string(getpid()) + "_" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
    write("config.json", slurp(kLlama + "/config.json"));
    fs::copy_file(kLlama + "/model.safetensors", path / "model.safetensors");
  }
  ~Folder() {
    fs::permissions(path, fs::perms::owner_all);
    fs::remove_all(path);
  }
  void write(const std::string& file, const std::string& bytes) const {
    std::ofstream(path / file, std::ios::binary) << bytes;
  }
  // config.json with `from` replaced by `to` (which must be there).
  void edit_config(const std::string& from, const std::string& to) const {
    std::string c = slurp(path / "config.json");
    const size_t at = c.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    write("config.json", c.replace(at, from.size(), to));
  }
  void save_weights(const std::map<std::string, HostTensor>& w,
                    const std::string& file = "model.safetensors") const {
    save_safetensors((path / file).string(), w);
  }
  std::string str() const { return path.string(); }
  fs::path path;
};

std::map<std::string, HostTensor> llama_weights() { return read_safetensors(kLlama + "/model.safetensors"); }

// The CheckpointError load(folder) throws; checks it names the folder.
std::string load_error(const Folder& dir) {
  const std::string e = tg::testing::message_of<CheckpointError>([&] { pretrained::load(dir.str()); });
  EXPECT_HAS(e, dir.str());
  return e;
}

// A safetensors file of this header and data, the 8-byte length first.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  return out + header + data;
}

// ---- the folder and config.json ------------------------------------------------------------

TEST(PretrainedErrors, FolderWithoutConfigJson) {
  Folder dir("no_config");
  fs::remove(dir.path / "config.json");
  EXPECT_HAS(load_error(dir), "no config.json");
}

TEST(PretrainedErrors, EmptyConfigJson) {
  Folder dir("empty_config");
  dir.write("config.json", "");
  EXPECT_HAS(load_error(dir), "config.json is empty");
}

TEST(PretrainedErrors, TruncatedConfigJson) {
  Folder dir("truncated_config");
  dir.write("config.json", slurp(kLlama + "/config.json").substr(0, 100));
  EXPECT_HAS(load_error(dir), "config.json is not valid JSON");
}

TEST(PretrainedErrors, ConfigWithoutARequiredKey) {
  Folder dir("no_hidden_size");
  dir.edit_config("\"hidden_size\": 32,", "");
  EXPECT_HAS(load_error(dir), "config.json has no \"hidden_size\" (a positive integer)");
}

// Before: 32.5 loaded as 32 without a word.
TEST(PretrainedErrors, ConfigKeyOfTheWrongType) {
  const std::pair<std::string, std::string> cases[] = {
      {"\"hidden_size\": \"32\"", "\"hidden_size\" is \"32\", expected an integer"},
      {"\"hidden_size\": 32.5", "\"hidden_size\" is 32.5, expected an integer"},
      {"\"hidden_size\": true", "\"hidden_size\" is true, expected an integer"},
  };
  for (const auto& [value, message] : cases) {
    Folder dir("type");
    dir.edit_config("\"hidden_size\": 32", value);
    EXPECT_HAS(load_error(dir), "config.json: " + message);
  }
  Folder dir("type_eps");
  dir.edit_config("\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": \"1e-5\"");
  EXPECT_HAS(load_error(dir), "\"rms_norm_eps\" is \"1e-5\", expected a number");
  dir.edit_config("\"rms_norm_eps\": \"1e-5\"", "\"rms_norm_eps\": 1e-5");
  dir.edit_config("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": 0");
  EXPECT_HAS(load_error(dir), "\"tie_word_embeddings\" is 0, expected true or false");
}

TEST(PretrainedErrors, ConfigSizeThatIsNotPositive) {
  Folder dir("zero_layers");
  dir.edit_config("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 0");
  EXPECT_HAS(load_error(dir), "\"num_hidden_layers\" is 0, expected a positive integer");
}

// Sizes the model itself refuses: its ShapeError comes back as a CheckpointError, and before
// any weights are read (model.safetensors here is not even a safetensors file).
TEST(PretrainedErrors, ConfigTheModelCannotBuild) {
  Folder dir("kv_heads");
  dir.edit_config("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3");
  dir.write("model.safetensors", "not read");
  const std::string e = load_error(dir);
  EXPECT_HAS(e, "config.json describes a LlamaForCausalLM the library cannot build");
  EXPECT_HAS(e, "heads 4 must be a multiple of kv_heads 3");
}

TEST(PretrainedErrors, UnsupportedArchitecture) {
  Folder dir("bart");
  dir.write("config.json", R"({"architectures": ["BartForConditionalGeneration"], "model_type": "bart"})");
  EXPECT_HAS(
      load_error(dir),
      "the architecture \"BartForConditionalGeneration\", which is not supported; supported: "
      "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, "
      "GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM, "
      "Qwen3MoeForCausalLM, GraniteForCausalLM, Olmo2ForCausalLM, Olmo3ForCausalLM, "
      "GraniteMoeHybridForCausalLM, BambaForCausalLM, NemotronHForCausalLM, GptOssForCausalLM, "
      "GPTNeoXForCausalLM, "
      "PhiForCausalLM, StableLmForCausalLM, Starcoder2ForCausalLM, "
      "GPT2LMHeadModel, BertModel, BertForMaskedLM, RobertaModel, RobertaForMaskedLM, "
      "BertForSequenceClassification, RobertaForSequenceClassification, BertForTokenClassification, "
      "RobertaForTokenClassification, BertForQuestionAnswering, RobertaForQuestionAnswering, "
      "XLMRobertaModel, XLMRobertaForMaskedLM, XLMRobertaForSequenceClassification, "
      "XLMRobertaForTokenClassification, XLMRobertaForQuestionAnswering, DistilBertModel, "
      "DistilBertForMaskedLM, DistilBertForSequenceClassification, DistilBertForTokenClassification, "
      "DistilBertForQuestionAnswering, ViTModel, ViTForImageClassification, DeiTModel, "
      "DeiTForImageClassification, DeiTForImageClassificationWithTeacher, T5ForConditionalGeneration, "
      "T5EncoderModel, WhisperForConditionalGeneration, CLIPModel, CLIPTextModel, "
      "CLIPTextModelWithProjection, CLIPVisionModel, CLIPVisionModelWithProjection, "
      "MambaForCausalLM, Mamba2ForCausalLM");
  dir.write("config.json", R"({"model_type": "bart"})");
  EXPECT_HAS(load_error(dir), "the architecture by model_type \"bart\", which is not supported");
  dir.write("config.json", R"({"hidden_size": 32})");
  EXPECT_HAS(load_error(dir),
             "config.json names no architecture (neither \"architectures\" nor \"model_type\")");
  dir.write("config.json", R"({"architectures": "LlamaForCausalLM"})");
  EXPECT_HAS(load_error(dir), "\"architectures\" is \"LlamaForCausalLM\", expected a list of class names");
}

// Before: std::filesystem::filesystem_error escaped from fs::exists. Root reads everything, so
// the test drops to user nobody (seteuid keeps the saved uid 0 to come back).
TEST(PretrainedErrors, UnreadableFolderAndConfig) {
  Folder dir("unreadable");
  struct AsNobody {
    AsNobody() : was_root(geteuid() == 0) { ok = !was_root || seteuid(65534) == 0; }
    ~AsNobody() {
      if (was_root && ok) {
        EXPECT_EQ(seteuid(0), 0);
      }
    }
    bool was_root, ok;
  };
  fs::permissions(dir.path / "config.json", fs::perms::none);
  {
    AsNobody nobody;
    if (!nobody.ok) GTEST_SKIP() << "cannot drop root privileges here";
    const std::string e = load_error(dir);
    EXPECT_HAS(e, "Permission denied");
    EXPECT_HAS(e, "config.json");
  }
  fs::permissions(dir.path / "config.json", fs::perms::owner_read | fs::perms::owner_write);
  fs::permissions(dir.path, fs::perms::none);
  {
    AsNobody nobody;
    const std::string e = load_error(dir);
    EXPECT_HAS(e, "Permission denied");
  }
}

// ---- the weights ---------------------------------------------------------------------------

TEST(PretrainedErrors, MissingTensor) {
  Folder dir("missing");
  std::map<std::string, HostTensor> w = llama_weights();
  w.erase("model.layers.1.mlp.up_proj.weight");
  dir.save_weights(w);
  EXPECT_HAS(load_error(dir),
             "model.safetensors: no tensor 'model.layers.1.mlp.up_proj.weight' "
             "(LlamaForCausalLM needs it, shape [48, 32])");
}

TEST(PretrainedErrors, MisshapenTensor) {
  Folder dir("shape");
  std::map<std::string, HostTensor> w = llama_weights();
  w["model.layers.0.mlp.down_proj.weight"] = HostTensor(DType::kF32, {48, 32});
  dir.save_weights(w);
  EXPECT_HAS(load_error(dir),
             "model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight' has shape "
             "[48, 32], expected [32, 48] (from config.json)");
}

// In a sharded folder the message names the shard the tensor came from.
TEST(PretrainedErrors, MisshapenTensorInAShard) {
  Folder dir("shard_shape");
  fs::remove(dir.path / "model.safetensors");
  std::map<std::string, HostTensor> w = llama_weights(), a, b;
  w["model.norm.weight"] = HostTensor(DType::kF32, {31});
  std::string index = R"({"weight_map": {)";
  for (auto& [name, t] : w) {
    const bool second = name.rfind("model.norm", 0) == 0;
    (second ? b : a)[name] = t;
    index +=
        (index.back() == '{' ? "\"" : ", \"") + name + "\": \"" + (second ? "b" : "a") + ".safetensors\"";
  }
  dir.write("model.safetensors.index.json", index + "}}");
  dir.save_weights(a, "a.safetensors");
  dir.save_weights(b, "b.safetensors");
  EXPECT_HAS(load_error(dir), "b.safetensors: tensor 'model.norm.weight' has shape [31], expected [32]");
}

TEST(PretrainedErrors, TensorThatIsNotFloat) {
  Folder dir("int");
  std::map<std::string, HostTensor> w = llama_weights();
  w["model.norm.weight"] = HostTensor(DType::kI32, {32});
  dir.save_weights(w);
  EXPECT_HAS(
      load_error(dir),
      "model.safetensors: tensor 'model.norm.weight' is not a float tensor (F32, BF16 or F16) but I32");
}

// Before: an I32 lm_head in a tied folder reached HostTensor::to, whose InputError escaped.
TEST(PretrainedErrors, TiedHeadOfAnotherDtype) {
  Folder dir("tied_int");
  dir.edit_config("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
  std::map<std::string, HostTensor> w = llama_weights();
  w["lm_head.weight"] = HostTensor(DType::kI32, {64, 32});
  dir.save_weights(w);
  EXPECT_HAS(load_error(dir), "lm_head.weight differs from model.embed_tokens.weight");
  // The same values in bf16 are the same head.
  w["model.embed_tokens.weight"] = w.at("model.embed_tokens.weight").to(DType::kBF16);
  w["lm_head.weight"] = w.at("model.embed_tokens.weight").to(DType::kF32);
  dir.save_weights(w);
  EXPECT_NO_THROW(pretrained::load(dir.str()));
}

TEST(PretrainedErrors, DtypeTheLibraryDoesNotRead) {
  for (const auto& [dtype, bytes] : {std::pair{"F64", 8}, std::pair{"U8", 1}}) {
    Folder dir(dtype);
    const std::string header = std::string(R"({"x": {"dtype": ")") + dtype +
                               R"(", "shape": [2], "data_offsets": [0, )" + std::to_string(2 * bytes) + "]}}";
    dir.write("model.safetensors",
              safetensors_bytes(header, std::string(static_cast<size_t>(2 * bytes), '\0')));
    const std::string e = load_error(dir);
    EXPECT_HAS(e, "model.safetensors: tensor 'x': dtype " + std::string(dtype) + " is not supported");
    EXPECT_HAS(e, "tensorgrad reads F32, BF16, F16, I32, I8 and BOOL");
  }
}

TEST(PretrainedErrors, EmptyWeightsFile) {
  Folder dir("empty_weights");
  dir.write("model.safetensors", "");
  EXPECT_HAS(load_error(dir), "model.safetensors: file is 0 bytes, shorter than the 8-byte header length");
}

TEST(PretrainedErrors, TruncatedOrCorruptHeader) {
  Folder dir("header");
  const std::string good = slurp(dir.path / "model.safetensors");
  dir.write("model.safetensors", good.substr(0, 100));  // cut inside the header
  EXPECT_HAS(load_error(dir), "runs past the end of the file");
  std::string corrupt = good;
  corrupt[8] = '[';  // the header's opening brace
  dir.write("model.safetensors", corrupt);
  EXPECT_HAS(load_error(dir), "model.safetensors: header is not valid JSON");
  dir.write("model.safetensors", std::string(8, '\xff') + "{}");  // a length of 2^64 − 1
  EXPECT_HAS(load_error(dir), "exceeds the 100 MB limit (corrupt or not a safetensors file)");
}

// A file cut inside its data: the tensor whose bytes are missing is named.
TEST(PretrainedErrors, OffsetsPastTheEndOfTheFile) {
  Folder dir("cut_data");
  const std::string good = slurp(dir.path / "model.safetensors");
  dir.write("model.safetensors", good.substr(0, good.size() - 4));
  const std::string e = load_error(dir);
  EXPECT_HAS(e, "model.safetensors: tensor '");
  EXPECT_HAS(e, "lie outside the data section");
  EXPECT_HAS(e, "truncated file?");
}

TEST(PretrainedErrors, IndexNamingAMissingShard) {
  Folder dir("missing_shard");
  fs::remove(dir.path / "model.safetensors");
  std::map<std::string, HostTensor> w = llama_weights();
  std::string index = R"({"weight_map": {)";
  for (const auto& [name, t] : w)
    index += (index.back() == '{' ? "\"" : ", \"") + name + "\": \"one.safetensors\"";
  dir.write("model.safetensors.index.json", index + R"(, "extra": "two.safetensors"}})");
  dir.save_weights(w, "one.safetensors");
  EXPECT_HAS(load_error(dir),
             "shard two.safetensors (named by model.safetensors.index.json for 'extra') is missing");
  dir.write("model.safetensors.index.json", R"({"metadata": {}, "weight_map": {}})");
  EXPECT_HAS(load_error(dir),
             "model.safetensors.index.json has no weight_map object naming the tensors' shards");
  dir.write("model.safetensors.index.json", R"({"weight_map": {"model.norm.weight": 3}})");
  EXPECT_HAS(load_error(dir), "\"model.norm.weight\" maps to 3, expected a shard's file name");
}

// ---- tg::Generator at the model's context ---------------------------------------------------

class PretrainedGenerator : public ::testing::Test {
 protected:
  void SetUp() override { lm = pretrained::load(kLlama); }
  Generator make(int64_t cache_len) const {
    Generator gen(*lm.module, lm.step(), {.cache_len = cache_len, .device = Device::cpu()});
    lm.upload(gen.decode());
    return gen;
  }
  static std::vector<int32_t> prompt(int64_t n) {
    std::vector<int32_t> p;
    for (int64_t i = 0; i < n; ++i) p.push_back(static_cast<int32_t>(3 + i % 40));
    return p;
  }
  pretrained::Model lm;
};

TEST_F(PretrainedGenerator, CacheLongerThanTheContextIsAShapeError) {
  ASSERT_EQ(lm.context, 16);
  const std::string e = tg::testing::message_of<ShapeError>([&] { make(lm.context + 1); });
  EXPECT_HAS(e, "a cache of 17 positions; it must be 1 … seq_len 16");
}

TEST_F(PretrainedGenerator, PromptPastTheContextIsAnInputError) {
  Generator gen = make(lm.context);
  const std::string e = tg::testing::message_of<InputError>([&] { gen.generate(prompt(17)); });
  EXPECT_HAS(e, "prompt 0 has 17 tokens, more than the cache holds (cache_len = 16)");
  EXPECT_HAS(tg::testing::message_of<InputError>([&] { gen.generate(prompt(3), {.max_new_tokens = -1}); }),
             "max_new_tokens must be >= 0");
}

// A prompt that fits but leaves less room than max_new_tokens: generation stops when prompt
// and new tokens fill the context (what examples/generate clamps to, with a note).
TEST_F(PretrainedGenerator, GenerationStopsWhenTheContextIsFull) {
  Generator gen = make(lm.context);
  EXPECT_EQ(gen.generate(prompt(10), {.max_new_tokens = 100}).size(), 6u);
  EXPECT_EQ(gen.generate(prompt(16), {.max_new_tokens = 100}).size(), 1u);
}

}  // namespace
