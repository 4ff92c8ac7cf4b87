"""Structured outputs of `k3 serve` on models/k3-mini through the official `openai` client:
response_format json_schema (every sampled output at temperature 1 validates with `jsonschema`),
json_object, a GBNF `grammar`, logit_bias, constrained decoding under speculative decoding (greedy
output equal with and without a draft model), the same constraints reached through the Responses
API (text.format, tool_choice) and the Messages API (`anthropic` client, tool_choice any / tool), and
the 400s: every unknown or unsupported field,
malformed, contradictory, unsupported and oversized schemas and grammars (each answered quickly).

Thinking is off in the sampled tests: K3-mini's reasoning rarely closes within a small max_tokens,
and the constraint starts at the response channel (the think -> response switch is covered by
tests/runtime/test_grammar_constraint.cpp).
"""
import concurrent.futures as cf
import json
import os
import time

import httpx
import jsonschema
import openai
import pytest

from test_server_openai import KEY, MINI, ROOT, Server, raw

NANO = os.path.join(ROOT, "models", "k3-nano")
pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MINI, "config.json")), reason="models/k3-mini missing")

COMMON = ("-np", "8", "--queue", "64", "-c", "1024", "-t", "2", "--api-key", KEY)
NO_THINK = {"chat_template_kwargs": {"thinking": False}}
USER = [{"role": "user", "content": "Describe a person of the Bible as JSON."}]

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 999},
        "tribe": {"enum": ["Judah", "Levi", "Dan"]},
        "kin": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "number"}},
                                          "required": ["n"], "additionalProperties": False}, "maxItems": 2},
        "alive": {"type": "boolean"},
    },
    "required": ["name", "age", "tribe", "kin", "alive"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("structured") / "serve.log"), *COMMON, "--seed", "3")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def spec_server(tmp_path_factory):
    assert os.path.exists(os.path.join(NANO, "config.json")), f"{NANO}: the committed K3-nano draft model is missing"
    s = Server(str(tmp_path_factory.mktemp("structured_spec") / "serve.log"), *COMMON, "-md", NANO, "--draft-max", "3")
    yield s
    s.stop()


def schema_format(schema, strict=True):
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": strict}}


def test_json_schema_outputs_all_validate_at_temperature_1(server):
    cl = server.client()

    def one(i):
        return cl.chat.completions.create(model="k3-mini", messages=USER, max_tokens=160, temperature=1.0, seed=100 + i,
                                          response_format=schema_format(PERSON), extra_body=NO_THINK)

    with cf.ThreadPoolExecutor(8) as ex:  # several sequences in one batch, each with its own matcher
        outs = list(ex.map(one, range(20)))
    for r in outs:
        c = r.choices[0]
        assert c.finish_reason == "stop", (c.finish_reason, c.message.content)
        jsonschema.validate(json.loads(c.message.content), PERSON)
    assert len({r.choices[0].message.content for r in outs}) > 1  # sampled, not one fixed answer


def test_json_schema_streamed(server):
    cl = server.client()
    text, finish = "", None
    for ch in cl.chat.completions.create(model="k3-mini", messages=USER, max_tokens=160, temperature=1.0, seed=7,
                                         response_format=schema_format(PERSON), extra_body=NO_THINK, stream=True):
        if ch.choices and ch.choices[0].delta.content:
            text += ch.choices[0].delta.content
        if ch.choices and ch.choices[0].finish_reason:
            finish = ch.choices[0].finish_reason
    assert finish == "stop"
    jsonschema.validate(json.loads(text), PERSON)


def test_json_object_and_gbnf_grammar(server):
    cl = server.client()
    for i in range(6):
        r = cl.chat.completions.create(model="k3-mini", messages=USER, max_tokens=120, temperature=1.0, seed=i,
                                       response_format={"type": "json_object"}, extra_body=NO_THINK)
        c = r.choices[0]
        if c.finish_reason == "stop":  # a free-form object may run past max_tokens: then "length"
            assert isinstance(json.loads(c.message.content), dict)
        else:
            assert c.finish_reason == "length" and c.message.content.startswith("{")
    grammar = 'root ::= ("yes" | "no") " because " [a-z ]{1,20} "."'
    for i in range(6):
        r = cl.chat.completions.create(model="k3-mini", messages=USER, max_tokens=40, temperature=1.0, seed=i,
                                       extra_body={"grammar": grammar, **NO_THINK})
        c = r.choices[0]
        assert c.finish_reason == "stop"
        assert c.message.content.split(" because ")[0] in ("yes", "no") and c.message.content.endswith(".")
    # /v1/completions takes the grammar too.
    r = cl.completions.create(model="k3-mini", prompt="And God said", max_tokens=10, temperature=1.0,
                              extra_body={"grammar": 'root ::= [0-9]{3}'})
    assert r.choices[0].finish_reason == "stop" and len(r.choices[0].text) == 3 and r.choices[0].text.isdigit()


