// Hugging Face model folders (what `save_pretrained` writes and the Hub serves): config.json
// names the architecture and its sizes, model.safetensors (or shards listed by
// model.safetensors.index.json) holds the weights. tg::pretrained::load builds the matching
// model of this library and maps every tensor onto its parameters:
//
//   tg::pretrained::Model lm = tg::pretrained::load("TinyLlama-1.1B");
//   tg::Generator gen(*lm.module, lm.step(), {.cache_len = 256});
//   lm.upload(gen.decode());   // programs of one model on one device share its parameters
//
// Supported (tg::pretrained::architectures()):
//   LlamaForCausalLM  → nn::Llama    (names are Hugging Face's; GQA, biases, tied head, RoPE
//                                     scaling linear / llama3 / yarn / longrope)
//   MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, GemmaForCausalLM,
//   Gemma2ForCausalLM, Gemma3ForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM,
//   Qwen3MoeForCausalLM, GraniteForCausalLM, Olmo2ForCausalLM, Olmo3ForCausalLM,
//   GraniteMoeHybridForCausalLM, BambaForCausalLM, NemotronHForCausalLM
//                     → nn::Llama    (with the flags of nn::LlamaConfig each needs; Phi-3's fused
//                                     qkv_proj and gate_up_proj split by rows; sliding windows
//                                     in the layers layer_types names; longrope's context ends
//                                     at its original one, past which transformers changes it;
//                                     the MoE families' experts as LlamaConfig::experts,
//                                     Mixtral's block_sparse_moe.experts.<e>.w1/w3/w2 renamed;
//                                     the hybrids' Mamba-2 blocks as LlamaConfig::mamba_layers,
//                                     Nemotron-H's one-block layers as LlamaConfig::blocks)
//   GPTNeoXForCausalLM, PhiForCausalLM, StableLmForCausalLM, Starcoder2ForCausalLM
//                     → nn::Llama    (LlamaConfig::layer_norm; GPT-NeoX's query_key_value split
//                                     per head; its, Phi's and StarCoder 2's MLP without a
//                                     gate; GPT-NeoX's and Phi's layers parallel; names mapped
//                                     onto Llama's)
//   GPT2LMHeadModel   → nn::Gpt      (Conv1D weights [in, out] transposed to Linear's [out, in];
//                                     c_attn → qkv, c_proj → proj, c_fc → fc, mlp.c_proj → fc2)
//   MambaForCausalLM, Mamba2ForCausalLM
//                     → nn::MambaLM  (backbone.* without the prefix; conv1d [D, 1, K] → [D, K];
//                                     Mamba-2: MambaLMConfig::version 2, nn::Mamba2 mixers)
//   ViTModel, ViTForImageClassification, DeiTModel, DeiTForImageClassification,
//   DeiTForImageClassificationWithTeacher
//                     → nn::ViT      (the prefix vit. / deit. optional, the pooler when the file
//                                     has one, DeiT's distillation token and heads; see
//                                     tensorgrad/vit.h)
//   CLIPModel, CLIPTextModel, CLIPTextModelWithProjection, CLIPVisionModel,
//   CLIPVisionModelWithProjection
//                     → nn::Clip     (names as in the file; both towers or one, with or without
//                                     the projections; see tensorgrad/clip.h)
//   T5ForConditionalGeneration, T5EncoderModel
//                     → nn::T5       (names as in the file; the stacks' embed_tokens copies must
//                                     equal shared; see tensorgrad/t5.h)
//   WhisperForConditionalGeneration
//                     → nn::Whisper  (names as in the file, the head tied; see tensorgrad/whisper.h)
//   BertModel, BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification,
//   BertForQuestionAnswering, and the same of Roberta, XLMRoberta and DistilBert (renamed)
//                     → nn::Bert     (encoders; the prefix bert. / roberta. optional, the pooler
//                                     when the file has one, LayerNorm.gamma/beta read as
//                                     weight/bias, RoBERTa's lm_head mapped onto
//                                     cls.predictions; see tensorgrad/bert.h)
// A llama.cpp GGUF file loads too (load("model.gguf")): general.architecture llama (with experts:
// Mixtral), qwen2, qwen3, qwen2moe, qwen3moe, phi3, gemma, gemma2, gemma3 or gpt2 as the transformers
// class of each, its metadata read as the
// config.json it was converted from and its tensors renamed back (blk.N.attn_q → model.layers.N.
// self_attn.q_proj, …; the architecture llama's q and k rows returned to transformers' order),
// each F32, F16, BF16 or one of ggml's block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
// Q4_K, Q5_K and Q6_K, dequantized to its values (then held as LoadOptions::dtype says).
// Weights may be F32, BF16 or F16; they are converted to f32 exactly (or held as bf16 or f16:
// LoadOptions::dtype). Everything is checked
// before a model is returned: a folder without config.json (or one that cannot be read),
// another architecture, a config key that is missing or of another type (32.5 where an integer
// belongs), a config value the library's model does not implement (a rope_scaling type, another
// activation, sizes it refuses), a missing tensor, an extra one (but the attention-mask buffers
// GPT-2 files carry), a shape or dtype that differs, and a safetensors file or index that is
// corrupt or truncated are tg::CheckpointError naming the folder, the file and the tensor or
// key, with what was expected and what was found. config.json is checked before any weights
// are read.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "tensorgrad/bert.h"
#include "tensorgrad/clip.h"
#include "tensorgrad/generate.h"
#include "tensorgrad/mamba.h"
#include "tensorgrad/nn.h"
#include "tensorgrad/program.h"
#include "tensorgrad/t5.h"
#include "tensorgrad/vit.h"
#include "tensorgrad/whisper.h"

