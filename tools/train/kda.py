"""KDA delta-rule core (algorithms.md §1.2 recurrent form, §1.3 chunkwise WY/UT form), PyTorch.

All tensors are float32 (or float64 in tests). Shapes, outermost first:
  q, k : [B, H, T, K]   (q already L2-normalized and scaled by K^-1/2, k L2-normalized)
  v    : [B, H, T, V]
  g    : [B, H, T, K]   log-decay per key channel, g in (lb, 0) (K3 lower-bounded gate)
  beta : [B, H, T]
Returns o : [B, H, T, V]; the state S [B, H, K, V] starts at zero.
"""
import torch


def kda_recurrent(q, k, v, g, beta):
    """Naive per-token recurrence, exact update order of algorithms.md §1.2 (oracle for tests)."""
    B, H, T, K = q.shape
    V = v.shape[-1]
    S = q.new_zeros(B, H, K, V)
    outs = []
    for t in range(T):
        S = S * g[:, :, t].exp()[..., None]                      # decay rows
        e = v[:, :, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, :, t])
        S = S + k[:, :, t][..., None] * (beta[:, :, t][..., None] * e)[:, :, None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, :, t]))
    return torch.stack(outs, dim=2)


def kda_chunked(q, k, v, g, beta, chunk=16):
    """Chunkwise WY/UT form of algorithms.md §1.3 with C = `chunk` (default 16).

    Within a chunk the factor exp(Γ_i − Γ_j) is split at the chunk start (row-0 anchor, §1.4):
    with the lower bound −5 and C = 16 both factors stay inside fp32 range. Causal by construction.
    """
    B, H, T, K = q.shape
    V = v.shape[-1]
    pad = (-T) % chunk
    if pad:
        q = torch.nn.functional.pad(q, (0, 0, 0, pad))
        k = torch.nn.functional.pad(k, (0, 0, 0, pad))
        v = torch.nn.functional.pad(v, (0, 0, 0, pad))
        g = torch.nn.functional.pad(g, (0, 0, 0, pad))
        beta = torch.nn.functional.pad(beta, (0, pad))
    N = q.shape[2] // chunk
    C = chunk
    q = q.reshape(B, H, N, C, K)
    k = k.reshape(B, H, N, C, K)
    v = v.reshape(B, H, N, C, V)
    g = g.reshape(B, H, N, C, K)
    beta = beta.reshape(B, H, N, C)
    G = g.cumsum(dim=3)                                    # Γ_r, [B,H,N,C,K]
    eG = G.exp()
    k_pos = k * eG                                          # k_r ⊙ exp(Γ_r)
    k_neg = k * (-G).exp()                                  # k_r ⊙ exp(−Γ_r)
    q_pos = q * eG
    strict = torch.ones(C, C, dtype=torch.bool, device=q.device).tril(-1)
    incl = torch.ones(C, C, dtype=torch.bool, device=q.device).tril(0)
    Lm = (k_pos @ k_neg.transpose(-1, -2)) * beta[..., None]
    Lm = torch.where(strict, Lm, torch.zeros_like(Lm))
    Aqk = q_pos @ k_neg.transpose(-1, -2)
    Aqk = torch.where(incl, Aqk, torch.zeros_like(Aqk))
    eye = torch.eye(C, dtype=q.dtype, device=q.device).expand_as(Lm)
    X = torch.linalg.solve_triangular(eye + Lm, eye, upper=False, unitriangular=True)
    Tm = X * beta[..., None, :]                            # scale column j by β_j
    W = Tm @ k_pos                                          # [B,H,N,C,K]
    U = Tm @ v                                              # [B,H,N,C,V]
    G_last = G[:, :, :, -1:, :]                             # [B,H,N,1,K]
    k_tail = k * (G_last - G).exp()                         # k_r ⊙ exp(Γ_n − Γ_r)
    decay_last = G_last.squeeze(3).exp()                    # [B,H,N,K]
    S = q.new_zeros(B, H, K, V)
    outs = []
    for n in range(N):
        Vn = U[:, :, n] - W[:, :, n] @ S
        outs.append(q_pos[:, :, n] @ S + Aqk[:, :, n] @ Vn)
        S = decay_last[:, :, n][..., None] * S + k_tail[:, :, n].transpose(-1, -2) @ Vn
    o = torch.stack(outs, dim=2).reshape(B, H, N * C, V)
    return o[:, :, :T]
