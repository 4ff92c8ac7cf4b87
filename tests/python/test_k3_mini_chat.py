"""models/k3-mini-chat (issue 23): the post-trained K3-mini, greedy, on held-out tasks: it calls
tools with the question's arguments, ends every turn with <|end_of_msg|>, thinks more at a higher
effort, through the python package (tools/train/episodes.rollout on the engine), `k3 chat`, and
`k3 serve` with examples/agent.py (the openai client, tools executed locally, a real tool call).
Its answers' accuracy is measured by tools/train/chat_eval.py and stated in its model card.

The held-out tasks are chat_tasks.make_tasks(DOMAIN, "heldout", n, 0): no train task shares their
verses or book questions. Greedy decoding in the exact numerics mode, so the answers do not depend
on the machine's ISA.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)

from tools.train import chat_tasks as ct  # noqa: E402

K3 = os.environ.get("K3_BIN", os.path.join(os.environ.get("K3_ROOT", ROOT), "build", "tools", "cli", "k3"))
CHAT = os.path.join(ROOT, "models", "k3-mini-chat")

assert os.path.exists(os.path.join(CHAT, "config.json")), f"{CHAT}: the committed chat model is missing"


def heldout(domain, kind, n):
    return [t for t in ct.make_tasks(domain, "heldout", 60, 0) if t.meta["kind"] == kind][:n]


@pytest.fixture(scope="module")
def llm():
    from tools.train.k3_import import import_k3
    k3 = import_k3()
    with k3.LLM(CHAT, threads=2, n_parallel=4, n_ctx=2048, numerics="exact") as m:
        yield m


def test_chat_model_calls_tools_and_ends_its_turns(llm):
    # Held-out lookups, greedy, exact numerics: the tool call carries the question's book, chapter
    # and verse, every turn ends, and the answer quotes the tool's verse; the model's copy of a long
    # verse still slips on most verses (the card's agentic accuracy), so the answer is asserted for
    # the one of these three it copies whole (Exodus 35:6).
    from tools.train.episodes import rollout
    tasks = heldout("agentic", "lookup", 3)
    eps = rollout(llm, tasks, "low", temperature=0.0, max_tokens=384, max_turns=3)
    for e in eps:
        assert e.ended and not e.truncated, (e.task.id, e.messages)   # every turn closed by <|end_of_msg|>
        assert e.n_tool_calls >= 1 and e.tool_calls_valid, (e.task.id, e.messages)
        call = e.messages[0]["tool_calls"][0]["function"]
        assert call["name"] == "lookup_verse"
        v = ct.verses()[e.task.meta["verse"]]
        assert json.loads(call["arguments"]) == {"book": v.book, "chapter": v.chapter, "verse": v.verse}, call
        assert e.messages[1]["role"] == "tool" and e.messages[1]["content"] == ct.lookup_verse(v.book, v.chapter, v.verse)
        assert e.messages[-1]["role"] == "assistant" and e.messages[-1]["content"]
        assert not e.messages[-1].get("tool_calls")
    assert "Exodus 35:6" in [e.task.meta["keys"][0] for e in eps if e.score == 1.0], [e.messages for e in eps]
    assert eps[1].messages[-1]["content"] == ct.verses()[eps[1].task.meta["verse"]].text
    # the episode re-renders to the ids it sampled; a garbled copy (Jude 1:24's answer here) may
    # sample a tokenization the tokenizer would not produce, which is the model's choice, not a
    # template error (test_chat_tasks checks the template's round trip)
    assert eps[1].rerender_match


def test_thinking_grows_with_effort_and_turns_end(llm):
    from tools.train.episodes import rollout
    tasks = ct.make_tasks("general", "heldout", 6, 0)
    means = []
    for eff in ct.EFFORTS:
        eps = rollout(llm, tasks, eff, temperature=0.0, max_tokens=256, max_turns=1)
        assert all(e.ended and e.messages[0]["content"] for e in eps), [e.messages for e in eps]
        means.append(sum(e.thinking_tokens for e in eps) / len(eps))
    assert means[0] < means[1] < means[2], means


def test_k3_chat_answers_and_ends_its_turn():
    r = subprocess.run([K3, "chat", "-m", CHAT, "--effort", "low", "-n", "128", "--temp", "0", "-t", "1",
                        "--numerics", "exact"],
                       input=b"Which book comes after Ruth?\n", capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "<think>" in out and "</think>" in out, out
    assert "answer ended inside its thinking" not in out and "cut at the -n limit" not in out, out
    answer = out.split("</think>", 1)[1].strip()
    # the answer is a book name (the model's greedy answer is wrong today: see its card)
    assert answer.splitlines()[0].rstrip(".") in ct.BOOKS, out


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log_path = str(tmp_path_factory.mktemp("chat") / "serve.log")
    log = open(log_path, "wb")
    proc = subprocess.Popen([K3, "serve", "-m", CHAT, "--host", "127.0.0.1", "--port", "0", "-np", "2",
                             "-c", "2048", "-t", "2", "--numerics", "exact", "--alias", "k3-mini-chat"],
                            stdout=subprocess.DEVNULL, stderr=log)

    def read():
        with open(log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    deadline, url = time.time() + 60, None
    while time.time() < deadline and url is None:
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", read())
        if m:
            url = m.group(1)
        elif proc.poll() is not None:
            raise AssertionError("k3 serve exited early:\n" + read())
        else:
            time.sleep(0.05)
    assert url, "k3 serve did not start:\n" + read()
    while time.time() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    yield url
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


def test_example_agent_answers_through_a_real_tool_call(server):
    # examples/agent.py against k3 serve on a held-out question: the model's own tool call with the
    # question's reference, the local executor's result sent back, then the verse's words as the
    # final answer (the last line), exit 0.
    t = [t for t in heldout("agentic", "lookup", 3) if t.meta["keys"] == ["Exodus 35:6"]][0]
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "agent.py"), "--base-url", server + "/v1",
                        t.messages[0]["content"]], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    calls = [ln for ln in lines if ln.startswith("-> lookup_verse(")]
    assert len(calls) == 1, r.stdout
    args = calls[0][len("-> lookup_verse("):-1]
    assert ct.check_arguments("lookup_verse", args) is None, args
    assert json.loads(args) == {"book": "Exodus", "chapter": 35, "verse": 6}, args
    assert lines[lines.index(calls[0]) + 1] == "<- " + ct.lookup_verse("Exodus", 35, 6), r.stdout
    assert lines[-1] == t.answer, r.stdout


def test_checkpoint_checks_and_keeps_k3_minis_config_and_tokenizer():
    r = subprocess.run([K3, "info", CHAT, "--check"], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert b"no NaN, no Inf, no impossible MXFP4 scale" in r.stdout + r.stderr
    for f in ("config.json", "tiktoken.model", "tokenizer_config.json"):
        with open(os.path.join(CHAT, f), "rb") as a, open(os.path.join(ROOT, "models", "k3-mini", f), "rb") as b:
            assert a.read() == b.read(), f
