// compile_train / compile_forward and the Program methods: the pipeline driver
// (trace → autograd → optimizer → passes → backend) and the run-time checks that keep bad
// inputs from ever reaching a backend.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_set>

#include "autograd/grad.h"
#include "distributed/communicator.h"
#include "ir/api_util.h"
#include "ir/trace.h"
#include "optim/loss_scale.h"
#include "optim/optimizer.h"
#include "passes/dce.h"
#include "passes/hoist.h"
#include "passes/rewrite.h"
#include "runtime/freeze.h"
#include "runtime/storage.h"
#include "runtime/tracer.h"
#include "tensorgrad/distributed.h"
#include "util/switches.h"

namespace tg {
namespace detail {

/// One lowering of the program's graph: the plain one, or the variant that also keeps the
/// captures. Node ids of the full (pre-DCE) graph map to this variant's ids through `remap`.
struct Variant {
  ir::Graph graph;
  std::vector<int32_t> remap;
  std::unique_ptr<backend::Executable> exec;
  // Inference programs: the values computed from parameters alone (passes/hoist.h), written
  // into `hoisted` by `prologue`, which runs again whenever the store's parameters changed.
  // The buffers live in the store, by expression: programs computing the same value share it.
  std::unique_ptr<backend::Executable> prologue;
  std::map<std::string, std::string> hoisted;  // "hoisted/<i>" → its expression (passes/hoist.h)
  uint64_t prologue_version = 0;
  int32_t id(int32_t full_id) const { return remap[static_cast<size_t>(full_id)]; }
};

struct ProgramState {
  bool train = false;
  bool optimize = true;  // run the rewriting passes before DCE
  bool tf32 = false;     // Precision::kTf32
  bool tf32x3 = false;   // Precision::kTf32x3
  std::shared_ptr<DeviceStore> store;
  dist::Communicator* comm = nullptr;  // data parallelism: the ranks the collectives sum over
  ir::Graph full;                      // after autograd and the optimizer, before any pass
  Variant plain;
  std::unique_ptr<Variant> with_captures;  // prepared on first request
  std::vector<InputSpec> inputs;
  std::vector<int32_t> input_nodes;                       // full-graph ids, parallel to inputs
  int32_t output = -1;                                    // full-graph id
  std::vector<std::pair<std::string, int32_t>> captures;  // name → full-graph id
  std::vector<int32_t>
      kept;              // full-graph ids the plain variant keeps as outputs (GradientsOnly: the gradients)
  int32_t rng_key = -1;  // full-graph id of the random ops' key input, or -1
  uint32_t calls = 0;    // advances the random streams every step/run
  // Training only.
  Optimizer optimizer;
  Schedule schedule;
  double base_lr = 0;
  int64_t steps = 0;
  optim::UpdatePlan plan;
  int32_t finite = -1;  // skip_nonfinite: full-graph id of the bool "every gradient is finite"
  std::optional<LossScaling> loss_scaling;  // when enabled
  int64_t skipped = 0;
  bool last_skipped = false;
  std::map<std::string, std::unique_ptr<backend::Buffer>>
      state_buffers;                     // the optimizer's, this program's own
  std::vector<std::string> user_states;  // tg::state() names this program reads (buffers in the store)
};

namespace {

/// TG_PROFILE: where compile_train / compile_forward spend their host time, one line per stage.
class StageTimer {
 public:
  StageTimer() : on_(env::is_set(env::Switch::kProfile)), last_(std::chrono::steady_clock::now()) {}
  void mark(const char* stage) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    std::fprintf(stderr, "[compile] %-22s %8.1f ms\n", stage,
                 std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point last_;
};

/// FNV-1a over `n` bytes, continuing from `h` (kFnvBasis to start).
constexpr uint64_t kFnvBasis = 1469598103934665603ull;
uint64_t fnv1a(const void* data, size_t n, uint64_t h) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(data)[i]) * 1099511628211ull;
  return h;
}

/// The first rank whose `h` differs from rank 0's, or 0 when every rank holds the same.
int rank_that_differs(dist::Communicator& comm, uint64_t h) {
  std::vector<uint64_t> all(static_cast<size_t>(comm.size()));
  comm.all_gather_bytes(&h, all.data(), sizeof h);
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) return static_cast<int>(r);
  return 0;
}

/// Every rank must run the same collectives in the same order, or the engine waits forever:
/// the ranks compare a hash of the graph they are about to prepare.
void check_same_graph(dist::Communicator& comm, const ir::Graph& g) {
  const std::string listing = g.to_string();
  if (const int r = rank_that_differs(comm, fnv1a(listing.data(), listing.size(), kFnvBasis)); r > 0)
    throw DistributedError("[compile_train] rank " + std::to_string(r) +
                           " compiled a different training step than rank 0 (another model, inputs or "
                           "options): data-parallel ranks must compile the same programs in the same order");
}

/// The buffers of `g`'s params and states: the store's params and tg::state() tensors, the
/// program's own optimizer state, and `v`'s hoisted values.
backend::Bindings bind_leaves(ProgramState& s, Variant& v, const ir::Graph& g) {
  backend::Bindings bindings;
  for (int32_t id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.node(id);
    if (n.op == ir::Op::kParam) {
      bindings[id] = s.store->buffers.at(n.name).get();
    } else if (n.op == ir::Op::kState && n.name.rfind(passes::kHoistedPrefix, 0) == 0) {
      auto& buf = s.store->hoisted[v.hoisted.at(n.name)];
      if (!buf) buf = s.store->backend->allocate(n.dtype, n.numel());
      bindings[id] = buf.get();
    } else if (n.op == ir::Op::kState && n.name.rfind(ir::kUserStatePrefix, 0) == 0) {
      // tg::state(): one buffer per model and device, shared by every program naming it.
      const std::string name = n.name.substr(std::string(ir::kUserStatePrefix).size());
      auto& buf = s.store->states[name];
      const double initial = n.attrs.values.empty() ? 0.0 : n.attrs.values[0];
      if (!buf) {
        buf = s.store->backend->allocate(n.dtype, n.numel());
        s.store->state_shapes[name] = n.shape;
        s.store->state_initial[name] = initial;
        s.store->reset_state(name);
      } else if (buf->dtype() != n.dtype || s.store->state_shapes.at(name) != n.shape ||
                 s.store->state_initial.at(name) != initial) {
        throw InputError("[state] '" + name + "' is " + shape_str(s.store->state_shapes.at(name)) + " " +
                         dtype_name(buf->dtype()) + " starting at " +
                         std::to_string(s.store->state_initial.at(name)) +
                         " in another program of this model, " + shape_str(n.shape) + " " +
                         dtype_name(n.dtype) + " starting at " + std::to_string(initial) + " here");
      }
      if (std::find(s.user_states.begin(), s.user_states.end(), name) == s.user_states.end())
        s.user_states.push_back(name);
      bindings[id] = buf.get();
    } else if (n.op == ir::Op::kState) {
      auto& buf = s.state_buffers[n.name];  // shared by both variants
      if (!buf) buf = s.store->backend->allocate(n.dtype, n.numel());
      bindings[id] = buf.get();
    }
  }
  return bindings;
}

/// DCE, buffer binding and backend preparation of one variant: `keep` extra full-graph
/// nodes become outputs (captures). An optimized inference program also gets its prologue.
Variant lower(ProgramState& s, const std::vector<int32_t>& keep) {
  StageTimer timer;
  ir::Graph g = s.full;
  for (int32_t id : keep) g.outputs.push_back(id);
  Variant v;
  if (s.optimize) {
    v.graph = passes::optimize(g, v.remap);  // simplify/fold, unslice sums → concat, CSE, DCE
  } else {
    v.graph = passes::eliminate_dead_code(g, v.remap);
  }
  timer.mark(s.optimize ? "passes::optimize" : "dce");
  passes::Hoisted hoisted;
  if (s.optimize && !s.train) {
    // Its rewrites apply with nothing hoisted too (a quantized weight's cast before its views).
    hoisted = passes::hoist_parameter_values(v.graph);
    v.graph = std::move(hoisted.main);
    for (int32_t i = 0; i < hoisted.count; ++i)
      v.hoisted[passes::kHoistedPrefix + std::to_string(i)] = hoisted.keys[static_cast<size_t>(i)];
    for (int32_t& id : v.remap)
      if (id >= 0) id = hoisted.remap[static_cast<size_t>(id)];
    timer.mark("passes::hoist");
  }
  backend::PrepareOptions prepare;
  prepare.fuse = prepare.reuse_memory = s.optimize;
  prepare.tf32 = s.tf32;
  prepare.tf32x3 = s.tf32x3;
  prepare.early_launch = !s.train;
  prepare.communicator = s.comm;
  const backend::Bindings bindings = bind_leaves(s, v, v.graph);
  timer.mark("bindings + state alloc");
  backend::require_supported(*s.store->backend, v.graph);
  v.exec = s.store->backend->prepare(v.graph, bindings, prepare);
  timer.mark("backend prepare");
  if (hoisted.count > 0) {
    backend::require_supported(*s.store->backend, hoisted.prologue);
    v.prologue = s.store->backend->prepare(hoisted.prologue, bind_leaves(s, v, hoisted.prologue), prepare);
    timer.mark("prologue prepare");
  }
  return v;
}

/// Runs `v`'s prologue when the parameters changed since it last ran.
void refresh_hoisted(ProgramState& s, Variant& v) {
  if (!v.prologue || v.prologue_version == s.store->version) return;
  v.prologue->execute();
  v.prologue_version = s.store->version;
}

void finish(ProgramState& s, Traced t) {
  t.graph.outputs = {t.result};
  s.full = std::move(t.graph);
  s.input_nodes = t.input_nodes;
  s.output = t.result;
  s.captures = std::move(t.captures);
  s.rng_key = t.rng_key;
  s.plain = lower(s, s.kept);
  // Once per program (the captures variant runs the same collectives in the same order).
  if (s.comm != nullptr) check_same_graph(*s.comm, s.plain.graph);
}

Variant& variant_for(ProgramState& s, bool captures) {
  if (!captures) return s.plain;
  // The plain variant serves captures too when it keeps every one (GradientsOnly, no tg::capture).
  const bool plain_has_all = std::all_of(s.captures.begin(), s.captures.end(), [&](const auto& c) {
    return std::find(s.kept.begin(), s.kept.end(), c.second) != s.kept.end();
  });
  if (plain_has_all) return s.plain;
  if (!s.with_captures) {
    std::vector<int32_t> keep = s.kept;  // what step() reads besides the loss (the finite flag)
    for (const auto& [name, id] : s.captures) keep.push_back(id);
    s.with_captures = std::make_unique<Variant>(lower(s, keep));
  }
  return *s.with_captures;
}

void read_captures(ProgramState& s, Variant& v, Captures& out) {
  out.clear();
  for (const auto& [name, id] : s.captures) {
    const ir::Node& n = v.graph.node(v.id(id));
    HostTensor t(n.dtype, n.shape);
    v.exec->read_output(v.id(id), t.data());
    out.emplace(name, std::move(t));
  }
}

/// TG_DIST_CHECK=1: data-parallel ranks apply the same update to the same parameters, so their
/// parameters must stay bitwise equal; each rank hashes its own and the hashes are compared.
void check_same_params(ProgramState& s) {
  uint64_t h = kFnvBasis;  // over every parameter's bytes, by name
  for (const auto& [name, buffer] : s.store->buffers) {
    std::vector<uint8_t> bytes(static_cast<size_t>(buffer->numel() * dtype_size(buffer->dtype())));
    s.store->backend->download(*buffer, bytes.data());
    h = fnv1a(bytes.data(), bytes.size(), h);
  }
  if (const int r = rank_that_differs(*s.comm, h); r > 0)
    throw DistributedError("[step] TG_DIST_CHECK: after step " + std::to_string(s.steps) +
                           " the parameters of rank " + std::to_string(r) + " differ from rank 0's");
}

void set_inputs(ProgramState& s, Variant& v, const Feeds& feeds, const char* api) {
  std::vector<const Feed*> by_input(s.inputs.size(), nullptr);
  for (const Feed& f : feeds) {
    size_t i = 0;
    while (i < s.inputs.size() && s.inputs[i].name != f.name) ++i;
    if (i == s.inputs.size())
      throw InputError(std::string("[") + api + "] unknown input '" + f.name +
                       "'; this program's inputs are: " + names_list(s.inputs));
    if (by_input[i] != nullptr)
      throw InputError(std::string("[") + api + "] input '" + f.name + "' is given twice");
    const InputSpec& spec = s.inputs[i];
    if (f.value.dtype != spec.dtype || f.value.numel != numel(spec.shape))
      throw InputError(std::string("[") + api + "] input '" + f.name + "' expects " + dtype_name(spec.dtype) +
                       " with " + std::to_string(numel(spec.shape)) + " elements (shape " +
                       shape_str(spec.shape) + "), got " + dtype_name(f.value.dtype) + " with " +
                       std::to_string(f.value.numel) + " elements");
    if (f.value.data == nullptr && f.value.numel > 0)
      throw InputError(std::string("[") + api + "] input '" + f.name + "' has no data");
    by_input[i] = &f;
  }
  for (size_t i = 0; i < s.inputs.size(); ++i)
    if (by_input[i] == nullptr)
      throw InputError(std::string("[") + api + "] missing input '" + s.inputs[i].name + "'");
  for (size_t i = 0; i < s.inputs.size(); ++i)
    v.exec->set_input(v.id(s.input_nodes[i]), by_input[i]->value.data);
  if (s.rng_key >= 0) {
    const auto key = static_cast<int32_t>(s.calls++);
    v.exec->set_input(v.id(s.rng_key), &key);
  }
}

/// The communicator a data-parallel program sums over (nullptr: one rank, no collectives).
dist::Communicator* data_parallel_communicator(const TrainOptions& options) {
  if (options.shard_optimizer && !options.data_parallel)
    throw InputError(
        "[compile_train] shard_optimizer shards the optimizer state over data-parallel ranks: it needs "
        "data_parallel = true");
  if (options.shard_optimizer && std::holds_alternative<GradientsOnly>(options.optimizer))
    throw InputError(
        "[compile_train] shard_optimizer shards the optimizer state, and tg::GradientsOnly has none: "
        "leave shard_optimizer off (data_parallel alone averages the gradients)");
  if (!options.data_parallel) return nullptr;
  if (!distributed::initialized())
    throw Error("[compile_train] data_parallel needs tg::distributed::init() first (it joins the ranks)");
  dist::Communicator* comm = dist::world();
  if (comm == nullptr) return nullptr;  // a world of one
  if (options.bucket_bytes <= 0)
    throw InputError("[compile_train] bucket_bytes must be positive, got " +
                     std::to_string(options.bucket_bytes));
  const distributed::World& w = distributed::world();
  const bool cuda = options.device.kind == Device::Kind::kCuda;
  if (comm->engine() == dist::Engine::kNccl && (!cuda || options.device.index != w.local_rank))
    throw Error("[compile_train] rank " + std::to_string(w.rank) + " joined with NCCL on cuda:" +
                std::to_string(w.local_rank) + " but compiles for " + options.device.str() +
                ": use .device = tg::Device::cuda(tg::distributed::world().local_rank)");
  if (comm->engine() == dist::Engine::kMpi && cuda)
    throw Error("[compile_train] rank " + std::to_string(w.rank) +
                " joined with MPI, which sums host memory: data-parallel GPU programs need the NCCL engine "
                "(launch with torchrun-style variables, or init({.engine = \"nccl\"}))");
  return comm;
}

void check_micro_batches(const std::vector<InputSpec>& inputs, int64_t k) {
  if (k < 1)
    throw InputError("[compile_train] micro_batches is " + std::to_string(k) + "; it must be at least 1");
  if (k == 1) return;
  for (const InputSpec& spec : inputs)
    if (spec.shape.empty() || spec.shape[0] % k != 0)
      throw InputError("[compile_train] micro_batches = " + std::to_string(k) +
                       " splits every input along its first axis, but input '" + spec.name + "' has shape " +
                       shape_str(spec.shape) +
                       (spec.shape.empty() ? " (a scalar)"
                                           : " (" + std::to_string(spec.shape[0]) + " is not a multiple of " +
                                                 std::to_string(k) + ")"));
}

}  // namespace

