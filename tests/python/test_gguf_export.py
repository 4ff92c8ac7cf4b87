"""tools/gguf_export: K3 checkpoint → GGUF (llama.cpp kimi-k3 layout), read back with gguf.GGUFReader.

Checked on a tiny random checkpoint (tools/reference/gen_tiny.py, byte-level tiktoken.model) and on
K3-mini: every tensor present with the expected ggml type and shape; BF16 matrices bit-equal to the
source; 1-D vectors, fused AttnRes scores, ssm_a and the kv_b split equal to the source values
(exact); MXFP4 experts byte-equal to the source packed codes and E8M0 scales after undoing ggml's
block order, and dequantized by the gguf package equal to the reference MXFP4 decode; the vocabulary
decodes to tiktoken's bytes and k3's special texts; the merges reproduce rank-BPE; malformed inputs
fail with one error line naming the file / tensor / key.
"""
from __future__ import annotations

import base64
import json
import os
import random
import shutil
import subprocess
import sys

import gguf
import numpy as np
import pytest
import tiktoken

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))

import gen_tiny  # noqa: E402
import k3_checkpoint as kc  # noqa: E402
from tools.gguf_export import mxfp4_blocks, vocab  # noqa: E402
from tools.gguf_export.export import export  # noqa: E402

MINI = os.path.join(ROOT, "models", "k3-mini")
K3 = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "tools", "cli", "k3"))
PY = sys.executable
T = gguf.GGMLQuantizationType


def write_byte_tokenizer(d):
    with open(os.path.join(d, "tiktoken.model"), "w") as f:
        for i in range(256):
            f.write(f"{base64.b64encode(bytes([i])).decode()} {i}\n")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tiny_gguf"))
    gen_tiny.generate(d, "k3", seed=3)
    write_byte_tokenizer(d)
    return d


def exported(tmp_path_factory, model_dir, name):
    out = str(tmp_path_factory.mktemp(name) / f"{name}.gguf")
    r = subprocess.run([PY, "-m", "tools.gguf_export", "--model", model_dir, "--out", out],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory, tiny):
    return exported(tmp_path_factory, tiny, "tiny")


@pytest.fixture(scope="module")
def mini_gguf(tmp_path_factory):
    return exported(tmp_path_factory, MINI, "mini")


# --- the expected layout, stated independently of tools/gguf_export/export.py ----------------------

