"""Supervised fine-tuning of K3-mini into a chat model (issue 23): chat_tasks.sft_trajectory
conversations in the exact K3 chat format, loss on the assistant ids only.

Start: the published models/k3-mini weights (bf16 trunk, MXFP4 experts dequantized; the
pretraining pipeline keeps no fp32 master outside its work dir), loaded as fp32 masters by
distill.load_teacher.
Data: train-split tasks of every domain (chat_tasks.make_tasks(domain, "train", ...)), task i at
effort EFFORTS[i % 3], rendered by the engine's template (k3.LLM's render_chat: tools, thinking
on, thinking_effort=effort, so the effort system message is the template's). The loss mask covers,
for each assistant message, the ids after its generation prompt
(<|open|>message role="assistant"<|sep|><|open|>think<|sep|>) through its <|end_of_msg|>: the ids
the model samples. Tool results, the tool declaration, the effort and user messages are context.
Plain KJV text (train split: Genesis..Jude, the pretraining text, never Revelation) is mixed in
as whole-sequence LM batches (--text-every) so the base text perplexity is kept.
Copy batches (--copy-every): KJV train passages of 24..100 tokens written twice (or, for a
--copy-random fraction, KJV tokens drawn at random positions), loss on the second copy: plain-text practice at copying from the context, which the agentic tasks need (tool
arguments from the question, answers from tool results).
Retrieval drills (--drills N, build_drills): N more agentic train tasks rendered without the tool
declaration, each as its first assistant turn alone and as its whole trajectory, so the ids copied
from the question (tool arguments) and from the tool results (the answer) weigh more in the loss.
--init continues from an earlier stage's trained.pt (the K3-mini-chat pipeline runs five stages).
--threads sets torch's threads (OpenBLAS's come from the environment).
Batches: examples sorted by length and grouped up to --tokens-per-batch (right padding with
[PAD], masked out of the loss and of Quantile Balancing).
Training as pretraining (tools/train/train.py): per-head Muon + AdamW, MXFP4 QAT of the routed
experts (STE, moe.qat), router bias solved by Quantile Balancing after every step over the
non-pad tokens. LR: linear warmup over --warmup steps, constant, linear decay to 10% over the
last 30% of the wall-time budget.
Writes OUT/trained.pt (train.py's format: cfg, state_dict fp32, steps_done, wall_s, args,
final_loss_ema; tools.train.export exports it), OUT/tiktoken.model, OUT/sft_log.jsonl.
Usage: python -m tools.train.sft --base models/k3-mini --out /work/post/sft [--minutes 22]
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
import torch.nn.functional as F

from tools.train import chat_tasks as ct
from tools.train.distill import load_teacher
from tools.train.episodes import ChatRenderer
from tools.train.k3_import import import_k3
from tools.train.muon import Muon
from tools.train.quantile_balance import qb_solve
from tools.train.tokenizer import load_encoding
from tools.train.train import muon_blocks


def render_example(r: ChatRenderer, task: ct.Task, effort: str, *, declare_tools: bool = True,
                   turns: Optional[int] = None) -> tuple[list[int], list[int]]:
    """(ids, mask) of task.messages + sft_trajectory(task, effort) in the K3 chat format; mask 1 on
    every id an assistant turn samples (after its generation prompt, through <|end_of_msg|>).
    declare_tools False leaves the tool declaration out of the context (a retrieval drill, see
    build_drills); turns: keep only the first `turns` assistant turns (and the tool turns between)."""
    conv = list(task.messages)
    tools = task.tools if declare_tools else None
    ids: list[int] = r.render(conv, tools, effort, generation_prompt=False)
    mask = [0] * len(ids)
    traj = ct.sft_trajectory(task, effort)
    if turns is not None:
        if turns < 1:
            raise ValueError(f"render_example: turns must be >= 1 or None, got {turns}")
        idx = [i for i, m in enumerate(traj) if m["role"] == "assistant"]
        traj = traj[:idx[min(turns, len(idx)) - 1] + 1]
    for m in traj:
        if m["role"] == "assistant":
            prompt = r.render(conv, tools, effort, generation_prompt=True)
            if prompt[:len(ids)] != ids:
                raise RuntimeError(f"sft: render of {task.id} is not prefix-stable")
            ids, mask = prompt, mask + [0] * (len(prompt) - len(ids))
        conv.append(m)
        full = r.render(conv, tools, effort, generation_prompt=False)
        if full[:len(ids)] != ids:
            raise RuntimeError(f"sft: render of {task.id} is not prefix-stable")
        mask += [1 if m["role"] == "assistant" else 0] * (len(full) - len(ids))
        ids = full
    if ids[-1] != r.eom or mask[-1] != 1:
        raise RuntimeError(f"sft: {task.id} does not end with an assistant <|end_of_msg|>")
    return ids, mask


def build_examples(llm: Any, counts: dict[str, int], seed: int) -> list[dict[str, Any]]:
    r = ChatRenderer(llm)
    ex = []
    for d in ct.DOMAINS:
        for i, t in enumerate(ct.make_tasks(d, "train", counts[d], seed)):
            eff = ct.EFFORTS[i % len(ct.EFFORTS)]
            ids, mask = render_example(r, t, eff)
            ex.append({"id": t.id, "domain": d, "effort": eff, "ids": ids, "mask": mask})
    return ex


def build_drills(llm: Any, n: int, seed: int) -> list[dict[str, Any]]:
    """Retrieval drills: n agentic train tasks (drawn with seed + 7919, so mostly other tasks than
    build_examples' for the same seed; a task may occur in both) rendered without the tool declaration (~330 ids that every full example repeats), each as two
    examples: its first assistant turn only (the tool call, whose arguments come from the
    question) and its whole trajectory (the answer, copied from the tool result). The ids the
    model must copy from its context are ~3% of these examples' ids, ~0.7% of a full one's."""
    r = ChatRenderer(llm)
    ex = []
    for i, t in enumerate(ct.make_tasks("agentic", "train", n, seed + 7919)):
        eff = ct.EFFORTS[i % len(ct.EFFORTS)]
        for turns in (1, None):
            ids, mask = render_example(r, t, eff, declare_tools=False, turns=turns)
            ex.append({"id": t.id, "domain": "drill", "effort": eff, "ids": ids, "mask": mask})
    return ex


def make_batches(examples: list[dict[str, Any]], tokens: int, rng: random.Random) -> list[list[int]]:
    """Example indices grouped by length so that max_len x batch <= tokens (at least one each)."""
    order = sorted(range(len(examples)), key=lambda i: (len(examples[i]["ids"]), rng.random()))
    batches, cur, cur_max = [], [], 0
    for i in order:
        n = len(examples[i]["ids"])
        if cur and max(cur_max, n) * (len(cur) + 1) > tokens:
            batches.append(cur)
            cur, cur_max = [], 0
        cur.append(i)
        cur_max = max(cur_max, n)
    if cur:
        batches.append(cur)
    return batches


def kjv_train_text() -> str:
    """The pretraining split's text (tools/train/data.py: Genesis..Jude, one verse per line)."""
    return "".join(v.text + "\n" for v in ct.verses() if v.book != ct.HELDOUT_BOOK)


def main() -> None:
    ap = argparse.ArgumentParser(description="SFT of K3-mini on chat_tasks trajectories")
    ap.add_argument("--base", default="models/k3-mini")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--agentic", type=int, default=700, help="train tasks (one effort each)")
    ap.add_argument("--general", type=int, default=1000)
    ap.add_argument("--writing", type=int, default=700)
    ap.add_argument("--drills", type=int, default=0,
                    help="agentic train tasks rendered as retrieval drills (build_drills: two short examples each)")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--tokens-per-batch", type=int, default=2048)
    ap.add_argument("--text-every", type=int, default=4, help="one KJV text batch after every N chat batches")
    ap.add_argument("--text-seq", type=int, default=256)
    ap.add_argument("--copy-every", type=int, default=0,
                    help="one copy batch after every N chat batches (0: none): KJV passages written twice, "
                         "loss on the second copy (teaches the model to copy from its context)")
    ap.add_argument("--copy-random", type=float, default=0.0,
                    help="fraction of copy sequences made of KJV tokens drawn at random positions (no "
                         "n-gram structure, so only copying lowers their loss) instead of a passage")
    ap.add_argument("--init", default=None,
                    help="start from this trained.pt (an earlier SFT stage) instead of --base's weights")
    ap.add_argument("--minutes", type=float, default=22.0, help="wall-time budget of the training loop")
    ap.add_argument("--max-steps", type=int, default=10**9)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "sft_log.jsonl", "w")
    t_data = time.time()
    k3 = import_k3()
    with k3.LLM(a.base, threads=1, n_parallel=1, n_ctx=4096, cache_ram_mib=0) as llm:
        examples = build_examples(llm, {"agentic": a.agentic, "general": a.general, "writing": a.writing}, a.seed)
        examples += build_drills(llm, a.drills, a.seed)
        pad = llm.tokenize("[PAD]", special=True)[0]
    enc = load_encoding(Path(a.base) / "tiktoken.model")
    text = np.array(enc.encode_ordinary(kjv_train_text()), dtype=np.int64)
    model, tc = load_teacher(a.base)
    if a.init:
        ck = torch.load(a.init)
        model.load_state_dict(ck["state_dict"])
    for moe in model.moe_layers():
        moe.qat = True
    model.train()
    muon_p, adam_p = muon_blocks(model, tc)
    muon = Muon(muon_p, lr=a.lr, weight_decay=0.01)
    adam = torch.optim.AdamW([
        {"params": [p for n, p in adam_p if "embed" in n or "lm_head" in n], "weight_decay": 0.01},
        {"params": [p for n, p in adam_p if not ("embed" in n or "lm_head" in n)], "weight_decay": 0.0},
    ], lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    rng = random.Random(a.seed)
    nrng = np.random.default_rng(a.seed)
    stats = {d: {"examples": sum(e["domain"] == d for e in examples),
                 "tokens": sum(len(e["ids"]) for e in examples if e["domain"] == d),
                 "loss_tokens": sum(sum(e["mask"]) for e in examples if e["domain"] == d)}
             for d in (*ct.DOMAINS, "drill")}
    print(json.dumps({"args": vars(a), "data": stats, "text_tokens": int(len(text)),
                      "data_s": round(time.time() - t_data, 1)}), file=log, flush=True)

    def chat_batch(idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        T = max(len(examples[i]["ids"]) for i in idx)
        ids = torch.full((len(idx), T), pad, dtype=torch.int64)
        m = torch.zeros((len(idx), T), dtype=torch.bool)
        for j, i in enumerate(idx):
            e = examples[i]
            ids[j, :len(e["ids"])] = torch.tensor(e["ids"])
            m[j, :len(e["mask"])] = torch.tensor(e["mask"], dtype=torch.bool)
        return ids, m

    def text_batch() -> tuple[torch.Tensor, torch.Tensor]:
        B = max(1, a.tokens_per_batch // a.text_seq)
        st = nrng.integers(0, len(text) - a.text_seq - 1, size=B)
        ids = torch.from_numpy(np.stack([text[s:s + a.text_seq + 1] for s in st]))
        m = torch.ones_like(ids, dtype=torch.bool)
        m[:, 0] = False
        return ids, m

    def copy_batch() -> tuple[torch.Tensor, torch.Tensor]:
        lens = nrng.integers(24, 101, size=max(1, a.tokens_per_batch // 201))
        T = 2 * int(lens.max())
        ids = torch.full((len(lens), T), pad, dtype=torch.int64)
        m = torch.zeros((len(lens), T), dtype=torch.bool)
        for j, L in enumerate(lens.tolist()):
            if nrng.random() < a.copy_random:
                p = torch.from_numpy(text[nrng.integers(0, len(text), size=L)])
            else:
                s0 = int(nrng.integers(0, len(text) - L - 1))
                p = torch.from_numpy(text[s0:s0 + L])
            ids[j, :L], ids[j, L:2 * L] = p, p
            m[j, L:2 * L] = True
        return ids, m

    t0 = time.time()
    step, epoch, ema = 0, 0, {}
    queue: list[list[int]] = []
    n_chat = 0
    while step < a.max_steps:
        el = (time.time() - t0) / 60
        if el > a.minutes:
            break
        if not queue:
            queue = make_batches(examples, a.tokens_per_batch, rng)
            rng.shuffle(queue)
            epoch += 1
        if a.text_every > 0 and n_chat and n_chat % a.text_every == 0 and ema.get("_last") == "chat":
            ids, m = text_batch()
            kind = "text"
        elif a.copy_every > 0 and n_chat and n_chat % a.copy_every == 0 and ema.get("_last") in ("chat", "text"):
            ids, m = copy_batch()
            kind = "copy"
        else:
            idx = queue.pop()
            ids, m = chat_batch(idx)
            kind = "chat"
            n_chat += 1
            dom = examples[idx[0]]["domain"]
        ema["_last"] = kind
        frac = el / a.minutes
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (1.0 if frac < 0.7 else 1.0 - 0.9 * (frac - 0.7) / 0.3)
        for opt in (muon, adam):
            for g in opt.param_groups:
                g["lr"] = lr
        logits = model(ids[:, :-1])
        tgt_mask = m[:, 1:]                      # target ids[t + 1] is scored when it is a loss id
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
        loss = (nll * tgt_mask.reshape(-1)).sum() / tgt_mask.sum().clamp(min=1)
        loss.backward()
        muon.step(); adam.step()
        muon.zero_grad(set_to_none=True); adam.zero_grad(set_to_none=True)
        real = (ids[:, :-1] != pad).reshape(-1)
        for moe in model.moe_layers():
            b = moe.gate.e_score_correction_bias
            b.copy_(qb_solve(moe.last_scores[real], b, moe.k))
        lv = loss.item()
        ema[kind] = lv if kind not in ema else 0.95 * ema[kind] + 0.05 * lv
        if kind == "chat":  # per domain of the batch's first example (batches group similar lengths)
            k = "chat_" + dom
            ema[k] = lv if k not in ema else 0.9 * ema[k] + 0.1 * lv
        if step % a.log_every == 0:
            print(json.dumps({"step": step, "epoch": epoch, "kind": kind, "loss": round(lv, 4),
                              "ema_chat": round(ema.get("chat", 0.0), 4), "ema_text": round(ema.get("text", 0.0), 4),
                              "ema_copy": round(ema.get("copy", 0.0), 4),
                              **{f"ema_{d}": round(ema[f"chat_{d}"], 4) for d in (*ct.DOMAINS, "drill") if f"chat_{d}" in ema},
                              "lr": round(lr, 6), "shape": list(ids.shape),
                              "elapsed_s": round(time.time() - t0, 1)}), file=log, flush=True)
        step += 1
    wall = time.time() - t0
    torch.save({"cfg": tc, "state_dict": model.state_dict(), "steps_done": step, "wall_s": wall,
                "args": vars(a), "final_loss_ema": ema.get("chat"), "base": str(a.base)}, out / "trained.pt")
    shutil.copy(Path(a.base) / "tiktoken.model", out / "tiktoken.model")
    print(json.dumps({"done": True, "steps_done": step, "epochs": epoch, "wall_s": round(wall, 1),
                      "ema_chat": ema.get("chat"), "ema_text": ema.get("text")}), file=log, flush=True)


if __name__ == "__main__":
    main()
