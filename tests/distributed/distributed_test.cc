// The distributed runtime in one process: the shard helper, reading the launch variables
// (set with setenv here), and the TCP rendezvous with its ranks as threads, or as forked
// processes where one must die.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "distributed/launch.h"
#include "distributed/tcp_store.h"
#include "tensorgrad/distributed.h"
#include "tensorgrad/errors.h"

namespace {

using tg::DistributedError;
using tg::dist::TcpGroup;
namespace distributed = tg::distributed;

// ---- shard ----

TEST(Shard, RanksAreDisjointAndCoverAllButTheRemainder) {
  for (const int64_t n : {0, 1, 7, 100, 1001})
    for (const int size : {1, 2, 3, 8}) {
      std::set<int64_t> seen;
      for (int r = 0; r < size; ++r) {
        const std::vector<int64_t> mine = distributed::shard(n, r, size, /*epoch=*/3, /*seed=*/42);
        EXPECT_EQ(static_cast<int64_t>(mine.size()), n / size) << "n " << n << " size " << size;
        for (int64_t i : mine) {
          EXPECT_TRUE(i >= 0 && i < n);
          EXPECT_TRUE(seen.insert(i).second) << "index " << i << " on two ranks";
        }
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), n - n % size);
    }
}

TEST(Shard, SameEpochSameOrderOtherEpochOtherOrder) {
  const auto a = distributed::shard(1000, 1, 4, 5, 7);
  EXPECT_EQ(a, distributed::shard(1000, 1, 4, 5, 7));
  EXPECT_NE(a, distributed::shard(1000, 1, 4, 6, 7));
  EXPECT_NE(a, distributed::shard(1000, 1, 4, 5, 8));
  // Over the epochs, every index comes up (the dropped remainder changes with the order).
  std::set<int64_t> over_epochs;
  for (uint64_t epoch = 0; epoch < 20; ++epoch)
    for (int r = 0; r < 3; ++r)
      for (int64_t i : distributed::shard(10, r, 3, epoch, 1)) over_epochs.insert(i);
  EXPECT_EQ(over_epochs.size(), 10u);
}

TEST(Shard, OrderIsFixedByItsDefinition) {
  // splitmix64 + Fisher–Yates as documented, computed independently (a few lines of Python
  // with 64-bit wrap-around): the same numbers on every platform.
  EXPECT_EQ(distributed::shard(10, 0, 1, /*epoch=*/0, /*seed=*/0),
            (std::vector<int64_t>{8, 7, 6, 5, 3, 9, 2, 4, 1, 0}));
  EXPECT_EQ(distributed::shard(10, 0, 1, 3, 42), (std::vector<int64_t>{2, 9, 7, 3, 4, 1, 8, 5, 6, 0}));
  EXPECT_EQ(distributed::shard(10, 1, 2, 3, 42), (std::vector<int64_t>{1, 8, 5, 6, 0}));
  EXPECT_EQ(distributed::shard(10, 1, 2, 0, 0, /*shuffle=*/false), (std::vector<int64_t>{5, 6, 7, 8, 9}));
  EXPECT_THROW(distributed::shard(10, 2, 2, 0, 0), tg::Error);
  EXPECT_THROW(distributed::shard(-1, 0, 1, 0, 0), tg::Error);
}

// ---- the launch variables ----

const char* const kLaunchVariables[] = {"RANK",
                                        "WORLD_SIZE",
                                        "LOCAL_RANK",
                                        "MASTER_ADDR",
                                        "MASTER_PORT",
                                        "OMPI_COMM_WORLD_RANK",
                                        "OMPI_COMM_WORLD_SIZE",
                                        "OMPI_COMM_WORLD_LOCAL_RANK",
                                        "PMI_RANK",
                                        "PMI_SIZE",
                                        "TG_DIST_TIMEOUT"};

