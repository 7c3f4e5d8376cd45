#!/usr/bin/env bash
# Runs tensorgrad's CPU benchmarks and the PyTorch peer back to back on this machine, so
# the ratio comes from one run. Usage: bench/run_cpu.sh [path/to/torch_peer.py]
# Needs a built tree (build/) and Debian's python3-torch for the peer.
set -euo pipefail
cd "$(dirname "$0")/.."
peer=${1:-../shared/bench/torch_peer.py}
python=${PYTHON:-/usr/bin/python3}
cmake --build build --target mlp_sin_bench gpt_bench >/dev/null
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "# tensorgrad"
./build/bench/mlp_sin_bench
./build/bench/gpt_bench addition_3L,char_6L384
echo "# PyTorch $($python -c 'import torch; print(torch.__version__, "threads", torch.get_num_threads())')"
$python "$peer" --device cpu --only mlp_sin,addition_3L,char_6L384
