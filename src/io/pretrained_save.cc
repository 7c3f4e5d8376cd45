// tg::pretrained::save and from_config: the inverse of load. A model's parameters (the
// library's names and layouts) → a Hugging Face folder of its architecture: config.json, the
// weights under the file's names (pretrained.cc's gpt2_source and mamba_source read backwards;
// Phi-3's projections fused again) in one safetensors file or shards with an index, and the
// tokenizer files of the folder the model came from.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <set>
#include <system_error>

#include "io/atomic_file.h"
#include "io/gguf.h"
#include "io/pretrained_internal.h"
#include "tensorgrad/checkpoint.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/quantize.h"

namespace tg::pretrained {
namespace detail {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void save_fail(const std::string& folder, const std::string& what) {
  throw CheckpointError("[pretrained::save] " + folder + ": " + what);
}
[[noreturn]] void cannot(const char* architecture, const std::string& what) {
  throw CheckpointError(std::string("[pretrained::from_config] ") + architecture + " cannot express " + what +
                        "; save a model with it through the Model load() gave for its folder");
}

const char* dtype_word(DType t) {
  switch (t) {
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    default: return "float32";
  }
}

json rope_scaling_json(const RopeScaling& r) {
  using T = RopeScaling::Type;
  switch (r.type) {
    case T::kNone: return nullptr;
    case T::kLinear: return {{"rope_type", "linear"}, {"factor", r.factor}};
    case T::kLlama3:
      return {{"rope_type", "llama3"},
              {"factor", r.factor},
              {"low_freq_factor", r.low_freq_factor},
              {"high_freq_factor", r.high_freq_factor},
              {"original_max_position_embeddings", r.original_context}};
    case T::kYarn: {
      json y = {{"rope_type", "yarn"},
                {"factor", r.factor},
                {"original_max_position_embeddings", r.original_context},
                {"beta_fast", r.beta_fast},
                {"beta_slow", r.beta_slow},
                {"truncate", r.truncate}};
      if (r.attention_factor != 0) y["attention_factor"] = r.attention_factor;
      if (r.mscale != 0) y["mscale"] = r.mscale;
      if (r.mscale_all_dim != 0) y["mscale_all_dim"] = r.mscale_all_dim;
      return y;
    }
    case T::kLongRope: break;
  }
  cannot("LlamaForCausalLM", "rope_scaling longrope (it needs long factors the library does not keep)");
}

}  // namespace

// The keys of transformers 4 (rope_theta and rope_scaling at the top), which 5 reads as well.
std::string config_json_of(const nn::LlamaConfig& c) {
  const char* arch = "LlamaForCausalLM";
  const auto refuse_if = [&](bool set, const char* what) {
    if (set) cannot(arch, what);
  };
  refuse_if(c.gate != nn::LlamaConfig::Gate::kSilu, "a gate other than SiLU (gate)");
  refuse_if(c.qkv_bias, "biases on q/k/v alone (qkv_bias: Qwen2)");
  refuse_if(c.qk_norm, "q/k norms (qk_norm: Qwen3, Gemma 3)");
  refuse_if(c.gemma, "Gemma's (1 + w) norms and scaled embeddings (gemma)");
  refuse_if(c.sandwich_norms, "norms around both halves of a layer (sandwich_norms)");
  refuse_if(c.attention_softcap != 0 || c.logit_softcap != 0, "soft caps (attention_softcap, logit_softcap)");
  refuse_if(c.rope_local_theta != 0, "a RoPE base of the sliding layers' own (rope_local_theta)");
  refuse_if(c.sliding_window != 0, "sliding windows (sliding_window)");
  refuse_if(c.rotary_dim != 0 && c.rotary_dim != c.head_size(), "a partial rotation (rotary_dim)");
  refuse_if(c.experts.count > 0, "a mixture of experts (experts: Mixtral, Qwen-MoE)");
  refuse_if(c.post_norms || c.qk_norm_whole, "OLMo 2's norms (post_norms, qk_norm_whole)");
  refuse_if(c.embedding_multiplier != 1 || c.residual_multiplier != 1 || c.logits_scaling != 1,
            "Granite's multipliers (embedding_multiplier, residual_multiplier, logits_scaling)");
  refuse_if(c.layer_norm, "LayerNorms (layer_norm: GPT-NeoX, Phi, StableLM)");
  refuse_if(!c.gated_mlp, "an MLP without a gate (gated_mlp false)");
  refuse_if(c.parallel != nn::LlamaConfig::Parallel::kNone, "a parallel layer (parallel)");
  refuse_if(c.head_bias, "a bias on lm_head (head_bias: Phi)");
  refuse_if(c.nope, "attention without positions (nope)");
  refuse_if(!c.blocks.empty(), "one-block layers (blocks: Nemotron-H)");
  refuse_if(std::find(c.mamba_layers.begin(), c.mamba_layers.end(), true) != c.mamba_layers.end(),
            "Mamba-2 layers (mamba_layers: Granite 4.0-H)");
  const int64_t hd = c.head_size();
  refuse_if(
      c.attention_scale != 0 && std::abs(c.attention_scale * std::sqrt(static_cast<double>(hd)) - 1) > 1e-12,
      "an attention scale other than 1/sqrt(head_dim) (attention_scale)");
  const json j = {{"architectures", {arch}},
                  {"model_type", "llama"},
                  {"vocab_size", c.vocab},
                  {"hidden_size", c.d_model},
                  {"intermediate_size", c.mlp_hidden},
                  {"num_hidden_layers", c.layers},
                  {"num_attention_heads", c.heads},
                  {"num_key_value_heads", c.kv_heads != 0 ? c.kv_heads : c.heads},
                  {"head_dim", hd},
                  {"max_position_embeddings", c.seq_len},
                  {"rms_norm_eps", c.rms_eps},
                  {"rope_theta", c.rope_theta},
                  {"rope_scaling", rope_scaling_json(c.rope_scaling)},
                  {"attention_bias", c.attention_bias},
                  {"mlp_bias", c.mlp_bias},
                  {"tie_word_embeddings", c.tied_head},
                  {"hidden_act", "silu"},
                  {"attention_dropout", 0.0},
                  {"torch_dtype", "float32"}};
  return j.dump(2);
}

std::string config_json_of(const nn::GptConfig& c) {
  const char* arch = "GPT2LMHeadModel";
  if (c.rotary) cannot(arch, "rotary positions (rotary)");
  if (c.kv_heads != 0 && c.kv_heads != c.heads) cannot(arch, "grouped-query attention (kv_heads)");
  if (!c.bias) cannot(arch, "layers without biases (bias false)");
  if (!c.tied_head) cannot(arch, "an untied head (tied_head false)");
  json j = {{"architectures", {arch}},
            {"model_type", "gpt2"},
            {"vocab_size", c.vocab},
            {"n_positions", c.seq_len},
            {"n_embd", c.d_model},
            {"n_layer", c.layers},
            {"n_head", c.heads},
            {"n_inner", c.mlp_hidden != 0 ? json(c.mlp_hidden) : json(nullptr)},
            {"layer_norm_epsilon", c.ln_eps},
            {"activation_function", "gelu_new"},
            {"attn_pdrop", c.dropout},
            {"embd_pdrop", c.dropout},
            {"resid_pdrop", c.dropout},
            {"scale_attn_weights", true},
            {"tie_word_embeddings", true},
            {"torch_dtype", "float32"}};
  // GPT2Config's default bos/eos id (50256) is GPT-2's <|endoftext|>: not in a smaller vocabulary.
  if (c.vocab <= 50256) j["bos_token_id"] = j["eos_token_id"] = nullptr;
  return j.dump(2);
}

std::string config_json_of(const nn::MambaLMConfig& c) {
  json j = {{"vocab_size", c.vocab},
            {"hidden_size", c.d_model},
            {"num_hidden_layers", c.layers},
            {"state_size", c.d_state},
            {"conv_kernel", c.d_conv},
            {"expand", c.expand},
            {"layer_norm_epsilon", c.norm_eps},
            {"use_bias", c.bias},
            {"use_conv_bias", c.conv_bias},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", c.tied_head},
            {"torch_dtype", "float32"}};
  if (c.version == 2) {
    j["architectures"] = {"Mamba2ForCausalLM"};
    j["model_type"] = "mamba2";
    j["head_dim"] = c.head_dim;
    j["num_heads"] = c.expand * c.d_model / c.head_dim;
    j["n_groups"] = c.groups;
    // transformers 5's spelling of an infinite limit (Python's json would write a bare Infinity).
    const auto limit = [](double v) {
      return std::isinf(v) ? json{{"__float__", v < 0 ? "-Infinity" : "Infinity"}} : json(v);
    };
    j["time_step_limit"] = {limit(c.dt_limit_min), limit(c.dt_limit_max)};
  } else {
    j["architectures"] = {"MambaForCausalLM"};
    j["model_type"] = "mamba";
    j["intermediate_size"] = c.expand * c.d_model;
    j["time_step_rank"] = (c.d_model + 15) / 16;
  }
  return j.dump(2);
}

namespace {

// The parameters of m.module save() writes: all but the LoRA adapters' (merged first), as f32.
// `weights` is taken over: without adapters its tensors are the ones written.
std::map<std::string, HostTensor> base_weights(const Model& m, std::map<std::string, HostTensor> weights,
                                               const std::string& folder) {
  // The adapters' parameters by their documented names (nn::LoRA); the rest are the model's.
  std::set<std::string> base, adapters;
  for (const Param* p : m.module->parameters()) {
    const std::string& n = p->path();
    (n.ends_with(".lora_A.weight") || n.ends_with(".lora_B.weight") ? adapters : base).insert(n);
  }
  bool has_adapters = false;
  for (const auto& [name, t] : weights) {
    if (adapters.count(name)) {
      has_adapters = true;
      continue;
    }
    if (!base.count(name))
      save_fail(folder, "'" + name + "' is no parameter of the " + m.architecture + " being saved");
  }
  std::map<std::string, HostTensor> out;
  if (has_adapters) {
    try {
      out = nn::merge_lora(*m.module, weights);
    } catch (const Error& e) {
      save_fail(folder, std::string("merging the LoRA adapters: ") + e.what());
    }
  } else {
    out = std::move(weights);
  }
  for (const Param* p : m.module->parameters()) {
    if (adapters.count(p->path()) || p->scales() != nullptr) continue;  // scales: with their weight
    auto it = out.find(p->path());
    if (it == out.end()) save_fail(folder, "no value for the parameter '" + p->path() + "'");
    if (it->second.dtype() == DType::kI8 && p->scale() != nullptr) {  // quantized: written dequantized
      try {
        it->second = dequantize_param(p->path(), p->bits(), it->second, out);
      } catch (const Error& e) {
        save_fail(folder, "'" + p->path() + "': " + e.what());
      }
    }
    const DType dt = it->second.dtype();
    if (dt != DType::kF32 && dt != DType::kBF16 && dt != DType::kF16)
      save_fail(folder, "'" + p->path() + "' is " + dtype_name(dt) + ", not a float tensor");
    if (it->second.shape() != p->shape())
      save_fail(folder, "'" + p->path() + "' has shape " + shape_str(it->second.shape()) +
                            ", the model's is " + shape_str(p->shape()));
    if (dt != DType::kF32) it->second = it->second.to(DType::kF32);
  }
  for (const Param* p : m.module->parameters())
    if (p->scales() != nullptr) out.erase(p->path());
  return out;
}

// Rows of `parts` (each [rows_i, d], f32) one after another: [Σ rows_i, d].
HostTensor stack_rows(const std::vector<const HostTensor*>& parts) {
  std::vector<float> out;
  int64_t rows = 0;
  for (const HostTensor* t : parts) {
    const std::span<const float> v = t->f32();
    out.insert(out.end(), v.begin(), v.end());
    rows += t->shape()[0];
  }
  return HostTensor::f32(std::move(out), {rows, parts.front()->shape()[1]});
}

// Every tensor of `w` into `out` under its file name and layout (GPT-2's Conv1D transposed, a
// Mamba conv1d as [D, 1, K]).
void renamed(std::map<std::string, HostTensor> w, std::map<std::string, HostTensor>& out,
             const std::function<Source(const std::string&)>& source) {
  for (auto& [name, t] : w) {
    const Source s = source(name);
    if (s.layout == Layout::kTransposed) t = transpose2d(t);
    if (s.layout == Layout::kSqueezeMiddle) {
      const Shape shape{t.shape()[0], 1, t.shape()[1]};
      t = HostTensor::f32(std::move(t).f32(), shape);
    }
    out[s.name] = std::move(t);
  }
}

// `parts` of `w` stacked by rows into out[fused] (and taken out of `w`).
void fuse_rows(std::map<std::string, HostTensor>& w, std::map<std::string, HostTensor>& out,
               const std::string& fused, const std::vector<std::string>& parts) {
  std::vector<const HostTensor*> values;
  for (const std::string& p : parts) values.push_back(&w.at(p));
  out[fused] = stack_rows(values);
  for (const std::string& p : parts) w.erase(p);
}

// Granite 4.0-H: the shared MLP's gate/up fused into shared_mlp.input_linear, the experts'
// stacked into block_sparse_moe.input_linear [E, 2·I, d] (gate rows, then up, per expert) and
// output_linear [E, d, I]; the rest renamed as granite_hybrid_source names them.
std::map<std::string, HostTensor> granite_hybrid_file_tensors(const Model& m,
                                                              std::map<std::string, HostTensor> w) {
  const nn::LlamaConfig& c = std::get<nn::LlamaConfig>(m.config);
  std::map<std::string, HostTensor> out;
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    const std::string shared = l + (c.experts.count > 0 ? "mlp.shared_expert." : "mlp.");
    fuse_rows(w, out, l + "shared_mlp.input_linear.weight",
              {shared + "gate_proj.weight", shared + "up_proj.weight"});
    if (c.experts.count == 0) continue;
    std::vector<float> in, down;
    for (int64_t e = 0; e < c.experts.count; ++e) {
      const std::string x = l + "mlp.experts." + std::to_string(e) + ".";
      const auto append = [&](std::vector<float>& to, const std::string& name) {
        const std::span<const float> v = w.at(name).f32();
        to.insert(to.end(), v.begin(), v.end());
        w.erase(name);
      };
      append(in, x + "gate_proj.weight");
      append(in, x + "up_proj.weight");
      append(down, x + "down_proj.weight");
    }
    // The widths from the tensors themselves (save_adapter traces this with narrower label
    // tensors: pretrained_adapter.cc).
    const int64_t e = c.experts.count, in_cols = static_cast<int64_t>(in.size()) / (e * 2 * c.experts.hidden),
                  down_cols = static_cast<int64_t>(down.size()) / (e * c.d_model);
    out[l + "block_sparse_moe.input_linear.weight"] =
        HostTensor::f32(std::move(in), {e, 2 * c.experts.hidden, in_cols});
    out[l + "block_sparse_moe.output_linear.weight"] =
        HostTensor::f32(std::move(down), {e, c.d_model, down_cols});
  }
  renamed(std::move(w), out, granite_hybrid_source);
  return out;
}

}  // namespace

