// tg::T5Generator: sampled or greedy decoding with nn::T5 (see tensorgrad/t5.h).
#include <algorithm>
#include <string>

#include "runtime/beam_search.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/t5.h"

namespace tg {

T5Generator::T5Generator(nn::T5& model, T5GeneratorOptions o)
    : config_(model.config), options_(o), model_(&model) {
  if (!model.config.decoder) throw Error("[T5Generator] the model has no decoder (T5EncoderModel)");
  if (o.batch <= 0 || o.source_len <= 0 || o.max_new_tokens <= 0)
    throw InputError("[T5Generator] batch, source_len and max_new_tokens must be positive");
  if (o.precision == Precision::kF16)
    throw InputError("[T5Generator] Precision::kF16: T5's activations overflow f16 (use kBf16 or kFp32)");
  const int64_t B = o.batch, S = o.source_len, T = o.max_new_tokens + 1, V = model.config.vocab;
  encoder_ = compile_forward(model,
                             [&](Tensor ids, Tensor mask) {
                               // The states are what this program is for; its output is one position of each
                               // sequence's states (not the whole [B, S, d], which every call would copy to
                               // the host for nothing).
                               return slice(model.remember(model.encode(ids, mask), mask), 1, 0, 1, 1);
                             },
                             {.inputs = {{"ids", {B, S}, DType::kI32}, {"mask", {B, S}, DType::kI32}},
                              .device = o.device,
                              .precision = o.precision});
  // One token per sequence at position pos[b] (the caches hold the start token and T − 1 more).
  decoder_ = compile_forward(model,
                             [&](Tensor ids, Tensor pos, Tensor params, Tensor key) {
                               const Tensor logits = model.logits_cached(ids, pos, T, S);  // [B, 1, V]
                               return sample(reshape(logits, {B, V}), params, key);
                             },
                             {.inputs = {{"ids", {B, 1}, DType::kI32},
                                         {"pos", {B}, DType::kI32},
                                         {"params", {4}, DType::kF32},
                                         {"key", {2}, DType::kI32}},
                              .device = o.device,
                              .precision = o.precision});
}

std::vector<std::vector<int32_t>> T5Generator::generate(const std::vector<std::vector<int32_t>>& sources,
                                                        const GenerateOptions& options) {
  options.check();
  if (options.repetition_penalty != 1)
    throw InputError("[T5Generator] a repetition penalty is not implemented (repetition_penalty must be 1)");
  const T5GeneratorOptions& o = options_;
  const auto B = static_cast<size_t>(o.batch);
  const auto S = static_cast<size_t>(o.source_len);
  if (sources.size() != B)
    throw InputError("[T5Generator] this generator decodes " + std::to_string(B) +
                     " source(s) at once; got " + std::to_string(sources.size()));
  std::vector<int32_t> ids(B * S, config_.pad_id), mask(B * S, 0);
  for (size_t b = 0; b < B; ++b) {
    if (sources[b].empty() || sources[b].size() > S)
      throw InputError("[T5Generator] source " + std::to_string(b) + " has " +
                       std::to_string(sources[b].size()) + " tokens; 1 to source_len = " + std::to_string(S) +
                       " fit");
    std::copy(sources[b].begin(), sources[b].end(), ids.begin() + static_cast<std::ptrdiff_t>(b * S));
    std::fill_n(mask.begin() + static_cast<std::ptrdiff_t>(b * S), sources[b].size(), 1);
  }
  encoder_.run({{"ids", ids}, {"mask", mask}});
  const std::vector<int32_t> stops =
      options.stop_tokens.empty() ? std::vector<int32_t>{config_.eos_id} : options.stop_tokens;
  const std::vector<float> params{options.temperature, static_cast<float>(options.top_k), options.top_p,
                                  options.min_p};
  const auto steps = static_cast<size_t>(std::min<int64_t>(options.max_new_tokens, o.max_new_tokens));
  std::vector<int32_t> last(B, config_.start_id);
  std::vector<std::vector<int32_t>> out(B);
  std::vector<bool> active(B, steps > 0);
  for (size_t t = 0; t < steps && std::count(active.begin(), active.end(), true) > 0; ++t) {
    const std::vector<int32_t> pos(B, static_cast<int32_t>(t));
    const std::vector<int32_t> key{static_cast<int32_t>(options.seed), static_cast<int32_t>(t)};
    const HostTensor next = decoder_.run({{"ids", last}, {"pos", pos}, {"params", params}, {"key", key}});
    for (size_t b = 0; b < B; ++b) {
      if (!active[b]) continue;
      const int32_t token = next.i32()[b];
      if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
        active[b] = false;
        continue;
      }
      last[b] = token;
      out[b].push_back(token);
      if (options.on_token && !options.on_token(static_cast<int64_t>(b), token)) return out;
    }
  }
  return out;
}

