#!/usr/bin/env bash
# Installs what tensorgrad needs to build on Debian 12 (as root, or via sudo):
# a C++20 compiler, CMake, Ninja, OpenBLAS (its OpenMP build) and GoogleTest, clang 16 for
# the fuzz targets, the `fortunes` text corpus that examples/char_lm trains on, and zlib with the
# Fashion-MNIST images that examples/fashion_mnist trains on, and Open MPI (libopenmpi-dev,
# openmpi-bin: the distributed runtime's engine between CPU processes, and mpirun for its tests),
# nlohmann-json (header only: reads Hugging Face tokenizer.json files), and stb (libstb-dev: reads
# and writes image files for the vision models).
# Skips packages already present.
set -euo pipefail
# clang 16 with its runtime (libFuzzer) and OpenMP builds the fuzz targets (fuzz/).
packages=(g++ cmake ninja-build libopenblas-dev libopenblas-openmp-dev libgtest-dev pkg-config fortunes
          zlib1g-dev dataset-fashion-mnist
          clang-16 libclang-rt-16-dev libomp-16-dev
          libopenmpi-dev openmpi-bin nlohmann-json3-dev libstb-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
