#!/bin/bash
# Interleaved A/B of expert streaming (docs/performance.md "Experts streamed from SSD"): rounds of
# OLD's bench/k3_bench_expert_stream (a build without prefetch) and NEW's with --prefetch off,on,
# one run each per round, uptime's load printed before each.
#   bench/expert_stream_ab.sh OLD_BUILD_DIR NEW_BUILD_DIR CHECKPOINT [ROUNDS] [BUDGET]
# e.g. bench/expert_stream_ab.sh /work/main/build build /tmp/k3-stream-bench 4 0
set -euo pipefail
OLD=$1/bench/k3_bench_expert_stream
NEW=$2/bench/k3_bench_expert_stream
M=$3
ROUNDS=${4:-4}
BUDGET=${5:-0}
for round in $(seq 1 "$ROUNDS"); do
  echo "== round $round OLD $(uptime)"
  "$OLD" -m "$M" -n 12 --warmup 2 --budgets "$BUDGET" --io-threads 16 --no-drop --probe-records 32
  echo "== round $round NEW $(uptime)"
  "$NEW" -m "$M" -n 12 --warmup 2 --budgets "$BUDGET" --prefetch off,on --io-threads 16 --no-drop --probe-records 32
done
echo "== done $(uptime)"
