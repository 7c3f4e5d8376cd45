// Neural-network ops: indexing, softmax family, losses, normalisation, randomness,
// attention, activations, captures, state and activation recomputation. The fused ones are primitives with
// their own kernels and backward; the rest are compositions of primitives (see ops.def for which is which).
#pragma once
#include <string>
#include <vector>

#include "tensorgrad/tensor.h"

namespace tg::ir {
struct Trace;
}

namespace tg {

// ---- indexing ------------------------------------------------------------------------
/// PyTorch's gather / NumPy's take_along_axis: out[…, i, …] = x[…, idx[…, i, …], …] along
/// `axis`; idx is i32 with x's rank (it broadcasts against x off the axis).
Tensor take_along_axis(const Tensor& x, const Tensor& idx, int64_t axis, Loc loc = Loc::current());
/// take_along_axis's adjoint (PyTorch's scatter_add onto zeros): zeros of src's shape with
/// `size` along `axis`, each src[…, i, …] added at out[…, idx[…, i, …], …]; src f32 and idx
/// i32 of one shape, repeated indices adding up (a histogram, a token's count). An index
/// outside [0, size) is an error when the program runs. Its gradient is take_along_axis.
Tensor scatter_add(const Tensor& src, const Tensor& idx, int64_t axis, int64_t size,
                   Loc loc = Loc::current());
/// Rows of `table` [V, …] selected by i32 ids of any shape → ids.shape + table.shape[1:].
/// A gather, never a one-hot matmul; its gradient is a scatter-add into the table.
Tensor embedding(const Tensor& table, const Tensor& ids, Loc loc = Loc::current());
/// A mixture's product: the rows of x [R, K] sorted by expert, expert e's rows offsets[e] ≤ r <
/// offsets[e + 1] (offsets i32 [E + 1], rising from 0 to R) multiplied by its matrix w[e]:
/// w [E, K, N] → y[r] = x[r]·w[e] ([R, N]); with transpose_w, w [E, N, K] (Linear's layout) →
/// x[r]·w[e]ᵀ. Each expert's rows cost its own product only. Offsets that do not rise from 0 to R
/// are an error when the program runs; no gradient reaches them. A bf16 or f16 operand makes the
/// product half (the other is cast to its type, f32 accumulation; matmul would compute such a
/// pair in f32); two f32 operands follow the precision policy, as matmul's do.
Tensor grouped_matmul(const Tensor& x, const Tensor& w, const Tensor& offsets, bool transpose_w = false,
                      Loc loc = Loc::current());
/// x [..., K] · wᵀ with w [N, K] quantized to 8 bits: q i8 [N, K] and scale f32 [N, K / G], w =
/// q · scale per group of G values of a row (tensorgrad/quantize.h) → f32 [..., N], reading the
/// weight as stored. x is f32, bf16 or f16 (as the precision policy makes it). A matrix-vector
/// kernel, for a few rows of x (each group of 8 rows reads q again). A quantized Linear's
/// products of up to 16 rows become this op in inference programs by themselves (a quantized
/// Param reads as its dequantized f32 value; q and scale here are i8 and f32 tensors); the
/// gradient reaches x and scale, not q.
Tensor quant_matmul(const Tensor& x, const Tensor& q, const Tensor& scale, Loc loc = Loc::current());
/// The 4-bit form: q i8 [N, K / 2] (codes c packed two a byte), w = c · scale + offset
/// (Param::quantize_int4; tensorgrad/quantize.h).
Tensor quant_matmul(const Tensor& x, const Tensor& q, const Tensor& scale, const Tensor& offset,
                    Loc loc = Loc::current());
/// Where grouped_matmul wants each row: for expert ids i32 [R] in [0, experts), `position[r]` is
/// row r's place once the rows are sorted by expert (stably: an expert's rows keep their order)
/// and `offsets` [experts + 1] where each expert's rows begin. Sorted rows are
/// scatter_add(rows, position) and back take_along_axis(sorted, position); both are exact
/// (position is a permutation). An id outside [0, experts) is an error when the program runs.
struct ExpertOrder {
  Tensor position;  // i32 [R]
  Tensor offsets;   // i32 [experts + 1]
};
ExpertOrder sort_by_expert(const Tensor& ids, int64_t experts, Loc loc = Loc::current());
/// `dst` with `src` written at offset `pos` along `axis` (a KV cache's new rows): pos is an i32
/// scalar, or one offset per index of axis 0 ([dst.shape[0]], axis > 0: per-sequence
/// positions). Off the axis the extents match. An offset with pos < 0 or pos + src's extent >
/// dst's is an InputError when the program runs. No gradient (inference programs' caches).
Tensor update_slice(const Tensor& dst, const Tensor& src, const Tensor& pos, int64_t axis,
                    Loc loc = Loc::current());
/// Decoding's sampling step, inside the program so only token ids leave the device: one id per
/// row of `logits` [..., V] → i32 [...]. `params` is f32 [4] = {temperature, top_k, top_p,
/// min_p} ([3]: min_p 0) and `key` i32 [2] = {seed, counter}; pass them as inputs and one
/// compiled program serves every setting and every step (tg::Generator does). temperature ≤ 0
/// is greedy (argmax); otherwise an exact draw from softmax(logits / temperature) restricted
/// to the top_k largest logits (top_k in [1, V); 0 = off; ties at the cut are kept), then to
/// the nucleus of mass top_p (top_p < 1; 1 = off), then to the tokens whose probability is at
/// least min_p times the largest one's (min_p > 0; 0 = off) — Hugging Face's order and rules. The draw is
/// Gumbel-max over counter-based Philox uniforms, scored in double: the same key gives the same ids on every
/// backend (barring ties within float rounding, e.g. a nucleus mass within an ulp of top_p), and a new
/// counter gives an independent draw. NaN logits count as −inf. No gradient.
Tensor sample(const Tensor& logits, const Tensor& params, const Tensor& key, Loc loc = Loc::current());
/// One-hot f32 encoding of i32 ids: ids.shape + [classes].
Tensor one_hot(const Tensor& ids, int64_t classes, Loc loc = Loc::current());

// ---- softmax family and losses -------------------------------------------------------
/// Softmax along `axis`. `causal` (last axis only) masks key j > query i + (S − T) of the
/// last two axes [T, S], as in autoregressive attention.
Tensor softmax(const Tensor& x, int64_t axis = -1, bool causal = false, Loc loc = Loc::current());
Tensor log_softmax(const Tensor& x, int64_t axis = -1, bool causal = false, Loc loc = Loc::current());

enum class Reduction { kMean, kSum, kNone };
struct CrossEntropyOptions {
  /// Targets equal to this contribute no loss and no gradient (PyTorch's default -100).
  int32_t ignore_index = -100;
  /// kMean averages over the targets that are not ignored (PyTorch's semantics; NaN if all are).
  Reduction reduction = Reduction::kMean;
  /// ε in [0, 1]: the target distribution is (1 − ε) on the target plus ε/C on every class
  /// (PyTorch's label_smoothing).
  double label_smoothing = 0.0;
};
/// Cross-entropy of logits [..., C] against i32 targets [...] (PyTorch's F.cross_entropy
/// with class indices). A target outside [0, C) that is not ignore_index is an error at run
/// time on the cpu and ref backends (tg::InputError naming the op, the row and the value).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options = {},
                     Loc loc = Loc::current());
