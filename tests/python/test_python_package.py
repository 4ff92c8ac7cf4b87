"""The `k3` Python package (pyproject.toml, python/): `pip install .` into a temporary venv, then
k3.LLM on models/k3-mini against the CLI.

The install reuses build/ (the Release tree scripts/setup.sh builds, which holds the k3_python
target), so it only links and copies the module. The temporary venv sees Debian's packages
(--system-site-packages) and, through a .pth file, this interpreter's site-packages (pytest,
numpy, scikit-build-core of tools/requirements.txt); the shared .venv is never written to.

Checked: `python -c "import k3; ..."` generates text; greedy ids equal `k3 run --temp 0`; stream
equals generate; concurrent generate calls (one call with two prompts, two Python threads) equal
the lone calls; logits equal `k3 logits`; tokenize equals `k3 tokenize`; the chat prompt equals
`k3 tokenize --chat` and the answer parses as the server parses it; stop strings; the prefix
cache; bad input raises k3.Error with the engine's message.

The binary is $K3_BIN, else build/tools/cli/k3.
"""
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K3 = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "tools", "cli", "k3"))
MINI = os.path.join(ROOT, "models", "k3-mini")
PROMPT = "And God said"


# The execution-config variables (tools/exec_env.h): the CLI runs and the in-process engine of
# these tests both run without them, so they compare the same default config.
EXEC_VARS = ("K3_ISA", "K3_KERNELS", "K3_MXFP4", "K3_NUMERICS")


