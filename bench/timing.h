// The peer's timing protocol (torch_peer.py): `warm` warm-up steps, then three runs of
// `iters` steps; returns the median seconds per step.
#pragma once
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <vector>

#include <tensorgrad/tensorgrad.h>

template <class F>
double median_seconds_per_step(F&& step, int warm, int iters) {
  for (int i = 0; i < warm; ++i) step();
  std::vector<double> runs;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) step();
    runs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters);
  }
  std::sort(runs.begin(), runs.end());
  return runs[1];
}

/// One kernel call's time: 3 warm-up calls, then the best of 5 runs of 5 calls (the kernel
/// benches, which time a single function rather than a training step).
inline double seconds_per_call(const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; ++i) f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 5);
  }
  return best;
}

/// One comment line after a workload's timing: what was compiled and what memory it took.
/// `# <name> kernels <n> planned_mib <planned peak> all_tensors_mib <sum> ratio <r> rss_mib <peak RSS>`
inline void report_compiled(const char* name, const tg::Program& program) {
  const tg::MemoryReport m = program.memory_report();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double mib = 1 << 20;
  std::printf("# %s kernels %lld planned_mib %.1f all_tensors_mib %.1f ratio %.3f rss_mib %.1f\n", name,
              static_cast<long long>(program.kernel_count()), static_cast<double>(m.planned_peak()) / mib,
              static_cast<double>(m.all_tensors) / mib,
              static_cast<double>(m.planned_peak()) / static_cast<double>(m.all_tensors),
              static_cast<double>(usage.ru_maxrss) * 1024 / mib);
  std::fflush(stdout);
  if (std::getenv("TG_DESCRIBE")) std::fprintf(stderr, "%s", program.describe().c_str());
  if (std::getenv("TG_MEMORY")) std::fprintf(stderr, "%s\n", m.to_string().c_str());
}