namespace tg::pretrained {

/// A loaded folder: the model, its configuration and its weights by the model's own
/// parameter names (already in the library's layouts; f32 unless LoadOptions::dtype says).
struct Model {
  std::string folder;
  /// config.json's architecture ("LlamaForCausalLM", "Qwen2ForCausalLM", "GPT2LMHeadModel", …).
  std::string architecture;
  /// The library's configuration of the model built: nn::LlamaConfig, nn::GptConfig,
  /// nn::MambaLMConfig, nn::BertConfig, nn::ViTConfig, nn::ClipConfig, nn::T5Config or
  /// nn::WhisperConfig.
  std::variant<nn::LlamaConfig, nn::GptConfig, nn::MambaLMConfig, nn::BertConfig, nn::ViTConfig,
               nn::ClipConfig, nn::T5Config, nn::WhisperConfig>
      config;
  /// The model (an nn::Llama, nn::Gpt, nn::MambaLM, nn::Bert, nn::ViT, nn::Clip, nn::T5 or
  /// nn::Whisper):
  /// compile programs from it.
  std::unique_ptr<Module> module;
  /// Its parameters' values from the file, named as module->parameters() are.
  std::map<std::string, HostTensor> weights;
  /// How the matrices are held (LoadOptions::dtype; the module stores them so on every device).
  DType dtype = DType::kF32;
  /// LoadOptions::group (0 resolved: the file's or 32) and bits: values per scale, and bits a
  /// value, of the weights quantized under DType::kI8.
  int64_t group = 32;
  int bits = 8;
  /// Longest sequence the model takes (max_position_embeddings, n_positions); 0 for a
  /// recurrent model, which has no such limit.
  int64_t context = 0;
  /// config.json's eos_token_id(s), if it names any.
  std::vector<int32_t> eos_ids;
  /// A classifier's label names by output index (config.json's id2label); empty without one.
  std::vector<std::string> label_names = {};
  /// config.json as load() read it (or as from_config() wrote it): what save() writes back.
  std::string config_json;