def test_logit_bias(server):
    cl = server.client()
    args = dict(model="k3-mini", prompt="And God said", max_tokens=4, temperature=0)
    plain = cl.completions.create(**args)
    ids = raw(server, "POST", "/tokenize", json.dumps({"prompt": plain.choices[0].text})).json()["tokens"]
    banned = cl.completions.create(logit_bias={str(ids[0]): -100}, **args)
    first = raw(server, "POST", "/tokenize", json.dumps({"prompt": banned.choices[0].text})).json()["tokens"]
    assert first[0] != ids[0]
    the = raw(server, "POST", "/tokenize", json.dumps({"prompt": " the"})).json()["tokens"]
    assert len(the) == 1
    forced = cl.completions.create(logit_bias={str(the[0]): 100}, **args)
    assert forced.choices[0].text == " the" * 4
    for bad in [{"x": 1}, {"5": 101}, {"5": "a"}, {"99999999": 1}]:
        with pytest.raises(openai.BadRequestError) as e:
            cl.completions.create(logit_bias=bad, **args)
        assert e.value.body["param"] == "logit_bias", e.value.body


def test_constraint_under_speculative_decoding(server, spec_server):
    # Greedy constrained output is the same with and without a draft model; the drafts were
    # masked against the grammar (refused drafts rejected, the matcher rolled back).
    args = dict(model="k3-mini", messages=USER, max_tokens=160, temperature=0,
                response_format=schema_format(PERSON), extra_body=NO_THINK)
    want = server.client().chat.completions.create(**args)
    got = spec_server.client().chat.completions.create(**args)
    assert got.choices[0].message.content == want.choices[0].message.content
    assert got.choices[0].finish_reason == want.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(got.choices[0].message.content), PERSON)
    body = raw(spec_server, "POST", "/v1/chat/completions",
               json.dumps({k: v for k, v in args.items() if k != "extra_body"} | NO_THINK)).json()
    assert body["timings"]["draft_n"] > 0
    for i in range(8):
        r = spec_server.client().chat.completions.create(**{**args, "temperature": 1.0, "seed": i})
        assert r.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)


UNKNOWN_CHAT = ["functions", "function_call", "parallel_tool_calls", "prediction", "service_tier", "store", "metadata",
                "modalities", "audio", "web_search_options", "best_of", "suffix", "cache_prompt", "no_such_field"]
UNKNOWN_COMPLETIONS = ["suffix", "best_of", "messages", "tools", "response_format", "no_such_field"]


def test_every_unknown_or_unsupported_field_is_a_400_naming_it(server):
    for f in UNKNOWN_CHAT:
        r = raw(server, "POST", "/v1/chat/completions",
                json.dumps({"messages": USER, "max_tokens": 1, f: 1}))
        assert r.status_code == 400 and r.json()["error"]["param"] == f, (f, r.text)
        assert f in r.json()["error"]["message"]
    for f in UNKNOWN_COMPLETIONS:
        r = raw(server, "POST", "/v1/completions", json.dumps({"prompt": "And", "max_tokens": 1, f: 1}))
        assert r.status_code == 400 and r.json()["error"]["param"] == f, (f, r.text)
    # Unknown keys inside the structured fields, too.
    for body, param in [({"response_format": {"type": "json_object", "schema": {}}}, "response_format"),
                        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "x": 1}}},
                         "response_format"),
                        ({"chat_template_kwargs": {"thinking": False, "foo": 1}}, "chat_template_kwargs"),
                        ({"response_format": {"type": "json_object"}, "grammar": "root ::= \"a\""}, "grammar"),
                        ({"response_format": {"type": "json_object"}, "ignore_eos": True}, "ignore_eos")]:
        r = raw(server, "POST", "/v1/chat/completions", json.dumps({"messages": USER, "max_tokens": 1, **body}))
        assert r.status_code == 400 and r.json()["error"]["param"] == param, (body, r.text)


