#!/usr/bin/env bash
# Runs tensorgrad's CPU benchmarks and the PyTorch peer back to back on this machine, each
# workload in its own process (so peak RSS is per workload), and prints a markdown table for
# bench/RESULTS.md: ms/step of both, the speed-up, kernels per step, planned memory and the
# peak RSS of both processes. Usage: bench/run_cpu.sh [path/to/torch_peer.py]
# Needs a Release build in build/ and Debian's python3-torch for the peer (/usr/bin/time too).
set -euo pipefail
cd "$(dirname "$0")/.."
peer=${1:-../shared/bench/torch_peer.py}
python=${PYTHON:-/usr/bin/python3}
bash scripts/configure.sh release build
cmake --build build --target mlp_sin_bench gpt_bench decode_bench scan_bench >/dev/null
log=$(mktemp -d)
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
     "PyTorch $($python -c 'import torch; print(torch.__version__, "threads", torch.get_num_threads())')"
for w in mlp_sin addition_3L char_6L384; do
  if [ "$w" = mlp_sin ]; then ./build/bench/mlp_sin_bench >"$log/$w.tg"; else ./build/bench/gpt_bench "$w" >"$log/$w.tg"; fi
  /usr/bin/time -f "rss_kib %M" -o "$log/$w.rss" "$python" "$peer" --device cpu --only "$w" >"$log/$w.pt"
  cat "$log/$w.tg" "$log/$w.pt"
done
echo
echo "| workload | PyTorch ms/step | tensorgrad ms/step | speed-up | kernels/step | planned peak MiB (÷ all tensors) | RSS MiB PyTorch | RSS MiB tensorgrad |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for w in mlp_sin addition_3L char_6L384; do
  tg=$(awk -v w="$w" '$1 == w {print $3}' "$log/$w.tg")
  pt=$(awk -v w="$w" '$1 == w {print $3; exit}' "$log/$w.pt")
  read -r kernels planned ratio rss < <(awk '$1 == "#" {print $4, $6, $10, $12}' "$log/$w.tg")
  prss=$(awk '{printf "%.1f", $2 / 1024}' "$log/$w.rss")
  speed=$(awk -v a="$pt" -v b="$tg" 'BEGIN {printf "%.2f", a / b}')
  echo "| \`$w\` | $pt | $tg | **${speed}×** | $kernels | $planned ($ratio) | $prss | $rss |"
done
rm -rf "$log"
# gpt2_decode: greedy KV-cached decoding, 32 new tokens, against a PyTorch loop with a KV cache
# (bench/decode_peer_cpu.py: the Hugging Face peer needs transformers).
echo
./build/bench/decode_bench cpu
"$python" bench/decode_peer_cpu.py
# selective_scan: Mamba's scan forward and backward at the CPU size (b 2, d 256, l 256, n 16),
# against the peer's reference implementation.
echo
./build/bench/scan_bench cpu
"$python" "$peer" --device cpu --only selective_scan
