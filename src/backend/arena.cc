// Arena placement shared by the cpu and cuda backends (see arena.h).
#include "backend/arena.h"

#include <algorithm>

#include "passes/memory_plan.h"

namespace tg::backend {

int64_t place_arena(std::vector<ArenaBuffer>& buffers, int32_t end, bool reuse, MemoryStats& stats) {
  std::vector<passes::Interval> intervals;
  for (ArenaBuffer& b : buffers) {
    if (b.first < 0) b.first = b.last = 0;  // never touched (an output nothing computes into)
    if (b.to_end || !reuse) b.last = end;
    if (!reuse) b.first = 0;
    intervals.push_back({b.bytes, b.first, b.last});
  }
  const passes::IntervalPlan plan = passes::plan_intervals(intervals);
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i].offset = std::max<int64_t>(0, plan.offset[i]);  // empty: 0
  stats.arena = plan.arena_bytes;
  stats.no_reuse = plan.total_bytes;
  // What is live at the busiest index, by category.
  const int32_t peak = passes::busiest_step(intervals, end);
  for (const ArenaBuffer& b : buffers) {
    if (b.first > peak || b.last < peak) continue;
    switch (b.category) {
      case ArenaBuffer::Category::kActivation: stats.activations += b.bytes; break;
      case ArenaBuffer::Category::kGradient: stats.gradients += b.bytes; break;
      case ArenaBuffer::Category::kOptimizer: stats.optimizer_temps += b.bytes; break;
      case ArenaBuffer::Category::kScratch: stats.scratch += b.bytes; break;
    }
  }
  return plan.arena_bytes;
}

}  // namespace tg::backend
