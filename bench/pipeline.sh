#!/usr/bin/env bash
# lm.KjvTransformer's model (4 blocks, d = 256, 4 heads, hidden 1024) as a
# pipelined Repeat, trained for `steps` steps at global batch 16 two ways,
# in alternating rounds:
#   one:   1 process, 2 OpenMP threads (the Repeat runs as a plain stack);
#   stage: 2 processes, mesh [2, 1, 1, 1] (2 blocks per stage, the batch of
#          16 as `microbatches` microbatches), 1 thread each.
# Prints each run's total_loss every 10 steps (metrics.jsonl), its last
# step's rate and the train state per process.
#   bench/pipeline.sh [build/tools/paxcc/paxcc] [steps] [rounds] [microbatches]
set -euo pipefail
paxcc=${1:-build/tools/paxcc/paxcc}
steps=${2:-50}
rounds=${3:-2}
microbatches=${4:-4}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
stack=model.lm_tpl.stacked_transformer_tpl
common=(--exp=lm.KjvTransformer --set train.num_train_steps="$steps" --set train.eval_interval_steps=0
        --set train.decode_interval_steps=0 --set train.save_interval_steps=100000
        --set train.summary_interval_steps=10 --set train_input.batch_size=16
        --set $stack=Repeat --set $stack.x_times=4 --set $stack.num_microbatches="$microbatches"
        --set $stack.checkpoint_policy=none --set $stack.sub_tpl=StackedTransformer
        --set $stack.sub_tpl.num_layers=1 --set $stack.sub_tpl.num_heads=4 --set $stack.sub_tpl.hidden_dims=1024
        --set $stack.sub_tpl.mask_self_attention=true)
source "$(dirname "$0")/kjv_run_report.sh"
for ((round = 1; round <= rounds; ++round)); do
  echo "== one, round $round"
  OMP_NUM_THREADS=2 "$paxcc" "${common[@]}" --job_log_dir="$dir/run" > "$dir/log" 2>&1
  report "$dir" "$steps"
  echo "== stage, round $round"
  mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS=1 "$paxcc" "${common[@]}" --job_log_dir="$dir/run" \
    --set train.ici_mesh_shape='[2,1,1,1]' > "$dir/log" 2>&1
  report "$dir" "$steps"
done
