// Loss scaling and the skipping of non-finite steps, as graph nodes of a training step
// (TrainOptions::loss_scaling, skip_nonfinite). The scale is a state scalar of the program;
// the step reads it, starts the backward from loss · scale, divides the gradients by it, and
// updates it after the step (PyTorch's torch.amp.GradScaler, inside the graph: no host round
// trip but the one flag step() reads to count skipped steps).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>
#include <span>

#include "ir/graph.h"
#include "optim/optimizer.h"
#include "tensorgrad/program.h"

namespace tg::optim {

/// Name of the state scalar that holds the scale (in training_state().moments).
inline constexpr const char* kLossScaleState = "loss_scale";
/// Name of the state scalar counting finite steps since the scale last changed.
inline constexpr const char* kLossScaleGoodSteps = "loss_scale.good_steps";

/// TrainOptions::loss_scaling as it applies (empty: dynamic under f16, none otherwise;
/// disabled: none); throws InputError naming the field when it is not usable.
std::optional<LossScaling> resolve_loss_scaling(const std::optional<LossScaling>& given, bool f16);

/// The scale this step uses (`value`): the state scalar kLossScaleState (`stored`), which
/// starts at 0 as every optimizer state does (and again after reset_optimizer) and then reads
/// as o.init_scale; with 1/scale (`unscale`) and the two candidates of the next scale
/// (`grown`, `backed_off`). Everything computed from the scale alone is made here, at the
/// start of the graph: fusion puts those scalar nodes in one group, and a constant made later
/// (a later node id) would hold that group, and with it the whole backward, until the
/// schedule reaches it. (Node ids: the graph may move between the trace and the update.)
struct LossScale {
  int32_t stored = -1, value = -1, unscale = -1, grown = -1, backed_off = -1;
};
LossScale loss_scale(ir::Graph& g, const LossScaling& o);

/// Each gradient (node ids, -1 for none) divided by the scale, in place; returns the ids
/// before (what the finiteness check may read instead).
std::vector<int32_t> unscale(ir::Graph& g, std::vector<int32_t>& grads, const LossScale& ls);

/// skip_nonfinite: the bool scalar "every gradient of `params` is finite" (Σ sum(g·0) is
/// exactly 0 unless some element is NaN or ±inf; with `all_ranks`, summed over the ranks, whose
/// parts differ), and every update of the graph rewritten to keep its target's value when it is
/// not. Call after the optimizer's update is appended.
Tensor append_skip_nonfinite(ir::Graph& g, std::span<const ParamGrad> params, bool all_ranks);

/// A training_state's optimizer tensors as a program with (`scaling`) or without loss scaling
/// restores them: the scale's two scalars dropped, or added as 0 (a fresh init_scale and
/// count) where the state was saved without them.
std::map<std::string, HostTensor> with_loss_scale_state(std::map<std::string, HostTensor> moments,
                                                        bool scaling);

/// The scale's own update, taken whether the step was skipped or not: × backoff_factor after a
/// non-finite step (never below 1); × growth_factor once growth_interval finite steps in a row
/// have passed.
void append_loss_scale_update(ir::Graph& g, const LossScale& scale, const Tensor& finite,
                              const LossScaling& o);

}  // namespace tg::optim
