"""K3-nano: a small K3-architecture draft model distilled from K3-mini.

Teacher: K3-mini loaded in torch from its EXPORTED checkpoint (models/k3-mini: bf16 trunk, MXFP4
experts dequantized, so the teacher is exactly the published model, fp32 compute).
Student: same tokenizer and vocab, 4 layers (KDA at 1-indexed 1, 2, 3, MLA at 4; layer 0 dense,
1..3 LatentMoE), hidden 64, trained with the existing trainer's model, Muon + AdamW and Quantile
Balancing (tools/train/train.py).

Two phases, both bounded by wall time:
  1. warm-up (logit distillation): teacher-forced on training text, loss = forward KL
     KL(p_teacher || p_student) over the full vocabulary plus 0.1 x cross-entropy on the text.
  2. on-policy distillation (MOPD, algorithms.md §7): the student samples a
     continuation (temperature 1) of a training-text prefix; the teacher scores every sampled token;
     token reward r_t = clip(log p_teacher(x_t) - log p_student(x_t), -R, R) (no future sum: the
     per-token reverse-KL estimator); loss = -mean(r_t.detach() * log p_student(x_t)), plus the
     warm-up loss on the prefix (weight 0.5) so the model keeps its teacher-forced fit.
Writes WORK/trained.pt in train.py's format (so tools.train.export exports it) and
WORK/distill_log.jsonl.
Usage: python -m tools.train.distill --teacher models/k3-mini --data WORK --out WORK
"""
import argparse
import json
import sys
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
from tools.train.train import muon_blocks

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reference"))
import k3_checkpoint as kc  # noqa: E402


def nano_text_config(vocab_size):
    """K3-mini's text_config shrunk: 4 layers (KDA, KDA, KDA, MLA), hidden 64, 8 experts top-2."""
    tc = mini_text_config(vocab_size=vocab_size, hidden=64, kda_heads=1, head_dim=64, mla_heads=2,
                          n_experts=8, top_k=2, moe_inter=32, latent=32, dense_inter=192)
    tc["num_hidden_layers"] = 4
    tc["q_lora_rank"] = 64
    tc["linear_attn_config"]["kda_layers"] = [1, 2, 3]
    tc["linear_attn_config"]["full_attn_layers"] = [4]
    return tc


def load_teacher(model_dir):
    """K3Model holding exactly the published weights of `model_dir` (fp32), in eval mode."""
    cfg, t = kc.read_checkpoint(str(model_dir))
    tc = dict(cfg["text_config"])
    m = K3Model(tc)
    sd = m.state_dict()
    new = {}
    for k, v in sd.items():
        if k in t:
            a = np.asarray(t[k], dtype=np.float32)
            if k.endswith("A_log"):
                a = a.reshape(-1)[:v.numel()]
            new[k] = torch.from_numpy(a.copy()).reshape(v.shape)
        elif ".experts_w" in k:                       # model.layers.i.block_sparse_moe.experts_wN
            base, w = k.rsplit(".experts_", 1)
            rows = [kc.mxfp4_dequantize(np.asarray(t[f"{base}.experts.{e}.{w}.weight_packed"]),
                                        np.asarray(t[f"{base}.experts.{e}.{w}.weight_scale"]))
                    for e in range(v.shape[0])]
            new[k] = torch.from_numpy(np.stack(rows).astype(np.float32)).reshape(v.shape)
        else:
            raise KeyError(f"{model_dir}: no tensor for teacher parameter {k}")
    m.load_state_dict(new)
    for moe in m.moe_layers():
        moe.qat = False
    return m.eval(), tc


def kd_loss(student_logits, teacher_logits, targets):
    """Forward KL(p_t || p_s) per token (mean) + 0.1 x cross-entropy on the text targets."""
    lt = F.log_softmax(teacher_logits, -1)
    ls = F.log_softmax(student_logits, -1)
    kl = (lt.exp() * (lt - ls)).sum(-1).mean()
    ce = F.cross_entropy(student_logits.reshape(-1, student_logits.shape[-1]), targets.reshape(-1))
    return kl + 0.1 * ce, kl


