"""BECLR pretraining (seed 001, Sec. 4.1, Alg. 1 and 3, Eq. 3, Appendix A): masked student, EMA teacher,
DyCE-enhanced batches and the UniSiam-style loss.

Per step (Alg. 1): two augmented views ``X = [phi_a(x), phi_b(x)]``; the student sees patch-masked views,
``Z^S = g(f(mask(X)))``, ``P^S = h(Z^S)``; the teacher (EMA of the student's backbone and projector) sees the
unmasked views, ``Z^T = g'(f'(X))``; DyCE enhances the representations after its adaptation period; the loss
of Eq. 3 is applied on the (enhanced) batch; after the optimiser step the teacher moves towards the student.

Choices (``shared/PAPER-NOTES.md``, 001):

* Loss (Eq. 3, :func:`beclr_loss`): ``pos = -(cos(p_a, sg z_t,b) + cos(p_b, sg z_t,a)) / 2`` averaged over
  rows; ``neg = log( mean_i sum_{j != i, j != pos(i)} exp(cos(z_i, z_j) / T) / (2N - 2) )`` over the ``2N``
  student projections (both views); ``loss = pos + lambda * neg`` (lambda 0.1, T 2). ``neg`` is computed with
  log-sum-exp so small temperatures cannot overflow.
* DyCE placement follows Alg. 3 and the authors' code: one memory per stream, enhancing the teacher
  projections ``z_t``, the student predictions ``p`` and the student projections ``z`` (used by ``neg``).
  Each view is enhanced with the memory as it stood *before* this batch, then both views are enqueued
  (:meth:`DyCE.step`). With ``pairing="paper"`` (default) row ``r`` of the enhanced student predictions is
  paired with row ``r`` of the enhanced teacher targets of the other view, exactly as Alg. 3; the appended
  rows are memory entries on both sides, so they reach the gradient through ``neg`` only. With
  ``pairing="anchor"`` the student's own prediction is repeated against each of the teacher's retrieved
  neighbours (an NNCLR-like reading of "enhancing the batch with true positives", which lets the positives
  pull the student) and no student-prediction memory is kept. The choice is a constructor argument because
  the paper's text and its pseudocode admit both.
* Teacher momentum ``m = 1 - (1 - m0) (cos(pi t / T) + 1) / 2`` from ``m0 = 0.995`` to 1 (cosine, BYOL);
  parameters are averaged, buffers (BN statistics) copied.
* Masking: random patch masking, ``round(ratio * #patches)`` square patches of ``mask_patch`` pixels per
  image set to 0 in normalised pixel space, student only (:func:`patch_mask`). The authors draw BEiT-style
  blocks; independent patches are the simplest reading of "patch-wise masking" in the paper; a different
  ``mask_fn(x, ratio)`` can be passed in.
* ``loss`` never reads ``batch`` (``uses_labels = False``).
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from studylib.data.samplers import Batch
from studylib.methods.base import Method
from studylib.methods.dyce import DyCE
from studylib.methods.registry import register_method
from studylib.models.heads import MLP


def beclr_loss(p_a: torch.Tensor, p_b: torch.Tensor, z_ta: torch.Tensor, z_tb: torch.Tensor, z_sa: torch.Tensor,
               z_sb: torch.Tensor, lam: float = 0.1, temperature: float = 2.0
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq. 3 on an (enhanced) batch of ``N`` rows per view.

    Args:
        p_a, p_b: ``[N, d]`` student predictions of views a and b.
        z_ta, z_tb: ``[N, d]`` teacher projections (treated as constants).
        z_sa, z_sb: ``[N, d]`` student projections (the ``neg`` term).
        lam: weight of ``neg``.
        temperature: ``T``.

    Returns:
        ``(loss, pos, neg)`` scalars.
    """
    n = p_a.shape[0]
    if not (p_b.shape[0] == z_ta.shape[0] == z_tb.shape[0] == z_sa.shape[0] == z_sb.shape[0] == n) or n < 2:
        raise ValueError(f"all six inputs need the same number N >= 2 of rows, got {p_a.shape[0]}, {p_b.shape[0]}, "
                         f"{z_ta.shape[0]}, {z_tb.shape[0]}, {z_sa.shape[0]}, {z_sb.shape[0]}")
    p_a, p_b, z_sa, z_sb = p_a.float(), p_b.float(), z_sa.float(), z_sb.float()
    z_ta, z_tb = z_ta.detach().float(), z_tb.detach().float()
    pos = -0.5 * (F.cosine_similarity(p_a, z_tb, dim=1).mean() + F.cosine_similarity(p_b, z_ta, dim=1).mean())
    z = F.normalize(torch.cat([z_sa, z_sb], dim=0), dim=1)                 # [2N, d]
    logits = z @ z.T / temperature
    i = torch.arange(2 * n, device=z.device)
    excluded = (i[:, None] == i[None, :]) | (i[:, None] == (i[None, :] + n) % (2 * n))
    row = torch.logsumexp(logits.masked_fill(excluded, float("-inf")), dim=1)   # log sum_j exp
    neg = torch.logsumexp(row, dim=0) - math.log(2 * n) - math.log(2 * n - 2)
    return pos + lam * neg, pos, neg


