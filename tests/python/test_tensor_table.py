"""The Python tensor name lists against the C++ tensor table (src/io/tensor_table.cpp).

`k3 tensors CONFIG --json` prints what the table expects for a config.json; these tests check,
for config variants that switch every optional row on and off:
- tools/reference/k3_checkpoint.tensor_inventory (used by k3_ref, gen_tiny, the trainer's
  exporter and the GGUF exporter's validation): the same names, dtypes and shapes, in order;
- tools/train/model.K3Model: its parameters are exactly the table's tensors (stacked experts
  expanded), with the table's logical shapes;
- tools/gguf_export/export.plan: it reads exactly the table's tensors.

The binary is $K3_BIN, else build/tools/cli/k3.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))

import gen_tiny  # noqa: E402
import k3_checkpoint as kc  # noqa: E402

K3 = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "tools", "cli", "k3"))


def _variants():
    """(id, wrapper config) pairs: the generator's variants, the trainer's K3-mini geometry and
    configs turning each optional row (lm_head, MLA g_proj, latent norm, shared experts) off."""
    out = [(v, gen_tiny.variant_config(v)) for v in gen_tiny.VARIANTS if v != "many_experts"]
    out.append(("no_optional_rows", kc.make_config(mla_use_output_gate=False, latent_moe_use_norm=False,
                                                   num_shared_experts=0)))
    tied = kc.make_config(tie_word_embeddings=True)
    out.append(("tied_embeddings", tied))
    out.append(("five_layers", kc.make_config(num_hidden_layers=5)))
    from tools.train.config import mini_text_config
    mini = kc.make_config()
    mini["text_config"] = mini_text_config(vocab_size=512, hidden=64, n_experts=4, moe_inter=64, latent=64,
                                           dense_inter=96)
    out.append(("k3_mini_geometry", mini))
    return out


VARIANTS = _variants()


def table_listing(tmp_path, cfg: dict) -> dict:
    assert os.path.exists(K3), f"k3 binary not found at {K3} (build it, or set K3_BIN)"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = subprocess.run([K3, "tensors", str(path), "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("variant", [v[0] for v in VARIANTS])
def test_inventory_matches_the_table(tmp_path, variant):
    cfg = dict(VARIANTS)[variant]
    listing = table_listing(tmp_path, cfg)
    want = [(t["name"], t["dtype"], tuple(t["shape"])) for t in listing["tensors"]]
    got = [(n, d, tuple(s)) for n, d, s in kc.tensor_inventory(kc.text_config(cfg))]
    assert got == want


def test_listing_carries_the_table_rows(tmp_path):
    listing = table_listing(tmp_path, kc.make_config(tie_word_embeddings=True))
    kinds = {k["id"]: k for k in listing["kinds"]}
    assert kinds["lm_head"]["present"] is False and kinds["lm_head"]["when"] == "!tie_word_embeddings"
    assert kinds["kda.A_log"]["zero_padded"] is True and kinds["kda.A_log"]["dtypes"] == ["F32"]
    assert kinds["expert.w1"]["storage"] == "mxfp4"
    assert kinds["expert.w1"]["pattern"] == "model.layers.{il}.block_sparse_moe.experts.{e}.w1"
    assert all(t["kind"] in kinds for t in listing["tensors"])
    assert not any(t["name"] == "lm_head.weight" for t in listing["tensors"])


def _logical(listing: dict) -> dict:
    """{logical tensor name: logical shape}: Mxfp4 pairs folded to their base."""
    out = {}
    for t in listing["tensors"]:
        name = t["name"]
        for suf in (".weight_packed", ".weight_scale"):
            if t["kind"].startswith("expert.") and name.endswith(suf):
                name = name[: -len(suf)]
        out[name] = tuple(t["logical_shape"])
    return out


@pytest.mark.parametrize("variant", ["k3", "no_optional_rows", "k3_mini_geometry"])
def test_trainer_parameters_are_the_table(tmp_path, variant):
    from tools.train.model import K3Model
    tc = kc.text_config(dict(VARIANTS)[variant])
    want = _logical(table_listing(tmp_path, dict(VARIANTS)[variant]))
    got = {}
    for name, t in K3Model(copy.deepcopy(tc)).state_dict().items():
        stem, _, w = name.rpartition(".experts_")
        if w in ("w1", "w2", "w3"):  # stacked [E, out, in] -> experts.{e}.wN
            for e in range(t.shape[0]):
                got[f"{stem}.experts.{e}.{w}"] = tuple(t.shape[1:])
        else:
            got[name] = tuple(t.shape)
    assert got == want


class _RecordingCheckpoint:
    """What export.plan needs of a checkpoint: the text config and tensors (zeros of the
    table's stored dtype and shape), recording every name read."""

    def __init__(self, tc: dict, listing: dict):
        self.tc = tc
        self.stored = {t["name"]: (t["dtype"], tuple(t["shape"])) for t in listing["tensors"]}
        self.read = set()

    def tensor(self, name: str) -> np.ndarray:
        dt, shape = self.stored[name]
        self.read.add(name)
        return np.zeros(shape, dtype={"BF16": np.uint16, "F32": np.float32, "U8": np.uint8}[dt])


@pytest.mark.parametrize("variant", ["k3", "no_optional_rows", "tied_embeddings"])
def test_gguf_exporter_reads_the_table(tmp_path, variant):
    from tools.gguf_export.export import plan
    cfg = dict(VARIANTS)[variant]
    listing = table_listing(tmp_path, cfg)
    ck = _RecordingCheckpoint(kc.text_config(cfg), listing)
    for p in plan(ck):
        p.produce()
    assert ck.read == set(ck.stored)
