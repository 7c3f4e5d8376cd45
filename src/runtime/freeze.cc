// TrainOptions::frozen. compile_train leaves the matched parameters out of autograd's list of
// leaves to differentiate: they stay graph leaves whose values the step reads, but without a
// gradient they get no ParamGrad, hence no moments, no weight decay, no "grad/…" capture, no
// place in data-parallel buckets or ZeRO shards, and no update writing their buffers. A
// parameter stored as bf16, f16 or i8 must be among them, and so must the scales of an i8 one.
#include "runtime/freeze.h"

#include "tensorgrad/errors.h"

namespace tg::detail {

std::unordered_set<const Param*> frozen_params(const Module& model, const std::vector<std::string>& frozen) {
  std::unordered_set<const Param*> out;
  const std::vector<const Param*> all = model.root().parameters();
  for (const std::string& prefix : frozen) {
    bool matched = false;
    for (const Param* p : all) {
      const std::string path = p->path();
      if (prefix.empty() || path.rfind(prefix, 0) != 0) continue;
      if (path.size() != prefix.size() && path[prefix.size()] != '.') continue;  // "layers.1" ≠ "layers.10"
      out.insert(p);
      matched = true;
    }
    if (!matched)
      throw InputError("[compile_train] frozen entry '" + prefix +
                       "' names no parameter or module of the model (give a path such as \"model.layers.0\" "
                       "or \"lm_head.weight\")");
  }
  // The optimizer updates f32 values only: a parameter stored as bf16 or f16 must stay frozen.
  for (const Param* p : all)
    if (p->scales() != nullptr && out.count(p) == 0)
      throw InputError("[compile_train] parameter '" + p->path() + "' holds the " +
                       (p->scales()->offset() == p ? "offsets" : "scales") + " of the quantized '" +
                       p->scales()->path() + "': freeze it with it (TrainOptions::frozen)");
  for (const Param* p : all)
    if (p->dtype() != DType::kF32 && out.count(p) == 0)
      throw InputError(
          "[compile_train] parameter '" + p->path() + "' is stored as " + dtype_name(p->dtype()) +
          " (Param::set_dtype, quantize_int8, quantize_int4, Module::store_params_as): only frozen "
          "parameters may be; list "
          "it in "
          "TrainOptions::frozen (and train adapters over it: nn::add_lora), or train a model whose "
          "parameters are stored as f32");
  return out;
}

}  // namespace tg::detail
