// GGUF files (llama.cpp's models) read as the Hugging Face folder they were converted from:
// their metadata becomes that folder's config.json and their tensors get its names and
// layouts, so the loaders map them as they map a folder's (the Llama family's, GPT-2's).
//
// llama.cpp's converter (convert_hf_to_gguf.py) renames every tensor (model.layers.N.self_attn.q_proj
// → blk.N.attn_q, …) and, for the architecture "llama" only, reorders the rows of each head of
// q_proj and k_proj so that the two halves its rotate-half RoPE pairs (i, i + D/2) become
// adjacent rows (2i, 2i + 1), the pairing of ggml's own rotation. Reading undoes both. Llama 3.1's
// RoPE rescaling is stored as the per-pair divisors it produces (the tensor rope_freqs.weight),
// not as its parameters: it becomes a rope_scaling that divides each pair's frequency by its
// divisor (transformers' longrope with factor 1, which is exactly that). The other changes the
// converter makes are undone too: a mixture's experts stacked into one tensor per layer, Gemma's
// norm gains stored as 1 + w, GPT-2's Conv1D weights transposed; what llama.cpp derives rather
// than stores (Gemma's attention scale and windowed layers) is derived as it derives it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/gguf.h"
#include "io/pretrained_internal.h"
#include "text/tokenizer_impl.h"

