"""A new user's first hour: the shipped K3 config (models/k3-config) plans without the weights,
the README's example commands run, the stats line names the threads and OpenMP's wait policy,
`k3 chat` folds its thinking and says when a turn ends without an answer, quick loads and
prefills print no progress lines, and `--warm` pages the mapped weights in (reported by `k3 run
--json`) without a bar when it is quick, on a terminal or not."""
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.environ.get("K3_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
K3 = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "tools", "cli", "k3"))
MINI = os.path.join(ROOT, "models", "k3-mini")
K3CFG = os.path.join(ROOT, "models", "k3-config")
PY = os.path.join(ROOT, ".venv", "bin", "python")


def k3(*args, stdin=None, env=None, timeout=300, threads="1"):
    """Runs k3 (one thread unless -t is given or threads=None: the suite shares 2 cores)."""
    assert os.path.exists(K3), f"k3 binary not found at {K3} (build it, or set K3_BIN)"
    args = [str(a) for a in args]
    if threads and args[0] in ("run", "chat", "bench") and "-t" not in args:
        args += ["-t", threads]
    e = dict(os.environ)
    for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "K3_OMP_WAIT_DEFAULT"):
        e.pop(k, None)
    e.update(env or {})
    return subprocess.run([K3, *args], input=stdin, capture_output=True, timeout=timeout, env=e)


def one_error_line(r):
    assert r.returncode == 1, (r.returncode, r.stdout[-300:], r.stderr)
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("k3: error: "), lines
    return lines[0]


# ------------------------------------------------------------- the real K3 without its weights

def test_shipped_k3_config_files():
    for f in ("config.json", "tiktoken.model", "tokenizer_config.json", "README.md"):
        assert os.path.exists(os.path.join(K3CFG, f)), f
    assert not [f for f in os.listdir(K3CFG) if f.endswith(".safetensors")]
    assert os.path.getsize(os.path.join(K3CFG, "tiktoken.model")) == 2795286


def test_info_on_k3_config_says_weights_absent_and_prints_the_geometry():
    r = k3("info", K3CFG)
    assert r.returncode == 0, r.stderr
    out, err = r.stdout.decode(), r.stderr.decode()
    assert "no weights" in err and "computed from config.json" in err, err
    assert "93 layers, hidden 7168, vocab 163840" in out, out
    assert "69 layers: 96 heads x 128" in out and "24 layers: 96 heads" in out, out
    assert "total 2,779,484,476,000" in out and "active per token 104,189,612,640" in out, out
    assert "ABSENT" in out and "497052 text tensors" in out, out
    j = json.loads(k3("info", K3CFG, "--json").stdout)
    assert j["weights_present"] is False and j["num_hidden_layers"] == 93
    assert j["bytes_by_dtype"]["U8"] == 1446456066048


def test_plan_on_k3_config():
    r = k3("info", K3CFG, "--plan", "--ram-gb", "64,512", "--ram-gbs", "30", "--drive-gbs", "7", "--json")
    assert r.returncode == 0, r.stderr
    plans = json.loads(r.stdout)["plans"]
    assert [p["fits"] for p in plans] == [False, True]      # a bf16 trunk (113.5 GB) does not fit 64 GB
    assert "--trunk-type q4" in plans[0]["refusal"], plans[0]["refusal"]
    assert plans[1]["experts_total"] == 1446456066048
    assert plans[1]["tokens_per_s_serial"] > 0
    r = k3("info", K3CFG, "--plan", "--ram-gb", "64", "--trunk-type", "q4")
    assert r.returncode == 0 and "fits" in r.stdout.decode(), r.stdout


def test_check_and_run_without_weights_are_clear_errors():
    assert "holds no weights" in one_error_line(k3("info", K3CFG, "--check"))
    line = one_error_line(k3("run", "-m", K3CFG, "-p", "x"))
    assert "model.safetensors" in line, line


def test_tokenize_with_the_real_tokenizer():
    r = k3("tokenize", "-m", K3CFG, "Hello, K3")
    assert r.returncode == 0, r.stderr
    assert re.search(r"\d", r.stdout.decode())


