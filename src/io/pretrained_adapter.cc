// tg::pretrained::load_adapter and save_adapter: PEFT's LoRA adapter folders over a model of
// tg::pretrained. An adapter names a transformers module; which of the library's Linears (and
// which of their rows) that module is, is found by tracing: save()'s own mapping of parameters to
// file tensors (file_tensors) is run over labels, a tensor per parameter whose row i holds the
// number of (parameter, i). Every family's renames, Conv1D transposes and fused projections are
// so read from the one place that defines them.
// GCC 12 at -O1 with the sanitizers sees std::regex's std::function "maybe uninitialized" inside
// libstdc++ (a false positive): off for this file, before <regex> is read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "io/atomic_file.h"
#include "io/pretrained_internal.h"
#include "tensorgrad/checkpoint.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/nn.h"
#include "tensorgrad/quantize.h"

namespace tg::pretrained {
namespace detail {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

const std::string kPrefix = "base_model.model.";  // PeftModel's, before the transformers names

[[noreturn]] void load_fail(const std::string& folder, const std::string& what) {
  throw CheckpointError("[pretrained::load_adapter] " + folder + ": " + what);
}
[[noreturn]] void adapter_save_fail(const std::string& folder, const std::string& what) {
  throw CheckpointError("[pretrained::save_adapter] " + folder + ": " + what);
}

bool is_adapter_param(const std::string& path) {
  return path.ends_with(".lora_A.weight") || path.ends_with(".lora_B.weight");
}

// Where one row of a file tensor comes from.
struct Origin {
  const Param* param;
  int64_t row;
  bool operator==(const Origin&) const = default;
};
struct Traced {
  std::vector<Origin> rows;  // the file tensor's rows: for a transposed one, its columns
  bool transposed = false;   // GPT-2's Conv1D: the file holds the weight as [in, out]
};

// Label of the n-th row of a 2-D parameter: [2·(n / 4096) + 1, −(n mod 4096 + 1)], odd and positive
// then negative, exact in f32 up to 2^35 rows, and a transposed copy [2, rows] tells itself apart
// from [rows, 2]. The n-th element of a 1-D parameter is n + 1.
constexpr int64_t kLow = 4096;

// Every file tensor of m.architecture whose rows are rows of the model's parameters. Only rows
// are traced: file_tensors moves whole rows (renames, transposes, fusions by rows), never an
// input column, so an adapter's A applies to a Linear as it applies to the file's module.
std::map<std::string, Traced> trace_rows(const Model& m) {
  std::vector<Origin> rows2, rows1;
  std::map<std::string, HostTensor> labels;
  for (const Param* p : m.module->parameters()) {
    if (p->scales() != nullptr || is_adapter_param(p->path())) continue;
    const Shape& s = p->shape();
    std::vector<float> v;
    if (s.size() == 2) {
      for (int64_t i = 0; i < s[0]; ++i) {
        const auto n = static_cast<int64_t>(rows2.size());
        rows2.push_back({p, i});
        v.insert(v.end(), {static_cast<float>(2 * (n / kLow) + 1), -static_cast<float>(n % kLow + 1)});
      }
      labels[p->path()] = HostTensor::f32(std::move(v), {s[0], 2});
      continue;
    }
    if (s.size() == 1)
      for (int64_t i = 0; i < s[0]; ++i) {
        rows1.push_back({p, i});
        v.push_back(static_cast<float>(rows1.size()));
      }
    else
      v.assign(static_cast<size_t>(numel(s)), 0.0f);  // not traced
    labels[p->path()] = HostTensor::f32(std::move(v), s);
  }
  if (rows1.size() >= (size_t(1) << 24))  // f32 counts exactly to 2^24
    throw CheckpointError("[pretrained] " + m.folder + ": too many vector elements to map adapters onto");
  const auto odd = [](float x) { return x >= 1 && std::fmod(x, 2.0f) == 1.0f && x < 16777216.0f; };
  const auto row2 = [&](float hi, float lo, Traced& t) {
    if (!odd(hi) || !(lo <= -1 && lo >= -static_cast<float>(kLow))) return false;
    const int64_t n = (static_cast<int64_t>(hi) - 1) / 2 * kLow + (static_cast<int64_t>(-lo) - 1);
    if (n >= static_cast<int64_t>(rows2.size())) return false;
    t.rows.push_back(rows2[static_cast<size_t>(n)]);
    return true;
  };
  std::map<std::string, Traced> out;
  for (const auto& [name, t] : file_tensors(m, std::move(labels))) {
    const std::span<const float> v = t.f32();
    const Shape& s = t.shape();
    Traced tr;
    bool ok = false;
    if (s.size() == 2 && s[1] == 2) {
      ok = true;
      for (int64_t i = 0; ok && i < s[0]; ++i) ok = row2(v[size_t(2 * i)], v[size_t(2 * i + 1)], tr);
    }
    if (!ok && s.size() == 2 && s[0] == 2) {
      tr = Traced{{}, true};
      ok = true;
      for (int64_t j = 0; ok && j < s[1]; ++j) ok = row2(v[size_t(j)], v[size_t(s[1] + j)], tr);
    }
    if (s.size() == 1) {
      ok = true;
      for (const float x : v) {
        const auto n = static_cast<int64_t>(x) - 1;
        ok = ok && x == std::floor(x) && n >= 0 && n < static_cast<int64_t>(rows1.size());
        if (ok) tr.rows.push_back(rows1[static_cast<size_t>(n)]);
      }
    }
    if (ok && !tr.rows.empty()) out[name] = std::move(tr);
  }
  return out;
}

// Every nn::Linear of the model by its weight.
std::map<const Param*, nn::Linear*> linears_by_weight(Module& model) {
  std::map<const Param*, nn::Linear*> out;
  for (Module* sub : model.modules())
    if (auto* l = dynamic_cast<nn::Linear*>(sub)) out[&l->weight] = l;
  return out;
}

// The one parameter a file tensor is, rows in order; nullptr when it is parts of several.
const Param* whole_param(const Traced& t) {
  const Param* p = t.rows.front().param;
  if (static_cast<int64_t>(t.rows.size()) != p->shape()[0]) return nullptr;
  for (size_t i = 0; i < t.rows.size(); ++i)
    if (t.rows[i] != Origin{p, static_cast<int64_t>(i)}) return nullptr;
  return p;
}

// `value` (f32, the parameter's shape) in the form m.weights holds `p` in (Module::store_params_as).
void store_as_param(const Param& p, HostTensor value, std::map<std::string, HostTensor>& weights) {
  if (p.dtype() == DType::kI8 && p.scale() != nullptr) {
    if (p.bits() == 4) {
      Quantized4Tensor q = quantize_int4(value, p.group());
      weights[p.offset()->path()] = std::move(q.offset);
      weights[p.scale()->path()] = std::move(q.scale);
      weights[p.path()] = std::move(q.q);
    } else {
      QuantizedTensor q = quantize_int8(value, p.group());
      weights[p.scale()->path()] = std::move(q.scale);
      weights[p.path()] = std::move(q.q);
    }
    return;
  }
  weights[p.path()] = p.dtype() == DType::kF32 ? std::move(value) : value.to(p.dtype());
}

// PEFT's reading of rank_pattern and alpha_pattern: the first key that is the module's name or a
// regular expression matching its end after a dot.
template <typename T>
T by_pattern(const ordered_json& patterns, const std::string& module, T fallback, const std::string& folder) {
  if (!patterns.is_object()) return fallback;
  for (const auto& [key, value] : patterns.items()) {
    bool hit = key == module;
    if (!hit) try {
        hit = std::regex_match(module, std::regex("(.*\\.)?(" + key + ")"));
      } catch (const std::regex_error&) {
        load_fail(folder, "adapter_config.json: the pattern \"" + key + "\" is not a regular expression");
      }
    if (!hit) continue;
    if (std::is_integral_v<T> ? !value.is_number_integer() : !value.is_number())
      load_fail(folder, "adapter_config.json: the pattern \"" + key + "\" gives " + value.dump() + ", not " +
                            (std::is_integral_v<T> ? "an integer" : "a number"));
    return value.template get<T>();
  }
  return fallback;
}

// A config field of type T, `fallback` when missing or null.
template <typename T>
T config_field(const ordered_json& c, const std::string& folder, const char* key, T fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  if (!has_type<T>(c[key]))
    load_fail(folder, std::string("adapter_config.json: \"") + key + "\" is " + c[key].dump() +
                          ", expected " + type_name<T>());
  return c[key].get<T>();
}

HostTensor float_tensor(const std::string& folder, const std::string& name, const HostTensor& t,
                        size_t rank) {
  const DType d = t.dtype();
  if (d != DType::kF32 && d != DType::kBF16 && d != DType::kF16)
    load_fail(folder,
              "adapter_model.safetensors: '" + name + "' is " + dtype_name(d) + ", not a float tensor");
  if (t.shape().size() != rank)
    load_fail(folder, "adapter_model.safetensors: '" + name + "' has shape " + shape_str(t.shape()) +
                          ", expected " + std::to_string(rank) + " dimensions");
  return t.to(DType::kF32);
}

// The rows `rows` of a 2-D f32 tensor, in that order.
HostTensor take_rows(const HostTensor& t, const std::vector<int64_t>& rows) {
  const int64_t d = t.shape()[1];
  const std::span<const float> v = t.f32();
  std::vector<float> out;
  out.reserve(rows.size() * size_t(d));
  for (const int64_t r : rows) out.insert(out.end(), v.begin() + r * d, v.begin() + (r + 1) * d);
  return HostTensor::f32(std::move(out), {static_cast<int64_t>(rows.size()), d});
}

// Variants of LoRA that compute something else, which the library does not run.
void refuse_variants(const ordered_json& c, const std::string& folder) {
  for (const char* key : {"use_dora", "lora_bias", "use_qalora", "use_bdlora"})
    if (c.contains(key) && c[key].is_boolean() && c[key].get<bool>())
      load_fail(folder, std::string("adapter_config.json: \"") + key +
                            "\" is true; the library runs plain LoRA adapters only");
  for (const char* key :
       {"layer_replication", "target_parameters", "alora_invocation_tokens", "trainable_token_indices",
        "arrow_config", "kasa_config", "monteclora_config", "velora_config"})
    if (c.contains(key) && !c[key].is_null() && !c[key].empty() &&
        !(c[key].is_boolean() && !c[key].get<bool>()))
      load_fail(folder, std::string("adapter_config.json: \"") + key +
                            "\" is set; the library runs plain LoRA adapters only");
}

// One Linear's adapter as the file gives it.
struct Adapter {
  nn::Linear* linear;
  int64_t rank;
  double alpha;  // the library's: alpha / rank is the file's scaling
  HostTensor A, B;
};

// adapter_config.json's fields that change what the adapter computes.
struct AdapterConfig {
  ordered_json json;
  int64_t r;
  double alpha, dropout;
  bool rslora;
};

AdapterConfig read_adapter_config(const std::string& folder) {
  const fs::path dir(folder);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) load_fail(folder, "is not a folder");
  if (!fs::is_regular_file(dir / "adapter_config.json", ec))
    load_fail(folder,
              std::string("no adapter_config.json (a PEFT adapter folder holds adapter_config.json and "
                          "adapter_model.safetensors)") +
                  (fs::is_regular_file(dir / "config.json", ec) ? "; it looks like a model folder, "
                                                                  "which pretrained::load reads"
                                                                : ""));
  ordered_json c;
  {
    std::ifstream in(dir / "adapter_config.json");
    std::stringstream text;
    text << in.rdbuf();
    try {
      c = ordered_json::parse(text.str());
    } catch (const ordered_json::exception& e) {
      load_fail(folder, std::string("adapter_config.json is not valid JSON: ") + e.what());
    }
  }
  if (!c.is_object()) load_fail(folder, "adapter_config.json is not a JSON object");
  const std::string type = config_field<std::string>(c, folder, "peft_type", "");
  if (type != "LORA")
    load_fail(folder,
              "adapter_config.json: peft_type is \"" + type + "\"; only LoRA adapters (\"LORA\") are read");
  refuse_variants(c, folder);
  const auto r_default = config_field<int64_t>(c, folder, "r", 8);
  const auto alpha_default = config_field<double>(c, folder, "lora_alpha", 8.0);
  const bool rslora = config_field<bool>(c, folder, "use_rslora", false);
  const auto dropout = config_field<double>(c, folder, "lora_dropout", 0.0);
  if (!(dropout >= 0 && dropout < 1))
    load_fail(folder, "adapter_config.json: lora_dropout must be in [0, 1)");

