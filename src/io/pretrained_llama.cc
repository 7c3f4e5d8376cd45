// The Llama family's folders → nn::Llama. LlamaForCausalLM, and the architectures that are
// Llama with a few differences, each a flag of nn::LlamaConfig:
//   MistralForCausalLM  no biases; a sliding window (see sliding_of below)
//   Qwen2ForCausalLM    biases on q/k/v_proj only; a sliding window if use_sliding_window
//   Qwen3ForCausalLM    RMSNorm over each head's q and k (q_norm, k_norm); head_dim of its own
//   Phi3ForCausalLM     fused qkv_proj and gate_up_proj, split here into Llama's projections;
//                       a partial rotation (partial_rotary_factor); a sliding window
//   GemmaForCausalLM    (1 + w) norms, embeddings × √hidden, a GELU gate, tied head
//   Gemma2ForCausalLM   Gemma's, with norms around both halves of each layer, soft caps on the
//                       scores and logits, query_pre_attn_scalar, sliding windows
//   Gemma3ForCausalLM   Gemma 2's without the caps, with q/k norms and the sliding layers'
//                       own RoPE base
//   MixtralForCausalLM  Mistral with a mixture of experts in every layer (block_sparse_moe:
//                       w1/w3/w2 are the experts' gate/up/down_proj), top-k renormalised
//   Qwen2MoeForCausalLM Qwen2 with experts (and a gated shared expert) where decoder_sparse_step
//                       and mlp_only_layers put them
//   Qwen3MoeForCausalLM Qwen3 likewise, without the shared expert
//   GraniteForCausalLM  Llama with multipliers on the embeddings, the residual branches, the
//                       attention's scale and (a divisor) the logits
//   Olmo2ForCausalLM    norms after attention and MLP instead of before; q/k norms across the
//                       heads
//   Olmo3ForCausalLM    OLMo 2's with sliding windows where layer_types says, the RoPE settings
//                       per layer type as Gemma 3's
//   GraniteMoeHybridForCausalLM
//                       Granite 4.0-H: Granite's multipliers; Mamba-2 blocks (`mamba`) in place
//                       of the attention where layer_types says; attention without RoPE
//                       ("nope") unless position_embedding_type is "rope"; the shared MLP's fused
//                       input_linear split into gate/up_proj, output_linear as down_proj; with
//                       experts, their stacked tensors split per expert and the shared MLP
//                       their ungated shared expert.
//   BambaForCausalLM    the same blocks (in every layer but attn_layer_indices) under Bamba's
//                       names (pre_ff_layernorm, feed_forward, final_layernorm), partial RoPE.
//   NemotronHForCausalLM one block a layer (LlamaConfig::blocks: a Mamba-2 block with its norm
//                       per group, attention without RoPE, or a squared-ReLU MLP) under
//                       backbone.layers.<i>.{norm, mixer}.
// RoPE: the plain rotation, or rope_type linear, llama3, yarn or longrope (tg::RopeScaling),
// computed as transformers 5 computes it; longrope caps the context at the original one (past
// it transformers changes the frequencies). dynamic is refused.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "io/pretrained_internal.h"
#include "tensorgrad/errors.h"

namespace tg::pretrained::detail {
namespace {

struct Flavor {
  bool mistral = false, qwen2 = false, qwen3 = false, phi3 = false;
  bool gemma1 = false, gemma2 = false, gemma3 = false;
  bool mixtral = false, qwen2_moe = false, qwen3_moe = false;
  bool granite = false, olmo2 = false, olmo3 = false, granite_hybrid = false, bamba = false;
  bool nemotron_h = false;
  bool gemma() const { return gemma1 || gemma2 || gemma3; }
};

// The MoE families read as their dense relatives (Mixtral as Mistral, Qwen-MoE as Qwen) plus
// their experts.
Flavor flavor_of(const std::string& architecture) {
  const bool mixtral = architecture == "MixtralForCausalLM",
             qwen2_moe = architecture == "Qwen2MoeForCausalLM",
             qwen3_moe = architecture == "Qwen3MoeForCausalLM";
  return {.mistral = architecture == "MistralForCausalLM" || mixtral,
          .qwen2 = architecture == "Qwen2ForCausalLM" || qwen2_moe,
          .qwen3 = architecture == "Qwen3ForCausalLM" || qwen3_moe,
          .phi3 = architecture == "Phi3ForCausalLM",
          .gemma1 = architecture == "GemmaForCausalLM",
          .gemma2 = architecture == "Gemma2ForCausalLM",
          .gemma3 = architecture == "Gemma3ForCausalLM",
          .mixtral = mixtral,
          .qwen2_moe = qwen2_moe,
          .qwen3_moe = qwen3_moe,
          .granite = architecture == "GraniteForCausalLM" || architecture == "GraniteMoeHybridForCausalLM",
          .olmo2 = architecture == "Olmo2ForCausalLM" || architecture == "Olmo3ForCausalLM",
          .olmo3 = architecture == "Olmo3ForCausalLM",
          .granite_hybrid = architecture == "GraniteMoeHybridForCausalLM",
          .bamba = architecture == "BambaForCausalLM",
          .nemotron_h = architecture == "NemotronHForCausalLM"};
}

// The experts: Mixtral's num_local_experts in every layer (always renormalised); Qwen-MoE's
// num_experts (transformers 5 writes Qwen3-MoE's as num_local_experts) of moe_intermediate_size
// in layer i when (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers,
// renormalised with norm_topk_prob; Qwen2-MoE's gated shared expert. All: router_aux_loss_coef
// where output_router_logits is true.
void read_experts(const json& c, const std::string& f, const Flavor& k, nn::LlamaConfig& l) {
  if (!k.mixtral && !k.qwen2_moe && !k.qwen3_moe) return;
  nn::LlamaConfig::Experts& x = l.experts;
  x.count = k.mixtral || !c.contains("num_experts") ? required(c, f, "num_local_experts")
                                                    : required(c, f, "num_experts");
  x.top_k = required(c, f, "num_experts_per_tok");
  if (x.top_k > x.count)
    fail(f, "config.json: num_experts_per_tok " + std::to_string(x.top_k) + " is more than the " +
                std::to_string(x.count) + " experts");
  // transformers adds the load-balancing loss to the loss only with output_router_logits.
  if (field<bool>(c, f, "output_router_logits", false))
    x.aux_loss_coef = field<double>(c, f, "router_aux_loss_coef", 0.001);
  if (k.mixtral) return;  // every layer, experts of intermediate_size, renormalised
  x.hidden = required(c, f, "moe_intermediate_size");
  x.normalize = field<bool>(c, f, "norm_topk_prob", false);
  if (k.qwen2_moe) x.shared_hidden = field<int64_t>(c, f, "shared_expert_intermediate_size", 0);
  const int64_t step = field<int64_t>(c, f, "decoder_sparse_step", 1);
  if (step < 1) fail(f, "config.json: decoder_sparse_step " + std::to_string(step) + " is not positive");
  std::vector<bool> dense(static_cast<size_t>(l.layers), false);
  if (c.contains("mlp_only_layers") && !c["mlp_only_layers"].is_null()) {
    const json& only = c["mlp_only_layers"];
    if (!only.is_array())
      fail(f, "config.json: mlp_only_layers is " + only.dump() + ", expected a list of layers");
    for (const json& i : only) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() >= l.layers)
        fail(f, "config.json: mlp_only_layers holds " + i.dump() + ", not a layer of 0 … " +
                    std::to_string(l.layers - 1));
      dense[static_cast<size_t>(i.get<int64_t>())] = true;
    }
  }
  for (int64_t i = 0; i < l.layers; ++i)
    l.moe_layers.push_back(!dense[static_cast<size_t>(i)] && (i + 1) % step == 0);
}

