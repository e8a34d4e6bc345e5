"""Backbones, heads and the backbone registry.

``build_backbone(name, in_channels, **kwargs)`` is how methods and configs pick a feature extractor; every
backbone exposes ``out_dim``, ``forward(x) -> [B, out_dim]`` and ``feature_map(x) -> [B, map_channels, h, w]``
(see :mod:`studylib.models.backbones`).
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from studylib.models.backbones import (Conv4, DropBlock, ResNet12, ResNet12Basic, TorchvisionResNet,
                                       resnet12_infopatch, resnet18, resnet50)
from studylib.models.heads import MLP

BACKBONES: dict[str, Callable[..., nn.Module]] = {
    "conv4": Conv4,
    "resnet12_basic": ResNet12Basic,
    "resnet12": ResNet12,
    "resnet12_infopatch": resnet12_infopatch,
    "resnet18": resnet18,
    "resnet50": resnet50,
}


def build_backbone(name: str, in_channels: int = 3, **kwargs) -> nn.Module:
    """Build the backbone registered as ``name`` with ``in_channels`` input channels.

    ``kwargs`` go to the constructor (e.g. ``pool="flatten", input_size=28`` for ``"conv4"``,
    ``widths=(64, 128, 256, 512), pool_last=False`` for InfoPatch's map on ``"resnet12"`` (or simply
    ``"resnet12_infopatch"``, the authors' full configuration: dropout, ramped per-channel DropBlock),
    ``small_input=True`` for ``"resnet18"`` on 32-px images).
    """
    if name not in BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; choose one of {sorted(BACKBONES)}")
    return BACKBONES[name](in_channels=in_channels, **kwargs)


__all__ = ["BACKBONES", "build_backbone", "Conv4", "ResNet12Basic", "ResNet12", "DropBlock",
           "TorchvisionResNet", "resnet12_infopatch", "resnet18", "resnet50", "MLP"]