Program compile_train(Module& model, const TracedFn& fn, size_t arity, TrainOptions options) {
  StageTimer timer;
  auto s = std::make_shared<ProgramState>();
  s->train = true;
  s->optimize = options.optimize;
  s->tf32 = options.precision == Precision::kTf32;
  s->tf32x3 = options.precision == Precision::kTf32x3;
  s->comm = data_parallel_communicator(options);
  s->store = device_store(model, options.device);
  timer.mark("device store + init");
  check_inputs(arity, options.inputs, "compile_train");
  const int64_t k = options.micro_batches;
  check_micro_batches(options.inputs, k);
  Tracer tracer(options.inputs, options.training, options.seed, options.precision, options.keep_f32,
                "compile_train");
  ir::Trace& tr = tracer.trace();
  ir::Graph& g = tracer.graph();
  // Micro-batch i: trace the function on slice i of every input, append its backward at once
  // (so the schedule, which runs in node order, frees slice i's activations before slice i+1's
  // forward) and add its gradients to the sums so far. One slice: the plain training step.
  const std::unordered_set<const Param*> frozen = frozen_params(model, options.frozen);
  std::unordered_map<int32_t, int32_t> grad_of;  // param leaf → its (summed) gradient
  std::map<int32_t, int32_t> last_update;        // state leaf → the last value assigned to it
  Tensor loss;
  // Loss scaling: each slice's backward starts from its loss · scale (loss_scale.h).
  s->loss_scaling = optim::resolve_loss_scaling(options.loss_scaling, options.precision == Precision::kF16);
  const optim::LossScale scale =
      s->loss_scaling ? optim::loss_scale(g, *s->loss_scaling) : optim::LossScale{};
  for (int64_t i = 0; i < k; ++i) {
    tr.micro_batch = static_cast<int32_t>(i);
    g.stage = ir::Stage::kForward;
    std::vector<Tensor> args = tracer.inputs();
    if (k > 1)
      for (Tensor& a : args) a = slice(a, 0, i * (a.shape()[0] / k), (i + 1) * (a.shape()[0] / k));
    const Tensor r = tracer.call(fn, args);
    if (r.numel() != 1 || r.dtype() != DType::kF32)
      throw ShapeError("[compile_train] the loss must be a single f32 value, got " +
                       std::string(dtype_name(r.dtype())) + shape_str(r.shape()) + " (computed at " +
                       ir::loc_str(g.node(r.id()).loc) + "); reduce it with tg::mean or tg::sum");
    // The step's loss is the slices' mean; each slice's gradient is scaled to match.
    const Tensor part = k > 1 ? r * (1.0 / static_cast<double>(k)) : r;
    loss = loss.valid() ? loss + part : part;
    std::vector<int32_t> leaves;
    for (const Param* p : tr.params)  // frozen ones are read but not differentiated (freeze.cc)
      if (frozen.count(p) == 0) leaves.push_back(tr.param_nodes.at(p));
    g.stage = ir::Stage::kBackward;
    const Tensor seed = s->loss_scaling ? part * Tensor(&g, scale.value) : part;
    const std::vector<int32_t> grads = autograd::append_gradients(g, seed.id(), leaves);
    for (size_t j = 0; j < leaves.size(); ++j) {
      if (grads[j] < 0) continue;
      auto [it, fresh] = grad_of.emplace(leaves[j], grads[j]);
      if (!fresh) it->second = (Tensor(&g, it->second) + Tensor(&g, grads[j])).id();
    }
    // The next slice reads the states this one assigned (batch norm's running statistics
    // advance once per slice, as with accumulation in PyTorch).
    if (k == 1) break;
    for (const ir::Graph::Update& u : g.updates) {
      tr.state_values[g.node(u.target).name] = u.value;
      tr.state_leaf_of[u.value] = u.target;
      last_update[u.target] = u.value;
    }
    g.updates.clear();
  }
  for (const auto& [target, value] : last_update) g.updates.push_back({target, value});
  g.stage = ir::Stage::kForward;
  if (s->comm != nullptr) {
    // The loss every rank reports: the mean over the ranks.
    const int32_t sums = ir::emit(g, ir::make_node(ir::Op::kAllReduce, {loss.id()}, Loc::current())).id();
    loss = ir::result(g, sums, 0, Loc::current()) * (1.0 / s->comm->size());
  }
  Traced t = tracer.finish(model, loss.id(), options.keep_f32);
  timer.mark("trace + autograd");
  std::vector<int32_t> grads;
  for (const auto& [path, node] : t.params) {
    auto it = grad_of.find(node);
    grads.push_back(it == grad_of.end() ? -1 : it->second);
  }
  // ZeRO-1 reduces the gradients bucket by bucket inside append_sharded_update instead.
  const bool sharded = s->comm != nullptr && options.shard_optimizer;
  t.graph.stage = ir::Stage::kBackward;
  if (s->comm != nullptr && !sharded)
    grads = optim::average_over_ranks(t.graph, grads, s->comm->size(), options.bucket_bytes);
  // Unscaled after the all_reduces, which then read the backward's own values.
  const std::vector<int32_t> scaled = s->loss_scaling ? optim::unscale(t.graph, grads, scale) : grads;
  std::vector<optim::ParamGrad> pg, checked;  // checked: the scaled gradients (the same finiteness)
  for (size_t i = 0; i < t.params.size(); ++i) {
    if (grads[i] < 0) continue;  // does not affect the loss: left untouched, as PyTorch does
    pg.push_back({t.params[i].first, t.params[i].second, grads[i],
                  s->store->infos.at(t.params[i].first).decay, false});
    checked.push_back(pg.back());
    checked.back().grad = scaled[i];
    t.captures.emplace_back("grad/" + t.params[i].first, grads[i]);
    if (std::holds_alternative<GradientsOnly>(options.optimizer)) s->kept.push_back(grads[i]);
  }
  t.graph.stage = ir::Stage::kOptimizer;
  if (sharded) {
    optim::ShardedUpdate z = optim::append_sharded_update(
        t.graph, pg, options.optimizer, options.clip_grad_norm, s->comm->size(), options.bucket_bytes);
    s->plan = std::move(z.plan);
    pg = std::move(z.shards);  // the gradients the update reads: this rank's parts of the mean
  } else {
    s->plan = optim::append_update(t.graph, pg, options.optimizer, options.clip_grad_norm);
  }
  if ((options.skip_nonfinite && !t.graph.updates.empty()) || s->loss_scaling) {
    // Unsharded, the check reads the scaled gradients: the unscaled ones keep one reader each
    // (the update), into which their unscaling fuses.
    const Tensor ok = optim::append_skip_nonfinite(t.graph, sharded ? pg : checked, sharded);
    if (s->loss_scaling) optim::append_loss_scale_update(t.graph, scale, ok, *s->loss_scaling);
    s->finite = ok.id();
    s->kept.push_back(ok.id());
  }
  timer.mark("optimizer graph");
  t.graph.stage = ir::Stage::kForward;
  s->inputs = options.inputs;
  s->optimizer = options.optimizer;
  s->schedule = options.schedule ? options.schedule : lr::constant();
  s->base_lr = optim::base_lr(options.optimizer);
  finish(*s, std::move(t));
  return Program(s);
}