// Losses as torch.nn.functional's: `target` broadcasts to `prediction`'s shape; kMean averages
// over every element, kSum adds them, kNone returns them (src/ir/api_loss.cc).
/// (p − t)².
Tensor mse_loss(const Tensor& prediction, const Tensor& target, Reduction reduction = Reduction::kMean,
                Loc loc = Loc::current());
/// |p − t|.
Tensor l1_loss(const Tensor& prediction, const Tensor& target, Reduction reduction = Reduction::kMean,
               Loc loc = Loc::current());
/// d = p − t: ½d²/β where |d| < β, else |d| − ½β (β = 0: l1_loss, whose gradient at d = 0 is
/// 0; PyTorch 1.13's smooth_l1 gives −1 there).
Tensor smooth_l1_loss(const Tensor& prediction, const Tensor& target, double beta = 1.0,
                      Reduction reduction = Reduction::kMean, Loc loc = Loc::current());
/// d = p − t: ½d² where |d| < δ, else δ(|d| − ½δ).
Tensor huber_loss(const Tensor& prediction, const Tensor& target, double delta = 1.0,
                  Reduction reduction = Reduction::kMean, Loc loc = Loc::current());
/// −(t·log p + (1 − t)·log(1 − p)) of probabilities p, each log clamped at −100 as PyTorch does.
/// The gradient is the composite's: where p is 0 or 1 and t lies strictly between, PyTorch's
/// (p − t)/max(p(1 − p), 1e-12) is ±t·1e12 while the clamped log gives that term none.
Tensor binary_cross_entropy(const Tensor& probabilities, const Tensor& target,
                            Reduction reduction = Reduction::kMean, Loc loc = Loc::current());
