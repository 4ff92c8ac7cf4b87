"""K3-architecture model in PyTorch (k3-architecture.md §3, algorithms.md §1–§3), float32 compute.

Built from a K3 `text_config` dict (k3-architecture.md §1.2/§1.3). Parameter names equal the
checkpoint names without the `language_model.` prefix, except routed experts, which are stacked:
`...block_sparse_moe.experts_w{1,2,3}` [E, out, in] (exported as experts.{e}.w{1,2,3} MXFP4).
A_log is stored per head [H] (padded at export). Activations: [B, T, D] (batch, time, hidden).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from tools.train.kda import kda_chunked
from tools.train.mxfp4_qat import ste_mxfp4


def rms_norm(x, w, eps):
    """RMSNorm(x; w, eps) = w ⊙ x / sqrt(mean(x²) + eps) over the last dim (§3 notation)."""
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def situ_glu(g, u, b1, b2):
    """SiTU-GLU (§3.4): b1·tanh(g/b1)·σ(g) · b2·tanh(u/b2)."""
    return b1 * torch.tanh(g / b1) * torch.sigmoid(g) * (b2 * torch.tanh(u / b2))


def lin(n_out, n_in):
    return nn.Parameter(torch.empty(n_out, n_in))


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


class Linear(nn.Module):
    """Bias-free y = x Wᵀ with W [out, in] (checkpoint layout)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = lin(n_out, n_in)

    def forward(self, x):
        return x @ self.weight.t()


class KDA(nn.Module):
    """Kimi Delta Attention layer, k3-architecture.md §3.2 / algorithms.md §1.1 (K3 gate)."""

    def __init__(self, cfg):
        super().__init__()
        la = cfg["linear_attn_config"]
        D, H, d = cfg["hidden_size"], la["num_heads"], la["head_dim"]
        C, W = H * d, la["short_conv_kernel_size"]
        self.H, self.d, self.W = H, d, W
        self.lb = float(la["gate_lower_bound"])
        self.eps = cfg["rms_norm_eps"]
        self.q_proj, self.k_proj, self.v_proj = Linear(D, C), Linear(D, C), Linear(D, C)
        self.q_conv1d = nn.Module(); self.q_conv1d.weight = nn.Parameter(torch.empty(C, 1, W))
        self.k_conv1d = nn.Module(); self.k_conv1d.weight = nn.Parameter(torch.empty(C, 1, W))
        self.v_conv1d = nn.Module(); self.v_conv1d.weight = nn.Parameter(torch.empty(C, 1, W))
        self.f_a_proj, self.f_b_proj = Linear(D, d), Linear(d, C)
        self.b_proj = Linear(D, H)
        self.g_proj = Linear(D, C)
        self.dt_bias = nn.Parameter(torch.empty(C))
        self.A_log = nn.Parameter(torch.zeros(H))
        self.o_norm = RMSNorm(d, self.eps)
        self.o_proj = Linear(C, D)

    def conv(self, x, w):
        """Depthwise causal conv (tap 0 = oldest) + SiLU; x [B,T,C], w [C,1,W]."""
        xt = F.pad(x.transpose(1, 2), (self.W - 1, 0))
        return F.silu(F.conv1d(xt, w, groups=x.shape[-1]).transpose(1, 2))

    def forward(self, x):
        B, T, _ = x.shape
        H, d = self.H, self.d
        q = self.conv(self.q_proj(x), self.q_conv1d.weight).view(B, T, H, d)
        k = self.conv(self.k_proj(x), self.k_conv1d.weight).view(B, T, H, d)
        v = self.conv(self.v_proj(x), self.v_conv1d.weight).view(B, T, H, d)
        q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) * d ** -0.5
        k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        z = (self.f_b_proj(self.f_a_proj(x)) + self.dt_bias).view(B, T, H, d)
        g = self.lb * torch.sigmoid(self.A_log.exp()[:, None] * z)
        beta = torch.sigmoid(self.b_proj(x))                                    # [B,T,H]
        o = kda_chunked(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                        g.transpose(1, 2), beta.transpose(1, 2))                # [B,H,T,d]
        o = o.transpose(1, 2)
        y = self.o_norm(o) * torch.sigmoid(self.g_proj(x).view(B, T, H, d))
        return self.o_proj(y.reshape(B, T, H * d))


