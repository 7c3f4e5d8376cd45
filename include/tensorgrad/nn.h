// Layers built from Params and ops. Weights use PyTorch's layouts and default inits, so a
// state dict moves between the two unchanged.
#pragma once
#include <functional>
#include <limits>
#include <map>
#include <memory>

#include "tensorgrad/functional.h"
#include "tensorgrad/program.h"
#include "tensorgrad/module.h"

namespace tg::nn {

struct LinearOptions {
  bool bias = true;
  /// Default: PyTorch's, U(-1/√in, 1/√in) for weight and bias.
  std::optional<Init> weight_init = {};
  std::optional<Init> bias_init = {};
};

class LoRA;

/// y = x Wᵀ + b, with W of shape [out, in] (PyTorch's layout) and x of shape [..., in].
/// With a LoRA adapter attached (nn::add_lora), y also gets the adapter's term.
class Linear : public Module {
 public:
  Linear(Module& parent, std::string name, int64_t in_features, int64_t out_features,
         LinearOptions options = {});
  ~Linear() override;
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  /// The attached adapter, or nullptr.
  const LoRA* lora() const { return lora_.get(); }

  const int64_t in_features, out_features;
  Param weight;
  std::optional<Param> bias;

 private:
  friend void attach_lora(Linear& linear, int64_t rank, double alpha, double dropout);
  friend void remove_lora(Module& model);
  std::unique_ptr<LoRA> lora_;
};

// ---- LoRA: low-rank adapters (Hu et al. 2021) ---------------------------------------------
/// A low-rank adapter on a Linear: the Linear computes
///   y = x·Wᵀ (+ b) + (alpha/rank)·dropout(x)·Aᵀ·Bᵀ
/// with A [rank, in] drawn like PyTorch's kaiming_uniform(a=√5), U(±1/√in), and B [out, rank]
/// zeros, so a fresh adapter changes nothing. Its parameters are "<linear>.lora_A.weight" and
/// "<linear>.lora_B.weight" (PEFT's names without its "base_model.model." prefix and adapter
/// name), both with weight decay. Owned by its Linear.
class LoRA {
 public:
  LoRA(Linear& linear, int64_t rank, double alpha, double dropout);
  /// The adapter's term for x [..., in] (without W's).
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  double scale() const { return alpha / static_cast<double>(rank); }
  const int64_t rank;
  const double alpha, dropout;

  /// The Linear's children "lora_A" and "lora_B" (declared first: they hold A and B).
  Module lora_A, lora_B;
  Param A;  // "<linear>.lora_A.weight" [rank, in]
  Param B;  // "<linear>.lora_B.weight" [out, rank]
};

struct LoRAOptions {
  /// Linears to adapt: a Linear is adapted when its path equals an entry or ends with "." +
  /// entry ("q_proj" adapts every layer's q_proj; "model.layers.0.self_attn.q_proj" one).
  /// An entry that matches no Linear is an InputError. The adapter joins the Linear's forward
  /// (operator()); code that reads a Linear's weight directly (nn::Mamba's dt_proj) bypasses it.
  std::vector<std::string> targets = {};
  int64_t rank = 8;
  double alpha = 16;
  /// Dropout on the adapter's input (training programs only).
  double dropout = 0.0;
};

/// Attaches an adapter to every targeted Linear of `model` and returns their paths. Call it
/// before compiling (a model already compiled gets the new parameters at its next compile,
/// initialised from the seed 0 stream). A Linear that already has an adapter is an InputError.
std::vector<std::string> add_lora(Module& model, const LoRAOptions& options);

/// Attaches one adapter (rank, alpha, dropout as in LoRAOptions) to `linear`; an InputError if
/// it has one already or a setting is out of its range.
void attach_lora(Linear& linear, int64_t rank, double alpha, double dropout);

/// Removes every adapter of `model` (after merge_lora folded them into the weights): programs
/// compiled afterwards run the plain Linears. Programs compiled before keep theirs.
void remove_lora(Module& model);

/// TrainOptions::frozen for LoRA fine-tuning: every parameter of `model` except the adapters'.
std::vector<std::string> lora_frozen(const Module& model);

/// Folds the adapters into their Linears for inference, on host values (download_params()):
/// W ← W + (alpha/rank)·B·A for every adapter of `model`, and the adapter entries removed, so
/// the result uploads into the same architecture built without adapters (PEFT's
/// merge_and_unload). `params` must hold every adapted Linear's weight and both adapter
/// matrices (an InputError otherwise). A bf16 or f16 weight (a half-stored base) is merged in
/// f32 and returned f32; a half-stored model rounds it back when it is uploaded.
std::map<std::string, HostTensor> merge_lora(const Module& model, std::map<std::string, HostTensor> params);

/// The inverse of merge_lora: W ← W − (alpha/rank)·B·A with A and B from `adapters` (e.g. the
/// adapted program's download_params()), giving back the base weights (up to float rounding).
/// The adapter entries of `adapters` are not added to the result.
std::map<std::string, HostTensor> unmerge_lora(const Module& model, std::map<std::string, HostTensor> merged,
                                               const std::map<std::string, HostTensor>& adapters);

using Activation = std::function<Tensor(const Tensor&)>;

/// A stack of Linear layers ("layers.0", "layers.1", …) of the given widths, with
/// `activation` between them (not after the last).
class Mlp : public Module {
 public:
  Mlp(
      Module& parent, std::string name, std::vector<int64_t> widths,
      Activation activation = [](const Tensor& x) { return relu(x); });
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  size_t num_layers() const { return layers_.size(); }
  const Linear& layer(size_t i) const { return *layers_.at(i); }

