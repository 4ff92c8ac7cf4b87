"""Float64 numpy reference of the K3 vision tower and projector (shared spec vision.md §4-§5, §8.1).

Usage: python tools/reference/vision_ref.py --model DIR --patches P.npy --grid H,W [--out E.npy] [--dump DIR]

Input: one image's patches [h·w, 588] (or [h·w, 3, 14, 14]) in spec §3.4 order and its grid
(h, w); the checkpoint's vision_tower.* / mm_projector.* tensors, decoded exactly from BF16 to
float64. Output: the projector embeddings [(h/2)·(w/2), text_hidden_size]. Every step is float64
(position interpolation, RoPE angles, softmax, norms); the tower's RMSNorm eps is 2^-23 and the
projector's is projector_ln_eps (spec §4.4, §5.2). --dump writes the same names as `k3 vision
--dump` (vision.patch_embed, vision.pos_emb, vision.embed, vision.block.{b}, vision.final_norm,
vision.merge, vision.proj.fc0, vision.proj.fc2, vision.output) as float64 .npy files.
Written from the spec's equations; it shares no code with src/vision.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_checkpoint as kc  # noqa: E402

EPS_V = 2.0 ** -23          # spec §4.4: FLT_EPSILON
ROPE_THETA = 10000.0        # spec §4.3


class Tower:
    """The vision weights of a checkpoint as float64 arrays, with its vision_config."""

    def __init__(self, model_dir: str):
        cfg, t = kc.read_checkpoint(model_dir, include_extra=True)
        vc = cfg.get("vision_config")
        if not vc or "vt_hidden_size" not in vc:
            raise ValueError(f"{model_dir} has no vision tower (no vision_config with vt_hidden_size)")
        self.vc = vc
        self.D = vc["vt_hidden_size"]
        self.heads = vc["vt_num_attention_heads"]
        self.A = vc.get("qkv_hidden_size", self.D)
        self.dh = self.A // self.heads
        self.layers = vc["vt_num_hidden_layers"]
        self.Hpe, self.Wpe = vc["init_pos_emb_height"], vc["init_pos_emb_width"]
        self.proj_eps = float(vc.get("projector_ln_eps", 1e-5))
        self.w = {n: np.asarray(a, dtype=np.float64) for n, a in t.items()
                  if n.startswith("vision_tower.") or n.startswith("mm_projector.")}

    def get(self, name):
        return self.w[name]


def rms(x, g, eps):
    """rms(x, g, ε) = x / sqrt(mean(x²) + ε) ⊙ g over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def gelu_tanh(z):
    return 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z ** 3)))


def gelu_erf(z):
    from math import erf
    return 0.5 * z * (1.0 + np.vectorize(erf)(z / math.sqrt(2.0)))


def bilinear_weights(n_in: int, n_out: int):
    """Row-interpolation matrix M [n_out, n_in] of PyTorch bilinear, align_corners=False, no
    antialias (spec §4.2): s = max(0, (n_in/n_out)(i + 0.5) − 0.5), i0 = ⌊s⌋, i1 = min(i0+1, n_in−1)."""
    M = np.zeros((n_out, n_in))
    for i in range(n_out):
        s = max(0.0, (n_in / n_out) * (i + 0.5) - 0.5)
        i0 = min(int(math.floor(s)), n_in - 1)
        i1 = min(i0 + 1, n_in - 1)
        lam = s - i0
        M[i, i0] += 1.0 - lam
        M[i, i1] += lam
    return M


def pos_embedding(E, h: int, w: int):
    """Q [h·w, D]: the table E [Hpe, Wpe, D] resized to (h, w) (spec §4.2; unchanged when equal)."""
    Hpe, Wpe, D = E.shape
    if (h, w) == (Hpe, Wpe):
        return E.reshape(h * w, D).copy()
    R, C = bilinear_weights(Hpe, h), bilinear_weights(Wpe, w)
    Q = np.einsum("ia,jb,abd->ijd", R, C, E)
    return Q.reshape(h * w, D)