def cli(*args, stdin=None):
    """Runs the k3 CLI (one thread, exact numerics where the command takes them); returns stdout."""
    assert os.path.exists(K3), f"k3 binary not found at {K3} (build it, or set K3_BIN)"
    env = {k: v for k, v in os.environ.items() if k not in EXEC_VARS}
    r = subprocess.run([K3, *[str(a) for a in args]], input=stdin, capture_output=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout.decode()


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A temporary venv with the package installed by `pip install .` (timed: stderr)."""
    import importlib.util
    assert importlib.util.find_spec("scikit_build_core"), \
        "scikit-build-core is not installed: run scripts/setup.sh (tools/requirements.txt pins it)"
    d = tmp_path_factory.mktemp("k3_venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(d)], check=True, timeout=300)
    py = str(d / "bin" / "python")
    purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    parents = [p for p in sys.path if os.path.isdir(p) and os.path.basename(p) in ("site-packages", "dist-packages")]
    with open(os.path.join(purelib, "k3_test_parent_site.pth"), "w") as f:
        f.write("\n".join(parents) + "\n")
    t0 = time.monotonic()
    r = subprocess.run([py, "-m", "pip", "install", "--disable-pip-version-check", "--no-build-isolation", "--no-deps",
                        "--no-index", "-q", ROOT], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout + r.stderr
    sys.stderr.write(f"test_python_package: pip install . took {time.monotonic() - t0:.1f} s\n")
    return py, purelib


@pytest.fixture(scope="module")
def k3(venv):
    """The installed package, imported into this process (from the venv, not the source tree)."""
    _, purelib = venv
    # Other test files may have imported k3 from the source tree (tools/train/k3_import.py):
    # set their modules aside so this import finds the installed package, and put them back after.
    saved = {n: m for n, m in sys.modules.items() if n == "k3" or n.startswith("k3.")}
    for n in saved:
        del sys.modules[n]
    sys.path.insert(0, purelib)
    try:
        import k3 as mod
    finally:
        sys.path.remove(purelib)
    assert os.path.dirname(mod.__file__) == os.path.join(purelib, "k3"), mod.__file__
    yield mod
    for n in [n for n in sys.modules if n == "k3" or n.startswith("k3.")]:
        del sys.modules[n]
    sys.modules.update(saved)


@pytest.fixture(scope="module")
def llm(k3):
    """The engine under test; it reads the execution-config variables once, here, without them."""
    saved = {k: os.environ.pop(k) for k in EXEC_VARS if k in os.environ}
    try:
        m = k3.LLM(MINI, n_ctx=512, n_parallel=4, numerics="exact", threads=1)
    finally:
        os.environ.update(saved)
    with m:
        yield m


def test_import_k3_generates_text(venv):
    py, _ = venv
    code = ("import json, k3; llm = k3.LLM('%s', n_ctx=256, numerics='exact', threads=1); "
            "r = llm.generate('%s', max_tokens=12, temperature=0, ignore_eos=True)[0]; "
            "print(json.dumps({'text': r.text, 'ids': r.token_ids, 'finish': r.finish_reason}))" % (MINI, PROMPT))
    r = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=300, cwd="/")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["ids"]) == 12 and out["finish"] == "length"
    assert out["text"].strip(), out


def test_greedy_ids_equal_k3_run(llm):
    for prompt in (PROMPT, "In the beginning God created"):
        ref = json.loads(cli("run", "-m", MINI, "-p", prompt, "-n", 24, "--temp", 0, "--ignore-eos", "--json",
                             "--numerics", "exact", "-t", 1, "--no-stats"))
        got = llm.generate(prompt, max_tokens=24, temperature=0, ignore_eos=True)[0]
        assert got.prompt_token_ids == ref["prompt_ids"]
        assert got.token_ids == ref["ids"]
        assert got.text == ref["text"]
        assert got.finish_reason == "length"


def test_stream_equals_generate(llm):
    kw = dict(max_tokens=32, temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, seed=1234, ignore_eos=True)
    pieces = list(llm.stream(PROMPT, **kw))
    assert len(pieces) > 1
    full = llm.generate(PROMPT, **kw)[0]
    assert "".join(pieces) == full.text
    assert full.seed == 1234


def test_concurrent_generate_equals_lone_calls(llm):
    prompts = [PROMPT, "And the earth was without form"]
    alone = [llm.generate(p, max_tokens=20, temperature=0, ignore_eos=True)[0].token_ids for p in prompts]
    together = llm.generate(prompts, max_tokens=20, temperature=0, ignore_eos=True)
    assert [c.token_ids for c in together] == alone
    ids = np.array(together[0].prompt_token_ids, dtype=np.int64)  # ids as a numpy array: one prompt
    assert [c.token_ids for c in llm.generate(ids, max_tokens=20, temperature=0, ignore_eos=True)] == alone[:1]
    out = [None, None]

    def work(i):
        out[i] = llm.generate(prompts[i], max_tokens=20, temperature=0, ignore_eos=True)[0].token_ids

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert out == alone


def test_logits_equal_k3_logits(llm, tmp_path):
    ids = llm.tokenize("In the beginning God created the heaven and the earth.")
    path = tmp_path / "logits.npy"
    cli("logits", "-m", MINI, "--ids", ",".join(map(str, ids)), "--out", path)
    ref = np.load(path)
    got = llm.logits(ids)
    assert got.dtype == np.float32 and got.shape == (len(ids), llm.vocab_size)
    assert np.array_equal(got, ref)


def test_tokenize_equals_k3_tokenize(llm):
    text = "In the beginning, God created — héllo <|end_of_msg|> 123\n"
    ref = [int(x) for x in cli("tokenize", "-m", MINI, "--ids-only", text).split()]
    assert llm.tokenize(text) == ref
    ref_special = [int(x) for x in cli("tokenize", "-m", MINI, "--ids-only", "--allow-special", text).split()]
    assert llm.tokenize(text, special=True) == ref_special
    assert ref_special != ref
    assert llm.detokenize(ref) == text


def test_chat_prompt_and_parse(llm, tmp_path):
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Who said it?"}]
    f = tmp_path / "chat.json"
    f.write_text(json.dumps(messages))
    ref = [int(x) for x in cli("tokenize", "-m", MINI, "--ids-only", "--chat", f).split()]
    r = llm.chat(messages, max_tokens=16, temperature=0)
    assert r.prompt_token_ids == ref
    assert r.finish_reason in ("stop", "length", "tool_calls")
    assert 1 <= len(r.token_ids) <= 16
    assert r.message["role"] == "assistant"
    assert r.content is None or isinstance(r.content, str)
    assert r.reasoning_content is None or isinstance(r.reasoning_content, str)
    # Thinking off: the prompt ends in the response channel (as `k3 tokenize --chat --no-thinking`).
    ref_nt = [int(x) for x in cli("tokenize", "-m", MINI, "--ids-only", "--chat", f, "--no-thinking").split()]
    assert llm.chat(messages, max_tokens=4, temperature=0, thinking=False).prompt_token_ids == ref_nt


def test_parse_chat_output_as_the_server(llm):
    out = ("Let me check<|close|>think<|sep|><|open|>response<|sep|>It is sunny.<|close|>response<|sep|>"
           "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
           "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>"
           "<|open|>argument key=\"days\" type=\"number\"<|sep|>2<|close|>argument<|sep|>"
           "<|close|>call<|sep|><|close|>tools<|sep|><|end_of_msg|>ignored")
    m = llm.parse_chat_output(llm.tokenize(out, special=True))
    assert m["role"] == "assistant"
    assert m["reasoning_content"] == "Let me check"
    assert m["content"] == "It is sunny."
    assert len(m["tool_calls"]) == 1
    call = m["tool_calls"][0]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 2}
    # Thinking off: text before any marker is content.
    m = llm.parse_chat_output(llm.tokenize("plain answer<|end_of_msg|>", special=True), thinking=False)
    assert m == {"role": "assistant", "content": "plain answer", "reasoning_content": None}


def test_stop_string_cuts_the_text(llm):
    full = llm.generate(PROMPT, max_tokens=24, temperature=0, ignore_eos=True)[0]
    words = full.text.split()
    assert len(words) >= 3, full.text
    stop = " " + words[2]
    cut = llm.generate(PROMPT, max_tokens=24, temperature=0, ignore_eos=True, stop=[stop, "never appears"])[0]
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.index(stop)]
    assert "".join(llm.stream(PROMPT, max_tokens=24, temperature=0, ignore_eos=True, stop=stop)) == cut.text


def test_prefix_cache_reuses_a_repeated_prompt(llm):
    prompt = " ".join(["And the evening and the morning were the first day."] * 12)
    before = llm.stats()["prompt_tokens_reused"]
    a = llm.generate(prompt, max_tokens=4, temperature=0, ignore_eos=True)[0]
    b = llm.generate(prompt, max_tokens=4, temperature=0, ignore_eos=True)[0]
    assert len(a.prompt_token_ids) >= 128
    assert llm.stats()["prompt_tokens_reused"] - before >= 64
    assert a.token_ids == b.token_ids


def test_errors_are_k3_errors(k3, llm):
    with pytest.raises(k3.Error, match="not a directory"):
        k3.LLM("/nonexistent/k3-model")
    with pytest.raises(k3.Error, match="outside the vocabulary"):
        llm.logits([0, llm.vocab_size])
    with pytest.raises(k3.Error, match="context"):
        llm.generate([1] * 600, max_tokens=4)
    with pytest.raises(k3.Error, match="--temp"):
        llm.generate(PROMPT, temperature=float("nan"))
    with pytest.raises(k3.Error, match=r"messages\[0\]\.content"):
        llm.chat([{"role": "user", "content": 5}])
    assert issubclass(k3.Error, RuntimeError)
