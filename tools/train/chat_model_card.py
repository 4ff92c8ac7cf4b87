"""Writes models/k3-mini-chat/README.md (the model card of the post-trained K3-mini) from the
artifacts of tools/train/post_train_k3_mini_chat.sh:
  WORK/eval/{sft,mopd,offpolicy,rl-max}.json and WORK/eval/teacher-DOMAIN-EFFORT.json
    (tools/train/chat_eval.py output: results[domain][effort] metrics on held-out tasks),
  WORK/ppl.json ({"base": k3 perplexity --json of models/k3-mini, "chat": of the chat model}),
  WORK/times.jsonl (one {"stage", "s"} line per pipeline stage),
  WORK/teachers/*/rl_log.jsonl, WORK/mopd/mopd_log.jsonl, WORK/sft/sft_log.jsonl (settings).
Usage: python -m tools.train.chat_model_card --work WORK --model models/k3-mini-chat
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Optional

DOMAINS = ("agentic", "general", "writing")
EFFORTS = ("low", "high", "max")
FEW_POINTS = 0.05          # "within a few points": 5 percentage points of accuracy
TRIVIAL_ACCURACY = 0.1     # teachers below this accuracy on their own cell make the gap goal empty


def _read_jsonl(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.is_file() else []


def _pct(x: Optional[float]) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _agg(res: dict, effort: Optional[str] = None, domain: Optional[str] = None) -> dict[str, Any]:
    """Pools chat_eval metrics over domains (and/or efforts): counts summed, means weighted by
    episodes; p95 is not poolable and is left out."""
    cells = [res[d][e] for d in res for e in res[d]
             if (effort is None or e == effort) and (domain is None or d == domain)]
    ep = sum(c["episodes"] for c in cells)
    turns = sum(c["turns"] for c in cells)
    calls = sum(c["tool_calls"] for c in cells)
    valid = sum((c["tool_call_valid"] or 0) * c["tool_calls"] for c in cells)
    return {"episodes": ep,
            "accuracy": sum(c["accuracy"] * c["episodes"] for c in cells) / ep if ep else None,
            "turns_ended": sum(c["turns_ended"] * c["turns"] for c in cells if c["turns"]) / turns if turns else None,
            "tool_call_valid": valid / calls if calls else None, "tool_calls": calls,
            "thinking_mean": sum(c["thinking_mean"] * c["episodes"] for c in cells) / ep if ep else None}


def write_card(work: str | Path, mdir: str | Path, time_note: str = "") -> str:
    """time_note: appended to the time table's heading (e.g. what else ran on the machine)."""
    work, mdir = Path(work), Path(mdir)
    ev = {p.stem: json.loads(p.read_text()) for p in sorted((work / "eval").glob("*.json"))}
    stu = ev["mopd"]["results"]
    n_eval = ev["mopd"]["n_per_domain"]
    ppl = json.loads((work / "ppl.json").read_text())
    times = _read_jsonl(work / "times.jsonl")
    total_s = sum(t["s"] for t in times)
    tc = json.loads((mdir / "config.json").read_text())["text_config"]

    # student table
    rows = ["| domain | effort | accuracy | mean score | tool calls valid (n) | turns ended | thinking tokens mean / p95 |",
            "|---|---|---|---|---|---|---|"]
    for d in DOMAINS:
        for e in EFFORTS:
            c = stu[d][e]
            rows.append(f"| {d} | {e} | {_pct(c['accuracy'])} | {c['mean_score']:.3f} | "
                        f"{_pct(c['tool_call_valid'])} ({c['tool_calls']}) | {_pct(c['turns_ended'])} | "
                        f"{c['thinking_mean']:.1f} / {c['thinking_p95']:.0f} |")
    student_table = "\n".join(rows)

    # comparison table: accuracy (writing: mean score too) per (domain, effort)
    names = [("sft", "SFT (start)"), ("teacher", "RL teacher of the cell"), ("mopd", "**MOPD student**"),
             ("offpolicy", "off-policy distillation"), ("rl-max", "RL at max only")]
    rows = ["| domain | effort | " + " | ".join(n for _, n in names) + " |", "|---|---|" + "---|" * len(names)]
    gaps = {}
    for d in DOMAINS:
        for e in EFFORTS:
            cells = []
            for key, _ in names:
                src = ev.get(f"teacher-{d}-{e}") if key == "teacher" else ev.get(key)
                c = src["results"].get(d, {}).get(e) if src else None
                cells.append("–" if c is None else f"{_pct(c['accuracy'])} / {c['mean_score']:.2f}")
            t = ev.get(f"teacher-{d}-{e}")
            if t and d in t["results"] and e in t["results"][d]:
                gaps[(d, e)] = stu[d][e]["mean_score"] - t["results"][d][e]["mean_score"]
            rows.append(f"| {d} | {e} | " + " | ".join(cells) + " |")
    compare_table = "\n".join(rows)

    # goals
    per_eff = {e: _agg(stu, effort=e) for e in EFFORTS}
    allc = _agg(stu)
    ended_ok = all(per_eff[e]["turns_ended"] is not None and per_eff[e]["turns_ended"] >= 0.95 for e in EFFORTS)
    tools_ok = allc["tool_call_valid"] is not None and allc["tool_call_valid"] >= 0.95
    th = [per_eff[e]["thinking_mean"] for e in EFFORTS]
    think_ok = th[0] < th[1] < th[2]
    worst = min(gaps.items(), key=lambda kv: kv[1]) if gaps else None
    gap_ok = worst is not None and worst[1] >= -FEW_POINTS
    yes = lambda ok: "**met**" if ok else "**not met**"  # noqa: E731
    # the gap goal says nothing when the teachers themselves score about nothing
    teach = _teacher_cells(ev)
    best_teacher = max((t["accuracy"] for t in teach.values()), default=None)
    trivial = best_teacher is not None and best_teacher < TRIVIAL_ACCURACY
    goals = "\n".join([
        "| goal | measured (MOPD student, held-out, greedy) | |", "|---|---|---|",
        "| ≥ 95% of turns end properly at every effort | " +
        ", ".join(f"{e} {_pct(per_eff[e]['turns_ended'])}" for e in EFFORTS) + f" | {yes(ended_ok)} |",
        f"| ≥ 95% of tool calls valid | {_pct(allc['tool_call_valid'])} of {allc['tool_calls']} calls | {yes(tools_ok)} |",
        "| mean thinking tokens low < high < max | " + " < ".join(f"{x:.1f}" for x in th) + f" | {yes(think_ok)} |",
        f"| student within {100 * FEW_POINTS:.0f} points of each teacher on its own cell (mean score) | "
        + (f"worst gap {100 * worst[1]:+.1f} points ({worst[0][0]}/{worst[0][1]}); "
           + ", ".join(f"{d}/{e} {100 * g:+.1f}" for (d, e), g in sorted(gaps.items())) if worst else "no teacher eval")
        + (f" | **met only trivially**: no teacher is right on more than {_pct(best_teacher)} of its own cell |"
           if gap_ok and trivial else f" | {yes(gap_ok)} |"),
    ])

    # summary: every model pooled over its cells
    teacher_res = {}
    for d in DOMAINS:
        for e in EFFORTS:
            t = ev.get(f"teacher-{d}-{e}")
            if t and d in t["results"] and e in t["results"][d]:
                teacher_res.setdefault(d, {})[e] = t["results"][d][e]
    summ = ["| model | cells | accuracy | mean score | turns ended | tool calls valid | thinking mean low / high / max |",
            "|---|---|---|---|---|---|---|"]
    for key, label in [("sft", "SFT (start)"), ("teachers", "RL teachers, each on its own cell"),
                       ("mopd", "**MOPD student (this model)**"), ("offpolicy", "off-policy distillation"),
                       ("rl-max", "RL at max only")]:
        res = teacher_res if key == "teachers" else (ev[key]["results"] if key in ev else None)
        if not res:
            continue
        ncell = sum(len(v) for v in res.values())
        al = _agg(res)
        sc = sum(c["mean_score"] * c["episodes"] for v in res.values() for c in v.values()) / max(1, al["episodes"])
        th = " / ".join("–" if not any(e in v for v in res.values()) else f"{_agg(res, effort=e)['thinking_mean']:.1f}"
                        for e in EFFORTS)
        summ.append(f"| {label} | {ncell} | {_pct(al['accuracy'])} | {sc:.3f} | {_pct(al['turns_ended'])} | "
                    f"{_pct(al['tool_call_valid'])} | {th} |")
    summary_table = "\n".join(summ)

    # teacher training curves (rollout statistics of the first and last iteration)
    trows = ["| teacher | iterations | reward first → last | budgeted reward (last, τ) | over budget (last) | "
             "episodes ended first → last | thinking mean first → last | b0 mean |",
             "|---|---|---|---|---|---|---|---|"]
    for p in sorted((work / "teachers").glob("*/rl_log.jsonl")):
        recs = _read_jsonl(p)
        its = [r for r in recs if "iter" in r]
        b0 = next((r["b0"] for r in recs if "b0" in r), {})
        if not its:
            continue
        key = next(iter(its[0]["per"]))
        f, l = its[0]["per"][key], its[-1]["per"][key]
        trows.append(f"| {key} | {len(its)} | {f['reward']:.3f} → {l['reward']:.3f} | {l['reward_budgeted']:.3f} "
                     f"({its[-1]['tau']}) | {_pct(l['over_budget'])} | {_pct(f['ended'])} → {_pct(l['ended'])} | "
                     f"{f['think_mean']:.1f} → {l['think_mean']:.1f} | "
                     f"{(sum(b0.values()) / len(b0)) if b0 else float('nan'):.1f} |")
    teacher_table = "\n".join(trows)

    # reading the numbers: facts computed from the same files
    sft_res = ev["sft"]["results"] if "sft" in ev else None
    notes = []
    low_cells = sorted(((stu[d][e]["turns_ended"], d, e) for d in DOMAINS for e in EFFORTS
                        if stu[d][e]["turns_ended"] is not None and stu[d][e]["turns_ended"] < 0.95))
    if low_cells:
        cells = ", ".join(f"{d}/{e} {_pct(t)} ({stu[d][e]['truncated']} of {stu[d][e]['episodes']} episodes "
                          f"cut at the id limit{'' if not sft_res else '; SFT ' + _pct(sft_res[d][e]['turns_ended'])}"
                          f"{'' if (d, e) not in teach else '; its teacher ' + _pct(teach[(d, e)]['turns_ended'])})"
                          for t, d, e in low_cells)
        notes.append(f"Turns that do not end: {cells}. The cut turns are greedy repetition loops (the same "
                     f"clause repeated until the {ev['mopd'].get('max_tokens', '?')}-id limit), already in the SFT "
                     "model.")
    wt = _read_jsonl(work / "teachers" / "writing-low" / "rl_log.jsonl")
    w_temp = wt[0]["args"].get("temperature") if wt else None
    if w_temp is not None and w_temp < 1.0:
        notes.append(f"The writing teachers sampled their rollouts at temperature {w_temp}, so that the loops of "
                     "greedy decoding occur in the rollouts and the format gate of the reward (0 for a turn "
                     "that does not end) can teach a teacher to end. "
                     "Greedy, held-out, the writing turns that end: " +
                     ", ".join(f"{e} SFT {_pct(sft_res[d][e]['turns_ended']) if sft_res else '?'} → teacher "
                               f"{_pct(teach[(d, e)]['turns_ended']) if (d, e) in teach else '?'} → student "
                               f"{_pct(stu[d][e]['turns_ended'])}" for d in ('writing',) for e in EFFORTS) + ".")
    if sft_res:
        d_sc = [stu[d][e]["mean_score"] - sft_res[d][e]["mean_score"] for d in DOMAINS for e in EFFORTS]
        sft_acc = _agg(sft_res)["accuracy"] or 0.0
        if sft_acc < TRIVIAL_ACCURACY / 2:
            notes.append(f"Task accuracy is the SFT stage's (sft_stage.md: the model does not yet use the question's "
                         f"content); the student's mean score differs from the SFT model's by "
                         f"{100 * min(d_sc):+.1f} to {100 * max(d_sc):+.1f} points per cell. With almost every "
                         "sample scoring 0, the RL teachers learned from the format credit and the budget rule "
                         "(the thinking tokens above) and stayed close to the SFT model, so MOPD had little to "
                         "distil.")
        else:
            per_dom = ", ".join(f"{d} {_pct(_agg(sft_res, domain=d)['accuracy'])} → {_pct(_agg(stu, domain=d)['accuracy'])}"
                                for d in DOMAINS)
            notes.append(f"Accuracy, SFT stage → this student, pooled over efforts: {per_dom}; the student's mean "
                         f"score differs from the SFT model's by {100 * min(d_sc):+.1f} to {100 * max(d_sc):+.1f} "
                         "points per cell.")
    kinds = [f"{k} {_pct(v['accuracy'])} of {v['episodes']}" for k, v in stu["agentic"]["low"].get("by_kind", {}).items()]
    if kinds:
        notes.append("Agentic accuracy per kind (low effort): " + ", ".join(kinds) + ". *lookup* and *find* "
                     "need the reference or the quoted words copied from the question into the call and the "
                     "verse or reference copied from the tool result into the answer; *next* needs two calls "
                     "and the verse number plus one.")
    its = [r for r in _read_jsonl(work / "mopd" / "mopd_log.jsonl") if "iter" in r]
    if its and "reward_mean" in its[0]:
        notes.append(f"MOPD: the mean per-token reward (clipped log π_teacher − log π_student over the sampled "
                     f"tokens) went from {its[0]['reward_mean']:+.4f} at the first iteration to "
                     f"{its[-1]['reward_mean']:+.4f} at the last ({len(its)} iterations); no token reached the "
                     f"clip (largest clipped fraction {max(r['clipped_frac'] for r in its):.3f}).")
    notes_md = "\n".join(f"- {n}" for n in notes) if notes else "- (no notes)"

    tl = "\n".join(f"| {t['stage']} | {t['s'] / 60:.1f} |" for t in times)
    rl0 = _read_jsonl(next(iter(sorted((work / "teachers").glob("*/rl_log.jsonl"))), Path("/nonexistent")))
    ra = rl0[0]["args"] if rl0 else {}
    mo = _read_jsonl(work / "mopd" / "mopd_log.jsonl")
    ma = mo[0]["args"] if mo else {}
    teachers = sorted(p.parent.parent.name for p in (work / "teachers").glob("*/model/config.json"))
    wa = wt[0]["args"] if wt else {}
    w_note = ("" if not wa or all(wa.get(k) == ra.get(k) for k in ("iters", "lr", "temperature")) else
              f"; the writing teachers {wa.get('iters', '?')} iterations at lr {wa.get('lr', '?')} and temperature "
              f"{wa.get('temperature', '?')}")
    bp, cp = ppl["base"]["ppl"], ppl["chat"]["ppl"]
    card = f"""# K3-mini-chat

K3-mini (models/k3-mini, the {tc['num_hidden_layers']}-layer K3-architecture base model of the King
James Bible) post-trained the K3 way (issue 23): SFT in the exact K3 chat format, RL with verifiable
rewards per domain and per reasoning effort under the thinking-budget rule, and multi-teacher
on-policy distillation (MOPD) of those teachers into this one student. Same architecture, tokenizer
and published layout as K3-mini (bf16 trunk, MXFP4 routed experts); `k3 info --check` validates it.

```
k3 chat  -m models/k3-mini-chat                 # thinks briefly, answers, ends its turn
k3 serve -m models/k3-mini-chat                 # OpenAI API with tools; reasoning_effort low|high|max
```

## What it can do

Three task domains built from the KJV (tools/train/chat_tasks.py; held-out tasks share no verse or
book question with training, Revelation is held out entirely):
- *agentic*: answer with the tools `lookup_verse(book, chapter, verse)` and `search(text)`
  (multi-step: search, then look up the next verse);
- *general*: short questions ("Which book comes after Ruth?", "How many chapters are in …?");
- *writing*: continue a passage with the next verse (graded by exact match of its first six words;
  mean score = the fraction matched).

`reasoning_effort` (low / high / max) reaches the model only through the chat format's
thinking-effort system message, as in K3.

## Held-out results of this model (greedy, {n_eval} held-out tasks per domain and effort)

{student_table}

Thinking tokens: ids of the think channel per episode (summed over its turns); p95 by linear
interpolation. Turns ended: assistant turns that close the message and end with `<|end_of_msg|>`.

## Goals (issue 23)

{goals}

## Reading the numbers

{notes_md}

## Teachers vs student vs the alternatives (same held-out tasks, greedy)

Pooled over the cells each model was evaluated on (a teacher only on its own domain and effort):

{summary_table}

Per cell (accuracy / mean score):

{compare_table}

- *RL teacher of the cell*: the teacher trained on that (domain, effort) only, evaluated there.
- *off-policy distillation*: the SFT model trained by cross-entropy on the same teachers' samples
  (sequence-level distillation, same number of updates and episodes per update as MOPD).
- *RL at max only*: one policy trained by the same RL on every domain at max effort, evaluated at
  every effort.

## Base text kept?

`k3 perplexity -m DIR -f models/k3-mini/heldout.txt -c 256` (Revelation, never trained on):
K3-mini **{bp:.3f}**, K3-mini-chat **{cp:.3f}** ({100 * (cp / bp - 1):+.1f}%).

## How it was made

1. **SFT** (tools/train/sft.py) in five stages, each from the last one's fp32 state:
   chat_tasks trajectories in the K3 chat format, loss on the ids the assistant samples, KJV text
   batches mixed in; Muon + AdamW, MXFP4 QAT, Quantile Balancing. Stages 2-3 add copy batches (KJV
   passages and random KJV tokens written twice, loss on the second copy: a copying circuit forms),
   stages 4-5 retrieval drills (agentic tasks rendered without the ~330-id tool declaration, so the
   ids copied from the question and the tool results weigh more). The SFT stages' own card (data,
   settings, held-out numbers) is [sft_stage.md](sft_stage.md).
2. **RL teachers** (tools/train/rl.py, losses in tools/train/post_losses.py): {len(teachers)} teachers
   ({', '.join(teachers)}), each from the SFT model on one (domain, effort). Rollouts are sampled
   by k3.cpp itself: every iteration the torch policy is exported (MXFP4 experts as published) and
   loaded with `k3.LLM`; the torch model keeps MXFP4 QAT on, so the sampled policy and the trained
   one compute with the same expert values. Reward: 0 for a malformed episode (a turn that does
   not end with `<|close|>message<|sep|><|end_of_msg|>`, an invalid tool call, an agentic task
   answered without a tool), else 0.2 + 0.8 × the task score (the format credit keeps a signal in
   the groups where every sample scores 0). **Budget rule**: b0(x) = median thinking length of the SFT policy's correct samples of
   task x at that effort ({ra.get('n_samples', '?')} samples, before RL), else the SFT trajectory's
   thinking length; a trajectory thinking more than τ·b0(x) gets reward 0; τ = 2.0 → 1.5 → 1.0 over
   thirds of the run. GRPO advantages per task group of {ra.get('n_samples', '?')} samples, plain
   on-policy REINFORCE, token-level mean; AdamW lr {ra.get('lr', '?')}; {ra.get('iters', '?')} iterations of
   {ra.get('tasks_per_iter', '?')} tasks × {ra.get('n_samples', '?')} samples (temperature {ra.get('temperature', '?')}){w_note}.
   Rollout statistics of each teacher's run (samples of train tasks at the teacher's temperature, not held-out):

{teacher_table}

3. **MOPD** (tools/train/mopd.py): the student (init: SFT) samples on k3.cpp at every (domain,
   effort); the matching teacher scores each sampled token; r_t = clip(sg[log π_teacher(y_t) −
   log π_student(y_t)], −{ma.get('clip', '?')}, {ma.get('clip', '?')}) is each token's advantage
   (loss −mean r_t·log π_student(y_t)); {ma.get('iters', '?')} iterations of {ma.get('tasks_per_iter', '?')} tasks ×
   {ma.get('n_samples', '?')} samples per (domain, effort) at temperature {ma.get('temperature', '?')}, AdamW lr {ma.get('lr', '?')}.
4. **Eval** (tools/train/chat_eval.py) on held-out tasks, greedy, on the exported checkpoints.

Everything reruns from one script (from the repository root):

```
tools/train/post_train_k3_mini_chat.sh build/k3-mini-chat-train
```

Time on this machine kind (2 cores; torch on one thread except SFT stages 4-5, k3.cpp on one
thread), per stage{time_note}:

| stage | minutes |
|---|---|
{tl}
| **total** | **{total_s / 60:.1f}** |

## Files

`config.json`, `model-0000k-of-000003.safetensors`, `model.safetensors.index.json`,
`tiktoken.model`, `tokenizer_config.json` (as K3-mini), `chat_eval.json` (this model's held-out metrics),
`eval_all.json` (every model of the comparison), `sft_stage.md` (the card of the SFT stage).
"""
    (mdir / "README.md").write_text(card)
    return card


def _teacher_cells(ev: dict) -> dict:
    """(domain, effort) -> the teacher of that cell's held-out result on its own cell."""
    out = {}
    for d in DOMAINS:
        for e in EFFORTS:
            t = ev.get(f"teacher-{d}-{e}")
            if t and d in t["results"] and e in t["results"][d]:
                out[(d, e)] = t["results"][d][e]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--time-note", default="", help="appended to the time table's heading")
    a = ap.parse_args()
    write_card(a.work, a.model, a.time_note)


if __name__ == "__main__":
    main()