Program compile_forward(Module& model, const TracedFn& fn, size_t arity, ForwardOptions options) {
  auto s = std::make_shared<ProgramState>();
  s->optimize = options.optimize;
  s->tf32 = options.precision == Precision::kTf32;
  s->tf32x3 = options.precision == Precision::kTf32x3;
  s->store = device_store(model, options.device);
  check_inputs(arity, options.inputs, "compile_forward");
  Tracer tracer(options.inputs, options.training, options.seed, options.precision, options.keep_f32,
                "compile_forward");
  const int32_t result = tracer.call(fn, tracer.inputs()).id();
  Traced t = tracer.finish(model, result, options.keep_f32);
  s->inputs = options.inputs;
  finish(*s, std::move(t));
  return Program(s);
}

}  // namespace detail

const ir::Graph& detail::compiled_graph(const Program& program) { return program.state().plain.graph; }
const backend::Executable& detail::compiled_executable(const Program& program) {
  return *program.state().plain.exec;
}

detail::ProgramState& Program::state() const {
  if (!state_)
    throw Error("[Program] this program is empty: assign the result of compile_train/compile_forward first");
  return *state_;
}

float Program::step(const Feeds& feeds, StepOptions options) {
  detail::ProgramState& s = state();
  if (!s.train) throw Error("[step] this program was compiled with compile_forward; use run()");
  std::lock_guard lock(s.store->mutex);
  detail::Variant& v = detail::variant_for(s, options.captures != nullptr);
  detail::set_inputs(s, v, feeds, "step");
  const double factor = s.schedule(s.steps);
  if (!(std::isfinite(factor) && factor >= 0))
    throw InputError("[step] the schedule returned " + std::to_string(factor) + " at step " +
                     std::to_string(s.steps) +
                     ": an lr factor must be finite and >= 0 (the step was not taken)");
  const double lr = s.base_lr * factor;
  const std::vector<float> hyper = optim::hyper_values(s.optimizer, s.steps + 1, lr);
  for (size_t i = 0; i < hyper.size(); ++i) v.exec->set_input(v.id(s.plan.hyper_nodes[i]), &hyper[i]);
  v.exec->execute();
  ++s.store->version;
  s.last_skipped = false;
  if (s.finite >= 0) {
    uint8_t finite = 1;
    v.exec->read_output(v.id(s.finite), &finite);
    s.last_skipped = finite == 0;
  }
  if (s.last_skipped)
    ++s.skipped;
  else
    ++s.steps;
  if (s.comm != nullptr && env::equals(env::Switch::kDistCheck, "1")) detail::check_same_params(s);
  if (options.captures != nullptr) detail::read_captures(s, v, *options.captures);
  if (!options.read_loss) return std::nanf("");
  float loss = 0;
  v.exec->read_output(v.id(s.output), &loss);
  return loss;
}

