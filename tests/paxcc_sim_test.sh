#!/usr/bin/env bash
# paxcc on the sim device: lm.KjvTransformerTiny trained, evaluated and
# decoded with --platform=sim (and with PAX_PLATFORMS=sim) writes the
# metrics the CPU writes, bit for bit; a platform that is not present is a
# one-line error.
# usage: paxcc_sim_test.sh PAXCC
set -uo pipefail
paxcc=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PAX_PEAK_FLOPS=1e11
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

run=(--exp=lm.KjvTransformerTiny --set train.num_train_steps=20 --set train.save_interval_steps=10)
"$paxcc" "${run[@]}" "--job_log_dir=$work/cpu" >"$work/cpu.log" 2>&1 || fail "the CPU run: $(tail -3 "$work/cpu.log")"
"$paxcc" "${run[@]}" "--job_log_dir=$work/sim" --platform=sim >"$work/sim.log" 2>&1 ||
  fail "the sim run: $(tail -3 "$work/sim.log")"
PAX_PLATFORMS=sim "$paxcc" "${run[@]}" "--job_log_dir=$work/env" >"$work/env.log" 2>&1 ||
  fail "the PAX_PLATFORMS=sim run: $(tail -3 "$work/env.log")"
PAX_PLATFORMS=sim "$paxcc" "${run[@]}" "--job_log_dir=$work/env" --mode=eval >"$work/eval.log" 2>&1 ||
  fail "eval on sim: $(tail -3 "$work/eval.log")"
"$paxcc" "${run[@]}" "--job_log_dir=$work/cpu" --mode=eval >"$work/cpu_eval.log" 2>&1 ||
  fail "eval on the CPU: $(tail -3 "$work/cpu_eval.log")"

# The metrics of every line (not its times), as written.
metrics() { sed -E 's/"(wall_time|steps_per_sec|tokens_per_sec|mfu|input_wait)":[^,}]*,?//g' "$1/metrics.jsonl"; }
for dir in sim env; do
  [[ -s $work/$dir/metrics.jsonl ]] || fail "$dir wrote no metrics.jsonl"
  if ! diff <(metrics "$work/cpu") <(metrics "$work/$dir") >"$work/diff_$dir"; then
    fail "$dir metrics differ from the CPU's:"
    head -6 "$work/diff_$dir"
  fi
done
eval_metrics() { sed -E 's/"wall_time":[^,}]*,?//g' "$1"/eval_runs/step_00000020/metrics.jsonl; }
grep -q '"split":"eval_' "$work/env/eval_runs/step_00000020/metrics.jsonl" 2>/dev/null || fail "eval on sim wrote no eval metrics"
diff <(eval_metrics "$work/cpu") <(eval_metrics "$work/env") >/dev/null || fail "eval metrics on sim differ from the CPU's"

# --list_devices: a line per device, and why cuda has none on this machine.
devices=$("$paxcc" --list_devices 2>&1) || fail "--list_devices failed: $devices"
[[ $devices == *"cpu:0    "* && $devices == *"sim:0    "* ]] || fail "--list_devices lacks cpu:0 or sim:0: $devices"
[[ $devices == *"cuda"* ]] || fail "--list_devices says nothing of cuda: $devices"
if [[ $devices == *"cuda:0"* ]]; then
  echo "a CUDA device is present: the --platform=cuda refusal is not checked"
  [[ $failures -eq 0 ]] && echo "paxcc on the sim device: all checks passed"
  exit $((failures > 0))
fi

out=$("$paxcc" "${run[@]}" "--job_log_dir=$work/x" --platform=cuda 2>&1)
rc=$?
[[ $rc -ne 0 && $(wc -l <<<"$out") -eq 1 && $out == *"names no platform present here; present: sim, cpu"* ]] ||
  fail "--platform=cuda without a GPU: exit $rc, output: $out"
out=$("$paxcc" "${run[@]}" "--job_log_dir=$work/x" --platform=tpu 2>&1)
[[ $out == *"'tpu' is not a platform; valid: cpu, sim, cuda"* ]] || fail "--platform=tpu: $out"

[[ $failures -eq 0 ]] && echo "paxcc on the sim device: all checks passed"
exit $((failures > 0))
