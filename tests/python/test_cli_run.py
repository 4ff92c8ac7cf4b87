"""CLI tests of `k3 run`, `k3 perplexity` and `k3 chat`.

Against a tiny random checkpoint (tools/reference/gen_tiny.py) with a byte-level tiktoken.model:
greedy ids equal the fp64 numpy reference, perplexity equals the shared sliding-window definition
computed with the reference, streaming/stats/JSON output, piped chat, and the error contract
(one line on stderr, exit 1). Against models/k3-mini (when the trainer has written it): the
greedy continuations of greedy.json, the held-out perplexity of eval.json within 0.1%, far below
the unigram baseline, and a sampled continuation that reads as English.

The binary is $K3_BIN, else build/tools/cli/k3 (scripts/setup.sh builds it).
"""
import base64
import json
import math
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))

import gen_tiny  # noqa: E402
import k3_ref  # noqa: E402

K3 = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "tools", "cli", "k3"))
MINI = os.path.join(ROOT, "models", "k3-mini")
STATS_RE = re.compile(r"^load: \d+ ms \| prompt: \d+ tok, [\d.]+ tok/s \| gen: \d+ tok, ([\d.]+|-) tok/s \| "
                      r"peak RSS: [\d.]+ MiB \| state: [\d.]+ MiB \| threads: \d+ \([^)]+\)( \| seed: \d+)?$")


def k3(*args, stdin=None, timeout=300, mxfp4="exact"):
    """Runs k3 with one thread (the suite runs on 2 shared cores) unless -t is given. mxfp4:
    K3_MXFP4 for the run — "exact" for comparisons with the fp64 reference (the int8 path's
    activation rounding is visible in the tiny random model), None for the engine default."""
    assert os.path.exists(K3), f"k3 binary not found at {K3} (build it, or set K3_BIN)"
    args = [str(a) for a in args]
    if args and args[0] in ("run", "chat", "perplexity") and "-t" not in args:
        args += ["-t", "1"]
    env = dict(os.environ)
    if mxfp4:
        env["K3_MXFP4"] = mxfp4
    return subprocess.run([K3, *args], input=stdin, capture_output=True, timeout=timeout, env=env)


def write_byte_tokenizer(d):
    with open(os.path.join(d, "tiktoken.model"), "w") as f:
        for i in range(256):
            f.write(f"{base64.b64encode(bytes([i])).decode()} {i}\n")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tiny_k3_cli"))
    gen_tiny.generate(d, "k3", seed=1)
    write_byte_tokenizer(d)
    return d


@pytest.fixture(scope="module")
def tiny_ref(tiny):
    return k3_ref.Model(tiny)


def one_error_line(r):
    """Asserts the error contract and returns the line."""
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("k3: error: "), lines
    assert r.stdout == b"", r.stdout  # nothing printed before the error (e.g. the prompt)
    return lines[0]


# ----------------------------------------------------------------------------------------- run

def test_run_greedy_equals_reference(tiny, tiny_ref):
    r = k3("run", "-m", tiny, "-p", "Hello, w", "-n", 10, "--temp", 0, "--ignore-eos", "--json", "-t", 1)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["prompt_ids"] == list(b"Hello, w")
    assert out["ids"] == k3_ref.greedy(tiny_ref, out["prompt_ids"], 10)
    assert out["stop"] == "n-predict"


def test_run_streams_prompt_then_text_and_prints_stats(tiny):
    args = ("run", "-m", tiny, "-p", "In the", "-n", 16, "--seed", 5, "--ignore-eos")
    j = json.loads(k3(*args, "--json").stdout)
    r = k3(*args)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode() == "In the" + j["text"] + "\n"
    stats = r.stderr.decode().strip().splitlines()
    assert len(stats) == 1 and STATS_RE.match(stats[0]), stats
    assert "prompt: 6 tok" in stats[0] and "gen: 16 tok" in stats[0] and stats[0].endswith("seed: 5")
    # the same seed gives the same sample, another seed (almost surely) not
    assert json.loads(k3(*args, "--json").stdout)["ids"] == j["ids"]
    other = json.loads(k3("run", "-m", tiny, "-p", "In the", "-n", 16, "--seed", 6, "--ignore-eos", "--json").stdout)
    assert other["ids"] != j["ids"]