struct BceWithLogitsOptions {
  /// Weight of the positive term, broadcast against the logits (one per class on the last
  /// axis, typically); empty: 1.
  Tensor pos_weight = {};
  Reduction reduction = Reduction::kMean;
};
/// binary_cross_entropy of sigmoid(x) without its overflow: (1 − t)·x + (1 + (w − 1)·t)·softplus(−x)
/// with w the pos_weight.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        BceWithLogitsOptions options = {}, Loc loc = Loc::current());
/// −log_probs[..., target] with i32 targets [...] (classes on the last axis, as cross_entropy;
/// PyTorch puts them on axis 1 beyond two dimensions); ignore_index and reduction as there,
/// label_smoothing is not taken.
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, CrossEntropyOptions options = {},
                Loc loc = Loc::current());

// ---- normalisation -------------------------------------------------------------------
/// Layer norm over the last axis: (x − mean)/√(var + eps) · weight + bias (weight/bias may be
/// empty Tensors to skip them).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5,
                  Loc loc = Loc::current());
/// RMS norm over the last axis: x/√(mean(x²) + eps) · weight (weight may be empty).
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6, Loc loc = Loc::current());

// ---- randomness ----------------------------------------------------------------------
/// Uniform [0, 1) values of `shape`, fresh on every step/run and identical on every backend
/// for the same program seed and call count (counter-based Philox4x32-10).
Tensor random_uniform(Shape shape, Loc loc = Loc::current());
/// Inverted dropout: in training programs zeroes each element with probability p and scales
/// the rest by 1/(1−p); in inference programs (and for p = 0) returns x unchanged.
Tensor dropout(const Tensor& x, double p, Loc loc = Loc::current());
/// Whether the program being traced is a training program (compile_train) or not.
bool is_training();

// ---- state-space models (Mamba) --------------------------------------------------------
struct SelectiveScanOptions {
  Tensor D = {};           ///< [D]: y += D·u (the skip connection); empty: none
  Tensor z = {};           ///< [B, D, L]: y ·= silu(z) (the gate); empty: none
  Tensor delta_bias = {};  ///< [D]: added to delta before the softplus; empty: none
  bool delta_softplus = false;
};
struct SelectiveScanResult {
  Tensor y;           ///< [B, D, L]
  Tensor last_state;  ///< [B, D, N]: h after the last step (before D and z)
};
/// Mamba's selective scan, state-spaces/mamba's selective_scan_ref semantics: with
/// Δ = softplus?(delta + delta_bias), h_l = exp(Δ_l·A)·h_{l−1} + Δ_l·B_l·u_l (h_{−1} = 0) and
/// y_l = C_l·h_l + D·u_l, gated by silu(z). u, delta [B, D, L] (channels first, as the
/// reference); A [D, N]; B and C [B, N, L], or [B, G, N, L] grouped (channel d reads group
/// d / (D/G)). The recurrence with delta_bias, the softplus and the D skip is one primitive
/// with its own backward (the z gate is an ordinary op after it); the softplus is the
/// overflow-safe max(x, 0) + log1p(exp(−|x|)). The CUDA backend takes N ≤ 128 (a channel's
/// states share one warp, up to four per lane) and says so when compiling a larger one; cpu and ref
/// take any N.
SelectiveScanResult selective_scan(const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B,
                                   const Tensor& C, const SelectiveScanOptions& options = {},
                                   Loc loc = Loc::current());
/// Depthwise causal convolution over the last axis: x [B, D, L] (channels first, as Mamba's
/// causal_conv1d), weight [D, K], optional bias [D]; y[b, d, l] = Σ_k weight[d, k]·x[b, d,
/// l − K + 1 + k] (zeros before the start) + bias[d]. Written as K shifted products of a padded
/// x, which fuse into one kernel, forward and backward.
Tensor causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                     Loc loc = Loc::current());

