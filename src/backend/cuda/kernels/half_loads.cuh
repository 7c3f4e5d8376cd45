// Loads of a kernel's operands of element type IN_T, widened to f32 as they are read: f32 as it
// is, bf16 or f16 bits exactly (prelude.cuh's widening piece, which the generator pastes
// first). Shared by the attention and convolution kernels.
//
// Constants the generator defines before it: IN_T (float, or unsigned short for 16-bit bits)
// and HALF_F16 (1: the 16-bit operands are f16, 0: bf16).
// @piece loads
__device__ __forceinline__ float half_to_float(unsigned short h) {
#if HALF_F16
  return tg_h2f(h);
#else
  return tg_bf2f(h);
#endif
}
__device__ __forceinline__ float in_ld(const float* p) { return __ldg(p); }
__device__ __forceinline__ float in_ld(const unsigned short* p) { return half_to_float(__ldg(p)); }
// Four consecutive elements from p aligned to four of them.
__device__ __forceinline__ float4 in_ld4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ float4 in_ld4(const unsigned short* p) {
  const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
  return make_float4(half_to_float((unsigned short)(u.x & 0xffffu)), half_to_float((unsigned short)(u.x >> 16)),
                     half_to_float((unsigned short)(u.y & 0xffffu)), half_to_float((unsigned short)(u.y >> 16)));
}
