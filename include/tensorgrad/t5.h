// T5 (Raffel et al. 2020) and the checkpoints in its layout (Flan-T5, T5 v1.1, the T5 encoders of
// text-to-image models): an encoder-decoder transformer with Hugging Face's parameter names, so
// tg::pretrained::load maps a T5ForConditionalGeneration or T5EncoderModel folder onto it:
//
//   shared                                           the token embedding of both stacks
//   encoder.block.<i>.layer.0.SelfAttention.{q, k, v, o}, layer.0.layer_norm
//   encoder.block.0.layer.0.SelfAttention.relative_attention_bias   [buckets, heads]
//   encoder.block.<i>.layer.1.DenseReluDense.{wi | wi_0, wi_1, wo}, layer.1.layer_norm
//   encoder.final_layer_norm
//   decoder.block.<i>.layer.0.SelfAttention.…, layer.1.EncDecAttention.{q, k, v, o},
//   layer.1.layer_norm, layer.2.DenseReluDense.…, layer.2.layer_norm; decoder.final_layer_norm
//   lm_head                                          (untied models; tied ones read shared)
//
// Each sublayer is pre-norm with T5's norm (RMS, no bias, no mean): h = x + sublayer(norm(x)).
// Attention has no 1/√d scaling and adds a learned bias per head for the bucketed relative
// position of key and query (bidirectional buckets in the encoder, causal ones in the decoder;
// block 0 of each stack holds the table, every block adds it); cross-attention has none. The
// feed-forward is wo(act(wi x)) or, gated (Flan-T5, v1.1), wo(act(wi_0 x) · wi_1 x). A tied head
// scales the decoder's output by d_model^-½ first. Training programs apply dropout where
// transformers does (embeddings, each sublayer's output, inside the feed-forward, the attention
// probabilities, after each final norm). Self-attention is a composite (its scores stored): T5's
// position bias is an additive term the fused kernel does not take; cross-attention has none and
// runs fused (but in training programs with dropout).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "tensorgrad/generate.h"
#include "tensorgrad/nn.h"
#include "tensorgrad/program.h"

namespace tg::nn {

/// The feed-forward's activation: dense_act_fn (relu, gelu: erf, gelu_new: tanh, silu).
enum class T5Activation { kRelu, kGelu, kGeluTanh, kSilu };

/// Named after config.json's fields.
struct T5Config {
  /// vocab_size, d_model, d_kv (each head's width), d_ff, num_heads, num_layers,
  /// num_decoder_layers.
  int64_t vocab = 32128, d_model = 512, d_kv = 64, d_ff = 2048, heads = 8, layers = 6, decoder_layers = 6;
  /// relative_attention_num_buckets, relative_attention_max_distance.
  int64_t buckets = 32, max_distance = 128;
  double eps = 1e-6;
  /// feed_forward_proj "gated-…" (wi_0, wi_1) and its activation.
  bool gated = false;
  T5Activation act = T5Activation::kRelu;
  /// tie_word_embeddings: the head reads `shared` (no lm_head); scale_decoder_outputs (by default
  /// as tied): the decoder's output times d_model^-½ before the head.
  bool tied = true, scale_decoder_outputs = true;
  /// A decoder and head (T5ForConditionalGeneration); false: the encoder alone (T5EncoderModel).
  bool decoder = true;
  /// dropout_rate, in training programs only.
  double dropout = 0.0;
  /// decoder_start_token_id, eos_token_id, pad_token_id.
  int32_t start_id = 0, eos_id = 1, pad_id = 0;
};

/// What the decoder's cross-attention reads: the encoder's states [B, S, d], its mask [B, S] (or
/// none) and that mask as keep [B, 1, 1, S].
struct T5Memory {
  Tensor hidden;
  std::optional<Tensor> mask;
  Tensor keep;
};

/// T5's attention sublayer's projections (…SelfAttention or …EncDecAttention).
class T5Attention : public Module {
 public:
  T5Attention(Module& parent, std::string name, const T5Config& c, bool position_bias);
  /// Queries from x [B, T, d], keys and values from kv [B, S, d]; bias [1, H, T, S] added to the
  /// scores (or none); keep bool [B or 1, 1, T or 1, S]: which keys each query sees.
  Tensor operator()(const Tensor& x, const Tensor& kv, const std::optional<Tensor>& bias, const Tensor& keep,
                    Loc loc) const;
  /// Cross-attention over the encoder's states: no position bias, so the fused attention (no
  /// scores stored), but for training programs with dropout, which drop probabilities.
  Tensor over_memory(const Tensor& x, const T5Memory& memory, Loc loc) const;
  Linear q, k, v, o;
  std::unique_ptr<Embedding> relative_attention_bias;

 private:
  T5Config config_;
};

/// DenseReluDense: wo(act(wi x)) or wo(act(wi_0 x) · wi_1 x).
class T5FeedForward : public Module {
 public:
  T5FeedForward(Module& parent, std::string name, const T5Config& c);
  Tensor operator()(const Tensor& x, Loc loc) const;
  std::unique_ptr<Linear> wi, wi_0, wi_1, wo;

 private:
  T5Config config_;
};

class T5 : public Module {
 public:
  explicit T5(T5Config config);
  T5(Module& parent, std::string name, T5Config config);
  ~T5() override;

