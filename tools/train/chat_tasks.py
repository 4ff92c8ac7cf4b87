"""Chat tasks for post-training K3-mini (issue 23): agentic, general and writing tasks built from
the King James Bible K3-mini was trained on (Debian's bible-kjv, the source of tools/train/data.py).

Split (train / held-out), kept apart by construction: every task is built on one or more *keys*
(a verse reference "Genesis 1:3", a book question "chapters Ruth", or a pair of neighbouring books
"adjacent Ruth|1 Samuel", the one key of both "Which book comes after Ruth?" and "Which book comes
before 1 Samuel?", which state the same fact). A key is held-out when it lies in
Revelation (K3-mini's held-out book, whose perplexity measures the base text) or when
sha256(key) mod 5 == 0; otherwise it is train. A task is in a split only if all its keys are; a
task whose keys straddle the splits is never generated. So no held-out task shares a verse or a
book fact with a train task. A "which book is this verse from" opening (8 words) is used only when
exactly one verse starts with it.

Domains (DOMAINS):
- agentic: questions answered with the tools TOOLS (OpenAI declarations) run by execute_tool:
  * lookup: "What does Genesis 1:3 say?" -> lookup_verse -> the verse text;
  * find:   "Where is the verse that says '...'?" -> search -> the reference ("Genesis 1:3");
  * next:   "Which verse follows the one that says '...'? Quote it." -> search, then
            lookup_verse of the next verse (two tool turns) -> the next verse's text.
- general: short questions with one answer, from the text:
  * after / before: "Which book comes after Ruth?" -> "1 Samuel";
  * chapters: "How many chapters are in the book of Ruth?" -> "4";
  * book_of: "Which book is this verse from: '...'" -> the book name.
- writing: "Continue the passage: '<verse>'" -> the next verse. Graded by exact match of the
  next verse's first WRITING_WORDS words (score = the fraction of those words the answer
  reproduces in order from its start), not by likelihood.

score(task, episode) is in [0, 1]: agentic and general score 1 iff the final assistant content,
normalized (lowercased, punctuation and quotes dropped, spaces collapsed), equals the normalized
answer, the final turn makes no tool call, and (agentic) the episode called every tool the task
needs (meta["needs_tools"]) at least once with arguments valid under the declared schema; writing scores the word-prefix fraction above.

sft_trajectory(task, effort) builds the assistant/tool messages that solve a task, with
reasoning_content whose length grows with the effort (EFFORTS: low < high < max).
"""
from __future__ import annotations

import bisect
import functools
import hashlib
import json
import random
import re
import subprocess
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

DOMAINS = ("agentic", "general", "writing")
EFFORTS = ("low", "high", "max")
SPLITS = ("train", "heldout")
WRITING_WORDS = 6
SEARCH_MAX_RESULTS = 3

# The 66 books in the order of Debian's bible-kjv, which writes them abbreviated ("Ge1:1 ...").
BOOKS = ("Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth",
         "1 Samuel", "2 Samuel", "1 Kings", "2 Kings", "1 Chronicles", "2 Chronicles", "Ezra",
         "Nehemiah", "Esther", "Job", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon",
         "Isaiah", "Jeremiah", "Lamentations", "Ezekiel", "Daniel", "Hosea", "Joel", "Amos",
         "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Zechariah",
         "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "1 Corinthians",
         "2 Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians", "1 Thessalonians",
         "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus", "Philemon", "Hebrews", "James",
         "1 Peter", "2 Peter", "1 John", "2 John", "3 John", "Jude", "Revelation")
HELDOUT_BOOK = "Revelation"