// A number the family defaults when its key is missing, and that null turns off (0).
double number_or(const json& c, const std::string& f, const char* key, double absent) {
  if (!c.contains(key)) return absent;
  return field<double>(c, f, key, 0.0);
}

}  // namespace

std::vector<bool> sliding_layer_types(const json& c, const std::string& f, int64_t layers) {
  std::vector<bool> out;
  if (!c.contains("layer_types") || c["layer_types"].is_null()) return out;
  const json& t = c["layer_types"];
  const auto bad = [&] {
    fail(f, "config.json: layer_types is " + t.dump().substr(0, 200) + ", expected " +
                std::to_string(layers) + " of \"full_attention\" and \"sliding_attention\"");
  };
  if (!t.is_array() || static_cast<int64_t>(t.size()) != layers) bad();
  for (const json& e : t) {
    if (!e.is_string() || (e != "full_attention" && e != "sliding_attention")) bad();
    out.push_back(e == "sliding_attention");
  }
  return out;
}

namespace {

// Which layers attend through a sliding window, and how wide it is, as transformers decides:
// layer_types when the file has it; else Mistral and Phi-3 slide in every layer, Qwen2 and
// Qwen3 from max_window_layers on when use_sliding_window, Gemma 2 in every other layer and
// Gemma 3 in all but every sliding_window_pattern-th. A sliding_window key that is null means
// none; a missing one is 4096 for those families (their configs' default), none for Mixtral.
struct Sliding {
  int64_t window = 0;
  std::vector<bool> layers;
};
Sliding sliding_of(const json& c, const std::string& f, const Flavor& k, int64_t layers) {
  Sliding s;
  // Qwen's use_sliding_window false turns the window off whatever layer_types says.
  if ((k.qwen2 || k.qwen3) && !field<bool>(c, f, "use_sliding_window", false)) return s;
  if (c.contains("layer_types") && !c["layer_types"].is_null()) {
    s.layers = sliding_layer_types(c, f, layers);
  } else if (k.mistral || k.phi3) {
    s.layers.assign(static_cast<size_t>(layers), true);
  } else if (k.olmo3) {  // OLMo 3: three sliding layers, then a full one
    for (int64_t i = 0; i < layers; ++i) s.layers.push_back((i + 1) % 4 != 0);
  } else if (k.gemma2 || k.gemma3) {  // Gemma 2: every other layer from the first; 3: all but every 6th
    const int64_t pattern = k.gemma2 ? 2
                                     : field<int64_t>(c, f, "sliding_window_pattern",
                                                      field<int64_t>(c, f, "_sliding_window_pattern", 6));
    if (pattern <= 0)
      fail(f, "config.json: sliding_window_pattern " + std::to_string(pattern) + " is not positive");
    for (int64_t i = 0; i < layers; ++i) s.layers.push_back((i + 1) % pattern != 0);
  } else if (k.qwen2 || k.qwen3) {
    const int64_t from = field<int64_t>(c, f, "max_window_layers", 28);
    for (int64_t i = 0; i < layers; ++i) s.layers.push_back(i >= from);
  }
  if (std::find(s.layers.begin(), s.layers.end(), true) == s.layers.end()) return {};
  const bool absent = !c.contains("sliding_window");
  // (Mixtral's default is none.)
  s.window =
      absent ? ((k.mistral && !k.mixtral) || k.qwen2 || k.qwen3 || k.gemma2 || k.gemma3 || k.olmo3 ? 4096 : 0)
             : field<int64_t>(c, f, "sliding_window", 0);
  if (s.window < 0) fail(f, "config.json: sliding_window " + std::to_string(s.window) + " is negative");
  return s.window > 0 ? s : Sliding{};
}

// Gemma 3 rotates its sliding layers by a base of their own: transformers 5 nests the RoPE
// settings per layer type ({"full_attention": …, "sliding_attention": …}), 4 gives
// rope_local_base_freq. Sets l.rope_local_theta; returns config.json with the full layers'
// settings where read_rope looks for them.
json gemma3_global_rope(const json& c, const std::string& f, const Flavor& k, nn::LlamaConfig& l) {
  if (!k.gemma3 && !k.olmo3) return c;  // OLMo 3 nests its settings per layer type likewise
  const json* nested = c.contains("rope_parameters") && c["rope_parameters"].is_object() &&
                               c["rope_parameters"].contains("full_attention")
                           ? &c["rope_parameters"]
                           : nullptr;
  if (!nested) {  // (OLMo 3's sliding layers then rotate by the global base: load_llama_family)
    if (k.gemma3) l.rope_local_theta = field<double>(c, f, "rope_local_base_freq", 10000.0);
    return c;
  }
  json out = c;
  out["rope_parameters"] = (*nested)["full_attention"];
  const json local = nested->contains("sliding_attention") ? (*nested)["sliding_attention"] : json::object();
  if (!local.is_object() || field<std::string>(local, f, "rope_type", "default") != "default")
    fail(f, "config.json: rope_parameters.sliding_attention is " + local.dump().substr(0, 200) +
                "; the sliding layers' RoPE must be the default one");
  l.rope_local_theta = field<double>(local, f, "rope_theta", 10000.0);
  return out;
}

// Splits the file's [rows, cols] tensor `fused` by rows into `parts` (a name and a row count
// each), which take its place in `w`.
void split_rows(Model& m, Weights& w, const std::string& fused, int64_t cols,
                const std::vector<std::pair<std::string, int64_t>>& parts) {
  int64_t rows = 0;
  for (const auto& part : parts) rows += part.second;
  std::string file;
  const HostTensor all = take_tensor(m, w, fused, {rows, cols}, file);
  const std::span<const float> v = all.f32();
  int64_t first = 0;
  for (const auto& [name, count] : parts) {
    if (w.tensors.count(name) || w.deferred.count(name))
      fail(m.folder, w.file_of[name] + ": unexpected tensor '" + name + "' beside the fused '" + fused +
                         "' that " + m.architecture + " splits into it");
    std::vector<float> rows_of(v.begin() + first * cols, v.begin() + (first + count) * cols);
    w.tensors[name] = HostTensor::f32(std::move(rows_of), {count, cols});
    w.file_of[name] = file;
    first += count;
  }
}

// Granite 4.0-H's experts: block_sparse_moe.input_linear [E, 2·I, d] holds each expert's gate
// and up rows, output_linear [E, d, I] its down_proj → mlp.experts.<e>.{gate,up,down}_proj.
void split_experts(Model& m, Weights& w, const std::string& layer, const nn::LlamaConfig& l) {
  const int64_t count = l.experts.count, hidden = l.experts.hidden, d = l.d_model;
  std::string in_file, out_file;
  const HostTensor in =
      take_tensor(m, w, layer + "block_sparse_moe.input_linear.weight", {count, 2 * hidden, d}, in_file);
  const HostTensor out =
      take_tensor(m, w, layer + "block_sparse_moe.output_linear.weight", {count, d, hidden}, out_file);
  const std::span<const float> a = in.f32(), b = out.f32();
  for (int64_t e = 0; e < count; ++e) {
    const std::string expert = layer + "mlp.experts." + std::to_string(e) + ".";
    const auto put = [&](const std::string& name, std::span<const float> values, Shape shape,
                         const std::string& file) {
      if (w.tensors.count(expert + name) || w.deferred.count(expert + name))
        fail(m.folder, w.file_of[expert + name] + ": unexpected tensor '" + expert + name + "' beside " +
                           layer + "block_sparse_moe's, which " + m.architecture + " splits into it");
      w.tensors[expert + name] =
          HostTensor::f32(std::vector<float>(values.begin(), values.end()), std::move(shape));
      w.file_of[expert + name] = file;
    };
    const std::span<const float> rows =
        a.subspan(static_cast<size_t>(e * 2 * hidden * d), static_cast<size_t>(2 * hidden * d));
    put("gate_proj.weight", rows.first(static_cast<size_t>(hidden * d)), {hidden, d}, in_file);
    put("up_proj.weight", rows.last(static_cast<size_t>(hidden * d)), {hidden, d}, in_file);
    put("down_proj.weight", b.subspan(static_cast<size_t>(e * d * hidden), static_cast<size_t>(d * hidden)),
        {d, hidden}, out_file);
  }
}

// Phi-3's fused projections → Llama's: qkv_proj rows [q | k | v], gate_up_proj rows [gate | up];
// Granite 4.0-H's shared_mlp.input_linear rows [gate | up].
void split_fused(Model& m, Weights& w, const nn::LlamaConfig& l, const Flavor& k) {
  const int64_t kv = l.kv_heads, d = l.d_model, head_dim = l.head_size();
  for (int64_t i = 0; i < l.layers; ++i) {
    const std::string layer = "model.layers." + std::to_string(i) + ".";
    if (k.phi3)
      split_rows(m, w, layer + "self_attn.qkv_proj.weight", d,
                 {{layer + "self_attn.q_proj.weight", l.heads * head_dim},
                  {layer + "self_attn.k_proj.weight", kv * head_dim},
                  {layer + "self_attn.v_proj.weight", kv * head_dim}});
    if (k.phi3) {
      split_rows(
          m, w, layer + "mlp.gate_up_proj.weight", d,
          {{layer + "mlp.gate_proj.weight", l.mlp_hidden}, {layer + "mlp.up_proj.weight", l.mlp_hidden}});
      continue;
    }
    const std::string shared = layer + (l.experts.count > 0 ? "mlp.shared_expert." : "mlp.");
    split_rows(m, w, layer + "shared_mlp.input_linear.weight", d,
               {{shared + "gate_proj.weight", l.mlp_hidden}, {shared + "up_proj.weight", l.mlp_hidden}});
    if (l.experts.count > 0) split_experts(m, w, layer, l);
  }
}

// A hybrid's Mamba-2 blocks (Granite 4.0-H's and Bamba's mamba_* fields, time_step_limit). Their
// conv's activation is hidden_act, which nn::Mamba2 has as SiLU only.
void read_mamba_blocks(const json& c, const std::string& f, nn::LlamaConfig& l) {
  if (l.gate != nn::LlamaConfig::Gate::kSilu)
    fail(f, "config.json: hidden_act " + c["hidden_act"].dump() +
                " is also the Mamba-2 blocks' conv activation, which is SiLU only here");
  nn::Mamba2Config& b = l.mamba;
  b.expand = field<int64_t>(c, f, "mamba_expand", 2);
  const int64_t heads = field<int64_t>(c, f, "mamba_n_heads", 128), inner = b.expand * l.d_model;
  if (heads <= 0 || inner % heads != 0)
    fail(f, "config.json: mamba_n_heads " + std::to_string(heads) +
                " does not divide mamba_expand · hidden_size = " + std::to_string(inner));
  const bool auto_head =
      !c.contains("mamba_d_head") || c["mamba_d_head"].is_null() || c["mamba_d_head"] == "auto";
  b.head_dim = auto_head ? inner / heads : required(c, f, "mamba_d_head");
  if (b.head_dim * heads != inner)
    fail(f, "config.json: mamba_n_heads · mamba_d_head = " + std::to_string(heads * b.head_dim) +
                " is not mamba_expand · hidden_size = " + std::to_string(inner));
  b.groups = field<int64_t>(c, f, "mamba_n_groups", 1);
  b.d_state = field<int64_t>(c, f, "mamba_d_state", 256);
  b.d_conv = field<int64_t>(c, f, "mamba_d_conv", 4);
  b.conv_bias = field<bool>(c, f, "mamba_conv_bias", true);
  b.bias = field<bool>(c, f, "mamba_proj_bias", false);
  read_time_step_limit(c, f, b.dt_limit_min, b.dt_limit_max);
}

// Granite 4.0-H: the layers' mixers (layer_types, or layers_block_type before transformers 5:
// "mamba" or "linear_attention" for a Mamba-2 block, "attention" or "full_attention"; every layer
// a block without either, as transformers), the shared MLP and experts, RoPE or no positions.
void read_granite_hybrid(const json& c, const std::string& f, nn::LlamaConfig& l) {
  l.mlp_hidden = field<int64_t>(c, f, "shared_intermediate_size", 1024);  // GraniteMoeHybridConfig's default
  if (l.mlp_hidden <= 0) fail(f, "config.json: shared_intermediate_size must be positive");
  // Experts (block_sparse_moe) beside the shared MLP, which is then their ungated shared expert;
  // the router's softmax over the top k logits is the renormalised top k of the softmax.
  nn::LlamaConfig::Experts& x = l.experts;
  x.count = field<int64_t>(c, f, "num_local_experts", 0);
  if (x.count < 0) fail(f, "config.json: num_local_experts " + std::to_string(x.count) + " is negative");
  if (x.count > 0) {
    x.top_k = required(c, f, "num_experts_per_tok");
    if (x.top_k > x.count)
      fail(f, "config.json: num_experts_per_tok " + std::to_string(x.top_k) + " is more than the " +
                  std::to_string(x.count) + " experts");
    x.hidden = required(c, f, "intermediate_size");
    x.normalize = true;
    x.shared_hidden = l.mlp_hidden;
    x.shared_gate = false;
    if (field<bool>(c, f, "output_router_logits", false))
      x.aux_loss_coef = field<double>(c, f, "router_aux_loss_coef", 0.001);
  }
  const std::string positions = field<std::string>(c, f, "position_embedding_type", "nope");
  if (positions != "rope" && positions != "nope")
    fail(f, "config.json: position_embedding_type \"" + positions + "\" (implemented: rope, nope)");
  l.nope = positions == "nope";
  const char* key =
      c.contains("layer_types") && !c["layer_types"].is_null() ? "layer_types" : "layers_block_type";
  l.mamba_layers.assign(static_cast<size_t>(l.layers), true);
  if (c.contains(key) && !c[key].is_null()) {
    const json& t = c[key];
    const auto bad = [&] {
      fail(f, std::string("config.json: ") + key + " is " + t.dump().substr(0, 200) + ", expected " +
                  std::to_string(l.layers) + " of \"mamba\" and \"attention\"");
    };
    if (!t.is_array() || static_cast<int64_t>(t.size()) != l.layers) bad();
    for (size_t i = 0; i < t.size(); ++i) {
      const json& e = t[i];
      if (e == "mamba" || e == "linear_attention") continue;
      if (e != "attention" && e != "full_attention") bad();
      l.mamba_layers[i] = false;
    }
  }
  read_mamba_blocks(c, f, l);
}

// Bamba: a Mamba-2 block in every layer but attn_layer_indices; the attention rotates the
// first partial_rotary_factor of each head (load_llama_family).
void read_bamba(const json& c, const std::string& f, nn::LlamaConfig& l) {
  l.mamba_layers.assign(static_cast<size_t>(l.layers), true);
  if (c.contains("attn_layer_indices") && !c["attn_layer_indices"].is_null()) {
    const json& t = c["attn_layer_indices"];
    if (!t.is_array())
      fail(f, "config.json: attn_layer_indices is " + t.dump() + ", expected a list of layers");
    for (const json& i : t) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() >= l.layers)
        fail(f, "config.json: attn_layer_indices holds " + i.dump() + ", not a layer of 0 … " +
                    std::to_string(l.layers - 1));
      l.mamba_layers[static_cast<size_t>(i.get<int64_t>())] = false;
    }
  }
  read_mamba_blocks(c, f, l);
}

