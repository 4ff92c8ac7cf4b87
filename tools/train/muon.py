"""Per-head Muon (algorithms.md §4) for 2-D/3-D weight matrices; AdamW handles the rest.

Each Muon parameter carries a block spec: rows_per_block = None (whole matrix; 3-D stacked experts
[E, out, in] are orthogonalized per expert) or an int (per-head blocks along the output rows: KDA
q/k/v_proj use head_dim, MLA q_b_proj nope+rope, kv_b_proj nope+v). Update per block of shape
[m, n]: Nesterov momentum (μ = 0.95), NS5 with (3.4445, −4.7750, 2.0315) in float32 (CPU; the
spec runs it in bf16), scale s = 0.2·sqrt(max(m, n)) (Moonlight, per block shape),
W ← W − lr·s·X − lr·wd·W.
"""
import torch


def newton_schulz5(D, steps=5):
    """D [..., m, n] → approx. U Vᵀ of each matrix (batched over leading dims)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    X = D / (D.flatten(-2).norm(dim=-1)[..., None, None] + 1e-7)
    tr = X.shape[-2] > X.shape[-1]
    if tr:
        X = X.transpose(-1, -2)
    for _ in range(steps):
        A = X @ X.transpose(-1, -2)
        X = a * X + (b * A + c * A @ A) @ X
    return X.transpose(-1, -2) if tr else X


class Muon(torch.optim.Optimizer):
    def __init__(self, params_and_blocks, lr, momentum=0.95, weight_decay=0.0):
        params = [p for p, _ in params_and_blocks]
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))
        self.blocks = {id(p): rb for p, rb in params_and_blocks}

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if "buf" not in st:
                    st["buf"] = torch.zeros_like(p)
                buf = st["buf"]
                buf.mul_(mu).add_(p.grad)
                d = p.grad + mu * buf
                rb = self.blocks[id(p)]
                if rb is not None:                                  # per-head blocks
                    out, n_in = d.shape
                    d = d.reshape(out // rb, rb, n_in)
                X = newton_schulz5(d)
                m, n = X.shape[-2], X.shape[-1]
                X = X.reshape(p.shape) * (0.2 * max(m, n) ** 0.5)
                p.mul_(1 - lr * wd).add_(X, alpha=-lr)
