#!/bin/bash
# Faults of a data-parallel run, `mpirun -np 2 paxcc ...` on loopback:
#   - SIGTERM to one process: both save at the same step, exit 0, and the run
#     resumes from there;
#   - a process that hangs (SIGSTOP): the other fails within the timeout
#     (--dist_timeout) naming it, and the whole job ends;
#   - a process killed (SIGKILL): the job ends at once, and the committed
#     checkpoints still resume;
#   - an input config that cannot be sharded: a one-line error;
#   - a mesh of 2 processes trains, one of 4 is refused before any work;
#   - decoding on rank 0 alone that outlasts --dist_timeout: the other process
#     waits for it at the phase barrier and the run finishes;
#   - ranks started with different settings: refused, naming the fields.
# Usage: paxcc_mpi_test.sh PAXCC MPIRUN
set -u
PAXCC=$1
MPIRUN=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
WORK=$(mktemp -d)
MPI_PID=
cleanup() {
  [ -n "$MPI_PID" ] && kill -9 "$MPI_PID" $(pgrep -P "$MPI_PID") 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*"
  for f in "$WORK"/*.log; do
    echo "--- $f"
    tail -c 3000 "$f"
  done
  exit 1
}

COMMON=(--exp=lm.KjvTransformerTiny --peak_flops=1e11 --set train.eval_interval_steps=0
        --set train.decode_interval_steps=0 --set train.save_interval_steps=40 --set train.summary_interval_steps=5)

# Starts a 2-process run of `steps` steps in the background and waits until it trains.
start() {
  local dir=$1 steps=$2
  shift 2
  "$MPIRUN" -np 2 --oversubscribe "$PAXCC" "${COMMON[@]}" --set train.num_train_steps="$steps" \
    --job_log_dir="$dir" "$@" >"$dir.log" 2>&1 &
  MPI_PID=$!
  for _ in $(seq 600); do
    [ -s "$dir/metrics.jsonl" ] && return 0
    kill -0 "$MPI_PID" 2>/dev/null || fail "the run in $dir ended before training"
    sleep 0.2
  done
  fail "the run in $dir did not start training within 120 s"
}

# The pid of rank $1 of the running job.
rank_pid() {
  local p
  for p in $(pgrep -P "$MPI_PID"); do
    if tr '\0' '\n' <"/proc/$p/environ" | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$p"
      return 0
    fi
  done
  fail "no process of rank $1 under mpirun $MPI_PID"
}

# Waits at most $1 seconds for the job to end; sets RC and ELAPSED.
wait_job() {
  local limit=$1 start_s=$SECONDS
  while kill -0 "$MPI_PID" 2>/dev/null; do
    if ((SECONDS - start_s > limit)); then
      fail "the job did not end within $limit s"
    fi
    sleep 0.2
  done
  wait "$MPI_PID"
  RC=$?
  ELAPSED=$((SECONDS - start_s))
  MPI_PID=
}

latest_step() { ls "$1/checkpoints" | sed -n 's/^checkpoint_0*\([0-9][0-9]*\)$/\1/p' | sort -n | tail -1; }

# 1. SIGTERM to process 1 alone: an agreed step, saved by the chief, resumable.
D=$WORK/term
start "$D" 100000
kill -TERM "$(rank_pid 1)"
wait_job 60
[ "$RC" = 0 ] || fail "SIGTERM: exit status $RC, expected 0"
grep -q "interrupted: saved step" "$D.log" || fail "SIGTERM: no 'interrupted: saved step' line"
SAVED=$(sed -n 's/.*interrupted: saved step \([0-9]*\).*/\1/p' "$D.log")
[ "$(latest_step "$D")" = "$SAVED" ] || fail "SIGTERM: latest checkpoint $(latest_step "$D") is not step $SAVED"
"$MPIRUN" -np 2 --oversubscribe "$PAXCC" "${COMMON[@]}" --set train.num_train_steps=$((SAVED + 5)) \
  --job_log_dir="$D" >"$D.resume.log" 2>&1 || fail "SIGTERM: the resumed run failed"
grep -q "at step $SAVED" "$D.resume.log" || fail "SIGTERM: the run did not resume at step $SAVED"
grep -q "done at step $((SAVED + 5))" "$D.resume.log" || fail "SIGTERM: the resumed run did not finish"
echo "ok: SIGTERM to one process saved step $SAVED on both and resumed"

# 2. Process 1 hangs: process 0 names it within the timeout and the job ends.
D=$WORK/hang
start "$D" 100000 --dist_timeout=5
kill -STOP "$(rank_pid 1)"
wait_job 60
[ "$RC" != 0 ] || fail "hang: exit status 0"
grep -q "paxcc: error: process 0 of 2: .*timed out after .*rank.* 1" "$D.log" ||
  fail "hang: no error naming the missing rank 1"
echo "ok: a hung process was named and the job ended in ${ELAPSED} s (timeout 5 s)"

# 3. Process 1 killed: the job ends at once; committed checkpoints resume.
D=$WORK/kill
start "$D" 100000
while [ -z "$(latest_step "$D")" ]; do
  kill -0 "$MPI_PID" 2>/dev/null || fail "kill: the run ended before its first checkpoint"
  sleep 0.2
done
kill -KILL "$(rank_pid 1)"
wait_job 60
[ "$RC" != 0 ] || fail "kill: exit status 0"
grep -qi "rank 1" "$D.log" || fail "kill: mpirun did not name rank 1"
LATEST=$(latest_step "$D")
"$MPIRUN" -np 2 --oversubscribe "$PAXCC" "${COMMON[@]}" --set train.num_train_steps=$((LATEST + 3)) \
  --job_log_dir="$D" >"$D.resume.log" 2>&1 || fail "kill: resuming from step $LATEST failed"
grep -q "at step $LATEST" "$D.resume.log" || fail "kill: the run did not resume at step $LATEST"
echo "ok: a killed process ended the job in ${ELAPSED} s; step $LATEST resumed"

# 4. An input that cannot take one shard per process.
D=$WORK/shards
out=$("$MPIRUN" -np 2 --oversubscribe "$PAXCC" "${COMMON[@]}" --set train.num_train_steps=2 \
  --set train_input.num_infeed_hosts=3 --job_log_dir="$D" 2>&1)
rc=$?
[ "$rc" != 0 ] || fail "shards: exit status 0"
echo "$out" | grep -q "paxcc: error: process [01] of 2: input 'train': num_infeed_hosts = 3 but the job runs 2 processes" ||
  fail "shards: unexpected output: $out"
echo "ok: num_infeed_hosts = 3 on 2 processes is a one-line error"
# 4b. The mesh: [1, 2, 1] matches 2 processes and trains; [1, 4, 1] is refused
# before any work with the process count to use.
D=$WORK/mesh
"$MPIRUN" -np 2 --oversubscribe "$PAXCC" "${COMMON[@]}" --set train.num_train_steps=2 \
  --set "train.ici_mesh_shape=[1,2,1]" --job_log_dir="$D" >"$D.log" 2>&1 || fail "mesh: [1, 2, 1] on 2 processes failed"
grep -q "done at step 2" "$D.log" || fail "mesh: the run did not finish"
out=$("$MPIRUN" -np 2 --oversubscribe "$PAXCC" "${COMMON[@]}" --set train.num_train_steps=2 \
  --set "train.ici_mesh_shape=[1,4,1]" --job_log_dir="$WORK/mesh4" 2>&1)
[ $? != 0 ] || fail "mesh: [1, 4, 1] on 2 processes: exit status 0"
echo "$out" | grep -q "needs 4 processes, but this run has 2: run it as mpirun -np 4" || fail "mesh: unexpected output: $out"
[ ! -e "$WORK/mesh4" ] || fail "mesh: the refused run wrote its job directory"
echo "ok: mesh [1, 2, 1] trains on 2 processes, [1, 4, 1] is refused"
# 4c. init_from under fsdp: params exported from a trained run, read whole and
# cut into each process's blocks, give the first step the loss that one
# process with the same global batch gets from them (a misplaced block would
# not), far below a fresh start's.
D=$WORK/init
"$PAXCC" "${COMMON[@]}" --set train.num_train_steps=60 --job_log_dir="$D/trained" >"$D.log" 2>&1 ||
  fail "init: the training run failed"
"$PAXCC" export --job_log_dir="$D/trained" --out="$D/params.msgpack" >>"$D.log" 2>&1 || fail "init: export failed"
first_loss() { grep '"split":"train"' "$1/metrics.jsonl" | head -1 | sed 's/.*"total_loss":\([-0-9.e]*\).*/\1/'; }
"$PAXCC" "${COMMON[@]}" --set train.num_train_steps=1 --set train.summary_interval_steps=1 \
  --set train_input.batch_size=16 --set "train.init_from=$D/params.msgpack" --job_log_dir="$D/one" >>"$D.log" 2>&1 ||
  fail "init: the one-process run failed"
"$MPIRUN" -np 2 --oversubscribe "$PAXCC" "${COMMON[@]}" --set train.num_train_steps=1 \
  --set train.summary_interval_steps=1 --set "train.ici_mesh_shape=[1,2,1]" --set train.fsdp_min_elements=1 \
  --set "train.init_from=$D/params.msgpack" --job_log_dir="$D/fsdp" >>"$D.log" 2>&1 || fail "init: the fsdp run failed"
grep -q "fully sharded" "$D.log" || fail "init: the 2-process run did not shard its params"
"$MPIRUN" -np 2 --oversubscribe "$PAXCC" "${COMMON[@]}" --set train.num_train_steps=1 \
  --set train.summary_interval_steps=1 --set "train.ici_mesh_shape=[1,2,1]" --set train.fsdp_min_elements=1 \
  --job_log_dir="$D/fresh" >>"$D.log" 2>&1 || fail "init: the fresh fsdp run failed"
one=$(first_loss "$D/one") fsdp=$(first_loss "$D/fsdp") fresh=$(first_loss "$D/fresh")
awk -v a="$one" -v b="$fsdp" -v c="$fresh" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d < 1e-3 * a && c > a + 0.5) }' ||
  fail "init: first losses: one process $one, fsdp $fsdp, fresh fsdp $fresh"
