#!/usr/bin/env bash
# The paxcc command as a user meets it: --help, --list, inspect, a short
# training run that resumes, eval / decode, the tokenizer subcommand, and a
# one-line error with a non-zero exit for each kind of bad input.
# usage: paxcc_cli_test.sh PAXCC
set -uo pipefail
paxcc=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PAX_PEAK_FLOPS=1e11
failures=0

# expect STATUS PATTERN -- ARGS...: paxcc exits with STATUS and its output matches PATTERN.
expect() {
  local status=$1 pattern=$2
  shift 3
  local out rc
  out=$("$paxcc" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $status ]] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: paxcc $* -> exit $rc (want $status), output:"
    echo "$out" | head -20
    failures=$((failures + 1))
  elif [[ $status -ne 0 ]] && [[ $(wc -l <<<"$out") -ne 1 ]]; then
    echo "FAIL: paxcc $* -> the error is not one line:"
    echo "$out"
    failures=$((failures + 1))
  fi
}

expect 0 "--exp" -- --help
expect 0 "lm.KjvTransformer " -- --list
expect 0 "lm.C4Spmd1BAdam4Replicas = tasks.lm.params.c4.C4Spmd1BAdam4Replicas +paxml" -- --list
expect 0 "parameters: 174780470353" -- --exp=lm.C4SpmdGpt3AdamOrgHP --mode=inspect
expect 0 "training FLOPs per step" -- --exp=lm.C4Spmd1BAdam4Replicas --mode=inspect
# The seed's launch flags for JAX, XLA and TPUs are accepted and named once.
expect 0 "warning: ignoring launch flags that do not apply to paxcc .*: --pmap_use_tensorstore, --jax_enable_x64, --noxla_foo, --tpu_chips$" \
  -- --exp=tasks.lm.params.lm_cloud.LmCloudTransformerAdamLimitSteps --mode=inspect --pmap_use_tensorstore=True \
  --jax_enable_x64 --noxla_foo --tpu_chips=4
expect 0 "training FLOPs per step" -- --exp=lm.C4Spmd1BAdam4Replicas --mode=inspect --pmap_use_tensorstore=True
# The seed's gs:// paths: refused naming the setting, and nothing is created.
pushd "$work" >/dev/null || exit 1
expect 1 "--job_log_dir 'gs://bucket/run' is a URL; paxcc reads and writes local paths only" \
  -- --exp=lm.KjvTransformerTiny --job_log_dir=gs://bucket/run
popd >/dev/null || exit 1
[[ -e "$work/gs:" ]] && { echo "FAIL: a gs:// job directory created a local 'gs:'"; failures=$((failures + 1)); }
expect 1 "the data file 'gs://b/c4-\\*.json.gz' is a URL" -- --exp=lm.KjvTransformerTiny "--job_log_dir=$work/gs_files" \
  --set 'train_input.files=["gs://b/c4-*.json.gz"]' --set train_input.source=files
expect 1 "--job_log_dir 'GS://bucket/run' is a URL" -- --exp=lm.KjvTransformerTiny --job_log_dir=GS://bucket/run
expect 2 "The following argument was not expected: --pmap_use_tensorstre" -- --exp=lm.C4Spmd1BAdam4Replicas \
  --mode=inspect --pmap_use_tensorstre=True
# paxml's dotted names as the seed passes them; the mesh and its memory.
expect 0 "mesh: ICI \[1, 4, 1\] x DCN \[\] = \[1, 4, 1\] \(replica, data, mdl\): 4 processes" -- \
  --exp=tasks.lm.params.c4.C4Spmd1BAdam4Replicas --mode=inspect
expect 0 "train state per process: " -- --exp=tasks.lm.params.lm_cloud.LmCloudSpmd2BLimitSteps --mode=inspect
expect 1 "did you mean 'tasks.lm.params.c4.C4Spmd1BAdam4Replicas'" -- --exp=tasks.lm.params.c4.C4Spmd1BAdam4Replica \
  --mode=inspect
