// The pre-tokenizer pieces of byte-level BPE: the regexes GPT-2 and Llama 3 split text with,
// written as scanners over code points, and the byte-level alphabet that spells every byte as a
// printable character.
#pragma once
#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace tg::text {

/// The split regexes `tokenizers` files use, matched leftmost-first as a backtracking engine
/// (Oniguruma) does:
///   kGpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
///   kLlama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
///            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
///   kQwen2:  Llama 3's with \p{N} for \p{N}{1,3}: digits one at a time (Qwen2, Qwen2.5, Qwen3)
enum class SplitPattern { kGpt2, kLlama3, kQwen2 };

/// The regex of `pattern` exactly as tokenizer.json spells it.
std::string_view pattern_source(SplitPattern pattern);

/// Splits `text` into the regex's consecutive matches (behavior "Isolated": every match is a
/// piece). Every character matches one of the alternatives, so the pieces cover `text`.
std::vector<std::string_view> split(std::string_view text, SplitPattern pattern);

/// GPT-2's byte-level alphabet: printable bytes (!..~, ¡..¬, ®..ÿ) stand for themselves, the
/// other 68 bytes, in order, for U+0100, U+0101, …
const std::array<char32_t, 256>& byte_to_char();

/// The byte-level spelling of `bytes`: each byte as the UTF-8 of its character.
std::string to_byte_level(std::string_view bytes);

}  // namespace tg::text
