#!/usr/bin/env bash
# Quick-start command 1: set up, build, and run the main demo on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTG_BUILD_TESTS=OFF >/dev/null
cmake --build build --target addition
./build/examples/addition "$@"
