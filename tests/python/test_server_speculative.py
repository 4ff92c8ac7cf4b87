"""Speculative decoding in `k3 serve` end to end on models/k3-mini: a server started
with `--spec-type ngram-simple --draft-max 4` (prompt lookup) and one with `--draft-model
models/k3-nano` answer greedy /v1/chat/completions and /v1/completions, streamed and not, with
exactly the text of a server without speculation (also with stop strings and logprobs); on a
repetitive prompt /metrics counts drafted and accepted ids, the response's `timings` report
draft_n / draft_n_accepted, and `"speculative": false` opts a request out.

Uses test_server_openai's Server helper (free port, SIGTERM at the end, exit status 0).
"""
import json
import os

import httpx
import pytest

import test_server_openai as srv
from test_server_openai import Server, metric

NANO = os.path.join(srv.ROOT, "models", "k3-nano")

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(srv.MINI, "config.json")),
                                reason="models/k3-mini missing")

COMMON = ("-np", "3", "-c", "1024", "-t", "1")

# K3-mini was trained on the King James Bible: a verse it has seen, repeated, makes the greedy
# continuation repeat text of the prompt (what prompt lookup drafts from).
VERSE = ("And God said, Let there be light: and there was light. And God saw the light, that it was good: "
         "and God divided the light from the darkness. ")
REPETITIVE = VERSE * 3


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("plain") / "serve.log"), *COMMON)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def ngram(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("ngram") / "serve.log"), *COMMON, "--spec-type", "ngram-simple",
               "--draft-max", "4")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def draft(tmp_path_factory):
    assert os.path.exists(os.path.join(NANO, "config.json")), f"{NANO}: the committed K3-nano draft model is missing"
    s = Server(str(tmp_path_factory.mktemp("draft") / "serve.log"), *COMMON, "-md", NANO, "--draft-max", "3")
    yield s
    s.stop()


