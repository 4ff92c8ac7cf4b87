#!/usr/bin/env bash
# Puts cpp-httplib 0.58.0 (MIT; httplib.h, httplib.cpp, LICENSE) into .deps/cpp-httplib-0.58.0/,
# the HTTP library of `k3 serve` (tools/server/CMakeLists.txt, K3_HTTPLIB_DIR). The files come
# from the pinned PyPI sdist of llama-cpp-python, which vendors llama.cpp's copy of cpp-httplib,
# fetched with pip and checked against the sha256 sums below. Idempotent: does nothing when the
# files are already there with these sums. Called by scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_CPP_PYTHON_VERSION=0.3.36   # its sdist vendors cpp-httplib 0.58.0 (as bench/side_by_side.sh pins)
DEST=.deps/cpp-httplib-0.58.0
SRC_IN_SDIST=llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp/vendor/cpp-httplib
declare -A SHA256=(
  [httplib.h]=8d093f6568679d72e555e935ee6b7fc24ce6aa1ab4f1c6f466726151f4a02a8b
  [httplib.cpp]=e5e5666fd1ec7114c726fd9e745c25d5f4fb7c9ba668bb7b2c105bf0755ee967
  [LICENSE]=4b45cbe16d7b71b89ae6127e26e0d90a029198ca5e958ad8e3d0b8bbed364d8b
)

all_good() {
  local f
  for f in "${!SHA256[@]}"; do
    [ -f "$1/$f" ] && [ "$(sha256sum "$1/$f" | cut -d' ' -f1)" = "${SHA256[$f]}" ] || return 1
  done
}

all_good "$DEST" && exit 0

mkdir -p .deps/sdist
sdist=.deps/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
if [ ! -f "$sdist" ]; then
  PIP=(.venv/bin/pip); [ -x .venv/bin/pip ] || PIP=(python3 -m pip)
  echo "fetch_httplib: downloading the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist (cpp-httplib 0.58.0 inside)" >&2
  # --no-binary names the package only: the build requirements pip installs to read the
  # sdist's metadata stay wheels.
  "${PIP[@]}" download -q --disable-pip-version-check --no-deps --no-binary llama-cpp-python \
    -d .deps/sdist "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
fi
tmp=$(mktemp -d .deps/extract.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$sdist" -C "$tmp" "$SRC_IN_SDIST/httplib.h" "$SRC_IN_SDIST/httplib.cpp" "$SRC_IN_SDIST/LICENSE"
if ! all_good "$tmp/$SRC_IN_SDIST"; then
  echo "fetch_httplib: sha256 mismatch in $sdist (expected cpp-httplib 0.58.0):" >&2
  (cd "$tmp/$SRC_IN_SDIST" && sha256sum httplib.h httplib.cpp LICENSE) >&2
  exit 1
fi
rm -rf "$DEST"
mkdir -p "$DEST"
cp "$tmp/$SRC_IN_SDIST/httplib.h" "$tmp/$SRC_IN_SDIST/httplib.cpp" "$tmp/$SRC_IN_SDIST/LICENSE" "$DEST/"
echo "fetch_httplib: cpp-httplib 0.58.0 in $DEST" >&2
