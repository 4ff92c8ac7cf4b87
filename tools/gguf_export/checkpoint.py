"""A published K3 folder opened for export: config.json, model.safetensors.index.json + shards.

Every text tensor of tools/reference/k3_checkpoint.tensor_inventory (k3-architecture.md §2) must be
present with its dtype and shape; tensors are memory-mapped, never read whole. Errors are
CheckpointError with the file and tensor named.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import k3_checkpoint as kc  # noqa: E402

PREFIX = "language_model."
_NP = {"BF16": np.uint16, "F32": np.float32, "U8": np.uint8}
_SIZE = {"BF16": 2, "F32": 4, "U8": 1}


class CheckpointError(ValueError):
    """Bad checkpoint folder; the message names the file and the tensor or key."""


def _check_shard_name(idx: str, name, fn) -> None:
    """An index entry must name a plain file inside the checkpoint folder (as the C++ loader
    requires): no directory part, not '.' or '..', not absolute. A shard that is itself a symlink
    is followed (Hugging Face cache snapshots link their files to ../../blobs)."""
    if not isinstance(fn, str):
        raise CheckpointError(f'{idx}: weight_map["{name}"] must be a file name string, found {type(fn).__name__}')
    if (not fn or fn in (".", "..") or "/" in fn or "\\" in fn or "\0" in fn or os.path.isabs(fn)
            or os.path.basename(fn) != fn):
        raise CheckpointError(f'{idx}: weight_map["{name}"] = "{fn}" is not a plain file name inside the '
                              f"checkpoint folder")


class Checkpoint:
    """config: the wrapper config.json dict; tc: its text_config. tensor(name) → read-only
    memory-mapped ndarray in storage dtype (BF16 as uint16 bits), name without `language_model.`."""

    def __init__(self, model_dir: str):
        self.dir = model_dir
        cfg_path = os.path.join(model_dir, "config.json")
        if not os.path.isfile(cfg_path):
            raise CheckpointError(f"{cfg_path}: not found (expected a K3 checkpoint folder)")
        try:
            with open(cfg_path, encoding="utf-8") as f:
                self.config = json.load(f)
        except ValueError as e:
            raise CheckpointError(f"{cfg_path}: expected JSON ({e})") from None
        if not isinstance(self.config, dict):
            raise CheckpointError(f"{cfg_path}: expected a JSON object")
        self.tc = kc.text_config(self.config)
        self._where: dict[str, tuple[str, str, tuple, int]] = {}
        self._maps: dict[str, np.memmap] = {}
        self._open_shards()

    def _open_shards(self):
        idx = os.path.join(self.dir, "model.safetensors.index.json")
        if os.path.isfile(idx):
            try:
                with open(idx, encoding="utf-8") as f:
                    index = json.load(f)
                if not isinstance(index, dict):
                    raise TypeError("expected a JSON object")
                weight_map = index["weight_map"]
                if not isinstance(weight_map, dict):
                    raise TypeError("weight_map is not an object")
            except (ValueError, KeyError, TypeError) as e:
                raise CheckpointError(f"{idx}: malformed index ({e})") from None
            for name, fn in weight_map.items():
                _check_shard_name(idx, name, fn)
            files = sorted(set(weight_map.values()))
        elif os.path.isfile(os.path.join(self.dir, "model.safetensors")):
            weight_map, files = None, ["model.safetensors"]
        else:
            raise CheckpointError(f"{idx}: not found (and no model.safetensors)")
        for fn in files:
            path = os.path.join(self.dir, fn)
            if not os.path.isfile(path):
                raise CheckpointError(f"{idx}: lists shard {fn}, which does not exist")
            try:
                hdr, start = kc.read_safetensors_header(path)
            except ValueError as e:
                raise CheckpointError(str(e)) from None
            size = os.path.getsize(path)
            for name, info in hdr.items():
                if weight_map is not None and weight_map.get(name) != fn:
                    raise CheckpointError(f"{path}: tensor {name} is not mapped to this file in {idx}")
                try:
                    dt, shape, (a, b) = info["dtype"], tuple(int(x) for x in info["shape"]), info["data_offsets"]
                except (KeyError, TypeError, ValueError):
                    raise CheckpointError(f"{path}: tensor {name}: malformed header entry") from None
                n = int(np.prod(shape, dtype=np.int64)) * _SIZE.get(dt, 1)
                if dt in _SIZE and (b - a != n or a < 0 or start + b > size):
                    raise CheckpointError(f"{path}: tensor {name}: data_offsets {[a, b]} do not hold {dt}{list(shape)}")
                self._where[name] = (path, dt, shape, start + a)
        if weight_map is not None:
            for name, fn in weight_map.items():
                if name not in self._where:
                    raise CheckpointError(f"{idx}: tensor {name} is mapped to {fn} but absent from its header")

    def validate(self):
        """Check every text tensor of the K3 inventory (names, dtypes, shapes). Returns the stored
        A_log length (K3 pads it past the KDA head count). Raises CheckpointError."""
        a_len = None
        for name, (_, dt, shape, _) in self._where.items():
            if name.startswith(PREFIX) and name.endswith(".self_attn.A_log"):
                a_len = shape[0] if len(shape) == 1 else -1
                break
        heads = self.tc["linear_attn_config"]["num_heads"]
        if a_len is not None and a_len < heads:
            raise CheckpointError(f"{self.dir}: A_log has shape length {a_len}, expected at least the "
                                  f"{heads} KDA heads (config.json linear_attn_config.num_heads)")
        for name, dt, shape in kc.tensor_inventory(self.tc, a_log_pad_to=a_len):
            full = PREFIX + name
            if full not in self._where:
                raise CheckpointError(f"{self.dir}: missing tensor {full} (expected {dt}{list(shape)})")
            path, got_dt, got_shape, _ = self._where[full]
            if got_dt != dt or got_shape != tuple(shape):
                raise CheckpointError(f"{path}: tensor {full}: expected {dt}{list(shape)}, found "
                                      f"{got_dt}{list(got_shape)}")
        return a_len

    def tensor(self, name: str) -> np.ndarray:
        path, dt, shape, off = self._where[PREFIX + name]
        mm = self._maps.get(path)
        if mm is None:
            mm = self._maps[path] = np.memmap(path, dtype=np.uint8, mode="r")
        n = int(np.prod(shape, dtype=np.int64)) * _SIZE[dt]
        return mm[off:off + n].view(_NP[dt]).reshape(shape)