/// Clears every launch variable for one test, and again after it.
class LaunchEnv : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override {
    distributed::finalize();
    clear();
  }
  static void clear() {
    for (const char* v : kLaunchVariables) unsetenv(v);
  }
  static void set(const char* name, const char* value) { setenv(name, value, 1); }
  /// The DistributedError init() throws, "" when it throws none.
  static std::string init_error(distributed::InitOptions options = {}) {
    try {
      distributed::init(options);
    } catch (const DistributedError& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(LaunchEnv, NoVariablesIsAWorldOfOne) {
  EXPECT_FALSE(distributed::initialized());
  EXPECT_THROW(distributed::world(), tg::Error);
  const distributed::World w = distributed::init();
  EXPECT_TRUE(distributed::initialized());
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.size, 1);
  EXPECT_EQ(w.engine, "none");
  EXPECT_EQ(tg::dist::world(), nullptr);
  EXPECT_THROW(distributed::init(), tg::Error);  // twice
  distributed::finalize();
  EXPECT_FALSE(distributed::initialized());
}

TEST_F(LaunchEnv, SizeOneStartsNoEngine) {
  set("RANK", "0");
  set("WORLD_SIZE", "1");
  EXPECT_EQ(distributed::init({.engine = "nccl"}).size, 1);
  EXPECT_EQ(tg::dist::world(), nullptr);
}

TEST_F(LaunchEnv, MissingOrMalformedVariablesAreNamed) {
  struct Case {
    std::vector<std::pair<const char*, const char*>> vars;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"WORLD_SIZE", "2"}}, "RANK is not set, but WORLD_SIZE is"},
      {{{"RANK", "1"}}, "WORLD_SIZE is not set, but RANK is"},
      {{{"RANK", "one"}, {"WORLD_SIZE", "2"}}, "RANK='one' is not a rank"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK=2 is not below WORLD_SIZE=2"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE='0' is not a number of processes"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}},
       "MASTER_PORT='70000' is not a TCP port"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_PORT", "29500"}},
       "rank 1: MASTER_ADDR is not set"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "localhost"}, {"MASTER_PORT", "29500"}},
       "rank 1: LOCAL_RANK is not set"},
      {{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
       "OMPI_COMM_WORLD_RANK=3 is not below OMPI_COMM_WORLD_SIZE=2"},
      {{{"TG_DIST_TIMEOUT", "soon"}}, "TG_DIST_TIMEOUT='soon' is not a positive number of seconds"},
  };
  for (const Case& c : cases) {
    clear();
    for (const auto& [name, value] : c.vars) set(name, value);
    const std::string error = init_error({.engine = "nccl"});
    EXPECT_NE(error.find(c.message), std::string::npos)
        << "expected '" << c.message << "', got '" << error << "'";
    distributed::finalize();
  }
  clear();
  EXPECT_NE(init_error({.engine = "gloo"}).find("unknown engine 'gloo'"), std::string::npos);
  EXPECT_NE(init_error({.timeout_s = 0}).find("timeout_s"), std::string::npos);
}

TEST_F(LaunchEnv, MpirunsVariablesAreReadToo) {
  set("OMPI_COMM_WORLD_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "4");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  const tg::dist::LaunchEnv e = tg::dist::read_launch_env();
  EXPECT_TRUE(e.launched && e.by_mpi);
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.size, 4);
  EXPECT_EQ(e.local_rank, 1);
  set("TG_DIST_TIMEOUT", "2.5");
  EXPECT_EQ(tg::dist::timeout_seconds(300), 2.5);
}

// ---- the TCP rendezvous ----

/// A port nothing listens on now (the kernel's pick for a socket bound to port 0).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

/// Runs body(rank) for the given ranks on threads; each rank's error message ("" when none).
std::vector<std::string> run_ranks(const std::vector<int>& ranks, const std::function<void(int)>& body) {
  std::vector<std::string> errors(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        body(ranks[i]);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(TcpGroup, DeliversThePayloadAndGathers) {
  const int port = free_port();
  constexpr int kSize = 3;
  std::vector<std::vector<int32_t>> gathered(kSize);
  std::vector<std::vector<char>> payloads(kSize);
  const auto errors = run_ranks({0, 1, 2}, [&](int rank) {
    TcpGroup group(rank, kSize, "localhost", port, 10);
    std::vector<char> payload(128, 0);
    if (rank == 0)
      for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7);
    group.broadcast(payload.data(), static_cast<int64_t>(payload.size()));
    payloads[static_cast<size_t>(rank)] = payload;
    const int32_t mine[2] = {rank, 100 * rank};
    std::vector<int32_t> all(2 * kSize);
    group.all_gather(mine, all.data(), sizeof mine);
    gathered[static_cast<size_t>(rank)] = all;
    group.barrier();
  });
  for (int r = 0; r < kSize; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "");
    EXPECT_EQ(payloads[static_cast<size_t>(r)], payloads[0]);
    EXPECT_EQ(gathered[static_cast<size_t>(r)], (std::vector<int32_t>{0, 0, 1, 100, 2, 200}));
  }
  EXPECT_EQ(payloads[0][5], 35);
}