echo "ok: init_from under fsdp: first loss $fsdp (one process: $one; a fresh start: $fresh)"
# 5. A chief-only phase (decoding, ~3 s) longer than --dist_timeout (1 s).
D=$WORK/phase
"$MPIRUN" -np 2 --oversubscribe "$PAXCC" "${COMMON[@]}" --set train.num_train_steps=4 --set train.decode_interval_steps=2 \
  --set model.max_decode_length=1500 --dist_timeout=1 --job_log_dir="$D" >"$D.log" 2>&1 ||
  fail "phase: decoding on rank 0 alone made the run fail"
grep -q "done at step 4" "$D.log" || fail "phase: the run did not finish"
echo "ok: decoding on rank 0 outlasted --dist_timeout=1 and the run finished"
# 6. Ranks started with different settings (mpirun's MPMD form): refused
# before any work, naming each differing field with each process's value.
D=$WORK/disagree
out=$("$MPIRUN" --oversubscribe -np 1 "$PAXCC" "${COMMON[@]}" --set train.num_train_steps=2 --job_log_dir="$D" \
  --set learner.optimizer.learning_rate=0.003 : -np 1 "$PAXCC" "${COMMON[@]}" --set train.num_train_steps=2 \
  --job_log_dir="$D" --set learner.optimizer.learning_rate=0.3 2>&1)
[ $? != 0 ] || fail "disagree: exit status 0"
echo "$out" | grep -q "paxcc: error: process [01] of 2: the 2 processes were started with different settings.*learner.optimizer.learning_rate: 0.003 on process 0, 0.3 on process 1" ||
  fail "disagree: unexpected output: $out"
[ ! -e "$D/checkpoints" ] || fail "disagree: the refused run wrote checkpoints"
out=$("$MPIRUN" --oversubscribe -np 1 "$PAXCC" "${COMMON[@]}" --set train.num_train_steps=2 --job_log_dir="$D" \
  --set "train.ici_mesh_shape=[1,2,1]" : -np 1 "$PAXCC" "${COMMON[@]}" --set train.num_train_steps=2 \
  --job_log_dir="$D" --set "train.ici_mesh_shape=[2,1,1]" 2>&1)
[ $? != 0 ] || fail "disagree: meshes: exit status 0"
echo "$out" | grep -q "train.ici_mesh_shape\[0\]: 1 on process 0, 2 on process 1" || fail "disagree: meshes: unexpected output: $out"
echo "ok: ranks with different learning rates or meshes are refused, naming the fields"
echo "all mpirun fault checks passed"
