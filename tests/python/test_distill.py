"""tools/train/distill.py (K3-nano from K3-mini) on a short wall budget: both phases run,
the warm-up KL loss falls, the on-policy reward stays within clip(log p_t - log p_s, -R, R), and
trained.pt loads into the trainer's K3Model with the nano config; kd_loss checked on hand values."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "reference"))

from tools.train.distill import kd_loss, nano_text_config  # noqa: E402
from tools.train.model import K3Model  # noqa: E402

MINI = ROOT / "models" / "k3-mini"

pytestmark = pytest.mark.skipif(not (MINI / "config.json").exists(), reason="models/k3-mini missing")


def test_kd_loss_on_hand_values():
    # Two tokens, vocab 3: KL(p_t || p_s) per token, mean, + 0.1 x cross-entropy of the targets.
    s = torch.tensor([[[0.0, 1.0, 2.0], [1.0, 1.0, 1.0]]])
    t = torch.tensor([[[2.0, 1.0, 0.0], [1.0, 1.0, 1.0]]])
    y = torch.tensor([[2, 0]])
    loss, kl = kd_loss(s, t, y)
    ps = [math.exp(v) / sum(math.exp(u) for u in (0, 1, 2)) for v in (0, 1, 2)]
    pt = ps[::-1]
    kl0 = sum(a * math.log(a / b) for a, b in zip(pt, ps))
    want_kl = (kl0 + 0.0) / 2
    want_ce = (-math.log(ps[2]) - math.log(1 / 3)) / 2
    assert kl.item() == pytest.approx(want_kl, rel=1e-6)
    assert loss.item() == pytest.approx(want_kl + 0.1 * want_ce, rel=1e-6)
    same, kl_same = kd_loss(t, t, y)
    assert kl_same.item() == pytest.approx(0.0, abs=1e-7)


def run_distill(tmp_path, name, warmup_min, onpolicy_min, clip):
    """distill.py on a 20 kB text with a short wall budget; returns (log records, out dir)."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "train.txt").write_text((MINI / "heldout.txt").read_text()[:20000])
    out = tmp_path / name
    r = subprocess.run([sys.executable, "-m", "tools.train.distill", "--teacher", str(MINI), "--data", str(data),
                        "--out", str(out), "--warmup-minutes", str(warmup_min), "--onpolicy-minutes", str(onpolicy_min),
                        "--seq-len", "32", "--batch", "4", "--prefix", "8", "--new", "4", "--onpolicy-batch", "2",
                        "--clip", str(clip)],
                       cwd=ROOT, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    return [json.loads(line) for line in (out / "distill_log.jsonl").read_text().splitlines()], out


def test_distill_both_phases_and_a_loadable_checkpoint(tmp_path):
    # Warm-up only (the first step is always logged): teacher-forced KD loss = KL + 0.1 CE.
    recs, out = run_distill(tmp_path, "warm", 0.02, 0, 0.5)
    first = recs[1]
    assert first["phase"] == "warmup" and first["step"] == 0
    assert first["kl"] > 0 and first["loss"] > first["kl"] and math.isfinite(first["loss"])
    assert recs[-1]["done"] and recs[-1]["steps_done"] >= 1
    ck = torch.load(out / "trained.pt", weights_only=False)
    vocab = json.loads((MINI / "config.json").read_text())["text_config"]["vocab_size"]
    assert ck["cfg"] == nano_text_config(vocab) and ck["steps_done"] == recs[-1]["steps_done"]
    m = K3Model(ck["cfg"])
    m.load_state_dict(ck["state_dict"])  # loads: every tensor present with its shape
    with torch.no_grad():
        logits = m(torch.tensor([[1, 2, 3]]))
    assert logits.shape == (1, 3, vocab) and torch.isfinite(logits).all()
    # On-policy only, with a tiny clip R: the token reward clip(log p_t - log p_s, -R, R) keeps
    # its mean inside [-R, R] (an untrained student is far from the teacher: unclipped |r| >> R).
    clip = 0.01
    recs, _ = run_distill(tmp_path, "onpolicy", 0, 0.02, clip)
    first = recs[1]
    assert first["phase"] == "onpolicy" and first["step"] == 0
    assert -clip <= first["reward"] <= clip
    assert math.isfinite(first["loss"]) and first["kl_prefix"] > 0