HostTensor Program::run(const Feeds& feeds, RunOptions options) {
  detail::ProgramState& s = state();
  if (s.train)
    throw Error(
        "[run] this program was compiled with compile_train; use step(), or compile_forward for inference");
  std::lock_guard lock(s.store->mutex);
  detail::Variant& v = detail::variant_for(s, options.captures != nullptr);
  detail::refresh_hoisted(s, v);  // the weights' copies first (the prologue reads no inputs)
  detail::set_inputs(s, v, feeds, "run");
  v.exec->execute();
  const ir::Node& out = v.graph.node(v.id(s.output));
  HostTensor result(out.dtype, out.shape);
  v.exec->read_output(v.id(s.output), result.data());
  if (options.captures != nullptr) detail::read_captures(s, v, *options.captures);
  return result;
}

void Program::init_params(uint64_t seed) {
  std::lock_guard lock(state().store->mutex);
  state().store->init_params(seed);
  ++state().store->version;
}

void Program::upload_params(const std::map<std::string, HostTensor>& params, UploadOptions options) {
  detail::DeviceStore& store = *state().store;
  std::lock_guard lock(store.mutex);
  store.upload(params, options.partial);
}

std::map<std::string, HostTensor> Program::download_params() const {
  detail::DeviceStore& store = *state().store;
  std::lock_guard lock(store.mutex);
  std::map<std::string, HostTensor> out;
  for (const auto& [name, info] : store.infos) {
    HostTensor t(info.dtype, info.stored);  // as stored: f32, bf16/f16, or i8 (Param::dtype, stored_shape)
    store.backend->download(*store.buffers.at(name), t.data());
    out.emplace(name, std::move(t));
  }
  return out;
}

