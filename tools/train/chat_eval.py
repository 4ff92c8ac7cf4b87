"""Held-out evaluation of a chat model per domain and per effort, greedy (temperature 0), on the
k3.cpp engine (tools/train/episodes.rollout).

For each domain in DOMAINS and effort in EFFORTS: n held-out tasks (chat_tasks.make_tasks(domain,
"heldout", n, seed)), one greedy episode each. Metrics (JSON, one object per domain x effort):
  accuracy          fraction of episodes with score == 1
  mean_score        mean chat_tasks.score (writing: the fraction of the first words matched)
  tool_call_valid   valid tool calls / tool calls (arguments parse as JSON and validate against
                    the declared schema); null when no call was made
  tool_calls        number of tool calls made
  turns_ended       assistant turns that ended with a stop id after <|close|>message<|sep|> /
                    assistant turns
  episodes_ended    episodes whose every turn ended so
  thinking_mean / thinking_p95   think-channel ids per episode (summed over its turns); p95 by
                    numpy's linear interpolation
  truncated         episodes stopped by max_turns, max_tokens or the context
  by_kind           {task kind: {"episodes", "accuracy"}} (e.g. agentic lookup / find / next)
Usage: python -m tools.train.chat_eval --model models/k3-mini-chat --out eval.json [--n 40]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tools.train import chat_tasks as ct
from tools.train.episodes import Episode, rollout
from tools.train.k3_import import import_k3


def summarize(eps: Sequence[Episode]) -> dict[str, Any]:
    """The metrics of the module docstring over `eps`."""
    turns = [t for e in eps for t in e.turns]
    calls = sum(e.n_tool_calls for e in eps)
    think = np.array([e.thinking_tokens for e in eps], dtype=np.float64)
    by_kind: dict[str, list[bool]] = {}
    for e in eps:
        by_kind.setdefault(e.task.meta["kind"], []).append(e.score == 1.0)
    return {
        "episodes": len(eps),
        "accuracy": float(np.mean([e.score == 1.0 for e in eps])) if eps else None,
        "mean_score": float(np.mean([e.score for e in eps])) if eps else None,
        "tool_calls": calls,
        "tool_call_valid": (sum(e.n_valid_tool_calls for e in eps) / calls) if calls else None,
        "turns": len(turns),
        "turns_ended": (sum(t.ended for t in turns) / len(turns)) if turns else None,
        "episodes_ended": float(np.mean([e.ended for e in eps])) if eps else None,
        "thinking_mean": float(think.mean()) if eps else None,
        "thinking_p95": float(np.percentile(think, 95)) if eps else None,
        "truncated": int(sum(e.truncated for e in eps)),
        "by_kind": {k: {"episodes": len(scores), "accuracy": float(np.mean(scores))}
                    for k, scores in sorted(by_kind.items())},
    }


def markdown_table(results: dict[str, Any]) -> str:
    """evaluate()["results"] as a Markdown table, one row per domain x effort."""
    def f(x: Any, pct: bool = True) -> str:
        if x is None:
            return "n/a"
        return f"{100 * x:.1f}%" if pct else f"{x:.1f}"
    rows = ["| domain | effort | accuracy | mean score | tool calls valid | turns ended | "
            "thinking tokens mean / p95 |", "|---|---|---|---|---|---|---|"]
    for d, per in results.items():
        for eff, m in per.items():
            calls = f"{f(m['tool_call_valid'])} of {m['tool_calls']}" if m["tool_calls"] else "n/a (no calls)"
            rows.append(f"| {d} | {eff} | {f(m['accuracy'])} | {m['mean_score']:.3f} | {calls} | "
                        f"{f(m['turns_ended'])} of {m['turns']} | {f(m['thinking_mean'], False)} / "
                        f"{f(m['thinking_p95'], False)} |")
    return "\n".join(rows)


def evaluate(llm: Any, n: int, *, domains: Sequence[str] = ct.DOMAINS, efforts: Sequence[str] = ct.EFFORTS,
             seed: int = 0, max_tokens: int = 384, max_turns: int = 4,
             keep_episodes: int = 2, split: str = "heldout") -> dict[str, Any]:
    """{"results": {domain: {effort: metrics}}, "examples": [...]} on n tasks of `split` each
    (held-out by default; "train" to compare checkpoints without looking at the held-out tasks)."""
    res: dict[str, Any] = {}
    examples = []
    for d in domains:
        tasks = ct.make_tasks(d, split, n, seed)
        res[d] = {}
        for eff in efforts:
            eps = rollout(llm, tasks, eff, n_samples=1, temperature=0.0, max_tokens=max_tokens,
                          max_turns=max_turns, seed=seed)
            res[d][eff] = summarize(eps)
            examples += [e.to_json() for e in eps[:keep_episodes]]
    return {"results": res, "examples": examples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=40, help="held-out tasks per domain")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", default="heldout", choices=list(ct.SPLITS))
    ap.add_argument("--domains", default=",".join(ct.DOMAINS))
    ap.add_argument("--efforts", default=",".join(ct.EFFORTS))
    ap.add_argument("--max-tokens", type=int, default=384, help="ids per assistant turn")
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-parallel", type=int, default=8)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--markdown", action="store_true", help="print the results as a Markdown table")
    a = ap.parse_args()
    domains = [d for d in a.domains.split(",") if d]
    efforts = [e for e in a.efforts.split(",") if e]
    for d in domains:
        if d not in ct.DOMAINS:
            ap.error(f"--domains: {d!r} is not one of {ct.DOMAINS}")
    for e in efforts:
        if e not in ct.EFFORTS:
            ap.error(f"--efforts: {e!r} is not one of {ct.EFFORTS}")
    k3 = import_k3()
    t0 = time.time()
    with k3.LLM(a.model, threads=a.threads, n_parallel=a.n_parallel, n_ctx=a.n_ctx) as llm:
        out = evaluate(llm, a.n, domains=domains, efforts=efforts, seed=a.seed, max_tokens=a.max_tokens,
                       max_turns=a.max_turns, split=a.split)
    out = {"model": a.model, "split": a.split, "n_per_domain": a.n, "seed": a.seed, "greedy": True,
           "max_tokens": a.max_tokens, "max_turns": a.max_turns, "wall_s": round(time.time() - t0, 1), **out}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    if a.markdown:
        print(markdown_table(out["results"]))
        return
    for d, per in out["results"].items():
        for eff, m in per.items():
            print(f"{d:8s} {eff:4s} acc={m['accuracy']:.3f} score={m['mean_score']:.3f} "
                  f"tool_valid={m['tool_call_valid']} ended={m['turns_ended']} "
                  f"think={m['thinking_mean']:.1f}/{m['thinking_p95']:.0f}")


if __name__ == "__main__":
    main()
