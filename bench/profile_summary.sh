#!/usr/bin/env bash
# Sums a PAX_PROFILE=1 report (stdin) by kind of step: dot_general (GEMM),
# convolution, fused loops, row sweeps and every other primitive, with each one's share
# of the time in executable steps, then the share outside GEMM / convolution,
# and outside those and attention.
#   PAX_PROFILE=1 build/bench/gpt_step 2>&1 >/dev/null | bench/profile_summary.sh
awk '/^ +[0-9.]+ +[0-9.]+ +[0-9]+ +[a-z_]/ {
       kind = $4
       sub(/\[.*/, "", kind)
       if (kind ~ /^fusion/) kind = "fused loops"
       if (kind ~ /^sweep/) kind = "row sweeps"
       t[kind] += $1; total += $1
     }
     END {
       if (total == 0) { print "no PAX_PROFILE report on stdin" > "/dev/stderr"; exit 1 }
       for (k in t) printf "%.1f\t%s\t%.1f\n", t[k], k, 100 * t[k] / total
       gemm = t["dot_general"] + t["conv_general_dilated"]
       printf "-1\toutside GEMM / conv\t%.1f\t%.1f\n", 100 * (total - gemm) / total, total - gemm
       gemm += t["dot_product_attention"] + t["dot_product_attention_bwd"]
       printf "-2\toutside GEMM / conv / attention\t%.1f\t%.1f\n", 100 * (total - gemm) / total, total - gemm
     }' | sort -t$'\t' -k1,1 -nr |
  awk -F'\t' '$1 >= 0 { printf "%-22s %10.1f ms %6.1f%%\n", $2, $1, $3 }
              $1 < 0 { printf "%-31s %10.1f ms %6.1f%%\n", $2, $4, $3 }'
