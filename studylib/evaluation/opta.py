"""OpTA: optimal-transport-based distribution alignment of support prototypes (seed 001, Sec. 4.2, Eq. 4).

Given an episode with support features ``Z^S`` and query features ``Z^Q``, the support prototypes ``P^S``
(class means) are moved onto the region the queries occupy::

    pi* = argmin_{pi in Pi(r, c)} <pi, D> - eps H(pi)          (Eq. 1-2, r, c uniform)
    P_hat^S = pi_hat*^T Z^Q,  pi_hat*_ij = pi*_ij / sum_i pi*_ij  (Eq. 4, plan normalised per prototype)

Choices (see ``shared/PAPER-NOTES.md``, 001):

* features are standardised per sample (zero mean, unit variance over the feature dimension) before the
  prototypes are formed (:func:`standardize`), as the authors' evaluation does;
* the cost ``D`` is the squared Euclidean distance divided by its maximum in each episode, so one
  ``epsilon = 0.05`` means the same for every backbone and feature scale;
* log-domain Sinkhorn iterates (:func:`sinkhorn_log`) with the update order and the stopping rule of POT's
  ``ot.sinkhorn(method="sinkhorn_log")`` (error = L2 norm of the column-marginal violation, checked every
  10 iterations, per episode), so a batched run reproduces POT's plan episode by episode;
* ``passes`` (delta in the paper) consecutive passes, the transported prototypes feeding the next pass; the
  queries never move. Default 5 passes for 1 shot and 1 otherwise (the paper picks delta <= 5 on validation);
* with more than one shot the final prototype is ``mix * transported + (1 - mix) * original`` (mix = 0.7,
  the authors' code), applied once after the last pass against the original class means. With one shot the
  transported prototypes are used as they are.

Why not POT: ``ot.sinkhorn`` solves one problem per call on the CPU (the authors loop over episodes); this
module solves thousands of episodes in one set of tensor ops on any device, which is what makes evaluating
2000 episodes x several models cheap (see ``benchmarks/bench_opta.py``).
"""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

import torch

from studylib.evaluation.classifiers import register_classifier
from studylib.evaluation.logreg import fit_logreg
from studylib.numerics.ot import sinkhorn_log


