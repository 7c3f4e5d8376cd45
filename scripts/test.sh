#!/usr/bin/env bash
# Quick-start command 2: set up, build and run the whole test suite, then the same suite
# again under AddressSanitizer + UndefinedBehaviorSanitizer, then the fuzz targets briefly. Each configure sets every option
# its build needs (scripts/configure.sh), so running the demo first changes nothing here, and a
# suite that finds no tests fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)
# ctest runs $jobs tests at once, each with its own OpenMP team: threads that spin while waiting
# would take the cores from the other tests.
export OMP_WAIT_POLICY=passive

echo "== Release build + tests =="
# A ctest test per test binary rather than per case: the suite's ~2,900 cases would start as
# many processes (tests/CMakeLists.txt).
bash scripts/configure.sh release build -DTG_CTEST_PER_CASE=OFF
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure --no-tests=error -j "$jobs"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build + tests =="
bash scripts/configure.sh asan build-asan
cmake --build build-asan -j "$jobs"
UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure --no-tests=error -j "$jobs"

echo "== libFuzzer: the checkpoint, safetensors and JSON readers, 10 s each (clang 16, ASan + UBSan) =="
bash scripts/configure.sh fuzz build-fuzz
cmake --build build-fuzz -j "$jobs"
ctest --test-dir build-fuzz --output-on-failure --no-tests=error
