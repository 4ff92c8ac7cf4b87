#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the whole test suite:
# GoogleTest (Release and ASan+UBSan builds), the Python tests (reference, tokenizer vs
# tiktoken, trainer), and bounded fuzzing runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --asan
export K3_ROOT="$PWD"
echo "== ctest (Release) =="
ctest --test-dir build --output-on-failure -j 2
echo "== ctest (ASan+UBSan) =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j 2 -LE slow
echo "== fuzz (bounded) =="
bash fuzz/run.sh 20  # every target 20 s, one per CPU at a time; the parser libraries are instrumented (fuzz/CMakeLists.txt)
echo "== pytest =="
.venv/bin/python -m pytest -q tests/python
