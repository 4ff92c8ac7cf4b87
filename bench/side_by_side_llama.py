"""llama.cpp side of bench/side_by_side.py: one process per measurement, through llama-cpp-python's
low-level API (the ctypes mirror of llama.h), so only one engine's weights are mapped at a time.

  python bench/side_by_side_llama.py bench  --gguf F --threads T --tests pp64,pp512,tg32 [--reps N]
  python bench/side_by_side_llama.py greedy --gguf F --threads T --ids 1,2,3 -n 32 --logits OUT.npy
  python bench/side_by_side_llama.py tokenize --gguf F --text TEXT

bench: like `k3 bench` and llama-bench: random prompt ids in [0, n_vocab); ppN = one llama_decode of
N prompt tokens from an empty memory (logits of the last only); tgN = N single-token decodes from an
empty memory. Untimed warm-up first (whole largest prefill until 0.5 s have passed, 1..8 runs, and
one tg run). Times are llama.cpp's own perf counters (llama_perf_context: t_p_eval_ms for batches,
t_eval_ms for single tokens), medians of --reps runs; prints one JSON object {test: tokens/s}.
greedy: argmax decoding of -n tokens after --ids, then a teacher-forced pass over ids + output with
logits for every position (saved as float32 [n, vocab] .npy); prints {"ids": [...]}.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import random
import statistics
import sys
import time

import numpy as np
import llama_cpp as L


@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def _quiet(level, text, user):  # llama.cpp logs go nowhere (errors surface as return codes)
    pass


class Engine:
    def __init__(self, gguf: str, threads: int, n_ctx: int, n_batch: int):
        L.llama_log_set(_quiet, ctypes.c_void_p())
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(gguf.encode(), mp)
        if not self.model:
            raise SystemExit(f"side_by_side_llama: llama.cpp could not load {gguf}")
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = n_ctx, n_batch, n_batch, 1
        cp.n_threads = cp.n_threads_batch = threads
        cp.no_perf = False
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise SystemExit(f"side_by_side_llama: llama.cpp could not create a context for {gguf}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.mem = L.llama_get_memory(self.ctx)
        self.batch = L.llama_batch_init(n_batch, 0, 1)

    def decode(self, ids, pos0: int, all_logits: bool = False):
        b = self.batch
        b.n_tokens = len(ids)
        for i, t in enumerate(ids):
            b.token[i], b.pos[i], b.n_seq_id[i] = int(t), pos0 + i, 1
            b.seq_id[i][0] = 0
            b.logits[i] = all_logits or i == len(ids) - 1
        rc = L.llama_decode(self.ctx, b)
        if rc != 0:
            raise SystemExit(f"side_by_side_llama: llama_decode returned {rc}")
        L.llama_synchronize(self.ctx)

    def logits(self, i: int) -> np.ndarray:
        p = L.llama_get_logits_ith(self.ctx, i)
        return np.ctypeslib.as_array(p, shape=(self.n_vocab,)).copy()

    def reset(self):
        L.llama_memory_clear(self.mem, True)
        L.llama_perf_context_reset(self.ctx)

    def pp(self, ids) -> float:
        self.reset()
        self.decode(ids, 0)
        return L.llama_perf_context(self.ctx).t_p_eval_ms / 1e3

    def tg(self, ids) -> float:
        self.reset()
        for i, t in enumerate(ids):
            self.decode([t], i)
        return L.llama_perf_context(self.ctx).t_eval_ms / 1e3


def cmd_bench(a):
    tests = [(t[:2], int(t[2:])) for t in a.tests.split(",")]
    n_pp = max([n for k, n in tests if k == "pp"], default=1)
    n_tg = max([n for k, n in tests if k == "tg"], default=1)
    e = Engine(a.gguf, a.threads, n_ctx=max(n_pp, n_tg) + 16, n_batch=max(n_pp, 1))
    rng = random.Random(a.seed)
    prompt = [rng.randrange(e.n_vocab) for _ in range(n_pp)]
    gen = [rng.randrange(e.n_vocab) for _ in range(n_tg)]
    t0 = time.perf_counter()
    for i in range(8):  # warm-up, as k3 bench
        e.pp(prompt)
        if time.perf_counter() - t0 >= 0.5:
            break
    e.tg(gen)
    out = {}
    for kind, n in tests:
        runs = [e.pp(prompt[:n]) if kind == "pp" else e.tg(gen[:n]) for _ in range(a.reps)]
        out[f"{kind}{n}"] = n / statistics.median(runs)
    print(json.dumps(out))


def cmd_greedy(a):
    ids = [int(x) for x in a.ids.split(",")]
    e = Engine(a.gguf, a.threads, n_ctx=len(ids) + a.n + 16, n_batch=len(ids) + a.n)
    e.reset()
    e.decode(ids, 0)
    out = []
    for i in range(a.n):
        tok = int(np.argmax(e.logits(-1)))
        out.append(tok)
        e.decode([tok], len(ids) + i)
    e.reset()
    seq = ids + out
    e.decode(seq, 0, all_logits=True)
    np.save(a.logits, np.stack([e.logits(i) for i in range(len(seq))]).astype(np.float32))
    print(json.dumps({"ids": out}))


def cmd_tokenize(a):
    e = Engine(a.gguf, 1, n_ctx=64, n_batch=64)
    text = a.text.encode()
    buf = (L.llama_token * (len(text) + 8))()
    n = L.llama_tokenize(e.vocab, text, len(text), buf, len(buf), False, True)
    if n < 0:
        raise SystemExit(f"side_by_side_llama: llama_tokenize returned {n}")
    print(json.dumps({"ids": list(buf[:n])}))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--tests", default="pp64,pp512,tg32")
    b.add_argument("--reps", type=int, default=1)
    b.add_argument("--seed", type=int, default=1)
    g = sub.add_parser("greedy")
    g.add_argument("--ids", required=True)
    g.add_argument("-n", type=int, default=32)
    g.add_argument("--logits", required=True)
    t = sub.add_parser("tokenize")
    t.add_argument("--text", required=True)
    for p in (b, g, t):
        p.add_argument("--gguf", required=True)
        p.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    {"bench": cmd_bench, "greedy": cmd_greedy, "tokenize": cmd_tokenize}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
