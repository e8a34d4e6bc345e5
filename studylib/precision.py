"""Where networks run under bf16 autocast: on CUDA always; on the CPU only at the check scale.

The paper scale trains and evaluates under bf16 autocast on the GPU (:class:`studylib.training.loop.TrainConfig`
``amp``, :func:`studylib.evaluation.extract_features`). The check scale is that configuration cut to a few steps,
and CI runs it on CPUs, so there the same mixed-precision path runs on the CPU: every float32 guard of the
methods (the Gaussian densities of SPE and Set2Model, DyCE's and OpTA's Sinkhorn, the episodic distances) is
exercised end to end by CI, which never has a GPU. Where the CPU has native bf16 (AVX512-BF16 or AMX) it is also
2.6-3.4x faster than float32 per training step for the paper's ResNets (``benchmarks/bench_cpu_autocast.py``).
On a CPU without native bf16 the check scale keeps float32, as before.

The smoke and evidence scales never use it: their numbers must be the same bits on any CPU.

:func:`studylib.config.notebook_params` switches it per notebook process (:func:`set_cpu_autocast`).
"""

from __future__ import annotations

import contextlib
import functools

import torch

_CPU_AUTOCAST = {"on": False}


@functools.cache
def cpu_bf16_native() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX), so that oneDNN's bf16 kernels are fast."""
    cpu = getattr(torch, "cpu", None)
    try:
        return bool(torch.backends.mkldnn.is_available()
                    and (cpu._is_avx512_bf16_supported() or cpu._is_amx_tile_supported()))
    except AttributeError:  # a torch without the probes
        return False


def set_cpu_autocast(scale: str | None) -> bool:
    """Turn CPU bf16 autocast on for this process when ``scale`` is ``"check"`` and the CPU has native bf16,
    off otherwise; returns whether it is on."""
    _CPU_AUTOCAST["on"] = scale == "check" and cpu_bf16_native()
    return _CPU_AUTOCAST["on"]


def cpu_autocast_on() -> bool:
    """Whether this process runs its CPU networks under bf16 autocast (:func:`set_cpu_autocast`)."""
    return _CPU_AUTOCAST["on"]


def autocast_enabled(device: torch.device | str) -> bool:
    """bf16 autocast for networks on ``device``: CUDA always, the CPU when :func:`cpu_autocast_on`."""
    kind = torch.device(device).type
    return kind == "cuda" or (kind == "cpu" and cpu_autocast_on())


def autocast(device: torch.device | str, enabled: bool = True) -> contextlib.AbstractContextManager:
    """``torch.autocast(<device type>, torch.bfloat16)`` when ``enabled`` and :func:`autocast_enabled`, else
    nothing."""
    kind = torch.device(device).type
    if enabled and autocast_enabled(kind):
        return torch.autocast(kind, dtype=torch.bfloat16)
    return contextlib.nullcontext()