 private:
  std::vector<std::unique_ptr<Linear>> layers_;
  Activation activation_;
};

/// Rows of a [num, dim] table looked up by i32 ids (a gather; PyTorch's nn.Embedding).
class Embedding : public Module {
 public:
  Embedding(Module& parent, std::string name, int64_t num, int64_t dim, Init init = init::normal(1.0));
  Tensor operator()(const Tensor& ids, Loc loc = Loc::current()) const;
  Param weight;
};

/// Layer norm over the last axis with a learned gain (ones) and bias (zeros).
class LayerNorm : public Module {
 public:
  LayerNorm(Module& parent, std::string name, int64_t dim, double eps = 1e-5, bool bias = true);
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  const double eps;
  Param weight;
  std::optional<Param> bias;
};

/// RMS norm over the last axis with a learned gain (ones).
class RMSNorm : public Module {
 public:
  /// plus_one: the gain is 1 + weight, with weight starting at zero (Gemma's RMSNorm).
  RMSNorm(Module& parent, std::string name, int64_t dim, double eps = 1e-6, bool plus_one = false);
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  const double eps;
  const bool plus_one;
  Param weight;
};

// ---- convolutional networks (NCHW) ------------------------------------------------------
/// 2-D convolution with PyTorch's nn.Conv2d parameters: weight [out, in/groups, kh, kw] and
/// bias [out], both U(±1/√(in/groups·kh·kw)) by default (PyTorch's kaiming_uniform(a=√5)).
struct Conv2dLayerOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  std::optional<Init> weight_init = {};
  std::optional<Init> bias_init = {};
};
class Conv2d : public Module {
 public:
  Conv2d(Module& parent, std::string name, int64_t in_channels, int64_t out_channels, Size2 kernel,
         Conv2dLayerOptions options = {});
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  const int64_t in_channels, out_channels;
  const Conv2dOptions conv;
  Param weight;
  std::optional<Param> bias;
};

/// 1-D convolution with PyTorch's nn.Conv1d parameters: weight [out, in/groups, k] and bias [out],
/// both U(±1/√(in/groups·k)) by default. x [N, in, L] → [N, out, OL] (tg::conv1d).
struct Conv1dLayerOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  std::optional<Init> weight_init = {};
  std::optional<Init> bias_init = {};
};
class Conv1d : public Module {
 public:
  Conv1d(Module& parent, std::string name, int64_t in_channels, int64_t out_channels, int64_t kernel,
         Conv1dLayerOptions options = {});
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  const int64_t in_channels, out_channels;
  const Conv1dOptions conv;
  Param weight;
  std::optional<Param> bias;
};

/// Transposed 2-D convolution with PyTorch's nn.ConvTranspose2d parameters: weight [in,
/// out/groups, kh, kw] and bias [out], both U(±1/√(out/groups·kh·kw)) by default (PyTorch's
/// kaiming_uniform(a=√5) takes the weight's second dimension as its fan-in).
struct ConvTranspose2dLayerOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 output_padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  std::optional<Init> weight_init = {};
  std::optional<Init> bias_init = {};
};
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(Module& parent, std::string name, int64_t in_channels, int64_t out_channels, Size2 kernel,
                  ConvTranspose2dLayerOptions options = {});
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  const int64_t in_channels, out_channels;
  const ConvTranspose2dOptions conv;
  Param weight;
  std::optional<Param> bias;
};