TOOLS = [
    {"type": "function", "function": {
        "name": "lookup_verse",
        "description": "Text of one verse of the King James Bible.",
        "parameters": {"type": "object", "properties": {
            "book": {"type": "string"}, "chapter": {"type": "integer"}, "verse": {"type": "integer"}},
            "required": ["book", "chapter", "verse"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "search",
        "description": "Verses that contain the text.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                       "required": ["text"], "additionalProperties": False}}},
]
TOOL_SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

_REF = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")


@dataclass(frozen=True)
class Verse:
    index: int     # position in the whole text, 0-based
    book: str      # full name, BOOKS spelling
    chapter: int   # 1-based
    verse: int     # 1-based
    text: str

    @property
    def ref(self) -> str:
        return f"{self.book} {self.chapter}:{self.verse}"


@dataclass
class Task:
    """One chat task. messages: the OpenAI-style conversation the model is given (a user
    message); tools: the tool declarations offered (TOOLS) or None; answer: the expected final
    response text; meta: kind, keys and what score() needs (e.g. "needs_tools")."""
    id: str
    domain: str
    split: str
    messages: list[dict[str, Any]]
    tools: Optional[list[dict[str, Any]]]
    answer: str
    meta: dict[str, Any] = field(default_factory=dict)


@functools.lru_cache(maxsize=1)
def verses() -> tuple[Verse, ...]:
    """Every verse of the KJV (31,102), from `bible -f "Genesis 1:1-Revelation 22:21"`."""
    try:
        out = subprocess.run(["bible", "-f", "Genesis 1:1-Revelation 22:21"], check=True,
                             capture_output=True, text=True).stdout
    except FileNotFoundError as e:
        raise RuntimeError("chat_tasks: the `bible` program (Debian package bible-kjv) is not "
                           "installed; scripts/setup.sh installs it") from e
    res: list[Verse] = []
    abbr_to_book: dict[str, str] = {}
    for line in out.splitlines():
        if not line.strip():
            continue
        m = _REF.match(line)
        if not m:
            raise RuntimeError(f"chat_tasks: unexpected bible-kjv line {line[:60]!r}")
        ab = m.group(1)
        if ab not in abbr_to_book:
            if len(abbr_to_book) >= len(BOOKS):
                raise RuntimeError(f"chat_tasks: more than {len(BOOKS)} books in bible-kjv ({ab})")
            abbr_to_book[ab] = BOOKS[len(abbr_to_book)]
        res.append(Verse(len(res), abbr_to_book[ab], int(m.group(2)), int(m.group(3)),
                         m.group(4).strip()))
    if len(abbr_to_book) != len(BOOKS):
        raise RuntimeError(f"chat_tasks: bible-kjv gave {len(abbr_to_book)} books, expected {len(BOOKS)}")
    return tuple(res)


@functools.lru_cache(maxsize=1)
def _index() -> dict[tuple[str, int, int], Verse]:
    return {(v.book.lower(), v.chapter, v.verse): v for v in verses()}


@functools.lru_cache(maxsize=1)
def _chapters() -> dict[str, dict[int, int]]:
    """book -> chapter -> number of verses."""
    d: dict[str, dict[int, int]] = {}
    for v in verses():
        d.setdefault(v.book, {})
        d[v.book][v.chapter] = max(d[v.book].get(v.chapter, 0), v.verse)
    return d


def split_of_key(key: str) -> str:
    """'heldout' for a key in Revelation or with sha256(key) mod 5 == 0, else 'train'."""
    if key == HELDOUT_BOOK or key.startswith(HELDOUT_BOOK + " "):
        return "heldout"
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return "heldout" if h % 5 == 0 else "train"


# --- tools ---------------------------------------------------------------------------------------
def _book_name(s: str) -> Optional[str]:
    s = " ".join(s.split()).lower()
    for b in BOOKS:
        if b.lower() == s:
            return b
    return None


def lookup_verse(book: str, chapter: int, verse: int) -> str:
    """'Genesis 1:3 And God said, ...' or an 'error: ...' string."""
    name = _book_name(book)
    if name is None:
        return f"error: no book named {book!r}"
    ch = _chapters()[name]
    if chapter not in ch:
        return f"error: {name} has chapters 1 to {len(ch)}, not {chapter}"
    if not 1 <= verse <= ch[chapter]:
        return f"error: {name} {chapter} has verses 1 to {ch[chapter]}, not {verse}"
    v = _index()[(name.lower(), chapter, verse)]
    return f"{v.ref} {v.text}"


@functools.lru_cache(maxsize=1)
def _haystack() -> tuple[str, list[int]]:
    """All verse texts lowercased with spaces collapsed, joined by '\n'; start offset of each."""
    starts, parts, pos = [], [], 0
    for v in verses():
        t = " ".join(v.text.split()).lower()
        starts.append(pos)
        parts.append(t)
        pos += len(t) + 1
    return "\n".join(parts), starts


def search_hits(text: str) -> list[Verse]:
    """Verses containing `text` (case-insensitive, spaces collapsed), in Bible order."""
    q = " ".join(text.split()).lower()
    if not q or "\n" in q:
        return []
    hay, starts = _haystack()
    vs = verses()
    out: list[Verse] = []
    i = hay.find(q)
    while i >= 0:
        k = bisect.bisect_right(starts, i) - 1
        out.append(vs[k])
        nxt = starts[k + 1] if k + 1 < len(starts) else len(hay)
        i = hay.find(q, nxt)
    return out


def search(text: str) -> str:
    """'N verses: REF TEXT\\n...' (at most SEARCH_MAX_RESULTS shown) or an 'error: ...' string."""
    q = " ".join(text.split())
    if len(q) < 3:
        return "error: search text must have at least 3 characters"
    hits = search_hits(q)
    if not hits:
        return f"no verse contains {q!r}"
    head = f"{len(hits)} verse{'s' if len(hits) != 1 else ''}:"
    return "\n".join([head] + [f"{v.ref} {v.text}" for v in hits[:SEARCH_MAX_RESULTS]])


def _type_ok(value: Any, typ: str) -> bool:
    if typ == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if typ == "string":
        return isinstance(value, str)
    return True


def check_arguments(name: str, args: Any) -> Optional[str]:
    """None when `args` (a JSON text or a dict) is valid for tool `name` under its declared
    schema (jsonschema), else the error text."""
    if name not in TOOL_SCHEMAS:
        return f"error: unknown tool {name!r} (tools: {', '.join(TOOL_SCHEMAS)})"
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as e:
            return f"error: {name} arguments are not valid JSON ({e.msg} at {e.pos})"
    import jsonschema
    try:
        jsonschema.validate(args, TOOL_SCHEMAS[name])
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "arguments"
        return f"error: {name} {where}: {e.message}"
    return None


def execute_tool(name: str, args: Any) -> str:
    """Runs tool `name` on `args` (a JSON object text or a dict). Returns the result text, or a
    text starting with 'error: ' that names the problem (unknown tool, JSON that does not parse,
    an argument missing, of the wrong type or out of range). Never raises for bad input."""
    err = check_arguments(name, args)
    if err:
        return err
    a = json.loads(args) if isinstance(args, str) else args
    if name == "lookup_verse":
        return lookup_verse(a["book"], a["chapter"], a["verse"])
    return search(a["text"])


# --- task construction ---------------------------------------------------------------------------
def _quote_phrase(v: Verse, rng: random.Random, words: int = 5) -> Optional[str]:
    """A run of `words` words of v's text that occurs in no other verse, or None."""
    w = v.text.split()
    if len(w) < words:
        return None
    starts = list(range(0, len(w) - words + 1))
    rng.shuffle(starts)
    for s in starts[:4]:
        phrase = re.sub(r"^[^\w]+|[^\w]+$", "", " ".join(w[s:s + words]))
        if len(phrase) < 12:
            continue
        hits = search_hits(phrase)
        if len(hits) == 1 and hits[0].index == v.index:
            return phrase
    return None


@functools.lru_cache(maxsize=2)
def _pool(split: str) -> list[Verse]:
    """Verses of `split` with at most 40 words (short enough for a 5M model's answers)."""
    return [v for v in verses() if split_of_key(v.ref) == split and len(v.text.split()) <= 40]


def _mk(domain: str, kind: str, split: str, keys: list[str], user: str, answer: str,
        tools: bool, **meta: Any) -> Task:
    tid = f"{domain}-{kind}-" + "|".join(keys)
    return Task(tid, domain, split, [{"role": "user", "content": user}],
                [json.loads(json.dumps(t)) for t in TOOLS] if tools else None, answer,
                {"kind": kind, "keys": keys, **meta})


def _agentic(split: str, rng: random.Random) -> Optional[Task]:
    pool = _pool(split)
    kind = rng.choice(("lookup", "find", "next"))
    v = rng.choice(pool)
    if kind == "lookup":
        return _mk("agentic", kind, split, [v.ref], f"What does {v.ref} say?", v.text, True,
                   needs_tools=["lookup_verse"], verse=v.index)
    phrase = _quote_phrase(v, rng)
    if phrase is None:
        return None
    if kind == "find":
        return _mk("agentic", kind, split, [v.ref], f"Where is the verse that says \"{phrase}\"?",
                   v.ref, True, needs_tools=["search"], verse=v.index, phrase=phrase)
    vs = verses()
    if v.index + 1 >= len(vs) or vs[v.index + 1].book != v.book:
        return None
    nxt = vs[v.index + 1]
    if split_of_key(nxt.ref) != split or len(nxt.text.split()) > 40:
        return None
    return _mk("agentic", kind, split, [v.ref, nxt.ref],
               f"Quote the verse after the one that says \"{phrase}\".", nxt.text, True,
               needs_tools=["search", "lookup_verse"], verse=v.index, next_verse=nxt.index,
               phrase=phrase)


def _pair_key(i: int) -> str:
    """The split key of the neighbouring books BOOKS[i], BOOKS[i + 1]."""
    return f"adjacent {BOOKS[i]}|{BOOKS[i + 1]}"


@functools.lru_cache(maxsize=1)
def _opening_counts() -> dict[str, int]:
    """How many verses start with each 8-word opening."""
    counts: dict[str, int] = {}
    for v in verses():
        w = v.text.split()
        if len(w) >= 8:
            o = " ".join(w[:8])
            counts[o] = counts.get(o, 0) + 1
    return counts


def _general(split: str, rng: random.Random) -> Optional[Task]:
    kind = rng.choice(("after", "before", "chapters", "book_of"))
    if kind in ("after", "before", "chapters"):
        i = rng.randrange(len(BOOKS))
        b = BOOKS[i]
        if kind == "after":
            # "after X" and "before Y" state one fact of the pair (X, Y): one key for both
            if i + 1 >= len(BOOKS) or split_of_key(_pair_key(i)) != split:
                return None
            return _mk("general", kind, split, [_pair_key(i)], f"Which book comes after {b}?",
                       BOOKS[i + 1], False, book=b)
        if kind == "before":
            if i == 0 or split_of_key(_pair_key(i - 1)) != split:
                return None
            return _mk("general", kind, split, [_pair_key(i - 1)], f"Which book comes before {b}?",
                       BOOKS[i - 1], False, book=b)
        if split_of_key(f"chapters {b}") != split:
            return None
        return _mk("general", kind, split, [f"chapters {b}"],
                   f"How many chapters are in the book of {b}?", str(len(_chapters()[b])), False)
    v = rng.choice(_pool(split))
    w = v.text.split()
    if len(w) < 8:
        return None
    opening = " ".join(w[:8])
    if _opening_counts()[opening] != 1:  # the opening must name one verse (so one book, one split)
        return None
    return _mk("general", kind, split, [v.ref], f"Which book is this verse from: \"{opening}\"?",
               v.book, False, verse=v.index)


def _writing(split: str, rng: random.Random) -> Optional[Task]:
    v = rng.choice(_pool(split))
    vs = verses()
    if v.index + 1 >= len(vs) or vs[v.index + 1].book != v.book:
        return None
    nxt = vs[v.index + 1]
    if split_of_key(nxt.ref) != split or len(nxt.text.split()) > 40:
        return None
    return _mk("writing", "continue", split, [v.ref, nxt.ref],
               f"Continue the passage: \"{v.text}\"", nxt.text, False, verse=v.index,
               next_verse=nxt.index)


_MAKERS = {"agentic": _agentic, "general": _general, "writing": _writing}


def make_tasks(domain: str, split: str, n: int, seed: int) -> list[Task]:
    """n distinct tasks of `domain` ("agentic" / "general" / "writing") from `split` ("train" /
    "heldout"), a pure function of (domain, split, n, seed): the same arguments give the same
    tasks. A larger n with the same seed is not guaranteed to extend a smaller one. Raises
    ValueError for an unknown domain or split, or when the split cannot give n distinct tasks."""
    if domain not in _MAKERS:
        raise ValueError(f"make_tasks: domain {domain!r} is not one of {DOMAINS}")
    if split not in SPLITS:
        raise ValueError(f"make_tasks: split {split!r} is not one of {SPLITS}")
    if n < 0:
        raise ValueError(f"make_tasks: n must be >= 0, got {n}")
    rng = random.Random(f"{domain}/{split}/{seed}")
    out: list[Task] = []
    seen: set[str] = set()
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 200 * n + 1000:
            raise ValueError(f"make_tasks: only {len(out)} distinct {domain}/{split} tasks found, asked {n}")
        t = _MAKERS[domain](split, rng)
        if t is None or t.id in seen:
            continue
        seen.add(t.id)
        out.append(t)
    return out


# --- reference trajectories ----------------------------------------------------------------------
def _think(effort: str, parts: Sequence[str]) -> str:
    """parts: sentences, most important first. low: the first; high: the first two (or one
    more when only two are given); max: all of them."""
    if effort not in EFFORTS:
        raise ValueError(f"effort {effort!r} is not one of {EFFORTS}")
    k = {"low": 1, "high": 2, "max": len(parts)}[effort]
    return " ".join(parts[:k])


def _call(name: str, args: dict[str, Any], i: int) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


def sft_trajectory(task: Task, effort: str) -> list[dict[str, Any]]:
    """The assistant / tool messages that solve `task` at `effort` (EFFORTS), to append to
    task.messages: assistant turns {"role", "reasoning_content", "content", ["tool_calls"]} and
    tool turns {"role": "tool", "tool_call_id", "name", "content"} whose content is
    execute_tool's. reasoning_content grows with effort (low < high < max, in words)."""
    kind = task.meta["kind"]
    ans = task.answer
    if task.domain == "agentic":
        vs = verses()
        msgs: list[dict[str, Any]] = []
        n_call = 0

        def tool_turn(think: list[str], name: str, args: dict[str, Any]) -> None:
            nonlocal n_call
            n_call += 1
            call = _call(name, args, n_call)
            msgs.append({"role": "assistant", "reasoning_content": _think(effort, think),
                         "content": "", "tool_calls": [call]})
            msgs.append({"role": "tool", "tool_call_id": call["id"], "name": name,
                         "content": execute_tool(name, args)})

        v = vs[task.meta["verse"]]
        if kind == "lookup":
            tool_turn([f"I look up {v.ref}.",
                       "I call lookup_verse with the book, the chapter and the verse.",
                       "Then I quote the text the tool gives, without the reference."],
                      "lookup_verse", {"book": v.book, "chapter": v.chapter, "verse": v.verse})
            final = ["The tool gave the verse.", "I quote its text.",
                     f"It is {v.ref}; the answer is its words only."]
        elif kind == "find":
            tool_turn(["I search for the words.", "I call search with the quoted words.",
                       "The tool tells me which verse holds them, and I answer with the reference."],
                      "search", {"text": task.meta["phrase"]})
            final = ["The search found one verse.", f"It is {v.ref}.",
                     "I answer with the book, chapter and verse."]
        elif kind == "next":
            nxt = vs[task.meta["next_verse"]]
            tool_turn(["I find the verse first.", "I call search with the quoted words.",
                       "Then I look up the verse after it and quote that one."],
                      "search", {"text": task.meta["phrase"]})
            tool_turn([f"It is {v.ref}, so I look up {nxt.ref}.",
                       f"The next verse is verse {nxt.verse}.",
                       "I call lookup_verse with the same book and chapter."],
                      "lookup_verse", {"book": nxt.book, "chapter": nxt.chapter, "verse": nxt.verse})
            final = ["The tool gave the verse.", "I quote its text.",
                     f"It is {nxt.ref}; the answer is its words only."]
        else:
            raise ValueError(f"sft_trajectory: unknown agentic kind {kind!r}")
        msgs.append({"role": "assistant", "reasoning_content": _think(effort, final), "content": ans})
        return msgs
    if task.domain == "general":
        if kind in ("after", "before"):
            b = task.meta["book"]
            think = [f"The book {kind} {b} is {ans}.", f"The books go in order, and {ans} is right {kind} {b}.",
                     "I answer with the name of the book only."]
        elif kind == "chapters":
            think = [f"{task.meta['keys'][0].split(' ', 1)[1]} has {ans} chapters.",
                     "I count the chapters of the book.", "I answer with the number only."]
        elif kind == "book_of":
            think = [f"These words are from {ans}.", "I know the verse from its opening words.",
                     "I answer with the name of the book only."]
        else:
            raise ValueError(f"sft_trajectory: unknown general kind {kind!r}")
        return [{"role": "assistant", "reasoning_content": _think(effort, think), "content": ans}]
    if task.domain == "writing":
        think = ["I write the next verse.", "The passage goes on in the same words of the Bible.",
                 "I give the verse that follows, in the King James words."]
        return [{"role": "assistant", "reasoning_content": _think(effort, think), "content": ans}]
    raise ValueError(f"sft_trajectory: unknown domain {task.domain!r}")


# --- scoring -------------------------------------------------------------------------------------
def normalize(s: Optional[str]) -> str:
    """Lowercase, drop everything but letters, digits, ':' between digits and spaces; collapse spaces."""
    s = (s or "").lower()
    s = re.sub(r"(?<=\d):(?=\d)", "\x00", s)
    s = re.sub(r"[^\w\x00 ]+", " ", s).replace("\x00", ":")
    return " ".join(s.split())


def _messages(episode: Any) -> list[dict[str, Any]]:
    if isinstance(episode, list):
        return episode
    m = getattr(episode, "messages", None)
    if m is None:
        raise TypeError("score: episode must be a list of messages or have .messages")
    return list(m)


def score(task: Task, episode: Any) -> float:
    """Score in [0, 1] of `episode`: the assistant / tool messages that followed task.messages
    (a list of dicts, or an object with .messages such as episodes.Episode). See the module
    docstring for the rule of each domain. An episode with no final assistant content scores 0."""
    msgs = _messages(episode)
    finals = [m for m in msgs if m.get("role") == "assistant"]
    if not finals:
        return 0.0
    content = finals[-1].get("content") or ""
    if task.domain == "writing":
        want = normalize(task.answer).split()[:WRITING_WORDS]
        got = normalize(content).split()
        k = 0
        while k < len(want) and k < len(got) and got[k] == want[k]:
            k += 1
        return k / len(want) if want else 0.0
    if finals[-1].get("tool_calls"):
        return 0.0
    if normalize(content) != normalize(task.answer):
        return 0.0
    if task.domain == "agentic":
        ok_tools = set()
        for m in msgs:
            for c in m.get("tool_calls") or []:
                f = c.get("function", {})
                if check_arguments(f.get("name", ""), f.get("arguments", "")) is None:
                    ok_tools.add(f["name"])
        if not set(task.meta.get("needs_tools", [])) <= ok_tools:
            return 0.0
    return 1.0
