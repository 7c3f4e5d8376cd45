// pretrained::save_gguf: a Llama, Qwen2 or Qwen3 model as the GGUF file llama.cpp's converter
// would write for its Hugging Face folder (the reverse of pretrained_gguf.cc): metadata from
// its configuration, tensors renamed blk.N.*, the architecture llama's q and k rows put in
// ggml's RoPE pairing, Llama 3.1's rescaling as rope_freqs.weight, and the tokenizer and chat
// template of the folder (or GGUF file) it was loaded from.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "io/gguf.h"
#include "io/pretrained_internal.h"
#include "tensorgrad/chat.h"
#include "text/tokenizer_impl.h"

namespace tg::pretrained {
namespace {

using detail::json;
using io::GgufKv;

[[noreturn]] void gguf_save_fail(const std::string& path, const std::string& what) {
  throw CheckpointError("[pretrained::save_gguf] " + path + ": " + what);
}

// What GGUF's llama, qwen2 and qwen3 cannot express of an nn::LlamaConfig, named; "" if nothing.
std::string inexpressible(const nn::LlamaConfig& l, const std::string& arch) {
  using G = nn::LlamaConfig::Gate;
  const std::pair<bool, const char*> checks[] = {
      {l.gemma || l.sandwich_norms, "Gemma's norms"},
      {l.layer_norm || !l.gated_mlp || l.parallel != nn::LlamaConfig::Parallel::kNone,
       "a LayerNorm family's layers"},
      {l.experts.count > 0, "experts"},
      {l.sliding_window > 0, "sliding windows"},
      {l.rotary_dim != 0, "a partial rotation"},
      {l.post_norms || l.qk_norm_whole, "OLMo's norms"},
      {l.attention_softcap != 0 || l.logit_softcap != 0, "soft caps"},
      {l.gate != G::kSilu, "a gate other than SiLU"},
      {l.mlp_bias || l.head_bias, "MLP or head biases"},
      {l.embedding_multiplier != 1 || l.residual_multiplier != 1 || l.logits_scaling != 1 ||
           l.attention_scale != 0,
       "Granite's multipliers"},
      {l.rope_local_theta != 0, "a second RoPE base"},
      {l.qk_norm && arch != "qwen3", "q/k norms outside qwen3"},
      {l.nope, "attention without positions (nope)"},
      {!l.blocks.empty(), "one-block layers (Nemotron-H)"},
      {std::find(l.mamba_layers.begin(), l.mamba_layers.end(), true) != l.mamba_layers.end(),
       "Mamba-2 layers"},
      {l.attention_bias && arch == "qwen3", "attention biases in qwen3"},
  };
  for (const auto& [bad, what] : checks)
    if (bad) return what;
  return "";
}

// RoPE's keys, and for llama the per-pair divisors of Llama 3.1's rescaling (rope_freqs.weight).
std::vector<float> rope_kvs(const nn::LlamaConfig& l, const std::string& arch, const std::string& path,
                            std::vector<GgufKv>& kvs) {
  const std::string p = arch + ".";
  const RopeScaling& r = l.rope_scaling;
  using T = RopeScaling::Type;
  kvs.push_back({p + "rope.freq_base", io::kGgufF32, l.rope_theta});
  if (r.type == T::kLinear) {
    kvs.push_back({p + "rope.scaling.type", io::kGgufString, "linear"});
    kvs.push_back({p + "rope.scaling.factor", io::kGgufF32, r.factor});
  } else if (r.type == T::kYarn) {
    if (r.beta_fast != 32 || r.beta_slow != 1 || r.attention_factor != 0 || r.mscale != 0 ||
        r.mscale_all_dim != 0 || !r.truncate)
      gguf_save_fail(path, "yarn with settings other than its defaults cannot be written");
    kvs.push_back({p + "rope.scaling.type", io::kGgufString, "yarn"});
    kvs.push_back({p + "rope.scaling.factor", io::kGgufF32, r.factor});
    kvs.push_back({p + "rope.scaling.original_context_length", io::kGgufU32, r.original_context});
  } else if (r.type == T::kLlama3 || (r.type == T::kLongRope && r.factor == 1.0 && r.attention_factor == 0)) {
    if (arch != "llama") gguf_save_fail(path, "per-pair RoPE divisors are written for llama only");
    const int64_t d = l.head_size();
    const std::vector<double> plain = rope_frequencies(d, l.rope_theta).inv_freq,
                              scaled = rope_frequencies(d, l.rope_theta, r).inv_freq;
    std::vector<float> divisors;
    for (size_t i = 0; i < plain.size(); ++i) divisors.push_back(static_cast<float>(plain[i] / scaled[i]));
    return divisors;
  } else if (r.type != T::kNone) {
    gguf_save_fail(path, "this RoPE rescaling (longrope) cannot be written for " + arch);
  }
  return {};
}

// A metadata value as GGUF types it: strings, bools, ids (u32), other integers (i32), floats (f32), and
// arrays of them.
GgufKv typed(const std::string& key, const json& v) {
  const auto type_of = [&](const json& x) -> uint32_t {
    if (x.is_string()) return io::kGgufString;
    if (x.is_boolean()) return io::kGgufBool;
    if (x.is_number_float()) return io::kGgufF32;
    return key.ends_with("_id") || x.is_number_unsigned() ? io::kGgufU32 : io::kGgufI32;
  };
  if (!v.is_array()) return {key, type_of(v), v};
  const bool floats = std::any_of(v.begin(), v.end(), [](const json& x) { return x.is_number_float(); });
  return {key, io::kGgufArray, v,
          v.empty()                       ? io::kGgufString
          : floats                        ? io::kGgufF32
          : type_of(v[0]) == io::kGgufU32 ? io::kGgufI32
                                          : type_of(v[0])};
}

// The tokenizer's and chat template's key-values of the folder or GGUF file `source`.
std::vector<GgufKv> tokenizer_kvs(const std::string& source, const std::string& path, int64_t vocab) {
  std::vector<GgufKv> kvs;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (io::is_gguf(source)) {  // as they are
    const io::GgufFile g = io::read_gguf(source);
    for (const auto& [key, v] : g.meta.items())
      if (key.starts_with("tokenizer.")) kvs.push_back(typed(key, v));
    if (!g.meta.contains("tokenizer.ggml.model"))
      kvs.push_back({"tokenizer.ggml.model", io::kGgufString, "none"});
    return kvs;
  }
  const fs::path file = fs::path(source) / "tokenizer.json";
  if (source.empty() || !fs::is_regular_file(file, ec)) {  // llama.cpp's vocabulary type "none"
    kvs.push_back({"tokenizer.ggml.model", io::kGgufString, "none"});
    return kvs;
  }
  try {
    std::ifstream in(file);
    kvs = text::gguf_tokenizer_kvs(json::parse(in), file.string(), vocab);
  } catch (const json::exception& e) {
    gguf_save_fail(path, file.string() + " is not valid JSON: " + e.what());
  } catch (const TokenizerError& e) {
    gguf_save_fail(path, e.what());
  }
  try {
    kvs.push_back({"tokenizer.chat_template", io::kGgufString, ChatTemplate::load(source).source()});
  } catch (const TemplateError&) {  // a folder without a chat template
  }
  return kvs;
}

// transformers' name of a parameter → its GGUF name.
std::string gguf_name(const std::string& n) {
  static const std::pair<const char*, const char*> kTop[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  for (const auto& [from, to] : kTop)
    if (n == from) return to;
  static const std::pair<const char*, const char*> kLayer[] = {
      {"input_layernorm.", "attn_norm."},    {"post_attention_layernorm.", "ffn_norm."},
      {"self_attn.q_proj.", "attn_q."},      {"self_attn.k_proj.", "attn_k."},
      {"self_attn.v_proj.", "attn_v."},      {"self_attn.o_proj.", "attn_output."},
      {"self_attn.q_norm.", "attn_q_norm."}, {"self_attn.k_norm.", "attn_k_norm."},
      {"mlp.gate_proj.", "ffn_gate."},       {"mlp.up_proj.", "ffn_up."},
      {"mlp.down_proj.", "ffn_down."}};
  const std::string prefix = "model.layers.";
  const size_t dot = n.find('.', prefix.size());
  if (!n.starts_with(prefix) || dot == std::string::npos) return "";
  const std::string rest = n.substr(dot + 1);
  for (const auto& [from, to] : kLayer)
    if (rest.starts_with(from))
      return "blk." + n.substr(prefix.size(), dot - prefix.size()) + "." + to +
             rest.substr(std::strlen(from));
  return "";
}

// The converter's row order of q or k for ggml's RoPE: within a head, model row s·D/2 + i
// becomes file row 2i + s.
HostTensor permute_rows(const HostTensor& t, int64_t heads) {
  const int64_t rows = t.shape()[0], cols = t.numel() / rows, half = rows / heads / 2;
  HostTensor out(DType::kF32, t.shape());
  const std::span<const float> src = t.f32();
  const std::span<float> dst = out.f32();
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t i = 0; i < half; ++i)
        std::copy_n(src.begin() + (h * 2 * half + s * half + i) * cols, cols,
                    dst.begin() + (h * 2 * half + 2 * i + s) * cols);
  return out;
}

}  // namespace

void save_gguf(const Model& m, std::map<std::string, HostTensor> weights, const std::string& path,
               const GgufOptions& options) {
  const DType dt = options.dtype;
  if (dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16 && dt != DType::kI8)
    gguf_save_fail(path,
                   std::string("GgufOptions::dtype is ") + dtype_name(dt) +
                       "; GGUF matrices are written as f32, f16, bf16 or i8 (Q8_0, or Q4_0 with .bits = 4)");
  if (options.bits != 8 && (options.bits != 4 || dt != DType::kI8))
    gguf_save_fail(path, "GgufOptions::bits is " + std::to_string(options.bits) +
                             "; matrices quantize (.dtype = DType::kI8) to 8 bits (Q8_0) or 4 (Q4_0)");
  const bool q4 = options.bits == 4;
  const std::string arch = m.architecture == "LlamaForCausalLM"   ? "llama"
                           : m.architecture == "Qwen2ForCausalLM" ? "qwen2"
                           : m.architecture == "Qwen3ForCausalLM" ? "qwen3"
                                                                  : "";
  if (arch.empty() || !std::holds_alternative<nn::LlamaConfig>(m.config))
    gguf_save_fail(
        path, m.architecture +
                  " is not written as GGUF (written: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)");
  const nn::LlamaConfig& l = std::get<nn::LlamaConfig>(m.config);
  if (const std::string what = inexpressible(l, arch); !what.empty())
    gguf_save_fail(path, "GGUF's " + arch + " cannot express " + what);
  const std::string p = arch + ".";
  const int64_t kv_heads = l.kv_heads != 0 ? l.kv_heads : l.heads;
  const json config = json::parse(m.config_json.empty() ? "{}" : m.config_json);
  // llama.cpp's file types: ALL_F32, MOSTLY_F16, MOSTLY_Q8_0, MOSTLY_Q4_0, MOSTLY_BF16.
  const uint32_t file_type = dt == DType::kF32   ? 0
                             : dt == DType::kF16 ? 1
                             : dt == DType::kI8  ? (q4 ? 2 : 7)
                                                 : 32;
  std::vector<GgufKv> kvs = {
      {"general.architecture", io::kGgufString, arch},
      {"general.name", io::kGgufString, std::filesystem::path(m.folder).filename().string()},
      {"general.file_type", io::kGgufU32, file_type},
      {p + "context_length", io::kGgufU32, l.seq_len},
      {p + "embedding_length", io::kGgufU32, l.d_model},
      {p + "block_count", io::kGgufU32, l.layers},
      {p + "feed_forward_length", io::kGgufU32, l.mlp_hidden},
      {p + "attention.head_count", io::kGgufU32, l.heads},
      {p + "attention.head_count_kv", io::kGgufU32, kv_heads},
      {p + "attention.key_length", io::kGgufU32, l.head_size()},
      {p + "attention.value_length", io::kGgufU32, l.head_size()},
      {p + "attention.layer_norm_rms_epsilon", io::kGgufF32, l.rms_eps},
      {p + "rope.dimension_count", io::kGgufU32, l.head_size()},
      {p + "vocab_size", io::kGgufU32, l.vocab},
  };
  const std::vector<float> divisors = rope_kvs(l, arch, path, kvs);
  std::vector<GgufKv> tokenizer = tokenizer_kvs(m.folder, path, l.vocab);
  const auto has = [&](const std::string& key) {
    return std::any_of(tokenizer.begin(), tokenizer.end(), [&](const GgufKv& kv) { return kv.key == key; });
  };
  for (const auto& [field, key] :
       {std::pair<const char*, const char*>{"bos_token_id", "tokenizer.ggml.bos_token_id"},
        {"pad_token_id", "tokenizer.ggml.padding_token_id"}})
    if (!has(key) && config.contains(field) && config[field].is_number_unsigned())
      tokenizer.push_back({key, io::kGgufU32, config[field]});
  // The ids that end generation: eos, then end-of-turn and end-of-message (Llama 3.1's three).
  const char* const ends[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                              "tokenizer.ggml.eom_token_id"};
  for (size_t i = 0; i < m.eos_ids.size() && i < 3; ++i)
    if (!has(ends[i])) tokenizer.push_back({ends[i], io::kGgufU32, m.eos_ids[i]});
  kvs.insert(kvs.end(), tokenizer.begin(), tokenizer.end());

  // The tensors: token_embd, the layers in order, output_norm, output; then rope_freqs.
  auto values = std::make_shared<std::map<std::string, HostTensor>>(
      detail::merged_f32_weights(m, std::move(weights), path));
  std::vector<std::pair<std::string, std::string>> order;  // (GGUF name, transformers name)
  for (const Param* param : m.module->parameters()) {
    if (param->scales() != nullptr || param->path().ends_with("lora_A.weight") ||
        param->path().ends_with("lora_B.weight"))
      continue;
    const std::string name = gguf_name(param->path());
    if (name.empty()) gguf_save_fail(path, "the parameter '" + param->path() + "' has no GGUF name");
    order.emplace_back(name, param->path());
  }
  std::vector<io::GgufOut> tensors;
  for (const auto& entry : order) {
    const std::string name = entry.first, hf = entry.second;  // plain names: lambdas capture them
    const HostTensor& v = values->at(hf);
    const bool matrix = v.shape().size() == 2;
    const int64_t cols = matrix ? v.shape()[1] : 0;
    const uint32_t type = !matrix                              ? 0
                          : dt == DType::kF32                  ? 0
                          : dt == DType::kBF16                 ? 30
                          : dt == DType::kI8 && cols % 32 == 0 ? (q4 ? 2 : 8)
                                                               : 1;  // F16 (and Q8_0's, Q4_0's fallback)
    const bool q = hf.find(".self_attn.q_proj.") != std::string::npos,
               k = hf.find(".self_attn.k_proj.") != std::string::npos;
    const int64_t heads = arch == "llama" && (q || k) ? (q ? l.heads : kv_heads) : 0;
    const io::GgmlBlock blk = io::ggml_block(type);
    const auto bytes = static_cast<uint64_t>(v.numel() / blk.values * blk.bytes);
    tensors.push_back({name, type, v.shape(), bytes, [values, hf, name, type, heads]() {
                         HostTensor t = std::move(values->at(hf));
                         values->erase(hf);  // written once: the memory goes with it
                         if (heads > 0) t = permute_rows(t, heads);
                         const std::span<const float> x = t.f32();
                         for (float v : x)
                           if (!std::isfinite(v))
                             throw CheckpointError("tensor '" + name + "' holds " + std::to_string(v));
                         if (type == 8) return io::quantize_q8_0(x);
                         if (type == 2) return io::quantize_q4_0(x);
                         std::vector<uint8_t> out(x.size() * (type == 0 ? 4 : 2));
                         if (type == 0) std::memcpy(out.data(), x.data(), out.size());
                         for (size_t i = 0; type != 0 && i < x.size(); ++i) {
                           const uint16_t h = type == 1 ? f16_from_f32(x[i]) : bf16_from_f32(x[i]);
                           if (type == 1 && std::isfinite(x[i]) && !std::isfinite(f32_from_f16(h)))
                             throw CheckpointError("tensor '" + name + "' holds " + std::to_string(x[i]) +
                                                   ", beyond F16's range: write it as bf16 or f32");
                           std::memcpy(out.data() + 2 * i, &h, 2);
                         }
                         return out;
                       }});
  }
  if (!divisors.empty()) {
    tensors.push_back(
        {"rope_freqs.weight", 0, {static_cast<int64_t>(divisors.size())}, divisors.size() * 4, [divisors]() {
           std::vector<uint8_t> out(divisors.size() * 4);
           std::memcpy(out.data(), divisors.data(), out.size());
           return out;
         }});
  }
  try {
    io::write_gguf(path, kvs, tensors);
  } catch (const CheckpointError& e) {
    throw CheckpointError(std::string("[pretrained::save_gguf] ") + e.what());
  }
}

}  // namespace tg::pretrained
