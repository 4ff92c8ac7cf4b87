"""Kept slot states of `k3 serve --slot-save-path` (security review finding F9) on models/k3-mini.

With --slot-save-path each slot keeps the state of its last sequence, and a request whose prompt
extends the kept ids continues from it. The README promises that a request's output equals the
same request run alone; these tests perform what a multi-turn client does and check it:

- 20 conversations (greedy and seeded sampling, /v1/completions on ids and /v1/chat/completions
  on messages): turn 2's prompt is turn 1's prompt + its output + new text; every turn's text AND
  logprobs (with top_logprobs) equal the same request sent to a fresh server that keeps nothing;
  the kept server did resume (it prefilled fewer prompt tokens than it was sent); with the
  prefix cache off (kept slots alone) and on (the reproducer's set-up);
- the same after POST /slots/{id}?action=save, a restart and ?action=restore;
- a `k3 run --state-save` file (its last ids fed in decode form) is refused by ?action=restore
  with a message naming the file.

Servers listen on 127.0.0.1 only and are stopped by PID (SIGTERM) by their fixtures.
"""
import os
import subprocess

import httpx
import pytest

from test_server_openai import K3, MINI, Server

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MINI, "config.json")), reason="models/k3-mini missing")

HELDOUT = open(os.path.join(MINI, "heldout.txt"), encoding="utf-8").read()
N_ROUNDS = 20
TOP = 5


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """Runs every request alone: no kept states, no prefix cache."""
    s = Server(str(tmp_path_factory.mktemp("fresh") / "serve.log"), "--no-cache", "-np", "1", "-c", "2048")
    yield s
    s.stop()


def metric(server, name):
    for line in httpx.get(server.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("k3:" + name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric k3:{name} not found")


def tokenize(server, text):
    r = httpx.post(server.url + "/tokenize", json={"prompt": text}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def sampling(i):
    return {"temperature": 0} if i % 2 == 0 else {"temperature": 0.9, "seed": 1000 + i, "top_k": 40}


def completion(server, prompt_ids, i, n):
    body = {"prompt": prompt_ids, "max_tokens": n, "logprobs": TOP, **sampling(i)}
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    return c["text"], c["logprobs"], r.json()["usage"]["prompt_tokens"]


def chat(server, messages, i, n):
    body = {"messages": messages, "max_tokens": n, "logprobs": True, "top_logprobs": TOP,
            "chat_template_kwargs": {"thinking": i % 4 != 1}, **sampling(i)}
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    text = (c["message"].get("reasoning_content") or "") + "\x00" + (c["message"].get("content") or "")
    return text, c["logprobs"], r.json()["usage"]["prompt_tokens"]


def first_prompt(i):
    start = (i * 2957) % (len(HELDOUT) - 3000)
    return HELDOUT[start:start + 150 + 97 * (i % 9)]  # about 40..250 tokens: on and off the 64-grid


@pytest.mark.parametrize("cache", ["no-cache", "cache"])
def test_f9_extending_requests_equal_fresh_runs_text_and_logprobs(tmp_path, fresh, cache):
    """Kept slots alone (--no-cache), and next to the prefix cache (the reproducer's set-up)."""
    flags = ["--no-cache"] if cache == "no-cache" else []
    kept = Server(str(tmp_path / "kept.log"), "--slot-save-path", str(tmp_path / "slots"), *flags, "-np", "2",
                  "-c", "2048")
    try:
        sent = 0
        compared = 0
        for i in range(N_ROUNDS):
            n1, n2 = 8 + i % 5, 10
            if i % 2 == 0:  # completions on ids: turn 2 = turn 1's ids + its output + new text
                p1 = tokenize(fresh, first_prompt(i))
                got1 = completion(kept, p1, i, n1)
                want1 = completion(fresh, p1, i, n1)
                assert got1 == want1, f"round {i} turn 1"
                p2 = p1 + tokenize(fresh, want1[0]) + tokenize(fresh, HELDOUT[500 + 37 * i:560 + 41 * i])
                got2 = completion(kept, p2, i + 100, n2)
                want2 = completion(fresh, p2, i + 100, n2)
            else:  # a chat: the assistant's answer goes back into the history
                m1 = [{"role": "user", "content": first_prompt(i)}]
                got1 = chat(kept, m1, i, n1)
                want1 = chat(fresh, m1, i, n1)
                assert got1 == want1, f"round {i} turn 1"
                m2 = m1 + [{"role": "assistant", "content": want1[0].split("\x00")[1]},
                           {"role": "user", "content": HELDOUT[900 + 53 * i:960 + 29 * i]}]
                got2 = chat(kept, m2, i + 100, n2)
                want2 = chat(fresh, m2, i + 100, n2)
            # identical text and identical logprobs (every token's logprob and its top alternatives)
            assert got2[0] == want2[0], f"round {i}: text differs"
            assert got2[1] == want2[1], f"round {i}: logprobs differ"
            assert got2[2] == want2[2]
            sent += got1[2] + got2[2]
            compared += 2
        computed = metric(kept, "prompt_tokens_total")
        print(f"[F9] {cache}: {compared} requests equal to fresh runs; the kept server prefilled {computed:.0f} of "
              f"{sent} prompt tokens")
        assert computed < sent - 1000, "no prompt was resumed"
    finally:
        kept.stop()


def test_f9_restored_slot_continues_like_a_fresh_run(tmp_path, fresh):
    slots = tmp_path / "slots"
    rounds = []
    a = Server(str(tmp_path / "a.log"), "--slot-save-path", str(slots), "--no-cache", "-np", "1", "-c", "2048")
    try:
        for i in range(4):
            p1 = tokenize(fresh, first_prompt(3 * i + 2))  # 80..250 tokens: a kept state of >= 64
            out = completion(a, p1, i, 6)
            r = httpx.post(a.url + "/slots/0?action=save", json={"filename": f"c{i}.bin"}, timeout=60)
            assert r.status_code == 200, r.text
            assert r.json()["n_saved"] > 0 and r.json()["n_saved"] % 64 == 0  # cut at an exact resume point
            rounds.append((p1 + tokenize(fresh, out[0]) + tokenize(fresh, " And he said"), r.json()["n_saved"]))
    finally:
        a.stop()
    b = Server(str(tmp_path / "b.log"), "--slot-save-path", str(slots), "--no-cache", "-np", "2", "-c", "2048")
    try:
        for i, (p2, n_saved) in enumerate(rounds):
            r = httpx.post(b.url + "/slots/1?action=restore", json={"filename": f"c{i}.bin"}, timeout=60)
            assert r.status_code == 200 and r.json()["n_restored"] == n_saved, r.text
            before = metric(b, "prompt_tokens_total")
            got = completion(b, p2, i + 7, 10)
            want = completion(fresh, p2, i + 7, 10)
            assert got == want, f"round {i}"
            assert metric(b, "prompt_tokens_total") - before == len(p2) - n_saved  # resumed from the restored state
        # A `k3 run` state ends with generated ids fed in decode form: refused, naming the file.
        run_state = slots / "run.bin"
        p = subprocess.run([K3, "run", "-m", MINI, "-p", HELDOUT[:400], "-n", "4", "--temp", "0", "--state-save",
                            str(run_state)], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        r = httpx.post(b.url + "/slots/0?action=restore", json={"filename": "run.bin"}, timeout=60)
        assert r.status_code == 400, r.text
        msg = r.json()["error"]["message"]
        assert "run.bin" in msg and "exact resume point" in msg, msg
    finally:
        b.stop()
