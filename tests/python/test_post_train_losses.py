"""tools/train/post_losses.py against hand-computed values: the budget rule (b0, overwrite, τ
schedule), GRPO advantages, REINFORCE / PPO-clip losses and their gradients, MOPD's clipped
log-ratio reward and loss, and the effort conditioning as the engine's chat template renders it."""
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.train import post_losses as pl  # noqa: E402
from tools.train.tokenizer import load_encoding  # noqa: E402

MINI = ROOT / "models" / "k3-mini"
K3 = os.environ.get("K3_BIN", str(ROOT / "build" / "tools" / "cli" / "k3"))


def test_estimate_b0_median_of_correct_samples_else_fallback():
    assert pl.estimate_b0([10, 20, 30, 40], [True, False, True, True], 99) == 30.0     # median of 10, 30, 40
    assert pl.estimate_b0([40, 10, 30, 20], [True] * 4, 99) == 25.0                   # even count: (20 + 30) / 2
    assert pl.estimate_b0([10, 20], [False, False], 17) == 17.0                       # no correct sample
    assert pl.estimate_b0([0, 0], [True, True], 5) == 1.0                             # never a zero budget
    with pytest.raises(ValueError, match="2 lengths but 1"):
        pl.estimate_b0([1, 2], [True], 3)


def test_budget_rule_overwrites_only_over_tau_b0():
    r = torch.tensor([1.0, 1.0, 0.5, 1.0])
    lens = torch.tensor([10, 31, 20, 30])
    b0 = torch.tensor([20.0, 20.0, 10.0, 30.0])
    # tau 1.5 -> limits 30, 30, 15, 45: samples 1 (31 > 30) and 2 (20 > 15) are over budget.
    assert pl.budget_rewards(r, lens, b0, 1.5).tolist() == [1.0, 0.0, 0.0, 1.0]
    assert pl.budget_rewards(r, lens, b0, 1.5, overwrite=-0.5).tolist() == [1.0, -0.5, -0.5, 1.0]
    # exactly at the limit is within budget: 30 = 1.0 * 30
    assert pl.budget_rewards(r, lens, b0, 1.0).tolist() == [1.0, 0.0, 0.0, 1.0]
    assert pl.budget_rewards(r, lens, b0, 3.1).tolist() == [1.0, 1.0, 0.5, 1.0]


def test_tau_steps_down_in_equal_stages():
    assert [pl.tau_schedule(i, 9) for i in range(9)] == [2.0] * 3 + [1.5] * 3 + [1.0] * 3
    assert [pl.tau_schedule(i, 4) for i in range(4)] == [2.0, 2.0, 1.5, 1.0]
    assert pl.tau_schedule(0, 1) == 2.0
    with pytest.raises(ValueError, match="outside"):
        pl.tau_schedule(4, 4)


def test_group_advantages_hand_values():
    a = pl.group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]]))
    s = math.sqrt(0.25 * 0.75)                                 # population std of (0, 0, 0, 1)
    want = [[1, -1, -1, 1], [0, 0, 0, 0], [-0.25 / s, -0.25 / s, -0.25 / s, 0.75 / s]]
    for got_row, want_row in zip(a.tolist(), want):
        assert got_row == pytest.approx(want_row, abs=1e-5)


def test_token_logprobs_scores_the_next_token():
    logits = torch.tensor([[[0.0, math.log(3.0)], [math.log(4.0), 0.0], [5.0, 5.0]]])   # B=1, T=3, V=2
    ids = torch.tensor([[0, 1, 0]])
    got = pl.token_logprobs(logits, ids)[0].tolist()
    assert got == pytest.approx([math.log(3 / 4), math.log(4 / 5)], rel=1e-6)


LOGP = [[-1.0, -2.0, -3.0], [-0.5, -1.0, -2.0]]
MASK = torch.tensor([[0, 1, 1], [1, 1, 0]])
ADV = torch.tensor([2.0, -1.0])


