// tg::Generator (generate.h): a prefill and a decode program over a model's cached step, each
// ending in tg::sample, and the host loop that feeds one into the other.
//
// Prompts of any length up to cache_len go through one prefill program of a fixed window
// (prefill_len tokens). Sequence b with L tokens runs windows starting at
// s_b(c) = min(c·P, max(L − P, 0)) for c = 0, 1, …: a sequence that needs fewer windows than
// the longest prompt repeats its last one, which rewrites the same keys and values at the same
// positions. A prompt shorter than the window is padded; the pad's cache rows lie past the
// prompt and are overwritten by the decode steps before any query can see them (attention
// reads positions ≤ its own). The token is sampled at each sequence's last prompt position
// (the `last` input picks that row of the window's logits).
//
// A model with Mamba layers takes neither pads nor repeats (its state would advance by them): it
// gets the whole windows every prompt fills (c·P + P ≤ the shortest prompt's length), and the
// decode program takes each prompt's remaining tokens one at a time.
#include "tensorgrad/generate.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "runtime/beam_search.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/functional.h"
#include "tensorgrad/mamba.h"

namespace tg {
namespace {

// The row of logits [B, V] to sample from: the repetition penalty (params[4]) on the tokens the
// sequence holds so far, the state "generator.seen" [B, V] (1: seen) with the tokens `ids`
// [B, T] at the positions `real` marks (f32 1 or 0) added first; then tg::sample with
// params[0..4) = {temperature, top_k, top_p, min_p}.
Tensor penalised_sample(const Tensor& logits, const Tensor& ids, const Tensor& real, const Tensor& params,
                        const Tensor& key) {
  const int64_t b = logits.shape()[0], v = logits.shape()[1];
  Tensor seen = state("generator.seen", {b, v});
  Tensor now = minimum(add(seen, scatter_add(real, ids, 1, v)), 1.0);
  assign(seen, now);
  Tensor penalty = slice(params, 0, 4, 5);
  Tensor penalised = where(lt(logits, 0.0), mul(logits, penalty), div(logits, penalty));
  return sample(where(gt(now, 0.0), penalised, logits), slice(params, 0, 0, 4), key);
}

// Checks every prompt (1 to cache tokens) and returns the longest one's length; `api` names the
// caller in the errors.
int64_t longest_prompt(const std::vector<std::vector<int32_t>>& prompts, int64_t cache, const char* api) {
  int64_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto len = static_cast<int64_t>(prompts[i].size());
    if (len == 0)
      throw InputError(std::string("[") + api + "] prompt " + std::to_string(i) +
                       " is empty (it needs at least one token)");
    if (len > cache)
      throw InputError(std::string("[") + api + "] prompt " + std::to_string(i) + " has " +
                       std::to_string(len) +
                       " tokens, more than the cache holds (cache_len = " + std::to_string(cache) + ")");
    longest = std::max(longest, len);
  }
  return longest;
}

// Row `row` of prefill window c (P tokens) for `prompt`: its tokens from s(c) (the file comment's
// rule) into ids[row·P …], their first position and the row of the prompt's last token in it.
void window_row(const std::vector<int32_t>& prompt, int64_t c, int64_t p, size_t row,
                std::vector<int32_t>& ids, std::vector<int32_t>& pos, std::vector<int32_t>& last) {
  const auto len = static_cast<int64_t>(prompt.size());
  const int64_t start = std::min(c * p, std::max<int64_t>(len - p, 0));
  for (int64_t t = 0; t < p && start + t < len; ++t)
    ids[row * static_cast<size_t>(p) + static_cast<size_t>(t)] = prompt[static_cast<size_t>(start + t)];
  pos[row] = static_cast<int32_t>(start);
  last[row] = static_cast<int32_t>(std::min(len - 1 - start, p - 1));
}

}  // namespace

