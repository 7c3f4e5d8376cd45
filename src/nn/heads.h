// Helpers shared by the transformer layers (transformer.cc, llama.cc, bert.cc, vit.cc, clip.cc,
// t5.cc, whisper.cc): their Linears' initialisation, splitting a projection into heads, image
// patches as tokens, each new token's absolute position in KV-cached decoding and the
// encoder-decoders' teacher-forcing input.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tensorgrad/nn.h"
#include "tensorgrad/tensor.h"

namespace tg::nn {

/// " at <file>:<line>" of a trace location, the tail of the layers' error messages.
std::string at(const Loc& loc);
/// Hugging Face's (and GPT-2's) Linear initialisation: weights normal(std), biases zeros.
LinearOptions normal_linear(bool bias, double std = 0.02);
/// [B, T, H·D] → [B, H, T, D]
Tensor split_heads(const Tensor& x, int64_t heads, const Loc& loc);
/// [B, H, T, D] → [B, T, H·D]
Tensor merge_heads(const Tensor& x, const Loc& loc);
/// A Vision Transformer's patches as tokens: the patch projection (a Conv2d with kernel = stride
/// = patch) of pixels [B, C, H, W] → [B, d, h, w], then [B, h·w, d] in row-major patch order.
Tensor patch_tokens(const Conv2d& projection, const Tensor& pixels, const Loc& loc);
/// Positions of the new tokens of KV-cached decoding: pos i32 [B] → pos[b] + t, i32 [B, tokens].
Tensor token_positions(const Tensor& pos, int64_t tokens, const Loc& loc);
/// The encoder-decoders' self-attention cache: k and v [B, H, T, D] written at positions
/// pos… of the states "<path>.k_cache" / "<path>.v_cache" (f32 [B, H, cache_len, D]); returns
/// the whole caches after the write (the keys and values the query attends over).
std::pair<Tensor, Tensor> append_kv_cache(const std::string& path, const Tensor& k, const Tensor& v,
                                          const Tensor& pos, int64_t cache_len, const Loc& loc);
/// An encoder-decoder's teacher-forcing input for labels [rows, T] (row-major, -100 where ignored):
/// each row shifted right behind start_id, -100 read as pad_id (transformers' shift_tokens_right).
/// `model` names the caller in the InputError for labels that are not `rows` equal rows.
std::vector<int32_t> shift_tokens_right(std::span<const int32_t> labels, int64_t rows, int32_t start_id,
                                        int32_t pad_id, const char* model);

}  // namespace tg::nn
