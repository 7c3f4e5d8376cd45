// The scheduler's working state, shared by schedule.cc (places and steps) and
// schedule_arena.cc (outputs, updates, launches, the arena). Not part of the interface.
#pragma once
#include <string>
#include <vector>

#include "passes/schedule.h"

namespace tg::passes {

class Scheduler {
 public:
  Scheduler(const ir::Graph& g, const Capabilities& caps, const ScheduleOptions& options);
  Schedule run();

 private:
  // ---- places and steps (schedule.cc) ----
  void bind_leaves();
  void place_constant(int32_t id);
  void place_group(int32_t gi);
  void place_single(int32_t id);
  /// A view when every reader takes its strides, else a copy into the node's own buffer.
  void place_view(int32_t id, Place v);
  /// Input `index` of `consumer` as its kernel reads it: its place, or a dense scratch copy.
  Place readable(int32_t consumer, size_t index);
  bool all_read(int32_t id, const std::vector<int64_t>& strides) const;
  /// Whether group `group`'s output `value` may be written over its update's target (set in
  /// `target`): nothing reads the target's old contents after the group, the group reads it
  /// element for element, and no output or other update sees the old value.
  bool in_place_target(int32_t value, int32_t group, int32_t& target) const;
  int32_t add_buffer(Buffer b);
  Place own(int64_t bytes, DType dtype, Buffer::Category category, const Shape& shape);
  Place& own_node(int32_t id);
  /// A copy step of `node`'s value (its shape and dtype) from `from` to `to`, for `reader`.
  void add_copy(int32_t node, const Place& from, const Place& to, int32_t reader = -1);
  std::string ref(int32_t id) const;

  // ---- outputs, updates, launches, the arena (schedule_arena.cc) ----
  /// Outputs and update values read after the step are made dense in their own buffer when
  /// they are views, or alias a buffer that an update overwrites.
  void settle_outputs_and_updates();
  void assign_launches();
  void place_arena();

  const ir::Graph& g_;
  const Capabilities& caps_;
  ScheduleOptions options_;
  Schedule s_;
  std::vector<char> in_place_;  // per update
};

}  // namespace tg::passes
