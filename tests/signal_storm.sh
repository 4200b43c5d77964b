#!/bin/bash
# Signal storm: a training process receives thousands of signals at 1 ms
# intervals (SIGCHLD, SIGWINCH, SIGURG, SIGCONT, which must change nothing,
# and glibc's internal signal 33, whose handler runs on whichever thread it
# hits, inside a oneDNN kernel or not), then one SIGTERM, which must save the
# current step and exit 0; the saved step is the latest committed checkpoint.
# Usage: signal_storm.sh PAXCC SIGNAL_STORM ROUNDS [SIGNALS_PER_ROUND]
set -u
PAXCC=$1
STORM=$2
ROUNDS=$3
COUNT=${4:-2000}
WORK=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  [ -f "$WORK/run.log" ] && tail -c 3000 "$WORK/run.log"
  exit 1
}
latest_step() { ls "$1/checkpoints" | sed -n 's/^checkpoint_0*\([0-9][0-9]*\)$/\1/p' | sort -n | tail -1; }

for round in $(seq "$ROUNDS"); do
  D=$WORK/run
  rm -rf "$D"
  "$PAXCC" --exp=lm.KjvTransformerTiny --job_log_dir="$D" --peak_flops=1e11 --set train.num_train_steps=1000000 \
    --set train.eval_interval_steps=0 --set train.decode_interval_steps=0 --set train.save_interval_steps=50 \
    >"$WORK/run.log" 2>&1 &
  PID=$!
  for _ in $(seq 600); do
    [ -s "$D/metrics.jsonl" ] && break
    kill -0 "$PID" 2>/dev/null || fail "round $round: the run ended before training"
    sleep 0.2
  done
  [ -s "$D/metrics.jsonl" ] || fail "round $round: no training within 120 s"
  "$STORM" "$PID" "$COUNT" 1000 17 28 23 18 33 || fail "round $round: the storm ended the process"
  kill -TERM "$PID"
  wait "$PID"
  RC=$?
  PID=
  [ "$RC" = 0 ] || fail "round $round: exit status $RC after SIGTERM"
  SAVED=$(sed -n 's/.*interrupted: saved step \([0-9]*\).*/\1/p' "$WORK/run.log")
  [ -n "$SAVED" ] || fail "round $round: no 'interrupted: saved step' line"
  [ "$(latest_step "$D")" = "$SAVED" ] || fail "round $round: latest checkpoint $(latest_step "$D") is not step $SAVED"
  echo "round $round: $COUNT signals, then SIGTERM: saved step $SAVED, exit 0"
done
echo "signal storm: $ROUNDS of $ROUNDS rounds passed"
