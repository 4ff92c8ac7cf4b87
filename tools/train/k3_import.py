"""Imports the `k3` Python package (python/k3) for the training tools.

An installed package (`pip install .`) is used when present; otherwise python/k3 of this
repository with the extension module `_k3` from a build tree (K3_PYTHON_BUILD_DIR, else
build/python), so the tools run from a plain `cmake --build build` without installing.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def import_k3(build_dir: str | os.PathLike | None = None):
    """The `k3` module. Raises ImportError naming where it looked when no extension is found."""
    try:
        import k3  # noqa: F401
        return sys.modules["k3"]
    except ImportError:
        pass
    bdir = Path(build_dir or os.environ.get("K3_PYTHON_BUILD_DIR") or ROOT / "build" / "python")
    so = sorted(bdir.glob("_k3*.so"))
    if not so:
        raise ImportError(f"k3: no installed package and no _k3*.so in {bdir} "
                          "(build the k3_python target, or set K3_PYTHON_BUILD_DIR)")
    spec = importlib.util.spec_from_file_location("k3._k3", so[0])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["k3._k3"] = mod
    spec.loader.exec_module(mod)
    sys.path.insert(0, str(ROOT / "python"))
    try:
        import k3  # noqa: F811
    finally:
        sys.path.remove(str(ROOT / "python"))
    return sys.modules["k3"]
