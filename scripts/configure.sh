#!/usr/bin/env bash
# Configures a build folder for one of the project's builds, setting every option that build
# relies on, so a folder configured earlier for another build (the demo's, without tests) is
# brought to this one instead of keeping its cached options.
# Usage: scripts/configure.sh demo|release|asan|fuzz [build dir, absolute or relative to the repository root]
#        [-DOPTION=value ...: set after the profile's own, so they win]
#   demo     Release, examples only (scripts/demo.sh)                 default dir: build
#   release  Release, examples, tests and benchmarks (scripts/test.sh) default dir: build
#   asan     -O1 -g1 with ASan+UBSan, examples and tests (scripts/test.sh) default dir: build-asan
#   fuzz     clang 16, -O1 -g1 with ASan+UBSan and libFuzzer, the fuzz/ targets only (scripts/test.sh)
#            default dir: build-fuzz
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:?usage: scripts/configure.sh demo|release|asan [build dir]}
common=(-G Ninja -DTG_BUILD_EXAMPLES=ON)
case "$profile" in
  demo)    dir=${2:-build}
           opts=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS= -DTG_SANITIZE=OFF -DTG_BUILD_TESTS=OFF -DTG_BUILD_BENCH=OFF) ;;
  release) dir=${2:-build}
           opts=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS= -DTG_SANITIZE=OFF -DTG_BUILD_TESTS=ON -DTG_BUILD_BENCH=ON -DTG_CTEST_PER_CASE=ON) ;;
  # -O1 -g1 (line tables only): sanitizer builds compile several times faster than at -O2 -g.
  asan)    dir=${2:-build-asan}
           opts=(-DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1 -g1" -DTG_SANITIZE=ON -DTG_BUILD_TESTS=ON -DTG_BUILD_BENCH=OFF -DTG_CTEST_PER_CASE=OFF) ;;
  fuzz)    dir=${2:-build-fuzz}
           opts=(-DCMAKE_CXX_COMPILER=clang++-16 -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1 -g1" -DTG_SANITIZE=ON
                 -DTG_FUZZ=ON -DTG_BUILD_TESTS=OFF -DTG_BUILD_EXAMPLES=OFF -DTG_BUILD_BENCH=OFF)
           # A folder configured with another compiler cannot switch: start it afresh.
           if [ -f "$dir/CMakeCache.txt" ] && ! grep -q 'CMAKE_CXX_COMPILER:.*clang++-16' "$dir/CMakeCache.txt"; then
             rm -rf "$dir"
           fi ;;
  *) echo "scripts/configure.sh: unknown build '$profile' (demo, release, asan or fuzz)" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" "${common[@]}" "${opts[@]}" "${@:3}" >/dev/null
