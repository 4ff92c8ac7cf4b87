"""Deep JSON end to end (hardening round 2): nesting is bounded at 64 levels wherever k3 parses
JSON, with a clear error instead of a stack overflow that would end the process.

- F1: a chat request whose assistant tool call carries 50,000-deep JSON in its `arguments`
  *string* (the body itself is shallow), which a recursive chat renderer would overflow on:
  /v1/chat/completions (streaming and not) and /tokenize answer 400 naming
  `messages[N].tool_calls[K].function.arguments`, and the server stays up. Depths just under and
  over the limit, in the body and in the arguments string. `k3 tokenize --chat FILE` with such a
  chat (or a deep FILE) exits 1 naming the field (the file).
- F7: the model's output (forced with --test-forced-output) holding a tool-call argument nested
  deeper than the limit: the client gets the text as a JSON string value in `arguments` (as for
  text that does not parse), streaming and not. The model's tokenizer has no multi-bracket
  tokens, so this test uses 1,500 levels (3,000 forced ids); the 50,000-deep output is
  tests/server/test_stream_parser.cpp::StreamParser.F7DeepToolCallArgumentInModelOutputIsPassedOnAsAStringNotACrash.
- F12: a sequence-state file whose header holds 50,000-deep "extra" (otherwise valid, CRC
  included): POST /slots/{id}?action=restore answers 400 naming the file and key, the server
  stays up; `k3 run --state-load` and `k3 chat --state-load` exit 1 with one line naming them.

The server listens on 127.0.0.1 on a free port with no --api-key (the default) and is stopped by
its fixture (SIGTERM to its PID). The binary is $K3_BIN, else $K3_ROOT/build/tools/cli/k3.
"""
import json
import os
import struct
import subprocess
import zlib

import httpx
import pytest

from test_server_openai import K3, MINI, Server

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MINI, "config.json")), reason="models/k3-mini missing")

LIMIT = 64
DEEP = 50000


def nested(depth):
    return "[" * depth + "]" * depth


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("deep")
    slots = d / "slots"
    slots.mkdir()
    s = Server(str(d / "serve.log"), "-np", "2", "-c", "4096", "-t", "1", "--test-forced-output", "--seed", "1",
               "--slot-save-path", str(slots))
    s.slots = slots
    yield s
    s.stop()


def post(server, path, body, timeout=60):
    return httpx.post(server.url + path, content=body if isinstance(body, (bytes, str)) else json.dumps(body),
                      headers={"Content-Type": "application/json"}, timeout=timeout)


def assert_alive(server):
    assert server.proc.poll() is None, "k3 serve died:\n" + server.read_log()
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200


def messages_with_arguments(arguments):
    return [{"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Checking.",
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "user", "content": "And tomorrow?"}]


def assert_400(r, param, message):
    assert r.status_code == 400, r.text[:300]
    e = r.json()["error"]
    assert e["code"] == 400 and e["param"] == param, e
    assert message in e["message"], e["message"]


ARGS_ERROR = "messages[1].tool_calls[0].function.arguments: JSON nested deeper than 64 levels"


def test_f1_deep_arguments_string_is_400_on_chat_completions_and_server_stays_up(server):
    for args in (nested(DEEP), '{"city": ' + nested(DEEP) + "}"):
        for stream in (False, True):
            body = {"messages": messages_with_arguments(args), "max_tokens": 4, "stream": stream}
            assert len(json.dumps(body)) > 2 * DEEP
            assert_400(post(server, "/v1/chat/completions", body), "messages", ARGS_ERROR)
            assert_alive(server)
    # The server still serves.
    r = post(server, "/v1/chat/completions", {"messages": messages_with_arguments('{"city": "Paris"}'), "max_tokens": 4,
                                              "k3_forced_output": "fine<|end_of_msg|>",
                                              "chat_template_kwargs": {"thinking": False}})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "fine"


