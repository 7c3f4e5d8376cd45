// tg::WhisperGenerator: transcription with nn::Whisper (see tensorgrad/whisper.h).
#include <algorithm>
#include <limits>
#include <string>

#include "tensorgrad/errors.h"
#include "tensorgrad/whisper.h"

namespace tg {

WhisperGenerator::WhisperGenerator(nn::Whisper& model, WhisperTokens tokens, LogMelFeatures features,
                                   WhisperGeneratorOptions o)
    : config_(model.config), tokens_(std::move(tokens)), features_(features), options_(o) {
  const nn::WhisperConfig& c = model.config;
  if (o.batch <= 0) throw InputError("[WhisperGenerator] batch must be positive");
  if (features.n_mels != c.mels || features.frames() != 2 * c.source_positions)
    throw InputError("[WhisperGenerator] the features are " + std::to_string(features.n_mels) +
                     " mel bins × " + std::to_string(features.frames()) + " frames; the model reads " +
                     std::to_string(c.mels) + " × " + std::to_string(2 * c.source_positions));
  // Every id the steps feed or mask (the masks index their rows by these ids).
  std::vector<int32_t> ids{tokens_.start, tokens_.eos, tokens_.no_timestamps};
  if (tokens_.multilingual()) ids.insert(ids.end(), {tokens_.transcribe, tokens_.translate});
  for (const auto& [code, id] : tokens_.languages) ids.push_back(id);
  ids.insert(ids.end(), tokens_.suppress.begin(), tokens_.suppress.end());
  ids.insert(ids.end(), tokens_.begin_suppress.begin(), tokens_.begin_suppress.end());
  for (const int32_t id : ids)
    if (id < 0 || id >= c.vocab)
      throw InputError("[WhisperGenerator] the token " + std::to_string(id) +
                       " of the WhisperTokens is outside the vocabulary of " + std::to_string(c.vocab));
  if (!tokens_.forced_language.empty() && !tokens_.languages.count(tokens_.forced_language))
    throw InputError("[WhisperGenerator] the pinned language \"" + tokens_.forced_language +
                     "\" is not one of the model's");
  const int64_t B = o.batch, V = c.vocab, L = c.target_positions;
  // The states are what this program is for; its output is one position of each clip's encoder
  // states (not the whole [B, S, d], which every window would copy to the host for nothing).
  encoder_ =
      compile_forward(model, [&](Tensor f) { return slice(model.remember(model.encode(f)), 1, 0, 1, 1); },
                      {.inputs = {{"features", {B, c.mels, 2 * c.source_positions}}},
                       .device = o.device,
                       .precision = o.precision});
  // One token per sequence: the next one sampled from the logits plus `bias` (0, or the lowest
  // float for a token that must not come next).
  step_ = compile_forward(model,
                          [&](Tensor ids, Tensor pos, Tensor bias, Tensor params, Tensor key) {
                            const Tensor logits = reshape(model.logits_cached(ids, pos, L), {B, V});
                            return sample(add(logits, bias), params, key);
                          },
                          {.inputs = {{"ids", {B, 1}, DType::kI32},
                                      {"pos", {B}, DType::kI32},
                                      {"bias", {B, V}, DType::kF32},
                                      {"params", {4}, DType::kF32},
                                      {"key", {2}, DType::kI32}},
                           .device = o.device,
                           .precision = o.precision});
}

namespace {
// The languages a call transcribes in: the one it names, else the model's pinned one, else "" (detect).
std::vector<std::string> languages_of(const TranscribeOptions& o, const WhisperTokens& t, size_t B) {
  return std::vector<std::string>(B, o.language.empty() ? t.forced_language : o.language);
}
}  // namespace

std::vector<Transcript> WhisperGenerator::transcribe(std::span<const Audio> clips,
                                                     const TranscribeOptions& options) {
  const auto B = static_cast<size_t>(options_.batch);
  if (clips.size() != B)
    throw InputError("[WhisperGenerator] this generator transcribes " + std::to_string(B) +
                     " clip(s) at once; got " + std::to_string(clips.size()));
  const auto N = static_cast<size_t>(features_.n_samples());
  size_t windows = 1;
  for (const Audio& a : clips) windows = std::max(windows, (a.samples.size() + N - 1) / N);
  std::vector<Transcript> out(B);
  std::vector<std::string> languages = languages_of(options, tokens_, B);
  std::vector<Audio> window(B);
  for (size_t w = 0; w < windows; ++w) {
    std::vector<bool> has(B);
    for (size_t b = 0; b < B; ++b) {
      const std::vector<float>& s = clips[b].samples;
      const size_t from = std::min(s.size(), w * N), to = std::min(s.size(), from + N);
      window[b].sample_rate = clips[b].sample_rate;
      window[b].samples.assign(s.begin() + static_cast<std::ptrdiff_t>(from),
                               s.begin() + static_cast<std::ptrdiff_t>(to));
      has[b] = to > from || w == 0;
    }
    bool stopped = false;
    TranscribeOptions o = options;
    if (options.on_token)  // a clip whose audio has ended reports nothing more
      o.on_token = [&](int64_t clip, int32_t token) {
        if (!has[static_cast<size_t>(clip)]) return true;
        stopped = !options.on_token(clip, token);
        return !stopped;
      };
    const auto key_base = static_cast<uint32_t>(w * static_cast<size_t>(config_.target_positions));
    const std::vector<Transcript> part = decode_window(features_(window), languages, o, key_base);
    for (size_t b = 0; b < B; ++b) {
      if (!has[b]) continue;
      if (w == 0) out[b].language = languages[b] = part[b].language;  // later windows keep the first's
      out[b].tokens.insert(out[b].tokens.end(), part[b].tokens.begin(), part[b].tokens.end());
    }
    if (stopped) break;
  }
  return out;
}

std::vector<Transcript> WhisperGenerator::transcribe_features(const HostTensor& features,
                                                              const TranscribeOptions& options) {
  return decode_window(features, languages_of(options, tokens_, static_cast<size_t>(options_.batch)), options,
                       0);
}

std::vector<Transcript> WhisperGenerator::decode_window(const HostTensor& features,
                                                        const std::vector<std::string>& languages,
                                                        const TranscribeOptions& options, uint32_t key_base) {
  const auto B = static_cast<size_t>(options_.batch);
  const auto V = static_cast<size_t>(config_.vocab);
  const Shape want{options_.batch, config_.mels, 2 * config_.source_positions};
  if (features.dtype() != DType::kF32 || features.shape() != want)
    throw InputError("[WhisperGenerator] input_features must be f32 " + shape_str(want) + ", got " +
                     dtype_name(features.dtype()) + shape_str(features.shape()));
  GenerateOptions{.temperature = options.temperature,
                  .top_k = options.top_k,
                  .top_p = options.top_p,
                  .min_p = options.min_p}
      .check();
  const std::string task = !options.task.empty()         ? options.task
                           : tokens_.forced_task.empty() ? "transcribe"
                                                         : tokens_.forced_task;
  if (task != "transcribe" && task != "translate")
    throw InputError("[WhisperGenerator] the task \"" + task + "\": transcribe or translate");
  if (!tokens_.multilingual() && (!options.language.empty() || task != "transcribe"))
    throw InputError("[WhisperGenerator] this model is English-only: no language and no task but transcribe");
  if (!options.language.empty() && !tokens_.languages.count(options.language)) {
    std::string codes;
    for (const auto& [code, id] : tokens_.languages) codes += (codes.empty() ? "" : ", ") + code;
    throw InputError("[WhisperGenerator] the language \"" + options.language +
                     "\" is not one of the model's: " + codes);
  }
  const int64_t P = tokens_.multilingual() ? 4 : 2, room = config_.target_positions - P;
  if (options.max_new_tokens < 1 || options.max_new_tokens > room)
    throw InputError("[WhisperGenerator] max_new_tokens " + std::to_string(options.max_new_tokens) +
                     ": 1 to " + std::to_string(room) + " fit the model's " +
                     std::to_string(config_.target_positions) + " positions after the prompt of " +
                     std::to_string(P));
  encoder_.run({{"features", features}});

  constexpr float kNever = std::numeric_limits<float>::lowest();
  const auto masked = [&](const std::vector<int32_t>& ids, std::vector<float> base) {
    for (size_t b = 0; b < B; ++b)
      for (const int32_t id : ids)
        base[b * V + static_cast<size_t>(id)] = kNever;  // ids checked at construction
    return base;
  };
  const std::vector<float> suppress = masked(tokens_.suppress, std::vector<float>(B * V, 0.0f));
  const std::vector<float> first = masked(tokens_.begin_suppress, suppress);
  const std::vector<float> greedy{0.0f, 0.0f, 1.0f, 0.0f};
  const std::vector<float> params{options.temperature, static_cast<float>(options.top_k), options.top_p,
                                  options.min_p};
  uint32_t calls = key_base;
  // One step: token ids[b] at position p for every sequence; the next token of each.
  const auto step = [&](const std::vector<int32_t>& ids, int32_t p, const std::vector<float>& bias,
                        const std::vector<float>& how) {
    const std::vector<int32_t> pos(B, p),
        key{static_cast<int32_t>(options.seed), static_cast<int32_t>(calls++)};
    return step_.run({{"ids", ids}, {"pos", pos}, {"bias", bias}, {"params", how}, {"key", key}}).i32();
  };

  std::vector<Transcript> out(B);
  std::vector<std::vector<int32_t>> prompt(B, std::vector<int32_t>{tokens_.start});
  int32_t p = 0;
  if (tokens_.multilingual()) {
    std::vector<int32_t> lang(B);
    for (size_t b = 0; b < B; ++b) lang[b] = languages[b].empty() ? -1 : tokens_.languages.at(languages[b]);
    if (std::count(lang.begin(), lang.end(), -1) >
        0) {  // detect: the likeliest language token after the start
      std::vector<float> only(B * V, kNever);
      for (size_t b = 0; b < B; ++b)
        for (const auto& [code, id] : tokens_.languages) only[b * V + static_cast<size_t>(id)] = 0.0f;
      const std::vector<int32_t> found = step(std::vector<int32_t>(B, tokens_.start), p++, only, greedy);
      for (size_t b = 0; b < B; ++b)
        if (lang[b] < 0) lang[b] = found[b];
    }
    for (size_t b = 0; b < B; ++b) {
      for (const auto& [code, id] : tokens_.languages)
        if (id == lang[b]) out[b].language = code;
      prompt[b].push_back(lang[b]);
      prompt[b].push_back(task == "translate" ? tokens_.translate : tokens_.transcribe);
    }
  }
  for (size_t b = 0; b < B; ++b) prompt[b].push_back(tokens_.no_timestamps);
  // The prompt's tokens (the last one's step samples the first new token, begin-suppressed).
  std::vector<int32_t> ids(B), next;
  for (; p < P; ++p) {
    for (size_t b = 0; b < B; ++b) ids[b] = prompt[b][static_cast<size_t>(p)];
    next = step(ids, p, p == P - 1 ? first : suppress, params);
  }
  std::vector<bool> active(B, true);
  for (int64_t t = 0;; ++t) {
    for (size_t b = 0; b < B; ++b) {
      if (!active[b]) continue;
      if (next[b] == tokens_.eos) {
        active[b] = false;
        continue;
      }
      out[b].tokens.push_back(next[b]);
      if (options.on_token && !options.on_token(static_cast<int64_t>(b), next[b])) return out;
    }
    if (t + 1 >= options.max_new_tokens || std::count(active.begin(), active.end(), true) == 0) break;
    for (size_t b = 0; b < B; ++b) ids[b] = active[b] ? next[b] : tokens_.eos;
    next = step(ids, p++, suppress, params);
  }
  return out;
}

}  // namespace tg
