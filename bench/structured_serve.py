#!/usr/bin/env python3
"""Tokens/s of `k3 serve` with and without a constraint (response_format / grammar) on the same
prompts, one stream and --streams concurrent streams. A benchmark, not a test.

Usage:
  .venv/bin/python bench/structured_serve.py -m models/k3-mini [--streams 4] [--requests 8] [-t 2]
      [--url http://127.0.0.1:PORT]   (--url: use a running server)

Starts `build/tools/cli/k3 serve -m MODEL -np STREAMS --port 0` on 127.0.0.1 (unless --url), sends
chat requests with thinking off, temperature 1 and fixed seeds, and divides the completion tokens
by the wall time. A constrained answer ends when its grammar does, so each row also shows the
tokens per request. Prints a markdown table.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import re
import subprocess
import sys
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                           "age": {"type": "integer", "minimum": 0},
                                           "tribe": {"enum": ["Judah", "Levi", "Dan"]},
                                           "sons": {"type": "array", "items": {"type": "string", "maxLength": 16},
                                                    "maxItems": 4}},
          "required": ["name", "age", "tribe", "sons"], "additionalProperties": False}
CASES = [
    ("none", {}),
    ("json_object", {"response_format": {"type": "json_object"}}),
    ("json_schema (person)", {"response_format": {"type": "json_schema",
                                                  "json_schema": {"name": "p", "schema": PERSON, "strict": True}}}),
    ("GBNF [a-z ]+", {"grammar": 'root ::= [a-z ]+ "."'}),
]


def start(model, streams, threads):
    k3 = os.path.join(ROOT, "build", "tools", "cli", "k3")
    log = open("/tmp/k3_structured_serve.log", "wb")
    p = subprocess.Popen([k3, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "-np", str(streams),
                          "-t", str(threads)], stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(600):
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open("/tmp/k3_structured_serve.log").read())
        if m:
            url = f"http://127.0.0.1:{m.group(1)}"
            for _ in range(600):
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        return p, url
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        time.sleep(0.05)
    p.kill()
    sys.exit("k3 serve did not start: see /tmp/k3_structured_serve.log")


def run(url, extra, streams, n, max_tokens):
    def one(i):
        body = {"messages": [{"role": "user", "content": "Name a man of the tribe of Levi and his sons."}],
                "max_tokens": max_tokens, "temperature": 1.0, "seed": 1000 + i,
                "chat_template_kwargs": {"thinking": False}, **extra}
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=600)
        r.raise_for_status()
        return r.json()["usage"]["completion_tokens"]

    t0 = time.time()
    with cf.ThreadPoolExecutor(streams) as ex:
        toks = list(ex.map(one, range(n)))
    dt = time.time() - t0
    return sum(toks), dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "k3-mini"))
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--url")
    a = ap.parse_args()
    proc = None
    url = a.url
    if not url:
        proc, url = start(a.model, a.streams, a.threads)
    try:
        print(f"| constraint | streams | requests | tokens/request | tokens/s |")
        print(f"|---|---|---|---|---|")
        for name, extra in CASES:
            for s in sorted({1, a.streams}):
                run(url, extra, s, s, a.max_tokens)  # warm-up (compile cache, prefix cache)
                n = a.requests if s > 1 else max(2, a.requests // 2)
                toks, dt = run(url, extra, s, n, a.max_tokens)
                print(f"| {name} | {s} | {n} | {toks / n:.1f} | {toks / dt:.1f} |", flush=True)
    finally:
        if proc:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
