// The arena of the backends that keep one (cpu, cuda): its buffers are the schedule's
// (passes/schedule.h), placed by passes::place_arena; MemoryStats reports the figures.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "passes/schedule.h"

namespace tg::backend {

using ArenaBuffer = passes::Buffer;

/// Copies the arena figures into `stats`.
inline void set_arena_stats(const passes::ArenaStats& a, MemoryStats& stats) {
  stats.arena = a.bytes;
  stats.no_reuse = a.no_reuse;
  stats.activations = a.activations;
  stats.gradients = a.gradients;
  stats.optimizer_temps = a.optimizer_temps;
  stats.scratch = a.scratch;
}

}  // namespace tg::backend
