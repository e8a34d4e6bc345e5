"""Diagonal Gaussians and diagonal Gaussian mixtures fitted to batches of sets, differentiably.

Shapes: ``B...`` leading batch dimensions (one set per entry, e.g. one concept set per class of a batch),
``N`` points per set, ``K`` mixture components, ``d`` dimensions, ``Q`` query points.

* :func:`fit_gaussian` -- maximum-likelihood diagonal Gaussian of a set in closed form (seed 003, Eq. 9):
  differentiable directly by autograd (its derivative is Eq. 10).
* :func:`fit_gmm` -- diagonal GMM by EM, batched over sets, with k-means++ or warm-start initialisation, a
  variance floor and convergence by tolerance. Gradient: EM runs to convergence without a graph, then
  ``unroll`` more EM steps are taken *with* a graph from the detached fixed point. The gradient of ``r``
  unrolled steps is the first ``r`` terms of the Neumann series of the implicit gradient of the fixed point
  ``theta* = EM(theta*, X)``, ``(I - dEM/dtheta)^-1 dEM/dX``, so it approaches the implicit gradient of
  seed 003's Eq. 13-15 as ``unroll`` grows (EM is a contraction near a strict local maximum).
  ``grad="implicit"`` gives that limit exactly: the implicit-function gradient of the fixed point (seed 003,
  Eq. 13-15), the adjoint system ``(I - dEM/dtheta)^T u = dL/dtheta*`` solved per set with one batched
  ``torch.linalg.solve`` over the ``K (2d + 1)`` parameters, then ``dL/dX = (dEM/dX)^T u``
  (:class:`_ImplicitEM`). The authors solve the KKT system of the Lagrangian of Eq. 13 (Eq. 15); the EM
  fixed point is the same stationary point (EM's fixed points are the KKT points of the likelihood with the
  weight constraint), and differentiating the EM map instead also covers the variance floor, which the
  likelihood's KKT conditions do not. Every concept descriptor receives a gradient: the authors' code has a
  fast path that hard-codes 10 samples, so only the first 10 descriptors of a set get one (PAPER-NOTES 003);
  that bug is not reproduced here.
* :func:`diag_gaussian_logpdf`, :func:`gmm_logpdf` -- log-densities of query points under the fitted models;
  :func:`pairwise_diag_gaussian_logpdf` -- of every point under every Gaussian (seed 002's posteriors).

Precision: every function here switches autocast off and computes in at least float32 (bfloat16/float16
inputs are upcast): variances of L2-normalised descriptors are ~1e-3 and bf16's 8-bit mantissa would ruin
them. All tensors are created on the inputs' device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.func import jacrev, vmap

from studylib.numerics.guards import at_least_float32, autocast_off

LOG_2PI = math.log(2.0 * math.pi)


def fit_gaussian(x: torch.Tensor, var_floor: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Maximum-likelihood diagonal Gaussian of each set (seed 003, Eq. 9), differentiable (Eq. 10).

    Args:
        x: ``[B..., N, d]`` sets of ``N`` points.
        var_floor: added to the ML variance (the authors' code adds 1e-6), so a set of identical points or a
            set of one point still has a finite density.

    Returns:
        ``(mu, var)``, each ``[B..., d]``; ``var = mean((x - mu)^2) + var_floor`` (the biased ML estimate).
    """
    if var_floor < 0:
        raise ValueError(f"var_floor must be >= 0, got {var_floor}")
    with autocast_off(x.device.type):
        (x,) = at_least_float32(x)
        mu = x.mean(-2)
        var = (x - mu.unsqueeze(-2)).pow(2).mean(-2) + var_floor
        return mu, var


# Elements of one block's largest temporary (``[B..., q, K, d]`` float32: 1 MiB), so that it stays in the cache.
_BLOCK_ELEMENTS = 1 << 18


