#!/usr/bin/env bash
# How much of the communication of 2-process training the steps wait for,
# with collectives overlapped (the default) and with PAX_OVERLAP_COLLECTIVES=0
# (each one waited for at its step, as before overlap existed), in
# alternating rounds, from PAX_PROFILE's summary line on every rank
# ("communication: N jobs, X s communicating, Y s waited for (Z%)") and the
# run's steps per second. Two models:
#   dp:   lm.KjvTransformer, data parallel (gradients psum'd in 4 MiB buckets);
#   fsdp: a 16.8M-parameter LM of 4 repeated layers (d = 512), fully sharded
#         over 2 processes (mesh [1, 2, 1]): gathers fetched one layer ahead,
#         reduce-scatters finished one layer behind (prims/scan_pipeline.h).
#   bench/overlap.sh [build/tools/paxcc/paxcc] [steps] [rounds]
set -euo pipefail
paxcc=${1:-build/tools/paxcc/paxcc}
steps=${2:-40}
rounds=${3:-2}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--set train.num_train_steps="$steps" --set train.eval_interval_steps=0 --set train.decode_interval_steps=0
        --set train.save_interval_steps=100000 --set train.summary_interval_steps=100000)
dp=(--exp=lm.KjvTransformer)
fsdp=(--exp=lm.C4Spmd22BAdam2xv4_128 --peak_flops=1e11 --set model.lm_tpl.model_dims=512
      --set model.lm_tpl.vocab_size=8192 --set model.lm_tpl.stacked_transformer_tpl.x_times=4
      --set model.lm_tpl.stacked_transformer_tpl.sub_tpl.hidden_dims=2048
      --set model.lm_tpl.stacked_transformer_tpl.sub_tpl.num_heads=8
      --set model.lm_tpl.stacked_transformer_tpl.sub_tpl.dim_per_head=64
      --set model.fprop_dtype=float32 --set model.lm_tpl.fprop_dtype=float32
      --set train_input.batch_size=4 --set train_input.seq_length=64 --set train_input.vocab_size=8192
      --set train.dcn_mesh_shape=[] --set train.ici_mesh_shape=[1,2,1])
for model in dp fsdp; do
  declare -n args=$model
  for ((round = 1; round <= rounds; ++round)); do
    for overlap in 1 0; do
      echo "== $model, round $round, PAX_OVERLAP_COLLECTIVES=$overlap"
      mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS=1 -x PAX_PROFILE=1 -x PAX_OVERLAP_COLLECTIVES=$overlap \
        "$paxcc" "${args[@]}" --job_log_dir="$dir/run" "${common[@]}" 2>&1 | tr '\r' '\n' |
        grep -E "communication:|train step $steps/|Error|error" | sed 's/^.*train step/train step/' || true
      rm -rf "$dir/run"
    done
  done
done