// ---- attention -----------------------------------------------------------------------
struct AttentionOptions {
  bool causal = true;
  /// Default 1/√D.
  std::optional<double> scale = {};
  /// Sliding window (causal only): the query at position p sees keys p − window < j ≤ p, the
  /// last `window` positions itself included (Mistral's, Phi-3's, Qwen2's, Gemma 2's and 3's).
  /// 0: all of them.
  int64_t window = 0;
  /// Scores s become softcap·tanh(s / softcap) before the softmax (Gemma 2). 0: none.
  double softcap = 0;
  /// Keys to leave out, per sequence: [B, S] of any type, nonzero where a key may be seen
  /// (transformers' attention_mask of a padded batch). A query left with no key (every key it
  /// could see masked) gets zeros and passes no gradient. Stays one fused primitive (not with a
  /// window or a softcap, which are composites and take it there).
  std::optional<Tensor> key_mask = {};
  /// Attention sinks [Hq] (gpt-oss's): a learned logit per query head that joins every row's
  /// softmax as one more key without a value, p_j = e^{s_j} / (Σ_j' e^{s_j'} + e^{sink}), so a
  /// query may give part of its attention to nothing. Runs as a composite (its scores stored),
  /// with a gradient for the sinks.
  std::optional<Tensor> sinks = {};
};
/// Scaled dot-product attention, q [B, Hq, T, D], k/v [B, Hkv, S, D] (grouped-query when
/// Hkv < Hq); causal: query i sits at position i + S − T. One fused primitive: no T×S score
/// matrix is stored, forward or backward. A window that hides keys (window < S) makes it a
/// composite of matmuls, a mask and a softmax: for self-attention (T = S) with 2W·T < T², in
/// blocks of W queries against their 2W keys (T·2W scores stored), else over all T × S scores,
/// as with a softcap or sinks.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, AttentionOptions options = {},
                 Loc loc = Loc::current());
/// Attention of new queries over KV caches (inference): q [B, Hq, T, D], caches k/v
/// [B, Hkv, S, D] and pos i32 [B]; query i of sequence b sits at position pos[b] + i and sees
/// keys 0 … pos[b] + i. pos[b] outside [0, S − T] is an InputError when the program runs.
/// One fused kernel on every backend; no gradient. Default scale 1/√D.
Tensor attention_at(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos,
                    std::optional<double> scale = {}, Loc loc = Loc::current());
/// attention_at with a sliding window, a softcap or sinks (options.causal must be true; pass an
/// AttentionOptions{…}, since a bare {} is ambiguous with the scale). A window below the cache
/// length S, a softcap or sinks run as a composite over the whole cache (with a gradient); under
/// Precision::kBf16 it rounds q, k, v and the probabilities to bf16 as `attention` does, where
/// the fused attention_at keeps f32.
Tensor attention_at(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos,
                    AttentionOptions options, Loc loc = Loc::current());