std::vector<std::string> Program::param_names() const {
  std::vector<std::string> out;
  for (const auto& kv : state().store->infos) out.push_back(kv.first);
  return out;
}

void Program::reset_optimizer() {
  detail::ProgramState& s = state();
  std::lock_guard lock(s.store->mutex);
  for (auto& [name, buf] : s.state_buffers) {
    std::vector<uint8_t> zeros(static_cast<size_t>(buf->numel() * dtype_size(buf->dtype())), 0);
    s.store->backend->upload(*buf, zeros.data());
  }
  s.steps = 0;
}

void Program::reset_state() {
  detail::ProgramState& s = state();
  std::lock_guard lock(s.store->mutex);
  for (const std::string& name : s.user_states) s.store->reset_state(name);
}

HostTensor Program::read_state(const std::string& name) const {
  detail::ProgramState& s = state();
  std::lock_guard lock(s.store->mutex);
  if (std::find(s.user_states.begin(), s.user_states.end(), name) == s.user_states.end())
    throw InputError("[read_state] this program has no state '" + name + "'");
  const backend::Buffer& buf = *s.store->states.at(name);
  HostTensor t(buf.dtype(), s.store->state_shapes.at(name));
  s.store->backend->download(buf, t.data());
  return t;
}

void Program::write_state(const std::string& name, const HostTensor& value) {
  detail::ProgramState& s = state();
  std::lock_guard lock(s.store->mutex);
  if (std::find(s.user_states.begin(), s.user_states.end(), name) == s.user_states.end())
    throw InputError("[write_state] this program has no state '" + name + "'");
  backend::Buffer& buf = *s.store->states.at(name);
  const Shape& shape = s.store->state_shapes.at(name);
  const bool convertible =
      buf.dtype() == DType::kF32 && (value.dtype() == DType::kBF16 || value.dtype() == DType::kF16);
  if (value.shape() != shape || (value.dtype() != buf.dtype() && !convertible))
    throw InputError("[write_state] '" + name + "' is " + dtype_name(buf.dtype()) + shape_str(shape) +
                     ", not " + dtype_name(value.dtype()) + shape_str(value.shape()));
  if (value.dtype() == buf.dtype())
    s.store->backend->upload(buf, value.data());
  else
    s.store->backend->upload(buf, value.to(DType::kF32).data());
}