def expected(cfg_dir):
    """{gguf name: (ggml type, numpy shape, reference values)} for every tensor of the checkpoint."""
    cfg, src = kc.read_checkpoint(cfg_dir)  # BF16 decoded to float32 (exact)
    raw = {}
    for fn in sorted(set(json.load(open(os.path.join(cfg_dir, "model.safetensors.index.json")))["weight_map"].values())):
        hdr, start = kc.read_safetensors_header(os.path.join(cfg_dir, fn))
        mm = np.memmap(os.path.join(cfg_dir, fn), dtype=np.uint8, mode="r")
        for n, info in hdr.items():
            if info["dtype"] == "BF16" and n.startswith("language_model."):
                a, b = info["data_offsets"]
                raw[n[len("language_model."):]] = mm[start + a:start + b].view(np.uint16).reshape(info["shape"])
    tc = kc.text_config(cfg)
    H, dn, dv, kvr = tc["num_attention_heads"], tc["qk_nope_head_dim"], tc["v_head_dim"], tc["kv_lora_rank"]
    exp = {}

    def mat(g, n):  # BF16 matrix: bit copy
        exp[g] = (T.BF16, raw[n].shape, raw[n])

    def vec(g, n):  # 1-D → F32, exact
        exp[g] = (T.F32, src[n].shape, np.asarray(src[n], np.float32))

    def score(g, a, b):
        exp[g] = (T.F32, (tc["hidden_size"],), src[a].reshape(-1) * src[b].reshape(-1))

    mat("token_embd.weight", "model.embed_tokens.weight")
    mat("output.weight", "lm_head.weight")
    vec("output_norm.weight", "model.norm.weight")
    score("output_res_score.weight", "model.output_attn_res_norm.weight", "model.output_attn_res_proj.weight")
    for i in range(tc["num_hidden_layers"]):
        P, B = f"model.layers.{i}.", f"blk.{i}."
        A = P + "self_attn."
        vec(B + "attn_norm.weight", P + "input_layernorm.weight")
        vec(B + "ffn_norm.weight", P + "post_attention_layernorm.weight")
        score(B + "attn_res_score.weight", P + "self_attention_res_norm.weight", P + "self_attention_res_proj.weight")
        score(B + "ffn_res_score.weight", P + "mlp_res_norm.weight", P + "mlp_res_proj.weight")
        if kc.layer_is_kda(tc, i):
            for n, g in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("f_a_proj", "ssm_f_a"),
                         ("f_b_proj", "ssm_f_b"), ("b_proj", "ssm_beta"), ("g_proj", "ssm_g"), ("o_proj", "attn_output")):
                mat(B + g + ".weight", A + n + ".weight")
            for n in "qkv":
                c = src[A + f"{n}_conv1d.weight"]
                exp[B + f"ssm_conv1d_{n}.weight"] = (T.F32, (1, c.shape[0], 1, c.shape[2]), c.reshape(1, c.shape[0], 1, c.shape[2]))
            h = tc["linear_attn_config"]["num_heads"]
            exp[B + "ssm_a"] = (T.F32, (h,), (-np.exp(src[A + "A_log"][:h].astype(np.float64))).astype(np.float32))
            vec(B + "ssm_dt.bias", A + "dt_bias")
            vec(B + "ssm_norm.weight", A + "o_norm.weight")
        else:
            for n, g in (("q_a_proj", "attn_q_a"), ("q_b_proj", "attn_q_b"), ("kv_a_proj_with_mqa", "attn_kv_a_mqa"),
                         ("g_proj", "attn_gate"), ("o_proj", "attn_output")):
                mat(B + g + ".weight", A + n + ".weight")
            vec(B + "attn_q_a_norm.weight", A + "q_a_layernorm.weight")
            vec(B + "attn_kv_a_norm.weight", A + "kv_a_layernorm.weight")
            kvb = raw[A + "kv_b_proj.weight"].reshape(H, dn + dv, kvr)
            exp[B + "attn_k_b.weight"] = (T.BF16, (H, kvr, dn), kvb[:, :dn, :].transpose(0, 2, 1))
            exp[B + "attn_v_b.weight"] = (T.BF16, (H, dv, kvr), kvb[:, dn:, :])
        if kc.layer_is_moe(tc, i):
            M = P + "block_sparse_moe."
            for n, g in (("gate", "ffn_gate_inp"), ("routed_expert_down_proj", "ffn_routed_down"),
                         ("routed_expert_up_proj", "ffn_routed_up"), ("shared_experts.gate_proj", "ffn_gate_shexp"),
                         ("shared_experts.up_proj", "ffn_up_shexp"), ("shared_experts.down_proj", "ffn_down_shexp")):
                mat(B + g + ".weight", M + n + ".weight")
            vec(B + "exp_probs_b.bias", M + "gate.e_score_correction_bias")
            vec(B + "ffn_routed_norm.weight", M + "routed_expert_norm.weight")
            for w, g in (("w1", "gate"), ("w3", "up"), ("w2", "down")):
                E = tc["num_experts"]
                packed = np.stack([src[M + f"experts.{e}.{w}.weight_packed"] for e in range(E)])
                scale = np.stack([src[M + f"experts.{e}.{w}.weight_scale"] for e in range(E)])
                exp[B + f"ffn_{g}_exps.weight"] = (T.MXFP4, (E, packed.shape[1], packed.shape[2] * 2), (packed, scale))
        else:
            for g in ("gate", "up", "down"):
                mat(B + f"ffn_{g}.weight", P + f"mlp.{g}_proj.weight")
    return cfg, exp


