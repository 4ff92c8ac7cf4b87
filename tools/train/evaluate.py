"""K3-mini evaluation with the EXPORTED weights (bf16 trunk, MXFP4 experts, F32 small tensors),
float32 compute. Writes into the model dir:
  heldout.txt, eval.json (held-out + train-slice perplexity, unigram baseline),
  greedy.json (3 prompts × 64 greedy ids, plus a sampled continuation of "And God said"),
  README.md (model card, via tools.train.model_card).

Perplexity (shared with `k3 perplexity`): tokenize the text as ONE string, no BOS; windows of n_ctx
tokens with stride n_ctx/2, each window a fresh state; window 0 = [0, n_ctx) scores targets
1..n_ctx−1; window k (start s = k·stride) covers [s, min(s+n_ctx, M)) and scores only targets not
scored before (s+n_ctx−stride .. end−1); ppl = exp(mean NLL) in float64.
Unigram baseline: train-split token frequencies with add-one smoothing over all vocab_size ids,
scored on the same targets.
Usage: python -m tools.train.evaluate --work WORK --model MODEL_DIR
"""
import argparse
import json
import math
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from tools.train.model import K3Model
from tools.train.tokenizer import load_encoding

PROMPTS = ["And God said", "In the beginning", "Blessed are the"]


def load_exported(work):
    ck = torch.load(Path(work) / "exported.pt")
    m = K3Model(ck["cfg"])
    m.load_state_dict(ck["state_dict"])
    for moe in m.moe_layers():
        moe.qat = False              # experts hold the dequantized MXFP4 values already
    return m.eval(), ck


def windows(M, n_ctx):
    """Yields (start, end, first_scored_target) per the shared perplexity definition."""
    stride = n_ctx // 2
    end = min(n_ctx, M)
    yield 0, end, 1
    scored_to, k = end, 1
    while scored_to < M:
        s = k * stride
        end = min(s + n_ctx, M)
        yield s, end, scored_to
        scored_to, k = end, k + 1


@torch.no_grad()
def window_nll(model, ids, n_ctx):
    """ids: int list [M]. Returns float64 array of NLL for targets 1..M−1 (index = target − 1)."""
    M = len(ids)
    nll = np.full(M - 1, np.nan)
    x = torch.tensor(ids)
    for s, e, first in windows(M, n_ctx):
        logp = torch.log_softmax(model(x[s:e][None])[0].double(), dim=-1)   # [e−s, V]
        tgt = torch.arange(first, e)
        nll[first - 1:e - 1] = -logp[tgt - 1 - s, x[tgt]].numpy()
    assert not np.isnan(nll).any()
    return nll


@torch.no_grad()
def greedy(model, ids, n):
    seq, out, margins = list(ids), [], []
    for _ in range(n):
        lg = model(torch.tensor([seq]))[0, -1]
        top = torch.topk(lg, 2)
        nxt = int(torch.argmax(lg))            # first maximum: lower id wins a tie
        out.append(nxt)
        margins.append(float(top.values[0] - top.values[1]))
        seq.append(nxt)
    return out, margins


@torch.no_grad()
def sample(model, ids, n, temp, seed):
    g = torch.Generator().manual_seed(seed)
    seq = list(ids)
    for _ in range(n):
        p = torch.softmax(model(torch.tensor([seq]))[0, -1].double() / temp, -1)
        seq.append(int(torch.multinomial(p, 1, generator=g)))
    return seq[len(ids):]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--n-ctx", type=int, default=256)
    ap.add_argument("--train-slice", type=int, default=16384)
    a = ap.parse_args()
    torch.set_num_threads(1)
    work, mdir = Path(a.work), Path(a.model)
    t0 = time.time()
    model, ck = load_exported(work)
    enc = load_encoding(mdir / "tiktoken.model")
    V = ck["cfg"]["vocab_size"]
    shutil.copy(work / "heldout.txt", mdir / "heldout.txt")
    held = enc.encode_ordinary((mdir / "heldout.txt").read_text())
    train = enc.encode_ordinary((work / "train.txt").read_text())
    nll = window_nll(model, held, a.n_ctx)
    tr_nll = window_nll(model, train[:a.train_slice], a.n_ctx)
    counts = np.bincount(np.array(train), minlength=V).astype(np.float64)
    logp_uni = np.log((counts + 1.0) / (counts.sum() + V))
    uni = -logp_uni[np.array(held[1:])]
    ev = {
        "definition": "one string, no BOS; window n_ctx, stride n_ctx/2, fresh state per window; "
                      "first window scores targets 1..n_ctx-1, later windows only unscored targets; "
                      "ppl = exp(mean NLL), float64",
        "weights": "exported: bf16 trunk, MXFP4 routed experts, F32 small tensors; fp32 compute",
        "n_ctx": a.n_ctx, "stride": a.n_ctx // 2,
        "heldout_tokens": len(held), "scored_tokens": int(nll.size),
        "heldout_mean_nll": float(nll.mean()), "heldout_ppl": float(math.exp(nll.mean())),
        "unigram_mean_nll": float(uni.mean()), "unigram_ppl": float(math.exp(uni.mean())),
        "train_slice_tokens": a.train_slice, "train_mean_nll": float(tr_nll.mean()),
        "train_ppl": float(math.exp(tr_nll.mean())),
        "final_train_loss_ema": ck["final_loss_ema"], "steps_done": ck["steps_done"],
        "train_wall_s": ck["wall_s"],
    }
    (mdir / "eval.json").write_text(json.dumps(ev, indent=2) + "\n")
    gr = {"weights": ev["weights"], "n_new": 64, "prompts": []}
    for p in PROMPTS:
        ids = enc.encode_ordinary(p)
        out, margins = greedy(model, ids, 64)
        gr["prompts"].append({"prompt": p, "prompt_ids": ids, "greedy_ids": out,
                              "text": enc.decode(out), "min_top2_logit_margin": min(margins)})
    sids = enc.encode_ordinary("And God said")
    s = sample(model, sids, 64, 0.8, 1)
    gr["sample"] = {"prompt": "And God said", "temperature": 0.8, "seed": 1, "ids": s,
                    "text": "And God said" + enc.decode(s)}
    (mdir / "greedy.json").write_text(json.dumps(gr, indent=2) + "\n")
    ev["eval_wall_s"] = time.time() - t0
    print(json.dumps(ev, indent=2))
    from tools.train.model_card import write_card
    write_card(work, mdir)


if __name__ == "__main__":
    main()
