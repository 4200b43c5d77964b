#!/usr/bin/env bash
# Cross-builds paxcc for aarch64 (arm64) Linux and runs the core, prims and nn
# test suites under qemu-user. Not part of CI (too slow): run it by hand.
#
#   scripts/check-aarch64.sh                     # everything; extra args go to every test binary
#   scripts/check-aarch64.sh --gtest_filter='Jit*'
#
# What it does, each step skipped when already done:
#   1. installs the host tools with apt-get: g++-aarch64-linux-gnu,
#      qemu-user-static, mmdebstrap, cmake, ccache, pkg-config;
#   2. builds an arm64 sysroot in build-aarch64/sysroot: the arm64 -dev packages
#      paxcc needs (oneDNN, Highway, OpenMPI, SentencePiece, fmt,
#      nlohmann-json, CLI11, GoogleTest, zlib, OpenCL headers), extracted by
#      mmdebstrap. They are not installed with `dpkg --add-architecture arm64`
#      because some of them (libsentencepiece0, libmunge2, libevent-dev under
#      OpenMPI) are not Multi-Arch: same: installing the arm64 ones would
#      remove the amd64 ones that the x86 build needs;
#   3. configures build-aarch64/ with cmake/toolchain-aarch64.cmake and builds
#      pax_core_test, pax_prims_test and pax_nn_test (-j2, ccache if present);
#   4. runs each binary with qemu-aarch64-static, the sysroot as QEMU_LD_PREFIX,
#      generated fused-loop code built by the cross compiler (PAX_CXX) into
#      build-aarch64/kernels, and prints a summary. Exits non-zero on failure.
#
# Environment (all optional):
#   QEMU_CPU               the emulated CPU (default neoverse-n1; `qemu-aarch64-static -cpu help`)
#   PAX_CODEGEN_MARCH      -march for generated code (default: what QEMU_CPU runs,
#                          armv8-a+crypto for cortex-a3x/a5x/a72, else armv8.2-a+crypto)
#   PAX_AARCH64_CXXFLAGS   CMAKE_CXX_FLAGS of the cross build (default none)
#   PAX_COMPILE            async|sync|off (default sync: generated code is built before it runs)
#   PAX_AARCH64_SUITES     the suites to run (default "core prims nn"; any of tests/CMakeLists.txt)
#   PAX_AARCH64_JOBS       build jobs (default 2)
#   PAX_AARCH64_TIMEOUT    seconds per test binary (default 3600)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
script_start=$(date +%s)

build=$root/build-aarch64
sysroot=$build/sysroot
triple=aarch64-linux-gnu
jobs=${PAX_AARCH64_JOBS:-2}
suites=(${PAX_AARCH64_SUITES:-core prims nn})
timeout_s=${PAX_AARCH64_TIMEOUT:-3600}
log() { echo "check-aarch64: $*"; }
die() { echo "check-aarch64: $*" >&2; exit 1; }