def patch_mask(x: torch.Tensor, ratio: float, patch: int = 16) -> torch.Tensor:
    """Zero ``round(ratio * #patches)`` random ``patch x patch`` squares per image (student input, Sec. 4.1).

    Args:
        x: ``[B, C, H, W]`` normalised images; ``ratio`` in ``[0, 1)``; ``patch`` in pixels (a partial patch
            at the right/bottom border counts as a patch).

    Returns:
        ``[B, C, H, W]`` masked copy.
    """
    if ratio <= 0:
        return x
    b, _, h, w = x.shape
    gh, gw = -(-h // patch), -(-w // patch)
    m = int(round(ratio * gh * gw))
    keys = torch.rand(b, gh * gw, device=x.device)
    drop = keys.argsort(dim=1).argsort(dim=1) < m                          # [B, gh*gw], exactly m True
    drop = drop.view(b, 1, gh, gw).repeat_interleave(patch, 2).repeat_interleave(patch, 3)[:, :, :h, :w]
    return x.masked_fill(drop, 0.0)


class BECLR(Method):
    """BECLR student-teacher pretraining objective.

    Args:
        backbone: feature extractor ``[B, C, H, W] -> [B, feat_dim]``.
        augment_default, augment_strong: ``uint8 [B, C, H, W] -> float`` normalised views (Table 7 profiles).
        profile: ``"strong"`` (the paper's default: both views strong), ``"default"``, or ``"mixed"``
            (view a default, view b strong).
        feat_dim: backbone output size (default ``backbone.out_dim``).
        proj_dim: ``d`` (512); ``proj_hidden`` projector width (default ``proj_dim``); ``pred_hidden`` (128).
        lam, temperature: Eq. 3.
        mask_ratio, mask_patch, mask_fn: student masking (``mask_fn(x, ratio) -> x``; default
            :func:`patch_mask` with ``mask_patch``).
        teacher_momentum: ``m0`` of the cosine schedule.
        ema: False removes the EMA teacher (Table 5's "masking" row): the teacher is a copy of the student after
            every step (momentum 0), still without gradient, as in SimSiam-style stop-gradient training.
        use_dyce: enable the memories; ``memory_size, partitions, topk, epsilon, sinkhorn_iters,
            proto_momentum, variant, adapt_steps, seed``: :class:`DyCE` arguments (``adapt_steps`` counts
            training steps).
        pairing: ``"paper"`` or ``"anchor"`` (see the module docstring).
    """

    uses_labels = False

    def __init__(self, backbone: nn.Module, augment_default: Callable[[torch.Tensor], torch.Tensor],
                 augment_strong: Callable[[torch.Tensor], torch.Tensor] | None = None, profile: str = "strong",
                 feat_dim: int | None = None, proj_dim: int = 512, proj_hidden: int | None = None,
                 pred_hidden: int = 128, lam: float = 0.1, temperature: float = 2.0, mask_ratio: float = 0.3,
                 mask_patch: int = 16, mask_fn: Callable[[torch.Tensor, float], torch.Tensor] | None = None,
                 teacher_momentum: float = 0.995, ema: bool = True, use_dyce: bool = True, memory_size: int = 8192,
                 partitions: int = 200, topk: int = 3, epsilon: float = 0.05, sinkhorn_iters: int = 10,
                 proto_momentum: float = 0.0, variant: str = "dyce", adapt_steps: int = 0, pairing: str = "paper",
                 seed: int = 0) -> None:
        super().__init__()
        if profile not in ("strong", "default", "mixed"):
            raise ValueError(f"profile must be 'strong', 'default' or 'mixed', got {profile!r}")
        if profile != "default" and augment_strong is None:
            raise ValueError(f"profile {profile!r} needs augment_strong; pass it or use profile='default'")
        if pairing not in ("paper", "anchor"):
            raise ValueError(f"pairing must be 'paper' or 'anchor', got {pairing!r}")
        if not 0.0 <= mask_ratio < 1.0:
            raise ValueError(f"mask_ratio must lie in [0, 1), got {mask_ratio}")
        if feat_dim is None:
            feat_dim = getattr(backbone, "out_dim", None)
            if feat_dim is None:
                raise ValueError("pass feat_dim: the backbone has no out_dim attribute")
        self.augment_a = augment_default if profile in ("default", "mixed") else augment_strong
        self.augment_b = augment_default if profile == "default" else augment_strong
        self.backbone = backbone
        self.projector = MLP(feat_dim, [proj_hidden or proj_dim] * 2, proj_dim, bn=True, last_bn=True)
        self.predictor = MLP(proj_dim, [pred_hidden], proj_dim, bn=True, last_bn=False)
        self.teacher_backbone = copy.deepcopy(backbone).requires_grad_(False)
        self.teacher_projector = copy.deepcopy(self.projector).requires_grad_(False)
        self.lam, self.temperature = lam, temperature
        self.mask_ratio, self.mask_patch = mask_ratio, mask_patch
        self.mask_fn = mask_fn
        self.teacher_momentum = teacher_momentum
        self.ema = ema
        self.pairing, self.use_dyce = pairing, use_dyce
        self.momentum = teacher_momentum
        if use_dyce:
            kw = dict(dim=proj_dim, size=memory_size, partitions=partitions, k=topk, epsilon=epsilon,
                      sinkhorn_iters=sinkhorn_iters, momentum=proto_momentum, variant=variant,
                      adapt_steps=adapt_steps)
            self.memory_teacher = DyCE(**kw, seed=seed)
            self.memory_student = DyCE(**kw, seed=seed + 1)
            self.memory_pred = DyCE(**kw, seed=seed + 2) if pairing == "paper" else None

    def _mask(self, x: torch.Tensor) -> torch.Tensor:
        if self.mask_fn is not None:
            return self.mask_fn(x, self.mask_ratio)
        return patch_mask(x, self.mask_ratio, self.mask_patch)

    def loss(self, images: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """Eq. 3 on one batch of ``B`` uint8 images ``[B, C, H, W]``; ``batch`` is never read."""
        b = images.shape[0]
        x = torch.cat([self.augment_a(images), self.augment_b(images)], dim=0)   # [2B, C, H, W]
        z_s = self.projector(self.backbone(self._mask(x)))
        p_s = self.predictor(z_s)
        with torch.no_grad():
            z_t = self.teacher_projector(self.teacher_backbone(x))
        p_a, p_b = p_s.split(b)
        z_sa, z_sb = z_s.split(b)
        z_ta, z_tb = z_t.split(b)
        enhanced = False
        if self.use_dyce:
            z_ta, z_tb = self.memory_teacher.step([z_ta, z_tb])
            z_sa, z_sb = self.memory_student.step([z_sa, z_sb])
            if self.memory_pred is not None:
                p_a, p_b = self.memory_pred.step([p_a, p_b])
            elif z_ta.shape[0] != p_a.shape[0]:
                reps = z_ta.shape[0] // p_a.shape[0]
                p_a, p_b = p_a.repeat(reps, 1), p_b.repeat(reps, 1)
            enhanced = z_ta.shape[0] > b
        loss, pos, neg = beclr_loss(p_a, p_b, z_ta, z_tb, z_sa, z_sb, self.lam, self.temperature)
        # 0-d tensors: the loop reads them every log_every steps in one transfer (no host sync per step)
        return loss, {"loss_pos": pos.detach(), "loss_neg": neg.detach(),
                      "enhanced": float(enhanced), "teacher_momentum": float(self.momentum)}

    @torch.no_grad()
    def on_step_end(self, step: int, total_steps: int) -> None:
        """EMA teacher update with the cosine momentum schedule ``m0 -> 1`` (``step`` counted from 0)."""
        t = min(max(step, 0), total_steps) / max(total_steps, 1)
        m = 1.0 - (1.0 - self.teacher_momentum) * (math.cos(math.pi * t) + 1.0) / 2.0 if self.ema else 0.0
        self.momentum = m
        for student, teacher in ((self.backbone, self.teacher_backbone), (self.projector, self.teacher_projector)):
            s_params, t_params = list(student.parameters()), list(teacher.parameters())
            torch._foreach_mul_(t_params, m)
            torch._foreach_add_(t_params, [p.detach() for p in s_params], alpha=1.0 - m)
            for bs, bt in zip(student.buffers(), teacher.buffers()):
                bt.copy_(bs)

    def on_epoch_end(self, epoch: int) -> dict[str, float]:
        if not self.use_dyce:
            return {}
        mem = self.memory_teacher
        return {"dyce_filled": float(mem.filled), "dyce_active": float(mem.active)}


__all__ = ["BECLR", "beclr_loss", "patch_mask"]


@register_method("beclr")
def build_beclr(backbone: nn.Module, augment: Callable[[torch.Tensor], torch.Tensor], size: int,
                mean: list[float], std: list[float], strong_profile: str = "beclr_strong",
                strong_options: dict | None = None, **params: Any) -> BECLR:
    """Registry entry: ``augment`` (the run's ``augment`` profile) is the default view; the strong view is
    built from ``strong_profile`` (Table 7) at the same size and normalisation."""
    from studylib.data.augment import build_augment
    strong = build_augment(strong_profile, size=size, mean=mean, std=std, **(strong_options or {}))
    return BECLR(backbone, augment, strong, **params)