def test_run_prompt_from_file_and_ids(tiny, tmp_path):
    f = tmp_path / "p.txt"
    f.write_bytes("Grüße\n".encode())
    a = json.loads(k3("run", "-m", tiny, "-f", f, "-n", 4, "--temp", 0, "--json").stdout)
    assert a["prompt_ids"] == list("Grüße\n".encode())
    b = json.loads(k3("run", "-m", tiny, "--prompt-ids", ",".join(map(str, a["prompt_ids"])), "-n", 4,
                      "--temp", 0, "--json").stdout)
    assert b["ids"] == a["ids"]


def test_run_context_full_stops(tiny):
    r = k3("run", "-m", tiny, "-p", "abcd", "-n", -1, "-c", 10, "--temp", 0, "--ignore-eos", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["stop"] == "context full" and len(out["ids"]) == 6


@pytest.mark.parametrize("args,needle", [
    (("-m", "/nonexistent/k3", "-p", "a"), "/nonexistent/k3"),
    (("-p", "x" * 40, "-c", 16), "-c/--ctx-size is 16"),
    (("-p", "x" * 16, "-c", 16), "prompt is 16 tokens"),
    ((), "no prompt"),
    (("-p", "a", "-f", "b"), "exactly one"),
    (("-f", "/nonexistent/prompt.txt"), "/nonexistent/prompt.txt"),
    (("-p", "a", "--top-p", 2), "--top-p"),
    (("-p", "a", "--min-p", -1), "--min-p"),
    (("-p", "a", "-n", -5), "-n/--n-predict"),
    (("--prompt-ids", "1,x"), "--prompt-ids"),
])
def test_run_errors_are_one_line(tiny, args, needle):
    base = [] if "-m" in args else ["-m", tiny]
    line = one_error_line(k3("run", *base, *args))
    assert needle in line, line


def test_bad_flag_fails(tiny):
    r = k3("run", "-m", tiny, "-p", "a", "--bogus-flag")
    assert r.returncode != 0
    assert "--bogus-flag" in r.stderr.decode().splitlines()[0]
    r = k3("run", "-m", tiny, "-p", "a", "-n", "many")
    assert r.returncode != 0 and "many" in r.stderr.decode()


def test_missing_tokenizer_is_one_line(tmp_path):
    d = str(tmp_path / "no_tok")
    gen_tiny.generate(d, "k3", seed=2)
    assert "tiktoken.model" in one_error_line(k3("run", "-m", d, "-p", "a"))


# ----------------------------------------------------------------------------------- perplexity

def reference_ppl(model, ids, n_ctx, stride):
    """The shared definition, literally, with the fp64 reference forward."""
    M, nll, done, s = len(ids), [], 1, 0
    while done < M:
        e = min(s + n_ctx, M)
        lg = np.asarray(k3_ref.forward(model, ids[s:e]), dtype=np.float64)
        for t in range(done, e):
            row = lg[t - 1 - s]
            mx = row.max()
            nll.append(-(row[ids[t]] - mx - math.log(np.exp(row - mx).sum())))
        done, s = e, s + stride
    return math.exp(sum(nll) / len(nll)), len(nll)


def test_perplexity_equals_reference_definition(tiny, tiny_ref, tmp_path):
    text = "And God said, Let there be light: and there was light.\n"
    f = tmp_path / "t.txt"
    f.write_text(text)
    r = k3("perplexity", "-m", tiny, "-f", f, "-c", 16, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    want, n = reference_ppl(tiny_ref, list(text.encode()), 16, 8)
    assert out["n_scored"] == n == len(text) - 1 and out["stride"] == 8 and out["windows"] == 6
    assert out["ppl"] == pytest.approx(want, rel=1e-4)
    r = k3("perplexity", "-m", tiny, "-f", f, "-c", 16, "--stride", 5, "-b", 3)
    want5, _ = reference_ppl(tiny_ref, list(text.encode()), 16, 5)
    m = re.fullmatch(r"ppl = ([\d.]+) ± ([\d.]+) over (\d+) tokens\n", r.stdout.decode())
    assert m, r.stdout
    assert float(m.group(1)) == pytest.approx(want5, rel=1e-4) and int(m.group(3)) == n
    assert "100%" in r.stderr.decode()


@pytest.mark.parametrize("args,needle", [
    (("-c", 16, "--stride", 16), "--stride"),
    (("-c", 1), "-c/--ctx-size"),
    (("-f", "/nonexistent/t.txt"), "/nonexistent/t.txt"),
])
def test_perplexity_errors_are_one_line(tiny, tmp_path, args, needle):
    f = tmp_path / "t.txt"
    f.write_text("some text here")
    base = ["-m", tiny] + ([] if "-f" in args else ["-f", f])
    assert needle in one_error_line(k3("perplexity", *base, *args))


# ----------------------------------------------------------------------------------------- chat

def test_chat_piped_multi_turn(tiny):
    # turn 1 is longer than one 64-token prefix-cache block, so turn 2 resumes inside it
    r = k3("chat", "-m", tiny, "-n", 6, "--temp", 0, "--stats", stdin=b"Hi there, " * 12 + b"\n\nHow are you?\n")
    assert r.returncode == 0, r.stderr
    stats = [ln for ln in r.stderr.decode().splitlines() if ln.startswith("load:")]
    assert len(stats) == 2, r.stderr
    reused = [int(re.search(r"cache: reused (\d+)/\d+ tok", ln).group(1)) for ln in stats]
    assert reused[0] == 0 and reused[1] > 0   # turn 2 resumes from the prefix cache
    assert "\x1b[" not in r.stdout.decode()   # no ANSI codes when stdout is not a terminal


def test_chat_hide_thinking_and_errors(tiny):
    r = k3("chat", "-m", tiny, "-n", 4, "--temp", 0, "--hide-thinking", stdin=b"Hello\n")
    assert r.returncode == 0 and "<think>" not in r.stdout.decode()
    assert k3("chat", "-m", tiny, stdin=b"").returncode == 0           # EOF at once: exit 0
    assert "--effort" in one_error_line(k3("chat", "-m", tiny, "--effort", "medium", stdin=b"x\n"))
    # a message that cannot fit in -c is refused and the chat goes on
    r = k3("chat", "-m", tiny, "-c", 8, stdin=b"Hello\n")
    assert r.returncode == 0 and b"message not sent" in r.stderr and b"-c/--ctx-size 8" in r.stderr, r.stderr


def test_chat_sigint_stops_the_answer_not_the_program(tiny):
    assert os.path.exists(K3)
    p = subprocess.Popen([K3, "chat", "-m", tiny, "--temp", "0", "--ignore-eos", "-c", "4096", "-t", "1"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(b"Hello\n")
    p.stdin.flush()
    first = p.stdout.read(1)           # the answer is streaming: the handler is installed
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(input=b"", timeout=120)  # then EOF: exit 0
    assert p.returncode == 0, err
    assert first and b"[stopped]" in out, out[-200:]


# ------------------------------------------------------------------------ models/k3-mini (trained)

def mini_file(name):
    p = os.path.join(MINI, name)
    assert os.path.exists(p), f"{p} missing: models/k3-mini ships it (tools/train/train_k3_mini.sh)"
    with open(p) as f:
        return json.load(f)


def test_mini_greedy_equals_trainer():
    g = mini_file("greedy.json")
    assert len(g["prompts"]) == 3
    for p in g["prompts"]:
        r = k3("run", "-m", MINI, "-p", p["prompt"], "-n", len(p["greedy_ids"]), "--temp", 0, "--ignore-eos", "--json",
               mxfp4=None)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["prompt_ids"] == p["prompt_ids"], p["prompt"]
        assert out["ids"] == p["greedy_ids"], p["prompt"]


def test_mini_perplexity_equals_trainer():
    ev = mini_file("eval.json")
    r = k3("perplexity", "-m", MINI, "-f", os.path.join(MINI, "heldout.txt"), "-c", ev["n_ctx"],
           "--stride", ev["stride"], "--json", timeout=1200, mxfp4=None)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["n_tokens"] == ev["heldout_tokens"] and out["n_scored"] == ev["scored_tokens"]
    assert out["ppl"] == pytest.approx(ev["heldout_ppl"], rel=1e-3)
    # far below both unigram baselines: the trainer's (train-split counts) and k3's (in-sample)
    assert out["ppl"] < 0.5 * ev["unigram_ppl"], (out["ppl"], ev["unigram_ppl"])
    assert out["ppl"] < 0.5 * out["unigram_ppl"], (out["ppl"], out["unigram_ppl"])


def test_mini_default_sample_reads_as_english():
    mini_file("greedy.json")
    r = k3("run", "-m", MINI, "-p", "And God said", "-n", 64, "--seed", 1, mxfp4=None)
    assert r.returncode == 0, r.stderr
    text = r.stdout.decode()
    words = re.findall(r"[A-Za-z]+", text)
    assert len(words) >= 20, text
    common = {"the", "and", "of", "unto", "that", "he", "to", "in", "shall", "his", "i", "lord", "god", "a", "is"}
    assert sum(w.lower() in common for w in words) >= 0.2 * len(words), text
    assert sum(c.isalpha() or c.isspace() or c in ",.;:'?!()-" for c in text) >= 0.95 * len(text), text