// Nemotron-H: one block a layer (layers_block_type, or hybrid_override_pattern before
// transformers 5: "M" a Mamba-2 block, "*" attention, "-" the MLP; mixtures of experts, "moe" or
// "E", are refused), attention without RoPE, the blocks' channels mamba_num_heads ·
// mamba_head_dim with their norm per group, Δ at least time_step_min.
void read_nemotron_h(const json& c, const std::string& f, nn::LlamaConfig& l) {
  using B = nn::LlamaConfig::Block;
  l.nope = true;
  l.gated_mlp = false;
  l.mamba_layers.assign(static_cast<size_t>(l.layers), false);
  l.blocks.assign(static_cast<size_t>(l.layers), B::kMixer);
  std::vector<std::string> kinds;
  if (c.contains("layers_block_type") && c["layers_block_type"].is_array()) {
    for (const json& e : c["layers_block_type"])
      kinds.push_back(e.is_string() ? e.get<std::string>() : e.dump());
  } else if (c.contains("hybrid_override_pattern") && c["hybrid_override_pattern"].is_string()) {
    for (const char ch : c["hybrid_override_pattern"].get<std::string>())
      kinds.push_back(ch == 'M'   ? "linear_attention"
                      : ch == '*' ? "full_attention"
                      : ch == '-' ? "mlp"
                      : ch == 'E' ? "moe"
                                  : std::string(1, ch));
  } else {
    fail(f, "config.json has neither layers_block_type nor hybrid_override_pattern");
  }
  if (static_cast<int64_t>(kinds.size()) != l.layers)
    fail(f, "config.json names " + std::to_string(kinds.size()) + " layer types for " +
                std::to_string(l.layers) + " layers");
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] == "linear_attention" || kinds[i] == "mamba") {
      l.mamba_layers[i] = true;
    } else if (kinds[i] == "mlp") {
      l.blocks[i] = B::kMlp;
    } else if (kinds[i] != "full_attention" && kinds[i] != "attention") {
      fail(f, "config.json: layer " + std::to_string(i) + " is \"" + kinds[i] +
                  "\" (implemented: linear_attention, full_attention, mlp; not the mixtures of experts)");
    }
  }
  const std::string act = field<std::string>(c, f, "mamba_hidden_act", "silu");
  if (act != "silu" && act != "swish")
    fail(f, "config.json: mamba_hidden_act \"" + act + "\" (implemented: silu)");
  nn::Mamba2Config& b = l.mamba;
  // The older names (mamba_n_groups, …) win where given, as NemotronHConfig reads them.
  const auto key = [&](const char* old_name, const char* name) {
    return c.contains(old_name) ? old_name : name;
  };
  const int64_t heads = required(c, f, "mamba_num_heads");
  b.head_dim = required(c, f, "mamba_head_dim");
  b.d_inner = heads * b.head_dim;
  b.groups = field<int64_t>(c, f, key("mamba_n_groups", "n_groups"), 8);
  if (b.groups <= 0 || heads % b.groups != 0)
    fail(f, "config.json: " + std::to_string(heads) + " Mamba heads do not split into " +
                std::to_string(b.groups) + " groups (n_groups)");
  b.norm_groups = b.groups;
  b.d_state = field<int64_t>(c, f, "ssm_state_size", 128);
  b.d_conv = field<int64_t>(c, f, key("mamba_d_conv", "conv_kernel"), 4);
  b.conv_bias = field<bool>(c, f, key("mamba_conv_bias", "use_conv_bias"), true);
  b.bias = field<bool>(c, f, "use_bias", false);
  // transformers' mixer clamps Δ to (time_step_min, ∞) in its PyTorch path.
  b.dt_limit_min = field<double>(c, f, key("mamba_dt_min", "time_step_min"), 0.001);
}

}  // namespace