def standardize(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Per-sample standardisation over the last dimension: ``(x - mean) / std`` (population std).

    Args:
        x: ``[..., D]`` features.

    Returns:
        ``[..., D]`` with zero mean and unit variance along the last axis.
    """
    mean = x.mean(dim=-1, keepdim=True)
    std = x.std(dim=-1, keepdim=True, unbiased=False)
    return (x - mean) / (std + eps)


def _sq_dists(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``[E, P, D] x [E, S, D] -> [E, P, S]`` squared Euclidean distances (clamped at 0)."""
    d = (a * a).sum(-1)[:, :, None] + (b * b).sum(-1)[:, None, :]
    d = torch.baddbmm(d, a, b.transpose(1, 2), alpha=-2.0)
    return d.clamp_min_(0.0)


F_ = TypeVar("F_", bound=Callable[..., torch.Tensor])


def full_precision(fn: F_) -> F_:
    """Run ``fn(support, query, ...)`` in at least float32 with autocast off (float64 inputs stay float64).

    OpTA's cost is an expanded squared distance (``|a|^2 + |b|^2 - 2ab``), which cancels badly in bf16, and its
    plan feeds a Sinkhorn solve; under bf16 autocast (evaluation on a GPU) both would run in 8-bit mantissas
    (issue 9). The result is float32 (or float64), whatever the caller's autocast state.
    """

    @functools.wraps(fn)
    def wrapper(support: torch.Tensor, query: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        dtype = torch.float64 if torch.float64 in (support.dtype, query.dtype) else torch.float32
        with torch.autocast(query.device.type, enabled=False):
            return fn(support.to(dtype), query.to(dtype), *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def default_passes(shots: int) -> int:
    """Number of OpTA passes (delta): 5 for 1-shot, 1 otherwise (authors' defaults, Appendix A.2)."""
    return 5 if shots == 1 else 1


@full_precision
def opta(support: torch.Tensor, query: torch.Tensor, passes: int | None = None, epsilon: float = 0.05,
         max_iter: int = 1000, tol: float = 1e-4, mix: float = 0.7) -> torch.Tensor:
    """Transported support prototypes (Eq. 4), batched over episodes.

    The features are used as given: call :func:`standardize` first (the classifiers below do).

    Args:
        support: ``[E, w, n, D]`` support features.
        query: ``[E, Q, D]`` query features (never moved).
        passes: OpTA passes delta; ``None`` -> :func:`default_passes` of ``n``.
        epsilon: Sinkhorn regularisation on the max-normalised squared Euclidean cost.
        max_iter, tol: Sinkhorn stopping rule (see :func:`sinkhorn_log`).
        mix: weight of the transported prototype when ``n > 1`` (``mix * P_hat + (1 - mix) * P``).

    Returns:
        ``[E, w, D]`` transported prototypes.
    """
    if support.dim() != 4 or query.dim() != 3 or support.shape[0] != query.shape[0] \
            or support.shape[-1] != query.shape[-1]:
        raise ValueError(f"opta expects support [E, w, n, D] and query [E, Q, D] with equal E and D, got "
                         f"{tuple(support.shape)} and {tuple(query.shape)}")
    e, w, n, _ = support.shape
    q = query.shape[1]
    passes = default_passes(n) if passes is None else passes
    if passes < 0:
        raise ValueError(f"passes must be >= 0, got {passes}")
    protos0 = support.mean(dim=2)
    protos = protos0
    a = torch.full((e, w), 1.0 / w, dtype=query.dtype, device=query.device)
    b = torch.full((e, q), 1.0 / q, dtype=query.dtype, device=query.device)
    for _ in range(passes):
        cost = _sq_dists(protos, query)                                   # [E, w, Q]
        cost = cost / cost.amax(dim=(1, 2), keepdim=True).clamp_min(torch.finfo(cost.dtype).tiny)
        plan = sinkhorn_log(cost, a, b, epsilon, max_iter, tol)          # [E, w, Q]
        plan = plan / plan.sum(dim=2, keepdim=True)                      # normalised per prototype
        protos = torch.bmm(plan, query)                                  # [E, w, D]
    if n > 1 and passes > 0:
        protos = mix * protos + (1.0 - mix) * protos0
    return protos


@full_precision
def opta_classifier(support: torch.Tensor, query: torch.Tensor, passes: int | None = None,
                    epsilon: float = 0.05, max_iter: int = 1000, tol: float = 1e-4, mix: float = 0.7,
                    C: float = 1.0, standardize_features: bool = True) -> torch.Tensor:
    """BECLR's inference (Sec. 4.2): OpTA, then multinomial L2 logistic regression (C = 1) fit on the ``w``
    transported prototypes only (one sample per class), evaluated on the queries.

    Args:
        support: ``[E, w, n, D]``; query: ``[E, Q, D]``.

    Returns:
        ``[E, Q, w]`` logits (higher = more likely).
    """
    if standardize_features:
        support, query = standardize(support), standardize(query)
    protos = opta(support, query, passes, epsilon, max_iter, tol, mix)
    e, w, _ = protos.shape
    y = torch.arange(w, device=protos.device).expand(e, w)
    weight, bias = fit_logreg(protos, y, w, C=C)
    return torch.einsum("eqd,ecd->eqc", query, weight) + bias[:, None, :]


@full_precision
def opta_nearest_classifier(support: torch.Tensor, query: torch.Tensor, passes: int | None = None,
                            epsilon: float = 0.05, max_iter: int = 1000, tol: float = 1e-4, mix: float = 0.7,
                            standardize_features: bool = True) -> torch.Tensor:
    """OpTA followed by the nearest transported prototype: scores = ``-||q - P_hat_c||^2``, ``[E, Q, w]``."""
    if standardize_features:
        support, query = standardize(support), standardize(query)
    protos = opta(support, query, passes, epsilon, max_iter, tol, mix)
    return -_sq_dists(query, protos)


__all__ = ["standardize", "full_precision", "default_passes", "opta", "opta_classifier",
           "opta_nearest_classifier"]


register_classifier("opta", opta_classifier)
register_classifier("opta_nearest", opta_nearest_classifier)
