"""SimCLR (Chen et al. 2020): NT-Xent against Eq. 1 written out, its gradient against finite differences, and
training that learns to match two views of an image among the batch's other views."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import label_trap
from studylib.methods import build_method
from studylib.methods.simclr import SimCLR, nt_xent


def _loop_nt_xent(z_a: torch.Tensor, z_b: torch.Tensor, tau: float) -> float:
    """Eq. 1 and Alg. 1 of Chen et al.: l(i, j) for every ordered positive pair, element by element."""
    z = [v for v in torch.cat([z_a, z_b])]
    n = z_a.shape[0]

    def sim(u: torch.Tensor, v: torch.Tensor) -> float:
        return float(u @ v / (u.norm() * v.norm()))

    total = 0.0
    for i in range(2 * n):
        j = (i + n) % (2 * n)
        denom = sum(math.exp(sim(z[i], z[k]) / tau) for k in range(2 * n) if k != i)
        total += -math.log(math.exp(sim(z[i], z[j]) / tau) / denom)
    return total / (2 * n)


@pytest.mark.parametrize("tau", [0.1, 0.5, 2.0])
def test_nt_xent_is_eq_1_of_chen_et_al(tau: float) -> None:
    g = torch.Generator().manual_seed(0)
    z_a, z_b = torch.randn(7, 5, generator=g, dtype=torch.float64), torch.randn(7, 5, generator=g, dtype=torch.float64)
    assert float(nt_xent(z_a, z_b, tau)) == pytest.approx(_loop_nt_xent(z_a, z_b, tau), rel=1e-10)


def test_nt_xent_gradient_is_its_derivative() -> None:
    g = torch.Generator().manual_seed(1)
    z_a = torch.randn(5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    z_b = torch.randn(5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: nt_xent(a, b, 0.3), (z_a, z_b))


def test_nt_xent_of_uninformative_projections_is_log_2n_minus_1_and_of_matched_pairs_is_lower() -> None:
    n = 6
    same = torch.ones(n, 3)
    assert float(nt_xent(same, same, 0.5)) == pytest.approx(math.log(2 * n - 1), rel=1e-6)
    e = torch.eye(n)
    assert float(nt_xent(e, e, 0.5)) < math.log(2 * n - 1) - 1.0


def test_nt_xent_refuses_mismatched_views_one_row_and_a_non_positive_temperature() -> None:
    with pytest.raises(ValueError, match="same shape"):
        nt_xent(torch.randn(4, 3), torch.randn(5, 3))
    with pytest.raises(ValueError, match="N >= 2"):
        nt_xent(torch.randn(1, 3), torch.randn(1, 3))
    with pytest.raises(ValueError, match="temperature"):
        nt_xent(torch.randn(4, 3), torch.randn(4, 3), 0.0)


class _Tiny(nn.Module):
    out_dim = 16

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(64, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _augment(images: torch.Tensor) -> torch.Tensor:
    """Pixel noise of 0.2 on images in [-0.5, 0.5] (pixel std 0.29): two calls give two different views."""
    x = images.float() / 255.0 - 0.5
    return x + 0.2 * torch.randn_like(x)


def _partner_top1(m: SimCLR, images: torch.Tensor) -> float:
    """Of the 2N views of a batch, how often a view's nearest other view (cosine of the backbone's features) is
    its own image's other view; chance is 1 / (2N - 1)."""
    m.eval()
    with torch.no_grad():
        h = F.normalize(torch.cat([m.backbone(_augment(images)), m.backbone(_augment(images))]), dim=1)
    m.train()
    n = images.shape[0]
    sim = (h @ h.T).fill_diagonal_(-2.0)
    return float((sim.argmax(1) == (torch.arange(2 * n) + n) % (2 * n)).float().mean())


def test_simclr_learns_to_find_the_other_view_of_an_image_without_labels() -> None:
    """32 random images, 200 Adam steps: the backbone's features must find an image's other view (top-1 among
    the 63 other views, chance 1.6 %) far more often than the same network at initialisation, and the loss must
    fall (measured: 15.6 % -> 89 % at one thread, loss 3.54 -> 2.50 over the first and last 10 steps)."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    images = (torch.rand(32, 1, 12, 12, generator=g) * 255).to(torch.uint8)
    m = build_method("simclr", _Tiny(), _augment, temperature=0.5)
    assert isinstance(m, SimCLR) and m.uses_labels is False
    before = sum(_partner_top1(m, images) for _ in range(3)) / 3
    opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=3e-3)
    losses = []
    for _ in range(200):
        loss, log = m.loss(images, label_trap(32))
        assert torch.isfinite(loss) and -1.0 <= float(log["view_cosine"]) <= 1.0
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    after = sum(_partner_top1(m, images) for _ in range(3)) / 3
    assert sum(losses[-10:]) / 10 < sum(losses[:10]) / 10 - 0.5, (losses[:3], losses[-3:])
    assert after > 0.6 and after > before + 0.4, (before, after)
