#!/usr/bin/env bash
# Runs tensorgrad's GPU benchmarks and the PyTorch peer back to back on this machine (one GPU)
# and prints their lines: ours as "<workload> fp32|tf32 <ms> ms/step …", the peer's with its
# modes (eager_fp32, eager_tf32, compile_tf32, cuda_graph, …) and peak device memory.
# Usage: bench/run_gpu.sh [workloads, default mlp_sin,addition_3L,char_6L384,gpt2_124M]
# Needs a Release build in build-gpu/ (scripts/test_gpu.sh makes one) and PyTorch with CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
peer=${PEER:-../shared/bench/torch_peer.py}
python=${PYTHON:-python3}
only=${1:-mlp_sin,addition_3L,char_6L384,gpt2_124M}
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build-gpu mlp_sin_bench gpt_bench >/dev/null
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)," \
     "PyTorch $($python -c 'import torch; print(torch.__version__)')"
for w in ${only//,/ }; do
  if [ "$w" = mlp_sin ]; then
    ./build-gpu/bench/mlp_sin_bench cuda
  else
    ./build-gpu/bench/gpt_bench "$w" cuda fp32
    ./build-gpu/bench/gpt_bench "$w" cuda tf32
  fi
  "$python" "$peer" --device cuda --only "$w" ${COMPILE:+--compile}
done