def test_f1_deep_arguments_string_is_400_on_tokenize(server):
    assert_400(post(server, "/tokenize", {"messages": messages_with_arguments(nested(DEEP))}), "messages", ARGS_ERROR)
    assert_alive(server)


@pytest.mark.parametrize("depth", [LIMIT - 1, LIMIT, LIMIT + 1, 1000])
def test_arguments_depth_limit(server, depth):
    # {"city": [[...]]}: the object is one level.
    r = post(server, "/tokenize", {"messages": messages_with_arguments('{"city": ' + nested(depth - 1) + "}")})
    if depth <= LIMIT:
        assert r.status_code == 200, r.text
        assert r.json()["count"] > 0
    else:
        assert_400(r, "messages", ARGS_ERROR)
    assert_alive(server)


@pytest.mark.parametrize("depth", [LIMIT - 1, LIMIT, LIMIT + 1, DEEP])
def test_body_depth_limit(server, depth):
    # {"messages": [...], "x": [[...]]}: the body object is one level.
    body = '{"messages": [{"role": "user", "content": "hi"}], "x": ' + nested(depth - 1) + "}"
    for path in ("/tokenize", "/v1/chat/completions"):
        r = post(server, path, body if path == "/tokenize" else body[:-1] + ', "max_tokens": 1}')
        if depth <= LIMIT and path == "/tokenize":
            assert r.status_code == 200, r.text
        elif depth <= LIMIT:
            # Decoded within the bound: the request reaches the field audit, which refuses the
            # unknown field "x" by name (docs/api.md).
            assert_400(r, "x", "x: unknown or unsupported field")
        else:
            assert_400(r, "body", "nested deeper than 64 levels")
        assert_alive(server)


def forced_call(value_text, type_="object"):
    return ("<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
            f"<|open|>argument key=\"v\" type=\"{type_}\"<|sep|>{value_text}<|close|>argument<|sep|><|close|>call<|sep|>"
            "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>")


def chat_forced(server, forced, stream):
    body = {"messages": [{"role": "user", "content": "Weather?"}], "max_tokens": 4000, "stream": stream,
            "tools": [{"type": "function", "function": {"name": "get_weather"}}], "k3_forced_output": forced}
    if not stream:
        r = post(server, "/v1/chat/completions", body, timeout=600)
        assert r.status_code == 200, r.text[:300]
        ch = r.json()["choices"][0]
        assert ch["finish_reason"] == "tool_calls"
        return ch["message"]["tool_calls"][0]["function"]["arguments"]
    args = ""
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=600) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for tc in json.loads(line[6:])["choices"][0]["delta"].get("tool_calls") or []:
                    args += tc["function"].get("arguments") or ""
    return args


def test_f7_deep_tool_call_argument_in_model_output(server):
    deep = nested(1500)  # 3,000 ids: deeper than the limit, within the 4,096-token context
    for stream in (False, True):
        args = chat_forced(server, forced_call(deep), stream)
        assert args == json.dumps({"v": deep}), args[:100]  # the text, as a JSON string value
        assert_alive(server)
    # At the limit the value is parsed and passed on as JSON.
    at_limit = nested(LIMIT)
    for stream in (False, True):
        args = chat_forced(server, forced_call(at_limit, "array"), stream)
        assert args == '{"v": ' + at_limit + "}"
        assert json.loads(args)["v"] is not None
    assert_alive(server)


# --- state files --------------------------------------------------------------------------------

