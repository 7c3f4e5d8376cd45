// gpt-oss (GptOssForCausalLM) → nn::Llama: RMSNorm layers, q/k/v/o projections with biases
// (attention_bias), attention sinks (self_attn.sinks), sliding windows where layer_types says
// (every other layer from the first by default), YaRN RoPE, and a mixture of experts in every
// layer: a biased router (mlp.router, read as mlp.gate) whose top num_experts_per_tok logits
// are softmaxed, and biased experts stacked per layer, mlp.experts.gate_up_proj [E, d, 2I]
// with each expert's gate and up columns interleaved (gate even, up odd) and down_proj
// [E, I, d], split here into mlp.experts.<e>.{gate,up,down}_proj (their rows being the file's
// columns). The experts' unit is LlamaConfig::Gate::kClampedSwiglu, with the constants
// transformers' GptOssExperts fixes (limit 7, α 1.702; config.json's swiglu_limit is not read
// by it, nor here). The published checkpoints hold the experts' matrices as MXFP4
// (quantization_config.quant_method "mxfp4"): *_blocks and *_scales, decoded here to f32.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "io/pretrained_internal.h"
#include "tensorgrad/errors.h"

namespace tg::pretrained::detail {
namespace {

// MXFP4's e2m1 values by 4-bit code (bit 3 the sign).
constexpr float kFp4[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// An MXFP4 stack of E matrices [rows, cols]: blocks u8 [E, rows, cols/32, 16] (two codes a
// byte, the even column's in the low nibble) and scales u8 [E, rows, cols/32] (each 32 values
// times 2^(scale − 127)) → f32 [E, cols, rows], each matrix transposed as transformers' loader
// transposes it (to gate_up_proj's [E, d, 2I] and down_proj's [E, I, d]).
HostTensor decode_mxfp4(const Model& m, Weights& w, const std::string& name, int64_t experts, int64_t rows,
                        int64_t cols) {
  if (cols % 32 != 0)
    fail(m.folder, "MXFP4 '" + name + "': a row of " + std::to_string(cols) + " is no multiple of 32");
  const int64_t groups = cols / 32;
  const auto take = [&](const std::string& part, const Shape& want) {
    const auto it = w.tensors.find(name + part);
    if (it == w.tensors.end())
      fail(m.folder, w.listing + ": '" + name + "_blocks' and '" + name + "_scales' come in pairs; '" + name +
                         part + "' is missing");
    if (it->second.dtype() != DType::kI8 || it->second.shape() != want)
      fail(m.folder, w.file_of[name + part] + ": '" + name + part + "' must be U8 " + shape_str(want) +
                         ", found " + shape_str(it->second.shape()));
    HostTensor t = std::move(it->second);
    w.tensors.erase(it);
    return t;
  };
  const HostTensor blocks = take("_blocks", {experts, rows, groups, 16});
  const HostTensor scales = take("_scales", {experts, rows, groups});
  w.file_of[name] = w.file_of[name + "_blocks"];
  const auto* b = static_cast<const uint8_t*>(blocks.data());
  const auto* s = static_cast<const uint8_t*>(scales.data());
  std::vector<float> out(static_cast<size_t>(experts * rows * cols));
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t at = (e * rows + r) * groups + g;
        const float scale = std::ldexp(1.0f, static_cast<int>(s[at]) - 127);
        for (int64_t j = 0; j < 32; ++j) {
          const uint8_t byte = b[at * 16 + j / 2];
          const float v = kFp4[j % 2 == 0 ? byte & 0x0f : byte >> 4] * scale;
          out[static_cast<size_t>((e * cols + g * 32 + j) * rows + r)] = v;
        }
      }
  return HostTensor::f32(std::move(out), {experts, cols, rows});
}

// A layer's stacked experts → mlp.experts.<e>.{gate,up,down}_proj.{weight,bias}.
void split_gpt_oss_experts(Model& m, Weights& w, const std::string& layer, const nn::LlamaConfig& l) {
  const int64_t count = l.experts.count, hidden = l.mlp_hidden, d = l.d_model;
  const std::string stack = layer + "mlp.experts.";
  std::string gu_file, down_file, gub_file, downb_file;
  const bool mxfp4 = w.tensors.count(stack + "gate_up_proj_blocks") != 0;
  // The experts are handed on in the file's type (MXFP4's values are bf16 values exactly), so that
  // a model held in bf16 never has all of them in f32 at once: gpt-oss-20b's are 19 billion.
  const auto file_type = [&](const std::string& name) {
    const auto it = w.tensors.find(name);
    return it == w.tensors.end() || !is_half(it->second.dtype()) ? DType::kF32 : it->second.dtype();
  };
  const DType type = mxfp4 ? DType::kBF16 : file_type(stack + "gate_up_proj"),
              bias_type = file_type(stack + "gate_up_proj_bias");
  const HostTensor gate_up = mxfp4
                                 ? decode_mxfp4(m, w, stack + "gate_up_proj", count, 2 * hidden, d)
                                 : take_tensor(m, w, stack + "gate_up_proj", {count, d, 2 * hidden}, gu_file);
  const HostTensor down = mxfp4 ? decode_mxfp4(m, w, stack + "down_proj", count, d, hidden)
                                : take_tensor(m, w, stack + "down_proj", {count, hidden, d}, down_file);
  if (mxfp4) gu_file = w.file_of[stack + "gate_up_proj"], down_file = w.file_of[stack + "down_proj"];
  const HostTensor gate_up_bias =
      take_tensor(m, w, stack + "gate_up_proj_bias", {count, 2 * hidden}, gub_file);
  const HostTensor down_bias = take_tensor(m, w, stack + "down_proj_bias", {count, d}, downb_file);
  const std::span<const float> gu = gate_up.f32(), dn = down.f32(), gub = gate_up_bias.f32(),
                               db = down_bias.f32();
  for (int64_t e = 0; e < count; ++e) {
    const std::string expert = stack + std::to_string(e) + ".";
    const auto put = [&](const std::string& name, std::vector<float> values, Shape shape,
                         const std::string& file) {
      if (w.tensors.count(expert + name))
        fail(m.folder, w.file_of[expert + name] + ": unexpected tensor '" + expert + name + "' beside " +
                           stack + "gate_up_proj and down_proj, which " + m.architecture + " splits into it");
      w.tensors[expert + name] =
          HostTensor::f32(std::move(values), std::move(shape)).to(name.ends_with("bias") ? bias_type : type);
      w.file_of[expert + name] = file;
    };
    std::vector<float> gate(static_cast<size_t>(hidden * d)), up(gate.size()), down_w(gate.size());
    std::vector<float> gate_b(static_cast<size_t>(hidden)), up_b(gate_b.size());
    for (int64_t i = 0; i < hidden; ++i) {
      for (int64_t j = 0; j < d; ++j) {
        const size_t at = static_cast<size_t>((e * d + j) * 2 * hidden + 2 * i);
        gate[static_cast<size_t>(i * d + j)] = gu[at];
        up[static_cast<size_t>(i * d + j)] = gu[at + 1];
        down_w[static_cast<size_t>(j * hidden + i)] = dn[static_cast<size_t>((e * hidden + i) * d + j)];
      }
      gate_b[static_cast<size_t>(i)] = gub[static_cast<size_t>(e * 2 * hidden + 2 * i)];
      up_b[static_cast<size_t>(i)] = gub[static_cast<size_t>(e * 2 * hidden + 2 * i + 1)];
    }
    put("gate_proj.weight", std::move(gate), {hidden, d}, gu_file);
    put("up_proj.weight", std::move(up), {hidden, d}, gu_file);
    put("down_proj.weight", std::move(down_w), {d, hidden}, down_file);
    put("gate_proj.bias", std::move(gate_b), {hidden}, gub_file);
    put("up_proj.bias", std::move(up_b), {hidden}, gub_file);
    put("down_proj.bias", std::vector<float>(db.begin() + e * d, db.begin() + (e + 1) * d), {d}, downb_file);
  }
}

// The router is mlp.router in the file, mlp.gate in nn::Llama.
Source gpt_oss_source(const std::string& p) {
  const size_t at = p.find(".mlp.gate.");
  if (at == std::string::npos) return {p};
  return {p.substr(0, at) + ".mlp.router." + p.substr(at + 10)};
}

// Which layers slide: layer_types, else GptOssConfig's default (layers 0, 2, 4, …); the
// window 128 when missing, none when null.
void read_windows(const json& c, const std::string& f, nn::LlamaConfig& l) {
  l.sliding_window = c.contains("sliding_window") ? field<int64_t>(c, f, "sliding_window", 0) : 128;
  if (l.sliding_window < 0)
    fail(f, "config.json: sliding_window " + std::to_string(l.sliding_window) + " is negative");
  l.sliding_layers = sliding_layer_types(c, f, l.layers);
  if (l.sliding_layers.empty())
    for (int64_t i = 0; i < l.layers; ++i) l.sliding_layers.push_back(i % 2 == 0);
  if (l.sliding_window == 0) l.sliding_layers.clear();
}

}  // namespace

void load_gpt_oss(Model& m, const json& config) {
  const std::string& f = m.folder;
  if (config.contains("quantization_config") && !config["quantization_config"].is_null()) {
    const json& q = config["quantization_config"];
    const std::string method = q.is_object() ? field<std::string>(q, f, "quant_method", "") : "";
    if (method != "mxfp4")
      fail(f, "config.json: quantization_config " + q.dump().substr(0, 200) +
                  " is not read (gpt-oss's experts are read as MXFP4 or unquantized)");
  }
  // GptOssConfig's defaults where the file has no RoPE settings: base 150000, YaRN ×32 over an
  // original 4096 positions, without truncation.
  json c = config;
  const bool nested = c.contains("rope_parameters") && c["rope_parameters"].is_object();
  if (!c.contains("rope_theta") && !(nested && c["rope_parameters"].contains("rope_theta")))
    c["rope_theta"] = 150000.0;
  if (!nested && (!c.contains("rope_scaling") || c["rope_scaling"].is_null()))
    c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32.0},
                         {"beta_fast", 32.0},   {"beta_slow", 1.0},
                         {"truncate", false},   {"original_max_position_embeddings", 4096}};
  nn::LlamaConfig l;
  read_llama_sizes(c, f, l);
  l.kv_heads = field<int64_t>(c, f, "num_key_value_heads", l.heads);
  // head_dim: GptOssConfig's 64 when missing, hidden / heads when null.
  l.head_dim = !c.contains("head_dim") ? 64 : c["head_dim"].is_null() ? 0 : required(c, f, "head_dim");
  l.rms_eps = field<double>(c, f, "rms_norm_eps", 1e-5);
  l.tied_head = field<bool>(c, f, "tie_word_embeddings", false);
  l.attention_bias = field<bool>(c, f, "attention_bias", true);
  l.mlp_bias = true;
  l.attention_sinks = true;
  l.gate = nn::LlamaConfig::Gate::kClampedSwiglu;
  nn::LlamaConfig::Experts& x = l.experts;
  x.count = required(c, f, "num_local_experts");
  x.top_k = field<int64_t>(c, f, "num_experts_per_tok", 4);
  if (x.top_k < 1 || x.top_k > x.count)
    fail(f, "config.json: num_experts_per_tok " + std::to_string(x.top_k) + " is not within 1 … " +
                std::to_string(x.count) + " experts");
  x.normalize = true;  // the softmax of the top logits
  x.router_bias = true;
  if (field<bool>(c, f, "output_router_logits", false))
    x.aux_loss_coef = field<double>(c, f, "router_aux_loss_coef", 0.001);
  const int64_t max_positions = field<int64_t>(c, f, "max_position_embeddings", 131072);
  const RopeRead rope = read_rope(c, f, max_positions, l);
  if (rope.partial != 1.0)
    fail(f, "config.json: partial_rotary_factor " + std::to_string(rope.partial) +
                " is not implemented for GptOssForCausalLM");
  read_windows(c, f, l);
  l.seq_len = rope.context > 0 && rope.context < max_positions ? rope.context : max_positions;
  m.context = l.seq_len;
  m.config = l;
  m.module = std::make_unique<nn::Llama>(l);
  Weights file = read_weights(f);  // after every config.json check: a bad config reads no weights
  for (int64_t i = 0; i < l.layers; ++i)
    split_gpt_oss_experts(m, file, "model.layers." + std::to_string(i) + ".", l);
  const bool tied = l.tied_head;
  if (tied && !tied_copy_ok(file.tensors, "lm_head.weight", "model.embed_tokens.weight"))
    fail(f,
         "config.json ties the head to the embedding, but lm_head.weight differs from "
         "model.embed_tokens.weight");
  map_weights(m, std::move(file), gpt_oss_source,
              [tied](const std::string& n) { return tied && n == "lm_head.weight"; });
}

