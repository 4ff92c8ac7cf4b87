#!/usr/bin/env bash
# Runs every built fuzz target for a bounded time (seconds per target, default 60) on its
# seed corpus (fuzz/corpus/<name>/), and prints the edges each reached (libFuzzer's "cov:", with
# the parser libraries instrumented: see fuzz/CMakeLists.txt). Fails on any finding.
# FUZZ_BUILD=<dir> picks another build tree (default build-fuzz).
# FUZZ_JOBS=<n> targets run at once (default: the number of CPUs); each libFuzzer run is one
# process on one core, so n targets at once take the time of one on n cores.
# Inputs may be up to 256 KiB (-max_len): libFuzzer's default, 4 KiB with small seeds, cannot
# hold the 50,000-deep JSON the deep-nesting seeds carry (fuzz/corpus/*/deep*).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
build=${FUZZ_BUILD:-build-fuzz}
jobs=${FUZZ_JOBS:-$(nproc)}
shopt -s nullglob
bins=("$build"/fuzz/k3_fuzz_*)
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

# One target: its libFuzzer log in $results/<name>.log, its exit status in $results/<name>.status.
run_one() {
  local bin=$1 name=${1##*/k3_fuzz_}
  local work seeds=fuzz/corpus/$name status=0
  work=$(mktemp -d)
  [ -d "$seeds" ] && cp -r "$seeds"/. "$work"/ 2>/dev/null || true
  "$bin" -max_total_time="$secs" -max_len=262144 -rss_limit_mb=2048 -print_final_stats=1 "$work" \
    >"$results/$name.log" 2>&1 || status=$?
  echo "$status" >"$results/$name.status"
  rm -rf "$work"
}

echo "fuzz: ${#bins[@]} target(s), ${secs}s each, $jobs at a time"
running=0
for bin in "${bins[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_one "$bin" &
  running=$((running + 1))
done
wait || true

failed=0
for bin in "${bins[@]}"; do
  name=${bin##*/k3_fuzz_}
  log=$results/$name.log
  status=$(cat "$results/$name.status" 2>/dev/null || echo "missing")
  edges=$(grep -oE 'cov: [0-9]+' "$log" 2>/dev/null | tail -n 1 | cut -d' ' -f2 || true)
  if [ "$status" != "0" ]; then
    tail -n 40 "$log" 2>/dev/null || true
    echo "fuzz: $name FAILED (exit $status)"
    failed=$((failed + 1))
    continue
  fi
  tail -n 3 "$log"
  echo "fuzz: $name reached ${edges:-?} edges"
done
if [ "$failed" -ne 0 ]; then
  echo "fuzz: $failed target(s) had a finding"
  exit 1
fi
echo "fuzz: ${#bins[@]} target(s) ran without a finding"
