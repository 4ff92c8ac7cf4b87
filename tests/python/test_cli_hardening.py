"""CLI hardening: bounded inputs, no hangs, no silent NaN, replayable seeds, a chat
that survives a full context, overflow-checked `info`, one range-error message, streamed
`logits --top-k`, UTF-8 and config checks. Each test reproduces the command of the issue.

Against models/k3-mini (in the repository) and copies of it with one value poisoned; every
command runs with a timeout so a hang fails the test instead of the suite.
The binary is $K3_BIN, else build/tools/cli/k3.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K3 = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "tools", "cli", "k3"))
MINI = os.path.join(ROOT, "models", "k3-mini")
TEXT = "And God said, Let there be light: and there was light. And God saw the light, that it was good."


def k3(*args, stdin=None, timeout=60, threads=True):
    assert os.path.exists(K3), f"k3 binary not found at {K3} (build it, or set K3_BIN)"
    args = [str(a) for a in args]
    if threads and args and args[0] in ("run", "chat", "perplexity", "bench") and "-t" not in args:
        args += ["-t", "1"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([K3, *args], input=stdin, capture_output=True, timeout=timeout, env=env)


def one_line_error(r, *needles):
    """Exit 1, exactly one line on stderr starting 'k3: error:', containing every needle."""
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 1, (r.returncode, err)
    lines = [l for l in err.splitlines() if l.startswith("k3: error:")]
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def copy_model(tmp_path, name="m"):
    d = str(tmp_path / name)
    shutil.copytree(MINI, d)
    return d


def tensor_file(d, name):
    return json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"][name]


def poison(d, name, data, index=0):
    """Overwrites element `index` (of len(data) bytes) of tensor `name` in the copy `d`."""
    path = os.path.join(d, tensor_file(d, name))
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        e = json.loads(f.read(n))[name]
        f.seek(8 + n + e["data_offsets"][0] + index * len(data))
        f.write(data)


BF16_NAN = bytes.fromhex("c07f")  # little-endian 0x7fc0


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("hard") / "t.txt"
    p.write_text(TEXT)
    return str(p)


# ---- 1. every input read has a bound ---------------------------------------------------------

@pytest.mark.parametrize("dev", ["/dev/zero", "/dev/urandom"])
def test_endless_devices_are_refused_not_read(dev):
    one_line_error(k3("run", "-m", MINI, "-f", dev, "-n", 1, timeout=20), "-f/--file", dev, "character device")
    one_line_error(k3("perplexity", "-m", MINI, "-f", dev, timeout=20), "-f/--file", "character device")
    one_line_error(k3("logits", "-m", MINI, "--ids-file", dev, timeout=20), "--ids-file", "character device")
    one_line_error(k3("tokenize", "-m", MINI, "-f", dev, timeout=20), "-f/--file", "character device")
    one_line_error(k3("detokenize", "-m", MINI, "-f", dev, timeout=20), "-f/--file", "character device")


def test_pipe_and_file_inputs_are_bounded(tmp_path):
    # a pipe longer than the limit: read up to the bound, then a clear error naming the flag
    r = k3("run", "-m", MINI, "-f", "/dev/stdin", "--max-input-mib", 1, "-n", 1, stdin=b"a" * (3 << 20))
    one_line_error(r, "-f/--file", "larger than the limit of 1048576 bytes (1 MiB)", "raise it with --max-input-mib")
    big = tmp_path / "big.txt"
    big.write_bytes(b"1," * (600 << 10))
    one_line_error(k3("logits", "-m", MINI, "--ids-file", big, "--max-input-mib", 1),
                   "--ids-file", "is 1228800 bytes, larger than the limit of 1048576 bytes")
    one_line_error(k3("perplexity", "-m", MINI, "-f", big, "--max-input-mib", 1), "-f/--file", "larger than the limit")
    # a pipe within the limit works (-f <(cmd))
    r = k3("run", "-m", MINI, "-f", "/dev/stdin", "-n", 2, "--temp", 0, stdin=b"And God said")
    assert r.returncode == 0, r.stderr


# ---- 2. special files in a checkpoint are refused by type, before open() ---------------------

@pytest.mark.parametrize("victim", ["model-00001-of-000003.safetensors", "config.json", "tiktoken.model",
                                    "model.safetensors.index.json", "tokenizer_config.json"])
def test_fifo_in_checkpoint_is_refused_without_blocking(tmp_path, victim):
    d = copy_model(tmp_path)
    os.remove(os.path.join(d, victim))
    os.mkfifo(os.path.join(d, victim))
    one_line_error(k3("info", d, timeout=20), victim, "FIFO (named pipe), expected a regular file")
    one_line_error(k3("run", "-m", d, "-p", "x", "-n", 1, timeout=20), victim, "FIFO")


# ---- 3. non-finite values are errors wherever a result is printed; info --check finds them ---

@pytest.fixture(scope="module")
def nan_head(tmp_path_factory):
    d = copy_model(tmp_path_factory.mktemp("nanhead"))
    poison(d, "language_model.lm_head.weight", BF16_NAN, index=100)  # row 0: the logit of id 0
    return d


def test_nan_in_lm_head_perplexity_logits_bench(nan_head, text_file):
    one_line_error(k3("perplexity", "-m", nan_head, "-f", text_file, "-c", 16),
                   "perplexity: non-finite result at token position 0", "logit of id 0 is nan")
    one_line_error(k3("logits", "-m", nan_head, "--ids", "5,6,7", "--top-k", 3),
                   "logits: the row of logits at position 0 (id 5) is not finite", "logit of id 0")
    one_line_error(k3("logits", "-m", nan_head, "--ids", "5,6,7", "--out", os.path.join(nan_head, "l.npy")),
                   "position 0")
    assert not os.path.exists(os.path.join(nan_head, "l.npy"))  # no half-written result
    one_line_error(k3("bench", "-m", nan_head, "-p", 8, "-n", 2, "-r", 1, "--probe-mb", 8),
                   "bench: the prefill logits", "not finite")


def test_info_check_names_the_tensor(nan_head, tmp_path):
    assert k3("info", MINI, "--check").returncode == 0
    assert k3("info", nan_head).returncode == 0  # without --check the bytes are not read
    one_line_error(k3("info", nan_head, "--check"), "info --check: 1 tensor(s)",
                   "tensor 'language_model.lm_head.weight': 1 NaN, first at element 100 (index [0, 100])")
    # impossible MXFP4 scales: 0xFF (NaN) and huge finite 0xFE (2^127)
    d = copy_model(tmp_path, "scales")
    poison(d, "language_model.model.layers.1.block_sparse_moe.experts.3.w2.weight_scale", b"\xfe", index=7)
    poison(d, "language_model.model.layers.2.block_sparse_moe.experts.0.w1.weight_scale", b"\xff", index=0)
    line = one_line_error(k3("info", d, "--check"), "info --check: 2 tensor(s)")
    assert "experts.3.w2.weight_scale': 1 implausible scale bytes" in line, line
    assert "experts.0.w1.weight_scale': 1 NaN scale bytes (0xFF)" in line, line


def test_nan_in_trunk_names_layer_and_sublayer(tmp_path, text_file):
    d = copy_model(tmp_path)
    poison(d, "language_model.model.layers.1.self_attn.q_proj.weight", BF16_NAN, index=5)
    for args in (("perplexity", "-m", d, "-f", text_file, "-c", 16),
                 ("logits", "-m", d, "--ids", "5,6,7"),
                 ("run", "-m", d, "-p", "And God", "-n", 2)):
        one_line_error(k3(*args), "first non-finite intermediate: blk.1.attn_out")


def test_huge_mxfp4_scales_name_the_moe_layer(tmp_path, text_file):
    # every block scale of layer 1's experts at 0xFE (2^127): finite bytes, overflowing products
    d = copy_model(tmp_path)
    wm = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
    for name in wm:
        if name.startswith("language_model.model.layers.1.block_sparse_moe.experts.") and name.endswith("weight_scale"):
            path = os.path.join(d, wm[name])
            with open(path, "r+b") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                b, e = json.loads(f.read(n))[name]["data_offsets"]
                f.seek(8 + n + b)
                f.write(b"\xfe" * (e - b))
    one_line_error(k3("perplexity", "-m", d, "-f", text_file, "-c", 16), "first non-finite intermediate: blk.1.ffn_out")
    one_line_error(k3("info", d, "--check"), "implausible scale bytes")


# ---- 4. seeds are uint64 end to end: the printed seed replays the run ------------------------

def run_json(*extra):
    r = k3("run", "-m", MINI, "-p", "And God said", "-n", 12, "--json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_printed_random_seed_replays_the_run():
    for _ in range(3):
        r = k3("run", "-m", MINI, "-p", "And God said", "-n", 12)
        assert r.returncode == 0, r.stderr
        seed = re.search(r"seed: (\d+)$", r.stderr.decode().strip()).group(1)
        again = k3("run", "-m", MINI, "-p", "And God said", "-n", 12, "--seed", seed)
        assert again.returncode == 0, again.stderr
        assert again.stdout == r.stdout, seed
    # seeds above INT64_MAX are distinct seeds, not saturated to 9223372036854775807
    top = run_json("--seed", 2**64 - 1)
    assert top["seed"] == 2**64 - 1
    assert run_json("--seed", 2**63 - 1)["ids"] != top["ids"] or run_json("--seed", 2**63)["ids"] != top["ids"]
    assert run_json("--seed", 2**64 - 1)["ids"] == top["ids"]
    one_line_error(k3("run", "-m", MINI, "-p", "x", "--seed", 2**64), "--seed: expected an integer in [0, 18446744073709551615], found '18446744073709551616'")


# ---- 6. k3 chat survives a full context ------------------------------------------------------

def test_chat_keeps_the_conversation_when_the_context_fills():
    turns = [f"Who made the heaven and the earth, tell me number {i}?" for i in range(6)]
    lines = turns[:3] + ["x" * 5000, "y" * 10_000_000] + turns[3:]
    r = k3("chat", "-m", MINI, "--no-think", "-n", 8, "-c", 96, "--system", "You are wise.", "--ignore-eos",
           stdin=("\n".join(lines) + "\n").encode(), timeout=120)
    err = r.stderr.decode()
    assert r.returncode == 0, err
    assert "dropped the 1 oldest turn(s)" in err and "the system prompt kept" in err, err
    assert err.count("message not sent") == 2, err
    assert len([l for l in r.stdout.decode().split("\n") if l.strip()]) >= len(turns), r.stdout


# ---- 7. info: overflow-checked figures, tokenizer files validated ----------------------------

def test_info_state_overflow_is_an_error():
    one_line_error(k3("info", MINI, "-c", "1000000000000000000", "--json"), "-c/--ctx", "exceeds 2^64 bytes")
    j = json.loads(k3("info", MINI, "-c", "1000000", "--json").stdout)
    assert j["state"]["total"] == j["state"]["kda_total"] + 1000000 * j["state"]["mla_per_token"]


@pytest.mark.parametrize("victim,case", [("tiktoken.model", "missing"), ("tiktoken.model", "empty"),
                                         ("tiktoken.model", "broken"), ("tokenizer_config.json", "empty"),
                                         ("tokenizer_config.json", "broken")])
def test_info_validates_tokenizer_files(tmp_path, victim, case):
    # (a missing tokenizer_config.json is allowed: the K3 special table is built in)
    d = copy_model(tmp_path)
    p = os.path.join(d, victim)
    if case == "missing":
        os.remove(p)
    elif case == "empty":
        open(p, "w").close()
    else:
        open(p, "w").write("not base64 at all\n{" if victim == "tiktoken.model" else '{"added_tokens_decoder": [1,')
    one_line_error(k3("info", d), victim)


# ---- 8. one range-error message for numeric flags --------------------------------------------

@pytest.mark.parametrize("cmd,flag,value,expect", [
    ("run", "-c", 0, "-c/--ctx-size: expected an integer >= 1, found '0'"),
    ("run", "-b", 0, "-b/--batch-size: expected an integer >= 1, found '0'"),
    ("run", "-t", -1, "-t/--threads: expected an integer in [0, 1048576], found '-1'"),
    ("run", "--top-k", -5, "--top-k: expected an integer in [0, 2147483647], found '-5'"),
    ("run", "--seed", -1, "--seed: expected an integer in [0, 18446744073709551615], found '-1'"),
    ("run", "-n", -2, "-n/--n-predict: expected an integer >= -1, found '-2'"),
    ("chat", "-c", 0, "-c/--ctx-size: expected an integer >= 1, found '0'"),
    ("perplexity", "-c", 1, "-c/--ctx-size: expected an integer >= 2, found '1'"),
    ("perplexity", "-b", 0, "-b/--batch-size: expected an integer >= 1, found '0'"),
    ("bench", "-t", -3, "-t/--threads: expected an integer in [0, 1048576], found '-3'"),
    ("bench", "-p", 0, "-p/--n-prompt: expected an integer in [1, 2147483647], found '0'"),
    ("info", "-c", -1, "-c/--ctx: expected an integer >= 0, found '-1'"),
    ("logits", "--top-k", 0, "--top-k: expected an integer in [1, 2147483647], found '0'"),
])
def test_range_errors_state_the_real_range(cmd, flag, value, expect):
    args = [cmd, MINI] if cmd == "info" else [cmd, "-m", MINI]
    extra = {"run": ["-p", "x"], "perplexity": ["-f", "x"], "logits": ["--ids", "1"]}.get(cmd, [])
    line = one_line_error(k3(*args, *extra, flag, value, threads=False), expect)
    assert len(line) < 200 and "1797693" not in line, line


# ---- 9. logits --top-k streams rows: O(vocab) memory -----------------------------------------

def test_logits_top_k_streams_rows(tmp_path):
    n = 4000  # all rows at once: 4000 x 8192 x 4 B = 131 MB
    ids = ",".join(str((i * 7919) % 7900) for i in range(n))
    f = tmp_path / "ids.txt"
    f.write_text(ids)
    probe = ("import resource, subprocess, sys\n"
             "r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE)\n"
             "sys.stdout.write(str(r.returncode) + ' ' + str(len(r.stdout.splitlines())) + ' ' +\n"
             "                 str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n")
    out = subprocess.run([sys.executable, "-c", probe, K3, "logits", "-m", MINI, "--ids-file", str(f), "--top-k", "1"],
                         capture_output=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    rc, rows, rss_kib = map(int, out.stdout.split())
    assert rc == 0 and rows == n, out.stderr
    assert rss_kib < 100_000, f"peak RSS {rss_kib} KiB: the rows of logits are held"
    # the streamed rows equal one unchunked pass (the --dump path runs the ids as one piece)
    few = ",".join(ids.split(",")[:600])
    a = k3("logits", "-m", MINI, "--ids", few, "--top-k", 3)
    b = k3("logits", "-m", MINI, "--ids", few, "--top-k", 3, "--dump", tmp_path / "dump")
    assert a.returncode == 0 and b.returncode == 0
    assert a.stdout == b.stdout


# ---- 10. invalid UTF-8, unhonoured config keys, config token ids -----------------------------

def test_invalid_utf8_prompt_warns_or_is_refused(tmp_path):
    p = tmp_path / "bad.txt"
    p.write_bytes(b"And God \xff said")
    r = k3("run", "-m", MINI, "-f", p, "-n", 2, "--temp", 0)
    assert r.returncode == 0, r.stderr
    assert "invalid UTF-8 at byte 8 (0xff)" in r.stderr.decode(), r.stderr
    one_line_error(k3("run", "-m", MINI, "-f", p, "-n", 2, "--strict-utf8"), "invalid UTF-8 at byte 8", "--strict-utf8")
    assert b"invalid UTF-8" not in k3("run", "-m", MINI, "-p", "And God", "-n", 2).stderr
    # chat: a warning, or with --strict-utf8 the message is refused and the chat goes on
    r = k3("chat", "-m", MINI, "--no-think", "-n", 4, "--strict-utf8", stdin=b"bad \xff line\nWho made the heaven?\n")
    assert r.returncode == 0, r.stderr
    assert b"message not sent: k3 chat: message: invalid UTF-8 at byte 4" in r.stderr, r.stderr
    assert r.stdout.strip(), r.stdout


@pytest.mark.parametrize("edit,needle", [
    (lambda c: c["text_config"].__setitem__("topk_method", "greedy"), "topk_method"),
    (lambda c: c["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"].__setitem__("group_size", 16),
     "group_size': 16 is not supported"),
    (lambda c: c["text_config"]["quantization_config"].__setitem__("format", "nvfp4-pack-quantized"), "format"),
    (lambda c: c.__setitem__("bos_token_id", 9000), "bos_token_id': token id 9000 outside the vocabulary"),
    (lambda c: c.__setitem__("eos_token_id", -1), "eos_token_id': token id -1 outside the vocabulary"),
    (lambda c: c["text_config"].__setitem__("max_position_embeddings", 0), "max_position_embeddings': expected a positive integer"),
])
def test_config_keys_and_token_ids_are_checked(tmp_path, edit, needle):
    d = copy_model(tmp_path)
    p = os.path.join(d, "config.json")
    c = json.load(open(p))
    edit(c)
    json.dump(c, open(p, "w"))
    one_line_error(k3("info", d), needle)
    one_line_error(k3("run", "-m", d, "-p", "x", "-n", 1), needle)


def test_info_reads_headers_without_mapping_shards(tmp_path):
    """`info` on huge (sparse) shards works under an address-space limit smaller than the shards:
    headers are read with pread, nothing is mapped (the real K3's 96 shards are 1.56 TB)."""
    import resource
    d = copy_model(tmp_path)
    shard = "model-vision.safetensors"
    numel = 16 << 30  # F32 [16 Gi]: a 64 GiB data region, never written (sparse)
    header = json.dumps({"vision_tower.big.weight": {"dtype": "F32", "shape": [numel],
                                                     "data_offsets": [0, numel * 4]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(os.path.join(d, shard), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + numel * 4)
    idx_path = os.path.join(d, "model.safetensors.index.json")
    idx = json.load(open(idx_path))
    idx["weight_map"]["vision_tower.big.weight"] = shard
    json.dump(idx, open(idx_path, "w"))

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

    r = subprocess.run([K3, "info", d, "--json"], capture_output=True, timeout=60, preexec_fn=limit,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["bytes"]["vision"] == numel * 4 and j["shards"] == 4


def test_logits_is_exact_by_default(tmp_path):
    # `k3 logits` stays on the exact path unless K3_MXFP4 names the int8 shortcut
    ids = "296,387,386,44,1487,733,470,1098"
    outs = {}
    for name, mx in (("default", None), ("exact", "exact"), ("int8", "int8")):
        env = dict(os.environ, OMP_NUM_THREADS="1", K3_KERNELS="fast")  # other modules may set K3_KERNELS=ref
        env.pop("K3_MXFP4", None)
        if mx:
            env["K3_MXFP4"] = mx
        out = tmp_path / f"{name}.npy"
        r = subprocess.run([K3, "logits", "-m", MINI, "--ids", ids, "--out", str(out)], capture_output=True,
                           timeout=60, env=env)
        assert r.returncode == 0, r.stderr.decode()
        outs[name] = out.read_bytes()
    assert outs["default"] == outs["exact"]
    assert outs["default"] != outs["int8"]
