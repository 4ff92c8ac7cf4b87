#!/usr/bin/env bash
# K3-mini-chat end to end (issue 23): SFT -> nine RL teachers (3 domains x 3 efforts, budget rule)
# -> MOPD student + the two alternatives (off-policy distillation, RL at max only) -> held-out eval
# of every model -> export to models/k3-mini-chat -> base-text perplexity -> model card.
# Usage: tools/train/post_train_k3_mini_chat.sh [WORK_DIR]   (from the repository root, after
#        tools/train/train_k3_mini.sh's models/k3-mini and a build of `k3` and the k3_python target)
# SFT_CKPT=PATH reuses an SFT checkpoint (train.py format) instead of running the five SFT stages.
# Sizes (env): MAX_TOKENS, SFT_MINUTES (SFT stage 1), RL_ITERS, RL_POOL (train tasks per domain with a b0), RL_MINUTES (per teacher), RL_LR (RL; MOPD_LR defaults to it), WRITING_TEMP (writing teachers' sampling), MOPD_LR, MOPD_TEMP, MOPD_ITERS, EVAL_N.
# A rerun with the same WORK_DIR skips the stages whose output exists (times.jsonl keeps appending).
# Threads: 1 (torch, OpenBLAS, k3.LLM) except SFT stages 4-5 (torch on 2); the time of each stage goes
# to WORK/times.jsonl.
set -euo pipefail
WORK=${1:-build/k3-mini-chat-train}
mkdir -p "$WORK"; WORK=$(cd "$WORK" && pwd)
OUT=models/k3-mini-chat
PY=${PY:-.venv/bin/python}
K3=${K3_BIN:-build/tools/cli/k3}
TOK=models/k3-mini/tiktoken.model
RL_ITERS=${RL_ITERS:-4}
RL_MINUTES=${RL_MINUTES:-5}
RL_LR=${RL_LR:-1e-4}
RL_POOL=${RL_POOL:-16}
MOPD_ITERS=${MOPD_ITERS:-8}
EVAL_N=${EVAL_N:-30}
# Ids per assistant turn (rollouts and eval): a tool call in the chat format costs ~110 ids and max
# effort thinks ~60, so 160 cuts agentic max-effort turns short.
MAX_TOKENS=${MAX_TOKENS:-256}
. tools/train/openblas_env.sh  # OpenBLAS for torch, one thread, PYTHONPATH=.
stage() {  # stage NAME DONE_FILE CMD...: runs CMD unless DONE_FILE exists (a rerun resumes);
           # appends {"stage", "s"} to WORK/times.jsonl
  local name=$1 done_file=$2 t=$SECONDS; shift 2
  if [ -e "$done_file" ]; then echo "== $name: done ($done_file)"; return; fi
  echo "== $name ($(date -u +%T))"
  "$@"
  echo "{\"stage\": \"$name\", \"s\": $((SECONDS - t))}" >> "$WORK/times.jsonl"
}
if [ -n "${SFT_CKPT:-}" ]; then
  SFT=$SFT_CKPT
else
  # the five SFT stages (tools/train/sft_stages.sh), each a resumable stage of this pipeline
  . tools/train/sft_stages.sh
  sft() { local name=$1 dir=$2; shift 2
    stage "sft $name" "$WORK/$dir/trained.pt" $PY -m tools.train.sft --base models/k3-mini --out "$WORK/$dir" "$@"; }
  sft_stages sft "$WORK"
  SFT=$WORK/sft-drill2/trained.pt
fi
RLARGS=(--iters "$RL_ITERS" --max-minutes "$RL_MINUTES" --pool "$RL_POOL" --tasks-per-iter 4 --n-samples 4 --lr "$RL_LR" --max-tokens "$MAX_TOKENS")
# Writing teachers sample at temperature WRITING_TEMP with more, larger steps, so that the loops of
# greedy decoding occur in their rollouts and the format gate of the reward (0 for a turn that does
# not end) can teach them to end their turns.
WARGS=(--iters 12 --max-minutes 8 --pool "$RL_POOL" --tasks-per-iter 4 --n-samples 4 --lr 3e-4 --max-tokens "$MAX_TOKENS"
       --temperature "${WRITING_TEMP:-0.5}")
