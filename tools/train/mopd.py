"""MOPD (multi-teacher on-policy distillation) of K3-mini-chat, and the off-policy alternative
(issue 23 item 4).

--mode onpolicy (MOPD): one student (init: the SFT checkpoint) samples, on the k3.cpp engine
  (tools/train/episodes.rollout on its exported checkpoint, as tools/train/rl.py does), episodes
  of train tasks of every (domain, effort) listed in the teacher manifest; the teacher of the
  episode's (domain, effort) scores every sampled token; the per-token reward
  r_t = clip(sg[log π_teacher(y_t) − log π_student(y_t)], −R, R) (post_losses.mopd_token_rewards)
  is each token's own advantage: loss = −token-mean(r_t · log π_student(y_t))
  (post_losses.mopd_loss), one AdamW step per iteration. Only policy-sampled tokens count (the
  mask of the episode); the effort reaches the student only through the chat format's
  thinking-effort system message (post_losses.effort_chat_kwargs, rendered by the engine).
--mode offpolicy (sequence-level distillation, the alternative): each teacher samples episodes of
  its (domain, effort) train tasks once on the engine; the student is trained by cross-entropy on
  the teachers' sampled tokens (post_losses.pg_loss with advantage 1, i.e. −token-mean log π), in
  batches of the same size as the on-policy run's. Teacher samples are kept whatever their score.

Teachers: a JSON manifest {"DOMAIN/EFFORT": "MODEL_DIR", ...} (tools/train/rl.py writes one model
per run); a teacher is loaded in torch from its exported checkpoint (tools.train.distill.
load_teacher: exactly the published bf16 / MXFP4 weights), so student and teacher log-probs come
from the same fp32 torch forward. Writes OUT/trained.pt (train.py format), OUT/model/ (exported),
OUT/mopd_log.jsonl.
Usage: python -m tools.train.mopd --init SFT/trained.pt --tokenizer models/k3-mini/tiktoken.model \
         --teachers WORK/teachers.json --out WORK/mopd [--mode onpolicy] [--iters 8 ...]
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from tools.train import post_losses as pl
from tools.train.rl import accumulate, export_policy, load_policy, open_engine, save_policy, think_len


def read_manifest(path: str | Path) -> dict[tuple[str, str], str]:
    """{(domain, effort): model_dir} from a teachers manifest. Raises SystemExit naming the file
    and key for an unknown domain / effort or a missing model directory."""
    from tools.train.chat_tasks import DOMAINS, EFFORTS
    raw = json.loads(Path(path).read_text())
    out = {}
    for k, v in raw.items():
        d, _, e = k.partition("/")
        if d not in DOMAINS or e not in EFFORTS:
            raise SystemExit(f"mopd: {path}: key {k!r} is not DOMAIN/EFFORT ({DOMAINS} x {EFFORTS})")
        if not (Path(v) / "config.json").is_file():
            raise SystemExit(f"mopd: {path}: teacher {k!r}: no checkpoint at {v}")
        out[(d, e)] = v
    if not out:
        raise SystemExit(f"mopd: {path}: no teachers")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    from tools.train.chat_tasks import make_tasks
    from tools.train.distill import load_teacher
    from tools.train.episodes import rollout
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init", required=True, help="train.py-format checkpoint of the student (SFT)")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--teachers", required=True, help="JSON manifest DOMAIN/EFFORT -> model dir")
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", choices=("onpolicy", "offpolicy"), default="onpolicy")
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--pool", type=int, default=24, help="train tasks per domain")
    ap.add_argument("--tasks-per-iter", type=int, default=4, help="tasks per (domain, effort) per iteration")
    ap.add_argument("--n-samples", type=int, default=2)
    ap.add_argument("--clip", type=float, default=5.0, help="R of clip(log pt - log ps, -R, R)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--max-minutes", type=float, default=1e9)
    a = ap.parse_args(argv)
    for k in ("iters", "pool", "tasks_per_iter", "n_samples", "max_tokens", "max_turns", "micro"):
        if getattr(a, k) < 1:
            raise SystemExit(f"mopd: --{k.replace('_', '-')} must be >= 1, got {getattr(a, k)}")
    if a.tasks_per_iter > a.pool:
        raise SystemExit(f"mopd: --tasks-per-iter {a.tasks_per_iter} exceeds --pool {a.pool}")
    if not a.clip > 0:
        raise SystemExit(f"mopd: --clip must be > 0, got {a.clip}")
    teachers = read_manifest(a.teachers)
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    student, cfg = load_policy(a.init)
    opt = torch.optim.AdamW(student.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    rkw = dict(temperature=a.temperature, max_tokens=a.max_tokens, max_turns=a.max_turns)
    combos = sorted(teachers)
    domains = sorted({d for d, _ in combos})
    pool = {d: make_tasks(d, "train", a.pool, seed=2000 + a.seed) for d in domains}
    log = open(out / "mopd_log.jsonl", "w")
    print(json.dumps({"args": vars(a), "teachers": {f"{d}/{e}": v for (d, e), v in teachers.items()}}),
          file=log, flush=True)
    t0 = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="k3mopd-", dir=out))
    models: dict[str, Any] = {}
    if a.mode == "onpolicy":
        for v in sorted(set(teachers.values())):
            models[v], _ = load_teacher(v)
    dataset: dict[tuple[str, str], list] = {}
    try:
        if a.mode == "offpolicy":
            # every teacher samples n_samples episodes of each pool task of its domain, once
            n_data = 0
            for v in sorted(set(teachers.values())):
                llm = open_engine(v)
                for c in combos:
                    if teachers[c] == v:
                        dataset[c] = rollout(llm, pool[c[0]], c[1], n_samples=a.n_samples,
                                             seed=rng.getrandbits(31), **rkw)
                        n_data += len(dataset[c])
                llm.close()
            print(json.dumps({"offpolicy_episodes": n_data, "elapsed_s": round(time.time() - t0, 1)}),
                  file=log, flush=True)
        it = 0
        for it in range(a.iters):
            ti = time.time()
            eps, keys, per = [], [], {}
            if a.mode == "onpolicy":
                llm = open_engine(export_policy(student, cfg, a.tokenizer, tmp / "student"))
                for c in combos:
                    got = rollout(llm, rng.sample(pool[c[0]], a.tasks_per_iter), c[1], n_samples=a.n_samples,
                                  seed=rng.getrandbits(31), **rkw)
                    eps += got
                    keys += [c] * len(got)
                    per[f"{c[0]}/{c[1]}"] = {"score": round(float(np.mean([e.score for e in got])), 4),
                                             "ended": round(float(np.mean([e.ended for e in got])), 4),
                                             "think_mean": round(float(np.mean([think_len(e) for e in got])), 1)}
                llm.close()
            else:
                for c in combos:
                    got = rng.sample(dataset[c], min(len(dataset[c]), a.tasks_per_iter * a.n_samples))
                    eps += got
                    keys += [c] * len(got)
            t_roll = time.time() - ti
            opt.zero_grad(set_to_none=True)
            stats = {"reward_sum": 0.0, "tokens": 0, "clipped": 0}

            def loss_fn(idx, ids, logp, mask):
                if a.mode == "offpolicy":
                    return pl.pg_loss(logp, None, torch.ones(len(idx)), mask)
                lt = torch.zeros_like(logp)
                with torch.no_grad():
                    for c in sorted({keys[i] for i in idx}):
                        rows = [j for j, i in enumerate(idx) if keys[i] == c]
                        lt[rows] = pl.token_logprobs(models[teachers[c]](ids[rows]), ids[rows])
                r = pl.mopd_token_rewards(lt, logp, a.clip)
                raw = (lt - logp.detach())
                stats["reward_sum"] += float((r * mask).sum())
                stats["tokens"] += int(mask.sum())
                stats["clipped"] += int(((raw.abs() > a.clip).float() * mask).sum())
                return pl.mopd_loss(logp, r, mask)

            st = accumulate(student, eps, loss_fn, a.micro)
            gn = torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0).item()
            opt.step()
            rec = {"iter": it, "mode": a.mode, "loss": round(st["loss"], 5), "tokens": st["tokens"],
                   "grad_norm": round(gn, 4), "rollout_s": round(t_roll, 1), "iter_s": round(time.time() - ti, 1),
                   "elapsed_s": round(time.time() - t0, 1)}
            if a.mode == "onpolicy":
                rec.update(per=per, reward_mean=round(stats["reward_sum"] / max(1, stats["tokens"]), 4),
                           clipped_frac=round(stats["clipped"] / max(1, stats["tokens"]), 4))
            print(json.dumps(rec), file=log, flush=True)
            if (time.time() - t0) / 60 > a.max_minutes:
                print(json.dumps({"stopped_early_after_iter": it}), file=log, flush=True)
                break
        wall = time.time() - t0
        save_policy(student, cfg, out / "trained.pt", steps_done=it + 1, wall_s=wall, args=vars(a))
        export_policy(student, cfg, a.tokenizer, out / "model")
        print(json.dumps({"done": True, "iters_done": it + 1, "wall_s": round(wall, 1)}), file=log, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
