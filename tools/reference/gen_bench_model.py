"""Bandwidth-bound K3 benchmark checkpoint generator (`k3 bench`).

Usage:
  .venv/bin/python tools/reference/gen_bench_model.py --out /tmp/k3-bench [--layers 4]
      [--experts 64] [--top-k 16] [--vocab 32768] [--seed 0]

Writes a checkpoint in the published K3 format (k3-architecture.md §1-§2, §4): config.json,
model-0000K-of-00000N.safetensors (one shard per decoder layer + one for the globals, tensors in
lexicographic order inside a shard) and model.safetensors.index.json. Every layer has K3's real
widths (hidden 7168, 96 KDA heads of 128, MLA q/kv ranks 1536/512, latent 3584, routed experts of
3072, dense layer-0 MLP 33792, 2 shared experts, top-16 routing) and K3's KDA/MLA pattern; only the
layer count, the experts per layer and the vocabulary are smaller, so the whole model is a few GB
(≈ 9.9 GB with the defaults), fits in RAM, and a decoded token still reads ≈ 7 GB of weights — far
beyond any cache, so decode speed measures memory traffic and per-layer timings extrapolate to the
real 93-layer, 896-expert model.

Larger than RAM (bench/expert_stream.cpp): `--layers 3 --experts 896` gives 2 MoE layers
with all 896 real-size experts each (31.4 GB of experts, ≈ 35 GB in all); the free disk is checked
first (--min-free-gb, default 20 GB must stay free).

Weights are random but numerically tame (the forward pass must not overflow): BF16 linear weights
have random sign and mantissa with one exponent per tensor chosen from the fan-in (|w| ≈ 1/sqrt(in)),
norm weights are 1, MXFP4 experts have random nibbles with scale bytes 118..120. The data is
streamed tensor by tensor (never the whole model in memory); generation takes about a minute.
Never write it into the repository.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_checkpoint as kc  # noqa: E402

PREFIX = "language_model."
ELEM = {"BF16": 2, "F32": 4, "U8": 1}
CHUNK = 1 << 26  # elements generated per step


def bench_config(layers: int, experts: int, top_k: int, vocab: int) -> dict:
    """Wrapper config with K3's real widths and a reduced depth / expert count / vocabulary."""
    kda, full = kc.k3_layer_lists(layers)
    return kc.make_config(
        hidden_size=7168, num_hidden_layers=layers, vocab_size=vocab,
        num_attention_heads=96, num_key_value_heads=96, q_lora_rank=1536, kv_lora_rank=512,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, intermediate_size=33792,
        num_experts=experts, num_experts_per_token=top_k, num_shared_experts=2,
        moe_intermediate_size=3072, routed_expert_hidden_size=3584, attn_res_block_size=12,
        max_position_embeddings=1048576, bos_token_id=vocab - 16, eos_token_id=vocab - 15,
        pad_token_id=vocab - 1,
        linear_attn_config={"kda_layers": kda, "full_attn_layers": full, "num_heads": 96,
                            "head_dim": 128, "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
                            "use_full_rank_gate": True})


def bf16_linear_exponent(fan_in: int) -> int:
    """Biased bf16 exponent e so that |w| in [2^(e-127), 2^(e-126)) ≈ 1/sqrt(fan_in)."""
    return 127 + int(math.floor(math.log2(1.0 / math.sqrt(max(1, fan_in)))))


