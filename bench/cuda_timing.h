// GPU timing for the benches that call the cuda backend's internals (cuda_ceilings,
// cuda_product_probe): CUDA events on the default stream.
#pragma once
#include "backend/cuda/driver.h"

/// Warm but median-free: one untimed call of f, then `reps` timed back to back; ms per call.
template <class F>
float cuda_time_ms(F&& f, int reps) {
  namespace cuda = tg::backend::cuda;
  const cuda::Driver& d = cuda::driver();
  cuda::CUevent start = nullptr, stop = nullptr;
  cuda::check(d.cuEventCreate(&start, 0), "cuEventCreate");
  cuda::check(d.cuEventCreate(&stop, 0), "cuEventCreate");
  f();
  cuda::check(d.cuEventRecord(start, nullptr), "cuEventRecord");
  for (int i = 0; i < reps; ++i) f();
  cuda::check(d.cuEventRecord(stop, nullptr), "cuEventRecord");
  cuda::check(d.cuEventSynchronize(stop), "cuEventSynchronize");
  float ms = 0;
  d.cuEventElapsedTime(&ms, start, stop);
  d.cuEventDestroy(start);
  d.cuEventDestroy(stop);
  return ms / static_cast<float>(reps);
}
