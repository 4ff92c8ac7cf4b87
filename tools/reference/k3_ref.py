"""Independent fp64 numpy reference of the Kimi K3 forward pass (the ORACLE).

Written from /work/shared/spec/k3-architecture.md §3.1-§3.7 and algorithms.md §1.1-§1.2, §2.2, §3.1.
Plain loops and matrix products in float64; no caching, no chunking, no cleverness.
Shapes are written outermost first; T = tokens, D = hidden size.

CLI:
  python tools/reference/k3_ref.py --model DIR (--ids 1,2,3 | --ids-file F) --out logits.npy
                                   [--dump DUMPDIR] [--greedy N]
Dump format (shared with the C++ engine): DUMPDIR/<name>.npy (float32, ids int32) and
DUMPDIR/manifest.json = {"tensors": [names in execution order]}.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_checkpoint as kc  # noqa: E402

MLA_LORA_NORM_EPS = 1e-6   # q_a_layernorm / kv_a_layernorm eps (k3-architecture.md §3.3, resolved)
L2NORM_EPS = 1e-6          # KDA q/k L2 norm eps, inside the sqrt (§3.2 step 3)
RENORM_EPS = 1e-20         # router weight renormalization (§3.6 step 3)


# ---------------------------------------------------------------------------------------------
# Elementary functions
# ---------------------------------------------------------------------------------------------


def sigmoid(x):
    """Logistic sigmoid, elementwise, float64 (any shape)."""
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def silu(x):
    """SiLU(x) = x·σ(x), elementwise float64 (any shape)."""
    return x * sigmoid(x)


def softplus(x):
    """log(1 + e^x), elementwise float64, overflow-safe."""
    x = np.asarray(x, dtype=np.float64)
    return np.logaddexp(0.0, x)


def rmsnorm(x, w, eps):
    """RMSNorm(x; w, eps) = w ⊙ x / sqrt(mean(x²) + eps) over the last axis (§3 notation).

    x: float64 [..., N]; w: [N] or None (no weight). Returns float64 [..., N].
    """
    x = np.asarray(x, dtype=np.float64)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * np.asarray(w, dtype=np.float64)


def situ_glu(g, u, tc: dict):
    """Gated activation of the GLU MLPs (k3-architecture.md §3.4, defaults §1.2).

    g, u: float64, same shape. hidden_act "situ": β1·tanh(g/β1)·σ(g) · β2·tanh(u/β2) with
    β1 = activation_situ_beta (default 1.0), β2 = activation_situ_linear_beta (absent → u untransformed).
    hidden_act "silu": SiLU(g)·u.
    """
    act = tc.get("hidden_act", "silu")
    g = np.asarray(g, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64)
    if act == "silu":
        return silu(g) * u
    if act != "situ":
        raise ValueError(f"config hidden_act={act!r} is not supported (expected 'situ' or 'silu')")
    b1 = float(tc.get("activation_situ_beta", 1.0))
    gate = b1 * np.tanh(g / b1) * sigmoid(g)
    b2 = tc.get("activation_situ_linear_beta")
    up = u if b2 is None else float(b2) * np.tanh(u / float(b2))
    return gate * up


def situ(g, u, beta=4.0, linear_beta=25.0):
    """SiTU(g, u) with explicit betas (§3.4); float64 elementwise. For unit tests."""
    return situ_glu(g, u, {"hidden_act": "situ", "activation_situ_beta": beta,
                           "activation_situ_linear_beta": linear_beta})


# ---------------------------------------------------------------------------------------------
# AttnRes (k3-architecture.md §3.1, algorithms.md §2.1-§2.2)
# ---------------------------------------------------------------------------------------------


def attn_res_mix(values, s, eps):
    """Depth mix Mix(v_0..v_n; s).

    values: list of n+1 float64 [T, D]; s: float64 [D] (= res_norm.weight ⊙ res_proj.weight[0]).
    score_j = Σ_d s[d]·v_j[d]/sqrt(mean_d v_j² + eps); p = softmax_j(score); out = Σ_j p_j v_j (raw v).
    Returns (out float64 [T, D], p float64 [T, n+1]).
    """
    V = np.stack(values, axis=1)                       # [T, n, D]
    scores = rmsnorm(V, None, eps) @ s                 # [T, n]
    scores = scores - scores.max(axis=1, keepdims=True)
    e = np.exp(scores)
    p = e / e.sum(axis=1, keepdims=True)
    out = np.einsum("tn,tnd->td", p, V)
    return out, p


# ---------------------------------------------------------------------------------------------
# KDA (k3-architecture.md §3.2, algorithms.md §1.1-§1.2)
# ---------------------------------------------------------------------------------------------


def causal_conv_silu(xp, w):
    """Depthwise causal conv + SiLU (§3.2 step 2). xp: float64 [T, C]; w: [C, 1, K] (tap 0 = oldest,
    tap K−1 = current); zero history. out[t, c] = SiLU(Σ_j w[c,0,j]·xp[t−(K−1)+j, c]). Returns [T, C]."""
    T, C = xp.shape
    w = np.asarray(w, dtype=np.float64).reshape(C, -1)
    K = w.shape[1]
    out = np.zeros((T, C))
    for t in range(T):
        acc = np.zeros(C)
        for j in range(K):
            src = t - (K - 1) + j
            if src >= 0:
                acc += w[:, j] * xp[src]
        out[t] = acc
    return silu(out)


def kda_gate(z, A_log_heads, dt_bias, lower_bound):
    """KDA decay log-gate g (§3.2 step 4 / algorithms.md §1.1 step 3).

    z: float64 [T, H, d] (= W_fb W_fa x); A_log_heads: [H] (already narrowed to the real heads);
    dt_bias: [H, d]. lower_bound not None (K3): g = lb·σ(exp(A_log[h])·(z + dt_bias));
    None (Kimi-Linear): g = −exp(A_log[h])·softplus(z + dt_bias). Returns g float64 [T, H, d].
    """
    a = np.exp(np.asarray(A_log_heads, dtype=np.float64))[None, :, None]
    zz = np.asarray(z, dtype=np.float64) + np.asarray(dt_bias, dtype=np.float64)[None]
    if lower_bound is not None:
        return float(lower_bound) * sigmoid(a * zz)
    return -a * softplus(zz)


def kda_recurrence(q, k, v, g, beta):
    """Naive KDA delta-rule recurrence, one head (algorithms.md §1.2), fp64, zero initial state.

    q, k: float64 [T, K] (q already L2-normed and scaled, k L2-normed); v: [T, V]; g: [T, K] (log
    decay); beta: [T]. Per t: S ← Diag(exp g_t) S; e = v_t − Sᵀk_t; S ← S + k_t (β_t e)ᵀ; o_t = Sᵀq_t.
    Returns (o float64 [T, V], final state S float64 [K, V]).
    """
    T, Kd = q.shape
    Vd = v.shape[1]
    S = np.zeros((Kd, Vd))
    o = np.zeros((T, Vd))
    for t in range(T):
        S = np.exp(g[t])[:, None] * S
        e = v[t] - S.T @ k[t]
        S = S + np.outer(k[t], beta[t] * e)
        o[t] = S.T @ q[t]
    return o, S


def kda_layer(x, W, tc):
    """KDA attention sublayer (§3.2). x: float64 [T, D] (normalized layer input); W: dict of the
    layer's `self_attn.*` float64 tensors (names without the layer prefix). Returns float64 [T, D]."""
    lac = tc["linear_attn_config"]
    H, d = lac["num_heads"], lac["head_dim"]
    T = x.shape[0]
    eps = tc["rms_norm_eps"]
    q = causal_conv_silu(x @ W["q_proj.weight"].T, W["q_conv1d.weight"]).reshape(T, H, d)
    k = causal_conv_silu(x @ W["k_proj.weight"].T, W["k_conv1d.weight"]).reshape(T, H, d)
    v = causal_conv_silu(x @ W["v_proj.weight"].T, W["v_conv1d.weight"]).reshape(T, H, d)
    q = q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True) + L2NORM_EPS) * d ** -0.5
    k = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True) + L2NORM_EPS)
    z = ((x @ W["f_a_proj.weight"].T) @ W["f_b_proj.weight"].T).reshape(T, H, d)
    a_log = np.asarray(W["A_log"], dtype=np.float64).reshape(-1)
    if a_log.size < H:
        raise ValueError(f"KDA A_log has {a_log.size} entries < num_heads {H}")
    g = kda_gate(z, a_log[:H], W["dt_bias"].reshape(H, d), lac.get("gate_lower_bound"))
    beta = sigmoid(x @ W["b_proj.weight"].T)                     # [T, H]
    o = np.zeros((T, H, d))
    for h in range(H):
        o[:, h, :], _ = kda_recurrence(q[:, h], k[:, h], v[:, h], g[:, h], beta[:, h])
    gate = sigmoid(x @ W["g_proj.weight"].T).reshape(T, H, d)
    y = rmsnorm(o, W["o_norm.weight"], eps) * gate
    return y.reshape(T, H * d) @ W["o_proj.weight"].T


