// Liveness-based arena planning (see memory_plan.h).
#include "passes/memory_plan.h"

#include <algorithm>
#include <iterator>
#include <map>

namespace tg::passes {
namespace {

int64_t aligned(int64_t bytes) {
  return (bytes + MemoryPlan::kAlignment - 1) / MemoryPlan::kAlignment * MemoryPlan::kAlignment;
}

/// Free space in the arena as offset → size, adjacent blocks merged.
class FreeList {
 public:
  /// Best fit: the smallest free block that holds `size`, else the arena grows.
  int64_t take(int64_t size, int64_t& arena_end) {
    auto best = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
      if (it->second >= size && (best == blocks_.end() || it->second < best->second)) best = it;
    if (best == blocks_.end()) {
      // Grow, reusing a free block that ends at the arena's end.
      int64_t start = arena_end;
      if (!blocks_.empty()) {
        auto last = std::prev(blocks_.end());
        if (last->first + last->second == arena_end) {
          start = last->first;
          blocks_.erase(last);
        }
      }
      arena_end = start + size;
      return start;
    }
    const int64_t start = best->first, remaining = best->second - size;
    blocks_.erase(best);
    if (remaining > 0) blocks_[start + size] = remaining;
    return start;
  }

  void give(int64_t offset, int64_t size) {
    auto [it, inserted] = blocks_.emplace(offset, size);
    (void)inserted;
    auto next = std::next(it);
    if (next != blocks_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        blocks_.erase(it);
      }
    }
  }

 private:
  std::map<int64_t, int64_t> blocks_;
};

}  // namespace

IntervalPlan plan_intervals(const std::vector<Interval>& intervals) {
  IntervalPlan plan;
  plan.offset.assign(intervals.size(), -1);
  std::vector<size_t> by_first(intervals.size());
  for (size_t i = 0; i < by_first.size(); ++i) by_first[i] = i;
  std::stable_sort(by_first.begin(), by_first.end(),
                   [&](size_t a, size_t b) { return intervals[a].first < intervals[b].first; });
  // Live buffers ordered by last step, to free them as the sweep passes it.
  std::multimap<int32_t, size_t> live;
  FreeList free_list;
  for (size_t i : by_first) {
    const Interval& iv = intervals[i];
    while (!live.empty() && live.begin()->first < iv.first) {
      const size_t dead = live.begin()->second;
      free_list.give(plan.offset[dead], aligned(intervals[dead].bytes));
      live.erase(live.begin());
    }
    const int64_t size = aligned(iv.bytes);
    plan.total_bytes += size;
    if (size == 0) continue;
    plan.offset[i] = free_list.take(size, plan.arena_bytes);
    live.emplace(iv.last, i);
  }
  return plan;
}

MemoryPlan plan_memory(const ir::Graph& graph) {
  const int32_t n = graph.size();
  MemoryPlan plan;
  plan.offset.assign(static_cast<size_t>(n), -1);
  plan.bytes.assign(static_cast<size_t>(n), 0);
  plan.last_use.assign(static_cast<size_t>(n), -1);
  for (int32_t id = 0; id < n; ++id)
    for (int32_t in : graph.node(id).inputs) plan.last_use[static_cast<size_t>(in)] = id;
  // Pinned: inputs (fed before the step), outputs and update values (read after it).
  for (int32_t id = 0; id < n; ++id)
    if (graph.node(id).op == ir::Op::kInput) plan.last_use[static_cast<size_t>(id)] = n;
  for (int32_t o : graph.outputs) plan.last_use[static_cast<size_t>(o)] = n;
  for (const ir::Graph::Update& u : graph.updates) plan.last_use[static_cast<size_t>(u.value)] = n;

  // Buffers to release after each node runs.
  std::vector<std::vector<int32_t>> dies_after(static_cast<size_t>(n));
  FreeList free_list;
  for (int32_t id = 0; id < n; ++id) {
    const ir::Node& node = graph.node(id);
    const bool persistent = node.op == ir::Op::kParam || node.op == ir::Op::kState;
    if (!persistent) {
      const int64_t size = aligned(node.numel() * dtype_size(node.dtype));
      plan.bytes[static_cast<size_t>(id)] = size;
      plan.total_bytes += size;
      if (size > 0) plan.offset[static_cast<size_t>(id)] = free_list.take(size, plan.arena_bytes);
      const int32_t last = std::max(plan.last_use[static_cast<size_t>(id)], id);  // unread: free right after
      if (last < n) dies_after[static_cast<size_t>(last)].push_back(id);
    }
    // The node has read its inputs: those whose last reader it was can be reused now.
    for (int32_t dead : dies_after[static_cast<size_t>(id)])
      if (plan.bytes[static_cast<size_t>(dead)] > 0)
        free_list.give(plan.offset[static_cast<size_t>(dead)], plan.bytes[static_cast<size_t>(dead)]);
  }
  return plan;
}

int32_t busiest_step(const std::vector<Interval>& intervals, int32_t end) {
  std::vector<int64_t> live(static_cast<size_t>(std::max(end, 0)) + 1, 0);
  for (const Interval& b : intervals)
    for (int32_t e = std::max(b.first, 0); e <= b.last && e <= end; ++e)
      live[static_cast<size_t>(e)] += b.bytes;
  return static_cast<int32_t>(std::max_element(live.begin(), live.end()) - live.begin());
}

}  // namespace tg::passes
