"""k3.LLM: a K3 checkpoint served by the k3.cpp engine, in the spirit of vLLM's ``LLM`` and
llama-cpp-python's ``Llama``.

One ``LLM`` owns what ``k3 serve`` owns: the model, its tokenizer, a prefix cache and the
continuous-batching scheduler (src/runtime/scheduler.h). ``generate`` / ``stream`` / ``chat``
submit requests to that scheduler, so prompts given together, or generated from several Python
threads at once, run in one batch, and a prompt that repeats an earlier prefix resumes from the
prefix cache. The GIL is released while the engine works.
"""
from __future__ import annotations

import json
import os
import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import numpy as np


def _load_engine():  # type: ignore[no-untyped-def]
    """Imports the extension with OpenMP's passive wait policy, the k3 CLI's default
    (tools/cli/omp_wait.h: spinning workers slow decoding on a busy machine). libgomp reads
    OMP_WAIT_POLICY once, when the extension loads it; a policy the user set (OMP_WAIT_POLICY or
    GOMP_SPINCOUNT) is kept, and the environment is left as it was."""
    set_here = "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ
    if set_here:
        os.environ["OMP_WAIT_POLICY"] = "passive"
    try:
        from . import _k3 as mod
    finally:
        if set_here:
            del os.environ["OMP_WAIT_POLICY"]
    return mod


_k3 = _load_engine()

Error = _k3.Error
QueueFullError = _k3.QueueFullError

#: A prompt: text (tokenized like ``k3 run``: no [BOS], special spellings as plain text) or ids.
Prompt = Union[str, Sequence[int]]


@dataclass
class Completion:
    """One generated continuation.

    text: the generated text (UTF-8, specials flagged special=true dropped, cut before a
      matched stop string). token_ids: the sampled ids (a stop id is not included).
    finish_reason: "stop" (a stop id or stop string), "length" (max_tokens or the context) or
      "cancelled". prompt_token_ids: the ids prefilled. seed: the sampler's seed.
    """

    text: str
    token_ids: list[int]
    finish_reason: str
    prompt_token_ids: list[int]
    seed: int


@dataclass
class ChatCompletion:
    """One assistant turn in the K3 chat format, parsed as ``k3 serve`` parses it.

    content: the response channel (None when empty and tool calls were made).
    reasoning_content: the think channel (None when empty).
    tool_calls: OpenAI-shaped calls: {"id", "type": "function", "function": {"name",
      "arguments" (JSON text)}}. finish_reason: "stop" / "length" / "cancelled" ("tool_calls"
      when the turn ended by a stop id after tool calls). token_ids / prompt_token_ids: the
      generated and prompt ids.
    """

    content: Optional[str]
    reasoning_content: Optional[str]
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    token_ids: list[int]
    prompt_token_ids: list[int]
    seed: int

    @property
    def message(self) -> dict[str, Any]:
        """The turn as an OpenAI assistant message (role, content, reasoning_content, tool_calls)."""
        m: dict[str, Any] = {"role": "assistant", "content": self.content,
                             "reasoning_content": self.reasoning_content}
        if self.tool_calls:
            m["tool_calls"] = self.tool_calls
        return m


@dataclass
class _StopText:
    """Cuts streamed text at the first stop string; holds back a tail that may begin one."""

    stops: list[str]
    held: str = ""
    hit: bool = False

    def push(self, piece: str) -> str:
        self.held += piece
        if not self.stops:
            out, self.held = self.held, ""
            return out
        cut = min((i for i in (self.held.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            out, self.held, self.hit = self.held[:cut], "", True
            return out
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.held)), keep, -1):
                if self.held.endswith(s[:k]):
                    keep = k
                    break
        out = self.held[: len(self.held) - keep]
        self.held = self.held[len(self.held) - keep:]
        return out

    def flush(self, tail: str) -> str:
        out = self.push(tail)
        if not self.hit:
            out, self.held = out + self.held, ""
        return out


