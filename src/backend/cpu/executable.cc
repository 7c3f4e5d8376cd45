// Phase 2 of CPU preparation (see executable.h): batching, the arena, the kernels; and the
// Executable interface itself.
#include "backend/cpu/executable.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include "passes/memory_plan.h"
#include "tensorgrad/errors.h"
#include "util/switches.h"

namespace tg::backend::cpu {

using ir::Op;

CpuExecutable::CpuExecutable(const ir::Graph& g, const Bindings& bindings, const PrepareOptions& options)
    : options_(options), graph_(&g) {
  const auto count = static_cast<size_t>(g.size());
  slots_.resize(count);
  input_set_.assign(count, 0);
  for (int32_t id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.node(id);
    slots_[static_cast<size_t>(id)].dtype = n.dtype;
    slots_[static_cast<size_t>(id)].shape = n.shape;
    ops_.push_back(n.op);
    names_.push_back(n.name);
    stages_.push_back(n.stage);
  }
  for (int32_t out : g.outputs)
    if (out < 0 || out >= g.size()) throw Error("[cpu] output %" + std::to_string(out) + " is not a node");
  bind_leaves(g, bindings);
  check_updates(g);
  in_place_.assign(g.updates.size(), 0);

  fusion_ = passes::fuse(g, options.fuse);
  consumers_.assign(count, {});
  for (int32_t id = 0; id < g.size(); ++id)
    if (fusion_.group_of[static_cast<size_t>(id)] >= 0)
      for (int32_t in : g.node(id).inputs) consumers_[static_cast<size_t>(in)].push_back(id);
  // Inputs are placed even when nothing reads them, so set_input always has somewhere to write.
  for (int32_t id = 0; id < g.size(); ++id)
    if (g.node(id).op == Op::kInput && fusion_.group_of[static_cast<size_t>(id)] < 0) plan_single(g, id);
  for (size_t gi = 0; gi < fusion_.groups.size(); ++gi) {
    const passes::KernelGroup& group = fusion_.groups[gi];
    if (group.kind == passes::KernelGroup::Kind::kElementwise) plan_fused(g, group, static_cast<int32_t>(gi));
    else plan_single(g, group.nodes.front());
  }
  plan_outputs_and_updates(g);
  batch_steps();
  plan_arena(options.reuse_memory);
  build_kernels();
  profile_ = env::is_set(env::Switch::kProfile);
  kernel_seconds_.assign(kernels_.size(), 0.0);
  graph_ = nullptr;
}

void CpuExecutable::plan_outputs_and_updates(const ir::Graph& g) {
  std::vector<const Buffer*> targets;
  for (size_t u = 0; u < g.updates.size(); ++u)
    if (!in_place_[u]) targets.push_back(slots_[static_cast<size_t>(g.updates[u].target)].root);
  auto overwritten = [&](const Slot& s) { return s.root && std::find(targets.begin(), targets.end(), s.root) != targets.end(); };
  auto keep_to_end = [&](const Slot& s) {
    if (s.place.buf >= 0) bufs_[static_cast<size_t>(s.place.buf)].to_end = true;
  };
  for (int32_t out : g.outputs) {
    const Slot& s = slots_[static_cast<size_t>(out)];
    keep_to_end(s);
    Output& o = outputs_[out];
    // Outputs read the step's values, so a view of a buffer an update overwrites is copied first.
    if (overwritten(s) && !o.snapshot) o.snapshot = std::make_shared<HostMem>(numel(s.shape) * dtype_size(s.dtype));
  }
  for (size_t u = 0; u < g.updates.size(); ++u)
    if (!in_place_[u]) keep_to_end(slots_[static_cast<size_t>(g.updates[u].value)]);
  (void)overwritten;
}

/// Consecutive fused steps with no storage hazard between them share one parallel region.
void CpuExecutable::batch_steps() {
  int32_t exec = -1;
  std::vector<int64_t> batch_reads, batch_writes;
  auto meets = [](const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    for (int64_t x : a)
      if (std::find(b.begin(), b.end(), x) != b.end()) return true;
    return false;
  };
  bool open = false;
  for (Step& s : steps_) {
    const bool fused = static_cast<bool>(s.build_fused);
    const bool join = options_.fuse && fused && open && !meets(s.reads, batch_writes) && !meets(s.writes, batch_reads) &&
                      !meets(s.writes, batch_writes);
    if (!join) {
      ++exec;
      batch_reads.clear();
      batch_writes.clear();
    }
    s.exec = exec;
    open = fused;
    batch_reads.insert(batch_reads.end(), s.reads.begin(), s.reads.end());
    batch_writes.insert(batch_writes.end(), s.writes.begin(), s.writes.end());
  }
  kernel_steps_.assign(static_cast<size_t>(exec + 1), {});
  for (size_t i = 0; i < steps_.size(); ++i) kernel_steps_[static_cast<size_t>(steps_[i].exec)].push_back(i);
}

void CpuExecutable::plan_arena(bool reuse) {
  for (const Step& s : steps_)
    for (int32_t b : s.bufs) {
      ArenaBuffer& ab = bufs_[static_cast<size_t>(b)];
      if (ab.first < 0) ab.first = s.exec;
      ab.first = std::min(ab.first, s.exec);
      ab.last = std::max(ab.last, s.exec);
    }
  const int32_t end = static_cast<int32_t>(kernel_steps_.size());
  arena_ = HostMem(place_arena(bufs_, end, reuse, memory_));
}

void CpuExecutable::build_kernels() {
  for (const std::vector<size_t>& members : kernel_steps_) {
    if (steps_[members.front()].build_fused) {
      std::vector<FusedSpec> specs;
      for (size_t i : members) specs.push_back(steps_[i].build_fused());
      kernels_.push_back(make_fused(std::move(specs)));
    } else {
      kernels_.push_back(steps_[members.front()].build());
    }
  }
  for (auto& [id, o] : outputs_) {
    const Slot& s = slots_[static_cast<size_t>(id)];
    if (o.snapshot) o.take = make_copy(s.dtype, s.shape, contiguous_view(o.snapshot->data(), s.shape), view(s.place));
  }
  // Updates not written in place: staged (if the value aliases an updated buffer) then copied.
  std::vector<const Buffer*> targets;
  const ir::Graph& g = *graph_;
  for (size_t u = 0; u < g.updates.size(); ++u)
    if (!in_place_[u]) targets.push_back(slots_[static_cast<size_t>(g.updates[u].target)].root);
  for (size_t u = 0; u < g.updates.size(); ++u) {
    if (in_place_[u]) continue;
    const Slot& value = slots_[static_cast<size_t>(g.updates[u].value)];
    const Slot& target = slots_[static_cast<size_t>(g.updates[u].target)];
    UpdatePlan p;
    View src = view(value.place);
    if (value.root && std::find(targets.begin(), targets.end(), value.root) != targets.end()) {
      src = contiguous_view(fixed_mems_.emplace_back(numel(value.shape) * dtype_size(value.dtype)).data(), value.shape);
      p.stage = make_copy(value.dtype, value.shape, src, view(value.place));
    }
    // The target buffer is dense; copying in the value's shape lays it out row-major.
    p.apply = make_copy(value.dtype, value.shape, contiguous_view(view(target.place).data, value.shape), src);
    updates_.push_back(std::move(p));
  }
  for (Step& s : steps_) {  // the builders hold copies of graph data: release them
    s.build = nullptr;
    s.build_fused = nullptr;
  }
}

ArenaLayout CpuExecutable::arena_layout() const {
  ArenaLayout layout;
  layout.arena_bytes = memory_.arena;
  for (const ArenaBuffer& b : bufs_) layout.buffers.push_back({b.offset, b.bytes, b.first, b.last});
  layout.kernel_buffers.assign(kernel_steps_.size(), {});
  for (const Step& s : steps_)
    for (int32_t b : s.bufs) layout.kernel_buffers[static_cast<size_t>(s.exec)].push_back(b);
  return layout;
}

void CpuExecutable::set_input(int32_t node, const void* host) {
  if (node < 0 || node >= static_cast<int32_t>(ops_.size()) || ops_[static_cast<size_t>(node)] != Op::kInput)
    throw Error("[cpu] set_input: node %" + std::to_string(node) + " is not an input");
  Slot& s = slots_[static_cast<size_t>(node)];
  const int64_t count = numel(s.shape);
  std::byte* dst = view(s.place).data;
  if (s.dtype == DType::kBool) {  // normalise so every kernel may assume 0/1
    const auto* src = static_cast<const uint8_t*>(host);
    auto* d = reinterpret_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < count; ++i) d[i] = src[i] != 0 ? 1 : 0;
  } else if (count > 0) {
    std::memcpy(dst, host, static_cast<size_t>(count * dtype_size(s.dtype)));
  }
  input_set_[static_cast<size_t>(node)] = 1;
}

