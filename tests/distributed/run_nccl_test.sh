#!/usr/bin/env bash
# Starts two ranks of a test binary on this host, one GPU each, the way torchrun would (RANK,
# WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), and fails unless both pass.
# Usage: tests/distributed/run_nccl_test.sh <build dir>/tests/nccl_test [port] [gtest filter]
#        tests/distributed/run_nccl_test.sh <build dir>/tests/nccl_data_parallel 29512 '*'
set -uo pipefail
binary=${1:?usage: run_nccl_test.sh <test binary> [port] [gtest filter]}
port=${2:-29511}
filter=${3:-NcclEngine.CollectivesOnTwoRanks}
pids=()
for rank in 0 1; do
  RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TG_DIST_TIMEOUT=60 \
    timeout 300 "$binary" --gtest_filter="$filter" >"${TMPDIR:-/tmp}/$(basename "$binary").rank$rank.log" 2>&1 &
  pids+=($!)
done
status=0
for rank in 0 1; do
  wait "${pids[$rank]}" || status=1
  echo "== rank $rank =="
  cat "${TMPDIR:-/tmp}/$(basename "$binary").rank$rank.log"
done
[ "$status" -eq 0 ] && echo "run_nccl_test.sh: both ranks passed" || echo "run_nccl_test.sh: FAILED"
exit "$status"
