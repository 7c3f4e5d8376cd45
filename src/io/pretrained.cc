// tg::pretrained::load: config.json → the library's model configuration, safetensors (one
// file or shards) → its parameters by name, with each family's renames and layout changes.
#include "tensorgrad/pretrained.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tensorgrad/checkpoint.h"
#include "tensorgrad/errors.h"

namespace tg::pretrained {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

[[noreturn]] void fail(const std::string& folder, const std::string& what) {
  throw CheckpointError("[pretrained::load] " + folder + ": " + what);
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

json read_json(const std::string& folder, const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail(folder, "cannot open " + path.filename().string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail(folder, path.filename().string() + " is not valid JSON: " + e.what());
  }
}

// A config field: its value, `fallback` when missing or null, an error naming it when it has
// another type.
template <typename T>
T field(const json& c, const std::string& folder, const char* key, T fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  try {
    return c[key].get<T>();
  } catch (const json::exception&) {
    fail(folder, std::string("config.json: \"") + key + "\" is " + c[key].dump());
  }
}
template <typename T>
T required(const json& c, const std::string& folder, const char* key) {
  if (!c.contains(key) || c[key].is_null()) fail(folder, std::string("config.json has no \"") + key + "\"");
  return field<T>(c, folder, key, T{});
}

// Every tensor of the folder's weights: model.safetensors, or the shards that
// model.safetensors.index.json's weight_map names (each shard read once; a tensor the index
// names but its shard lacks is an error).
std::map<std::string, HostTensor> read_weights(const std::string& folder) {
  const fs::path dir(folder);
  if (fs::exists(dir / "model.safetensors")) return read_safetensors((dir / "model.safetensors").string());
  const fs::path index = dir / "model.safetensors.index.json";
  if (!fs::exists(index)) {
    const bool bin =
        fs::exists(dir / "pytorch_model.bin") || fs::exists(dir / "pytorch_model.bin.index.json");
    fail(folder,
         std::string("no model.safetensors or model.safetensors.index.json") +
             (bin ? " (only pytorch_model.bin, which is not read: save it with safe_serialization=True)"
                  : ""));
  }
  const json j = read_json(folder, index);
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    fail(folder, "model.safetensors.index.json has no weight_map object");
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string())
      fail(folder, "model.safetensors.index.json: \"" + name + "\" maps to " + file.dump());
    const std::string f = file.get<std::string>();
    if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
      fail(folder, "model.safetensors.index.json names a shard outside the folder: " + f);
    by_file[f].push_back(name);
  }
  std::map<std::string, HostTensor> out;
  for (const auto& [file, names] : by_file) {
    if (!fs::exists(dir / file))
      fail(folder, "shard " + file + " (named by model.safetensors.index.json) is missing");
    std::map<std::string, HostTensor> shard = read_safetensors((dir / file).string());
    for (const std::string& name : names) {
      auto it = shard.find(name);
      if (it == shard.end())
        fail(folder,
             "shard " + file + " has no tensor '" + name + "' (model.safetensors.index.json puts it there)");
      out[name] = std::move(it->second);
      shard.erase(it);
    }
    for (auto& [name, t] : shard) out.try_emplace(name, std::move(t));  // extras: judged with the others
  }
  return out;
}

HostTensor to_f32(const std::string& folder, const std::string& name, const HostTensor& t) {
  if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16 && t.dtype() != DType::kF16)
    fail(folder, "tensor '" + name + "' is not a float tensor (F32, BF16 or F16)");
  return t.to(DType::kF32);
}

HostTensor transpose2d(const HostTensor& t) {
  const int64_t r = t.shape()[0], c = t.shape()[1];
  std::vector<float> out(static_cast<size_t>(r * c));
  const std::span<const float> in = t.f32();
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) out[static_cast<size_t>(j * r + i)] = in[static_cast<size_t>(i * c + j)];
  return HostTensor::f32(std::move(out), {c, r});
}