def gen_chunks(name: str, dt: str, shape: tuple, rng: np.random.Generator):
    """Yield the tensor's little-endian bytes in chunks."""
    n = int(np.prod(shape))
    base = name.rsplit(".", 1)[-1]
    if dt == "BF16":
        if len(shape) == 1 or base == "weight" and ("norm" in name):
            for i in range(0, n, CHUNK):  # norm weights: exactly 1.0
                yield np.full(min(CHUNK, n - i), 0x3F80, dtype="<u2").tobytes()
            return
        fan_in = shape[-1]
        if "res_proj" in name:  # AttnRes score vectors: small
            fan_in = 4 * shape[-1]
        if "embed_tokens" in name:
            fan_in = 1
        e = bf16_linear_exponent(fan_in)
        for i in range(0, n, CHUNK):
            r = rng.integers(0, 1 << 16, size=min(CHUNK, n - i), dtype=np.uint16)
            yield ((r & 0x807F) | (e << 7)).astype("<u2").tobytes()
        return
    if dt == "F32":
        if name.endswith("A_log") or name.endswith("dt_bias") or "correction_bias" in name:
            yield np.zeros(n, dtype="<f4").tobytes()
        elif name.endswith("o_norm.weight"):
            yield np.ones(n, dtype="<f4").tobytes()
        else:  # conv taps
            yield (0.5 * rng.standard_normal(n)).astype("<f4").tobytes()
        return
    if dt == "U8":
        if base == "weight_scale":
            yield rng.integers(118, 121, size=n, dtype=np.uint8).tobytes()
        else:
            for i in range(0, n, CHUNK):
                yield rng.integers(0, 256, size=min(CHUNK, n - i), dtype=np.uint8).tobytes()
        return
    raise ValueError(f"{name}: unsupported dtype {dt}")


def write_shard(path: str, items: list, rng: np.random.Generator) -> int:
    """items: [(full_name, dtype, shape)] already sorted. Streams the data. Returns data bytes."""
    header = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, dt, shape in items:
        nb = int(np.prod(shape)) * ELEM[dt]
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + nb]}
        off += nb
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, dt, shape in items:
            written = 0
            for chunk in gen_chunks(name[len(PREFIX):], dt, shape, rng):
                f.write(chunk)
                written += len(chunk)
            assert written == int(np.prod(shape)) * ELEM[dt], name
    return off


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory (outside the repository)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--top-k", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-free-gb", type=float, default=20.0,
                    help="refuse unless this much disk stays free after writing (default 20)")
    a = ap.parse_args(argv)
    if a.layers < 2 or a.experts < a.top_k or a.top_k < 1 or a.vocab < 1024:
        ap.error("need layers >= 2, experts >= top-k >= 1, vocab >= 1024")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = os.path.abspath(a.out)
    if out == repo or out.startswith(repo + os.sep):
        ap.error(f"--out {out} is inside the repository; write benchmark models elsewhere (e.g. /tmp)")
    os.makedirs(out, exist_ok=True)
    cfg = bench_config(a.layers, a.experts, a.top_k, a.vocab)
    tc = kc.text_config(cfg)
    inv = kc.tensor_inventory(tc, a_log_pad_to=128)
    need = sum(int(np.prod(shape)) * ELEM[dt] for _, dt, shape in inv)
    free = shutil.disk_usage(out).free
    if free - need < a.min_free_gb * 1e9:
        ap.error(f"not enough disk: the checkpoint needs {need / 1e9:.1f} GB, {free / 1e9:.1f} GB are free on "
                 f"{out}, and --min-free-gb {a.min_free_gb:g} must stay free")
    print(f"writing {need / 1e9:.1f} GB ({free / 1e9:.1f} GB free)", flush=True)
    n_shards = a.layers + 1
    shards = [[] for _ in range(n_shards)]
    for name, dt, shape in inv:
        parts = name.split(".")
        k = int(parts[2]) if name.startswith("model.layers.") else n_shards - 1
        shards[k].append((PREFIX + name, dt, tuple(shape)))
    rng = np.random.default_rng(a.seed)
    weight_map, total, t0 = {}, 0, time.time()
    for k, items in enumerate(shards):
        items.sort(key=lambda t: t[0])
        fname = f"model-{k + 1:05d}-of-{n_shards:06d}.safetensors"
        total += write_shard(os.path.join(out, fname), items, rng)
        for name, _, _ in items:
            weight_map[name] = fname
        print(f"  {fname}: {total / 1e9:.2f} GB so far, {time.time() - t0:.0f} s", flush=True)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f,
                  indent=2)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"wrote {out}: {total / 1e9:.2f} GB in {n_shards} shards, {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