# ---------------------------------------------------------------------------------------------
# Gated MLA, NoPE, non-absorbed (k3-architecture.md §3.3)
# ---------------------------------------------------------------------------------------------


def mla_layer(x, W, tc):
    """Gated MLA sublayer (§3.3), non-absorbed form. x: float64 [T, D]; W: `self_attn.*` tensors.
    score = (q_nope·k_nope + q_r·k_r)/sqrt(nope+rope), causal softmax, no positions.
    Returns float64 [T, D]."""
    H = tc["num_attention_heads"]
    dn, dr, dv = tc["qk_nope_head_dim"], tc["qk_rope_head_dim"], tc["v_head_dim"]
    kvr = tc["kv_lora_rank"]
    T = x.shape[0]
    q = rmsnorm(x @ W["q_a_proj.weight"].T, W["q_a_layernorm.weight"], MLA_LORA_NORM_EPS)
    q = (q @ W["q_b_proj.weight"].T).reshape(T, H, dn + dr)
    ckv = x @ W["kv_a_proj_with_mqa.weight"].T                   # [T, kvr + dr]
    c = rmsnorm(ckv[:, :kvr], W["kv_a_layernorm.weight"], MLA_LORA_NORM_EPS)
    k_r = ckv[:, kvr:]                                           # [T, dr], shared, not normed/rotated
    kv = (c @ W["kv_b_proj.weight"].T).reshape(T, H, dn + dv)
    k_nope, v = kv[:, :, :dn], kv[:, :, dn:]
    scale = 1.0 / np.sqrt(dn + dr)
    o = np.zeros((T, H, dv))
    for h in range(H):
        scores = (q[:, h, :dn] @ k_nope[:, h].T + q[:, h, dn:] @ k_r.T) * scale   # [T, T]
        for t in range(T):
            sc = scores[t, :t + 1]
            p = np.exp(sc - sc.max())
            p = p / p.sum()
            o[t, h] = p @ v[:t + 1, h]
    o = o.reshape(T, H * dv)
    if tc.get("mla_use_output_gate", False):
        o = o * sigmoid(x @ W["g_proj.weight"].T)
    return o @ W["o_proj.weight"].T


