"""MXFP4 re-blocking between K3's compressed-tensors layout and ggml's block_mxfp4.

K3 (k3-architecture.md §4, compressed-tensors `mxfp4-pack-quantized`), per matrix [rows, cols]:
  weight_packed uint8 [rows, cols/2]: byte j of a row holds element 2j (low nibble) and 2j+1 (high);
  weight_scale  uint8 [rows, cols/32]: one E8M0 byte per 32 consecutive elements of a row.
ggml `block_mxfp4` (ggml-common.h, type GGML_TYPE_MXFP4 = 39, 17 bytes per 32 elements):
  byte 0 = the E8M0 scale byte; bytes 1..16: byte 1+j holds element j (low nibble) and element
  j+16 (high nibble).
Both sides use the same 4-bit E2M1 codes (ggml's kvalues_mxfp4 are the doubled E2M1 values, paired
with a halved scale, so code and scale byte mean the same value) and the same E8M0 byte. So the
scale bytes and the 4-bit codes are copied unchanged; only the position of the codes inside each
32-element block changes (lossless, invertible: `unblock` below).
"""
from __future__ import annotations

import numpy as np

QK = 32            # elements per MX block
BLOCK_BYTES = 17   # ggml block_mxfp4: 1 scale byte + 16 code bytes


def reblock(packed: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """K3 (packed uint8 [rows, cols/2], scale uint8 [rows, cols/32]) → ggml blocks uint8
    [rows, cols/32 * 17] (row-major; GGUF logical shape [rows, cols] with type MXFP4).
    Raises ValueError on inconsistent shapes or dtypes."""
    p = np.asarray(packed)
    s = np.asarray(scale)
    if p.dtype != np.uint8 or s.dtype != np.uint8 or p.ndim != 2 or s.ndim != 2:
        raise ValueError(f"mxfp4 reblock: need uint8 [rows, cols/2] and [rows, cols/32], got "
                         f"{p.dtype}{list(p.shape)} and {s.dtype}{list(s.shape)}")
    rows, half = p.shape
    if half % 16 != 0 or s.shape != (rows, half // 16):
        raise ValueError(f"mxfp4 reblock: packed {list(p.shape)} and scale {list(s.shape)} do not "
                         f"describe [rows, cols] with cols % 32 == 0")
    nb = half // 16
    src = p.reshape(rows, nb, 16)
    codes = np.empty((rows, nb, QK), dtype=np.uint8)
    codes[:, :, 0::2] = src & 0x0F
    codes[:, :, 1::2] = src >> 4
    out = np.empty((rows, nb, BLOCK_BYTES), dtype=np.uint8)
    out[:, :, 0] = s
    out[:, :, 1:] = codes[:, :, :16] | (codes[:, :, 16:] << 4)
    return out.reshape(rows, nb * BLOCK_BYTES)


def unblock(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of `reblock`: ggml blocks uint8 [rows, nb*17] → (packed [rows, nb*16], scale [rows, nb])."""
    b = np.asarray(blocks, dtype=np.uint8)
    if b.ndim != 2 or b.shape[1] % BLOCK_BYTES != 0:
        raise ValueError(f"mxfp4 unblock: need uint8 [rows, nb*17], got {list(b.shape)}")
    rows = b.shape[0]
    nb = b.shape[1] // BLOCK_BYTES
    blk = b.reshape(rows, nb, BLOCK_BYTES)
    qs = blk[:, :, 1:]
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=2)  # element j, then element j+16
    packed = (codes[:, :, 0::2] | (codes[:, :, 1::2] << 4)).astype(np.uint8)
    return packed.reshape(rows, nb * 16), np.ascontiguousarray(blk[:, :, 0])