std::map<std::string, HostTensor> file_tensors(const Model& m, std::map<std::string, HostTensor> w) {
  std::map<std::string, HostTensor> out;
  if (m.architecture == "GPT2LMHeadModel" || m.architecture == "MambaForCausalLM" ||
      m.architecture == "Mamba2ForCausalLM") {
    const bool gpt2 = m.architecture == "GPT2LMHeadModel";
    renamed(std::move(w), out,
            [gpt2](const std::string& p) { return gpt2 ? gpt2_source("transformer.", p) : mamba_source(p); });
    return out;
  }
  if (m.architecture == "Phi3ForCausalLM") {  // q/k/v and gate/up fused by rows again
    const int64_t layers = std::get<nn::LlamaConfig>(m.config).layers;
    for (int64_t i = 0; i < layers; ++i) {
      const std::string l = "model.layers." + std::to_string(i) + ".";
      fuse_rows(
          w, out, l + "self_attn.qkv_proj.weight",
          {l + "self_attn.q_proj.weight", l + "self_attn.k_proj.weight", l + "self_attn.v_proj.weight"});
      fuse_rows(w, out, l + "mlp.gate_up_proj.weight",
                {l + "mlp.gate_proj.weight", l + "mlp.up_proj.weight"});
    }
  }
  if (m.architecture == "GraniteMoeHybridForCausalLM") return granite_hybrid_file_tensors(m, std::move(w));
  if (m.architecture == "BambaForCausalLM" || m.architecture == "NemotronHForCausalLM") {
    renamed(std::move(w), out, m.architecture == "BambaForCausalLM" ? bamba_source : nemotron_h_source);
    return out;
  }
  if (is_layernorm_family(m.architecture)) return layernorm_family_file_tensors(m, std::move(w));
  if (m.architecture == "GptOssForCausalLM") return gpt_oss_file_tensors(m, std::move(w));
  if (const auto* bert =
          std::get_if<nn::BertConfig>(&m.config)) {  // save_pretrained's prefix: none for the bare encoder
    const bool roberta = bert->roberta_positions, bare = m.architecture.ends_with("Model");
    const std::string prefix = bare ? "" : bert->distil ? "distilbert." : roberta ? "roberta." : "bert.";
    for (auto& [name, t] : w)
      out[(bert->distil ? distil_source(prefix, name) : bert_source(roberta, prefix, name)).name] =
          std::move(t);
    return out;
  }
  if (std::holds_alternative<nn::ViTConfig>(m.config)) {  // save_pretrained's prefix: none for ViTModel
    const std::string prefix = m.architecture.ends_with("Model") ? "" : vit_base(m.architecture);
    for (auto& [name, t] : w) out[vit_source(prefix, name).name] = std::move(t);
    return out;
  }
  if (std::holds_alternative<nn::ClipConfig>(m.config)) return w;  // the file's names are the module's
  if (std::holds_alternative<nn::T5Config>(m.config)) return t5_file_tensors(m, std::move(w));
  if (std::holds_alternative<nn::WhisperConfig>(m.config)) return w;  // the file's names are the module's
  const bool mixtral = m.architecture == "MixtralForCausalLM";
  for (auto& [name, t] : w)
    out[mixtral ? mixtral_source(name).name : name] = std::move(t);  // the Llama family
  return out;
}