  return {c, r_default, alpha_default, dropout, rslora};
}

// adapter_model.safetensors: each module's lora_A and lora_B (by the transformers module name), and
// the tensors trained in full (modules_to_save, trained biases) by their names.
struct AdapterTensors {
  std::map<std::string, std::pair<std::optional<HostTensor>, std::optional<HostTensor>>> modules;
  std::map<std::string, HostTensor> replaced;
};

AdapterTensors read_adapter_tensors(const std::string& folder) {
  const fs::path dir(folder);
  std::error_code ec;
  AdapterTensors out;
  auto& [modules, replaced] = out;
  const fs::path file = dir / "adapter_model.safetensors";
  if (!fs::is_regular_file(file, ec))
    load_fail(folder,
              fs::is_regular_file(dir / "adapter_model.bin", ec)
                  ? "holds adapter_model.bin, a pickle the library does not read: save the adapter with "
                    "safe_serialization=True (adapter_model.safetensors)"
                  : "no adapter_model.safetensors");
  for (auto& [key, t] : read_safetensors(file.string())) {
    if (!key.starts_with(kPrefix))
      load_fail(folder,
                "adapter_model.safetensors: '" + key + "' is not under \"" + kPrefix + "\" as PEFT saves");
    const std::string name = key.substr(kPrefix.size());
    if (name.find("lora_embedding_") != std::string::npos)
      load_fail(folder,
                "adapter_model.safetensors: '" + key + "' adapts an embedding; the library adapts Linears");
    if (name.find("lora_magnitude_vector") != std::string::npos)
      load_fail(folder, "adapter_model.safetensors: '" + key + "' is DoRA's; the library runs plain LoRA");
    for (const char* part : {".lora_A.weight", ".lora_B.weight"})
      if (name.ends_with(part)) {
        const std::string module = name.substr(0, name.size() - std::strlen(part));
        auto& slot = std::string(part) == ".lora_A.weight" ? modules[module].first : modules[module].second;
        slot = float_tensor(folder, key, t, 2);
      }
    if (name.find(".lora_") != std::string::npos) {
      if (!is_adapter_param(name))
        load_fail(folder,
                  "adapter_model.safetensors: '" + key + "' is no tensor of a LoRA adapter the library runs");
      continue;
    }
    replaced[name] = std::move(t);
  }
  return out;
}

// Each adapted module's adapter on the Linears it maps to: every part of a fused module takes the
// module's A and its rows of B. Checked whole before the model changes.
std::vector<Adapter> adapters_of(
    const Model& m, const AdapterConfig& config,
    const std::map<std::string, std::pair<std::optional<HostTensor>, std::optional<HostTensor>>>& modules,
    const std::map<std::string, Traced>& trace, const std::string& folder) {
  const std::map<const Param*, nn::Linear*> linears = linears_by_weight(*m.module);
  const ordered_json none = ordered_json::object();
  const ordered_json& c = config.json;
  const ordered_json& ranks = c.contains("rank_pattern") ? c["rank_pattern"] : none;
  const ordered_json& alphas = c.contains("alpha_pattern") ? c["alpha_pattern"] : none;
  std::vector<Adapter> adapters;
  std::set<const nn::Linear*> taken;
  for (const auto& [module, ab] : modules) {
    if (!ab.first || !ab.second)
      load_fail(folder, "adapter_model.safetensors: '" + module + "' has lora_" + (ab.first ? "A" : "B") +
                            " without its lora_" + (ab.first ? "B" : "A"));
    const HostTensor &A = *ab.first, &B = *ab.second;
    const int64_t r = A.shape()[0];
    if (r < 1) load_fail(folder, "adapter_model.safetensors: '" + module + ".lora_A.weight' has rank 0");
    if (B.shape()[1] != r)
      load_fail(folder, "adapter_model.safetensors: '" + module + ".lora_B.weight' has shape " +
                            shape_str(B.shape()) + ", but its lora_A has rank " + std::to_string(r));
    if (const auto want = by_pattern<int64_t>(ranks, module, config.r, folder); want != r)
      load_fail(folder, "adapter_config.json gives '" + module + "' rank " + std::to_string(want) +
                            ", but its lora_A has " + std::to_string(r) + " rows");
    const auto alpha = by_pattern<double>(alphas, module, config.alpha, folder);
    if (!std::isfinite(alpha))
      load_fail(folder, "adapter_config.json: the alpha of '" + module + "' is not finite");
    const double scale =
        config.rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
    const auto t = trace.find(module + ".weight");
    if (t == trace.end())
      load_fail(folder, "the adapter adapts '" + module + "', which " + m.architecture + " has no weight '" +
                            module + ".weight' for");
    if (B.shape()[0] != static_cast<int64_t>(t->second.rows.size()))
      load_fail(folder, "adapter_model.safetensors: '" + module + ".lora_B.weight' has shape " +
                            shape_str(B.shape()) + ", expected [" + std::to_string(t->second.rows.size()) +
                            ", " + std::to_string(r) + "]");
    // Rows of the module's output by the Linear (and row) they are, in the order they appear.
    std::vector<std::pair<nn::Linear*, std::vector<int64_t>>> parts;
    for (size_t j = 0; j < t->second.rows.size(); ++j) {
      const Origin& o = t->second.rows[j];
      const auto l = linears.find(o.param);
      if (l == linears.end())
        load_fail(folder, "the adapter adapts '" + module + "', which is no nn::Linear of the library's " +
                              m.architecture + " (its weight is '" + o.param->path() + "')");
      auto part =
          std::find_if(parts.begin(), parts.end(), [&](const auto& p) { return p.first == l->second; });
      if (part == parts.end())
        part =
            parts.insert(parts.end(), {l->second, std::vector<int64_t>(size_t(l->second->out_features), -1)});
      part->second[static_cast<size_t>(o.row)] = static_cast<int64_t>(j);
    }
    for (auto& [linear, rows] : parts) {
      if (std::find(rows.begin(), rows.end(), -1) != rows.end())
        load_fail(folder, "'" + module + "' holds only some rows of the library's '" + linear->path() + "'");
      if (A.shape()[1] != linear->in_features)
        load_fail(folder, "adapter_model.safetensors: '" + module + ".lora_A.weight' has shape " +
                              shape_str(A.shape()) + ", expected [" + std::to_string(r) + ", " +
                              std::to_string(linear->in_features) + "]");
      if (linear->lora() != nullptr || !taken.insert(linear).second)
        load_fail(folder,
                  "'" + linear->path() + "' has a LoRA adapter already (merge it or load a fresh model)");
      adapters.push_back({linear, r, scale * static_cast<double>(r), A, take_rows(B, rows)});
    }
  }
  return adapters;
}

// The adapted Linear's weight with the adapter folded in, f32: W + (alpha/r)·B·A, the sum in double.
HostTensor merged_weight(const Model& m, const Adapter& a, const std::string& folder) {
  const Param& w = a.linear->weight;
  const auto it = m.weights.find(w.path());
  if (it == m.weights.end()) load_fail(folder, "merge: the Model's weights hold no '" + w.path() + "'");
  HostTensor out = it->second.dtype() == DType::kI8
                       ? dequantize_param(w.path(), w.bits() == 4 ? 4 : 8, it->second, m.weights)
                       : it->second.to(DType::kF32);
  const int64_t rows = a.linear->out_features, cols = a.linear->in_features, r = a.rank;
  const std::span<const float> A = a.A.f32(), B = a.B.f32();
  const std::span<float> W = out.f32();
  const double s = a.alpha / static_cast<double>(r);
  for (int64_t o = 0; o < rows; ++o)
    for (int64_t i = 0; i < cols; ++i) {
      double acc = 0;
      for (int64_t k = 0; k < r; ++k) acc += double(B[size_t(o * r + k)]) * double(A[size_t(k * cols + i)]);
      W[size_t(o * cols + i)] = static_cast<float>(double(W[size_t(o * cols + i)]) + s * acc);
    }
  return out;
}

}  // namespace
}  // namespace detail

