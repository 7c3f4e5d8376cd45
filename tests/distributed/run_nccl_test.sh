#!/usr/bin/env bash
# Starts two ranks of nccl_test on this host, one GPU each, the way torchrun would (RANK,
# WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), and fails unless both pass.
# Usage: tests/distributed/run_nccl_test.sh <build dir>/tests/nccl_test [port]
set -uo pipefail
binary=${1:?usage: run_nccl_test.sh <nccl_test binary> [port]}
port=${2:-29511}
pids=()
for rank in 0 1; do
  RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TG_DIST_TIMEOUT=60 \
    timeout 300 "$binary" --gtest_filter='NcclEngine.CollectivesOnTwoRanks' >"${TMPDIR:-/tmp}/nccl_test.rank$rank.log" 2>&1 &
  pids+=($!)
done
status=0
for rank in 0 1; do
  wait "${pids[$rank]}" || status=1
  echo "== rank $rank =="
  cat "${TMPDIR:-/tmp}/nccl_test.rank$rank.log"
done
[ "$status" -eq 0 ] && echo "run_nccl_test.sh: both ranks passed" || echo "run_nccl_test.sh: FAILED"
exit "$status"
