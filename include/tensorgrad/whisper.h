// Whisper (Radford et al. 2022): speech recognition and translation, an encoder over a log-mel
// spectrogram (tg::LogMelFeatures) and a decoder of text tokens, with Hugging Face's parameter
// names, so tg::pretrained::load maps a WhisperForConditionalGeneration folder onto it:
//
//   model.encoder.conv1, conv2                      [d, mels, 3] and [d, d, 3], stride 1 and 2
//   model.encoder.embed_positions                   [source_positions, d] (sinusoids, not trained)
//   model.encoder.layers.<i>.self_attn.{q, k, v, out}_proj (k without a bias),
//     self_attn_layer_norm, fc1, fc2, final_layer_norm
//   model.encoder.layer_norm
//   model.decoder.embed_tokens, embed_positions     [vocab, d], [target_positions, d]
//   model.decoder.layers.<i>.self_attn.…, self_attn_layer_norm, encoder_attn.…,
//     encoder_attn_layer_norm, fc1, fc2, final_layer_norm
//   model.decoder.layer_norm                        the head is embed_tokens (proj_out, tied)
//
// Both stacks are pre-norm transformers (LayerNorm, eps 1e-5; GELU feed-forward; attention
// scaled by head_dim^-½): the encoder reads gelu(conv2(gelu(conv1(features)))) plus its
// positions, 2·source_positions frames in, source_positions states out; the decoder attends
// causally to its tokens and to all the encoder's states.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/audio.h"
#include "tensorgrad/generate.h"
#include "tensorgrad/nn.h"
#include "tensorgrad/program.h"

namespace tg::nn {

/// Named after config.json's fields.
struct WhisperConfig {
  /// vocab_size, num_mel_bins, d_model, the stacks' layers, attention heads and feed-forward widths.
  int64_t vocab = 51865, mels = 80, d_model = 512;
  int64_t encoder_layers = 6, encoder_heads = 8, encoder_ffn = 2048;
  int64_t decoder_layers = 6, decoder_heads = 8, decoder_ffn = 2048;
  /// max_source_positions (the encoder's states: half the input frames), max_target_positions.
  int64_t source_positions = 1500, target_positions = 448;
  /// scale_embedding: read and written back, but not applied, as transformers' Whisper defines
  /// an embedding scale from it and never uses it.
  bool scale_embedding = false;
  /// dropout (embeddings and each sublayer's output), attention_dropout (the attention
  /// probabilities), activation_dropout (inside the feed-forward): training programs only.
  double dropout = 0.0, attention_dropout = 0.0, activation_dropout = 0.0;
  /// decoder_start_token_id (<|startoftranscript|>), eos_token_id, pad_token_id.
  int32_t start_id = 50258, eos_id = 50257, pad_id = 50257;
};

/// One attention sublayer's projections (self_attn or encoder_attn): q, v and out with biases,
/// k without.
class WhisperAttention : public Module {
 public:
  WhisperAttention(Module& parent, std::string name, int64_t d_model, int64_t heads, double dropout);
  /// Queries from x [B, T, d], keys and values from kv [B, S, d]; causal: query t sees keys ≤ t.
  Tensor operator()(const Tensor& x, const Tensor& kv, bool causal, Loc loc) const;
  /// The heads of queries [B, H, T, dh] over keys and values [B, H, S, dh] (already split), merged
  /// and projected by out_proj.
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, Loc loc) const;
  Linear q_proj, k_proj, v_proj, out_proj;
  const int64_t heads;
  const double dropout;
};

class Whisper : public Module {
 public:
  explicit Whisper(WhisperConfig config);
  Whisper(Module& parent, std::string name, WhisperConfig config);
  ~Whisper() override;

  /// The encoder's last_hidden_state [B, source_positions, d] for input_features [B, mels,
  /// 2·source_positions] (LogMelFeatures' output: 3000 frames for 30 s; another length is a
  /// ShapeError, as in transformers).
  Tensor encode(const Tensor& features, Loc loc = Loc::current()) const;
  /// The decoder's last_hidden_state [B, T, d] for ids i32 [B, T] (T ≤ target_positions; the
  /// start token, then the text so far) at positions 0 … T − 1, over encoder_hidden [B, S, d].
  Tensor decode(const Tensor& ids, const Tensor& encoder_hidden, Loc loc = Loc::current()) const;
  /// The head's logits [B, T, vocab] (embed_tokens transposed) for decoder hidden states.
  Tensor logits(const Tensor& decoder_hidden, Loc loc = Loc::current()) const;

  /// Cached decoding, in two programs of one model. remember() writes each decoder layer's
  /// cross-attention keys and values of encoder_hidden [B, S, d] into the states
  /// "<layer>.encoder_attn.k_memory" / "v_memory" [B, heads, S, head_dim] (and returns
  /// encoder_hidden); logits_cached() is a tg::CachedLm step over them: the logits of ids [B, T]
  /// at positions pos[b] … pos[b] + T − 1, their self-attention keys and values cached in
  /// "<layer>.self_attn.k_cache" / "v_cache" [B, heads, cache_len, head_dim] (cache_len ≤
  /// target_positions), attending to the remembered encoder states of the same batch size.
  Tensor remember(const Tensor& encoder_hidden, Loc loc = Loc::current()) const;
  Tensor logits_cached(const Tensor& ids, const Tensor& pos, int64_t cache_len,
                       Loc loc = Loc::current()) const;

