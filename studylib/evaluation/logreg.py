"""Multinomial L2 logistic regression fit per episode, batched over many episodes (seed 001, Sec. 4.2).

BECLR (and most U-FSL work) classifies queries with scikit-learn's ``LogisticRegression(C=1)`` fit on the
support set (BECLR: on the ``w`` OpTA-transported prototypes). Its objective, which this module minimises
exactly, is::

    min_{W, b}  C * sum_s -log softmax(W x_s + b)[y_s]  +  0.5 * ||W||_F^2        (intercept unpenalised)

with the full ``[w, D]`` softmax parameterisation (scikit-learn's multinomial default).

Why not scikit-learn: it fits one episode at a time on the CPU (~10 ms each, 2000 episodes x shots x
models). Here every episode is solved at once with tensor ops on any device:

1. Representer reduction. The penalty makes the optimal ``W`` lie in the row span of the episode's ``S``
   training points, so with the Gram matrix ``K = X X^T = U diag(lam) U^T`` the problem is the same logistic
   regression on the ``S``-dimensional features ``X~ = U diag(sqrt(lam))`` (``||W||`` is preserved), and
   ``W = W~ diag(lam^-1/2) U^T X`` (directions with ``lam`` ~ 0 carry no weight at the optimum and are
   dropped). The problem size no longer depends on ``D``.
2. Damped Newton iterations on the ``w * (S + 1)`` parameters per episode (batched linear solves), with a
   backtracking line search evaluated for all step sizes at once (Armijo), until the Newton decrement of
   every episode is below ``tol``. The softmax is invariant to a common shift of the intercepts, which the
   unpenalised intercept leaves undetermined; the term ``0.5 * (sum_c b_c)^2`` fixes the shift (sum of
   intercepts 0, the value scikit-learn's solvers reach from a zero start) without changing any probability.

Float64 is used on the CPU, float32 on a GPU (``dtype`` overrides).
"""

from __future__ import annotations

import torch

from studylib.evaluation.classifiers import register_classifier


def _objective(theta: torch.Tensor, phi: torch.Tensor, y1h: torch.Tensor, pen: torch.Tensor) -> torch.Tensor:
    """Objective for ``theta [..., w, r+1]`` (broadcast over leading dims after E), ``phi [E, S, r+1]``."""
    # theta: [E, T, w, r1]; phi: [E, S, r1] -> logits [E, T, S, w]
    logits = torch.einsum("esi,etci->etsc", phi, theta)
    nll = -(torch.log_softmax(logits, dim=-1) * y1h[:, None]).sum(dim=(-1, -2))
    reg = 0.5 * (theta[..., :-1] ** 2).sum(dim=(-1, -2)) * pen
    shift = 0.5 * theta[..., -1].sum(dim=-1) ** 2
    return nll + reg + shift


