// tg::pretrained::load: config.json → the library's model configuration, safetensors (one
// file or shards) → its parameters by name, with each family's renames and layout changes.
#include "tensorgrad/pretrained.h"

#include <cctype>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <system_error>
#include <type_traits>

#include "io/gguf.h"
#include "io/pretrained_internal.h"
#include "io/safetensors.h"
#include "tensorgrad/checkpoint.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/quantize.h"

namespace tg::pretrained {
namespace detail {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& folder, const std::string& what) {
  throw CheckpointError("[pretrained::load] " + folder + ": " + what);
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t required(const json& c, const std::string& folder, const char* key) {
  if (!c.contains(key) || c[key].is_null())
    fail(folder, std::string("config.json has no \"") + key + "\" (a positive integer)");
  const auto v = field<int64_t>(c, folder, key, 0);
  if (v <= 0)
    fail(folder, std::string("config.json: \"") + key + "\" is " + std::to_string(v) +
                     ", expected a positive integer");
  return v;
}

namespace {
// A number of config.json that may be infinite: a JSON number, or transformers 5's
// {"__float__": "Infinity"} (read_json writes Python's bare Infinity so).
double config_float(const json& v, const std::string& f, const std::string& what) {
  if (v.is_number()) return v.get<double>();
  if (v.is_object() && v.contains("__float__") && v["__float__"].is_string()) {
    const std::string text = v["__float__"].get<std::string>();
    if (text == "Infinity") return std::numeric_limits<double>::infinity();
    if (text == "-Infinity") return -std::numeric_limits<double>::infinity();
  }
  fail(f, "config.json: " + what + " is " + v.dump() + ", expected a number");
}
}  // namespace

void read_time_step_limit(const json& c, const std::string& folder, double& lo, double& hi) {
  if (!c.contains("time_step_limit") || c["time_step_limit"].is_null()) return;
  const json& limit = c["time_step_limit"];
  if (!limit.is_array() || limit.size() != 2)
    fail(folder, "config.json: time_step_limit is " + limit.dump() + ", expected [min, max]");
  lo = config_float(limit[0], folder, "time_step_limit[0]");
  hi = config_float(limit[1], folder, "time_step_limit[1]");
}

// Whether `path` exists; a path that cannot be looked at (a folder without read or search
// permission) is an error naming it, not a std::filesystem exception.
bool has(const std::string& folder, const fs::path& path) {
  std::error_code ec;
  const bool found = fs::exists(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    fail(folder, "cannot look for " + path.filename().string() + ": " + ec.message());
  return found;
}

// Python's json module writes an infinite float as a bare Infinity (-Infinity, NaN), which JSON
// lacks and transformers 4 leaves in config.json (Mamba-2's time_step_limit): such a token outside
// the strings becomes transformers 5's {"__float__": "Infinity"}, which the fields that may be
// infinite read (config_float).
std::string python_floats_as_objects(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      out += ch;
      if (ch == '\\' && i + 1 < text.size())
        out += text[++i];
      else if (ch == '"')
        in_string = false;
      continue;
    }
    if (ch == '"') in_string = true;
    bool replaced = false;
    for (const char* token : {"-Infinity", "Infinity", "NaN"}) {
      const std::string_view t(token);
      if (text.compare(i, t.size(), t) == 0) {
        out += "{\"__float__\": \"" + std::string(t) + "\"}";
        i += t.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += ch;
  }
  return out;
}

json read_json(const std::string& folder, const fs::path& path) {
  const std::string name = path.filename().string();
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec) fail(folder, "cannot look at " + name + ": " + ec.message());
  if (!fs::is_regular_file(status)) fail(folder, name + " is not a regular file");
  std::ifstream in(path);
  if (!in) fail(folder, "cannot open " + name + ": " + std::strerror(errno));
  if (in.peek() == std::ifstream::traits_type::eof()) fail(folder, name + " is empty");
  try {
    return json::parse(python_floats_as_objects(std::string(std::istreambuf_iterator<char>(in), {})));
  } catch (const json::exception& e) {
    fail(folder, name + " is not valid JSON: " + e.what());
  }
}

// Every tensor of the folder's weights: model.safetensors, or the shards that
// model.safetensors.index.json's weight_map names (each shard read once; a tensor the index
// names but its shard lacks is an error).
namespace {
// The int64 position_ids buffers transformers wrote into files before 4.31 (BERT's, RoBERTa's):
// no model's parameter, and of a dtype the library does not hold.
bool is_position_buffer(const std::string& name) { return name.ends_with("position_ids"); }
// MXFP4 codes and scales (gpt-oss's experts): U8 tensors, read as bytes beside the others.
bool is_mxfp4_part(const std::string& name) { return name.ends_with("_blocks") || name.ends_with("_scales"); }
// The file's tensors: those of the dtypes the library holds, and as their bytes MXFP4's parts (U8)
// and FP8 weights (F8_E4M3: their names go into `fp8`); another dtype is an error naming it.
std::map<std::string, HostTensor> read_file_tensors(const std::string& folder, const std::string& path,
                                                    const std::string& file, std::set<std::string>& fp8) {
  auto raw = [](const std::string& n) { return is_mxfp4_part(n) || n.ends_with(".weight"); };
  std::map<std::string, HostTensor> t =
      read_safetensors(path, [&](const std::string& n) { return is_position_buffer(n) || raw(n); });
  for (auto& [name, r] : io::read_safetensors_raw(path, raw)) {
    if (r.dtype == "F8_E4M3" && name.ends_with(".weight")) {
      fp8.insert(name);
    } else if (r.dtype != "U8" || !is_mxfp4_part(name)) {
      fail(folder, file + ": tensor '" + name + "' has dtype " + r.dtype +
                       ", which is not read (F32, BF16, F16, I32, I8 and BOOL are; F8_E4M3 for an FP8 "
                       "checkpoint's weights, U8 for MXFP4 parts)");
    }
    t.emplace(name, std::move(r.bytes));
  }
  return t;
}
}  // namespace

namespace {
Weights read_folder_weights(const std::string& folder) {
  const fs::path dir(folder);
  Weights w;
  if (has(folder, dir / "model.safetensors")) {
    w.listing = "model.safetensors";
    w.tensors = read_file_tensors(folder, (dir / w.listing).string(), w.listing, w.fp8);
    for (const auto& [name, t] : w.tensors) w.file_of[name] = w.listing;
    return w;
  }
  const fs::path index = dir / "model.safetensors.index.json";
  if (!has(folder, index)) {
    const bool bin =
        has(folder, dir / "pytorch_model.bin") || has(folder, dir / "pytorch_model.bin.index.json");
    fail(folder,
         std::string("no model.safetensors or model.safetensors.index.json") +
             (bin ? " (only pytorch_model.bin, which is not read: save it with safe_serialization=True)"
                  : ""));
  }
  w.listing = index.filename().string();
  const json j = read_json(folder, index);
  if (!j.contains("weight_map") || !j["weight_map"].is_object() || j["weight_map"].empty())
    fail(folder, "model.safetensors.index.json has no weight_map object naming the tensors' shards");
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string())
      fail(folder, "model.safetensors.index.json: \"" + name + "\" maps to " + file.dump() +
                       ", expected a shard's file name");
    const std::string f = file.get<std::string>();
    if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
      fail(folder, "model.safetensors.index.json names a shard outside the folder: " + f);
    by_file[f].push_back(name);
  }
  for (const auto& [file, names] : by_file) {
    if (!has(folder, dir / file))
      fail(folder, "shard " + file + " (named by model.safetensors.index.json for '" + names.front() + "'" +
                       (names.size() > 1 ? " and " + std::to_string(names.size() - 1) + " more" : "") +
                       ") is missing");
    std::map<std::string, HostTensor> shard = read_file_tensors(folder, (dir / file).string(), file, w.fp8);
    for (const std::string& name : names) {
      auto it = shard.find(name);
      if (it == shard.end())
        fail(folder,
             "shard " + file + " has no tensor '" + name + "' (model.safetensors.index.json puts it there)");
      w.tensors[name] = std::move(it->second);
      w.file_of[name] = file;
      shard.erase(it);
    }
    for (auto& [name, t] : shard)  // extras: judged with the others
      if (w.tensors.try_emplace(name, std::move(t)).second) w.file_of[name] = file;
  }
  return w;
}
}  // namespace

