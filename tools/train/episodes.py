"""Agent episodes on the k3.cpp engine: the policy's turns are sampled by k3.LLM (the engine's
batched scheduler and sampler, src/runtime/sampler.h), never by a sampler in Python.

rollout(llm, tasks, effort, ...) runs every (task, sample) together: it renders each task with the
engine's K3 chat template (render_chat, as k3.LLM.chat does: tools, thinking on,
thinking_effort=effort), samples one assistant turn for all live episodes at once, parses it with
the engine's parser (k3.LLM.parse_chat_output), executes the tool calls with
chat_tasks.execute_tool, appends the tool results and samples again, until a turn makes no tool
call, a turn does not end with a stop id, the context is full, or max_turns turns were sampled.

Token bookkeeping (what an RL trainer needs to score the sampled ids):
  Episode.ids = the prompt ids, then for each turn the ids the engine sampled followed by the stop
  id it sampled (<|end_of_msg|>), then the environment's ids (tool messages + the next generation
  prompt). Episode.mask[i] = 1 for ids the policy sampled (including the stop id), 0 for ids the
  environment wrote. Turn t+1's prompt is exactly Episode.ids up to that point: the sampled ids are
  never re-tokenized. The environment's ids are render(conversation + tool messages, generation
  prompt) minus render(conversation, no generation prompt): the tool messages and the generation
  prompt as the template writes them (their rendering does not depend on how the assistant turn
  was tokenized). Episode.rerender_match records whether rendering the parsed conversation from
  scratch gives the same ids as this concatenation; it can differ when the model's ids are not the
  tokenizer's canonical split of the same text (the engine always conditions on the concatenation).

The Python handle does not report which stop id ended a turn (<|end_of_msg|> or [EOS]); the episode
writes <|end_of_msg|>, the id the chat format ends a message with.
"""
from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from tools.train import chat_tasks as ct


@dataclass
class Turn:
    """One sampled assistant turn. start/end: the slice of Episode.ids holding its sampled ids
    (stop id included when it ended). finish: the engine's finish_reason ("stop", "length").
    ended: finish == "stop" and the ids before the stop id close the message
    (<|close|>message<|sep|>). thinking_tokens: ids before the first <|close|> (the think
    channel; all ids when it never closes). tool_calls_valid: per call, True when its arguments
    parse as JSON and validate against the declared schema (jsonschema)."""
    start: int
    end: int
    finish: str
    ended: bool
    thinking_tokens: int
    message: dict[str, Any]
    tool_calls_valid: list[bool] = field(default_factory=list)


@dataclass
class Episode:
    """One task run to the end. ids / mask: see the module docstring ([len(ids)] each).
    prompt_len: ids of the first prompt. messages: the assistant and tool messages after
    task.messages (OpenAI-style, as chat_tasks.score reads them). turns: the sampled turns.
    truncated: stopped by max_turns or by the context, not by a final answer."""
    task: ct.Task
    effort: str
    sample: int
    ids: list[int]
    mask: list[int]
    prompt_len: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    truncated: bool = False
    rerender_match: bool = True
    score: float = 0.0

    @property
    def ended(self) -> bool:
        """Every assistant turn ended properly (a stop id after <|close|>message<|sep|>)."""
        return bool(self.turns) and all(t.ended for t in self.turns)

    @property
    def thinking_tokens(self) -> int:
        return sum(t.thinking_tokens for t in self.turns)

    @property
    def n_tool_calls(self) -> int:
        return sum(len(t.tool_calls_valid) for t in self.turns)

    @property
    def n_valid_tool_calls(self) -> int:
        return sum(sum(t.tool_calls_valid) for t in self.turns)

    @property
    def tool_calls_valid(self) -> bool:
        """All tool calls of the episode valid (True when it made none)."""
        return all(all(t.tool_calls_valid) for t in self.turns)

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task.id, "effort": self.effort, "sample": self.sample, "score": self.score,
                "ended": self.ended, "thinking_tokens": self.thinking_tokens,
                "tool_calls": self.n_tool_calls, "valid_tool_calls": self.n_valid_tool_calls,
                "truncated": self.truncated, "rerender_match": self.rerender_match,
                "messages": self.messages}