namespace {

// Greedy shards of at most max_bytes in name order (a larger tensor alone in its own).
std::vector<std::map<std::string, HostTensor>> shards_of(std::map<std::string, HostTensor> tensors,
                                                         int64_t max_bytes) {
  std::vector<std::map<std::string, HostTensor>> shards(1);
  int64_t bytes = 0;
  for (auto& [name, t] : tensors) {
    const int64_t size = t.numel() * dtype_size(t.dtype());
    if (max_bytes > 0 && bytes > 0 && bytes + size > max_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().emplace(name, std::move(t));
    bytes += size;
  }
  return shards;
}

void write_text(const std::string& folder, const fs::path& path, const std::string& text) {
  try {
    io::write_file_atomically(path.string(), text);
  } catch (const std::exception& e) {
    save_fail(folder, e.what());
  }
}

// Weight files an earlier save may have left: the loader prefers model.safetensors over an index.
void remove_old_weights(const std::string& folder, const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    const bool shard =
        n.rfind("model-", 0) == 0 && n.ends_with(".safetensors") && n.find("-of-") != std::string::npos;
    if (n == "model.safetensors" || n == "model.safetensors.index.json" || shard) {
      fs::remove(e.path(), ec);
      if (ec) save_fail(folder, "cannot remove the earlier " + n + ": " + ec.message());
    }
  }
  if (ec) save_fail(folder, "cannot list the folder: " + ec.message());
}

}  // namespace