// ---- convolutional networks (NCHW) ------------------------------------------------------
/// A pair of extents (height, width); one number means both.
struct Size2 {
  Size2(int64_t both) : h(both), w(both) {}  // NOLINT(google-explicit-constructor): {.stride = 2}
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
  int64_t h, w;
};
struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;  // zeros on each side
  Size2 dilation = 1;
  int64_t groups = 1;  // depthwise: groups = channels
};
/// 2-D convolution (cross-correlation, as PyTorch's): x [N, C, H, W], weight [O, C/groups, KH,
/// KW], optional bias [O] → [N, O, OH, OW] with OH = ⌊(H + 2·padding − dilation·(KH − 1) − 1) /
/// stride⌋ + 1 (likewise OW). Under Precision::kBf16 x and weight are read as bf16 and the sums
/// accumulate in f32, as a product's. Bad geometry (channels not divisible by groups, a kernel
/// larger than the padded input, an empty output) is a ShapeError here.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              Conv2dOptions options = {}, Loc loc = Loc::current());
struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;  // zeros on each side
  int64_t dilation = 1;
  int64_t groups = 1;
};
/// 1-D convolution (PyTorch's conv1d): x [N, C, L], weight [O, C/groups, K], optional bias [O] →
/// [N, O, OL] with OL = ⌊(L + 2·padding − dilation·(K − 1) − 1) / stride⌋ + 1: conv2d over a
/// height of one, with its precision and errors.
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              Conv1dOptions options = {}, Loc loc = Loc::current());
struct ConvTranspose2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;         // removed from each side of the full output
  Size2 output_padding = 0;  // added on the bottom and right; must be smaller than the stride
  Size2 dilation = 1;
  int64_t groups = 1;
};
/// Transposed 2-D convolution (PyTorch's conv_transpose2d, the gradient of conv2d with respect
/// to its input): x [N, Cin, H, W], weight [Cin, Cout/groups, KH, KW], optional bias [Cout] →
/// [N, Cout, OH, OW] with OH = (H − 1)·stride − 2·padding + dilation·(KH − 1) + output_padding + 1
/// (likewise OW). conv2d(y, weight) with the same stride, padding, dilation and groups maps
/// [N, Cout, OH, OW] back to [N, Cin, H, W]. Mixed precision and errors as conv2d's.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        ConvTranspose2dOptions options = {}, Loc loc = Loc::current());
struct Pool2dOptions {
  Size2 kernel;
  Size2 stride = 0;               // 0: the kernel
  Size2 padding = 0;              // at most half the kernel; never chosen by max, counted by avg
  Size2 dilation = 1;             // max_pool2d only
  bool count_include_pad = true;  // avg_pool2d: divide by kh·kw even where the window hangs over
};
/// Per-channel maximum of each window of x [N, C, H, W] (PyTorch's max_pool2d without
/// ceil_mode; NaN propagates). The gradient goes to each window's first maximum.
Tensor max_pool2d(const Tensor& x, Pool2dOptions options, Loc loc = Loc::current());
/// Per-channel mean of each window of x [N, C, H, W] (PyTorch's avg_pool2d without ceil_mode).
Tensor avg_pool2d(const Tensor& x, Pool2dOptions options, Loc loc = Loc::current());
/// Mean over H and W: [N, C, H, W] → [N, C].
Tensor global_avg_pool2d(const Tensor& x, Loc loc = Loc::current());
enum class InterpolateMode { kNearest, kBilinear };
struct InterpolateOptions {
  Size2 size = 0;    // the output's height and width; 0: ⌊input extent · scale⌋
  double scale = 0;  // PyTorch's scale_factor (both axes), used when size is 0
  InterpolateMode mode = InterpolateMode::kNearest;
  bool align_corners = false;  // bilinear: corner pixels' centres map to corners (PyTorch's flag)
};
/// Resizes x [N, C, H, W] as PyTorch's F.interpolate (modes "nearest" and "bilinear"): each
/// output pixel reads its source pixels (nearest: ⌊dst·in/out⌋; bilinear: the two neighbours
/// along each axis of (dst + 0.5)·in/out − 0.5, clamped at 0, or dst·(in − 1)/(out − 1) with
/// align_corners), with in/out replaced by 1/scale when the size comes from `scale`. Gathers
/// along H then W (bilinear: each pair weighted), so gradients scatter back to the sources.
Tensor interpolate(const Tensor& x, InterpolateOptions options, Loc loc = Loc::current());
/// PyTorch's adaptive_avg_pool2d: x [N, C, H, W] → [N, C, size.h, size.w], output (i, j) the mean
/// of rows [⌊i·H/oh⌋, ⌈(i + 1)·H/oh⌉) and the likewise columns (windows may overlap).
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 size, Loc loc = Loc::current());
enum class PadMode { kConstant, kReflect, kReplicate };
struct PadOptions {
  PadMode mode = PadMode::kConstant;
  double value = 0;  // kConstant's fill
};
/// PyTorch's F.pad: `pads` holds (before, after) pairs from the last axis backwards
/// ({left, right, top, bottom} pads W then H of an NCHW image). Constant fills with `value`;
/// reflect mirrors about the edge element (padding below the axis' extent); replicate repeats
/// the edge. Any rank and any number of trailing axes; pads are >= 0 (slice to crop).
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadOptions options = {},
           Loc loc = Loc::current());
