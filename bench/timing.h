// The peer's timing protocol (torch_peer.py): `warm` warm-up steps, then three runs of
// `iters` steps; returns the median seconds per step.
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

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