def test_reinforce_loss_and_gradient():
    logp = torch.tensor(LOGP, requires_grad=True)
    loss = pl.pg_loss(logp, None, ADV, MASK)
    # masked tokens: 2*(-2) + 2*(-3) + (-1)(-0.5) + (-1)(-1) = -8.5 over 4 tokens -> loss 2.125
    assert loss.item() == pytest.approx(2.125)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -0.5, -0.5], [0.25, 0.25, 0.0]]))
    # PPO with old = logp.detach() (rho = 1): value -masked_mean(A) = -(2 + 2 - 1 - 1) / 4, the same gradient.
    logp2 = torch.tensor(LOGP, requires_grad=True)
    loss2 = pl.pg_loss(logp2, logp2.detach(), ADV, MASK)
    loss2.backward()
    assert loss2.item() == pytest.approx(-0.5)
    assert torch.allclose(logp2.grad, logp.grad)


def test_ppo_clip_hand_values():
    logp = torch.tensor(LOGP, requires_grad=True)
    # ratios 1.5 / 0.5 on the masked tokens of both sequences
    old = torch.tensor(LOGP) - torch.log(torch.tensor([[1.0, 1.5, 0.5], [1.5, 0.5, 1.0]]))
    loss = pl.pg_loss(logp, old, ADV, MASK, clip_eps=0.2)
    # A=+2: min(1.5*2, 1.2*2)=2.4, min(0.5*2, 0.8*2)=1.0; A=-1: min(-1.5, -1.2)=-1.5, min(-0.5, -0.8)=-0.8
    assert loss.item() == pytest.approx(-(2.4 + 1.0 - 1.5 - 0.8) / 4, rel=1e-6)
    loss.backward()
    # clipped terms (2.4 and -0.8) carry no gradient; the others: -A*rho/4
    assert torch.allclose(logp.grad, torch.tensor([[0.0, 0.0, -2 * 0.5 / 4], [1.5 / 4, 0.0, 0.0]]))


def test_mopd_reward_is_clipped_stopgrad_log_ratio():
    lt = torch.tensor([[-1.0, -5.0, -0.1, -2.0]])
    ls = torch.tensor([[-2.0, -1.0, -3.0, -2.0]], requires_grad=True)
    r = pl.mopd_token_rewards(lt, ls, clip=2.0)
    assert torch.allclose(r, torch.tensor([[1.0, -2.0, 2.0, 0.0]]))            # 1, clip(-4), clip(2.9), 0
    assert not r.requires_grad
    mask = torch.tensor([[1, 1, 1, 0]])
    loss = pl.mopd_loss(ls, r, mask)
    assert loss.item() == pytest.approx(-(1 * -2 + -2 * -1 + 2 * -3) / 3)  # = 2
    loss.backward()
    assert torch.allclose(ls.grad, torch.tensor([[-1 / 3, 2 / 3, -2 / 3, 0.0]]))
    with pytest.raises(ValueError, match="clip"):
        pl.mopd_token_rewards(lt, ls, clip=0.0)


def test_percentile_nearest_rank():
    assert pl.percentile(list(range(1, 21)), 95) == 19.0
    assert pl.percentile([5], 95) == 5.0
    assert pl.percentile([3, 1, 2], 50) == 2.0


def _render(effort):
    chat = ROOT / "build" / "post_losses_chat.json"
    chat.parent.mkdir(exist_ok=True)
    chat.write_text('[{"role":"user","content":"Who made the heaven?"}]')
    r = subprocess.run([K3, "tokenize", "-m", str(MINI), "--chat", str(chat), "--effort", effort, "--ids-only"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [int(t) for t in r.stdout.split()]


def test_effort_conditioning_differs_exactly_in_the_effort_message():
    assert os.path.exists(K3), f"k3 binary not found at {K3} (scripts/setup.sh builds it)"
    assert (MINI / "config.json").exists(), f"{MINI}: missing"
    enc = load_encoding(MINI / "tiktoken.model")
    base = _render("none")                                  # the same conversation with no effort message
    renders = {e: _render(e) for e in pl.EFFORTS}
    for e, ids in renders.items():
        assert pl.effort_chat_kwargs(e) == {"thinking": True, "thinking_effort": e}
        head = ids[:len(ids) - len(base)]
        assert ids[len(head):] == base, e                  # everything after the effort message is shared
        text = enc.decode(head)
        assert text == ('<|open|>message role="system" type="thinking-effort"<|sep|>'
                        + pl.effort_system_text(e) + "<|close|>message<|sep|><|end_of_msg|>"), e
    assert len({tuple(v) for v in renders.values()}) == 3
    with pytest.raises(ValueError, match="reasoning_effort: 'medium'"):
        pl.effort_chat_kwargs("medium")
