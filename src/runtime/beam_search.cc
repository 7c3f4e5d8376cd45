// Beam search (beam_search.h): the bookkeeping of transformers 5's generate(num_beams = N,
// do_sample = False) for one prompt, and the program that reorders a model's caches.
//
// A step scores every continuation of every running beam, acc = score[b] + log p(t | beam b),
// and keeps the best K = max(2, 1 + stop tokens) · N of them. A continuation "ends" when its
// token is a stop token or it is the last token allowed. Among the best N continuations, those
// that end become finished hypotheses scored acc / (new tokens)^length_penalty, and the best N of
// all finished ones are kept; the best N continuations that do not end run on (an ended one
// scores −1e9 there, as in transformers, so it runs on only when nothing else can). The search
// stops when every kept continuation ended, when (BeamStop::kFull) N hypotheses have finished,
// or when the best running beam, scored at its length, cannot beat the worst of N finished ones.
#include "runtime/beam_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>
#include <string>

#include "ir/graph.h"
#include "ir/trace.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/functional.h"

namespace tg {

void BeamSearchOptions::check() const {
  if (max_new_tokens < 1)
    throw InputError("[beam_search] max_new_tokens must be at least 1, got " +
                     std::to_string(max_new_tokens));
  if (!std::isfinite(length_penalty))
    throw InputError("[beam_search] length_penalty must be finite, got " + std::to_string(length_penalty));
}

namespace detail {
namespace {

constexpr float kNone = -1.0e9f;  // transformers' score of a beam or slot that is not there

struct Candidate {
  int64_t parent;
  int32_t token;
  float acc;
  bool ends, stopped;  // ends: by a stop token (stopped) or at the length limit
};

// The best k continuations of the running beams, best first (ties: the lower beam, then token):
// one pass over the beams × vocabulary sums, keeping the k best in order.
std::vector<Candidate> best_continuations(const std::vector<float>& logp, const std::vector<float>& score,
                                          int64_t vocab, int64_t k, int64_t length,
                                          const BeamSearchOptions& o) {
  const auto n = static_cast<int64_t>(score.size());
  std::vector<std::pair<float, int64_t>> best;  // (sum, beam · vocab + token), best first
  best.reserve(static_cast<size_t>(k + 1));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t t = 0; t < vocab; ++t) {
      const float l = logp[size_t(b * vocab + t)];
      if (std::isnan(l))
        throw Error("[beam_search] the model gave a NaN log-probability (beam " + std::to_string(b) + ")");
      const float acc = l + score[size_t(b)];
      if (static_cast<int64_t>(best.size()) == k && !(acc > best.back().first))
        continue;  // later index loses ties
      auto at = best.end();
      while (at != best.begin() && (at - 1)->first < acc) --at;
      best.insert(at, {acc, b * vocab + t});
      if (static_cast<int64_t>(best.size()) > k) best.pop_back();
    }
  std::vector<Candidate> out;
  for (const auto& [acc, at] : best) {
    const auto token = static_cast<int32_t>(at % vocab);
    const bool stopped = std::find(o.stop_tokens.begin(), o.stop_tokens.end(), token) != o.stop_tokens.end();
    out.push_back({at / vocab, token, acc, stopped || length >= o.max_new_tokens, stopped});
  }
  return out;
}

}  // namespace

namespace {

// One prompt's search: its running beams and finished hypotheses.
class Search {
 public:
  Search(int64_t beams, const BeamSearchOptions& o)
      : n_(beams), o_(o), seqs_(static_cast<size_t>(beams)), score_(static_cast<size_t>(beams), kNone) {
    score_[0] = 0;  // one beam at first: the others would repeat it
  }

  // One step over the beams' log-probabilities `logp` [beams, vocab] with k continuations kept:
  // the next tokens and (local) parents of the running beams; false when the search is over.
  bool step(const std::vector<float>& logp, int64_t vocab, int64_t k, int64_t length,
            std::vector<int32_t>& tokens, std::vector<int32_t>& parents) {
    const std::vector<Candidate> cands = best_continuations(logp, score_, vocab, k, length, o_);
    finish(cands, length);
    // Running: the best n continuations, an ended one scored −1e9 lower.
    std::vector<size_t> order(cands.size());
    std::iota(order.begin(), order.end(), 0);
    const auto running_score = [&](size_t i) { return cands[i].acc + (cands[i].ends ? kNone : 0.0f); };
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return running_score(a) > running_score(b); });
    std::vector<std::vector<int32_t>> next_seqs;
    tokens.clear();
    parents.clear();
    for (int64_t i = 0; i < n_; ++i) {
      const Candidate& c = cands[order[size_t(i)]];
      next_seqs.push_back(seqs_[size_t(c.parent)]);
      next_seqs.back().push_back(c.token);
      score_[size_t(i)] = running_score(order[size_t(i)]);
      parents.push_back(static_cast<int32_t>(c.parent));
      tokens.push_back(c.token);
    }
    seqs_ = std::move(next_seqs);
    // Can a running beam still beat the worst finished hypothesis?
    const double best_length =
        o_.stop == BeamStop::kNever && o_.length_penalty > 0 ? double(o_.max_new_tokens) : double(length);
    const float best = score_[0] / static_cast<float>(std::pow(best_length, o_.length_penalty));
    const bool full = static_cast<int64_t>(finished_.size()) == n_;
    improvable_ = improvable_ && best > (full ? finished_.back().score : kNone);
    const bool all_end = std::all_of(cands.begin(), cands.end(), [](const Candidate& c) { return c.ends; });
    return improvable_ && !(full && o_.stop == BeamStop::kFull) && !all_end;
  }

