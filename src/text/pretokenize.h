// The pre-tokenizer pieces of byte-level BPE: the regexes GPT-2, Llama 3, Qwen2, CLIP, o200k and tekken split
// text with, written as scanners over code points, and the byte-level alphabet that spells every
// byte as a printable character.
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
///   kClip:   <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|
///            [^\s\p{L}\p{N}]+
///   kClipPlain: CLIP's without its two special-token alternatives, as transformers 4's converter
///            wrote it (the files of openai/clip-* and the text encoders built on them)
///   kO200k:  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|…|'d)?|
///            [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|…|'d)?|
///            \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
///            (tiktoken's o200k_base: GPT-4o's, gpt-oss's o200k_harmony; words split at case changes)
///   kTekken: o200k's without the contractions and with \p{N} for \p{N}{1,3} (Mistral's tekken:
///            Mistral Nemo, Small 3, Pixtral)
/// All but CLIP's match every character; CLIP's match every character but whitespace.
enum class SplitPattern { kGpt2, kLlama3, kQwen2, kClip, kClipPlain, kO200k, kTekken };

/// The regex of `pattern` exactly as tokenizer.json spells it.
std::string_view pattern_source(SplitPattern pattern);

/// The regex's matches in `text`, in order. For all but CLIP's they cover `text`
/// (as a Split with behavior "Isolated" cuts it); for CLIP's the whitespace between them is left
/// out (as a Split with behavior "Removed" and invert, CLIP's, drops it).
std::vector<std::string_view> split(std::string_view text, SplitPattern pattern);

/// GPT-2's byte-level alphabet: printable bytes (!..~, ¡..¬, ®..ÿ) stand for themselves, the
/// other 68 bytes, in order, for U+0100, U+0101, …
const std::array<char32_t, 256>& byte_to_char();

/// The byte-level spelling of `bytes`: each byte as the UTF-8 of its character.
std::string to_byte_level(std::string_view bytes);

}  // namespace tg::text
