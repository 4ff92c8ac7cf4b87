"""End-to-end tests of the agent APIs of `k3 serve` on models/k3-mini through the official clients:
`openai` responses.create (plain, streamed, tools with a function_call_output round trip,
previous_response_id, reasoning items), `anthropic` messages.create (plain, streamed, tools with a
tool_result round trip, thinking, count_tokens, errors in Anthropic's shape, x-api-key), the
OpenAI Agents SDK's own loop with two tools, llama-server's endpoints (/tokenize content and
with_pieces, /detokenize, /props, /version, /apply-template, the 404s of heads K3 lacks), and a
CORS preflight of an Anthropic client's headers.

K3-mini is a base model that does not call tools by itself: the tool calls and the reasoning come
from --test-forced-output (`k3_forced_output`, emitted instead of sampled ids and parsed exactly as
sampled ones), so these tests check the translation both ways, not the model's choices.
"""
import json
import subprocess

import anthropic
import httpx
import openai
import pytest

import test_server_openai as base

KEY = base.KEY
pytestmark = base.pytestmark

CALLS = ("<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
         "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|>"
         "<|open|>call tool=\"get_time\" index=\"2\"<|sep|><|close|>call<|sep|>"
         "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>")
# The prompt opened the think channel (thinking on): reasoning, then the answer, then two calls.
FORCED_THINK = ("Let me check.<|close|>think<|sep|><|open|>response<|sep|>Checking Paris.<|close|>response<|sep|>"
                + CALLS)
# Thinking off: the answer, then two calls.
FORCED_PLAIN = "Checking Paris.<|close|>response<|sep|>" + CALLS
RESP_TOOLS = [{"type": "function", "name": "get_weather", "description": "weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
              {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}]
ANTH_TOOLS = [{"name": "get_weather", "description": "weather",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
              {"name": "get_time", "input_schema": {"type": "object", "properties": {}}}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = base.Server(str(tmp_path_factory.mktemp("agent") / "serve.log"), "-np", "4", "-c", "1024", "-t", "2",
                    "--api-key", KEY, "--test-forced-output", "--seed", "1", "--responses-store", "2",
                    "--cors-origin", "http://app.example")
    yield s
    s.stop()


def oai(server):
    return server.client()


def anth(server, key=KEY):
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, timeout=60)


def post(server, path, body, headers=None, key=KEY):
    h = {"Authorization": f"Bearer {key}"}
    h.update(headers or {})
    return httpx.post(server.url + path, content=body if isinstance(body, (str, bytes)) else json.dumps(body),
                      headers=h, timeout=60)


# --- Responses --------------------------------------------------------------------------------

def test_responses_plain(server):
    r = oai(server).responses.create(model="k3-mini", input="Once upon a time", max_output_tokens=8,
                                     reasoning={"effort": "none"}, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 8 and r.usage.input_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + 8
    assert [o.type for o in r.output] == ["message"] and isinstance(r.output_text, str) and r.output_text
    # greedy: the same answer again, and the same text as chat completions gives
    again = oai(server).responses.create(model="k3-mini", input="Once upon a time", max_output_tokens=8,
                                         reasoning={"effort": "none"}, temperature=0)
    chat = oai(server).chat.completions.create(model="k3-mini", messages=[{"role": "user", "content": "Once upon a time"}],
                                               max_tokens=8, temperature=0,
                                               extra_body={"chat_template_kwargs": {"thinking": False}})
    assert again.output_text == r.output_text == chat.choices[0].message.content


def test_responses_streamed(server):
    events = list(oai(server).responses.create(model="k3-mini", input="x", stream=True, max_output_tokens=200,
                                               extra_body={"k3_forced_output": FORCED_THINK}))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for t in ("response.output_item.added", "response.content_part.added", "response.output_text.delta",
              "response.output_text.done", "response.function_call_arguments.delta",
              "response.function_call_arguments.done", "response.output_item.done", "response.reasoning_text.delta"):
        assert t in types, t
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Checking Paris."
    final = events[-1].response
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call", "function_call"]
    assert final.output[0].content[0].text == "Let me check."
    assert json.loads(final.output[2].arguments) == {"city": "Paris"}
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta"
                   and e.item_id == final.output[2].id)
    assert args == final.output[2].arguments


def test_responses_tools_round_trip_and_previous_response_id(server):
    c = oai(server)
    r = c.responses.create(model="k3-mini", input="Weather in Paris?", tools=RESP_TOOLS, tool_choice="auto",
                           max_output_tokens=200, extra_body={"k3_forced_output": FORCED_THINK})
    assert r.status == "completed"
    calls = [o for o in r.output if o.type == "function_call"]
    assert [x.name for x in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0].arguments) == {"city": "Paris"} and calls[0].call_id.startswith("call_")
    # stateless round trip: the whole history as items
    items = [{"role": "user", "content": "Weather in Paris?"}] + [o.model_dump(exclude_none=True) for o in r.output] + [
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"},
        {"type": "function_call_output", "call_id": calls[1].call_id, "output": "noon"}]
    r2 = c.responses.create(model="k3-mini", input=items, tools=RESP_TOOLS, max_output_tokens=4,
                            reasoning={"effort": "none"})
    # with previous_response_id: only the outputs; the prompt is the same conversation
    r3 = c.responses.create(model="k3-mini", previous_response_id=r.id, tools=RESP_TOOLS, max_output_tokens=4,
                            reasoning={"effort": "none"},
                            input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"},
                                   {"type": "function_call_output", "call_id": calls[1].call_id, "output": "noon"}])
    assert r3.previous_response_id == r.id
    assert r3.usage.input_tokens == r2.usage.input_tokens
    # the round trip renders the tool results into the prompt: more input than the first turn
    assert r2.usage.input_tokens > r.usage.input_tokens


