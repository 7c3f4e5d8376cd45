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

struct Buffer;
struct Place;
struct Step;

/// A product's neighbours its step may compute too (epilogues), found by the schedule:
/// x·W + b with b a broadcast vector, then gelu(·) or (·) + r with r dense, and a norm step
/// (norm + affine) whose value only this product reads, as its left operand; and a cast of an
/// f32 left operand to bf16 that only this product reads (the product rounds as it reads), the
/// norm step then feeding the cast.
struct ProductCandidates {
  int32_t bias_add = -1, gelu = -1, residual_add = -1;  // -1: none
  int32_t norm_step = -1, norm = -1;                    // the norm step and its norm node
  int32_t cast_step = -1, cast = -1;                    // the cast's group step and node
};
/// What a backend's product step takes of its candidates, and how it lays out the output.
/// A norm candidate behind a cast candidate is taken only with the cast.
struct ProductChoice {
  bool bias = false, gelu = false, residual = false, norm = false, cast = false;
  std::vector<int64_t> out_strides;  // empty: dense
  int64_t out_bytes = -1;            // -1: the dense size
  std::vector<int64_t> scratch;      // bytes of each scratch buffer its kernels use
};
/// How a node's step lays out what it writes, when not dense and one after the other.
struct NodeLayout {
  std::vector<int64_t> strides;  // single result: its strides (empty: dense)
  int64_t bytes = -1;            // its buffer's size (-1: the dense size)
  bool zero_padding = false;     // the gaps the strides leave are written as zeros
  struct Result {
    std::vector<int64_t> strides;  // empty: dense
    int64_t offset = 0;            // elements into the node's buffer (results listed: all given)
    int64_t own_bytes = -1;        // > 0: a buffer of its own of this size instead
  };
  std::vector<Result> results;   // multi-output nodes (empty: dense, one after the other)
  int32_t concat = -1;           // the results are written as this concat's rows: it is a view
  std::vector<int64_t> scratch;  // bytes of each scratch buffer its kernels use
};

