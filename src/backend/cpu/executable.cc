// The CPU executable (see executable.h): memory for the schedule's buffers, a kernel per
// launch, and the Executable interface.
#include "backend/cpu/executable.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include "backend/arena.h"
#include "backend/cpu/steps.h"
#include "tensorgrad/errors.h"
#include "util/switches.h"

namespace tg::backend::cpu {

using ir::Op;
using Home = passes::Buffer::Home;

CpuExecutable::CpuExecutable(const ir::Graph& g, const Bindings& bindings, const PrepareOptions& options) {
  for (int32_t id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.node(id);
    nodes_.push_back({n.op, n.dtype, n.shape, n.name, n.loc});
  }
  input_set_.assign(nodes_.size(), 0);
  schedule_ = passes::schedule(g, capabilities(), {options.fuse, options.reuse_memory});
  allocate(g, bindings);
  require_communicator(g, options.communicator, "cpu");
  build_kernels(g, options.communicator);
  profile_ = env::is_set(env::Switch::kProfile);
  check_finite_ = env::is_set(env::Switch::kCheckFinite);
  kernel_seconds_.assign(kernels_.size(), 0.0);
}

void CpuExecutable::allocate(const ir::Graph& g, const Bindings& bindings) {
  const passes::Schedule& s = schedule_;
  arena_ = HostMem(s.arena.bytes);
  set_arena_stats(s.arena, memory_);
  memory_.params = s.params;
  memory_.optimizer_state = s.optimizer_state;
  memory_.inputs = s.inputs;
  memory_.constants = s.constants;
  for (const passes::Buffer& b : s.buffers) {
    const ir::Node* n = b.node >= 0 ? &g.node(b.node) : nullptr;
    const std::string ref = n ? std::string(ir::op_name(n->op)) + " %" + std::to_string(b.node) +
                                    (n->name.empty() ? "" : " '" + n->name + "'")
                              : "";
    switch (b.home) {
      case Home::kArena: base_.push_back(arena_.data() + b.offset); break;
      case Home::kBound: {
        auto it = bindings.find(b.node);
        if (it == bindings.end() || it->second == nullptr)
          throw Error("[cpu] " + ref + " has no bound buffer");
        auto* buffer = dynamic_cast<CpuBuffer*>(it->second);
        if (!buffer)
          throw Error("[cpu] the buffer bound to " + ref + " was not allocated by the cpu backend");
        if (buffer->dtype() != n->dtype || buffer->numel() != n->numel())
          throw Error("[cpu] " + ref + " is " + dtype_name(n->dtype) + shape_str(n->shape) +
                      " but its bound buffer holds " + std::to_string(buffer->numel()) + " " +
                      dtype_name(buffer->dtype()));
        base_.push_back(buffer->mem.data());
        break;
      }
      case Home::kInput: base_.push_back(fixed_mems_.emplace_back(b.bytes).data()); break;
      case Home::kConstant: {  // computed once here; a fill may be a single element
        std::byte* p = fixed_mems_.emplace_back(b.bytes).data();
        for (int64_t i = 0; i < b.bytes / dtype_size(n->dtype); ++i)
          store_double(n->dtype, p, i, ir::constant_element(*n, i));
        base_.push_back(p);
        break;
      }
    }
  }
}

View CpuExecutable::view(const passes::Place& p) const {
  return View{base_[static_cast<size_t>(p.buffer)] + p.offset, p.strides};
}

void CpuExecutable::build_kernels(const ir::Graph& g, dist::Communicator* comm) {
  const ViewOf view_of = [this](const passes::Place& p) { return view(p); };
  const std::vector<passes::Step>& steps = schedule_.steps;
  for (size_t i = 0; i < steps.size();) {
    size_t j = i;  // the steps of one launch
    while (j < steps.size() && steps[j].launch == steps[i].launch) ++j;
    if (steps[i].kind == passes::Step::Kind::kGroup) {
      std::vector<FusedSpec> specs;
      for (size_t k = i; k < j; ++k)
        specs.push_back(
            group_spec(g, schedule_.fusion.groups[static_cast<size_t>(steps[k].group)], steps[k], view_of));
      kernels_.push_back(make_fused(std::move(specs)));
    } else {
      kernels_.push_back(step_kernel(g, steps[i], view_of, comm));
    }
    kernel_steps_.emplace_back(i, j);
    i = j;
  }
  for (const passes::Step& st : steps) step_flops_.push_back(step_flops(g, st));
  for (const passes::Schedule::Update& u : schedule_.updates) {
    if (u.in_place) continue;
    const NodeInfo& v = nodes_[static_cast<size_t>(u.value)];
    // The target buffer is dense; copying in the value's shape lays it out row-major.
    const View dst = contiguous_view(
        base_[static_cast<size_t>(schedule_.places[static_cast<size_t>(u.target)].buffer)], v.shape);
    updates_.push_back(make_copy(v.dtype, v.shape, dst, view(u.source)));
  }
}

ArenaLayout CpuExecutable::arena_layout() const {
  ArenaLayout layout;
  layout.arena_bytes = memory_.arena;
  std::vector<int32_t> index(schedule_.buffers.size(), -1);
  for (size_t i = 0; i < schedule_.buffers.size(); ++i) {
    const passes::Buffer& b = schedule_.buffers[i];
    if (b.home != Home::kArena) continue;
    index[i] = static_cast<int32_t>(layout.buffers.size());
    layout.buffers.push_back({b.offset, b.bytes, b.first, b.last});
  }
  layout.kernel_buffers.assign(static_cast<size_t>(schedule_.launches), {});
  for (const passes::Step& st : schedule_.steps)
    for (const std::vector<passes::Place>* places : {&st.in, &st.out, &st.scratch})
      for (const passes::Place& p : *places)
        if (index[static_cast<size_t>(p.buffer)] >= 0)
          layout.kernel_buffers[static_cast<size_t>(st.launch)].push_back(
              index[static_cast<size_t>(p.buffer)]);
  return layout;
}

void CpuExecutable::set_input(int32_t node, const void* host) {
  if (node < 0 || node >= static_cast<int32_t>(nodes_.size()) ||
      nodes_[static_cast<size_t>(node)].op != Op::kInput)
    throw Error("[cpu] set_input: node %" + std::to_string(node) + " is not an input");
  const NodeInfo& n = nodes_[static_cast<size_t>(node)];
  const int64_t count = numel(n.shape);
  std::byte* dst = view(schedule_.places[static_cast<size_t>(node)]).data;
  if (n.dtype == DType::kBool) {  // normalise so every kernel may assume 0/1
    const auto* src = static_cast<const uint8_t*>(host);
    auto* d = reinterpret_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < count; ++i) d[i] = src[i] != 0 ? 1 : 0;
  } else if (count > 0) {
    std::memcpy(dst, host, static_cast<size_t>(count * dtype_size(n.dtype)));
  }
  input_set_[static_cast<size_t>(node)] = 1;
}