# ---------------------------------------------------------------------------------------------
# Dense MLP and Stable LatentMoE (§3.5, §3.6; algorithms.md §3.1)
# ---------------------------------------------------------------------------------------------


def glu_mlp(x, w_gate, w_up, w_down, tc):
    """W_down · act(W_gate x, W_up x). x: float64 [T, Din]; w_gate/w_up [I, Din]; w_down [Dout, I]."""
    return situ_glu(x @ w_gate.T, x @ w_up.T, tc) @ w_down.T


def route(scores, bias, k, routed_scaling_factor=1.0, renormalize=True):
    """Router selection and weights for ONE token (§3.6 steps 2-3).

    scores: float64 [E] = σ(router logits); bias: float64 [E] (e_score_correction_bias).
    Select the k largest (scores + bias); ties: lower expert id wins; NaN biased scores are never
    selected (ValueError if fewer than k finite candidates). Weights = unbiased scores of the
    selection, renormalized w/(Σw + 1e-20) when renormalize and k > 1, times routed_scaling_factor.
    Returns (ids int64 [k] ascending, weights float64 [k] in the same order).
    """
    scores = np.asarray(scores, dtype=np.float64)
    biased = scores + np.asarray(bias, dtype=np.float64)
    valid = np.flatnonzero(~np.isnan(biased))
    if valid.size < k:
        raise ValueError(f"router: only {valid.size} non-NaN expert scores, need top-{k}")
    # sort by (−biased, id): lexsort uses the last key as primary
    order = valid[np.lexsort((valid, -biased[valid]))]
    ids = np.sort(order[:k])
    w = scores[ids]
    if renormalize and k > 1:
        w = w / (w.sum() + RENORM_EPS)
    return ids, w * routed_scaling_factor


