"""MXFP4 fake quantization with a straight-through estimator (k3-architecture.md §4, algorithms.md §5.2).

fake_quant_mxfp4(w): w [rows, cols] (or [..., rows, cols]) float32/float64, cols % 32 == 0.
Per (row, 32-column group): X = 2^(floor(log2(amax)) − 2) clamped to 2^[−127, 127] (floor rule),
element = round-to-nearest-even(w / X) on the E2M1 grid {0, .5, 1, 1.5, 2, 3, 4, 6}, saturating at 6.
The returned values equal mxfp4_dequantize(mxfp4_quantize(w)) of tools/reference/k3_checkpoint.py,
so the exported packed bytes are exactly the weights the trained model computes with.
ste_mxfp4(w) = w + (fake_quant_mxfp4(w) − w).detach(): forward uses the quantized values, gradient
passes straight through to the fp32 master weights.
"""
import torch


def fake_quant_mxfp4(w):
    shape = w.shape
    assert shape[-1] % 32 == 0, shape
    x = w.reshape(*shape[:-1], shape[-1] // 32, 32)
    amax = x.abs().amax(dim=-1, keepdim=True)
    _, e = torch.frexp(amax)                       # amax = m·2^e, m in [0.5, 1) → floor(log2) = e − 1
    shared = (e - 1 - 2).clamp(-127, 127)
    shared = torch.where(amax > 0, shared, torch.zeros_like(shared))
    scale = torch.pow(torch.full_like(amax, 2.0), shared.to(amax.dtype))
    y = (x / scale).abs()
    q = torch.where(y < 2, torch.round(y * 2) / 2,
                    torch.where(y < 4, torch.round(y), 2 * torch.round(y / 2)))
    q = q.clamp(max=6.0)
    return (torch.sign(x) * q * scale).reshape(shape)


def ste_mxfp4(w):
    return w + (fake_quant_mxfp4(w.detach()) - w.detach())
