"""Flags and errors of the `k3` command line: llama.cpp flags that k3 does not have are refused by
name with what k3 offers instead (never read as a short flag with a value attached: "-ngl" is not
"-n gl"), "did you mean" for typos of flags and subcommands, the right flag named in every error,
a GGUF file given for a checkpoint folder, and `-m DIR` wherever a model directory is expected.

Every refusal here happens before a model loads: exit 1, one line on stderr starting 'k3: error:'.
The binary is $K3_BIN, else build/tools/cli/k3.
"""
import os
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K3 = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "tools", "cli", "k3"))
MINI = os.path.join(ROOT, "models", "k3-mini")
NANO = os.path.join(ROOT, "models", "k3-nano")


def k3(*args, timeout=120):
    assert os.path.exists(K3), f"k3 binary not found at {K3} (build it, or set K3_BIN)"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([K3, *[str(a) for a in args]], capture_output=True, timeout=timeout, env=env)


def one_line_error(r, *needles, absent=()):
    """Exit 1, exactly one 'k3: error:' line on stderr, containing every needle and no `absent`."""
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 1, (r.returncode, err)
    lines = [l for l in err.splitlines() if l.startswith("k3: error:")]
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    for n in absent:
        assert n not in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    """A file named .gguf and one with the GGUF magic and no extension."""
    d = tmp_path_factory.mktemp("gguf")
    named = d / "k3-mini-bf16.gguf"
    named.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(16))
    magic = d / "model.bin"
    magic.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(16))
    return str(named), str(magic)


# ---- llama.cpp flags k3 does not have: refused by name, with the alternative ------------------

@pytest.mark.parametrize("args, needles", [
    (("run", "-m", MINI, "-ngl", "99", "-p", "x"), ("-ngl", "llama.cpp flag", "no GPU backend")),
    (("serve", "-m", MINI, "--n-gpu-layers", "99"), ("--n-gpu-layers", "no GPU backend")),
    (("chat", "-m", MINI, "--gpu-layers=99"), ("--gpu-layers", "no GPU backend")),
    (("run", "-m", MINI, "-cb", "-p", "x"), ("-cb", "continuous batching is k3 serve's, always on")),
    (("run", "-m", MINI, "-cnv"), ("-cnv", "k3 chat -m DIR")),
    (("run", "-m", MINI, "-hf", "moonshotai/Kimi-K3"), ("-hf", "does not download", "-m DIR")),
    (("serve", "--hf-repo", "moonshotai/Kimi-K3"), ("--hf-repo", "does not download")),
    (("serve", "-m", MINI, "--n-cpu-moe", "3"), ("--n-cpu-moe", "--expert-cache-gb")),
    (("run", "-m", MINI, "-ncmoe", "3"), ("-ncmoe", "--expert-cache-gb")),
    (("serve", "-m", MINI, "--numa", "distribute"), ("--numa", "one k3 process per NUMA node", "numactl")),
    (("serve", "-m", MINI, "-fa", "on"), ("-fa", "drop the flag")),
    (("run", "-m", MINI, "-sm", "row"), ("-sm", "no GPU backend")),
    (("run", "-m", MINI, "--mlock"), ("--mlock", "does not lock")),
    (("run", "-m", MINI, "--no-mmap"), ("--no-mmap", "--trunk-memory copy", "--stream-experts")),
    (("serve", "-m", MINI, "-ctk", "q8_0"), ("-ctk", "-c/--ctx-size")),
    (("serve", "-m", MINI, "--jinja"), ("--jinja", "K3 chat format")),
    (("run", "-m", MINI, "-ub", "512"), ("-ub", "-b/--batch-size")),
    (("run", "-m", MINI, "-s", "42"), ("-s", "--seed")),
    (("run", "-ngl", "99"), ("-ngl", "no GPU backend")),  # before -m: still the flag, not -m is required
])
def test_llama_flags_are_refused_with_advice(args, needles):
    line = one_line_error(k3(*args, timeout=30), *needles)
    assert "found 'gl'" not in line and "was not expected" not in line, line


def test_trunk_memory_copy_same_text_and_bad_value_named():
    """--trunk-memory copy (the trunk in 2 MiB pages) decodes the same greedy text as the mapped
    trunk; a value other than map|copy is refused naming the flag."""
    args = ("run", "-m", MINI, "-p", "And God said", "--temp", "0", "-n", "12")
    mapped, copied = k3(*args), k3(*args, "--trunk-memory", "copy")
    assert mapped.returncode == 0 and copied.returncode == 0, (mapped.stderr, copied.stderr)
    assert copied.stdout == mapped.stdout and mapped.stdout.strip(), (mapped.stdout, copied.stdout)
    one_line_error(k3(*args, "--trunk-memory", "mlock", timeout=30), "--trunk-memory", "mlock")