std::vector<std::vector<BeamHypothesis>> T5Generator::beam_search(
    const std::vector<std::vector<int32_t>>& sources, BeamSearchOptions options) {
  options.check();
  const T5GeneratorOptions& o = options_;
  const int64_t B = o.batch, S = o.source_len, T = o.max_new_tokens + 1, V = config_.vocab;
  const auto count = static_cast<int64_t>(sources.size());
  if (count == 0 || B % count != 0)
    throw InputError("[T5Generator] this generator decodes " + std::to_string(B) +
                     " rows: " + std::to_string(sources.size()) +
                     " source(s) do not share them out (beams = batch / sources)");
  for (size_t i = 0; i < sources.size(); ++i)
    if (sources[i].empty() || static_cast<int64_t>(sources[i].size()) > S)
      throw InputError("[T5Generator] source " + std::to_string(i) + " has " +
                       std::to_string(sources[i].size()) + " tokens; 1 to source_len = " + std::to_string(S) +
                       " fit");
  if (!beam_decoder_) {  // the step ending in log-probabilities, and the cache reordering
    nn::T5& model = *model_;
    beam_decoder_ = compile_forward(
        model,
        [&](Tensor ids, Tensor pos) {
          return log_softmax(cast(reshape(model.logits_cached(ids, pos, T, S), {B, V}), DType::kF32));
        },
        {.inputs = {{"ids", {B, 1}, DType::kI32}, {"pos", {B}, DType::kI32}},
         .device = o.device,
         .precision = o.precision});
    beam_reorder_ = detail::compile_reorder(model, *beam_decoder_, B, o.device);
  }
  const auto rows = static_cast<size_t>(B), beams = static_cast<size_t>(B / count);
  std::vector<int32_t> ids(rows * static_cast<size_t>(S), config_.pad_id), mask(ids.size(), 0);
  for (size_t r = 0; r < rows; ++r) {  // each source in its beams' rows
    const std::vector<int32_t>& source = sources[r / beams];
    std::copy(source.begin(), source.end(),
              ids.begin() + static_cast<std::ptrdiff_t>(r * static_cast<size_t>(S)));
    std::fill_n(mask.begin() + static_cast<std::ptrdiff_t>(r * static_cast<size_t>(S)), source.size(), 1);
  }
  encoder_.run({{"ids", ids}, {"mask", mask}});
  if (options.stop_tokens.empty()) options.stop_tokens = {config_.eos_id};
  options.max_new_tokens = std::min(options.max_new_tokens, o.max_new_tokens);
  detail::BeamModel m;
  m.beams = B / count;
  m.prompts = count;
  m.next = [&](const std::vector<int32_t>& tokens, int64_t step) {
    const std::vector<int32_t> pos(rows, static_cast<int32_t>(step));
    return beam_decoder_
        ->run({{"ids", step == 0 ? std::vector<int32_t>(rows, config_.start_id) : tokens}, {"pos", pos}})
        .f32();
  };
  m.reorder = [&](const std::vector<int32_t>& parents) { beam_reorder_->run({{"parents", parents}}); };
  return detail::beam_search(m, options);
}

std::vector<BeamHypothesis> T5Generator::beam_search(const std::vector<int32_t>& source,
                                                     BeamSearchOptions options) {
  return beam_search(std::vector<std::vector<int32_t>>{source}, std::move(options)).front();
}

}  // namespace tg
