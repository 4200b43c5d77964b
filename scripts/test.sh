#!/usr/bin/env bash
# The test command: install dependencies, check the formatting, build
# everything, check the layers' includes, run every test.
# On a CPU with more than AVX2, the array-core suites run a second time capped
# to AVX2 (PAX_MAX_ISA), so that every machine exercises the AVX2 code paths.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/format.sh --check || { echo "test.sh: sources differ from .clang-format; run scripts/format.sh" >&2; exit 1; }
scripts/build.sh
scripts/check-includes.sh  # headers escape the layers' link check
ctest --test-dir build --output-on-failure -j"$(nproc 2>/dev/null || echo 2)"
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  echo "test.sh: the array-core, compiler, layer and model suites capped to AVX2 (PAX_MAX_ISA=avx2)"
  for suite in core ir interp prims compile compile_passes nn ops api backend models; do
    PAX_MAX_ISA=avx2 PAX_COMPILE=sync "build/tests/pax_${suite}_test" --gtest_brief=1 >"build/tests/avx2_${suite}.log" 2>&1 || {
      cat "build/tests/avx2_${suite}.log"
      echo "test.sh: pax_${suite}_test failed with PAX_MAX_ISA=avx2" >&2
      exit 1
    }
    tail -n 1 "build/tests/avx2_${suite}.log"
  done
fi
