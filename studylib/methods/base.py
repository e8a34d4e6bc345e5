"""The interface between a method (one paper's objective) and the shared training loop.

A method is an ``nn.Module`` that owns everything trainable (backbone, heads, memories) and turns a batch of
raw uint8 images into a scalar loss. The training loop owns the rest: device, autocast, optimiser, schedule,
checkpoints, validation. Evaluation only needs :meth:`Method.features`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from studylib.data.samplers import Batch


class Method(nn.Module):
    """Base class of every training objective.

    Subclasses set ``self.backbone`` and implement :meth:`loss`. ``uses_labels`` is False for
    self-supervised methods: the loop then never reads the labels of the training split.
    """

    uses_labels: bool = True
    multi_episode: bool = False  # accepts batches of several concatenated episodes (Batch.episodes > 1)

    def loss(self, images: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, dict[str, float | torch.Tensor]]:
        """Loss of one batch.

        Args:
            images: ``[B, C, H, W]`` uint8 on the training device, ``images[i]`` is ``batch.indices[i]``.
            batch: what the sampler drew (labels, support mask, episode shape).

        Returns:
            The scalar loss and a dict of values to log (pair counts, accuracies, ...): floats, or 0-d tensors
            that the loop reads every ``log_every`` steps in one transfer (no host sync per step on a GPU).
        """
        raise NotImplementedError

    @torch.no_grad()
    def features(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, C, H, W]`` float (already normalised for the backbone) -> ``[B, D]`` evaluation features."""
        return self.backbone(x)

    def on_step_end(self, step: int, total_steps: int) -> None:
        """Hook after each optimiser step (EMA teachers, momentum schedules)."""

    def on_epoch_end(self, epoch: int) -> dict[str, Any]:
        """Hook after each epoch; may return things to log (memory snapshots are saved by the method)."""
        return {}