void CpuExecutable::execute() {
  if (!all_inputs_set_) {
    for (size_t id = 0; id < ops_.size(); ++id)
      if (ops_[id] == Op::kInput && !input_set_[id])
        throw Error("[cpu] input '" + names_[id] + "' (%" + std::to_string(id) + ") was not set");
    all_inputs_set_ = true;  // inputs stay set: each is fed before every step, never cleared
  }
  if (profile_) {
    for (size_t i = 0; i < kernels_.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      kernels_[i]();
      kernel_seconds_[i] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    ++executions_;
  } else {
    for (const Kernel& k : kernels_) k();
  }
  for (auto& [id, out] : outputs_)
    if (out.take) out.take();
  // Stage every aliased value before the first write, so all updates see pre-step values.
  for (const UpdatePlan& u : updates_)
    if (u.stage) u.stage();
  for (const UpdatePlan& u : updates_) u.apply();
}

void CpuExecutable::read_output(int32_t node, void* host) {
  auto it = outputs_.find(node);
  if (it == outputs_.end()) throw Error("[cpu] read_output: node %" + std::to_string(node) + " is not an output");
  const Slot& s = slots_[static_cast<size_t>(node)];
  if (!s.placed) throw Error("[cpu] read_output: " + std::string(ir::op_name(ops_[static_cast<size_t>(node)])) + " %" + std::to_string(node) + " has no storage");
  const View dst = contiguous_view(static_cast<std::byte*>(host), s.shape);
  if (numel(s.shape) == 0) return;
  if (it->second.snapshot) copy_now(s.dtype, s.shape, dst, contiguous_view(it->second.snapshot->data(), s.shape));
  else copy_now(s.dtype, s.shape, dst, view(s.place));
}

std::string CpuExecutable::step_label(const Step& s) const {
  if (s.nodes.empty()) return "?";
  const Slot& out = slots_[static_cast<size_t>(s.nodes.back())];
  std::string ops;
  if (s.nodes.size() > 1 || ir::op_info(ops_[static_cast<size_t>(s.nodes.front())]).kind != ir::OpKind::kOther) {
    std::map<std::string, int> counts;
    for (int32_t id : s.nodes) ++counts[ir::op_name(ops_[static_cast<size_t>(id)])];
    for (auto& [name, c] : counts) ops += (ops.empty() ? "" : " ") + name + (c > 1 ? "x" + std::to_string(c) : "");
    return "fused[" + ops + "] " + shape_str(out.shape);
  }
  return std::string(ir::op_name(ops_[static_cast<size_t>(s.nodes.front())])) + " " + shape_str(out.shape);
}

std::string CpuExecutable::describe() const {
  std::ostringstream os;
  os << "cpu: " << kernels_.size() << " kernels, arena " << memory_.arena << " bytes (" << memory_.no_reuse
     << " without reuse)\n";
  for (size_t k = 0; k < kernel_steps_.size(); ++k) {
    int64_t bytes = 0, flops = 0;
    os << "  #" << k;
    for (size_t i : kernel_steps_[k]) {
      os << (i == kernel_steps_[k].front() ? " " : " | ") << step_label(steps_[i]);
      bytes += steps_[i].bytes;
      flops += steps_[i].flops;
    }
    os << "  (" << bytes << " B, " << flops << " flop)\n";
  }
  return os.str();
}

CpuExecutable::~CpuExecutable() {
  if (!profile_ || executions_ == 0) return;
  struct Row {
    double seconds = 0;
    int count = 0;
    int64_t bytes = 0, flops = 0;
  };
  std::map<std::string, Row> by_label;
  double total = 0;
  for (size_t k = 0; k < kernels_.size(); ++k) {
    const std::string label = kernel_steps_[k].size() > 1 ? "multi-tensor " + std::to_string(kernel_steps_[k].size()) + " groups"
                                                          : step_label(steps_[kernel_steps_[k].front()]);
    Row& e = by_label[label];
    e.seconds += kernel_seconds_[k];
    e.count += 1;
    for (size_t i : kernel_steps_[k]) {
      e.bytes += steps_[i].bytes;
      e.flops += steps_[i].flops;
    }
    total += kernel_seconds_[k];
  }
  const double n = static_cast<double>(executions_);
  std::vector<std::pair<double, std::string>> rows;
  for (auto& [label, e] : by_label) {
    char rate[64];
    const double sec = e.seconds / n;
    std::snprintf(rate, sizeof rate, "  [%.1f GB/s, %.1f GFLOP/s]", static_cast<double>(e.bytes) / sec * 1e-9,
                  static_cast<double>(e.flops) / sec * 1e-9);
    rows.push_back({e.seconds, label + " x" + std::to_string(e.count) + rate});
  }
  std::sort(rows.rbegin(), rows.rend());
  std::fprintf(stderr, "[cpu profile] %zu kernels, %.3f ms per execution\n", kernels_.size(), total * 1e3 / n);
  for (size_t i = 0; i < rows.size() && i < 40; ++i)
    std::fprintf(stderr, "  %8.3f ms %5.1f%%  %s\n", rows[i].first * 1e3 / n, 100 * rows[i].first / total, rows[i].second.c_str());
}

}  // namespace tg::backend::cpu
