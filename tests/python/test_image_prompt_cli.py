"""Images into the text model from the CLI: `k3 logits --image` and `k3 run --image` on a gen_tiny
checkpoint with a tiny random vision tower (gen_tiny --vision tiny) and the byte tokenizer.

- The rendered ids hold the K3 media block (shared/spec/vision.md §6.1) with one <|media_pad|> per
  image token, as many as `k3 vision` says the image has.
- `k3 logits --image` equals the fp64 text reference (tools/reference/k3_ref.py) fed the same
  rows at the pad positions: k3's own tower output within the text contract (1e-5 rel-L2 per
  position), and the whole fp64 chain (vision_ref.py's tower + k3_ref.py) within 1e-4.
- `k3 run --image` renders one user turn (repeatable --image), refuses an image on a text-only
  checkpoint, and its disk prefix cache reuses the same image and never a different one.

The binary is $K3_BIN, else build/tools/cli/k3.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))

import gen_tiny  # noqa: E402
import k3_ref  # noqa: E402
import vision_ref  # noqa: E402

K3 = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "tools", "cli", "k3"))
PAD = 256 + 21  # <|media_pad|> (163605 = N + 21) after the byte tokenizer's 256 ranks
ENV = dict(os.environ, OMP_NUM_THREADS="2", K3_KERNELS=os.environ.get("K3_KERNELS", "ref"))


def k3(*args, check=True):
    assert os.path.exists(K3), f"k3 binary not found at {K3} (build it, or set K3_BIN)"
    r = subprocess.run([K3, *map(str, args)], capture_output=True, text=True, timeout=300, env=ENV)
    if check:
        assert r.returncode == 0, f"k3 {' '.join(map(str, args))}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("img_model"))
    gen_tiny.generate(d, "k3", seed=5, vision="tiny")
    gen_tiny.write_byte_tokenizer(d)
    return d


@pytest.fixture(scope="module")
def text_only(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("txt_model"))
    gen_tiny.generate(d, "k3", seed=5)
    gen_tiny.write_byte_tokenizer(d)
    return d


def picture(path, w, h, seed):
    from PIL import Image
    a = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    Image.fromarray(a, "RGB").save(path)
    return str(path)


def ids_file(p):
    return [int(x) for x in open(p).read().strip().split(",")]


def pad_runs(ids):
    runs, i = [], 0
    while i < len(ids):
        if ids[i] == PAD:
            j = i
            while j < len(ids) and ids[j] == PAD:
                j += 1
            runs.append((i, j - i))
            i = j
        else:
            i += 1
    return runs


def rel_rows(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)


def test_logits_image_equals_the_reference_fed_the_same_rows(model, tmp_path):
    img = picture(tmp_path / "a.png", 84, 56, 1)  # grid 4x6 -> 6 image tokens
    k3("logits", "-m", model, "--image", img, "-p", "What is in the picture?", "--out", tmp_path / "l.npy",
       "--ids-out", tmp_path / "ids.txt")
    ids = ids_file(tmp_path / "ids.txt")
    k3("vision", "-m", model, "--image", img, "--out", tmp_path / "e.npy")
    rows = np.load(tmp_path / "e.npy")
    assert pad_runs(ids) == [(pad_runs(ids)[0][0], rows.shape[0])] and rows.shape[0] == 6
    pos = pad_runs(ids)[0][0]
    # the media block around the pads: <|media_begin|>image 84x56<|media_content|> ... <|media_end|>
    assert ids[pos - 1] == 256 + 19 and ids[pos + 6] == 256 + 20
    assert bytes(ids[pos - 12:pos - 1]) == b"image 84x56" and ids[pos - 13] == 256 + 18
    got = np.load(tmp_path / "l.npy")
    assert got.shape[0] == len(ids) and np.all(np.isfinite(got))
    want = k3_ref.forward(model, ids, embed_rows=[(pos, rows)])
    rel = rel_rows(got, want)
    assert rel.max() < 1e-5, rel.max()
    # the whole fp64 chain: the reference tower on the same patches, then the reference text model
    k3("image-info", "--image", img, "--out", tmp_path / "p.npy")
    p = np.load(tmp_path / "p.npy").reshape(-1, 3, 14, 14)
    rows64 = vision_ref.encode(vision_ref.Tower(model), p, 4, 6)
    want64 = k3_ref.forward(model, ids, embed_rows=[(pos, rows64)])
    rel64 = rel_rows(got, want64)
    print(f"\nk3 logits --image vs fp64 tower + fp64 text model: max rel-L2 per position {rel64.max():.2e}")
    assert rel64.max() < 1e-4, rel64.max()
    # the image matters: the rows after the image differ from the same ids without image rows
    plain = k3_ref.forward(model, ids)
    assert rel_rows(got[pos:], plain[pos:]).min() > 1e-4


def test_run_image_renders_one_user_turn_with_every_image(model, tmp_path):
    a, b = picture(tmp_path / "a.png", 84, 56, 1), picture(tmp_path / "b.jpg", 56, 56, 2)
    r = k3("run", "-m", model, "--image", a, "--image", b, "-p", "Compare them.", "-n", "3", "--temp", "0",
           "--json", "--no-think")
    j = json.loads(r.stdout)
    ids = j["prompt_ids"]
    assert [n for _, n in pad_runs(ids)] == [6, 4]
    assert bytes(x for x in ids if x < 256).find(b"Compare them.") > 0
    assert len(j["ids"]) == 3
    # the same run gives the same ids (greedy), and another picture changes what the model sees
    assert json.loads(k3("run", "-m", model, "--image", a, "--image", b, "-p", "Compare them.", "-n", "3",
                         "--temp", "0", "--json", "--no-think").stdout)["ids"] == j["ids"]


def test_image_errors_are_clear(model, text_only, tmp_path):
    img = picture(tmp_path / "a.png", 56, 56, 3)
    r = k3("run", "-m", text_only, "--image", img, "-p", "hi", check=False)
    assert r.returncode != 0 and "no vision tower" in r.stderr, r.stderr
    r = k3("logits", "-m", text_only, "--image", img, "-p", "hi", check=False)
    assert r.returncode != 0 and "no vision tower" in r.stderr, r.stderr
    bad = tmp_path / "bad.png"
    bad.write_bytes(open(img, "rb").read()[:60])
    r = k3("run", "-m", model, "--image", bad, "-p", "hi", check=False)
    assert r.returncode != 0 and "bad.png" in r.stderr, r.stderr
    r = k3("run", "-m", model, "--image", img, "--prompt-ids", "1,2", check=False)
    assert r.returncode != 0 and "--image" in r.stderr, r.stderr
    r = k3("logits", "-m", model, "--image", img, check=False)
    assert r.returncode != 0 and "-p TEXT" in r.stderr, r.stderr


def test_prefix_cache_reuses_the_same_image_and_never_another(model, tmp_path):
    a, b = picture(tmp_path / "a.png", 84, 56, 1), picture(tmp_path / "b.png", 84, 56, 2)
    cache = tmp_path / "cache"
    text = "Describe the picture in detail, please. " * 6  # ~240 byte tokens after the image

    def run(img):
        r = k3("run", "-m", model, "--image", img, "-p", text, "-n", "2", "--temp", "0", "--no-think",
               "--cache-dir", cache, "--cache-ram", "64", "--json")
        m = re.search(r"cache: reused (\d+)/(\d+) tok", r.stderr)
        assert m, r.stderr
        j = json.loads(r.stdout)
        return j["ids"], int(m.group(1)), pad_runs(j["prompt_ids"])[0]

    ids_a, reused, (pos, n) = run(a)
    assert reused == 0 and n == 6
    ids_a2, reused, _ = run(a)  # the same picture: its blocks come back from the disk tier
    assert reused >= pos + n and ids_a2 == ids_a
    ids_b, reused, _ = run(b)  # same ids, another picture: no block holding the image is shared
    assert reused <= pos
    ids_b2, reused, _ = run(b)
    assert reused >= pos + n and ids_b2 == ids_b
    ids_a3, reused, _ = run(a)  # the first picture is still there
    assert reused >= pos + n and ids_a3 == ids_a


def chat(model, stdin, *flags):
    assert os.path.exists(K3)
    return subprocess.run([K3, "chat", "-m", model, "--no-think", "-n", "3", "--temp", "0", *map(str, flags)],
                          input=stdin, capture_output=True, text=True, timeout=300, env=ENV)


def test_chat_image_attaches_a_picture_to_the_next_message(model, text_only, tmp_path):
    img = picture(tmp_path / "a.png", 84, 56, 1)
    state = tmp_path / "chat.k3state"
    r = chat(model, f"/image {img}\nWhat is in the picture?\nAnd now?\n", "--state-save", state)
    assert r.returncode == 0, r.stderr
    assert f"attached '{img}' (84x56, 6 image tokens) to the next message" in r.stderr, r.stderr
    saved = state.read_bytes()
    assert b'"image_url"' in saved and img.encode() in saved
    # resumed: the picture is read again from its path and the conversation continues
    r = chat(model, "Once more?\n", "--state-load", state)
    assert r.returncode == 0, r.stderr
    # a bad file and a text-only checkpoint: the picture is not attached, the chat goes on
    r = chat(model, f"/image {tmp_path}/missing.png\nhi\n")
    assert r.returncode == 0 and "picture not attached" in r.stderr, r.stderr
    r = chat(text_only, f"/image {img}\nhi\n")
    assert r.returncode == 0 and "picture not attached" in r.stderr and "no vision tower" in r.stderr, r.stderr
