"""Training through the fit learns (issue 23): the histogram loss's gradient is its exact derivative, and 200
Adam steps of each Set2Model objective on one fixed batch order that batch's tuples.

Before issue 23 the adaptive range was detached: autograd then added a spurious gradient along the scores'
scale, which for likelihood scores shrinks the fitted variances; S2M-Gauss and S2M-GMM2 stalled with a part of
their tuples mis-ordered (and on real Omniglot S2M-Gauss did not learn at all). AVG-FT's bounded cosine scores
learn either way: it is the control.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from studylib.data.samplers import Batch
from studylib.methods.set2model import Set2ModelMethod, histogram_loss


def _full_loss(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    return histogram_loss(pos, neg, bins=12, value_range="adaptive", half_width=2.0).sum()


def test_histogram_loss_gradient_is_its_derivative_range_included():
    """Central differences of the whole loss (the adaptive range moves with the scores) against autograd, in
    float64; and the loss is invariant to ``a s + c`` of a tuple's scores, so the gradient is orthogonal to
    both directions."""
    g = torch.Generator().manual_seed(3)
    pos = (torch.randn(2, 6, generator=g, dtype=torch.float64) * 3 + 2).requires_grad_()
    neg = (torch.randn(2, 9, generator=g, dtype=torch.float64) * 3).requires_grad_()
    gp, gn = torch.autograd.grad(_full_loss(pos, neg), (pos, neg))
    eps = 1e-6
    for t, grad in ((pos, gp), (neg, gn)):
        num = torch.zeros_like(t)
        for idx in torch.cartesian_prod(*(torch.arange(s) for s in t.shape)):
            i = tuple(idx.tolist())
            up, dn = t.detach().clone(), t.detach().clone()
            up[i] += eps
            dn[i] -= eps
            args_up = (up, neg.detach()) if t is pos else (pos.detach(), up)
            args_dn = (dn, neg.detach()) if t is pos else (pos.detach(), dn)
            num[i] = (_full_loss(*args_up) - _full_loss(*args_dn)) / (2 * eps)
        torch.testing.assert_close(grad, num, atol=1e-6, rtol=1e-5)
    scale = (gp * pos).sum(-1) + (gn * neg).sum(-1)
    shift = gp.sum(-1) + gn.sum(-1)
    assert scale.abs().max() < 1e-6 and shift.abs().max() < 1e-6, (scale, shift)  # the range pads by 1e-6


class _Tiny(nn.Module):
    """Two conv blocks and a linear descriptor layer on 12x12 inputs (the paper replaces the last layer by a
    linear one)."""

    def __init__(self, out: int = 16) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Flatten(), nn.Linear(8 * 9, out))
        self.out_dim = out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _fixed_batch(ways: int = 4, per: int = 20, noise: float = 0.9) -> torch.Tensor:
    """``[ways * per, 1, 12, 12]`` uint8: a random pattern per class plus heavy pixel noise, class-major."""
    g = torch.Generator().manual_seed(0)
    protos = torch.rand(ways, 1, 12, 12, generator=g)
    x = protos.repeat_interleave(per, 0) + noise * torch.randn(ways * per, 1, 12, 12, generator=g)
    return (x.clamp(0, 1) * 255).to(torch.uint8)


@pytest.mark.parametrize("score", ["gauss", "gmm", "avg"])
def test_200_steps_on_a_fixed_batch_order_its_tuples(score):
    """4 tuples (|X| = 5, |Z+| = 15, |Z-| = 45), Adam at 1e-2: the violation rate (Eq. 5) of the last 10
    steps must fall below 5% of the first step's (a 20-fold reduction). Before issue 23: S2M-Gauss stalled at
    0.073 x, S2M-GMM2 at 0.060 x; AVG-FT reached 0.013 x (0.039 x now)."""
    torch.set_num_threads(1)
    images = _fixed_batch()
    torch.manual_seed(0)
    m = Set2ModelMethod(_Tiny(), None, score=score)
    opt = torch.optim.Adam(m.parameters(), 1e-2)
    batch = Batch(torch.arange(80), None, None, 4, 5, 15, classes=torch.arange(4))  # the same 4 classes each step
    viol = []
    for step in range(200):
        torch.manual_seed(step)  # the GMM's k-means++ seeding
        loss, info = m.loss(images, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        viol.append(float(info["violation"]))
    final = sum(viol[-10:]) / 10
    assert viol[0] > 0.3, viol[0]  # the untrained network mis-orders many pairs
    assert final < 0.05 * viol[0], (score, viol[0], final)
