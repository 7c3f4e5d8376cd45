// Mamba (selective state-space) layers: the Mamba and Mamba-2 mixer blocks and a Mamba language
// model of either, with the parameter names, layouts and initialisation of state-spaces/mamba
// (`Mamba`, `MambaLMHeadModel`) and of transformers' Mamba2Mixer, so weights move between them by
// name (the depthwise conv's weight is [D, K] here, PyTorch's [D, 1, K]).
#pragma once
#include <limits>
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
  /// One step for inference: x [B, D] (this position's inputs) → [B, D], the last K − 1 inputs
  /// kept in the state `state_name` [B, D, K − 1] (zeros at first).
  Tensor step(const Tensor& x, const std::string& state_name, Loc loc = Loc::current()) const;
  /// T steps at once (a prompt window): x [B, D, T] → [B, D, T], as T calls of step() would
  /// give, reading and updating the same state.
  Tensor steps(const Tensor& x, const std::string& state_name, Loc loc = Loc::current()) const;
  Param weight;
  std::optional<Param> bias;
};

/// The Mamba mixer: in_proj → causal conv1d → SiLU → x_proj → dt_proj → selective scan with the
/// z gate and the D skip → out_proj. x [B, L, d_model] → [B, L, d_model].
class Mamba : public Module {
 public:
  Mamba(Module& parent, std::string name, MambaConfig config);
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  /// Recurrent steps for inference: x [B, T, d_model] → [B, T, d_model], the next T tokens of
  /// each sequence, reading and updating the states "<path>.conv_state" [B, d_inner, d_conv − 1]
  /// (the last inputs of the conv) and "<path>.ssm_state" [B, d_inner, d_state] (tg::state: zeros
  /// at first, reset_state() for a new sequence). Steps from zero states give the full forward's
  /// outputs, token by token or in windows. T = 1 is the decode step; T > 1 (a prompt window)
  /// runs the window's scan in parallel from zero and adds the carried state's part, decayed by
  /// exp(A · Σ Δ) up to each token.
  Tensor step(const Tensor& x, Loc loc = Loc::current()) const;
  const MambaConfig config;
  const int64_t d_inner, dt_rank;
  Linear in_proj;
  CausalConv1d conv1d;
  Linear x_proj, dt_proj;
  Param A_log, D;
  Linear out_proj;

 private:
  // The scan (no z gate) of the conv's activated output xa [B, d_inner, L], with Δ before its
  // bias and softplus [B, d_inner, L] and C [B, d_state, L].
  struct Scanned {
    SelectiveScanResult scan;
    Tensor delta, C;
  };
  Scanned scan(const Tensor& xa, Loc loc) const;
  Tensor window(const Tensor& x, Loc loc) const;  // step() for T > 1
};

