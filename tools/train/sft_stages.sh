# The five SFT stages of K3-mini-chat (models/k3-mini-chat/sft_stage.md), the one list that
# post_train_k3_mini_chat.sh and sft_k3_mini_chat.sh both run. Source it, then call
#   sft_stages RUNNER WORK
# RUNNER is called once per stage, in order, as `RUNNER NAME DIR SFT_ARGS...`; it runs
# `python -m tools.train.sft --base models/k3-mini --out WORK/DIR SFT_ARGS...` (or skips a done
# stage). Each stage starts from the last one's WORK/DIR/trained.pt; the last is WORK/sft-drill2.
# 1. chat: the format; 2. copy: KJV passages and random KJV tokens written twice (the random ones'
# loss falls only once a copying circuit forms); 3. copy + text: the base text's perplexity back;
# 4. retrieval drills: agentic tasks without the tool declaration, so that the ids copied from the
# question and the tool results are a larger share of the loss; 5. drills with more copy batches and
# writing tasks. Stages 4-5 run torch on both cores (OPENBLAS_NUM_THREADS=2 for that call only).
# SFT_MINUTES (env): stage 1's wall-time budget (default 22).
sft_stages() {
  local run=$1 work=$2
  "$run" "1/5: chat" sft --minutes "${SFT_MINUTES:-22}" --seed 1234 --agentic 700 --general 1000 --writing 700
  "$run" "2/5: copy" sft-copy --init "$work/sft/trained.pt" --seed 99 --agentic 1500 --general 300 --writing 200 \
    --copy-every 1 --copy-random 0.5 --minutes 36
  "$run" "3/5: copy + text" sft-text --init "$work/sft-copy/trained.pt" --seed 7 --agentic 1200 --general 300 \
    --writing 200 --lr 1e-3 --text-every 2 --copy-every 1 --copy-random 0.5 --minutes 15
  OPENBLAS_NUM_THREADS=2 "$run" "4/5: retrieval drills" sft-drill --init "$work/sft-text/trained.pt" --seed 11 \
    --agentic 800 --general 1000 --writing 700 --drills 2500 --lr 1e-3 --copy-every 4 --copy-random 0.5 \
    --minutes 40 --threads 2
  OPENBLAS_NUM_THREADS=2 "$run" "5/5: drills + copy" sft-drill2 --init "$work/sft-drill/trained.pt" --seed 13 \
    --agentic 800 --general 600 --writing 1200 --drills 2500 --lr 7e-4 --copy-every 2 --copy-random 0.5 \
    --minutes 25 --threads 2
}