/// Batch normalisation over N·H·W per channel of x [N, C, H, W] (any [N, C, ...]), as
/// PyTorch's nn.BatchNorm2d: weight (ones) and bias (zeros) [C]; the running statistics are
/// tg::state tensors "<path>.running_mean" (zeros) and "<path>.running_var" (ones). A training
/// program normalises with the batch's mean and biased variance and updates the running ones,
/// r ← (1 − momentum)·r + momentum·batch value, with the unbiased variance (M/(M − 1), M = N·H·W);
/// other programs normalise with the running statistics.
struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
};
class BatchNorm2d : public Module {
 public:
  BatchNorm2d(Module& parent, std::string name, int64_t channels, BatchNormOptions options = {});
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  const int64_t channels;
  const BatchNormOptions options;
  std::optional<Param> weight, bias;
};

/// Group normalisation as PyTorch's nn.GroupNorm(groups, channels): weight (ones) and bias
/// (zeros) [C] when affine; the same in training and inference (no running statistics).
struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;
};
class GroupNorm : public Module {
 public:
  GroupNorm(Module& parent, std::string name, int64_t groups, int64_t channels,
            GroupNormOptions options = {});
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  const int64_t groups, channels;
  const GroupNormOptions options;
  std::optional<Param> weight, bias;
};

/// tg::max_pool2d / avg_pool2d with fixed options.
struct MaxPool2d {
  Pool2dOptions options;
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const { return max_pool2d(x, options, loc); }
};
struct AvgPool2d {
  Pool2dOptions options;
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const { return avg_pool2d(x, options, loc); }
};
/// tg::interpolate with fixed options (PyTorch's nn.Upsample).
struct Upsample {
  InterpolateOptions options;
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const { return interpolate(x, options, loc); }
};
/// tg::adaptive_avg_pool2d to a fixed size (PyTorch's nn.AdaptiveAvgPool2d).
struct AdaptiveAvgPool2d {
  Size2 size;
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const {
    return adaptive_avg_pool2d(x, size, loc);
  }
};
/// [N, d1, d2, ...] → [N, d1·d2·...] (PyTorch's nn.Flatten with its default start_dim = 1).
struct Flatten {
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
};

/// Inverted dropout, active in training programs only (see tg::dropout).
struct Dropout {
  double p = 0.0;
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const { return dropout(x, p, loc); }
};

struct AttentionConfig {
  int64_t d_model = 0;
  int64_t heads = 0;
  /// Key/value heads; 0 means `heads` (multi-head), fewer means grouped-query attention.
  int64_t kv_heads = 0;
  bool rotary = false;
  double rope_base = 10000.0;
  double dropout = 0.0;
  bool bias = true;
  /// Init std of the output projection (GPT-2 scales it by 1/√(2·layers) inside a GPT).
  double proj_init_std = 0.02;
};

/// Causal multi-head self-attention on x [B, T, d_model]: one fused `qkv` projection, the
/// attention primitive, an output projection `proj`. The attention probabilities are offered
/// as capture "<path>.probs" [B, heads, T, T] ("<path>.probs#2", … for further calls in one
/// program); they are computed only when captures are requested.
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(Module& parent, std::string name, AttentionConfig config);
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  /// The KV-cached form for inference: x [B, T, d_model] holds the tokens at positions
  /// pos[b] … pos[b] + T − 1 (pos: i32 [B], one per sequence). Their keys and values are
  /// written into the caches "<path>.k_cache" / "<path>.v_cache" (tg::state, [B, kv_heads,
  /// cache_len, head_dim]) and each query attends to its sequence's cached prefix only. With
  /// rotary positions the queries and new keys are rotated at their own positions (rope_at)
  /// before the keys are cached. No dropout.
  Tensor cached(const Tensor& x, const Tensor& pos, int64_t cache_len, Loc loc = Loc::current()) const;
  const AttentionConfig config;
  const int64_t head_dim;
  Linear qkv, proj;
};

struct GptConfig {
  int64_t vocab = 0;
  /// Longest sequence (the learned position table's size).
  int64_t seq_len = 0;
  int64_t layers = 0;
  int64_t d_model = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;         // 0: = heads
  int64_t mlp_hidden = 0;       // 0: 4·d_model
  bool tied_head = true;        // logits = x·wteᵀ (no separate head matrix)
  bool rotary = false;          // RoPE in attention instead of learned positions
  double rope_theta = 10000.0;  // RoPE's base (rotary only)
  double dropout = 0.0;
  double ln_eps = 1e-5;
  bool bias = true;
  /// Recompute every block's activations in the backward instead of storing them (each
  /// block is a tg::Recompute region): the training step then stores one [B, T, d_model]
  /// input per block, for about one more forward pass of the blocks.
  bool recompute = false;
};

