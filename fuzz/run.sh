#!/usr/bin/env bash
# Runs every built fuzz target for a bounded time (seconds per target, default 60) on its
# seed corpus (fuzz/corpus/<name>/), and prints the edges each reached (libFuzzer's "cov:", with
# the parser libraries instrumented: see fuzz/CMakeLists.txt). Fails on any finding.
# FUZZ_BUILD=<dir> picks another build tree (default build-fuzz).
# Inputs may be up to 256 KiB (-max_len): libFuzzer's default, 4 KiB with small seeds, cannot
# hold the 50,000-deep JSON the deep-nesting seeds carry (fuzz/corpus/*/deep*).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
build=${FUZZ_BUILD:-build-fuzz}
shopt -s nullglob
n=0
for bin in "$build"/fuzz/k3_fuzz_*; do
  name=${bin##*/k3_fuzz_}
  work=$(mktemp -d)
  log=$(mktemp)
  seeds=fuzz/corpus/$name
  [ -d "$seeds" ] && cp -r "$seeds"/. "$work"/ 2>/dev/null || true
  echo "fuzz: $name for ${secs}s"
  status=0
  "$bin" -max_total_time="$secs" -max_len=262144 -rss_limit_mb=2048 -print_final_stats=1 "$work" >"$log" 2>&1 || status=$?
  edges=$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 | cut -d' ' -f2 || true)
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$log"
    echo "fuzz: $name FAILED (exit $status)"
    rm -rf "$work" "$log"
    exit 1
  fi
  tail -n 3 "$log"
  echo "fuzz: $name reached ${edges:-?} edges"
  rm -rf "$work" "$log"
  n=$((n+1))
done
echo "fuzz: $n target(s) ran without a finding"