# ------------------------------------------------------------------------- README examples

def test_readme_tiny_checkpoint_example(tmp_path):
    d = str(tmp_path / "tiny")
    subprocess.run([PY, os.path.join(ROOT, "tools", "reference", "gen_tiny.py"), "--out", d, "--variant", "k3",
                    "--seed", "1", "--byte-tokenizer"], check=True, timeout=120)
    r = k3("info", d, "-c", "4096")
    assert r.returncode == 0, r.stderr
    assert "9 layers" in r.stdout.decode()


def test_readme_chat_state_save_then_load(tmp_path):
    st = str(tmp_path / "chat.bin")
    r = k3("chat", "-m", MINI, "--no-think", "-n", 32, "--state-save", st, stdin=b"Who made the heaven?\n")
    assert r.returncode == 0, r.stderr
    r = k3("chat", "-m", MINI, "--no-think", "-n", 32, "--state-load", st, stdin=b"And the earth?\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()


# ------------------------------------------------------------------- threads and wait policy

def test_stats_line_names_threads_and_wait_policy():
    def stats(*extra, env=None):
        r = k3("run", "-m", MINI, "-p", "And God said", "-n", 4, "--temp", 0, *extra, env=env)
        assert r.returncode == 0, r.stderr
        return [ln for ln in r.stderr.decode().splitlines() if ln.startswith("load:")][0]
    assert stats().endswith("| threads: 1 (passive wait)"), stats()
    assert stats("-t", 2).endswith("| threads: 2 (passive wait)")
    assert stats(env={"OMP_WAIT_POLICY": "active"}).endswith("| threads: 1 (OMP_WAIT_POLICY=active)")
    assert stats(env={"GOMP_SPINCOUNT": "1000"}).endswith("| threads: 1 (GOMP_SPINCOUNT=1000)")
    r = k3("run", "-m", MINI, "-p", "And God said", "-n", 2, "--temp", 0, "--json")
    s = json.loads(r.stdout)["stats"]
    assert s["threads"] == 1 and s["omp_wait"] == "passive wait"


def test_default_threads_are_all_cores():
    r = k3("run", "-m", MINI, "-p", "And God said", "-n", 2, "--temp", 0, threads=None)
    assert r.returncode == 0, r.stderr
    assert f"| threads: {len(os.sched_getaffinity(0))} (passive wait)" in r.stderr.decode(), r.stderr


# ---------------------------------------------------------------------------- chat thinking

FOLD_RE = re.compile(r"^\[thinking: (\d+) tokens, folded; /think shows all of it\]$", re.M)
ENDED_RE = re.compile(r"^\[the answer ended inside its thinking \((\d+) tokens, at the -n limit\): no answer; "
                      r"raise -n, or use --effort low or --no-think\]$", re.M)


def thinking_blocks(out):
    return re.findall(r"<think>\n(.*?)\n?</think>\n", out, re.S)


def test_chat_folds_thinking_and_think_shows_all_of_it():
    r = k3("chat", "-m", MINI, "-n", 200, "--temp", 0, "--ignore-eos", stdin=b"Who made the heaven?\n/think\n")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "\x1b[" not in out                       # piped: no ANSI codes
    folded = FOLD_RE.search(out)
    assert folded, out
    ended = ENDED_RE.search(out)
    assert ended and int(ended.group(1)) == int(folded.group(1)) == 200, out
    blocks = thinking_blocks(out)
    assert len(blocks) == 2, out                    # the folded view, then /think's full text
    shown, full = blocks
    assert shown.count("\n") <= 3 and len(shown.encode()) <= 360
    assert len(full) > len(shown) and shown.strip()[:20] in full


def test_chat_show_thinking_streams_it_all():
    r = k3("chat", "-m", MINI, "-n", 100, "--temp", 0, "--ignore-eos", "--show-thinking", stdin=b"Who made the heaven?\n/think\n")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert not FOLD_RE.search(out) and ENDED_RE.search(out), out
    blocks = thinking_blocks(out)
    assert len(blocks) == 2 and blocks[0] == blocks[1], out


def test_chat_hide_thinking_prints_its_count():
    r = k3("chat", "-m", MINI, "-n", 50, "--temp", 0, "--ignore-eos", "--hide-thinking", stdin=b"Who made the heaven?\n")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "<think>" not in out
    assert "[thinking hidden: 50 tokens; /think shows it]" in out, out
    assert ENDED_RE.search(out), out


def test_chat_answer_cut_at_n_says_so():
    # the README's piped example, greedy and without stop tokens so the -n limit is reached
    r = k3("chat", "-m", MINI, "--no-think", "-n", 12, "--temp", 0, "--ignore-eos", stdin=b"Who made the heaven?\n")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert out.rstrip().endswith("[answer cut at the -n limit of 12 tokens]"), out
    assert "<think>" not in out and "\x1b[" not in out


def test_chat_think_without_thinking_says_so():
    r = k3("chat", "-m", MINI, "--no-think", "-n", 4, "--temp", 0, stdin=b"/think\n")
    assert r.returncode == 0 and "[no thinking in the last answer]" in r.stdout.decode(), r.stdout
    assert "--thinking" in one_error_line(k3("chat", "-m", MINI, "--thinking", "some", stdin=b"x\n"))


# --------------------------------------------------------------------------------- progress

def test_quick_load_and_prefill_print_no_progress():
    prompt = "And God said"  # K3-mini loads and prefills this in milliseconds: no progress line
    r = k3("run", "-m", MINI, "-p", prompt, "-n", 2, "--temp", 0)
    assert r.returncode == 0, r.stderr
    err = r.stderr.decode()
    assert "prefill" not in err and "shard headers" not in err, err
    assert r.stdout.decode().startswith(prompt)     # the prompt is still echoed first


def test_warm_pages_the_weights_in_and_prints_no_bar_when_quick():
    def page_in(*extra):
        r = k3("run", "-m", MINI, "-p", "And God said", "-n", 2, "--temp", 0, "--warm", "--json", *extra)
        assert r.returncode == 0, r.stderr
        assert "page-in" not in r.stderr.decode(), r.stderr  # quick, and stderr is not a terminal
        return json.loads(r.stdout)["stats"]["page_in"]
    p = page_in()
    weights = sum(os.path.getsize(os.path.join(MINI, f)) for f in os.listdir(MINI) if f.endswith(".safetensors"))
    page = os.sysconf("SC_PAGE_SIZE")
    assert p["bytes"] % page == 0 and 0 < p["bytes"] <= weights + page * 64, (p, weights)
    assert p["resident_bytes"] + p["read_bytes"] == p["bytes"] and p["ms"] >= 0, p
    assert page_in("--stream-experts")["bytes"] < p["bytes"]  # streamed experts are read on demand, not paged in
    r = k3("run", "-m", MINI, "-p", "And God said", "-n", 2, "--temp", 0, "--json")
    assert "page_in" not in json.loads(r.stdout)["stats"]  # without --warm: no page-in
    r = k3("chat", "-m", MINI, "--no-think", "-n", 4, "--temp", 0, "--warm", stdin=b"Who made the heaven?\n")
    assert r.returncode == 0 and "page-in" not in r.stderr.decode(), r.stderr
    for cmd in ("run", "chat", "serve"):
        assert "--warm" in k3(cmd, "--help").stdout.decode(), cmd


def test_warm_on_a_terminal_shows_no_bar_when_quick():
    import pty
    master, slave = pty.openpty()  # stderr a terminal: the bar would show if the page-in took over a second
    try:
        p = subprocess.run([K3, "run", "-m", MINI, "-p", "And God said", "-n", "2", "--temp", "0", "--warm", "-t", "1"],
                           stdout=subprocess.PIPE, stderr=slave, timeout=300)
        os.close(slave)
        err = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            err += chunk
    finally:
        os.close(master)
    assert p.returncode == 0, err
    assert b"page-in" not in err and b"load:" in err, err
