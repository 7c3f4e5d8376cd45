// Text generation with a KV-cached language model: tg::Generator compiles a prefill program
// and a one-token decode program from the model (they share its parameters with the training
// program on the same device), and generate() runs the prompt through the prefill once (a
// model with Mamba layers: its whole windows, the rest through the decode program), then the
// decode program once per new token. Sampling (greedy, temperature, top-k, top-p) happens
// inside the programs (tg::sample; min_p too, and a repetition penalty kept with the caches as
// the state "generator.seen" [batch, vocab]); only the token ids come back to the host.
//
//   tg::nn::Gpt model(config);
//   tg::Generator gen(model, [&](tg::Tensor ids, tg::Tensor pos, int64_t cache_len) {
//                       return model.logits_cached(ids, pos, cache_len); },
//                     {.cache_len = 256, .device = tg::Device::cpu()});
//   std::vector<int32_t> text = gen.generate(prompt, {.max_new_tokens = 100, .temperature = 0.8f,
//                                                     .top_k = 40, .on_token = print_it});
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "tensorgrad/module.h"
#include "tensorgrad/program.h"
#include "tensorgrad/tensor.h"

namespace tg {

/// A language model step with caches, traced once per program: the logits [B, T, V] of
/// ids [B, T] (i32) whose first token sits at position pos[b] (i32 [B]) of sequence b,
/// reading and updating the model's tg::state caches of cache_len positions per sequence.
/// For tg::nn::Gpt it is `model.logits_cached(ids, pos, cache_len)`.
using CachedLm = std::function<Tensor(const Tensor& ids, const Tensor& pos, int64_t cache_len)>;

struct GeneratorOptions {
  /// Sequences decoded together (generate() takes exactly this many prompts).
  int64_t batch = 1;
  /// Positions per sequence. A sequence stops once prompt and generated tokens fill it (the
  /// last token sampled needs no position of its own: a prompt of cache_len tokens still
  /// gets one new token).
  int64_t cache_len = 256;
  /// Prompt tokens per prefill call (≤ cache_len); a longer prompt goes through in windows.
  /// 0: min(64, cache_len). (A model with Mamba layers prefills whole windows only: a prompt
  /// shorter than one goes through the decode program.)
  int64_t prefill_len = 0;
  Device device = Device::best();
  Precision precision = Precision::kFp32;
  /// false: no prefill program; prompts go through the decode program one token at a time.
  /// A model with Mamba layers (nn::Mamba or nn::Mamba2 modules: nn::MambaLM, the hybrids of
  /// pretrained::Model::recurrent()) advances its state by every token it is given, so a padded
  /// or repeated window would corrupt it: the Generator sees those layers and prefills such a
  /// model in whole windows only (those that every prompt fills), then feeds the rest of each
  /// prompt, fewer than prefill_len tokens of the shortest, through the decode program. A model with a
  /// recurrent state of another kind (a tg::state each token advances) needs prefill = false.
  bool prefill = true;
};

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  /// 0: greedy (the most likely token). Otherwise the logits are divided by it. Must be
  /// finite and >= 0; top_k >= 0 and top_p in (0, 1] (generate throws InputError otherwise).
  float temperature = 0;
  /// Sample among the k most likely tokens (0: all).
  int32_t top_k = 0;
  /// Sample among the smallest set of most likely tokens holding this probability (1: all).
  float top_p = 1;
  /// Then among the tokens at least min_p times as likely as the most likely one (0: all);
  /// in [0, 1].
  float min_p = 0;
  /// Hugging Face's repetition penalty (Keskar et al. 2019): the logit s of every token already
  /// in the sequence (prompt or generated) becomes s / penalty when s > 0 and s · penalty
  /// otherwise, before any sampling (greedy too). 1: off; > 0.
  float repetition_penalty = 1;
  /// The same seed, prompt and options give the same tokens, on every device.
  uint32_t seed = 0;
  /// A sequence ends when it samples one of these; the stop token is not returned.
  std::vector<int32_t> stop_tokens = {};
  /// Called with each new token as it is produced: (sequence index, token). Returning false
  /// ends the whole generation.
  std::function<bool(int64_t sequence, int32_t token)> on_token = {};

  /// Throws InputError naming the first setting out of its range (as generate() does).
  void check() const;
};

/// When beam search stops (Hugging Face's early_stopping).
enum class BeamStop {
  /// false: once the best running beam, scored at its current length, cannot beat the worst of
  /// `beams` finished hypotheses.
  kHeuristic,
  /// true: as soon as `beams` hypotheses have finished.
  kFull,
  /// "never": the heuristic, with the longest length a beam could still reach when
  /// length_penalty > 0.
  kNever,
};

