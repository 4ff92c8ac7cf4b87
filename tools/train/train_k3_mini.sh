#!/usr/bin/env bash
# K3-mini end to end: data → BPE → train → export (bf16 trunk, MXFP4 experts) → eval
# (held-out ppl, unigram baseline, greedy references, sample) → models/k3-mini/.
# Usage: tools/train/train_k3_mini.sh [WORK_DIR]   (run from the repository root)
# Speed: torch from Debian links the reference netlib BLAS; if an OpenBLAS directory is given in
# K3_OPENBLAS_DIR (e.g. extracted from Debian's libopenblas0-pthread .deb) it is preloaded for
# these processes only. Threads: 1 (OpenMP spin-waits make 2 threads far slower on a shared box).
set -euo pipefail
WORK=${1:-build/k3-mini-train}
mkdir -p "$WORK"; WORK=$(cd "$WORK" && pwd)
OUT=models/k3-mini
PY=${PY:-.venv/bin/python}
STEPS=${K3_MINI_STEPS:-360}
. tools/train/openblas_env.sh  # OpenBLAS for torch, one thread, PYTHONPATH=.
mkdir -p "$WORK" "$OUT"
date -u +"start %FT%TZ"
$PY -m tools.train.data "$WORK"
$PY -m tools.train.bpe "$WORK/train.txt" 7936 "$WORK/tiktoken.model"
$PY -m tools.train.train --data "$WORK" --out "$WORK" --steps "$STEPS" --tokens-per-step 2048 \
    --warmup 20 --seed 1234 --max-minutes "${K3_MINI_MAX_MINUTES:-58}"
$PY -m tools.train.export --work "$WORK" --out "$OUT"
$PY -m tools.train.evaluate --work "$WORK" --model "$OUT"
date -u +"end %FT%TZ"