@dataclass
class _Sequence:
    """One submitted request: its handle, incremental decoder and stop-string matcher."""

    handle: Any
    decoder: Any
    stop: _StopText
    prompt_ids: list[int]
    seed: int
    ids: list[int] = field(default_factory=list)
    finish: Optional[str] = None

    def pieces(self) -> Iterator[str]:
        """Text pieces as the engine samples ids; ends when the sequence ends (finish is set).
        Closing the iterator early cancels the sequence."""
        try:
            while True:
                ev = self.handle.next(0.1)
                if ev is None:
                    continue
                done, id_, finish, error, _n_prompt, _n_generated = ev
                if done:
                    if finish == "error":
                        raise Error(error)
                    if self.finish is None:
                        self.finish = finish
                        tail = self.stop.flush(self.decoder.flush())
                        if tail:
                            yield tail
                    return
                if self.finish is not None:  # a stop string matched: the cancel is on its way
                    continue
                self.ids.append(id_)
                piece = self.stop.push(self.decoder.push(id_))
                if self.stop.hit:
                    self.finish = "stop"
                    self.handle.cancel()
                if piece:
                    yield piece
        finally:
            if self.finish is None:
                self.handle.cancel()

    def result(self) -> Completion:
        text = "".join(self.pieces())
        return Completion(text, self.ids, self.finish or "cancelled", self.prompt_ids, self.seed)


