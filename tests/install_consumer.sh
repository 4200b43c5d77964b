#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then configures, builds and
# runs tests/install_consumer against it with find_package(paxcc). The
# installed paxcc and the consumer run without LD_LIBRARY_PATH, from the
# prefix and again after the prefix is moved (their RUNPATH is $ORIGIN-relative).
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset LD_LIBRARY_PATH
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir/tests/install_consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer"

# check_installed PREFIX: its bin/paxcc answers --version and --list.
check_installed() {
  local out
  out=$("$1/bin/paxcc" --version) || { echo "FAIL: $1/bin/paxcc --version does not run"; return 1; }
  grep -q '^paxcc [0-9]' <<<"$out" || { echo "FAIL: $1/bin/paxcc --version printed '$out'"; return 1; }
  out=$("$1/bin/paxcc" --list) || { echo "FAIL: $1/bin/paxcc --list does not run"; return 1; }
  grep -q 'lm.KjvTransformer ' <<<"$out" || { echo "FAIL: $1/bin/paxcc --list lacks lm.KjvTransformer"; return 1; }
}
check_installed "$work/prefix"
mv "$work/prefix" "$work/moved"
check_installed "$work/moved"
echo "installed paxcc and consumer run without LD_LIBRARY_PATH"
