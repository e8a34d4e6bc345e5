"""Linear SVMs fitted to batches of small binary problems on the device (seed 003's SVM baseline, Eq. 18).

:func:`linear_svm` solves, for every problem of a batch at once, scikit-learn ``LinearSVC``'s primal
(``loss="squared_hinge"``, ``penalty="l2"``, ``fit_intercept=True``, ``intercept_scaling=1``)::

    min_{w, b}  1/2 (|w|^2 + b^2) + C sum_i max(0, 1 - y_i (w . x_i + b))^2

(liblinear regularises the intercept as the weight of a constant feature, and so does this function). The
objective is strongly convex and piecewise quadratic, so a generalised Newton method converges in a few
steps (Keerthi & DeCoste, JMLR 2005): each step solves ``(I + 2C X_A^T X_A) s = -grad`` over the margin
violators ``A`` with one batched ``torch.linalg.solve``, then takes the best of a fixed ladder of step
sizes ``1, 1/2, ..., 2^-11`` (the objective never increases), for at most ``steps`` steps or until every
problem's step is negligible.

Precision: autocast off, float32 at least (float64 inputs stay float64); tensors on the inputs' device.
"""

from __future__ import annotations

import torch

_STEPS = 0.5 ** torch.arange(12, dtype=torch.float64)


def svm_objective(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, c: float) -> torch.Tensor:
    """``[B...]`` primal objective of weights ``w [B..., d + 1]`` (last entry: the intercept) on ``x [B..., n, d]``
    with labels ``y [B..., n]`` in {-1, +1}."""
    xa = torch.cat([x, torch.ones_like(x[..., :1])], -1)
    margin = (1 - y * (xa @ w.unsqueeze(-1)).squeeze(-1)).clamp_min(0)
    return 0.5 * (w * w).sum(-1) + c * (margin * margin).sum(-1)


def linear_svm(x: torch.Tensor, y: torch.Tensor, c: float = 1.0, steps: int = 20,
               tol: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One L2-regularised squared-hinge linear SVM per problem (module docstring), batched.

    Args:
        x: ``[B..., n, d]`` training points of each problem.
        y: ``[B..., n]`` labels, +1 (positive) or -1 (negative); bool is read as True = +1.
        c: ``LinearSVC``'s ``C`` (> 0).
        steps: most Newton steps (3-6 reach float64 precision on the problems of the tests; each costs one
            batched ``(d + 1) x (d + 1)`` solve): the most taken.
        tol: stop early once every problem's Newton step is at most ``tol`` relative to its weights (one
            host sync per step); None: ``eps^(3/4)`` of the dtype (Newton converges quadratically: the step just
            taken leaves an error of order eps); 0: always take ``steps`` steps.

    Returns:
        ``(w [B..., d], b [B...])``; the decision value of ``z`` is ``z . w + b`` (seed 003, Eq. 18, ranks by
        ``z . w``: the intercept does not change a ranking).
    """
    if not c > 0:
        raise ValueError(f"the SVM's C must be > 0, got {c}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if x.shape[:-1] != y.shape:
        raise ValueError(f"x {tuple(x.shape)} and y {tuple(y.shape)} disagree: y must be x.shape[:-1]")
    with torch.autocast(x.device.type, enabled=False):
        x = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        y = (y.to(x.dtype) * 2 - 1) if y.dtype == torch.bool else y.to(x.dtype)
        xa = torch.cat([x, torch.ones_like(x[..., :1])], -1)  # [B..., n, d + 1]
        w = torch.zeros(xa.shape[:-2] + xa.shape[-1:], dtype=x.dtype, device=x.device)
        eye = torch.eye(xa.shape[-1], dtype=x.dtype, device=x.device)
        ladder = _STEPS.to(device=x.device, dtype=x.dtype)
        tol = torch.finfo(x.dtype).eps ** 0.75 if tol is None else tol
        for _ in range(steps):
            m = 1 - y * (xa @ w.unsqueeze(-1)).squeeze(-1)  # [B..., n]
            act = (m > 0).to(x.dtype)
            grad = w - 2 * c * ((act * y * m).unsqueeze(-1) * xa).sum(-2)
            hess = eye + 2 * c * (xa * act.unsqueeze(-1)).transpose(-1, -2) @ xa
            s = -torch.linalg.solve(hess, grad.unsqueeze(-1)).squeeze(-1)
            cand = w.unsqueeze(-2) + ladder[:, None] * s.unsqueeze(-2)  # [B..., L, d + 1]
            f = svm_objective(cand, x.unsqueeze(-3), y.unsqueeze(-2), c)  # [B..., L]
            best = f.argmin(-1)
            # ties accept the step: near the optimum float32 cannot resolve the decrease of a Newton step
            better = torch.gather(f, -1, best.unsqueeze(-1)).squeeze(-1) <= svm_objective(w, x, y, c)
            new = torch.gather(cand, -2, best[..., None, None].expand(*best.shape, 1, cand.shape[-1])).squeeze(-2)
            w = torch.where(better.unsqueeze(-1), new, w)
            if tol > 0 and bool((s.abs().amax(-1) <= tol * (1 + w.abs().amax(-1))).all()):
                break  # every problem at its optimum (a Newton step of relative size <= tol)
        return w[..., :-1], w[..., -1]
