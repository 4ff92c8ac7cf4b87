"""The shipped models/k3-mini checkpoint: layout, tokenizer files, MXFP4 experts, and the fp64
reference reproducing the first greedy tokens recorded in greedy.json."""
import base64
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "k3-mini"
sys.path.insert(0, str(ROOT / "tools" / "reference"))

import k3_checkpoint as kc  # noqa: E402
import k3_ref  # noqa: E402


def test_layout_and_tokenizer_files():
    cfg = json.loads((MODEL / "config.json").read_text())
    tc = cfg["text_config"]
    ranks = [base64.b64decode(l.split()[0]) for l in (MODEL / "tiktoken.model").read_text().splitlines()]
    n = len(ranks)
    assert sorted(r for r in ranks if len(r) == 1) == [bytes([b]) for b in range(256)]
    assert len(set(ranks)) == n and tc["vocab_size"] == n + 256
    assert (cfg["bos_token_id"], cfg["eos_token_id"], cfg["pad_token_id"]) == (n, n + 2, n + 255)
    assert cfg["architectures"] == ["KimiK3ForConditionalGeneration"]
    assert tc["linear_attn_config"]["full_attn_layers"][-2:] == [8, 9]
    assert tc["quantization_config"]["format"] == "mxfp4-pack-quantized"
    dec = json.loads((MODEL / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    assert len(dec) == 256
    assert dec[str(n)]["content"] == "[BOS]" and dec[str(n + 2)]["content"] == "<|end_of_msg|>"
    assert dec[str(n + 4)] == {**dec[str(n + 4)], "content": "<|close|>", "special": False}
    assert dec[str(n + 65)]["content"] == "<osagent_mode>" and dec[str(n + 255)]["content"] == "[PAD]"
    assert dec[str(n + 10)]["content"] == f"<|reserved_token_{n + 10}|>"
    size = sum(p.stat().st_size for p in MODEL.iterdir())
    assert size < 30e6
    idx = json.loads((MODEL / "model.safetensors.index.json").read_text())
    assert all(k.startswith("language_model.") for k in idx["weight_map"])


def test_experts_are_mxfp4_with_valid_scales():
    _, t = kc.read_checkpoint(str(MODEL))
    w = kc.mxfp4_dequantize(t["model.layers.1.block_sparse_moe.experts.0.w1.weight_packed"],
                            t["model.layers.1.block_sparse_moe.experts.0.w1.weight_scale"])
    packed, scale = kc.mxfp4_quantize(w)                 # the bytes ARE the weights: re-encoding is exact
    assert np.array_equal(packed, t["model.layers.1.block_sparse_moe.experts.0.w1.weight_packed"])
    assert np.array_equal(scale, t["model.layers.1.block_sparse_moe.experts.0.w1.weight_scale"])
    g = np.abs(w).reshape(w.shape[0], -1, 32).max(-1) / np.ldexp(1.0, scale.astype(int) - 127)
    assert np.all((g > 3) & (g <= 6))                    # k3-architecture.md §4 check


def test_reference_reproduces_first_greedy_tokens():
    gr = json.loads((MODEL / "greedy.json").read_text())
    p = gr["prompts"][0]
    assert p["prompt"] == "And God said" and len(p["greedy_ids"]) == 64
    assert k3_ref.greedy(str(MODEL), p["prompt_ids"], 4) == p["greedy_ids"][:4]
