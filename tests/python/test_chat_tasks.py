"""tools/train/chat_tasks.py and episodes.py: deterministic tasks, disjoint splits, the tool
executor's errors, score on hand-made episodes, and SFT trajectories that render in the K3 chat
format (the engine's template) and parse back (the engine's parser) to the same messages."""
import json
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)

from tools.train import chat_tasks as ct  # noqa: E402

MINI = os.path.join(ROOT, "models", "k3-mini")


def test_make_tasks_deterministic_and_distinct():
    for d in ct.DOMAINS:
        a = ct.make_tasks(d, "train", 30, 7)
        b = ct.make_tasks(d, "train", 30, 7)
        assert [t.id for t in a] == [t.id for t in b]
        assert [t.messages for t in a] == [t.messages for t in b]
        assert len({t.id for t in a}) == 30
        assert all(t.domain == d and t.split == "train" for t in a)
        assert [t.id for t in ct.make_tasks(d, "train", 30, 8)] != [t.id for t in a]
    with pytest.raises(ValueError, match="domain"):
        ct.make_tasks("coding", "train", 1, 0)
    with pytest.raises(ValueError, match="split"):
        ct.make_tasks("general", "test", 1, 0)


def test_splits_disjoint():
    for d in ct.DOMAINS:
        tr = ct.make_tasks(d, "train", 300, 1)
        ho = ct.make_tasks(d, "heldout", 100, 1)
        tr_keys = {k for t in tr for k in t.meta["keys"]}
        ho_keys = {k for t in ho for k in t.meta["keys"]}
        assert not tr_keys & ho_keys
        assert all(ct.split_of_key(k) == "train" for k in tr_keys)
        assert all(ct.split_of_key(k) == "heldout" for k in ho_keys)
        assert not any(k.startswith("Revelation") for k in tr_keys)
    assert ct.split_of_key("Revelation 1:1") == "heldout"


def test_book_facts_and_openings_never_cross_the_split():
    """"after X" and its mirror "before Y" (X, Y neighbours) are one fact: same split. A "which
    book" opening names exactly one verse, so its answer is unique and its split is that verse's."""
    general = {s: ct.make_tasks("general", s, 400, 3) for s in ct.SPLITS}
    facts = {s: set() for s in ct.SPLITS}
    for s, tasks in general.items():
        for t in tasks:
            if t.meta["kind"] == "after":
                facts[s].add((t.meta["book"], t.answer))
            elif t.meta["kind"] == "before":
                facts[s].add((t.answer, t.meta["book"]))
            elif t.meta["kind"] == "book_of":
                opening = t.messages[0]["content"].split('"')[1]
                starts = [v for v in ct.verses() if v.text.startswith(opening + " ") or v.text == opening]
                assert [v.book for v in starts] == [t.answer], (opening, [v.ref for v in starts])
    assert facts["train"] and facts["heldout"] and not facts["train"] & facts["heldout"]
    for i in range(len(ct.BOOKS) - 1):  # after BOOKS[i] and before BOOKS[i + 1]: one key
        assert ct._pair_key(i) == f"adjacent {ct.BOOKS[i]}|{ct.BOOKS[i + 1]}"


def test_executor_results_and_errors():
    assert ct.execute_tool("lookup_verse", {"book": "Genesis", "chapter": 1, "verse": 3}) == \
        "Genesis 1:3 And God said, Let there be light: and there was light."
    assert ct.execute_tool("lookup_verse", '{"book": "song of  solomon", "chapter": 1, "verse": 1}') \
        .startswith("Song of Solomon 1:1 The song of songs")
    r = ct.execute_tool("search", '{"text": "Let there be light"}')
    assert r.splitlines()[:2] == ["2 verses:", "Genesis 1:3 And God said, Let there be light: and there was light."]
    assert ct.execute_tool("search", {"text": "zzzzqqq"}) == "no verse contains 'zzzzqqq'"
    errs = {
        ("lookup_verse", '{"book": "Genesis", "chapter": 1}'): "'verse' is a required property",
        ("lookup_verse", '{"book": "Genesis", "chapter": "1", "verse": 1}'): "chapter",
        ("lookup_verse", '{"book": "Gen", "chapter": 1, "verse": 1}'): "no book named 'Gen'",
        ("lookup_verse", '{"book": "Ruth", "chapter": 9, "verse": 1}'): "Ruth has chapters 1 to 4, not 9",
        ("lookup_verse", '{"book": "Ruth", "chapter": 1, "verse": 99}'): "Ruth 1 has verses 1 to 22, not 99",
        ("search", '{text'): "not valid JSON",
        ("search", '{"text": "ab"}'): "at least 3 characters",
        ("search", '{"text": "light", "n": 2}'): "Additional properties",
        ("define", "{}"): "unknown tool 'define'",
    }
    for (name, args), want in errs.items():
        got = ct.execute_tool(name, args)
        assert got.startswith("error: ") and want in got, (name, args, got)