Weights read_weights(const std::string& folder) {
  if (io::is_gguf(folder)) return gguf_weights(folder);
  Weights w = read_folder_weights(folder);
  unpack_packed_linears(w, folder);
  unpack_fp8_weights(w, folder);
  return w;
}

HostTensor transpose2d(const HostTensor& t) {
  const int64_t r = t.shape()[0], c = t.shape()[1];
  std::vector<float> out(static_cast<size_t>(r * c));
  const std::span<const float> in = t.f32();
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) out[static_cast<size_t>(j * r + i)] = in[static_cast<size_t>(i * c + j)];
  return HostTensor::f32(std::move(out), {c, r});
}

// "I32" for DType::kI32: the name the safetensors file gives it.
std::string file_dtype(DType t) {
  std::string s = dtype_name(t);
  for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

HostTensor take_tensor(const Model& m, Weights& w, const std::string& name, const Shape& want,
                       std::string& file) {
  w.materialize(name);
  auto it = w.tensors.find(name);
  if (it == w.tensors.end())
    fail(m.folder, w.listing + ": no tensor '" + name + "' (" + m.architecture + " needs it, shape " +
                       shape_str(want) + ")");
  file = w.file_of[name];
  const DType dt = it->second.dtype();
  if (dt != DType::kF32 && dt != DType::kBF16 && dt != DType::kF16)
    fail(m.folder, file + ": tensor '" + name + "' is not a float tensor (F32, BF16 or F16)");
  if (it->second.shape() != want)
    fail(m.folder, file + ": tensor '" + name + "' has shape " + shape_str(it->second.shape()) +
                       ", expected " + shape_str(want) + " (from config.json)");
  HostTensor out = it->second.to(DType::kF32);
  w.tensors.erase(it);
  return out;
}

// Fills `m.weights` for every parameter of m.module from `w` through `source_of` (the
// parameter's name → where it is in the file). Tensors of the file that no parameter takes
// are errors unless `ignorable` says otherwise. Each tensor leaves `w` as it is taken, so the
// file's copy and the f32 copy of a large model are not both held at once.
void map_weights(Model& m, Weights w, const std::function<Source(const std::string&)>& source_of,
                 const std::function<bool(const std::string&)>& ignorable) {
  // Under 4 bits, a matrix the file holds in more bits (a Q4_K_M file's Q6_K matrices, Q5 and Q8_0
  // ones) keeps 8, as llama.cpp keeps its mix of precisions; the rest take 4. A fresh module: no
  // program has allocated it yet.
  if (m.dtype == DType::kI8 && m.bits == 4)
    for (Module* sub : m.module->modules()) {
      auto* linear = dynamic_cast<nn::Linear*>(sub);
      if (linear == nullptr || linear->in_features % m.group != 0 ||
          linear->weight.path().find(".experts.") != std::string::npos)
        continue;
      const auto d = w.deferred.find(source_of(linear->weight.path()).name);
      if (d != w.deferred.end() && d->second.file_bits > 4) linear->weight.quantize_int8(m.group);
    }
  m.module->store_params_as(m.dtype, m.group, m.bits);
  for (const Param* p : m.module->parameters()) {
    if (p->scales() != nullptr) continue;  // made by quantizing the weight it scales
    const std::string path = p->path();
    const Source src = source_of(path);
    Shape want = p->shape();
    if (src.layout == Layout::kTransposed) want = {p->shape()[1], p->shape()[0]};
    if (src.layout == Layout::kSqueezeMiddle) want = {p->shape()[0], 1, p->shape()[1]};
    // A file's 4-bit matrix (GGUF's in groups of 32, GPTQ's and AWQ's in theirs) becomes a
    // 4-bit parameter of the same groups as it is, exactly.
    if (p->bits() == 4 && src.layout == Layout::kSame) {
      if (std::optional<Quantized4Tensor> q4 = w.take_int4(src.name, p->group())) {
        if (q4->q.shape() != p->stored_shape()) {
          Shape found = q4->q.shape();
          found.back() *= 2;
          fail(m.folder, w.file_of[src.name] + ": tensor '" + src.name + "' has shape " + shape_str(found) +
                             ", expected " + shape_str(want) + " (from config.json)");
        }
        m.weights[path] = std::move(q4->q);
        m.weights[p->scale()->path()] = std::move(q4->scale);
        m.weights[p->offset()->path()] = std::move(q4->offset);
        continue;
      }
    }
    w.materialize(src.name);
    auto it = w.tensors.find(src.name);
    if (it == w.tensors.end())
      fail(m.folder, w.listing + ": no tensor '" + src.name + "' (" + m.architecture + " needs it, shape " +
                         shape_str(want) + ")");
    const std::string& file = w.file_of[src.name];
    HostTensor t = std::move(it->second);
    w.tensors.erase(it);
    if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16 && t.dtype() != DType::kF16)
      fail(m.folder, file + ": tensor '" + src.name + "' is not a float tensor (F32, BF16 or F16) but " +
                         file_dtype(t.dtype()));
    if (t.shape() != want)
      fail(m.folder, file + ": tensor '" + src.name + "' has shape " + shape_str(t.shape()) + ", expected " +
                         shape_str(want) + " (from config.json)");
    // f32 for the layout changes; a matrix of the file's own half type stays as it is.
    const DType stored = p->dtype();  // as store_params_as set it
    if (t.dtype() != stored || src.layout != Layout::kSame) t = t.to(DType::kF32);
    if (src.layout == Layout::kTransposed) t = transpose2d(t);
    if (src.layout == Layout::kSqueezeMiddle) t = HostTensor::f32(std::move(t).f32(), p->shape());
    if (t.dtype() == stored) {
      m.weights[path] = std::move(t);
      continue;
    }
    if (stored == DType::kI8) {
      try {
        if (p->bits() == 4) {
          Quantized4Tensor qt = quantize_int4(t, p->group());
          m.weights[path] = std::move(qt.q);
          m.weights[p->scale()->path()] = std::move(qt.scale);
          m.weights[p->offset()->path()] = std::move(qt.offset);
        } else {
          QuantizedTensor qt = quantize_int8(t, p->group());
          m.weights[path] = std::move(qt.q);
          m.weights[p->scale()->path()] = std::move(qt.scale);
        }
      } catch (const InputError& e) {  // a weight that is not finite
        fail(m.folder, file + ": tensor '" + src.name + "' cannot be quantized: " + e.what());
      }
      continue;
    }
    HostTensor held = t.to(stored);  // from f32
    if (stored == DType::kF16) {     // f16 ends at 65504: a larger finite weight would become infinite
      const HostTensor back = held.to(DType::kF32);
      const std::span<const float> v = t.f32(), w = back.f32();
      for (size_t i = 0; i < v.size(); ++i)
        if (std::isfinite(v[i]) && !std::isfinite(w[i]))
          fail(m.folder, file + ": tensor '" + src.name + "' holds " + std::to_string(v[i]) +
                             ", beyond f16's range: load it as f32 or bf16");
    }
    m.weights[path] = std::move(held);
  }
  for (const auto& [name, t] : w.tensors) {
    if (ignorable(name)) continue;
    fail(m.folder, w.file_of[name] + ": unexpected tensor '" + name + "' " + shape_str(t.shape()) + ": " +
                       m.architecture + " as config.json describes it has no such parameter");
  }
  for (const auto& [name, d] : w.deferred) {
    if (ignorable(name)) continue;
    fail(m.folder, w.file_of[name] + ": unexpected tensor '" + name + "' " + shape_str(d.shape) + ": " +
                       m.architecture + " as config.json describes it has no such parameter");
  }
}

