// The MPI engine across real processes: run under `mpirun -np 2` (tests/CMakeLists.txt registers
// it twice, once with MPI's shared-memory transport and once over TCP only, standing in for two
// hosts). Every rank runs every test and makes the same collectives in the same order, so
// checks use EXPECT (never ASSERT, which would leave a rank behind in a collective).
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "distributed/communicator.h"
#include "tensorgrad/distributed.h"
#include "tensorgrad/errors.h"

namespace {

namespace distributed = tg::distributed;
using tg::DType;

tg::dist::Communicator& comm() { return *tg::dist::world(); }

// Not a multiple of any vector width or chunk size.
constexpr int64_t kCount = 12347;

TEST(Mpi, WorldMatchesTheLaunch) {
  const distributed::World& w = distributed::world();
  EXPECT_EQ(w.engine, "mpi");
  EXPECT_EQ(w.size, 2);
  EXPECT_TRUE(w.rank == 0 || w.rank == 1);
  EXPECT_EQ(w.local_rank, w.rank);  // one host
  ASSERT_NE(tg::dist::world(), nullptr);
  EXPECT_EQ(comm().rank(), w.rank);
  EXPECT_EQ(comm().size(), w.size);
  EXPECT_STREQ(comm().name(), "mpi");
}

TEST(Mpi, AllReduceF32) {
  const int r = comm().rank(), n = comm().size();
  std::vector<float> send(kCount), recv(kCount, -1.f);
  for (int64_t i = 0; i < kCount; ++i) send[size_t(i)] = float(r + 1) + 0.5f * float(i % 1000);
  comm().all_reduce_host(send.data(), recv.data(), kCount, DType::kF32);
  const float rank_sum = float(n * (n + 1) / 2);
  for (int64_t i = 0; i < kCount; ++i)
    EXPECT_EQ(recv[size_t(i)], rank_sum + float(n) * 0.5f * float(i % 1000)) << i;
  comm().all_reduce_host(send.data(), send.data(), kCount, DType::kF32);  // in place
  EXPECT_EQ(send, recv);
}

TEST(Mpi, AllReduceF64AndI32) {
  const int r = comm().rank(), n = comm().size();
  std::vector<double> d(kCount);
  for (int64_t i = 0; i < kCount; ++i)
    d[size_t(i)] = 0.25 * double(i) + double(r);  // exact in double, so sums are too
  std::vector<double> dsum(kCount);
  comm().all_reduce_host_f64(d.data(), dsum.data(), kCount);
  comm().all_reduce_host_f64(d.data(), d.data(), kCount);
  for (int64_t i = 0; i < kCount; ++i)
    EXPECT_EQ(dsum[size_t(i)], double(n) * 0.25 * double(i) + double(n * (n - 1) / 2));
  EXPECT_EQ(d, dsum);

  std::vector<int32_t> k(kCount), ksum(kCount);
  std::iota(k.begin(), k.end(), r * 1000000);
  comm().all_reduce_host(k.data(), ksum.data(), kCount, DType::kI32);
  comm().all_reduce_host(k.data(), k.data(), kCount, DType::kI32);
  for (int64_t i = 0; i < kCount; ++i)
    EXPECT_EQ(ksum[size_t(i)], n * int32_t(i) + 1000000 * (n * (n - 1) / 2));
  EXPECT_EQ(k, ksum);

  comm().all_reduce_host(k.data(), k.data(), 0, DType::kI32);  // nothing to do, but every rank does it
}

TEST(Mpi, AllGatherBytesAndBarrier) {
  const int r = comm().rank(), n = comm().size();
  const uint8_t mine[3] = {uint8_t(r), uint8_t(2 * r + 1), 7};
  std::vector<uint8_t> all(size_t(3 * n));
  comm().all_gather_bytes(mine, all.data(), 3);
  for (int q = 0; q < n; ++q) {
    EXPECT_EQ(all[size_t(3 * q)], q);
    EXPECT_EQ(all[size_t(3 * q + 1)], 2 * q + 1);
    EXPECT_EQ(all[size_t(3 * q + 2)], 7);
  }
  comm().barrier();
}

TEST(Mpi, WhatMpiDoesNotDoIsAnError) {
  float x = 0;
  EXPECT_THROW(comm().all_reduce_device(&x, &x, 1, DType::kF32, nullptr), tg::Error);
  EXPECT_THROW(comm().reduce_scatter_device(&x, &x, 1, DType::kF32, nullptr), tg::Error);
  EXPECT_THROW(comm().all_gather_device(&x, &x, 1, DType::kF32, nullptr), tg::Error);
  EXPECT_THROW(comm().all_reduce_host(&x, &x, 1, DType::kBF16), tg::Error);
}

TEST(Mpi, ShardsOfTheWorldAreDisjoint) {
  const std::vector<int64_t> mine = distributed::shard(101, /*epoch=*/2, /*seed=*/9);
  EXPECT_EQ(mine.size(), 50u);
  std::vector<int64_t> all(100);
  comm().all_gather_bytes(mine.data(), all.data(), int64_t(mine.size() * sizeof(int64_t)));
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  distributed::init({.engine = "mpi"});
  const int failed = RUN_ALL_TESTS();
  distributed::finalize();
  return failed;
}
