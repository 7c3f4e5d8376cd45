#!/usr/bin/env bash
# Quick-start command 1: set up, build, and run the main demo on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/configure.sh demo build
cmake --build build --target addition
./build/examples/addition "$@"