std::map<std::string, HostTensor> gpt_oss_file_tensors(const Model& m, std::map<std::string, HostTensor> w) {
  const nn::LlamaConfig& l = std::get<nn::LlamaConfig>(m.config);
  const int64_t count = l.experts.count;
  std::map<std::string, HostTensor> out;
  for (int64_t i = 0; i < l.layers; ++i) {
    const std::string stack = "model.layers." + std::to_string(i) + ".mlp.experts.";
    const auto take = [&](int64_t e, const std::string& name) {
      auto it = w.find(stack + std::to_string(e) + "." + name);
      if (it == w.end())
        throw CheckpointError("[pretrained::save] no parameter '" + stack + std::to_string(e) + "." + name +
                              "'");
      HostTensor t = std::move(it->second);
      w.erase(it);
      return t;
    };
    // The widths from the tensors themselves (save_adapter traces with narrower ones).
    std::vector<float> gu, gub, dn, db;
    int64_t hidden = 0, in = 0, out_d = 0;
    for (int64_t e = 0; e < count; ++e) {
      const HostTensor gate = take(e, "gate_proj.weight"), up = take(e, "up_proj.weight"),
                       down = take(e, "down_proj.weight"), gate_b = take(e, "gate_proj.bias"),
                       up_b = take(e, "up_proj.bias"), down_b = take(e, "down_proj.bias");
      hidden = gate.shape()[0], in = gate.shape()[1], out_d = down.shape()[0];
      const std::span<const float> g = gate.f32(), u = up.f32(), dw = down.f32(), gb = gate_b.f32(),
                                   ub = up_b.f32(), dbias = down_b.f32();
      for (int64_t j = 0; j < in; ++j)  // [d, 2I]: column 2i the gate's row i, 2i + 1 the up's
        for (int64_t k = 0; k < hidden; ++k) {
          gu.push_back(g[static_cast<size_t>(k * in + j)]);
          gu.push_back(u[static_cast<size_t>(k * in + j)]);
        }
      for (int64_t k = 0; k < hidden; ++k) {
        gub.push_back(gb[static_cast<size_t>(k)]);
        gub.push_back(ub[static_cast<size_t>(k)]);
        for (int64_t j = 0; j < out_d; ++j) dn.push_back(dw[static_cast<size_t>(j * hidden + k)]);
      }
      db.insert(db.end(), dbias.begin(), dbias.end());
    }
    out[stack + "gate_up_proj"] = HostTensor::f32(std::move(gu), {count, in, 2 * hidden});
    out[stack + "gate_up_proj_bias"] = HostTensor::f32(std::move(gub), {count, 2 * hidden});
    out[stack + "down_proj"] = HostTensor::f32(std::move(dn), {count, hidden, out_d});
    out[stack + "down_proj_bias"] = HostTensor::f32(std::move(db), {count, out_d});
  }
  for (auto& [name, t] : w) out[gpt_oss_source(name).name] = std::move(t);
  return out;
}

}  // namespace tg::pretrained::detail