class LLM:
    """A K3 checkpoint loaded into the k3.cpp engine.

    Args:
      model_dir: checkpoint directory (config.json, *.safetensors, tiktoken.model
        [+ tokenizer_config.json]), e.g. models/k3-mini.
      n_ctx: context per sequence in tokens (prompt + generated), >= 2.
      n_parallel: sequences decoded together (scheduler slots), >= 1; more requests wait in a
        queue of ``max_queue`` (k3.QueueFullError past it).
      numerics: "exact", "mxfp8", "bf16" or "int8" (src/kernels/numerics.h); None: K3_NUMERICS,
        else the generating commands' default. One mode per process: a second LLM asking
        another raises k3.Error.
      threads: kernel worker threads (process-wide); 0: all hardware threads.
      cache_ram_mib: prefix-cache RAM budget in MiB (0: no prefix cache).
      prefill_chunk: tokens per prefill piece (ModelOptions::prefill_chunk), >= 1.

    Raises k3.Error with the engine's message (a missing directory, a malformed checkpoint or
    tokenizer, a value out of range).
    """

    def __init__(self, model_dir: Union[str, os.PathLike], *, n_ctx: int = 4096, n_parallel: int = 4,
                 numerics: Optional[str] = None, threads: int = 0, cache_ram_mib: int = 512,
                 max_queue: int = 64, prefill_chunk: int = 256) -> None:
        o = _k3.EngineOptions()
        o.n_ctx, o.n_parallel, o.max_queue = n_ctx, n_parallel, max_queue
        o.numerics, o.threads, o.cache_ram_mib, o.prefill_chunk = numerics or "", threads, cache_ram_mib, prefill_chunk
        self._engine = _k3.Engine(os.fspath(model_dir), o)
        self.model_dir = os.fspath(model_dir)
        self.n_ctx = n_ctx

    # --- lifetime -----------------------------------------------------------------------------
    def close(self) -> None:
        """Cancels running and queued sequences and stops the engine thread."""
        self._engine.close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- tokenizer ----------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Rows of the logits (the model's vocab_size)."""
        return self._engine.vocab_size

    @property
    def stop_ids(self) -> list[int]:
        """Ids that end generation: <|end_of_msg|>, [EOS] (and config eos_token_id)."""
        return list(self._engine.stop_ids)

    @property
    def numerics(self) -> str:
        """The process's numerics mode in force."""
        return self._engine.numerics

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        """Ids of ``text`` (as ``k3 tokenize``); special=True turns special spellings into control ids."""
        return list(self._engine.tokenize(text, special))

    def detokenize(self, ids: Sequence[int], *, skip_special: bool = False) -> str:
        """Text of ``ids`` (invalid UTF-8 replaced by U+FFFD). Raises k3.Error for an id outside the vocabulary."""
        return self._engine.detokenize(list(ids), skip_special).decode("utf-8", errors="replace")

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """Teacher-forced logits of ``ids`` from an empty context (as ``k3 logits``):
        float32 array [len(ids), vocab_size], row t = the logits after ids[0..t]."""
        return self._engine.logits(list(ids))

    # --- generation ---------------------------------------------------------------------------
    def _sampling(self, temperature: float, top_p: float, top_k: int, min_p: float, repeat_penalty: float,
                  seed: Optional[int]) -> _k3.SamplerParams:
        sp = _k3.SamplerParams()
        sp.temp, sp.top_p, sp.top_k, sp.min_p, sp.repeat_penalty = temperature, top_p, top_k, min_p, repeat_penalty
        sp.seed = random.SystemRandom().getrandbits(64) if seed is None else seed
        sp.validate()
        return sp

    def _prompt_ids(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, np.ndarray):
            prompt = prompt.tolist()
        return self.tokenize(prompt) if isinstance(prompt, str) else [int(i) for i in prompt]

    def _submit(self, prompt_ids: list[int], max_tokens: Optional[int], sp: _k3.SamplerParams,
                stop: Optional[Sequence[str]], ignore_eos: bool) -> _Sequence:
        if isinstance(stop, str):
            stop = [stop]
        handle = self._engine.submit(prompt_ids, -1 if max_tokens is None else max_tokens, sp, ignore_eos)
        return _Sequence(handle, _k3.StreamDecoder(self._engine), _StopText([s for s in (stop or []) if s]),
                         prompt_ids, sp.seed)

    def generate(self, prompts: Union[Prompt, Sequence[Prompt]], max_tokens: Optional[int] = 128, *,
                 temperature: float = 0.8, top_p: float = 0.95, top_k: int = 40, min_p: float = 0.05,
                 repeat_penalty: float = 1.0, seed: Optional[int] = None,
                 stop: Optional[Union[str, Sequence[str]]] = None, ignore_eos: bool = False) -> list[Completion]:
        """Continues each prompt (raw text, no chat template; or token ids); one Completion per prompt.

        All prompts are submitted at once, so they run batched. max_tokens: ids to sample at
        most (None: until a stop id or the context is full; clamped to the room left in the
        context). Sampling follows src/runtime/sampler.h (temperature <= 0: greedy, ties to the
        lowest id; defaults are llama.cpp's); seed None draws one (each Completion records it).
        stop: strings that end a continuation (the text is cut before them). ignore_eos: do not
        stop at <|end_of_msg|> / [EOS]. Raises k3.Error (a prompt that does not fit the
        context, an id outside the vocabulary, a sampling value out of range), k3.QueueFullError.
        """
        if isinstance(prompts, np.ndarray):  # [n_ids] or [n_prompts, n_ids] token ids
            prompts = prompts.tolist()
        if isinstance(prompts, str) or (isinstance(prompts, Sequence) and prompts and
                                        all(isinstance(i, (int, np.integer)) for i in prompts)):
            prompts = [prompts]  # type: ignore[list-item]
        sp = self._sampling(temperature, top_p, top_k, min_p, repeat_penalty, seed)
        seqs: list[_Sequence] = []
        try:
            for p in prompts:  # type: ignore[union-attr]
                seqs.append(self._submit(self._prompt_ids(p), max_tokens, sp, stop, ignore_eos))
            return [s.result() for s in seqs]
        finally:
            for s in seqs:
                if s.finish is None:
                    s.handle.cancel()

    def stream(self, prompt: Prompt, max_tokens: Optional[int] = 128, *, temperature: float = 0.8,
               top_p: float = 0.95, top_k: int = 40, min_p: float = 0.05, repeat_penalty: float = 1.0,
               seed: Optional[int] = None, stop: Optional[Union[str, Sequence[str]]] = None,
               ignore_eos: bool = False) -> Iterator[str]:
        """Yields the continuation of one prompt as text pieces while the engine samples it
        (arguments as generate(); the pieces join to generate()'s text). Closing the iterator
        early cancels the sequence."""
        sp = self._sampling(temperature, top_p, top_k, min_p, repeat_penalty, seed)
        seq = self._submit(self._prompt_ids(prompt), max_tokens, sp, stop, ignore_eos)
        yield from seq.pieces()

    def chat(self, messages: Sequence[Mapping[str, Any]], max_tokens: Optional[int] = 1024, *,
             tools: Optional[Sequence[Mapping[str, Any]]] = None, tool_choice: Optional[Any] = None,
             thinking: bool = True, thinking_effort: Optional[str] = "max",
             response_format: Optional[Mapping[str, Any]] = None, temperature: float = 0.8, top_p: float = 0.95,
             top_k: int = 40, min_p: float = 0.05, repeat_penalty: float = 1.0,
             seed: Optional[int] = None) -> ChatCompletion:
        """One assistant turn for OpenAI-style ``messages`` in the K3 chat format
        (src/tokenizer/chat_k3.h; tools / tool_choice / response_format / thinking /
        thinking_effort as apply_chat_template's keyword arguments), parsed into content,
        reasoning and tool calls as ``k3 serve`` does. Sampling arguments as generate().
        Raises k3.Error for malformed messages (naming the message index and key)."""
        kwargs: dict[str, Any] = {"thinking": thinking, "thinking_effort": thinking_effort}
        if tools is not None:
            kwargs["tools"] = list(tools)
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        if response_format is not None:
            kwargs["response_format"] = dict(response_format)
        prompt_ids = list(self._engine.render_chat(json.dumps(list(messages)), json.dumps(kwargs)))
        sp = self._sampling(temperature, top_p, top_k, min_p, repeat_penalty, seed)
        seq = self._submit(prompt_ids, max_tokens, sp, None, False)
        for _ in seq.pieces():
            pass
        m = self.parse_chat_output(seq.ids, thinking=thinking)
        finish = seq.finish or "cancelled"
        if finish == "stop" and m.get("tool_calls"):
            finish = "tool_calls"
        return ChatCompletion(content=m["content"], reasoning_content=m["reasoning_content"],
                              tool_calls=m.get("tool_calls", []), finish_reason=finish, token_ids=seq.ids,
                              prompt_token_ids=prompt_ids, seed=sp.seed)

    def parse_chat_output(self, ids: Sequence[int], *, thinking: bool = True) -> dict[str, Any]:
        """Parses ids generated after a K3 chat prompt (src/tokenizer/chat_output.h) into an
        OpenAI assistant message: role, content (None when empty and tool calls were made),
        reasoning_content (None when empty) and, when calls were made, tool_calls
        [{"id", "type": "function", "function": {"name", "arguments" (JSON text)}}].
        thinking: the prompt opened the think channel (chat(thinking=True)), so text before any
        marker is reasoning. Parsing stops at the first <|end_of_msg|> or [EOS].
        Raises k3.Error for an id outside the vocabulary."""
        p = self._engine.parse_output([int(i) for i in ids], thinking)
        calls = [{"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
                  "function": {"name": c["name"], "arguments": c["arguments"]}} for c in p["tool_calls"]]
        m: dict[str, Any] = {"role": "assistant", "content": p["content"] if (p["content"] or not calls) else None,
                             "reasoning_content": p["reasoning"] or None}
        if calls:
            m["tool_calls"] = calls
        return m

    def stats(self) -> dict[str, int]:
        """Scheduler counters: running, waiting, prompt_tokens_total, prompt_tokens_reused
        (taken from the prefix cache), generated_tokens_total, steps_total, finished_total."""
        return dict(self._engine.stats())
