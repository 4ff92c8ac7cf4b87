"""Vision tower benchmark at K3's real widths (shared spec vision.md §1.1): images per second,
GFLOP/s against the measured fp32 compute roofline, and memory per image, per input size,
thread count and numerics mode.

Model: a random tower + projector with K3's widths (27 blocks, width 1024, 12 heads of 128 (qkv
1536), MLP 4096, 64×64 position table, projector 4096 -> 4096 -> 7168; gen_tiny.py's
random_vision_tensors, BF16) beside a tiny random text model of hidden size 7168 (the tower's
output width must equal it), written once to --model (default /tmp/k3-vision-bench, ~0.9 GB; not
committed).
Inputs: random RGB PNGs of 448×448 (grid 32×32), 896×896 (64×64) and 1920×1080 (78×138 after
padding), all under K3's patch budget (no resize).
Per run: `k3 vision -m DIR --image F -t T --numerics M` prints the encode time (tower + projector,
not the load) and the accounted workspace; the peak RSS delta is the run's ru_maxrss minus that
of a 28×28 image (1 token) in the same mode and thread count (the mapped weights are in both).

FLOPs of one image of L = h·w patches (multiply-add = 2 FLOPs), K3 widths D = 1024, A = 1536,
I = 4096, P = 588, Dt = 7168, 27 blocks:
  patch embed 2·L·P·D
  per block   2·L·D·3A (wqkv) + 2·L·A·D (wo) + 2·2·L·D·I (fc0, fc1) + 2·2·L²·A (q·kᵀ and p·v)
  projector   2·(L/4)·(4D·4D + 4D·Dt)
(norms, RoPE, softmax and GELU are left out: O(L·D) each).
The roofline: build/bench/k3_bench_compute_peak (the fp32 FMA peak used for the text GEMMs in
docs/performance.md), run here at 1 and 2 threads.
Usage: python bench/vision.py [--model DIR] [--k3 build/tools/cli/k3] [--sizes 448x448,896x896,1920x1080]
       [--threads 1,2] [--modes exact,bf16,int8,mxfp8] [--skip SIZE:T:MODE,...] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))

import gen_tiny  # noqa: E402
import k3_checkpoint as kc  # noqa: E402

D, A, I, P, DT, BLOCKS = 1024, 1536, 4096, 588, 7168, 27


def k3_vision_config() -> dict:
    """vision_config with K3's published values (vision.md §1.1)."""
    vc = gen_tiny.vision_config("tiny", DT)
    vc.update(vt_hidden_size=D, vt_num_hidden_layers=BLOCKS, vt_num_attention_heads=12, qkv_hidden_size=A,
              vt_intermediate_size=I, init_pos_emb_height=64, init_pos_emb_width=64, mm_hidden_size=D)
    return vc


def make_model(out: str) -> None:
    if os.path.exists(os.path.join(out, "model.safetensors.index.json")):
        return
    cfg = kc.make_config(hidden_size=DT, num_hidden_layers=2)
    tc = kc.text_config(cfg)
    cfg["vision_config"] = k3_vision_config()
    rng = np.random.default_rng(0)
    tensors = gen_tiny.random_tensors(tc, rng)
    extra = gen_tiny.random_vision_tensors(cfg["vision_config"], rng)
    kc.write_checkpoint(out, cfg, tensors, n_shards=2, extra_tensors=extra)
    gen_tiny.write_byte_tokenizer(out)