# The seed's mesh asks for 4 processes: refused in one, with the command to use.
expect 1 "needs 4 processes, but this run has 1: run it as mpirun -np 4" -- --exp=lm.C4Spmd1BAdam4Replicas \
  "--job_log_dir=$work/c4mesh"

# A seed config scaled down with --set (the mesh too) trains.
S=model.lm_tpl.stacked_transformer_tpl
expect 0 "done at step 4" -- --exp=lm.C4Spmd1BAdam4Replicas "--job_log_dir=$work/c4" --set model.lm_tpl.model_dims=64 \
  --set train.ici_mesh_shape=[1,1,1] --set $S.x_times=1 --set $S.sub_tpl.num_heads=2 --set $S.sub_tpl.dim_per_head=32 \
  --set $S.sub_tpl.hidden_dims=128 \
  --set model.lm_tpl.vocab_size=256 --set train_input.vocab_size=256 --set train_input.seq_length=16 \
  --set train_input.batch_size=2 --set "eval_inputs[0].vocab_size=256" --set "eval_inputs[0].seq_length=16" \
  --set "eval_inputs[0].batch_size=2" --set train.num_train_steps=4 --set train.eval_interval_steps=2

# The same config on a C4 corpus streamed from TFRecord shards (a shuffle
# buffer of 2 rows): a run stopped at step 5 and resumed reads the stream a
# straight run reads, so their train metrics are the same to the bit.
c4stream=(--exp=lm.C4Spmd1BAdam4Replicas --set model.lm_tpl.model_dims=64 --set train.ici_mesh_shape=[1,1,1]
          --set $S.x_times=1 --set $S.sub_tpl.num_heads=2 --set $S.sub_tpl.dim_per_head=32 --set $S.sub_tpl.hidden_dims=128
          --set model.lm_tpl.vocab_size=259 --set train_input=StreamingTextLmInput
          --set "train_input.files=[$(dirname "$0")/../pax/data/testdata/c4-mini.tfrecord-*-of-00002]"
          --set train_input.seq_length=16 --set train_input.batch_size=2 --set train_input.shuffle=true
          --set train_input.shuffle_buffer_size=2 --set train.eval_interval_steps=0 --set train.save_interval_steps=3
          --set train.summary_interval_steps=1)
expect 0 "done at step 9" -- "${c4stream[@]}" "--job_log_dir=$work/c4s_straight" --set train.num_train_steps=9
expect 0 "done at step 5" -- "${c4stream[@]}" "--job_log_dir=$work/c4s_resumed" --set train.num_train_steps=5
expect 0 "resumed .* at step 5" -- "${c4stream[@]}" "--job_log_dir=$work/c4s_resumed" --set train.num_train_steps=9
train_metrics() { grep '"split":"train"' "$1/metrics.jsonl" | sed 's/.*\("step":[0-9]*\).*\("metrics":{[^}]*}\).*/\1 \2/'; }
if [[ $(train_metrics "$work/c4s_straight" | wc -l) -ne 9 ]] ||
   ! diff <(train_metrics "$work/c4s_straight") <(train_metrics "$work/c4s_resumed") >/dev/null; then
  echo "FAIL: the resumed streaming run's metrics differ from the straight run's:"
  diff <(train_metrics "$work/c4s_straight") <(train_metrics "$work/c4s_resumed") | head -10
  failures=$((failures + 1))
fi

job=$work/tiny
tiny=(--exp=lm.KjvTransformerTiny "--job_log_dir=$job" --set train.num_train_steps=8 --set train.save_interval_steps=4
      --set train.eval_interval_steps=4 --set train.decode_interval_steps=8 --set train.summary_interval_steps=2)
