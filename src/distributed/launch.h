// What the launcher told this process (torchrun's or mpirun's environment variables), read and
// checked by distributed::init(), and the engines' constructors init() chooses between.
#pragma once
#include <memory>
#include <string>

#include "distributed/communicator.h"

namespace tg::dist {

struct LaunchEnv {
  bool launched = false;  // any launch variable is set
  bool by_mpi = false;    // started by mpirun (OMPI_COMM_WORLD_* or PMI_* set)
  int rank = 0, size = 1;
  int local_rank = -1;      // -1: not given (the MPI engine asks MPI)
  std::string master_addr;  // "" when MASTER_ADDR is not set
  int master_port = 0;      // 0 when MASTER_PORT is not set
};

/// The launch variables (see tensorgrad/distributed.h), checked: a variable that is not a
/// number, a rank outside [0, size), a port outside 1–65535, a size without a rank are
/// DistributedErrors naming the variable and its value.
LaunchEnv read_launch_env();
/// TG_DIST_TIMEOUT when set (seconds, > 0; anything else is a DistributedError), else `fallback`.
double timeout_seconds(double fallback);

/// Whether this build linked an MPI library.
bool built_with_mpi();
/// Starts MPI (unless the program already did) and returns a communicator over a copy of
/// MPI_COMM_WORLD; *local_rank is this rank among the ranks sharing its host.
std::unique_ptr<Communicator> make_mpi_communicator(const LaunchEnv& env, int* local_rank);
/// Destroys nothing itself: finalizes MPI if make_mpi_communicator started it.
void finalize_mpi();
/// Binds to GPU cuda:env.local_rank, meets the other ranks at MASTER_ADDR:MASTER_PORT and
/// returns a communicator over an NCCL communicator of all ranks.
std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, double timeout_s);

}  // namespace tg::dist
