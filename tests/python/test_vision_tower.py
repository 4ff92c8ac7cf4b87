"""`k3 vision` against the fp64 reference tools/reference/vision_ref.py (shared spec vision.md §4-§5).

Tiny random towers from gen_tiny --vision (two shapes: head dim = width/heads with a 6x4 position
table, and K3's wider qkv with a 4x4 table) on several grids: the smallest (2x2), square,
non-square both ways, the table's own size (no interpolation), larger than the table
(upsampling), and 24x20 = 480 patches (several 64-row query tiles and 256-row key tiles of the
online softmax). Per token the rel-L2 of the exact fp32 engine against fp64 must stay below 1e-5;
every named intermediate (--dump) is compared the same way. Also: a batch of images in one call
equals the images alone, `k3 tensors` lists gen_tiny's vision inventory, a text-only model is
refused, a wrong-shape vision tensor is named.

The binary is $K3_BIN, else build/tools/cli/k3.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))

import gen_tiny  # noqa: E402
import k3_checkpoint as kc  # noqa: E402
import vision_ref  # noqa: E402

K3 = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "tools", "cli", "k3"))
TOL = 1e-5
GRIDS = {"tiny": [(2, 2), (4, 6), (6, 4), (8, 8), (12, 10), (24, 20)],
         "wide_qkv": [(2, 2), (4, 4), (2, 8), (10, 6)]}
MEASURED = {}  # (tower, grid) -> max per-token rel-L2, printed by the last test


def k3(*args):
    assert os.path.exists(K3), f"k3 binary not found at {K3} (build it, or set K3_BIN)"
    return subprocess.run([K3, *map(str, args)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="2"))


def per_token_rel(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.fixture(scope="module", params=list(GRIDS))
def tower(request, tmp_path_factory):
    d = str(tmp_path_factory.mktemp(f"vision_{request.param}"))
    gen_tiny.generate(d, "k3", seed=3, vision=request.param)
    gen_tiny.write_byte_tokenizer(d)
    return request.param, d, vision_ref.Tower(d)


def patches(h, w, seed):
    return np.random.default_rng([h, w, seed]).uniform(-1, 1, (h * w, 3, 14, 14)).astype(np.float32)


def test_tower_matches_the_fp64_reference(tower, tmp_path):
    name, d, tw = tower
    for h, w in GRIDS[name]:
        p = patches(h, w, 1)
        pf = tmp_path / f"p{h}x{w}.npy"
        np.save(pf, p)
        out, dump = tmp_path / f"e{h}x{w}.npy", tmp_path / f"dump{h}x{w}"
        r = k3("vision", "-m", d, "--patches", pf, "--grid", f"{h},{w}", "--out", out, "--dump", dump)
        assert r.returncode == 0, r.stderr
        n = (h // 2) * (w // 2)
        assert f"grid {h}x{w}, {h * w} patches, {n} tokens" in r.stdout, r.stdout
        ref = {}
        want = vision_ref.encode(tw, p, h, w, dump=lambda k, a: ref.__setitem__(k, a))
        got = np.load(out)
        assert got.shape == (n, tw.vc["text_hidden_size"]) and got.dtype == np.float32
        rel = per_token_rel(got, want)
        MEASURED[(name, f"{h}x{w}")] = float(rel.max())
        assert rel.max() < TOL, (name, h, w, rel)
        names = json.load(open(dump / "manifest.json"))["tensors"]
        assert names == list(ref), (names, list(ref))
        for k in names:
            a = np.load(dump / f"{k}.npy")
            assert a.shape == ref[k].shape, k
            assert per_token_rel(a, ref[k]).max() < TOL, (name, h, w, k)


def test_batch_equals_images_alone(tower, tmp_path):
    name, d, tw = tower
    grids = GRIDS[name][:3]
    args, outs = [], []
    for i, (h, w) in enumerate(grids):
        pf = tmp_path / f"b{i}.npy"
        np.save(pf, patches(h, w, 2).reshape(h * w, 588))
        args += ["--patches", pf, "--grid", f"{h},{w}"]
        o = tmp_path / f"one{i}.npy"
        r = k3("vision", "-m", d, "--patches", pf, "--grid", f"{h},{w}", "--out", o)
        assert r.returncode == 0, r.stderr
        outs.append(np.load(o))
    r = k3("vision", "-m", d, *args, "--out", tmp_path / "all.npy")
    assert r.returncode == 0, r.stderr
    assert f"{len(grids)} image(s)" in r.stdout
    both = np.load(tmp_path / "all.npy")
    alone = np.concatenate(outs)
    assert both.shape == alone.shape
    assert per_token_rel(both, alone).max() < 1e-6


def test_tensor_listing_matches_the_generator(tower, tmp_path):
    name, d, tw = tower
    r = k3("tensors", d, "--json")
    assert r.returncode == 0, r.stderr
    listing = json.loads(r.stdout)["vision_tensors"]
    want = [(n, dt, tuple(s)) for n, dt, s in gen_tiny.vision_inventory(tw.vc)]
    assert [(t["name"], t["dtype"], tuple(t["shape"])) for t in listing] == want
    r = k3("info", d, "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["vision_tower"]["tensors"] == len(want)
    assert info["tensors"]["vision"] == len(want)


def test_text_only_model_is_refused(tmp_path):
    d = str(tmp_path / "text_only")
    gen_tiny.generate(d, "k3", seed=1)
    pf = tmp_path / "p.npy"
    np.save(pf, patches(2, 2, 3))
    r = k3("vision", "-m", d, "--patches", pf, "--grid", "2,2")
    assert r.returncode == 1
    assert f"{d} has no vision tower (vision_config in config.json is a placeholder" in r.stderr, r.stderr
    cfg = json.load(open(os.path.join(d, "config.json")))
    del cfg["vision_config"]
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    r = k3("vision", "-m", d, "--patches", pf, "--grid", "2,2")
    assert r.returncode == 1
    assert r.stderr.strip().endswith(f"{d} has no vision tower (no vision_config in config.json)"), r.stderr


def test_bad_inputs_are_named(tmp_path):
    d = str(tmp_path / "m")
    gen_tiny.generate(d, "k3", seed=2, vision="tiny")
    pf = tmp_path / "p.npy"
    np.save(pf, patches(2, 4, 4))
    cases = [
        (["--patches", pf, "--grid", "2,2"], "--patches '" + str(pf) + "': 8 patches, but --grid 2,2 needs 4"),
        (["--patches", pf, "--grid", "2x4"], "--grid: '2x4' is not H,W"),
        (["--patches", pf], "1 --patches but 0 --grid"),
        (["--patches", tmp_path / "missing.npy", "--grid", "2,4"], "missing.npy"),
    ]
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((8, 10), np.float32))
    cases.append((["--patches", bad, "--grid", "2,4"], "shape [8, 10], expected [n, 588] or [n, 3, 14, 14]"))
    odd = tmp_path / "odd.npy"
    np.save(odd, patches(3, 2, 5))
    cases.append((["--patches", odd, "--grid", "3,2"], "grid height 3 must be even"))
    i64 = tmp_path / "i64.npy"
    np.save(i64, np.zeros((4, 588), np.int64))
    cases.append((["--patches", i64, "--grid", "2,2"], "dtype '<i8' is not supported"))
    for args, needle in cases:
        r = k3("vision", "-m", d, *args)
        assert r.returncode != 0 and needle in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 2


def test_wrong_shape_vision_tensor_is_named(tmp_path):
    d = str(tmp_path / "m")
    cfg = gen_tiny.variant_config("k3")
    rng = np.random.default_rng(0)
    tensors = gen_tiny.random_tensors(kc.text_config(cfg), rng)
    cfg["vision_config"] = gen_tiny.vision_config("tiny", kc.text_config(cfg)["hidden_size"])
    extra = gen_tiny.random_vision_tensors(cfg["vision_config"], rng)
    extra["vision_tower.encoder.blocks.1.mlp.fc0.weight"] = ("BF16", kc.f32_to_bf16_bits(np.zeros((64, 16))))
    kc.write_checkpoint(d, cfg, tensors, n_shards=3, extra_tensors=extra)
    gen_tiny.write_byte_tokenizer(d)
    for cmd in (["info", d], ["vision", "-m", d, "--patches", "x.npy", "--grid", "2,2"]):
        r = k3(*cmd)
        assert r.returncode == 1
        assert ("tensor 'vision_tower.encoder.blocks.1.mlp.fc0.weight': shape [64, 16], expected [64, 32]"
                in r.stderr), r.stderr


def test_report_measured_error():
    """Prints the measured max per-token rel-L2 of each (tower, grid) (after the comparisons ran)."""
    if MEASURED:
        worst = max(MEASURED.values())
        print("\nk3 vision vs fp64 reference, max per-token rel-L2:",
              ", ".join(f"{k[0]} {k[1]}: {v:.2e}" for k, v in sorted(MEASURED.items())), f"(worst {worst:.2e})")
        assert worst < TOL
