// Several processes training one model: joining the group at start-up (init), the group's
// shape (world), leaving it (finalize), and splitting a data set between the ranks (shard).
//
// One process per device, started by a launcher that sets its environment:
//   * torchrun-style: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT;
//   * mpirun (Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK;
//     MPICH and Intel MPI: PMI_RANK, PMI_SIZE).
// With none of them set the process is a world of one, and init() starts no engine.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tg::distributed {

struct InitOptions {
  /// "mpi" (CPU processes, through the MPI library this build linked), "nccl" (one GPU per
  /// process, libnccl loaded at run time) or "auto": mpi when started by mpirun and this build
  /// has MPI, else nccl.
  std::string engine = "auto";
  /// Seconds a rank waits for the others at the rendezvous and in control exchanges before it
  /// throws DistributedError naming the ranks it waited for. TG_DIST_TIMEOUT overrides it.
  double timeout_s = 300;
};

struct World {
  int rank = 0, size = 1;
  /// This process's rank on its host; the NCCL engine uses GPU cuda:local_rank.
  int local_rank = 0;
  /// "mpi", "nccl", or "none" for a world of one (no engine, no collectives).
  std::string engine = "none";
};

/// Joins the group the launcher started, once per process. Reads the launch variables above;
/// a world of one (none set, or a size of 1) starts no engine and makes no communicator.
/// The NCCL engine binds this process to GPU cuda:LOCAL_RANK (its primary context is made
/// current on the calling thread) and meets rank 0 over TCP at MASTER_ADDR:MASTER_PORT.
/// Throws DistributedError naming the missing or malformed variable, the rank that failed and,
/// for the rendezvous, host:port; tg::Error when called twice without finalize().
const World& init(InitOptions options = {});
/// Whether init() ran (and finalize() has not).
bool initialized();
/// The world init() joined. Throws tg::Error before init().
const World& world();
/// Leaves the group: destroys the communicator and, for MPI, finalizes MPI (if init() started
/// it). Every rank calls it at the end of a successful run. Nothing finalizes at exit by
/// itself: a rank that exits after an error must not wait there for ranks that still expect
/// it in a collective; without finalize() the launcher ends the whole job instead. MPI cannot
/// start again in the same process once finalized.
void finalize();

/// This rank's indices of [0, n) for one epoch. With `shuffle`, one permutation of [0, n) per
/// (seed, epoch), the same on every rank: Fisher–Yates driven by splitmix64 seeded with
/// seed ^ (epoch + 1) · 0x9E3779B97F4A7C15, with draws in [0, i] by rejection (no modulo bias),
/// so the order is fixed by this definition on every platform. Without it, the identity.
/// Rank r takes elements [r·k, (r+1)·k) of that order, k = n / size: every rank gets the same
/// number of indices (so the same number of steps), and the last n % size elements of the
/// order are left out this epoch (different ones each epoch when shuffled). Builds the whole
/// permutation (8·n bytes). Throws tg::Error unless n >= 0 and 0 <= rank < size.
std::vector<int64_t> shard(int64_t n, int rank, int size, uint64_t epoch, uint64_t seed, bool shuffle = true);
/// shard() for this process's world() (a world of one before init()).
std::vector<int64_t> shard(int64_t n, uint64_t epoch, uint64_t seed, bool shuffle = true);

}  // namespace tg::distributed
