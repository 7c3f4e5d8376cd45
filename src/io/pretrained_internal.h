// What the loaders of tg::pretrained share (pretrained.cc: the folder, GPT-2 and Mamba;
// pretrained_llama.cc: the Llama family): config.json fields, the folder's tensors, and the
// mapping of a file's tensors onto a model's parameters.
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "tensorgrad/pretrained.h"
#include "tensorgrad/quantize.h"

namespace tg::pretrained::detail {

using nlohmann::json;

/// Throws CheckpointError("[pretrained::load] <folder>: <what>").
[[noreturn]] void fail(const std::string& folder, const std::string& what);
std::string shape_str(const Shape& s);

// What a config field of type T must be in the JSON.
template <typename T, typename Json>
bool has_type(const Json& v) {
  if constexpr (std::is_same_v<T, bool>) return v.is_boolean();
  if constexpr (std::is_same_v<T, std::string>) return v.is_string();
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return v.is_number_integer();
  if constexpr (std::is_floating_point_v<T>) return v.is_number();
  return false;
}
template <typename T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "true or false";
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return "an integer";
  return "a number";
}

/// A config field: its value, `fallback` when missing or null, an error naming it when it has
/// another type (nlohmann would read 32.5 as 32 without a word).
template <typename T>
T field(const json& c, const std::string& folder, const char* key, T fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  if (!has_type<T>(c[key]))
    fail(folder,
         std::string("config.json: \"") + key + "\" is " + c[key].dump() + ", expected " + type_name<T>());
  return c[key].get<T>();
}
/// A size the model cannot do without: a positive integer.
int64_t required(const json& c, const std::string& folder, const char* key);
/// A Mamba-2 block's time_step_limit ([min, max], a bound a number or transformers 5's
/// {"__float__": "Infinity"}) into lo and hi; left as they are when config.json has none.
void read_time_step_limit(const json& c, const std::string& folder, double& lo, double& hi);

/// The folder's tensors, and for messages the file each came from.
struct Weights {
  std::map<std::string, HostTensor> tensors;
  std::map<std::string, std::string> file_of;  // tensor name → file name
  std::string listing;                         // where a name is looked up: model.safetensors or the index
  /// Tensors read only when map_weights or take_tensor takes them (a GGUF file's matrices,
  /// dequantized one at a time): their shape and how to read them.
  struct Deferred {
    Shape shape;
    std::function<HostTensor()> read;
    /// The matrix as 4-bit codes with a scale and an offset per int4_group values
    /// (Param::quantize_int4's layout, exactly): a GGUF file's Q4_0, Q4_1 or Q4_K matrix (groups
    /// of 32), a GPTQ or AWQ file's 4-bit Linear in contiguous groups; else empty.
    std::function<Quantized4Tensor()> read_int4;
    int64_t int4_group = 32;
    /// The bits a value of the file's type (2 to 8: Q2_K … Q8_0, GPTQ's 4 or 8), 0 for F32, F16
    /// and BF16.
    int file_bits = 0;
  };
  std::map<std::string, Deferred> deferred;
  /// The tensors of `tensors` that hold an FP8 weight's bytes (F8_E4M3): unpack_fp8_weights.
  std::set<std::string> fp8;
  /// Takes a deferred tensor as its 4-bit codes in groups of `group` (read now); nothing when
  /// it has none in such groups.
  std::optional<Quantized4Tensor> take_int4(const std::string& name, int64_t group) {
    const auto d = deferred.find(name);
    if (d == deferred.end() || !d->second.read_int4 || d->second.int4_group != group) return std::nullopt;
    Quantized4Tensor out = d->second.read_int4();
    deferred.erase(d);
    return out;
  }
  /// Moves a deferred tensor into `tensors` (read now); false when `name` is not deferred.
  bool materialize(const std::string& name) {
    const auto d = deferred.find(name);
    if (d == deferred.end()) return false;
    tensors[name] = d->second.read();
    deferred.erase(d);
    return true;
  }
};
/// Every tensor of model.safetensors, or of the shards model.safetensors.index.json names (a
/// GPTQ or AWQ Linear as one deferred "<prefix>.weight": unpack_packed_linears); for a GGUF
/// file, its tensors as gguf_weights gives them.
Weights read_weights(const std::string& folder);
/// A JSON file of the folder (config.json, an index), parsed; CheckpointError naming it.
json read_json(const std::string& folder, const std::filesystem::path& path);

