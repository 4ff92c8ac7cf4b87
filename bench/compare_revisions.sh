#!/usr/bin/env bash
# Before/after speed of `k3 bench` across git revisions, measured in the same run.
#
#   bench/compare_revisions.sh [-m MODEL] [-t THREADS] [-r ROUNDS] REV [REV ...]
#
# Builds the `k3` target of each revision (a git worktree under $K3_COMPARE_DIR, default
# /tmp/k3-compare, Release, reused across calls), then runs `k3 bench --json` ROUNDS times per
# revision, interleaved (rev1, rev2, ..., rev1, rev2, ...) so that a noisy machine affects every
# revision alike, and prints one Markdown table: median pp / tg tokens/s over the rounds, the
# prefill/decode per-token ratio, and each revision's speed relative to the first. Each `k3 bench`
# run is itself a median of 9 repetitions (older revisions warm up less: 9 keeps their slow
# first runs out of the median). "WORKTREE" as a REV means the current working tree's
# build (build/tools/cli/k3, built by scripts/setup.sh), so uncommitted work can be compared.
set -euo pipefail

model=models/k3-mini threads=1 rounds=5
while getopts "m:t:r:" o; do
  case $o in
    m) model=$OPTARG ;;
    t) threads=$OPTARG ;;
    r) rounds=$OPTARG ;;
    *) echo "usage: $0 [-m MODEL] [-t THREADS] [-r ROUNDS] REV [REV ...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "$0: give at least one git revision (or WORKTREE)" >&2; exit 2; }

root=$(git rev-parse --show-toplevel)
cd "$root"
work=${K3_COMPARE_DIR:-/tmp/k3-compare}
mkdir -p "$work"
[ -e "$model/config.json" ] || { echo "$0: $model/config.json not found" >&2; exit 2; }
model=$(cd "$model" && pwd)

bins=() names=()
for rev in "$@"; do
  if [ "$rev" = WORKTREE ]; then
    [ -x build/tools/cli/k3 ] || { echo "$0: build/tools/cli/k3 missing (run scripts/setup.sh)" >&2; exit 2; }
    bins+=("$root/build/tools/cli/k3"); names+=("working tree"); continue
  fi
  sha=$(git rev-parse --short=10 "$rev^{commit}")
  dir=$work/$sha
  if [ ! -x "$dir/build/tools/cli/k3" ]; then
    [ -d "$dir/src" ] || git worktree add --detach "$dir" "$sha" >/dev/null
    # shared/ beside the checkout is only needed by the tests, not by the k3 target.
    cmake -S "$dir" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$dir/build" --target k3 >/dev/null
  fi
  bins+=("$dir/build/tools/cli/k3"); names+=("$rev ($sha)")
done

out=$work/results.$$
: > "$out"
for ((r = 0; r < rounds; r++)); do
  for i in "${!bins[@]}"; do
    "${bins[$i]}" bench -m "$model" -t "$threads" -r 9 --probe-mb 64 --json 2>/dev/null |
      python3 -c 'import json,sys; j=json.load(sys.stdin); print(sys.argv[1], j["pp"]["tokens_per_s"], j["tg"]["tokens_per_s"])' "$i" >> "$out"
  done
done

python3 - "$out" "$threads" "$rounds" "${names[@]}" <<'EOF'
import statistics, sys
path, threads, rounds, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
pp = {i: [] for i in range(len(names))}
tg = {i: [] for i in range(len(names))}
for line in open(path):
    i, a, b = line.split()
    pp[int(i)].append(float(a))
    tg[int(i)].append(float(b))
print(f"threads {threads}; medians of {rounds} interleaved rounds (each a `k3 bench` median of 9)\n")
print("| revision | pp t/s | tg t/s | pp/tg per token | pp vs first | tg vs first |")
print("|---|---|---|---|---|---|")
p0, t0 = statistics.median(pp[0]), statistics.median(tg[0])
for i, n in enumerate(names):
    p, t = statistics.median(pp[i]), statistics.median(tg[i])
    print(f"| {n} | {p:.0f} | {t:.0f} | {p / t:.2f}x | {p / p0:.2f}x | {t / t0:.2f}x |")
EOF
rm -f "$out"