for d in agentic general writing; do
  for e in low high max; do
    if [ $d = writing ]; then args=("${WARGS[@]}"); else args=("${RLARGS[@]}"); fi
    stage "teacher $d/$e" "$WORK/teachers/$d-$e/model/config.json" $PY -m tools.train.rl --init "$SFT" --tokenizer $TOK --domains $d --efforts $e \
      --out "$WORK/teachers/$d-$e" --seed 1 "${args[@]}"
  done
done
$PY -c "import json, sys; w = sys.argv[1]; json.dump({f'{d}/{e}': f'{w}/teachers/{d}-{e}/model'
  for d in ('agentic', 'general', 'writing') for e in ('low', 'high', 'max')}, open(f'{w}/teachers.json', 'w'), indent=1)" "$WORK"
# MOPD (and its off-policy alternative) samples at MOPD_TEMP, so the student's own loops are among
# the tokens its teachers score.
MARGS=(--iters "$MOPD_ITERS" --pool 24 --tasks-per-iter 2 --n-samples 2 --lr "${MOPD_LR:-$RL_LR}" --max-tokens "$MAX_TOKENS"
       --temperature "${MOPD_TEMP:-0.5}")
stage "MOPD student" "$WORK/mopd/model/config.json" $PY -m tools.train.mopd --init "$SFT" --tokenizer $TOK --teachers "$WORK/teachers.json" \
  --out "$WORK/mopd" --mode onpolicy "${MARGS[@]}"
stage "alternative: off-policy distillation" "$WORK/offpolicy/model/config.json" $PY -m tools.train.mopd --init "$SFT" --tokenizer $TOK \
  --teachers "$WORK/teachers.json" --out "$WORK/offpolicy" --mode offpolicy "${MARGS[@]}"
stage "alternative: RL at max only" "$WORK/rl-max/model/config.json" $PY -m tools.train.rl --init "$SFT" --tokenizer $TOK \
  --domains agentic,general,writing --efforts max --out "$WORK/rl-max" --seed 3 \
  --iters "$RL_ITERS" --max-minutes "$((RL_MINUTES * 3))" --pool "$RL_POOL" --tasks-per-iter 2 --n-samples 4 --lr "$RL_LR" --max-tokens "$MAX_TOKENS"
$PY -c "import sys; from tools.train.rl import load_policy, export_policy
m, c = load_policy(sys.argv[1]); export_policy(m, c, sys.argv[2], sys.argv[3])" "$SFT" $TOK "$WORK/sft-model"
ev() { $PY -m tools.train.chat_eval --n "$EVAL_N" --n-parallel 8 --max-tokens "$MAX_TOKENS" "$@"; }
evals() {
  mkdir -p "$WORK/eval"
  ev --model "$WORK/sft-model" --out "$WORK/eval/sft.json"
  ev --model "$WORK/mopd/model" --out "$WORK/eval/mopd.json"
  ev --model "$WORK/offpolicy/model" --out "$WORK/eval/offpolicy.json"
  ev --model "$WORK/rl-max/model" --out "$WORK/eval/rl-max.json"
  for d in agentic general writing; do
    for e in low high max; do
      ev --model "$WORK/teachers/$d-$e/model" --domains $d --efforts $e --out "$WORK/eval/teacher-$d-$e.json"
    done
  done
}
stage "held-out eval" "$WORK/eval/teacher-writing-max.json" evals
# The student becomes models/k3-mini-chat (weights, tokenizer, config; eval files; card).
mkdir -p $OUT
rm -f $OUT/model-*.safetensors
cp "$WORK/mopd/model/"* $OUT/
cp "$WORK/eval/mopd.json" $OUT/chat_eval.json
$PY -c "import json, pathlib, sys; w = pathlib.Path(sys.argv[1]); json.dump({p.stem: json.loads(p.read_text())['results']
  for p in sorted((w / 'eval').glob('*.json'))}, open(sys.argv[2], 'w'), indent=1)" "$WORK" $OUT/eval_all.json
"$K3" info --check $OUT >/dev/null
ppl() { "$K3" perplexity -m "$1" -f models/k3-mini/heldout.txt -c 256 -t 1 --numerics exact --json; }
echo "{\"base\": $(ppl models/k3-mini), \"chat\": $(ppl $OUT)}" > "$WORK/ppl.json"
$PY -m tools.train.chat_model_card --work "$WORK" --model $OUT
date -u +"end %FT%TZ"
