# Sourced by the KJV parallelism benches: report <dir> <steps> prints the
# run's last step line and its sharding lines from <dir>/log, and its
# total_loss every summary step from <dir>/run/metrics.jsonl, then removes
# both for the next run.
report() {
  local dir=$1 steps=$2
  tr '\r' '\n' < "$dir/log" | grep -E "train step $steps/|split over|rror" | sed 's/^.*train step/train step/' || true
  python3 -c "import json,sys; print('total_loss', ' '.join('%d: %.9f' % (m['step'], m['metrics']['total_loss'])
    for m in map(json.loads, open(sys.argv[1])) if m.get('split', 'train') == 'train'))" "$dir/run/metrics.jsonl"
  rm -rf "$dir/run" "$dir/log"
}