class ChatRenderer:
    """The engine's K3 chat template and marker ids for one loaded k3.LLM."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        tok = lambda s: llm.tokenize(s, special=True)  # noqa: E731
        self.eom = tok("<|end_of_msg|>")[0]
        self.close = tok("<|close|>")[0]
        self.close_message = tok("<|close|>message<|sep|>")

    def render(self, messages: Sequence[dict[str, Any]], tools: Optional[list], effort: Optional[str],
               generation_prompt: bool = True) -> list[int]:
        """Ids of `messages` in the K3 chat format (thinking on, thinking_effort=effort)."""
        kw: dict[str, Any] = {"thinking": True, "thinking_effort": effort,
                              "add_generation_prompt": generation_prompt}
        if tools is not None:
            kw["tools"] = list(tools)
        return list(self.llm._engine.render_chat(json.dumps(list(messages)), json.dumps(kw)))


def _seed(seed: int, *parts: Any) -> int:
    h = hashlib.sha256(("/".join(str(p) for p in (seed, *parts))).encode()).digest()
    return int.from_bytes(h[:8], "big") >> 1


def rollout(llm: Any, tasks: Sequence[ct.Task], effort: str, *, n_samples: int = 1,
            temperature: float = 1.0, max_tokens: int = 256, max_turns: int = 4, seed: int = 0,
            top_p: float = 1.0, top_k: int = 0, min_p: float = 0.0,
            max_concurrent: int = 32) -> list[Episode]:
    """Runs n_samples episodes of every task at `effort` (chat_tasks.EFFORTS); returns them in
    the order task 0 sample 0, task 0 sample 1, ..., each scored with chat_tasks.score.
    All live episodes sample their next turn together (one engine request each, submitted at
    once, so the scheduler batches them up to the LLM's n_parallel). temperature 0: greedy.
    Sampling defaults (top_p 1, top_k 0, min_p 0) sample the model's distribution unchanged,
    which is what a policy-gradient trainer needs; each request's seed is a hash of (seed, task
    id, sample, turn). max_tokens: ids per assistant turn. max_concurrent: requests in flight at
    once (keep it <= the LLM's n_parallel + max_queue, or the engine raises QueueFullError). Raises ValueError for an unknown effort
    or n_samples < 1; engine errors raise k3.Error."""
    if effort not in ct.EFFORTS:
        raise ValueError(f"rollout: effort {effort!r} is not one of {ct.EFFORTS}")
    if n_samples < 1 or max_turns < 1 or max_tokens < 1:
        raise ValueError("rollout: n_samples, max_turns and max_tokens must be >= 1")
    r = ChatRenderer(llm)
    eps: list[Episode] = []
    for t in tasks:
        p = r.render(t.messages, t.tools, effort)
        for s in range(n_samples):
            eps.append(Episode(t, effort, s, list(p), [0] * len(p), len(p)))
    live = [e for e in eps if len(e.ids) < llm.n_ctx - 1]
    for e in eps:
        if e not in live:
            e.truncated = True
    for turn in range(max_turns):
        if not live:
            break

        def sample(e: Episode) -> Any:
            return llm.generate([e.ids], max_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                                min_p=min_p, seed=_seed(seed, e.task.id, e.sample, turn))[0]

        with ThreadPoolExecutor(max_workers=max(1, min(len(live), max_concurrent))) as ex:
            comps = list(ex.map(sample, live))
        nxt = []
        for e, c in zip(live, comps):
            ids = list(c.token_ids)
            stop = c.finish_reason == "stop"
            start = len(e.ids)
            e.ids += ids + ([r.eom] if stop else [])
            e.mask += [1] * (len(e.ids) - start)
            msg = llm.parse_chat_output(ids)
            cm = len(r.close_message)
            ended = stop and ids[-cm:] == r.close_message if len(ids) >= cm else False
            think = ids.index(r.close) if r.close in ids else len(ids)
            calls = msg.get("tool_calls") or []
            valid = [ct.check_arguments(c_["function"]["name"], c_["function"]["arguments"]) is None
                     for c_ in calls]
            e.turns.append(Turn(start, len(e.ids), c.finish_reason, ended, think, msg, valid))
            before = e.task.messages + e.messages
            e.messages.append(msg)
            if not stop:
                e.truncated = c.finish_reason == "length"
                continue
            if not calls:
                continue
            if turn + 1 >= max_turns:
                e.truncated = True
                continue
            tool_msgs = [{"role": "tool", "tool_call_id": c_["id"], "name": c_["function"]["name"],
                          "content": ct.execute_tool(c_["function"]["name"], c_["function"]["arguments"])}
                         for c_ in calls]
            conv = before + [msg]
            base = r.render(conv, e.task.tools, effort, generation_prompt=False)
            full = r.render(conv + tool_msgs, e.task.tools, effort, generation_prompt=True)
            if full[:len(base)] != base:
                raise RuntimeError(f"rollout: the template's render of {e.task.id} is not prefix-stable")
            env = full[len(base):]
            e.rerender_match = e.rerender_match and (base == e.ids)
            e.messages += tool_msgs
            e.ids += env
            e.mask += [0] * len(env)
            if len(e.ids) >= llm.n_ctx - 1:
                e.truncated = True
                continue
            nxt.append(e)
        live = nxt
    for e in eps:
        if e.rerender_match and e.turns and e.turns[-1].finish == "stop":
            e.rerender_match = r.render(e.task.messages + e.messages, e.task.tools, effort,
                                        generation_prompt=False) == e.ids
        e.score = ct.score(e.task, e.messages)
    return eps