def test_bad_schemas_and_grammars_are_400s_quickly(server):
    bad_schemas = [
        {"type": "integer", "minimum": 5, "maximum": 1},                       # contradictory
        {"enum": []},                                                          # nothing satisfies it
        {"allOf": [{"type": "string"}, {"type": "integer"}]},                  # what XGrammar would ignore
        {"type": "string", "format": "credit-card"},
        {"not": {"type": "null"}},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},  # unresolved $ref
        {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 40} for i in range(2000)}},
        "not a schema",
    ]
    for sc in bad_schemas:
        t = time.time()
        r = raw(server, "POST", "/v1/chat/completions", json.dumps(
            {"messages": USER, "max_tokens": 4, "response_format": schema_format(sc)}))
        assert r.status_code == 400 and r.json()["error"]["param"] == "response_format", (str(sc)[:80], r.text)
        assert time.time() - t < 5
    # A recursive schema is a grammar like any other: it compiles and its outputs validate.
    tree = {"$defs": {"n": {"type": "object", "properties": {"k": {"type": "array", "items": {"$ref": "#/$defs/n"},
                                                                      "maxItems": 2}},
                            "required": ["k"], "additionalProperties": False}}, "$ref": "#/$defs/n"}
    r = raw(server, "POST", "/v1/chat/completions", json.dumps(
        {"messages": USER, "max_tokens": 200, "temperature": 0, "response_format": schema_format(tree), **NO_THINK}))
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    if c["finish_reason"] == "stop":
        jsonschema.validate(json.loads(c["message"]["content"]), tree)
    for g in ["root ::= undefined", "root ::= (", "", "x" * 70000]:
        r = raw(server, "POST", "/v1/chat/completions", json.dumps({"messages": USER, "max_tokens": 4, "grammar": g}))
        assert r.status_code == 400 and r.json()["error"]["param"] == "grammar", (g[:40], r.text)


WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}, "unit": {"enum": ["c", "f"]}},
           "required": ["city", "unit"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer", "minimum": -99, "maximum": 99},
                                        "b": {"type": "integer", "minimum": 0, "maximum": 9}},
       "required": ["a", "b"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "description": "Add two numbers", "parameters": ADD}}]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}


def test_tool_choice_required_and_named_arguments_always_validate(server):
    cl = server.client()
    msgs = [{"role": "user", "content": "What is the weather in Jerusalem?"}]

    def one(args):
        choice, i = args
        return choice, cl.chat.completions.create(model="k3-mini", messages=msgs, tools=TOOLS, tool_choice=choice,
                                                  max_tokens=120, temperature=1.0, seed=200 + i, extra_body=NO_THINK)

    named = {"type": "function", "function": {"name": "add"}}
    jobs = [("required", i) for i in range(10)] + [(named, i) for i in range(10)]
    with cf.ThreadPoolExecutor(8) as ex:
        outs = list(ex.map(one, jobs))
    names = set()
    for choice, r in outs:
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", (c.finish_reason, c.message)
        assert len(c.message.tool_calls) == 1 and not c.message.content
        call = c.message.tool_calls[0].function
        if choice != "required":
            assert call.name == "add"
        names.add(call.name)
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
    assert "add" in names
    # A constraint together with a required call is a contradiction.
    with pytest.raises(openai.BadRequestError) as e:
        cl.chat.completions.create(model="k3-mini", messages=msgs, tools=TOOLS, tool_choice="required", max_tokens=4,
                                   response_format={"type": "json_object"})
    assert e.value.body["param"] == "tool_choice"
    bad = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}]
    with pytest.raises(openai.BadRequestError) as e:
        cl.chat.completions.create(model="k3-mini", messages=msgs, tools=bad, tool_choice="required", max_tokens=4)
    assert e.value.body["param"] == "tool_choice" and "tool \"f\" parameters" in e.value.body["message"]


