// The Unigram model's encoding of one word (see tokenizer_impl.h). The segmentation is
// `tokenizers`' (and SentencePiece's) Viterbi pass: at each character boundary, every vocabulary
// piece starting there, shortest first, offers its end the best score so far plus its own, and a
// later piece replaces an earlier one only with a strictly higher total; a character that no
// single-character piece covers is offered as unk with min_score − 10.
#include <algorithm>

#include "tensorgrad/errors.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace tg {

std::vector<int32_t> Tokenizer::Impl::unigram_ids(std::string_view word) const {
  constexpr double kUnkPenalty = 10.0;
  struct Node {
    int32_t id = -1;
    double score = 0;
    int64_t from = -1;  // where the best path's last piece starts; -1: not reached
  };
  const size_t n = word.size();
  std::vector<Node> best(n + 1);
  best[0].from = 0;
  const double unk_score = min_score - kUnkPenalty;
  std::string piece;
  for (const text::Unit& u : text::decode_utf8(word)) {
    const size_t at = u.offset;
    const double here = best[at].score;
    bool single = false;
    for (size_t len = 1; len <= max_piece_bytes && at + len <= n; ++len) {
      piece.assign(word.substr(at, len));
      const auto it = ids.find(piece);
      if (it == ids.end()) continue;
      Node& target = best[at + len];
      const double score = here + scores[static_cast<size_t>(it->second)];
      if (target.from < 0 || score > target.score) target = {it->second, score, static_cast<int64_t>(at)};
      single = single || len == u.size;
    }
    if (!single) {
      Node& target = best[at + u.size];
      const double score = here + unk_score;
      if (target.from < 0 || score > target.score) {
        if (!unk_id)  // as `tokenizers`, whether or not byte_fallback would spell it
          throw TokenizerError("[Tokenizer::encode] " + file + ": \"" + std::string(word.substr(at, u.size)) +
                               "\" has no piece of its own and the Unigram model has no unk_id");
        target = {*unk_id, score, static_cast<int64_t>(at)};
      }
    }
  }
  // Back from the end: each piece's id, a run of unknown characters fused into one string that is
  // looked up whole, then spelled as <0xXX> pieces (byte_fallback) or unk, as `tokenizers` does.
  std::vector<int32_t> out;
  const auto unknown = [&](std::string_view text) {
    const size_t first = out.size();
    if (auto it = ids.find(std::string(text)); it != ids.end()) {
      out.push_back(it->second);
    } else if (byte_fallback && std::all_of(text.begin(), text.end(),
                                            [&](char c) { return byte_ids[static_cast<uint8_t>(c)] >= 0; })) {
      for (char c : text) out.push_back(byte_ids[static_cast<uint8_t>(c)]);
    } else {
      out.push_back(*unk_id);  // set: an unknown node needs it (above)
    }
    std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());  // reversed with the rest
  };
  size_t fused_from = std::string_view::npos, fused_end = 0;
  for (size_t end = n; end > 0;) {
    const Node& node = best[end];
    const auto from = static_cast<size_t>(node.from);
    if (unk_id && node.id == *unk_id) {
      if (fused_from == std::string_view::npos) fused_end = end;
      fused_from = from;
    } else {
      if (fused_from != std::string_view::npos) unknown(word.substr(fused_from, fused_end - fused_from));
      fused_from = std::string_view::npos;
      out.push_back(node.id);
    }
    end = from;
  }
  if (fused_from != std::string_view::npos) unknown(word.substr(fused_from, fused_end - fused_from));
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace tg
