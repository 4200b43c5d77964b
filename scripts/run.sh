#!/usr/bin/env bash
# The main job: install dependencies, build, then train and sample a small
# Transformer LM (examples/tiny_lm) until the experiment runner exists.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
./build/tools/paxcc/paxcc --version
./build/examples/tiny_lm "$@"