def _by_query_blocks(z: torch.Tensor, params: tuple[torch.Tensor, ...], out_dim: int, fn) -> torch.Tensor:
    """``fn(z)`` computed on blocks of the queries (``z [B..., Q, d]``'s dimension -2), concatenated along
    ``out_dim``; ``params``: the fitted tensors ``fn`` broadcasts each query against (means first).

    Scoring a database of ``Q`` queries against ``B`` fitted sets makes ``[B..., Q, K, d]`` temporaries (hundreds
    of MB at Q = 2000); blocks of at most :data:`_BLOCK_ELEMENTS` keep them in the CPU cache, 3-5x faster on this
    machine (``benchmarks/bench_gaussian_blocks.py``). Every output element is computed by the same element-wise
    operations and the same reduction over ``d`` as without blocks, so the result is bit-for-bit the same
    (``tests/numerics/test_gaussian_blocks.py``).
    Only without a graph: training's small sets take the direct path, and its gradients stay autograd's own.
    """
    if z.dim() < 2:
        return fn(z)
    q = z.shape[-2]
    per_query = max(params[0].numel(), z.numel() // max(1, q))  # elements of B... x K x d
    size = max(1, _BLOCK_ELEMENTS // per_query)
    if q <= size or (torch.is_grad_enabled() and any(t.requires_grad for t in (z, *params))):
        return fn(z)
    return torch.cat([fn(z[..., i:i + size, :]) for i in range(0, q, size)], out_dim)


def diag_gaussian_logpdf(z: torch.Tensor, mu: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """``log N(z; mu, diag(var))`` of every query under its set's Gaussian.

    Args:
        z: ``[B..., Q, d]`` queries (or ``[Q, d]`` shared by every set: batch dimensions broadcast).
        mu, var: ``[B..., d]``.

    Returns:
        ``[B..., Q]`` float32 (or float64 for float64 inputs). Computed directly from ``(z - mu)^2 / var``
        (no expanded quadratic form, which cancels when ``var`` is small).
    """
    with autocast_off(z.device.type):
        z, mu, var = at_least_float32(z, mu, var)
        mu, var = mu.unsqueeze(-2), var.unsqueeze(-2)
        logdet = torch.log(var).sum(-1)  # [B..., 1], once for every block
        return _by_query_blocks(z, (mu, var), -1,
                                lambda zq: -0.5 * (((zq - mu) ** 2 / var).sum(-1) + logdet + z.shape[-1] * LOG_2PI))


def pairwise_diag_gaussian_logpdf(z: torch.Tensor, mu: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """Log-densities of every point under every diagonal Gaussian: ``out[..., i, k] = log N(z_i; mu_k, var_k)``
    (seed 002's Eq. 6-8 evaluate every query against every class Gaussian).

    The quadratic form is expanded, ``sum_d (z - mu)^2 / var = z^2 . (1/var) - 2 z . (mu/var) + mu^2 . (1/var)``,
    so two matmuls replace an ``[..., N, K, d]`` intermediate.

    Args:
        z: ``[..., N, d]``.
        mu, var: ``[..., K, d]`` (batch dimensions broadcast with ``z``'s), ``var > 0``.

    Returns:
        ``[..., N, K]``, in at least float32: autocast is switched off here because the expanded quadratic
        form cancels catastrophically in bfloat16/float16.
    """
    with autocast_off(z.device.type):
        z, mu, var = at_least_float32(z, mu, var)
        prec = var.reciprocal()
        quad = (torch.matmul(z * z, prec.transpose(-1, -2)) - 2.0 * torch.matmul(z, (mu * prec).transpose(-1, -2))
                + (mu * mu * prec).sum(-1).unsqueeze(-2))
        return -0.5 * (quad + torch.log(var).sum(-1).unsqueeze(-2) + z.shape[-1] * LOG_2PI)


@dataclass
class GMM:
    """A batch of diagonal Gaussian mixtures: ``weights [B..., K]``, ``means [B..., K, d]``, ``vars [B..., K, d]``."""

    weights: torch.Tensor
    means: torch.Tensor
    vars: torch.Tensor

    def detach(self) -> "GMM":
        return GMM(self.weights.detach(), self.means.detach(), self.vars.detach())

    @property
    def components(self) -> int:
        return int(self.weights.shape[-1])


def component_logpdf(z: torch.Tensor, gmm: GMM) -> torch.Tensor:
    """``[B..., Q, K]``: ``log w_k + log N(z_q; mu_k, var_k)`` for every query and component."""
    with autocast_off(z.device.type):
        z, w, mu, var = at_least_float32(z, gmm.weights, gmm.means, gmm.vars)
        logdet = torch.log(var).sum(-1).unsqueeze(-2)  # [B..., 1, K], once for every block
        logw, mu_, var_ = torch.log(w).unsqueeze(-2), mu.unsqueeze(-3), var.unsqueeze(-3)

        def block(zq: torch.Tensor) -> torch.Tensor:
            diff = zq.unsqueeze(-2) - mu_  # [B..., q, K, d]
            quad = (diff * diff / var_).sum(-1)
            return logw - 0.5 * (quad + logdet + z.shape[-1] * LOG_2PI)

        return _by_query_blocks(z, (mu, var, w), -2, block)


def gmm_logpdf(z: torch.Tensor, gmm: GMM) -> torch.Tensor:
    """``[B..., Q]``: ``log sum_k w_k N(z_q; mu_k, diag(var_k))`` (log-sum-exp over components)."""
    return torch.logsumexp(component_logpdf(z, gmm), dim=-1)


def _m_step(x: torch.Tensor, resp: torch.Tensor, var_floor: float) -> GMM:
    """Weighted ML update from responsibilities ``resp [B..., N, K]``; tiny ``Nk`` guarded by 1e-10 mass."""
    nk = resp.sum(-2) + 10 * torch.finfo(resp.dtype).eps  # [B..., K]
    means = resp.transpose(-1, -2) @ x / nk.unsqueeze(-1)  # [B..., K, d]
    # the centred form (not E[x^2] - mu^2, which cancels when a component is tight):
    diff = x.unsqueeze(-3) - means.unsqueeze(-2)  # [B..., K, N, d]
    var = (resp.transpose(-1, -2).unsqueeze(-1) * diff * diff).sum(-2) / nk.unsqueeze(-1)
    return GMM(nk / nk.sum(-1, keepdim=True), means, var + var_floor)


def em_step(x: torch.Tensor, gmm: GMM, var_floor: float) -> tuple[GMM, torch.Tensor]:
    """One EM iteration: ``(new GMM, mean log-likelihood of x under the old one [B...])``."""
    logp = component_logpdf(x, gmm)  # [B..., N, K]
    norm = torch.logsumexp(logp, -1, keepdim=True)
    resp = torch.exp(logp - norm)
    return _m_step(x, resp, var_floor), norm.squeeze(-1).mean(-1)


def kmeans_pp_init(x: torch.Tensor, k: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """k-means++ seeding (Arthur & Vassilvitskii 2007), batched: ``[B..., K, d]`` means chosen among the points.

    The first centre is a uniformly random point, each next one a point drawn with probability proportional
    to its squared distance to the nearest chosen centre. Random numbers come from ``generator`` (on any
    device; they are moved to ``x``'s) or the global RNG.
    """
    shape, n, d = x.shape[:-2], x.shape[-2], x.shape[-1]
    flat = x.reshape(-1, n, d)
    b = flat.shape[0]

    def uniform(*size: int) -> torch.Tensor:
        if generator is None:
            return torch.rand(*size, device=x.device)
        return torch.rand(*size, generator=generator, device=generator.device).to(x.device)

    rows = torch.arange(b, device=x.device)
    first = (uniform(b) * n).long().clamp_max(n - 1)
    centres = [flat[rows, first]]
    dist = ((flat - centres[0].unsqueeze(1)) ** 2).sum(-1)  # [b, N]
    for _ in range(1, k):
        p = dist.clamp_min(0) + 1e-30  # all-zero distances (duplicate points): uniform choice
        cdf = torch.cumsum(p / p.sum(-1, keepdim=True), -1)
        idx = torch.searchsorted(cdf, uniform(b, 1).to(cdf.dtype)).squeeze(-1).clamp_max(n - 1)
        c = flat[rows, idx]
        centres.append(c)
        dist = torch.minimum(dist, ((flat - c.unsqueeze(1)) ** 2).sum(-1))
    return torch.stack(centres, 1).reshape(*shape, k, d)


GRADS = ("unrolled", "implicit")


def _pack(gmm: GMM) -> torch.Tensor:
    """``[B..., K (2d + 1)]``: weights, means and variances of each set, flattened."""
    lead = gmm.weights.shape[:-1]
    return torch.cat([gmm.weights, gmm.means.reshape(*lead, -1), gmm.vars.reshape(*lead, -1)], -1)


def _unpack(theta: torch.Tensor, k: int, d: int) -> GMM:
    lead = theta.shape[:-1]
    return GMM(theta[..., :k], theta[..., k:k + k * d].reshape(*lead, k, d),
               theta[..., k + k * d:].reshape(*lead, k, d))


class _ImplicitEM(torch.autograd.Function):
    """Identity on a converged EM fixed point ``theta*`` whose backward is the implicit gradient of
    ``theta* = EM(theta*, X)`` (module docstring): ``u = (I - dEM/dtheta)^-T g`` by a batched linear solve of
    the per-set ``P x P`` system (``P = K (2d + 1)``), then ``dL/dX = (dEM/dX)^T u``. A set whose system is
    singular (two identical components: the fixed point is not isolated) falls back to the pseudo-inverse.
    Not twice differentiable."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, theta: torch.Tensor, k: int, var_floor: float) -> torch.Tensor:
        ctx.save_for_backward(x, theta)
        ctx.k, ctx.var_floor = k, var_floor
        return theta.clone()

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        x, theta = ctx.saved_tensors
        k, floor = ctx.k, ctx.var_floor
        n, d = x.shape[-2], x.shape[-1]
        lead = x.shape[:-2]
        with autocast_off(x.device.type), torch.enable_grad():
            xf = x.detach().reshape(-1, n, d)
            tf = theta.detach().reshape(-1, theta.shape[-1])
            gf = g.reshape(-1, g.shape[-1]).to(tf.dtype)

            def em_map(t: torch.Tensor, xs: torch.Tensor) -> torch.Tensor:
                return _pack(em_step(xs, _unpack(t, k, d), floor)[0])

            jac = vmap(jacrev(em_map, argnums=0))(tf, xf)  # [b, P, P]: d EM(theta) / d theta
            eye = torch.eye(jac.shape[-1], dtype=jac.dtype, device=jac.device)
            a = (eye - jac).transpose(-1, -2)
            u, info = torch.linalg.solve_ex(a, gf.unsqueeze(-1))
            u = u.squeeze(-1)
            bad = (info != 0) | ~torch.isfinite(u).all(-1)
            if bool(bad.any()):
                u[bad] = (torch.linalg.pinv(a[bad]) @ gf[bad].unsqueeze(-1)).squeeze(-1)
            xg = xf.clone().requires_grad_(True)
            out = em_map(tf, xg)
            (gx,) = torch.autograd.grad(out, xg, u)
        return gx.reshape(*lead, n, d).to(x.dtype), None, None, None


def _hard_start(x: torch.Tensor, means: torch.Tensor, var_floor: float) -> GMM:
    """The M-step of the hard assignment of every point of ``x [B..., N, d]`` to its nearest initial mean
    (``means [B..., K, d]``): EM's starting point from given means."""
    d2 = ((x.unsqueeze(-2) - means.unsqueeze(-3)) ** 2).sum(-1)  # [B..., N, K]
    resp = torch.nn.functional.one_hot(d2.argmin(-1), means.shape[-2]).to(x.dtype)
    return _m_step(x, resp, var_floor)


def fit_gmm(x: torch.Tensor, k: int, iters: int = 100, tol: float = 1e-5, unroll: int = 3,
            var_floor: float = 1e-4, init: GMM | torch.Tensor | None = None,
            generator: torch.Generator | None = None, grad: str = "unrolled",
            init_valid: torch.Tensor | None = None) -> GMM:
    """Diagonal GMM of ``k`` components fitted to each set by EM, differentiable in ``x`` (module docstring).

    Args:
        x: ``[B..., N, d]`` sets; ``N >= k``.
        k: components.
        iters: most EM iterations without a graph (stops earlier when every set's mean log-likelihood
            changes by less than ``tol``).
        tol: convergence tolerance on the mean log-likelihood per point.
        unroll: ``grad="unrolled"``: EM iterations taken with a graph after convergence (0: the fit is a
            constant to autograd). Ignored by ``grad="implicit"``.
        grad: ``"unrolled"`` (default: ``unroll`` EM steps back-propagated from the detached fixed point, a
            truncated Neumann series of the implicit gradient; cheap, and it stays well defined when training
            stops EM before convergence) or ``"implicit"`` (the exact gradient of the fixed point, seed 003
            Eq. 13-15, by a batched solve of the ``K (2d + 1)`` adjoint system per set; exact only when EM has
            converged, and its cost grows with ``(K d)^2`` per set). The default stays ``"unrolled"`` for those
            two reasons; with enough unrolled steps the two agree (tests/methods/test_set2model.py).
        var_floor: added to every component variance (scikit-learn's ``reg_covar``): keeps a component that
            collapses on one point finite.
        init: warm start, a previous :class:`GMM` of the same sets (seed 003 Sec. 4.2 memorises each class's
            last fit), or ``[B..., K, d]`` initial means; None: k-means++ (:func:`kmeans_pp_init`).
        init_valid: ``[B...]`` bool, with a :class:`GMM` ``init``: the sets whose warm start is valid; the
            others start from k-means++ (a class met for the first time). None: every set's is valid.
        generator: random numbers of the k-means++ seeding (drawn for every set when ``init_valid`` is given,
            so the draws do not depend on which classes were seen).

    Returns:
        The fitted :class:`GMM` (float32, or float64 for float64 inputs), on ``x``'s device.
    """
    if k < 1:
        raise ValueError(f"a mixture needs k >= 1 components, got {k}")
    if x.shape[-2] < k:
        raise ValueError(f"a set of {x.shape[-2]} points cannot hold {k} components; use k <= set size")
    if iters < 0 or unroll < 0:
        raise ValueError(f"iters and unroll must be >= 0, got {iters}, {unroll}")
    if grad not in GRADS:
        raise ValueError(f"grad must be one of {GRADS}, got {grad!r}")
    with autocast_off(x.device.type):
        (x,) = at_least_float32(x)
        xd = x.detach()
        if init_valid is not None and not isinstance(init, GMM):
            raise ValueError("init_valid marks which sets of a GMM warm start are valid; pass init as a GMM")
        if isinstance(init, GMM):
            gmm = GMM(*(t.detach().to(xd) for t in (init.weights, init.means, init.vars)))
            if init_valid is not None:
                fresh = _hard_start(xd, kmeans_pp_init(xd, k, generator), var_floor)
                ok = init_valid.to(device=xd.device, dtype=torch.bool)
                gmm = GMM(torch.where(ok[..., None], gmm.weights, fresh.weights),
                          torch.where(ok[..., None, None], gmm.means, fresh.means),
                          torch.where(ok[..., None, None], gmm.vars, fresh.vars))
        else:
            means = kmeans_pp_init(xd, k, generator) if init is None else init.detach().to(xd)
            gmm = _hard_start(xd, means, var_floor)
        with torch.no_grad():
            prev = None
            for _ in range(iters):
                gmm, ll = em_step(xd, gmm, var_floor)
                if prev is not None and bool(((ll - prev).abs() <= tol).all()):
                    break
                prev = ll
        if grad == "implicit":
            if not x.requires_grad:
                return gmm
            theta = _ImplicitEM.apply(x, _pack(gmm), k, var_floor)
            return _unpack(theta, k, x.shape[-1])
        for _ in range(unroll):
            gmm, _ = em_step(x, gmm, var_floor)
        return gmm