std::vector<std::string> Program::state_names() const {
  std::lock_guard lock(state().store->mutex);
  return state().user_states;
}

int64_t Program::skipped_steps() const {
  std::lock_guard lock(state().store->mutex);
  return state().skipped;
}
bool Program::last_step_skipped() const {
  std::lock_guard lock(state().store->mutex);
  return state().last_skipped;
}
double Program::loss_scale() const {
  detail::ProgramState& s = state();
  std::lock_guard lock(s.store->mutex);
  if (!s.loss_scaling) return 1.0;
  float stored = 0;
  s.store->backend->download(*s.state_buffers.at(optim::kLossScaleState), &stored);
  return stored == 0 ? static_cast<float>(s.loss_scaling->init_scale) : stored;
}

TrainingState Program::training_state() const {
  detail::ProgramState& s = state();
  if (!s.train) throw Error("[training_state] this program was compiled with compile_forward");
  std::lock_guard lock(s.store->mutex);
  TrainingState t;
  t.optimizer = optim::describe(s.optimizer);
  for (const auto& [name, buf] : s.state_buffers) {
    HostTensor h(buf->dtype(), {buf->numel()});
    s.store->backend->download(*buf, h.data());
    t.moments.emplace(name, std::move(h));
  }
  for (const std::string& name : s.user_states) {
    const backend::Buffer& buf = *s.store->states.at(name);
    HostTensor h(buf.dtype(), s.store->state_shapes.at(name));
    s.store->backend->download(buf, h.data());
    t.states.emplace(name, std::move(h));
  }
  t.steps = s.steps;
  t.calls = s.calls;
  t.lr = s.base_lr;
  return t;
}

