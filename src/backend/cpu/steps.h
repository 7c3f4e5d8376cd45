// The CPU backend's half of the schedule (passes/schedule.h): what its kernels read
// (capabilities) and the kernel of each step, built over real addresses.
#pragma once
#include <functional>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "passes/schedule.h"

namespace tg::backend::cpu {

/// Copies and elementwise groups read any strides; reductions, norms, softmax and the scan
/// want dense rows; products want BLAS-addressable matrices; attention unit stride along D.
const passes::Capabilities& capabilities();

/// A schedule place as a view of real memory.
using ViewOf = std::function<View(const passes::Place&)>;

/// The kernel of a kNode or kCopy step; collectives (all_reduce) run through `comm`.
Kernel step_kernel(const ir::Graph& g, const passes::Step& st, const ViewOf& view, dist::Communicator* comm);
/// The register program of a kGroup step (group `group`).
FusedSpec group_spec(const ir::Graph& g, const passes::KernelGroup& group, const passes::Step& st,
                     const ViewOf& view);
/// Floating-point operations of a step (products and attention; groups: one per element and op).
int64_t step_flops(const ir::Graph& g, const passes::Step& st);

}  // namespace tg::backend::cpu
