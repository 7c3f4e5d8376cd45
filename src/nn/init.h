// Filling a parameter's values from its Init (init.cc), for the runtime's parameter storage.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "tensorgrad/module.h"

namespace tg::detail {

/// Fills `values` (shape `shape`) from `init`, seeded per parameter by (seed, path).
void fill_init(const Init& init, std::span<float> values, const Shape& shape, uint64_t seed,
               const std::string& path);

}  // namespace tg::detail
