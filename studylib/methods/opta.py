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

import torch

from studylib.evaluation.classifiers import register_classifier
from studylib.evaluation.logreg import fit_logreg, logreg_classifier


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


def sinkhorn_log(cost: torch.Tensor, a: torch.Tensor, b: torch.Tensor, epsilon: float = 0.05,
                 max_iter: int = 1000, tol: float = 1e-4, check_every: int = 10) -> torch.Tensor:
    """Entropic optimal transport (Eq. 2) in the log domain, batched over episodes.

    Solves ``min_pi <pi, C> - eps H(pi)`` s.t. ``pi 1 = a``, ``pi^T 1 = b`` for every episode with the
    iterations of POT's ``sinkhorn_log``: ``v = log b - LSE_i(-C/eps + u)``, ``u = log a - LSE_j(-C/eps + v)``;
    every ``check_every`` iterations (first at iteration 0) the column-marginal error ``||pi^T 1 - b||_2`` of
    each episode is measured and episodes below ``tol`` stop updating (they leave the working set), so each
    episode gets exactly the iterations POT would give it. ``tol <= 0`` runs ``max_iter`` iterations.

    Numerics: the log-domain updates cannot overflow for any ``epsilon``. When the (per-episode min-shifted)
    cost satisfies ``max C / eps <= 30`` (float32; 300 in float64), ``exp(-C/eps)`` cannot underflow and the
    identical iterates are computed in the scaling domain (``U = e^u``: ``V = b / K^T U``, ``U = a / K V``)
    with batched matmuls, several times faster than log-sum-exps on the CPU. OpTA's max-normalised cost with
    ``eps = 0.05`` (range 20) always takes that path; small ``eps`` falls back to the log domain.

    Args:
        cost: ``[E, m, n]`` cost matrices (use ``-similarity`` for similarity scores).
        a: ``[E, m]`` row marginals (positive, each summing to the same mass as ``b``).
        b: ``[E, n]`` column marginals.
        epsilon: entropic regularisation (in the units of ``cost``).
        max_iter: maximum number of Sinkhorn iterations.
        tol: stopping threshold on the column-marginal violation.
        check_every: iterations between convergence checks (10 as in POT; each check syncs with the host).

    Returns:
        ``[E, m, n]`` transport plans ``exp(-C/eps + u_i + v_j)``.
    """
    if cost.dim() != 3:
        raise ValueError(f"cost must be [E, m, n], got shape {tuple(cost.shape)}; add a leading episode axis")
    if a.shape != cost.shape[:2] or b.shape != (cost.shape[0], cost.shape[2]):
        raise ValueError(f"marginals must be [E, m] and [E, n] for cost {tuple(cost.shape)}, got "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    if epsilon <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    # The plan is unchanged by a constant shift of each episode's cost (the potentials absorb it).
    cost = cost - cost.amin(dim=(1, 2), keepdim=True)
    limit = 30.0 if cost.dtype in (torch.float32, torch.float16, torch.bfloat16) else 300.0
    scaling = float(cost.amax()) / epsilon <= limit
    if scaling:
        # exp(-C/eps) >= e^-limit cannot underflow: the same iterates in the scaling domain
        # (U = e^u, V = e^v: V = b / K^T U, U = a / K V), products and sums instead of log-sum-exps.
        kern, ra, rb = torch.exp(-cost / epsilon), a, b

        def step(k: torch.Tensor, ra: torch.Tensor, rb: torch.Tensor, u: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
            v = rb / (u[:, :, None] * k).sum(dim=1)
            return ra / torch.bmm(k, v[:, :, None])[:, :, 0], v

        def column(k: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return v * (u[:, :, None] * k).sum(dim=1)

        u_all, v_all = torch.ones_like(a), torch.ones_like(b)
    else:
        kern, ra, rb = -cost / epsilon, a.log(), b.log()

        def step(k: torch.Tensor, ra: torch.Tensor, rb: torch.Tensor, u: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
            v = rb - torch.logsumexp(k + u[:, :, None], dim=1)
            return ra - torch.logsumexp(k + v[:, None, :], dim=2), v

        def column(k: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return torch.exp(k + u[:, :, None] + v[:, None, :]).sum(dim=1)

        u_all, v_all = torch.zeros_like(a), torch.zeros_like(b)
    # Episodes that converge are written back and dropped from the working set (no wasted iterations).
    idx = torch.arange(cost.shape[0], device=cost.device)
    k_, a_, b_, bb_, u, v = kern, ra, rb, b, u_all, v_all
    for it in range(max_iter):
        u, v = step(k_, a_, b_, u)
        if tol > 0 and it % check_every == 0:
            done = torch.linalg.vector_norm(column(k_, u, v) - bb_, dim=1) < tol
            if bool(done.any()):
                u_all[idx[done]], v_all[idx[done]] = u[done], v[done]
                keep = ~done
                idx, k_, a_, b_, bb_, u, v = idx[keep], k_[keep], a_[keep], b_[keep], bb_[keep], u[keep], v[keep]
                if idx.numel() == 0:
                    break
    if idx.numel():
        u_all[idx], v_all[idx] = u, v
    if scaling:
        return u_all[:, :, None] * kern * v_all[:, None, :]
    return torch.exp(kern + u_all[:, :, None] + v_all[:, None, :])


def default_passes(shots: int) -> int:
    """Number of OpTA passes (delta): 5 for 1-shot, 1 otherwise (authors' defaults, Appendix A.2)."""
    return 5 if shots == 1 else 1


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


def opta_nearest_classifier(support: torch.Tensor, query: torch.Tensor, passes: int | None = None,
                            epsilon: float = 0.05, max_iter: int = 1000, tol: float = 1e-4, mix: float = 0.7,
                            standardize_features: bool = True) -> torch.Tensor:
    """OpTA followed by the nearest transported prototype: scores = ``-||q - P_hat_c||^2``, ``[E, Q, w]``."""
    if standardize_features:
        support, query = standardize(support), standardize(query)
    protos = opta(support, query, passes, epsilon, max_iter, tol, mix)
    return -_sq_dists(query, protos)


__all__ = ["standardize", "sinkhorn_log", "default_passes", "opta", "opta_classifier",
           "opta_nearest_classifier"]


register_classifier("opta", opta_classifier)
register_classifier("opta_nearest", opta_nearest_classifier)
register_classifier("logreg", logreg_classifier)