void CpuExecutable::execute() {
  if (!all_inputs_set_) {
    for (size_t id = 0; id < nodes_.size(); ++id)
      if (nodes_[id].op == Op::kInput && !input_set_[id])
        throw Error("[cpu] input '" + nodes_[id].name + "' (%" + std::to_string(id) + ") was not set");
    all_inputs_set_ = true;  // inputs stay set: each is fed before every step, never cleared
  }
  if (profile_) {
    for (size_t i = 0; i < kernels_.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      kernels_[i]();
      kernel_seconds_[i] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    ++executions_;
  } else if (check_finite_) {
    for (size_t i = 0; i < kernels_.size(); ++i) {
      kernels_[i]();
      check_finite(i);
    }
  } else {
    for (const Kernel& k : kernels_) k();
  }
  // Update values that alias an updated buffer were copied aside by the last launches, so
  // every update sees the values from before the step.
  for (const Kernel& u : updates_) u();
}

void CpuExecutable::check_finite(size_t kernel) const {
  const auto [first, last] = kernel_steps_[kernel];
  for (size_t k = first; k < last; ++k) {
    const passes::Step& st = schedule_.steps[k];
    std::vector<int32_t> made;  // the values this step wrote
    if (st.kind == passes::Step::Kind::kGroup)
      made = schedule_.fusion.groups[static_cast<size_t>(st.group)].outputs;
    else
      made = {st.node};
    for (int32_t id : made) {
      const NodeInfo& n = nodes_[static_cast<size_t>(id)];
      const passes::Place& p = schedule_.places[static_cast<size_t>(id)];
      if ((n.dtype != DType::kF32 && !is_half(n.dtype)) || p.buffer < 0 || numel(n.shape) == 0) continue;
      std::vector<float> values(static_cast<size_t>(numel(n.shape)));
      if (n.dtype == DType::kF32) {
        copy_now(n.dtype, n.shape, contiguous_view(reinterpret_cast<std::byte*>(values.data()), n.shape),
                 view(p));
      } else {  // bf16 / f16 (mixed precision): widened exactly
        std::vector<uint16_t> half(values.size());
        copy_now(n.dtype, n.shape, contiguous_view(reinterpret_cast<std::byte*>(half.data()), n.shape),
                 view(p));
        for (size_t e = 0; e < half.size(); ++e)
          values[e] = n.dtype == DType::kBF16 ? f32_from_bf16(half[e]) : f32_from_f16(half[e]);
      }
      for (size_t e = 0; e < values.size(); ++e)
        if (!std::isfinite(values[e]))
          throw Error("[cpu] TG_CHECK_FINITE: %" + std::to_string(id) + " = " + ir::op_name(n.op) +
                      (n.name.empty() ? "" : " '" + n.name + "'") + " " + dtype_name(n.dtype) +
                      shape_str(n.shape) + " holds " + std::to_string(values[e]) + " at element " +
                      std::to_string(e) +
                      ": the first non-finite value of this execution, made by the op traced at " +
                      ir::loc_str(n.loc));
    }
  }
}

void CpuExecutable::read_output(int32_t node, void* host) {
  const auto it = std::find(schedule_.outputs.begin(), schedule_.outputs.end(), node);
  if (it == schedule_.outputs.end())
    throw Error("[cpu] read_output: node %" + std::to_string(node) + " is not an output");
  const NodeInfo& n = nodes_[static_cast<size_t>(node)];
  if (numel(n.shape) == 0) return;
  const passes::Place& p = schedule_.output_places[static_cast<size_t>(it - schedule_.outputs.begin())];
  copy_now(n.dtype, n.shape, contiguous_view(static_cast<std::byte*>(host), n.shape), view(p));
}

}  // namespace tg::backend::cpu
