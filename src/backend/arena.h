// The step arena shared by the backends that plan one (cpu, cuda): each buffer a backend asks
// for lives from the first to the last execution index touching it; place_arena gives every
// buffer its offset (passes::plan_intervals) and fills the arena figures of MemoryStats.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace tg::backend {

struct ArenaBuffer {
  enum class Category : uint8_t { kActivation, kGradient, kOptimizer, kScratch };
  int64_t bytes = 0;
  Category category = Category::kScratch;
  int32_t first = -1, last = -1;  // execution indices touching it (-1: never touched)
  bool to_end = false;            // read after the last step (outputs, update values)
  int64_t offset = 0;             // set by place_arena
};

/// Offsets for `buffers` over execution indices [0, end]: untouched buffers at index 0,
/// `to_end` ones (or all, without reuse) to the end; without reuse each gets its own space.
/// Sets stats.arena, stats.no_reuse and the per-category bytes live at the busiest index;
/// returns the arena's size in bytes.
int64_t place_arena(std::vector<ArenaBuffer>& buffers, int32_t end, bool reuse, MemoryStats& stats);

}  // namespace tg::backend