  /// ids [B, T] (i32, T ≤ context) → logits [B, T, vocab], to trace in compile_forward (a
  /// BERT-family masked-LM: its mlm_logits without a mask; a classifier: its logits [B, labels]
  /// or [B, T, labels]; question answering: [B, T, 2]; a ViT classifier: its logits [B, labels]
  /// for pixels [B, C, H, W] in place of ids; an encoder without a head throws, and so does
  /// CLIP, which takes texts and images: use nn::Clip's text_features, image_features and
  /// logits_per_image; and T5 and Whisper, whose decoders read their encoders: use their encode,
  /// decode and logits).
  Tensor logits(const Tensor& ids) const;
  /// The cached step tg::Generator drives (logits_cached of the model). An encoder throws.
  CachedLm step() const;
  /// A recurrent model (Mamba, or a hybrid with Mamba-2 layers): its cached step advances the
  /// layers' states by every token it is given (tg::Generator prefills it in whole windows).
  bool recurrent() const {
    if (const auto* l = std::get_if<nn::LlamaConfig>(&config))
      return std::find(l->mamba_layers.begin(), l->mamba_layers.end(), true) != l->mamba_layers.end();
    return std::holds_alternative<nn::MambaLMConfig>(config);
  }
  /// Sets every parameter of a program compiled from `module` (and so of every program of it
  /// on that device) to `weights`.
  void upload(Program& program) const { program.upload_params(weights); }
};

struct LoadOptions {
  /// How the model's matrices (every parameter of rank ≥ 2: the products' weights and the
  /// embeddings) are held, in `weights` and on every device (Module::store_params_as): kF32
  /// (trainable), or kBF16 / kF16 for inference and LoRA fine-tuning over a frozen base. Under
  /// the matching Precision a half type needs a third of the device memory of f32 weights and
  /// their converted copies (the products read the stored values; a mixture's experts are still
  /// stacked into one copy per layer); under kFp32 the products read them widened, kept or
  /// widened per run (see README, "Weights held in bf16 or f16"). Vectors (norms, biases) stay f32. The
  /// file's values are converted exactly when it holds that type, else rounded to nearest even
  /// (a value beyond f16's range is a CheckpointError).
  ///
  /// kI8 quantizes every Linear's weight to 8 bits with an f32 scale per `group` values of a row
  /// (Module::store_params_as(kI8), tensorgrad/quantize.h) and holds the embeddings (and a tied
  /// head, and a mixture's experts) as bf16: `weights` holds the i8 values and their
  /// "<name>_scale" entries. Inference and LoRA over a frozen base: an inference program's products
  /// of up to 16 rows (decoding) read the i8 values themselves (quant_matmul), wider ones a copy
  /// dequantized in the step. With `bits` 4 the Linears' weights are quantized to 4 bits instead
  /// (Param::quantize_int4: "<name>_scale" and "<name>_offset" entries beside the packed codes);
  /// a GGUF file's Q4_0, Q4_1 and Q4_K matrices are taken as they are, exactly, and so are a GPTQ
  /// or AWQ folder's 4-bit Linears (their codes, zero points and scales) in the file's groups.
  /// Whatever `dtype`, such a folder's packed Linears load as the values they stand for.
  DType dtype = DType::kF32;
  /// Under kI8: values per scale (a Linear whose input width it does not divide is held as
  /// bf16). 0: a GPTQ or AWQ folder's group_size, else 32.
  int64_t group = 0;
  /// Under kI8: 8 or 4 bits a weight.
  int bits = 8;
};

/// Reads `folder` (config.json and its safetensors weights), or a GGUF file, into a Model.
/// Throws tg::CheckpointError on anything it cannot map exactly (see the file comment).
Model load(const std::string& folder, const LoadOptions& options = {});

/// The architecture names load() takes.
std::vector<std::string> architectures();

struct SaveOptions {
  /// The weights' dtype in the files: DType::kF32, kBF16 or kF16 (rounded to nearest even).
  DType dtype = DType::kF32;
  /// Shards of at most this many bytes (a tensor larger than that gets a shard of its own):
  /// model-0000k-of-0000n.safetensors listed by model.safetensors.index.json, as
  /// save_pretrained's max_shard_size writes them. 0: one model.safetensors.
  int64_t max_shard_bytes = 0;
};

/// Writes `weights` (the model's parameters by its own names: a program's download_params(),
/// m.weights, nn::merge_lora's result) into `folder` as a Hugging Face folder of
/// m.architecture that transformers and load() read: config.json (m.config_json with its dtype
/// set to options.dtype), the weights under the file's names and layouts (GPT-2's Conv1D
/// [in, out], Phi-3's fused qkv_proj and gate_up_proj, GPT-NeoX's query_key_value fused per
/// head, Mamba's conv1d [D, 1, K]; a tied head
/// is not written, as save_pretrained leaves it out), and the tokenizer and generation files
/// of m.folder when it has them (a GGUF file's: tokenizer.json and chat_template.jinja written
/// from its metadata) (tokenizer.json, tokenizer_config.json,
/// special_tokens_map.json, generation_config.json, preprocessor_config.json, tokenizer.model, vocab.json,
/// merges.txt, added_tokens.json, chat_template.jinja). A model with LoRA adapters (nn::add_lora) is written
/// merged: adapter entries in `weights` are folded in by nn::merge_lora first (all of them, or an error);
/// `weights` without any are written as they are (nn::merge_lora's result). The folder is created if missing;
/// weight files an earlier save left there (model.safetensors, its index, model-*-of-*.safetensors) are
/// removed first. Errors are tg::CheckpointError: a parameter missing from `weights` or of another shape, an
/// entry the model has no parameter for, a dtype other than those three, `folder` being m.folder, a file that
/// cannot be written. `weights` is taken by value: pass a temporary (a program's download_params()) or
/// std::move it, and the files are written from those tensors, one tensor at a time converted or re-laid out,
/// without a second copy of the model in memory (an lvalue is copied, the caller keeping it; merging adapters
/// makes the merged copy).
void save(const Model& m, std::map<std::string, HostTensor> weights, const std::string& folder,
          const SaveOptions& options = {});

struct GgufOptions {
  /// The matrices' type in the file: DType::kF32, kF16, kBF16, or kI8 for ggml's Q8_0 (a scale
  /// per 32 values of a row; a matrix whose rows are not whole blocks of 32 is written F16).
  /// Vectors (norms, biases) are F32, as llama.cpp's converter writes them.
  DType dtype = DType::kF16;
  /// Under kI8: 8 (Q8_0) or 4 (ggml's Q4_0: 4-bit codes and an f16 scale per 32 values, by ggml's
  /// reference quantizer).
  int bits = 8;
};

/// Writes `weights` (as save() takes them: LoRA adapters merged, quantized weights dequantized)
/// as a GGUF file in the layout llama.cpp's converter writes for the model's Hugging Face folder,
/// for llama.cpp, ollama and load(): LlamaForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM as the
/// architectures llama, qwen2 and qwen3 (their sizes, RoPE settings and Llama 3.1's rescaling as
/// rope_freqs.weight; for llama the rows of q and k put in ggml's RoPE pairing), with the
/// tokenizer of m.folder (its tokenizer.json: byte-level BPE with GPT-2's, Llama 3's or Qwen2's
/// pre-tokenizer, or SentencePiece-style BPE with its merge ranks as scores, padded to the
/// model's vocabulary; or the tokenizer.ggml.* keys of the GGUF file m was loaded from; without
/// one, the vocabulary type "none") and its chat template, m.eos_ids as eos, eot and eom. Errors are
/// tg::CheckpointError: another architecture, a configuration those cannot express (windows,
/// experts, Gemma's or OLMo's norms, …, named), a tokenizer GGUF cannot describe, an F16 value
/// beyond F16's range, a file that cannot be written (written atomically: a failed write leaves
/// `path` as it was).
void save_gguf(const Model& m, std::map<std::string, HostTensor> weights, const std::string& path,
               const GgufOptions& options = {});

/// A Model of a configuration of the library's own, to save() a model trained from scratch:
/// the module built from `config`, config.json written for LlamaForCausalLM, GPT2LMHeadModel,
/// MambaForCausalLM or a BERT-family class, no weights and no folder. A configuration that architecture
/// cannot express (nn::LlamaConfig's Gemma, Qwen or window flags, a GPT with RoPE or without biases, …) is a
/// tg::CheckpointError naming the field; save such a model through the Model load() returned for the folder
/// it came from, whose config.json is kept.
Model from_config(const nn::LlamaConfig& config);
Model from_config(const nn::GptConfig& config);
Model from_config(const nn::MambaLMConfig& config);
/// A BERT-family encoder: BertModel, BertForMaskedLM, Bert…ForSequenceClassification,
/// …ForTokenClassification or …ForQuestionAnswering (Roberta… with roberta_positions,
/// DistilBert… with distil) by the
/// head it has (more than one is refused), labels named LABEL_0, LABEL_1, …
Model from_config(const nn::BertConfig& config);
/// A Vision Transformer: ViTForImageClassification with labels (no pooler), else ViTModel; with
/// a distillation token DeiT's classes (…WithTeacher for the distillation head).
Model from_config(const nn::ViTConfig& config);
/// CLIP: CLIPModel with both towers, else CLIPTextModel / CLIPVisionModel, …WithProjection
/// with ClipConfig::projections.
Model from_config(const nn::ClipConfig& config);
/// T5: T5ForConditionalGeneration, or T5EncoderModel without a decoder.
Model from_config(const nn::T5Config& config);
/// Whisper: WhisperForConditionalGeneration.
Model from_config(const nn::WhisperConfig& config);

// ---- PEFT LoRA adapters ------------------------------------------------------------------
// An adapter folder as PEFT's save_pretrained writes it: adapter_config.json (peft_type "LORA",
// r, lora_alpha, use_rslora, rank_pattern, alpha_pattern, lora_dropout, target_modules, …) and
// adapter_model.safetensors, whose "base_model.model.<module>.lora_A.weight" [r, in] and
// ".lora_B.weight" [out, r] adapt the transformers module <module> by (alpha/r)·B·A
// (alpha/√r under rsLoRA), and whose other tensors (modules_to_save, trained biases) replace the
// base's of that name. Modules the library splits (Phi-3's qkv_proj and gate_up_proj, GPT-NeoX's
// query_key_value) and GPT-2's Conv1D map as save() maps their weights.

struct AdapterLoadOptions {
  /// Fold the adapters into the weights (W + (alpha/r)·B·A, PEFT's merge_and_unload) and
  /// attach nothing: the model runs as fast as the base. Quantized weights are quantized again
  /// after merging (a rounding the unmerged adapter does not have); half-stored ones rounded
  /// back to their type.
  bool merge = false;
};

/// Reads a PEFT LoRA adapter folder onto `m`: attaches an nn::LoRA of the adapter's rank and
/// scaling to every nn::Linear it adapts (all of a fused module's parts share its A and take
/// their rows of B) and adds the adapters' values and the replaced tensors to m.weights; or, with
/// `merge`, folds them into m.weights. Call it before compiling programs of m.module (a program
/// compiled before does not see the adapters). Returns the adapted Linears' paths. The model
/// changes only once every check passed. Errors are
/// tg::CheckpointError naming the folder and the tensor or field: no adapter_config.json (or
/// only adapter_model.bin), another peft_type, variants the library does not run (DoRA,
/// lora_bias, adapters on embeddings or on parameters, layer_replication, …), a module the model
/// has no Linear for, shapes that do not match, a Linear that has an adapter already.
std::vector<std::string> load_adapter(Model& m, const std::string& folder,
                                      const AdapterLoadOptions& options = {});

struct AdapterSaveOptions {
  /// The tensors' dtype in adapter_model.safetensors: DType::kF32, kBF16 or kF16.
  DType dtype = DType::kF32;
  /// adapter_config.json's base_model_name_or_path; empty: m.folder.
  std::string base_model = {};
  /// Modules of the library's model trained in full beside the adapters (a classifier head:
  /// "classifier"), by path: their parameters are written whole under the file's names, and
  /// their file names listed as PEFT's modules_to_save.
  std::vector<std::string> modules_to_save = {};
};

/// Writes the LoRA adapters of m.module (nn::add_lora or load_adapter), their values taken from
/// `weights` (a program's download_params(); other entries are ignored), as a PEFT adapter folder
/// that peft's PeftModel.from_pretrained and load_adapter read over m's Hugging Face folder.
/// Adapters on Linears the file fuses (Phi-3's q/k/v_proj, GPT-NeoX's) are written as one adapter
/// of the fused module whose rank is the sum of the parts' (A stacked, B block-diagonal), which
/// computes the same product; the most common rank and alpha are the config's r and lora_alpha,
/// the others go into rank_pattern and alpha_pattern by module name. The folder is created if missing. Errors
/// are tg::CheckpointError: no adapters, a missing or misshapen adapter value, an adapted Linear the file has
/// no module for.
void save_adapter(const Model& m, const std::map<std::string, HostTensor>& weights, const std::string& folder,
                  const AdapterSaveOptions& options = {});

}  // namespace tg::pretrained
