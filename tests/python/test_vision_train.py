"""The torch MoonViT-V2 tower of the trainer (tools/train/vision_tower.py) equals the engine.

A random tower with the demo model's widths (vision_tower.vision_config: 4 blocks, width 64, qkv
64 in 2 heads, an 8×8 position table, projector to the text width), rounded to BF16 and written with a tiny
random text model, is run by `k3 vision --numerics exact --out` and by the torch forward on the
same pixels: per-token rel-L2 below 1e-5 on a 112×112 picture (the table's own grid) and on a
140×84 one (grid 6×10: the bilinear table resize). The committed demo model's trained tower
(models/k3-mini-vision) is checked the same way on an example picture. Also: the picture
generator's answers and the patch layout (vision.md §3.4).
The binary is $K3_BIN, else build/tools/cli/k3.
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "reference"))

import gen_tiny  # noqa: E402
import k3_checkpoint as kc  # noqa: E402
from tools.train import vision_data as vd  # noqa: E402
from tools.train.vision_tower import VisionTower, init_vision, pixel_patches, vision_config  # noqa: E402

K3 = os.environ.get("K3_BIN", str(ROOT / "build" / "tools" / "cli" / "k3"))
DEMO = ROOT / "models" / "k3-mini-vision"
TOL = 1e-5


def engine_rows(model_dir, image, out):
    assert os.path.exists(K3), f"k3 binary not found at {K3} (build it, or set K3_BIN)"
    r = subprocess.run([K3, "vision", "-m", str(model_dir), "--image", str(image), "--numerics", "exact",
                        "-t", "1", "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return np.load(out)


def torch_rows(tower, image):
    img = torch.from_numpy(np.asarray(Image.open(image).convert("RGB")))[None]
    P, grid = pixel_patches(img)
    with torch.no_grad():
        return tower(P, grid)[0].double().numpy()


def per_token_rel(a, b):
    return np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.fixture(scope="module")
def random_tower(tmp_path_factory):
    d = tmp_path_factory.mktemp("torch_tower")
    cfg = gen_tiny.variant_config("k3")
    tc = kc.text_config(cfg)
    vc = vision_config(text_hidden=tc["hidden_size"])
    cfg["vision_config"] = vc
    tower = VisionTower(vc)
    init_vision(tower, 7, out_rms=0.7)
    extra = {}
    with torch.no_grad():
        for name, p in tower.named_parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))))  # non-trivial norms
            bits = kc.f32_to_bf16_bits(p.float().numpy())
            extra[name] = ("BF16", bits)
            p.copy_(torch.from_numpy(kc.bf16_bits_to_f32(bits).copy()).reshape(p.shape))
    tensors = gen_tiny.random_tensors(tc, np.random.default_rng(0))
    kc.write_checkpoint(str(d), cfg, tensors, n_shards=2, extra_tensors=extra)
    gen_tiny.write_byte_tokenizer(str(d))
    return d, tower


@pytest.mark.parametrize("size", [(112, 112), (140, 84)])
def test_torch_tower_equals_engine(random_tower, tmp_path, size):
    d, tower = random_tower
    rng = np.random.default_rng(size[0])
    img = tmp_path / "pic.png"
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(img)
    eng = engine_rows(d, img, tmp_path / "e.npy")
    ref = torch_rows(tower, img)
    assert eng.shape == ref.shape == ((size[1] // 28) * (size[0] // 28), tower.vc["text_hidden_size"])
    rel = per_token_rel(eng, ref).max()
    print(f"torch vs engine {size}: max per-token rel-L2 {rel:.2e}")
    assert rel < TOL


def test_demo_tower_equals_engine(tmp_path):
    assert (DEMO / "config.json").exists(), f"{DEMO}: the committed demo model is missing"
    _, t = kc.read_checkpoint(str(DEMO), include_extra=True)
    import json
    vc = json.loads((DEMO / "config.json").read_text())["vision_config"]
    tower = VisionTower(vc)
    tower.load_state_dict({k: torch.from_numpy(np.asarray(t[k], np.float32).copy()) for k in tower.state_dict()})
    img = ROOT / "examples" / "three_red_circles.png"
    eng = engine_rows(DEMO, img, tmp_path / "e.npy")
    rel = per_token_rel(eng, torch_rows(tower, img)).max()
    print(f"demo tower torch vs engine: max per-token rel-L2 {rel:.2e}")
    assert rel < TOL


def test_picture_answers_and_patch_layout():
    assert vd.answers("red", "circle", 3) == {"describe": "Three red circles.", "colour": "Red.",
                                              "shape": "Circles.", "count": "Three."}
    assert vd.answers("blue", "square", 1)["describe"] == "One blue square."
    img = torch.zeros(1, 28, 28, 3, dtype=torch.uint8)
    img[0, 3, 17, 2] = 255                       # row 3, column 17 (patch (0, 1)), channel 2
    P, grid = pixel_patches(img)
    assert grid == (2, 2) and P.shape == (1, 4, 588)
    hot = torch.nonzero(P[0] > 0).tolist()
    assert hot == [[1, 2 * 196 + 3 * 14 + 3]]    # patch r·w + c = 1; ch·196 + ky·14 + kx
    assert P.min().item() == -1.0
