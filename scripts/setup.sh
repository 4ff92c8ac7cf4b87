#!/usr/bin/env bash
# Installs what k3.cpp needs on Debian 12 (idempotent), creates the Python venv and builds
# the Release tree in build/. Usage: scripts/setup.sh [--asan]   (--asan also builds build-asan/)
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PKGS=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
  nlohmann-json3-dev libcli11-dev libssl-dev libpcre2-dev libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev
  python3 python3-venv python3-numpy python3-torch bible-kjv
  chromium chromium-driver python3-selenium  # tests/python/test_web_page.py (headless browser)
  libjs-marked node-dompurify libjs-highlight.js libjs-katex fonts-katex  # embedded into the chat page of k3 serve (tools/server/web/web.cmake)
  pybind11-dev python3-dev  # the Python module k3._k3 (python/, built with the Release tree)
  openmpi-bin libopenmpi-dev  # MPI: `mpirun -np N k3 ...` (docs/distributed.md) and the mpi.* ctest cases
  ibverbs-providers libhwloc-plugins  # Recommends of Open MPI's libibverbs and hwloc (apt-get below skips Recommends)
  libpng-dev libjpeg62-turbo-dev libwebp-dev  # image decoding (src/vision, k3_vision_image)
  python3-pil)  # tests/python/test_image_preprocess.py (the Pillow reference of the image preprocessing)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python: Debian's interpreter (so python3-torch / python3-numpy are importable) in a venv,
# plus pinned PyPI packages.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import numpy' 2>/dev/null; then
  rm -rf .venv
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
if ! cmp -s tools/requirements.txt .venv/.requirements.installed 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check -r tools/requirements.txt
  cp tools/requirements.txt .venv/.requirements.installed
fi

# cpp-httplib 0.58.0 (the HTTP library of k3 serve) into .deps/, checked by sha256.
./scripts/fetch_httplib.sh
# XGrammar 0.2.8's C++ core (constrained decoding, src/runtime/grammar_constraint.*) into .deps/,
# from its PyPI sdist, checked by sha256.
./scripts/fetch_xgrammar.sh

JOBS=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$JOBS"
if [ "${1:-}" = "--asan" ]; then
  # The sanitizer and fuzz trees carry line tables only (-g1: file:line in ASan, UBSan and
  # libFuzzer reports, a third less compile time than -g) and no MPI (the rank-split code runs in
  # them through tests/model/test_expert_parallel.cpp's thread communicator). The ASan tree builds
  # the test executables (k3_tests), which is what its ctest runs.
  DBG=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DK3_MPI=OFF)
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${DBG[@]}" -DK3_SANITIZE=ON \
        -DK3_BUILD_PYTHON=OFF >/dev/null
  cmake --build build-asan -j "$JOBS" --target k3_tests
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${DBG[@]}" -DCMAKE_CXX_COMPILER=clang++ \
        -DK3_FUZZ=ON -DK3_BUILD_TESTS=OFF -DK3_BUILD_BENCH=OFF -DK3_BUILD_PYTHON=OFF >/dev/null
  cmake --build build-fuzz -j "$JOBS" --target k3_fuzz_targets
fi
