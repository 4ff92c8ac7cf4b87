"""RL with verifiable rewards for K3-mini-chat, per domain and per effort (issue 23 item 3).

One run trains one policy (a "teacher") on a set of (domain, effort) pairs, e.g. one domain at one
effort. Every iteration:
  1. the torch policy is exported to a temporary K3 checkpoint (tools/train/export.py's layout:
     bf16 trunk, MXFP4 experts = exactly the QAT fake-quant values the torch model computes with)
     and loaded into the k3.cpp engine (`k3.LLM`, one thread, exact numerics);
  2. the engine samples n_samples episodes per task (tools/train/episodes.rollout: the chat
     format with the effort's system message, tool calls executed between turns);
  3. reward (raw_reward): 0 when the episode is malformed (a turn that did not end with
     <|close|>message<|sep|><|end_of_msg|>, an invalid tool call, or an agentic task answered
     without any tool call), else 0.2 + 0.8·chat_tasks.score (a format credit plus the task score:
     the SFT model scores ~0 on agentic/general tasks, so a score-only reward gives no signal);
     the budget rule (post_losses.budget_rewards) overwrites it with 0 when the episode's thinking
     tokens exceed τ·b0(x); τ follows post_losses.tau_schedule (2.0 → 1.5 → 1.0 in thirds);
  4. GRPO advantages per task group (post_losses.group_advantages), plain on-policy REINFORCE
     (post_losses.pg_loss with old_logp None) over the policy-sampled tokens, token-level mean;
     log-probs from the torch model (routed experts through MXFP4 fake-quant, QAT on) on the
     episode's ids; one AdamW step per iteration.
b0(x) per (task, effort): before training, the initial (SFT) policy samples n_samples episodes of
every pool task at that effort on the engine; b0 = the median thinking length of its correct
samples, else the SFT trajectory's thinking length (post_losses.estimate_b0).
The router correction bias (a buffer) is kept as trained; the optimizer is AdamW on all parameters.

Checkpoints are train.py's format ({"cfg", "state_dict", ...}): --init reads one (the SFT
checkpoint), OUT/trained.pt is written, OUT/model/ holds the exported teacher and OUT/rl_log.jsonl
one JSON line per iteration.
Usage: python -m tools.train.rl --init SFT/trained.pt --tokenizer models/k3-mini/tiktoken.model \
         --domains agentic --efforts low --out WORK/teachers/agentic-low [--iters 6 ...]
"""
from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from tools.train import post_losses as pl
from tools.train.model import K3Model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reference"))
import k3_checkpoint as kc  # noqa: E402


# --- policy I/O --------------------------------------------------------------------------------

def load_policy(path: str | Path) -> tuple[K3Model, dict]:
    """K3Model from a train.py-format checkpoint (fp32 master weights), QAT on, train mode.
    Raises FileNotFoundError / KeyError naming the file when it is not such a checkpoint."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"policy checkpoint {path} does not exist")
    ck = torch.load(path)
    for k in ("cfg", "state_dict"):
        if k not in ck:
            raise KeyError(f"{path}: not a trainer checkpoint (no {k!r})")
    m = K3Model(ck["cfg"])
    m.load_state_dict(ck["state_dict"])
    for moe in m.moe_layers():
        moe.qat = True
    return m.train(), ck["cfg"]


def save_policy(model: K3Model, cfg: dict, path: str | Path, **extra: Any) -> None:
    """Writes train.py's checkpoint format (export.py reads it)."""
    torch.save({"cfg": cfg, "state_dict": model.state_dict(), "steps_done": extra.pop("steps_done", 0),
                "wall_s": extra.pop("wall_s", 0.0), "args": extra.pop("args", {}),
                "final_loss_ema": None, **extra}, path)