  std::vector<BeamHypothesis>& finished() { return finished_; }

 private:
  // The continuations that end among the best n join the finished hypotheses, while they can
  // still count.
  void finish(const std::vector<Candidate>& cands, int64_t length) {
    const bool full = static_cast<int64_t>(finished_.size()) == n_;
    if (!improvable_ || (full && o_.stop == BeamStop::kFull)) return;
    for (int64_t i = 0; i < n_; ++i) {
      const Candidate& c = cands[size_t(i)];
      if (!c.ends) continue;
      // transformers divides the f32 sum by the f32 of a double power.
      BeamHypothesis h{seqs_[size_t(c.parent)],
                       c.acc / static_cast<float>(std::pow(double(length), o_.length_penalty)), c.stopped};
      if (h.score < kNone) continue;  // an ended beam's descendant: an empty slot beats it
      if (!c.stopped) h.tokens.push_back(c.token);
      // After the equal scores already kept, as transformers' top-k over (kept, new) finds them.
      const auto at = std::upper_bound(finished_.begin(), finished_.end(), h.score,
                                       [](float s, const BeamHypothesis& x) { return s > x.score; });
      finished_.insert(at, std::move(h));
      if (static_cast<int64_t>(finished_.size()) > n_) finished_.pop_back();
    }
  }

  int64_t n_;
  const BeamSearchOptions& o_;
  std::vector<std::vector<int32_t>> seqs_;
  std::vector<float> score_;
  std::vector<BeamHypothesis> finished_;  // at most n, best first
  bool improvable_ = true;
};

}  // namespace

std::vector<std::vector<BeamHypothesis>> beam_search(const BeamModel& m, const BeamSearchOptions& o) {
  o.check();
  const int64_t n = m.beams, rows = m.prompts * m.beams;
  std::vector<float> logp = m.next({}, 0);
  const auto v = static_cast<int64_t>(logp.size()) / rows;  // the vocabulary
  const int64_t k = std::min(std::max<int64_t>(2, 1 + static_cast<int64_t>(o.stop_tokens.size())) * n, n * v);
  std::vector<Search> searches;
  for (int64_t p = 0; p < m.prompts; ++p) searches.emplace_back(n, o);
  std::vector<bool> running(static_cast<size_t>(m.prompts), true);
  // Every row's newest token and the row it continues (a finished search's rows idle in place).
  std::vector<int32_t> tokens(static_cast<size_t>(rows), 0), parents(static_cast<size_t>(rows));
  std::vector<int32_t> local_tokens, local_parents;
  for (int64_t step = 0;; ++step) {
    std::iota(parents.begin(), parents.end(), 0);
    for (int64_t p = 0; p < m.prompts; ++p) {
      if (!running[size_t(p)]) continue;
      const std::vector<float> rows_of(logp.begin() + p * n * v, logp.begin() + (p + 1) * n * v);
      running[size_t(p)] = searches[size_t(p)].step(rows_of, v, k, step + 1, local_tokens, local_parents);
      for (int64_t i = 0; i < n; ++i) {
        tokens[size_t(p * n + i)] = local_tokens[size_t(i)];
        parents[size_t(p * n + i)] = static_cast<int32_t>(p * n) + local_parents[size_t(i)];
      }
    }
    if (std::none_of(running.begin(), running.end(), [](bool r) { return r; })) break;
    bool moved = false;  // beams that kept their places need no copy of the caches
    for (size_t i = 0; i < parents.size(); ++i) moved = moved || parents[i] != static_cast<int32_t>(i);
    if (moved) m.reorder(parents);
    logp = m.next(tokens, step + 1);
  }
  std::vector<std::vector<BeamHypothesis>> out;
  for (Search& search : searches) out.push_back(std::move(search.finished()));
  return out;
}

Program compile_reorder(Module& model, const Program& with, int64_t rows, const Device& device) {
  struct Cache {
    std::string name;
    Shape shape;
    DType dtype;
    double initial;
  };
  // The states `with` assigns: its caches (read-only states, such as an encoder's memory that the
  // same source gave every row, need no reordering).
  std::vector<Cache> caches;
  const ir::Graph& g = compiled_graph(with);
  const std::string prefix = ir::kUserStatePrefix;
  for (const ir::Graph::Update& u : g.updates) {
    const ir::Node& n = g.node(u.target);
    if (n.op != ir::Op::kState || n.name.rfind(prefix, 0) != 0) continue;
    const std::string name = n.name.substr(prefix.size());
    if (n.shape.empty() || n.shape[0] != rows)
      throw Error("[beam_search] the cache '" + name + "' is " + shape_str(n.shape) + ": a cache of " +
                  std::to_string(rows) + " beams must have them on its first axis");
    caches.push_back({name, n.shape, n.dtype, n.attrs.values.empty() ? 0.0 : n.attrs.values[0]});
  }
  return compile_forward(model,
                         [&](Tensor parents) {
                           for (const Cache& c : caches) {
                             const Tensor s = state(c.name, c.shape, c.dtype, c.initial);
                             assign(s, reshape(embedding(reshape(s, {rows, -1}), parents), c.shape));
                           }
                           return cast(parents, DType::kF32);
                         },
                         {.inputs = {{"parents", {rows}, DType::kI32}}, .device = device});
}

}  // namespace detail
}  // namespace tg
