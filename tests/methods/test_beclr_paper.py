"""BECLR (seed 001): the paper's defaults and the behaviours the audit's surviving mutants broke (issue 10).

Every expected value comes from the paper (Appendix A) or from an independent computation written here
(a slow loop, float64 NumPy/SciPy), never from the code under test.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from torch import nn

from studylib.evaluation.opta import default_passes, opta, opta_classifier, standardize
from studylib.methods.beclr import BECLR
from studylib.methods.dyce import DyCE, kmeans
from studylib.numerics.ot import sinkhorn_log


def _default(obj, name):
    return inspect.signature(obj).parameters[name].default


# ----------------------------------------------------------------------------------------------- defaults
def test_paper_defaults_are_pinned():
    """Seed 001, Appendix A: DyCE eps 0.05; lambda 0.1, T 2, k 3, M 8192, P 200, mask 0.3, m0 0.995."""
    assert _default(DyCE, "epsilon") == 0.05
    expected = {"lam": 0.1, "temperature": 2.0, "topk": 3, "memory_size": 8192, "partitions": 200,
                "mask_ratio": 0.3, "teacher_momentum": 0.995}
    assert {k: _default(BECLR, k) for k in expected} == expected


def test_opta_passes_are_five_at_one_shot_and_one_otherwise():
    assert [default_passes(s) for s in (1, 2, 5, 20)] == [5, 1, 1, 1]
    g = torch.Generator().manual_seed(0)
    s1, q = torch.randn(3, 5, 1, 16, generator=g), torch.randn(3, 40, 16, generator=g)
    # passes=None must behave as 5 passes at 1 shot (and not as 1)
    assert torch.allclose(opta(s1, q), opta(s1, q, passes=5))
    assert not torch.allclose(opta(s1, q), opta(s1, q, passes=1))
    s5 = torch.randn(3, 5, 5, 16, generator=g)
    assert torch.allclose(opta(s5, q), opta(s5, q, passes=1))
    assert not torch.allclose(opta(s5, q), opta(s5, q, passes=2))


class _Probe(nn.Module):
    """A linear backbone that records every input it sees."""

    def __init__(self, d_in: int, out_dim: int = 8) -> None:
        super().__init__()
        self.lin, self.out_dim, self.seen = nn.Linear(d_in, out_dim), out_dim, []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.detach().clone())
        return self.lin(x.flatten(1))


def _tiny_beclr(**kw) -> BECLR:
    torch.manual_seed(0)
    identity = lambda u: u.float() / 255.0  # noqa: E731  (deterministic views: both equal the input)
    return BECLR(_Probe(3 * 8 * 8), identity, identity, proj_dim=8, pred_hidden=8, use_dyce=False, **kw)


def test_teacher_momentum_follows_the_cosine_schedule_between_its_endpoints():
    """m(t) = 1 - (1 - m0)(cos(pi t/T) + 1)/2 (BYOL); at t = T/4 this differs from a linear ramp."""
    m0, total, step = 0.995, 100, 25
    model = _tiny_beclr(teacher_momentum=m0)
    with torch.no_grad():
        for p in model.backbone.parameters():
            p.fill_(1.0)
        for p in model.teacher_backbone.parameters():
            p.fill_(0.0)
    model.on_step_end(step, total)
    m = 1 - (1 - m0) * (math.cos(math.pi * step / total) + 1) / 2          # 0.995732...
    linear = m0 + (1 - m0) * step / total                                   # 0.99625
    assert abs(m - linear) > 4e-4
    for p in model.teacher_backbone.parameters():
        torch.testing.assert_close(p, torch.full_like(p, 1 - m), rtol=0, atol=1e-7)


def test_only_the_student_sees_masked_images():
    """Alg. 1: the student encodes mask(X), the teacher the unmasked views X."""
    model = _tiny_beclr(mask_ratio=0.5, mask_fn=lambda x, r: torch.zeros_like(x))
    images = torch.randint(1, 256, (4, 3, 8, 8), dtype=torch.uint8)
    model.loss(images, batch=None)
    views = torch.cat([images.float() / 255.0] * 2)
    (student_in,), (teacher_in,) = model.backbone.seen, model.teacher_backbone.seen
    assert torch.equal(student_in, torch.zeros_like(views))
    torch.testing.assert_close(teacher_in, views)


# ----------------------------------------------------------------------------------------------- DyCE
def test_kmeans_assigns_every_point_to_its_nearest_centre_on_unequal_clusters():
    g = torch.Generator().manual_seed(1)
    centres_true = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 3.0]])
    sizes = (60, 25, 15)
    x = torch.cat([c + 0.3 * torch.randn(n, 2, generator=g) for c, n in zip(centres_true, sizes)])
    truth = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    centres, labels = kmeans(x, 3, iters=50, generator=torch.Generator().manual_seed(0))
    nearest = torch.cdist(x.double(), centres.double()).argmin(dim=1)
    assert torch.equal(labels, nearest)
    # the clustering recovers the generating groups (up to a relabelling)
    assert all(len(set(labels[truth == i].tolist())) == 1 for i in range(3))
    assert len(set(labels.tolist())) == 3
    for j in range(3):  # each centre is the mean of its members
        torch.testing.assert_close(centres[j], x[labels == j].mean(0), rtol=0, atol=1e-5)


def _unit(deg: float) -> torch.Tensor:
    r = math.radians(deg)
    return torch.tensor([math.cos(r), math.sin(r)])


def test_nearest_prototype_is_by_cosine_not_by_dot_product_with_unnormalised_prototypes():
    mem = DyCE(dim=2, size=4, partitions=2, k=1)
    mem.prototypes.copy_(torch.stack([10.0 * _unit(45.0), 0.1 * _unit(10.0)]))
    z = _unit(0.0)[None]
    cos = [float(torch.nn.functional.cosine_similarity(z[0], p, dim=0)) for p in mem.prototypes]
    dots = [float(z[0] @ p) for p in mem.prototypes]
    assert np.argmax(cos) == 1 and np.argmax(dots) == 0  # the two rules disagree here
    assert mem.nearest_prototype(z).tolist() == [1]


def _memory_with_partition_of(members_in_nearest: int) -> DyCE:
    """Partition 0 (prototype at 0 deg, nearest to z = 0 deg) holds ``members_in_nearest`` rows at +-60 deg;
    partition 1 (prototype at 90 deg) holds rows at +-20 deg, globally the most similar to z."""
    k = 2
    rows0 = [_unit(60.0), _unit(-60.0), _unit(65.0)][:members_in_nearest]
    rows1 = [_unit(20.0), _unit(-20.0), _unit(100.0), _unit(110.0)]
    rows = rows0 + rows1
    mem = DyCE(dim=2, size=len(rows), partitions=2, k=k)
    mem.memory.copy_(torch.stack(rows))
    mem.labels.copy_(torch.tensor([0] * len(rows0) + [1] * len(rows1)))
    mem.prototypes.copy_(torch.stack([_unit(0.0), _unit(90.0)]))
    mem.filled.fill_(len(rows))
    mem.initialised.fill_(True)
    return mem


@pytest.mark.parametrize("members", [2, 3])
def test_retrieval_uses_the_nearest_partition_when_it_holds_at_least_k_members(members):
    mem = _memory_with_partition_of(members)
    got = {tuple(round(v, 4) for v in r.tolist()) for r in mem.retrieve(_unit(0.0)[None])[0]}
    expected = {tuple(round(v, 4) for v in _unit(a).tolist()) for a in (60.0, -60.0)}
    assert got == expected


def test_retrieval_falls_back_to_the_global_top_k_below_k_members():
    mem = _memory_with_partition_of(1)
    got = {tuple(round(v, 4) for v in r.tolist()) for r in mem.retrieve(_unit(0.0)[None])[0]}
    expected = {tuple(round(v, 4) for v in _unit(a).tolist()) for a in (20.0, -20.0)}
    assert got == expected


# ----------------------------------------------------------------------------------------------- OpTA
def test_opta_with_logistic_regression_standardises_the_queries_too():
    """Per-sample standardisation makes the predictions invariant to a per-sample affine map x -> a x + b
    (a > 0) of any support or query feature; without it on the queries they change."""
    g = torch.Generator().manual_seed(2)
    support, query = torch.randn(4, 5, 2, 12, generator=g), torch.randn(4, 30, 12, generator=g)
    scale_q = 0.2 + 5 * torch.rand(4, 30, 1, generator=g)
    shift_q = 3 * torch.randn(4, 30, 1, generator=g)
    scale_s = 0.2 + 5 * torch.rand(4, 5, 2, 1, generator=g)
    ref = opta_classifier(support, query).argmax(-1)
    moved = opta_classifier(scale_s * support, scale_q * query + shift_q).argmax(-1)
    assert torch.equal(ref, moved)
    torch.testing.assert_close(standardize(scale_q * query + shift_q), standardize(query), rtol=0, atol=1e-4)


def _slow_sinkhorn(cost: np.ndarray, a: np.ndarray, b: np.ndarray, eps: float, iters: int) -> np.ndarray:
    """Log-domain Sinkhorn in float64, one problem, written from Eq. 2 (same update order as POT)."""
    k = -cost / eps
    u, v = np.zeros_like(a), np.zeros_like(b)
    for _ in range(iters):
        v = np.log(b) - logsumexp(k + u[:, None], axis=0)
        u = np.log(a) - logsumexp(k + v[None, :], axis=1)
    return np.exp(k + u[:, None] + v[None, :])


def test_sinkhorn_float32_stays_finite_with_an_outlier_row_at_small_epsilon():
    """eps = 0.01 and an outlier row whose costs are all ~2: exp(-C/eps) underflows in float32, so the solver
    must stay in the log domain (the scaling-domain threshold); the plan matches a float64 reference."""
    g = torch.Generator().manual_seed(3)
    cost = torch.rand(1, 5, 6, generator=g)
    cost[0, 2] = 2.0 + 0.05 * torch.rand(6, generator=g)
    a, b = torch.full((1, 5), 0.2), torch.full((1, 6), 1 / 6)
    plan = sinkhorn_log(cost, a, b, epsilon=0.01, max_iter=300, tol=0.0)
    assert torch.isfinite(plan).all()
    ref = _slow_sinkhorn(cost[0].double().numpy(), a[0].double().numpy(), b[0].double().numpy(), 0.01, 300)
    np.testing.assert_allclose(plan[0].double().numpy(), ref, atol=1e-5)
    np.testing.assert_allclose(plan[0].sum(1).numpy(), a[0].numpy(), atol=1e-5)