// rope_scaling (transformers 4.x) or rope_parameters (5.x): the base and the rescaling.
RopeRead read_rope(const json& c, const std::string& f, int64_t max_positions, nn::LlamaConfig& l) {
  using T = RopeScaling::Type;
  RopeRead out;
  l.rope_theta = field<double>(c, f, "rope_theta", 10000.0);
  out.partial = field<double>(c, f, "partial_rotary_factor", 1.0);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!c.contains(key) || c[key].is_null()) continue;
    const json& r = c[key];
    const std::string where = std::string("config.json: ") + key;
    if (!r.is_object()) fail(f, where + " is " + r.dump());
    out.partial = field<double>(r, f, "partial_rotary_factor", out.partial);
    if (r.contains("rope_theta")) l.rope_theta = field<double>(r, f, "rope_theta", l.rope_theta);
    const std::string type =
        field<std::string>(r, f, "rope_type", field<std::string>(r, f, "type", "default"));
    RopeScaling s;
    const auto needed = [&](const char* name) {
      if (!r.contains(name) || r[name].is_null()) fail(f, where + " (rope_type " + type + ") has no " + name);
      return field<double>(r, f, name, 0.0);
    };
    if (type == "default") {
      s.type = T::kNone;
    } else if (type == "linear") {
      s.type = T::kLinear;
      s.factor = needed("factor");
    } else if (type == "llama3") {
      s.type = T::kLlama3;
      s.factor = needed("factor");
      s.low_freq_factor = needed("low_freq_factor");
      s.high_freq_factor = needed("high_freq_factor");
      const double original = needed("original_max_position_embeddings");  // 8192 or 8192.0
      if (original != std::floor(original) || original < 1 || original > 1e15)
        fail(f, where + ": original_max_position_embeddings " + std::to_string(original) +
                    " is not a positive integer");
      s.original_context = static_cast<int64_t>(original);
    } else if (type == "yarn") {
      s.type = T::kYarn;
      s.original_context = field<int64_t>(r, f, "original_max_position_embeddings", max_positions);
      // transformers 5: the factor key; without one, the context's ratio to the original.
      s.factor = field<double>(r, f, "factor",
                               static_cast<double>(max_positions) / static_cast<double>(s.original_context));
      // 0 or null is the default, as transformers' `or`.
      const double fast = field<double>(r, f, "beta_fast", 0.0), slow = field<double>(r, f, "beta_slow", 0.0);
      s.beta_fast = fast == 0 ? 32.0 : fast;
      s.beta_slow = slow == 0 ? 1.0 : slow;
      s.truncate = field<bool>(r, f, "truncate", true);
      s.attention_factor = field<double>(r, f, "attention_factor", 0.0);
      s.mscale = field<double>(r, f, "mscale", 0.0);
      s.mscale_all_dim = field<double>(r, f, "mscale_all_dim", 0.0);
    } else if (type == "longrope") {
      // Short factors within the original context; transformers switches to the long ones
      // past it, so the library's context ends there.
      s.type = T::kLongRope;
      s.original_context = field<int64_t>(r, f, "original_max_position_embeddings",
                                          field<int64_t>(c, f, "original_max_position_embeddings", 0));
      if (s.original_context <= 0)
        fail(f, where + " (rope_type longrope) has no original_max_position_embeddings");
      s.factor = field<double>(r, f, "factor",
                               static_cast<double>(max_positions) / static_cast<double>(s.original_context));
      s.attention_factor = field<double>(r, f, "attention_factor", 0.0);
      if (!r.contains("short_factor") || !r["short_factor"].is_array())
        fail(f, where + " (rope_type longrope) has no short_factor list");
      for (const json& v : r["short_factor"]) {
        if (!v.is_number()) fail(f, where + ": short_factor holds " + v.dump() + ", expected numbers");
        s.short_factor.push_back(v.get<double>());
      }
      out.context = s.original_context;
    } else {
      fail(f, where + " has rope_type \"" + type +
                  "\"; implemented: default, linear, llama3, yarn and longrope (not dynamic)");
    }
    l.rope_scaling = s;
  }
  return out;
}