/// What a backend tells the schedule about itself. The defaults describe a backend with
/// none of the fused steps beyond elementwise groups.
class Capabilities {
 public:
  virtual ~Capabilities() = default;
  /// Whether `consumer`'s kernel reads its input `index` through `strides` as they are
  /// (elements; 0 = broadcast). False gets the kernel a dense copy.
  virtual bool reads(const ir::Graph& g, const ir::Node& consumer, size_t index,
                     const std::vector<int64_t>& strides) const = 0;
  /// Elementwise groups may end in reduction sinks (fusion.h).
  virtual bool reduction_sinks() const { return true; }
  /// Group steps with reduction sinks may share a launch with other group steps.
  virtual bool batch_sinks() const { return true; }
  /// The most buffer operands one batched launch may take.
  virtual size_t batch_operands() const { return SIZE_MAX; }
  /// Arena buffer sizes are rounded up to this many bytes (offsets are 64-byte aligned anyway).
  virtual int64_t alignment() const { return 1; }
  /// The layout of a node's step (`in`: its operands' places, `buffers` the schedule's so far).
  virtual NodeLayout layout(const ir::Graph&, int32_t, const std::vector<Place>&,
                            const std::vector<Buffer>&) const {
    return {};
  }
  /// Strides for an elementwise group's stored output `node` when its kernel should write it
  /// other than dense: rows padded (last stride 1, rows `ld` apart) so that a product reads
  /// them aligned, the padding written as zeros (Buffer::pad_ld). Empty: dense. Only asked
  /// for groups without reduction sinks.
  virtual std::vector<int64_t> group_output_strides(const ir::Graph&, int32_t) const { return {}; }
  /// Whether product steps may take epilogues or a norm (else product() sees no candidates).
  virtual bool fuses_products() const { return false; }
  /// A product step's epilogues and output layout.
  virtual ProductChoice product(const ir::Graph&, int32_t, const std::vector<Place>&,
                                const std::vector<Buffer>&, const ProductCandidates&) const {
    return {};
  }
  /// Whether a norm and the affine group {·w[, +b]} that alone reads it run as one step.
  virtual bool norm_affine(const ir::Graph&, int32_t) const { return false; }
  /// Whether a norm step's value read only by a product's left operand may wait for it (the
  /// product may then normalise the rows itself: ProductChoice::norm).
  virtual bool norm_deferrable(const ir::Graph&, int32_t) const { return false; }
  /// Whether a cast to bf16 read only by a product's left operand may wait for it (the product
  /// then reads the f32 values and rounds them itself: ProductChoice::cast).
  virtual bool cast_deferrable(const ir::Graph&, int32_t /*cast*/, int32_t /*product*/) const {
    return false;
  }
  /// Whether a norm gradient with its neighbours (dy = dz·w, Σ dz, Σ dz·norm(x)) runs as one
  /// step, and the scratch that step's kernels use (its Step::Fused filled in).
  virtual bool norm_backward(const ir::Graph&, int32_t) const { return false; }
  virtual std::vector<int64_t> norm_backward_scratch(const ir::Graph&, const Step&) const { return {}; }
  /// Whether update_slice writes the rows into its state in place when nothing else reads it.
  virtual bool update_rows_in_place() const { return false; }
  /// Whether a pair of in-place row updates (update_rows_in_place's sibling) may read its two
  /// sources through different strides (else they must share them).
  virtual bool sibling_rows_any_strides() const { return false; }
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
  // Rows `pad_ld` elements apart whose `pad_cols` values are followed by zeros up to pad_ld,
  // written so by the node that owns the buffer (NodeLayout::zero_padding); 0: unknown.
  int64_t pad_ld = 0, pad_cols = 0;
  int64_t offset = 0;  // arena byte offset
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
  // kNode: `in` one place per node input, `out` the node's place (then its results' own
  // buffers, NodeLayout::Result::own_bytes, in result order). Fused kNode steps (Step::Fused):
  //   a product: a (the cast's f32 input when it absorbed the cast), b (a quant_matmul's q,
  //     then its scale), then the bias, the residual and the absorbed norm step's inputs, those
  //     present; out: the value of its last epilogue node;
  //   a norm with its affine group: x, w[, b]; out: the affine value;
  //   a norm gradient with its neighbours: x, dz[, w]; out: dx[, dw][, db];
  //   update_slice rows written in place: src, pos, dst[, the sibling's src, dst]; out: dst.
  // kGroup: the group's external inputs (first use), then its stored outputs in group.outputs
  // order with reduction sinks last. kCopy: the source, then the dense destination.
  std::vector<int32_t> operand_nodes;  // kGroup: the node of each operand
  std::vector<Place> in, out;
  std::vector<Place> scratch;  // arena scratch the step's kernels use (NodeLayout/ProductChoice)
  // kNode steps that compute more than their node (the backend reads these instead of
  // recognising anything): a product's epilogue nodes and the norm step it absorbed; a norm
  // step's affine nodes; a norm gradient's neighbours; an update_slice's sibling.
  struct Fused {
    int32_t bias_add = -1, gelu = -1, residual_add = -1, norm_step = -1;  // products
    int32_t cast_step = -1;                                               // products: absorbed cast
    int32_t mul = -1, add = -1;                                           // norm + affine
    int32_t dy_mul = -1, dw = -1, dw_mul = -1, db = -1, recompute = -1;   // norm gradients
    int32_t sibling = -1;                                                 // update_slice pairs
    bool rows_in_place = false;  // update_slice writing only its rows, into the state itself
  } fused;
  bool absorbed = false;  // a norm or cast step a product computes itself: emits nothing
  NodeLayout layout;      // kNode: what Capabilities::layout chose
  int32_t launch = -1;    // steps sharing a launch index run as one kernel
  int64_t bytes = 0;      // at least moved: distinct elements read and written
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
  std::vector<Update> updates;                                         // graph.updates order
  std::vector<int32_t> outputs;                                        // graph.outputs, deduplicated
  std::vector<Place> output_places;                                    // dense places valid after the step
  int64_t params = 0, optimizer_state = 0, inputs = 0, constants = 0;  // bytes outside the arena
  ArenaStats arena;
};

/// Schedules `graph` (already through the rewrites). Throws tg::Error on updates whose target
/// is not a param or state or whose value differs in dtype or size.
Schedule schedule(const ir::Graph& graph, const Capabilities& caps, const ScheduleOptions& options = {});

/// Whether `op` is a view (its value may alias its input's elements).
bool is_view_op(ir::Op op);

}  // namespace tg::passes
