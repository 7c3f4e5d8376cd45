// Lookup of the embedded kernel templates (the table itself is generated at build time: see
// kernel_sources.h and cmake/embed_kernels.cmake).
#include "backend/cuda/kernel_sources.h"

#include <string>

#include "tensorgrad/errors.h"

namespace tg::backend::cuda {

std::string_view kernel_source(std::string_view file, std::string_view piece) {
  for (const KernelPiece& p : kernel_pieces())
    if (p.file == file && p.piece == piece) return p.text;
  throw Error("[cuda] kernel_source: no piece '" + std::string(piece) + "' in kernels/" + std::string(file) +
              " (the embedded templates are src/backend/cuda/kernels/*.cuh)");
}

}  // namespace tg::backend::cuda
