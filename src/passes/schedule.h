// The schedule: every decision about where values live and which steps run, made once for
// any backend. A backend asks for a Schedule with its Capabilities, then only emits one
// kernel per step and runs the steps in order.
//
// What it decides:
//  - Buffers: one per bound leaf (param/state), per input and per constant (filled by the
//    backend from the node's values), and arena buffers for everything computed. Every buffer
//    has a dtype and a size; arena buffers get offsets from their lifetimes.
//  - Places: where each live node's elements are, as (buffer, byte offset, element strides).
//    Reshape of compatible layouts, Permute, BroadcastTo and Slice are views when every
//    reader's kernel takes the strides (Capabilities::reads), else a copy step makes them
//    dense. A kResult is its slice of the multi-output node's dense allocation. A one-value
//    constant read only by strided readers is one element at stride 0.
//  - Steps: an elementwise group (passes/fusion.h) as one step, any other node as one step,
//    and copy steps (a view made dense for a reader that cannot take its strides, an output
//    or update value settled dense after the step).
//  - In-place updates: an optimizer update whose value an elementwise group computes is
//    written straight over its target when nothing reads the old contents afterwards.
//  - Launches: consecutive independent group steps share one launch (multi-tensor batching).
//  - The arena: each arena buffer lives from the first to the last launch that touches it
//    (outputs and update values to the end); best-fit offsets over those intervals.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/fusion.h"

namespace tg::passes {

/// What a backend tells the schedule about itself.
class Capabilities {
 public:
  virtual ~Capabilities() = default;
  /// Whether `consumer`'s kernel reads its input `index` (of `shape`) through `strides` as
  /// they are (elements; 0 = broadcast). False gets the kernel a dense copy.
  virtual bool reads(const ir::Node& consumer, size_t index, const std::vector<int64_t>& strides,
                     const Shape& shape) const = 0;
  /// Elementwise groups may end in reduction sinks (fusion.h).
  virtual bool reduction_sinks() const { return true; }
  /// Group steps with reduction sinks may share a launch with other group steps.
  virtual bool batch_sinks() const { return true; }
  /// The most buffer operands one batched launch may take.
  virtual size_t batch_operands() const { return SIZE_MAX; }
  /// Arena buffer sizes are rounded up to this many bytes (offsets are 64-byte aligned anyway).
  virtual int64_t alignment() const { return 1; }
};

struct ScheduleOptions {
  bool fuse = true;          // elementwise groups and batched launches
  bool reuse_memory = true;  // arena buffers share space when their lifetimes do not overlap
};

struct Buffer {
  enum class Home : uint8_t { kArena, kBound, kInput, kConstant };
  enum class Category : uint8_t { kActivation, kGradient, kOptimizer, kScratch };
  Home home = Home::kArena;
  DType dtype = DType::kF32;
  int64_t bytes = 0;
  int32_t node = -1;  // kBound / kInput / kConstant: the leaf it holds
  Category category = Category::kScratch;
  int32_t first = -1, last = -1;  // launches touching it (arena)
  bool to_end = false;            // read after the last launch (outputs, update values)
  int64_t offset = 0;             // arena byte offset
};

/// Where elements are: element (i0, i1, …) at buffer + offset + Σ ik·strides[k]·dtype size.
struct Place {
  int32_t buffer = -1;  // -1: not placed (dead)
  int64_t offset = 0;   // bytes
  std::vector<int64_t> strides;
};

struct Step {
  enum class Kind : uint8_t { kGroup, kNode, kCopy };
  Kind kind = Kind::kNode;
  int32_t group = -1;  // kGroup: index into Schedule::fusion.groups
  // kNode: the node computed. kCopy: the node whose value (its shape and dtype) is copied.
  int32_t node = -1;
  std::vector<int32_t> nodes;  // what the step computes or serves (labels, profiles)
  // kNode: one place per node input, then the node's own (dense) place. kGroup: the group's
  // external inputs (ascending first use), then its stored outputs in group.outputs order
  // with reduction sinks last. kCopy: the source, then the dense destination.
  std::vector<int32_t> operand_nodes;  // kGroup: the node of each operand
  std::vector<Place> in, out;
  int32_t launch = -1;  // steps sharing a launch index run as one kernel
  int64_t bytes = 0;    // at least moved: distinct elements read and written
};

/// The arena as planned: its size, what one buffer each would take, and the bytes live at the
/// busiest launch by what they hold.
struct ArenaStats {
  int64_t bytes = 0, no_reuse = 0;
  int64_t activations = 0, gradients = 0, optimizer_temps = 0, scratch = 0;
};

/// Offsets for the kArena buffers of `buffers` over launches [0, end]: untouched ones at
/// launch 0, `to_end` ones (or all, without reuse) to the end; without reuse each gets its own
/// space. Buffers live at a common launch never overlap (tests/passes/memory_plan_test.cc).
ArenaStats place_arena(std::vector<Buffer>& buffers, int32_t end, bool reuse);

struct Schedule {
  Fusion fusion;
  std::vector<std::vector<int32_t>> consumers;  // live readers per node
  std::vector<Buffer> buffers;
  std::vector<Place> places;  // per node
  std::vector<Step> steps;    // in execution order
  int32_t launches = 0;
  struct Update {
    int32_t target = -1, value = -1;
    bool in_place = false;  // the value's step wrote the target; nothing to copy
    Place source;           // else: a dense place holding the value after the last launch
  };
  std::vector<Update> updates;         // graph.updates order
  std::vector<int32_t> outputs;        // graph.outputs, deduplicated
  std::vector<Place> output_places;    // dense places valid after the step
  int64_t params = 0, optimizer_state = 0, inputs = 0, constants = 0;  // bytes outside the arena
  ArenaStats arena;
};

/// Schedules `graph` (already through the rewrites). Throws tg::Error on updates whose target
/// is not a param or state or whose value differs in dtype or size.
Schedule schedule(const ir::Graph& graph, const Capabilities& caps, const ScheduleOptions& options = {});

/// Whether `op` is a view (its value may alias its input's elements).
bool is_view_op(ir::Op op);

}  // namespace tg::passes