def export_policy(model: K3Model, cfg: dict, tokenizer: str | Path, out: str | Path) -> Path:
    """Exports the policy to `out` in the published K3 layout (export.py: config.json, 3
    safetensors shards, tiktoken.model, tokenizer_config.json). Returns out."""
    from tools.train.export import export_tensors, tokenizer_config, wrapper_config
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n_ranks = sum(1 for _ in open(tokenizer))
    full = wrapper_config(cfg, n_ranks)
    tensors, _ = export_tensors(full["text_config"], model.state_dict())
    for old in out.glob("model-*.safetensors"):
        old.unlink()
    kc.write_checkpoint(str(out), full, tensors, n_shards=3)
    shutil.copy(tokenizer, out / "tiktoken.model")
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(n_ranks), indent=2) + "\n")
    return out


def open_engine(model_dir: str | Path, n_ctx: int = 2048, n_parallel: int = 16):
    """k3.LLM on `model_dir`: one kernel thread, exact numerics, no prefix cache, a queue that
    holds every episode of a rollout (episodes.rollout submits all live episodes at once)."""
    from tools.train.k3_import import import_k3
    k3 = import_k3()
    return k3.LLM(str(model_dir), n_ctx=n_ctx, n_parallel=n_parallel, numerics="exact", threads=1,
                  cache_ram_mib=0, max_queue=4096)


# --- episodes -> tensors -----------------------------------------------------------------------

def ep_ids(ep) -> list[int]:
    return list(ep.ids)


def ep_mask(ep) -> list[int]:
    return [int(bool(x)) for x in ep.mask]


