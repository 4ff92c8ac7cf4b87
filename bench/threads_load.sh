#!/bin/bash
# Default threads vs -t 1 / -t 2 and OpenMP's wait policies on K3-mini, interleaved round by
# round (docs/performance.md, "Threads and load"). Prints one `k3 run` stats line per variant
# and round, with the load average at the start of each round; take medians over rounds.
# usage: bash bench/threads_load.sh [ROUNDS (5)] [K3 binary (build/tools/cli/k3)]
set -euo pipefail
cd "$(dirname "$0")/.."
R=${1:-5}
K3=${2:-build/tools/cli/k3}
P="$(head -c 1200 models/k3-mini/heldout.txt)"
for r in $(seq 1 "$R"); do
  echo "round $r load $(cut -d' ' -f1-3 /proc/loadavg)"
  for cfg in "default|" "t1|-t 1" "t2|-t 2" "active|OMP_WAIT_POLICY=active" "active_t1|OMP_WAIT_POLICY=active -t 1"; do
    name=${cfg%%|*}; args=${cfg#*|}; envs=()
    if [[ $args == OMP_WAIT_POLICY=* ]]; then envs=("${args%% *}"); args=${args#"${envs[0]}"}; fi
    # shellcheck disable=SC2086
    line=$(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "${envs[@]}" "$K3" run -m models/k3-mini -p "$P" --temp 0 -n 128 $args 2>&1 >/dev/null | grep "gen:" | tail -1)
    echo "$name | $line"
  done
done