void Program::restore_training_state(const TrainingState& t) {
  detail::ProgramState& s = state();
  const char* api = "[restore_training_state] ";
  if (!s.train) throw InputError(std::string(api) + "this program was compiled with compile_forward");
  const std::string mine = optim::describe(s.optimizer);
  if (t.optimizer != mine)
    throw InputError(std::string(api) + "the state is of optimizer " +
                     (t.optimizer.empty() ? "(none)" : t.optimizer) + ", this program's is " +
                     (mine.empty() ? "(none)" : mine));
  if (t.steps < 0 || !(std::isfinite(t.lr) && t.lr >= 0))
    throw InputError(std::string(api) + "steps must be >= 0 and lr finite and >= 0");
  std::lock_guard lock(s.store->mutex);
  // The program's tensors of each kind, by name; everything is checked before anything changes.
  struct Slot {
    backend::Buffer* buffer;
    Shape shape;
  };
  std::map<std::string, Slot> moments, states;
  for (const auto& [name, buf] : s.state_buffers) moments[name] = {buf.get(), {buf->numel()}};
  for (const std::string& name : s.user_states)
    states[name] = {s.store->states.at(name).get(), s.store->state_shapes.at(name)};
  auto check = [&](const std::map<std::string, HostTensor>& given, const std::map<std::string, Slot>& mine,
                   const char* what) {
    for (const auto& [name, slot] : mine) {
      const auto it = given.find(name);
      if (it == given.end()) throw InputError(std::string(api) + "missing " + what + " '" + name + "'");
      if (it->second.dtype() != slot.buffer->dtype() || it->second.numel() != slot.buffer->numel())
        throw InputError(std::string(api) + what + " '" + name + "' is " + dtype_name(it->second.dtype()) +
                         shape_str(it->second.shape()) + ", this program's is " +
                         dtype_name(slot.buffer->dtype()) + shape_str(slot.shape));
    }
    for (const auto& [name, value] : given)
      if (mine.count(name) == 0)
        throw InputError(std::string(api) + "this program has no " + what + " '" + name + "'");
  };
  const auto given = optim::with_loss_scale_state(t.moments, s.loss_scaling.has_value());
  check(given, moments, "optimizer state");
  check(t.states, states, "state");
  for (const auto& [name, value] : given) s.store->backend->upload(*moments.at(name).buffer, value.data());
  for (const auto& [name, value] : t.states) s.store->backend->upload(*states.at(name).buffer, value.data());
  s.steps = t.steps;
  s.calls = t.calls;
  s.base_lr = t.lr;
}

