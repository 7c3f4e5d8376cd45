#!/usr/bin/env bash
# Builds the library, tests and benchmarks in build-gpu/ (Release) and runs the whole test
# suite on a machine with an NVIDIA GPU: there Device::best() is cuda:0, the op table and the
# model tests run their cuda cases against the reference backend, and nothing is skipped for
# want of a GPU. Prints ctest's summary. Usage: scripts/test_gpu.sh [ctest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/configure.sh release build-gpu
ninja -C build-gpu >/dev/null
cd build-gpu
ctest --output-on-failure --no-tests=error -j "$(nproc)" "$@"
