"""End-to-end tests of `k3 serve` on models/k3-mini, through the official `openai`
client and raw HTTP: chat and completions (streaming and not), greedy completions equal to
`k3 run --temp 0`, reasoning + tool calls through --test-forced-output, stop strings, logprobs,
/tokenize, /detokenize, /metrics, every error case (OpenAI error bodies and the client's
exception types), a bounded 64-client load test with disconnecting clients, and SIGTERM.

Each server listens on 127.0.0.1 on a free port (--port 0; the port is read from its log) and is
stopped with SIGTERM by its fixture (it must exit 0 by itself). The binary is $K3_BIN, else
$K3_ROOT/build/tools/cli/k3, else build/tools/cli/k3 of this checkout.
"""
import concurrent.futures as cf
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import httpx
import openai
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K3 = os.environ.get("K3_BIN", os.path.join(os.environ.get("K3_ROOT", ROOT), "build", "tools", "cli", "k3"))
MINI = os.path.join(ROOT, "models", "k3-mini")
KEY = "test-key"

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MINI, "config.json")), reason="models/k3-mini missing")


class Server:
    """A `k3 serve` on models/k3-mini on a free loopback port (also used by the prefix-cache and
    web-page tests); `start_timeout` bounds the wait for it to listen and become healthy."""

    def __init__(self, log_path, *flags, start_timeout=60):
        assert os.path.exists(K3), f"k3 binary not found at {K3} (build it, or set K3_BIN)"
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen([K3, "serve", "-m", MINI, "--host", "127.0.0.1", "--port", "0", *flags],
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + start_timeout
        self.port = None
        while time.time() < deadline and self.port is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.read_log())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                raise AssertionError("k3 serve exited early:\n" + self.read_log())
            else:
                time.sleep(0.05)
        assert self.port, "k3 serve did not start listening:\n" + self.read_log()
        self.url = f"http://127.0.0.1:{self.port}"
        while time.time() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError("k3 serve never became healthy:\n" + self.read_log())

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def client(self, key=KEY, **kw):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=60, **kw)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("k3 serve did not stop within 30 s of SIGTERM:\n" + self.read_log())
            assert rc == 0, f"k3 serve exited {rc} after SIGTERM:\n" + self.read_log()
        self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("srv") / "serve.log"), "-np", "8", "--queue", "128", "-c", "1024", "-t", "2",
               "--api-key", KEY, "--test-forced-output", "--seed", "1")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    """One slot and no queue: a second concurrent request gets 429."""
    s = Server(str(tmp_path_factory.mktemp("busy") / "serve.log"), "-np", "1", "--queue", "0", "-c", "512", "-t", "1",
               "--test-forced-output", "--alias", "mini")
    yield s
    s.stop()


def metric(text, name):
    m = re.search(r"^k3:" + name + r"(\{[^}]*\})? ([0-9.e+-]+)$", text, re.M)
    assert m, f"k3:{name} missing from /metrics"
    return float(m.group(2))


def raw(server, method, path, body=None, headers=None, key=KEY):
    h = {"Authorization": f"Bearer {key}"} if key else {}
    h.update(headers or {})
    return httpx.request(method, server.url + path, content=body, headers=h, timeout=30)


# --- basics -----------------------------------------------------------------------------------

