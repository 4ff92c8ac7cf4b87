"""K3 checkpoint library: BF16/MXFP4 codecs, the tensor table, sharded safetensors I/O, configs.

Spec: /work/shared/spec/k3-architecture.md §1 (config), §2 (tensor table, shards), §4 (MXFP4);
algorithms.md §5.1-§5.2 (E2M1/E8M0 encodings and the floor-rule quantizer).

Conventions: shapes are written outermost first (PyTorch order); linear weights are [out, in].
Tensor names passed to / returned from this module carry NO "language_model." prefix, e.g.
"model.layers.0.input_layernorm.weight".
"""
from __future__ import annotations

import json
import os
import struct

import numpy as np

# ---------------------------------------------------------------------------------------------
# BF16
# ---------------------------------------------------------------------------------------------


def f32_to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """Round float values to bfloat16, round-to-nearest-even.

    a: any shape, any float dtype (converted to float32 first).
    Returns uint16 array of the same shape holding the bf16 bit patterns. NaN stays NaN (quiet).
    """
    f = np.ascontiguousarray(np.asarray(a, dtype=np.float32))
    bits = f.view(np.uint32).astype(np.uint64)
    lsb = (bits >> 16) & 1
    rounded = ((bits + 0x7FFF + lsb) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def bf16_bits_to_f32(u: np.ndarray) -> np.ndarray:
    """Decode bf16 bit patterns (uint16, any shape) to float32 (exact)."""
    u = np.asarray(u, dtype=np.uint16)
    return (u.astype(np.uint32) << 16).view(np.float32)


# ---------------------------------------------------------------------------------------------
# MXFP4 (algorithms.md §5.1-§5.2, k3-architecture.md §4)
# ---------------------------------------------------------------------------------------------

E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float64)


def _e2m1_encode_rne(x: np.ndarray) -> np.ndarray:
    """Encode float64 values (already divided by the block scale) to E2M1 nibbles (uint8 0..15).

    Round-to-nearest-even on the grid {0,0.5,1,1.5,2,3,4,6}; |x| > 6 saturates to 6 (§5.2 step 3,5).
    Ties go to the neighbour whose mantissa bit is 0 (codes 0,2,4,6 i.e. even magnitude code).
    """
    mag = np.abs(x)
    # Midpoints between consecutive grid values; code c ↔ grid[c]. searchsorted(side="left") counts
    # midpoints strictly below |x|, i.e. the nearest code with ties resolved DOWN; on an exact tie
    # between codes c and c+1 with c odd, move up to the even code c+1. |x| > 6 lands on code 7.
    mid = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    codes = np.searchsorted(mid, mag, side="left")
    tie = (codes < 7) & (mag == mid[np.minimum(codes, 6)])
    codes = (codes + (tie & (codes % 2 == 1))).astype(np.uint8)
    codes = np.where(mag > 6.0, np.uint8(7), codes)
    sign = (np.signbit(x) & (codes != 0)).astype(np.uint8)
    return (codes | (sign << 3)).astype(np.uint8)