def batch_tensors(episodes: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids [B, T] (pad 0; the model is causal, so padding never reaches earlier
    positions) and the target mask [B, T−1]: mask[b, t] = 1 iff ids[b, t+1] was sampled by the
    policy (aligned with post_losses.token_logprobs)."""
    T = max(len(ep_ids(e)) for e in episodes)
    ids = torch.zeros(len(episodes), T, dtype=torch.int64)
    mask = torch.zeros(len(episodes), T, dtype=torch.float32)
    for i, e in enumerate(episodes):
        x, m = ep_ids(e), ep_mask(e)
        if len(x) != len(m):
            raise ValueError(f"episode {i}: {len(x)} ids but {len(m)} mask entries")
        ids[i, :len(x)] = torch.tensor(x)
        mask[i, :len(m)] = torch.tensor(m, dtype=torch.float32)
    return ids, mask[:, 1:]


def accumulate(model: K3Model, episodes: Sequence[Any], loss_fn, micro: int = 8) -> dict:
    """Backward of a token-mean loss over all episodes in micro-batches of `micro` sequences.
    loss_fn(idx [b] episode indices, ids [b, T], logp [b, T−1], mask [b, T−1]) -> the masked-mean loss of
    that micro-batch (post_losses.pg_loss / mopd_loss); each is rescaled by its share of the
    masked tokens, so the summed gradients equal the gradient of the loss over the whole batch.
    Returns {"loss": the whole-batch loss, "tokens": masked tokens}."""
    total = sum(sum(ep_mask(e)[1:]) for e in episodes)
    out = 0.0
    order = sorted(range(len(episodes)), key=lambda i: len(ep_ids(episodes[i])))
    for s in range(0, len(order), micro):
        idx = order[s:s + micro]
        ids, mask = batch_tensors([episodes[i] for i in idx])
        n = mask.sum().item()
        if n == 0:
            continue
        logp = pl.token_logprobs(model(ids), ids)
        loss = loss_fn(idx, ids, logp, mask) * (n / max(1.0, total))
        loss.backward()
        out += loss.item()
    return {"loss": out, "tokens": int(total)}


# --- rewards -----------------------------------------------------------------------------------

FORMAT_CREDIT = 0.2


def well_formed(ep) -> bool:
    """Every turn ended properly, every tool call valid, and an agentic task used a tool."""
    if not ep.ended or not getattr(ep, "tool_calls_valid", True):
        return False
    return not (ep.task.domain == "agentic" and getattr(ep, "n_tool_calls", 1) == 0)


def raw_reward(ep) -> float:
    """0 for a malformed episode (well_formed), else FORMAT_CREDIT + (1 − FORMAT_CREDIT)·score."""
    return FORMAT_CREDIT + (1.0 - FORMAT_CREDIT) * float(ep.score) if well_formed(ep) else 0.0


def think_len(ep) -> int:
    return int(ep.thinking_tokens)


def sft_think_len(llm, task, effort: str) -> int:
    """Thinking tokens of the SFT trajectory of `task` at `effort` (all assistant turns)."""
    from tools.train.chat_tasks import sft_trajectory
    return sum(len(llm.tokenize(m.get("reasoning_content") or ""))
               for m in sft_trajectory(task, effort) if m.get("role") == "assistant")


def estimate_budgets(llm, tasks, effort: str, n_samples: int, rollout_kw: dict, seed: int) -> dict[str, float]:
    """b0 per task id at `effort` from the engine's policy (see the module docstring)."""
    from tools.train.episodes import rollout
    eps = rollout(llm, tasks, effort, n_samples=n_samples, seed=seed, **rollout_kw)
    by: dict[str, list] = {}
    for e in eps:
        by.setdefault(e.task.id, []).append(e)
    b0 = {}
    for t in tasks:
        g = by.get(t.id, [])
        b0[t.id] = pl.estimate_b0([think_len(e) for e in g], [raw_reward(e) >= 1.0 for e in g],
                                  sft_think_len(llm, t, effort))
    return b0


def rl_step_rewards(episodes, b0: dict, tau: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(raw rewards [B], budgeted rewards [B], advantages [B]); episodes come task-major in
    groups of equal task (rollout's order), each group normalised on its own."""
    raw = torch.tensor([raw_reward(e) for e in episodes], dtype=torch.float64)
    lens = torch.tensor([think_len(e) for e in episodes], dtype=torch.float64)
    b = torch.tensor([b0[e.task.id] for e in episodes], dtype=torch.float64)
    r = pl.budget_rewards(raw, lens, b, tau)
    adv = torch.zeros_like(r)
    groups: dict[str, list[int]] = {}
    for i, e in enumerate(episodes):
        groups.setdefault(e.task.id, []).append(i)
    for idx in groups.values():
        adv[idx] = pl.group_advantages(r[idx][None])[0]
    return raw, r, adv


# --- main --------------------------------------------------------------------------------------

def parse_list(s: str, allowed: Sequence[str], what: str) -> list[str]:
    out = [x for x in s.split(",") if x]
    bad = [x for x in out if x not in allowed]
    if bad or not out:
        raise SystemExit(f"rl: {what} {s!r}: each must be one of {', '.join(allowed)}")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    from tools.train.chat_tasks import DOMAINS, EFFORTS, make_tasks
    from tools.train.episodes import rollout
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init", required=True, help="train.py-format checkpoint of the initial policy (SFT)")
    ap.add_argument("--tokenizer", required=True, help="tiktoken.model of the policy")
    ap.add_argument("--out", required=True)
    ap.add_argument("--domains", default="agentic", help="comma list of " + "/".join(DOMAINS))
    ap.add_argument("--efforts", default="max", help="comma list of " + "/".join(EFFORTS))
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--pool", type=int, default=24, help="train tasks per domain (b0 estimated for each)")
    ap.add_argument("--tasks-per-iter", type=int, default=8, help="tasks per (domain, effort) per iteration")
    ap.add_argument("--n-samples", type=int, default=4, help="samples per task (the GRPO group)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-tokens", type=int, default=160, help="tokens per assistant turn")
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-minutes", type=float, default=1e9, help="stop after the iteration that passes it")
    a = ap.parse_args(argv)
    domains = parse_list(a.domains, DOMAINS, "--domains")
    efforts = parse_list(a.efforts, EFFORTS, "--efforts")
    for k in ("iters", "pool", "tasks_per_iter", "n_samples", "max_tokens", "max_turns", "micro"):
        if getattr(a, k) < 1:
            raise SystemExit(f"rl: --{k.replace('_', '-')} must be >= 1, got {getattr(a, k)}")
    if a.tasks_per_iter > a.pool:
        raise SystemExit(f"rl: --tasks-per-iter {a.tasks_per_iter} exceeds --pool {a.pool}")
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    model, cfg = load_policy(a.init)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    rkw = dict(temperature=a.temperature, max_tokens=a.max_tokens, max_turns=a.max_turns)
    pool = {d: make_tasks(d, "train", a.pool, seed=1000 + a.seed) for d in domains}
    log = open(out / "rl_log.jsonl", "w")
    print(json.dumps({"args": vars(a), "domains": domains, "efforts": efforts}), file=log, flush=True)
    t0 = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="k3rl-", dir=out))
    try:
        llm = open_engine(export_policy(model, cfg, a.tokenizer, tmp / "policy"))
        b0 = {}
        for d in domains:
            for e in efforts:
                b = estimate_budgets(llm, pool[d], e, a.n_samples, rkw, seed=a.seed * 7919 + 1)
                b0.update({(tid, e): v for tid, v in b.items()})
        llm.close()
        print(json.dumps({"b0": {f"{t}|{e}": v for (t, e), v in sorted(b0.items())},
                          "elapsed_s": round(time.time() - t0, 1)}), file=log, flush=True)
        it = 0
        for it in range(a.iters):
            tau = pl.tau_schedule(it, a.iters)
            ti = time.time()
            llm = open_engine(export_policy(model, cfg, a.tokenizer, tmp / "policy"))
            eps, per = [], {}
            for d in domains:
                for e in efforts:
                    tasks = rng.sample(pool[d], a.tasks_per_iter)
                    got = rollout(llm, tasks, e, n_samples=a.n_samples, seed=rng.getrandbits(31), **rkw)
                    raw, r, adv = rl_step_rewards(got, {t.id: b0[(t.id, e)] for t in tasks}, tau)
                    for ep, ad in zip(got, adv.tolist()):
                        eps.append((ep, ad))
                    lens = [think_len(x) for x in got]
                    per[f"{d}/{e}"] = {"reward": round(raw.mean().item(), 4),
                                       "reward_budgeted": round(r.mean().item(), 4),
                                       "over_budget": round(float((raw != r).double().mean()), 4),
                                       "ended": round(float(np.mean([bool(x.ended) for x in got])), 4),
                                       "think_mean": round(float(np.mean(lens)), 1)}
            llm.close()
            t_roll = time.time() - ti
            episodes = [x for x, _ in eps]
            adv_all = torch.tensor([v for _, v in eps], dtype=torch.float32)
            opt.zero_grad(set_to_none=True)
            st = accumulate(model, episodes,
                            lambda idx, ids, logp, mask: pl.pg_loss(logp, None, adv_all[idx], mask), a.micro)
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
            opt.step()
            rec = {"iter": it, "tau": tau, "per": per, "loss": round(st["loss"], 5), "tokens": st["tokens"],
                   "grad_norm": round(gn, 4), "rollout_s": round(t_roll, 1),
                   "iter_s": round(time.time() - ti, 1), "elapsed_s": round(time.time() - t0, 1)}
            print(json.dumps(rec), file=log, flush=True)
            if (time.time() - t0) / 60 > a.max_minutes:
                print(json.dumps({"stopped_early_after_iter": it}), file=log, flush=True)
                break
        wall = time.time() - t0
        save_policy(model, cfg, out / "trained.pt", steps_done=it + 1, wall_s=wall, args=vars(a))
        export_policy(model, cfg, a.tokenizer, out / "model")
        print(json.dumps({"done": True, "iters_done": it + 1, "wall_s": round(wall, 1)}), file=log, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