expect 0 "done at step 8" -- "${tiny[@]}"
[[ -f $job/config.json && -f $job/model_summary.txt && -f $job/report.html ]] || { echo "FAIL: job files missing"; failures=$((failures + 1)); }
expect 0 "resumed .* at step 8" -- "${tiny[@]}" --set train.num_train_steps=12
expect 0 "eval validation @ step 12" -- "${tiny[@]}" --mode=eval
expect 0 "eval validation @ step 4" -- "${tiny[@]}" --mode=eval --restore_step=4
expect 0 "wrote $job/export/params_12.msgpack \\(step 12" -- export "--job_log_dir=$job"
[[ -s $job/export/params_12.msgpack ]] || { echo "FAIL: export wrote no params_12.msgpack"; failures=$((failures + 1)); }
expect 1 "export: no committed checkpoint in '$work/none/checkpoints'" -- export "--job_log_dir=$work/none"
# import: an Orbax checkpoint (OCDBT) as Flax msgpack; a run started from a
# checkpoint of another model is refused with the names that do not map.
fixtures=$(dirname "$0")/../pax/train/testdata
expect 0 "wrote $work/orbax.msgpack \\(8 arrays" -- import "--from=$fixtures/orbax_ocdbt" "--out=$work/orbax.msgpack"
expect 1 "import: no such file or directory '$work/none'" -- import "--from=$work/none" "--out=$work/x.msgpack"
expect 1 "init_from '.*pax_zarr' does not match the model's params; the model's params it lacks: lm/final_ln/bias.*names the model has not: lm/softmax/b, lm/softmax/w" -- \
  --exp=lm.KjvTransformerTiny "--job_log_dir=$work/init_from" --set "train.init_from=$fixtures/pax_zarr"
expect 0 "decode samples @ step 12" -- "${tiny[@]}" --mode=decode
expect 0 "done at step 12" -- --config "$job/config.json" "--job_log_dir=$job"

# Shared sub-configs: "@path" makes a field share a template; a field set
# through either path changes the one object (the training batch follows the
# eval path), and inspect lists every path that reaches it.
share=(--exp=lm.KjvTransformerTiny --mode=inspect --set "eval_inputs[0]=@train_input" --set "eval_inputs[0].batch_size=3"
       --set "eval_inputs[0].eval_loop_num_batches=2")
expect 0 "global batch 3 x 64 tokens" -- "${share[@]}"
expect 0 "train_input = TextLmInput  \[shared: train_input, eval_inputs\[0\]\]" -- "${share[@]}"

# A partial config: fields left {"$missing": true} are all named in one error
# before anything runs; --set fills them.
sed -e 's/"num_train_steps": [0-9]*/"num_train_steps": {"$missing": true}/' \
  -e 's/"model_dims": 64/"model_dims": {"$missing": true}/' "$job/config.json" >"$work/partial.json"
expect 1 "config is partial: 2 fields are missing: model.lm_tpl.model_dims \(an integer\), train.num_train_steps \(an" -- \
  --config "$work/partial.json" --mode=inspect
expect 0 "parameters: 116931 " -- --config "$work/partial.json" --mode=inspect --set model.lm_tpl.model_dims=64 \
  --set train.num_train_steps=2

# Your own text: the files are the one field to give (named when missing) and
# the eval input reads train_input's own config; overriding train_input alone
# of a KJV experiment is a warning.
expect 1 "1 field is missing: train_input.files" -- --exp=lm.TextTransformer --mode=inspect
for i in $(seq 1 300); do echo "the quiet river carries light over the hills $i"; done >"$work/mine.txt"
expect 0 "of = TextLmInput  \[shared: train_input, eval_inputs\[0\]\.of\]" -- --exp=lm.TextTransformer --mode=inspect \
  --set "train_input.files=[$work/mine.txt]"
expect 0 "eval validation @ step 2" -- --exp=lm.TextTransformer "--job_log_dir=$work/mine" "--data_dir=$work/data" \
  --set "train_input.files=[$work/mine.txt]" --set train_input.tokenizer=spm:128 --set model.lm_tpl.vocab_size=128 \
  --set model.lm_tpl.model_dims=32 --set $S.num_layers=1 --set train.num_train_steps=2 --set train.eval_interval_steps=2