/// Pre-norm transformer block: x + attn(ln1(x)), then x + fc2(gelu_tanh(fc(ln2(x)))).
class TransformerBlock : public Module {
 public:
  TransformerBlock(Module& parent, std::string name, const GptConfig& config);
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  /// KV-cached inference (CausalSelfAttention::cached).
  Tensor cached(const Tensor& x, const Tensor& pos, int64_t cache_len, Loc loc = Loc::current()) const;
  LayerNorm ln1;
  CausalSelfAttention attn;
  LayerNorm ln2;
  Linear fc, fc2;
  Dropout drop;
};

/// A GPT: token embedding `wte` (+ learned positions `wpe`), `blocks.<i>`, final norm
/// `lnf`, and a head tied to wte or separate (`head`). GPT-2 initialisation (normal(0.02),
/// output projections scaled by 1/√(2·layers)). Usable as a whole model or as a child.
class Gpt : public Module {
 public:
  explicit Gpt(GptConfig config);
  Gpt(Module& parent, std::string name, GptConfig config);
  /// ids [B, T] (i32, T ≤ seq_len) → logits [B, T, vocab].
  Tensor logits(const Tensor& ids, Loc loc = Loc::current()) const;
  /// Mean cross-entropy of the logits of ids against targets [B, T] (targets equal to
  /// ignore_index are skipped).
  Tensor loss(const Tensor& ids, const Tensor& targets, int32_t ignore_index = -100,
              Loc loc = Loc::current()) const;
  /// KV-cached logits for inference: ids [B, T] are the tokens at positions pos[b] … pos[b] +
  /// T − 1 of each sequence (pos: i32 [B]); every layer keeps its keys and values in state
  /// caches of `cache_len` positions (≤ seq_len), shared by all programs of the model on a
  /// device. A prefill program (T = prompt length, pos = 0) and a one-token decode program
  /// (T = 1, pos = tokens so far) then continue each other; logits equal logits() of the
  /// whole prefix. Offsets past the cache are an InputError when the program runs.
  Tensor logits_cached(const Tensor& ids, const Tensor& pos, int64_t cache_len,
                       Loc loc = Loc::current()) const;
  const GptConfig config;

 private:
  Tensor head(const Tensor& x, Loc loc) const;
  void build();
  std::unique_ptr<Embedding> wte_, wpe_;
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  std::unique_ptr<LayerNorm> lnf_;
  std::unique_ptr<Linear> head_;
};

/// The Mamba-2 mixer's configuration (nn::Mamba2, tensorgrad/mamba.h; the hybrid layers of
/// LlamaConfig::mamba_layers).
struct Mamba2Config {
  int64_t d_model = 0;
  int64_t d_state = 128;
  int64_t d_conv = 4;
  int64_t expand = 2;
  int64_t head_dim = 64;   ///< channels per head: d_inner = heads · head_dim
  int64_t groups = 1;      ///< groups of B and C (n_groups); head h reads group h / (heads / groups)
  double norm_eps = 1e-5;  ///< the gated RMSNorm before out_proj
  /// The block's channels: 0 for expand · d_model (Nemotron-H sets heads · head_dim apart).
  int64_t d_inner = 0;
  /// The gated RMSNorm normalises each of this many groups of channels apart (Nemotron-H's
  /// n_groups; transformers' Mamba-2, Bamba and Granite 4.0-H normalise all: 1).
  int64_t norm_groups = 1;
  double dt_min = 0.001, dt_max = 0.1, dt_init_floor = 1e-4;
  /// Δ clamped to [dt_limit_min, dt_limit_max] after the softplus (time_step_limit).
  double dt_limit_min = 0.0, dt_limit_max = std::numeric_limits<double>::infinity();
  bool conv_bias = true;
  bool bias = false;           ///< in_proj and out_proj
  int64_t rescale_layers = 1;  ///< out_proj's init divided by √this (the number of layers)
};

