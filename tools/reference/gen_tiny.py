"""Tiny random K3 checkpoint generator (published K3 layout, k3-architecture.md §1-§2, §4).

Usage: python tools/reference/gen_tiny.py --out DIR --variant {k3,scaled,many_experts,kimi_linear_gate,odd_experts,few_experts,odd_heads,one_head} --seed S
       [--vision {tiny,wide_qkv}]

--vision adds a tiny random MoonViT-V2 vision tower and projector (shared spec vision.md §1.1, §2:
the published tensor names, few blocks, small widths, a head dim that is a multiple of 4 for the 2D
RoPE, a non-square position table); without it the checkpoint carries a placeholder
vision_config and a few placeholder vision tensors (text-only).

Writes only config.json, model-0000K-of-00000N.safetensors shards and model.safetensors.index.json.
Deterministic given (variant, seed). Weights are random with scales chosen so activations stay O(1).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_checkpoint as kc  # noqa: E402

# odd_experts: 6 experts (on 4 ranks: 2, 2, 1, 1) and 515 vocabulary rows (uneven lm_head split);
# few_experts: 3 experts, so a 4th rank holds none (docs/distributed.md).
# odd_heads: 3 KDA and 3 MLA heads and a dense MLP 80 wide (uneven head/column splits on 2 and 4
# ranks); one_head: 1 KDA and 1 MLA head, so every rank but the first holds no head.
VARIANTS = ("k3", "scaled", "many_experts", "kimi_linear_gate", "odd_experts", "few_experts", "odd_heads",
            "one_head")
A_LOG_PAD = 8  # KDA has 4 heads; A_log stored zero-padded to 8 (like K3's 96 → 128)


def variant_config(variant: str) -> dict:
    """Wrapper config dict for a named variant (see module doc / brief)."""
    if variant == "k3":
        return kc.make_config()
    if variant == "scaled":
        return kc.make_config(routed_scaling_factor=2.5)
    if variant == "many_experts":
        return kc.make_config(num_experts=520, num_experts_per_token=8)
    if variant == "odd_experts":
        return kc.make_config(num_experts=6, num_experts_per_token=2, vocab_size=515)
    if variant == "few_experts":
        return kc.make_config(num_experts=3, num_experts_per_token=2)
    if variant == "odd_heads":
        return kc.make_config(num_attention_heads=3, num_key_value_heads=3, intermediate_size=80,
                              linear_attn_config={"num_heads": 3})
    if variant == "one_head":
        return kc.make_config(num_attention_heads=1, num_key_value_heads=1, linear_attn_config={"num_heads": 1})
    if variant == "kimi_linear_gate":
        cfg = kc.make_config()
        del cfg["text_config"]["linear_attn_config"]["gate_lower_bound"]
        return cfg
    raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}")


def random_tensors(tc: dict, rng: np.random.Generator, a_log_pad_to: int = A_LOG_PAD) -> dict:
    """Random weights for every tensor of tensor_inventory(tc): {name: (dtype_str, storage ndarray)}.

    Linear [out, in]: N(0,1)/sqrt(in). Norm weights: 1 + 0.1 N(0,1). AttnRes res_proj [1, D]:
    0.05 N(0,1) (mix scores then have std ≈ 0.05·sqrt(D) = 0.4: visibly non-uniform). Conv taps N(0, 0.5²).
    dt_bias N(0,1); A_log N(0, 0.5²) on real heads, zeros on padding; correction bias 0.1 N(0,1);
    embeddings N(0,1). Routed experts: N(0,1)/sqrt(in) quantized to MXFP4.
    """
    Hk = tc["linear_attn_config"]["num_heads"]
    out = {}
    pending = {}  # MXFP4 matrices to quantize, batched per (layer, shape); rows are independent
    for name, dt, shape in kc.tensor_inventory(tc, a_log_pad_to=a_log_pad_to):
        base = name.rsplit(".", 1)[-1]
        if dt == "U8":
            if base == "weight_scale":
                continue  # produced together with weight_packed
            w = rng.standard_normal((shape[0], shape[1] * 2)) / np.sqrt(shape[1] * 2)
            layer = name.split(".experts.")[0]
            pending.setdefault((layer, w.shape), []).append((name, w))
            continue
        if name.endswith("A_log"):
            a = np.zeros(shape, dtype=np.float32)
            a[:Hk] = 0.5 * rng.standard_normal(Hk)
            out[name] = ("F32", a)
            continue
        if name.endswith("dt_bias"):
            w = rng.standard_normal(shape)
        elif name.endswith("e_score_correction_bias"):
            w = 0.1 * rng.standard_normal(shape)
        elif "conv1d" in name:
            w = 0.5 * rng.standard_normal(shape)
        elif name.endswith("res_proj.weight"):
            w = 0.05 * rng.standard_normal(shape)
        elif "norm" in name:
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("embed_tokens.weight"):
            w = rng.standard_normal(shape)
        else:
            w = rng.standard_normal(shape) / np.sqrt(shape[-1])
        if dt == "F32":
            out[name] = ("F32", w.astype(np.float32))
        else:
            out[name] = ("BF16", kc.f32_to_bf16_bits(w))
    for (_, shape), items in pending.items():
        packed, scale = kc.mxfp4_quantize(np.concatenate([w for _, w in items], axis=0))
        for j, (name, _) in enumerate(items):
            rows = slice(j * shape[0], (j + 1) * shape[0])
            out[name] = ("U8", packed[rows])
            out[name.replace("weight_packed", "weight_scale")] = ("U8", scale[rows])
    return out


def vision_tensors(rng: np.random.Generator) -> dict:
    """A few placeholder vision tensors (names as published: vision_tower.*, mm_projector.*)."""
    def bf(shape):
        return ("BF16", kc.f32_to_bf16_bits(0.02 * rng.standard_normal(shape)))
    return {
        "vision_tower.patch_embed.proj.weight": bf((16, 3, 14, 14)),
        "vision_tower.encoder.blocks.0.attn.qkv.weight": bf((48, 16)),
        "vision_tower.encoder.final_layernorm.weight": bf((16,)),
        "mm_projector.proj.0.weight": bf((64, 64)),
        "mm_projector.proj.2.weight": bf((64, 64)),
        "mm_projector.pre_norm.weight": bf((64,)),
    }


# Tiny vision towers (vision.md §1.1 keys): "tiny" has head dim = width / heads; "wide_qkv" has
# qkv_hidden_size wider than vt_hidden_size like K3 (1536 vs 1024), head dim 24, three blocks.
VISION_VARIANTS = {
    "tiny": dict(vt_hidden_size=32, vt_num_hidden_layers=2, vt_num_attention_heads=2, qkv_hidden_size=32,
                 vt_intermediate_size=64, init_pos_emb_height=6, init_pos_emb_width=4),
    "wide_qkv": dict(vt_hidden_size=24, vt_num_hidden_layers=3, vt_num_attention_heads=2, qkv_hidden_size=48,
                     vt_intermediate_size=40, init_pos_emb_height=4, init_pos_emb_width=4),
}


def vision_config(vision: str, text_hidden: int) -> dict:
    """The vision_config of a tiny tower (K3's keys and fixed values, small dimensions)."""
    if vision not in VISION_VARIANTS:
        raise ValueError(f"unknown vision tower {vision!r}; choose one of {tuple(VISION_VARIANTS)}")
    v = VISION_VARIANTS[vision]
    return {
        "model_type": "moonvit3d", "patch_size": 14, **v,
        "norm_type": "rmsnorm", "attn_bias": False, "linear_bias": False, "patch_embed_proj_bias": False,
        "mlp_type": "mlp2", "activation_func": "gelu_pytorch_tanh", "pos_emb_type": "divided_fixed",
        "init_pos_emb_time": 4, "pos_emb_interpolation_mode": "bilinear", "merge_kernel_size": [2, 2],
        "merge_type": "sd2_tpool", "mm_projector_type": "patchmergerv2", "mm_hidden_size": v["vt_hidden_size"],
        "text_hidden_size": text_hidden, "projector_hidden_act": "gelu", "projector_ln_eps": 1e-05,
    }


def vision_inventory(vc: dict):
    """The 3 + 6·blocks + 3 vision tensors of vision.md §2 in forward order: (name, "BF16", shape)."""
    D, A, I = vc["vt_hidden_size"], vc.get("qkv_hidden_size", vc["vt_hidden_size"]), vc["vt_intermediate_size"]
    p, Dp, Dt = vc["patch_size"], 4 * vc["mm_hidden_size"], vc["text_hidden_size"]
    out = [("vision_tower.patch_embed.proj.weight", "BF16", (D, 3, p, p)),
           ("vision_tower.patch_embed.pos_emb.weight", "BF16",
            (vc["init_pos_emb_height"], vc["init_pos_emb_width"], D))]
    for b in range(vc["vt_num_hidden_layers"]):
        pre = f"vision_tower.encoder.blocks.{b}."
        out += [(pre + "norm0.weight", "BF16", (D,)), (pre + "wqkv.weight", "BF16", (3 * A, D)),
                (pre + "wo.weight", "BF16", (D, A)), (pre + "norm1.weight", "BF16", (D,)),
                (pre + "mlp.fc0.weight", "BF16", (I, D)), (pre + "mlp.fc1.weight", "BF16", (D, I))]
    out += [("vision_tower.encoder.final_layernorm.weight", "BF16", (D,)),
            ("mm_projector.proj.0.weight", "BF16", (Dp, Dp)),
            ("mm_projector.proj.2.weight", "BF16", (Dt, Dp)),
            ("mm_projector.post_norm.weight", "BF16", (Dt,))]
    return out


def random_vision_tensors(vc: dict, rng: np.random.Generator) -> dict:
    """Random BF16 weights for vision_inventory(vc). Linear [out, in] (the patch conv as [D, 3·p·p]):
    N(0,1)/sqrt(in); norm weights 1 + 0.1 N(0,1); position table 0.5 N(0,1)."""
    out = {}
    for name, dt, shape in vision_inventory(vc):
        if "norm" in name:
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("pos_emb.weight"):
            w = 0.5 * rng.standard_normal(shape)
        else:
            w = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        out[name] = (dt, kc.f32_to_bf16_bits(w))
    return out


def generate(out_dir: str, variant: str = "k3", seed: int = 0, n_shards: int = 3, vision: str | None = None) -> dict:
    """Generate the checkpoint into out_dir; returns the config dict. vision: a VISION_VARIANTS key
    (a tiny random tower and its vision_config) or None (placeholder vision tensors, text-only)."""
    cfg = variant_config(variant)
    rng = np.random.default_rng([seed, VARIANTS.index(variant)])
    tc = kc.text_config(cfg)
    tensors = random_tensors(tc, rng)
    if vision is None:
        extra = vision_tensors(rng)
    else:
        cfg["vision_config"] = vision_config(vision, tc["hidden_size"])
        extra = random_vision_tensors(cfg["vision_config"], np.random.default_rng([seed, 1000 + list(VISION_VARIANTS).index(vision)]))
    kc.write_checkpoint(out_dir, cfg, tensors, n_shards=n_shards, extra_tensors=extra)
    return cfg


def write_byte_tokenizer(out_dir: str) -> None:
    """tiktoken.model whose rank i is the single byte i (no merges)."""
    import base64
    with open(os.path.join(out_dir, "tiktoken.model"), "w") as f:
        for i in range(256):
            f.write(f"{base64.b64encode(bytes([i])).decode()} {i}\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant", default="k3", choices=VARIANTS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--vision", choices=tuple(VISION_VARIANTS), default=None,
                    help="add a tiny random vision tower (vision.md §1.1, §2) instead of placeholder vision tensors")
    ap.add_argument("--byte-tokenizer", action="store_true",
                    help="also write a tiktoken.model of the 256 single bytes (ranks 0..255; with the 256 "
                         "special ids that fills the tiny vocab of 512), so that `k3 info` and `k3 run` can load it")
    a = ap.parse_args(argv)
    generate(a.out, a.variant, a.seed, a.shards, vision=a.vision)
    if a.byte_tokenizer:
        write_byte_tokenizer(a.out)


if __name__ == "__main__":
    main()