class MLA(nn.Module):
    """Gated NoPE MLA, k3-architecture.md §3.3 (q_a/kv_a norms use eps 1e-6)."""

    def __init__(self, cfg):
        super().__init__()
        D, H = cfg["hidden_size"], cfg["num_attention_heads"]
        self.H = H
        self.dn, self.dr, self.dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        self.rq, self.rkv = cfg["q_lora_rank"], cfg["kv_lora_rank"]
        self.q_a_proj = Linear(D, self.rq)
        self.q_a_layernorm = RMSNorm(self.rq, 1e-6)
        self.q_b_proj = Linear(self.rq, H * (self.dn + self.dr))
        self.kv_a_proj_with_mqa = Linear(D, self.rkv + self.dr)
        self.kv_a_layernorm = RMSNorm(self.rkv, 1e-6)
        self.kv_b_proj = Linear(self.rkv, H * (self.dn + self.dv))
        # optional rows follow the tensor table (src/io/tensor_table.cpp)
        self.g_proj = Linear(D, H * self.dv) if cfg.get("mla_use_output_gate", False) else None
        self.o_proj = Linear(H * self.dv, D)

    def forward(self, x):
        B, T, _ = x.shape
        H, dn, dr, dv = self.H, self.dn, self.dr, self.dv
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(B, T, H, dn + dr)
        ckv = self.kv_a_proj_with_mqa(x)
        c = self.kv_a_layernorm(ckv[..., :self.rkv])
        kr = ckv[..., self.rkv:]                                               # [B,T,dr] shared
        kv = self.kv_b_proj(c).view(B, T, H, dn + dv)
        k = torch.cat([kv[..., :dn], kr[:, :, None, :].expand(B, T, H, dr)], dim=-1)
        v = kv[..., dn:]
        s = torch.einsum("bthe,bshe->bhts", q, k) * (dn + dr) ** -0.5
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
        o = torch.einsum("bhts,bshe->bthe", s.softmax(-1), v)                  # [B,T,H,dv]
        if self.g_proj is not None:
            o = o * torch.sigmoid(self.g_proj(x).view(B, T, H, dv))
        return self.o_proj(o.reshape(B, T, H * dv))


class DenseMLP(nn.Module):
    """Layer-0 dense SiTU-GLU MLP (§3.5)."""

    def __init__(self, D, I, b1, b2):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = Linear(D, I), Linear(D, I), Linear(I, D)
        self.b1, self.b2 = b1, b2

    def forward(self, x):
        return self.down_proj(situ_glu(self.gate_proj(x), self.up_proj(x), self.b1, self.b2))


class Router(nn.Module):
    def __init__(self, D, E):
        super().__init__()
        self.weight = lin(E, D)
        self.register_buffer("e_score_correction_bias", torch.zeros(E))


