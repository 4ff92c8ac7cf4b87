"""Memory bounds of `k3 serve`'s /tokenize and prompt tokenization (security review finding F10) on models/k3-mini.

A 30 MiB /tokenize body tokenized whole and answered with a JSON tree of every id would take
hundreds of MiB per request (several at once: GiBs). One request produces at most
--max-tokenize-tokens ids (more: 413 naming the limit and the flag), the server's /tokenize
requests together reserve at most twice that (more: 429), and the response is written without
a JSON tree. A completion prompt stops being tokenized once it cannot fit the context (400).
The tests send the attacks and read the server's peak RSS (VmHWM of /proc/PID/status):

- one 30 MiB /tokenize: 413 naming --max-tokenize-tokens, peak RSS grows by less than 256 MiB
  (it grew by ~460-700 MiB before: the ids, a JSON tree of them and its dump);
- four concurrent 30 MiB /tokenize: each 413 or 429, peak RSS grows by less than 640 MiB (it
  grew by ~1.6 GiB before); what remains is mostly the four request bodies httplib reads;
- a 30 MiB /v1/completions prompt: 400 naming the context, peak RSS grows by less than 256 MiB;
- a normal /tokenize still answers the same ids; a small --max-tokenize-tokens refuses a text just
  over it and answers one at it.

Servers listen on 127.0.0.1 only and are stopped by PID (SIGTERM).
"""
import concurrent.futures as cf
import os

import httpx
import pytest

from test_server_openai import MINI, Server

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MINI, "config.json")), reason="models/k3-mini missing")

HELDOUT = open(os.path.join(MINI, "heldout.txt"), encoding="utf-8").read()
BIG = (HELDOUT * (1 + (30 << 20) // len(HELDOUT)))[:30 << 20]  # 30 MiB of text: about 7.4M ids
MIB = 1 << 20


def vm_hwm(server):
    with open(f"/proc/{server.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


@pytest.fixture
def server(tmp_path):
    s = Server(str(tmp_path / "serve.log"), "-np", "1", "-c", "2048")
    # warm up the request path once, so the baseline includes the HTTP threads' first allocations
    assert httpx.post(s.url + "/tokenize", json={"prompt": "In the beginning"}, timeout=10).status_code == 200
    yield s
    s.stop()


def test_f10_one_30_mib_tokenize_is_refused_with_bounded_memory(server):
    base = vm_hwm(server)
    r = httpx.post(server.url + "/tokenize", json={"prompt": BIG}, timeout=300)
    grown = vm_hwm(server) - base
    print(f"[F10] one 30 MiB /tokenize: HTTP {r.status_code}, peak RSS +{grown / MIB:.0f} MiB")
    assert r.status_code == 413, r.text[:300]
    err = r.json()["error"]
    assert "--max-tokenize-tokens" in err["message"] and str(1 << 20) in err["message"], err
    assert err["param"] == "prompt"
    assert grown < 256 * MIB, f"peak RSS grew by {grown / MIB:.0f} MiB"
    # the server still answers
    r = httpx.post(server.url + "/tokenize", json={"prompt": "And God said"}, timeout=10)
    assert r.status_code == 200 and r.json()["count"] == len(r.json()["tokens"]) > 0


def test_f10_four_concurrent_30_mib_tokenize_keep_memory_bounded(server):
    base = vm_hwm(server)

    def one(_):
        return httpx.post(server.url + "/tokenize", json={"prompt": BIG}, timeout=300)

    with cf.ThreadPoolExecutor(4) as ex:
        rs = list(ex.map(one, range(4)))
    grown = vm_hwm(server) - base
    codes = sorted(r.status_code for r in rs)
    print(f"[F10] four concurrent 30 MiB /tokenize: HTTP {codes}, peak RSS +{grown / MIB:.0f} MiB")
    assert set(codes) <= {413, 429}, [r.text[:200] for r in rs]
    assert 413 in codes
    for r in rs:
        if r.status_code == 429:
            assert "--max-tokenize-tokens" in r.json()["error"]["message"]
    assert grown < 640 * MIB, f"peak RSS grew by {grown / MIB:.0f} MiB"


def test_f10_30_mib_completion_prompt_is_refused_by_the_context(server):
    base = vm_hwm(server)
    r = httpx.post(server.url + "/v1/completions", json={"prompt": BIG, "max_tokens": 4}, timeout=300)
    grown = vm_hwm(server) - base
    print(f"[F10] 30 MiB completion prompt: HTTP {r.status_code}, peak RSS +{grown / MIB:.0f} MiB")
    assert r.status_code == 400, r.text[:300]
    assert "maximum context length is 2048" in r.json()["error"]["message"]
    assert f"your prompt contains more than {1 << 20} input tokens" in r.json()["error"]["message"]
    assert grown < 256 * MIB, f"peak RSS grew by {grown / MIB:.0f} MiB"


def test_f10_normal_tokenize_and_a_small_limit(tmp_path, server):
    text = HELDOUT[:4000]
    r = httpx.post(server.url + "/tokenize", json={"prompt": text}, timeout=30)
    assert r.status_code == 200
    full = r.json()
    assert full["count"] == len(full["tokens"]) and full["max_model_len"] == 2048 and full["token_strs"] is None
    n = full["count"]
    small = Server(str(tmp_path / "small.log"), "-np", "1", "-c", "2048", "--max-tokenize-tokens", str(n))
    try:
        r = httpx.post(small.url + "/tokenize", json={"prompt": text}, timeout=30)
        assert r.status_code == 200 and r.json() == full  # exactly at the limit: answered, same ids
        r = httpx.post(small.url + "/tokenize", json={"prompt": text + " And"}, timeout=30)
        assert r.status_code == 413 and f"(--max-tokenize-tokens {n})" in r.json()["error"]["message"], r.text
        msgs = {"messages": [{"role": "user", "content": text}]}
        r = httpx.post(small.url + "/tokenize", json=msgs, timeout=30)
        assert r.status_code == 413 and r.json()["error"]["param"] == "messages", r.text
    finally:
        small.stop()
    # the flag is validated
    with pytest.raises(AssertionError, match="max-tokenize-tokens"):
        Server(str(tmp_path / "bad.log"), "-np", "1", "--max-tokenize-tokens", "0")