using namespace detail;

std::vector<std::string> load_adapter(Model& m, const std::string& folder,
                                      const AdapterLoadOptions& options) {
  if (!m.module) load_fail(folder, "the Model has no module (load() builds one)");
  const AdapterConfig config = read_adapter_config(folder);
  AdapterTensors file = read_adapter_tensors(folder);
  auto& [modules, replaced] = file;
  if (modules.empty() && replaced.empty()) load_fail(folder, "adapter_model.safetensors holds no adapter");

  const std::map<std::string, Traced> trace = trace_rows(m);
  std::vector<Adapter> adapters = adapters_of(m, config, modules, trace, folder);
  // Tensors trained in full: each must be one parameter of the model, whole.
  std::vector<std::pair<const Param*, HostTensor>> values;
  for (auto& [name, t] : replaced) {
    const auto tr = trace.find(name);
    const Param* p = tr == trace.end() ? nullptr : whole_param(tr->second);
    if (p == nullptr)
      load_fail(folder, "adapter_model.safetensors: '" + kPrefix + name +
                            "' (trained in full: modules_to_save) is " +
                            (tr == trace.end() ? "no tensor of " + m.architecture
                                               : "not one parameter of the library's " + m.architecture));
    HostTensor v = float_tensor(folder, kPrefix + name, t, p->shape().size());
    if (tr->second.transposed) v = transpose2d(v);
    if (v.shape() != p->shape())
      load_fail(folder, "adapter_model.safetensors: '" + kPrefix + name + "' has shape " +
                            shape_str(t.shape()) + ", the model's is " + shape_str(p->shape()));
    values.emplace_back(p, std::move(v));
  }
  // Merged: W + (alpha/r)·B·A of each adapter, computed whole before anything is stored.
  std::vector<std::pair<const Param*, HostTensor>> merged;
  if (options.merge)
    for (const Adapter& a : adapters) merged.emplace_back(&a.linear->weight, merged_weight(m, a, folder));

  // Every check passed: now change the model.
  for (auto& [p, v] : values) store_as_param(*p, std::move(v), m.weights);
  std::vector<std::string> paths;
  for (Adapter& a : adapters) paths.push_back(a.linear->path());
  if (options.merge) {
    for (auto& [p, v] : merged) store_as_param(*p, std::move(v), m.weights);
    return paths;
  }
  for (Adapter& a : adapters) {
    nn::attach_lora(*a.linear, a.rank, a.alpha, config.dropout);
    m.weights[a.linear->lora()->A.path()] = std::move(a.A);
    m.weights[a.linear->lora()->B.path()] = std::move(a.B);
  }
  return paths;
}

