// Device helpers every group kernel starts with (codegen.cc: prelude(), both pieces): the bf16
// and f16 conversions, int32 arithmetic that wraps like the CPU's WrapI32 (signed overflow is
// undefined in CUDA C++ too) and float → int casts that saturate and send NaN to 0. The
// attention and convolution kernels take the widening piece alone (half_loads.cuh).
// @piece widen
// bf16 (the upper half of an f32, stored as 16 bits) and f16 (IEEE binary16 bits) widen to f32
// exactly.
__device__ inline float tg_bf2f(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
__device__ inline float tg_h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
// @piece prelude
struct W32 {
  int v;
  __device__ W32(int x) : v(x) {}
  __device__ explicit operator int() const { return v; }
};
__device__ inline W32 operator-(W32 a) { return W32((int)(0u - (unsigned)a.v)); }
__device__ inline W32 operator+(W32 a, W32 b) { return W32((int)((unsigned)a.v + (unsigned)b.v)); }
__device__ inline W32 operator-(W32 a, W32 b) { return W32((int)((unsigned)a.v - (unsigned)b.v)); }
__device__ inline W32 operator*(W32 a, W32 b) { return W32((int)((unsigned)a.v * (unsigned)b.v)); }
__device__ inline bool operator<(W32 a, W32 b) { return a.v < b.v; }
__device__ inline bool operator>(W32 a, W32 b) { return a.v > b.v; }
__device__ inline bool operator<=(W32 a, W32 b) { return a.v <= b.v; }
__device__ inline bool operator>=(W32 a, W32 b) { return a.v >= b.v; }
__device__ inline bool operator==(W32 a, W32 b) { return a.v == b.v; }
__device__ inline bool operator!=(W32 a, W32 b) { return a.v != b.v; }
__device__ inline int tg_f2i(float x) {
  if (!(x == x)) return 0;
  if (x >= 2147483648.0f) return 2147483647;
  if (x < -2147483648.0f) return (-2147483647 - 1);
  return (int)x;
}
// Narrowing to bf16 rounds to nearest even and sends every NaN to 0x7FC0, as
// tg::bf16_from_f32 on the host.
__device__ inline unsigned short tg_f2bf(float x) {
  const unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)0x7fc0;
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
// Narrowing to f16 rounds to nearest even with subnormals, overflows to inf, and sends a NaN
// to 0x7E00 with its sign, as tg::f16_from_f32.
__device__ inline unsigned short tg_f2h(float x) {
  const unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)(((u >> 16) & 0x8000u) | 0x7e00u);
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
}
