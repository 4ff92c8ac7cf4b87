"""Post-training losses of K3-mini-chat (issue 23): the effort budget rule, group-normalised
policy-gradient advantages, MOPD's clipped log-ratio reward and the effort conditioning.

Pure functions (no model, no engine). Shapes are outermost first; B = sequences, T = positions,
V = vocabulary, G = task groups, n = samples per group. Log-probabilities are natural-log floats.

Sources: the Kimi K3 technical report's post-training recipe as summarised in issue 23 (budget rule
"a trajectory longer than τ·b0(x) gets its reward overwritten; τ stepped down"; MOPD reward
clip(sg[log π_teacher − log π_student], −R, R)); GRPO (Shao et al. 2024, DeepSeekMath §4.1) for the
group-normalised advantage; PPO (Schulman et al. 2017) for the clipped importance-ratio objective;
shared/spec/tokenizer.md §4.2 for the thinking-effort system message.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

EFFORTS = ("low", "high", "max")


# --- effort conditioning ----------------------------------------------------------------------

def effort_system_text(effort: str) -> str:
    """Body of the `type="thinking-effort"` system message the K3 chat template writes for
    `thinking_effort=effort` (shared/spec/tokenizer.md §4.2; the engine's src/tokenizer/chat_k3
    renders it). effort: "low" | "high" | "max". Raises ValueError naming the value otherwise."""
    if effort not in EFFORTS:
        raise ValueError(f"reasoning_effort: {effort!r} is not one of {', '.join(EFFORTS)}")
    return ("`thinking_effort` guides on how much to think in your thinking channel (not including the "
            "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
            f"Now the system is invoked with `thinking_effort={effort}`.")


def effort_chat_kwargs(effort: str) -> dict:
    """Chat-template keyword arguments for an OpenAI `reasoning_effort` (k3.LLM.chat /
    Engine.render_chat): thinking on, thinking_effort = effort. Raises ValueError as above."""
    effort_system_text(effort)
    return {"thinking": True, "thinking_effort": effort}


# --- the budget rule --------------------------------------------------------------------------

def estimate_b0(think_lens: Sequence[int], correct: Sequence[bool], fallback: float) -> float:
    """b0(x) of one task at one effort: the median thinking length (tokens) of the reference
    policy's CORRECT samples of that task at that effort; `fallback` (the SFT trajectory's
    thinking length for that effort) when no sample is correct. think_lens, correct: [n].
    The median of an even count is the mean of the two middle values. Returns a float >= 1
    (a zero-length budget would forbid every trajectory). Raises ValueError on length mismatch."""
    if len(think_lens) != len(correct):
        raise ValueError(f"estimate_b0: {len(think_lens)} lengths but {len(correct)} correctness flags")
    ok = sorted(float(t) for t, c in zip(think_lens, correct) if c)
    if not ok:
        return max(1.0, float(fallback))
    m = len(ok)
    med = ok[m // 2] if m % 2 else 0.5 * (ok[m // 2 - 1] + ok[m // 2])
    return max(1.0, med)


def budget_rewards(rewards: torch.Tensor, think_lens: torch.Tensor, b0: torch.Tensor, tau: float,
                   overwrite: float = 0.0) -> torch.Tensor:
    """The budget rule: r'_i = overwrite if think_len_i > tau·b0_i else r_i.
    rewards, think_lens, b0: [B] (any float/int dtypes; b0 per sample = its task's b0 at its
    effort). Returns float64 [B]. overwrite 0 = the reward of a failed task (rewards lie in [0, 1])."""
    r = rewards.double()
    over = think_lens.double() > tau * b0.double()
    return torch.where(over, torch.full_like(r, float(overwrite)), r)


def tau_schedule(iteration: int, n_iterations: int, taus: Sequence[float] = (2.0, 1.5, 1.0)) -> float:
    """τ stepped down over training: the iterations are split into len(taus) equal stages and
    stage k uses taus[k] (default 2.0 → 1.5 → 1.0: first a loose budget, the final third at b0).
    iteration in [0, n_iterations). Raises ValueError when out of range."""
    if not 0 <= iteration < n_iterations:
        raise ValueError(f"tau_schedule: iteration {iteration} outside [0, {n_iterations})")
    return float(taus[min(len(taus) - 1, iteration * len(taus) // n_iterations)])


# --- group-normalised policy gradient ----------------------------------------------------------

def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantage: rewards [G, n] (n samples of each task) -> [G, n] float64,
    A_gi = (r_gi − mean_g) / (std_g + eps), std the population standard deviation (divide by n).
    A group whose rewards are all equal gets A = 0 (it carries no learning signal)."""
    r = rewards.double()
    mean = r.mean(-1, keepdim=True)
    std = r.std(-1, unbiased=False, keepdim=True)
    return (r - mean) / (std + eps)


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log π(ids[:, t+1] | ids[:, :t+1]): logits [B, T, V] from a forward of ids [B, T] ->
    [B, T−1] (float32 if logits are). Position t of the result scores token t+1."""
    lp = torch.log_softmax(logits[:, :-1].float(), -1)
    return lp.gather(-1, ids[:, 1:, None])[..., 0]


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ mask·x / max(1, Σ mask) over all elements (the token-level mean of DAPO: every sampled
    token weighs the same, whatever its sequence's length). x, mask: same shape."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def pg_loss(logp: torch.Tensor, old_logp: Optional[torch.Tensor], adv: torch.Tensor, mask: torch.Tensor,
            clip_eps: float = 0.2) -> torch.Tensor:
    """Policy-gradient loss on the policy-sampled tokens.
    logp: [B, T] log π_θ of each token (with grad); old_logp: [B, T] of the sampling policy
    (no grad) or None; adv: [B] per-sequence advantage (broadcast to its tokens); mask: [B, T]
    1 on policy-sampled tokens (prompt and tool-result tokens 0).
    old_logp None: plain on-policy REINFORCE, L = −masked_mean(A·logp).
    old_logp given: PPO clip, ρ = exp(logp − old_logp),
    L = −masked_mean(min(ρ·A, clip(ρ, 1−ε, 1+ε)·A)). With old_logp = logp.detach() (ρ = 1,
    ∇ρ = ∇logp) the PPO gradient equals REINFORCE's (the values differ: −masked_mean(A)); rl.py
    makes one update per rollout batch, so it uses REINFORCE."""
    a = adv.to(logp.dtype)[:, None].expand_as(logp)
    if old_logp is None:
        return -masked_mean(a * logp, mask)
    ratio = torch.exp(logp - old_logp)
    obj = torch.minimum(ratio * a, ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * a)
    return -masked_mean(obj, mask)


# --- MOPD ------------------------------------------------------------------------------------

def mopd_token_rewards(logp_teacher: torch.Tensor, logp_student: torch.Tensor, clip: float) -> torch.Tensor:
    """MOPD per-token reward r_t = clip(sg[log π_teacher(y_t) − log π_student(y_t)], −R, R).
    logp_teacher, logp_student: [B, T] log-probabilities of the student's sampled tokens under
    the teacher of the sample's (domain, effort) and the student. Returns [B, T], detached."""
    if not clip > 0:
        raise ValueError(f"mopd clip R must be > 0, got {clip}")
    return (logp_teacher.detach() - logp_student.detach()).clamp(-clip, clip)


def mopd_loss(logp_student: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The student's loss from MOPD's dense reward, with r_t as each token's own advantage (no
    return-to-go: the per-token reverse-KL estimator; Σ_t E[r_t ∇log π(y_t)] is the gradient of
    −KL(π_student‖π_teacher) per position when unclipped).
    L = −masked_mean(r_t · log π_student(y_t)); logp_student, rewards, mask: [B, T]."""
    return -masked_mean(rewards.detach().to(logp_student.dtype) * logp_student, mask)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in (0, 100]) of a non-empty list: the ⌈q/100·n⌉-th smallest."""
    if not values:
        raise ValueError("percentile of an empty list")
    s = sorted(values)
    return float(s[max(0, math.ceil(q / 100.0 * len(s)) - 1)])