// ---- Llama-family decoders ----------------------------------------------------------------
/// A Llama-family decoder's sizes, named after Hugging Face's LlamaConfig where they match
/// (hidden_size = d_model, num_attention_heads = heads, num_key_value_heads = kv_heads,
/// intermediate_size = mlp_hidden, max_position_embeddings = seq_len, rms_norm_eps = rms_eps,
/// tie_word_embeddings = tied_head).
struct LlamaConfig {
  int64_t vocab = 0;
  /// Longest sequence of logits(); also the largest KV cache.
  int64_t seq_len = 0;
  int64_t layers = 0;
  int64_t d_model = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;  // 0: = heads; fewer: grouped-query attention
  int64_t mlp_hidden = 0;
  double rms_eps = 1e-5;
  double rope_theta = 10000.0;
  /// Llama 3.1's, linear, YaRN or LongRoPE rescaling of the rotary frequencies
  /// (tg::rope_frequencies).
  RopeScaling rope_scaling = {};
  /// Attention sinks (gpt-oss): a learned logit per query head, self_attn.sinks [heads], that
  /// joins each query's softmax as a key without a value (AttentionOptions::sinks).
  bool attention_sinks = false;
  /// Each head's width; 0: d_model / heads (Qwen3, Gemma and Mistral Nemo set their own).
  int64_t head_dim = 0;
  /// RoPE rotates the first rotary_dim features of each head and passes the rest; 0: all
  /// (Phi-4-mini's partial_rotary_factor 0.75 gives 3/4 of the head).
  int64_t rotary_dim = 0;
  bool attention_bias = false;  // biases on q/k/v/o_proj
  bool qkv_bias = false;        // biases on q/k/v_proj only (Qwen2)
  bool mlp_bias = false;        // biases on gate/up/down_proj
  bool tied_head = false;       // logits = x·embed_tokensᵀ (no lm_head)
  /// RMSNorm (gain [head_dim], rms_eps) over each head's queries and keys before the rotation:
  /// self_attn.q_norm / k_norm (Qwen3; Gemma 3's, with `gemma`, scale by 1 + w).
  bool qk_norm = false;
  /// Sliding-window attention (AttentionOptions::window) of `sliding_window` positions in the
  /// layers `sliding_layers` marks (empty: every layer); 0: none (Mistral v0.1, Phi-3 mini, Qwen2).
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers = {};
  /// The MLP's gate: silu (SwiGLU), the tanh GELU (Gemma's GeGLU) or the exact (erf) GELU.
  /// The MLP's activation: of the gate, or with gated_mlp false of up_proj's output (kRelu2,
  /// relu(x)², is Nemotron-H's there). kClampedSwiglu is gpt-oss's gated unit with its fixed
  /// constants: with g = min(gate, 7) and u = clamp(up, −7, 7), g·σ(1.702·g)·(u + 1).
  enum class Gate { kSilu, kGeluTanh, kGelu, kRelu2, kClampedSwiglu } gate = Gate::kSilu;
  /// Gemma's conventions: every RMSNorm scales by 1 + weight (its weights start at zero), and
  /// the embeddings are multiplied by √d_model rounded to f32.
  bool gemma = false;
  /// Gemma 2 and 3: post_attention_layernorm normalises the attention's output before the
  /// residual add, and pre_/post_feedforward_layernorm wrap the MLP likewise.
  bool sandwich_norms = false;
  /// The attention's scale; 0: 1/√head_dim (Gemma 2 and 3: query_pre_attn_scalar^−½).
  double attention_scale = 0;
  /// Soft caps c·tanh(x/c) on the attention scores and on the logits (Gemma 2); 0: none.
  double attention_softcap = 0, logit_softcap = 0;
  /// The sliding layers' own RoPE base, without rope_scaling (Gemma 3's local layers); 0: the
  /// same rotation as the others.
  double rope_local_theta = 0;
  /// With qk_norm: one RMSNorm over all heads' features (q_norm [heads·head_dim], k_norm
  /// [kv_heads·head_dim], before the heads are split: OLMo 2) instead of each head's.
  bool qk_norm_whole = false;
  /// OLMo 2: no input_layernorm; post_attention_layernorm normalises the attention's output and
  /// post_feedforward_layernorm the MLP's, each before its residual add.
  bool post_norms = false;
  /// Granite: the embeddings × embedding_multiplier, each residual branch × residual_multiplier,
  /// the logits ÷ logits_scaling (with attention_scale as its attention_multiplier).
  double embedding_multiplier = 1.0, residual_multiplier = 1.0, logits_scaling = 1.0;
  /// LayerNorm (weight and bias, ε = rms_eps) in place of every RMSNorm but the q/k norms (Phi,
  /// GPT-NeoX, StableLM).
  bool layer_norm = false;
  /// false: an MLP without a gate, down_proj(act(up_proj(x))) with the activation `gate` names
  /// (Phi's fc1/fc2, GPT-NeoX's dense_h_to_4h/dense_4h_to_h); no gate_proj.
  bool gated_mlp = true;
  /// A parallel layer: out = x + attn(input_layernorm(x)) + mlp(n(x)), n being input_layernorm
  /// itself (kShared: Phi, StableLM with use_parallel_residual; no post_attention_layernorm) or
  /// post_attention_layernorm (kSeparate: GPT-NeoX). kNone: the sequential layer.
  enum class Parallel { kNone, kShared, kSeparate } parallel = Parallel::kNone;
  /// A bias on lm_head (Phi).
  bool head_bias = false;
  /// A mixture of experts in place of the MLP (Mixtral, Qwen2-MoE, Qwen3-MoE) in the layers
  /// `moe_layers` marks (empty: every layer): a router `mlp.gate` [count, d_model] scores the
  /// experts, softmax over them, the top_k most likely kept (renormalised to sum 1 with
  /// `normalize`), and the output is Σ weight_e · expert_e(x) over those, each expert an MLP of
  /// width `hidden` ("mlp.experts.<e>.{gate,up,down}_proj"); with shared_hidden > 0 a shared
  /// expert of that width, scaled by sigmoid(mlp.shared_expert_gate(x)) (Qwen2-MoE) or not
  /// (shared_gate false), is added.
  struct Experts {
    int64_t count = 0;  // 0: the dense MLP in every layer
    int64_t top_k = 2;
    int64_t hidden = 0;  // 0: mlp_hidden
    bool normalize = true;
    int64_t shared_hidden = 0;
    /// A bias on the router (gpt-oss's mlp.router.bias, read as mlp.gate.bias). gpt-oss's
    /// softmax over the top_k router logits is this softmax's top_k renormalised (normalize).
    bool router_bias = false;
    /// How tokens reach their experts. kSorted: the (token, choice) rows are sorted by expert
    /// (tg::sort_by_expert) and each expert's products run on its own rows only
    /// (tg::grouped_matmul over the experts' weights stacked per layer, with their biases
    /// gathered per row; an inference program computes the stack once, as it does a weight's
    /// bf16 copy). kDense: every expert runs on every token, weighted by zero where not chosen:
    /// count/top_k times the products. Both are exact; experts with LoRA adapters run dense
    /// whatever this says. Under mixed
    /// precision a layer's stack is half only if every expert's weights are: keeping one
    /// expert in f32 (keep_f32) keeps the whole layer's experts in f32 here.
    enum class Dispatch { kSorted, kDense } dispatch = Dispatch::kSorted;
    /// Llama::loss adds aux_loss_coef times the load-balancing loss of Hugging Face's Mixtral
    /// and Qwen-MoE (Switch Transformer's): over the tokens of every mixture layer together,
    /// count · Σ_e f_e·P_e, with f_e the share of (token, choice) picks that went to expert e
    /// (times top_k: Σ_e f_e = top_k) and P_e its mean router probability. Only P carries a
    /// gradient. Every token counts, also those whose target is ignore_index (transformers
    /// leaves out padding only when given an attention mask). 0: off (the loaders set
    /// router_aux_loss_coef where config.json's output_router_logits is true, as transformers
    /// adds it then).
    double aux_loss_coef = 0.0;
    /// false: the shared expert is added as it is, without shared_expert_gate (Granite 4.0-H's
    /// shared_mlp beside its experts).
    bool shared_gate = true;
  } experts = {};
  std::vector<bool> moe_layers = {};
  /// Each decoder layer a tg::Recompute region (as GptConfig::recompute).
  bool recompute = false;
  /// No positional encoding: attention without RoPE (Granite 4.0-H's "nope").
  bool nope = false;
  /// Hybrid models (Granite 4.0-H): the layers marked here mix with a Mamba-2 block, `mamba`
  /// (nn::Mamba2 configured by `mamba`, its d_model and norm_eps taken from this config), in
  /// place of self_attn; empty: none. logits_cached steps the blocks' conv and SSM states by
  /// its T tokens beside the attention layers' KV caches, so its windows must follow each other
  /// without overlap (tg::Generator gives them so to a model with Mamba layers).
  std::vector<bool> mamba_layers = {};
  Mamba2Config mamba = {};
  /// What each layer holds (empty: kFull in every layer). kFull: the mixer (self_attn or mamba)
  /// then the MLP, each with its residual; kMixer: the mixer alone, kMlp: the MLP alone, each after
  /// input_layernorm with one residual (Nemotron-H's layers, one block each).
  enum class Block { kFull, kMixer, kMlp };
  std::vector<Block> blocks = {};