expect 0 "^warning: eval_inputs\[0\] \('validation'\) reads the KJV, but train_input \('train'\) reads files" -- \
  --exp=lm.KjvTransformerTiny "--job_log_dir=$work/kjv_own" --set train_input.source=files \
  --set "train_input.files=[$work/mine.txt]" --set train.num_train_steps=2 --set train.eval_interval_steps=2

# Generated code: the first run builds its fused loops, a second process loads
# them from the cache and compiles nothing; with no compiler the loops run
# interpreted after one notice.
gen=(--exp=lm.KjvTransformerTiny --set train.num_train_steps=2 --set train.eval_interval_steps=2)
PAX_CACHE_DIR=$work/kernels PAX_COMPILE=sync expect 0 "generated code: [1-9][0-9]* sources? compiled" -- \
  "${gen[@]}" "--job_log_dir=$work/gen1"
PAX_CACHE_DIR=$work/kernels PAX_COMPILE=sync expect 0 "generated code: 0 sources compiled in 0.0 s, [1-9]" -- \
  "${gen[@]}" "--job_log_dir=$work/gen2"
out=$(PAX_CXX=/nonexistent/c++ PAX_CACHE_DIR=$work/kernels-none "$paxcc" "${gen[@]}" "--job_log_dir=$work/gen3" 2>&1)
if [[ $(grep -c "no C++ compiler answered" <<<"$out") -ne 1 ]] || ! grep -q "done at step 2" <<<"$out" ||
   grep -q "generated code:" <<<"$out"; then
  echo "FAIL: without a compiler: want one notice and a finished run, got:"
  echo "$out" | head -20
  failures=$((failures + 1))
fi

# SIGINT: the step in progress finishes, a checkpoint is saved, exit 0; the same command resumes.
sig=$work/sig
"$paxcc" --exp=lm.KjvTransformerTiny "--job_log_dir=$sig" --set train.num_train_steps=100000 \
  --set train.summary_interval_steps=50 >"$work/sig.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "train step" "$work/sig.log" && break; sleep 0.2; done
kill -INT $pid
wait $pid
rc=$?
stopped=$(grep -oE "interrupted: saved step [0-9]+" "$work/sig.log" | grep -oE "[0-9]+$")
if [[ $rc -ne 0 || -z $stopped || ! -f $sig/checkpoints/$(printf 'checkpoint_%08d' "$stopped")/commit_success.txt ]]; then
  echo "FAIL: SIGINT -> exit $rc, log:"; cat "$work/sig.log"; failures=$((failures + 1))
else
  expect 0 "resumed .* at step $stopped" -- --exp=lm.KjvTransformerTiny "--job_log_dir=$sig" \
    --set train.num_train_steps=$((stopped + 2))
fi

# One trainer per job directory: a second is refused naming the first; the
# lock dies with its holder (kill -9), and the next trainer resumes; eval
# runs beside a trainer and leaves the training's config.json alone.
lock=$work/lock
"$paxcc" --exp=lm.KjvTransformerTiny "--job_log_dir=$lock" --set train.num_train_steps=100000 \
  --set train.summary_interval_steps=50 --set train.save_interval_steps=50 >"$work/lock.log" 2>&1 &
pid=$!
for _ in $(seq 300); do [[ -d $lock/checkpoints/checkpoint_00000050 ]] && break; sleep 0.2; done
expect 1 "$lock is in use by another trainer \(host .*, PID $pid, started .*lm.KjvTransformerTiny\)" -- \
  --exp=lm.KjvTransformerTiny "--job_log_dir=$lock" --set train.num_train_steps=10
expect 0 "eval validation @ step" -- --exp=lm.KjvTransformerTiny "--job_log_dir=$lock" --mode=eval \
  --set learner.optimizer.learning_rate=0.5