class ExpertCache:
    """Dequantized MXFP4 routed experts of one checkpoint, fetched on demand (exact dequantization)."""

    def __init__(self, tensors):
        self.t = tensors
        self.cache = {}

    def get(self, layer, e, which):
        """Return float64 weight [out, in] of experts.{e}.{which} (which in w1, w2, w3) at `layer`."""
        key = (layer, e, which)
        if key not in self.cache:
            base = f"model.layers.{layer}.block_sparse_moe.experts.{e}.{which}."
            try:
                p, s = self.t[base + "weight_packed"], self.t[base + "weight_scale"]
            except KeyError as ex:
                raise ValueError(f"missing expert tensor {ex}") from None
            try:
                self.cache[key] = kc.mxfp4_dequantize(p, s)
            except ValueError as ex:
                raise ValueError(f"{base}: {ex}") from None
        return self.cache[key]


def latent_moe(x, W, layer, experts: ExpertCache, tc):
    """Stable LatentMoE sublayer (§3.6). x: float64 [T, D] normalized; W: `block_sparse_moe.*` tensors.
    Returns (out float64 [T, D], ids int64 [T, k] ascending, weights float64 [T, k])."""
    T = x.shape[0]
    k = tc["num_experts_per_token"]
    if tc.get("moe_router_activation_func", "sigmoid") != "sigmoid":
        raise ValueError("only moe_router_activation_func 'sigmoid' is supported")
    s = sigmoid(x @ W["gate.weight"].T)                          # [T, E]
    bias = W.get("gate.e_score_correction_bias")
    if bias is None:
        bias = np.zeros(s.shape[1])
    zlat = x @ W["routed_expert_down_proj.weight"].T             # [T, Lat]
    ids = np.zeros((T, k), dtype=np.int64)
    ws = np.zeros((T, k))
    u = np.zeros_like(zlat)
    for t in range(T):
        ids[t], ws[t] = route(s[t], bias, k, float(tc.get("routed_scaling_factor", 1.0)),
                              bool(tc.get("moe_renormalize", True)))
        for j in range(k):
            e = int(ids[t, j])
            w1, w2, w3 = (experts.get(layer, e, n) for n in ("w1", "w2", "w3"))
            u[t] += ws[t, j] * (w2 @ situ_glu(w1 @ zlat[t], w3 @ zlat[t], tc))
    if tc.get("latent_moe_use_norm", False):
        u = rmsnorm(u, W["routed_expert_norm.weight"], tc["rms_norm_eps"])
    out = u @ W["routed_expert_up_proj.weight"].T
    if tc.get("num_shared_experts", 0) > 0:
        out = out + glu_mlp(x, W["shared_experts.gate_proj.weight"], W["shared_experts.up_proj.weight"],
                            W["shared_experts.down_proj.weight"], tc)
    return out, ids, ws


# ---------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------


