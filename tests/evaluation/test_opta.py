"""OpTA (seed 001, Eq. 4) and its log-domain Sinkhorn vs POT."""

from __future__ import annotations

import numpy as np
import ot
import pytest
import torch

from studylib.evaluation.opta import opta, opta_classifier, opta_nearest_classifier, standardize
from studylib.numerics.ot import sinkhorn_log


@pytest.mark.parametrize("eps,tol,max_iter,scale", [(0.05, 1e-4, 1000, 1.0), (0.1, 1e-9, 5000, 1.0),
                                                   (0.5, 0.0, 7, 1.0), (0.05, 1e-6, 300, 100.0)])
def test_sinkhorn_matches_pot(eps: float, tol: float, max_iter: int, scale: float) -> None:
    """Scaling-domain path (cost/eps small) and log-domain path (scale 100: cost/eps = 2000) both match."""
    g = torch.Generator().manual_seed(1)
    e, m, n = 4, 5, 12
    cost = scale * torch.rand(e, m, n, generator=g, dtype=torch.float64)
    a = torch.rand(e, m, generator=g, dtype=torch.float64) + 0.5
    a = a / a.sum(1, keepdim=True)
    b = torch.full((e, n), 1.0 / n, dtype=torch.float64)
    plan = sinkhorn_log(cost, a, b, eps, max_iter, tol)
    for i in range(e):
        ref = ot.sinkhorn(a[i].numpy(), b[i].numpy(), cost[i].numpy(), eps, method="sinkhorn_log",
                          numItermax=max_iter, stopThr=tol, warn=False)
        np.testing.assert_allclose(plan[i].numpy(), ref, atol=1e-10, rtol=1e-7)
    if tol > 0 and tol < 1e-6:
        torch.testing.assert_close(plan.sum(1), b, atol=1e-8, rtol=0)
        torch.testing.assert_close(plan.sum(2), a, atol=1e-8, rtol=0)


def test_opta_single_pass_is_eq4() -> None:
    """One pass: prototypes = plan rows (normalised) times the queries, plan from POT on the max-scaled cost."""
    g = torch.Generator().manual_seed(2)
    support = torch.randn(2, 3, 1, 6, generator=g, dtype=torch.float64)
    query = torch.randn(2, 9, 6, generator=g, dtype=torch.float64)
    out = opta(support, query, passes=1)
    for i in range(2):
        p = support[i, :, 0].numpy()
        q = query[i].numpy()
        cost = ((p[:, None] - q[None]) ** 2).sum(-1)
        cost = cost / cost.max()
        plan = ot.sinkhorn(np.full(3, 1 / 3), np.full(9, 1 / 9), cost, 0.05, method="sinkhorn_log",
                           numItermax=1000, stopThr=1e-4, warn=False)
        ref = (plan / plan.sum(1, keepdims=True)) @ q
        np.testing.assert_allclose(out[i].numpy(), ref, atol=1e-8)


def test_opta_mix_for_several_shots() -> None:
    g = torch.Generator().manual_seed(4)
    support = torch.randn(1, 3, 4, 5, generator=g, dtype=torch.float64)
    query = torch.randn(1, 12, 5, generator=g, dtype=torch.float64)
    moved = opta(support, query, passes=1, mix=1.0)
    mixed = opta(support, query, passes=1, mix=0.7)
    torch.testing.assert_close(mixed, 0.7 * moved + 0.3 * support.mean(2))
    torch.testing.assert_close(opta(support, query, passes=0), support.mean(2))


def _biased_episodes(e: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Classes along well-separated centres; the one support sample of each class is drawn far from its
    class, almost half-way to the neighbouring class (sample bias), while the queries sit on the class centres."""
    g = torch.Generator().manual_seed(seed)
    w, q, d = 5, 15, 32
    centres = 4.0 * torch.randn(e, w, d, generator=g)
    bias = 0.48 * (centres.roll(1, dims=1) - centres) + 1.0 * torch.randn(e, w, d, generator=g)
    support = (centres + bias)[:, :, None, :]
    query = centres[:, :, None, :] + 1.0 * torch.randn(e, w, q, d, generator=g)
    labels = torch.arange(w).repeat_interleave(q)
    return support, query.reshape(e, w * q, d), labels


def test_opta_corrects_biased_support() -> None:
    support, query, labels = _biased_episodes(40, 0)
    dist = ((query[:, :, None] - support[:, None, :, 0]) ** 2).sum(-1)
    before = (dist.argmin(-1) == labels).float().mean()
    after = (opta_nearest_classifier(support, query, standardize_features=False).argmax(-1) == labels).float().mean()
    after_lr = (opta_classifier(support, query).argmax(-1) == labels).float().mean()
    assert before < 0.7, before
    assert after > before + 0.2, (before, after)
    assert after_lr > before + 0.2, (before, after_lr)


def test_standardize_and_shapes() -> None:
    x = torch.randn(3, 4, 10) * 5 + 2
    s = standardize(x)
    torch.testing.assert_close(s.mean(-1), torch.zeros(3, 4), atol=1e-5, rtol=0)
    torch.testing.assert_close(s.std(-1, unbiased=False), torch.ones(3, 4), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="support"):
        opta(torch.randn(2, 3, 5), torch.randn(2, 4, 5))