/// The Mamba-2 mixer (SSD, Dao and Gu 2024), as transformers' Mamba2Mixer computes it:
///   in_proj(x) = [z (d_inner), xBC (d_inner + 2·groups·d_state), dt (heads)]
///   xBC ← silu(causal conv1d(xBC)) = [u (d_inner), B (groups·d_state), C (groups·d_state)]
///   y = selective scan of u with Δ = clamp(softplus(dt + dt_bias)) per head, A = −exp(A_log)
///       per head (one decay for the head's channels and states), B and C by group, D per head
///   out = out_proj(RMSNorm(y · silu(z)))   (the norm over all of d_inner, or over each of
///                                          norm_groups groups apart; weight `norm.weight`)
/// x [B, L, d_model] → [B, L, d_model]. Parameters: in_proj, conv1d (over xBC), dt_bias, A_log
/// and D [heads], norm, out_proj. The scan is Mamba's selective_scan with each head's Δ, decay
/// and skip repeated over its head_dim channels.
class Mamba2 : public Module {
 public:
  Mamba2(Module& parent, std::string name, Mamba2Config config);
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) const;
  /// Recurrent steps, as Mamba::step: x [B, T, d_model] → [B, T, d_model], with the states
  /// "<path>.conv_state" [B, conv channels, d_conv − 1] and "<path>.ssm_state" [B, d_inner, d_state].
  Tensor step(const Tensor& x, Loc loc = Loc::current()) const;
  const Mamba2Config config;
  const int64_t d_inner, heads, conv_channels;
  Linear in_proj;
  CausalConv1d conv1d;
  Param dt_bias, A_log, D;
  RMSNorm norm;
  Linear out_proj;

 private:
  // Δ [B, heads, …] from dt: softplus(dt + dt_bias), clamped to the limits when they bind.
  Tensor clamp_dt(const Tensor& dt, Loc loc) const;
  // RMSNorm of the gated y [..., d_inner] over all channels or per norm group, times norm.weight.
  Tensor gated_norm(const Tensor& y, Loc loc) const;
  // in_proj's output [B, L, ·] → the conv's input xBC [B, conv channels, L].
  Tensor conv_input(const Tensor& proj, Loc loc) const;
  // The scan (no z gate) from in_proj's output and the conv's activated xBC [B, conv channels,
  // L], with Δ per head [B, heads, L] and C [B, groups, d_state, L].
  struct Scanned {
    SelectiveScanResult scan;
    Tensor delta, C;
  };
  Scanned scan(const Tensor& proj, const Tensor& xbc, Loc loc) const;
  // y [B, d_inner, L] → gated by z (from proj), normed, out_proj'd: [B, L, d_model].
  Tensor finish(const Tensor& proj, const Tensor& y, Loc loc) const;
  Tensor window(const Tensor& x, Loc loc) const;  // step() for T > 1
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
  /// 1: Mamba mixers (MambaForCausalLM); 2: Mamba-2 mixers (Mamba2ForCausalLM) with the fields
  /// below.
  int version = 1;
  int64_t head_dim = 64;  ///< Mamba-2: channels per head
  int64_t groups = 1;     ///< Mamba-2: groups of B and C
  /// Mamba-2: Δ's clamp (time_step_limit).
  double dt_limit_min = 0.0, dt_limit_max = std::numeric_limits<double>::infinity();
  bool bias = false;      ///< the mixers' in_proj and out_proj biases
  bool conv_bias = true;  ///< the mixers' conv1d bias
  bool tied_head = true;  ///< false: a separate head, lm_head.weight [vocab, d_model]
};

/// Embedding → layers of pre-RMSNorm residual Mamba (or Mamba-2) blocks (h += mixer(norm(h))) →
/// RMSNorm → logits through the embedding (tied head) or lm_head. Parameters: embedding.weight,
/// layers.<i>.norm.weight, layers.<i>.mixer.*, norm_f.weight[, lm_head.weight].
class MambaLM : public Module {
 public:
  explicit MambaLM(MambaLMConfig config);
  MambaLM(Module& parent, std::string name, MambaLMConfig config);
  /// ids i32 [B, L] → logits [B, L, vocab].
  Tensor logits(const Tensor& ids, Loc loc = Loc::current()) const;
  /// Mean next-token cross-entropy of logits(ids) against targets [B, L] (ignore_index skipped).
  Tensor loss(const Tensor& ids, const Tensor& targets, int32_t ignore_index = -100,
              Loc loc = Loc::current()) const;
  /// Recurrent steps: ids [B, T] (the next T tokens of each sequence) → logits [B, T, vocab],
  /// through every layer's mixer step (Mamba::step), from and into the layers' states.
  Tensor logits_step(const Tensor& ids, Loc loc = Loc::current()) const;
  /// logits_step in tg::Generator's CachedLm form (positions and cache length are not needed by
  /// a recurrent model). The Generator sees the Mamba layers and gives prompts to its prefill
  /// program in whole windows only.
  Tensor logits_cached(const Tensor& ids, const Tensor& pos, int64_t cache_len,
                       Loc loc = Loc::current()) const;
  const MambaLMConfig config;

 private:
  struct Layer : Module {
    Layer(Module& parent, std::string name, const MambaLMConfig& c, int64_t layers);
    Tensor mix(const Tensor& x, Loc loc) const { return mamba ? (*mamba)(x, loc) : (*mamba2)(x, loc); }
    Tensor step(const Tensor& x, Loc loc) const { return mamba ? mamba->step(x, loc) : mamba2->step(x, loc); }
    RMSNorm norm;
    std::unique_ptr<Mamba> mamba;    // version 1, named "mixer"
    std::unique_ptr<Mamba2> mamba2;  // version 2, named "mixer"
  };
  void build();
  Tensor head(const Tensor& h, Loc loc) const;
  std::unique_ptr<Embedding> embedding_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<RMSNorm> norm_f_;
  std::unique_ptr<Linear> lm_head_;  // untied heads only
};

}  // namespace tg::nn