TEST(TcpGroup, AMissingRankTimesOutNamed) {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = run_ranks({0, 1}, [&](int rank) { TcpGroup group(rank, 4, "127.0.0.1", port, 1.0); });
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_NE(
      errors[0].find("rank 0 waited 1.0 s at 127.0.0.1:" + std::to_string(port) + " for ranks 2, 3 to join"),
      std::string::npos)
      << errors[0];
  // Rank 1 hears of it as rank 0 going away, not after a timeout of its own.
  EXPECT_NE(errors[1].find("rank 1: rank 0 at 127.0.0.1:" + std::to_string(port) + " closed its connection"),
            std::string::npos)
      << errors[1];
}

TEST(TcpGroup, RankZeroUnreachableIsNamed) {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = run_ranks({1}, [&](int rank) { TcpGroup group(rank, 2, "127.0.0.1", port, 1.0); });
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_NE(errors[0].find("rank 1 could not reach rank 0 at 127.0.0.1:" + std::to_string(port) +
                           " within 1.0 s: Connection refused"),
            std::string::npos)
      << errors[0];
  const auto unknown =
      run_ranks({1}, [&](int rank) { TcpGroup group(rank, 2, "no-such-host.invalid", port, 0.5); });
  EXPECT_NE(unknown[0].find("cannot resolve host"), std::string::npos) << unknown[0];
}

TEST(TcpGroup, PortInUseIsNamed) {
  const int port = free_port();
  const int fd = socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_any;
  a.sin6_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  const auto errors = run_ranks({0}, [&](int rank) { TcpGroup group(rank, 2, "localhost", port, 1.0); });
  close(fd);
  EXPECT_NE(errors[0].find("rank 0 could not listen at localhost:" + std::to_string(port) +
                           ": Address already in use"),
            std::string::npos)
      << errors[0];
}

TEST(TcpGroup, DifferentExchangesAreAnError) {
  const int port = free_port();
  const auto errors = run_ranks({0, 1}, [&](int rank) {
    TcpGroup group(rank, 2, "127.0.0.1", port, 5.0);
    if (rank == 0) {
      int64_t in = 0, out[2];
      group.all_gather(&in, out, sizeof in);
    } else {
      group.barrier();
    }
  });
  EXPECT_NE(errors[0].find("rank 1 is in barrier of 0 bytes while rank 0 is in all_gather_bytes of 8 bytes"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("closed its connection"), std::string::npos) << errors[1];
}

// Two real processes: the child plays rank 1 and dies.

/// Forks a child that runs `child` as rank 1 and exits with status 3 (no destructors, no atexit);
/// returns its pid.
pid_t fork_rank1(const std::function<void()>& child) {
  const pid_t pid = fork();
  if (pid == 0) {
    try {
      child();
    } catch (...) {
    }
    _exit(3);
  }
  return pid;
}

TEST(TcpGroupProcesses, APeerThatExitsIsNamed) {
  const int port = free_port();
  const pid_t pid = fork_rank1([&] { TcpGroup group(1, 2, "127.0.0.1", port, 5.0); });
  const auto t0 = std::chrono::steady_clock::now();
  std::string error;
  try {
    TcpGroup group(0, 2, "127.0.0.1", port, 5.0);
    int32_t in = 0, out[2];
    group.all_gather(&in, out, sizeof in);
  } catch (const DistributedError& e) {
    error = e.what();
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_LT(seconds_since(t0), 5.0);  // noticed at once, not at the timeout
  EXPECT_NE(error.find("rank 0: rank 1 closed its connection (did it exit?) during all_gather_bytes"),
            std::string::npos)
      << error;
}

TEST(TcpGroupProcesses, APeerThatExitsBeforeJoiningTimesOut) {
  const int port = free_port();
  const pid_t pid = fork_rank1([] {});
  const auto t0 = std::chrono::steady_clock::now();
  std::string error;
  try {
    TcpGroup group(0, 2, "127.0.0.1", port, 1.0);
  } catch (const DistributedError& e) {
    error = e.what();
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_LT(seconds_since(t0), 4.0);
  EXPECT_NE(error.find("rank 0 waited 1.0 s at 127.0.0.1:" + std::to_string(port) + " for rank 1 to join"),
            std::string::npos)
      << error;
}

}  // namespace