class Model:
    """A loaded checkpoint: cfg (wrapper or flat), tc (text config), tensors (float64 / uint8)."""

    def __init__(self, model_dir):
        self.dir = model_dir
        self.cfg, raw = kc.read_checkpoint(model_dir)
        self.tc = kc.text_config(self.cfg)
        required = ["hidden_size", "num_hidden_layers", "vocab_size", "rms_norm_eps", "attn_res_block_size",
                    "num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                    "qk_rope_head_dim", "v_head_dim", "intermediate_size", "num_experts",
                    "num_experts_per_token", "moe_intermediate_size", "routed_expert_hidden_size",
                    "linear_attn_config"]
        for key in required:
            if key not in self.tc:
                raise ValueError(f"{model_dir}/config.json: text config lacks key {key!r}")
        for key in ("kda_layers", "num_heads", "head_dim", "short_conv_kernel_size"):
            if key not in self.tc["linear_attn_config"]:
                raise ValueError(f"{model_dir}/config.json: linear_attn_config lacks key {key!r}")
        self.t = {}
        for name, a in raw.items():
            self.t[name] = a if a.dtype == np.uint8 else np.asarray(a, dtype=np.float64)
        a_pad = None
        for name in self.t:
            if name.endswith("self_attn.A_log"):
                a_pad = self.t[name].size
                break
        for name, dt, shape in kc.tensor_inventory(self.tc, a_log_pad_to=a_pad):
            if name not in self.t:
                raise ValueError(f"{model_dir}: missing tensor language_model.{name}")
            got = tuple(self.t[name].shape)
            if got != shape and not name.endswith("A_log"):
                raise ValueError(f"{model_dir}: tensor language_model.{name} has shape {got}, expected {shape}")
        self.experts = ExpertCache(self.t)

    def sub(self, prefix):
        """All tensors whose name starts with prefix, keyed by the remainder."""
        n = len(prefix)
        return {k[n:]: v for k, v in self.t.items() if k.startswith(prefix)}


class Dumper:
    """Collects named intermediates in execution order; writes <dir>/<name>.npy + manifest.json."""

    def __init__(self):
        self.items = []

    def __call__(self, name, arr, as_int=False):
        a = np.asarray(arr)
        self.items.append((name, a.astype(np.int32) if as_int else a.astype(np.float32)))

    def write(self, d):
        os.makedirs(d, exist_ok=True)
        for name, a in self.items:
            np.save(os.path.join(d, name + ".npy"), a)
        with open(os.path.join(d, "manifest.json"), "w") as f:
            json.dump({"tensors": [n for n, _ in self.items]}, f, indent=1)


