#!/usr/bin/env bash
# K3-mini-vision end to end: K3-mini (models/k3-mini) + a MoonViT-V2 tower and projector trained on
# generated pictures (tools/train/train_vision.py) -> models/k3-mini-vision/ (+ WORK/vision_eval.json).
# Usage: tools/train/train_k3_mini_vision.sh [WORK_DIR]   (from the repository root, after building
# build/tools/cli/k3 and the python extension build/python/_k3*.so)
# One thread (OMP_NUM_THREADS=1); OpenBLAS is fetched and preloaded as in train_k3_mini.sh.
set -euo pipefail
WORK=${1:-build/k3-mini-vision-train}
mkdir -p "$WORK"; WORK=$(cd "$WORK" && pwd)
OUT=models/k3-mini-vision
PY=${PY:-.venv/bin/python}
K3=${K3_BIN:-build/tools/cli/k3}
. tools/train/openblas_env.sh  # OpenBLAS for torch, one thread, PYTHONPATH=.
# The python package k3 (the engine's chat rendering) from this tree: python/k3 + the built extension.
PK="$WORK/pkg/k3"; mkdir -p "$PK"
cp python/k3/*.py python/k3/py.typed "$PK/" && cp build/python/_k3*.so "$PK/"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=.:$WORK/pkg
date -u +"start %FT%TZ"
$PY -m tools.train.train_vision --k3 "$K3" --base models/k3-mini --work "$WORK" --out "$OUT" ${K3_VISION_ARGS:-}
cp "$WORK/vision_eval.json" "$OUT/eval.json"
date -u +"end %FT%TZ"
