// The NCCL engine. In the ordinary suite (one process, no launch variables) it checks that a
// launch NCCL cannot serve fails with a DistributedError; started twice by
// tests/distributed/run_nccl_test.sh (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
// set; one GPU per rank) it checks the device collectives against sums computed on the host.
// Without a GPU, or without libnccl, the collective test skips and says why.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "../test_util.h"
#include "backend/cuda/driver.h"
#include "distributed/communicator.h"
#include "tensorgrad/distributed.h"
#include "tensorgrad/dtype.h"
#include "tensorgrad/errors.h"

namespace {

namespace cuda = tg::backend::cuda;
namespace distributed = tg::distributed;
using tg::DType;

bool launched() { return std::getenv("WORLD_SIZE") != nullptr; }

TEST(NcclEngine, ALaunchItCannotServeIsADistributedError) {
  if (launched()) GTEST_SKIP() << "started by a launcher: this test is for a single process";
  // A world of two whose rank 1 never comes: whatever this machine lacks (libnccl, a GPU) or
  // has, init() ends in a DistributedError within the timeout.
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_RANK", "0", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29533", 1);
  std::string error;
  try {
    distributed::init({.engine = "nccl", .timeout_s = 1});
  } catch (const tg::DistributedError& e) {
    error = e.what();
  }
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(v);
  EXPECT_EQ(error.rfind("[distributed", 0), 0u) << error;
  EXPECT_FALSE(distributed::initialized());
}

/// Device buffers of one test, freed at its end.
struct DeviceBuffers {
  std::vector<cuda::CUdeviceptr> held;
  ~DeviceBuffers() {
    for (cuda::CUdeviceptr p : held) cuda::driver().cuMemFree(p);
  }
  template <class T>
  void* upload(const std::vector<T>& host) {
    cuda::CUdeviceptr p = 0;
    cuda::check(cuda::driver().cuMemAlloc(&p, host.size() * sizeof(T)), "cuMemAlloc");
    held.push_back(p);
    cuda::check(cuda::driver().cuMemcpyHtoD(p, host.data(), host.size() * sizeof(T)), "cuMemcpyHtoD");
    return reinterpret_cast<void*>(p);
  }
  template <class T>
  std::vector<T> download(const void* device, size_t n) {
    std::vector<T> host(n);
    cuda::check(
        cuda::driver().cuMemcpyDtoH(host.data(), reinterpret_cast<cuda::CUdeviceptr>(device), n * sizeof(T)),
        "cuMemcpyDtoH");
    return host;
  }
};

