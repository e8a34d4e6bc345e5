"""Small heads put on top of a backbone: projectors and predictors.

BECLR (seed 001, Sec. 3 and PAPER-NOTES 001): projector ``Linear-BN-ReLU, Linear-BN-ReLU, Linear-BN`` to
``d = 512``, i.e. ``MLP(in_dim, [h, h], 512, last_bn=True)``; predictor ``512 -> 128 (BN, ReLU) -> 512``, i.e.
``MLP(512, [128], 512)``. Seed 000's 128-d training-only projection is ``MLP(640, [], 128, bn=False)``.
"""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """``[Linear - BN - ReLU] x len(hidden_dims)`` then ``Linear`` (and ``BN`` if ``last_bn``).

    Linears followed by a BN carry no bias (the BN shift replaces it).

    Args:
        in_dim: input features.
        hidden_dims: widths of the hidden layers (may be empty: a single linear map).
        out_dim: output features.
        bn: BatchNorm1d after each hidden linear layer.
        last_bn: BatchNorm1d after the output layer.
        last_bn_affine: learnable scale/shift of that last BN (SimSiam-style projectors turn it off).

    Shapes: ``[B, in_dim] -> [B, out_dim]``.
    """

    def __init__(self, in_dim: int, hidden_dims: list[int] | tuple[int, ...], out_dim: int, bn: bool = True,
                 last_bn: bool = False, last_bn_affine: bool = True) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        prev = in_dim
        for h in hidden_dims:
            layers.append(nn.Linear(prev, h, bias=not bn))
            if bn:
                layers.append(nn.BatchNorm1d(h))
            layers.append(nn.ReLU(inplace=True))
            prev = h
        layers.append(nn.Linear(prev, out_dim, bias=not last_bn))
        if last_bn:
            layers.append(nn.BatchNorm1d(out_dim, affine=last_bn_affine))
        self.net = nn.Sequential(*layers)
        self.in_dim = in_dim
        self.out_dim = out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, in_dim] -> [B, out_dim]``."""
        return self.net(x)