def with_deep_extra(raw, depth):
    """A sequence-state file (K3SEQST1, u64 header length, header, payload, CRC-32) with its
    header's "extra" replaced by `depth`-deep JSON, the CRC recomputed."""
    assert raw[:8] == b"K3SEQST1"
    (n,) = struct.unpack("<Q", raw[8:16])
    h = json.loads(raw[16:16 + n])
    if isinstance(h.get("extra"), dict) and h["extra"]:
        # a slot file's extra (its exact-resume mark) is kept: the deep value sits beside it, one
        # level further in (header, extra object, value)
        h["extra"]["deep"] = "@EXTRA@"
        depth -= 1
    else:
        h["extra"] = "@EXTRA@"
    hs = json.dumps(h).replace('"@EXTRA@"', nested(depth)).encode()
    out = raw[:8] + struct.pack("<Q", len(hs)) + hs + raw[16 + n:-4]
    return out + struct.pack("<I", zlib.crc32(out))


def test_f12_slot_restore_of_state_with_deep_extra_is_400(server):
    # a prompt long enough that slot 0 keeps a state (cut at a multiple of 64 ids)
    heldout = open(os.path.join(MINI, "heldout.txt"), encoding="utf-8").read()
    r = post(server, "/v1/completions", {"prompt": heldout[:500], "max_tokens": 4, "temperature": 0})
    assert r.status_code == 200, r.text
    r = post(server, "/slots/0?action=save", {"filename": "good.bin"})
    assert r.status_code == 200, r.text
    raw = (server.slots / "good.bin").read_bytes()
    (server.slots / "deep.bin").write_bytes(with_deep_extra(raw, DEEP))
    (server.slots / "limit.bin").write_bytes(with_deep_extra(raw, LIMIT - 1))  # header depth 64
    r = post(server, "/slots/1?action=restore", {"filename": "deep.bin"})
    assert_400(r, "filename", "JSON nested deeper than 64 levels (in the value of key \"extra\")")
    assert "deep.bin" in r.json()["error"]["message"]
    assert_alive(server)
    r = post(server, "/slots/1?action=restore", {"filename": "limit.bin"})
    assert r.status_code == 200, r.text
    assert_alive(server)


def run_k3(*args, stdin=""):
    return subprocess.run([K3, *args], capture_output=True, text=True, timeout=300, input=stdin)


def test_f12_cli_state_load_of_state_with_deep_extra_is_a_clear_error(tmp_path):
    state = tmp_path / "s.bin"
    p = run_k3("run", "-m", MINI, "-p", "And God said", "-n", "4", "--temp", "0", "--state-save", str(state))
    assert p.returncode == 0, p.stderr
    deep = tmp_path / "deep.bin"
    deep.write_bytes(with_deep_extra(state.read_bytes(), DEEP))
    for cmd in ("run", "chat"):
        p = run_k3(cmd, "-m", MINI, "--state-load", str(deep), "-n", "2")
        assert p.returncode == 1, (cmd, p.returncode, p.stderr)  # an error, not a signal
        last = p.stderr.strip().splitlines()[-1]  # the one error line, after any loading notes
        assert str(deep) in last and "JSON nested deeper than 64 levels (in the value of key \"extra\")" in last, p.stderr
    # At the limit the file loads (a `k3 run` state continues).
    limit = tmp_path / "limit.bin"
    limit.write_bytes(with_deep_extra(state.read_bytes(), LIMIT - 1))
    p = run_k3("run", "-m", MINI, "--state-load", str(limit), "-n", "2", "-p", " more")
    assert p.returncode == 0, p.stderr


def test_f1_cli_tokenize_chat_with_deep_arguments_or_deep_file_is_a_clear_error(tmp_path):
    f = tmp_path / "chat.json"
    f.write_text(json.dumps({"messages": messages_with_arguments(nested(DEEP))}))
    p = run_k3("tokenize", "-m", MINI, "--chat", str(f))
    assert p.returncode == 1, p.stderr
    assert "chat messages[1].tool_calls[0].function.arguments: JSON nested deeper than 64 levels" in p.stderr
    f.write_text(nested(DEEP))
    p = run_k3("tokenize", "-m", MINI, "--chat", str(f))
    assert p.returncode == 1 and f"--chat {f}: JSON nested deeper than 64 levels" in p.stderr, p.stderr