/// Group normalisation (PyTorch's group_norm): x [N, C, ...] in `groups` groups of C/groups
/// channels, each (image, group) normalised over its channels and positions with its own mean
/// and biased variance, then · weight + bias per channel (each [C], optional). The layer norm
/// primitive over [N, groups, rest], so one fused kernel and its backward.
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                  double eps = 1e-5, Loc loc = Loc::current());
/// Batch normalisation of x [N, C, ...] over every axis but 1 with the given per-channel
/// statistics: (x − mean) / √(var + eps) · weight + bias (weight, bias optional; each [C]).
Tensor batch_norm(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight,
                  const Tensor& bias, double eps = 1e-5, Loc loc = Loc::current());

// ---- activations and small composites --------------------------------------------------
enum class GeluApprox { kErf, kTanh };
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::kErf, Loc loc = Loc::current());
Tensor silu(const Tensor& x, Loc loc = Loc::current());
/// log(1 + eˣ) without overflow: max(x, 0) + log1p(e^−|x|).
Tensor softplus(const Tensor& x, Loc loc = Loc::current());
/// silu(gate) ⊙ up.
Tensor swiglu(const Tensor& gate, const Tensor& up, Loc loc = Loc::current());
// PyTorch's, with its gradients at the kinks.
/// x where x > 0, else slope·x.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01, Loc loc = Loc::current());
/// x where x > 0, else α(eˣ − 1).
Tensor elu(const Tensor& x, double alpha = 1.0, Loc loc = Loc::current());
/// x limited to [lo, hi] (gradient 1 on the closed interval, as torch.clamp); NaN stays NaN.
Tensor clamp(const Tensor& x, double lo, double hi, Loc loc = Loc::current());
/// 0 for x ≤ −3, 1 for x ≥ 3, x/6 + ½ between.
Tensor hardsigmoid(const Tensor& x, Loc loc = Loc::current());
/// x·(x + 3)/6 on [−3, 3), 0 below, x from 3 (the gradient at 3 is 1, as PyTorch's CPU kernel
/// gives it; its CUDA kernel gives 3/2).
Tensor hardswish(const Tensor& x, Loc loc = Loc::current());
/// x·tanh(softplus(x)).
Tensor mish(const Tensor& x, Loc loc = Loc::current());
/// log σ(x) = −softplus(−x), without overflow.
Tensor logsigmoid(const Tensor& x, Loc loc = Loc::current());
/// x·cos + rotate_half(x)·sin, rotate_half(x) = [−x₂, x₁] of x's halves along the last axis
/// (D even; f32): the mixing step of rotary embeddings, one kernel. cos and sin broadcast to x's
/// shape. rope and rope_at call it with their tables.
Tensor rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, Loc loc = Loc::current());
/// How a model rescales RoPE's frequencies to stretch its context (Hugging Face's rope_type
/// values; kNone is the plain rotation). See rope_frequencies for each rule.
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3, kYarn, kLongRope };
  Type type = Type::kNone;
  double factor = 1.0;           // how far the context is stretched (linear, llama3, yarn, longrope)
  int64_t original_context = 0;  // the context the model was pretrained with (llama3, yarn, longrope)
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn: the ramp's ends, in rotations
  bool truncate = true;                                  // yarn: ramp ends rounded outwards
  /// yarn: cos and sin are multiplied by this; 0 derives it from factor (0.1·ln factor + 1, or
  /// the ratio of that with mscale and with mscale_all_dim when both are given).
  double attention_factor = 0.0;
  double mscale = 0.0, mscale_all_dim = 0.0;
  /// longrope (Phi-3.5, Phi-4-mini): per-pair divisors of the frequencies within the original
  /// context (transformers switches to long factors beyond it; the library stops there).
  std::vector<double> short_factor = {};
};
/// RoPE's per-pair frequencies (D/2 of them) and the factor on cos and sin, as Hugging Face's
/// modeling_rope_utils computes them. Plain: inv_freq_i = base^(−2i/D), factor 1. kLinear:
/// inv_freq / factor. kLlama3 (Llama 3.1): with wavelength λ = 2π/inv_freq and
/// L = original_context, pairs with λ > L/low_freq_factor are divided by factor, those with
/// λ < L/high_freq_factor kept, and those between blended by s = (L/λ − low)/(high − low):
/// (1 − s)·inv_freq/factor + s·inv_freq. kYarn: a linear ramp over the pair index, from the
/// dimension where L turns beta_fast times to the one where it turns beta_slow times, blends
/// inv_freq (fast pairs, before the ramp) into inv_freq/factor (slow pairs, after it); cos and
/// sin are scaled by attention_factor. kLongRope: inv_freq_i / short_factor_i, cos and sin
/// scaled by attention_factor, else by √(1 + ln factor / ln L) (1 when factor ≤ 1).
struct RopeFrequencies {
  std::vector<double> inv_freq;
  double attention_factor = 1.0;
};
RopeFrequencies rope_frequencies(int64_t head_dim, double base, const RopeScaling& scaling = {});
/// Rotary position embedding (rotate-half form) of x [..., T, D] (D even) at positions
/// offset…offset+T−1: x·cos θ + rotate_half(x)·sin θ with θ_{t,i} = t·base^(−2i/D).
Tensor rope(const Tensor& x, double base = 10000.0, int64_t offset = 0, Loc loc = Loc::current());
/// rope with rescaled frequencies: θ_{t,i} = t·inv_freq_i of rope_frequencies(D, base, scaling),
/// cos and sin times its attention_factor.
Tensor rope(const Tensor& x, double base, const RopeScaling& scaling, int64_t offset = 0,
            Loc loc = Loc::current());
