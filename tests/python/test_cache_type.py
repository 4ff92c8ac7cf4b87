"""`--cache-type f32|bf16|fp8` (the MLA latent cache rows) on the command line: the bytes per token
that `k3 info` counts for each type, a bad value refused naming the flag on every command that takes
it, the prefix cache and --state-save refusing a non-f32 cache, and a short generation with each type.
The binary is $K3_BIN, else build/tools/cli/k3.
"""
import json
import os
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K3 = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "tools", "cli", "k3"))
MINI = os.path.join(ROOT, "models", "k3-mini")


def k3(*args, timeout=120):
    assert os.path.exists(K3), f"k3 binary not found at {K3} (build it, or set K3_BIN)"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([K3, *[str(a) for a in args]], capture_output=True, timeout=timeout, env=env)


def one_line_error(r, *needles):
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 1, (r.returncode, err)
    lines = [l for l in err.splitlines() if l.startswith("k3: error:")]
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_info_counts_the_cache_type_bytes_per_token():
    # K3-mini: 3 MLA layers, kv_lora_rank 64 + rope 16 -> f32 320 B, bf16 160 B, fp8 64 + 4 + 32 = 100 B
    want = {"f32": 3 * 320, "bf16": 3 * 160, "fp8": 3 * 100}
    for t, per_token in want.items():
        r = k3("info", MINI, "-c", "1048576", "--cache-type", t, "--json", timeout=60)
        assert r.returncode == 0, r.stderr.decode()
        j = json.loads(r.stdout)
        assert j["state"]["mla_per_token"] == per_token
        assert j["state"]["mla_cache_type"] == t
        assert j["state"]["total"] == j["state"]["kda_total"] + 1048576 * per_token


@pytest.mark.parametrize("cmd", [["run", "-m", MINI, "-p", "x"], ["chat", "-m", MINI], ["serve", "-m", MINI],
                                 ["bench", "-m", MINI], ["perplexity", "-m", MINI, "-f", "x"],
                                 ["logits", "-m", MINI, "--ids", "1"], ["info", MINI]])
def test_a_bad_cache_type_is_refused_naming_the_flag(cmd):
    one_line_error(k3(*cmd, "--cache-type", "fp16", timeout=60), "--cache-type", "expected f32, bf16 or fp8")


def test_prefix_cache_and_state_save_refuse_a_non_f32_cache(tmp_path):
    one_line_error(k3("run", "-m", MINI, "-p", "In the beginning", "-n", "2", "--cache-type", "bf16",
                      "--cache-ram", "64", timeout=60), "--cache-type bf16", "--no-cache")
    r = k3("run", "-m", MINI, "-p", "In the beginning", "-n", "2", "--temp", "0", "--cache-type", "bf16",
           "--state-save", tmp_path / "s.bin", timeout=60)
    one_line_error(r, "--cache-type f32")
    assert r.stdout == b""  # refused before the prompt is prefilled
    assert not (tmp_path / "s.bin").exists()
    (tmp_path / "any.bin").write_bytes(b"x")  # the flag's file must exist; the type is refused first
    for cmd in (["run", "-m", MINI, "--state-load", tmp_path / "any.bin"],
                ["chat", "-m", MINI, "--no-cache", "--state-save", tmp_path / "c.bin"],
                ["chat", "-m", MINI, "--no-cache", "--state-load", tmp_path / "any.bin"]):
        one_line_error(k3(*cmd, "--cache-type", "fp8", timeout=60), "--cache-type fp8", "--cache-type f32")


def test_each_cache_type_generates():
    outs = {}
    for t in ["f32", "bf16", "fp8"]:
        r = k3("run", "-m", MINI, "-p", "In the beginning God created", "-n", "8", "--temp", "0", "--cache-type", t,
               timeout=60)
        assert r.returncode == 0, r.stderr.decode()
        outs[t] = r.stdout.decode()
    assert outs["f32"].startswith("In the beginning God created")
    assert len(outs["bf16"]) > len("In the beginning God created")
