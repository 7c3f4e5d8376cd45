// The Llama family's LayerNorm relatives → nn::Llama with LlamaConfig::layer_norm (weight and
// bias, ε = layer_norm_eps), RoPE on part of each head, and biases where the family has them:
//   GPTNeoXForCausalLM   (Pythia) gpt_neox.*: one fused query_key_value per layer whose rows
//                        are per head [q | k | v] (split here, fused again by save), an MLP
//                        without a gate (dense_h_to_4h, GELU, dense_4h_to_h), biases on every
//                        projection (attention_bias), the head `embed_out`; a parallel layer
//                        with two norms (use_parallel_residual, its default) or the sequential
//                        one. rotary_pct / rotary_emb_base are transformers 4's names of
//                        partial_rotary_factor / rope_theta.
//   PhiForCausalLM       (Phi-1, 1.5, 2) a parallel layer on one shared norm, q/k/v_proj and
//                        `dense` with biases, an MLP fc1 → gelu_new → fc2 with biases,
//                        final_layernorm, and a biased lm_head.
//   StableLmForCausalLM  Llama's names and SwiGLU MLP with LayerNorms, q/k/v biases with
//                        use_qkv_bias, parallel on one norm with use_parallel_residual.
//   Starcoder2ForCausalLM  Llama's attention names, an MLP c_fc → GELU → c_proj, biases on every
//                        projection (use_bias), norm_epsilon, a sliding window in every layer
//                        when sliding_window is set, a tied head by default; RoPE on whole heads.
// Their q/k LayerNorms (qk_layernorm) are refused.
#include <string>
#include <utility>
#include <vector>

#include "io/pretrained_internal.h"
#include "tensorgrad/errors.h"