// How one parameter comes from the file: the file's name and a layout change (none: same
// shape, copied).
enum class Layout { kSame, kTransposed, kSqueezeMiddle };
struct Source {
  std::string name;
  Layout layout = Layout::kSame;
};

// Fills `m.weights` for every parameter of m.module from `file` through `source_of` (the
// parameter's name → where it is in the file). Tensors of the file that no parameter takes
// are errors unless `ignorable` says otherwise.
void map_weights(Model& m, std::map<std::string, HostTensor> file,
                 const std::function<Source(const std::string&)>& source_of,
                 const std::function<bool(const std::string&)>& ignorable) {
  std::set<std::string> used;
  for (const Param* p : m.module->parameters()) {
    const std::string path = p->path();
    const Source src = source_of(path);
    auto it = file.find(src.name);
    if (it == file.end())
      fail(m.folder, "the weights have no tensor '" + src.name + "' (" + m.architecture +
                         " needs it, shape " +
                         shape_str(src.layout == Layout::kTransposed ? Shape{p->shape()[1], p->shape()[0]}
                                                                     : p->shape()) +
                         ")");
    HostTensor t = to_f32(m.folder, src.name, it->second);
    Shape want = p->shape();
    if (src.layout == Layout::kTransposed) want = {p->shape()[1], p->shape()[0]};
    if (src.layout == Layout::kSqueezeMiddle) want = {p->shape()[0], 1, p->shape()[1]};
    if (t.shape() != want)
      fail(m.folder, "tensor '" + src.name + "' has shape " + shape_str(t.shape()) + ", expected " +
                         shape_str(want) + " (from config.json)");
    if (src.layout == Layout::kTransposed) t = transpose2d(t);
    if (src.layout == Layout::kSqueezeMiddle) t = HostTensor::f32(std::move(t).f32(), p->shape());
    m.weights[path] = std::move(t);
    used.insert(src.name);
  }
  for (const auto& [name, t] : file) {
    if (used.count(name) || ignorable(name)) continue;
    fail(m.folder, "unexpected tensor '" + name + "' " + shape_str(t.shape()) + ": " + m.architecture +
                       " as config.json describes it has no such parameter");
  }
}

// A tied head's file may still hold the head; it must then equal the embedding it is tied to.
bool tied_copy_ok(const std::map<std::string, HostTensor>& file, const std::string& head,
                  const std::string& embedding) {
  auto h = file.find(head), e = file.find(embedding);
  if (h == file.end()) return true;
  if (e == file.end() || h->second.shape() != e->second.shape()) return false;
  const HostTensor a = h->second.to(DType::kF32), b = e->second.to(DType::kF32);
  return std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
}

std::vector<int32_t> eos_of(const json& c) {
  std::vector<int32_t> out;
  if (!c.contains("eos_token_id")) return out;
  const json& e = c["eos_token_id"];
  if (e.is_number_integer()) out.push_back(e.get<int32_t>());
  if (e.is_array())
    for (const json& v : e)
      if (v.is_number_integer()) out.push_back(v.get<int32_t>());
  return out;
}

