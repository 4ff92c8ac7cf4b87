#!/usr/bin/env bash
# Puts XGrammar 0.2.8's C++ core (Apache-2.0; cpp/, include/, its vendored picojson and dlpack
# headers, LICENSE, NOTICE) into .deps/xgrammar-0.2.8/, the constrained-decoding library of
# src/grammar (K3_XGRAMMAR_DIR). The files come from the pinned PyPI sdist of xgrammar, fetched
# with pip and checked against the sha256 sum below. Idempotent: does nothing when the tree is
# already there (the .sdist-sha256 stamp holds this sum). Called by scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

XGRAMMAR_VERSION=0.2.8
SDIST_SHA256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
DEST=.deps/xgrammar-$XGRAMMAR_VERSION

if [ -f "$DEST/.sdist-sha256" ] && [ "$(cat "$DEST/.sdist-sha256")" = "$SDIST_SHA256" ]; then exit 0; fi

mkdir -p .deps/sdist
sdist=.deps/sdist/xgrammar-$XGRAMMAR_VERSION.tar.gz
if [ ! -f "$sdist" ]; then
  PIP=(.venv/bin/pip); [ -x .venv/bin/pip ] || PIP=(python3 -m pip)
  echo "fetch_xgrammar: downloading the xgrammar $XGRAMMAR_VERSION sdist" >&2
  "${PIP[@]}" download -q --disable-pip-version-check --no-deps --no-binary xgrammar \
    -d .deps/sdist "xgrammar==$XGRAMMAR_VERSION"
fi
got=$(sha256sum "$sdist" | cut -d' ' -f1)
if [ "$got" != "$SDIST_SHA256" ]; then
  echo "fetch_xgrammar: sha256 mismatch for $sdist: expected $SDIST_SHA256, found $got" >&2
  exit 1
fi
tmp=$(mktemp -d .deps/extract.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
top=xgrammar-$XGRAMMAR_VERSION
tar -xzf "$sdist" -C "$tmp" "$top/cpp" "$top/include" "$top/3rdparty/picojson/picojson.h" \
  "$top/3rdparty/dlpack/include" "$top/LICENSE" "$top/NOTICE"
rm -rf "$DEST"
mv "$tmp/$top" "$DEST"
echo "$SDIST_SHA256" > "$DEST/.sdist-sha256"
echo "fetch_xgrammar: xgrammar $XGRAMMAR_VERSION C++ core in $DEST" >&2