def test_health_models_tokenize_detokenize(server):
    r = httpx.get(server.url + "/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    models = server.client().models.list()
    assert [m.id for m in models.data] == ["k3-mini"]
    r = raw(server, "POST", "/tokenize", json.dumps({"prompt": "And God said"}))
    assert r.json() == {"count": 3, "max_model_len": 1024, "tokens": [296, 387, 386], "token_strs": None}
    r = raw(server, "POST", "/detokenize", json.dumps({"tokens": [296, 387, 386]}))
    assert r.json() == {"prompt": "And God said", "content": "And God said"}  # vLLM's and llama-server's names
    r = raw(server, "POST", "/tokenize", json.dumps({"messages": [{"role": "user", "content": "hi"}],
                                                     "chat_template_kwargs": {"thinking": False}}))
    assert r.status_code == 200 and r.json()["count"] == len(r.json()["tokens"]) > 5


def run_cli(prompt, n):
    out = subprocess.run([K3, "run", "-m", MINI, "-p", prompt, "--temp", "0", "-n", str(n), "--json", "-t", "2"],
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    return json.loads(out.stdout)


@pytest.mark.parametrize("prompt,n", [("And God said", 24), ("In the beginning", 17)])
def test_greedy_completion_equals_k3_run(server, prompt, n):
    want = run_cli(prompt, n)
    c = server.client().completions.create(model="k3-mini", prompt=prompt, max_tokens=n, temperature=0)
    assert c.choices[0].text == want["text"]
    assert c.usage.completion_tokens == len(want["ids"])
    assert c.usage.prompt_tokens == len(want["prompt_ids"])
    assert c.choices[0].finish_reason == ("length" if want["stop"] == "n-predict" else "stop")
    # streamed: same text; prompt given as ids: same text
    chunks = list(server.client().completions.create(model="k3-mini", prompt=prompt, max_tokens=n, temperature=0,
                                                     stream=True))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == want["text"]
    c2 = server.client().completions.create(model="k3-mini", prompt=want["prompt_ids"], max_tokens=n, temperature=0)
    assert c2.choices[0].text == want["text"]


def test_completion_stop_string_and_logprobs(server):
    cl = server.client()
    full = cl.completions.create(prompt="And God said", max_tokens=24, temperature=0, model="k3-mini").choices[0].text
    stop = full[len(full) // 2: len(full) // 2 + 4]
    cut = full[: full.index(stop)]
    c = cl.completions.create(prompt="And God said", max_tokens=24, temperature=0, stop=[stop, "zzzz"], model="k3-mini")
    assert c.choices[0].text == cut and c.choices[0].finish_reason == "stop"
    chunks = list(cl.completions.create(prompt="And God said", max_tokens=24, temperature=0, stop=stop, stream=True,
                                        model="k3-mini"))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == cut
    assert chunks[-1].choices[0].finish_reason == "stop"
    c = cl.completions.create(prompt="And God said", max_tokens=5, temperature=0, logprobs=3, model="k3-mini")
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    assert all(len(t) == 3 and v <= 0 for t, v in zip(lp.top_logprobs, lp.token_logprobs))
    # greedy: the chosen token is the most likely one
    assert all(abs(max(t.values()) - v) < 1e-5 for t, v in zip(lp.top_logprobs, lp.token_logprobs))
    assert "".join(lp.tokens) == c.choices[0].text
    e = cl.completions.create(prompt="And God said", max_tokens=5, temperature=0, echo=True, model="k3-mini")
    assert e.choices[0].text == "And God said" + c.choices[0].text


def test_ignore_eos_runs_to_max_tokens(server):
    # a forced <|end_of_msg|> ends a sequence, unless ignore_eos (vLLM's extension, for benchmarks)
    body = {"model": "k3-mini", "prompt": "And God said", "max_tokens": 6, "temperature": 0,
            "k3_forced_output": " light<|end_of_msg|>"}
    r = raw(server, "POST", "/v1/completions", json.dumps(body)).json()
    assert r["choices"][0]["finish_reason"] == "stop" and r["usage"]["completion_tokens"] == 2
    body["ignore_eos"] = True
    r = raw(server, "POST", "/v1/completions", json.dumps(body)).json()
    assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 6
    body["ignore_eos"] = "yes"
    e = raw(server, "POST", "/v1/completions", json.dumps(body))
    assert e.status_code == 400 and e.json()["error"]["param"] == "ignore_eos"


def test_max_tokens_beyond_the_context_is_clamped_and_ends_with_length(busy):
    # -c 512: max_tokens is clamped to the room left (llama-server's behaviour; vLLM says 400)
    n_prompt = len(raw(busy, "POST", "/tokenize", json.dumps({"prompt": "And God said"})).json()["tokens"])
    body = {"prompt": "And God said", "max_tokens": 100000, "ignore_eos": True, "temperature": 0}
    r = raw(busy, "POST", "/v1/completions", json.dumps(body))
    assert r.status_code == 200, r.text
    j = r.json()
    assert j["choices"][0]["finish_reason"] == "length"
    assert j["usage"]["prompt_tokens"] == n_prompt and j["usage"]["completion_tokens"] == 512 - n_prompt
    s = list(busy.client().completions.create(model="mini", stream=True, stream_options={"include_usage": True},
                                             extra_body={"ignore_eos": True}, **{k: body[k] for k in ("prompt", "max_tokens", "temperature")}))
    assert [c.choices[0].finish_reason for c in s if c.choices][-1] == "length"
    assert s[-1].usage.completion_tokens == 512 - n_prompt


def test_chat_response_format(server):
    cl = server.client()
    args = dict(model="k3-mini", messages=[{"role": "user", "content": "Give me a JSON object."}], max_tokens=1,
                temperature=0, extra_body={"chat_template_kwargs": {"thinking": False}})
    plain = cl.chat.completions.create(**args)
    as_text = cl.chat.completions.create(response_format={"type": "text"}, **args)
    as_json = cl.chat.completions.create(response_format={"type": "json_object"}, **args)
    assert as_text.usage.prompt_tokens == plain.usage.prompt_tokens
    assert as_json.usage.prompt_tokens > plain.usage.prompt_tokens  # the json_object system note
    for bad in [{"type": "json_schema", "json_schema": {"name": "x"}}, {"type": "xml"}, "json"]:
        with pytest.raises(openai.BadRequestError) as e:
            cl.chat.completions.create(response_format=bad, **args)
        assert e.value.body["param"] == "response_format", e.value.body


def test_chat_non_streaming_and_streaming(server):
    cl = server.client()
    msgs = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Who made the heaven?"}]
    r = cl.chat.completions.create(model="k3-mini", messages=msgs, max_tokens=12, temperature=0,
                                   extra_body={"chat_template_kwargs": {"thinking": False}})
    ch = r.choices[0]
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert ch.message.role == "assistant" and ch.finish_reason in ("stop", "length")
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    s = list(cl.chat.completions.create(model="k3-mini", messages=msgs, max_tokens=12, temperature=0, stream=True,
                                        stream_options={"include_usage": True},
                                        extra_body={"chat_template_kwargs": {"thinking": False}}))
    assert s[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in s if c.choices) == (ch.message.content or "")
    assert [c.choices[0].finish_reason for c in s if c.choices][-1] == ch.finish_reason
    assert s[-1].choices == [] and s[-1].usage.completion_tokens == r.usage.completion_tokens
    # thinking on (default): reasoning_content, with logprobs
    r = cl.chat.completions.create(model="k3-mini", messages=msgs, max_tokens=6, temperature=0, logprobs=True,
                                   top_logprobs=2, extra_body={"reasoning_effort": "low"})
    m = r.choices[0].message
    assert getattr(m, "reasoning_content", None)
    assert r.usage.completion_tokens_details.reasoning_tokens == 6
    assert len(r.choices[0].logprobs.content) == 6 and all(len(t.top_logprobs) == 2 for t in r.choices[0].logprobs.content)


FORCED = ("Let me check the weather 🌞.<|close|>think<|sep|><|open|>response<|sep|>Checking Paris.<|close|>response<|sep|>"
          "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
          "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>"
          "<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|>"
          "<|open|>call tool=\"get_time\" index=\"2\"<|sep|><|close|>call<|sep|>"
          "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                                                           "days": {"type": "number"}}}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
HISTORY = [{"role": "user", "content": "Weather in Paris?"},
           {"role": "assistant", "content": "Checking.", "reasoning_content": "I should call the tool.",
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
           {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
           {"role": "user", "content": "And tomorrow?"}]


def test_reasoning_and_tool_calls_non_streaming(server):
    r = server.client().chat.completions.create(model="k3-mini", messages=HISTORY, tools=TOOLS, tool_choice="auto",
                                                max_tokens=200, extra_body={"k3_forced_output": FORCED})
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.reasoning_content == "Let me check the weather 🌞."
    assert ch.message.content == "Checking Paris."
    calls = ch.message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    assert calls[0].function.arguments == '{"city": "Paris", "days": 3}'
    assert json.loads(calls[1].function.arguments) == {}
    assert all(c.type == "function" and c.id.startswith("call_") for c in calls) and calls[0].id != calls[1].id
    assert r.usage.completion_tokens_details.reasoning_tokens > 0


def test_reasoning_and_tool_calls_streaming(server):
    s = list(server.client().chat.completions.create(model="k3-mini", messages=HISTORY, tools=TOOLS, max_tokens=200,
                                                     stream=True, extra_body={"k3_forced_output": FORCED}))
    assert s[0].choices[0].delta.role == "assistant"
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in s)
    content = "".join(c.choices[0].delta.content or "" for c in s)
    assert reasoning == "Let me check the weather 🌞." and content == "Checking Paris."
    calls = {}
    for c in s:
        for tc in c.choices[0].delta.tool_calls or []:
            if tc.index not in calls:
                assert tc.id and tc.type == "function" and tc.function.name  # the first fragment names the call
                calls[tc.index] = {"name": tc.function.name, "arguments": tc.function.arguments or ""}
            else:
                assert tc.id is None and not tc.function.name
                calls[tc.index]["arguments"] += tc.function.arguments
    assert calls[0] == {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'}
    assert calls[1] == {"name": "get_time", "arguments": "{}"}
    assert s[-1].choices[0].finish_reason == "tool_calls"


def test_streamed_text_is_valid_utf8_per_chunk(server):
    # Bytes of 🌞 forced one token at a time: no chunk may carry half of it or a U+FFFD.
    with httpx.stream("POST", server.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                      json={"messages": [{"role": "user", "content": "x"}], "stream": True, "max_tokens": 50,
                            "chat_template_kwargs": {"thinking": False},
                            "k3_forced_output": "a🌞中b<|end_of_msg|>"}, timeout=30) as r:
        body = b"".join(r.iter_raw())
    events = [e for e in body.split(b"\n\n") if e and not e.startswith(b":")]  # ": keep-alive" comments
    texts = []
    for e in events:
        assert e.startswith(b"data: ")
        if e == b"data: [DONE]":
            continue
        j = json.loads(e[6:].decode("utf-8"))  # strict: fails on split characters
        texts += [c["delta"].get("content") or "" for c in j["choices"]]
    assert "".join(texts) == "a🌞中b" and "\ufffd" not in "".join(texts)
    assert events[-1] == b"data: [DONE]"


# --- errors -----------------------------------------------------------------------------------

def test_error_types_through_the_openai_client(server, busy):
    cl = server.client()
    user = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.AuthenticationError):
        server.client(key="wrong").chat.completions.create(model="k3-mini", messages=user, max_tokens=2)
    with pytest.raises(openai.NotFoundError) as e:
        cl.chat.completions.create(model="nope", messages=user, max_tokens=2)
    assert "The model `nope` does not exist" in e.value.body["message"] and e.value.body["param"] == "model"
    for kw, field in [({"max_tokens": 0}, "max_tokens"), ({"temperature": 7}, "temperature"),
                      ({"top_p": 0}, "top_p"), ({"frequency_penalty": 9}, "frequency_penalty"),
                      ({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": TOOLS}, "tool_choice"),
                      ({"extra_body": {"reasoning_effort": "extreme"}}, "reasoning_effort"),
                      ({"messages": [{"role": "wizard", "content": "x"}]}, "messages")]:
        args = {"model": "k3-mini", "messages": user, "max_tokens": 2, **kw}
        with pytest.raises(openai.BadRequestError) as e:
            cl.chat.completions.create(**args)
        assert e.value.status_code == 400 and field in e.value.body["message"] and e.value.body["param"] == field
    with pytest.raises(openai.BadRequestError) as e:
        cl.completions.create(model="k3-mini", prompt="And God said " * 400, max_tokens=2)
    n_long = raw(server, "POST", "/tokenize", json.dumps({"prompt": "And God said " * 400})).json()["count"]
    assert "maximum context length is 1024 tokens" in e.value.body["message"]
    assert f"your prompt contains {n_long} input tokens" in e.value.body["message"]
    # 429: one slot, no queue, a long request running
    bc = busy.client()
    t = threading.Thread(target=lambda: bc.completions.create(model="mini", prompt="And", max_tokens=400, temperature=0,
                                                             extra_body={"k3_forced_output": [5] * 400}))
    t.start()
    deadline = time.time() + 20
    while metric(httpx.get(busy.url + "/metrics").text, "num_requests_running") < 1 and time.time() < deadline:
        time.sleep(0.01)
    with pytest.raises(openai.RateLimitError) as e:
        bc.completions.create(model="mini", prompt="And", max_tokens=2)
    assert e.value.body["message"].count("retry later") == 1, e.value.body["message"]
    t.join()


def test_raw_http_errors(server):
    def err(r, status, param=None, text=None):
        assert r.status_code == status, r.text
        e = r.json()["error"]
        assert set(e) == {"message", "type", "param", "code"} and e["code"] == status
        if param:
            assert e["param"] == param
        if text:
            assert text in e["message"], e["message"]

    err(raw(server, "POST", "/v1/chat/completions", b"{not json"), 400, "body", "JSON decode error")
    err(raw(server, "POST", "/v1/chat/completions", b"[1, 2]"), 400, "body")
    err(raw(server, "POST", "/v1/chat/completions", b'{"messages": ' + b"[" * 200000 + b"]" * 200000 + b"}"), 400, "body",
        "nested deeper")
    err(raw(server, "POST", "/v1/chat/completions", b"{}"), 400, "messages", "messages: required")
    err(raw(server, "POST", "/v1/chat/completions", json.dumps({"messages": "hi"})), 400, "messages")
    err(raw(server, "POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}],
                                                                "max_tokens": "ten"})), 400, "max_tokens")
    err(raw(server, "POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}],
                                                                "stream": 1})), 400, "stream")
    err(raw(server, "POST", "/v1/completions", json.dumps({"prompt": 12})), 400, "prompt")
    err(raw(server, "POST", "/v1/completions", json.dumps({"prompt": [1, 10 ** 9]})), 400, "prompt", "outside the vocabulary")
    err(raw(server, "POST", "/v1/completions", json.dumps({"prompt": "x", "k3_forced_output": {"a": 1}})), 400,
        "k3_forced_output")
    err(raw(server, "POST", "/detokenize", json.dumps({"tokens": [-1]})), 400, "tokens")
    err(raw(server, "POST", "/v1/chat/completions", b"{}", key=None), 401)
    err(raw(server, "GET", "/nope"), 404, text="Not found")
    err(raw(server, "POST", "/v1/nope", b"{}"), 404)
    err(raw(server, "GET", "/v1/chat/completions"), 405)
    err(raw(server, "DELETE", "/v1/models"), 405)
    # a body over the 32 MiB limit: 413 with a clear message (the server discards the body unparsed)
    err(raw(server, "POST", "/v1/chat/completions", b" " * (33 << 20), {"Content-Type": "application/json"}), 413,
        text="too large")
    # a request that never finishes its headers is dropped by the read timeout; others are served
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    assert httpx.get(server.url + "/health").status_code == 200
    s.close()


# --- load -------------------------------------------------------------------------------------

def load_request(i):
    thinking = i % 3 != 0
    return dict(model="k3-mini", max_tokens=4 + (i * 7) % 21, temperature=0.9, seed=1000 + i,
                messages=[{"role": "user", "content": f"Tell me about verse {i}" + " and the land" * (i % 5)}],
                extra_body={"chat_template_kwargs": {"thinking": thinking}, "reasoning_effort": "low"})


def run_streamed(server, i):
    s = server.client().chat.completions.create(stream=True, **load_request(i))
    text, reasoning, finish = "", "", None
    for c in s:
        if not c.choices:
            continue
        d = c.choices[0].delta
        text += d.content or ""
        reasoning += getattr(d, "reasoning_content", None) or ""
        finish = c.choices[0].finish_reason or finish
    return reasoning, text, finish


def disconnect_midway(server, i):
    body = {"model": "k3-mini", "messages": [{"role": "user", "content": f"Go on {i}"}], "stream": True,
            "max_tokens": 200, "seed": i, "chat_template_kwargs": {"thinking": False}}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {KEY}"}) as r:
        assert r.status_code == 200
        for n, _ in enumerate(r.iter_lines()):
            if n >= 4:
                break  # leaving the block closes the connection mid-stream


def test_load_64_concurrent_streams_equal_lone_runs_and_disconnects(server):
    n = 64
    with cf.ThreadPoolExecutor(max_workers=n + 16) as ex:
        futs = [ex.submit(run_streamed, server, i) for i in range(n)]
        drops = [ex.submit(disconnect_midway, server, i) for i in range(16)]
        together = [f.result(timeout=120) for f in futs]
        for f in drops:
            f.result(timeout=120)
    alone = [run_streamed(server, i) for i in range(n)]
    for i in range(n):
        assert together[i] == alone[i], f"request {i} differs when batched"
        assert together[i][2] in ("stop", "length")
    deadline = time.time() + 20
    while True:
        m = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text  # behind --api-key
        if metric(m, "num_requests_running") == 0 and metric(m, "num_requests_waiting") == 0:
            break
        assert time.time() < deadline, "running/waiting gauges did not return to 0:\n" + m
        time.sleep(0.1)
    assert metric(m, "generation_tokens_total") > 0 and metric(m, "prompt_tokens_total") > 0
    assert 'k3:time_to_first_token_seconds_count' in m and 'k3:inter_token_latency_seconds_bucket{le="+Inf"}' in m
    assert re.search(r'k3:requests_total\{endpoint="/v1/chat/completions",status="200"\} \d+', m)
    log = server.read_log()
    assert "POST /v1/chat/completions 200" in log
    assert not re.search(r"^k3 serve: POST /v1/\S+ 5\d\d \|", log, re.M), "server errors during the load test:\n" + log
    # the disconnected clients' sequences were cancelled, not run to max_tokens
    aborted = re.search(r'k3:request_success_total\{[^}]*finished_reason="abort"\} (\d+)', m)
    assert aborted and int(aborted.group(1)) >= 8, m


# --- process ----------------------------------------------------------------------------------

def test_sigterm_lets_a_running_stream_finish_and_exits_0(tmp_path):
    s = Server(str(tmp_path / "serve.log"), "-np", "1", "-c", "256", "-t", "1", "--test-forced-output")
    body = {"messages": [{"role": "user", "content": "x"}], "stream": True, "max_tokens": 60,
            "k3_forced_output": [5] * 60, "chat_template_kwargs": {"thinking": False}}
    with httpx.stream("POST", s.url + "/v1/chat/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        next(lines)
        s.proc.send_signal(signal.SIGTERM)
        rest = list(lines)
    assert "data: [DONE]" in rest
    assert s.proc.wait(timeout=30) == 0
    assert "stopped" in s.read_log()
    s.log.close()


LONG = ["-np", "1", "--queue", "1", "-c", "16384", "-t", "1"]  # a request of ~16k tokens runs for many seconds


def long_body(**kw):
    return {"prompt": "x", "max_tokens": 16000, "ignore_eos": True, "temperature": 0, **kw}


def test_non_streaming_answer_heartbeats_and_is_cancelled_when_the_client_hangs_up(tmp_path):
    s = Server(str(tmp_path / "serve.log"), *LONG)
    try:
        # a non-streaming answer that takes over a second starts with "\n" heartbeats (leading
        # whitespace is legal JSON), and the openai client parses it
        t0 = time.time()
        r = raw(s, "POST", "/v1/completions", json.dumps(long_body(max_tokens=5000)), key=None)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5000
        if time.time() - t0 > 1.5:
            assert r.text.startswith("\n") and r.text.lstrip("\n").startswith("{"), r.text[:20]
        c = s.client().completions.create(model="k3-mini", prompt="x", max_tokens=5000, temperature=0,
                                          extra_body={"ignore_eos": True})
        assert c.usage.completion_tokens == 5000 and c.choices[0].finish_reason == "length"
        ch = s.client().chat.completions.create(model="k3-mini", messages=[{"role": "user", "content": "x"}],
                                                max_tokens=5000, temperature=0, extra_body={"ignore_eos": True})
        assert ch.usage.completion_tokens == 5000 and ch.choices[0].finish_reason == "length"
        # errors found before generation keep their status
        e = raw(s, "POST", "/v1/completions", json.dumps(long_body(max_tokens=0)), key=None)
        assert e.status_code == 400 and e.json()["error"]["param"] == "max_tokens"
        # a client that sends a long non-streaming request and hangs up (curl --max-time 1)
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        req = json.dumps(long_body()).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(req)).encode() + b"\r\n\r\n" + req)
        deadline = time.time() + 10
        while metric(httpx.get(s.url + "/metrics").text, "num_requests_running") < 1:
            assert time.time() < deadline
            time.sleep(0.02)
        time.sleep(0.5)
        sock.close()
        deadline = time.time() + 8  # noticed by the next heartbeat (about 1 s), then the slot is freed
        while True:
            m = httpx.get(s.url + "/metrics").text
            if metric(m, "num_requests_running") == 0:
                break
            assert time.time() < deadline, "the sequence of a client that hung up kept running:\n" + m
            time.sleep(0.1)
        gen = metric(m, "generation_tokens_total")
        aborted = re.search(r'k3:request_success_total\{[^}]*finished_reason="abort"\} (\d+)', m)
        assert aborted and int(aborted.group(1)) == 1, m
        time.sleep(0.3)
        assert metric(httpx.get(s.url + "/metrics").text, "generation_tokens_total") == gen
    finally:
        s.stop()


def start_long_stream(s):
    """A streaming request of ~16k tokens on `s`; returns (response context, lines iterator) after the first line."""
    cm = httpx.stream("POST", s.url + "/v1/completions", json=long_body(stream=True), timeout=60)
    r = cm.__enter__()
    lines = r.iter_lines()
    next(lines)
    return cm, lines


def test_grace_period_cancels_a_running_request(tmp_path):
    s = Server(str(tmp_path / "serve.log"), *LONG, "--shutdown-timeout", "1")
    cm, lines = start_long_stream(s)
    t0 = time.time()
    s.proc.send_signal(signal.SIGTERM)
    rest = list(lines)
    cm.__exit__(None, None, None)
    assert s.proc.wait(timeout=15) == 0
    assert time.time() - t0 < 10, "the grace period did not end the running request"
    assert "data: [DONE]" in rest and "grace period over" in s.read_log()
    s.log.close()


def test_second_signal_exits_at_once(tmp_path):
    s = Server(str(tmp_path / "serve.log"), *LONG)
    cm, lines = start_long_stream(s)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert s.proc.poll() is None  # the first signal waits for the running request
    s.proc.send_signal(signal.SIGINT)
    try:
        rc = s.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        s.proc.kill()
        s.proc.wait()
        raise AssertionError("a second signal did not end k3 serve at once:\n" + s.read_log())
    finally:
        cm.__exit__(None, None, None)
        s.log.close()
    assert rc == 130, s.read_log()


def test_refuses_to_start_when_slots_exceed_ram():
    out = subprocess.run([K3, "serve", "-m", MINI, "--port", "0", "-np", "100000", "-c", "1000000", "-t", "1"],
                         capture_output=True, timeout=60)
    assert out.returncode == 1
    assert "physical RAM" in out.stderr.decode()
