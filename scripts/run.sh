#!/usr/bin/env bash
# The main job: install dependencies, build, then run the demo program.
# (Until the experiment runner exists, the demo is examples/quickstart.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
./build/tools/paxcc/paxcc --version
./build/examples/quickstart "$@"