std::map<std::string, HostTensor> merged_f32_weights(const Model& m,
                                                     std::map<std::string, HostTensor> weights,
                                                     const std::string& path) {
  return base_weights(m, std::move(weights), path);
}
}  // namespace detail

using namespace detail;

void save(const Model& m, std::map<std::string, HostTensor> weights, const std::string& folder,
          const SaveOptions& options) {
  if (!m.module) save_fail(folder, "the Model has no module (load() or from_config() builds one)");
  if (m.config_json.empty()) save_fail(folder, "the Model has no config.json text (config_json)");
  if (options.dtype != DType::kF32 && options.dtype != DType::kBF16 && options.dtype != DType::kF16)
    save_fail(folder,
              std::string("SaveOptions::dtype ") + dtype_name(options.dtype) + ": expected f32, bf16 or f16");
  if (options.max_shard_bytes < 0) save_fail(folder, "SaveOptions::max_shard_bytes is negative");
  json config;
  try {
    config = json::parse(m.config_json);
  } catch (const json::exception& e) {
    save_fail(folder, std::string("config_json is not valid JSON: ") + e.what());
  }
  // The weights are written as f32, bf16 or f16 whatever the folder read held (gpt-oss's MXFP4
  // experts): a quantization_config would send the readers after tensors no longer there.
  config.erase("quantization_config");
  const fs::path dir(folder);
  std::error_code ec;
  if (!m.folder.empty() && fs::exists(dir, ec) && fs::equivalent(dir, fs::path(m.folder), ec))
    save_fail(folder, "is the folder the model was loaded from; save into another one");
  std::map<std::string, HostTensor> tensors = file_tensors(m, base_weights(m, std::move(weights), folder));
  if (options.dtype != DType::kF32)
    for (auto& [name, t] : tensors) t = t.to(options.dtype);

  fs::create_directories(dir, ec);
  if (ec) save_fail(folder, "cannot create the folder: " + ec.message());
  remove_old_weights(folder, dir);
  const std::map<std::string, std::string> meta{{"format", "pt"}};  // what transformers checks for
  int64_t total = 0;
  for (const auto& [name, t] : tensors) total += t.numel() * dtype_size(t.dtype());
  std::vector<std::map<std::string, HostTensor>> shards =
      shards_of(std::move(tensors), options.max_shard_bytes);
  if (shards.size() == 1) {
    save_safetensors((dir / "model.safetensors").string(), shards[0], meta);
  } else {
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", json::object()}};
    const std::string n = std::to_string(shards.size());
    for (size_t i = 0; i < shards.size(); ++i) {
      std::string k = std::to_string(i + 1), of = n;
      k.insert(0, 5 - std::min<size_t>(5, k.size()), '0');
      of.insert(0, 5 - std::min<size_t>(5, of.size()), '0');
      const std::string file = "model-" + k + "-of-" + of + ".safetensors";
      for (const auto& [name, t] : shards[i]) index["weight_map"][name] = file;
      save_safetensors((dir / file).string(), shards[i], meta);
    }
    write_text(folder, dir / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  // transformers 5 writes "dtype", 4 "torch_dtype": the key the file has, else both read this.
  const char* word = dtype_word(options.dtype);
  bool keyed = false;
  for (const char* key : {"dtype", "torch_dtype"})
    if (config.contains(key)) {
      config[key] = word;
      keyed = true;
    }
  if (!keyed) config["torch_dtype"] = word;
  write_text(folder, dir / "config.json", config.dump(2) + "\n");
  if (m.folder.empty()) return;
  if (io::is_gguf(m.folder)) {  // the tokenizer and chat template of its metadata
    for (const auto& [name, text] : gguf_side_files(m.folder)) write_text(folder, dir / name, text);
    return;
  }
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json", "preprocessor_config.json", "tokenizer.model",
                           "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja"}) {
    const fs::path from = fs::path(m.folder) / name;
    if (!fs::is_regular_file(from, ec)) continue;
    fs::copy_file(from, dir / name, fs::copy_options::overwrite_existing, ec);
    if (ec) save_fail(folder, std::string("cannot copy ") + name + " from " + m.folder + ": " + ec.message());
  }
}