grep -q '"learning_rate": 0.5' "$lock/config.json" && { echo "FAIL: eval rewrote config.json"; failures=$((failures + 1)); }
kill -9 $pid
wait $pid 2>/dev/null
# The trainer ran on while the checks above ran: resume from wherever it saved.
latest=$(ls "$lock/checkpoints" | sed -n 's/^checkpoint_0*\([0-9][0-9]*\)$/\1/p' | sort -n | tail -1)
expect 0 "resumed .* at step $latest" -- --exp=lm.KjvTransformerTiny "--job_log_dir=$lock" \
  --set train.num_train_steps=$((latest + 10)) --set train.save_interval_steps=50
grep -q '"\$experiment": "lm.KjvTransformerTiny"' "$lock/config.json" || {
  echo "FAIL: config.json does not name its experiment"; failures=$((failures + 1)); }
expect 0 "done at step $((latest + 10))" -- --config "$lock/config.json" "--job_log_dir=$lock"

# eval and decode on a read-only job directory (a read-only bind mount in a
# mount namespace of its own, where the machine allows one): they run, and
# say that their results reach the console only; training there is one error.
ro=$work/ro
mkdir -p "$ro"
if unshare -m sh -c "mount --bind '$lock' '$ro' && mount -o remount,bind,ro '$ro'" 2>/dev/null; then
  in_ro() { unshare -m sh -c "mount --bind '$lock' '$ro' && mount -o remount,bind,ro '$ro' && exec \"\$@\"" sh "$@"; }
  for mode in eval decode; do
    out=$(in_ro "$paxcc" --exp=lm.KjvTransformerTiny "--job_log_dir=$ro" --mode=$mode 2>&1)
    rc=$?
    if [[ $rc -ne 0 ]] || ! grep -q "written to the console only" <<<"$out"; then
      echo "FAIL: --mode=$mode on a read-only job directory -> exit $rc:"; echo "$out" | tail -5; failures=$((failures + 1))
    fi
  done
  out=$(in_ro "$paxcc" --exp=lm.KjvTransformerTiny "--job_log_dir=$ro" --set train.num_train_steps=70 2>&1)
  rc=$?
  if [[ $rc -ne 1 || $(wc -l <<<"$out") -ne 1 ]] || ! grep -q "Read-only file system" <<<"$out"; then
    echo "FAIL: training on a read-only job directory -> exit $rc:"; echo "$out" | tail -5; failures=$((failures + 1))
  fi
else
  echo "skipped: read-only job directory (no mount namespace here)"
fi

printf 'in the beginning was the word\nand the word was with god\n%.0s' {1..200} >"$work/corpus.txt"
expect 0 "wrote" -- tokenizer --input "$work/corpus.txt" --vocab_size 20 --out "$work/corpus.model"
[[ -s $work/corpus.model ]] || { echo "FAIL: tokenizer model missing"; failures=$((failures + 1)); }

# A FIFO in place of a checkpoint file: refused at once (a plain open would wait for a writer forever).
"$paxcc" --exp=lm.KjvTransformerTiny "--job_log_dir=$work/fifo" --set train.num_train_steps=2 >/dev/null 2>&1
tensors=$(find "$work/fifo/checkpoints" -name '*.safetensors' | head -1)
rm -f "$tensors" && mkfifo "$tensors"
out=$(timeout 60 "$paxcc" --exp=lm.KjvTransformerTiny "--job_log_dir=$work/fifo" --mode=eval 2>&1)
rc=$?
if [[ $rc -ne 1 ]] || ! grep -q "is a FIFO (named pipe), not a regular file" <<<"$out"; then
  echo "FAIL: a FIFO checkpoint file -> exit $rc:"; echo "$out" | tail -3; failures=$((failures + 1))
fi

