// Beam search (generate.h's BeamSearchOptions) over any cached model: the host bookkeeping of
// running beams and finished hypotheses, and the program that reorders a model's caches when
// beams trade places. tg::Generator and tg::T5Generator drive it.
#pragma once
#include <functional>
#include <vector>

#include "tensorgrad/generate.h"

namespace tg::detail {

/// The model a beam search drives: `prompts` × `beams` rows decoded together, prompt p's beams in
/// rows p·beams … (p + 1)·beams − 1.
struct BeamModel {
  int64_t beams = 1, prompts = 1;
  /// Log-probabilities [rows, vocab] of each row's next token: at step 0 after the prompts
  /// (`tokens` empty; a prompt's beams the same), then after feeding row i its newest token
  /// tokens[i] (a finished search's rows are fed their last token again and ignored).
  std::function<std::vector<float>(const std::vector<int32_t>& tokens, int64_t step)> next;
  /// Row i continues from row parents[i]: its caches become that row's.
  std::function<void(const std::vector<int32_t>& parents)> reorder;
};

/// Hugging Face's beam search (transformers 5's generate with num_beams, do_sample = False) over
/// `model`: each prompt's finished hypotheses, best first. Scores are summed in f32 as there.
std::vector<std::vector<BeamHypothesis>> beam_search(const BeamModel& model,
                                                     const BeamSearchOptions& options);

/// A program of `model` on `device` with one input, "parents" i32 [rows]: every state `with`
/// assigns (its caches, each with the beams on its first axis, else an Error) gets row
/// parents[i] as its row i, on the device. States `with` only reads are left alone.
Program compile_reorder(Module& model, const Program& with, int64_t rows, const Device& device);

}  // namespace tg::detail
