"""models/k3-mini-chat (issue 23): the post-trained K3-mini answers held-out questions greedily and
ends its turns, through the python package (tools/train/episodes.rollout on the engine) and through
`k3 serve` with examples/agent.py (the openai client, tools executed locally, a real tool call).

The held-out tasks are chat_tasks.make_tasks(DOMAIN, "heldout", n, 0): no train task shares their
verses or book questions. Greedy decoding in the exact numerics mode, so the answers do not depend
on the machine's ISA.
"""
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

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(CHAT, "config.json")),
                                reason="models/k3-mini-chat missing")


def heldout(domain, kind, n):
    return [t for t in ct.make_tasks(domain, "heldout", 60, 0) if t.meta["kind"] == kind][:n]


@pytest.fixture(scope="module")
def llm():
    from tools.train.k3_import import import_k3
    k3 = import_k3()
    with k3.LLM(CHAT, threads=2, n_parallel=4, n_ctx=2048, numerics="exact") as m:
        yield m


def test_chat_model_answers_heldout_with_tools_and_ends_turns(llm):
    from tools.train.episodes import rollout
    tasks = heldout("agentic", "lookup", 3)
    eps = rollout(llm, tasks, "low", temperature=0.0, max_tokens=384, max_turns=3)
    for e in eps:
        assert e.ended, (e.task.id, e.messages)                   # every turn closed with <|end_of_msg|>
        assert e.n_tool_calls >= 1 and e.tool_calls_valid, (e.task.id, e.messages)
        assert e.messages[0]["tool_calls"][0]["function"]["name"] == "lookup_verse"
        assert e.rerender_match
    assert sum(e.score for e in eps) >= 2, [(e.task.id, e.messages[-1]) for e in eps]


def test_chat_model_answers_short_questions(llm):
    from tools.train.episodes import rollout
    tasks = heldout("general", "after", 4)
    eps = rollout(llm, tasks, "low", temperature=0.0, max_tokens=256, max_turns=1)
    assert all(e.ended and not e.truncated for e in eps), [e.messages for e in eps]
    assert sum(e.score for e in eps) >= 2, [(e.task.answer, e.messages[-1]["content"]) for e in eps]


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


def test_example_agent_gets_answer_through_real_tool_call(server):
    t = heldout("agentic", "lookup", 1)[0]
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "agent.py"), "--base-url", server + "/v1",
                        t.messages[0]["content"]], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert any(ln.startswith("-> lookup_verse(") for ln in lines), r.stdout
    assert any(ln.startswith("<- " + t.meta["keys"][0] + " ") for ln in lines), r.stdout
    assert ct.normalize(lines[-1]) == ct.normalize(t.answer), r.stdout
