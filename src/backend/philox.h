// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC'11): a
// counter-based generator, so element i of a random tensor is a pure function of
// (seed, key, i) and every backend produces the same bits without sharing state. This
// header is the single definition of those bits; it is plain C++ that CUDA can compile too.
//
// Stream layout: element i of a node with per-site seed s, under the runtime key k, is
// word (i mod 4) of philox(counter = {i / 4 (low 32), i / 4 (high 32), k, 0x746772 ("tgr")},
//                         key = {s (low 32), s (high 32)}),
// and its uniform value is (word >> 8) · 2⁻²⁴ ∈ [0, 1), exact in f32.
#pragma once
#include <array>
#include <cstdint>

namespace tg::backend {

struct Philox4x32 {
  static constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  static constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

  /// Ten rounds of the Philox4x32 bijection of `ctr` under `key`.
  static std::array<uint32_t, 4> block(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
    for (int round = 0; round < 10; ++round) {
      const uint64_t p0 = static_cast<uint64_t>(kMul0) * ctr[0];
      const uint64_t p1 = static_cast<uint64_t>(kMul1) * ctr[2];
      ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
             static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
      key = {key[0] + kWeyl0, key[1] + kWeyl1};
    }
    return ctr;
  }
};

/// The uniform [0, 1) value of element `index` for seed `seed` under runtime key `key`.
inline float philox_uniform(uint64_t seed, uint32_t key, uint64_t index) {
  const uint64_t block_index = index >> 2;
  const std::array<uint32_t, 4> words = Philox4x32::block(
      {static_cast<uint32_t>(block_index), static_cast<uint32_t>(block_index >> 32), key, 0x746772u},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return static_cast<float>(words[index & 3] >> 8) * 0x1.0p-24f;
}

}  // namespace tg::backend
