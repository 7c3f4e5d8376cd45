// The CUDA emitter's frame (see emit.h): memory for the schedule's buffers, one or a few steps
// per schedule step, batched launches, side steps, the updates and outputs.
#include "backend/cuda/emit.h"

#include <algorithm>
#include <unordered_set>

#include "backend/cuda/codegen.h"
#include "backend/cuda/fused_sinks.h"
#include "tensorgrad/errors.h"
#include "util/switches.h"

namespace tg::backend::cuda {

using ir::Op;
using Home = passes::Buffer::Home;

namespace {

std::string node_ref(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  std::string s = std::string(ir::op_name(n.op)) + " %" + std::to_string(id);
  return n.name.empty() ? s : s + " '" + n.name + "'";
}

}  // namespace

Emitter::Emitter(const DeviceInfo& info, const ir::Graph& g, const passes::Schedule& s,
                 const Bindings& bindings, const PrepareOptions& options)
    : info_(info), g_(g), s_(s), options_(options) {
  for (int32_t id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.node(id);
    prog_.nodes.push_back({n.op, n.dtype, n.shape, n.name});
  }
  bind(bindings);
}

void Emitter::bind(const Bindings& bindings) {
  prog_.bufs = s_.buffers;
  fixed_.assign(s_.buffers.size(), 0);
  prog_.memory.params = s_.params;
  prog_.memory.optimizer_state = s_.optimizer_state;
  prog_.memory.constants = s_.constants;
  // Every input lives in one device block mirrored by pinned host memory: one upload a step.
  for (const passes::Buffer& b : s_.buffers)
    if (b.home == Home::kInput) {
      prog_.input_offset[b.node] = prog_.input_bytes;
      prog_.input_bytes += aligned(b.bytes);
    }
  prog_.memory.inputs = prog_.input_bytes;
  if (prog_.input_bytes > 0) prog_.inputs = DeviceMemory(static_cast<size_t>(prog_.input_bytes));
  for (size_t i = 0; i < s_.buffers.size(); ++i) {
    const passes::Buffer& b = s_.buffers[i];
    if (b.home == Home::kArena) continue;
    const ir::Node& n = g_.node(b.node);
    if (b.home == Home::kInput) {
      fixed_[i] = prog_.inputs.get() + static_cast<CUdeviceptr>(prog_.input_offset.at(b.node));
    } else if (b.home == Home::kBound) {
      auto it = bindings.find(b.node);
      if (it == bindings.end() || it->second == nullptr)
        throw Error("[cuda] " + node_ref(g_, b.node) + " has no bound buffer");
      auto* buffer = dynamic_cast<CudaBuffer*>(it->second);
      if (!buffer)
        throw Error("[cuda] the buffer bound to " + node_ref(g_, b.node) +
                    " was not allocated by the cuda backend");
      if (buffer->dtype() != n.dtype || buffer->numel() != n.numel())
        throw Error("[cuda] " + node_ref(g_, b.node) + " is " + dtype_name(n.dtype) + shape_str(n.shape) +
                    " but its bound buffer holds " + std::to_string(buffer->numel()) + " " +
                    dtype_name(buffer->dtype()));
      fixed_[i] = buffer->mem.get();
    } else {  // a constant: its values, or one value read with zero strides
      std::vector<std::byte> host(static_cast<size_t>(b.bytes));
      for (int64_t k = 0; k < b.bytes / dtype_size(n.dtype); ++k) {
        const double x = ir::constant_element(n, k);
        if (n.dtype == DType::kF32)
          reinterpret_cast<float*>(host.data())[k] = static_cast<float>(x);
        else if (n.dtype == DType::kI32)
          reinterpret_cast<int32_t*>(host.data())[k] = static_cast<int32_t>(x);
        else
          reinterpret_cast<uint8_t*>(host.data())[k] = x != 0;
      }
      prog_.fixed_mems.emplace_back(static_cast<size_t>(aligned(b.bytes)));
      prog_.fixed_mems.back().upload(host.data(), host.size());
      fixed_[i] = prog_.fixed_mems.back().get();
    }
  }
}

Place Emitter::place(const passes::Place& p) const {
  const auto b = static_cast<size_t>(p.buffer);
  if (s_.buffers[b].home == Home::kArena) return Place{p.buffer, 0, p.offset, p.strides};
  return Place{-1, fixed_[b], p.offset, p.strides};
}

Operand Emitter::operand(const passes::Place& p, int32_t node) const {
  return Operand{g_.node(node).dtype, g_.node(node).shape, p.strides};
}

void Emitter::add_kernel(std::vector<int32_t> nodes, Launch launch, std::vector<Arg> args, int64_t flops) {
  if (launch.shared_bytes > info_.smem_per_block)
    throw DeviceError("[cuda] kernel " + launch.name + " needs " + std::to_string(launch.shared_bytes) +
                      " bytes of shared memory a block; " + info_.name + " allows " +
                      std::to_string(info_.smem_per_block));
  Step st;
  st.kind = Step::Kind::kKernel;
  st.nodes = std::move(nodes);
  st.launch = std::move(launch);
  st.args = std::move(args);
  st.flops = flops;
  prog_.steps.push_back(std::move(st));
  step_launch_.push_back(launch_);
}

void Emitter::add_zero(const Place& out, int64_t bytes) {
  if (bytes == 0) return;
  Step zero;
  zero.kind = Step::Kind::kMemset;
  zero.args = {{out}};
  zero.bytes = bytes;
  prog_.steps.push_back(std::move(zero));
  step_launch_.push_back(launch_);
}

LoweredProgram Emitter::run() {
  for (const passes::Step& st : s_.steps) {
    launch_ = st.launch;
    const size_t before = prog_.steps.size();
    emit_step(st);
    for (size_t i = before; i < prog_.steps.size(); ++i) prog_.steps[i].moved = i == before ? st.bytes : 0;
  }
  if (options_.fuse) batch_launches();
  for (const passes::Schedule::Update& u : s_.updates) {
    if (u.in_place) continue;
    const ir::Node& t = g_.node(u.target);
    prog_.update_copies.push_back(
        {place(s_.places[static_cast<size_t>(u.target)]), place(u.source), t.numel() * dtype_size(t.dtype)});
  }
  for (size_t i = 0; i < s_.outputs.size(); ++i) prog_.outputs[s_.outputs[i]] = place(s_.output_places[i]);
  set_arena_stats(s_.arena, prog_.memory);
  choose_side_steps();
  overlap_collectives();
  return std::move(prog_);
}

void Emitter::emit_step(const passes::Step& st) {
  if (st.absorbed) return;  // a norm or cast a product step computes
  switch (st.kind) {
    case passes::Step::Kind::kCopy:
      add_kernel({}, copy_kernel(kName, operand(st.in[0], st.node)), {{place(st.in[0])}, {place(st.out[0])}});
      return;
    case passes::Step::Kind::kGroup: emit_group(st); return;
    case passes::Step::Kind::kNode: emit_node(st); return;
  }
}

void Emitter::emit_group(const passes::Step& st) {
  const passes::KernelGroup& group = s_.fusion.groups[static_cast<size_t>(st.group)];
  std::vector<std::vector<int64_t>> strides;
  std::vector<Arg> args;
  for (const passes::Place& p : st.in) {
    strides.push_back(p.strides);
    args.push_back({place(p)});
  }
  for (const passes::Place& p : st.out) args.push_back({place(p)});
  if (std::any_of(group.nodes.begin(), group.nodes.end(),
                  [&](int32_t id) { return g_.node(id).op == Op::kSum; })) {
    add_kernel(group.nodes, fused_sinks_kernel(g_, group, strides, kName), std::move(args));
    return;
  }
  // Stored outputs are written through their places' strides (rows padded for a product).
  for (const passes::Place& p : st.out) strides.push_back(p.strides);
  GroupKernel k = fused_group_kernel(g_, group, strides, kName);
  Launch l;
  l.name = k.name;
  l.source = std::move(k.source);
  const int64_t n = g_.node(group.nodes.front()).numel();
  fused_group_launch(l, n);
  const size_t arg_count = args.size();
  add_kernel(group.nodes, std::move(l), std::move(args));
  Step& cs = prog_.steps.back();
  cs.launch_n = n;
  cs.groups = {st.group};
  cs.group_strides = {strides};
  cs.group_reads = {st.in.size()};
  cs.group_args = {arg_count};
}

void Emitter::batch_launches() {
  std::vector<Step> out;
  std::vector<int32_t> launches;
  for (size_t i = 0; i < prog_.steps.size(); ++i) {
    Step& s = prog_.steps[i];
    const bool group = s.kind == Step::Kind::kKernel && s.groups.size() == 1;
    const bool join =
        group && !out.empty() && out.back().groups.size() >= 1 && launches.back() == step_launch_[i];
    if (!join) {
      out.push_back(std::move(s));
      launches.push_back(step_launch_[i]);
      continue;
    }
    Step& b = out.back();
    b.nodes.insert(b.nodes.end(), s.nodes.begin(), s.nodes.end());
    b.args.insert(b.args.end(), s.args.begin(), s.args.end());
    b.groups.push_back(s.groups[0]);
    b.group_strides.push_back(std::move(s.group_strides[0]));
    b.group_reads.push_back(s.group_reads[0]);
    b.group_args.push_back(s.group_args[0]);
    b.moved += s.moved;
  }
  for (Step& s : out) {
    if (s.groups.size() < 2) continue;
    std::vector<const passes::KernelGroup*> groups;
    for (int32_t gi : s.groups) groups.push_back(&s_.fusion.groups[static_cast<size_t>(gi)]);
    s.launch = batched_groups_kernel(g_, groups, s.group_strides, kName);
    s.launch_n = -1;
  }
  prog_.steps = std::move(out);
  step_launch_ = std::move(launches);
}

void Emitter::choose_side_steps() {
  // A step is a side step when nothing after it touches what it touches: no later step has an
  // argument in one of its arena buffers or fixed allocations (arguments are not told apart
  // as read or written, so a shared read counts too), and no later step runs the same module
  // (chunked reductions keep partials in module globals). Its results are then read only
  // after the step's end (outputs, the loss), and it can run beside the steps after it:
  // captured on the low-priority side stream, joined before the updates and the readback.
  // Its buffers must then stay allocated to the end, or a later launch could be placed in
  // them while it still reads: that is allowed while it grows the arena by at most a quarter
  // (the schedule's arena placed again with those lifetimes). Products (one shared cuBLASLt
  // workspace), memsets and steps with the error word stay on the main stream.
  if (env::is_set(env::Switch::kCudaNoSide)) return;
  const size_t n = prog_.steps.size();
  auto key = [](const Place& p) {
    return p.buf >= 0 ? static_cast<int64_t>(p.buf) : -static_cast<int64_t>(p.fixed) - 1;
  };
  std::vector<std::vector<int64_t>> keys(n);
  for (size_t i = 0; i < n; ++i)
    for (const Arg& a : prog_.steps[i].args)
      if (!a.err) keys[i].push_back(key(a.place));
  std::vector<size_t> side;
  std::unordered_set<int64_t> later;  // every key of the steps after i
  for (size_t i = n; i-- > 0;) {
    const Step& s = prog_.steps[i];
    bool ok = i + 1 < n && s.kind == Step::Kind::kKernel &&
              std::none_of(s.args.begin(), s.args.end(), [](const Arg& a) { return a.err; });
    for (int64_t k : keys[i]) ok = ok && !later.count(k);
    for (size_t j = i + 1; ok && j < n; ++j)
      ok = prog_.steps[j].kind != Step::Kind::kKernel || prog_.steps[j].launch.source != s.launch.source;
    if (ok) side.push_back(i);
    later.insert(keys[i].begin(), keys[i].end());
  }
  if (side.empty()) return;
  if (options_.reuse_memory) {
    std::vector<ArenaBuffer> after = prog_.bufs;
    for (size_t i : side)
      for (const Arg& a : prog_.steps[i].args)
        if (!a.err && a.place.buf >= 0) after[static_cast<size_t>(a.place.buf)].last = s_.launches;
    const passes::ArenaStats grown = passes::place_arena(after, s_.launches, true);
    if (grown.bytes > s_.arena.bytes + s_.arena.bytes / 4) return;
    prog_.bufs = std::move(after);
    set_arena_stats(grown, prog_.memory);
  }
  for (size_t i : side) prog_.steps[i].side = true;
}

void Emitter::overlap_collectives() {
  // A collective goes on beside the steps after it until the first one that touches the
  // buffer it writes, which waits for it. Its operands are read all that while, so their
  // buffers stay allocated until that step (or to the end), and the arena is placed again.
  if (env::is_set(env::Switch::kCudaNoSide)) return;
  const size_t n = prog_.steps.size();
  std::vector<ArenaBuffer> after = prog_.bufs;
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    Step& c = prog_.steps[i];
    if (c.kind != Step::Kind::kCollective) continue;
    any = true;
    c.on_comm = true;
    const int32_t out = c.args.back().place.buf;
    size_t j = i + 1;
    auto touches = [&](const Step& s) {
      return std::any_of(s.args.begin(), s.args.end(),
                         [&](const Arg& a) { return !a.err && a.place.buf == out; });
    };
    while (j < n && !touches(prog_.steps[j])) ++j;
    if (j < n) prog_.steps[j].waits.push_back(static_cast<int32_t>(i));
    const int32_t until = j < n ? step_launch_[j] : s_.launches;
    for (size_t k = 0; k + 1 < c.args.size(); ++k)
      if (const int32_t b = c.args[k].place.buf; b >= 0)
        after[static_cast<size_t>(b)].last = std::max(after[static_cast<size_t>(b)].last, until);
  }
  if (!any || !options_.reuse_memory) return;
  const passes::ArenaStats placed = passes::place_arena(after, s_.launches, true);
  prog_.bufs = std::move(after);
  set_arena_stats(placed, prog_.memory);
}

}  // namespace tg::backend::cuda