# Out of memory under an address-space limit, in the input's parallel loops
# on OpenMP workers (150 MB) and in its packing (300 MB): one line naming
# the size and the limit, exit 1, never std::terminate.
if command -v prlimit >/dev/null; then
  for limit in 150000000 300000000; do
    out=$(prlimit --as=$limit "$paxcc" --exp=lm.KjvTransformerTiny "--job_log_dir=$work/oom$limit" \
      --set train.num_train_steps=3 2>&1)
    rc=$?
    mb=$(awk "BEGIN { printf \"%.1f\", $limit / 1e6 }")
    if [[ $rc -ne 1 ]] || grep -q terminate <<<"$out" ||
       ! tail -1 <<<"$out" | grep -q "^paxcc: error: out of memory: allocating .* for building the input 'train' .* failed under the address-space limit (ulimit -v / RLIMIT_AS) of $mb MB"; then
      echo "FAIL: prlimit --as=$limit -> exit $rc:"; echo "$out" | tail -3; failures=$((failures + 1))
    fi
  done
fi

# Bad input: one line, exit 2 for usage and 1 for a run that cannot start.
expect 2 "not expected: --bogus" -- --bogus
expect 2 "--mode: .*not in" -- --exp=lm.KjvTransformerTiny --job_log_dir=x --mode=serve
expect 2 "--exp is required" -- --job_log_dir=x
expect 2 "--exp= has an empty value; give --exp=VALUE" -- --exp= --job_log_dir=x
expect 2 "--output_dir is for --mode=eval and --mode=decode" -- --exp=lm.KjvTransformerTiny --job_log_dir=x --output_dir=y
: >"$work/plainfile"
expect 1 "--job_log_dir $work/plainfile/run: $work/plainfile is not a directory" -- --exp=lm.KjvTransformerTiny \
  "--job_log_dir=$work/plainfile/run"
expect 2 "--dist_timeout: must be a number from 0.001 to 604800 seconds" -- --exp=lm.KjvTransformerTiny --job_log_dir=x --dist_timeout=0
expect 2 "--dist_stop_grace: must be a number from 0.001 to 604800 seconds" -- --exp=lm.KjvTransformerTiny --job_log_dir=x --dist_stop_grace=0
expect 2 "--peak_flops: must be a number from" -- --exp=lm.KjvTransformerTiny --job_log_dir=x --peak_flops=-5
expect 1 "learner.optimizer.learning_rate = -1 is out of range: it must be at least 0, finite" -- \
  --exp=lm.KjvTransformerTiny "--job_log_dir=$work/lr" --set learner.optimizer.learning_rate=-1
# Every numeric field has a range, checked before the model is built.
expect 1 "stacked_transformer_tpl.num_layers = 1000000000000 is out of range: it must be \\[0, 4096\\]" -- \
  --exp=lm.KjvTransformerTiny "--job_log_dir=$work/layers" --set model.lm_tpl.stacked_transformer_tpl.num_layers=1000000000000
# A learning rate that overflows: skipped steps on the summary lines, then exit 1 with one error line.
out=$("$paxcc" --exp=lm.KjvTransformerTiny "--job_log_dir=$work/nonfinite" --set learner.optimizer.learning_rate=1e30 2>&1)
rc=$?
if [[ $rc -ne 1 ]] || ! tail -1 <<<"$out" | grep -qE "^paxcc: error: steps [0-9]+ to [0-9]+: 10 consecutive steps with a non-finite" ||
   ! grep -qE "skipped [0-9]+ steps" <<<"$out"; then
  echo "FAIL: a non-finite run -> exit $rc, output:"; echo "$out" | tail -5; failures=$((failures + 1))