// `p` with the first occurrence of each `ours` replaced by its `theirs`, in order.
std::string with_parts_renamed(std::string p,
                               std::initializer_list<std::pair<const char*, const char*>> parts) {
  for (const auto& [ours, theirs] : parts) {
    const size_t at = p.find(ours);
    if (at != std::string::npos) p.replace(at, std::string(ours).size(), theirs);
  }
  return p;
}

// Mixtral's names: the layer's experts under block_sparse_moe, w1/w3/w2 for gate/up/down_proj.
Source mixtral_source(const std::string& p) {
  const size_t at = p.find(".mlp.");
  if (at == std::string::npos) return {p};
  return {with_parts_renamed(p.substr(0, at) + ".block_sparse_moe." + p.substr(at + 5),
                             {{".gate_proj.", ".w1."}, {".up_proj.", ".w3."}, {".down_proj.", ".w2."}})};
}

// Granite 4.0-H's names: the shared MLP's down_proj (mlp. or, beside experts,
// mlp.shared_expert.) is shared_mlp.output_linear, the router block_sparse_moe.router.layer;
// the Mamba-2 blocks' conv1d is [D, 1, K] in the file. (The fused and stacked tensors are split
// into the library's names before: split_fused.)
Source granite_hybrid_source(const std::string& p) {
  const auto layer_of = [&](const std::string& tail) { return p.substr(0, p.size() - tail.size()); };
  for (const char* tail : {"mlp.down_proj.weight", "mlp.shared_expert.down_proj.weight"})
    if (p.ends_with(tail)) return {layer_of(tail) + "shared_mlp.output_linear.weight"};
  if (p.ends_with("mlp.gate.weight"))
    return {layer_of("mlp.gate.weight") + "block_sparse_moe.router.layer.weight"};
  if (p.ends_with(".mamba.conv1d.weight")) return {p, Layout::kSqueezeMiddle};
  return {p};
}

