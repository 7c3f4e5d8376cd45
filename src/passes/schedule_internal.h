// The scheduler's working state, shared by schedule.cc (places and steps) and
// schedule_arena.cc (outputs, updates, launches, the arena). Not part of the interface.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "passes/schedule.h"

namespace tg::passes {

/// What a node's buffer holds, by the stage that computes it.
inline Buffer::Category category_of(const ir::Node& n) {
  return n.stage == ir::Stage::kBackward    ? Buffer::Category::kGradient
         : n.stage == ir::Stage::kOptimizer ? Buffer::Category::kOptimizer
                                            : Buffer::Category::kActivation;
}

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
  /// Node `input` read by `consumer`'s kernel as its input `index` (a fused step reads nodes
  /// its own node does not).
  Place readable_as(int32_t consumer, size_t index, int32_t input);
  /// A node with a kernel of its own, laid out as Capabilities::layout says.
  void place_node(int32_t id);
  void set_place(int32_t id, const Place& p);
  bool placed(int32_t id) const { return placed_[static_cast<size_t>(id)] != 0; }
  bool escapes(int32_t id) const;
  /// The only reader of `id` when nothing after the step reads it, else -1.
  int32_t sole_reader(int32_t id) const;
  /// The node a chain of BroadcastTo / Reshape views starts from.
  int32_t view_source(int32_t id) const;
  /// Places the views between `id` and the first placed node it views, ahead of their turn.
  void place_view_chain(int32_t id);

  // ---- fused steps beyond elementwise groups (schedule_fused.cc) ----
  bool place_norm_affine(int32_t id);
  void place_product(int32_t id);
  ProductCandidates product_candidates(int32_t id);
  /// `node` (an epilogue) is computed by product `product`'s step: it leaves its group.
  void absorb(int32_t node, int32_t product);
  bool place_update_rows(int32_t id);
  void match_norm_backwards();
  /// Places the norm-gradient steps due at group `gi`; true when the group was absorbed.
  bool place_norm_backwards_at(int32_t gi);
  Place add_scratch(int64_t bytes);
  /// A kNode step of node `id`, computing it alone so far.
  static Step node_step(int32_t id) {
    Step st;
    st.kind = Step::Kind::kNode;
    st.node = id;
    st.nodes = {id};
    return st;
  }
  struct NormBackward {
    int32_t grad = -1, x = -1, dz = -1, w = -1, first_group = -1;
    Step::Fused fused;
  };
  std::vector<NormBackward> norm_backwards_;
  std::vector<char> absorbed_groups_;     // per group: run by a norm-gradient step
  std::vector<int32_t> deferrable_norm_;  // per node: the norm step whose value it is, or -1
  std::vector<int32_t> deferrable_cast_;  // per node: the cast group step whose value it is, or -1
  /// Every reader of `id` when all are products reading it as their left operand (and nothing
  /// after the step reads it), else none.
  std::vector<int32_t> left_operand_products(int32_t id) const;
  /// Whether only products read `id` as their left operand, directly or through one cast to
  /// bf16 that may wait for them (cast_waits): a norm step writing `id` may wait for them too.
  bool read_as_left_operands(int32_t id) const;
  /// A deferred norm or cast step that a product computes itself emits nothing (absorb_step),
  /// unless another product reading it cannot (keep_step: it runs, whoever else absorbs it).
  void absorb_step(int32_t step);
  void keep_step(int32_t step);
  std::set<int32_t> kept_steps_;
  /// A cast to bf16 that a product may read as it goes (Capabilities::cast_deferrable) leaves the
  /// elementwise group it was fused into, for a group of its own right after it: the product
  /// can then take it, and the norm's affine group before it can join the norm's step.
  void split_waiting_casts();
  /// Whether `id` is a cast of f32 to bf16 that only products read, as their left operand, and
  /// that the backend lets each of them compute (Capabilities::cast_deferrable).
  bool cast_feeds_product(int32_t id) const;
  /// Whether cast `id`, alone in its group, may be computed by the products that read it.
  bool cast_waits(int32_t id) const;
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
  std::vector<char> placed_;    // per node
};

}  // namespace tg::passes