/// A quantized checkpoint's scheme (pretrained_gptq.cc): GPTQ's or AWQ's packed integer codes,
/// or FP8 weights ("fp8": transformers' fine-grained blocks, "compressed-tensors": its
/// float-quantized weights).
struct PackedScheme {
  std::string method;     // "gptq", "awq", "fp8" or "compressed-tensors"
  int bits = 4;           // 4 (both) or 8 (GPTQ; FP8)
  int64_t group = 128;    // GPTQ, AWQ: inputs a group; -1: one group a row
  bool v1_zeros = false;  // GPTQ's "gptq" format: zero points stored minus one
  /// FP8: the rows and columns a scale covers; 0 0: what the scale tensor's shape says (one
  /// scale, a scale a row, or a block grid).
  int64_t block_rows = 0, block_cols = 0;
  std::string fp8_scale =
      "weight_scale_inv";  // the scale tensor's suffix ("weight_scale" for compressed-tensors)
};
/// config.json's quantization_config as a scheme; nothing without one; CheckpointError for
/// another method (gpt-oss's MXFP4 is its loader's) or settings not read.
std::optional<PackedScheme> packed_scheme(const json& c, const std::string& folder);
/// quantization_config of quant_method "fp8" or "compressed-tensors" (its float-quantized 8-bit
/// weights) as a scheme (pretrained_fp8.cc); CheckpointError for settings not read.
PackedScheme fp8_scheme(const json& q, const std::string& folder, const std::string& method);
/// Each FP8 weight of `w` (Weights::fp8) with its scale → one deferred "<prefix>.weight" of the
/// values they stand for, in f32 (pretrained_fp8.cc); checked against config.json.
void unpack_fp8_weights(Weights& w, const std::string& folder);
/// Each "<prefix>.qweight" of `w` with its qzeros, scales (and GPTQ's g_idx) → one deferred
/// "<prefix>.weight" [out, in]: its values in f32, and for 4 bits in contiguous groups its codes
/// (read_int4). Checked against config.json's quantization_config.
void unpack_packed_linears(Weights& w, const std::string& folder);

/// A GGUF file (pretrained_gguf.cc) as the Hugging Face folder it was converted from: the
/// config.json its metadata describes, and its tensors by that folder's names and layouts
/// (dequantized to f32; F16 and BF16 as they are).
json gguf_config(const std::string& path);
Weights gguf_weights(const std::string& path);
/// The files of that folder a GGUF file's metadata holds, by name: tokenizer.json (when it has a
/// tokenizer) and chat_template.jinja (when it has a chat template).
std::map<std::string, std::string> gguf_side_files(const std::string& path);
/// The model's parameters as save() writes them (pretrained_save.cc): LoRA adapters merged,
/// quantized weights dequantized, every tensor f32 and checked against the model's shapes.
std::map<std::string, HostTensor> merged_f32_weights(const Model& m,
                                                     std::map<std::string, HostTensor> weights,
                                                     const std::string& path);

/// The library's parameters (by its names and layouts, f32) → the file's tensors of
/// m.architecture, as save() writes them (pretrained_save.cc): renamed, GPT-2's Conv1D weights
/// transposed, fused projections stacked again. Rows move, values are not changed.
std::map<std::string, HostTensor> file_tensors(const Model& m, std::map<std::string, HostTensor> w);

/// How one parameter comes from the file: the file's name and a layout change (none: same
/// shape, copied).
enum class Layout { kSame, kTransposed, kSqueezeMiddle };
struct Source {
  std::string name;
  Layout layout = Layout::kSame;
};
/// Fills m.weights for every parameter of m.module from `w` (checked: present, a float
/// tensor of the expected shape; converted to f32); tensors no parameter takes are errors
/// unless `ignorable`.
void map_weights(Model& m, Weights w, const std::function<Source(const std::string&)>& source_of,
                 const std::function<bool(const std::string&)>& ignorable);
/// Takes the file's tensor `name` out of `w` as f32, checked as map_weights checks a parameter's
/// (present, a float tensor, of shape `want`); `file` is set to the file it came from.
HostTensor take_tensor(const Model& m, Weights& w, const std::string& name, const Shape& want,
                       std::string& file);
/// The file's name of a GPT-2 parameter (prefix "transformer." or "" for GPT2Model files) and
/// of a Mamba one.
Source gpt2_source(const std::string& prefix, const std::string& p);
Source mamba_source(const std::string& p);
/// Mixtral's file name of an nn::Llama parameter (its experts under block_sparse_moe).
Source mixtral_source(const std::string& p);
/// Granite 4.0-H's file name of a parameter (pretrained_llama.cc) once the fused and stacked
/// tensors are split: the shared MLP's down_proj, the router, the Mamba-2 blocks' conv1d.
Source granite_hybrid_source(const std::string& p);
/// Bamba's file name of an nn::Llama parameter.
Source bamba_source(const std::string& p);
/// Nemotron-H's file name of an nn::Llama parameter.
Source nemotron_h_source(const std::string& p);
/// A 2-D f32 tensor transposed.
HostTensor transpose2d(const HostTensor& t);
/// config.json's text for a configuration of the library's own (pretrained_save.cc).
std::string config_json_of(const nn::LlamaConfig& c);
std::string config_json_of(const nn::GptConfig& c);
std::string config_json_of(const nn::MambaLMConfig& c);
std::string config_json_of(const nn::BertConfig& c);
std::string config_json_of(const nn::ViTConfig& c);
std::string config_json_of(const nn::ClipConfig& c);
std::string config_json_of(const nn::T5Config& c);
std::string config_json_of(const nn::WhisperConfig& c);
/// A classifier's id2label and label2id (LABEL_0, LABEL_1, …), as transformers writes them.
void add_labels(json& config, int64_t labels);

