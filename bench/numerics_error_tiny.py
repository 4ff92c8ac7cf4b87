"""Per-mode error of `k3 logits` against the fp64 numpy reference (tools/reference/k3_ref.py),
the tiny checkpoint variants of tools/reference/gen_tiny.py (64 random prompt ids) and
K3-mini (the first 64 ids of its held-out text), max and median per-position relative L2 of the
logits, for each numerics mode and two mixes (K3_MXFP4 overriding the expert path).

  .venv/bin/python bench/numerics_error_tiny.py [--k3 build/tools/cli/k3] [--no-mini]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
REF = os.path.join(ROOT, "tools", "reference")
sys.path.insert(0, REF)
import gen_tiny  # noqa: E402
import k3_checkpoint as kc  # noqa: E402

VARIANTS = ["k3", "scaled", "many_experts", "kimi_linear_gate"]
MODES = [("exact", {"K3_NUMERICS": "exact"}), ("int8", {"K3_NUMERICS": "int8"}),
         ("mxfp8", {"K3_NUMERICS": "mxfp8"}),
         ("bf16 (= old K3_BF16_DOT=1 with the default K3_MXFP4=int8)", {"K3_NUMERICS": "bf16"}),
         ("bf16 trunk + mxfp8 experts", {"K3_NUMERICS": "bf16", "K3_MXFP4": "mxfp8"}),
         ("bf16 trunk + exact experts (old K3_BF16_DOT=1 K3_MXFP4=exact)", {"K3_NUMERICS": "bf16", "K3_MXFP4": "exact"})]


def run(cmd, env=None):
    e = {k: v for k, v in os.environ.items() if k not in ("K3_NUMERICS", "K3_MXFP4", "K3_BF16_DOT")}
    e.update(env or {})
    p = subprocess.run(cmd, capture_output=True, text=True, env=e)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    return p.stdout


def rel_l2(a, b):
    b = b.astype(np.float64)
    return np.linalg.norm(a.astype(np.float64) - b, axis=1) / np.linalg.norm(b, axis=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k3", default=os.path.join(ROOT, "build", "tools", "cli", "k3"))
    ap.add_argument("--no-mini", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="k3-numerics-")
    models = []
    for seed, v in enumerate(VARIANTS):
        d = os.path.join(tmp, v)
        gen_tiny.generate(d, v, seed=seed + 3)
        vocab = kc.text_config(json.load(open(os.path.join(d, "config.json"))))["vocab_size"]
        ids = [int(i) for i in np.random.default_rng(1000 + seed).integers(0, vocab, size=64)]
        models.append((f"tiny {v}", d, ids))
    if not a.no_mini:
        mini = os.path.join(ROOT, "models", "k3-mini")
        ids = run([a.k3, "tokenize", "-m", mini, "--ids-only", "-f", os.path.join(mini, "heldout.txt")])
        ids = [int(t) for t in ids.replace(",", " ").split()[:64]]
        models.append(("K3-mini (64 held-out ids)", mini, ids))
    res = {}
    for name, d, ids in models:
        ref = os.path.join(tmp, "ref.npy")
        run([sys.executable, os.path.join(REF, "k3_ref.py"), "--model", d, "--ids", ",".join(map(str, ids)), "--out", ref])
        r = np.load(ref)
        for mode, env in MODES:
            out = os.path.join(tmp, "k3.npy")
            run([a.k3, "logits", "-m", d, "--ids", ",".join(map(str, ids)), "--out", out], {**env, "K3_KERNELS": "fast"})
            e = rel_l2(np.load(out), r)
            res.setdefault(mode, {})[name] = (float(e.max()), float(np.median(e)))
        print(f"done {name}", file=sys.stderr)
    names = [m[0] for m in models]
    print("| mode | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for mode, _ in MODES:
        print(f"| {mode} | " + " | ".join(f"{res[mode][n][0]:.1e} ({res[mode][n][1]:.1e})" for n in names) + " |")
    print("\n(max (median) per-position relative L2 of the logits vs the fp64 reference)")


if __name__ == "__main__":
    main()
