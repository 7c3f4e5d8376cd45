// distributed::shard: each rank's share of a data set's indices for one epoch (see
// tensorgrad/distributed.h for the definition every rank relies on).
#include <numeric>
#include <string>

#include "tensorgrad/distributed.h"
#include "tensorgrad/errors.h"

namespace tg::distributed {
namespace {

/// splitmix64 (Steele, Lea and Flood): a 64-bit state advanced by the golden-ratio constant,
/// each output a bijective mix of it. Written out so every platform draws the same numbers.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, bound), bound >= 1: draws below 2^64 mod bound are rejected, so each
  /// residue is hit by the same number of accepted draws.
  uint64_t below(uint64_t bound) {
    const uint64_t reject_under = (0 - bound) % bound;
    uint64_t r = next();
    while (r < reject_under) r = next();
    return r % bound;
  }
};

}  // namespace

std::vector<int64_t> shard(int64_t n, int rank, int size, uint64_t epoch, uint64_t seed, bool shuffle) {
  if (n < 0 || size < 1 || rank < 0 || rank >= size)
    throw Error("[distributed::shard] needs n >= 0 and 0 <= rank < size; got n = " + std::to_string(n) +
                ", rank = " + std::to_string(rank) + ", size = " + std::to_string(size));
  const int64_t per_rank = n / size;
  if (!shuffle) {
    std::vector<int64_t> out(static_cast<size_t>(per_rank));
    std::iota(out.begin(), out.end(), per_rank * rank);
    return out;
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  // Fisher–Yates: position i takes a uniformly chosen element of positions [0, i].
  SplitMix64 rng{seed ^ ((epoch + 1) * 0x9E3779B97F4A7C15ull)};
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  const auto first = order.begin() + per_rank * rank;
  return std::vector<int64_t>(first, first + per_rank);
}

std::vector<int64_t> shard(int64_t n, uint64_t epoch, uint64_t seed, bool shuffle) {
  const World w = initialized() ? world() : World{};
  return shard(n, w.rank, w.size, epoch, seed, shuffle);
}

}  // namespace tg::distributed