// A tied head's file may still hold the head; it must then equal the embedding it is tied to.
bool tied_copy_ok(const std::map<std::string, HostTensor>& file, const std::string& head,
                  const std::string& embedding) {
  auto h = file.find(head), e = file.find(embedding);
  if (h == file.end()) return true;
  if (e == file.end() || h->second.shape() != e->second.shape()) return false;
  const auto is_float = [](DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; };
  if (h->second.dtype() != e->second.dtype()) {
    if (!is_float(h->second.dtype()) || !is_float(e->second.dtype())) return false;
    return tied_copy_ok({{head, h->second.to(DType::kF32)}, {embedding, e->second.to(DType::kF32)}}, head,
                        embedding);
  }
  const auto bytes = static_cast<size_t>(h->second.numel() * dtype_size(h->second.dtype()));
  return std::memcmp(h->second.data(), e->second.data(), bytes) == 0;
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

// GPT-2: the library's name → the file's. blocks.<i>.{ln1, attn.qkv, attn.proj, ln2, fc, fc2} are
// h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}; Conv1D keeps its weight as
// [in, out], transposed to Linear's [out, in].
Source gpt2_source(const std::string& prefix, const std::string& p) {
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
  const bool conv1d = leaf == "weight" && module != "ln1" && module != "ln2";
  return {hf, conv1d ? Layout::kTransposed : Layout::kSame};
}

// Mamba and Mamba-2: backbone.<the library's name>, the embedding renamed, an untied head as it
// is; conv1d [D, K] is [D, 1, K] there.
Source mamba_source(const std::string& p) {
  if (p == "embedding.weight") return {"backbone.embeddings.weight"};
  if (p == "lm_head.weight") return {p};
  if (p.ends_with("mixer.conv1d.weight")) return {"backbone." + p, Layout::kSqueezeMiddle};
  return {"backbone." + p};
}

// ---- GPT-2 ---------------------------------------------------------------------------------
void load_gpt2(Model& m, const json& c) {
  const std::string& f = m.folder;
  nn::GptConfig g;
  g.vocab = required(c, f, "vocab_size");
  g.d_model = required(c, f, "n_embd");
  g.layers = required(c, f, "n_layer");
  g.heads = required(c, f, "n_head");
  g.seq_len = required(c, f, "n_positions");
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
  Weights file = read_weights(f);
  // Files saved from GPT2Model (the Hub's gpt2) lack the "transformer." prefix.
  std::string prefix = "transformer.";
  if (!file.tensors.count("transformer.wte.weight") && file.tensors.count("wte.weight")) prefix = "";
  if (!tied_copy_ok(file.tensors, "lm_head.weight", prefix + "wte.weight"))
    fail(f, "lm_head.weight differs from " + prefix + "wte.weight (GPT-2's head is tied to it)");
  auto source_of = [&prefix](const std::string& p) { return gpt2_source(prefix, p); };
  map_weights(m, std::move(file), source_of, [](const std::string& n) {
    return n == "lm_head.weight" || n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias");
  });
}

// ---- Mamba and Mamba-2 ------------------------------------------------------------------
// The options both read: biases, the conv's bias, a tied or untied head, the activation.
void mamba_options(nn::MambaLMConfig& mc, const json& c, const std::string& f, bool tied_by_default) {
  mc.vocab = required(c, f, "vocab_size");
  mc.d_model = required(c, f, "hidden_size");
  mc.layers = required(c, f, "num_hidden_layers");
  mc.d_conv = field<int64_t>(c, f, "conv_kernel", 4);
  mc.expand = field<int64_t>(c, f, "expand", 2);
  mc.norm_eps = field<double>(c, f, "layer_norm_epsilon", 1e-5);
  mc.bias = field<bool>(c, f, "use_bias", false);
  mc.conv_bias = field<bool>(c, f, "use_conv_bias", true);
  mc.tied_head = field<bool>(c, f, "tie_word_embeddings", tied_by_default);
  const std::string act = field<std::string>(c, f, "hidden_act", "silu");
  if (act != "silu" && act != "swish")
    fail(f, "config.json: hidden_act \"" + act + "\" (the Mamba mixers use silu)");
}

// Builds the nn::MambaLM and maps the file onto it (mamba_source's names).
void map_mamba(Model& m, const nn::MambaLMConfig& mc) {
  const std::string& f = m.folder;
  m.context = 0;
  m.config = mc;
  m.module = std::make_unique<nn::MambaLM>(mc);
  Weights file = read_weights(f);
  if (mc.tied_head && !tied_copy_ok(file.tensors, "lm_head.weight", "backbone.embeddings.weight"))
    fail(f,
         "lm_head.weight differs from backbone.embeddings.weight (tie_word_embeddings is true: the head is "
         "tied "
         "to it)");
  const bool tied = mc.tied_head;
  map_weights(m, std::move(file), mamba_source,
              [tied](const std::string& n) { return tied && n == "lm_head.weight"; });
}

void load_mamba(Model& m, const json& c) {
  const std::string& f = m.folder;
  nn::MambaLMConfig mc;
  mamba_options(mc, c, f, true);
  mc.d_state = field<int64_t>(c, f, "state_size", 16);
  const int64_t inner = field<int64_t>(c, f, "intermediate_size", mc.expand * mc.d_model);
  if (inner != mc.expand * mc.d_model)
    fail(f, "config.json: intermediate_size " + std::to_string(inner) + " is not expand · hidden_size");
  const int64_t auto_rank = (mc.d_model + 15) / 16;
  if (c.contains("time_step_rank") && c["time_step_rank"].is_number_integer() &&
      c["time_step_rank"].get<int64_t>() != auto_rank)
    fail(f, "config.json: time_step_rank " + c["time_step_rank"].dump() +
                " (nn::MambaLM uses ceil(hidden_size / 16) = " + std::to_string(auto_rank) + ")");
  map_mamba(m, mc);
}

// Mamba2ForCausalLM (transformers' Mamba2Mixer): heads of head_dim channels, B and C in n_groups.
void load_mamba2(Model& m, const json& c) {
  const std::string& f = m.folder;
  nn::MambaLMConfig mc;
  mc.version = 2;
  mamba_options(mc, c, f, false);
  mc.d_state = field<int64_t>(c, f, "state_size", 128);
  mc.head_dim = field<int64_t>(c, f, "head_dim", 64);
  mc.groups = field<int64_t>(c, f, "n_groups", 8);
  const int64_t heads = field<int64_t>(c, f, "num_heads", 128);
  if (heads * mc.head_dim != mc.expand * mc.d_model)
    fail(f, "config.json: num_heads · head_dim = " + std::to_string(heads * mc.head_dim) +
                " is not expand · hidden_size = " + std::to_string(mc.expand * mc.d_model));
  read_time_step_limit(c, f, mc.dt_limit_min, mc.dt_limit_max);
  map_mamba(m, mc);
}

struct Family {
  std::string architecture, model_type;
  void (*load)(Model&, const json&);
};
const std::vector<Family>& families() {
  static const std::vector<Family> all{
      {"LlamaForCausalLM", "llama", load_llama_family},
      {"MistralForCausalLM", "mistral", load_llama_family},
      {"Qwen2ForCausalLM", "qwen2", load_llama_family},
      {"Qwen3ForCausalLM", "qwen3", load_llama_family},
      {"Phi3ForCausalLM", "phi3", load_llama_family},
      {"GemmaForCausalLM", "gemma", load_llama_family},
      {"Gemma2ForCausalLM", "gemma2", load_llama_family},
      {"Gemma3ForCausalLM", "gemma3_text", load_llama_family},
      {"MixtralForCausalLM", "mixtral", load_llama_family},
      {"Qwen2MoeForCausalLM", "qwen2_moe", load_llama_family},
      {"Qwen3MoeForCausalLM", "qwen3_moe", load_llama_family},
      {"GraniteForCausalLM", "granite", load_llama_family},
      {"Olmo2ForCausalLM", "olmo2", load_llama_family},
      {"Olmo3ForCausalLM", "olmo3", load_llama_family},
      {"GraniteMoeHybridForCausalLM", "granitemoehybrid", load_llama_family},
      {"BambaForCausalLM", "bamba", load_llama_family},
      {"NemotronHForCausalLM", "nemotron_h", load_llama_family},
      {"GptOssForCausalLM", "gpt_oss", load_gpt_oss},
      {"GPTNeoXForCausalLM", "gpt_neox", load_layernorm_family},
      {"PhiForCausalLM", "phi", load_layernorm_family},
      {"StableLmForCausalLM", "stablelm", load_layernorm_family},
      {"Starcoder2ForCausalLM", "starcoder2", load_layernorm_family},
      {"GPT2LMHeadModel", "gpt2", load_gpt2},
      {"BertModel", "bert", load_bert_family},
      {"BertForMaskedLM", "bert", load_bert_family},
      {"RobertaModel", "roberta", load_bert_family},
      {"RobertaForMaskedLM", "roberta", load_bert_family},
      {"BertForSequenceClassification", "bert", load_bert_family},
      {"RobertaForSequenceClassification", "roberta", load_bert_family},
      {"BertForTokenClassification", "bert", load_bert_family},
      {"RobertaForTokenClassification", "roberta", load_bert_family},
      {"BertForQuestionAnswering", "bert", load_bert_family},
      {"RobertaForQuestionAnswering", "roberta", load_bert_family},
      {"XLMRobertaModel", "xlm-roberta", load_bert_family},
      {"XLMRobertaForMaskedLM", "xlm-roberta", load_bert_family},
      {"XLMRobertaForSequenceClassification", "xlm-roberta", load_bert_family},
      {"XLMRobertaForTokenClassification", "xlm-roberta", load_bert_family},
      {"XLMRobertaForQuestionAnswering", "xlm-roberta", load_bert_family},
      {"DistilBertModel", "distilbert", load_bert_family},
      {"DistilBertForMaskedLM", "distilbert", load_bert_family},
      {"DistilBertForSequenceClassification", "distilbert", load_bert_family},
      {"DistilBertForTokenClassification", "distilbert", load_bert_family},
      {"DistilBertForQuestionAnswering", "distilbert", load_bert_family},
      {"ViTModel", "vit", load_vit},
      {"ViTForImageClassification", "vit", load_vit},
      {"DeiTModel", "deit", load_vit},
      {"DeiTForImageClassification", "deit", load_vit},
      {"DeiTForImageClassificationWithTeacher", "deit", load_vit},
      {"T5ForConditionalGeneration", "t5", load_t5},
      {"T5EncoderModel", "t5", load_t5},
      {"WhisperForConditionalGeneration", "whisper", load_whisper},
      {"CLIPModel", "clip", load_clip},
      {"CLIPTextModel", "clip_text_model", load_clip},
      {"CLIPTextModelWithProjection", "clip_text_model", load_clip},
      {"CLIPVisionModel", "clip_vision_model", load_clip},
      {"CLIPVisionModelWithProjection", "clip_vision_model", load_clip},
      {"MambaForCausalLM", "mamba", load_mamba},
      {"Mamba2ForCausalLM", "mamba2", load_mamba2}};
  return all;
}

// id2label's names by index ({"0": "cat", "1": "dog"}); every index from 0 up must be there.
// A classifier's malformed id2label is an error; another model's (which reads none) is ignored.
std::vector<std::string> label_names_of(const std::string& folder, const json& c, bool classifier) {
  if (!c.contains("id2label") || !c["id2label"].is_object()) return {};
  const json& m = c["id2label"];
  std::vector<std::string> names(m.size());
  for (const auto& [key, value] : m.items()) {
    size_t end = 0;
    long index = -1;
    try {
      index = std::stol(key, &end);
    } catch (const std::exception&) {
      end = 0;
    }
    if (end != key.size() || index < 0 || static_cast<size_t>(index) >= names.size() || !value.is_string()) {
      if (!classifier) return {};
      fail(folder, "config.json: id2label's entry \"" + key + "\": " + value.dump() +
                       " (expected names for the indices 0 to " + std::to_string(names.size() - 1) + ")");
    }
    names[static_cast<size_t>(index)] = value.get<std::string>();
  }
  return names;
}

// The family config.json names: architectures[0], else its model_type's.
const Family& family_of(const std::string& folder, const json& c) {
  std::string arch;
  if (c.contains("architectures") && !c["architectures"].is_null()) {
    const json& a = c["architectures"];
    if (!a.is_array() || (!a.empty() && !a[0].is_string()))
      fail(folder, "config.json: \"architectures\" is " + a.dump() +
                       ", expected a list of class names such as [\"LlamaForCausalLM\"]");
    if (!a.empty()) arch = a[0].get<std::string>();
  }
  const std::string type = field<std::string>(c, folder, "model_type", "");
  for (const Family& f : families())
    if (arch.empty() ? f.model_type == type : f.architecture == arch) return f;
  std::string names;
  for (const std::string& a : architectures()) names += (names.empty() ? "" : ", ") + a;
  if (arch.empty() && type.empty())
    fail(folder,
         "config.json names no architecture (neither \"architectures\" nor \"model_type\"); supported: " +
             names);
  fail(folder, "config.json names the architecture " +
                   (arch.empty() ? "by model_type \"" + type + "\"" : "\"" + arch + "\"") +
                   ", which is not supported; supported: " + names);
}

}  // namespace detail

