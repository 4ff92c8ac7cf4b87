"""MoonViT-V2 vision tower and patchmergerv2 projector in PyTorch (shared spec vision.md §4-§5, §8.1),
float32, for training the demo model's tower (models/k3-mini-vision).

Parameter names equal the published checkpoint names (vision.md §2): `vision_tower.*` and
`mm_projector.*`; shapes as published (Linear [out, in]; patch conv [D, 3, 14, 14]; position
table [Hpe, Wpe, D]). The forward is the equations of vision.md §8.1, the same as the engine's
`exact` path (src/vision/vision_tower.cpp) and the float64 reference tools/reference/vision_ref.py:

  X   = P · W_peᵀ + bilinear(E → h×w)                      P [B, h·w, 588]
  per block: X += Wo·attn(rope2d(q), rope2d(k), v) (non-causal, per image);
             X += fc1·gelu_tanh(fc0·rms(X, g1, 2⁻²³)),     q,k,v = split(Wqkv·rms(X, g0, 2⁻²³))
  X   = rms(X, g_final, 2⁻²³);  Z = 2×2 merge (TL, TR, BL, BR) [B, h/2·w/2, 4D]
  Emb = rms(gelu_erf(Z·W0ᵀ)·W2ᵀ, g_post, projector_ln_eps)  [B, N, text_hidden]

Images of one batch share a grid (h, w) (the training pictures are all one size); `pixel_patches`
turns uint8 pixels into the engine's patches (vision.md §3.4: v/255 normalised by mean = std =
0.5, patch n = r·w + c, inside a patch ch·196 + ky·14 + kx).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from tools.train.model import Linear, RMSNorm

EPS_V = 2.0 ** -23          # vision.md §4.4: the tower's RMSNorm eps (FLT_EPSILON)
ROPE_THETA = 10000.0        # vision.md §4.3


def vision_config(D=64, layers=4, heads=2, qkv=64, mlp=256, pos_h=8, pos_w=8, text_hidden=128):
    """A small `vision_config` with K3's keys and fixed values (vision.md §1.1) and the given widths."""
    assert qkv % heads == 0 and (qkv // heads) % 4 == 0, "head dim must be a multiple of 4 (2D RoPE)"
    return {
        "model_type": "moonvit3d", "patch_size": 14, "vt_hidden_size": D, "vt_num_hidden_layers": layers,
        "vt_num_attention_heads": heads, "qkv_hidden_size": qkv, "vt_intermediate_size": mlp,
        "init_pos_emb_height": pos_h, "init_pos_emb_width": pos_w,
        "norm_type": "rmsnorm", "attn_bias": False, "linear_bias": False, "patch_embed_proj_bias": False,
        "mlp_type": "mlp2", "activation_func": "gelu_pytorch_tanh", "pos_emb_type": "divided_fixed",
        "init_pos_emb_time": 4, "pos_emb_interpolation_mode": "bilinear", "merge_kernel_size": [2, 2],
        "merge_type": "sd2_tpool", "mm_projector_type": "patchmergerv2", "mm_hidden_size": D,
        "text_hidden_size": text_hidden, "projector_hidden_act": "gelu", "projector_ln_eps": 1e-05,
    }


def pixel_patches(img):
    """img uint8 [B, H, W, 3] (H, W multiples of 28) -> (patches float32 [B, h·w, 588], (h, w))."""
    B, H, W, _ = img.shape
    h, w = H // 14, W // 14
    x = (img.float() / 255.0 - 0.5) / 0.5                          # [B, H, W, 3]
    x = x.reshape(B, h, 14, w, 14, 3).permute(0, 1, 3, 5, 2, 4)    # [B, h, w, ch, ky, kx]
    return x.reshape(B, h * w, 588), (h, w)


def rope2d(x, h, w):
    """x [B, L, heads, dh] rotated: complex slot 2k by column·f_k, slot 2k+1 by row·f_k,
    f_k = θ^(−4k/dh), slot j = the interleaved pair (x[2j], x[2j+1]) (vision.md §4.3)."""
    dh = x.shape[-1]
    f = ROPE_THETA ** (-4.0 * torch.arange(dh // 4, dtype=torch.float64) / dh)
    L = h * w
    rows = torch.div(torch.arange(L), w, rounding_mode="floor").double()
    cols = (torch.arange(L) % w).double()
    ang = torch.empty(L, dh // 2, dtype=torch.float64)
    ang[:, 0::2] = cols[:, None] * f[None, :]
    ang[:, 1::2] = rows[:, None] * f[None, :]
    c = torch.cos(ang).float()[None, :, None, :]
    s = torch.sin(ang).float()[None, :, None, :]
    xe, xo = x[..., 0::2], x[..., 1::2]
    return torch.stack([xe * c - xo * s, xe * s + xo * c], dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, D, A, I, heads):
        super().__init__()
        self.heads, self.A = heads, A
        self.norm0 = RMSNorm(D, EPS_V)
        self.wqkv = Linear(D, 3 * A)
        self.wo = Linear(A, D)
        self.norm1 = RMSNorm(D, EPS_V)
        self.mlp = nn.Module()
        self.mlp.fc0 = Linear(D, I)
        self.mlp.fc1 = Linear(I, D)

    def forward(self, x, h, w):
        B, L, _ = x.shape
        H, A = self.heads, self.A
        qkv = self.wqkv(self.norm0(x))
        q = rope2d(qkv[..., :A].reshape(B, L, H, -1), h, w).transpose(1, 2)
        k = rope2d(qkv[..., A:2 * A].reshape(B, L, H, -1), h, w).transpose(1, 2)
        v = qkv[..., 2 * A:].reshape(B, L, H, -1).transpose(1, 2)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, L, A)
        x = x + self.wo(o)
        return x + self.mlp.fc1(F.gelu(self.mlp.fc0(self.norm1(x)), approximate="tanh"))


class VisionTower(nn.Module):
    """The tower and the projector of one `vision_config`. forward(patches [B, h·w, 588], (h, w))
    -> embeddings [B, (h/2)(w/2), text_hidden] float32."""

    def __init__(self, vc):
        super().__init__()
        self.vc = vc
        D, A, I = vc["vt_hidden_size"], vc["qkv_hidden_size"], vc["vt_intermediate_size"]
        heads, Dt = vc["vt_num_attention_heads"], vc["text_hidden_size"]
        self.D = D
        vt = self.vision_tower = nn.Module()
        vt.patch_embed = nn.Module()
        vt.patch_embed.proj = nn.Module()
        vt.patch_embed.proj.weight = nn.Parameter(torch.empty(D, 3, 14, 14))
        vt.patch_embed.pos_emb = nn.Module()
        vt.patch_embed.pos_emb.weight = nn.Parameter(
            torch.empty(vc["init_pos_emb_height"], vc["init_pos_emb_width"], D))
        vt.encoder = nn.Module()
        vt.encoder.blocks = nn.ModuleList([Block(D, A, I, heads) for _ in range(vc["vt_num_hidden_layers"])])
        vt.encoder.final_layernorm = RMSNorm(D, EPS_V)
        mp = self.mm_projector = nn.Module()
        mp.proj = nn.Sequential(Linear(4 * D, 4 * D), nn.GELU(), Linear(4 * D, Dt))
        mp.post_norm = RMSNorm(Dt, float(vc["projector_ln_eps"]))

    def pos_embedding(self, h, w):
        """[h·w, D]: the table resized to (h, w), bilinear, align_corners false, no antialias."""
        E = self.vision_tower.patch_embed.pos_emb.weight
        if tuple(E.shape[:2]) == (h, w):
            return E.reshape(h * w, -1)
        Q = F.interpolate(E.permute(2, 0, 1)[None], size=(h, w), mode="bilinear", align_corners=False)
        return Q[0].permute(1, 2, 0).reshape(h * w, -1)

    def forward(self, patches, grid):
        h, w = grid
        B, L, _ = patches.shape
        vt = self.vision_tower
        x = patches @ vt.patch_embed.proj.weight.reshape(self.D, -1).t() + self.pos_embedding(h, w)
        for blk in vt.encoder.blocks:
            x = blk(x, h, w)
        x = vt.encoder.final_layernorm(x)
        z = x.reshape(B, h // 2, 2, w // 2, 2, self.D).permute(0, 1, 3, 2, 4, 5).reshape(B, L // 4, 4 * self.D)
        return self.mm_projector.post_norm(self.mm_projector.proj(z))


def init_vision(tower, seed, out_rms=1.0):
    """Deterministic init: matrices N(0, 1/in) (output projections wo, fc1 scaled by
    1/sqrt(2·layers)), position table N(0, 0.02), norms 1, the projector's post-norm `out_rms`
    (the RMS of the text model's token embeddings, so image rows start at the scale of text rows)."""
    gen = torch.Generator().manual_seed(seed)
    n = tower.vc["vt_num_hidden_layers"]
    with torch.no_grad():
        for name, p in sorted(tower.named_parameters()):
            if name.endswith("post_norm.weight"):
                p.fill_(out_rms)
            elif "norm" in name:
                p.fill_(1.0)
            elif name.endswith("pos_emb.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
            else:
                fan_in = p[0].numel()
                std = fan_in ** -0.5
                if name.endswith("wo.weight") or name.endswith("fc1.weight"):
                    std /= math.sqrt(2 * n)
                p.copy_(torch.randn(p.shape, generator=gen) * std)