Generator::Generator(Module& model, CachedLm step, GeneratorOptions options)
    : options_(std::move(options)), model_(&model), step_(std::move(step)) {
  GeneratorOptions& o = options_;
  if (o.batch < 1) throw InputError("[Generator] batch must be at least 1, got " + std::to_string(o.batch));
  if (o.cache_len < 1)
    throw InputError("[Generator] cache_len must be at least 1, got " + std::to_string(o.cache_len));
  if (o.prefill_len == 0) o.prefill_len = std::min<int64_t>(64, o.cache_len);
  if (o.prefill_len < 1 || o.prefill_len > o.cache_len)
    throw InputError("[Generator] prefill_len must be in [1, cache_len = " + std::to_string(o.cache_len) +
                     "], got " + std::to_string(o.prefill_len));
  if (!step_) throw InputError("[Generator] the model step is empty");
  for (Module* m : model_->modules())
    recurrent_ =
        recurrent_ || dynamic_cast<nn::Mamba*>(m) != nullptr || dynamic_cast<nn::Mamba2*>(m) != nullptr;
  plain_ = compile_programs(false);
}

Generator::Programs Generator::compile_programs(bool penalised) {
  const GeneratorOptions& o = options_;
  const int64_t b = o.batch, p = o.prefill_len, cache = o.cache_len;
  const CachedLm& step = step_;
  // The row of logits [B, V] to sample from, with params[0..4) = {temperature, top_k, top_p,
  // min_p}, after the repetition penalty when the programs have one.
  auto pick = [&](const Tensor& logits, const Tensor& ids, const Tensor& real, const Tensor& params,
                  const Tensor& key) {
    return penalised ? penalised_sample(logits, ids, real, params, key)
                     : sample(logits, slice(params, 0, 0, 4), key);
  };
  const ForwardOptions base{.device = o.device, .precision = o.precision};
  Programs out;
  if (o.prefill) {
    ForwardOptions pre = base;
    pre.inputs = {{"ids", {b, p}, DType::kI32},
                  {"pos", {b}, DType::kI32},
                  {"last", {b}, DType::kI32},
                  {"params", {5}},
                  {"key", {2}, DType::kI32}};
    out.prefill = compile_forward(
        *model_,
        [&](Tensor ids, Tensor pos, Tensor last, Tensor params, Tensor key) {
          const Tensor logits = step(ids, pos, cache);  // [B, P, V]
          if (logits.rank() != 3 || logits.shape()[0] != b || logits.shape()[1] != p)
            throw ShapeError("[Generator] the model step must return logits [batch, tokens, vocab] = [" +
                             std::to_string(b) + ", " + std::to_string(p) + ", V], got " +
                             shape_str(logits.shape()));
          const Tensor row = take_along_axis(logits, reshape(last, {b, 1, 1}), 1);  // [B, 1, V]
          // The window's prompt tokens: positions up to `last` (the rest is padding).
          const Tensor real =
              cast(le(arange(0, static_cast<double>(p), 1, DType::kI32), reshape(last, {b, 1})), DType::kF32);
          return pick(reshape(row, {b, logits.shape()[2]}), ids, real, params, key);
        },
        pre);
  }
  ForwardOptions dec = base;
  dec.inputs = {
      {"ids", {b, 1}, DType::kI32}, {"pos", {b}, DType::kI32}, {"params", {5}}, {"key", {2}, DType::kI32}};
  out.decode = compile_forward(
      *model_,
      [&](Tensor ids, Tensor pos, Tensor params, Tensor key) {
        const Tensor logits = step(ids, pos, cache);  // [B, 1, V]
        return pick(reshape(logits, {b, logits.shape().back()}), ids, ones({b, 1}), params, key);
      },
      dec);
  return out;
}

