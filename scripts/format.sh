#!/usr/bin/env bash
# Formats the C++ sources with clang-format and the repository's .clang-format.
#
#   scripts/format.sh [--check] [PATH...]
#
# PATH: files or directories (default: src tools tests bench fuzz). Only files git tracks that end
# in .h, .hpp, .cc or .cpp are formatted; vendored code (.deps/) and build trees are never touched.
# --check: formats nothing, prints each file that would change and exits 1 if any would.
# CLANG_FORMAT: the clang-format program (default: clang-format).
# Exit status: 0 done (or nothing to change), 1 files differ (--check), 2 bad usage or no clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
paths=()
for a in "$@"; do
  case "$a" in
    --check) check=1 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "format.sh: unknown option '$a' (expected --check or paths)" >&2; exit 2 ;;
    *) paths+=("$a") ;;
  esac
done
[ ${#paths[@]} -eq 0 ] && paths=(src tools tests bench fuzz)

cf="${CLANG_FORMAT:-clang-format}"
if ! command -v "$cf" >/dev/null 2>&1; then
  echo "format.sh: '$cf' not found (install clang-format or set CLANG_FORMAT)" >&2
  exit 2
fi

mapfile -t files < <(git ls-files -- "${paths[@]}" | grep -E '\.(h|hpp|cc|cpp)$' || true)
[ ${#files[@]} -eq 0 ] && exit 0

if [ "$check" -eq 0 ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -n 32 "$cf" -i --style=file
  exit 0
fi

differ=0
for f in "${files[@]}"; do
  if ! "$cf" --style=file "$f" | cmp -s "$f" -; then
    echo "$f"
    differ=1
  fi
done
exit "$differ"
