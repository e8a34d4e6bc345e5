"""Precision guards shared by the numerical primitives and the methods that call them.

Under bf16 autocast (the paper scale on a GPU, the check scale on a CPU with native bf16) a few computations
must run in at least float32: expanded quadratic forms cancel catastrophically in bfloat16, and the variances
of L2-normalised descriptors (~1e-3) do not survive an 8-bit mantissa. Each such computation switches autocast
off with :func:`autocast_off` and upcasts its inputs with :func:`at_least_float32`. One home for both, so every
guard in the library (Sinkhorn, the Gaussian densities, SPE's posteriors, DyCE's assignment) follows one rule.
"""

from __future__ import annotations

import contextlib

import torch


def autocast_off(device_type: str) -> contextlib.AbstractContextManager:
    """``torch.autocast(device_type, enabled=False)``, or nothing where autocast does not exist (``meta``)."""
    if torch.amp.is_autocast_available(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def at_least_float32(*ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The tensors with float16 / bfloat16 ones upcast to float32 (float32 and float64 unchanged)."""
    return tuple(t.float() if t.dtype in (torch.float16, torch.bfloat16) else t for t in ts)


def working_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """float64 when any input is float64, else float32 (half precision and bf16 are promoted)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


__all__ = ["at_least_float32", "autocast_off", "working_dtype"]
