// Mamba (selective state-space) layers: the Mamba mixer block and a Mamba language model, with
// the parameter names, layouts and initialisation of state-spaces/mamba (`Mamba`,
// `MambaLMHeadModel`), so weights move between the two by name (the depthwise conv's weight is
// [D, K] here, PyTorch's [D, 1, K]).
#pragma once
#include <memory>
#include <vector>

#include "tensorgrad/nn.h"

namespace tg::nn {

struct MambaConfig {
  int64_t d_model = 0;
  int64_t d_state = 16;
  int64_t d_conv = 4;
  int64_t expand = 2;
  int64_t dt_rank = 0;  ///< 0: ⌈d_model / 16⌉
  double dt_min = 0.001, dt_max = 0.1, dt_init_floor = 1e-4;
  bool conv_bias = true;
  bool bias = false;  ///< in_proj and out_proj
  /// out_proj's init is divided by √this (the reference's rescaling by the number of layers).
  int64_t rescale_layers = 1;
};

/// Depthwise causal convolution over the last axis of [B, D, L]: weight [D, K], bias [D].
class CausalConv1d : public Module {
 public:
  CausalConv1d(Module& parent, std::string name, int64_t channels, int64_t kernel, bool bias = true);
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  Param weight;
  std::optional<Param> bias;
};

/// The Mamba mixer: in_proj → causal conv1d → SiLU → x_proj → dt_proj → selective scan with the
/// z gate and the D skip → out_proj. x [B, L, d_model] → [B, L, d_model].
class Mamba : public Module {
 public:
  Mamba(Module& parent, std::string name, MambaConfig config);
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  /// One recurrent step for inference: x [B, 1, d_model] → [B, 1, d_model], reading and updating
  /// the states "<path>.conv_state" [B, d_inner, d_conv − 1] (the last inputs of the conv) and
  /// "<path>.ssm_state" [B, d_inner, d_state] (tg::state: zeros at first, reset_state() for a
  /// new sequence). Steps from zero states give the full forward's outputs, token by token.
  Tensor step(const Tensor& x, Loc loc = Loc::current()) const;
  const MambaConfig config;
  const int64_t d_inner, dt_rank;
  Linear in_proj;
  CausalConv1d conv1d;
  Linear x_proj, dt_proj;
  Param A_log, D;
  Linear out_proj;
};

struct MambaLMConfig {
  int64_t vocab = 0;
  int64_t layers = 0;
  int64_t d_model = 0;
  int64_t d_state = 16;
  int64_t d_conv = 4;
  int64_t expand = 2;
  double norm_eps = 1e-5;
  /// Recompute every layer's activations in the backward instead of storing them (each
  /// residual block is a tg::Recompute region; see GptConfig::recompute).
  bool recompute = false;
};

/// Embedding → layers of pre-RMSNorm residual Mamba blocks (h += mixer(norm(h))) → RMSNorm →
/// logits through the embedding (tied head). Parameters: embedding.weight,
/// layers.<i>.norm.weight, layers.<i>.mixer.*, norm_f.weight.
class MambaLM : public Module {
 public:
  explicit MambaLM(MambaLMConfig config);
  MambaLM(Module& parent, std::string name, MambaLMConfig config);
  /// ids i32 [B, L] → logits [B, L, vocab].
  Tensor logits(const Tensor& ids, Loc loc = Loc::current()) const;
  /// Mean next-token cross-entropy of logits(ids) against targets [B, L] (ignore_index skipped).
  Tensor loss(const Tensor& ids, const Tensor& targets, int32_t ignore_index = -100,
              Loc loc = Loc::current()) const;
  /// One recurrent step: ids [B, 1] → logits [B, 1, vocab], through every layer's Mamba::step.
  Tensor logits_step(const Tensor& ids, Loc loc = Loc::current()) const;
  /// logits_step in tg::Generator's CachedLm form (positions and cache length are not needed by
  /// a recurrent model): use it with GeneratorOptions{.prefill = false}. More than one token at
  /// once is a ShapeError.
  Tensor logits_cached(const Tensor& ids, const Tensor& pos, int64_t cache_len,
                       Loc loc = Loc::current()) const;
  const MambaLMConfig config;

 private:
  struct Layer : Module {
    Layer(Module& parent, std::string name, const MambaLMConfig& c, int64_t layers);
    RMSNorm norm;
    Mamba mixer;
  };
  void build();
  std::unique_ptr<Embedding> embedding_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<RMSNorm> norm_f_;
};

}  // namespace tg::nn