def test_n_choices_sampled_together(server):
    cl = server.client()
    r = cl.chat.completions.create(model="k3-mini", messages=USER, max_tokens=160, temperature=1.0, seed=11, n=4,
                                   response_format=schema_format(PERSON), extra_body=NO_THINK)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    for c in r.choices:
        assert c.finish_reason == "stop"
        jsonschema.validate(json.loads(c.message.content), PERSON)
    assert len({c.message.content for c in r.choices}) > 1  # seeds seed + i: different samples
    assert r.usage.completion_tokens > r.usage.prompt_tokens // 10
    # Choice i equals a lone request with seed + i.
    lone = cl.chat.completions.create(model="k3-mini", messages=USER, max_tokens=160, temperature=1.0, seed=13,
                                      response_format=schema_format(PERSON), extra_body=NO_THINK)
    assert lone.choices[0].message.content == r.choices[2].message.content
    # Streamed: every choice's deltas under its index, each ending with its finish_reason.
    text, finish = {}, {}
    for ch in cl.chat.completions.create(model="k3-mini", messages=USER, max_tokens=160, temperature=1.0, seed=11, n=4,
                                         response_format=schema_format(PERSON), extra_body=NO_THINK, stream=True):
        for c in ch.choices:
            text[c.index] = text.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    assert finish == {i: "stop" for i in range(4)}
    assert [text[i] for i in range(4)] == [c.message.content for c in r.choices]
    for bad in [0, 17]:
        with pytest.raises(openai.BadRequestError) as e:
            cl.chat.completions.create(model="k3-mini", messages=USER, max_tokens=2, n=bad)
        assert e.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as e:
        cl.completions.create(model="k3-mini", prompt="And", max_tokens=2, n=2)
    assert e.value.body["param"] == "n"


def test_completions_with_a_list_of_prompts(server):
    cl = server.client()
    prompts = ["And God said", "In the beginning", "The LORD is my shepherd"]
    alone = [cl.completions.create(model="k3-mini", prompt=p, max_tokens=6, temperature=0).choices[0].text
             for p in prompts]
    r = cl.completions.create(model="k3-mini", prompt=prompts, max_tokens=6, temperature=0)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert [c.text for c in r.choices] == alone  # each prompt's greedy answer, as alone
    assert r.usage.completion_tokens == 18
    text = {}
    for ch in cl.completions.create(model="k3-mini", prompt=prompts, max_tokens=6, temperature=0, stream=True):
        for c in ch.choices:
            text[c.index] = text.get(c.index, "") + c.text
    assert [text[i] for i in range(3)] == alone
    ids = raw(server, "POST", "/tokenize", json.dumps({"prompt": prompts[0]})).json()["tokens"]
    r = cl.completions.create(model="k3-mini", prompt=[ids, ids], max_tokens=6, temperature=0)
    assert [c.text for c in r.choices] == [alone[0], alone[0]]
    with pytest.raises(openai.BadRequestError) as e:
        cl.completions.create(model="k3-mini", prompt=["a"] * 17, max_tokens=2)
    assert e.value.body["param"] == "prompt"


def test_responses_and_messages_apis_are_constrained_too(server):
    """The Responses API's text.format json_schema and tool_choice, and the Messages API's
    tool_choice any / tool, translate onto the chat path's constraints: every sampled output at
    temperature 1 validates (the official `openai` and `anthropic` clients)."""
    import anthropic  # tools/requirements.txt
    cl = server.client()
    fmt = {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
    for i in range(4):
        r = cl.responses.create(model="k3-mini", input="Describe a person of the Bible as JSON.", text={"format": fmt},
                                max_output_tokens=160, temperature=1.0, reasoning={"effort": "none"},
                                extra_body={"seed": 300 + i})
        assert r.status == "completed", (r.status, r.output_text)
        jsonschema.validate(json.loads(r.output_text), PERSON)
    rtools = [{"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
               "parameters": t["function"]["parameters"]} for t in TOOLS]
    for choice in ("required", {"type": "function", "name": "add"}):
        r = cl.responses.create(model="k3-mini", input="What is the weather in Jerusalem?", tools=rtools,
                                tool_choice=choice, max_output_tokens=120, temperature=1.0, reasoning={"effort": "none"})
        calls = [o for o in r.output if o.type == "function_call"]
        assert len(calls) == 1, r.output
        if choice != "required":
            assert calls[0].name == "add"
        jsonschema.validate(json.loads(calls[0].arguments), SCHEMAS[calls[0].name])
    an = anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0, timeout=60)
    atools = [{"name": t["function"]["name"], "description": t["function"]["description"],
               "input_schema": t["function"]["parameters"]} for t in TOOLS]
    for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"}):
        m = an.messages.create(model="k3-mini", max_tokens=120, tools=atools, tool_choice=choice,
                               extra_body={"temperature": 1.0},
                               messages=[{"role": "user", "content": "What is the weather in Jerusalem?"}])
        uses = [b for b in m.content if b.type == "tool_use"]
        assert m.stop_reason == "tool_use" and len(uses) == 1, m.content
        if choice["type"] == "tool":
            assert uses[0].name == "get_weather"
        jsonschema.validate(uses[0].input, SCHEMAS[uses[0].name])