// Bamba's names: post_attention_layernorm is pre_ff_layernorm, the MLP feed_forward, the final
// norm final_layernorm; the Mamba-2 blocks' conv1d is [D, 1, K] in the file.
Source bamba_source(const std::string& p) {
  if (p == "model.norm.weight") return {"model.final_layernorm.weight"};
  if (p.ends_with(".mamba.conv1d.weight")) return {p, Layout::kSqueezeMiddle};
  return {with_parts_renamed(
      p, {{".post_attention_layernorm.", ".pre_ff_layernorm."}, {".mlp.", ".feed_forward."}})};
}

// Nemotron-H's names: backbone.embeddings, backbone.layers.<i>.norm and .mixer (whatever the
// block: self_attn, mamba or mlp here), backbone.norm_f; the Mamba-2 blocks' conv1d [D, 1, K].
Source nemotron_h_source(const std::string& p) {
  if (p == "model.embed_tokens.weight") return {"backbone.embeddings.weight"};
  if (p == "model.norm.weight") return {"backbone.norm_f.weight"};
  if (!p.starts_with("model.layers.")) return {p};
  const std::string out = with_parts_renamed("backbone." + p.substr(6), {{".input_layernorm.", ".norm."},
                                                                         {".self_attn.", ".mixer."},
                                                                         {".mamba.", ".mixer."},
                                                                         {".mlp.", ".mixer."}});
  return {out, p.ends_with(".mamba.conv1d.weight") ? Layout::kSqueezeMiddle : Layout::kSame};
}

