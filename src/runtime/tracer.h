// Tracing the user's function for compile_train / compile_forward: the inputs' checks, their
// leaves, one or more calls of the function (one per micro-batch), and the traced graph with
// the parameters it used.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ir/trace.h"
#include "tensorgrad/program.h"

namespace tg::detail {

/// "x, y", or "(none)".
std::string names_list(const std::vector<InputSpec>& specs);

/// Throws InputError unless `inputs` names `arity` distinct, well-formed inputs.
void check_inputs(size_t arity, const std::vector<InputSpec>& inputs, const char* api);

/// A traced function's graph and what the runtime binds in it.
struct Traced {
  ir::Graph graph;
  std::vector<int32_t> input_nodes;
  int32_t result;
  std::vector<std::pair<std::string, int32_t>> params;  // path → kParam node
  std::vector<std::pair<std::string, int32_t>> captures;
  int32_t rng_key;
};

/// A trace of a function under way: its input leaves made, the function called by call().
class Tracer {
 public:
  Tracer(const std::vector<InputSpec>& inputs, bool training, uint64_t seed, Precision precision,
         const std::vector<std::string>& keep_f32, const char* api);
  ir::Trace& trace() { return t_; }
  ir::Graph& graph() { return t_.graph; }
  const std::vector<Tensor>& inputs() const { return inputs_; }

  /// Calls fn on `args` (tensors of this trace) with the trace current; returns its result.
  Tensor call(const TracedFn& fn, std::span<const Tensor> args);

  /// Checks the parameters the calls used and keep_f32's entries against `model`, and hands
  /// the graph over.
  Traced finish(const Module& model, int32_t result, const std::vector<std::string>& keep_f32);

 private:
  const char* api_;
  ir::Trace t_;
  std::vector<Tensor> inputs_;
};

}  // namespace tg::detail