  /// Each head's width: head_dim, or d_model / heads when that is 0.
  int64_t head_size() const { return head_dim != 0 ? head_dim : heads != 0 ? d_model / heads : 0; }
};

/// Llama's attention on x [B, T, d_model]: separate q/k/v/o projections (`q_proj` …, PyTorch's
/// [out, in] weights), RoPE on queries and keys, causal grouped-query attention. `cached` is
/// the KV-cached form (as CausalSelfAttention::cached; caches "<path>.k_cache" / ".v_cache").
class LlamaAttention : public Module {
 public:
  LlamaAttention(Module& parent, std::string name, const LlamaConfig& config);
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  Tensor cached(const Tensor& x, const Tensor& pos, int64_t cache_len, Loc loc = Loc::current()) const;
  const int64_t heads, kv_heads, head_dim, rotary_dim;
  const int64_t window;         // this layer's sliding window; 0: none
  const double scale, softcap;  // the attention's (AttentionOptions)
  const double rope_theta;
  const RopeScaling rope_scaling;
  const bool nope;  // no rotation (LlamaConfig::nope)
  Linear q_proj, k_proj, v_proj, o_proj;
  std::unique_ptr<RMSNorm> q_norm, k_norm;  // with LlamaConfig::qk_norm
  std::optional<Param> sinks;               // [heads], with LlamaConfig::attention_sinks

