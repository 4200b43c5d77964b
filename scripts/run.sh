#!/usr/bin/env bash
# The main job: install dependencies, build, then train lm.KjvTransformer — a
# small decoder LM on the King James Bible — into runs/kjv (about 4 minutes
# on 2 cores). Run it again to continue from the last checkpoint; extra
# arguments go to paxcc (e.g. --set train.num_train_steps=2000).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
exec ./build/tools/paxcc/paxcc --exp=lm.KjvTransformer --job_log_dir=runs/kjv "$@"
