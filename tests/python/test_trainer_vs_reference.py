"""Trainer model (tools/train/model.py) vs the fp64 numpy reference (tools/reference/k3_ref.py)
on a random K3-mini-shaped checkpoint written by the trainer's exporter: same logits to 1e-5."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "reference"))

import k3_checkpoint as kc  # noqa: E402
import k3_ref  # noqa: E402
from tools.train.config import mini_text_config  # noqa: E402
from tools.train.export import export_tensors, wrapper_config  # noqa: E402
from tools.train.model import K3Model, init_weights  # noqa: E402


def random_model(seed, vocab=512, n_ranks=256):
    cfg = mini_text_config(vocab_size=vocab, hidden=64, kda_heads=2, head_dim=32, mla_heads=2,
                           n_experts=8, top_k=2, moe_inter=32, latent=32, dense_inter=96)
    m = K3Model(cfg)
    init_weights(m, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():   # make every parameter non-trivial (AttnRes queries, A_log, biases, norms)
        for name, p in sorted(m.named_parameters()):
            if "res_proj" in name or name.endswith("A_log"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.add_(torch.randn(p.shape, generator=g) * 0.2)
            else:
                p.mul_(1 + 3 * torch.rand(p.shape, generator=g))
        for moe in m.moe_layers():
            moe.gate.e_score_correction_bias.copy_(torch.randn(cfg["num_experts"], generator=g) * 0.05)
    return cfg, m


@pytest.mark.parametrize("T", [7, 40])
def test_logits_match_reference(tmp_path, T):
    cfg, m = random_model(3)
    full = wrapper_config(cfg, 256)
    tensors, exact = export_tensors(full["text_config"], m.state_dict())
    kc.write_checkpoint(str(tmp_path), full, tensors, n_shards=3)
    ids = np.random.default_rng(5).integers(0, 512, size=T).tolist()
    ref = k3_ref.forward(str(tmp_path), ids)
    m.load_state_dict(exact)
    m = m.double().eval()
    for moe in m.moe_layers():
        moe.qat = False          # exported experts are already the dequantized MXFP4 values
    with torch.no_grad():
        got = m(torch.tensor([ids]))[0].numpy()
    rel = np.abs(got - ref).max() / np.abs(ref).max()
    print("fp64 rel", rel)
    assert rel < 1e-5, rel
    # float32 compute (what training/eval use) stays close as well
    m32 = m.float()
    with torch.no_grad():
        got32 = m32(torch.tensor([ids]))[0].double().numpy()
    rel32 = np.abs(got32 - ref).max() / np.abs(ref).max()
    print("fp32 rel", rel32)
    assert rel32 < 1e-3, rel32   # fp32 rounding, amplified by AttnRes (k3-architecture.md §6.8)
