// The normalizer steps of Tokenizer::Impl (tokenizer_impl.h), applied in the file's order: those
// of SentencePiece Unigram files (Precompiled, Strip, Replace of " {2,}"), NFC, and CLIP's
// Replace of "\s+" and Lowercase. Whitespace is \s of the `tokenizers` regexes (Unicode
// White_Space, as Oniguruma has it), as char_class tells.
#include "text/bert_normalize.h"
#include "text/nfc.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace tg {
namespace {

using Step = Tokenizer::Impl::NormalizeStep;

bool is_space(const text::Unit& u) { return u.cls == text::CharClass::kSpace; }

// Each run of two or more " " replaced by `content` (the regex " {2,}").
std::string replace_space_runs(const std::string& text, const std::string& content) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    size_t j = i;
    while (j < text.size() && text[j] == ' ') ++j;
    if (j - i >= 2) {
      out += content;
    } else if (j > i) {
      out += ' ';
    } else {
      out += text[j++];
    }
    i = j;
  }
  return out;
}

// Each run of one or more whitespace characters replaced by `content` (the regex "\s+").
std::string replace_whitespace_runs(const std::string& text, const std::string& content) {
  std::string out;
  bool in_run = false;
  for (const text::Unit& u : text::decode_utf8(text)) {
    if (is_space(u)) {
      if (!in_run) out += content;
      in_run = true;
    } else {
      out.append(text, u.offset, u.size);
      in_run = false;
    }
  }
  return out;
}

}  // namespace

std::string Tokenizer::Impl::apply_normalize_steps(std::string_view s) const {
  std::string text(s);
  for (const NormalizeStep& step : normalize_steps) {
    switch (step.kind) {
      case Step::Kind::kPrecompiled: text = step.charsmap->normalize(text); break;
      case Step::Kind::kStrip: text = text::trim(text, step.left, step.right); break;
      case Step::Kind::kReplaceSpaceRuns: text = replace_space_runs(text, step.content); break;
      case Step::Kind::kNfc: text = text::nfc(text); break;
      case Step::Kind::kReplaceWhitespaceRuns: text = replace_whitespace_runs(text, step.content); break;
      case Step::Kind::kLowercase: text = text::lowercase(text); break;
    }
  }
  return text;
}

}  // namespace tg
