"""Compare two named-intermediate dump directories and report the first divergence.

Usage: python tools/reference/compare_dumps.py REF_DIR TEST_DIR [--rtol 1e-5]

Each dump dir holds <name>.npy files and manifest.json = {"tensors": [names in execution order]}.
Walks REF's manifest in order; for every tensor present in both: float tensors are compared by
relative L2 ‖test − ref‖/‖ref‖ (pass iff ≤ rtol; a zero ref passes only if test is zero too) and
max-abs is reported; integer tensors (router ids) must match exactly. NaN/Inf anywhere in TEST where
REF is finite fails. Prints one line per tensor; at the first failure prints
"FIRST DIVERGENCE: <name> rel_l2=... max_abs=..." and exits 1. Exit 0 if everything present matches;
exit 2 on a malformed manifest or when no tensor of REF is present in TEST.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np


def load_manifest(d):
    """Return the ordered tensor names of dump dir d (ValueError naming the file if malformed)."""
    path = os.path.join(d, "manifest.json")
    try:
        with open(path) as f:
            names = json.load(f)["tensors"]
    except (OSError, ValueError, KeyError) as ex:
        raise ValueError(f"{path}: cannot read manifest ({ex})") from None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{path}: 'tensors' must be a list of names")
    return names


def compare_tensor(ref, test, rtol):
    """Compare two arrays of the same shape. Returns (ok, rel_l2, max_abs).

    Integer dtypes: exact equality (rel_l2 = fraction of mismatching entries). Floats: compared in
    float64; ok iff finite where ref is finite and ‖test−ref‖₂/‖ref‖₂ ≤ rtol.
    """
    if ref.shape != test.shape:
        return False, float("inf"), float("inf")
    if np.issubdtype(ref.dtype, np.integer) or np.issubdtype(test.dtype, np.integer):
        mism = ref.astype(np.int64) != test.astype(np.int64)
        n = mism.sum()
        return bool(n == 0), float(n) / max(1, ref.size), float(np.abs(ref.astype(np.int64) - test.astype(np.int64)).max(initial=0))
    r = ref.astype(np.float64)
    t = test.astype(np.float64)
    if np.any(np.isfinite(r) & ~np.isfinite(t)):
        return False, float("nan"), float("nan")
    diff = t - r
    max_abs = float(np.abs(diff).max(initial=0.0))
    nr = np.linalg.norm(r)
    nd = np.linalg.norm(diff)
    rel = nd / nr if nr > 0 else (0.0 if nd == 0 else float("inf"))
    return bool(rel <= rtol), float(rel), max_abs


def compare_dirs(ref_dir, test_dir, rtol=1e-5, out=sys.stdout):
    """Compare dumps in REF manifest order. Returns (first_failing_name or None, rows) where rows is
    a list of (name, ok, rel_l2, max_abs) for compared tensors (tensors missing in TEST are skipped
    and printed as 'missing')."""
    names = load_manifest(ref_dir)
    rows = []
    for name in names:
        rp = os.path.join(ref_dir, name + ".npy")
        tp = os.path.join(test_dir, name + ".npy")
        if not os.path.exists(tp):
            print(f"{name:32s} missing in TEST (skipped)", file=out)
            continue
        ref, test = np.load(rp), np.load(tp)
        ok, rel, mx = compare_tensor(ref, test, rtol)
        rows.append((name, ok, rel, mx))
        shape_note = "" if ref.shape == test.shape else f" SHAPE {ref.shape} vs {test.shape}"
        print(f"{name:32s} {'ok  ' if ok else 'FAIL'} rel_l2={rel:.3e} max_abs={mx:.3e}{shape_note}", file=out)
        if not ok:
            print(f"FIRST DIVERGENCE: {name} rel_l2={rel:.3e} max_abs={mx:.3e}", file=out)
            return name, rows
    return None, rows


def main(argv=None):
    ap = argparse.ArgumentParser(description="compare two K3 dump directories")
    ap.add_argument("ref_dir")
    ap.add_argument("test_dir")
    ap.add_argument("--rtol", type=float, default=1e-5)
    a = ap.parse_args(argv)
    try:
        first, rows = compare_dirs(a.ref_dir, a.test_dir, a.rtol)
    except ValueError as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 2
    if first:
        return 1
    if not rows:
        print(f"error: no tensor of {a.ref_dir} manifest found in {a.test_dir}", file=sys.stderr)
        return 2
    print(f"all {len(rows)} compared tensors match (rtol {a.rtol:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
