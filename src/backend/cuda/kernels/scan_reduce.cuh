// selective_scan gradient's last kernel (selective_scan_common.cc: scan_reduce_kernel): dA,
// dB, dC, dD and dbias from the backward's partials, each summed in a fixed order (grid-stride
// over TOTAL outputs). Pieces: helpers (an evict-first load, before the kernel); body.
//
// Defined before: the prelude of scan_common.cuh; NB, NA, TOTAL (outputs of dB and dC, of dA,
// of all), BPG (channel blocks per group); the kernel's signature (dA_part, dBC_part,
// dDb_part, out).
// @piece helpers
__device__ __forceinline__ float load_evict_first(const float* p) {
#if __CUDA_ARCH__ >= 800
  unsigned long long pol;
  float v;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  asm volatile("ld.global.nc.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(p), "l"(pol));
  return v;
#else
  return __ldg(p);
#endif
}
// @piece body
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < TOTAL; i += (long long)gridDim.x * 256) {
    float sum = 0.0f;
    if (i < NA) {  // dA[d, n] over the sequences
      for (int b = 0; b < B; ++b) sum += dA_part[(long long)b * NA + i];
      out[2 * NU + i] = sum;
    } else if (i < NA + 2 * NB) {  // dB / dC [b, g, n, l] over the group's channel blocks
      const long long r = i - NA, kind = r / NB, x = r % NB, l = x % L, n = (x / L) % N, bg = x / ((long long)N * L);
      const long long b = bg / G, g = bg % G;
      for (int k = 0; k < BPG; ++k)
        sum += load_evict_first(&dBC_part[((((g * BPG + k) * B + b) * 2 + kind) * N + n) * L + l]);
      out[2 * NU + NA + kind * NB + x] = sum;
    } else {  // dD, then dbias, over the sequences
      const long long r = i - NA - 2 * NB, which = r / D, dd = r % D;
      for (int b = 0; b < B; ++b) sum += dDb_part[which * B * D + (long long)b * D + dd];
      out[2 * NU + NA + 2 * NB + r] = sum;
    }
  }
}