def post(server, path, body):
    r = httpx.post(server.url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def stream(server, path, body):
    """The concatenated text of a streamed answer, and its last data chunk before [DONE]."""
    text, last = "", None
    with httpx.stream("POST", server.url + path, json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ch = json.loads(line[6:])
            if ch.get("choices"):
                c = ch["choices"][0]
                text += (c.get("delta") or {}).get("content") or c.get("text") or ""
                last = ch
    return text, last


def chat_body(content, n=48, **kw):
    return {"messages": [{"role": "user", "content": content}], "max_tokens": n, "temperature": 0,
            "chat_template_kwargs": {"thinking": False}, **kw}


def completion_body(prompt, n=48, **kw):
    return {"prompt": prompt, "max_tokens": n, "temperature": 0, **kw}


@pytest.mark.parametrize("prompt", [REPETITIVE, "Who made the heaven and the earth?"])
def test_chat_greedy_equals_plain_streamed_and_not(plain, ngram, prompt):
    want = post(plain, "/v1/chat/completions", chat_body(prompt))
    got = post(ngram, "/v1/chat/completions", chat_body(prompt))
    assert got["choices"][0]["message"]["content"] == want["choices"][0]["message"]["content"]
    assert got["choices"][0]["finish_reason"] == want["choices"][0]["finish_reason"]
    assert got["usage"] == want["usage"]
    assert "draft_n" not in want["timings"]  # no speculation: llama-server's timings, no draft counts
    t = got["timings"]
    assert 0 <= t["draft_n_accepted"] <= t["draft_n"]
    text, last = stream(ngram, "/v1/chat/completions", chat_body(prompt))
    assert text == want["choices"][0]["message"]["content"]
    assert last["choices"][0]["finish_reason"] == want["choices"][0]["finish_reason"]
    assert "draft_n" in last["timings"]


def test_completion_greedy_stop_string_and_logprobs_equal_plain(plain, ngram):
    for body in (completion_body(REPETITIVE, 64), completion_body(REPETITIVE, 64, stop=["my people, and"]),
                 completion_body(VERSE, 24, logprobs=2)):
        want = post(plain, "/v1/completions", body)
        got = post(ngram, "/v1/completions", body)
        assert got["choices"][0]["text"] == want["choices"][0]["text"]
        assert got["choices"][0]["finish_reason"] == want["choices"][0]["finish_reason"]
        assert got["choices"][0]["logprobs"] == want["choices"][0]["logprobs"]
        assert got["usage"] == want["usage"]
        assert stream(ngram, "/v1/completions", body)[0] == want["choices"][0]["text"]
    stopped = post(ngram, "/v1/completions", completion_body(REPETITIVE, 64, stop=["my people, and"]))
    assert stopped["choices"][0]["finish_reason"] == "stop"  # the stop string was inside the output


def test_metrics_count_drafts_on_a_repetitive_prompt(plain, ngram):
    before = httpx.get(ngram.url + "/metrics").text
    r = post(ngram, "/v1/completions", completion_body(REPETITIVE, 64))
    assert r["timings"]["draft_n_accepted"] > 0, r
    after = httpx.get(ngram.url + "/metrics").text
    drafted = metric(after, "spec_drafted_total") - metric(before, "spec_drafted_total")
    accepted = metric(after, "spec_accepted_total") - metric(before, "spec_accepted_total")
    assert drafted >= r["timings"]["draft_n"] > 0
    assert 0 < accepted <= drafted
    assert metric(after, "spec_verifies_total") > 0
    p = httpx.get(plain.url + "/metrics").text
    assert metric(p, "spec_drafted_total") == 0 and metric(p, "spec_accepted_total") == 0
    assert "speculative decoding: prompt lookup (--spec-ngram-size-n 3), --draft-max 4" in ngram.read_log()


def test_request_can_opt_out(ngram):
    r = post(ngram, "/v1/completions", completion_body(REPETITIVE, 32, speculative=False))
    assert r["timings"]["draft_n"] == 0 and r["timings"]["draft_n_accepted"] == 0
    r = httpx.post(ngram.url + "/v1/completions", json=completion_body("x", 4, speculative="no"), timeout=30)
    assert r.status_code == 400 and "speculative" in r.json()["error"]["message"]


def test_concurrent_requests_equal_plain(plain, ngram):
    """3 slots busy at once (prefill of one next to speculating decodes of others)."""
    import concurrent.futures as cf
    bodies = [completion_body(VERSE * (1 + i % 3), 40 + 4 * i) for i in range(5)]
    want = [post(plain, "/v1/completions", b)["choices"][0]["text"] for b in bodies]
    with cf.ThreadPoolExecutor(5) as ex:
        got = list(ex.map(lambda b: post(ngram, "/v1/completions", b)["choices"][0]["text"], bodies))
    assert got == want


def test_draft_model_server_equals_plain(plain, draft):
    for body in (completion_body(REPETITIVE, 40), completion_body("In the beginning", 40)):
        want = post(plain, "/v1/completions", body)["choices"][0]["text"]
        got = post(draft, "/v1/completions", body)
        assert got["choices"][0]["text"] == want
        assert got["timings"]["draft_n"] > 0
        assert stream(draft, "/v1/completions", body)[0] == want
    want = post(plain, "/v1/chat/completions", chat_body(REPETITIVE))["choices"][0]["message"]["content"]
    assert post(draft, "/v1/chat/completions", chat_body(REPETITIVE))["choices"][0]["message"]["content"] == want
    assert "speculative decoding: draft model" in draft.read_log()
    assert "draft model's state" in draft.read_log()


def test_bad_speculative_flags_are_named_errors(tmp_path):
    import subprocess
    for flags, name in ((["--spec-type", "draft"], "--draft-model"), (["--draft-max", "0"], "--draft-max"),
                        (["--spec-type", "ngram-simple", "--draft-max", "2", "--draft-min", "3"], "--draft-min"),
                        (["--spec-type", "ngram-simple", "--draft-model", NANO], "--draft-model")):
        r = subprocess.run([srv.K3, "serve", "-m", srv.MINI, "--port", "0", *flags], capture_output=True, timeout=60)
        assert r.returncode != 0, flags
        assert name in r.stderr.decode(), (flags, r.stderr.decode())