fi
expect 2 "--job_log_dir is required" -- --exp=lm.KjvTransformerTiny
expect 1 "did you mean 'lm.KjvTransformer'[?]\); registered" -- --exp=lm.KjvTransfomer --job_log_dir=x
expect 1 "num_train_steps" -- --exp=lm.KjvTransformerTiny "--job_log_dir=$work/x" --set train.num_train_step=3
expect 1 "not an integer|integer" -- --exp=lm.KjvTransformerTiny "--job_log_dir=$work/x" --set train.num_train_steps=many
expect 1 "in the checkpoint but f32\\[259,32\\] in the target" -- "${tiny[@]}" --set model.lm_tpl.model_dims=32
grep -q '"model_dims": 64' "$job/config.json" || { echo "FAIL: a refused resume rewrote config.json"; failures=$((failures + 1)); }
# expect_stderr STATUS TEXT -- ARGS...: paxcc exits with STATUS and prints
# exactly one line on stderr, which contains TEXT (a fixed string).
expect_stderr() {
  local status=$1 text=$2
  shift 3
  local err rc
  err=$("$paxcc" "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne $status || $(wc -l <<<"$err") -ne 1 ]] || ! grep -qF -- "$text" <<<"$err"; then
    echo "FAIL: paxcc $* -> exit $rc (want $status and one line on stderr), stderr:"
    echo "$err" | head -20
    failures=$((failures + 1))
  fi
}
# Unusable output paths are one error naming them, for training and for
# --mode=eval (an unusable summaries/ once crashed with exit 139 and no
# message, in the summaries' destructor while the real error unwound).
bad=$work/bad_summaries
mkdir -p "$bad" "$work/bad_eval" "$work/bad_decode"
ln -s "$work/nowhere" "$bad/summaries"
ln -s "$work/nowhere" "$work/bad_eval/summaries"
: >"$work/bad_decode/decode"
expect_stderr 1 "summaries: cannot write to '$bad/summaries': it is a dangling symlink to '$work/nowhere'" -- \
  --exp=lm.KjvTransformerTiny "--job_log_dir=$bad" --set train.num_train_steps=2
expect_stderr 1 "summaries: cannot write to '$work/bad_eval/summaries': it is a dangling symlink to '$work/nowhere'" -- \
  --exp=lm.KjvTransformerTiny "--job_log_dir=$job" --mode=eval "--output_dir=$work/bad_eval"
expect_stderr 1 "decode samples: cannot write to '$work/bad_decode/decode'" -- \
  --exp=lm.KjvTransformerTiny "--job_log_dir=$work/bad_decode" --set train.num_train_steps=2
ln -s "$work/nowhere" "$work/bad_data"
expect_stderr 1 "data directory: cannot create '$work/bad_data/kjv': '$work/bad_data' is a dangling symlink" -- \
  --exp=lm.KjvTransformerTiny "--job_log_dir=$work/bd" --set train.num_train_steps=2 "--data_dir=$work/bad_data"
expect 1 "no checkpoint in" -- --exp=lm.KjvTransformerTiny "--job_log_dir=$work/none" --mode=eval
expect 1 "restore_step=999: no such checkpoint" -- "${tiny[@]}" --mode=eval --restore_step=999
expect 1 "--profile_steps '5:2' is not START:END with 1 <= START <= END" -- \
  --exp=lm.KjvTransformerTiny "--job_log_dir=$work/prof" --profile_steps=5:2
expect 1 "no_such_file" -- --config "$work/no_such_file.json" "--job_log_dir=$job"
expect 2 "--exp and --config both name" -- --exp=lm.KjvTransformerTiny --config "$job/config.json" "--job_log_dir=$job"
expect 1 "no_such_corpus" -- tokenizer --input "$work/no_such_corpus.txt" --vocab_size 40 --out "$work/m.model"
expect 1 "no such file: .*empty/train-images" -- --exp=vision.FashionMnistMlp "--job_log_dir=$work/f" \
  --set "train_input.dir=$work/empty"
expect 1 "missing.txt" -- --exp=lm.KjvTransformerTiny "--job_log_dir=$work/y" --set train_input.source=files \
  --set "train_input.files=[\"$work/missing.txt\"]"

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all paxcc checks passed"