// ---- Llama ---------------------------------------------------------------------------------
void load_llama(Model& m, const json& c, std::map<std::string, HostTensor> file) {
  const std::string& f = m.folder;
  nn::LlamaConfig l;
  l.vocab = required<int64_t>(c, f, "vocab_size");
  l.d_model = required<int64_t>(c, f, "hidden_size");
  l.mlp_hidden = required<int64_t>(c, f, "intermediate_size");
  l.layers = required<int64_t>(c, f, "num_hidden_layers");
  l.heads = required<int64_t>(c, f, "num_attention_heads");
  l.kv_heads = field<int64_t>(c, f, "num_key_value_heads", l.heads);
  l.seq_len = required<int64_t>(c, f, "max_position_embeddings");
  l.rms_eps = field<double>(c, f, "rms_norm_eps", 1e-6);
  l.attention_bias = field<bool>(c, f, "attention_bias", false);
  l.mlp_bias = field<bool>(c, f, "mlp_bias", false);
  l.tied_head = field<bool>(c, f, "tie_word_embeddings", false);
  const std::string act = field<std::string>(c, f, "hidden_act", "silu");
  if (act != "silu") fail(f, "config.json: hidden_act \"" + act + "\" (nn::Llama's MLP is SwiGLU with silu)");
  if (l.heads <= 0 || l.d_model % l.heads != 0)
    fail(f, "config.json: hidden_size " + std::to_string(l.d_model) +
                " is no multiple of num_attention_heads " + std::to_string(l.heads));
  const int64_t head_dim = field<int64_t>(c, f, "head_dim", l.d_model / l.heads);
  if (head_dim != l.d_model / l.heads)
    fail(f, "config.json: head_dim " + std::to_string(head_dim) +
                " differs from hidden_size / num_attention_heads (" + std::to_string(l.d_model / l.heads) +
                "), which nn::Llama does not implement");
  // RoPE: transformers 4.x writes rope_theta and rope_scaling, 5.x rope_parameters.
  l.rope_theta = field<double>(c, f, "rope_theta", 10000.0);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!c.contains(key) || c[key].is_null()) continue;
    const json& r = c[key];
    if (!r.is_object()) fail(f, std::string("config.json: ") + key + " is " + r.dump());
    if (r.contains("rope_theta")) l.rope_theta = field<double>(r, f, "rope_theta", l.rope_theta);
    std::string type = field<std::string>(r, f, "rope_type", field<std::string>(r, f, "type", "default"));
    if (type != "default")
      fail(f, std::string("config.json: ") + key + " has rope_type \"" + type +
                  "\"; only the default RoPE (no scaling) is implemented");
  }
  m.context = l.seq_len;
  auto model = std::make_unique<nn::Llama>(l);
  m.config = l;
  m.module = std::move(model);
  const bool tied = l.tied_head;
  if (tied && !tied_copy_ok(file, "lm_head.weight", "model.embed_tokens.weight"))
    fail(f,
         "config.json ties the head to the embedding, but lm_head.weight differs from "
         "model.embed_tokens.weight");
  map_weights(
      m, std::move(file), [](const std::string& p) { return Source{p}; },
      [tied](const std::string& n) {
        // rotary_emb.inv_freq: a buffer old files carry, recomputed from rope_theta here.
        return (tied && n == "lm_head.weight") || n.ends_with("rotary_emb.inv_freq");
      });
}

