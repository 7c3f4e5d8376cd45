// A rank that dies in the middle of a run: under `mpirun -np 2`, rank 1 exits with status 3
// while rank 0 waits in a collective for it. tests/distributed/mpi_fault.sh checks that the
// whole launch ends (mpirun ends rank 0) and that mpirun's report names rank 1.
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "distributed/communicator.h"
#include "tensorgrad/distributed.h"

int main() {
  const tg::distributed::World w = tg::distributed::init({.engine = "mpi"});
  tg::dist::Communicator& comm = *tg::dist::world();
  comm.barrier();
  std::vector<float> x(1000, 1.f);
  comm.all_reduce_host(x.data(), x.data(), 1000, tg::DType::kF32);
  if (w.rank == 1) {
    std::fprintf(stderr, "mpi_fault: rank 1 exits with status 3 while rank 0 is in all_reduce_host\n");
    _exit(3);
  }
  for (;;) comm.all_reduce_host(x.data(), x.data(), 1000, tg::DType::kF32);  // never completes
}
