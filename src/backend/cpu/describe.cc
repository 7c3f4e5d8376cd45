// What the CPU executable runs, in words: describe() and the TG_PROFILE report.
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "backend/cpu/executable.h"

namespace tg::backend::cpu {

std::string CpuExecutable::step_label(const passes::Step& s) const {
  if (s.kind == passes::Step::Kind::kCopy) {
    const NodeInfo& n = nodes_[static_cast<size_t>(s.node)];
    return "copy " + shape_str(n.shape);
  }
  const NodeInfo& out = nodes_[static_cast<size_t>(s.nodes.back())];
  if (s.kind == passes::Step::Kind::kGroup) {
    std::map<std::string, int> counts;
    for (int32_t id : s.nodes) ++counts[ir::op_name(nodes_[static_cast<size_t>(id)].op)];
    std::string ops;
    for (auto& [name, c] : counts)
      ops += (ops.empty() ? "" : " ") + name + (c > 1 ? "x" + std::to_string(c) : "");
    return "fused[" + ops + "] " + shape_str(out.shape);
  }
  return std::string(ir::op_name(out.op)) + " " + shape_str(out.shape);
}

std::string CpuExecutable::describe() const {
  std::ostringstream os;
  os << "cpu: " << kernels_.size() << " kernels, arena " << memory_.arena << " bytes (" << memory_.no_reuse
     << " without reuse)\n";
  const std::vector<passes::Step>& steps = schedule_.steps;
  for (size_t i = 0; i < steps.size();) {
    int64_t bytes = 0, flops = 0;
    size_t j = i;  // the steps of one launch
    os << "  #" << steps[i].launch;
    for (; j < steps.size() && steps[j].launch == steps[i].launch; ++j) {
      os << (j == i ? " " : " | ") << step_label(steps[j]);
      bytes += steps[j].bytes;
      flops += step_flops_[j];
    }
    os << "  (" << bytes << " B, " << flops << " flop)\n";
    i = j;
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
  const std::vector<passes::Step>& steps = schedule_.steps;
  for (size_t i = 0; i < steps.size();) {
    size_t j = i;
    while (j < steps.size() && steps[j].launch == steps[i].launch) ++j;
    const auto launch = static_cast<size_t>(steps[i].launch);
    const std::string label =
        j - i > 1 ? "multi-tensor " + std::to_string(j - i) + " groups" : step_label(steps[i]);
    Row& e = by_label[label];
    e.seconds += kernel_seconds_[launch];
    e.count += 1;
    for (size_t k = i; k < j; ++k) {
      e.bytes += steps[k].bytes;
      e.flops += step_flops_[k];
    }
    total += kernel_seconds_[launch];
    i = j;
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
  std::fprintf(stderr, "[cpu profile] %zu kernels, %.3f ms per execution\n", kernels_.size(),
               total * 1e3 / n);
  for (size_t i = 0; i < rows.size() && i < 40; ++i)
    std::fprintf(stderr, "  %8.3f ms %5.1f%%  %s\n", rows[i].first * 1e3 / n, 100 * rows[i].first / total,
                 rows[i].second.c_str());
}

}  // namespace tg::backend::cpu
