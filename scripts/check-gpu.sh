#!/usr/bin/env bash
# The GPU check: one prepared run of the CUDA paths on a machine with an
# NVIDIA GPU, sized for a short loan of one (about 8 minutes from a cold
# start). Two steps:
#
#   scripts/check-gpu.sh pack        # here: build, then bundle what the run needs into .gpu/
#   scripts/check-gpu.sh run [OUT]   # on the GPU machine, in the repository root
#
# `pack` builds Release with the CUDA backend (scripts/build.sh) and puts into
# .gpu/ (ignored by git, well under 64 MiB): the stripped paxcc, libpax, the
# test and bench programs the run uses, the third-party libraries they load
# that a machine with only the CUDA toolkit and Python lacks (oneDNN,
# Highway, fmt, SentencePiece, Open MPI, ...) as one xz archive, and the peer
# scripts from ../shared/bench. The GPU machine needs the CUDA 13 runtime,
# NVRTC and cuBLASLt (the toolkit, or the nvidia-* Python wheels that torch
# brings), and torch and jax for the peers.
#
# `run` writes its whole log to OUT/check-gpu.log (OUT: $OUT, else
# .gpu/out) and a summary of one line per check to OUT/summary.txt:
#   1. probe: the GPU, driver, toolkit, libraries found, Python packages
#   2. paxcc --list_devices
#   3. the CUDA suite (allocator, GEMM plans, kernels on the device), and a
#      subset under compute-sanitizer
#   4. the conformance suite on every device present (cuda included)
#   5. lm.KjvTransformerTiny on cuda against its CPU losses, and its trace
#      of steps 12 and 13 (the steps timed on the stream by CUDA events)
#   6. bench/gpt_step on cuda beside torch (plain, and --sdpa --compile) and
#      jax on the same GPU, at GPT-2 small's shape
# Each step has its own time limit; a failed step is reported and the run
# goes on. Exits 0 when every step passed. CHECK_GPU_SMALL=1 runs the bench
# steps at a small shape (to try the script on a machine without a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
bundle=.gpu

