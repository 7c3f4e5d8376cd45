// ZeRO-1: the optimizer update with its state sharded over the ranks (see optimizer.h,
// append_sharded_update). Plain data parallelism all-reduces every gradient and lets each rank
// update every parameter with a full copy of the moments; here each rank reduces only its part
// of the gradients (reduce_scatter), updates only its part of the parameters with moments of
// that part's size, and the parts are gathered back (all_gather). The bytes sent are the same
// (a reduce-scatter plus an all-gather is how an all-reduce is made), the optimizer state and
// its arithmetic are divided by the number of ranks.
#include <algorithm>
#include <map>

#include "ir/api_util.h"
#include "optim/optimizer.h"

namespace tg::optim {
namespace {

struct Bucket {
  std::vector<size_t> members;  // indices into the params
  int64_t elements = 0;
  bool decay = false;
};

}  // namespace

ShardedUpdate append_sharded_update(ir::Graph& g, std::span<const ParamGrad> params,
                                    const Optimizer& optimizer, std::optional<double> clip_grad_norm,
                                    int ranks, int64_t bucket_bytes) {
  const Loc loc = Loc::current();
  if (ranks < 2) throw Error("[compile_train] append_sharded_update needs at least two ranks");
  for (const ParamGrad& p : params)
    if (g.node(p.param).dtype != DType::kF32 || g.node(p.grad).dtype != DType::kF32)
      throw InputError("[compile_train] shard_optimizer: parameter '" + p.name +
                       "' and its gradient must be f32");
  // In the order the backward produces the gradients, so that a backend may send a bucket as
  // soon as its last gradient exists; one open bucket per weight-decay treatment, so that a
  // shard is either decayed as a whole or not at all.
  std::vector<size_t> order(params.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return params[a].grad < params[b].grad; });
  std::vector<Bucket> buckets;
  std::map<bool, Bucket> open;
  for (size_t i : order) {
    const bool decay = decays(optimizer, params[i]);
    Bucket& b = open[decay];
    b.decay = decay;
    b.members.push_back(i);
    b.elements += g.node(params[i].param).numel();
    if (b.elements * static_cast<int64_t>(sizeof(float)) >= bucket_bytes) {
      buckets.push_back(std::move(b));
      open.erase(decay);
    }
  }
  for (auto& [decay, b] : open) buckets.push_back(std::move(b));

  // Each bucket flattened: the members' values one after the other, then zeros up to a multiple
  // of the ranks (the padding's gradient is zero, so its moments and values stay zero).
  auto flat = [&](const Bucket& b, bool grads) {
    std::vector<Tensor> parts;
    for (size_t i : b.members) {
      const Tensor t(&g, grads ? params[i].grad : params[i].param);
      parts.push_back(reshape(t, {t.numel()}, loc));
    }
    const int64_t pad = (ranks - b.elements % ranks) % ranks;
    if (pad > 0) parts.push_back(ir::constant_on(g, {0.0}, {pad}, DType::kF32, loc));
    return parts.size() == 1 ? parts[0] : concat(parts, 0, loc);
  };
  auto collective = [&](ir::Op op, const Tensor& x) {
    ir::Node n = ir::make_node(op, {x.id()}, loc);
    n.attrs.values = {static_cast<double>(ranks)};
    return ir::emit(g, std::move(n));
  };
  ShardedUpdate out;
  const ir::Stage stage = g.stage;
  g.stage = ir::Stage::kBackward;
  std::vector<int32_t> grads;
  for (const Bucket& b : buckets)
    grads.push_back((collective(ir::Op::kReduceScatter, flat(b, true)) * (1.0 / ranks)).id());
  g.stage = stage;
  for (size_t k = 0; k < buckets.size(); ++k) {
    const Tensor param = collective(ir::Op::kRankShard, flat(buckets[k], false));
    out.shards.push_back({"zero." + std::to_string(k), param.id(), grads[k], buckets[k].decay, true});
  }
  const size_t first_update = g.updates.size();
  out.plan = append_update(g, out.shards, optimizer, clip_grad_norm, ranks);

  // append_update wrote each shard's new value as an update of the shard; every rank's new
  // shard is gathered and each parameter takes its slice instead.
  std::map<int32_t, size_t> bucket_of_shard;
  for (size_t k = 0; k < out.shards.size(); ++k) bucket_of_shard[out.shards[k].param] = k;
  std::vector<ir::Graph::Update> updates(g.updates.begin(),
                                         g.updates.begin() + static_cast<ptrdiff_t>(first_update));
  for (size_t u = first_update; u < g.updates.size(); ++u) {
    const ir::Graph::Update up = g.updates[u];
    const auto it = bucket_of_shard.find(up.target);
    if (it == bucket_of_shard.end()) {  // a moment: this rank's own
      updates.push_back(up);
      continue;
    }
    const Tensor whole = collective(ir::Op::kAllGather, Tensor(&g, up.value));
    int64_t offset = 0;
    for (size_t i : buckets[it->second].members) {
      const ir::Node& p = g.node(params[i].param);
      const Shape shape = p.shape;
      const int64_t n = p.numel();
      updates.push_back(
          {params[i].param, reshape(slice(whole, 0, offset, offset + n, 1, loc), shape, loc).id()});
      offset += n;
    }
  }
  g.updates = std::move(updates);
  return out;
}

}  // namespace tg::optim
