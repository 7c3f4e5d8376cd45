// Tracing a user function for compile_train / compile_forward (see tracer.h).
#include "runtime/tracer.h"

#include <algorithm>
#include <unordered_set>

#include "ir/api_util.h"
#include "tensorgrad/errors.h"

namespace tg::detail {

std::string names_list(const std::vector<InputSpec>& specs) {
  std::string s;
  for (const InputSpec& i : specs) s += (s.empty() ? "" : ", ") + i.name;
  return s.empty() ? "(none)" : s;
}

void check_inputs(size_t arity, const std::vector<InputSpec>& inputs, const char* api) {
  if (arity != inputs.size())
    throw InputError(std::string("[") + api + "] the function takes " + std::to_string(arity) +
                     " tensors but options.inputs names " + std::to_string(inputs.size()) + ": " +
                     names_list(inputs));
  std::unordered_set<std::string> seen;
  for (const InputSpec& spec : inputs) {
    if (spec.name.empty() || spec.name.rfind("__", 0) == 0)
      throw InputError(std::string("[") + api + "] input names must be non-empty and not start with '__'");
    if (!seen.insert(spec.name).second)
      throw InputError(std::string("[") + api + "] input '" + spec.name + "' is declared twice");
    for (int64_t d : spec.shape)
      if (d < 0)
        throw InputError(
            std::string("[") + api + "] input '" + spec.name + "' has shape " + shape_str(spec.shape) +
            ": shapes are static, every extent must be >= 0 (compile one program per batch size)");
  }
}

Tracer::Tracer(const std::vector<InputSpec>& inputs, bool training, uint64_t seed, Precision precision,
               const std::vector<std::string>& keep_f32, const char* api)
    : api_(api) {
  t_.training = training;
  t_.half = precision == Precision::kBf16 ? DType::kBF16
            : precision == Precision::kF16  ? DType::kF16
                                            : DType::kF32;
  t_.keep_f32 = keep_f32;
  // Per-site seeds: consecutive integers starting from a 64-bit mix of the program seed, so
  // programs with different seeds draw unrelated streams.
  t_.next_seed = (seed + 1) * 0x9E3779B97F4A7C15ull;
  ir::TraceScope scope(t_);
  for (const InputSpec& spec : inputs)
    inputs_.push_back(
        ir::named_leaf(t_.graph, ir::Op::kInput, spec.name, spec.shape, spec.dtype, Loc::current()));
}

Tensor Tracer::call(const TracedFn& fn, std::span<const Tensor> args) {
  Tensor result;
  {
    ir::TraceScope scope(t_);
    result = fn(args);
  }
  if (!result.valid() || result.graph() != &t_.graph)
    throw Error(std::string("[") + api_ +
                "] the function must return a tensor computed from its inputs or parameters");
  return result;
}

Traced Tracer::finish(const Module& model, int32_t result, const std::vector<std::string>& keep_f32) {
  Traced out{std::move(t_.graph), {}, result, {}, std::move(t_.captures), t_.rng_key};
  for (const Tensor& a : inputs_) out.input_nodes.push_back(a.id());
  std::vector<const Param*> own = model.root().parameters();
  for (const std::string& prefix : keep_f32) {
    const bool matches = std::any_of(own.begin(), own.end(), [&](const Param* p) {
      const std::string& path = p->path();
      return !prefix.empty() && path.rfind(prefix, 0) == 0 &&
             (path.size() == prefix.size() || path[prefix.size()] == '.');
    });
    if (!matches)
      throw InputError(std::string("[") + api_ + "] keep_f32 entry '" + prefix +
                       "' names no parameter or module of the model (give a path such as \"head\" or "
                       "\"head.weight\")");
  }
  for (const Param* p : t_.params) {
    if (std::find(own.begin(), own.end(), p) == own.end())
      throw Error(std::string("[") + api_ + "] parameter '" + p->path() +
                  "' does not belong to the compiled model");
    out.params.emplace_back(p->path(), t_.param_nodes.at(p));
  }
  return out;
}

}  // namespace tg::detail