 private:
  Tensor queries_keys(const Tensor& x, bool keys, Loc loc) const;  // [B, heads, T, head_dim], unrotated
  AttentionOptions options(const Loc& loc) const;
  // RoPE on the first rotary_dim features: `rotate` is rope or rope_at on that part.
  Tensor rotated(const Tensor& t, const std::function<Tensor(const Tensor&)>& rotate, Loc loc) const;
};

/// A Llama-family layer's norm over the last axis: RMSNorm (scaling by 1 + weight with
/// LlamaConfig::gemma), or LayerNorm with a bias with LlamaConfig::layer_norm.
class LlamaNorm : public Module {
 public:
  LlamaNorm(Module& parent, std::string name, int64_t dim, const LlamaConfig& config);
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  const double eps;
  const bool plus_one;  // gemma
  Param weight;
  std::optional<Param> bias;  // layer_norm
};

/// Llama's SwiGLU MLP: down_proj(silu(gate_proj(x)) · up_proj(x)); with Gate::kGeluTanh the gate
/// is the tanh GELU (Gemma). Without LlamaConfig::gated_mlp: down_proj(act(up_proj(x))).
class LlamaMlp : public Module {
 public:
  /// Of width `hidden` (0: config.mlp_hidden).
  LlamaMlp(Module& parent, std::string name, const LlamaConfig& config, int64_t hidden = 0);
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  const LlamaConfig::Gate gate;
  std::unique_ptr<Linear> gate_proj;  // with gated_mlp
  Linear up_proj, down_proj;
};

/// What a forward collects for the load-balancing loss (LlamaConfig::Experts::aux_loss_coef),
/// summed over the mixture layers it passed: picks [count] (each expert's (token, choice)
/// picks), probs [count] (each expert's router probabilities summed over the tokens), and the
/// tokens counted.
struct MoeRouting {
  Tensor picks, probs;
  int64_t tokens = 0;
};

/// A mixture of experts (LlamaConfig::Experts) as one layer's "mlp": x [..., d_model] → the
/// same shape; with `routing`, its picks and probabilities are added there.
class LlamaMoe : public Module {
 public:
  LlamaMoe(Module& parent, std::string name, const LlamaConfig& config);
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const { return forward(x, nullptr, loc); }
  Tensor forward(const Tensor& x, MoeRouting* routing, Loc loc = Loc::current()) const;
  const int64_t top_k;
  const bool normalize;
  const LlamaConfig::Experts::Dispatch dispatch;
  Linear gate;                                     // the router: [count, d_model] (+ router_bias)
  std::vector<std::unique_ptr<LlamaMlp>> experts;  // "experts.<e>"
  std::unique_ptr<LlamaMlp> shared_expert;         // with shared_hidden
  std::unique_ptr<Linear> shared_expert_gate;      // [1, d_model], with shared_gate

 private:
  bool sorted_dispatch() const;  // kSorted, and no expert has an adapter
  // x [..., d_model], choice i32 [..., top_k] and their weights [..., top_k] → the mixture.
  Tensor dense(const Tensor& x, const Tensor& choice, const Tensor& weights, Loc loc) const;
  Tensor sorted(const Tensor& x, const Tensor& choice, const Tensor& weights, Loc loc) const;
};

class Mamba2;

