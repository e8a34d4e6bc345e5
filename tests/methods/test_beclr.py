"""BECLR loss (seed 001, Eq. 3) and the student-teacher method around it."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from conftest import label_trap
from studylib.methods.beclr import BECLR, beclr_loss, patch_mask


def _loop_loss(p_a, p_b, z_ta, z_tb, z_sa, z_sb, lam, temp):
    """Eq. 3 written out element by element."""
    def cos(u, v):
        return float(u @ v / (u.norm() * v.norm()))
    n = p_a.shape[0]
    pos = -0.5 * (sum(cos(p_a[i], z_tb[i]) for i in range(n)) / n + sum(cos(p_b[i], z_ta[i]) for i in range(n)) / n)
    z = torch.cat([z_sa, z_sb])
    total = 0.0
    for i in range(2 * n):
        partner = (i + n) % (2 * n)
        total += sum(math.exp(cos(z[i], z[j]) / temp) for j in range(2 * n) if j not in (i, partner))
    neg = math.log(total / (2 * n) / (2 * n - 2))
    return pos + lam * neg, pos, neg


@pytest.mark.parametrize("temp,lam", [(2.0, 0.1), (0.1, 0.5)])
def test_loss_matches_loop(temp: float, lam: float) -> None:
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(6, 5, generator=g, dtype=torch.float64) for _ in range(6)]
    loss, pos, neg = beclr_loss(*xs, lam=lam, temperature=temp)
    ref = _loop_loss(*xs, lam, temp)
    assert float(loss) == pytest.approx(ref[0], abs=1e-5)
    assert float(pos) == pytest.approx(ref[1], abs=1e-5)
    assert float(neg) == pytest.approx(ref[2], abs=1e-5)


def test_loss_gradients_only_reach_student() -> None:
    g = torch.Generator().manual_seed(1)
    p_a, p_b, z_ta, z_tb, z_sa, z_sb = (torch.randn(4, 3, generator=g, requires_grad=True) for _ in range(6))
    loss, _, _ = beclr_loss(p_a, p_b, z_ta, z_tb, z_sa, z_sb)
    loss.backward()
    assert z_ta.grad is None and z_tb.grad is None
    assert p_a.grad.abs().sum() > 0 and z_sa.grad.abs().sum() > 0


def test_patch_mask_ratio() -> None:
    x = torch.ones(3, 2, 32, 32)
    out = patch_mask(x, 0.25, patch=8)
    zero_patches = (out.view(3, 2, 4, 8, 4, 8) == 0).all(dim=(1, 3, 5))
    assert zero_patches.sum(dim=(1, 2)).tolist() == [4, 4, 4]
    assert ((out == 0) | (out == 1)).all()


class _TinyNet(nn.Module):
    out_dim = 8

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _augment(images: torch.Tensor) -> torch.Tensor:
    x = images.float() / 255.0 - 0.5
    flip = torch.rand(x.shape[0], 1, 1, 1) < 0.5
    return torch.where(flip, x.flip(-1), x) + 0.05 * torch.randn_like(x)


@pytest.mark.parametrize("pairing", ["paper", "anchor"])
def test_method_trains_without_labels_and_updates_teacher(pairing: str) -> None:
    torch.manual_seed(0)
    method = BECLR(_TinyNet(), _augment, _augment, proj_dim=16, pred_hidden=8, mask_ratio=0.3, mask_patch=4,
                   memory_size=24, partitions=3, topk=2, adapt_steps=4, pairing=pairing)
    assert method.uses_labels is False
    opt = torch.optim.SGD([p for p in method.parameters() if p.requires_grad], lr=0.05, momentum=0.9)
    images = torch.randint(0, 256, (6, 3, 12, 12), dtype=torch.uint8)
    batch = label_trap(6)
    teacher0 = [p.clone() for p in method.teacher_projector.parameters()]
    logs = []
    for step in range(6):
        loss, log = method.loss(images, batch)
        assert torch.isfinite(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        method.on_step_end(step, 6)
        logs.append(log)
    assert [lg["enhanced"] for lg in logs] == [0, 0, 0, 0, 1, 1]  # memory full at step 1, adaptation until 4
    assert all(p.grad is None for p in method.teacher_backbone.parameters())
    moved = [not torch.equal(a, b) for a, b in zip(teacher0, method.teacher_projector.parameters())]
    assert any(moved)
    # Momentum schedule: m0 at step 0, 1 at the end.
    method.on_step_end(0, 10)
    assert method.momentum == pytest.approx(0.995)
    method.on_step_end(10, 10)
    assert method.momentum == pytest.approx(1.0)
    assert method.features(_augment(images)).shape == (6, 8)


def test_without_ema_the_teacher_copies_the_student():
    """Table 5's "masking" row: ema=False makes the teacher the student's copy after each step (momentum 0)."""
    torch.manual_seed(0)
    from studylib.methods.beclr import BECLR
    from studylib.models import build_backbone
    bb = build_backbone("conv4", in_channels=1, hidden=8)
    aug = lambda x: x.float() / 255  # noqa: E731
    m = BECLR(bb, aug, aug, feat_dim=bb.out_dim, proj_dim=16, pred_hidden=8, mask_ratio=0.0, use_dyce=False,
              ema=False)
    with torch.no_grad():
        for p in m.backbone.parameters():
            p.add_(1.0)
    m.on_step_end(0, 10)
    assert m.momentum == 0.0
    for s, t in zip(m.backbone.parameters(), m.teacher_backbone.parameters()):
        assert torch.equal(s, t) and not t.requires_grad