  /// The encoder's last_hidden_state [B, S, d] (after its final norm) for ids i32 [B, S]; mask
  /// [B, S] (transformers' attention_mask, any type, nonzero kept) leaves padding keys out.
  Tensor encode(const Tensor& ids, const std::optional<Tensor>& mask = std::nullopt,
                Loc loc = Loc::current()) const;
  /// The decoder's last_hidden_state [B, T, d] for decoder_ids i32 [B, T] (the start token, then
  /// the target so far) over encoder_hidden [B, S, d]; encoder_mask as encode's mask.
  Tensor decode(const Tensor& decoder_ids, const Tensor& encoder_hidden,
                const std::optional<Tensor>& encoder_mask = std::nullopt, Loc loc = Loc::current()) const;
  /// The head's logits [B, T, vocab] for decoder hidden states.
  Tensor logits(const Tensor& decoder_hidden, Loc loc = Loc::current()) const;

  /// Cached decoding, in two programs of one model. remember() writes each decoder block's
  /// cross-attention keys and values of encoder_hidden [B, S, d] into the states
  /// "<block>.layer.1.EncDecAttention.k_memory" / "v_memory" [B, heads, S, d_kv], and encoder_mask
  /// (nonzero kept; none: every key) into "<decoder>.memory_mask" f32 [B, S]; it returns
  /// encoder_hidden. logits_cached() is the step over them (a tg::CachedLm but for the encoder
  /// length source_len, the S remember() was given): the logits of decoder ids [B, T] at positions
  /// pos[b] … pos[b] + T − 1, their self-attention keys and values cached in
  /// "<block>.layer.0.SelfAttention.k_cache" / "v_cache" [B, heads, cache_len, d_kv], each query
  /// scoring the cached keys before it with the position bias of block 0's table (a composite over
  /// the cache_len keys: T5's bias is an additive term the fused kernel does not take).
  Tensor remember(const Tensor& encoder_hidden, const std::optional<Tensor>& encoder_mask = std::nullopt,
                  Loc loc = Loc::current()) const;
  Tensor logits_cached(const Tensor& ids, const Tensor& pos, int64_t cache_len, int64_t source_len,
                       Loc loc = Loc::current()) const;

  /// Teacher forcing's decoder input for labels [B, T] (row-major, -100 where ignored): each row
  /// shifted right behind the start token, -100 read as the pad id (transformers' _shift_right).
  std::vector<int32_t> shift_right(std::span<const int32_t> labels, int64_t rows) const;

  const T5Config config;

 private:
  void build();
  struct Stack;
  Tensor embed(const Tensor& ids, Loc loc) const;
  std::unique_ptr<Embedding> shared_;
  std::unique_ptr<Stack> encoder_, decoder_;
  std::unique_ptr<Linear> lm_head_;
};

}  // namespace tg::nn

namespace tg {

struct T5GeneratorOptions {
  /// Sources encoded and decoded together (generate() takes exactly this many).
  int64_t batch = 1;
  /// The longest source in tokens (shorter ones are padded and masked).
  int64_t source_len = 512;
  /// The most tokens generated per sequence: the self-attention caches hold this many positions
  /// and the start token's.
  int64_t max_new_tokens = 128;
  Device device = Device::best();
  Precision precision = Precision::kFp32;
};

/// Decoding with an nn::T5: the encoder runs once per call (a program that also writes the
/// decoder's cross-attention keys and values, T5::remember), then a one-token step
/// (T5::logits_cached, self-attention keys and values cached for the start token and
/// max_new_tokens positions) runs once per token, sampling the next one inside the program
/// (tg::sample: greedy, temperature, top-k, top-p, min-p). Precision::kF16 is refused (T5's
/// activations overflow f16; bf16 is fine).
class T5Generator {
 public:
  /// Compiles the programs from `model` (its parameters stay with them; beam_search's first call
  /// compiles two more from it); upload its weights to encoder() (its programs on one device
  /// share them).
  T5Generator(nn::T5& model, T5GeneratorOptions options = {});

  /// One output per source (exactly options.batch sources, each of 1 to source_len ids, as the
  /// tokenizer's encode(text, true) gives them): the new tokens without the start token, ending
  /// before the first stop token (default: the model's eos_id). GenerateOptions' max_new_tokens
  /// is capped by the generator's; a repetition penalty is not implemented (InputError).
  std::vector<std::vector<int32_t>> generate(const std::vector<std::vector<int32_t>>& sources,
                                             const GenerateOptions& options = {});
  /// Beam search (Generator::beam_search) over one source with as many beams as options.batch:
  /// the hypotheses, best first. Stop tokens default to the model's eos_id; max_new_tokens is
  /// capped by the generator's. The first call compiles its programs from the model, which must
  /// still exist then.
  std::vector<BeamHypothesis> beam_search(const std::vector<int32_t>& source, BeamSearchOptions options = {});
  /// The same over several sources at once, batch / sources.size() beams each.
  std::vector<std::vector<BeamHypothesis>> beam_search(const std::vector<std::vector<int32_t>>& sources,
                                                       BeamSearchOptions options = {});

  Program& encoder() { return encoder_; }
  Program& decoder() { return decoder_; }
  const T5GeneratorOptions& options() const { return options_; }

 private:
  nn::T5Config config_;
  T5GeneratorOptions options_;
  Program encoder_, decoder_;
  nn::T5* model_;  // for beam_search's programs, compiled on its first call
  std::optional<Program> beam_decoder_, beam_reorder_;
};

}  // namespace tg