def _task(domain, kind):
    for t in ct.make_tasks(domain, "train", 200, 3):
        if t.meta["kind"] == kind:
            return t
    raise AssertionError(kind)


def test_score_hand_made_episodes():
    t = _task("general", "after")
    assert ct.score(t, [{"role": "assistant", "content": t.answer}]) == 1.0
    assert ct.score(t, [{"role": "assistant", "content": " " + t.answer.upper() + "."}]) == 1.0
    assert ct.score(t, [{"role": "assistant", "content": t.answer + " and Ruth"}]) == 0.0
    assert ct.score(t, []) == 0.0
    a = _task("agentic", "find")
    call = {"id": "c1", "type": "function", "function": {"name": "search",
                                                         "arguments": json.dumps({"text": a.meta["phrase"]})}}
    good = [{"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "..."},
            {"role": "assistant", "content": a.answer}]
    assert ct.score(a, good) == 1.0
    assert ct.score(a, good[2:]) == 0.0                       # right answer without the tool
    bad = json.loads(json.dumps(good))
    bad[0]["tool_calls"][0]["function"]["arguments"] = '{"query": "x"}'
    assert ct.score(a, bad) == 0.0                            # the call does not match the schema
    w = _task("writing", "continue")
    words = w.answer.split()
    assert ct.score(w, [{"role": "assistant", "content": w.answer}]) == 1.0
    assert ct.score(w, [{"role": "assistant", "content": " ".join(words[:3]) + " zzz"}]) == \
        pytest.approx(3 / ct.WRITING_WORDS)
    assert ct.score(w, [{"role": "assistant", "content": "zzz " + w.answer}]) == 0.0


def test_sft_trajectories_solve_and_grow_with_effort():
    for d in ct.DOMAINS:
        for t in ct.make_tasks(d, "train", 40, 5):
            lens = []
            for eff in ct.EFFORTS:
                traj = ct.sft_trajectory(t, eff)
                assert ct.score(t, traj) == 1.0, (t.id, eff)
                lens.append(sum(len(m.get("reasoning_content", "").split()) for m in traj))
            assert lens[0] < lens[1] < lens[2], (t.id, lens)
    nxt = _task("agentic", "next")
    traj = ct.sft_trajectory(nxt, "low")
    assert [m["role"] for m in traj] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert [m["tool_calls"][0]["function"]["name"] for m in traj if m.get("tool_calls")] == ["search", "lookup_verse"]


@pytest.fixture(scope="module")
def llm():
    from tools.train.k3_import import import_k3
    k3 = import_k3()
    with k3.LLM(MINI, threads=1, n_parallel=2, n_ctx=1024) as m:
        yield m


def test_sft_trajectory_renders_and_round_trips(llm):
    from tools.train.episodes import ChatRenderer
    r = ChatRenderer(llm)
    for d in ct.DOMAINS:
        t = ct.make_tasks(d, "train", 5, 2)[0]
        if d == "agentic":
            t = _task("agentic", "next")
        for eff in ct.EFFORTS:
            traj = ct.sft_trajectory(t, eff)
            conv = list(t.messages)
            for i, m in enumerate(traj):
                if m["role"] != "assistant":
                    conv.append(m)
                    continue
                prompt = r.render(conv, t.tools, eff)
                full = r.render(conv + [m], t.tools, eff, generation_prompt=False)
                assert full[:len(prompt)] == prompt
                turn = full[len(prompt):]
                assert turn[-1] == r.eom and turn[-1 - len(r.close_message):-1] == r.close_message
                back = llm.parse_chat_output(turn)
                assert back["reasoning_content"] == m["reasoning_content"]
                assert (back["content"] or "") == m["content"]
                got = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                       for c in back.get("tool_calls", [])]
                want = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                        for c in m.get("tool_calls", [])]
                assert got == want
                conv.append(m)


