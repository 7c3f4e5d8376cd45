// The lowering's last stages (see lowering.h): batched launches, side steps, each step's
// traffic and the arena; and the lowering's entry point.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <unordered_set>

#include "backend/cuda/codegen.h"
#include "backend/cuda/lowering.h"
#include "tensorgrad/errors.h"
#include "util/switches.h"

namespace tg::backend::cuda {

using ir::Op;

Lowering::Lowering(const DeviceInfo& info, const ir::Graph& g, const Bindings& bindings, const PrepareOptions& options)
    : info_(info), g_(g), options_(options) {
  const auto count = static_cast<size_t>(g.size());
  slots_.resize(count);
  for (int32_t id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.node(id);
    slots_[static_cast<size_t>(id)].dtype = n.dtype;
    slots_[static_cast<size_t>(id)].shape = n.shape;
    prog_.nodes.push_back({n.op, n.dtype, n.shape, n.name});
  }
  for (int32_t out : g.outputs)
    if (out < 0 || out >= g.size()) throw Error("[cuda] output %" + std::to_string(out) + " is not a node");
  for (const ir::Graph::Update& u : g.updates) {
    if (u.target < 0 || u.target >= g.size() || u.value < 0 || u.value >= g.size())
      throw Error("[cuda] an update refers to an unknown node");
    const ir::Node& t = g.node(u.target);
    const ir::Node& v = g.node(u.value);
    if (t.op != Op::kParam && t.op != Op::kState) throw Error("[cuda] an update target is not a param or state");
    if (t.dtype != v.dtype || t.numel() != v.numel()) throw Error("[cuda] an update's value does not match its target");
  }
  bind_leaves(bindings);
  plan_inputs();
  fusion_ = passes::fuse(g, options.fuse);
  consumers_.assign(count, {});
  for (int32_t id = 0; id < g.size(); ++id)
    if (fusion_.group_of[static_cast<size_t>(id)] >= 0)
      for (int32_t in : g.node(id).inputs) consumers_[static_cast<size_t>(in)].push_back(id);
  in_place_.assign(g.updates.size(), 0);
}

LoweredProgram Lowering::run() {
  if (options_.fuse) match_norm_backwards();
  for (const passes::KernelGroup& group : fusion_.groups) plan_group(group);
  plan_outputs_and_updates();
  if (options_.fuse) batch_steps();
  estimate_traffic();
  plan_arena(options_.reuse_memory);
  return std::move(prog_);
}

void Lowering::batch_steps() {
  constexpr size_t kMaxParamBytes = 4000;  // the classic kernel parameter limit, with room
  auto key = [](const Place& p) { return p.buf >= 0 ? static_cast<int64_t>(p.buf) : -static_cast<int64_t>(p.fixed) - 1; };
  auto meets = [](const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    for (int64_t x : a)
      if (std::find(b.begin(), b.end(), x) != b.end()) return true;
    return false;
  };
  std::vector<Step> out;
  std::vector<int64_t> reads, writes;  // of the batch being built (out.back())
  bool open = false;
  for (Step& s : prog_.steps) {
    const bool elementwise = s.kind == Step::Kind::kKernel && s.groups.size() == 1;
    std::vector<int64_t> r, w;
    if (elementwise)
      for (size_t a = 0; a < s.args.size(); ++a) (a < s.group_reads[0] ? r : w).push_back(key(s.args[a].place));
    const bool join = elementwise && open && !meets(r, writes) && !meets(w, reads) && !meets(w, writes) &&
                      (out.back().args.size() + s.args.size()) * sizeof(CUdeviceptr) <= kMaxParamBytes;
    if (!join) {
      out.push_back(std::move(s));
      reads = std::move(r);
      writes = std::move(w);
      open = elementwise;
      continue;
    }
    Step& b = out.back();
    b.nodes.insert(b.nodes.end(), s.nodes.begin(), s.nodes.end());
    b.args.insert(b.args.end(), s.args.begin(), s.args.end());
    b.groups.push_back(s.groups[0]);
    b.group_strides.push_back(std::move(s.group_strides[0]));
    b.group_reads.push_back(s.group_reads[0]);
    b.group_args.push_back(s.group_args[0]);
    reads.insert(reads.end(), r.begin(), r.end());
    writes.insert(writes.end(), w.begin(), w.end());
  }
  for (Step& s : out) {
    if (s.groups.size() < 2) continue;
    std::vector<const passes::KernelGroup*> groups;
    for (int32_t gi : s.groups) groups.push_back(&fusion_.groups[static_cast<size_t>(gi)]);
    s.launch = batched_groups_kernel(g_, groups, s.group_strides, "tg_kernel");
    s.launch_n = -1;
  }
  prog_.steps = std::move(out);
}

void Lowering::estimate_traffic() {
  for (Step& s : prog_.steps) {
    std::vector<int32_t> seen;
    auto bytes_of = [&](int32_t id) { return g_.node(id).numel() * dtype_size(g_.node(id).dtype); };
    for (int32_t id : s.nodes) {
      bool read_outside = std::find(g_.outputs.begin(), g_.outputs.end(), id) != g_.outputs.end();
      for (int32_t c : consumers_[static_cast<size_t>(id)])
        read_outside = read_outside || std::find(s.nodes.begin(), s.nodes.end(), c) == s.nodes.end();
      if (read_outside || s.nodes.size() == 1) s.moved += bytes_of(id);
      for (int32_t in : g_.node(id).inputs)
        if (std::find(s.nodes.begin(), s.nodes.end(), in) == s.nodes.end() && std::find(seen.begin(), seen.end(), in) == seen.end()) {
          seen.push_back(in);
          // A broadcast input is read at its source's size.
          int32_t src = in;
          while (g_.node(src).op == Op::kBroadcastTo || g_.node(src).op == Op::kReshape || g_.node(src).op == Op::kPermute)
            src = g_.node(src).inputs[0];
          s.moved += bytes_of(src);
        }
    }
  }
}

void Lowering::plan_arena(bool reuse) {
  // Execution index of each step; arena buffers live from their first to last touching step.
  for (size_t i = 0; i < prog_.steps.size(); ++i)
    for (const Arg& a : prog_.steps[i].args)
      if (!a.err && a.place.buf >= 0) {
        ArenaBuffer& b = prog_.bufs[static_cast<size_t>(a.place.buf)];
        const auto e = static_cast<int32_t>(i);
        b.first = b.first < 0 ? e : std::min(b.first, e);
        b.last = std::max(b.last, e);
      }
  choose_side_steps(reuse);
  const auto end = static_cast<int32_t>(prog_.steps.size());
  place_arena(prog_.bufs, end, reuse, prog_.memory);
}

void Lowering::choose_side_steps(bool reuse) {
  // A step is a side step when nothing after it touches what it touches: no later step has an
  // argument in one of its arena buffers or fixed allocations (arguments are not told apart
  // as read or written, so a shared read counts too), and no later step runs the same module
  // (chunked reductions keep partials in module globals). Its results are then read only
  // after the step's end (outputs, the loss), and it can run beside the steps after it:
  // captured on the low-priority side stream, joined before the updates and the readback.
  // Its buffers must then stay allocated to the end, or a later step could be placed in them
  // while it still reads: that is allowed while it grows the arena by at most a quarter.
  // Products (one shared cuBLASLt workspace), memsets and steps with the error word stay on
  // the main stream.
  if (env::is_set(env::Switch::kCudaNoSide)) return;
  const size_t n = prog_.steps.size();
  auto key = [](const Place& p) { return p.buf >= 0 ? static_cast<int64_t>(p.buf) : -static_cast<int64_t>(p.fixed) - 1; };
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
    for (size_t j = i + 1; ok && j < n; ++j) ok = prog_.steps[j].kind != Step::Kind::kKernel || prog_.steps[j].launch.source != s.launch.source;
    if (ok) side.push_back(i);
    later.insert(keys[i].begin(), keys[i].end());
  }
  if (side.empty()) return;
  const auto end = static_cast<int32_t>(n);
  if (reuse) {
    std::vector<ArenaBuffer> before = prog_.bufs, after = prog_.bufs;
    for (size_t i : side)
      for (const Arg& a : prog_.steps[i].args)
        if (!a.err && a.place.buf >= 0) after[static_cast<size_t>(a.place.buf)].last = end;
    MemoryStats scratch;
    const int64_t was = place_arena(before, end, reuse, scratch), is = place_arena(after, end, reuse, scratch);
    if (is > was + was / 4) return;
    for (size_t b = 0; b < prog_.bufs.size(); ++b) prog_.bufs[b].last = after[b].last;
  }
  for (size_t i : side) prog_.steps[i].side = true;
}

}  // namespace tg::backend::cuda