namespace detail {

// The transformers class of a BERT-family configuration: its head decides the name.
std::string bert_architecture(const nn::BertConfig& c) {
  const char* family = c.distil ? "DistilBert" : c.roberta_positions ? "Roberta" : "Bert";
  const int heads = int{c.mlm_head} + int{c.labels > 0} + int{c.qa_head};
  if (heads > 1)
    cannot(family, "more than one head (mlm_head, labels, qa_head): a transformers class has one");
  const char* head = c.qa_head      ? "ForQuestionAnswering"
                     : c.labels > 0 ? (c.per_token ? "ForTokenClassification" : "ForSequenceClassification")
                     : c.mlm_head   ? "ForMaskedLM"
                                    : "Model";
  return std::string(family) + head;
}

// DistilBertConfig's fields (no token types, no pooler, the erf GELU, tied projector).
json distil_config_json(const nn::BertConfig& c) {
  if (c.type_vocab != 0 || c.roberta_positions || c.pooler || c.gelu != GeluApprox::kErf || c.ln_eps != 1e-12)
    cannot("DistilBert",
           "token types, RoBERTa positions, a pooler, the tanh GELU or a LayerNorm eps other than 1e-12");
  return {{"architectures", {bert_architecture(c)}},
          {"model_type", "distilbert"},
          {"vocab_size", c.vocab},
          {"dim", c.d_model},
          {"n_layers", c.layers},
          {"n_heads", c.heads},
          {"hidden_dim", c.mlp_hidden},
          {"max_position_embeddings", c.max_positions},
          {"activation", "gelu"},
          {"pad_token_id", c.pad_id},
          {"dropout", c.hidden_dropout},
          {"attention_dropout", c.attention_dropout},
          {"seq_classif_dropout", c.classifier_p()},
          {"qa_dropout", c.qa_dropout},
          {"sinusoidal_pos_embds", false},
          {"tie_weights_", true},
          {"torch_dtype", "float32"}};
}

std::string config_json_of(const nn::BertConfig& c) {
  json j = c.distil
               ? distil_config_json(c)
               : json{{"architectures", {bert_architecture(c)}},
                      {"model_type", c.roberta_positions ? "roberta" : "bert"},
                      {"vocab_size", c.vocab},
                      {"hidden_size", c.d_model},
                      {"num_hidden_layers", c.layers},
                      {"num_attention_heads", c.heads},
                      {"intermediate_size", c.mlp_hidden},
                      {"max_position_embeddings", c.max_positions},
                      {"type_vocab_size", c.type_vocab},
                      {"layer_norm_eps", c.ln_eps},
                      {"hidden_act", c.gelu == GeluApprox::kErf ? "gelu" : "gelu_new"},
                      {"pad_token_id", c.pad_id},
                      {"position_embedding_type", "absolute"},
                      {"hidden_dropout_prob", c.hidden_dropout},
                      {"attention_probs_dropout_prob", c.attention_dropout},
                      {"classifier_dropout", c.classifier_dropout < 0 ? json() : json(c.classifier_dropout)},
                      {"tie_word_embeddings", true},
                      {"torch_dtype", "float32"}};
  if (!c.distil && c.qa_dropout != 0) cannot("Bert", "qa_dropout (BERT's question answering has none)");
  if (c.labels > 0) add_labels(j, c.labels);
  return j.dump(2);
}

void add_labels(json& config, int64_t labels) {
  json id2label = json::object(), label2id = json::object();
  for (int64_t i = 0; i < labels; ++i) {
    id2label[std::to_string(i)] = "LABEL_" + std::to_string(i);
    label2id["LABEL_" + std::to_string(i)] = i;
  }
  config["id2label"] = id2label;
  config["label2id"] = label2id;
}

}  // namespace detail

