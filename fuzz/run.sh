#!/usr/bin/env bash
# Runs every built fuzz target for a bounded time (seconds per target, default 60) on its
# seed corpus (fuzz/corpus/<name>/). Fails on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shopt -s nullglob
n=0
for bin in build-fuzz/fuzz/k3_fuzz_*; do
  name=${bin##*/k3_fuzz_}
  work=$(mktemp -d)
  seeds=fuzz/corpus/$name
  [ -d "$seeds" ] && cp -r "$seeds"/. "$work"/ 2>/dev/null || true
  echo "fuzz: $name for ${secs}s"
  "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=1 "$work" 2>&1 | tail -n 3
  rm -rf "$work"
  n=$((n+1))
done
echo "fuzz: $n target(s) ran without a finding"
