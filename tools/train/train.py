"""K3-mini training loop. CPU, float32 master weights, deterministic given --seed.

Optimizers (algorithms.md §4): per-head Muon for 2-D/3-D matrices (except embedding and LM head),
AdamW for embeddings, head, norms, conv taps, A_log, dt_bias, AttnRes pseudo-queries.
Routing: sigmoid router, bias solved by Quantile Balancing after every step (§3.2), no aux loss.
Routed experts train through MXFP4 fake-quant with a straight-through estimator (§5.2).
Context curriculum: sequence length grows 64 → 128 → 256 at constant tokens per step.
LR: linear warmup, constant, linear decay to 10% over the last 30% of steps.
Logs one JSON line per log step: step, seq_len, loss, lr, tok/s, expert load max/min ratio.
Usage: python -m tools.train.train --data DIR --out DIR [--steps N] [--seed S] ...
"""
import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tools.train.config import mini_text_config
from tools.train.model import K3Model, init_weights
from tools.train.muon import Muon
from tools.train.quantile_balance import qb_solve
from tools.train.tokenizer import load_encoding

CURRICULUM = [(64, 0.25), (128, 0.35), (256, 0.40)]    # (seq_len, fraction of steps)


def model_config(args, vocab_size):
    return mini_text_config(vocab_size=vocab_size, hidden=args.hidden, kda_heads=args.kda_heads,
                            head_dim=args.head_dim, mla_heads=args.mla_heads,
                            n_experts=args.experts, top_k=args.top_k, moe_inter=args.moe_inter,
                            latent=args.latent, dense_inter=args.dense_inter)


def muon_blocks(model, cfg):
    """[(param, rows_per_block)] for Muon; the rest go to AdamW."""
    hd = cfg["linear_attn_config"]["head_dim"]
    mla_q = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    mla_kv = cfg["qk_nope_head_dim"] + cfg["v_head_dim"]
    muon, adam = [], []
    for name, p in model.named_parameters():
        if p.ndim >= 2 and "embed_tokens" not in name and "lm_head" not in name \
                and "conv1d" not in name and "res_proj" not in name:
            rb = None
            if any(name.endswith(f"self_attn.{x}_proj.weight") for x in "qkv"):
                rb = hd
            elif name.endswith("q_b_proj.weight"):
                rb = mla_q
            elif name.endswith("kv_b_proj.weight"):
                rb = mla_kv
            muon.append((p, rb))
        else:
            adam.append((name, p))
    return muon, adam


def lr_at(step, steps, base, warmup):
    if step < warmup:
        return base * (step + 1) / warmup
    d0 = int(0.7 * steps)
    if step < d0:
        return base
    return base * (1.0 - 0.9 * (step - d0) / max(1, steps - d0))


def seq_len_at(step, steps):
    acc = 0.0
    for L, frac in CURRICULUM:
        acc += frac
        if step < acc * steps:
            return L
    return CURRICULUM[-1][0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--tokens-per-step", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--kda-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--mla-heads", type=int, default=2)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--moe-inter", type=int, default=64)
    ap.add_argument("--latent", type=int, default=64)
    ap.add_argument("--dense-inter", type=int, default=384)
    ap.add_argument("--max-minutes", type=float, default=1e9,
                    help="safety stop; the run records the steps actually done")
    ap.add_argument("--log-every", type=int, default=10)
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    enc = load_encoding(Path(args.data) / "tiktoken.model")
    ids = np.array(enc.encode_ordinary((Path(args.data) / "train.txt").read_text()), dtype=np.int64)
    cfg = model_config(args, enc.n_vocab)
    model = K3Model(cfg)
    init_weights(model, args.seed)
    model.train()
    muon_p, adam_p = muon_blocks(model, cfg)
    muon = Muon(muon_p, lr=args.lr, weight_decay=0.01)
    adam = torch.optim.AdamW([
        {"params": [p for n, p in adam_p if "embed" in n or "lm_head" in n], "weight_decay": 0.01},
        {"params": [p for n, p in adam_p if not ("embed" in n or "lm_head" in n)], "weight_decay": 0.0},
    ], lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    n_params = sum(p.numel() for p in model.parameters())
    rng = np.random.default_rng(args.seed)
    log = open(out / "train_log.jsonl", "w")
    print(json.dumps({"params": n_params, "train_tokens": int(len(ids)), "args": vars(args)}),
          file=log, flush=True)
    t_start = time.time()
    t_last, tok_since = t_start, 0
    ema = None
    step = 0
    for step in range(args.steps):
        T = seq_len_at(step, args.steps)
        B = args.tokens_per_step // T
        starts = rng.integers(0, len(ids) - T - 1, size=B)
        batch = torch.from_numpy(np.stack([ids[s:s + T + 1] for s in starts]))
        lr = lr_at(step, args.steps, args.lr, args.warmup)
        for opt in (muon, adam):
            for g in opt.param_groups:
                g["lr"] = lr
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        loss.backward()
        muon.step(); adam.step()
        muon.zero_grad(set_to_none=True); adam.zero_grad(set_to_none=True)
        loads = []
        for moe in model.moe_layers():
            b = moe.gate.e_score_correction_bias
            b.copy_(qb_solve(moe.last_scores, b, moe.k))
            c = moe.last_counts.double()
            loads.append((c.max() / c.mean()).item())
        tok_since += B * T
        lv = loss.item()
        ema = lv if ema is None else 0.95 * ema + 0.05 * lv
        if step % args.log_every == 0 or step == args.steps - 1:
            now = time.time()
            rec = {"step": step, "seq_len": T, "loss": round(lv, 4), "loss_ema": round(ema, 4),
                   "lr": lr, "tok_per_s": round(tok_since / (now - t_last), 1),
                   "load_max_over_mean": round(max(loads), 3),
                   "load_max_over_mean_avg": round(sum(loads) / len(loads), 3),
                   "elapsed_s": round(now - t_start, 1)}
            print(json.dumps(rec), file=log, flush=True)
            t_last, tok_since = now, 0
        if (time.time() - t_start) / 60 > args.max_minutes:
            print(json.dumps({"stopped_early_at_step": step}), file=log, flush=True)
            break
    wall = time.time() - t_start
    torch.save({"cfg": cfg, "state_dict": model.state_dict(), "steps_done": step + 1,
                "wall_s": wall, "args": vars(args), "final_loss_ema": ema}, out / "trained.pt")
    print(json.dumps({"done": True, "steps_done": step + 1, "wall_s": round(wall, 1)}),
          file=log, flush=True)


if __name__ == "__main__":
    main()