def check_tensors(model_dir, path):
    cfg, exp = expected(model_dir)
    r = gguf.GGUFReader(path)
    got = {t.name: t for t in r.tensors}
    assert sorted(got) == sorted(exp), (set(got) ^ set(exp))
    n_mx = 0
    for name, (qt, shape, ref) in exp.items():
        t = got[name]
        assert t.tensor_type == qt, name
        assert [int(x) for x in t.shape] == list(reversed(shape)), (name, list(t.shape), shape)
        if qt == T.BF16:
            assert np.array_equal(np.asarray(t.data).view(np.uint16).reshape(shape), ref), name
        elif qt == T.F32:
            assert np.array_equal(np.asarray(t.data).reshape(shape), np.asarray(ref, np.float32)), name
        else:
            packed, scale = ref
            E, rows, cols = shape
            blocks = np.asarray(t.data).reshape(E, rows, cols // 32 * 17)
            for e in range(E):
                p, s = mxfp4_blocks.unblock(blocks[e])
                assert np.array_equal(p, packed[e]) and np.array_equal(s, scale[e]), (name, e)
            # the gguf package's own MXFP4 decode of expert 0 equals the reference decode of the source
            deq = gguf.quants.dequantize(blocks[0], T.MXFP4)
            assert np.array_equal(deq.astype(np.float64), kc.mxfp4_dequantize(packed[0], scale[0])), name
            n_mx += 1
    assert n_mx == 3 * sum(kc.layer_is_moe(kc.text_config(cfg), i) for i in range(kc.text_config(cfg)["num_hidden_layers"]))
    return r


def field(r, key):
    return r.fields[key].contents()


def check_metadata(r, model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    tc = kc.text_config(cfg)
    lac = tc["linear_attn_config"]
    a = "kimi-k3"
    assert field(r, "general.architecture") == a
    want = {
        f"{a}.block_count": tc["num_hidden_layers"], f"{a}.embedding_length": tc["hidden_size"],
        f"{a}.feed_forward_length": tc["intermediate_size"], f"{a}.vocab_size": tc["vocab_size"],
        f"{a}.attention.head_count": tc["num_attention_heads"],
        f"{a}.attention.q_lora_rank": tc["q_lora_rank"], f"{a}.attention.kv_lora_rank": tc["kv_lora_rank"],
        f"{a}.attention.key_length": tc["kv_lora_rank"] + tc["qk_rope_head_dim"],
        f"{a}.attention.value_length": tc["kv_lora_rank"],
        f"{a}.attention.key_length_mla": tc["qk_nope_head_dim"] + tc["qk_rope_head_dim"],
        f"{a}.attention.value_length_mla": tc["v_head_dim"], f"{a}.rope.dimension_count": tc["qk_rope_head_dim"],
        f"{a}.ssm.conv_kernel": lac["short_conv_kernel_size"], f"{a}.kda.head_dim": lac["head_dim"],
        f"{a}.expert_count": tc["num_experts"], f"{a}.expert_used_count": tc["num_experts_per_token"],
        f"{a}.expert_feed_forward_length": tc["moe_intermediate_size"],
        f"{a}.expert_shared_count": tc["num_shared_experts"],
        f"{a}.leading_dense_block_count": tc["first_k_dense_replace"],
        f"{a}.expert_gating_func": 2, f"{a}.expert_weights_norm": tc["moe_renormalize"],
        f"{a}.expert_latent_length": tc["routed_expert_hidden_size"],
        f"{a}.attn_res.block_size": tc["attn_res_block_size"],
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "kimi-k2",
        "tokenizer.ggml.bos_token_id": cfg["bos_token_id"], "tokenizer.ggml.eos_token_id": cfg["eos_token_id"],
    }
    for k, v in want.items():
        assert field(r, k) == v, (k, field(r, k), v)
    for k, v in ((f"{a}.activation.situ_beta", tc["activation_situ_beta"]),
                 (f"{a}.activation.situ_linear_beta", tc["activation_situ_linear_beta"]),
                 (f"{a}.kda.gate_lower_bound", lac["gate_lower_bound"]),
                 (f"{a}.expert_weights_scale", tc["routed_scaling_factor"]),
                 (f"{a}.attention.layer_norm_rms_epsilon", tc["rms_norm_eps"])):
        assert field(r, k) == pytest.approx(v, rel=1e-7), k
    assert field(r, f"{a}.attention.head_count_kv") == [
        1 if (i + 1) in lac["full_attn_layers"] else 0 for i in range(tc["num_hidden_layers"])]


def check_vocab(r, model_dir):
    """Tokens decode to tiktoken's bytes (ranks) and k3's special texts; merges give rank-BPE."""
    with open(os.path.join(model_dir, "tiktoken.model"), "rb") as f:
        ranks = {base64.b64decode(t): int(r) for t, r in (ln.split() for ln in f if ln.strip())}
    n = len(ranks)
    enc = tiktoken.Encoding("k3", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={})
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    u2b = {u: b for b, u in vocab.bytes_to_unicode().items()}
    for i in range(n):
        assert bytes(u2b[c] for c in tokens[i]) == enc.decode_single_token_bytes(i), i
        assert types[i] == 1
    assert all(t == 3 for t in types[n:n + 256])
    # the special slots spell what `k3 detokenize` prints for them
    assert os.path.exists(K3), f"k3 binary not found at {K3} (build it, or set K3_BIN)"
    for ids in (range(n, n + 16), range(n + 240, n + 256)):
        out = subprocess.run([K3, "detokenize", "-m", model_dir, ",".join(map(str, ids))],
                             capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.decode().rstrip("\n") == "".join(tokens[i] for i in ids)
    # merges-BPE (lowest merge index first, llama.cpp's rule) == tiktoken's rank-BPE
    merge_list = field(r, "tokenizer.ggml.merges") if "tokenizer.ggml.merges" in r.fields else []  # none when all ranks are bytes
    rank_of_merge = {tuple(m.split(" ")): k for k, m in enumerate(merge_list)}
    id_of = {t: i for i, t in enumerate(tokens[:n])}

    def merges_bpe(b: bytes):
        parts = [vocab.spell(bytes([x])) for x in b]
        while True:
            cand = [(rank_of_merge.get((parts[j], parts[j + 1]), 1 << 60), j) for j in range(len(parts) - 1)]
            if not cand or min(cand)[0] == 1 << 60:
                return [id_of[p] for p in parts]
            _, j = min(cand)
            parts[j:j + 2] = [parts[j] + parts[j + 1]]

    rng = random.Random(5)
    samples = [enc.decode_single_token_bytes(i) for i in range(n)]
    text = open(os.path.join(MINI, "heldout.txt"), "rb").read()[:20000]
    samples += [w for w in text.split(b" ") if w][:2000]
    samples += [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12))) for _ in range(500)]
    for s in samples:
        assert merges_bpe(s) == enc._encode_single_piece(s), s


