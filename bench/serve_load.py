#!/usr/bin/env python3
"""Load benchmark of `k3 serve` over loopback: aggregate generated tokens/s and
per-stream inter-token latency for 1, 2, 4, ... concurrent streams, then TTFT / ITL p50 / p95
under a mixed load (short and long prompts arriving over time). A benchmark, not a test.

Usage:
  .venv/bin/python bench/serve_load.py -m models/k3-mini [--streams 1,2,4,8,16,32]
      [--tokens 64] [--prompt-words 16] [--mixed 32] [--mixed-long-words 400] [-t 2]
      [--server-args "..."] [--url http://127.0.0.1:PORT]   (--url: use a running server)

Starts `build/tools/cli/k3 serve -m MODEL -np MAX(streams) --port FREE` on 127.0.0.1 (unless --url),
streams /v1/completions with temperature 0 and ignore_eos (every stream generates exactly
--tokens tokens), and times every SSE chunk on arrival. Prints markdown tables.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(v: list[float], p: float) -> float:
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]


WORDS = ("And God said let there be light and there was light and the evening and the morning "
         "were the first day and the earth was without form and void").split()


def prompt(i: int, n_words: int) -> str:
    return " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(n_words))


def stream_one(url: str, body: dict, out: dict) -> None:
    """POSTs a streaming completion; records submit time, chunk arrival times, token count."""
    out["t0"] = time.perf_counter()
    out["times"] = []
    out["error"] = None
    try:
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=600) as r:
            if r.status_code != 200:
                out["error"] = f"HTTP {r.status_code}: {r.read()[:200]!r}"
                return
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                obj = json.loads(data)
                if "error" in obj:
                    out["error"] = obj["error"]
                    break
                if obj.get("choices") and obj["choices"][0].get("text"):
                    out["times"].append(time.perf_counter())
                if obj.get("usage"):
                    out["usage"] = obj["usage"]
    except Exception as e:  # noqa: BLE001 - reported in the table
        out["error"] = str(e)


MODEL = ""


def run(url: str, n: int, tokens: int, words: list[int], delays: list[float]) -> dict:
    outs = [dict() for _ in range(n)]
    threads = []
    t_start = time.perf_counter()
    for i in range(n):
        body = {"model": MODEL, "prompt": prompt(i, words[i]), "max_tokens": tokens, "temperature": 0,
                "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
        th = threading.Thread(target=stream_one, args=(url, body, outs[i]))
        while time.perf_counter() - t_start < delays[i]:
            time.sleep(0.001)
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    errors = [o["error"] for o in outs if o.get("error")]
    gen = sum(o.get("usage", {}).get("completion_tokens", len(o["times"])) for o in outs)
    firsts = [o["times"][0] for o in outs if o["times"]]
    lasts = [o["times"][-1] for o in outs if o["times"]]
    ttft = [o["times"][0] - o["t0"] for o in outs if o["times"]]
    itl = []
    for o in outs:
        # SSE chunks can carry more than one token when a multi-byte character completes late;
        # ITL is taken per chunk (what a client sees).
        itl += [b - a for a, b in zip(o["times"], o["times"][1:])]
    span = max(lasts) - min(firsts) if firsts else float("nan")
    return {"errors": errors, "gen": gen, "agg": (gen - n) / span if span > 0 else float("nan"),
            "ttft": ttft, "itl": itl}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "k3-mini"))
    ap.add_argument("--streams", default="1,2,4,8,16,32")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=16)
    ap.add_argument("--mixed", type=int, default=32)
    ap.add_argument("--mixed-long-words", type=int, default=400)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--server-args", default="")
    ap.add_argument("--url", default="")
    a = ap.parse_args()
    streams = [int(s) for s in a.streams.split(",")]
    proc = None
    url = a.url
    if not url:
        port = free_port()
        k3 = os.path.join(ROOT, "build", "tools", "cli", "k3")
        cmd = [k3, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", str(port),
               "-np", str(max(max(streams), 8)), "-c", "4096", "--queue", "256"]
        if a.threads:
            cmd += ["-t", str(a.threads)]
        cmd += a.server_args.split()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except Exception:  # noqa: BLE001 - still loading
                time.sleep(0.2)
        else:
            proc.kill()
            print("server did not become healthy", file=sys.stderr)
            return 1
    try:
        global MODEL
        with urllib.request.urlopen(url + "/v1/models", timeout=10) as r:
            MODEL = json.loads(r.read())["data"][0]["id"]
        w = run(url, 1, 4, [a.prompt_words], [0.0])  # warm-up (weights paged in)
        if w["errors"]:
            print(f"warm-up request failed: {w['errors'][0]}", file=sys.stderr)
            return 1
        print(f"model {a.model} | {a.tokens} tokens per stream | prompt {a.prompt_words} words | /v1/completions, temperature 0")
        print("| streams | aggregate tok/s | x single | ITL p50 ms | ITL p95 ms | TTFT p50 ms | errors |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        single = None
        for n in streams:
            r = run(url, n, a.tokens, [a.prompt_words] * n, [0.0] * n)
            if single is None:
                single = r["agg"] / n
            print(f"| {n} | {r['agg']:.2f} | {r['agg'] / single:.2f} | {pct(r['itl'], .5) * 1e3:.1f} | "
                  f"{pct(r['itl'], .95) * 1e3:.1f} | {pct(r['ttft'], .5) * 1e3:.1f} | {len(r['errors'])} |", flush=True)
        if a.mixed:
            n = a.mixed
            words = [a.mixed_long_words if i % 4 == 3 else a.prompt_words for i in range(n)]
            r = run(url, n, a.tokens, words, [0.05 * i for i in range(n)])
            print(f"\nmixed load: {n} requests 50 ms apart, every 4th with a {a.mixed_long_words}-word prompt: "
                  f"TTFT p50 {pct(r['ttft'], .5) * 1e3:.1f} ms, p95 {pct(r['ttft'], .95) * 1e3:.1f} ms | "
                  f"ITL p50 {pct(r['itl'], .5) * 1e3:.1f} ms, p95 {pct(r['itl'], .95) * 1e3:.1f} ms | "
                  f"aggregate {r['agg']:.2f} tok/s | errors {len(r['errors'])}")
    finally:
        if proc:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
