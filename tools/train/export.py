"""Export a trained K3-mini to the published K3 layout (k3-architecture.md §1, §2, §4).

Reads WORK/trained.pt (fp32 master weights) and writes OUT/:
  config.json (wrapper with text_config, linear_attn_config, quantization_config),
  model-0000k-of-00000n.safetensors + model.safetensors.index.json (`language_model.` names),
  tiktoken.model, tokenizer_config.json.
Rounding: BF16 tensors RNE to bf16; F32 small tensors as is (A_log zero-padded to head_dim as in K3);
routed experts: the STE fake-quant values (what the model trained with) packed by
k3_checkpoint.mxfp4_quantize, so dequantizing the bytes gives exactly the trained values.
Also writes WORK/exported.pt: the state dict holding exactly the exported values (float32) for eval.
Usage: python -m tools.train.export --work WORK --out OUT
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reference"))
import k3_checkpoint as kc  # noqa: E402

from tools.train.mxfp4_qat import fake_quant_mxfp4  # noqa: E402
from tools.train.tokenizer import NOT_SPECIAL, special_names  # noqa: E402


def wrapper_config(tc, n_ranks):
    """Full wrapper config.json for a text_config with N = n_ranks BPE ranks."""
    over = {k: v for k, v in tc.items() if k not in ("linear_attn_config",)}
    over.update(bos_token_id=n_ranks, eos_token_id=n_ranks + 2, pad_token_id=n_ranks + 255,
                max_position_embeddings=1048576)
    cfg = kc.make_config(**over, linear_attn_config=dict(tc["linear_attn_config"]),
                         wrapper={"media_placeholder_token_id": n_ranks + 21})
    cfg["text_config"]["linear_attn_config"] = dict(tc["linear_attn_config"])
    return cfg


def tokenizer_config(n_ranks):
    dec = {}
    for i, name in special_names(n_ranks).items():
        dec[str(i)] = {"content": name, "lstrip": False, "normalized": False, "rstrip": False,
                       "single_word": False, "special": name not in NOT_SPECIAL}
    return {"added_tokens_decoder": dec, "bos_token": "[BOS]", "eos_token": "[EOS]",
            "pad_token": "[PAD]", "unk_token": "[UNK]", "model_max_length": 1048576,
            "tokenizer_class": "TikTokenTokenizer", "clean_up_tokenization_spaces": False}


def export_tensors(cfg_text, sd):
    """sd: trained state dict (fp32). Returns (tensors for write_checkpoint, exact float32 state dict)."""
    hd = cfg_text["linear_attn_config"]["head_dim"]
    H = cfg_text["linear_attn_config"]["num_heads"]
    a_pad = max(H, hd)
    tensors, exact = {}, {}
    for k, v in sd.items():
        exact[k] = v.detach().float().clone()
    stacked = {}
    for name, dt, shape in kc.tensor_inventory(cfg_text, a_log_pad_to=a_pad):
        if dt == "U8":
            parts = name.split(".")                      # model.layers.i.block_sparse_moe.experts.e.wN.weight_x
            e, w, kind = int(parts[5]), parts[6], parts[7]
            key = ".".join(parts[:4]) + f".experts_{w}"
            if key not in stacked:
                W = sd[key].detach().double()
                stacked[key] = [kc.mxfp4_quantize(fake_quant_mxfp4(W[j]).numpy()) for j in range(W.shape[0])]
                exact[key] = torch.from_numpy(np.stack(
                    [kc.mxfp4_dequantize(*pq) for pq in stacked[key]])).float()
                assert torch.equal(exact[key], fake_quant_mxfp4(sd[key].detach().float()))
            packed, scale = stacked[key][e]
            arr = packed if kind == "weight_packed" else scale
        else:
            src = sd[name].detach().float().numpy()
            if name.endswith("A_log"):
                src = np.concatenate([src, np.zeros(a_pad - src.size, np.float32)])
            src = src.reshape(shape)
            if dt == "BF16":
                arr = kc.f32_to_bf16_bits(src)
                exact[name] = torch.from_numpy(kc.bf16_bits_to_f32(arr).copy()).reshape(sd[name].shape)
            else:
                arr = np.ascontiguousarray(src, dtype=np.float32)
        assert tuple(arr.shape) == tuple(shape), (name, arr.shape, shape)
        tensors[name] = (dt, arr)
    return tensors, exact


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ckpt", default="trained.pt")
    a = ap.parse_args()
    work, out = Path(a.work), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    ck = torch.load(work / a.ckpt)
    tc = ck["cfg"]
    n_ranks = sum(1 for _ in open(work / "tiktoken.model"))
    assert tc["vocab_size"] == n_ranks + 256
    cfg = wrapper_config(tc, n_ranks)
    tensors, exact = export_tensors(cfg["text_config"], ck["state_dict"])
    for old in out.glob("model-*.safetensors"):
        old.unlink()
    kc.write_checkpoint(str(out), cfg, tensors, n_shards=3)
    shutil.copy(work / "tiktoken.model", out / "tiktoken.model")
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(n_ranks), indent=2) + "\n")
    torch.save({"cfg": tc, "state_dict": exact, "steps_done": ck["steps_done"], "wall_s": ck["wall_s"],
                "args": ck["args"], "final_loss_ema": ck["final_loss_ema"]}, work / "exported.pt")
    _, back = kc.read_checkpoint(str(out))
    assert set(back) == set(tensors), "round trip names"
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    print(json.dumps({"exported": str(out), "tensors": len(tensors), "dir_bytes": size}))


if __name__ == "__main__":
    main()
