"""Fast unit tests of the K3-mini trainer pieces (tools/train/)."""
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "reference"))

import k3_checkpoint as kc  # noqa: E402
from tools.train.bpe import train_bpe, write_tiktoken  # noqa: E402
from tools.train.evaluate import windows  # noqa: E402
from tools.train.kda import kda_chunked, kda_recurrent  # noqa: E402
from tools.train.muon import Muon, newton_schulz5  # noqa: E402
from tools.train.mxfp4_qat import fake_quant_mxfp4, ste_mxfp4  # noqa: E402
from tools.train.quantile_balance import qb_solve  # noqa: E402
from tools.train.tokenizer import load_encoding  # noqa: E402


def test_mxfp4_fake_quant_equals_packed_roundtrip():
    g = np.random.default_rng(0)
    w = g.standard_normal((48, 128)) * np.exp(g.uniform(-12, 4, size=(48, 1)))
    w[0, :32] = 0.0                                     # all-zero group
    w[1, :32] = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.9] * 4     # RNE midpoints, saturation
    w = w.astype(np.float32).astype(np.float64)
    ref = kc.mxfp4_dequantize(*kc.mxfp4_quantize(w))
    got = fake_quant_mxfp4(torch.from_numpy(w)).numpy()
    assert np.array_equal(got, ref)
    np.testing.assert_array_equal(got[1, :8], [0, 1, 1, 2, 2, 4, 4, 6])
    got32 = fake_quant_mxfp4(torch.from_numpy(w).float()).double().numpy()
    assert np.array_equal(got32, ref)
    assert np.array_equal(fake_quant_mxfp4(torch.from_numpy(got)).numpy(), got)   # idempotent


def test_mxfp4_ste_gradient_is_identity():
    w = torch.randn(8, 64, requires_grad=True)
    c = torch.randn(8, 64)
    (ste_mxfp4(w) * c).sum().backward()
    assert torch.equal(w.grad, c)
    assert torch.equal(ste_mxfp4(w).detach(), fake_quant_mxfp4(w.detach()))


def test_kda_chunked_matches_recurrent():
    torch.manual_seed(0)
    for T in (1, 15, 16, 17, 40):
        B, H, K, V = 2, 3, 8, 6
        q = torch.nn.functional.normalize(torch.randn(B, H, T, K, dtype=torch.float64), dim=-1) / K ** 0.5
        k = torch.nn.functional.normalize(torch.randn(B, H, T, K, dtype=torch.float64), dim=-1)
        v = torch.randn(B, H, T, V, dtype=torch.float64)
        g = -5 * torch.sigmoid(3 * torch.randn(B, H, T, K, dtype=torch.float64))
        g[..., 0] = -5 + 1e-9                           # pinned at the bound
        beta = torch.sigmoid(torch.randn(B, H, T, dtype=torch.float64))
        a, c = kda_recurrent(q, k, v, g, beta), kda_chunked(q, k, v, g, beta)
        assert (a - c).abs().max() / a.abs().max() < 1e-12, T


def test_quantile_balancing_flattens_load():
    g = torch.Generator().manual_seed(0)
    N, E, k = 4096, 16, 4
    s = torch.sigmoid(torch.randn(N, E, generator=g) + torch.linspace(-2, 2, E))
    b = torch.zeros(E)
    def load(b):
        sel = torch.topk(s + b, k, dim=-1).indices
        return torch.bincount(sel.reshape(-1), minlength=E).double()
    before = load(b)
    for _ in range(10):
        b = qb_solve(s, b, k)
    after = load(b)
    assert before.max() / before.mean() > 2.5
    assert after.max() / after.mean() < 1.05, after
    assert abs(float(b.mean())) < 1e-6                  # centred


def test_muon_per_head_blocks():
    torch.manual_seed(0)
    D = torch.randn(4 * 16, 32)
    X = newton_schulz5(D.reshape(4, 16, 32))
    for h in range(4):                                  # each block is orthogonalized on its own
        assert torch.allclose(X[h], newton_schulz5(D[16 * h:16 * (h + 1)]), atol=1e-5)
        sv = torch.linalg.svdvals(X[h])
        assert sv.min() > 0.5 and sv.max() < 1.3, sv
    assert not torch.allclose(X.reshape(64, 32), newton_schulz5(D), atol=1e-2)
    p = torch.nn.Parameter(torch.zeros(64, 32))
    p.grad = D.clone()
    opt = Muon([(p, 16)], lr=0.1)
    opt.step()
    exp = -0.1 * 0.2 * 32 ** 0.5 * newton_schulz5((D + 0.95 * D).reshape(4, 16, 32)).reshape(64, 32)
    assert torch.allclose(p.detach(), exp, atol=1e-6)


def test_bpe_deterministic_and_tiktoken_roundtrip(tmp_path):
    text = "the the the cat\n"
    v1, v2 = train_bpe(text, 258), train_bpe(text, 258)
    assert v1 == v2
    assert v1[256] == b"he" and v1[257] == b"the"       # tie (count 3) → smaller pair bytes first
    kjv = "In the beginning God created the heaven and the earth.\nAnd God said, Let there be light.\n"
    vocab = train_bpe(kjv * 3, 300)
    assert len(vocab) == 300 and vocab[:256] == [bytes([i]) for i in range(256)]
    write_tiktoken(vocab, tmp_path / "tiktoken.model")
    enc = load_encoding(tmp_path / "tiktoken.model")
    ids = enc.encode_ordinary(kjv)
    assert enc.decode(ids) == kjv and len(ids) < len(kjv) / 2
    assert enc.n_vocab == 300 + 256
    assert enc.encode("[BOS]", allowed_special="all") == [300]


def test_perplexity_windows_cover_each_target_once():
    assert list(windows(600, 256)) == [(0, 256, 1), (128, 384, 256), (256, 512, 384), (384, 600, 512)]
    assert list(windows(100, 256)) == [(0, 100, 1)]
    for M in (2, 255, 256, 257, 383, 384, 385, 1000):
        seen = []
        for s, e, first in windows(M, 256):
            assert e - s <= 256 and first > s
            seen += list(range(first, e))
        assert seen == list(range(1, M)), M
