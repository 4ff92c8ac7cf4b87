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
# Five stages, each from the last one's fp32 state (the same as post_train_k3_mini_chat.sh's):
# chat; copy (KJV passages and random KJV tokens written twice); copy + text; retrieval drills
# (agentic tasks without the tool declaration); drills + copy (4 and 5: torch on both cores).
# WORK/trained.pt is the last.
sft() { local dir=$1; shift
  [ -e "$WORK/$dir/trained.pt" ] || $PY -m tools.train.sft --base models/k3-mini --out "$WORK/$dir" "$@"; }
sft 1-chat --minutes "$MINUTES" --seed 1234 --agentic 700 --general 1000 --writing 700
sft 2-copy --init "$WORK/1-chat/trained.pt" --seed 99 --agentic 1500 --general 300 --writing 200 \
  --copy-every 1 --copy-random 0.5 --minutes 36
sft 3-text --init "$WORK/2-copy/trained.pt" --seed 7 --agentic 1200 --general 300 --writing 200 \
  --lr 1e-3 --text-every 2 --copy-every 1 --copy-random 0.5 --minutes 15
OPENBLAS_NUM_THREADS=2 sft 4-drill --init "$WORK/3-text/trained.pt" --seed 11 --agentic 800 --general 1000 \
  --writing 700 --drills 2500 --lr 1e-3 --copy-every 4 --copy-random 0.5 --minutes 40 --threads 2
OPENBLAS_NUM_THREADS=2 sft 5-drill2 --init "$WORK/4-drill/trained.pt" --seed 13 --agentic 800 --general 600 \
  --writing 1200 --drills 2500 --lr 7e-4 --copy-every 2 --copy-random 0.5 --minutes 25 --threads 2
cp "$WORK/5-drill2/trained.pt" "$WORK/5-drill2/tiktoken.model" "$WORK/"
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