// ---- GPT-2 ---------------------------------------------------------------------------------
void load_gpt2(Model& m, const json& c, std::map<std::string, HostTensor> file) {
  const std::string& f = m.folder;
  nn::GptConfig g;
  g.vocab = required<int64_t>(c, f, "vocab_size");
  g.d_model = required<int64_t>(c, f, "n_embd");
  g.layers = required<int64_t>(c, f, "n_layer");
  g.heads = required<int64_t>(c, f, "n_head");
  g.seq_len = required<int64_t>(c, f, "n_positions");
  g.mlp_hidden = field<int64_t>(c, f, "n_inner", 4 * g.d_model);
  g.ln_eps = field<double>(c, f, "layer_norm_epsilon", 1e-5);
  g.tied_head = true;
  g.bias = true;
  const std::string act = field<std::string>(c, f, "activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    fail(f, "config.json: activation_function \"" + act + "\" (nn::Gpt's MLP uses the tanh GELU, gelu_new)");
  if (!field<bool>(c, f, "scale_attn_weights", true) ||
      field<bool>(c, f, "scale_attn_by_inverse_layer_idx", false))
    fail(f, "config.json: attention scaling other than 1/sqrt(head_dim) is not implemented");
  if (!field<bool>(c, f, "tie_word_embeddings", true))
    fail(f, "config.json: tie_word_embeddings false (an untied GPT-2 head) is not implemented");
  m.context = g.seq_len;
  m.config = g;
  m.module = std::make_unique<nn::Gpt>(g);
  // Files saved from GPT2Model (the Hub's gpt2) lack the "transformer." prefix.
  std::string prefix = "transformer.";
  if (!file.count("transformer.wte.weight") && file.count("wte.weight")) prefix = "";
  if (!tied_copy_ok(file, "lm_head.weight", prefix + "wte.weight"))
    fail(f, "lm_head.weight differs from " + prefix + "wte.weight (GPT-2's head is tied to it)");
  // The library's name → the file's: blocks.<i>.{ln1, attn.qkv, attn.proj, ln2, fc, fc2}.
  auto source_of = [prefix](const std::string& p) -> Source {
    if (p.rfind("blocks.", 0) != 0) {
      const std::string rest = p.rfind("lnf.", 0) == 0 ? "ln_f." + p.substr(4) : p;
      return {prefix + rest};
    }
    const size_t dot = p.find('.', 7);
    const std::string layer = p.substr(7, dot - 7), rest = p.substr(dot + 1);
    static const std::map<std::string, std::string> names{
        {"ln1", "ln_1"},    {"ln2", "ln_2"},      {"attn.qkv", "attn.c_attn"}, {"attn.proj", "attn.c_proj"},
        {"fc", "mlp.c_fc"}, {"fc2", "mlp.c_proj"}};
    const size_t last = rest.rfind('.');
    const std::string module = rest.substr(0, last), leaf = rest.substr(last + 1);
    const std::string hf = prefix + "h." + layer + "." + names.at(module) + "." + leaf;
    // Conv1D keeps its weight as [in, out]: transposed to Linear's [out, in].
    const bool conv1d = leaf == "weight" && module != "ln1" && module != "ln2";
    return {hf, conv1d ? Layout::kTransposed : Layout::kSame};
  };
  map_weights(m, std::move(file), source_of, [](const std::string& n) {
    return n == "lm_head.weight" || n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias");
  });
}

// ---- Mamba ---------------------------------------------------------------------------------
void load_mamba(Model& m, const json& c, std::map<std::string, HostTensor> file) {
  const std::string& f = m.folder;
  nn::MambaLMConfig mc;
  mc.vocab = required<int64_t>(c, f, "vocab_size");
  mc.d_model = required<int64_t>(c, f, "hidden_size");
  mc.layers = required<int64_t>(c, f, "num_hidden_layers");
  mc.d_state = field<int64_t>(c, f, "state_size", 16);
  mc.d_conv = field<int64_t>(c, f, "conv_kernel", 4);
  mc.expand = field<int64_t>(c, f, "expand", 2);
  mc.norm_eps = field<double>(c, f, "layer_norm_epsilon", 1e-5);
  const int64_t inner = field<int64_t>(c, f, "intermediate_size", mc.expand * mc.d_model);
  if (inner != mc.expand * mc.d_model)
    fail(f, "config.json: intermediate_size " + std::to_string(inner) + " is not expand · hidden_size");
  const int64_t auto_rank = (mc.d_model + 15) / 16;
  if (c.contains("time_step_rank") && c["time_step_rank"].is_number_integer() &&
      c["time_step_rank"].get<int64_t>() != auto_rank)
    fail(f, "config.json: time_step_rank " + c["time_step_rank"].dump() +
                " (nn::MambaLM uses ceil(hidden_size / 16) = " + std::to_string(auto_rank) + ")");
  if (field<bool>(c, f, "use_bias", false))
    fail(f, "config.json: use_bias true (in_proj/out_proj biases) is not implemented by nn::MambaLM");
  if (!field<bool>(c, f, "use_conv_bias", true))
    fail(f, "config.json: use_conv_bias false is not implemented by nn::MambaLM");
  if (!field<bool>(c, f, "tie_word_embeddings", true))
    fail(f,
         "config.json: tie_word_embeddings false (an untied Mamba head) is not implemented by nn::MambaLM");
  const std::string act = field<std::string>(c, f, "hidden_act", "silu");
  if (act != "silu") fail(f, "config.json: hidden_act \"" + act + "\" (Mamba's mixer uses silu)");
  m.context = 0;
  m.config = mc;
  m.module = std::make_unique<nn::MambaLM>(mc);
  if (!tied_copy_ok(file, "lm_head.weight", "backbone.embeddings.weight"))
    fail(f, "lm_head.weight differs from backbone.embeddings.weight (nn::MambaLM's head is tied to it)");
  auto source_of = [](const std::string& p) -> Source {
    if (p == "embedding.weight") return {"backbone.embeddings.weight"};
    if (p.ends_with("mixer.conv1d.weight")) return {"backbone." + p, Layout::kSqueezeMiddle};
    return {"backbone." + p};
  };
  map_weights(m, std::move(file), source_of, [](const std::string& n) { return n == "lm_head.weight"; });
}

