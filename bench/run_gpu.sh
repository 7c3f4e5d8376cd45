#!/usr/bin/env bash
# Runs tensorgrad's GPU benchmarks and the PyTorch peer back to back on this machine (one GPU)
# and prints their lines: ours as "<workload> fp32|tf32|tf32x3 <ms> ms/step …", the peer's with its
# modes (eager_fp32, eager_tf32, compile_tf32, cuda_graph, …) and peak device memory.
# Usage: bench/run_gpu.sh [workloads, default mlp_sin,addition_3L,char_6L384,gpt2_124M,gpt2_decode,selective_scan]
# COMPILE=1 adds the peer's torch.compile modes; ROOFLINE=1 the five slowest kernels per workload.
# Needs a Release build in build-gpu/ (scripts/test_gpu.sh makes one) and PyTorch with CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
peer=${PEER:-../shared/bench/torch_peer.py}
python=${PYTHON:-python3}
only=${1:-mlp_sin,addition_3L,char_6L384,gpt2_124M,gpt2_decode,selective_scan}
bash scripts/configure.sh release build-gpu
ninja -C build-gpu mlp_sin_bench gpt_bench decode_bench scan_bench cuda_ceilings >/dev/null
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)," \
     "PyTorch $($python -c 'import torch; print(torch.__version__)')"
./build-gpu/bench/cuda_ceilings
for w in ${only//,/ }; do
  if [ "$w" = mlp_sin ]; then
    ./build-gpu/bench/mlp_sin_bench cuda
  elif [ "$w" = gpt2_decode ]; then
    ./build-gpu/bench/decode_bench cuda
  elif [ "$w" = selective_scan ]; then
    ./build-gpu/bench/scan_bench cuda
  else
    ./build-gpu/bench/gpt_bench "$w" cuda fp32
    ./build-gpu/bench/gpt_bench "$w" cuda tf32
    [ "$w" = addition_3L ] || ./build-gpu/bench/gpt_bench "$w" cuda tf32x3
  fi
  "$python" "$peer" --device cuda --only "$w" ${COMPILE:+--compile}
done
# Roofline material: the five slowest kernels of each workload's step (tf32 for the GPTs), with
# their minimum traffic and flops turned into GB/s and TFLOP/s (TG_PROFILE=2, one step).
if [ -n "${ROOFLINE:-}" ]; then
  for w in ${only//,/ }; do
    [ "$w" = gpt2_decode ] || [ "$w" = selective_scan ] && continue
    echo "## top kernels: $w"
    if [ "$w" = mlp_sin ]; then TG_PROFILE=2 ./build-gpu/bench/mlp_sin_bench cuda 2>&1 >/dev/null | grep "  step" | sort -k3 -g -r | head -5 | cut -c1-230
    else TG_PROFILE=2 ./build-gpu/bench/gpt_bench "$w" cuda tf32 2>&1 >/dev/null | grep "  step" | sort -k3 -g -r | head -5 | cut -c1-230; fi
  done
fi
