// The schedule's last stages (see schedule.h): values read after the step, launches and the
// arena.
#include <algorithm>

#include "ir/strides.h"
#include "passes/memory_plan.h"
#include "passes/schedule_internal.h"

namespace tg::passes {

void Scheduler::settle_outputs_and_updates() {
  std::vector<int32_t> overwritten;  // bound buffers an update copies over after the step
  for (size_t u = 0; u < g_.updates.size(); ++u)
    if (!in_place_[u] && g_.updates[u].value != g_.updates[u].target)
      overwritten.push_back(s_.places[static_cast<size_t>(g_.updates[u].target)].buffer);
  auto settle = [&](int32_t id) {
    Place p = s_.places[static_cast<size_t>(id)];
    const ir::Node& n = g_.node(id);
    if (!is_contiguous_strides(p.strides, n.shape) ||
        std::count(overwritten.begin(), overwritten.end(), p.buffer) > 0) {
      const Place dense = own(n.numel() * dtype_size(n.dtype), n.dtype, Buffer::Category::kScratch, n.shape);
      add_copy(id, p, dense);
      p = dense;
    }
    if (s_.buffers[static_cast<size_t>(p.buffer)].home == Buffer::Home::kArena)
      s_.buffers[static_cast<size_t>(p.buffer)].to_end = true;
    return p;
  };
  for (int32_t out : g_.outputs)
    if (std::find(s_.outputs.begin(), s_.outputs.end(), out) == s_.outputs.end()) {
      s_.outputs.push_back(out);
      s_.output_places.push_back(settle(out));
    }
  for (size_t u = 0; u < g_.updates.size(); ++u) {
    Schedule::Update up;
    up.target = g_.updates[u].target;
    up.value = g_.updates[u].value;
    up.in_place = in_place_[u] || up.value == up.target;
    if (!up.in_place) up.source = settle(up.value);
    s_.updates.push_back(up);
  }
}

void Scheduler::assign_launches() {
  auto meets = [](const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    for (int32_t x : a)
      if (std::find(b.begin(), b.end(), x) != b.end()) return true;
    return false;
  };
  int32_t launch = -1;
  bool open = false;
  std::vector<int32_t> reads, writes;  // buffers of the launch being built
  size_t operands = 0;
  for (Step& st : s_.steps) {
    bool batchable = options_.fuse && st.kind == Step::Kind::kGroup;
    if (batchable && !caps_.batch_sinks())
      for (int32_t id : st.nodes) batchable = batchable && g_.node(id).op != ir::Op::kSum;
    std::vector<int32_t> r, w;
    for (const Place& p : st.in) r.push_back(p.buffer);
    for (const Place& p : st.out) w.push_back(p.buffer);
    for (const Place& p : st.scratch) w.push_back(p.buffer);
    const bool join = batchable && open && !meets(r, writes) && !meets(w, reads) && !meets(w, writes) &&
                      operands + r.size() + w.size() <= caps_.batch_operands();
    if (!join) {
      ++launch;
      reads.clear();
      writes.clear();
      operands = 0;
    }
    st.launch = launch;
    open = batchable;
    reads.insert(reads.end(), r.begin(), r.end());
    writes.insert(writes.end(), w.begin(), w.end());
    operands += r.size() + w.size();
  }
  s_.launches = launch + 1;
}

void Scheduler::place_arena() {
  for (const Step& st : s_.steps)
    for (const std::vector<Place>* places : {&st.in, &st.out, &st.scratch})
      for (const Place& p : *places) {
        Buffer& b = s_.buffers[static_cast<size_t>(p.buffer)];
        if (b.home != Buffer::Home::kArena) continue;
        b.first = b.first < 0 ? st.launch : std::min(b.first, st.launch);
        b.last = std::max(b.last, st.launch);
      }
  s_.arena = passes::place_arena(s_.buffers, s_.launches, options_.reuse_memory);
}

ArenaStats place_arena(std::vector<Buffer>& buffers, int32_t end, bool reuse) {
  std::vector<Interval> intervals;
  std::vector<size_t> index;  // buffer of each interval
  for (size_t i = 0; i < buffers.size(); ++i) {
    Buffer& b = buffers[i];
    if (b.home != Buffer::Home::kArena) continue;
    if (b.first < 0) b.first = b.last = 0;  // never touched (an output nothing computes into)
    if (b.to_end || !reuse) b.last = end;
    if (!reuse) b.first = 0;
    intervals.push_back({b.bytes, b.first, b.last});
    index.push_back(i);
  }
  const IntervalPlan plan = plan_intervals(intervals);
  ArenaStats stats;
  stats.bytes = plan.arena_bytes;
  stats.no_reuse = plan.total_bytes;
  const int32_t peak = busiest_step(intervals, end);  // what is live there, by category
  for (size_t k = 0; k < index.size(); ++k) {
    Buffer& b = buffers[index[k]];
    b.offset = std::max<int64_t>(0, plan.offset[k]);  // empty buffers: 0
    if (b.first > peak || b.last < peak) continue;
    switch (b.category) {
      case Buffer::Category::kActivation: stats.activations += b.bytes; break;
      case Buffer::Category::kGradient: stats.gradients += b.bytes; break;
      case Buffer::Category::kOptimizer: stats.optimizer_temps += b.bytes; break;
      case Buffer::Category::kScratch: stats.scratch += b.bytes; break;
    }
  }
  return stats;
}

}  // namespace tg::passes
