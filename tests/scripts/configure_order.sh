#!/usr/bin/env bash
# The README's two commands must not depend on each other's leftovers: configures one scratch
# folder the demo's way and then the test suite's way (and the reverse), as scripts/demo.sh and
# scripts/test.sh do, and checks that each ends with the targets its command builds.
# Usage: tests/scripts/configure_order.sh <scratch dir>
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scratch=${1:?usage: configure_order.sh <scratch dir>}
rm -rf "$scratch"
has_target() { local t; t=$(cmake --build "$scratch" --target help); grep -q "^$1: phony" <<<"$t"; }
fail() { echo "configure_order: $*" >&2; exit 1; }

bash "$root/scripts/configure.sh" demo "$scratch"
has_target addition || fail "the demo's configure has no 'addition' target"
has_target ops_tests && fail "the demo's configure builds the tests (it should build the demo only)"
bash "$root/scripts/configure.sh" release "$scratch"
has_target ops_tests || fail "demo then test: the test configure has no test targets (TG_BUILD_TESTS kept OFF?)"
has_target gpt_bench || fail "demo then test: the test configure has no benchmark targets"
grep -q '^TG_BUILD_TESTS:BOOL=ON' "$scratch/CMakeCache.txt" || fail "demo then test: TG_BUILD_TESTS is not ON"

bash "$root/scripts/configure.sh" demo "$scratch"
has_target addition || fail "test then demo: no 'addition' target"
grep -q '^CMAKE_BUILD_TYPE:STRING=Release' "$scratch/CMakeCache.txt" || fail "test then demo: not a Release build"
bash "$root/scripts/configure.sh" asan "$scratch"
has_target ops_tests || fail "demo then asan: no test targets"
grep -q '^TG_SANITIZE:BOOL=ON' "$scratch/CMakeCache.txt" || fail "demo then asan: TG_SANITIZE is not ON"
bash "$root/scripts/configure.sh" release "$scratch"
grep -q '^TG_SANITIZE:BOOL=OFF' "$scratch/CMakeCache.txt" || fail "asan then release: TG_SANITIZE is still ON"
grep -q '^CMAKE_CXX_FLAGS:STRING=$' "$scratch/CMakeCache.txt" || fail "asan then release: the sanitizer's -O1 flags were kept"
grep -q '^TG_CTEST_PER_CASE:BOOL=ON' "$scratch/CMakeCache.txt" || fail "asan then release: a test per binary was kept"
# Options after the folder are set after the profile's (scripts/test.sh: a test per binary).
bash "$root/scripts/configure.sh" release "$scratch" -DTG_CTEST_PER_CASE=OFF
grep -q '^TG_CTEST_PER_CASE:BOOL=OFF' "$scratch/CMakeCache.txt" || fail "release with -DTG_CTEST_PER_CASE=OFF: still ON"
rm -rf "$scratch"
echo "configure_order: demo/test configures in either order keep the targets each command needs"
