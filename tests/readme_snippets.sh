#!/usr/bin/env bash
# Compiles every ```cpp block of README.md against an installed paxcc, the way
# the README's ```cmake block says (find_package(paxcc), pax::pax), and runs
# its complete programs without LD_LIBRARY_PATH. A fragment is compiled inside
# a function after the declarations of its context, tests/readme_snippets/
# NAME.inc; errors point at the README's lines.
# usage: readme_snippets.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset LD_LIBRARY_PATH
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
"$source_dir/scripts/check-readme.sh" --readme "$source_dir/README.md" --cpp-project "$work/src"
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "$work/src" -B "$work/build" -G "Unix Makefiles" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
# -k: every snippet that fails is reported, not the first one.
if ! cmake --build "$work/build" -j"${PAX_SNIPPET_JOBS:-2}" -- -k >"$work/build.log" 2>&1; then
  grep -E 'error|README' "$work/build.log" | head -60
  echo "FAIL: a C++ snippet of the README does not compile (lines above)"
  exit 1
fi
while read -r program; do
  out=$("$work/build/$program" 2>&1) || {
    echo "$out"
    echo "FAIL: the README's program $program exits non-zero"
    exit 1
  }
  echo "ran $program: $(wc -l <<<"$out") lines of output"
done <"$work/src/programs.txt"
echo "every C++ snippet of the README compiles"