/// rope at positions known only when the program runs (KV-cached decoding): x [B, H, T, D]
/// (D even), positions i32 [B, T] in [0, max_positions). The cos/sin rows are those of rope's
/// table for positions 0 … max_positions − 1, gathered by position, so a token gets the same
/// rotation as in rope. A position outside the table is an InputError when the program runs.
Tensor rope_at(const Tensor& x, const Tensor& positions, int64_t max_positions, double base = 10000.0,
               Loc loc = Loc::current());
Tensor rope_at(const Tensor& x, const Tensor& positions, int64_t max_positions, double base,
               const RopeScaling& scaling, Loc loc = Loc::current());
/// Zero (or `value`) padding of `axis` by `before` and `after` elements.
Tensor pad(const Tensor& x, int64_t axis, int64_t before, int64_t after, double value = 0.0,
           Loc loc = Loc::current());

// ---- captures ------------------------------------------------------------------------
/// Marks `t` to be read back as `name` when a step/run asks for captures; returns t. Free
/// when not asked for: a capture that nothing else reads is not even computed then.
/// Names must be unique within a program.
Tensor capture(const std::string& name, const Tensor& t, Loc loc = Loc::current());

// ---- state (caches that persist between calls) -----------------------------------------
/// A tensor that keeps its value between calls of a program (a KV cache, a recurrent
/// state, running statistics): every element starts as `initial` (0 for caches, 1 for batch
/// norm's running variance), Program::reset_state() puts it back, and it changes only through
/// assign(). States are shared by name between all programs of one model on one device (a
/// prefill and a decode program write and read one cache); the same name must then have the
/// same shape, dtype and initial value. Within one program, asking for a name again returns
/// the same tensor.
Tensor state(const std::string& name, Shape shape, DType dtype = DType::kF32, double initial = 0.0,
             Loc loc = Loc::current());
/// Makes `value` the new value of `state_tensor` once the call's reads are done (the call
/// itself sees the old value everywhere). At most one assign per state and program.
void assign(const Tensor& state_tensor, const Tensor& value, Loc loc = Loc::current());

// ---- activation recomputation -----------------------------------------------------------
/// While alive, marks the ops traced on this thread as one recompute region: a training
/// program's backward recomputes the region's values it needs, just before it first needs
/// them, instead of the forward storing them until then. Compute traded for memory:
///
///   for (auto& block : blocks) { tg::Recompute region; x = block(x); }
///
/// Stored are only the region's inputs (values made before it: the block's input x,
/// parameters, program inputs) and its outputs (values of the region read by ops outside
/// it: the x it returns). Random ops (dropout) draw the same numbers again, so the results
/// equal those without recomputation. A Recompute inside another joins the outer region.
/// No effect outside compile_train (nothing is stored for a backward there) or with
/// TrainOptions::optimize off (the passes that recompute do not run).
class Recompute {
 public:
  /// `enabled` false makes the scope do nothing (a model's recompute switch).
  explicit Recompute(bool enabled = true);
  ~Recompute();
  Recompute(const Recompute&) = delete;
  Recompute& operator=(const Recompute&) = delete;

 private:
  ir::Trace* trace_ = nullptr;  // the trace this scope stamps, null when it does nothing
};

}  // namespace tg