def flops(h: int, w: int) -> float:
    L = h * w
    per_block = 2 * L * D * 3 * A + 2 * L * A * D + 4 * L * D * I + 4 * L * L * A
    return 2 * L * P * D + BLOCKS * per_block + 2 * (L // 4) * (4 * D * 4 * D + 4 * D * DT)


def grid_of(w: int, h: int):
    return -(-h // 28) * 2, -(-w // 28) * 2


def run_vision(k3, model, image, threads, mode):
    """(encode seconds, workspace MiB, the child's peak RSS in bytes: os.wait4's ru_maxrss)."""
    import tempfile
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen([k3, "vision", "-m", model, "--image", image, "-t", str(threads), "--numerics", mode],
                             stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if p.returncode != 0:
        raise RuntimeError(f"k3 vision failed on {image} ({mode}, {threads} threads): {text}")
    m = re.search(r"in ([0-9.]+) s; workspace ([0-9.]+) MiB", text)
    if not m:
        raise RuntimeError(f"k3 vision output has no time/workspace line: {text}")
    return float(m.group(1)), float(m.group(2)), ru.ru_maxrss * 1024


def peak_gflops(threads: int):
    """(GFLOP/s, ISA): the fastest ISA's fp32 FMA peak at `threads` (k3_bench_compute_peak)."""
    exe = os.path.join(ROOT, "build", "bench", "k3_bench_compute_peak")
    r = subprocess.run([exe, "--runs", "3"], capture_output=True, text=True, check=True)
    best = None
    for line in r.stdout.splitlines():
        m = re.match(r"\|\s*(\S+)\s*\|\s*(\d+)\s*\|\s*([0-9.]+)\s*\|", line)
        if m and int(m.group(2)) == threads and (best is None or float(m.group(3)) > best[0]):
            best = (float(m.group(3)), m.group(1))
    if best is None:
        raise RuntimeError(f"no {threads}-thread line in k3_bench_compute_peak output:\n{r.stdout}")
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="/tmp/k3-vision-bench")
    ap.add_argument("--k3", default=os.path.join(ROOT, "build", "tools", "cli", "k3"))
    ap.add_argument("--sizes", default="448x448,896x896,1920x1080")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--modes", default="exact,bf16,int8,mxfp8")
    ap.add_argument("--skip", default="", help="SIZE:T:MODE entries not to run (e.g. 1920x1080:1:exact)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    t0 = time.time()
    make_model(a.model)
    print(f"model {a.model} ready ({time.time() - t0:.0f} s); load: {os.getloadavg()}", flush=True)
    from PIL import Image
    imgs = {}
    for s in ["28x28"] + a.sizes.split(","):
        w, h = map(int, s.split("x"))
        f = f"/tmp/k3-vision-bench-{s}.png"
        Image.fromarray(np.random.default_rng(w * h).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(f)
        imgs[s] = (f, w, h)
    threads = [int(t) for t in a.threads.split(",")]
    peaks = {t: peak_gflops(t) for t in threads}
    print(f"fp32 FMA roofline: {peaks}", flush=True)
    skip = set(x for x in a.skip.split(",") if x)
    rows = []
    for s in a.sizes.split(","):
        f, w, h = imgs[s]
        gh, gw = grid_of(w, h)
        fl = flops(gh, gw)
        for t in threads:
            for mode in a.modes.split(","):
                if f"{s}:{t}:{mode}" in skip:
                    continue
                _, _, rss0 = run_vision(a.k3, a.model, imgs["28x28"][0], t, mode)
                sec, ws, rss = run_vision(a.k3, a.model, f, t, mode)
                row = {"size": s, "grid": f"{gh}x{gw}", "patches": gh * gw, "tokens": gh * gw // 4, "threads": t,
                       "mode": mode, "seconds": sec, "images_per_s": 1 / sec, "gflop": fl / 1e9,
                       "gflops": fl / 1e9 / sec, "roofline_gflops": peaks[t][0], "roofline_isa": peaks[t][1],
                       "of_roofline": fl / 1e9 / sec / peaks[t][0],
                       "workspace_mib": ws,
                       "rss_delta_mib": (rss - rss0) / 2**20,
                       "load": os.getloadavg()[0]}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"rows": rows, "roofline": peaks}, fh, indent=1)
    print("| input | grid (patches -> tokens) | threads | mode | s / image | images/s | GFLOP | GFLOP/s | "
          "% of fp32 roofline | workspace MiB | peak RSS delta MiB | load (1 min) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['size']} | {r['grid']} ({r['patches']} -> {r['tokens']}) | {r['threads']} | {r['mode']} | "
              f"{r['seconds']:.2f} | {r['images_per_s']:.3f} | {r['gflop']:.0f} | {r['gflops']:.1f} | "
              f"{100 * r['of_roofline']:.0f}% | {r['workspace_mib']:.0f} | {r['rss_delta_mib']:.0f} | {r['load']:.2f} |")


if __name__ == "__main__":
    main()
