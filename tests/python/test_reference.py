"""Tests of the fp64 numpy reference (tools/reference): codecs, math pieces, generator, dumps.

Runs in a few seconds on one core. Spec: /work/shared/spec/k3-architecture.md, algorithms.md.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
REF = os.path.join(ROOT, "tools", "reference")
sys.path.insert(0, REF)

import compare_dumps as cd  # noqa: E402
import gen_tiny  # noqa: E402
import k3_checkpoint as kc  # noqa: E402
import k3_ref  # noqa: E402

IDS = [3, 17, 250, 4, 4, 99, 500, 1, 77, 300, 12, 45]


@pytest.fixture(scope="module")
def k3_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tiny_k3"))
    gen_tiny.generate(d, "k3", seed=7)
    return d


@pytest.fixture(scope="module")
def k3_model(k3_dir):
    return k3_ref.Model(k3_dir)


# ------------------------------------------------------------------------------------------ MXFP4

def _block(byte, scale):
    return np.full((1, 16), byte, np.uint8), np.array([[scale]], np.uint8)


def test_mxfp4_unit_values():
    w = kc.mxfp4_dequantize(*_block(0x72, 128))
    assert w.shape == (1, 32)
    assert w[0, 0] == 2.0 and w[0, 1] == 12.0          # low nibble 2 → 1.0·2, high 7 → 6·2
    w = kc.mxfp4_dequantize(*_block(0xF9, 127))
    assert w[0, 0] == -0.5 and w[0, 1] == -6.0
    with pytest.raises(ValueError, match="0xFF"):
        kc.mxfp4_dequantize(*_block(0x11, 0xFF))


def test_mxfp4_round_trip_and_rne():
    rng = np.random.default_rng(0)
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])
    # Representable values with a 6 in every group (so the scale is exactly 2^(floor(log2 6)−2) = 1·2^k)
    vals = rng.choice(np.concatenate([grid, -grid]), size=(3, 64))
    vals[:, 0] = 6.0
    vals[:, 32] = -6.0
    for k in (-3, 0, 5):
        w = vals * 2.0 ** k
        p, s = kc.mxfp4_quantize(w)
        assert p.shape == (3, 32) and s.shape == (3, 2)
        assert np.all(s == 127 + k)
        np.testing.assert_array_equal(kc.mxfp4_dequantize(p, s), w)
    # RNE midpoints (scale 1: amax 6 → floor(log2 6) − 2 = 0)
    x = np.zeros((1, 32))
    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.75, -5.0, 7.9, 6.0]
    want = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -1.0, -4.0, 6.0, 6.0]
    x[0, :len(mids)] = mids
    p, s = kc.mxfp4_quantize(x)
    assert s[0, 0] == 127
    np.testing.assert_array_equal(kc.mxfp4_dequantize(p, s)[0, :len(want)], want)
    # packing: even column in the low nibble
    x = np.zeros((1, 32))
    x[0, 0], x[0, 1] = 1.0, 6.0
    p, _ = kc.mxfp4_quantize(x)
    assert p[0, 0] == 0x72 and s.dtype == np.uint8


def test_bf16_rne():
    f = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -2.5, np.inf], np.float32)
    b = kc.f32_to_bf16_bits(f)
    np.testing.assert_array_equal(kc.bf16_bits_to_f32(b), [1.0, 1.0, 1 + 2 ** -6, -2.5, np.inf])
    assert b[0] == 0x3F80


# --------------------------------------------------------------------------------------- math

def test_situ_values():
    g = np.array([1.0, -1.0, 10.0, 0.0])
    u = np.array([1.0, 2.0, 100.0, 5.0])
    np.testing.assert_allclose(k3_ref.situ(g, u, 4.0, 25.0),
                               [0.715818, -0.525829, 98.590782, 0.0], atol=5e-7)
    # silu and β2-absent fallbacks (§1.2 defaults)
    np.testing.assert_allclose(k3_ref.situ_glu(g, u, {"hidden_act": "silu"}), g / (1 + np.exp(-g)) * u)
    np.testing.assert_allclose(k3_ref.situ_glu(g, u, {"hidden_act": "situ", "activation_situ_beta": 4.0}),
                               4 * np.tanh(g / 4) / (1 + np.exp(-g)) * u)


def test_kda_gate_values():
    z = np.zeros((1, 1, 1))
    g = k3_ref.kda_gate(z, np.zeros(1), np.zeros((1, 1)), -5.0)
    assert abs(g[0, 0, 0] + 2.5) < 1e-15
    assert abs(np.exp(g[0, 0, 0]) - 0.082085) < 1e-6
    # Kimi-Linear gate: −exp(0)·softplus(0) = −ln 2; saturation of the K3 gate toward −5 and 0
    g = k3_ref.kda_gate(z, np.zeros(1), np.zeros((1, 1)), None)
    assert abs(g[0, 0, 0] + np.log(2)) < 1e-15
    zz = np.array([[[-100.0, 100.0]]])
    g = k3_ref.kda_gate(zz, np.array([1.0]), np.zeros((1, 2)), -5.0)
    np.testing.assert_allclose(g[0, 0], [-0.0, -5.0], atol=1e-12)


def test_routing_rules():
    E = 16
    s = np.full(E, 0.01)
    bias = np.full(E, -2.0)
    bias[[3, 9, 12, 14]] = -1.5
    ids, w = k3_ref.route(s, bias, 4, 1.0)
    assert list(ids) == [3, 9, 12, 14]                    # selection by the biased score
    np.testing.assert_allclose(w, 0.25)
    # every biased score negative (≈0.01 − 2): still the k largest are taken, weights from s
    s = 0.01 + 1e-4 * np.arange(E)[::-1]                    # expert 0 highest
    ids, w = k3_ref.route(s, np.full(E, -2.0), 4, 1.0)
    assert list(ids) == [0, 1, 2, 3]
    np.testing.assert_allclose(w, s[:4] / s[:4].sum())
    # NaN never selected; ties → lower id
    s = np.linspace(0.1, 0.9, E)
    s[15] = np.nan
    ids, w = k3_ref.route(s, np.zeros(E), 3, 2.5)
    assert list(ids) == [12, 13, 14]
    assert abs(w.sum() - 2.5) < 1e-12
    s = np.full(E, 0.5)
    ids, _ = k3_ref.route(s, np.zeros(E), 4, 1.0)
    assert list(ids) == [0, 1, 2, 3]
    # unbiased scores are the weights: bias changes the selection only
    s = np.array([0.9, 0.1, 0.5, 0.2])
    ids, w = k3_ref.route(s, np.array([-1.0, 1.0, 0.0, 0.0]), 2, 1.0)
    assert list(ids) == [1, 2]
    np.testing.assert_allclose(w, [0.1 / 0.6, 0.5 / 0.6])
    with pytest.raises(ValueError):
        k3_ref.route(np.full(4, np.nan), np.zeros(4), 2)


def test_kda_recurrence_hand_case():
    q = np.array([[1.0, 0.0], [1.0, 1.0]])
    k = np.array([[1.0, 0.0], [0.0, 1.0]])
    v = np.array([[2.0, 3.0], [1.0, -1.0]])
    g = np.array([[0.0, 0.0], [np.log(0.5), 0.0]])
    beta = np.array([0.5, 1.0])
    o, S = k3_ref.kda_recurrence(q, k, v, g, beta)
    # t0: S = 0.5·k0 v0ᵀ = [[1,1.5],[0,0]], o0 = [1,1.5]; t1: decay row0 by 0.5, e = v1, S += k1 e1ᵀ
    np.testing.assert_allclose(o, [[1.0, 1.5], [1.5, -0.25]], atol=1e-15)
    np.testing.assert_allclose(S, [[0.5, 0.75], [1.0, -1.0]], atol=1e-15)
    # delta rule with β = 1 overwrites the value stored under the same key
    o, S = k3_ref.kda_recurrence(np.array([[1.0, 0.0]] * 2), np.array([[1.0, 0.0]] * 2),
                                 np.array([[2.0, 3.0], [1.0, 1.0]]), np.zeros((2, 2)), np.array([1.0, 1.0]))
    np.testing.assert_allclose(o[1], [1.0, 1.0], atol=1e-15)


def _kda_chunked(q, k, v, g, beta, C):
    """Chunkwise WY form (algorithms.md §1.3 A-E) — an independent formulation of §1.2."""
    T, K = q.shape
    S = np.zeros((K, v.shape[1]))
    out = np.zeros((T, v.shape[1]))
    for c0 in range(0, T, C):
        sl = slice(c0, min(T, c0 + C))
        qc, kc_, vc, gc, bc = q[sl], k[sl], v[sl], g[sl], beta[sl]
        n = qc.shape[0]
        G = np.cumsum(gc, axis=0)
        L = np.zeros((n, n))
        Aqk = np.zeros((n, n))
        for i in range(n):
            for j in range(n):
                dec = np.exp(G[i] - G[j])
                if j < i:
                    L[i, j] = bc[i] * np.sum(kc_[i] * kc_[j] * dec)
                if j <= i:
                    Aqk[i, j] = np.sum(qc[i] * kc_[j] * dec)
        Tm = np.linalg.inv(np.eye(n) + L) @ np.diag(bc)
        Wm = Tm @ (kc_ * np.exp(G))
        U = Tm @ vc
        Vnew = U - Wm @ S
        out[sl] = (qc * np.exp(G)) @ S + Aqk @ Vnew
        S = np.exp(G[-1])[:, None] * S + (kc_ * np.exp(G[-1] - G)).T @ Vnew
    return out, S


def test_kda_recurrence_matches_chunked_form():
    rng = np.random.default_rng(1)
    T, K, V = 11, 6, 5
    q = rng.standard_normal((T, K))
    q /= np.linalg.norm(q, axis=1, keepdims=True) * np.sqrt(K)
    k = rng.standard_normal((T, K))
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    v = rng.standard_normal((T, V))
    g = k3_ref.kda_gate(rng.standard_normal((T, 1, K)), np.array([0.3]), np.zeros((1, K)), -5.0)[:, 0]
    beta = k3_ref.sigmoid(rng.standard_normal(T))
    o, S = k3_ref.kda_recurrence(q, k, v, g, beta)
    o2, S2 = _kda_chunked(q, k, v, g, beta, C=4)
    np.testing.assert_allclose(o2, o, rtol=0, atol=1e-12)
    np.testing.assert_allclose(S2, S, rtol=0, atol=1e-12)


def test_mla_matches_absorbed_form(k3_model):
    """Non-absorbed MLA (reference) vs the absorbed decode form of §3.3 on a real tiny layer."""
    tc = k3_model.tc
    il = next(i for i in range(tc["num_hidden_layers"]) if not kc.layer_is_kda(tc, i))
    W = k3_model.sub(f"model.layers.{il}.self_attn.")
    rng = np.random.default_rng(2)
    T, D = 6, tc["hidden_size"]
    x = rng.standard_normal((T, D))
    ref = k3_ref.mla_layer(x, W, tc)
    H, dn, dr, dv, r = (tc["num_attention_heads"], tc["qk_nope_head_dim"], tc["qk_rope_head_dim"],
                        tc["v_head_dim"], tc["kv_lora_rank"])
    q = k3_ref.rmsnorm(x @ W["q_a_proj.weight"].T, W["q_a_layernorm.weight"], 1e-6) @ W["q_b_proj.weight"].T
    q = q.reshape(T, H, dn + dr)
    ckv = x @ W["kv_a_proj_with_mqa.weight"].T
    c = k3_ref.rmsnorm(ckv[:, :r], W["kv_a_layernorm.weight"], 1e-6)
    kb = W["kv_b_proj.weight"].reshape(H, dn + dv, r)
    o = np.zeros((T, H, dv))
    for h in range(H):
        qa = q[:, h, :dn] @ kb[h, :dn]                       # [T, r]
        sc = (qa @ c.T + q[:, h, dn:] @ ckv[:, r:].T) / np.sqrt(dn + dr)
        sc = np.where(np.tril(np.ones((T, T))) > 0, sc, -np.inf)
        p = np.exp(sc - sc.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        o[:, h] = (p @ c) @ kb[h, dn:].T
    o = o.reshape(T, H * dv) * k3_ref.sigmoid(x @ W["g_proj.weight"].T)
    np.testing.assert_allclose(o @ W["o_proj.weight"].T, ref, rtol=0, atol=1e-12)


def test_attn_res_mix_basics():
    rng = np.random.default_rng(3)
    v = [rng.standard_normal((2, 8)) for _ in range(3)]
    out, p = k3_ref.attn_res_mix(v[:1], rng.standard_normal(8), 1e-5)
    np.testing.assert_allclose(out, v[0])
    np.testing.assert_allclose(p, 1.0)
    out, p = k3_ref.attn_res_mix(v, np.zeros(8), 1e-5)        # zero query → uniform mix of RAW values
    np.testing.assert_allclose(out, (v[0] + v[1] + v[2]) / 3, atol=1e-15)
    # scale invariance of the scores (keys are RMS-normalized) but not of the mixed values
    s = rng.standard_normal(8)
    _, p1 = k3_ref.attn_res_mix(v, s, 0.0)
    _, p2 = k3_ref.attn_res_mix([v[0] * 7, v[1], v[2]], s, 0.0)
    np.testing.assert_allclose(p1, p2, atol=1e-12)


# ----------------------------------------------------------------------------- generator layout

def test_generator_layout(k3_dir):
    files = sorted(os.listdir(k3_dir))
    shards = [f for f in files if f.endswith(".safetensors")]
    assert len(shards) >= 2
    assert set(files) == set(shards) | {"config.json", "model.safetensors.index.json"}
    assert shards == [f"model-{i + 1:05d}-of-{len(shards):06d}.safetensors" for i in range(len(shards))]
    cfg = json.load(open(os.path.join(k3_dir, "config.json")))
    assert cfg["architectures"] == ["KimiK3ForConditionalGeneration"] and cfg["model_type"] == "kimi_k3"
    tc = cfg["text_config"]
    assert tc["model_type"] == "kimi_linear" and tc["quantization_config"]["format"] == "mxfp4-pack-quantized"
    L = tc["num_hidden_layers"]
    assert L // tc["attn_res_block_size"] >= 2
    full = tc["linear_attn_config"]["full_attn_layers"]
    assert full[-2:] == [L - 1, L] and 1 not in full               # ends with two MLA layers
    idx = json.load(open(os.path.join(k3_dir, "model.safetensors.index.json")))
    wm = idx["weight_map"]
    assert set(wm.values()) == set(shards)
    total = 0
    seen = {}
    for fn in shards:
        hdr, start = kc.read_safetensors_header(os.path.join(k3_dir, fn))
        names = list(hdr.keys())
        assert names == sorted(names), f"{fn} not lexicographic"
        end = 0
        for n in names:                                            # back to back, in order
            a, b = hdr[n]["data_offsets"]
            assert a == end
            end = b
            total += b - a
            assert wm[n] == fn
            seen[n] = hdr[n]
        assert os.path.getsize(os.path.join(k3_dir, fn)) == start + end
    assert set(seen) == set(wm) and idx["metadata"]["total_size"] == total
    # every inventory tensor present with the right dtype/shape; layers not split across shards
    for name, dt, shape in kc.tensor_inventory(tc, a_log_pad_to=gen_tiny.A_LOG_PAD):
        h = seen["language_model." + name]
        assert h["dtype"] == dt and tuple(h["shape"]) == shape, name
    for i in range(L):
        assert len({f for n, f in wm.items() if f".layers.{i}." in n}) == 1
    assert any(n.startswith("vision_tower.") for n in wm) and any(n.startswith("mm_projector.") for n in wm)
    _, t = kc.read_checkpoint(k3_dir)
    a_log = t["model.layers.0.self_attn.A_log"]
    H = tc["linear_attn_config"]["num_heads"]
    assert a_log.shape == (gen_tiny.A_LOG_PAD,) and np.all(a_log[H:] == 0) and np.all(a_log[:H] != 0)
    assert t["model.layers.1.block_sparse_moe.experts.3.w2.weight_packed"].dtype == np.uint8


def test_generator_deterministic(tmp_path, k3_dir):
    gen_tiny.generate(str(tmp_path), "k3", seed=7)
    for f in os.listdir(k3_dir):
        assert open(os.path.join(k3_dir, f), "rb").read() == open(tmp_path / f, "rb").read(), f


# ------------------------------------------------------------------------------- full forward

def test_forward_k3_dump_and_cli(k3_dir, k3_model, tmp_path):
    d = str(tmp_path / "dump")
    logits = k3_ref.forward(k3_model, IDS, dump=d)
    tc = k3_model.tc
    assert logits.shape == (len(IDS), tc["vocab_size"]) and np.all(np.isfinite(logits))
    names = json.load(open(os.path.join(d, "manifest.json")))["tensors"]
    assert names[0] == "tok.embed" and names[-3:] == ["out.mix_w", "out.final", "logits"]
    assert "blk.0.attn_mix_w" not in names and "blk.1.attn_mix_w" in names
    assert "blk.0.router_topk_ids" not in names
    k = tc["num_experts_per_token"]
    ids = np.load(os.path.join(d, "blk.1.router_topk_ids.npy"))
    assert ids.dtype == np.int32 and ids.shape == (len(IDS), k) and np.all(np.diff(ids, axis=1) > 0)
    w = np.load(os.path.join(d, "blk.1.router_topk_w.npy"))
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-6)
    assert np.load(os.path.join(d, "out.mix_w.npy")).shape == (len(IDS), 1 + tc["num_hidden_layers"] // 4 + 1)
    mw = np.load(os.path.join(d, "blk.5.ffn_mix_w.npy"))
    assert mw.std() > 0.02                                          # the mix is not uniform
    # causality: logits of a prefix equal the first rows of the full sequence
    np.testing.assert_allclose(k3_ref.forward(k3_model, IDS[:5]), logits[:5], rtol=0, atol=1e-12)
    # CLI writes float32 logits and greedy ids
    out = str(tmp_path / "l.npy")
    r = subprocess.run([sys.executable, os.path.join(REF, "k3_ref.py"), "--model", k3_dir,
                        "--ids", ",".join(map(str, IDS[:4])), "--out", out, "--greedy", "2"],
                       capture_output=True, text=True, check=True)
    cli = np.load(out)
    assert cli.dtype == np.float32
    np.testing.assert_allclose(cli, logits[:4], rtol=1e-6, atol=1e-6)
    assert int(r.stdout.split()[0]) == int(np.argmax(logits[3]))


@pytest.mark.parametrize("variant", ["scaled", "kimi_linear_gate", "many_experts"])
def test_forward_variants(tmp_path, variant):
    d = str(tmp_path / variant)
    cfg = gen_tiny.generate(d, variant, seed=3)
    tc = cfg["text_config"]
    dump = k3_ref.Dumper()
    logits = k3_ref.forward(d, IDS, dump=dump)
    assert np.all(np.isfinite(logits))
    got = dict(dump.items)
    w = got["blk.2.router_topk_w"]
    np.testing.assert_allclose(w.sum(axis=1), tc["routed_scaling_factor"], rtol=1e-6)
    ids = got["blk.2.router_topk_ids"]
    assert ids.shape[1] == tc["num_experts_per_token"]
    if variant == "many_experts":
        assert tc["num_experts"] > 512
        assert any((v >= 512).any() for n, v in got.items() if n.endswith("topk_ids"))
    if variant == "kimi_linear_gate":
        assert "gate_lower_bound" not in tc["linear_attn_config"]


# --------------------------------------------------------------------- bad input, compare_dumps

def test_bad_checkpoint_errors(tmp_path):
    cfg = gen_tiny.variant_config("k3")
    tc = cfg["text_config"]
    tensors = gen_tiny.random_tensors(tc, np.random.default_rng(0))
    bad = dict(tensors)
    del bad["model.layers.2.self_attn.q_proj.weight"]
    kc.write_checkpoint(str(tmp_path / "a"), cfg, bad)
    with pytest.raises(ValueError, match="layers.2.self_attn.q_proj.weight"):
        k3_ref.Model(str(tmp_path / "a"))
    bad = dict(tensors)
    name = "model.layers.1.block_sparse_moe.experts.0.w1.weight_scale"
    for e in range(tc["num_experts"]):                         # every expert poisoned → always hit
        n = name.replace("experts.0.", f"experts.{e}.")
        sc = bad[n][1].copy()
        sc[0, 0] = 0xFF
        bad[n] = ("U8", sc)
    kc.write_checkpoint(str(tmp_path / "b"), cfg, bad)
    with pytest.raises(ValueError, match=r"layers\.1\.block_sparse_moe\.experts\.\d+\.w1.*0xFF"):
        k3_ref.forward(str(tmp_path / "b"), IDS[:3])
    with pytest.raises(ValueError, match="out of range"):
        k3_ref.forward(str(tmp_path / "b"), [tc["vocab_size"]])


def _write_perturbed(d, name, scale):
    cfg = gen_tiny.variant_config("k3")
    rng = np.random.default_rng([7, gen_tiny.VARIANTS.index("k3")])
    tensors = gen_tiny.random_tensors(cfg["text_config"], rng)
    if name:
        dt, a = tensors[name]
        f = kc.bf16_bits_to_f32(a).copy()
        f.flat[5] = f.flat[5] * scale + 0.5
        tensors[name] = (dt, kc.f32_to_bf16_bits(f))
    kc.write_checkpoint(d, cfg, tensors, n_shards=3)


@pytest.mark.parametrize("name,expected", [
    ("model.layers.5.self_attn.o_proj.weight", "blk.5.attn_out"),
    ("model.layers.6.mlp_res_proj.weight", "blk.6.ffn_mix_w"),
])
def test_compare_dumps_finds_perturbation(tmp_path, k3_dir, name, expected):
    base = str(tmp_path / "base_dump")
    k3_ref.forward(k3_dir, IDS, dump=base)
    # the un-perturbed rewrite reproduces the fixture checkpoint exactly
    _write_perturbed(str(tmp_path / "same"), None, 1.0)
    same = str(tmp_path / "same_dump")
    k3_ref.forward(str(tmp_path / "same"), IDS, dump=same)
    first, rows = cd.compare_dirs(base, same, 1e-5, out=open(os.devnull, "w"))
    assert first is None and len(rows) == len(cd.load_manifest(base))
    _write_perturbed(str(tmp_path / "pert"), name, 3.0)
    pert = str(tmp_path / "pert_dump")
    k3_ref.forward(str(tmp_path / "pert"), IDS, dump=pert)
    r = subprocess.run([sys.executable, os.path.join(REF, "compare_dumps.py"), base, pert],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert f"FIRST DIVERGENCE: {expected} " in r.stdout
    r = subprocess.run([sys.executable, os.path.join(REF, "compare_dumps.py"), base, same],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_scaling_factor_only_interacts_with_latent_norm_eps(tmp_path):
    """§1.2/§3.6: routed_scaling_factor multiplies the routed sum before the latent RMSNorm, so with
    identical weights it changes logits only through eps — tiny but nonzero."""
    cfg1 = gen_tiny.variant_config("k3")
    tensors = gen_tiny.random_tensors(cfg1["text_config"], np.random.default_rng(11))
    cfg2 = gen_tiny.variant_config("scaled")
    kc.write_checkpoint(str(tmp_path / "s1"), cfg1, tensors)
    kc.write_checkpoint(str(tmp_path / "s2"), cfg2, tensors)
    l1 = k3_ref.forward(str(tmp_path / "s1"), IDS[:5])
    l2 = k3_ref.forward(str(tmp_path / "s2"), IDS[:5])
    rel = np.linalg.norm(l1 - l2) / np.linalg.norm(l1)
    assert 0 < rel < 1e-3


def test_cli_ids_file_and_compare_exit_codes(k3_dir, tmp_path):
    f = tmp_path / "ids.txt"
    f.write_text("3, 17\n250\n")
    d = str(tmp_path / "d")
    subprocess.run([sys.executable, os.path.join(REF, "k3_ref.py"), "--model", k3_dir, "--ids-file", str(f),
                    "--out", str(tmp_path / "l.npy"), "--dump", d], check=True)
    np.testing.assert_allclose(np.load(tmp_path / "l.npy"), k3_ref.forward(k3_dir, [3, 17, 250]), rtol=1e-6, atol=1e-6)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "manifest.json").write_text('{"tensors": []}')
    r = subprocess.run([sys.executable, os.path.join(REF, "compare_dumps.py"), d, str(empty)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no tensor" in r.stderr
    # a test dump with only some tensors: compared ones must match, missing ones are skipped
    part = tmp_path / "part"
    part.mkdir()
    for n in ("tok.embed", "logits"):
        np.save(part / (n + ".npy"), np.load(os.path.join(d, n + ".npy")))
    r = subprocess.run([sys.executable, os.path.join(REF, "compare_dumps.py"), d, str(part)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "all 2 compared" in r.stdout


def test_inventory_matches_real_k3_byte_audit():
    """With K3's real config values the tensor table reproduces the audited counts and bytes
    (k3-architecture.md §2.7): 494,592 expert + 2,460 other text tensors; non-expert text trunk
    113,509,540,864 B; one expert 17,547,264 B; MLA layers (1-indexed) …, 88, 92, 93."""
    cfg = kc.make_config(
        hidden_size=7168, num_hidden_layers=93, vocab_size=163840, num_attention_heads=96,
        num_key_value_heads=96, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
        qk_rope_head_dim=64, v_head_dim=128, intermediate_size=33792, num_experts=896,
        num_experts_per_token=16, moe_intermediate_size=3072, routed_expert_hidden_size=3584,
        attn_res_block_size=12, linear_attn_config=dict(num_heads=96, head_dim=128))
    tc = kc.text_config(cfg)
    assert tc["linear_attn_config"]["full_attn_layers"][-3:] == [88, 92, 93]
    assert len(tc["linear_attn_config"]["kda_layers"]) == 69
    inv = kc.tensor_inventory(tc, a_log_pad_to=128)
    size = {"BF16": 2, "F32": 4, "U8": 1}
    experts = [t for t in inv if ".experts." in t[0]]
    other = [t for t in inv if ".experts." not in t[0]]
    assert len(experts) == 494592 and len(other) == 2460
    assert sum(int(np.prod(s)) * size[d] for _, d, s in other) == 113509540864
    one = [t for t in experts if t[0].startswith("model.layers.1.block_sparse_moe.experts.0.")]
    assert sum(int(np.prod(s)) * size[d] for _, d, s in one) == 17547264
