#!/usr/bin/env bash
# Installs paxcc's build dependencies from Debian packages. Idempotent: prints
# nothing and changes nothing when everything is present.
set -euo pipefail

packages=(
  build-essential cmake ccache pkg-config clang-format   # clang-format: scripts/format.sh --check
  libdnnl-dev opencl-headers ocl-icd-opencl-dev   # oneDNN (its CMake config needs OpenCL)
  libhwy-dev                                      # Highway: SIMD kernels, and the headers of generated fused loops
  libfmt-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev libzstd-dev   # zstd: Orbax checkpoints
  libsentencepiece-dev                            # tokenizers (pax/data)
  bible-kjv bible-kjv-text                        # KJV text: the `bible` command and its data
  dataset-fashion-mnist                           # /usr/share/datasets/fashion-mnist/*.gz
  libopenmpi-dev openmpi-bin                      # MPI: multi-process training (pax/dist)
  chromium                                        # headless: report.html's layout test (pax/train)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup.sh: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
