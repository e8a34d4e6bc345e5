"""Entropic optimal transport: the batched Sinkhorn solver shared by several methods.

A numerical primitive below the methods: DyCE (:mod:`studylib.methods.dyce`, the equipartitioned memory
assignment of seed 001's Eq. 1-2) and OpTA (:mod:`studylib.evaluation.opta`, Eq. 4) both call
:func:`sinkhorn_log`. It lives here so that neither imports the other, and so that its precision rule (float32
at least, autocast off, :mod:`studylib.numerics.guards`) holds for every caller.
"""

from __future__ import annotations

import torch

from studylib.numerics.guards import autocast_off, working_dtype


def sinkhorn_log(cost: torch.Tensor, a: torch.Tensor, b: torch.Tensor, epsilon: float = 0.05,
                 max_iter: int = 1000, tol: float = 1e-4, check_every: int = 10,
                 host_sync: bool = True) -> torch.Tensor:
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
        host_sync: ``False`` reads nothing back from the device (a training step on a GPU keeps running ahead):
            both domains run their ``max_iter`` iterations and the plan of the domain the cost's range selects is
            picked on the device, bit for bit the plan of ``host_sync=True``. Needs ``tol <= 0``.

    Precision: the iterations always run in at least float32 with autocast switched off (float64 inputs stay
    float64). Under bf16/fp16 autocast (the training loop's on a GPU) the caller's tensors may arrive in bf16;
    bf16 has 8 mantissa bits, too few for marginals of ``1/2B`` and potentials of size ``max C / eps``, and
    the in-place write-back of converged episodes needs one dtype throughout (issue 9).

    Returns:
        ``[E, m, n]`` transport plans ``exp(-C/eps + u_i + v_j)`` in the working dtype (float32 or float64).
    """
    if cost.dim() != 3:
        raise ValueError(f"cost must be [E, m, n], got shape {tuple(cost.shape)}; add a leading episode axis")
    if a.shape != cost.shape[:2] or b.shape != (cost.shape[0], cost.shape[2]):
        raise ValueError(f"marginals must be [E, m] and [E, n] for cost {tuple(cost.shape)}, got "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    if epsilon <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    if not host_sync and tol > 0:
        raise ValueError(f"host_sync=False runs a fixed number of iterations; pass tol=0 (got tol={tol}), or "
                         f"host_sync=True for convergence checks")
    dtype = working_dtype(cost, a, b)
    with autocast_off(cost.device.type):
        cost, a, b = cost.to(dtype), a.to(dtype), b.to(dtype)
        if host_sync:
            return _sinkhorn_log(cost, a, b, epsilon, max_iter, tol, check_every)
        # the shift and the range test as _sinkhorn_log makes them on the host (there: Python floats, so the
        # division in float64 here)
        shifted = cost - cost.amin(dim=(1, 2), keepdim=True)
        in_range = shifted.amax().double() / epsilon <= _scaling_limit(cost.dtype)
        scaled = _sinkhorn_log(cost, a, b, epsilon, max_iter, tol, check_every, domain="scaling")
        logged = _sinkhorn_log(cost, a, b, epsilon, max_iter, tol, check_every, domain="log")
        return torch.where(in_range, scaled, logged)


def _scaling_limit(dtype: torch.dtype) -> float:
    """Largest ``max C / eps`` for which ``exp(-C/eps)`` cannot underflow in ``dtype``."""
    return 30.0 if dtype in (torch.float32, torch.float16, torch.bfloat16) else 300.0


def _sinkhorn_log(cost: torch.Tensor, a: torch.Tensor, b: torch.Tensor, epsilon: float = 0.05,
                  max_iter: int = 1000, tol: float = 1e-4, check_every: int = 10,
                  domain: str = "auto") -> torch.Tensor:
    """:func:`sinkhorn_log` on validated inputs already in the working dtype (``domain``: ``"auto"`` chooses
    by the cost's range, read back from the device; ``"scaling"`` or ``"log"`` forces one)."""
    # The plan is unchanged by a constant shift of each episode's cost (the potentials absorb it).
    cost = cost - cost.amin(dim=(1, 2), keepdim=True)
    if domain == "auto":
        scaling = float(cost.amax()) / epsilon <= _scaling_limit(cost.dtype)
    else:
        scaling = domain == "scaling"
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


def sinkhorn_reference(cost: torch.Tensor, a: torch.Tensor, b: torch.Tensor, epsilon: float,
                       iters: int) -> torch.Tensor:
    """Slow reference for tests: one problem ``[m, n]``, ``iters`` plain Sinkhorn iterations in float64 on
    ``K = exp(-C/eps)``: column normalisation to ``b``, then row normalisation to ``a`` (POT's order)."""
    k = torch.exp(-(cost.double() - cost.double().min()) / epsilon)
    u = torch.ones(cost.shape[0], dtype=torch.float64)
    v = torch.ones(cost.shape[1], dtype=torch.float64)
    for _ in range(iters):
        v = b.double() / (k.T @ u)
        u = a.double() / (k @ v)
    return u[:, None] * k * v[None, :]


__all__ = ["sinkhorn_log", "sinkhorn_reference"]
