#!/usr/bin/env bash
# The layering of pax/ checked over #includes: every file of a layer may
# include pax headers of its own layer and of the layers below it only. The
# link check (pax_<layer>_linkcheck) sees calls into compiled code, not
# headers and templates; this sees those.
#
# A file's layer comes from build/pax_layers.txt, which pax/CMakeLists.txt
# writes from its pax_layer() table: a source file by the globs that take it,
# a header by its source file (x.h, x-inl.h: x.cc) or else by its folder.
# Test helpers (pax/testing/, pax/optim/testing/, the conformance suite's
# headers) and pax/pax.h (the header of every header) are no layer and are
# not checked.
# usage: scripts/check-includes.sh [BUILD_DIR]   (exit 1 listing every violation)
set -euo pipefail
cd "$(dirname "$0")/.."
table=${1:-build}/pax_layers.txt
[[ -f $table ]] || { echo "check-includes.sh: no $table; configure the build first (scripts/build.sh)" >&2; exit 2; }

names=() globs=() excludes=() below=()
while IFS='|' read -r name layer_globs exclude closure; do
  names+=("$name")
  globs+=("${layer_globs//;/ }")
  excludes+=("$exclude")
  below+=(" ${closure//;/ } ")
done <"$table"

# Sets `found` to the index of the layer whose globs take `rel` (a path
# under pax/), or -1. (Results go through a global: no subshell per call.)
layer_of_source() {
  local rel=$1 i g
  found=-1
  for i in "${!names[@]}"; do
    for g in ${globs[$i]}; do
      # A glob's * stays within its folder.
      if [[ ${rel%/*} == "${g%/*}" && $rel == $g ]]; then
        if [[ -n ${excludes[$i]} && "/$rel" =~ ${excludes[$i]} ]]; then continue; fi
        found=$i
        return
      fi
    done
  done
}

declare -A cache
# Sets `layer` to the layer index of `rel` (a source file or a header).
layer_of() {
  local rel=$1 base
  if [[ -z ${cache[$rel]+x} ]]; then
    base=${rel%-inl.h}
    base=${base%.h}
    base=${base%.cuh}
    found=-1
    [[ $rel == *.cc || $rel == *.cu ]] && layer_of_source "$rel"
    ((found < 0)) && layer_of_source "$base.cc"
    ((found < 0)) && layer_of_source "${rel%/*}/any.cc"
    cache[$rel]=$found
  fi
  layer=${cache[$rel]}
}

violations=0
while IFS= read -r file; do
  rel=${file#pax/}
  [[ $rel == testing/* || $rel == */testing/* || $rel == backend/conformance/* || $rel == pax.h ||
    $rel == *_test.cc ]] && continue
  layer_of "$rel"
  own=$layer
  if ((own < 0)); then
    echo "check-includes.sh: $file belongs to no layer of pax/CMakeLists.txt" >&2
    violations=$((violations + 1))
    continue
  fi
  while IFS= read -r inc; do
    layer_of "$inc"
    target=$layer
    ((target < 0 || target == own)) && continue
    if [[ ${below[$own]} != *" ${names[$target]} "* ]]; then
      echo "check-includes.sh: $file (layer ${names[$own]}) includes pax/$inc (layer ${names[$target]}), which ${names[$own]} does not build on"
      violations=$((violations + 1))
    fi
  done < <(sed -n 's|^[[:space:]]*#[[:space:]]*include[[:space:]]*"pax/\([^"]*\)".*|\1|p' "$file")
done < <(find pax \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) | sort)

if ((violations > 0)); then
  echo "check-includes.sh: $violations include(s) against the layers (pax/CMakeLists.txt lists what each layer builds on)" >&2
  exit 1
fi
echo "check-includes.sh: every pax/ include respects the layers"