def test_hf_is_not_help():
    """-hf was read as -h (help, exit 0) with 'f' attached."""
    r = k3("run", "-hf", "x/y", timeout=30)
    assert b"Usage" not in r.stdout
    one_line_error(r, "-hf")


def test_cont_batching_is_a_note_in_serve(tmp_path):
    """k3 serve batches continuously already: -cb is accepted with a note (the server does not start
    here: the -m path does not exist, and that error names -m/--model)."""
    r = k3("serve", "-m", tmp_path / "none", "-cb", "--port", "0", timeout=30)
    err = r.stderr.decode()
    assert "k3: note: -cb: k3 serve always batches continuously" in err, err
    one_line_error(r, "-m/--model", "does not exist")


def test_aliases_still_work():
    """-np (serve/info --parallel), -md (--draft-model), -n64 (a number attached to a short flag)."""
    r = k3("info", MINI, "--plan", "--ram-gb", "64", "-np", "3", "--json", timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    r = k3("info", MINI, "--plan", "--ram-gb", "64", "-np=3", "--json", timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    r = k3("run", "-m", MINI, "-p", "And God said", "--temp", "0", "-n2", "-t", "1", "--no-stats", timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    r = k3("run", "-m", MINI, "-md", NANO, "-p", "And God said", "--temp", "0", "-n", "2", "-t", "1",
           "--no-stats", timeout=120)
    assert r.returncode == 0, r.stderr.decode()


def test_values_that_start_with_a_dash_are_values():
    """A prompt '-ngl' is the value of -p, and -n -1 a number."""
    r = k3("run", "-m", MINI, "-p", "-ngl", "--temp", "0", "-n", "-1", "-c", "8", "-t", "1", "--no-stats",
           timeout=120)
    assert r.returncode == 0, r.stderr.decode()


# ---- did you mean ------------------------------------------------------------------------------

@pytest.mark.parametrize("args, needles", [
    (("run", "-m", MINI, "--tempp", "0"), ("k3 run has no flag --tempp", "did you mean --temp?")),
    (("serve", "-m", MINI, "--prot", "8080"), ("--prot", "did you mean --port?")),
    (("run", "-m", MINI, "--ctx", "64"), ("--ctx", "did you mean --ctx-size?")),
    (("run", "-m", MINI, "--temperature", "0"), ("--temperature", "did you mean --temp?")),
    (("chat", "-m", MINI, "--sytem", "hi"), ("--sytem", "did you mean --system?")),
    (("run", "-m", MINI, "-ctx", "64"), ("-ctx", "did you mean --ctx-size?")),
    (("bench", "-m", MINI, "--ctx-size", "64"), ("k3 bench has no flag --ctx-size", "run", "serve", "have it")),
    (("run", "-m", MINI, "-fprompt.txt"), ("-fprompt.txt", "-f prompt.txt")),
])
def test_typos_get_did_you_mean(args, needles):
    line = one_line_error(k3(*args, timeout=30), *needles)
    assert "not expected" not in line, line


@pytest.mark.parametrize("word, suggestion", [("rn", "run"), ("serv", "serve"), ("chta", "chat"),
                                              ("infos", "info")])
def test_unknown_subcommand_did_you_mean(word, suggestion):
    one_line_error(k3(word, "-m", MINI, timeout=30), f"unknown subcommand '{word}'",
                   f"did you mean {suggestion}?", "subcommands: bench, chat")


# ---- model directories: GGUF, the flag named, -m everywhere -----------------------------------

@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("cmd", ["run", "chat", "serve", "bench", "perplexity", "logits", "info"])
def test_gguf_for_model_is_refused(gguf, cmd, which):
    extra = {"run": ["-p", "x"], "perplexity": ["-f", "/dev/null"], "logits": ["--ids", "1"]}.get(cmd, [])
    one_line_error(k3(cmd, "-m", gguf[which], *extra, timeout=30), "-m/--model", gguf[which],
                   "k3 reads the safetensors checkpoint folder; GGUF is export-only", "tools.gguf_export")


def test_gguf_positional_info_is_refused(gguf):
    one_line_error(k3("info", gguf[0], timeout=30), "-m/--model", "GGUF is export-only")


@pytest.mark.parametrize("flag", ["--draft-model", "-md", "--model-draft"])
def test_gguf_for_draft_model_names_draft_model(gguf, flag):
    one_line_error(k3("run", "-m", MINI, flag, gguf[0], "-p", "x", timeout=30), "-md/--draft-model",
                   "GGUF is export-only", absent=("-m/--model",))


@pytest.mark.parametrize("cmd", ["run", "chat", "serve"])
def test_missing_draft_model_names_draft_model(tmp_path, cmd):
    missing = str(tmp_path / "no-such-draft")
    extra = ["-p", "x"] if cmd == "run" else []
    one_line_error(k3(cmd, "-m", MINI, "--draft-model", missing, *extra, timeout=30),
                   "-md/--draft-model", missing, "does not exist", absent=("-m/--model",))


def test_missing_model_names_model(tmp_path):
    one_line_error(k3("run", "-m", tmp_path / "nope", "-p", "x", timeout=30), "-m/--model", "does not exist")


def test_file_inside_checkpoint_names_its_folder():
    one_line_error(k3("run", "-m", os.path.join(MINI, "config.json"), "-p", "x", timeout=30), "-m/--model",
                   "is not a directory", "pass the folder that holds it: " + MINI)


def test_info_takes_m_like_the_positional():
    a = k3("info", MINI, "--json", timeout=60)
    b = k3("info", "-m", MINI, "--json", timeout=60)
    c = k3("info", "--model", MINI, "--json", timeout=60)
    assert a.returncode == 0, a.stderr.decode()
    assert b.returncode == 0, b.stderr.decode()
    assert c.returncode == 0, c.stderr.decode()
    assert a.stdout == b.stdout == c.stdout


def test_range_errors_name_short_and_long_flag():
    one_line_error(k3("run", "-m", MINI, "-c", "0", "-p", "x", timeout=30), "-c/--ctx-size", "found '0'")
    one_line_error(k3("serve", "-m", MINI, "-np", "0", timeout=30), "-np/--parallel")


def test_draft_checkpoint_errors_name_draft_model(tmp_path):
    """A --draft-model folder without a checkpoint: the checkpoint's error, prefixed by the flag."""
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line_error(k3("run", "-m", MINI, "-md", empty, "-p", "x", "-n", "1", "-t", "1", timeout=120),
                   "-md/--draft-model: ", str(empty), "config.json")


@pytest.mark.parametrize("args, needles", [
    (("info", MINI, "-m", MINI), ("-m/--model: given 2 times, expected once",)),
    (("bench", "-m", MINI, "--expert-cache-gb", "-1"), ("--expert-cache-gb", "found -1 ")),
    (("run", "-m", MINI, "--expert-cache-gb", "-1", "-p", "x"), ("--expert-cache-gb", "found -1 ")),
    (("run", "-m", MINI, "--trunk-type", "q9", "-p", "x"), ("--trunk-type: expected one of bf16 q8 q4, found 'q9'",)),
    (("run", "-m", MINI, "--temp", "abc", "-p", "x"), ("--temp: expected a number, found 'abc'",)),
    (("run", "-m", MINI, "-p", "x", "-n"), ("-n/--n-predict: needs a value",)),
    (("perplexity", "-m", MINI), ("-f/--file is required", "see k3 perplexity --help")),
    (("run", "-m", MINI, "foo"), ("k3 run takes no positional argument, found 'foo'",)),
    ((), ("a subcommand is required: bench, chat",)),
])
def test_parse_errors_name_the_flag(args, needles):
    one_line_error(k3(*args, timeout=60), *needles)


@pytest.mark.parametrize("args", [("--help",), ("run", "--help"), ("serve", "-h"), ("info", "--help")])
def test_help_still_exits_0(args):
    r = k3(*args, timeout=30)
    assert r.returncode == 0 and b"Usage" in r.stdout, r.stderr.decode()


def test_missing_gguf_path_and_device_for_model(tmp_path):
    one_line_error(k3("serve", "-m", tmp_path / "k3.gguf", timeout=30), "-m/--model",
                   "does not exist, and names a GGUF file", "GGUF is export-only")
    one_line_error(k3("run", "-m", "/dev/null", "-p", "x", timeout=30), "-m/--model", "'/dev/null' is not a directory")


@pytest.mark.parametrize("cmd", ["run", "chat"])
def test_missing_state_load_names_the_flag(tmp_path, cmd):
    missing = str(tmp_path / "none.k3state")
    one_line_error(k3(cmd, "-m", MINI, "--state-load", missing, timeout=30), "--state-load", missing,
                   "does not exist")


def test_help_wins_over_a_missing_model_dir(tmp_path):
    r = k3("run", "-m", tmp_path / "nope", "--help", timeout=30)
    assert r.returncode == 0 and b"Usage" in r.stdout, r.stderr.decode()