@torch.no_grad()
def sample_continuations(model, prefix, n_new, gen):
    """prefix [B, P] int64 -> [B, P + n_new], sampled at temperature 1 (no cache: a full forward
    per new token; the student is small)."""
    seq = prefix
    for _ in range(n_new):
        p = torch.softmax(model(seq)[:, -1].double(), -1)
        seq = torch.cat([seq, torch.multinomial(p, 1, generator=gen)], 1)
    return seq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher", required=True)
    ap.add_argument("--data", required=True, help="dir with train.txt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--warmup-minutes", type=float, default=18)
    ap.add_argument("--onpolicy-minutes", type=float, default=10)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prefix", type=int, default=32)
    ap.add_argument("--new", type=int, default=24)
    ap.add_argument("--onpolicy-batch", type=int, default=8)
    ap.add_argument("--clip", type=float, default=5.0, help="R of clip(log pt - log ps, -R, R)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    teacher, ttc = load_teacher(a.teacher)
    enc = load_encoding(Path(a.teacher) / "tiktoken.model")
    ids = np.array(enc.encode_ordinary((Path(a.data) / "train.txt").read_text()), dtype=np.int64)
    cfg = nano_text_config(ttc["vocab_size"])
    student = K3Model(cfg)
    init_weights(student, a.seed)
    student.train()
    muon_p, adam_p = muon_blocks(student, cfg)
    muon = Muon(muon_p, lr=a.lr, weight_decay=0.01)
    adam = torch.optim.AdamW([p for _, p in adam_p], lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                             weight_decay=0.0)
    n_params = sum(p.numel() for p in student.parameters())
    rng = np.random.default_rng(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    log = open(out / "distill_log.jsonl", "w")
    print(json.dumps({"params": n_params, "teacher": str(a.teacher), "args": vars(a)}), file=log, flush=True)
    total_min = a.warmup_minutes + a.onpolicy_minutes
    t0 = time.time()

    def text_batch(B, T):
        st = rng.integers(0, len(ids) - T - 1, size=B)
        return torch.from_numpy(np.stack([ids[s:s + T + 1] for s in st]))

    def step_opt(loss, lr):
        for opt in (muon, adam):
            for g in opt.param_groups:
                g["lr"] = lr
        loss.backward()
        muon.step(); adam.step()
        muon.zero_grad(set_to_none=True); adam.zero_grad(set_to_none=True)
        for moe in student.moe_layers():
            b = moe.gate.e_score_correction_bias
            b.copy_(qb_solve(moe.last_scores, b, moe.k))

    step, phase = 0, "warmup"
    while True:
        el = (time.time() - t0) / 60
        if el > total_min:
            break
        if phase == "warmup" and el > a.warmup_minutes:
            phase = "onpolicy"
        # LR: 20-step warmup, constant, linear decay to 10% over the last 30% of the wall budget.
        frac = el / total_min
        lr = a.lr * min(1.0, (step + 1) / 20) * (1.0 if frac < 0.7 else 1.0 - 0.9 * (frac - 0.7) / 0.3)
        rec = {"step": step, "phase": phase, "lr": round(lr, 6)}
        if phase == "warmup":
            b = text_batch(a.batch, a.seq_len)
            with torch.no_grad():
                tl = teacher(b[:, :-1])
            loss, kl = kd_loss(student(b[:, :-1]), tl, b[:, 1:])
            rec.update(loss=round(loss.item(), 4), kl=round(kl.item(), 4))
        else:
            pre = text_batch(a.onpolicy_batch, a.prefix)[:, :a.prefix]
            student.eval()
            seq = sample_continuations(student, pre, a.new, gen)
            student.train()
            with torch.no_grad():
                lt_all = teacher(seq[:, :-1])
            ls_all = student(seq[:, :-1])
            P = a.prefix
            x = seq[:, P:]                                           # sampled tokens [B, new]
            lps = F.log_softmax(ls_all[:, P - 1:], -1).gather(-1, x[..., None])[..., 0]
            lpt = F.log_softmax(lt_all[:, P - 1:], -1).gather(-1, x[..., None])[..., 0]
            r = (lpt - lps).detach().clamp(-a.clip, a.clip)
            pg = -(r * lps).mean()
            kd, kl = kd_loss(ls_all[:, :P - 1], lt_all[:, :P - 1], seq[:, 1:P])
            loss = pg + 0.5 * kd
            rec.update(loss=round(loss.item(), 4), reward=round(r.mean().item(), 4), kl_prefix=round(kl.item(), 4))
        step_opt(loss, lr)
        if step % 10 == 0:
            rec["elapsed_s"] = round(time.time() - t0, 1)
            print(json.dumps(rec), file=log, flush=True)
        step += 1
    wall = time.time() - t0
    torch.save({"cfg": cfg, "state_dict": student.state_dict(), "steps_done": step, "wall_s": wall,
                "args": vars(a), "final_loss_ema": None}, out / "trained.pt")
    print(json.dumps({"done": True, "steps_done": step, "wall_s": round(wall, 1), "params": n_params}),
          file=log, flush=True)


if __name__ == "__main__":
    main()