def test_rollout_bookkeeping_on_base_model(llm):
    from tools.train.episodes import rollout
    tasks = ct.make_tasks("general", "heldout", 2, 0)
    eps = rollout(llm, tasks, "low", n_samples=2, temperature=1.0, max_tokens=12, max_turns=2, seed=3)
    assert [(e.task.id, e.sample) for e in eps] == [(t.id, s) for t in tasks for s in range(2)]
    for e in eps:
        assert len(e.ids) == len(e.mask) and e.mask[:e.prompt_len] == [0] * e.prompt_len
        assert sum(e.mask) == sum(t.end - t.start for t in e.turns) and e.turns
        assert 0.0 <= e.score <= 1.0
    again = rollout(llm, tasks, "low", n_samples=2, temperature=1.0, max_tokens=12, max_turns=2, seed=3)
    assert [e.ids for e in again] == [e.ids for e in eps]
    with pytest.raises(ValueError, match="effort"):
        rollout(llm, tasks, "medium")


def test_sft_retrieval_drills_leave_out_the_declaration_and_keep_the_turns_asked(llm):
    from tools.train.episodes import ChatRenderer
    from tools.train.sft import build_drills, render_example
    r = ChatRenderer(llm)
    t = _task("agentic", "next")
    declared, _ = render_example(r, t, "low")
    whole, whole_mask = render_example(r, t, "low", declare_tools=False)
    first, first_mask = render_example(r, t, "low", declare_tools=False, turns=1)
    decl = llm.tokenize('<|open|>message role="system" type="tool-declare"<|sep|>', special=True)
    has = lambda ids, sub: any(ids[i:i + len(sub)] == sub for i in range(len(ids) - len(sub) + 1))  # noqa: E731
    assert has(declared, decl) and not has(whole, decl) and not has(first, decl)
    # the first turn is a prefix of the whole trajectory, ends with its <|end_of_msg|> and is masked
    # exactly as there; the whole one has the three assistant turns of a "next" task
    assert whole[:len(first)] == first and first_mask == whole_mask[:len(first)]
    assert first[-1] == r.eom and first_mask[-1] == 1
    back = llm.parse_chat_output(first[len(r.render(t.messages, None, "low")):])
    assert back["tool_calls"][0]["function"]["name"] == "search"
    assert json.loads(back["tool_calls"][0]["function"]["arguments"]) == {"text": t.meta["phrase"]}
    assert sum(1 for i, x in enumerate(whole) if x == r.eom and whole_mask[i]) == 3
    assert sum(1 for i, x in enumerate(first) if x == r.eom and first_mask[i]) == 1
    # the mask never covers the user, system or tool ids
    assert whole_mask[:len(r.render(t.messages, None, "low"))] == [0] * len(r.render(t.messages, None, "low"))
    with pytest.raises(ValueError, match="turns"):
        render_example(r, t, "low", turns=0)
    ex = build_drills(llm, 3, 5)
    assert [e["domain"] for e in ex] == ["drill"] * 6
    assert [e["effort"] for e in ex[::2]] == list(ct.EFFORTS)
    assert all(ex[2 * i]["ids"] == ex[2 * i + 1]["ids"][:len(ex[2 * i]["ids"])] for i in range(3))
    drilled = ct.make_tasks("agentic", "train", 3, 5 + 7919)
    assert {e["id"] for e in ex} == {t.id for t in drilled} and all(t.split == "train" for t in drilled)


def test_chat_eval_summary_counts_each_kind(llm):
    from tools.train.chat_eval import summarize
    from tools.train.episodes import rollout
    tasks = [_task("agentic", "lookup"), _task("agentic", "find"), _task("agentic", "lookup")]
    eps = rollout(llm, tasks, "low", temperature=0.0, max_tokens=8, max_turns=1)
    eps[0].score = 1.0   # as if the first lookup were answered right
    m = summarize(eps)
    assert m["episodes"] == 3 and m["accuracy"] == pytest.approx(1 / 3)
    assert m["by_kind"] == {"find": {"episodes": 1, "accuracy": 0.0}, "lookup": {"episodes": 2, "accuracy": 0.5}}
