// Row reductions with a fixed summation order, written so that -O3 vectorises them. A
// floating-point reduction `sum += x[j]` is not vectorised without -ffast-math (it would
// reorder the sum), so these keep kLanes independent partial results, lane l summing the
// j ≡ l (mod kLanes) in order, then combine them in a fixed tree: the order depends only on
// n, never on the ISA or the thread count. Shared by the norm, softmax, cross-entropy and
// attention kernels.
#pragma once
#include <cstdint>
#include <limits>

namespace tg::backend::cpu {

constexpr int64_t kLanes = 8;

/// Σ term(j) over [0, n) in double.
template <class F>
inline double fixed_sum(int64_t n, const F& term) {
  double a[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) a[l] += term(j + l);
  for (int64_t l = 0; j + l < n; ++l) a[l] += term(j + l);
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/// Largest of x[0, n) (exact, so lanes change nothing); NaNs are skipped here and propagate
/// through the exponentials that follow instead.
inline float row_max(const float* __restrict x, int64_t n) {
  float m[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) m[l] = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) m[l] = x[j + l] > m[l] ? x[j + l] : m[l];
  for (int64_t l = 0; j + l < n; ++l) m[l] = x[j + l] > m[l] ? x[j + l] : m[l];
  for (int64_t l = 1; l < kLanes; ++l) m[0] = m[l] > m[0] ? m[l] : m[0];
  return m[0];
}

}  // namespace tg::backend::cpu