/// Beam search (no sampling), as Hugging Face's generate(num_beams = beams, do_sample = False):
/// each step extends every running beam by every token, keeps the best 2·beams continuations
/// (more with several stop tokens) by summed log-probability, moves those that end (a stop token,
/// or the last token allowed) among the best `beams` of them into the finished hypotheses, and
/// runs on with the best `beams` that do not end.
struct BeamSearchOptions {
  /// At least 1.
  int64_t max_new_tokens = 128;
  /// A finished hypothesis scores its summed log-probability over (its new tokens, the stop token
  /// counted)^length_penalty: > 0 favours longer hypotheses, < 0 shorter ones.
  double length_penalty = 1;
  BeamStop stop = BeamStop::kHeuristic;
  /// Tokens that end a hypothesis (not returned); empty: it ends at max_new_tokens only.
  std::vector<int32_t> stop_tokens = {};

  /// Throws InputError naming the first setting out of its range.
  void check() const;
};

/// One hypothesis of a beam search.
struct BeamHypothesis {
  std::vector<int32_t> tokens;  // the new tokens, without the stop token
  float score = 0;              // as BeamSearchOptions::length_penalty says
  bool ended = false;           // by a stop token (else by the length limit)
};

class Generator {
 public:
  /// Compiles the prefill and decode programs of `model`'s cached step on options.device.
  /// `model` must outlive the Generator.
  Generator(Module& model, CachedLm step, GeneratorOptions options = {});

  /// One continuation per prompt (exactly options.batch prompts, each of 1 to cache_len valid
  /// token ids): the new tokens only, without the prompt. The model's caches are reset first.
  std::vector<std::vector<int32_t>> generate(const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& options = {});
  /// Compiles now what generate() with these options would compile on its first call (the
  /// repetition penalty's programs), so that the call's time is decoding alone.
  void prepare(const GenerateOptions& options);
  /// Batch-1 convenience: the continuation of one prompt.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const GenerateOptions& options = {});
  /// Beam search over one prompt with as many beams as the Generator's batch: its `batch`
  /// hypotheses, best first (each beam is one sequence of the programs; a step reorders the
  /// states the decode step assigns, its caches, on the device when beams trade places: the
  /// model's caches must have the batch on their first axis). The first call compiles the
  /// programs that return log-probabilities and reorder the caches. A hypothesis also ends at the
  /// cache's end: at most cache_len − prompt + 1 new tokens. The logits are searched as the model
  /// gives them (a folder's generation_config.json processors, such as no_repeat_ngram_size, are
  /// not applied).
  std::vector<BeamHypothesis> beam_search(const std::vector<int32_t>& prompt,
                                          const BeamSearchOptions& options = {});
  /// Beam search over several prompts at once, batch / prompts.size() beams each (prompt p's in
  /// rows p·beams …): each prompt's hypotheses, as one search of it alone would find them. A
  /// recurrent model (or prefill false) takes prompts of one length; the cache bounds every search
  /// by the longest prompt.
  std::vector<std::vector<BeamHypothesis>> beam_search(const std::vector<std::vector<int32_t>>& prompts,
                                                       const BeamSearchOptions& options = {});

  /// The programs (e.g. to init_params, load a checkpoint or describe() them); prefill() is
  /// empty with GeneratorOptions{.prefill = false}. They compute no repetition penalty: the
  /// first generate() with repetition_penalty != 1 compiles a second pair that does, sharing
  /// these programs' parameters and caches.
  Program& prefill() { return plain_.prefill; }
  Program& decode() { return plain_.decode; }
  const GeneratorOptions& options() const { return options_; }

 private:
  struct Programs {
    Program prefill, decode;
  };
  Programs compile_programs(bool penalised);
  // beam_search's: prefill and decode ending in log_softmax instead of sample, and the cache
  // reordering.
  struct BeamPrograms {
    Program prefill, decode, reorder;
  };
  BeamPrograms compile_beam_programs();

  GeneratorOptions options_;
  Module* model_;  // must outlive the Generator (its programs read the model's parameters)
  CachedLm step_;
  Programs plain_;
  std::optional<Programs> penalised_;
  std::optional<BeamPrograms> beam_;
  bool recurrent_ = false;  // the model has Mamba layers (see GeneratorOptions::prefill)
  // How many tokens of every prompt the prefill program takes (all of the longest; a recurrent
  // model's whole windows; none without prefill): the decode program feeds the rest.
  int64_t prefilled(const std::vector<std::vector<int32_t>>& prompts) const;
};

}  // namespace tg