/// A pre-norm decoder layer: h = x + self_attn(input_layernorm(x)), then
/// h + mlp(post_attention_layernorm(h)) (LlamaConfig's sandwich_norms and post_norms place the
/// norms otherwise; its parallel adds both branches to x). With `mamba`, a Mamba-2 block mixes
/// the tokens in self_attn's place. A one-block layer (LlamaConfig::blocks) holds input_layernorm
/// and its mixer (kMixer) or its mlp (kMlp) only: x + block(input_layernorm(x)).
class LlamaDecoderLayer : public Module {
 public:
  LlamaDecoderLayer(Module& parent, std::string name, const LlamaConfig& config, bool mamba = false,
                    LlamaConfig::Block block = LlamaConfig::Block::kFull);
  ~LlamaDecoderLayer() override;
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const { return forward(x, nullptr, loc); }
  /// With `routing`, a mixture layer adds its load-balancing statistics there.
  Tensor forward(const Tensor& x, MoeRouting* routing, Loc loc = Loc::current()) const;
  Tensor cached(const Tensor& x, const Tensor& pos, int64_t cache_len, Loc loc = Loc::current()) const;
  std::unique_ptr<LlamaNorm> input_layernorm;           // not with post_norms
  std::unique_ptr<LlamaAttention> self_attn;            // the mixer: self-attention,
  std::unique_ptr<Mamba2> mamba;                        // or a Mamba-2 block (LlamaConfig::mamba_layers)
  std::unique_ptr<LlamaNorm> post_attention_layernorm;  // not with Parallel::kShared
  /// "mlp": the dense MLP, or in a layer of experts (LlamaConfig::experts) the mixture.
  std::unique_ptr<LlamaMlp> mlp;
  std::unique_ptr<LlamaMoe> moe;
  std::unique_ptr<LlamaNorm> pre_feedforward_layernorm, post_feedforward_layernorm;  // sandwich_norms
  double residual_multiplier = 1.0;                                                  // Granite's
  LlamaConfig::Parallel parallel = LlamaConfig::Parallel::kNone;
  const LlamaConfig::Block block;

 private:
  // Both residual adds; `normed` is input_layernorm(x), `attended` the attention's output.
  Tensor residuals(const Tensor& x, const Tensor& normed, const Tensor& attended, MoeRouting* routing,
                   Loc loc) const;
  Tensor single(const Tensor& x, const Tensor& out, Loc loc) const;  // a one-block layer's residual
};

/// A Llama-family decoder with Hugging Face LlamaForCausalLM's parameter names, so a state
/// dict maps 1:1: model.embed_tokens.weight, model.layers.<i>.{input_layernorm,
/// self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}.weight (and
/// .bias with the config's biases; self_attn.{q,k}_norm.weight with qk_norm;
/// {pre,post}_feedforward_layernorm.weight with sandwich_norms, post_feedforward_layernorm and no
/// input_layernorm with post_norms, q/k norms of all heads' width with qk_norm_whole; with
/// experts, mlp.gate.weight,
/// mlp.experts.<e>.{gate,up,down}_proj.weight and mlp.shared_expert*), model.norm.weight,
/// lm_head.weight (untied only; lm_head.bias with head_bias). With layer_norm every norm but
/// q/k_norm has a .bias too; without gated_mlp there is no gate_proj; Parallel::kShared has no
/// post_attention_layernorm; a layer of mamba_layers has model.layers.<i>.mamba.* (nn::Mamba2)
/// instead of self_attn. Initialised as Hugging Face's: normal(0.02) for linears and
/// embeddings, zero biases, ones for the norms (zeros with `gemma`, whose norms scale by 1 + w);
/// the Mamba-2 blocks as nn::Mamba2 initialises itself.
/// logits / loss / logits_cached behave as Gpt's (tg::Generator drives it; a hybrid's windows
/// must not overlap); a layer with a sliding window attends through AttentionOptions::window in both.
class Llama : public Module {
 public:
  explicit Llama(LlamaConfig config);
  Llama(Module& parent, std::string name, LlamaConfig config);
  /// ids [B, T] (i32, T ≤ seq_len) → logits [B, T, vocab].
  Tensor logits(const Tensor& ids, Loc loc = Loc::current()) const;
  /// Mean cross-entropy of the logits of ids against targets [B, T] (ignore_index skipped),
  /// plus experts.aux_loss_coef times the load-balancing loss when that is not 0.
  Tensor loss(const Tensor& ids, const Tensor& targets, int32_t ignore_index = -100,
              Loc loc = Loc::current()) const;
  /// KV-cached logits (as Gpt::logits_cached): ids [B, T] at positions pos[b] … pos[b] + T − 1,
  /// caches of cache_len ≤ seq_len positions.
  Tensor logits_cached(const Tensor& ids, const Tensor& pos, int64_t cache_len,
                       Loc loc = Loc::current()) const;
  const LlamaConfig config;

 private:
  Tensor embed(const Tensor& ids, Loc loc) const;
  Tensor head(const Tensor& x, Loc loc) const;
  Tensor hidden(const Tensor& ids, MoeRouting* routing, Loc loc) const;  // the last layer's output
  void build();
  std::unique_ptr<Embedding> embed_tokens_;
  std::vector<std::unique_ptr<LlamaDecoderLayer>> layers_;
  std::unique_ptr<LlamaNorm> norm_;
  std::unique_ptr<Linear> lm_head_;
};

}  // namespace tg::nn