sudo_cmd=()
as_root() {
  if [[ $(id -u) -ne 0 && ${#sudo_cmd[@]} -eq 0 ]]; then
    command -v sudo >/dev/null || die "need root (or sudo) for: $*"
    sudo_cmd=(sudo)
  fi
  "${sudo_cmd[@]}" "$@"
}

# --- 1. host tools ----------------------------------------------------------
host_packages=(g++-aarch64-linux-gnu qemu-user-static mmdebstrap cmake ccache pkg-config)
missing=()
for p in "${host_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
qemu=$(command -v qemu-aarch64-static) || die "qemu-aarch64-static not found"
cxx=$(command -v $triple-g++) || die "$triple-g++ not found"

# --- 2. the arm64 sysroot ---------------------------------------------------
# The arm64 twins of scripts/setup.sh's -dev packages (no benchmark: bench/ is
# not built), plus libc6-dev and libgomp1 for the compiler and the runtime.
sysroot_packages=(libc6-dev libgomp1 libstdc++6
  libdnnl-dev opencl-headers ocl-icd-opencl-dev libhwy-dev
  libfmt-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev zlib1g-dev libzstd-dev libsentencepiece-dev libopenmpi-dev)
stamp=$sysroot/.paxcc-packages
want_stamp="${sysroot_packages[*]}"
if [[ ! -f $stamp || "$(cat "$stamp")" != "$want_stamp" ]]; then
  # The Debian sources this machine uses (the same suite and mirror as its
  # cross compiler); mmdebstrap's defaults when there are none.
  . /etc/os-release
  suite=${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}
  mirrors=()
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] && grep -Eq '^[^#]*(deb |URIs:).*/debian' "$f" && mirrors+=("$f")
  done
  log "building the arm64 sysroot in ${sysroot#$root/} (mmdebstrap, $suite)"
  as_root rm -rf "$sysroot"
  mkdir -p "$build"
  include=$(IFS=,; echo "${sysroot_packages[*]}")
  if ! as_root mmdebstrap --quiet --variant=extract --architectures=arm64 --include="$include" \
         "$suite" "$sysroot" "${mirrors[@]}" >"$build/mmdebstrap.log" 2>&1; then
    cat "$build/mmdebstrap.log" >&2
    die "mmdebstrap failed"
  fi
  # Absolute symlinks (libz.so -> /lib/aarch64-linux-gnu/libz.so.1.2.13) would
  # point into the build machine: make them relative, inside the sysroot.
  while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    as_root ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$sysroot$target")" "$link"
  done < <(find "$sysroot/usr" -type l -lname '/*' -print0)
  echo "$want_stamp" | as_root tee "$stamp" >/dev/null
fi

# --- 3. configure and build ---------------------------------------------------
# pax/CMakeLists.txt leaves Highway's SVE targets out (the *_hwy.cc kernels
# keep vectors in arrays and struct members, which SVE's sizeless vector types
# do not allow): the kernels dispatch to NEON on every aarch64 CPU, as does the
# generated code.
hwy_flags=${PAX_AARCH64_CXXFLAGS-}
cmake_args=(-S "$root" -B "$build"
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchain-aarch64.cmake"
  -DPAX_AARCH64_SYSROOT="$sysroot"
  -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_CXX_FLAGS="$hwy_flags"
  -DPAX_BUILD_BENCH=OFF -DPAX_BUILD_EXAMPLES=OFF -DPAX_BUILD_FUZZERS=OFF
  # The test lists come from running the binaries: under qemu, at ctest time.
  -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST)
if [[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null; then
  cmake_args+=(-G Ninja)
fi
build_start=$(date +%s)
log "configuring ${build#$root/}"
cmake "${cmake_args[@]}" >"$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; die "cmake configure failed"; }
targets=()
for s in "${suites[@]}"; do targets+=("pax_${s}_test"); done
log "building ${targets[*]} (-j$jobs)"
if ! cmake --build "$build" -j"$jobs" --target "${targets[@]}" >"$build/build.log" 2>&1; then
  grep -E "error|FAILED" "$build/build.log" | head -40 >&2
  die "the cross build failed (full log: ${build#$root/}/build.log)"
fi
build_s=$(($(date +%s) - build_start))

# --- 4. the tests under qemu --------------------------------------------------
# Generated code: the test processes are aarch64 but the compiler they start
# runs on this machine, so it is the cross compiler, pointed at the sysroot.
mkdir -p "$build/bin" "$build/kernels" "$build/results"
wrapper=$build/bin/pax-aarch64-g++
printf '#!/bin/sh\n# paxcc generated code, cross-built for the aarch64 tests (scripts/check-aarch64.sh)\nexec %q --sysroot=%q "$@"\n' \
  "$cxx" "$sysroot" >"$wrapper.tmp"
chmod +x "$wrapper.tmp"
mv "$wrapper.tmp" "$wrapper"
export QEMU_LD_PREFIX=$sysroot
export QEMU_CPU=${QEMU_CPU:-neoverse-n1}
export PAX_CXX=$wrapper
case $QEMU_CPU in
  cortex-a3*|cortex-a5*|cortex-a72*) default_march=armv8-a+crypto ;;
  *) default_march=armv8.2-a+crypto ;;
esac
export PAX_CODEGEN_MARCH=${PAX_CODEGEN_MARCH:-$default_march}
export PAX_CACHE_DIR=$build/kernels
export PAX_COMPILE=${PAX_COMPILE:-sync}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# Tests that start their own binary again ("threadsafe" death tests, the
# checkpoint crash tests' children) cannot run under qemu-user without
# binfmt_misc (the aarch64 binary is not executable here): they are left out
# unless GTEST_FILTER (or a --gtest_filter argument) says otherwise.
export GTEST_FILTER=${GTEST_FILTER:--MemoryLimit.ABadAllocOnAWorkerUnderRlimitAsNamesSizePurposeAndLimit:CheckpointCrash.*:DevicesDeathTest.*}
log "running under $qemu (QEMU_CPU=$QEMU_CPU, PAX_CODEGEN_MARCH=$PAX_CODEGEN_MARCH, PAX_COMPILE=$PAX_COMPILE)"

count() {  # the N of gtest's "[  TAG  ] N test" summary line, 0 if absent
  local n
  n=$(grep -aE "^\[ +$1 +\] [0-9]+ tests?" "$2" | tail -n 1 | sed -E 's/^\[[^]]*\] ([0-9]+).*/\1/')
  echo "${n:-0}"
}
libs_before=$(find "$PAX_CACHE_DIR" -maxdepth 1 -name '*.so' | wc -l)
declare -A passed failed skipped status secs
failures=()
for s in "${suites[@]}"; do
  bin=$build/tests/pax_${s}_test
  out=$build/results/$s.log
  t0=$(date +%s)
  set +e
  timeout --kill-after=30 "$timeout_s" "$qemu" "$bin" --gtest_color=no "$@" >"$out" 2>&1
  rc=$?
  set -e
  secs[$s]=$(($(date +%s) - t0))
  passed[$s]=$(count PASSED "$out")
  failed[$s]=$(count FAILED "$out")
  skipped[$s]=$(count SKIPPED "$out")
  if ((rc == 0)); then
    status[$s]=ok
  elif ((rc == 124 || rc == 137)); then
    status[$s]="TIMEOUT after ${timeout_s}s"
  elif ! grep -aqE '^\[=+\] [0-9]+ tests? from .* ran' "$out"; then
    status[$s]="CRASHED (exit $rc)"
  else
    status[$s]=FAILED
  fi
  [[ ${status[$s]} == ok ]] || failures+=("$s")
  log "pax_${s}_test: ${status[$s]}, ${passed[$s]} passed, ${failed[$s]} failed, ${skipped[$s]} skipped (${secs[$s]}s; log ${out#$root/})"
done

# --- summary ------------------------------------------------------------------
total_s=$(($(date +%s) - script_start))
libs=$(find "$PAX_CACHE_DIR" -maxdepth 1 -name '*.so' 2>/dev/null | wc -l)
echo
echo "=== aarch64 check: qemu $QEMU_CPU, $($cxx -dumpfullversion 2>/dev/null | sed 's/^/g++ /') cross ==="
printf '%-16s %-22s %7s %7s %8s %8s\n' binary status passed failed skipped seconds
tp=0 tf=0 ts=0
for s in "${suites[@]}"; do
  printf '%-16s %-22s %7s %7s %8s %8s\n' "pax_${s}_test" "${status[$s]}" "${passed[$s]}" "${failed[$s]}" "${skipped[$s]}" "${secs[$s]}"
  tp=$((tp + passed[$s])) tf=$((tf + failed[$s])) ts=$((ts + skipped[$s]))
done
for s in "${failures[@]}"; do
  out=$build/results/$s.log
  names=$(grep -aE '^\[ +FAILED +\] [A-Za-z_0-9/.]+(, | \(|$)' "$out" | sed -E 's/^\[ +FAILED +\] //; s/[ ,].*//' | sort -u)
  if [[ -n $names ]]; then
    echo "pax_${s}_test failures (the first lines of each; the whole output in ${out#$root/}):"
    while IFS= read -r name; do
      echo "  $name"
      awk -v run="[ RUN      ] $name" -v end="[  FAILED  ] $name" '
        index($0, run) == 1 { on = 1; n = 0; next }
        on && index($0, end) == 1 { exit }
        on && n < 4 { print "      " $0; n++ }' "$out"
    done <<<"$names"
  else
    echo "pax_${s}_test: last lines of ${out#$root/}:"
    tail -n 15 "$out" | sed 's/^/  /'
  fi
done
notices=$(cat "$build"/results/*.log 2>/dev/null | grep -a '^paxcc: ' | sort | uniq -c | sed 's/^ */  /' || true)
echo "generated code: $((libs - libs_before)) libraries built by this run, $libs in ${PAX_CACHE_DIR#$root/}"
if [[ -n $notices ]]; then
  echo "library notices (a Highway target mismatch or a failed build means fused loops ran interpreted):"
  echo "$notices"
else
  echo "library notices: none (generated code matched the kernels' Highway target)"
fi
echo "wall time: ${total_s}s (build ${build_s}s)"
echo "aarch64: $tp passed, $tf failed, $ts skipped"
if ((${#failures[@]})); then
  echo "check-aarch64: FAILED: ${failures[*]}" >&2
  exit 1
fi
echo "check-aarch64: all suites passed"
