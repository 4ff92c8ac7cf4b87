"""`k3 image-info --out` against an independent implementation of the K3 image preprocessing
(shared/spec/vision.md §3) built on Pillow (Debian's python3-pil) and numpy: Pillow opens the file
in its native mode and resizes it with BICUBIC (NEAREST for P and 1, premultiplied for RGBA / LA);
numpy does the chessboard compositing in float32, the padding, the normalisation and the patches.
The patches must be bit-identical (np.array_equal on float32).

Images are generated here: every PNG mode Pillow distinguishes (RGB, RGBA with alpha 0 over hidden
colours, palette with and without tRNS, 1-bit, 2/4/8-bit gray, gray + tRNS, 16-bit gray, RGB, RGBA
and gray+alpha, interlaced), JPEG (baseline, progressive, 4:4:4, gray, CMYK), WebP (lossless and
lossy, with and without alpha, animated), APNG. Each runs under K3's configuration (no resize at
these sizes: padding only) and under small patch budgets that force a resize (one of them with the
fill before the resize).

Malformed files (truncated, zero size, wrong magic, GIF, BMP, a decompression bomb, over the byte
limit) must give one error line naming the image, exit 1.
The binary is $K3_BIN, else build/tools/cli/k3.
"""
import io
import json
import math
import os
import struct
import subprocess
import zlib

import numpy as np
import pytest

PIL = pytest.importorskip("PIL", reason="python3-pil (scripts/setup.sh installs it)")
from PIL import Image  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K3 = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "tools", "cli", "k3"))

# Pillow 13 changed the BICUBIC pass order for tall shrinks and the colour of palette indices past
# the PLTE (k3 --pillow 13 follows both); it also opens 16-bit gray PNGs as I;16, which k3 does not
# model (k3 follows Pillow <= 12 there: mode I).
PILLOW_MAJOR = int(PIL.__version__.split(".")[0])
PILLOW_FLAG = ["--pillow", "13"] if PILLOW_MAJOR >= 13 else []
GRAY16 = ("gray16.png", "gray16_trns.png")

K3_CFG = dict(patch_size=14, merge_kernel_size=2, in_patch_limit=65536, patch_limit_on_one_side=512,
              image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], square=8, on_top_left=True, white=255,
              gray=180)


def k3(*args, timeout=60):
    assert os.path.exists(K3), f"k3 binary not found at {K3} (build it, or set K3_BIN)"
    return subprocess.run([K3, *[str(a) for a in args]], capture_output=True, timeout=timeout)


# ---- the reference pipeline (spec §3), independent of the C++ code ------------------------------