void GenerateOptions::check() const {
  if (max_new_tokens < 0) throw InputError("[generate] max_new_tokens must be >= 0");
  if (!(std::isfinite(temperature) && temperature >= 0))
    throw InputError("[generate] temperature must be finite and >= 0 (0: greedy), got " +
                     std::to_string(temperature));
  if (top_k < 0)
    throw InputError("[generate] top_k must be >= 0 (0: every token), got " + std::to_string(top_k));
  if (!(top_p > 0 && top_p <= 1))
    throw InputError("[generate] top_p must be in (0, 1] (1: every token), got " + std::to_string(top_p));
  if (!(min_p >= 0 && min_p <= 1))
    throw InputError("[generate] min_p must be in [0, 1] (0: every token), got " + std::to_string(min_p));
  if (!(std::isfinite(repetition_penalty) && repetition_penalty > 0))
    throw InputError("[generate] repetition_penalty must be finite and > 0 (1: off), got " +
                     std::to_string(repetition_penalty));
}

std::vector<std::vector<int32_t>> Generator::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                      const GenerateOptions& options) {
  const GeneratorOptions& o = options_;
  const auto b = static_cast<size_t>(o.batch);
  const int64_t p = o.prefill_len, cache = o.cache_len;
  if (prompts.size() != b)
    throw InputError("[generate] this Generator decodes " + std::to_string(b) + " sequence(s) at once; got " +
                     std::to_string(prompts.size()) + " prompt(s)");
  options.check();
  const int64_t longest = longest_prompt(prompts, cache, "generate");
  const std::vector<float> params{options.temperature, static_cast<float>(options.top_k), options.top_p,
                                  options.min_p, options.repetition_penalty};
  int32_t counter = 0;
  auto key = [&] { return std::vector<int32_t>{static_cast<int32_t>(options.seed), counter}; };

  // Without a penalty the programs that never compute one run (the penalty costs a few
  // kernels over [B, V] a step); the first call with one compiles the pair that does.
  prepare(options);
  Programs& run = options.repetition_penalty != 1 ? *penalised_ : plain_;
  Program& prefill = run.prefill;
  Program& decode = run.decode;
  decode.reset_state();
  std::vector<std::vector<int32_t>> out(b);
  std::vector<bool> active(b, options.max_new_tokens > 0);
  // Takes the tokens just sampled for the sequences in `fresh`; false when the callback asks
  // to stop.
  auto take = [&](const std::vector<int32_t>& next, const std::vector<bool>& fresh) {
    for (size_t i = 0; i < b; ++i) {
      if (!active[i] || !fresh[i]) continue;
      const int32_t t = next[i];
      if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), t) != options.stop_tokens.end()) {
        active[i] = false;
        continue;
      }
      out[i].push_back(t);
      if (options.on_token && !options.on_token(static_cast<int64_t>(i), t)) return false;
      const auto length = static_cast<int64_t>(prompts[i].size() + out[i].size());
      if (static_cast<int64_t>(out[i].size()) >= options.max_new_tokens || length >= cache) active[i] = false;
    }
    return true;
  };
  std::vector<int32_t> next;
  const int64_t fed = prefilled(prompts);
  for (int64_t c = 0; c * p < fed; ++c) {
    std::vector<int32_t> ids(static_cast<size_t>(o.batch * p), 0), pos(b), last(b);
    for (size_t i = 0; i < b; ++i) window_row(prompts[i], c, p, i, ids, pos, last);
    // A recurrent model's window draws with the key of the step that decodes its last token
    // without a prefill (so both ways sample alike).
    if (recurrent_) counter = static_cast<int32_t>((c + 1) * p - 1);
    next =
        prefill.run({{"ids", ids}, {"pos", pos}, {"last", last}, {"params", params}, {"key", key()}}).i32();
  }
  // An active sequence's newest token and its position.
  auto newest = [&](size_t i, std::vector<int32_t>& ids, std::vector<int32_t>& pos) {
    ids[i] = out[i].back();
    pos[i] = static_cast<int32_t>(prompts[i].size() + out[i].size() - 1);
  };
  if (fed > 0) {  // the sequences whose prompts the prefill took whole have their first token
    std::vector<bool> whole(b);
    for (size_t i = 0; i < b; ++i) whole[i] = static_cast<int64_t>(prompts[i].size()) <= fed;
    if (!take(next, whole)) return out;
  }
  // From here step s draws with the key it has when no prefill runs (a prefill of an attention
  // model keeps its own keys, from 0).
  if (recurrent_ || fed < longest) counter = static_cast<int32_t>(fed);
  if (fed < longest) {
    // The prompt tokens from `fed` on through the decode program; the sequences with shorter
    // prompts start generating meanwhile (a sequence's sampled token is new from its last prompt
    // token on).
    for (int64_t s = fed; s < longest; ++s) {
      std::vector<int32_t> ids(b, 0), pos(b, 0);
      std::vector<bool> fresh(b, false);
      for (size_t i = 0; i < b; ++i) {
        const auto len = static_cast<int64_t>(prompts[i].size());
        if (s < len) {
          ids[i] = prompts[i][static_cast<size_t>(s)];
          pos[i] = static_cast<int32_t>(s);
        } else if (active[i]) {
          newest(i, ids, pos);
        }
        fresh[i] = s + 1 >= len;
      }
      next = decode.run({{"ids", ids}, {"pos", pos}, {"params", params}, {"key", key()}}).i32();
      ++counter;
      if (!take(next, fresh)) return out;
    }
  }
  while (std::any_of(active.begin(), active.end(), [](bool a) { return a; })) {
    // Feed each active sequence's newest token at its position; a finished one idles at 0.
    std::vector<int32_t> ids(b, 0), pos(b, 0);
    for (size_t i = 0; i < b; ++i)
      if (active[i]) newest(i, ids, pos);
    ++counter;
    next = decode.run({{"ids", ids}, {"pos", pos}, {"params", params}, {"key", key()}}).i32();
    if (!take(next, std::vector<bool>(b, true))) return out;
  }
  return out;
}