namespace detail {
namespace {

// PEFT's task_type for a transformers class (null: PeftModel itself).
ordered_json task_type_of(const std::string& architecture) {
  if (architecture.ends_with("ForCausalLM") || architecture.ends_with("LMHeadModel")) return "CAUSAL_LM";
  if (architecture.ends_with("ForConditionalGeneration")) return "SEQ_2_SEQ_LM";
  if (architecture.ends_with("ForSequenceClassification")) return "SEQ_CLS";
  if (architecture.ends_with("ForTokenClassification")) return "TOKEN_CLS";
  if (architecture.ends_with("ForQuestionAnswering")) return "QUESTION_ANS";
  return nullptr;
}

using ByWeight = std::map<const Param*, const nn::Linear*>;                     // adapted Linears
using Values = std::map<const nn::Linear*, std::pair<HostTensor, HostTensor>>;  // their A and B, f32

// An adapter of one module of the file.
struct FileAdapter {
  std::string module;
  int64_t rank;
  double alpha;  // PEFT's: alpha / rank is the scaling
  HostTensor A, B;
};

// The adapter of a module of the file fused from several Linears (`parts`: the adapted ones, in
// order). Parts that all share one A (as load_adapter gives them) keep it, their B rows side by
// side; otherwise A stacks the parts' and B is block-diagonal, each part's scaling folded into its
// block, which sums the same terms at the rank of their sum.
FileAdapter fused_adapter(const std::string& module, const Traced& t,
                          const std::vector<const nn::Linear*>& parts, const ByWeight& adapted,
                          const Values& ab) {
  const nn::Linear* first = parts.front();
  const auto rows = static_cast<int64_t>(t.rows.size());
  // Parts sharing one A: that A, B by rows.
  std::set<const Param*> distinct;
  for (const Origin& o : t.rows) distinct.insert(o.param);
  bool shared = distinct.size() == parts.size();
  for (const nn::Linear* l : parts)
    shared = shared && l->lora()->rank == first->lora()->rank && l->lora()->alpha == first->lora()->alpha &&
             std::equal(ab.at(l).first.f32().begin(), ab.at(l).first.f32().end(),
                        ab.at(first).first.f32().begin());
  if (shared) {
    std::vector<float> b;
    for (const Origin& o : t.rows) {
      const std::span<const float> v = ab.at(adapted.at(o.param)).second.f32();
      const int64_t r = first->lora()->rank;
      b.insert(b.end(), v.begin() + o.row * r, v.begin() + (o.row + 1) * r);
    }
    return {module, first->lora()->rank, first->lora()->alpha, ab.at(first).first,
            HostTensor::f32(std::move(b), {rows, first->lora()->rank})};
  }
  // Otherwise A stacked, B block-diagonal, each part's scaling folded into its block (relative to
  // the first part's, or absolutely when that is 0).
  const double scale = first->lora()->scale() != 0 ? first->lora()->scale() : 1.0;
  int64_t rank = 0;
  std::map<const nn::Linear*, int64_t> offset;
  std::vector<float> a;
  for (const nn::Linear* l : parts) {
    offset[l] = rank;
    rank += l->lora()->rank;
    const std::span<const float> v = ab.at(l).first.f32();
    a.insert(a.end(), v.begin(), v.end());
  }
  std::vector<float> b(size_t(rows * rank), 0.0f);
  for (int64_t j = 0; j < rows; ++j) {
    const Origin& o = t.rows[size_t(j)];
    const auto l = adapted.find(o.param);
    if (l == adapted.end()) continue;  // a part without an adapter: zero rows
    const nn::LoRA& lora = *l->second->lora();
    const std::span<const float> v = ab.at(l->second).second.f32();
    const double fold = lora.scale() / scale;
    for (int64_t k = 0; k < lora.rank; ++k)
      b[size_t(j * rank + offset[l->second] + k)] =
          static_cast<float>(fold * v[size_t(o.row * lora.rank + k)]);
  }
  return {module, rank, scale * static_cast<double>(rank),
          HostTensor::f32(std::move(a), {rank, first->in_features}),
          HostTensor::f32(std::move(b), {rows, rank})};
}

// `p`'s value in `weights` as f32: present, and a float tensor of its shape (a quantized weight's
// integers are not its values).
HostTensor value_of(const std::map<std::string, HostTensor>& weights, const Param& p,
                    const std::string& folder) {
  const auto it = weights.find(p.path());
  if (it == weights.end()) adapter_save_fail(folder, "no value for '" + p.path() + "' in the weights given");
  if (it->second.shape() != p.shape() || !(it->second.dtype() == DType::kF32 || is_half(it->second.dtype())))
    adapter_save_fail(folder, "'" + p.path() + "' is " + dtype_name(it->second.dtype()) +
                                  shape_str(it->second.shape()) + ", expected a float tensor " +
                                  shape_str(p.shape()));
  return it->second.to(DType::kF32);
}

ordered_json number(double x) {
  if (x == std::floor(x) && std::abs(x) < 1e15) return static_cast<int64_t>(x);
  return x;
}

}  // namespace
}  // namespace detail