namespace {
template <typename Config, typename Net>
Model model_of(const Config& config, const char* architecture, int64_t context) {
  Model m;
  m.architecture = architecture;
  m.config_json = config_json_of(config);  // checks first: a config it cannot write builds nothing
  m.config = config;
  m.module = std::make_unique<Net>(config);
  m.context = context;
  return m;
}
}  // namespace

Model from_config(const nn::LlamaConfig& config) {
  return model_of<nn::LlamaConfig, nn::Llama>(config, "LlamaForCausalLM", config.seq_len);
}
Model from_config(const nn::GptConfig& config) {
  return model_of<nn::GptConfig, nn::Gpt>(config, "GPT2LMHeadModel", config.seq_len);
}
Model from_config(const nn::MambaLMConfig& config) {
  return model_of<nn::MambaLMConfig, nn::MambaLM>(
      config, config.version == 2 ? "Mamba2ForCausalLM" : "MambaForCausalLM", 0);
}
Model from_config(const nn::BertConfig& config) {
  const std::string architecture = detail::bert_architecture(config);
  return model_of<nn::BertConfig, nn::Bert>(config, architecture.c_str(), config.context());
}
Model from_config(const nn::ViTConfig& config) {
  const std::string architecture = detail::vit_architecture(config);
  return model_of<nn::ViTConfig, nn::ViT>(config, architecture.c_str(), config.tokens());
}
Model from_config(const nn::T5Config& config) {
  Model m = model_of<nn::T5Config, nn::T5>(
      config, config.decoder ? "T5ForConditionalGeneration" : "T5EncoderModel", 0);
  m.eos_ids = {config.eos_id};
  return m;
}
Model from_config(const nn::WhisperConfig& config) {
  Model m = model_of<nn::WhisperConfig, nn::Whisper>(config, "WhisperForConditionalGeneration",
                                                     config.target_positions);
  m.eos_ids = {config.eos_id};
  return m;
}
Model from_config(const nn::ClipConfig& config) {
  const std::string architecture = detail::clip_architecture(config);
  Model m = model_of<nn::ClipConfig, nn::Clip>(
      config, architecture.c_str(), config.has_text ? config.text.positions : config.vision.tokens());
  if (config.has_text && config.text.eos_id != 2) m.eos_ids = {config.text.eos_id};
  return m;
}

}  // namespace tg::pretrained