int64_t Generator::prefilled(const std::vector<std::vector<int32_t>>& prompts) const {
  if (!options_.prefill) return 0;
  size_t longest = 0, shortest = prompts.front().size();
  for (const auto& prompt : prompts) {
    longest = std::max(longest, prompt.size());
    shortest = std::min(shortest, prompt.size());
  }
  if (!recurrent_) return static_cast<int64_t>(longest);
  const int64_t p = options_.prefill_len;
  return static_cast<int64_t>(shortest) / p * p;
}

Generator::BeamPrograms Generator::compile_beam_programs() {
  const GeneratorOptions& o = options_;
  const int64_t b = o.batch, p = o.prefill_len, cache = o.cache_len;
  const ForwardOptions base{.device = o.device, .precision = o.precision};
  BeamPrograms out;
  if (o.prefill) {
    ForwardOptions pre = base;
    pre.inputs = {{"ids", {b, p}, DType::kI32}, {"pos", {b}, DType::kI32}, {"last", {b}, DType::kI32}};
    out.prefill = compile_forward(
        *model_,
        [&](Tensor ids, Tensor pos, Tensor last) {
          const Tensor logits = step_(ids, pos, cache);  // [B, P, V]
          const Tensor row = take_along_axis(logits, reshape(last, {b, 1, 1}), 1);
          return log_softmax(cast(reshape(row, {b, logits.shape()[2]}), DType::kF32));
        },
        pre);
  }
  ForwardOptions dec = base;
  dec.inputs = {{"ids", {b, 1}, DType::kI32}, {"pos", {b}, DType::kI32}};
  out.decode = compile_forward(
      *model_,
      [&](Tensor ids, Tensor pos) {
        const Tensor logits = step_(ids, pos, cache);  // [B, 1, V]
        return log_softmax(cast(reshape(logits, {b, logits.shape().back()}), DType::kF32));
      },
      dec);
  out.reorder = detail::compile_reorder(*model_, out.decode, b, o.device);
  return out;
}

