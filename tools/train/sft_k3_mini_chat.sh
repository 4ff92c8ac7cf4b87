#!/usr/bin/env bash
# K3-mini-chat, the SFT stage (issue 23): chat-task SFT of models/k3-mini in five stages (about
# 140 min) -> fp32 state in WORK/trained.pt
# -> export (bf16 trunk, MXFP4 experts) to models/k3-mini-chat -> k3 info --check -> perplexity of
# K3-mini's held-out text before / after -> greedy held-out chat evaluation (chat_eval.json).
# Usage: tools/train/sft_k3_mini_chat.sh [WORK_DIR]   (run from the repository root, after the build)
# Threads: 1 (a shared 2-core machine), 2 in stages 4-5; K3_OPENBLAS_DIR as in train_k3_mini.sh.
set -euo pipefail
WORK=${1:-build/k3-mini-chat-sft}
mkdir -p "$WORK"; WORK=$(cd "$WORK" && pwd)
OUT=models/k3-mini-chat
PY=${PY:-.venv/bin/python}
K3=${K3_BIN:-build/tools/cli/k3}
MINUTES=${K3_SFT_MINUTES:-22}
. tools/train/openblas_env.sh  # OpenBLAS for torch, one thread, PYTHONPATH=.
date -u +"start %FT%TZ"
# The five stages of tools/train/sft_stages.sh (the same as post_train_k3_mini_chat.sh's), each
# skipped when its trained.pt exists; WORK/trained.pt is the last.
. tools/train/sft_stages.sh
sft() { local dir=$2; shift 2
  [ -e "$WORK/$dir/trained.pt" ] || $PY -m tools.train.sft --base models/k3-mini --out "$WORK/$dir" "$@"; }
SFT_MINUTES=$MINUTES sft_stages sft "$WORK"
cp "$WORK/sft-drill2/trained.pt" "$WORK/sft-drill2/tiktoken.model" "$WORK/"
$PY -m tools.train.export --work "$WORK" --out "$OUT"
cmp models/k3-mini/tiktoken.model "$OUT/tiktoken.model"
cmp models/k3-mini/tokenizer_config.json "$OUT/tokenizer_config.json"
"$K3" info "$OUT" --check > "$WORK/info_check.txt"
for m in models/k3-mini "$OUT"; do
  "$K3" perplexity -m "$m" -f models/k3-mini/heldout.txt -c 256 -t 1 --numerics exact --json 2>/dev/null \
    > "$WORK/ppl_$(basename "$m").json"
done
$PY -m tools.train.chat_eval --model "$OUT" --out "$OUT/chat_eval.json" --n 30 --threads 1 --max-tokens 256
date -u +"end %FT%TZ"
