// TrainOptions::frozen: which of a model's parameters a training program leaves untrained.
#pragma once
#include <string>
#include <unordered_set>
#include <vector>

#include "tensorgrad/module.h"

namespace tg::detail {

/// The parameters of `model` whose path starts with an entry of `frozen` at a '.' boundary (a
/// module path or a full parameter path). An entry matching no parameter, and a parameter stored
/// as bf16 or f16 (Param::dtype) left out, are InputErrors.
std::unordered_set<const Param*> frozen_params(const Module& model, const std::vector<std::string>& frozen);

}  // namespace tg::detail