namespace tg::pretrained::detail {
namespace {

struct Arch {
  const char* gguf;          // general.architecture
  const char* architecture;  // the transformers class
  bool permuted;             // q and k rows reordered for ggml's RoPE pairing
};
constexpr Arch kArchs[] = {
    {"llama", "LlamaForCausalLM", true},        {"qwen2", "Qwen2ForCausalLM", false},
    {"qwen3", "Qwen3ForCausalLM", false},       {"qwen2moe", "Qwen2MoeForCausalLM", false},
    {"qwen3moe", "Qwen3MoeForCausalLM", false}, {"phi3", "Phi3ForCausalLM", false},
    {"gemma", "GemmaForCausalLM", false},       {"gemma2", "Gemma2ForCausalLM", false},
    {"gemma3", "Gemma3ForCausalLM", false},     {"gpt2", "GPT2LMHeadModel", false},
};

bool is_gemma(const Arch& a) { return std::string(a.gguf).starts_with("gemma"); }

// A "llama" file with experts is Mixtral's (llama.cpp files Mixtral as llama).
bool is_mixtral(const io::GgufFile& g, const Arch& a) {
  return std::string(a.gguf) == "llama" && g.meta.contains("llama.expert_count") &&
         g.meta["llama.expert_count"].is_number_integer() && g.meta["llama.expert_count"].get<int64_t>() > 0;
}

std::string arch_list() {
  std::string s;
  for (const Arch& a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a.gguf);
  return s;
}

// The GGUF reader's errors ("<path>: <what>") as load()'s.
template <typename F>
auto reading(F&& f) {
  try {
    return f();
  } catch (const CheckpointError& e) {
    throw CheckpointError(std::string("[pretrained::load] ") + e.what());
  }
}

const Arch& arch_of(const io::GgufFile& g) {
  const auto it = g.meta.find("general.architecture");
  if (it == g.meta.end() || !it->is_string())
    fail(g.path, "no general.architecture (a string) in the metadata");
  const std::string name = it->get<std::string>();
  for (const Arch& a : kArchs)
    if (name == a.gguf) return a;
  fail(g.path, "general.architecture is \"" + name + "\"; the GGUF architectures read: " + arch_list());
}

// A metadata value for a message: its JSON, cut short; bytes that are not UTF-8 replaced.
std::string shown(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 80);
}

std::string string_of(const io::GgufFile& g, const std::string& key, const std::string& fallback) {
  const auto it = g.meta.find(key);
  if (it == g.meta.end()) return fallback;
  if (!it->is_string()) fail(g.path, key + " is " + shown(*it) + ", expected a string");
  return it->get<std::string>();
}

// A metadata value of the model's architecture ("<arch>.<key>"), checked to be a positive
// integer (a per-layer list, as some files hold for head counts, is refused).
int64_t size_of(const io::GgufFile& g, const std::string& key, int64_t fallback = -1) {
  const auto it = g.meta.find(key);
  if (it == g.meta.end()) {
    if (fallback >= 0) return fallback;
    fail(g.path, "the metadata has no " + key);
  }
  if (!it->is_number_integer() || it->get<int64_t>() <= 0)
    fail(g.path, key + " is " + shown(*it) + ", expected a positive integer");
  return it->get<int64_t>();
}

double number_of(const io::GgufFile& g, const std::string& key, double fallback) {
  const auto it = g.meta.find(key);
  if (it == g.meta.end()) return fallback;
  if (!it->is_number()) fail(g.path, key + " is " + shown(*it) + ", expected a number");
  return it->get<double>();
}

// What llama.cpp derives for Gemma 2 and 3 rather than reads from the file: the attention scale
// (head_dim^-1/2, but (hidden / heads)^-1/2 for the 27B models: 46 and 62 layers), the soft caps
// (Gemma 2: the file's, else 50 and 30; Gemma 3: a final one if the file has it), the windowed
// layers (Gemma 2: every other one from the first, a window of 4096 without the key; Gemma 3:
// 5 of every 6, none without a window or with 0) and Gemma 3's local RoPE base 10000.
void read_gemma(const io::GgufFile& g, const Arch& a, json& c) {
  const std::string p = std::string(a.gguf) + ".";
  c["hidden_activation"] = "gelu_pytorch_tanh";
  const bool gemma2 = std::string(a.gguf) == "gemma2", gemma3 = std::string(a.gguf) == "gemma3";
  if (!gemma2 && !gemma3) return;
  const int64_t layers = c["num_hidden_layers"].get<int64_t>();
  const bool big = (gemma2 && layers == 46) || (gemma3 && layers == 62);
  c["query_pre_attn_scalar"] = big ? c["hidden_size"].get<int64_t>() / c["num_attention_heads"].get<int64_t>()
                                   : c["head_dim"].get<int64_t>();
  c["attn_logit_softcapping"] = gemma2 ? json(number_of(g, p + "attn_logit_softcapping", 50.0)) : json();
  const bool final_cap = gemma2 || g.meta.contains(p + "final_logit_softcapping");  // Gemma 3's optional
  c["final_logit_softcapping"] = final_cap ? json(number_of(g, p + "final_logit_softcapping", 30.0)) : json();
  // The window: Gemma 2's default 4096; Gemma 3 without one (or 0) has no windowed layers.
  const auto key = g.meta.find(p + "attention.sliding_window");
  const bool windowed =
      gemma2 || (key != g.meta.end() && !(key->is_number_integer() && key->get<int64_t>() == 0));
  c["sliding_window"] = windowed ? json(size_of(g, p + "attention.sliding_window", 4096)) : json();
  json types = json::array();
  for (int64_t i = 0; i < layers; ++i)
    types.push_back(windowed && (gemma2 ? i % 2 == 0 : i % 6 < 5) ? "sliding_attention" : "full_attention");
  c["layer_types"] = types;
  if (gemma3) c["model_type"] = "gemma3_text";
}

const io::GgufTensor* tensor_named(const io::GgufFile& g, const std::string& name) {
  for (const io::GgufTensor& t : g.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

// A mixture's settings: Mixtral's experts in every layer, or Qwen's where the file has them
// (a layer without ffn_gate_exps is dense: mlp_only_layers), of expert_feed_forward_length,
// with Qwen2-MoE's shared expert. llama.cpp renormalises the chosen experts' weights for
// Qwen3-MoE and not for Qwen2-MoE, whatever the model was trained with: so does the config.
void read_experts(const io::GgufFile& g, const Arch& a, bool mixtral, json& c) {
  const std::string p = std::string(a.gguf) + ".";
  const int64_t count = size_of(g, p + "expert_count");
  c[mixtral ? "num_local_experts" : "num_experts"] = count;
  c["num_experts_per_tok"] = size_of(g, p + "expert_used_count");
  if (mixtral) return;
  c["moe_intermediate_size"] = size_of(g, p + "expert_feed_forward_length");
  if (std::string(a.gguf) == "qwen2moe")
    c["shared_expert_intermediate_size"] = size_of(g, p + "expert_shared_feed_forward_length", 0);
  c["norm_topk_prob"] = std::string(a.gguf) == "qwen3moe";
  c["decoder_sparse_step"] = 1;
  json dense = json::array();
  for (int64_t i = 0; i < c["num_hidden_layers"].get<int64_t>(); ++i)
    if (tensor_named(g, "blk." + std::to_string(i) + ".ffn_gate_exps.weight") == nullptr) dense.push_back(i);
  c["mlp_only_layers"] = dense;
  if (std::string(a.gguf) == "qwen2moe") c["qkv_bias"] = tensor_named(g, "blk.0.attn_q.bias") != nullptr;
  if (!g.meta.contains(p + "feed_forward_length")) c["intermediate_size"] = c["moe_intermediate_size"];
}

// ffn_gate_exps, ffn_up_exps and ffn_down_exps ([experts, rows, columns]) as transformers' one
// matrix per expert, each deferred: an expert's rows are whole blocks of its own, read and
// dequantized when the loader takes it. False for any other tensor.
bool split_experts(const io::GgufTensor& t, bool mixtral, const std::string& path, const std::string& file,
                   Weights& w) {
  static const std::pair<const char*, const char*> kParts[] = {{".ffn_gate_exps.weight", "gate_proj"},
                                                               {".ffn_up_exps.weight", "up_proj"},
                                                               {".ffn_down_exps.weight", "down_proj"}};
  static const std::map<std::string, std::string> kMixtral = {
      {"gate_proj", "w1"}, {"up_proj", "w3"}, {"down_proj", "w2"}};
  for (const auto& [suffix, part] : kParts) {
    if (!t.name.starts_with("blk.") || !t.name.ends_with(suffix)) continue;
    const std::string layer = t.name.substr(4, t.name.size() - 4 - std::strlen(suffix));
    if (t.shape.size() != 3) fail(path, "tensor '" + t.name + "' is not [experts, rows, columns]");
    const auto experts = static_cast<uint64_t>(t.shape[0]);
    for (uint64_t e = 0; e < experts; ++e) {
      io::GgufTensor one = t;  // expert e's slice: its bytes are a contiguous, whole-block part
      one.name = t.name + "[" + std::to_string(e) + "]";
      one.shape = {t.shape[1], t.shape[2]};
      one.bytes = t.bytes / experts;
      one.offset = t.offset + e * one.bytes;
      const std::string name =
          "model.layers." + layer +
          (mixtral ? ".block_sparse_moe.experts." + std::to_string(e) + "." + kMixtral.at(part)
                   : ".mlp.experts." + std::to_string(e) + "." + part) +
          ".weight";
      w.file_of[name] = file + " (" + one.name + ", " + io::ggml_type_name(t.type) + ")";
      w.deferred[name] = {one.shape,
                          [one, path]() {
                            std::ifstream f(path, std::ios::binary);
                            io::GgufFile header;
                            header.path = path;
                            return reading([&] { return io::read_gguf_tensor(header, one, f); });
                          },
                          {}};
    }
    return true;
  }
  return false;
}

// The transformers name of a GGUF tensor of the Llama family ("" for rope_freqs, which is
// configuration); a name it does not know is kept, for map_weights to report.
std::string hf_name(const std::string& n, const std::string& arch, bool mixtral) {
  const bool phi3 = arch == "phi3", sandwich = arch == "gemma2" || arch == "gemma3";
  static const std::pair<const char*, const char*> kTop[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  for (const auto& [from, to] : kTop)
    if (n == from) return to;
  if (!n.starts_with("blk.")) return n;
  const size_t dot = n.find('.', 4);
  if (dot == std::string::npos) return n;
  const std::string layer = n.substr(4, dot - 4), rest = n.substr(dot + 1);
  const std::pair<const char*, const char*> kLayer[] = {
      // not static: names depend on the architecture
      {"attn_norm.", "input_layernorm."},
      {"ffn_norm.", sandwich ? "pre_feedforward_layernorm." : "post_attention_layernorm."},
      {"post_attention_norm.", "post_attention_layernorm."},
      {"post_ffw_norm.", "post_feedforward_layernorm."},
      {"attn_q.", "self_attn.q_proj."},
      {"attn_k.", "self_attn.k_proj."},
      {"attn_v.", "self_attn.v_proj."},
      {"attn_output.", "self_attn.o_proj."},
      {"attn_q_norm.", "self_attn.q_norm."},
      {"attn_k_norm.", "self_attn.k_norm."},
      {"ffn_gate.", "mlp.gate_proj."},
      {"attn_qkv.", "self_attn.qkv_proj."},
      {"ffn_up.", phi3 ? "mlp.gate_up_proj." : "mlp.up_proj."},
      {"ffn_down.", "mlp.down_proj."},
      {"ffn_gate_inp_shexp.", "mlp.shared_expert_gate."},
      {"ffn_gate_shexp.", "mlp.shared_expert.gate_proj."},
      {"ffn_up_shexp.", "mlp.shared_expert.up_proj."},
      {"ffn_down_shexp.", "mlp.shared_expert.down_proj."},
      {"ffn_gate_inp.", mixtral ? "block_sparse_moe.gate." : "mlp.gate."}};
  for (const auto& [from, to] : kLayer)
    if (rest.starts_with(from)) return "model.layers." + layer + "." + to + rest.substr(std::strlen(from));
  return n;
}

// Undoes the converter's row order of q or k (rows [heads · D], any trailing extent): within a
// head, file row 2i + s holds the model's row s · D/2 + i.
HostTensor unpermute(const HostTensor& t, int64_t heads, const std::string& path, const std::string& name) {
  const int64_t rows = t.shape()[0];
  if (heads <= 0 || rows % (2 * heads) != 0)
    fail(path, "tensor '" + name + "' has " + std::to_string(rows) + " rows, not " + std::to_string(heads) +
                   " heads of an even size");
  const int64_t half = rows / heads / 2;
  const size_t row_bytes = static_cast<size_t>(t.numel() / rows * dtype_size(t.dtype()));
  HostTensor out(t.dtype(), t.shape());
  const auto* src = static_cast<const uint8_t*>(t.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t s = 0; s < 2; ++s) {
        const int64_t file_row = h * 2 * half + 2 * i + s, model_row = h * 2 * half + s * half + i;
        std::memcpy(dst + model_row * row_bytes, src + file_row * row_bytes, row_bytes);
      }
  return out;
}

// A vector of positive divisors the file stores as an F32 tensor (rope_freqs, rope_factors_*).
json divisors_of(const io::GgufFile& g, const io::GgufTensor& f, int64_t n) {
  if (f.shape != Shape{n} || f.type != 0)
    fail(g.path, f.name + " is not an F32 vector of " + std::to_string(n) + " divisors");
  std::ifstream in(g.path, std::ios::binary);
  const HostTensor t = reading([&] { return io::read_gguf_tensor(g, f, in); });
  json d = json::array();
  for (float v : t.f32()) {
    if (!(v > 0) || !std::isfinite(v))
      fail(g.path, f.name + " holds " + std::to_string(v) + ", expected positive divisors");
    d.push_back(v);
  }
  return d;
}

// RoPE's settings as rope_parameters: the base, linear or yarn rescaling from rope.scaling.*,
// Llama 3.1's divisors (rope_freqs), Phi-3's longrope (rope_factors_short/long with the original
// context and attention factor) and its partial rotation (rope.dimension_count below the head,
// into c's partial_rotary_factor).
json rope_of(const io::GgufFile& g, const Arch& a, json& c, int64_t head_dim) {
  const std::string p = std::string(a.gguf) + ".", &path = g.path;
  const bool phi3 = std::string(a.gguf) == "phi3";
  const int64_t rotated = size_of(g, p + "rope.dimension_count", head_dim);
  if (rotated != head_dim) {
    if (!phi3 || rotated > head_dim || rotated % 2 != 0)
      fail(path, p + "rope.dimension_count " + std::to_string(rotated) + " rotates part of each head of " +
                     std::to_string(head_dim) + " (implemented for phi3 only)");
    c["partial_rotary_factor"] = static_cast<double>(rotated) / static_cast<double>(head_dim);
  }
  json rope = {{"rope_theta", number_of(g, p + "rope.freq_base", 10000.0)}, {"rope_type", "default"}};
  const std::string scaling = string_of(g, p + "rope.scaling.type", "none");
  if (scaling == "linear") {
    rope["rope_type"] = "linear";
    rope["factor"] = number_of(g, p + "rope.scaling.factor", 1.0);
  } else if (scaling == "yarn") {
    rope["rope_type"] = "yarn";
    rope["factor"] = number_of(g, p + "rope.scaling.factor", 1.0);
    rope["original_max_position_embeddings"] = size_of(g, p + "rope.scaling.original_context_length");
  } else if (scaling != "none") {
    fail(path, p + "rope.scaling.type is \"" + scaling + "\" (read: none, linear, yarn)");
  }
  if (const io::GgufTensor* f = tensor_named(g, "rope_freqs.weight")) {
    if (rope["rope_type"] != "default")
      fail(path, "rope_freqs.weight beside " + p + "rope.scaling.type " + scaling);
    const json divisors = divisors_of(g, *f, rotated / 2);
    rope["rope_type"] = "longrope";
    rope["short_factor"] = divisors;
    rope["long_factor"] = divisors;
    rope["factor"] = 1.0;
    rope["original_max_position_embeddings"] = c["max_position_embeddings"];
  }
  const io::GgufTensor *long_f = tensor_named(g, "rope_factors_long.weight"),
                       *short_f = tensor_named(g, "rope_factors_short.weight");
  if (long_f != nullptr || short_f != nullptr) {
    if (!phi3 || long_f == nullptr || short_f == nullptr || rope["rope_type"] != "default")
      fail(path, "rope_factors_long/short.weight: read for phi3, both of them, without other rescaling");
    rope["rope_type"] = "longrope";
    rope["short_factor"] = divisors_of(g, *short_f, rotated / 2);
    rope["long_factor"] = divisors_of(g, *long_f, rotated / 2);
    rope["original_max_position_embeddings"] = size_of(g, p + "rope.scaling.original_context_length");
    c["original_max_position_embeddings"] = rope["original_max_position_embeddings"];
    if (g.meta.contains(p + "rope.scaling.attn_factor"))
      rope["attention_factor"] = number_of(g, p + "rope.scaling.attn_factor", 1.0);
  }
  return rope;
}

// GPT-2's config.json (GPT2LMHeadModel: tied head, the tanh GELU).
json gpt2_config(const io::GgufFile& g) {
  json c = {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"activation_function", "gelu_new"},
            {"tie_word_embeddings", true}};
  const io::GgufTensor* embed = tensor_named(g, "token_embd.weight");
  if (embed == nullptr || embed->shape.size() != 2)
    fail(g.path, "no 2-D tensor token_embd.weight (the embedding)");
  c["vocab_size"] = size_of(g, "gpt2.vocab_size", embed->shape[0]);
  c["n_embd"] = size_of(g, "gpt2.embedding_length");
  c["n_layer"] = size_of(g, "gpt2.block_count");
  c["n_head"] = size_of(g, "gpt2.attention.head_count");
  c["n_positions"] = size_of(g, "gpt2.context_length");
  c["n_inner"] = size_of(g, "gpt2.feed_forward_length", 4 * c["n_embd"].get<int64_t>());
  c["layer_norm_epsilon"] = number_of(g, "gpt2.attention.layer_norm_epsilon", 1e-5);
  for (const char* key : {"bos", "eos"}) {
    const std::string k = std::string("tokenizer.ggml.") + key + "_token_id";
    if (g.meta.contains(k)) c[std::string(key) + "_token_id"] = g.meta[k];
  }
  return c;
}

// GPT-2's file names of its GGUF tensors (GPT2LMHeadModel's, under transformer.).
std::string gpt2_name(const std::string& n) {
  static const std::map<std::string, std::string> kTop = {{"token_embd.weight", "transformer.wte.weight"},
                                                          {"position_embd.weight", "transformer.wpe.weight"},
                                                          {"output_norm.weight", "transformer.ln_f.weight"},
                                                          {"output_norm.bias", "transformer.ln_f.bias"},
                                                          {"output.weight", "lm_head.weight"}};
  if (const auto it = kTop.find(n); it != kTop.end()) return it->second;
  if (!n.starts_with("blk.")) return n;
  const size_t dot = n.find('.', 4), last = n.rfind('.');
  if (dot == std::string::npos || last <= dot) return n;
  static const std::map<std::string, std::string> kLayer = {
      {"attn_norm", "ln_1"}, {"attn_qkv", "attn.c_attn"}, {"attn_output", "attn.c_proj"},
      {"ffn_norm", "ln_2"},  {"ffn_up", "mlp.c_fc"},      {"ffn_down", "mlp.c_proj"}};
  const auto it = kLayer.find(n.substr(dot + 1, last - dot - 1));
  if (it == kLayer.end()) return n;
  return "transformer.h." + n.substr(4, dot - 4) + "." + it->second + n.substr(last);
}

}  // namespace

json gguf_config(const std::string& path) {
  const io::GgufFile g = reading([&] { return io::read_gguf(path); });
  const Arch& a = arch_of(g);
  if (std::string(a.gguf) == "gpt2") return gpt2_config(g);
  const std::string p = std::string(a.gguf) + ".";
  json c = json::object();
  const bool mixtral = is_mixtral(g, a);
  c["architectures"] = json::array({mixtral ? "MixtralForCausalLM" : a.architecture});
  c["model_type"] = a.gguf;
  const io::GgufTensor* embed = tensor_named(g, "token_embd.weight");
  if (embed == nullptr || embed->shape.size() != 2)
    fail(path, "no 2-D tensor token_embd.weight (the embedding)");
  c["vocab_size"] = size_of(g, p + "vocab_size", embed->shape[0]);  // the embedding's rows without the key
  c["hidden_size"] = size_of(g, p + "embedding_length");
  c["intermediate_size"] = size_of(g, p + "feed_forward_length");
  c["num_hidden_layers"] = size_of(g, p + "block_count");
  const int64_t heads = size_of(g, p + "attention.head_count");
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = size_of(g, p + "attention.head_count_kv", heads);
  c["max_position_embeddings"] = size_of(g, p + "context_length");
  c["rms_norm_eps"] = number_of(g, p + "attention.layer_norm_rms_epsilon", 1e-6);
  const int64_t head_dim = size_of(g, p + "attention.key_length", c["hidden_size"].get<int64_t>() / heads);
  if (size_of(g, p + "attention.value_length", head_dim) != head_dim)
    fail(path, p + "attention.value_length differs from the key length (not implemented)");
  c["head_dim"] = head_dim;
  c["tie_word_embeddings"] = tensor_named(g, "output.weight") == nullptr;
  if (std::string(a.gguf) == "phi3") {  // a window in every layer, or none
    const auto w = g.meta.find(p + "attention.sliding_window");
    const bool none = w == g.meta.end() || (w->is_number_integer() && w->get<int64_t>() == 0);  // Phi-4: 0
    c["sliding_window"] = none ? json() : json(size_of(g, p + "attention.sliding_window"));
  }
  if (mixtral || std::string(a.gguf).ends_with("moe")) read_experts(g, a, mixtral, c);
  if (std::string(a.gguf) == "llama") c["attention_bias"] = tensor_named(g, "blk.0.attn_q.bias") != nullptr;
  if (is_gemma(a)) read_gemma(g, a, c);
  c["rope_parameters"] = rope_of(g, a, c, head_dim);
  if (std::string(a.gguf) == "gemma3")  // the global layers' settings from the file, the local base fixed
    c["rope_parameters"] = {{"full_attention", c["rope_parameters"]},
                            {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  for (const auto& [key, field] : {std::pair<const char*, const char*>{"bos", "bos_token_id"},
                                   {"eos", "eos_token_id"},
                                   {"padding", "pad_token_id"}}) {
    const std::string k = std::string("tokenizer.ggml.") + key + "_token_id";
    const auto it = g.meta.find(k);
    if (it == g.meta.end()) continue;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<int64_t>() >= c["vocab_size"].get<int64_t>())
      fail(path, k + " is " + shown(*it) + ", not an id of the " + c["vocab_size"].dump() + " tokens");
    c[field] = it->get<int64_t>();
  }
  // Chat models' end-of-turn tokens end generation too (Llama 3's <|eot_id|>, <|eom_id|>), as
  // their generation_config.json lists them beside eos_token_id.
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const auto it = g.meta.find(key);
    if (it == g.meta.end() || !it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<int64_t>() >= c["vocab_size"].get<int64_t>())
      continue;
    json ids = !c.contains("eos_token_id")    ? json::array()
               : c["eos_token_id"].is_array() ? c["eos_token_id"]
                                              : json::array({c["eos_token_id"]});
    if (std::find(ids.begin(), ids.end(), *it) == ids.end()) ids.push_back(it->get<int64_t>());
    c["eos_token_id"] = ids.size() == 1 ? ids[0] : ids;
  }
  return c;
}

Weights gguf_weights(const std::string& path) {
  const io::GgufFile g = reading([&] { return io::read_gguf(path); });
  const Arch& a = arch_of(g);
  const std::string p = std::string(a.gguf) + ".", arch = a.gguf;
  const int64_t heads = size_of(g, p + "attention.head_count");
  const int64_t kv_heads = a.permuted ? size_of(g, p + "attention.head_count_kv", heads) : heads;
  const std::string file = std::filesystem::path(path).filename().string();
  const bool mixtral = is_mixtral(g, a), gemma = is_gemma(a), permuted = a.permuted;
  // A tensor's transformers name and its values in transformers' layout.
  const auto name_of = [&](const io::GgufTensor& t) {
    return arch == "gpt2" ? gpt2_name(t.name) : hf_name(t.name, arch, mixtral);
  };
  const auto layout = [=](const io::GgufTensor& t, const std::string& name, HostTensor v) {
    if (arch == "gpt2" && v.shape().size() == 2 && t.name.starts_with("blk."))
      v = transpose2d(v.to(DType::kF32));            // back to GPT-2's Conv1D [in, out]
    if (gemma && t.name.ends_with("norm.weight")) {  // the converter stored 1 + w, ggml's norm gain
      HostTensor f = v.to(DType::kF32);
      for (float& x : f.f32()) x -= 1.0f;
      v = std::move(f);
    }
    if (t.name.ends_with(".ffn_gate_inp_shexp.weight") && v.shape().size() == 1) {  // [hidden] → [1, hidden]
      const int64_t n = v.numel();
      v = HostTensor::f32(v.to(DType::kF32).f32(), {1, n});
    }
    if (permuted && name.find(".self_attn.q_proj.") != std::string::npos)
      v = unpermute(v, heads, path, t.name);
    if (permuted && name.find(".self_attn.k_proj.") != std::string::npos)
      v = unpermute(v, kv_heads, path, t.name);
    return v;
  };
  Weights w;
  w.listing = file;
  std::ifstream in(path, std::ios::binary);
  for (const io::GgufTensor& t : g.tensors) {
    if (t.name == "rope_freqs.weight" || t.name.starts_with("rope_factors_"))
      continue;  // configuration (gguf_config)
    const std::string name = name_of(t);
    w.file_of[name] = file + " (" + t.name + ", " + io::ggml_type_name(t.type) + ")";
    // A matrix (an expert's too) is read when the loader takes it, so that a quantized model is
    // never held whole in f32; vectors, and GPT-2's embeddings, which its loader looks at first,
    // are read now. GPT-2's output.weight is the copy of token_embd the converter always writes
    // (quantized apart from it): the head is tied, so it is left out.
    if (arch == "gpt2" && t.name == "output.weight") continue;
    const bool now = t.shape.size() != 2 || (arch == "gpt2" && !t.name.starts_with("blk."));
    if (!now) {
      Shape shape = t.shape;
      if (arch == "gpt2") std::swap(shape[0], shape[1]);
      w.deferred[name] = {shape,
                          [t, name, layout, file = g.path]() {
                            std::ifstream f(file, std::ios::binary);
                            io::GgufFile header;
                            header.path = file;
                            return layout(t, name,
                                          reading([&] { return io::read_gguf_tensor(header, t, f); }));
                          },
                          {}};
      w.deferred[name].file_bits = io::ggml_bits(t.type);
      // 4-bit blocks kept as codes: the same rows, each part laid out as the values would be
      // (Llama's q and k rows reordered; no other layout change touches a 4-bit matrix).
      if (io::ggml_is_int4(t.type) && arch != "gpt2")
        w.deferred[name].read_int4 = [t, name, layout, file = g.path]() {
          std::ifstream f(file, std::ios::binary);
          io::GgufFile header;
          header.path = file;
          Quantized4Tensor q = reading([&] { return io::read_gguf_tensor_int4(header, t, f); });
          return Quantized4Tensor{layout(t, name, std::move(q.q)), layout(t, name, std::move(q.scale)),
                                  layout(t, name, std::move(q.offset))};
        };
      continue;
    }
    if (split_experts(t, mixtral, path, file, w)) continue;
    HostTensor v = reading([&] { return io::read_gguf_tensor(g, t, in); });
    w.tensors[name] = layout(t, name, std::move(v));
  }
  return w;
}

std::map<std::string, std::string> gguf_side_files(const std::string& path) {
  const io::GgufFile g = reading([&] { return io::read_gguf(path); });
  std::map<std::string, std::string> files;
  if (g.meta.contains("tokenizer.ggml.model")) {
    try {
      files["tokenizer.json"] = text::tokenizer_json_of_gguf(g).dump(2) + "\n";
    } catch (const TokenizerError& e) {
      fail(path, std::string("its tokenizer cannot be written as tokenizer.json: ") + e.what());
    } catch (const json::exception& e) {  // a token that is not UTF-8
      fail(path, std::string("its tokenizer cannot be written as tokenizer.json: ") + e.what());
    }
  }
  if (g.meta.contains("tokenizer.chat_template") && g.meta["tokenizer.chat_template"].is_string())
    files["chat_template.jinja"] = g.meta["tokenizer.chat_template"].get<std::string>();
  return files;
}

}  // namespace tg::pretrained::detail
