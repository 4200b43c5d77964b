#!/usr/bin/env bash
# paxcc linked against the static archive: every experiment the shared build
# registers is there, and one trains for a few steps (its layers, input,
# optimizer and schedule come from registries filled at load time).
# usage: paxcc_static_test.sh PAXCC PAXCC_STATIC
set -uo pipefail
shared=$1
static=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PAX_PEAK_FLOPS=1e11
if ! diff <("$shared" --list) <("$static" --list); then
  echo "FAIL: the static paxcc lists other experiments than the shared one"
  exit 1
fi
echo "both list $("$static" --list | wc -l) lines"
out=$("$static" --exp=lm.KjvTransformerTiny "--job_log_dir=$work/tiny" --set train.num_train_steps=4 \
  --set train.save_interval_steps=4 2>&1)
if ! grep -q "done at step 4" <<<"$out"; then
  echo "FAIL: the static paxcc did not train lm.KjvTransformerTiny:"
  echo "$out" | tail -20
  exit 1
fi
echo "the static paxcc trained lm.KjvTransformerTiny for 4 steps"