using namespace detail;

std::vector<std::string> architectures() {
  std::vector<std::string> out;
  for (const Family& f : families()) out.push_back(f.architecture);
  return out;
}

Model load(const std::string& folder, const LoadOptions& options) {
  if (options.dtype != DType::kF32 && !is_half(options.dtype) && options.dtype != DType::kI8)
    fail(folder, std::string("LoadOptions::dtype is ") + dtype_name(options.dtype) +
                     "; models load as f32, bf16, f16 or i8 (quantized)");
  if (options.dtype == DType::kI8 && options.group < 0)
    fail(folder, "LoadOptions::group is " + std::to_string(options.group) +
                     "; it must be positive, or 0 for the file's groups");
  if (options.bits != 8 && options.bits != 4)
    fail(folder,
         "LoadOptions::bits is " + std::to_string(options.bits) + "; weights quantize to 8 or 4 bits");
  if (options.bits == 4 && options.dtype != DType::kI8)
    fail(folder, std::string("LoadOptions::bits is 4 with .dtype ") + dtype_name(options.dtype) +
                     "; 4 bits are a quantization: set .dtype = DType::kI8 too");
  const fs::path dir(folder);
  std::error_code ec;
  const bool gguf = io::is_gguf(folder);
  if (!gguf && !fs::is_directory(dir, ec)) {
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
      fail(folder, "cannot look at the folder: " + ec.message());
    fail(folder, fs::exists(dir, ec) ? "neither a folder nor a GGUF file" : "no such folder or file");
  }
  if (!gguf && !has(folder, dir / "config.json"))
    fail(folder, "no config.json (a Hugging Face model folder has one)");
  const json c = gguf ? gguf_config(folder) : read_json(folder, dir / "config.json");
  if (!c.is_object()) fail(folder, "config.json is not a JSON object");
  const Family& family = family_of(folder, c);
  const std::optional<PackedScheme> packed = family.architecture != "GptOssForCausalLM"
                                                 ? packed_scheme(c, folder)
                                                 : std::nullopt;  // gpt-oss reads its own
  // Group 0: a GPTQ or AWQ file's own groups (its 4-bit codes then load as they are), else 32.
  const int64_t group = options.group > 0 ? options.group : packed && packed->group > 0 ? packed->group : 32;
  if (options.bits == 4 && group % 2 != 0)
    fail(folder, "LoadOptions::group is " + std::to_string(group) + "; 4 bits need an even group");
  Model m;
  m.folder = folder;
  m.architecture = family.architecture;
  m.eos_ids = eos_of(c);
  m.label_names = label_names_of(folder, c, family.architecture.find("Classification") != std::string::npos);
  m.config_json = c.dump(2);
  m.dtype = options.dtype;  // map_weights converts each matrix as it is taken
  m.group = group;
  m.bits = options.bits;
  try {
    family.load(m, c);
  } catch (const CheckpointError&) {
    throw;
  } catch (const Error& e) {  // the model's own checks of the sizes config.json gives it
    fail(folder, "config.json describes a " + m.architecture + " the library cannot build: " + e.what());
  }
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
        if constexpr (std::is_same_v<C, nn::BertConfig>) {
          const auto& bert = static_cast<const nn::Bert&>(*module);
          if (c.labels > 0) return bert.classify(bert.hidden(ids));
          if (c.qa_head) return bert.answer_span(bert.hidden(ids));
          if (!c.mlm_head)
            throw Error("[pretrained::Model] " + architecture +
                        " has no language-model head: use nn::Bert::hidden (and pooled) for its outputs");
          return bert.mlm_logits(bert.hidden(ids));
        }
        if constexpr (std::is_same_v<C, nn::ViTConfig>) {
          const auto& vit = static_cast<const nn::ViT&>(*module);
          if (c.labels == 0)
            throw Error("[pretrained::Model] " + architecture +
                        " has no classifier: use nn::ViT::hidden (and pooled) for its outputs");
          return vit.classify(vit.hidden(ids));
        }
        if constexpr (std::is_same_v<C, nn::ClipConfig>) {
          throw Error("[pretrained::Model] " + architecture +
                      " takes texts and images: use nn::Clip's text_features, image_features and "
                      "logits_per_image");
        }
        if constexpr (std::is_same_v<C, nn::T5Config>) {
          throw Error("[pretrained::Model] " + architecture +
                      " is a T5: use nn::T5's encode, decode and logits (and tg::T5Generator to decode)");
        }
        if constexpr (std::is_same_v<C, nn::WhisperConfig>) {
          throw Error(
              "[pretrained::Model] " + architecture +
              " reads audio: use nn::Whisper's encode, decode and logits (and tg::WhisperGenerator to "
              "transcribe)");
        }
      },
      config);
}

