"""SimCLR (Chen et al. 2020, "A Simple Framework for Contrastive Learning of Visual Representations"): the
contrastive baseline of BECLR's Table 2 (seed 001), with the study's backbones, data and evaluator.

Per step: two views ``x_a = t(x), x_b = t'(x)`` of each of the ``N`` images of a batch (the run's augment
profile, drawn independently), ``h = f(x)`` (the backbone), ``z = g(h)`` (a 2-layer projection head,
``Linear - BN - ReLU - Linear``), and the NT-Xent loss (Chen et al., Eq. 1 and Alg. 1) over the ``2N``
projections: for a positive pair ``(i, j)``

    l(i, j) = -log( exp(sim(z_i, z_j) / tau) / sum_{k != i} exp(sim(z_i, z_k) / tau) ),

``sim`` the cosine, averaged over all ``2N`` ordered positive pairs. No labels, no teacher, no memory: it is
what BECLR adds to (EMA teacher, masking, DyCE, OpTA) taken away, so a BECLR that trails it on the same data has
a defect or a finding to explain (issue 41).

Choices: the head's hidden width is the backbone's output size and its output 128 (Chen et al. find the
output size matters little, Fig. 8); BN after the hidden layer, the study's MLP convention (as BECLR's
projector); ``temperature`` 0.5, the setting of the independent SimCLR that issue 41 measured. Every one is a
parameter: any setting is chosen on the validation alphabet with the same budget as BECLR's.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from studylib.data.samplers import Batch
from studylib.methods.base import Method
from studylib.methods.registry import register_method
from studylib.models.heads import MLP


def nt_xent(z_a: torch.Tensor, z_b: torch.Tensor, temperature: float = 0.5) -> torch.Tensor:
    """NT-Xent (Chen et al. 2020, Eq. 1): the mean over the ``2N`` ordered positive pairs of ``l(i, j)``.

    Args:
        z_a, z_b: ``[N, d]`` projections of the two views; row ``r`` of each is the same image (N >= 2).
        temperature: ``tau > 0``.

    Returns:
        The scalar loss (float32 or wider), ``log(2N - 1)`` for projections that carry no information.
    """
    n = z_a.shape[0]
    if z_b.shape != z_a.shape or n < 2:
        raise ValueError(f"z_a and z_b need the same shape [N, d] with N >= 2, got {tuple(z_a.shape)} and "
                         f"{tuple(z_b.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    dtype = torch.promote_types(z_a.dtype, torch.float32)
    z = F.normalize(torch.cat([z_a, z_b], dim=0).to(dtype), dim=1)           # [2N, d]
    logits = (z @ z.T / temperature).fill_diagonal_(float("-inf"))            # k != i
    partner = (torch.arange(2 * n, device=z.device) + n) % (2 * n)
    return F.cross_entropy(logits, partner)


class SimCLR(Method):
    """SimCLR pretraining objective.

    Args:
        backbone: feature extractor ``[B, C, H, W] -> [B, feat_dim]``.
        augment: ``uint8 [B, C, H, W] -> float`` normalised views; called twice per step (two independent
            draws).
        feat_dim: backbone output size (default ``backbone.out_dim``).
        proj_hidden: the head's hidden width (default ``feat_dim``); ``proj_dim``: its output (128).
        temperature: ``tau`` of NT-Xent.
    """

    uses_labels = False

    def __init__(self, backbone: nn.Module, augment: Callable[[torch.Tensor], torch.Tensor],
                 feat_dim: int | None = None, proj_hidden: int | None = None, proj_dim: int = 128,
                 temperature: float = 0.5) -> None:
        super().__init__()
        if feat_dim is None:
            feat_dim = getattr(backbone, "out_dim", None)
            if feat_dim is None:
                raise ValueError("pass feat_dim: the backbone has no out_dim attribute")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.backbone = backbone
        self.augment = augment
        self.projector = MLP(feat_dim, [proj_hidden or feat_dim], proj_dim, bn=True, last_bn=False)
        self.temperature = temperature

    def loss(self, images: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, dict[str, Any]]:
        """NT-Xent on ``B`` uint8 images ``[B, C, H, W]`` (two views each); ``batch`` is never read."""
        b = images.shape[0]
        x = torch.cat([self.augment(images), self.augment(images)], dim=0)   # [2B, C, H, W]
        z_a, z_b = self.projector(self.backbone(x)).split(b)
        loss = nt_xent(z_a, z_b, self.temperature)
        with torch.no_grad():
            align = F.cosine_similarity(z_a.float(), z_b.float(), dim=1).mean()
        return loss, {"view_cosine": align}


@register_method("simclr")
def build_simclr(backbone: nn.Module, augment: Callable[[torch.Tensor], torch.Tensor], **params: Any) -> SimCLR:
    """Registry entry: both views come from the run's ``augment`` profile."""
    return SimCLR(backbone, augment, **params)


__all__ = ["SimCLR", "build_simclr", "nt_xent"]