  /// Teacher forcing's decoder input for labels [rows, T] (row-major, -100 where ignored): each
  /// row shifted right behind the start token, -100 read as the pad id (transformers'
  /// shift_tokens_right).
  std::vector<int32_t> shift_right(std::span<const int32_t> labels, int64_t rows) const;

  const WhisperConfig config;

 private:
  void build();
  struct Encoder;
  struct Decoder;
  Module model_;
  std::unique_ptr<Encoder> encoder_;
  std::unique_ptr<Decoder> decoder_;
};

}  // namespace tg::nn

namespace tg {

/// The special tokens and suppression lists of a Whisper folder (generation_config.json, with
/// config.json and tokenizer.json filling what it lacks), as transformers' generate() reads them.
struct WhisperTokens {
  int32_t start = 50258, eos = 50257, no_timestamps = 50363;
  /// <|transcribe|> and <|translate|> (task_to_id); -1 when the model has no tasks (English-only).
  int32_t transcribe = -1, translate = -1;
  /// Language codes ("en", "de", …) to their tokens (lang_to_id); empty for English-only models.
  std::map<std::string, int32_t> languages;
  /// Never generated (suppress_tokens); not generated first (begin_suppress_tokens).
  std::vector<int32_t> suppress, begin_suppress;
  /// The language forced_decoder_ids pins (a fine-tune for one language), used when a
  /// transcription names none; empty: detected.
  std::string forced_language = {};
  /// "translate" when forced_decoder_ids pins <|translate|>: the task of a transcription that
  /// names none; empty: transcribe.
  std::string forced_task = {};

  /// is_multilingual false (or no lang_to_id) makes an English-only model: no languages, no tasks.
  /// CheckpointError when the folder names no start token or has a malformed list.
  static WhisperTokens load(const std::string& folder);
  bool multilingual() const { return !languages.empty(); }
};

struct WhisperGeneratorOptions {
  /// Clips transcribed together (transcribe() takes exactly this many).
  int64_t batch = 1;
  Device device = Device::best();
  Precision precision = Precision::kFp32;
};

struct TranscribeOptions {
  /// A language code ("en", "de", …) of a multilingual model; empty: detected per clip (the most
  /// likely language token after <|startoftranscript|>). English-only models take none.
  std::string language = {};
  /// "transcribe" or "translate" (into English); empty: the model's pinned task
  /// (WhisperTokens::forced_task), else transcribe.
  std::string task = {};
  /// New tokens per window at most: 1 to target_positions minus the prompt (4 tokens, 2 for
  /// English-only models), else an InputError (as transformers' generate()). 224 is Whisper's
  /// usual limit (half its 448 positions).
  int64_t max_new_tokens = 224;
  /// Sampling as GenerateOptions' (0: greedy, as transformers' default); seed likewise.
  float temperature = 0;
  int32_t top_k = 0;
  float top_p = 1, min_p = 0;
  uint32_t seed = 0;
  /// Each new text token as it is produced: (clip, token). Returning false ends the call.
  std::function<bool(int64_t clip, int32_t token)> on_token = {};
};

/// What transcribe() found for one clip.
struct Transcript {
  std::string language;         // the code given, pinned or detected ("" for English-only models)
  std::vector<int32_t> tokens;  // every window's new tokens in order, without the prompt and <|endoftext|>
};

/// Transcription with an nn::Whisper, decoded as transformers' generate() does for audio of up to
/// one window (chunk_length seconds): the encoder runs once per window (a program that also
/// writes the decoder's cross-attention keys and values into its states), then a one-token step
/// (Whisper::logits_cached, self-attention keys and values cached) for each prompt token
/// (<|startoftranscript|>, the language, the task, <|notimestamps|>) and each new one, sampled in
/// the step with the suppressed tokens masked. Longer audio is cut into consecutive windows, each
/// transcribed on its own in the language of the first (given, pinned or detected there), without
/// the previous window's text as a prompt and without timestamps: words cut by a window's edge
/// may be lost, and each window's log-mel values are scaled to its own loudest (transformers'
/// long-form decoding seeks by timestamps over features of the whole recording).
class WhisperGenerator {
 public:
  WhisperGenerator(nn::Whisper& model, WhisperTokens tokens, LogMelFeatures features,
                   WhisperGeneratorOptions options = {});

  /// One transcript per clip (exactly options.batch clips, at features.sample_rate; a clip may be
  /// empty, and clips of different lengths end at their own last window). InputError for a
  /// language or task the model does not have, or a clip at another sample rate.
  std::vector<Transcript> transcribe(std::span<const Audio> clips, const TranscribeOptions& options = {});
  /// The same from input_features [batch, mels, frames] of one window each (LogMelFeatures' output).
  std::vector<Transcript> transcribe_features(const HostTensor& features,
                                              const TranscribeOptions& options = {});

  /// Programs: encoder() writes the memory, step() decodes one token (upload weights to either:
  /// programs of one model on one device share them).
  Program& encoder() { return encoder_; }
  Program& step() { return step_; }

 private:
  // One window of every clip: languages[b] forced ("" detects), sampling keys from key_base on.
  std::vector<Transcript> decode_window(const HostTensor& features, const std::vector<std::string>& languages,
                                        const TranscribeOptions& options, uint32_t key_base);
  nn::WhisperConfig config_;
  WhisperTokens tokens_;
  LogMelFeatures features_;
  WhisperGeneratorOptions options_;
  Program encoder_, step_;
};

}  // namespace tg
