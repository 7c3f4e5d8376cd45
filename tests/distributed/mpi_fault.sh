#!/usr/bin/env bash
# Runs mpi_fault on two ranks (rank 1 dies inside a run, rank 0 waits in a collective) and
# checks that the launch ends well within the time limit, unsuccessfully, with mpirun's report
# naming rank 1 and its exit status.
# Usage: mpi_fault.sh <mpiexec> <mpi_fault binary>
set -uo pipefail
mpiexec=$1
binary=$2
start=$SECONDS
out=$(timeout 60 "$mpiexec" -np 2 --oversubscribe "$binary" 2>&1)
rc=$?
echo "$out"
echo "mpi_fault.sh: mpirun ended with status $rc after $((SECONDS - start)) s"
if [ "$rc" -eq 124 ]; then echo "mpi_fault.sh: FAILED: the launch hung (killed after 60 s)"; exit 1; fi
if [ "$rc" -eq 0 ]; then echo "mpi_fault.sh: FAILED: the launch succeeded though rank 1 died"; exit 1; fi
# Open MPI names a process [[job,1],rank]; another launcher's wording may need a line here.
if ! grep -Eq 'Process name: \[\[[0-9]+,[0-9]+\],1\]' <<<"$out" || ! grep -Eq 'Exit code: +3' <<<"$out"; then
  echo "mpi_fault.sh: FAILED: mpirun's report does not name rank 1 and its exit status 3"; exit 1
fi
echo "mpi_fault.sh: passed"
