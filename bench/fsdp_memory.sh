#!/usr/bin/env bash
# Peak resident memory per process of a ~210M-parameter LM (f32 parameters and
# Adam state, Repeat with nothing_saveable remat) trained a few steps on one
# process and fully sharded over 4 (mesh [1, 4, 1]), from /usr/bin/time's
# maximum resident set size of every rank.
#   bench/fsdp_memory.sh [build/tools/paxcc/paxcc] [steps]
# AS_LIMIT=<bytes> runs every process under prlimit --as (its address-space
# limit); SKIP_ONE=1 leaves out the single process.
set -euo pipefail
paxcc=${1:-build/tools/paxcc/paxcc}
steps=${2:-2}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
model=(--set model.lm_tpl.model_dims=1024 --set model.lm_tpl.vocab_size=8192
       --set model.lm_tpl.stacked_transformer_tpl.x_times=16
       --set model.lm_tpl.stacked_transformer_tpl.sub_tpl.hidden_dims=4096
       --set model.lm_tpl.stacked_transformer_tpl.sub_tpl.num_heads=8
       --set model.lm_tpl.stacked_transformer_tpl.sub_tpl.dim_per_head=128
       --set model.fprop_dtype=float32 --set model.lm_tpl.fprop_dtype=float32
       --set train_input.batch_size=1 --set train_input.seq_length=32 --set train_input.vocab_size=8192
       --set train.num_train_steps="$steps" --set train.eval_interval_steps=0 --set train.decode_interval_steps=0
       --set train.save_interval_steps=1000 --set train.dcn_mesh_shape=[])
run() {  # $1: processes, $2: mesh
  local n=$1 mesh=$2 launch=()
  [ "$n" -gt 1 ] && launch=(mpirun -np "$n" --oversubscribe)
  [ -n "${AS_LIMIT:-}" ] && launch+=(prlimit --as="$AS_LIMIT")
  OMP_NUM_THREADS=1 "${launch[@]}" /usr/bin/time -f "peak RSS %M KiB" "$paxcc" --exp=lm.C4Spmd22BAdam2xv4_128 \
    --job_log_dir="$dir/n$n" --peak_flops=1e11 "${model[@]}" --set "train.ici_mesh_shape=$mesh" 2>&1 |
    grep -E "peak RSS|parameters|split over|done at|Error|error" || true
}
echo "== 1 process"
[ "${SKIP_ONE:-0}" = 1 ] || run 1 "[1,1,1]"
echo "== 4 processes, fully sharded"
run 4 "[1,4,1]"
