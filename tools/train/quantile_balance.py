"""Quantile Balancing of the router correction bias (algorithms.md §3.2), exact quantile.

qb_solve(s [N, E] sigmoid scores, b [E] current bias, k) -> new bias [E]:
  α_i = (k+1)-th largest of s_i + b;  μ_ij = s_ij − α_i;
  b̂_j = −Quantile_{1−k/E}({μ_ij}_i) (torch.quantile, linear interpolation);  b = b̂ − mean(b̂).
The new bias replaces the old one (solved, not stepped); there is no auxiliary loss.
"""
import torch


@torch.no_grad()
def qb_solve(s, b, k):
    E = s.shape[1]
    alpha = torch.topk(s + b, k + 1, dim=-1).values[:, -1]
    mu = s - alpha[:, None]
    bh = -torch.quantile(mu.double(), 1.0 - k / E, dim=0).to(s.dtype)
    return bh - bh.mean()