class LatentMoE(nn.Module):
    """Stable LatentMoE (§3.6): sigmoid router + correction bias (selection only), latent
    down-projection, MXFP4 (QAT, straight-through) routed SiTU-GLU experts, latent RMSNorm,
    up-projection, plus shared experts on the full-width input.
    Ties in top-k: torch.topk order (never exercised with continuous scores)."""

    def __init__(self, cfg):
        super().__init__()
        D, E = cfg["hidden_size"], cfg["num_experts"]
        L, I = cfg["routed_expert_hidden_size"], cfg["moe_intermediate_size"]
        S = cfg["num_shared_experts"] * I
        self.E, self.k = E, cfg["num_experts_per_token"]
        self.rsf = float(cfg["routed_scaling_factor"])
        self.b1, self.b2 = cfg["activation_situ_beta"], cfg["activation_situ_linear_beta"]
        self.gate = Router(D, E)
        self.routed_expert_down_proj = Linear(D, L)
        # optional rows follow the tensor table (src/io/tensor_table.cpp)
        self.routed_expert_norm = RMSNorm(L, cfg["rms_norm_eps"]) if cfg.get("latent_moe_use_norm", False) else None
        self.routed_expert_up_proj = Linear(L, D)
        self.experts_w1 = nn.Parameter(torch.empty(E, I, L))   # gate
        self.experts_w3 = nn.Parameter(torch.empty(E, I, L))   # up
        self.experts_w2 = nn.Parameter(torch.empty(E, L, I))   # down
        self.shared_experts = DenseMLP(D, S, self.b1, self.b2) if S > 0 else None
        self.qat = True
        self.last_scores = None          # detached router scores [N, E] of the last forward
        self.last_counts = None          # tokens per expert [E] of the last forward

    def forward(self, x):
        B, T, D = x.shape
        xf = x.reshape(B * T, D)
        s = torch.sigmoid(xf @ self.gate.weight.t())
        bias = self.gate.e_score_correction_bias
        sel = torch.topk(s.detach() + bias, self.k, dim=-1).indices           # [N, k]
        w = s.gather(1, sel)
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * self.rsf
        z = xf @ self.routed_expert_down_proj.weight.t()                       # [N, L]
        q = ste_mxfp4 if self.qat else (lambda t: t)
        W1, W3, W2 = q(self.experts_w1), q(self.experts_w3), q(self.experts_w2)
        acc = torch.zeros_like(z)
        flat = sel.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=self.E)
        tok = order // self.k
        wsorted = w.reshape(-1)[order]
        start = 0
        for e, n in enumerate(counts.tolist()):
            if n == 0:
                continue
            ti = tok[start:start + n]
            ze = z[ti]
            h = situ_glu(ze @ W1[e].t(), ze @ W3[e].t(), self.b1, self.b2)
            acc = acc.index_add(0, ti, (h @ W2[e].t()) * wsorted[start:start + n, None])
            start += n
        r = self.routed_expert_up_proj(acc if self.routed_expert_norm is None else self.routed_expert_norm(acc))
        if self.training:
            self.last_scores = s.detach()
            self.last_counts = counts
        if self.shared_experts is not None:
            r = r + self.shared_experts(xf)
        return r.view(B, T, D)


class Layer(nn.Module):
    def __init__(self, cfg, i):
        super().__init__()
        D, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.is_kda = (i + 1) in cfg["linear_attn_config"]["kda_layers"]
        self.self_attn = KDA(cfg) if self.is_kda else MLA(cfg)
        self.input_layernorm = RMSNorm(D, eps)
        self.post_attention_layernorm = RMSNorm(D, eps)
        self.self_attention_res_norm = RMSNorm(D, eps)
        self.self_attention_res_proj = nn.Module()
        self.self_attention_res_proj.weight = nn.Parameter(torch.zeros(1, D))
        self.mlp_res_norm = RMSNorm(D, eps)
        self.mlp_res_proj = nn.Module()
        self.mlp_res_proj.weight = nn.Parameter(torch.zeros(1, D))
        if i < cfg["first_k_dense_replace"]:
            self.mlp = DenseMLP(D, cfg["intermediate_size"], cfg["activation_situ_beta"],
                                cfg["activation_situ_linear_beta"])
        else:
            self.block_sparse_moe = LatentMoE(cfg)

    def ffn(self, x):
        return self.mlp(x) if hasattr(self, "mlp") else self.block_sparse_moe(x)