void read_llama_sizes(const json& c, const std::string& f, nn::LlamaConfig& l) {
  l.vocab = required(c, f, "vocab_size");
  l.d_model = required(c, f, "hidden_size");
  l.mlp_hidden = required(c, f, "intermediate_size");
  l.layers = required(c, f, "num_hidden_layers");
  l.heads = required(c, f, "num_attention_heads");
}

// head_dim: given (Nemotron-H's older attention_head_dim too), else the family's default
// (Qwen3's and Nemotron-H's 128, Gemma's 256), else hidden / heads. Then RoPE (read_rope) and a
// partial rotation: Phi-3's and Bamba's partial_rotary_factor (BambaConfig fixes it at 0.5 whatever
// the file says; the Hub's Bamba configs carry attn_rotary_emb instead, which transformers ignores).
RopeRead read_head_and_rope(const json& c, const std::string& f, const Flavor& k, int64_t max_positions,
                            nn::LlamaConfig& l) {
  const char* head_key = k.nemotron_h && !c.contains("head_dim") ? "attention_head_dim" : "head_dim";
  if (c.contains(head_key) && !c[head_key].is_null()) {
    l.head_dim = required(c, f, head_key);
  } else if ((k.qwen3 && !k.qwen3_moe) || k.gemma() || k.nemotron_h) {  // Qwen3-MoE's: hidden / heads
    l.head_dim = k.gemma() ? 256 : 128;
  } else if (l.d_model % l.heads != 0) {
    fail(f, "config.json: hidden_size " + std::to_string(l.d_model) +
                " is no multiple of num_attention_heads " + std::to_string(l.heads) +
                " and head_dim is not given");
  }
  const RopeRead rope = read_rope(gemma3_global_rope(c, f, k, l), f, max_positions, l);
  // OLMo 3's sliding layers rotate plainly by the base when the settings are not per layer
  // type (transformers' rope_scaling is its full layers' alone).
  if (k.olmo3 && l.rope_local_theta == 0) l.rope_local_theta = l.rope_theta;
  const double partial = k.bamba ? 0.5 : rope.partial;
  if (partial != 1.0) {
    // Only Phi-3's and Bamba's attention rotate part of a head (transformers' Llama and the
    // others would fail on the shorter tables).
    if (!(k.phi3 || k.bamba) || !(partial > 0 && partial < 1))
      fail(f, "config.json: partial_rotary_factor " + std::to_string(partial) +
                  " is implemented for Phi3ForCausalLM only, within (0, 1)");
    l.rotary_dim = static_cast<int64_t>(static_cast<double>(l.head_size()) * partial);  // Python's int()
    if (l.rotary_dim < 2)
      fail(f, "config.json: partial_rotary_factor " + std::to_string(partial) + " rotates no pair of the " +
                  std::to_string(l.head_size()) + " features of a head");
  }
  return rope;
}