def target_size(w0, h0, cfg):
    """Spec §3.2 in Python floats (IEEE double)."""
    p, m = cfg["patch_size"], cfg["merge_kernel_size"]
    f = p * m
    side = cfg["patch_limit_on_one_side"] * p
    s1 = math.sqrt(cfg["in_patch_limit"] / (max(1, w0 // p) * max(1, h0 // p)))
    scale = min(1, s1, side / w0, side / h0)
    w1 = min(max(1, int(w0 * scale)), side)
    h1 = min(max(1, int(h0 * scale)), side)
    pw, ph = (f - w1 % f) % f, (f - h1 % f) % f
    return w1, h1, pw, ph


def chessboard(h, w, cfg):
    y, x = np.mgrid[0:h, 0:w]
    odd = ((y // cfg["square"]) + (x // cfg["square"])) % 2
    gray = odd == (1 if cfg["on_top_left"] else 0)
    return np.where(gray, cfg["gray"], cfg["white"]).astype(np.uint8)


def fill_transparent(im, cfg):
    """`fill_transparent_bg_with` (spec §3.1 and correction 3): float32, one rounding per operation."""
    if im.mode == "RGB":
        return np.asarray(im)
    if "A" not in im.getbands() and "transparency" not in im.info:
        return np.asarray(im.convert("RGB"))
    rgba = np.asarray(im.convert("RGBA"))
    alpha = rgba[..., 3].astype(np.float32) / np.float32(255)
    bg = chessboard(rgba.shape[0], rgba.shape[1], cfg).astype(np.float32)
    t1 = alpha[..., None] * rgba[..., :3].astype(np.float32)
    t2 = (np.float32(1) - alpha)[..., None] * bg[..., None]
    return (t1 + t2).astype(np.uint8)


def reference_patches(data, cfg):
    im = Image.open(io.BytesIO(data))
    w0, h0 = im.size
    w1, h1, pw, ph = target_size(w0, h0, cfg)
    mode = im.mode
    if cfg.get("before_resize"):  # fill first, resize the RGB result
        im = Image.fromarray(fill_transparent(im, cfg), "RGB")
    if (w1, h1) != (w0, h0):
        im = im.resize((w1, h1), Image.BICUBIC)
    rgb = fill_transparent(im, cfg)
    assert rgb.shape == (h1, w1, 3), rgb.shape
    rgb = np.pad(rgb, ((0, ph), (0, pw), (0, 0)))  # zeros at the bottom and right
    x = (rgb / 255.0).astype(np.float32)
    x = (x.astype(np.float64) - np.array(cfg["image_mean"])).astype(np.float32)
    x = (x.astype(np.float64) * (1.0 / np.array(cfg["image_std"]))).astype(np.float32)
    p = cfg["patch_size"]
    gh, gw = x.shape[0] // p, x.shape[1] // p
    patches = x.reshape(gh, p, gw, p, 3).transpose(0, 2, 4, 1, 3).reshape(gh * gw, 3 * p * p)
    return patches, (w0, h0), (w1, h1), (gh, gw), mode


# ---- image generators ----------------------------------------------------------------------------

def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def raw_png(samples, bit_depth, color_type, extra=b"", interlace=False):
    """A PNG from an integer array [h, w, samples per pixel] (values < 2**bit_depth), filter 0."""
    h, w = samples.shape[:2]
    per_px = samples.shape[2]

    def pack_rows(a):
        out = b""
        for row in a:
            flat = row.reshape(-1).astype(np.int64)
            if bit_depth == 16:
                line = flat.astype(">u2").tobytes()
            elif bit_depth == 8:
                line = flat.astype(np.uint8).tobytes()
            else:
                bits = "".join(format(int(v), f"0{bit_depth}b") for v in flat)
                bits += "0" * (-len(bits) % 8)
                line = bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))
            out += b"\0" + line
        return out

    if interlace:
        raw = b""
        for x0, y0, dx, dy in ADAM7:
            sub = samples[y0::dy, x0::dx]
            if sub.size:
                raw += pack_rows(sub.reshape(sub.shape[0], sub.shape[1], per_px))
    else:
        raw = pack_rows(samples)
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 1 if interlace else 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra + png_chunk(b"IDAT", zlib.compress(raw)) +
            png_chunk(b"IEND", b""))


def pil_bytes(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


def photo(rng, w, h):
    """Smooth colour gradients plus noise: exercises every filter tap."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / max(1, w - 1), y * 255 / max(1, h - 1), (x + y) * 127 / max(1, w + h - 2)], -1)
    return np.clip(base + rng.integers(-60, 61, (h, w, 3)), 0, 255).astype(np.uint8)


def make_images():
    rng = np.random.default_rng(1234)
    w, h = 75, 53
    rgb = photo(rng, w, h)
    alpha = rng.integers(0, 256, (h, w)).astype(np.uint8)
    alpha[:, :10] = 0          # fully transparent band over strong hidden colours
    alpha[:, 10:20] = 255
    rgba = np.dstack([rgb, alpha])
    rgba[:, :10, :3] = rng.integers(0, 256, (h, 10, 3))
    gray = rgb[..., 0]
    imgs = {}
    imgs["rgb.png"] = pil_bytes(Image.fromarray(rgb, "RGB"), "PNG")
    imgs["rgba.png"] = pil_bytes(Image.fromarray(rgba, "RGBA"), "PNG")
    imgs["l.png"] = pil_bytes(Image.fromarray(gray, "L"), "PNG")
    imgs["la.png"] = pil_bytes(Image.fromarray(np.dstack([gray, alpha]), "LA"), "PNG")
    # Palette: 200 colours, indices 0..209 (indices past the palette are gray in Pillow).
    pal = rng.integers(0, 256, (200, 3)).astype(np.uint8)
    idx = rng.integers(0, 210, (h, w, 1))
    plte = png_chunk(b"PLTE", pal.tobytes())
    imgs["p.png"] = raw_png(idx, 8, 3, plte)
    trns = rng.integers(0, 256, 150).astype(np.uint8)
    imgs["p_trns.png"] = raw_png(idx, 8, 3, plte + png_chunk(b"tRNS", trns.tobytes()))
    one_zero = np.full(200, 255, np.uint8)
    one_zero[7] = 0
    imgs["p_trns_single.png"] = raw_png(idx, 8, 3, plte + png_chunk(b"tRNS", one_zero.tobytes()))
    small_pal = png_chunk(b"PLTE", pal[:16].tobytes())
    imgs["p4.png"] = raw_png(rng.integers(0, 16, (h, w, 1)), 4, 3, small_pal + png_chunk(b"tRNS", bytes([0, 128])))
    imgs["p1.png"] = raw_png(rng.integers(0, 2, (h, w, 1)), 1, 3, png_chunk(b"PLTE", pal[:2].tobytes()))
    imgs["p2.png"] = raw_png(rng.integers(0, 4, (h, w, 1)), 2, 3, png_chunk(b"PLTE", pal[:3].tobytes()) +
                             png_chunk(b"tRNS", bytes([90])))
    # gAMA and sRGB are not applied (neither Pillow nor the reference applies them).
    imgs["gamma.png"] = raw_png(rgb, 8, 2, png_chunk(b"gAMA", struct.pack(">I", 22000)) + png_chunk(b"sRGB", b"\0"))
    imgs["gray1.png"] = raw_png(rng.integers(0, 2, (h, w, 1)), 1, 0)
    imgs["gray1_trns.png"] = raw_png(rng.integers(0, 2, (h, w, 1)), 1, 0, png_chunk(b"tRNS", struct.pack(">H", 0)))
    imgs["gray2.png"] = raw_png(rng.integers(0, 4, (h, w, 1)), 2, 0)
    imgs["gray4.png"] = raw_png(rng.integers(0, 16, (h, w, 1)), 4, 0)
    g8 = gray.copy()
    g8[::3, ::2] = 77
    imgs["gray8_trns.png"] = raw_png(g8[..., None], 8, 0, png_chunk(b"tRNS", struct.pack(">H", 77)))
    g16 = rng.integers(0, 400, (h, w, 1))
    g16[::4, ::3] = 65535
    imgs["gray16.png"] = raw_png(g16, 16, 0)
    imgs["gray16_trns.png"] = raw_png(g16, 16, 0, png_chunk(b"tRNS", struct.pack(">H", 255)))
    imgs["rgb16.png"] = raw_png(rng.integers(0, 65536, (h, w, 3)), 16, 2)
    imgs["rgb_trns.png"] = raw_png(rgb, 8, 2, png_chunk(b"tRNS", struct.pack(">HHH", *rgb[0, 0])))
    rgba16 = rng.integers(0, 65536, (h, w, 4))
    rgba16[:, :5, 3] = 0
    imgs["rgba16.png"] = raw_png(rgba16, 16, 6)
    imgs["la16.png"] = raw_png(rng.integers(0, 65536, (h, w, 2)), 16, 4)
    imgs["rgba_interlaced.png"] = raw_png(rgba, 8, 6, interlace=True)
    imgs["p_interlaced.png"] = raw_png(idx, 8, 3, plte, interlace=True)
    # APNG: Pillow and libpng both read the default image (the first frame).
    frames = [Image.fromarray(rgba, "RGBA"), Image.fromarray(255 - rgba, "RGBA")]
    imgs["anim.png"] = pil_bytes(frames[0], "PNG", save_all=True, append_images=frames[1:])
    # JPEG
    imgs["baseline.jpg"] = pil_bytes(Image.fromarray(rgb), "JPEG", quality=90)
    imgs["progressive.jpg"] = pil_bytes(Image.fromarray(rgb), "JPEG", quality=80, progressive=True)
    imgs["444.jpg"] = pil_bytes(Image.fromarray(rgb), "JPEG", quality=95, subsampling=0)
    imgs["422.jpg"] = pil_bytes(Image.fromarray(rgb), "JPEG", quality=75, subsampling=1)
    imgs["gray.jpg"] = pil_bytes(Image.fromarray(gray), "JPEG", quality=85)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation "rotate 90": ignored, as in the reference (no exif_transpose)
    imgs["exif_rotated.jpg"] = pil_bytes(Image.fromarray(rgb), "JPEG", quality=90, exif=exif.tobytes())
    imgs["cmyk.jpg"] = pil_bytes(Image.fromarray(rgba, "RGBA").convert("RGB").convert("CMYK"), "JPEG", quality=90)
    # WebP
    imgs["lossless.webp"] = pil_bytes(Image.fromarray(rgb), "WEBP", lossless=True)
    imgs["lossless_alpha.webp"] = pil_bytes(Image.fromarray(rgba, "RGBA"), "WEBP", lossless=True)
    imgs["lossy.webp"] = pil_bytes(Image.fromarray(rgb), "WEBP", quality=70)
    imgs["lossy_alpha.webp"] = pil_bytes(Image.fromarray(rgba, "RGBA"), "WEBP", quality=70)
    imgs["anim.webp"] = pil_bytes(frames[0], "WEBP", save_all=True, append_images=frames[1:], lossless=True)
    # Odd shapes: one row, one column, tall.
    imgs["row.png"] = pil_bytes(Image.fromarray(photo(rng, 200, 1)), "PNG")
    imgs["col.png"] = pil_bytes(Image.fromarray(np.dstack([photo(rng, 1, 90), rng.integers(0, 256, (90, 1))
                                                           .astype(np.uint8)]), "RGBA"), "PNG")
    imgs["tall.jpg"] = pil_bytes(Image.fromarray(photo(rng, 31, 160)), "JPEG", quality=90)
    return imgs


CONFIGS = {
    "k3": {},  # K3's shipped values: no resize at these sizes
    "budget12": {"in_patch_limit": 12},  # 75x53 -> 67x47: a downscale on both axes
    "budget3": {"in_patch_limit": 3},  # a strong downscale (wide antialiasing support)
    "side4": {"patch_limit_on_one_side": 4, "transparent_bg_config": {
        "pattern": "chessboard", "chessboard_square_size": 5, "chessboard_square_on_top_left": False,
        "chessboard_white_value": 250, "chessboard_gray_value": 3}},
    "before12": {"in_patch_limit": 12, "transparent_bg_fill_stage": "before_resize"},  # fill, then resize RGB
}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("images")
    out = {}
    for name, data in make_images().items():
        p = d / name
        p.write_bytes(data)
        out[name] = p
    for cname, extra in CONFIGS.items():
        (d / f"{cname}.json").write_text(json.dumps({"media_proc_cfg": extra}))
    return d, out


def ref_config(extra):
    cfg = dict(K3_CFG)
    for k in ("patch_size", "merge_kernel_size", "in_patch_limit", "patch_limit_on_one_side"):
        cfg[k] = extra.get(k, cfg[k])
    bg = extra.get("transparent_bg_config", {})
    cfg["square"] = bg.get("chessboard_square_size", cfg["square"])
    cfg["on_top_left"] = bg.get("chessboard_square_on_top_left", cfg["on_top_left"])
    cfg["white"] = bg.get("chessboard_white_value", cfg["white"])
    cfg["gray"] = bg.get("chessboard_gray_value", cfg["gray"])
    cfg["before_resize"] = extra.get("transparent_bg_fill_stage") == "before_resize"
    return cfg


def parse_info(text):
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_patches_bit_identical_to_pillow_pipeline(images, config, tmp_path):
    d, paths = images
    cfg = ref_config(CONFIGS[config])
    resized = 0
    for name, path in paths.items():
        out = tmp_path / (name + ".npy")
        if PILLOW_MAJOR >= 13 and name in GRAY16:
            continue
        r = k3("image-info", "--image", path, "--out", out, "--config", d / f"{config}.json", *PILLOW_FLAG)
        assert r.returncode == 0, (name, r.stderr.decode())
        info = parse_info(r.stdout.decode())
        want, (w0, h0), (w1, h1), (gh, gw), mode = reference_patches(path.read_bytes(), cfg)
        got = np.load(out)
        assert got.dtype == np.float32 and got.shape == want.shape, (name, got.shape, want.shape)
        assert info["size"] == f"{w0}x{h0}", (name, info)
        assert info["resized"].split()[0] == f"{w1}x{h1}", (name, info)
        assert info["grid"] == f"(1, {gh}, {gw})", (name, info)
        assert info["tokens"] == str((gh // 2) * (gw // 2)), (name, info)
        resized += (w1, h1) != (w0, h0)
        if not np.array_equal(got, want):
            bad = np.argwhere(got != want)
            pytest.fail(f"{name} ({config}): {len(bad)} of {got.size} values differ, first at {bad[0].tolist()}: "
                        f"k3 {got[tuple(bad[0])]} vs reference {want[tuple(bad[0])]}")
    if config != "k3":
        assert resized >= len(paths) - 4, f"{config}: only {resized} images were resized"


def test_modes_as_pillow_opens_them(images):
    """The mode printed is Pillow's mode for the file (it decides the resize and fill branches)."""
    d, paths = images
    for name, path in paths.items():
        if PILLOW_MAJOR >= 13 and name in GRAY16:
            continue
        r = k3("image-info", "--image", path)
        assert r.returncode == 0, (name, r.stderr.decode())
        mode = Image.open(path).mode
        assert parse_info(r.stdout.decode())["mode"] == mode, (name, mode, r.stdout.decode())


@pytest.mark.parametrize("w,h,grid,tokens", [
    (448, 448, (32, 32), 256), (611, 437, (32, 44), 352), (224, 224, (16, 16), 64), (30, 16, (2, 4), 2),
    (10, 10, (2, 2), 1), (28, 28, (2, 2), 1), (1920, 1080, (78, 138), 2691)])
def test_token_counts_of_published_cases(tmp_path, w, h, grid, tokens):
    """Spec §3.5 rows that need no resize, end to end through a real file (a solid PNG)."""
    p = tmp_path / "solid.png"
    p.write_bytes(pil_bytes(Image.new("RGB", (w, h), (10, 20, 30)), "PNG"))
    r = k3("image-info", "--image", p)
    assert r.returncode == 0, r.stderr.decode()
    info = parse_info(r.stdout.decode())
    assert info["grid"] == f"(1, {grid[0]}, {grid[1]})" and info["tokens"] == str(tokens), info


def test_large_resize_matches_pillow(tmp_path):
    """A resize of a real-sized photo under K3's own budget: 8000x1000 -> 7168x896 (the side limit)."""
    rng = np.random.default_rng(7)
    p = tmp_path / "wide.jpg"
    small = photo(rng, 400, 50)
    p.write_bytes(pil_bytes(Image.fromarray(small).resize((8000, 1000), Image.BILINEAR), "JPEG", quality=85))
    out = tmp_path / "wide.npy"
    r = k3("image-info", "--image", p, "--out", out, *PILLOW_FLAG, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    want, _, (w1, h1), (gh, gw), _ = reference_patches(p.read_bytes(), K3_CFG)
    assert (w1, h1, gh, gw) == (7168, 896, 64, 512)
    assert parse_info(r.stdout.decode())["tokens"] == "8192"
    assert np.array_equal(np.load(out), want)


# ---- malformed input -----------------------------------------------------------------------------

def one_line_error(r, *needles):
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 1, (r.returncode, err)
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("k3: error:"), err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def bad_files():
    rgb = np.random.default_rng(3).integers(0, 256, (40, 50, 3)).astype(np.uint8)
    png = pil_bytes(Image.fromarray(rgb), "PNG")
    jpg = pil_bytes(Image.fromarray(rgb), "JPEG")
    prog = pil_bytes(Image.fromarray(rgb), "JPEG", progressive=True)
    webp = pil_bytes(Image.fromarray(rgb), "WEBP", quality=80)
    webp_ll = pil_bytes(Image.fromarray(rgb), "WEBP", lossless=True)
    ihdr = lambda w, h: png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    sig = b"\x89PNG\r\n\x1a\n"
    bomb = sig + ihdr(60000, 60000) + png_chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + png_chunk(b"IEND", b"")
    zero = sig + ihdr(0, 10) + png_chunk(b"IDAT", zlib.compress(b"")) + png_chunk(b"IEND", b"")
    # JPEG with height 0 in its SOF0 frame header.
    sof = jpg.index(b"\xff\xc0")
    jpg_zero = jpg[:sof + 5] + b"\x00\x00" + jpg[sof + 7:]
    jpg_bomb = jpg[:sof + 5] + struct.pack(">HH", 65000, 65000) + jpg[sof + 9:]
    return {
        "truncated.png": (png[:len(png) // 2], ["truncated"]),
        "truncated_header.png": (png[:20], ["PNG"]),
        "truncated.jpg": (jpg[:len(jpg) // 2], ["truncated"]),
        "truncated_progressive.jpg": (prog[:len(prog) * 2 // 3], ["truncated"]),
        "truncated.webp": (webp[:len(webp) // 2], ["WebP"]),
        "truncated_lossless.webp": (webp_ll[:len(webp_ll) // 2], ["WebP"]),
        "zero.png": (zero, ["zero"]),
        "zero.jpg": (jpg_zero, ["JPEG"]),
        "bomb.png": (bomb, ["over the limit", "3600000000"]),
        "bomb.jpg": (jpg_bomb, ["over the limit"]),
        "text.png": (b"hello, this is not an image\n", ["unsupported format", "68 65 6c 6c"]),
        "anim.gif": (pil_bytes(Image.fromarray(rgb), "GIF"), ["unsupported format GIF"]),
        "picture.bmp": (pil_bytes(Image.fromarray(rgb), "BMP"), ["unsupported format BMP"]),
        "empty.png": (b"", ["empty"]),
        "flipped_bits.png": (png[:40] + bytes(b ^ 0x5A for b in png[40:80]) + png[80:], ["PNG"]),
    }


@pytest.mark.parametrize("name", list(bad_files()))
def test_malformed_image_one_line_error(tmp_path, name):
    data, needles = bad_files()[name]
    p = tmp_path / name
    p.write_bytes(data)
    r = k3("image-info", "--image", p, timeout=30)
    one_line_error(r, f"image {p}", *needles)


def test_byte_and_pixel_limits(tmp_path):
    p = tmp_path / "ok.png"
    p.write_bytes(pil_bytes(Image.new("RGB", (100, 100)), "PNG"))
    one_line_error(k3("image-info", "--image", p, "--max-image-pixels", 9999), "10000 pixels", "9999")
    one_line_error(k3("image-info", "--image", p, "--max-image-bytes", 10), "larger than the limit of 10 bytes")
    assert k3("image-info", "--image", p, "--max-image-pixels", 10000).returncode == 0


def test_bad_config_values(tmp_path):
    p = tmp_path / "ok.png"
    p.write_bytes(pil_bytes(Image.new("RGB", (30, 30)), "PNG"))
    for cfg, needle in [({"patch_size": 16}, "patch_size"), ({"in_patch_limit": 0}, "in_patch_limit"),
                        ({"image_std": [0.5, 0, 0.5]}, "image_std"), ({"fixed_output_tokens": 64},
                                                                       "fixed_output_tokens"),
                        ({"transparent_bg_config": {"pattern": "white"}}, "pattern"),
                        ({"transparent_bg_fill_stage": "later"}, "transparent_bg_fill_stage")]:
        c = tmp_path / "cfg.json"
        c.write_text(json.dumps(cfg))
        one_line_error(k3("image-info", "--image", p, "--config", c), str(c), needle)
    c = tmp_path / "odd.json"
    c.write_text(json.dumps({"patch_limit_on_one_side": 3}))  # 42 px -> padded to 56 = 4 patches > 3
    big = tmp_path / "big.png"
    big.write_bytes(pil_bytes(Image.new("RGB", (60, 20)), "PNG"))
    one_line_error(k3("image-info", "--image", big, "--config", c), "too many patches per side")


def test_vision_image_equals_vision_patches(tmp_path):
    """`k3 vision --image F` feeds the tower the patches `k3 image-info --out` writes: same output."""
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
    import gen_tiny
    model = tmp_path / "tiny"
    gen_tiny.generate(str(model), "k3", seed=5, vision="tiny")
    gen_tiny.write_byte_tokenizer(str(model))
    img = tmp_path / "rgba.png"
    rng = np.random.default_rng(11)
    img.write_bytes(pil_bytes(Image.fromarray(rng.integers(0, 256, (40, 57, 4)).astype(np.uint8), "RGBA"), "PNG"))
    r = k3("image-info", "--image", img, "--out", tmp_path / "p.npy")
    assert r.returncode == 0, r.stderr.decode()
    gh, gw = parse_info(r.stdout.decode())["grid"].strip("()").split(", ")[1:]
    a = k3("vision", "-m", model, "--image", img, "--out", tmp_path / "a.npy", "-t", "1", timeout=120)
    b = k3("vision", "-m", model, "--patches", tmp_path / "p.npy", "--grid", f"{gh},{gw}", "--out",
           tmp_path / "b.npy", "-t", "1", timeout=120)
    assert a.returncode == 0 and b.returncode == 0, (a.stderr.decode(), b.stderr.decode())
    assert np.array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"GIF89a....")
    one_line_error(k3("vision", "-m", model, "--image", bad), f"image {bad}", "unsupported format GIF")
