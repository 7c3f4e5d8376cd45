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
#include "tensorgrad/tensor.h"

namespace tg::optim {

struct ParamGrad {
  std::string name;
  int32_t param;  // kParam leaf (a ZeRO shard: this rank's part of several, see append_sharded_update)
  int32_t grad;   // dL/dparam
  bool decay;     // the parameter's own weight-decay flag
  /// `decay` is already decided (a ZeRO shard, named "zero.<i>"): AdamW::decay_filter is not asked.
  bool decay_decided = false;
};

/// The scalar inputs the update reads, in the order hyper_values() returns them.
struct UpdatePlan {
  std::vector<std::string> hyper_names;
  std::vector<int32_t> hyper_nodes;
};

/// An f32 state leaf of the program (zero at the start and after reset_optimizer).
Tensor state(ir::Graph& g, const std::string& name, const Shape& shape);

/// `ranks` > 1: the params are this rank's shards of the whole (ZeRO-1), so the clipping norm
/// sums the squares over the ranks (an all_reduce) before it is taken.
UpdatePlan append_update(ir::Graph& graph, std::span<const ParamGrad> params, const Optimizer& optimizer,
                         std::optional<double> clip_grad_norm, int ranks = 1);

/// Whether the optimizer applies weight decay to `p`: its weight_decay is nonzero and the
/// parameter's flag (or AdamW::decay_filter, when set and the flag is not decided) says so.
bool decays(const Optimizer& optimizer, const ParamGrad& p);

/// ZeRO-1 over `ranks` processes: the update of `params` (whose gradients are this rank's own,
/// not yet reduced) with the optimizer state sharded, each rank keeping 1/ranks of it.
/// Parameters are packed, in the order the backward produces their gradients, into buckets of
/// about `bucket_bytes` that never mix parameters with and without weight decay. Per bucket:
/// the flat gradients (zero-padded to a multiple of `ranks`) → reduce_scatter → × 1/ranks is
/// this rank's part of the mean gradient; rank_shard of the flat parameters is its part of the
/// parameters; append_update updates that shard ("zero.<bucket>", so its moments have the
/// shard's size); the new shard → all_gather → each parameter's slice is written back. Every
/// rank computes a distinct part of each parameter and gathers the same values, so the ranks'
/// parameters stay bitwise equal. Returns the plan and the shards' ParamGrads.
struct ShardedUpdate {
  UpdatePlan plan;
  std::vector<ParamGrad> shards;
};
ShardedUpdate append_sharded_update(ir::Graph& graph, std::span<const ParamGrad> params,
                                    const Optimizer& optimizer, std::optional<double> clip_grad_norm,
                                    int ranks, int64_t bucket_bytes);

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
