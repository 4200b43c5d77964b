#!/usr/bin/env bash
# lm.KjvTransformer (4 layers, d = 256, 4 heads, hidden 1024) trained for
# `steps` steps at global batch 16 three ways, in alternating rounds:
#   one:  1 process, 2 OpenMP threads, batch 16;
#   fsdp: 2 processes, mesh [1, 2, 1] (fully sharded), batch 8 each, 1 thread each;
#   tp:   2 processes, mesh [1, 1, 2] (tensor parallel: 2 heads and half the
#         hidden width each, the same batch of 16), 1 thread each.
# Prints each run's total_loss every 10 steps (metrics.jsonl), its last
# step's rate and the train state per process.
#   bench/tensor_parallel.sh [build/tools/paxcc/paxcc] [steps] [rounds]
set -euo pipefail
paxcc=${1:-build/tools/paxcc/paxcc}
steps=${2:-50}
rounds=${3:-2}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--exp=lm.KjvTransformer --set train.num_train_steps="$steps" --set train.eval_interval_steps=0
        --set train.decode_interval_steps=0 --set train.save_interval_steps=100000
        --set train.summary_interval_steps=10)
source "$(dirname "$0")/kjv_run_report.sh"
for ((round = 1; round <= rounds; ++round)); do
  echo "== one, round $round"
  OMP_NUM_THREADS=2 "$paxcc" "${common[@]}" --job_log_dir="$dir/run" --set train_input.batch_size=16 > "$dir/log" 2>&1
  report "$dir" "$steps"
  for mesh in fsdp tp; do
    echo "== $mesh, round $round"
    if [[ $mesh == fsdp ]]; then shape='[1,2,1]' batch=8; else shape='[1,1,2]' batch=16; fi
    mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS=1 "$paxcc" "${common[@]}" --job_log_dir="$dir/run" \
      --set train.ici_mesh_shape="$shape" --set train_input.batch_size=$batch > "$dir/log" 2>&1
    report "$dir" "$steps"
  done
done
