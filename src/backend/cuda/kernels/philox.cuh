// Philox4x32-10, bit-identical to backend/philox.h (which uses std::array, so NVRTC cannot
// include it): philox_block(block, key) under the baked-in seed, philox_block_seeded(block,
// key, seed_lo, seed_hi) under a run-time seed, and to_uniform(word), a float in [0, 1).
//
// The generator (kernels_reduce.cc: philox_source) replaces the words SEED_LO and SEED_HI with
// the seed's two 32-bit halves; nothing needs to be defined before.
// @piece philox

__device__ __forceinline__ uint4 philox_block_seeded(unsigned long long block, unsigned int key, unsigned int k0,
                                                     unsigned int k1) {
  unsigned int c0 = (unsigned int)block, c1 = (unsigned int)(block >> 32), c2 = key, c3 = 0x746772u;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const unsigned int hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const unsigned int hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return make_uint4(c0, c1, c2, c3);
}
__device__ __forceinline__ uint4 philox_block(unsigned long long block, unsigned int key) {
  return philox_block_seeded(block, key, SEED_LO, SEED_HI);
}
__device__ __forceinline__ float to_uniform(unsigned int w) { return (float)(w >> 8) * 5.9604644775390625e-08f; }