def fit_logreg(x: torch.Tensor, y: torch.Tensor, classes: int, C: float = 1.0, max_iter: int = 100,
               tol: float | None = None, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Fit multinomial L2 logistic regression (scikit-learn's ``LogisticRegression(C)`` objective) per episode.

    Args:
        x: ``[E, S, D]`` training features of each episode.
        y: ``[E, S]`` int64 labels in ``0..classes-1``.
        classes: number of classes ``w`` (classes without training points get a weight too).
        C: inverse regularisation strength (scikit-learn's ``C``).
        max_iter: maximum Newton iterations.
        tol: stop when every episode's squared Newton decrement ``-g.d`` is below it (default 1e-12 in
            float64, 1e-6 in float32).
        dtype: computation dtype; default float64 on the CPU, float32 elsewhere.

    Returns:
        ``W [E, w, D]`` and ``b [E, w]`` in ``x.dtype``; logits are ``x @ W^T + b``.
    """
    if x.dim() != 3 or y.shape != x.shape[:2]:
        raise ValueError(f"fit_logreg expects x [E, S, D] and y [E, S], got {tuple(x.shape)} and {tuple(y.shape)}")
    if C <= 0:
        raise ValueError(f"C must be > 0, got {C}")
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= classes):
        raise ValueError(f"labels must lie in 0..{classes - 1}; got values in {int(y.min())}..{int(y.max())}")
    out_dtype = x.dtype
    if dtype is None:
        dtype = torch.float64 if x.device.type == "cpu" else torch.float32
    if tol is None:
        tol = 1e-12 if dtype == torch.float64 else 1e-6
    xd = x.to(dtype)
    e, s, _ = xd.shape
    w = classes

    # 1. Representer reduction: features X~ = U sqrt(lam) of the Gram matrix.
    gram = xd @ xd.transpose(1, 2)
    lam, u = torch.linalg.eigh(gram)                                        # ascending, [E, S], [E, S, S]
    keep = lam > lam.amax(dim=1, keepdim=True).clamp_min(torch.finfo(dtype).tiny) * (s * torch.finfo(dtype).eps)
    sq = torch.where(keep, lam.clamp_min(0).sqrt(), torch.zeros_like(lam))
    feats = u * sq[:, None, :]                                              # [E, S, r=S]
    phi = torch.cat([feats, torch.ones(e, s, 1, dtype=dtype, device=x.device)], dim=2)   # [E, S, r+1]
    r1 = phi.shape[2]
    y1h = torch.nn.functional.one_hot(y.long(), w).to(dtype)                 # [E, S, w]
    pen = 1.0 / C

    # Constant part of the Hessian: penalty on the weights, shift term on the intercepts.
    n_par = w * r1
    h_const = torch.zeros(n_par, n_par, dtype=dtype, device=x.device)
    idx = torch.arange(n_par, device=x.device)
    is_bias = (idx % r1) == r1 - 1
    h_const[idx[~is_bias], idx[~is_bias]] = pen
    h_const[is_bias.nonzero()[:, 0][:, None], is_bias.nonzero()[:, 0][None, :]] = 1.0
    # Weight directions dropped by the reduction (lam ~ 0) have zero features; the penalty keeps them at 0.

    theta = torch.zeros(e, w, r1, dtype=dtype, device=x.device)
    steps = 0.5 ** torch.arange(12, dtype=dtype, device=x.device)         # line-search candidates
    f = _objective(theta[:, None], phi, y1h, pen)[:, 0]
    for _ in range(max_iter):
        p = torch.softmax(phi @ theta.transpose(1, 2), dim=-1)              # [E, S, w]
        grad = (p - y1h).transpose(1, 2) @ phi                              # [E, w, r1]
        grad[..., :-1] += pen * theta[..., :-1]
        grad[..., -1] += theta[..., -1].sum(dim=1, keepdim=True)
        # Hessian of the data term: blockdiag_c(phi^T diag(p_c) phi) - B^T B with B[s, (c,i)] = p_sc phi_si.
        diag_blocks = torch.einsum("esc,esi,esj->ecij", p, phi, phi)         # [E, w, r1, r1]
        bmat = (p[:, :, :, None] * phi[:, :, None, :]).reshape(e, s, n_par)
        hess = -(bmat.transpose(1, 2) @ bmat)
        hess = hess.view(e, w, r1, w, r1)
        hess[:, torch.arange(w), :, torch.arange(w), :] += diag_blocks.transpose(0, 1)
        hess = hess.view(e, n_par, n_par) + h_const
        g = grad.reshape(e, n_par)
        # LU solve: on the CPU batched LU is several times faster than batched Cholesky for n ~ 100.
        d = -torch.linalg.solve(hess, g)                                    # [E, n_par]
        decrement = -(g * d).sum(dim=1)                                      # >= 0
        if float(decrement.max()) < tol:
            break
        cand = theta[:, None] + steps[None, :, None, None] * d.view(e, 1, w, r1)
        fc = _objective(cand, phi, y1h, pen)                                 # [E, T]
        armijo = fc <= f[:, None] - 1e-4 * steps[None, :] * decrement[:, None]
        first = torch.where(armijo.any(dim=1), armijo.float().argmax(dim=1), fc.argmin(dim=1))
        take = fc.gather(1, first[:, None])[:, 0] < f                        # never accept an increase
        t = torch.where(take, steps[first], torch.zeros_like(f))
        theta = theta + t[:, None, None] * d.view(e, w, r1)
        f = torch.where(take, fc.gather(1, first[:, None])[:, 0], f)

    # 2. Back to the input space: W = W~ diag(lam^-1/2) U^T X.
    inv_sq = torch.where(keep, 1.0 / sq.clamp_min(torch.finfo(dtype).tiny), torch.zeros_like(sq))
    coef = theta[..., :-1] * inv_sq[:, None, :]                              # [E, w, r]
    weight = coef @ u.transpose(1, 2) @ xd                                   # [E, w, D]
    bias = theta[..., -1]
    return weight.to(out_dtype), bias.to(out_dtype)


def logreg_classifier(support: torch.Tensor, query: torch.Tensor, C: float = 1.0) -> torch.Tensor:
    """Classifier protocol: fit :func:`fit_logreg` on all support points, return query logits.

    Args:
        support: ``[E, w, n, D]``; query: ``[E, Q, D]``.

    Returns:
        ``[E, Q, w]`` logits ``W q + b``.
    """
    if support.dim() != 4 or query.dim() != 3:
        raise ValueError(f"expected support [E, w, n, D] and query [E, Q, D], got {tuple(support.shape)} and "
                         f"{tuple(query.shape)}")
    e, w, n, dim = support.shape
    y = torch.arange(w, device=support.device).repeat_interleave(n).expand(e, w * n)
    weight, bias = fit_logreg(support.reshape(e, w * n, dim), y, w, C=C)
    return torch.einsum("eqd,ecd->eqc", query, weight) + bias[:, None, :]


register_classifier("logreg", logreg_classifier)

__all__ = ["fit_logreg", "logreg_classifier"]