pack() {
  set -e
  scripts/build.sh
  rm -rf "$bundle" && mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/bench"
  local progs=(build/tools/paxcc/paxcc build/tests/pax_cuda_test build/tests/pax_conformance_test
    build/bench/gpt_step)
  for p in "${progs[@]}"; do cp "$p" "$bundle/bin/"; done
  cp -L build/pax/libpax.so.0 "$bundle/lib/"
  strip --strip-unneeded "$bundle"/bin/* "$bundle"/lib/libpax.so.0
  # Libraries outside the C library and the CUDA toolkit (the GPU machine
  # brings those), compressed into one archive.
  local libs
  libs=$(for p in "${progs[@]}" build/pax/libpax.so.0; do ldd "$p"; done | awk '/=> \//{print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcudart|libnvrtc[^/]*|libcublas[^/]*)\.so' |
    grep -v "^$PWD/")
  mkdir -p "$bundle/deps"
  for l in $libs; do cp -L "$l" "$bundle/deps/"; done
  tar -C "$bundle" -cJf "$bundle/deps.tar.xz" deps && rm -rf "$bundle/deps"
  cp ../shared/bench/torch_gpt.py ../shared/bench/jax_gpt.py "$bundle/bench/" 2>/dev/null ||
    echo "check-gpu.sh: ../shared/bench not found; the peers will be skipped" >&2
  mkdir -p "$bundle/data" && cp -r data/kjv "$bundle/data/" 2>/dev/null || true
  du -sh "$bundle"
  echo "packed $bundle: carry it (device run: carry [\".gpu\"], command: bash scripts/check-gpu.sh run)"
}

run() {
  local out=${1:-${OUT:-$bundle/out}}
  mkdir -p "$out"
  local log=$out/check-gpu.log summary=$out/summary.txt failures=0
  : >"$log"
  : >"$summary"
  note() { echo "$*" | tee -a "$summary" >>"$log"; }
  step() {  # step NAME SECONDS COMMAND...: runs it with a limit, logs, summarises
    local name=$1 limit=$2
    shift 2
    echo "=== $name ($(date -u +%T), limit ${limit}s): $*" >>"$log"
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
    local rc=$?
    local took=$((SECONDS - t0))
    if [[ $rc -eq 0 ]]; then note "PASS $name (${took}s)"; else
      note "FAIL $name (exit $rc after ${took}s)"
      failures=$((failures + 1))
    fi
    return $rc
  }
  [[ -d $bundle/bin ]] || { echo "check-gpu.sh: no $bundle/bin; run 'scripts/check-gpu.sh pack' here first" >&2; exit 2; }
  mkdir -p /tmp/pax-gpu && tar -C /tmp/pax-gpu -xJf "$bundle/deps.tar.xz"
  # The CUDA libraries: the toolkit's, then the ones the Python wheels ship.
  local cuda_dirs="/usr/local/cuda/lib64:/usr/local/cuda/lib"
  local wheels
  wheels=$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for d in site.getsitepackages() for p in glob.glob(d+"/nvidia/*/lib/lib*.so*")})))' 2>/dev/null)
  # Only paxcc's programs see the bundled libraries (the peers keep their own).
  local libpath="$PWD/$bundle/lib:/tmp/pax-gpu/deps:$cuda_dirs:${wheels}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PAX_DATA_DIR="$PWD/$bundle/data" PAX_CACHE_DIR=/tmp/pax-gpu/cache
  mkdir -p /tmp/pax-gpu/bin
  for p in "$bundle"/bin/*; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "$libpath" "$PWD/$p" >"/tmp/pax-gpu/bin/${p##*/}"
    chmod +x "/tmp/pax-gpu/bin/${p##*/}"
  done
  local bin=/tmp/pax-gpu/bin

  step probe 60 bash -c 'nvidia-smi; nvcc --version | tail -2; ls /usr/local/cuda/lib64 2>/dev/null | grep -E "nvrtc|cublasLt|cudnn|nccl|cudart" | head -20;
    for p in '"$bundle"'/bin/*; do echo "$p:"; LD_LIBRARY_PATH='"$libpath"' ldd "$p" | grep "not found"; done;
    python3 -c "import torch, jax; print(\"torch\", torch.__version__, torch.cuda.get_device_name(0)); print(\"jax\", jax.__version__, jax.devices())"'
  step list_devices 60 "$bin/paxcc" --list_devices
  grep -q '^cuda:0' "$log" || note "NOTE no cuda:0 in --list_devices: the CUDA checks below will skip"
  step cuda_suite 240 "$bin/pax_cuda_test" --gtest_brief=1
  if command -v compute-sanitizer >/dev/null; then
    step sanitizer 180 compute-sanitizer --error-exitcode=1 --tool memcheck "$bin/pax_cuda_test" --gtest_brief=1 \
      --gtest_filter='CudaBackend*:CudaMemoryProvider*:CublasLt*:CudaElementwise*:CudaLayout*:CudaIndexing*:CudaReduce*:ConvPlan.Cudnn*'
  else
    note "SKIP sanitizer (compute-sanitizer not on PATH)"
  fi
  step conformance 300 env PAX_COMPILE=sync "$bin/pax_conformance_test" --gtest_brief=1
  local kjv=(--exp=lm.KjvTransformerTiny --set train.num_train_steps=20 --set train.save_interval_steps=10)
  rm -rf /tmp/pax-gpu/kjv_cpu /tmp/pax-gpu/kjv_cuda
  step kjv_cpu 180 "$bin/paxcc" "${kjv[@]}" --job_log_dir=/tmp/pax-gpu/kjv_cpu
  step kjv_cuda 180 "$bin/paxcc" "${kjv[@]}" --job_log_dir=/tmp/pax-gpu/kjv_cuda --platform=cuda --profile_steps=12:13
  # Its trace: the steps timed on the stream by CUDA events, on a track "cuda:0 stream"
  # that must hold the products.
  local trace
  trace=$(find /tmp/pax-gpu/kjv_cuda -name '*.trace.json.gz' 2>/dev/null | head -1)
  if [[ -n $trace ]]; then
    cp "$trace" "$out/kjv_cuda.trace.json.gz"
    if python3 - "$trace" >>"$summary" 2>&1 <<'EOF'; then note "PASS trace_stream"; else
import collections, gzip, json, sys
doc = json.load(gzip.open(sys.argv[1]))
names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name"}
on_stream = [e for e in doc["traceEvents"] if e.get("ph") == "X" and names.get(e["tid"]) == "cuda:0 stream"]
busy = collections.Counter()
for e in on_stream:
    busy[e["cat"]] += e["dur"]
print(f"kjv_cuda trace: {len(on_stream)} spans on the stream, us by category {dict(busy.most_common())}")
sys.exit(0 if busy["gemm"] > 0 else 1)
EOF
      note "FAIL trace_stream (no product timed on the track cuda:0 stream; see the summary)"
      failures=$((failures + 1))
    fi
  else
    note "FAIL trace_stream (no trace under /tmp/pax-gpu/kjv_cuda)"
    failures=$((failures + 1))
  fi
  if [[ -s /tmp/pax-gpu/kjv_cuda/metrics.jsonl ]]; then
    python3 - /tmp/pax-gpu/kjv_cpu/metrics.jsonl /tmp/pax-gpu/kjv_cuda/metrics.jsonl >>"$summary" 2>&1 <<'EOF'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r and "step" in r}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max((abs(a[s] - b[s]) / max(abs(a[s]), 1e-6) for s in a if s in b), default=float("nan"))
print(f"kjv losses: cpu {a.get(max(a, default=0))} cuda {b.get(max(b, default=0))}, worst relative difference {worst:.2e}")
EOF
  fi
  local shape=(--layers 12 --d 768 --heads 12 --seq 1024 --batch 8 --vocab 50304 --dtype bf16)
  # CHECK_GPU_SMALL=1: a small shape, to try the script itself on any machine.
  [[ ${CHECK_GPU_SMALL:-0} == 1 ]] && shape=(--layers 1 --d 64 --heads 2 --seq 32 --batch 2 --vocab 128 --steps 2)
  step gpt_step_cuda 240 "$bin/gpt_step" --platform cuda "${shape[@]}"
  if [[ -f $bundle/bench/torch_gpt.py ]]; then
    step torch_gpt 180 python3 "$bundle/bench/torch_gpt.py" --device cuda "${shape[@]}"
    step torch_gpt_sdpa_compile 240 python3 "$bundle/bench/torch_gpt.py" --device cuda --sdpa --compile "${shape[@]}"
    step jax_gpt 240 python3 "$bundle/bench/jax_gpt.py" --device cuda "${shape[@]}"
  fi
  grep -hE "ms/step|MFU|TFLOP" "$log" | tail -20 >>"$summary"
  echo "check-gpu.sh: $failures step(s) failed; log $log, summary $summary"
  cat "$summary"
  [[ $failures -eq 0 ]]
}

case "$mode" in
  pack) pack ;;
  run) run "${2:-}" ;;
  *)
    echo "usage: scripts/check-gpu.sh pack | run [OUT]" >&2
    exit 2
    ;;
esac
