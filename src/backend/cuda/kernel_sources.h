// The device code of the CUDA backend's kernel templates, kept as real source files in
// src/backend/cuda/kernels/*.cuh and embedded into the library at build time by
// cmake/embed_kernels.cmake (nothing is read from disk at run time).
//
// A template file is a header comment (what the kernel computes and which constants the
// generator defines before it; not embedded), then one or more named pieces: a piece is the text
// after a line `// @piece <name>` up to the next such line or the end of the file, verbatim. A
// generator writes its constants, then pastes pieces, with the parts that depend on the
// parameters (a kernel's name and parameter list, optional lines) written in C++ between them.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tg::backend::cuda {

struct KernelPiece {
  std::string_view file;   // e.g. "attention_mma.cuh"
  std::string_view piece;  // e.g. "mma"
  std::string_view text;
};

/// Every piece of every template file: files in name order, pieces in file order.
std::span<const KernelPiece> kernel_pieces();

/// The text of piece `piece` of kernels/<file>; throws Error naming both for an unknown piece.
std::string_view kernel_source(std::string_view file, std::string_view piece);

/// Helpers of the generators that write constants before the pieces: v as a long long literal
/// ("123LL"), a C++ bool literal, ⌈a / b⌉ (a grid's extent) and a rounded up to a multiple of b.
inline std::string ll(int64_t v) { return std::to_string(v) + "LL"; }
inline std::string flag(bool v) { return v ? "true" : "false"; }
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

}  // namespace tg::backend::cuda