std::vector<std::vector<BeamHypothesis>> Generator::beam_search(
    const std::vector<std::vector<int32_t>>& prompts, const BeamSearchOptions& options) {
  options.check();
  const GeneratorOptions& o = options_;
  const int64_t b = o.batch, p = o.prefill_len, cache = o.cache_len;
  const auto count = static_cast<int64_t>(prompts.size());
  if (count == 0 || b % count != 0)
    throw InputError("[beam_search] this Generator decodes " + std::to_string(b) +
                     " rows: " + std::to_string(prompts.size()) +
                     " prompt(s) do not share them out (beams = batch / prompts)");
  const int64_t beams = b / count;
  const int64_t longest = longest_prompt(prompts, cache, "beam_search");
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto len = static_cast<int64_t>(prompts[i].size());
    if ((!o.prefill || recurrent_) && len != static_cast<int64_t>(prompts[0].size()))
      throw InputError(
          "[beam_search] a recurrent model (or GeneratorOptions::prefill false) searches prompts of "
          "one length at a time: prompt " +
          std::to_string(i) + " has " + std::to_string(len) + " tokens, prompt 0 " +
          std::to_string(prompts[0].size()));
  }
  const int64_t fed = prefilled(prompts);
  if (!beam_) beam_ = compile_beam_programs();
  BeamPrograms& run = *beam_;
  run.decode.reset_state();
  BeamSearchOptions bounded = options;  // the last token needs no position of its own
  bounded.max_new_tokens = std::min(options.max_new_tokens, cache - longest + 1);
  const auto rows = static_cast<size_t>(b);
  const auto prompt_of = [&](size_t row) -> const std::vector<int32_t>& {
    return prompts[row / size_t(beams)];
  };
  detail::BeamModel model;
  model.beams = beams;
  model.prompts = count;
  model.next = [&](const std::vector<int32_t>& tokens, int64_t step) {
    HostTensor out;
    if (step > 0) {  // each row's newest token at its position
      std::vector<int32_t> pos(rows);
      for (size_t i = 0; i < rows; ++i) pos[i] = static_cast<int32_t>(prompt_of(i).size() + size_t(step) - 1);
      out = run.decode.run({{"ids", tokens}, {"pos", pos}});
    } else {  // the prompts in windows, as generate() runs them, each in its beams' rows
      for (int64_t c = 0; c * p < fed; ++c) {
        std::vector<int32_t> ids(rows * static_cast<size_t>(p), 0), pos(rows), last(rows);
        for (size_t i = 0; i < rows; ++i) window_row(prompt_of(i), c, p, i, ids, pos, last);
        out = run.prefill.run({{"ids", ids}, {"pos", pos}, {"last", last}});
      }
      // the rest of the prompts (of one length) one token at a time
      for (auto t = static_cast<size_t>(fed); t < prompts[0].size(); ++t) {
        std::vector<int32_t> ids(rows);
        for (size_t i = 0; i < rows; ++i) ids[i] = prompt_of(i)[t];
        out = run.decode.run({{"ids", ids}, {"pos", std::vector<int32_t>(rows, static_cast<int32_t>(t))}});
      }
    }
    return std::move(out).f32();
  };
  model.reorder = [&](const std::vector<int32_t>& parents) { run.reorder.run({{"parents", parents}}); };
  return detail::beam_search(model, bounded);
}

std::vector<BeamHypothesis> Generator::beam_search(const std::vector<int32_t>& prompt,
                                                   const BeamSearchOptions& options) {
  return beam_search(std::vector<std::vector<int32_t>>{prompt}, options).front();
}

void Generator::prepare(const GenerateOptions& options) {
  if (options.repetition_penalty != 1 && !penalised_) penalised_ = compile_programs(true);
}

std::vector<int32_t> Generator::generate(const std::vector<int32_t>& prompt, const GenerateOptions& options) {
  if (options_.batch != 1)
    throw InputError("[generate] one prompt given to a Generator of batch " + std::to_string(options_.batch) +
                     "; pass one prompt per sequence");
  return generate(std::vector<std::vector<int32_t>>{prompt}, options).front();
}

}  // namespace tg