CachedLm Model::step() const {
  if (std::holds_alternative<nn::BertConfig>(config) || std::holds_alternative<nn::ViTConfig>(config) ||
      std::holds_alternative<nn::ClipConfig>(config) || std::holds_alternative<nn::T5Config>(config) ||
      std::holds_alternative<nn::WhisperConfig>(config))
    throw Error(
        "[pretrained::Model] " + architecture +
        " has no cached step to generate with (an encoder, CLIP, T5 or Whisper: see tg::T5Generator and "
        "tg::WhisperGenerator)");
  const Module* mod = module.get();
  return std::visit(
      [mod](const auto& c) -> CachedLm {
        using C = std::decay_t<decltype(c)>;
        using M =
            std::conditional_t<std::is_same_v<C, nn::LlamaConfig>, nn::Llama,
                               std::conditional_t<std::is_same_v<C, nn::GptConfig>, nn::Gpt, nn::MambaLM>>;
        if constexpr (std::is_same_v<C, nn::BertConfig> || std::is_same_v<C, nn::ViTConfig> ||
                      std::is_same_v<C, nn::ClipConfig> || std::is_same_v<C, nn::T5Config> ||
                      std::is_same_v<C, nn::WhisperConfig>) {
          return {};  // refused above
        } else {
          const M* model = static_cast<const M*>(mod);
          return [model](const Tensor& ids, const Tensor& pos, int64_t cache_len) {
            return model->logits_cached(ids, pos, cache_len);
          };
        }
      },
      config);
}

}  // namespace tg::pretrained