void save_adapter(const Model& m, const std::map<std::string, HostTensor>& weights, const std::string& folder,
                  const AdapterSaveOptions& options) {
  if (!m.module) adapter_save_fail(folder, "the Model has no module (load() or from_config() builds one)");
  if (options.dtype != DType::kF32 && options.dtype != DType::kBF16 && options.dtype != DType::kF16)
    adapter_save_fail(folder, std::string("AdapterSaveOptions::dtype ") + dtype_name(options.dtype) +
                                  ": expected f32, bf16 or f16");
  // The adapters' values, f32, by Linear.
  ByWeight adapted;
  Values ab;
  for (const auto& [w, l] : linears_by_weight(*m.module)) {
    if (l->lora() == nullptr) continue;
    adapted[w] = l;
    ab[l] = {value_of(weights, l->lora()->A, folder), value_of(weights, l->lora()->B, folder)};
  }
  if (adapted.empty())
    adapter_save_fail(folder, "the model has no LoRA adapters (nn::add_lora or load_adapter attaches them)");

  std::vector<FileAdapter> out;
  std::set<const nn::Linear*> placed;
  bool transposed = false;
  std::set<std::string> matrices;  // every module of the file with a traced weight
  const std::map<std::string, Traced> traced = trace_rows(m);
  for (const auto& [name, t] : traced) {
    if (!name.ends_with(".weight")) continue;
    const std::string module = name.substr(0, name.size() - 7);
    matrices.insert(module);
    std::vector<const nn::Linear*> parts;  // the adapted Linears among its rows, in order
    for (const Origin& o : t.rows)
      if (const auto l = adapted.find(o.param);
          l != adapted.end() && std::find(parts.begin(), parts.end(), l->second) == parts.end())
        parts.push_back(l->second);
    if (parts.empty()) continue;
    transposed = transposed || t.transposed;
    placed.insert(parts.begin(), parts.end());
    const nn::Linear* first = parts.front();
    if (whole_param(t) == &first->weight) {  // the module is one Linear
      out.push_back({module, first->lora()->rank, first->lora()->alpha, ab[first].first, ab[first].second});
      continue;
    }
    out.push_back(fused_adapter(module, t, parts, adapted, ab));
  }
  for (const auto& [w, l] : adapted)
    if (!placed.count(l))
      adapter_save_fail(folder,
                        "'" + l->path() + "' has no module of its own in " + m.architecture + "'s files");

  // adapter_config.json.
  // The most common rank and alpha are the defaults; the rest go into the patterns.
  const auto most_common = [&](auto field) {
    std::map<decltype(field(out.front())), int> count;
    for (const FileAdapter& f : out) ++count[field(f)];
    return std::max_element(count.begin(), count.end(),
                            [](const auto& a, const auto& b) { return a.second < b.second; })
        ->first;
  };
  const int64_t r = most_common([](const FileAdapter& f) { return f.rank; });
  const double alpha = most_common([](const FileAdapter& f) { return f.alpha; });
  ordered_json rank_pattern = ordered_json::object(), alpha_pattern = ordered_json::object();
  std::set<std::string> names, suffixes;
  for (const FileAdapter& f : out) {
    if (f.rank != r) rank_pattern[f.module] = f.rank;
    if (std::abs(f.alpha - alpha) > 1e-12 * std::abs(alpha)) alpha_pattern[f.module] = number(f.alpha);
    names.insert(f.module);
    suffixes.insert(f.module.substr(f.module.rfind('.') + 1));
  }
  // target_modules: the last names ("q_proj") when they pick exactly the adapted modules.
  bool by_suffix = true;
  for (const std::string& module : matrices)
    if (suffixes.count(module.substr(module.rfind('.') + 1)) && !names.count(module)) by_suffix = false;
  const std::set<std::string>& targets = by_suffix ? suffixes : names;
  double dropout = 0;
  for (const auto& [w, l] : adapted) dropout = std::max(dropout, l->lora()->dropout);
  ordered_json config = {
      {"alpha_pattern", alpha_pattern},
      {"base_model_name_or_path", options.base_model.empty() ? m.folder : options.base_model},
      {"bias", "none"},
      {"fan_in_fan_out", transposed},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"layers_to_transform", nullptr},
      {"lora_alpha", number(alpha)},
      {"lora_dropout", dropout},
      {"modules_to_save", nullptr},
      {"peft_type", "LORA"},
      {"r", r},
      {"rank_pattern", rank_pattern},
      {"target_modules", std::vector<std::string>(targets.begin(), targets.end())},
      {"task_type", task_type_of(m.architecture)},
      {"use_dora", false},
      {"use_rslora", false}};

  std::map<std::string, HostTensor> tensors;
  std::set<std::string> saved_modules;
  for (const std::string& name : options.modules_to_save) {
    Module* sub = nullptr;
    for (Module* s : m.module->modules())
      if (s->path() == name) sub = s;
    if (sub == nullptr) adapter_save_fail(folder, "modules_to_save: the model has no module '" + name + "'");
    for (const Param* p : sub->parameters()) {
      if (is_adapter_param(p->path()) || p->scales() != nullptr) continue;
      const auto file = std::find_if(traced.begin(), traced.end(),
                                     [&](const auto& t) { return whole_param(t.second) == p; });
      if (file == traced.end())
        adapter_save_fail(folder, "modules_to_save: '" + p->path() + "' is no tensor of its own in " +
                                      m.architecture + "'s files");
      HostTensor v = value_of(weights, *p, folder);
      if (file->second.transposed) v = transpose2d(v);
      tensors[kPrefix + file->first] = v.to(options.dtype);
      saved_modules.insert(file->first.substr(0, file->first.rfind('.')));
    }
  }
  if (!saved_modules.empty())
    config["modules_to_save"] = std::vector<std::string>(saved_modules.begin(), saved_modules.end());
  for (FileAdapter& f : out) {
    tensors[kPrefix + f.module + ".lora_A.weight"] = f.A.to(options.dtype);
    tensors[kPrefix + f.module + ".lora_B.weight"] = f.B.to(options.dtype);
  }
  const fs::path dir(folder);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) adapter_save_fail(folder, "cannot create the folder: " + ec.message());
  try {
    save_safetensors((dir / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}});
    io::write_file_atomically((dir / "adapter_config.json").string(), config.dump(2) + "\n");
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    adapter_save_fail(folder, e.what());
  }
}

}  // namespace tg::pretrained