def forward(model, ids, dump=None, embed_rows=()):
    """Full K3 forward pass over one sequence (k3-architecture.md §3.1 flow, §3.7 head).

    model: a Model or a checkpoint directory path; ids: sequence of T token ids.
    dump: None, a directory path (dump written there) or a Dumper (filled in place).
    embed_rows: (pos, rows [n, hidden]) pairs: input rows pos..pos+n-1 are these vectors instead
    of embedding-table rows (the image path, shared/spec/vision.md §6.2).
    Returns logits float64 [T, vocab].
    """
    if not isinstance(model, Model):
        model = Model(model)
    tc, t = model.tc, model.t
    V = tc["vocab_size"]
    ids = [int(i) for i in ids]
    if not ids:
        raise ValueError("empty token id list")
    for i in ids:
        if not 0 <= i < V:
            raise ValueError(f"token id {i} out of range [0, {V})")
    dumper = dump if isinstance(dump, Dumper) else (Dumper() if dump is not None else None)
    dmp = dumper if dumper is not None else (lambda *a, **k: None)
    eps = tc["rms_norm_eps"]
    S = tc["attn_res_block_size"]
    x0 = np.array(t["model.embed_tokens.weight"][ids], dtype=np.float64)
    for pos, rows in embed_rows:
        rows = np.asarray(rows, np.float64)
        x0[pos:pos + rows.shape[0]] = rows
    dmp("tok.embed", x0)
    bank = []
    prefix = x0
    for il in range(tc["num_hidden_layers"]):
        P = f"model.layers.{il}."
        # attention side
        if bank:
            s_attn = t[P + "self_attention_res_norm.weight"] * t[P + "self_attention_res_proj.weight"][0]
            h, p = attn_res_mix(bank + [prefix], s_attn, eps)
            dmp(f"blk.{il}.attn_mix_w", p)
        else:
            h = prefix
        dmp(f"blk.{il}.attn_in", h)
        if il % S == 0:
            bank.append(prefix)
            prefix = None
        xn = rmsnorm(h, t[P + "input_layernorm.weight"], eps)
        W = model.sub(P + "self_attn.")
        a = kda_layer(xn, W, tc) if kc.layer_is_kda(tc, il) else mla_layer(xn, W, tc)
        dmp(f"blk.{il}.attn_out", a)
        prefix = a if prefix is None else prefix + a
        # FFN side
        s_mlp = t[P + "mlp_res_norm.weight"] * t[P + "mlp_res_proj.weight"][0]
        h, p = attn_res_mix(bank + [prefix], s_mlp, eps)
        dmp(f"blk.{il}.ffn_mix_w", p)
        dmp(f"blk.{il}.ffn_in", h)
        xn = rmsnorm(h, t[P + "post_attention_layernorm.weight"], eps)
        if kc.layer_is_moe(tc, il):
            m, rid, rw = latent_moe(xn, model.sub(P + "block_sparse_moe."), il, model.experts, tc)
            dmp(f"blk.{il}.router_topk_ids", rid, as_int=True)
            dmp(f"blk.{il}.router_topk_w", rw)
        else:
            m = glu_mlp(xn, t[P + "mlp.gate_proj.weight"], t[P + "mlp.up_proj.weight"],
                        t[P + "mlp.down_proj.weight"], tc)
        dmp(f"blk.{il}.ffn_out", m)
        prefix = prefix + m
    s_out = t["model.output_attn_res_norm.weight"] * t["model.output_attn_res_proj.weight"][0]
    final, p = attn_res_mix(bank + [prefix], s_out, eps)
    dmp("out.mix_w", p)
    dmp("out.final", final)
    head = t["lm_head.weight"] if "lm_head.weight" in t else t["model.embed_tokens.weight"]  # tied
    logits = rmsnorm(final, t["model.norm.weight"], eps) @ head.T
    dmp("logits", logits)
    if isinstance(dump, (str, os.PathLike)):
        dumper.write(dump)
    return logits


def greedy(model, ids, n):
    """Greedy continuation by teacher-forced recompute: returns list of n generated ids."""
    if not isinstance(model, Model):
        model = Model(model)
    seq = list(ids)
    out = []
    for _ in range(n):
        nxt = int(np.argmax(forward(model, seq)[-1]))
        out.append(nxt)
        seq.append(nxt)
    return out


def _parse_ids(text):
    try:
        return [int(s) for s in text.replace("\n", ",").replace(" ", ",").split(",") if s.strip()]
    except ValueError as ex:
        raise SystemExit(f"bad token id list: {ex}")


def main(argv=None):
    ap = argparse.ArgumentParser(description="fp64 numpy reference of the K3 forward pass")
    ap.add_argument("--model", required=True)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--ids")
    g.add_argument("--ids-file")
    ap.add_argument("--out", required=True, help="logits .npy (float32 [T, vocab])")
    ap.add_argument("--dump", default=None)
    ap.add_argument("--greedy", type=int, default=0)
    a = ap.parse_args(argv)
    ids = _parse_ids(a.ids if a.ids is not None else open(a.ids_file).read())
    model = Model(a.model)
    logits = forward(model, ids, dump=a.dump)
    np.save(a.out, logits.astype(np.float32))
    if a.greedy > 0:
        print(" ".join(str(i) for i in greedy(model, ids, a.greedy)))


if __name__ == "__main__":
    main()