def test_tiny_export_tensors_and_metadata(tiny, tiny_gguf):
    r = check_tensors(tiny, tiny_gguf)
    check_metadata(r, tiny)
    check_vocab(r, tiny)


def test_k3_mini_export(mini_gguf):
    r = check_tensors(MINI, mini_gguf)
    check_metadata(r, MINI)
    check_vocab(r, MINI)
    assert len(field(r, "tokenizer.ggml.merges")) == 7936 - 256


def test_mxfp4_reblock_is_ggml_order_and_invertible():
    rng = np.random.default_rng(0)
    packed = rng.integers(0, 256, (3, 48), dtype=np.uint8)   # 3 rows x 96 elements
    scale = rng.integers(0, 255, (3, 3), dtype=np.uint8)
    blocks = mxfp4_blocks.reblock(packed, scale)
    assert blocks.shape == (3, 3 * 17)
    # element k of block b (row 1): source nibble at byte 16b + k//2, low if k even; ggml: byte 1+(k%16)
    for b in range(3):
        for k in range(32):
            src = (packed[1, 16 * b + k // 2] >> (4 * (k % 2))) & 0xF
            dst = (blocks[1, 17 * b + 1 + k % 16] >> (4 * (k // 16))) & 0xF
            assert src == dst
        assert blocks[1, 17 * b] == scale[1, b]
    p, s = mxfp4_blocks.unblock(blocks)
    assert np.array_equal(p, packed) and np.array_equal(s, scale)
    with pytest.raises(ValueError, match="do not describe"):
        mxfp4_blocks.reblock(packed[:, :40], scale)


# --- malformed input -------------------------------------------------------------------------------

def run_cli(model_dir, out, *extra):
    return subprocess.run([PY, "-m", "tools.gguf_export", "--model", str(model_dir), "--out", str(out), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def one_error(r):
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gguf_export: error: "), lines
    return lines[0]


def rewrite(tmp_path, tiny, edit):
    """A copy of the tiny checkpoint with edit(tensors dict) applied."""
    cfg, _ = kc.read_checkpoint(tiny)
    tensors = gen_tiny.random_tensors(kc.text_config(cfg), np.random.default_rng(1))
    edit(tensors)
    d = tmp_path / "bad"
    kc.write_checkpoint(str(d), cfg, tensors, n_shards=2)
    write_byte_tokenizer(str(d))
    return d


def test_missing_tensor(tmp_path, tiny):
    name = "model.layers.2.self_attn.f_b_proj.weight"
    d = rewrite(tmp_path, tiny, lambda t: t.pop(name))
    msg = one_error(run_cli(d, tmp_path / "o.gguf"))
    assert f"missing tensor language_model.{name}" in msg
    assert not os.path.exists(tmp_path / "o.gguf") and not os.path.exists(tmp_path / "o.gguf.tmp")


def test_missing_expert(tmp_path, tiny):
    name = "model.layers.3.block_sparse_moe.experts.5.w2.weight_scale"
    d = rewrite(tmp_path, tiny, lambda t: t.pop(name))
    assert f"missing tensor language_model.{name}" in one_error(run_cli(d, tmp_path / "o.gguf"))


def test_wrong_dtype(tmp_path, tiny):
    name = "model.layers.0.mlp.up_proj.weight"

    def edit(t):
        dt, a = t[name]
        t[name] = ("F32", kc.bf16_bits_to_f32(a))
    d = rewrite(tmp_path, tiny, edit)
    msg = one_error(run_cli(d, tmp_path / "o.gguf"))
    assert f"tensor language_model.{name}: expected BF16" in msg and "found F32" in msg


def test_wrong_shape(tmp_path, tiny):
    name = "model.layers.1.block_sparse_moe.experts.0.w1.weight_packed"

    def edit(t):
        dt, a = t[name]
        t[name] = (dt, np.ascontiguousarray(a[:, :-1]))
    d = rewrite(tmp_path, tiny, edit)
    msg = one_error(run_cli(d, tmp_path / "o.gguf"))
    assert f"tensor language_model.{name}: expected U8" in msg


def test_missing_tiktoken_model(tmp_path, tiny):
    d = tmp_path / "m"
    shutil.copytree(tiny, d)
    os.remove(d / "tiktoken.model")
    msg = one_error(run_cli(d, tmp_path / "o.gguf"))
    assert f"{d / 'tiktoken.model'}: not found" in msg
    r = run_cli(d, tmp_path / "o.gguf", "--no-tokenizer")   # the bench model's case: ids only
    assert r.returncode == 0, r.stderr
    rd = gguf.GGUFReader(str(tmp_path / "o.gguf"))
    assert field(rd, "tokenizer.ggml.model") == "none" and "tokenizer.ggml.tokens" not in rd.fields


def test_malformed_tiktoken_and_config(tmp_path, tiny):
    d = tmp_path / "m"
    shutil.copytree(tiny, d)
    with open(d / "tiktoken.model", "a") as f:
        f.write("not-base64!! x\n")
    assert f"{d / 'tiktoken.model'}:257: expected" in one_error(run_cli(d, tmp_path / "o.gguf"))
    write_byte_tokenizer(str(d))
    cfg = json.load(open(d / "config.json"))
    del cfg["text_config"]["kv_lora_rank"]
    json.dump(cfg, open(d / "config.json", "w"))
    assert "config.json: missing key text_config.kv_lora_rank" in one_error(run_cli(d, tmp_path / "o.gguf"))
    os.remove(d / "config.json")
    assert f"{d / 'config.json'}: not found" in one_error(run_cli(d, tmp_path / "o.gguf"))


# --- index entries outside the folder, user errors without tracebacks (finding F17) ------------------

def copy_with_index_entry(tmp_path, tiny, value, name="cp"):
    d = tmp_path / name
    shutil.copytree(tiny, d)
    p = d / "model.safetensors.index.json"
    j = json.loads(p.read_text())
    key = sorted(j["weight_map"])[0]
    j["weight_map"][key] = value
    p.write_text(json.dumps(j))
    return d, key


@pytest.mark.parametrize("entry", ["../x.safetensors", "/etc/passwd", "sub/model.safetensors", "..", "",
                                   "..\\x.safetensors"])
def test_index_entry_outside_the_folder_is_refused(tmp_path, tiny, entry):
    """F17: an index naming a file outside the checkpoint folder is refused before anything is
    opened, with one line naming the index entry (no traceback)."""
    d, key = copy_with_index_entry(tmp_path, tiny, entry)
    msg = one_error(run_cli(d, tmp_path / "o.gguf"))
    assert f'weight_map["{key}"] = "{entry}" is not a plain file name inside the checkpoint folder' in msg
    assert os.listdir(tmp_path) == ["cp"]  # no output, no temporary file


def test_malformed_inputs_are_one_line_errors(tmp_path, tiny):
    """F17: user errors the exporter does not name specifically still end in one
    'gguf_export: error:' line and exit 1, never a Python traceback."""
    d, key = copy_with_index_entry(tmp_path, tiny, 5, "int")
    assert f'weight_map["{key}"] must be a file name string, found int' in one_error(run_cli(d, tmp_path / "o.gguf"))
    d = tmp_path / "toplist"
    shutil.copytree(tiny, d)
    (d / "model.safetensors.index.json").write_text("[1, 2]")
    assert "malformed index (expected a JSON object)" in one_error(run_cli(d, tmp_path / "o.gguf"))
    d = tmp_path / "cfgtype"
    shutil.copytree(tiny, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["text_config"]["num_hidden_layers"] = "x"
    (d / "config.json").write_text(json.dumps(cfg))
    assert f"{d}: malformed checkpoint" in one_error(run_cli(d, tmp_path / "o.gguf"))
    # a shard symlinked to a file that is not safetensors: followed (as the C++ loader does, for
    # Hugging Face cache layouts), refused by its header, one line
    d = tmp_path / "link"
    shutil.copytree(tiny, d)
    shard = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))[0]
    os.remove(d / shard)
    os.symlink("/etc/passwd", d / shard)
    assert shard in one_error(run_cli(d, tmp_path / "o.gguf"))
    # --out in a directory that does not exist
    assert "does not exist" in one_error(run_cli(tiny, tmp_path / "nowhere" / "o.gguf"))


def test_planted_symlink_at_the_old_temp_name_is_not_followed(tmp_path, tiny, tiny_gguf):
    """The output is written through a fresh temporary file: a symlink planted at OUT.tmp (a
    fixed temporary name) or at OUT itself never redirects the write."""
    outside = tmp_path / "outside"
    outside.write_text("keep")
    out = tmp_path / "o.gguf"
    os.symlink(outside, str(out) + ".tmp")
    r = run_cli(tiny, out)
    assert r.returncode == 0, r.stderr
    assert outside.read_text() == "keep"
    assert open(out, "rb").read() == open(tiny_gguf, "rb").read()
    os.remove(out)
    os.symlink(outside, out)
    assert run_cli(tiny, out).returncode == 0
    assert outside.read_text() == "keep" and not os.path.islink(out)
    assert sorted(os.listdir(tmp_path)) == ["o.gguf", "o.gguf.tmp", "outside"]