namespace tg::pretrained::detail {
namespace {

enum class Kind { kNeox, kPhi, kStableLm, kStarcoder2 };

Kind kind_of(const std::string& architecture) {
  return architecture == "GPTNeoXForCausalLM"      ? Kind::kNeox
         : architecture == "PhiForCausalLM"        ? Kind::kPhi
         : architecture == "Starcoder2ForCausalLM" ? Kind::kStarcoder2
                                                   : Kind::kStableLm;
}

// Replaces the first `from` in s by `to`; false when s has none.
bool swap_part(std::string& s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  if (at == std::string::npos) return false;
  s.replace(at, from.size(), to);
  return true;
}

// The file's name of an nn::Llama parameter. GPT-NeoX's q/k/v_proj name the parts of the fused
// query_key_value that load splits out (attention.q_proj …); no file holds them.
std::string file_name_of(Kind k, std::string p) {
  if (k == Kind::kStableLm) return p;
  if (k == Kind::kStarcoder2) {
    swap_part(p, ".mlp.up_proj.", ".mlp.c_fc.") || swap_part(p, ".mlp.down_proj.", ".mlp.c_proj.");
    return p;
  }
  if (k == Kind::kPhi) {
    swap_part(p, ".self_attn.o_proj.", ".self_attn.dense.") || swap_part(p, ".mlp.up_proj.", ".mlp.fc1.") ||
        swap_part(p, ".mlp.down_proj.", ".mlp.fc2.") || swap_part(p, "model.norm.", "model.final_layernorm.");
    return p;
  }
  if (swap_part(p, "model.embed_tokens.", "gpt_neox.embed_in.") || swap_part(p, "lm_head.", "embed_out.") ||
      swap_part(p, "model.norm.", "gpt_neox.final_layer_norm."))
    return p;
  swap_part(p, "model.layers.", "gpt_neox.layers.");
  swap_part(p, ".self_attn.o_proj.", ".attention.dense.") || swap_part(p, ".self_attn.", ".attention.") ||
      swap_part(p, ".mlp.up_proj.", ".mlp.dense_h_to_4h.") ||
      swap_part(p, ".mlp.down_proj.", ".mlp.dense_4h_to_h.");
  return p;
}

// GPT-NeoX's fused projection: rows (head h, part s ∈ {q, k, v}, feature j) of [3·H·D, inner]
// (inner: d_model for the weight, 1 for the bias) ↔ the three tensors [H·D, inner].
std::vector<HostTensor> unfuse_per_head(const HostTensor& fused, int64_t heads, int64_t head_dim) {
  const int64_t inner = fused.numel() / (3 * heads * head_dim);
  const std::span<const float> v = fused.f32();
  std::vector<HostTensor> out;
  for (int64_t s = 0; s < 3; ++s) {
    std::vector<float> part;
    part.reserve(static_cast<size_t>(heads * head_dim * inner));
    for (int64_t h = 0; h < heads; ++h) {
      const auto first = v.begin() + (h * 3 + s) * head_dim * inner;
      part.insert(part.end(), first, first + head_dim * inner);
    }
    Shape shape = fused.shape();
    shape[0] = heads * head_dim;
    out.push_back(HostTensor::f32(std::move(part), shape));
  }
  return out;
}

HostTensor fuse_per_head(const std::vector<const HostTensor*>& parts, int64_t heads, int64_t head_dim) {
  const int64_t inner = parts[0]->numel() / (heads * head_dim);
  std::vector<float> out;
  out.reserve(static_cast<size_t>(3 * heads * head_dim * inner));
  for (int64_t h = 0; h < heads; ++h)
    for (const HostTensor* t : parts) {
      const auto first = t->f32().begin() + h * head_dim * inner;
      out.insert(out.end(), first, first + head_dim * inner);
    }
  Shape shape = parts[0]->shape();
  shape[0] = 3 * heads * head_dim;
  return HostTensor::f32(std::move(out), shape);
}

// Splits each layer's query_key_value (weight, and bias when the config has them) into the
// q/k/v_proj names file_name_of gives, checking the fused tensor first.
void split_query_key_value(Model& m, Weights& w, const nn::LlamaConfig& l) {
  const int64_t hd = l.head_size(), rows = 3 * l.heads * hd;
  for (int64_t i = 0; i < l.layers; ++i) {
    const std::string at = "gpt_neox.layers." + std::to_string(i) + ".attention.";
    for (const std::string kind : {"weight", "bias"}) {
      if (kind == "bias" && !l.attention_bias) continue;
      const std::string fused = at + "query_key_value." + kind;
      const Shape want = kind == "weight" ? Shape{rows, l.d_model} : Shape{rows};
      std::string file;
      std::vector<HostTensor> parts = unfuse_per_head(take_tensor(m, w, fused, want, file), l.heads, hd);
      const char* names[] = {"q_proj.", "k_proj.", "v_proj."};
      for (size_t s = 0; s < 3; ++s) {
        w.tensors[at + names[s] + kind] = std::move(parts[s]);
        w.file_of[at + names[s] + kind] = file;
      }
    }
  }
}

nn::LlamaConfig::Gate gate_of(const std::string& f, const std::string& act) {
  using Gate = nn::LlamaConfig::Gate;
  if (act == "silu") return Gate::kSilu;
  if (act == "gelu") return Gate::kGelu;
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return Gate::kGeluTanh;
  fail(f, "config.json: hidden_act \"" + act + "\" (implemented: silu, gelu, gelu_new, gelu_pytorch_tanh)");
}

// transformers 4's GPT-NeoX names, and each family's default rotated fraction when the file
// gives none (GPT-NeoX and StableLM rotate a quarter of each head, Phi half, StarCoder 2 all).
json with_rope_defaults(const json& c, Kind k) {
  json out = c;
  if (!out.contains("rope_theta") && out.contains("rotary_emb_base"))
    out["rope_theta"] = out["rotary_emb_base"];
  if (!out.contains("partial_rotary_factor") && out.contains("rotary_pct"))
    out["partial_rotary_factor"] = out["rotary_pct"];
  const bool nested = out.contains("rope_parameters") && out["rope_parameters"].is_object() &&
                      out["rope_parameters"].contains("partial_rotary_factor");
  if (!out.contains("partial_rotary_factor") && !nested)
    out["partial_rotary_factor"] = k == Kind::kPhi ? 0.5 : k == Kind::kStarcoder2 ? 1.0 : 0.25;
  return out;
}

}  // namespace

bool is_layernorm_family(const std::string& architecture) {
  return architecture == "GPTNeoXForCausalLM" || architecture == "PhiForCausalLM" ||
         architecture == "StableLmForCausalLM" || architecture == "Starcoder2ForCausalLM";
}

void load_layernorm_family(Model& m, const json& config) {
  const std::string& f = m.folder;
  const Kind k = kind_of(m.architecture);
  const json c = with_rope_defaults(config, k);
  using Parallel = nn::LlamaConfig::Parallel;
  nn::LlamaConfig l;
  read_llama_sizes(c, f, l);
  // GPT-NeoX's attention has one key and value head per query head; StableLmConfig's default
  // is 32 KV heads whatever the query heads, transformers' value for a file without the key.
  l.kv_heads = k == Kind::kNeox
                   ? l.heads
                   : field<int64_t>(c, f, "num_key_value_heads", k == Kind::kStableLm ? 32 : l.heads);
  const int64_t max_positions = required(c, f, "max_position_embeddings");
  l.layer_norm = true;
  l.rms_eps = field<double>(c, f, k == Kind::kStarcoder2 ? "norm_epsilon" : "layer_norm_eps", 1e-5);
  l.tied_head = field<bool>(c, f, "tie_word_embeddings", k == Kind::kStarcoder2);
  if (k != Kind::kNeox && field<bool>(c, f, "qk_layernorm", false))
    fail(f, "config.json: qk_layernorm true (LayerNorms over the queries and keys) is not implemented");
  if (l.d_model % l.heads != 0)
    fail(f, "config.json: hidden_size " + std::to_string(l.d_model) +
                " is no multiple of num_attention_heads " + std::to_string(l.heads));
  switch (k) {
    case Kind::kNeox:
      l.attention_bias = field<bool>(c, f, "attention_bias", true);
      l.mlp_bias = true;
      l.gated_mlp = false;
      l.parallel = field<bool>(c, f, "use_parallel_residual", true) ? Parallel::kSeparate : Parallel::kNone;
      l.gate = gate_of(f, field<std::string>(c, f, "hidden_act", "gelu"));
      break;
    case Kind::kPhi:
      if (l.tied_head)
        fail(f, "config.json: tie_word_embeddings true is not implemented for Phi (its lm_head has a bias)");
      l.attention_bias = l.mlp_bias = l.head_bias = true;
      l.gated_mlp = false;
      l.parallel = Parallel::kShared;
      l.gate = gate_of(f, field<std::string>(c, f, "hidden_act", "gelu_new"));
      break;
    case Kind::kStarcoder2:
      l.attention_bias = l.mlp_bias = field<bool>(c, f, "use_bias", true);
      l.gated_mlp = false;
      l.gate = gate_of(f, field<std::string>(c, f, "hidden_act", "gelu_pytorch_tanh"));
      l.sliding_window = field<int64_t>(c, f, "sliding_window", 0);
      if (l.sliding_window < 0)
        fail(f, "config.json: sliding_window " + std::to_string(l.sliding_window) + " is negative");
      break;
    case Kind::kStableLm:
      l.qkv_bias = field<bool>(c, f, "use_qkv_bias", false);
      l.parallel = field<bool>(c, f, "use_parallel_residual", false) ? Parallel::kShared : Parallel::kNone;
      l.gate = gate_of(f, field<std::string>(c, f, "hidden_act", "silu"));
      break;
  }
  const RopeRead rope = read_rope(c, f, max_positions, l);
  if (!(rope.partial > 0 && rope.partial <= 1))
    fail(f, "config.json: partial_rotary_factor " + std::to_string(rope.partial) + " is not within (0, 1]");
  if (rope.partial != 1.0)
    l.rotary_dim = static_cast<int64_t>(static_cast<double>(l.head_size()) * rope.partial);  // Python's int()
  if (rope.partial != 1.0 && (l.rotary_dim < 2 || l.rotary_dim % 2 != 0))
    fail(f, "config.json: partial_rotary_factor " + std::to_string(rope.partial) + " rotates " +
                std::to_string(l.rotary_dim) + " of the " + std::to_string(l.head_size()) +
                " features of a head; RoPE needs a positive even count");
  l.seq_len = rope.context > 0 && rope.context < max_positions ? rope.context : max_positions;
  m.context = l.seq_len;
  m.config = l;
  m.module = std::make_unique<nn::Llama>(l);
  Weights file = read_weights(f);  // after every config.json check: a bad config reads no weights
  if (k == Kind::kNeox) split_query_key_value(m, file, l);
  const std::string head = file_name_of(k, "lm_head.weight"),
                    embedding = file_name_of(k, "model.embed_tokens.weight");
  const bool tied = l.tied_head;
  if (tied && !tied_copy_ok(file.tensors, head, embedding))
    fail(f, "config.json ties the head to the embedding, but " + head + " differs from " + embedding);
  map_weights(
      m, std::move(file), [k](const std::string& p) { return Source{file_name_of(k, p)}; },
      [tied, head](const std::string& n) {
        // Buffers old files carry: the causal mask (attention.bias, masked_bias) and
        // rotary_emb.inv_freq, recomputed from the config here.
        return (tied && n == head) || n.ends_with("rotary_emb.inv_freq") ||
               n.ends_with(".attention.masked_bias") ||
               (n.ends_with(".attention.bias") && n.starts_with("gpt_neox."));
      });
}

std::map<std::string, HostTensor> layernorm_family_file_tensors(const Model& m,
                                                                std::map<std::string, HostTensor> w) {
  const Kind k = kind_of(m.architecture);
  std::map<std::string, HostTensor> out;
  if (k == Kind::kNeox) {  // q/k/v fused per head again
    const auto& l = std::get<nn::LlamaConfig>(m.config);
    for (int64_t i = 0; i < l.layers; ++i)
      for (const std::string kind : {"weight", "bias"}) {
        const std::string at = "model.layers." + std::to_string(i) + ".self_attn.";
        if (!w.count(at + "q_proj." + kind)) continue;
        std::vector<const HostTensor*> parts;
        for (const char* p : {"q_proj.", "k_proj.", "v_proj."}) parts.push_back(&w.at(at + p + kind));
        out["gpt_neox.layers." + std::to_string(i) + ".attention.query_key_value." + kind] =
            fuse_per_head(parts, l.heads, l.head_size());
        for (const char* p : {"q_proj.", "k_proj.", "v_proj."}) w.erase(at + p + kind);
      }
  }
  for (auto& [name, t] : w) out[file_name_of(k, name)] = std::move(t);
  return out;
}

}  // namespace tg::pretrained::detail
