#!/usr/bin/env bash
# Side-by-side benchmark of k3 against llama.cpp.
#
#   bash bench/side_by_side.sh [--rounds R] [--skip-bench-model] [--bench-model DIR] [--setup-only]
#
# 1. creates .venv-llama (git-ignored; cached: rebuilt only when LLAMA_CPP_PYTHON_VERSION changes) and
#    pip-builds llama-cpp-python from its PyPI sdist with -march=native (GGML_NATIVE=ON), CPU only;
# 2. exports K3-mini and the bench model (/tmp/k3-bench, tools/reference/gen_bench_model.py) to GGUF
#    with tools/gguf_export (cached under $K3_SBS_CACHE, default /tmp/k3-sbs);
# 3. runs bench/side_by_side.py: greedy-token agreement on K3-mini, then both engines interleaved
#    for R rounds (pp64, pp512, tg32 at 1 and 2 threads, every k3 numeric mode), medians, and the
#    markdown ratio table (k3 / llama.cpp).
# Environment: K3_BIN (default build/tools/cli/k3), JOBS (llama.cpp build jobs, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_CPP_PYTHON_VERSION=0.3.36   # ships llama.cpp's kimi-k3 architecture (checked in its sdist; earlier releases not checked)
VENV=.venv-llama
SETUP_ONLY=0
ARGS=()
for a in "$@"; do
  case "$a" in
    --setup-only) SETUP_ONLY=1 ;;
    *) ARGS+=("$a") ;;
  esac
done

stamp="llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION native"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.installed" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$VENV"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"   # numpy from Debian (python3-numpy)
  echo "side_by_side: building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION from sdist (native CPU, ${JOBS:-2} jobs)" >&2
  t0=$(date +%s)
  CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DLLAVA_BUILD=OFF \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-2}" \
    nice "$VENV/bin/pip" install -q --disable-pip-version-check --no-binary llama-cpp-python \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
  t1=$(date +%s)
  echo "side_by_side: llama-cpp-python built in $((t1 - t0)) s" >&2
  echo "$((t1 - t0))" > "$VENV/.build_seconds"
  echo "$stamp" > "$VENV/.installed"
fi
# the exporter's gguf package, at the version pinned for CI's .venv
GGUF_PIN=$(grep -E '^gguf==' tools/requirements.txt | cut -d' ' -f1)
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('gguf') != '${GGUF_PIN#gguf==}')" 2>/dev/null; then
  "$VENV/bin/pip" install -q --disable-pip-version-check "$GGUF_PIN"
fi
[ "$SETUP_ONLY" = 1 ] && exit 0

exec "$VENV/bin/python" bench/side_by_side.py "${ARGS[@]}"
