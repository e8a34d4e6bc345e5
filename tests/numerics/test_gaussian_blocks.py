"""Scoring queries in blocks (studylib.numerics.gaussian._by_query_blocks) gives the direct formula's bits."""

from __future__ import annotations

import math

import pytest
import torch

from studylib.numerics import gaussian as G


def _direct_component(z, w, mu, var):  # the formula without blocks, written out: [B..., Q, K]
    diff = z.unsqueeze(-2) - mu.unsqueeze(-3)
    quad = (diff * diff / var.unsqueeze(-3)).sum(-1)
    logdet = torch.log(var).sum(-1).unsqueeze(-2)
    return torch.log(w).unsqueeze(-2) - 0.5 * (quad + logdet + z.shape[-1] * math.log(2 * math.pi))


def _direct_diag(z, mu, var):  # [B..., Q]
    mu, var = mu.unsqueeze(-2), var.unsqueeze(-2)
    return -0.5 * (((z - mu) ** 2 / var).sum(-1) + torch.log(var).sum(-1) + z.shape[-1] * math.log(2 * math.pi))


def _draw(shape_z, b, k, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(*shape_z, d, generator=g, dtype=dtype)
    w = torch.softmax(torch.randn(b, k, generator=g, dtype=dtype), -1)
    mu = torch.randn(b, k, d, generator=g, dtype=dtype)
    var = torch.rand(b, k, d, generator=g, dtype=dtype) * 0.5 + 1e-3
    return z, w, mu, var


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("block_elements", [G._BLOCK_ELEMENTS, 7 * 3 * 20 * 5 + 1])  # the default; uneven blocks
def test_blocked_scores_equal_the_direct_formula_bit_for_bit(monkeypatch, threads, dtype, block_elements):
    monkeypatch.setattr(G, "_BLOCK_ELEMENTS", block_elements)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for shape_z in ((1237,), (7, 1301)):  # queries shared by every set, and one query set per fitted set
            z, w, mu, var = _draw(shape_z, 7, 3, 20, dtype)
            assert z.shape[-2] * 7 * 3 * 20 > G._BLOCK_ELEMENTS  # more than one block, the last one shorter
            out = G.component_logpdf(z, G.GMM(w, mu, var))
            assert out.shape == (7, shape_z[-1], 3)
            assert torch.equal(out, _direct_component(z, w, mu, var))
            out = G.diag_gaussian_logpdf(z, mu[:, 0], var[:, 0])
            assert torch.equal(out, _direct_diag(z, mu[:, 0], var[:, 0]))
            assert torch.equal(G.gmm_logpdf(z, G.GMM(w, mu, var)),
                               torch.logsumexp(_direct_component(z, w, mu, var), -1))
    finally:
        torch.set_num_threads(before)


def test_with_a_graph_the_direct_path_and_autograds_gradient(monkeypatch):
    monkeypatch.setattr(G, "_BLOCK_ELEMENTS", 64)  # would split into many blocks without a graph
    z, w, mu, var = _draw((50,), 3, 2, 6, torch.float64)
    mu.requires_grad_(True)
    calls = []
    real = torch.cat
    monkeypatch.setattr(torch, "cat", lambda *a, **k: calls.append(1) or real(*a, **k))
    out = G.component_logpdf(z, G.GMM(w, mu, var))
    assert not calls  # one block: training's gradient is autograd's of the direct formula
    out.sum().backward()
    ref_mu = mu.detach().clone().requires_grad_(True)
    _direct_component(z, w, ref_mu, var).sum().backward()
    assert torch.equal(mu.grad, ref_mu.grad)
    with torch.no_grad():
        G.component_logpdf(z, G.GMM(w, mu, var))
    assert calls  # without a graph the same call is blocked