/// config.json's eos_token_id: none, one id, or a list of them.
std::vector<int32_t> eos_of(const json& c);

/// A tied head's file may still hold the head; it must then equal the embedding it is tied to.
bool tied_copy_ok(const std::map<std::string, HostTensor>& file, const std::string& head,
                  const std::string& embedding);

/// The sizes every Llama-family config.json names the same way: vocab_size, hidden_size,
/// intermediate_size, num_hidden_layers, num_attention_heads (each a positive integer).
void read_llama_sizes(const json& c, const std::string& f, nn::LlamaConfig& l);
/// What config.json's RoPE settings add beyond l.rope_theta and l.rope_scaling, which
/// read_rope sets (pretrained_llama.cc).
struct RopeRead {
  double partial = 1.0;  // partial_rotary_factor: the fraction of each head rotated
  int64_t context = 0;   // the longest sequence they are exact for (longrope); 0: no limit
};
/// rope_theta and rope_scaling (transformers 4) or rope_parameters (5): the base and the
/// rescaling, into l; the rotated fraction and the context limit returned.
RopeRead read_rope(const json& c, const std::string& f, int64_t max_positions, nn::LlamaConfig& l);

/// config.json's layer_types as one flag a layer, true for "sliding_attention" (any other
/// than it and "full_attention", or another count than `layers`, is an error); empty without it.
std::vector<bool> sliding_layer_types(const json& c, const std::string& f, int64_t layers);

/// gpt-oss (pretrained_gpt_oss.cc): GptOssForCausalLM as nn::Llama with attention sinks and
/// biased experts, the experts' matrices unquantized or MXFP4; and its file's tensors from the
/// library's parameters (f32) for pretrained::save (experts stacked and interleaved again).
void load_gpt_oss(Model& m, const json& c);
std::map<std::string, HostTensor> gpt_oss_file_tensors(const Model& m, std::map<std::string, HostTensor> w);

/// The Llama family (pretrained_llama.cc): LlamaForCausalLM and the architectures that are
/// Llama with a difference (Mistral, Qwen2, Qwen3, Phi-3, Gemma), by config.json's name.
void load_llama_family(Model& m, const json& c);

/// The LayerNorm relatives (pretrained_neox.cc): GPTNeoXForCausalLM, PhiForCausalLM and
/// StableLmForCausalLM, as nn::Llama with LlamaConfig::layer_norm.
void load_layernorm_family(Model& m, const json& c);
/// Whether `architecture` is one of them, and their file's tensors from the library's
/// parameters (f32), for pretrained::save.
bool is_layernorm_family(const std::string& architecture);
std::map<std::string, HostTensor> layernorm_family_file_tensors(const Model& m,
                                                                std::map<std::string, HostTensor> w);

/// BERT-family encoders (pretrained_bert.cc): BertModel, BertForMaskedLM and the sequence,
/// token and question-answering heads, BERT's, RoBERTa's, XLM-RoBERTa's and DistilBERT's, as
/// nn::Bert.
void load_bert_family(Model& m, const json& c);
/// The file's name of an nn::Bert parameter: `prefix` ("bert.", "roberta." or "") before the
/// encoder's names; the masked-LM head as BERT's cls.predictions.* or RoBERTa's lm_head.*.
Source bert_source(bool roberta, const std::string& prefix, const std::string& p);
/// The same for DistilBERT's files (`prefix` "distilbert." or ""), whose names differ.
Source distil_source(const std::string& prefix, const std::string& p);

/// Vision Transformers (pretrained_vit.cc): ViTModel and ViTForImageClassification as nn::ViT,
/// and the file's name of a parameter (`prefix` "vit." or "" before the encoder's names).
void load_vit(Model& m, const json& c);
Source vit_source(const std::string& prefix, const std::string& p);
/// The prefix of a ViT class's encoder names in its files: "deit." for DeiT's classes, else "vit.".
std::string vit_base(const std::string& architecture);
/// The transformers class of a ViT configuration: ViT's, or DeiT's with a distillation token.
std::string vit_architecture(const nn::ViTConfig& c);

/// CLIP (pretrained_clip.cc): CLIPModel and the one-tower classes as nn::Clip (the file's names
/// are the module's), and the transformers class of a configuration.
void load_clip(Model& m, const json& c);
std::string clip_architecture(const nn::ClipConfig& c);

/// T5 (pretrained_t5.cc): T5ForConditionalGeneration and T5EncoderModel as nn::T5, and the file's
/// tensors of its parameters (an untied model's embed_tokens copies added).
void load_t5(Model& m, const json& c);
std::map<std::string, HostTensor> t5_file_tensors(const Model& m, std::map<std::string, HostTensor> w);

/// Whisper (pretrained_whisper.cc): WhisperForConditionalGeneration as nn::Whisper (the file's names
/// are the module's; the head tied).
void load_whisper(Model& m, const json& c);

}  // namespace tg::pretrained::detail