def attn_res_mix(values, norm_w, proj_w, eps):
    """Block AttnRes Mix (k3-architecture.md §3.1): values list of [B,T,D];
    score_j = (norm_w ⊙ proj_w) · v_j / sqrt(mean(v_j²) + eps); softmax over j; Σ p_j v_j (raw)."""
    V = torch.stack(values, dim=0)                                             # [n,B,T,D]
    s = (norm_w * proj_w.reshape(-1))
    score = (V * torch.rsqrt(V.pow(2).mean(-1, keepdim=True) + eps) * s).sum(-1)   # [n,B,T]
    p = score.softmax(dim=0)
    return (p[..., None] * V).sum(0)


class K3Model(nn.Module):
    """Full K3 text model: embed → 93-style layer loop with Block AttnRes → final mix → norm → head.
    forward(ids [B,T] int64, embeds [B,T,D] float32 or None) -> logits [B,T,V] float32; `embeds`,
    when given, replaces the token embeddings (the demo model's image rows at <|media_pad|>)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        D, V = cfg["hidden_size"], cfg["vocab_size"]
        self.eps = cfg["rms_norm_eps"]
        self.block = cfg["attn_res_block_size"]
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(V, D)
        self.model.layers = nn.ModuleList([Layer(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.model.norm = RMSNorm(D, self.eps)
        self.model.output_attn_res_norm = RMSNorm(D, self.eps)
        self.model.output_attn_res_proj = nn.Module()
        self.model.output_attn_res_proj.weight = nn.Parameter(torch.zeros(1, D))
        self.lm_head = Linear(D, V)

    def forward(self, ids, embeds=None):
        eps = self.eps
        prefix = self.model.embed_tokens(ids) if embeds is None else embeds
        bank = []
        for i, L in enumerate(self.model.layers):
            if bank:
                h = attn_res_mix(bank + [prefix], L.self_attention_res_norm.weight,
                                 L.self_attention_res_proj.weight, eps)
            else:
                h = prefix
            if i % self.block == 0:
                bank.append(prefix)
                prefix = None
            a = L.self_attn(L.input_layernorm(h))
            prefix = a if prefix is None else prefix + a
            h = attn_res_mix(bank + [prefix], L.mlp_res_norm.weight, L.mlp_res_proj.weight, eps)
            prefix = prefix + L.ffn(L.post_attention_layernorm(h))
        final = attn_res_mix(bank + [prefix], self.model.output_attn_res_norm.weight,
                             self.model.output_attn_res_proj.weight, eps)
        return self.lm_head(self.model.norm(final))

    def moe_layers(self):
        return [L.block_sparse_moe for L in self.model.layers if hasattr(L, "block_sparse_moe")]


def init_weights(model, seed):
    """Deterministic init: matrices N(0, 0.02) (output projections scaled by 1/sqrt(2·layers)),
    norms 1, AttnRes pseudo-queries 0 (uniform mix, algorithms.md §2.1), KDA: A_log 0,
    dt_bias U(−5, −0.5) (initial per-token retention between ≈0.96 and ≈0.55), conv taps N(0, 0.3)
    with the current tap +1; experts N(0, 0.02·4) since MXFP4 has ~3 bits of resolution."""
    gen = torch.Generator().manual_seed(seed)
    n_layers = model.cfg["num_hidden_layers"]
    out_std = 0.02 / math.sqrt(2 * n_layers)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.fill_(1.0)
            elif "res_proj" in name or name.endswith("A_log"):
                p.zero_()
            elif name.endswith("dt_bias"):
                p.copy_(torch.rand(p.shape, generator=gen) * 4.5 - 5.0)
            elif "conv1d" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
                p[..., -1] += 1.0
            elif "experts_w" in name:
                std = 0.08 if "w2" not in name else 0.08 / math.sqrt(2 * n_layers)
                p.copy_(torch.randn(p.shape, generator=gen) * std)
            elif name.endswith("o_proj.weight") or name.endswith("down_proj.weight") and "routed" not in name \
                    or name.endswith("routed_expert_up_proj.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * out_std)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
