// Appends an optimizer update to a graph that already holds the gradients. The update is
// ordinary graph nodes writing into each parameter (Graph::updates); moments are `state`
// leaves; every per-step hyperparameter (lr, bias corrections, first-step momentum flags)
// is a scalar `input` leaf whose value `hyper_values` computes on the host each step.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "tensorgrad/optim.h"

namespace tg::optim {

struct ParamGrad {
  std::string name;
  int32_t param;  // kParam leaf
  int32_t grad;   // dL/dparam
  bool decay;     // the parameter's own weight-decay flag
};

/// The scalar inputs the update reads, in the order hyper_values() returns them.
struct UpdatePlan {
  std::vector<std::string> hyper_names;
  std::vector<int32_t> hyper_nodes;
};

UpdatePlan append_update(ir::Graph& graph, std::span<const ParamGrad> params, const Optimizer& optimizer,
                         std::optional<double> clip_grad_norm);

/// Data parallelism: each gradient (node ids, -1 for none) replaced by its mean over `ranks`
/// processes. Gradients are taken in the order the backward produces them (node order) and
/// packed into buckets of about `bucket_bytes`; each bucket is one all_reduce node, so a
/// backend can send a bucket as soon as its last gradient exists.
std::vector<int32_t> average_over_ranks(ir::Graph& graph, std::span<const int32_t> grads, int ranks,
                                        int64_t bucket_bytes);

/// Values of the plan's scalar inputs for optimizer step `t` (1 for the first step) at
/// learning rate `lr` (already scheduled).
std::vector<float> hyper_values(const Optimizer& optimizer, int64_t t, double lr);

double base_lr(const Optimizer& optimizer);

/// The optimizer's kind and every setting but lr, exactly (for checkpoints: a state saved by
/// one optimizer is resumed only by the same one). "" for GradientsOnly.
std::string describe(const Optimizer& optimizer);

}  // namespace tg::optim
