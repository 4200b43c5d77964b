#!/usr/bin/env bash
# Formats every C++ source of the tree with clang-format (.clang-format), or
# with --check reports the files that differ from it and exits non-zero.
# The *-inl.h headers are left as written: they are text that the fused-loop
# code generator embeds (one-line operation tables).
# usage: scripts/format.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format.sh: clang-format is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
mode=(-i)
if [[ ${1:-} == --check ]]; then
  mode=(--dry-run -Werror)
fi
git ls-files -z -- 'pax/*.h' 'pax/*.cc' 'tools/*.h' 'tools/*.cc' 'bench/*.h' 'bench/*.cc' 'examples/*.h' \
    'examples/*.cc' 'tests/*.h' 'tests/*.cc' 'fuzz/*.h' 'fuzz/*.cc' ':!:*-inl.h' |
  xargs -0 -n 50 -P 2 clang-format --style=file "${mode[@]}"
