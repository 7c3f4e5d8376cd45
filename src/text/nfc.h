// Unicode normalization forms C and D: NFC as the NFC normalizer of `tokenizers` applies it to
// text before pre-tokenization (Qwen2's and Qwen3's tokenizer.json have one), NFD as BERT's
// normalizer does before it strips accents.
#pragma once
#include <string>
#include <string_view>

namespace tg::text {

/// The NFC form of `s` (UAX #15: canonical decomposition, canonical ordering of combining
/// marks, canonical composition; Hangul by arithmetic). Bytes that are not valid UTF-8 are
/// kept as they are and block composition across them. ASCII text is returned unchanged.
std::string nfc(std::string_view s);

/// The NFD form of `s`: canonical decomposition (Hangul by arithmetic), then canonical ordering
/// of combining marks; invalid bytes kept as in nfc.
std::string nfd(std::string_view s);

}  // namespace tg::text