def rope2d(x, h: int, w: int):
    """x [L, heads, dh] rotated (spec §4.3): complex slot 2k by column·f_k, slot 2k+1 by row·f_k,
    f_k = θ^(−4k/dh); slot j is the interleaved pair (x[2j], x[2j+1])."""
    L, H, dh = x.shape
    F = dh // 4
    f = ROPE_THETA ** (-4.0 * np.arange(F) / dh)
    rows, cols = np.divmod(np.arange(L), w)
    ang = np.zeros((L, dh // 2))
    ang[:, 0::2] = cols[:, None] * f[None, :]
    ang[:, 1::2] = rows[:, None] * f[None, :]
    c = np.cos(ang)[:, None, :]
    s = np.sin(ang)[:, None, :]
    xe, xo = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = xe * c - xo * s
    out[..., 1::2] = xe * s + xo * c
    return out


def encode(tw: Tower, patches, h: int, w: int, dump=None):
    """Projector output [(h/2)(w/2), Dt] of one image (spec §8.1). dump(name, array) is called
    with the named intermediates when given."""
    put = dump or (lambda n, a: None)
    L = h * w
    P = np.asarray(patches, dtype=np.float64).reshape(L, -1)
    Wpe = tw.get("vision_tower.patch_embed.proj.weight").reshape(tw.D, -1)
    X = P @ Wpe.T
    put("vision.patch_embed", X)
    Q = pos_embedding(tw.get("vision_tower.patch_embed.pos_emb.weight"), h, w)
    put("vision.pos_emb", Q)
    X = X + Q
    put("vision.embed", X)
    H, dh, A = tw.heads, tw.dh, tw.A
    for b in range(tw.layers):
        g = lambda n: tw.get(f"vision_tower.encoder.blocks.{b}.{n}")  # noqa: E731
        U = rms(X, g("norm0.weight"), EPS_V)
        QKV = U @ g("wqkv.weight").T
        q = rope2d(QKV[:, :A].reshape(L, H, dh), h, w)
        k = rope2d(QKV[:, A:2 * A].reshape(L, H, dh), h, w)
        v = QKV[:, 2 * A:].reshape(L, H, dh)
        S = np.einsum("nhd,mhd->hnm", q, k) / math.sqrt(dh)
        S = S - S.max(axis=-1, keepdims=True)
        Pm = np.exp(S)
        Pm /= Pm.sum(axis=-1, keepdims=True)
        O = np.einsum("hnm,mhd->nhd", Pm, v).reshape(L, A)
        X = X + O @ g("wo.weight").T
        U = rms(X, g("norm1.weight"), EPS_V)
        X = X + gelu_tanh(U @ g("mlp.fc0.weight").T) @ g("mlp.fc1.weight").T
        put(f"vision.block.{b}", X)
    X = rms(X, tw.get("vision_tower.encoder.final_layernorm.weight"), EPS_V)
    put("vision.final_norm", X)
    Y = X.reshape(h // 2, 2, w // 2, 2, tw.D).transpose(0, 2, 1, 3, 4)  # (R, C, ki, kj, D)
    Z = Y.reshape((h // 2) * (w // 2), 4 * tw.D)                          # TL, TR, BL, BR
    put("vision.merge", Z)
    A1 = gelu_erf(Z @ tw.get("mm_projector.proj.0.weight").T)
    put("vision.proj.fc0", A1)
    C = A1 @ tw.get("mm_projector.proj.2.weight").T
    put("vision.proj.fc2", C)
    E = rms(C, tw.get("mm_projector.post_norm.weight"), tw.proj_eps)
    put("vision.output", E)
    return E


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--patches", required=True)
    ap.add_argument("--grid", required=True, help="H,W")
    ap.add_argument("--out")
    ap.add_argument("--dump")
    a = ap.parse_args(argv)
    h, w = (int(v) for v in a.grid.split(","))
    tw = Tower(a.model)
    names = []

    def dump(name, arr):
        if a.dump:
            os.makedirs(a.dump, exist_ok=True)
            np.save(os.path.join(a.dump, name + ".npy"), arr)
            names.append(name)

    E = encode(tw, np.load(a.patches), h, w, dump if a.dump else None)
    if a.dump:
        with open(os.path.join(a.dump, "manifest.json"), "w") as f:
            json.dump({"tensors": names}, f)
    if a.out:
        np.save(a.out, E)
    print(f"grid {h}x{w}: {h * w} patches -> {E.shape[0]} tokens x {E.shape[1]}")


if __name__ == "__main__":
    main()
