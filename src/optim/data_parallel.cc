// Gradient averaging over the ranks of a data-parallel run (see optimizer.h): all_reduce nodes
// over buckets of gradients, each result scaled by 1/ranks.
#include <algorithm>

#include "ir/api_util.h"
#include "optim/optimizer.h"

namespace tg::optim {

std::vector<int32_t> average_over_ranks(ir::Graph& graph, std::span<const int32_t> grads, int ranks,
                                        int64_t bucket_bytes) {
  const Loc loc = Loc::current();
  std::vector<size_t> order;
  for (size_t i = 0; i < grads.size(); ++i)
    if (grads[i] >= 0) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return grads[a] < grads[b]; });
  std::vector<int32_t> out(grads.begin(), grads.end());
  const double scale = 1.0 / ranks;
  for (size_t first = 0; first < order.size();) {
    size_t last = first;
    int64_t bytes = 0;
    std::vector<int32_t> bucket;
    while (last < order.size() && (bucket.empty() || bytes < bucket_bytes)) {
      const ir::Node& g = graph.node(grads[order[last]]);
      bytes += g.numel() * dtype_size(g.dtype);
      bucket.push_back(grads[order[last++]]);
    }
    const int32_t sums = ir::emit(graph, ir::make_node(ir::Op::kAllReduce, bucket, loc)).id();
    for (size_t k = first; k < last; ++k)
      out[order[k]] = (ir::result(graph, sums, static_cast<int64_t>(k - first), loc) * scale).id();
    first = last;
  }
  return out;
}

}  // namespace tg::optim