TEST(NcclEngine, CollectivesOnTwoRanks) {
  if (!launched()) GTEST_SKIP() << "needs a launcher: bash tests/distributed/run_nccl_test.sh <this binary>";
  if (!tg::testing::gpu_skip_reason().empty()) GTEST_SKIP() << tg::testing::gpu_skip_reason();
  int gpus = 0;
  cuda::driver().cuDeviceGetCount(&gpus);
  const int size = std::atoi(std::getenv("WORLD_SIZE"));
  if (gpus < size) GTEST_SKIP() << "one GPU per rank: " << size << " ranks, " << gpus << " GPUs";
  try {
    distributed::init({.engine = "nccl", .timeout_s = 60});
  } catch (const tg::DistributedError& e) {
    if (std::string(e.what()).find("NCCL not found") != std::string::npos) GTEST_SKIP() << e.what();
    throw;
  }
  tg::dist::Communicator& comm = *tg::dist::world();
  const int rank = comm.rank();
  ASSERT_EQ(comm.size(), size);
  cuda::CUstream stream = nullptr;
  cuda::check(cuda::driver().cuStreamCreate(&stream, 0), "cuStreamCreate");
  DeviceBuffers buffers;
  constexpr size_t kCount = 1003;  // not a multiple of a warp, a vector or a rank count
  const float rank_sum = float(size * (size + 1) / 2);

  // all_reduce, f32: out of place, then in place.
  std::vector<float> x(kCount);
  for (size_t i = 0; i < kCount; ++i) x[i] = float(rank + 1) * float(i % 100);
  void* dx = buffers.upload(x);
  void* dsum = buffers.upload(std::vector<float>(kCount, -1.f));
  comm.all_reduce_device(dx, dsum, kCount, DType::kF32, stream);
  comm.all_reduce_device(dx, dx, kCount, DType::kF32, stream);
  cuda::check(cuda::driver().cuStreamSynchronize(stream), "cuStreamSynchronize");
  const std::vector<float> sum = buffers.download<float>(dsum, kCount);
  for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(sum[i], rank_sum * float(i % 100)) << i;
  EXPECT_EQ(buffers.download<float>(dx, kCount), sum);

  // all_reduce, bf16, two in one group: small integers, exact in bf16.
  std::vector<uint16_t> h(kCount);
  for (size_t i = 0; i < kCount; ++i) h[i] = tg::bf16_from_f32(float(rank + 1) * float(i % 8));
  void* dh1 = buffers.upload(h);
  void* dh2 = buffers.upload(h);
  comm.group_start();
  comm.all_reduce_device(dh1, dh1, kCount, DType::kBF16, stream);
  comm.all_reduce_device(dh2, dh2, kCount, DType::kBF16, stream);
  comm.group_end();
  cuda::check(cuda::driver().cuStreamSynchronize(stream), "cuStreamSynchronize");
  for (void* d : {dh1, dh2}) {
    const std::vector<uint16_t> got = buffers.download<uint16_t>(d, kCount);
    for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(tg::f32_from_bf16(got[i]), rank_sum * float(i % 8)) << i;
  }

  // reduce_scatter: rank r keeps elements [r·count, (r+1)·count) of the sum.
  std::vector<float> whole(kCount * size_t(size));
  for (size_t j = 0; j < whole.size(); ++j) whole[j] = float(rank + 1) * float(j % 100);
  void* dwhole = buffers.upload(whole);
  void* dpart = buffers.upload(std::vector<float>(kCount));
  comm.reduce_scatter_device(dwhole, dpart, kCount, DType::kF32, stream);
  cuda::check(cuda::driver().cuStreamSynchronize(stream), "cuStreamSynchronize");
  const std::vector<float> part = buffers.download<float>(dpart, kCount);
  for (size_t i = 0; i < kCount; ++i)
    EXPECT_EQ(part[i], rank_sum * float((size_t(rank) * kCount + i) % 100)) << i;

  // all_gather: every rank's count elements, in rank order.
  std::vector<float> mine(kCount);
  for (size_t i = 0; i < kCount; ++i) mine[i] = float(rank * 10000 + int(i));
  void* dmine = buffers.upload(mine);
  void* dall = buffers.upload(std::vector<float>(kCount * size_t(size)));
  comm.all_gather_device(dmine, dall, kCount, DType::kF32, stream);
  cuda::check(cuda::driver().cuStreamSynchronize(stream), "cuStreamSynchronize");
  const std::vector<float> all = buffers.download<float>(dall, kCount * size_t(size));
  for (int r = 0; r < size; ++r)
    for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(all[size_t(r) * kCount + i], float(r * 10000 + int(i)));

  // The control exchanges over the rendezvous's connections.
  const int32_t me = rank;
  std::vector<int32_t> ranks(size_t(size), -1);
  comm.all_gather_bytes(&me, ranks.data(), sizeof me);
  std::vector<int32_t> expected(static_cast<size_t>(size));
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(ranks, expected);
  comm.barrier();
  EXPECT_THROW(comm.all_reduce_host(x.data(), x.data(), 1, DType::kF32), tg::Error);

  cuda::driver().cuStreamDestroy(stream);
  distributed::finalize();
}

}  // namespace