struct Family {
  std::string architecture, model_type;
  void (*load)(Model&, const json&, std::map<std::string, HostTensor>);
};
const std::vector<Family>& families() {
  static const std::vector<Family> all{{"LlamaForCausalLM", "llama", load_llama},
                                       {"GPT2LMHeadModel", "gpt2", load_gpt2},
                                       {"MambaForCausalLM", "mamba", load_mamba}};
  return all;
}

}  // namespace

std::vector<std::string> architectures() {
  std::vector<std::string> out;
  for (const Family& f : families()) out.push_back(f.architecture);
  return out;
}

Model load(const std::string& folder) {
  const fs::path dir(folder);
  if (!fs::is_directory(dir)) fail(folder, "not a folder");
  if (!fs::exists(dir / "config.json")) fail(folder, "no config.json (a Hugging Face model folder has one)");
  const json c = read_json(folder, dir / "config.json");
  if (!c.is_object()) fail(folder, "config.json is not a JSON object");
  // The architecture: architectures[0], else the model_type's.
  std::string arch;
  if (c.contains("architectures") && c["architectures"].is_array() && !c["architectures"].empty() &&
      c["architectures"][0].is_string())
    arch = c["architectures"][0].get<std::string>();
  const std::string type = field<std::string>(c, folder, "model_type", "");
  const Family* family = nullptr;
  for (const Family& f : families())
    if (arch.empty() ? f.model_type == type : f.architecture == arch) family = &f;
  if (!family) {
    std::string names;
    for (const std::string& a : architectures()) names += (names.empty() ? "" : ", ") + a;
    fail(folder, "config.json names the architecture \"" + (arch.empty() ? "model_type " + type : arch) +
                     "\"; supported: " + names);
  }
  Model m;
  m.folder = folder;
  m.architecture = family->architecture;
  m.eos_ids = eos_of(c);
  family->load(m, c, read_weights(folder));
  return m;
}

Tensor Model::logits(const Tensor& ids) const {
  return std::visit(
      [&](const auto& c) -> Tensor {
        using C = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<C, nn::LlamaConfig>)
          return static_cast<const nn::Llama&>(*module).logits(ids);
        if constexpr (std::is_same_v<C, nn::GptConfig>)
          return static_cast<const nn::Gpt&>(*module).logits(ids);
        if constexpr (std::is_same_v<C, nn::MambaLMConfig>)
          return static_cast<const nn::MambaLM&>(*module).logits(ids);
      },
      config);
}

CachedLm Model::step() const {
  const Module* mod = module.get();
  return std::visit(
      [mod](const auto& c) -> CachedLm {
        using C = std::decay_t<decltype(c)>;
        using M =
            std::conditional_t<std::is_same_v<C, nn::LlamaConfig>, nn::Llama,
                               std::conditional_t<std::is_same_v<C, nn::GptConfig>, nn::Gpt, nn::MambaLM>>;
        const M* model = static_cast<const M*>(mod);
        return [model](const Tensor& ids, const Tensor& pos, int64_t cache_len) {
          return model->logits_cached(ids, pos, cache_len);
        };
      },
      config);
}

}  // namespace tg::pretrained