void Program::set_lr(double lr) {
  if (!state().train) throw Error("[set_lr] this program has no optimizer");
  if (std::holds_alternative<GradientsOnly>(state().optimizer))
    throw Error("[set_lr] this program has no learning rate: it was compiled with tg::GradientsOnly");
  if (!(lr >= 0) || !std::isfinite(lr))
    throw Error("[set_lr] lr must be finite and >= 0, got " + std::to_string(lr));
  std::lock_guard lock(state().store->mutex);
  state().base_lr = lr;
}

double Program::lr() const {
  std::lock_guard lock(state().store->mutex);
  return state().base_lr;
}
int64_t Program::steps() const {
  std::lock_guard lock(state().store->mutex);
  return state().steps;
}
std::string Program::ir() const { return state().plain.graph.to_string(); }
std::string Program::describe() const { return state().plain.exec->describe(); }
int64_t Program::kernel_count() const { return state().plain.exec->kernel_count(); }

MemoryReport Program::memory_report() const {
  const detail::Variant& v = state().plain;
  const backend::MemoryStats m = v.exec->memory();
  MemoryReport r;
  r.params = m.params;
  r.optimizer_state = m.optimizer_state;
  r.inputs = m.inputs + m.constants;
  r.activations = m.activations;
  r.gradients = m.gradients;
  r.optimizer_temps = m.optimizer_temps;
  r.scratch = m.scratch;
  r.arena = m.arena;
  r.arena_without_reuse = m.no_reuse;
  for (const ir::Node& n : v.graph.nodes()) r.all_tensors += n.numel() * dtype_size(n.dtype);
  r.model_storage = state().store->bytes();
  return r;
}

std::string MemoryReport::to_string() const {
  auto mib = [](int64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%10.2f MiB", static_cast<double>(b) / (1 << 20));
    return std::string(buf);
  };
  std::string s;
  s += "params           " + mib(params) + "\n";
  s += "optimizer state  " + mib(optimizer_state) + "\n";
  s += "inputs/constants " + mib(inputs) + "\n";
  s += "arena            " + mib(arena) + "  (" + mib(arena_without_reuse) + " without reuse)\n";
  s += "  at its peak: activations " + mib(activations) + ", gradients " + mib(gradients) + ", optimizer " +
       mib(optimizer_temps) + ", scratch " + mib(scratch) + "\n";
  s += "planned peak     " + mib(planned_peak()) + "  (all tensors of the graph: " + mib(all_tensors) + ")\n";
  s += "model storage    " + mib(model_storage) + "  (all its programs' parameters, copies and states)\n";
  return s;
}

std::vector<std::string> Program::capture_names() const {
  std::vector<std::string> out;
  for (const auto& [name, id] : state().captures) out.push_back(name);
  return out;
}
const Device& Program::device() const { return state().store->device; }

}  // namespace tg