def mxfp4_quantize(w: np.ndarray):
    """Quantize a float matrix to MXFP4 (compressed-tensors mxfp4-pack-quantized layout).

    w: float array [rows, cols], cols % 32 == 0, finite values.
    Returns (packed uint8 [rows, cols/2], scale uint8 [rows, cols/32]).
    Floor rule (algorithms.md §5.2): shared_exp = floor(log2 amax) - 2, clamped to [-127, 127];
    scale byte = shared_exp + 127; elements RNE to E2M1, saturating at 6. All-zero group → byte 127.
    Packing (§4): byte j holds column 2j in the LOW nibble and column 2j+1 in the HIGH nibble.
    """
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2 or w.shape[1] % 32 != 0:
        raise ValueError(f"mxfp4_quantize: need [rows, cols] with cols % 32 == 0, got {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ValueError("mxfp4_quantize: non-finite input")
    rows, cols = w.shape
    g = w.reshape(rows, cols // 32, 32)
    amax = np.abs(g).max(axis=2)
    exp = np.zeros(amax.shape, dtype=np.int64)
    nz = amax > 0
    # floor(log2(amax)) exactly via frexp: amax = m * 2^e with m in [0.5, 1) → floor(log2) = e - 1
    _, e = np.frexp(amax[nz])
    exp[nz] = e.astype(np.int64) - 1 - 2
    exp = np.clip(exp, -127, 127)
    scale = (exp + 127).astype(np.uint8)
    x = g / np.ldexp(1.0, exp)[:, :, None]
    nib = _e2m1_encode_rne(x).reshape(rows, cols)
    packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    return packed, scale


def mxfp4_dequantize(packed: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Dequantize MXFP4: packed uint8 [rows, cols/2], scale uint8 [rows, cols/32] → float64 [rows, cols].

    W[r, c] = E2M1(nibble(r, c)) * 2^(scale[r, c // 32] - 127) (k3-architecture.md §4).
    Raises ValueError on a scale byte 0xFF (E8M0 NaN) or on inconsistent shapes.
    """
    packed = np.asarray(packed, dtype=np.uint8)
    scale = np.asarray(scale, dtype=np.uint8)
    if packed.ndim != 2 or scale.ndim != 2 or packed.shape[0] != scale.shape[0] \
            or packed.shape[1] * 2 != scale.shape[1] * 32:
        raise ValueError(f"mxfp4_dequantize: inconsistent shapes packed {packed.shape} scale {scale.shape}")
    if np.any(scale == 0xFF):
        r, c = np.argwhere(scale == 0xFF)[0]
        raise ValueError(f"mxfp4_dequantize: E8M0 scale byte 0xFF (NaN) at [{r}, {c}]")
    rows = packed.shape[0]
    cols = packed.shape[1] * 2
    nib = np.empty((rows, cols), dtype=np.uint8)
    nib[:, 0::2] = packed & 0x0F
    nib[:, 1::2] = packed >> 4
    vals = E2M1_VALUES[nib]
    mult = np.ldexp(1.0, scale.astype(np.int64) - 127)
    return vals * np.repeat(mult, 32, axis=1)


# ---------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------


def text_config(cfg: dict) -> dict:
    """Return cfg["text_config"] for the multimodal wrapper, else cfg itself (flat config)."""
    return cfg["text_config"] if "text_config" in cfg else cfg


def layer_is_kda(tc: dict, i: int) -> bool:
    """0-indexed layer i is KDA iff (i+1) is in linear_attn_config.kda_layers (§1.3)."""
    return (i + 1) in tc["linear_attn_config"]["kda_layers"]


def layer_is_moe(tc: dict, i: int) -> bool:
    """Layer i uses MoE iff i >= first_k_dense_replace and i % moe_layer_freq == 0 (§1.2)."""
    return i >= tc.get("first_k_dense_replace", 0) and i % tc.get("moe_layer_freq", 1) == 0


def k3_layer_lists(n_layers: int, period: int = 4):
    """1-indexed (kda_layers, full_attn_layers) in K3's pattern (§1.3): MLA at every multiple of
    `period` in 1..n_layers-1 plus the last layer n_layers; KDA everywhere else."""
    full = [i for i in range(1, n_layers) if i % period == 0] + [n_layers]
    kda = [i for i in range(1, n_layers + 1) if i not in full]
    return kda, full


def quantization_config() -> dict:
    """compressed-tensors quantization_config shaped like K3's (§1.4)."""
    return {
        "quant_method": "compressed-tensors",
        "format": "mxfp4-pack-quantized",
        "quantization_status": "compressed",
        "kv_cache_scheme": None,
        "config_groups": {
            "group_0": {
                "format": "mxfp4-pack-quantized",
                "targets": ["Linear"],
                "input_activations": None,
                "weights": {
                    "num_bits": 4, "type": "float", "strategy": "group", "group_size": 32,
                    "symmetric": True, "dynamic": False, "scale_dtype": "torch.uint8",
                    "observer": "minmax",
                },
            }
        },
        "ignore": [
            "re:.*self_attn.*", "re:.*shared_experts.*", r"re:.*mlp\.(gate|up|gate_up|down)_proj.*",
            "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*",
        ],
    }


def make_config(**overrides) -> dict:
    """A full K3-style wrapper config (§1.1-§1.4) with tiny defaults.

    Keyword overrides apply to text_config keys; the special keys `linear_attn_config` (dict) are
    merged into text_config.linear_attn_config, and `wrapper` (dict) into the top level.
    If num_hidden_layers is overridden without explicit layer lists, K3's pattern is regenerated.
    """
    wrapper_over = overrides.pop("wrapper", {})
    lac_over = overrides.pop("linear_attn_config", {})
    n_layers = overrides.get("num_hidden_layers", 9)
    kda, full = k3_layer_lists(n_layers)
    tc = {
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "hidden_size": 64,
        "num_hidden_layers": n_layers,
        "vocab_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "q_lora_rank": 32,
        "kv_lora_rank": 16,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "mla_use_nope": True,
        "mla_use_output_gate": True,
        "intermediate_size": 96,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "num_experts": 16,
        "num_experts_per_token": 4,
        "num_shared_experts": 2,
        "moe_intermediate_size": 32,
        "routed_expert_hidden_size": 32,
        "latent_moe_use_norm": True,
        "moe_router_activation_func": "sigmoid",
        "moe_renormalize": True,
        "routed_scaling_factor": 1.0,
        "use_grouped_topk": True,
        "num_expert_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "hidden_act": "situ",
        "activation_situ_beta": 4.0,
        "activation_situ_linear_beta": 25.0,
        "attn_res_block_size": 4,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 4096,
        "num_nextn_predict_layers": 0,
        "tie_word_embeddings": False,
        "bos_token_id": 500,
        "eos_token_id": 502,
        "pad_token_id": 511,
        "torch_dtype": "bfloat16",
        "quantization_config": quantization_config(),
        "linear_attn_config": {
            "kda_layers": kda,
            "full_attn_layers": full,
            "num_heads": 4,
            "head_dim": 16,
            "short_conv_kernel_size": 4,
            "gate_lower_bound": -5.0,
            "use_full_rank_gate": True,
        },
    }
    tc.update(overrides)
    tc["linear_attn_config"].update(lac_over)
    cfg = {
        "architectures": ["KimiK3ForConditionalGeneration"],
        "model_type": "kimi_k3",
        "bos_token_id": tc["bos_token_id"],
        "eos_token_id": tc["eos_token_id"],
        "pad_token_id": tc["pad_token_id"],
        "media_placeholder_token_id": 505,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "text_config": tc,
        "vision_config": {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                          "patch_size": 14, "note": "tiny placeholder; not used for text"},
    }
    cfg.update(wrapper_over)
    return cfg


# ---------------------------------------------------------------------------------------------
# Tensor table (k3-architecture.md §2.1-§2.6)
# ---------------------------------------------------------------------------------------------


def tensor_inventory(text_cfg: dict, a_log_pad_to: int | None = None):
    """Every text tensor of a K3 checkpoint: list of (name_without_prefix, dtype_str, shape_tuple).

    The C++ tensor table (src/io/tensor_table.cpp) is the source: tests/python/test_tensor_table.py
    checks this list against `k3 tensors --json` for every config variant.

    text_cfg: the text_config dict (use text_config(cfg) on a wrapper).
    a_log_pad_to: stored length of KDA A_log (K3: 128 for 96 heads); None → num_heads (no padding).
    dtype_str is the safetensors dtype: "BF16", "F32" or "U8". Order: globals, then layers 0..L-1.
    """
    tc = text_cfg
    D = tc["hidden_size"]
    V = tc["vocab_size"]
    L = tc["num_hidden_layers"]
    lac = tc["linear_attn_config"]
    Hk, dk, K = lac["num_heads"], lac["head_dim"], lac["short_conv_kernel_size"]
    C = Hk * dk
    a_pad = Hk if a_log_pad_to is None else a_log_pad_to
    if a_pad < Hk:
        raise ValueError(f"a_log_pad_to={a_pad} < KDA num_heads={Hk}")
    Hm = tc["num_attention_heads"]
    qr, kvr = tc["q_lora_rank"], tc["kv_lora_rank"]
    dn, drp, dv = tc["qk_nope_head_dim"], tc["qk_rope_head_dim"], tc["v_head_dim"]
    I = tc["intermediate_size"]
    E, Im, Lat = tc["num_experts"], tc["moe_intermediate_size"], tc["routed_expert_hidden_size"]
    S = tc.get("num_shared_experts", 0)
    out = [("model.embed_tokens.weight", "BF16", (V, D))]
    if not tc.get("tie_word_embeddings", False):  # tied: the embedding is the head
        out.append(("lm_head.weight", "BF16", (V, D)))
    out += [
        ("model.norm.weight", "BF16", (D,)),
        ("model.output_attn_res_norm.weight", "BF16", (D,)),
        ("model.output_attn_res_proj.weight", "BF16", (1, D)),
    ]
    for i in range(L):
        P = f"model.layers.{i}."
        out += [
            (P + "input_layernorm.weight", "BF16", (D,)),
            (P + "post_attention_layernorm.weight", "BF16", (D,)),
            (P + "self_attention_res_norm.weight", "BF16", (D,)),
            (P + "self_attention_res_proj.weight", "BF16", (1, D)),
            (P + "mlp_res_norm.weight", "BF16", (D,)),
            (P + "mlp_res_proj.weight", "BF16", (1, D)),
        ]
        A = P + "self_attn."
        if layer_is_kda(tc, i):
            for n in ("q", "k", "v"):
                out.append((A + f"{n}_proj.weight", "BF16", (C, D)))
            for n in ("q", "k", "v"):
                out.append((A + f"{n}_conv1d.weight", "F32", (C, 1, K)))
            out += [
                (A + "f_a_proj.weight", "BF16", (dk, D)),
                (A + "f_b_proj.weight", "BF16", (C, dk)),
                (A + "b_proj.weight", "BF16", (Hk, D)),
                (A + "g_proj.weight", "BF16", (C, D)),
                (A + "dt_bias", "F32", (C,)),
                (A + "A_log", "F32", (a_pad,)),
                (A + "o_norm.weight", "F32", (dk,)),
                (A + "o_proj.weight", "BF16", (D, C)),
            ]
        else:
            out += [
                (A + "q_a_proj.weight", "BF16", (qr, D)),
                (A + "q_a_layernorm.weight", "BF16", (qr,)),
                (A + "q_b_proj.weight", "BF16", (Hm * (dn + drp), qr)),
                (A + "kv_a_proj_with_mqa.weight", "BF16", (kvr + drp, D)),
                (A + "kv_a_layernorm.weight", "BF16", (kvr,)),
                (A + "kv_b_proj.weight", "BF16", (Hm * (dn + dv), kvr)),
            ]
            if tc.get("mla_use_output_gate", False):
                out.append((A + "g_proj.weight", "BF16", (Hm * dv, D)))
            out.append((A + "o_proj.weight", "BF16", (D, Hm * dv)))
        if layer_is_moe(tc, i):
            M = P + "block_sparse_moe."
            out += [
                (M + "gate.weight", "BF16", (E, D)),
                (M + "gate.e_score_correction_bias", "F32", (E,)),
                (M + "routed_expert_down_proj.weight", "BF16", (Lat, D)),
            ]
            if tc.get("latent_moe_use_norm", False):
                out.append((M + "routed_expert_norm.weight", "BF16", (Lat,)))
            out.append((M + "routed_expert_up_proj.weight", "BF16", (D, Lat)))
            if S > 0:
                out += [
                    (M + "shared_experts.gate_proj.weight", "BF16", (S * Im, D)),
                    (M + "shared_experts.up_proj.weight", "BF16", (S * Im, D)),
                    (M + "shared_experts.down_proj.weight", "BF16", (D, S * Im)),
                ]
            for e in range(E):
                X = M + f"experts.{e}."
                out += [
                    (X + "w1.weight_packed", "U8", (Im, Lat // 2)),
                    (X + "w1.weight_scale", "U8", (Im, Lat // 32)),
                    (X + "w2.weight_packed", "U8", (Lat, Im // 2)),
                    (X + "w2.weight_scale", "U8", (Lat, Im // 32)),
                    (X + "w3.weight_packed", "U8", (Im, Lat // 2)),
                    (X + "w3.weight_scale", "U8", (Im, Lat // 32)),
                ]
        else:
            out += [
                (P + "mlp.gate_proj.weight", "BF16", (I, D)),
                (P + "mlp.up_proj.weight", "BF16", (I, D)),
                (P + "mlp.down_proj.weight", "BF16", (D, I)),
            ]
    return out


# ---------------------------------------------------------------------------------------------
# safetensors I/O
# ---------------------------------------------------------------------------------------------

_NP_OF = {"BF16": np.uint16, "F32": np.float32, "U8": np.uint8, "F16": np.float16,
          "I32": np.int32, "I64": np.int64, "F64": np.float64}
_ELEM_SIZE = {"BF16": 2, "F32": 4, "U8": 1, "F16": 2, "I32": 4, "I64": 8, "F64": 8}


def _write_safetensors(path: str, items: list):
    """Write one safetensors file. items: list of (full_name, dtype_str, np.ndarray) in file order.

    Header JSON is space-padded to a multiple of 8 bytes; tensors are back to back, no gaps.
    """
    header = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, dt, arr in items:
        n = arr.size * _ELEM_SIZE[dt]
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, dt, arr in items:
            f.write(np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())


def _group_key(name: str):
    """Shard-grouping key: ('L', i) for model.layers.{i}.*, ('G',) for other text, ('X',) for extras."""
    parts = name.split(".")
    if name.startswith("model.layers.") and len(parts) > 2 and parts[2].isdigit():
        return (0, int(parts[2]))
    return (1, 0)


def write_checkpoint(out_dir, config: dict, tensors: dict, n_shards: int = 2,
                     prefix: str = "language_model.", extra_tensors: dict | None = None):
    """Write a sharded K3-style checkpoint (k3-architecture.md §2.7).

    out_dir: created if missing. config: the (wrapper) config dict → config.json (indent 2).
    tensors: {name_without_prefix: (dtype_str, ndarray in storage dtype: BF16→uint16 bits,
              F32→float32, U8→uint8)}; written as prefix+name.
    extra_tensors: same format, names written as given (e.g. vision_tower.*); go in the last shard.
    Files: model-{k:05d}-of-{n:06d}.safetensors, k = 1..n; each layer's tensors stay in one shard;
    layers are split into n contiguous runs; globals + extras go to the last shard. Inside each
    shard tensors are in lexicographic order of full name. Also writes
    model.safetensors.index.json = {"metadata": {"total_size": sum of tensor bytes}, "weight_map"}.
    """
    if n_shards < 1:
        raise ValueError("n_shards must be >= 1")
    os.makedirs(out_dir, exist_ok=True)
    full = []
    for name, (dt, arr) in tensors.items():
        full.append((prefix + name, dt, np.asarray(arr), _group_key(name)))
    for name, (dt, arr) in (extra_tensors or {}).items():
        full.append((name, dt, np.asarray(arr), (2, 0)))
    for name, dt, arr, _ in full:
        if dt not in _NP_OF:
            raise ValueError(f"tensor {name}: unsupported dtype {dt}")
        if arr.dtype != np.dtype(_NP_OF[dt]):
            raise ValueError(f"tensor {name}: dtype {dt} needs numpy {np.dtype(_NP_OF[dt])}, got {arr.dtype}")
    layer_ids = sorted({g[1] for *_, g in full if g[0] == 0})
    shard_of_layer = {}
    n_layer_shards = max(1, n_shards - 1) if n_shards > 1 else 1
    for j, li in enumerate(layer_ids):
        shard_of_layer[li] = j * n_layer_shards // max(1, len(layer_ids))
    shards = [[] for _ in range(n_shards)]
    for name, dt, arr, g in full:
        k = shard_of_layer[g[1]] if g[0] == 0 else n_shards - 1
        shards[k].append((name, dt, arr))
    weight_map = {}
    total = 0
    for k, items in enumerate(shards):
        items.sort(key=lambda t: t[0])
        fname = f"model-{k + 1:05d}-of-{n_shards:06d}.safetensors"
        _write_safetensors(os.path.join(out_dir, fname), items)
        for name, dt, arr in items:
            weight_map[name] = fname
            total += arr.size * _ELEM_SIZE[dt]
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total},
                   "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def read_safetensors_header(path: str):
    """Return (header dict without __metadata__, data start offset) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: truncated safetensors header length")
        (n,) = struct.unpack("<Q", raw)
        if n > 100_000_000:
            raise ValueError(f"{path}: header length {n} is implausible")
        hb = f.read(n)
        if len(hb) != n:
            raise ValueError(f"{path}: truncated safetensors header")
    hdr = json.loads(hb.decode("utf-8"))
    hdr.pop("__metadata__", None)
    return hdr, 8 + n


def read_checkpoint(d, prefix: str = "language_model.", include_extra: bool = False):
    """Read a (sharded or single-file) checkpoint directory.

    Returns (config dict, {name_without_prefix: ndarray}); BF16 decoded to float32, F32 as float32,
    U8 as uint8 (memmap-backed, read-only). Tensors without `prefix` (vision) are skipped unless
    include_extra, in which case they are returned under their full name.
    Raises ValueError naming the file/tensor on a bad header, dtype or out-of-range offsets.
    """
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    idx_path = os.path.join(d, "model.safetensors.index.json")
    weight_map = None
    if os.path.exists(idx_path):
        try:
            with open(idx_path) as f:
                weight_map = json.load(f)["weight_map"]
        except (ValueError, KeyError) as ex:
            raise ValueError(f"{idx_path}: malformed index ({ex})") from None
        files = sorted(set(weight_map.values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        path = os.path.join(d, fn)
        if not os.path.exists(path):
            raise ValueError(f"{idx_path}: lists missing shard file {fn}")
        hdr, start = read_safetensors_header(path)
        if weight_map is not None:
            for name in hdr:
                if weight_map.get(name) != fn:
                    raise ValueError(f"{path}: tensor {name} is not mapped to this file in {idx_path}")
            for name, f2 in weight_map.items():
                if f2 == fn and name not in hdr:
                    raise ValueError(f"{idx_path}: tensor {name} mapped to {fn} but absent from its header")
        size = os.path.getsize(path)
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        for name, info in hdr.items():
            dt = info["dtype"]
            if dt not in _NP_OF:
                raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
            shape = tuple(info["shape"])
            a, b = info["data_offsets"]
            nbytes = int(np.prod(shape, dtype=np.int64)) * _ELEM_SIZE[dt]
            if b - a != nbytes or start + b > size or a < 0:
                raise ValueError(f"{path}: tensor {name}: bad data_offsets {info['data_offsets']} for {dt}{list(shape)}")
            arr = mm[start + a:start + b].view(_NP_OF[dt]).reshape(shape)
            if dt == "BF16":
                arr = bf16_bits_to_f32(arr)
            if name.startswith(prefix):
                out[name[len(prefix):]] = arr
            elif include_extra:
                out[name] = arr
    return cfg, out