void load_llama_family(Model& m, const json& config) {
  const std::string& f = m.folder;
  const Flavor k = flavor_of(m.architecture);
  // transformers 5 writes Nemotron-H's config without num_hidden_layers: its layer list says.
  json counted;
  if (k.nemotron_h && !config.contains("num_hidden_layers")) {
    counted = config;
    if (config.contains("layers_block_type") && config["layers_block_type"].is_array())
      counted["num_hidden_layers"] = config["layers_block_type"].size();
    else if (config.contains("hybrid_override_pattern") && config["hybrid_override_pattern"].is_string())
      counted["num_hidden_layers"] = config["hybrid_override_pattern"].get<std::string>().size();
  }
  const json& c = counted.is_null() ? config : counted;
  nn::LlamaConfig l;
  read_llama_sizes(c, f, l);
  l.kv_heads = field<int64_t>(c, f, "num_key_value_heads", l.heads);
  const int64_t max_positions = required(c, f, "max_position_embeddings");
  // The families' defaults: 1e-5 for Phi-3, Mixtral and OLMo, 1e-6 for the rest.
  l.rms_eps = k.nemotron_h
                  ? field<double>(c, f, "layer_norm_epsilon", 1e-5)
                  : field<double>(c, f, "rms_norm_eps", k.phi3 || k.mixtral || k.olmo2 ? 1e-5 : 1e-6);
  l.tied_head = field<bool>(c, f, "tie_word_embeddings", k.gemma());
  // Biases: Llama's attention_bias puts them on q/k/v/o (so do Qwen3's and Gemma's); Qwen2
  // always has them on q/k/v alone; Mistral and Phi-3 have none.
  l.qkv_bias = k.qwen2 && (!k.qwen2_moe || field<bool>(c, f, "qkv_bias", true));
  // (Nemotron-H's attention has none, whatever attention_bias says: transformers builds it so.)
  if (!k.qwen2 && !k.mistral && !k.phi3 && !k.nemotron_h)
    l.attention_bias = field<bool>(c, f, "attention_bias", false);
  if (m.architecture == "LlamaForCausalLM" || k.granite || k.bamba || k.nemotron_h)
    l.mlp_bias = field<bool>(c, f, "mlp_bias", false);
  l.qk_norm = k.qwen3 || k.gemma3 || k.olmo2;
  l.qk_norm_whole = k.olmo2;
  l.post_norms = k.olmo2;
  if (k.granite) {  // 1.0 when missing or null, as GraniteConfig's defaults
    const auto multiplier = [&](const char* key) {
      const double v = field<double>(c, f, key, 1.0);
      if (!(std::isfinite(v) && v > 0))
        fail(f, std::string("config.json: ") + key + " must be a positive number");
      return v;
    };
    l.embedding_multiplier = multiplier("embedding_multiplier");
    l.residual_multiplier = multiplier("residual_multiplier");
    l.logits_scaling = multiplier("logits_scaling");
    l.attention_scale = multiplier("attention_multiplier");
  }
  l.gemma = k.gemma();
  if (k.gemma() && field<bool>(c, f, "use_bidirectional_attention", false))
    fail(
        f,
        "config.json: use_bidirectional_attention true (an encoder) is not implemented; nn::Llama is causal");
  if (k.gemma2 || k.gemma3) {
    // Gemma 2 and 3: norms around both halves of a layer, the scale query_pre_attn_scalar^-1/2,
    // soft caps (Gemma 2's default 50 on the scores, 30 on the logits; null: none).
    l.sandwich_norms = true;
    const double scalar = number_or(c, f, "query_pre_attn_scalar", 256.0);
    if (!(scalar > 0)) fail(f, "config.json: query_pre_attn_scalar must be a positive number");
    l.attention_scale = 1.0 / std::sqrt(scalar);
    l.attention_softcap = number_or(c, f, "attn_logit_softcapping", k.gemma2 ? 50.0 : 0.0);
    l.logit_softcap = number_or(c, f, "final_logit_softcapping", k.gemma2 ? 30.0 : 0.0);
    if (l.attention_softcap < 0 || l.logit_softcap < 0) fail(f, "config.json: a negative soft cap");
  }
  // The MLP's gate: hidden_act; the Gemmas' hidden_activation first where it is given (Gemma 2
  // and 3 read only it; Gemma's files carry "hidden_act": "gelu" beside the tanh GELU they were
  // trained with, which hidden_activation names). The Gemmas' default is the tanh GELU.
  const bool activation_key =
      k.gemma2 || k.gemma3 ||
      (k.gemma1 && c.contains("hidden_activation") && !c["hidden_activation"].is_null());
  const char* act_key = activation_key ? "hidden_activation" : k.nemotron_h ? "mlp_hidden_act" : "hidden_act";
  const std::string act = field<std::string>(c, f, act_key, k.gemma() ? "gelu_pytorch_tanh" : "silu");
  using Gate = nn::LlamaConfig::Gate;
  if (act == "silu") {
    l.gate = Gate::kSilu;
  } else if (act == "gelu_pytorch_tanh" || act == "gelu_new") {
    l.gate = Gate::kGeluTanh;
  } else if (act == "gelu") {
    l.gate = Gate::kGelu;
  } else if (act == "relu2") {
    l.gate = Gate::kRelu2;
  } else {
    fail(f, std::string("config.json: ") + act_key + " \"" + act +
                "\" (implemented: silu, gelu, gelu_pytorch_tanh, gelu_new, relu2)");
  }
  const RopeRead rope = read_head_and_rope(c, f, k, max_positions, l);
  read_experts(c, f, k, l);
  if (k.granite_hybrid) {
    read_granite_hybrid(c, f, l);  // (layer_types names the mixers, not windows)
  } else if (k.bamba) {
    read_bamba(c, f, l);
  } else if (k.nemotron_h) {
    read_nemotron_h(c, f, l);
  } else {
    const Sliding sliding = sliding_of(c, f, k, l.layers);
    l.sliding_window = sliding.window;
    l.sliding_layers = sliding.layers;
  }
  l.seq_len = rope.context > 0 && rope.context < max_positions ? rope.context : max_positions;
  m.context = l.seq_len;
  m.config = l;
  m.module = std::make_unique<nn::Llama>(l);
  Weights file = read_weights(f);  // after every config.json check: a bad config reads no weights
  if (k.phi3 || k.granite_hybrid) split_fused(m, file, l, k);
  const bool tied = l.tied_head;
  const std::string embed = k.nemotron_h ? "backbone.embeddings.weight" : "model.embed_tokens.weight";
  if (tied && !tied_copy_ok(file.tensors, "lm_head.weight", embed))
    fail(f, "config.json ties the head to the embedding, but lm_head.weight differs from " + embed);
  const bool mixtral = k.mixtral, hybrid = k.granite_hybrid, bamba = k.bamba, nemotron = k.nemotron_h;
  map_weights(
      m, std::move(file),
      [mixtral, hybrid, bamba, nemotron](const std::string& p) {
        if (hybrid) return granite_hybrid_source(p);
        if (bamba) return bamba_source(p);
        if (nemotron) return nemotron_h_source(p);
        return mixtral ? mixtral_source(p) : Source{p};
      },
      [tied](const std::string& n) {
        // rotary_emb.inv_freq: a buffer old files carry, recomputed from the config here.
        return (tied && n == "lm_head.weight") || n.ends_with("rotary_emb.inv_freq");
      });
}

}  // namespace tg::pretrained::detail