def test_responses_store_bound_and_refusals(server):
    c = oai(server)
    with pytest.raises(openai.NotFoundError) as e:
        c.responses.create(model="k3-mini", input="x", previous_response_id="resp_nope", max_output_tokens=1)
    assert "previous_response_id" in str(e.value)
    unstored = c.responses.create(model="k3-mini", input="x", store=False, max_output_tokens=1)
    with pytest.raises(openai.NotFoundError):
        c.responses.create(model="k3-mini", input="y", previous_response_id=unstored.id, max_output_tokens=1)
    # --responses-store 2: the oldest of three is gone
    ids = [c.responses.create(model="k3-mini", input="x", max_output_tokens=1).id for _ in range(3)]
    with pytest.raises(openai.NotFoundError):
        c.responses.create(model="k3-mini", input="y", previous_response_id=ids[0], max_output_tokens=1)
    c.responses.create(model="k3-mini", input="y", previous_response_id=ids[2], max_output_tokens=1)
    for body, param in [({"input": "x", "frobnicate": 1}, "frobnicate"), ({"model": "k3-mini"}, "input"),
                        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools"),
                        ({"input": "x", "reasoning": {"effort": "extreme"}}, "reasoning.effort"),
                        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
                        ({"input": [{"type": "input_image"}]}, "input"),
                        ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format")]:
        r = post(server, "/v1/responses", body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["param"] == param, r.text
    for bad in ["{", "[]", '{"input": 5}']:
        assert post(server, "/v1/responses", bad).status_code == 400


# --- Anthropic Messages -------------------------------------------------------------------------

def test_messages_plain_and_errors(server):
    # anthropic 2.x's create() has no temperature argument any more; the API field still exists
    m = anth(server).messages.create(model="k3-mini", max_tokens=8, extra_body={"temperature": 0},
                                     messages=[{"role": "user", "content": "Once upon a time"}])
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 8 and m.usage.input_tokens > 0
    assert [b.type for b in m.content] == ["text"] and m.content[0].text
    chat = oai(server).chat.completions.create(model="k3-mini", messages=[{"role": "user", "content": "Once upon a time"}],
                                               max_tokens=8, temperature=0,
                                               extra_body={"chat_template_kwargs": {"thinking": False}})
    assert m.content[0].text == chat.choices[0].message.content
    with pytest.raises(anthropic.AuthenticationError):
        anth(server, key="wrong").messages.create(model="k3-mini", max_tokens=8,
                                                  messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.BadRequestError) as e:
        anth(server).messages.create(model="k3-mini", max_tokens=8, messages=[{"role": "user", "content": "x"}],
                                     extra_body={"temperature": 1.5})
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error"
    assert "temperature" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError):
        anth(server).messages.create(model="claude-nope", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    for body, word in [({"model": "k3-mini", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
                       ({"model": "k3-mini", "max_tokens": 5, "messages": [], }, "messages"),
                       ({"model": "k3-mini", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                         "frobnicate": True}, "frobnicate"),
                       ({"model": "k3-mini", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                         "thinking": {"type": "enabled", "budget_tokens": 5}}, "budget_tokens")]:
        r = httpx.post(server.url + "/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=30)
        assert r.status_code == 400 and r.json()["type"] == "error", r.text
        assert word in r.json()["error"]["message"]
    r = httpx.post(server.url + "/v1/messages", content="{", headers={"x-api-key": KEY}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_messages_streamed_tools_and_round_trip(server):
    a = anth(server)
    with a.messages.stream(model="k3-mini", max_tokens=200, tools=ANTH_TOOLS,
                           messages=[{"role": "user", "content": "Weather in Paris?"}],
                           extra_body={"k3_forced_output": FORCED_PLAIN}) as s:
        events = list(s)
        final = s.get_final_message()
    types = [e.type for e in events]
    assert "message_start" in types and "content_block_start" in types and "message_stop" in types
    assert final.stop_reason == "tool_use"
    assert [b.type for b in final.content] == ["text", "tool_use", "tool_use"]
    assert final.content[0].text == "Checking Paris."
    assert final.content[1].name == "get_weather" and final.content[1].input == {"city": "Paris"}
    assert final.content[2].input == {} and final.content[1].id.startswith("toolu_")
    # non-streamed gives the same blocks
    m = a.messages.create(model="k3-mini", max_tokens=200, tools=ANTH_TOOLS, tool_choice={"type": "auto"},
                          messages=[{"role": "user", "content": "Weather in Paris?"}],
                          extra_body={"k3_forced_output": FORCED_PLAIN})
    assert [(b.type, getattr(b, "input", None)) for b in m.content] == [(b.type, getattr(b, "input", None))
                                                                       for b in final.content]
    # tool_result round trip
    follow = [{"role": "user", "content": "Weather in Paris?"},
              {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": m.content[1].id, "content": "sunny"},
                                           {"type": "tool_result", "tool_use_id": m.content[2].id,
                                            "content": [{"type": "text", "text": "noon"}]}]}]
    m2 = a.messages.create(model="k3-mini", max_tokens=3, tools=ANTH_TOOLS, messages=follow)
    assert m2.usage.input_tokens > m.usage.input_tokens
    count = a.messages.count_tokens(model="k3-mini", tools=ANTH_TOOLS, messages=follow)
    assert count.input_tokens == m2.usage.input_tokens
    # tool_choice none is accepted; any/tool map onto the chat's required/named choice
    a.messages.create(model="k3-mini", max_tokens=2, tools=ANTH_TOOLS, tool_choice={"type": "none"},
                      messages=[{"role": "user", "content": "x"}])


def test_messages_thinking_and_stop_sequences(server):
    a = anth(server)
    forced = "Let me check.<|close|>think<|sep|><|open|>response<|sep|>Sunny. END more<|close|>response<|sep|><|end_of_msg|>"
    m = a.messages.create(model="k3-mini", max_tokens=3000, thinking={"type": "enabled", "budget_tokens": 2048},
                          stop_sequences=["END"], messages=[{"role": "user", "content": "x"}],
                          extra_body={"k3_forced_output": forced})
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[0].thinking == "Let me check." and m.content[1].text == "Sunny. "
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "END"
    with a.messages.stream(model="k3-mini", max_tokens=3000, thinking={"type": "enabled", "budget_tokens": 2048},
                           messages=[{"role": "user", "content": "x"}], extra_body={"k3_forced_output": forced}) as s:
        deltas = [e.delta.type for e in s if e.type == "content_block_delta"]
        final = s.get_final_message()
    assert "thinking_delta" in deltas and "text_delta" in deltas
    assert final.content[0].thinking == "Let me check." and final.stop_reason == "end_turn"
    # output_config.effort and adaptive thinking (anthropic 2.x's names) are accepted
    m = a.messages.create(model="k3-mini", max_tokens=100, thinking={"type": "adaptive"},
                          output_config={"effort": "medium"}, messages=[{"role": "user", "content": "x"}],
                          extra_body={"k3_forced_output": forced})
    assert [b.type for b in m.content] == ["thinking", "text"]


# --- OpenAI Agents SDK ------------------------------------------------------------------------

def test_agents_sdk_two_tool_loop(server):
    agents = pytest.importorskip("agents")
    calls = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(("get_weather", city))
        return "sunny"

    @agents.function_tool
    def get_time() -> str:
        """The time now."""
        calls.append(("get_time",))
        return "noon"

    # K3-mini does not call tools by itself: the server's test hook stands in for the model's
    # choices (two tool calls on the first turn, a final answer once the tool outputs are in).
    def force(request: httpx.Request):
        if request.url.path.endswith("/responses"):
            body = json.loads(request.content)
            has_outputs = any(isinstance(i, dict) and i.get("type") == "function_call_output"
                              for i in body.get("input", []))
            body["k3_forced_output"] = ("It is sunny at noon.<|close|>response<|sep|><|end_of_msg|>" if has_outputs
                                        else FORCED_PLAIN)
            request.stream = httpx.ByteStream(json.dumps(body).encode())
            request.headers["Content-Length"] = str(len(request.stream._stream))
            request._content = json.dumps(body).encode()

    http = httpx.AsyncClient(event_hooks={"request": [lambda r: _async(force, r)]})
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, http_client=http)
    model = agents.OpenAIResponsesModel(model="k3-mini", openai_client=client)
    agent = agents.Agent(name="weather", instructions="Answer with the tools.", model=model,
                         tools=[get_weather, get_time],
                         model_settings=agents.ModelSettings(max_tokens=200, reasoning={"effort": "none"}))
    agents.set_tracing_disabled(True)
    result = agents.Runner.run_sync(agent, "Weather and time in Paris?", max_turns=4)
    assert calls == [("get_weather", "Paris"), ("get_time",)]
    assert result.final_output == "It is sunny at noon."


async def _async(f, r):
    f(r)


# --- llama-server compatibility ----------------------------------------------------------------

def test_llama_server_endpoints(server):
    ids = post(server, "/tokenize", {"content": "And God said"}).json()["tokens"]
    assert ids == post(server, "/tokenize", {"prompt": "And God said"}).json()["tokens"]
    pieces = post(server, "/tokenize", {"content": "And God said", "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == ids and "".join(p["piece"] for p in pieces) == "And God said"
    d = post(server, "/detokenize", {"tokens": ids}).json()
    assert d["content"] == d["prompt"] == "And God said"
    props = httpx.get(server.url + "/props", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert props["default_generation_settings"]["n_ctx"] == 1024 and props["total_slots"] == 4
    v = httpx.get(server.url + "/version", headers={"Authorization": f"Bearer {KEY}"})
    assert v.status_code == 200 and "version" in v.json()
    t = post(server, "/apply-template", {"messages": [{"role": "user", "content": "hello there"}]}).json()
    assert "hello there" in t["prompt"]
    n = post(server, "/tokenize", {"messages": [{"role": "user", "content": "hello there"}]}).json()["count"]
    assert n == len(post(server, "/tokenize", {"prompt": t["prompt"]}).json()["tokens"]) or n > 0
    for path in ["/v1/embeddings", "/embedding", "/infill", "/v1/rerank", "/rerank"]:
        r = post(server, path, {"input": "x"})
        assert r.status_code == 404 and "K3 has no" in r.json()["error"]["message"], path
    with pytest.raises(openai.NotFoundError):
        oai(server).embeddings.create(model="k3-mini", input="x")


def test_cors_preflight_of_an_anthropic_client(server):
    r = httpx.options(server.url + "/v1/messages", headers={
        "Origin": "http://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "x-api-key,anthropic-version,content-type"})
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == "http://app.example"
    assert "x-api-key" in r.headers["access-control-allow-headers"].lower()
    r = httpx.options(server.url + "/v1/messages", headers={"Origin": "http://evil.example",
                                                           "Access-Control-Request-Method": "POST"})
    assert r.status_code == 403


def test_llama_server_flags_and_timings(tmp_path):
    slots = tmp_path / "slots"
    slots.mkdir(mode=0o700)
    s = base.Server(str(tmp_path / "serve.log"), "-np", "1", "-c", "512", "-t", "1", "--test-forced-output",
                    "--reasoning-format", "none", "--reasoning-budget", "0", "--log-format", "json",
                    "--slot-save-path", str(slots))
    try:
        msgs = [{"role": "user", "content": "x"}]
        # --reasoning-format none: the reasoning text is part of the content
        r = httpx.post(s.url + "/v1/chat/completions", timeout=60, json={
            "messages": msgs, "max_tokens": 100, "chat_template_kwargs": {"thinking": True},
            "k3_forced_output": "Let me check.<|close|>think<|sep|><|open|>response<|sep|>Sunny.<|close|>response<|sep|>"
                                "<|end_of_msg|>"}).json()
        assert r["choices"][0]["message"]["content"] == "Let me check.Sunny."
        assert r["choices"][0]["message"]["reasoning_content"] is None
        # llama-server's timings in every final answer
        t = r["timings"]
        assert t["predicted_n"] == r["usage"]["completion_tokens"] and t["prompt_n"] == r["usage"]["prompt_tokens"]
        assert t["prompt_ms"] >= 0 and t["predicted_ms"] >= 0 and "draft_n" not in t
        # --reasoning-budget 0: thinking off unless the request turns it on
        count = lambda body: httpx.post(s.url + "/tokenize", json=body, timeout=30).json()["count"]
        assert count({"messages": msgs}) == count({"messages": msgs, "chat_template_kwargs": {"thinking": False}})
        assert count({"messages": msgs}) != count({"messages": msgs, "chat_template_kwargs": {"thinking": True}})
        # --log-format json: one JSON object per request line
        lines = [json.loads(line) for line in s.read_log().splitlines() if line.startswith("{")]
        assert any(x["path"] == "/v1/chat/completions" and x["status"] == 200 and x["prompt_tokens"] > 0
                   for x in lines), s.read_log()
        # /slots actions with an empty body, as llama-server's clients send them
        r = httpx.post(s.url + "/slots/0?action=erase", timeout=30)
        assert r.status_code == 200 and r.json()["id_slot"] == 0
        r = httpx.post(s.url + "/slots/0?action=save", timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == "filename"
        # -c is per slot: the start-up log says so
        assert "-c 512 is the context of each of the 1 slots" in s.read_log()
    finally:
        s.stop()
    for flag, value in [("--reasoning-budget", "5"), ("--reasoning-format", "weird"), ("--log-format", "xml")]:
        p = subprocess.run([base.K3, "serve", "-m", base.MINI, "--port", "0", flag, value], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode != 0 and flag in p.stderr, (flag, p.stderr)
