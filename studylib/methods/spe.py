"""Stochastic Prototype Embeddings (seed 002, Scott, Ridgeway & Mozer 2019) and their deterministic sibling.

The model (seed 002, Sec. 2):

* Eq. 1: every input has a Gaussian embedding ``p(z|x) = N(mu_x, diag(var_x))``; :class:`GaussianHead`
  turns any backbone into such an embedding (``var_x = softplus(raw)``, Appendix B).
* Eq. 3-5: the prototype of class ``y`` is the precision-weighted product of the support Gaussians, each
  widened by the trainable noise ``sigma_eps^2 = softplus(eps)``; :func:`prototype_posterior`.
* Eq. 6: ``p(y|x,S) = int N(z; mu_x, var_x) softmax_y(log N(z; mu_c, vhat_c)) dz`` with
  ``vhat_c = var_c + sigma_eps^2``, approximated by the *naive* sampler (Sec. 2.2.1,
  :func:`naive_log_posterior`) or the *intersection* sampler (Eq. 7-8, Sec. 2.2.2,
  :func:`intersection_log_posterior`), which during training samples only for the target class.
* :class:`SPEMethod` trains either sampler episodically; :class:`PrototypicalMethod` is the deterministic
  Prototypical Network (Snell et al. 2017) on the same kind of backbone.

Everything works in log-densities with ``logsumexp``; no density is exponentiated and nothing is clamped
away. Diagonal Gaussian log-densities between a set of points and a set of classes are computed by
expanding the quadratic form into two matrix products
(:func:`~studylib.numerics.gaussian.pairwise_diag_gaussian_logpdf`), so the memory of an
evaluation with 200 samples is ``O(E * Q * S * K)``, never ``O(E * Q * S * K * d)``. Everything here is
written by hand instead of through ``torch.distributions`` because those objects broadcast to the full
``[..., Q, S, K, d]`` tensor and cannot share one matmul across samples and classes.

Shapes used throughout (any number of leading batch dimensions ``...``, e.g. ``E`` episodes):
``K`` classes (ways), ``n`` shots, ``Q`` queries, ``S`` samples per query, ``d`` embedding dimensions.

Evaluation protocol: the paper evaluates with the naive sampler and 200 samples per query (Sec. 3), the
default of :func:`spe_classifier` and :meth:`SPEMethod.log_posterior`.
"""

from __future__ import annotations

import math
from typing import Callable, Literal

import torch
import torch.nn.functional as F
from torch import nn

from studylib.data.samplers import Batch
from studylib.methods.base import Method
from studylib.methods.registry import register_method
from studylib.numerics.gaussian import LOG_2PI, pairwise_diag_gaussian_logpdf
from studylib.numerics.guards import at_least_float32, autocast_off

Sampler = Literal["naive", "intersection"]


# ----------------------------------------------------------------------------------------------------------
# Gaussian embedding head (Eq. 1, Appendix A.1 and B)
# ----------------------------------------------------------------------------------------------------------

class GaussianHead(nn.Module):
    """A backbone that outputs a diagonal Gaussian embedding ``N(mu_x, diag(var_x))`` (Eq. 1).

    Two ways to build one:

    * ``in_features=None`` (the paper's Appendix A.1): the backbone itself outputs ``2d`` numbers per input
      (after flattening), e.g. ``Conv4(last_block_plain=True, out_channels=2 * dim)`` whose last block has
      ``2d`` filters and no BN/ReLU. The first ``d`` are the mean, the last ``d`` pass through softplus
      (Appendix B) to give the variance.
    * ``in_features=D``: the backbone outputs ``[B, D]`` features of any kind and a linear layer ``D -> 2d``
      (the project's addition, for backbones that end in BN/ReLU or a pooled feature) produces the same split.

    ``var_x = softplus(raw) + min_var``. The small floor ``min_var`` (default 1e-6, the project's choice) keeps
    ``1 / var_x`` and ``sqrt(var_x)`` finite when softplus underflows in float32; it is far below any
    variance the model learns and can be set to 0.

    Args:
        backbone: ``[B, C, H, W] -> [B, ...]`` module.
        dim: embedding dimensionality ``d``.
        in_features: see above.
        min_var: variance floor.
    """

    def __init__(self, backbone: nn.Module, dim: int, in_features: int | None = None, min_var: float = 1e-6) -> None:
        super().__init__()
        if dim < 1:
            raise ValueError(f"the embedding dimension must be >= 1, got dim={dim}")
        if min_var < 0:
            raise ValueError(f"min_var must be >= 0, got {min_var}")
        self.backbone, self.dim, self.min_var = backbone, dim, float(min_var)
        self.proj = nn.Linear(in_features, 2 * dim) if in_features is not None else None

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, C, H, W]`` -> ``(mu [B, d], var [B, d])``, ``var > 0``."""
        h = self.backbone(x).flatten(1)
        if self.proj is not None:
            h = self.proj(h)
        if h.shape[1] != 2 * self.dim:
            raise ValueError(f"the Gaussian head needs 2 * dim = {2 * self.dim} outputs per input but the backbone "
                             f"gives {h.shape[1]}; build the backbone with out_channels={2 * self.dim} (and a 1x1 "
                             f"final map) or pass in_features={h.shape[1]} to add a linear layer")
        return split_gaussian(h, self.min_var)


def split_gaussian(h: torch.Tensor, min_var: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw ``[..., 2d]`` network output -> ``(mu [..., d], softplus(raw_var) + min_var [..., d])`` (App. A.1, B).

    Both halves are returned in at least float32, whatever the dtype of ``h``: under bf16 autocast the network
    output is bfloat16 (8 significant bits), and a variance rounded to bf16 (then floored by ``min_var``,
    which bf16 cannot even add to a variance of 0.01) would feed ``1 / var`` and ``log var`` of every density
    downstream (issue 9). The softplus runs with autocast off, on the float32 upcast.
    """
    d = h.shape[-1] // 2
    with autocast_off(h.device.type):
        (h,) = at_least_float32(h)
        return h[..., :d], F.softplus(h[..., d:]) + min_var


def softplus_inverse(y: torch.Tensor) -> torch.Tensor:
    """``x`` with ``softplus(x) = y`` for ``y > 0``: ``x = y + log(-expm1(-y))`` (stable for small and large y)."""
    return y + torch.log(-torch.expm1(-y))


def eps_init(support_size: int, dim: int, eps0: float = 0.01) -> float:
    """Initial value of the pre-softplus noise parameter, ``eps = |S| * eps0^(2/d)`` (Appendix B).

    ``|S|`` is "the number of support examples per episode during training"; Sec. 2 defines ``S`` as the
    whole support set of an episode (``k x n`` instances), so the project passes ``ways * shots`` (e.g. 60 for
    60-way 1-shot Omniglot, 8 for the 4-class 2-shot synthetic task); the other reading, shots per class, gives
    a smaller start and can be had by passing ``shots``. ``eps0^(2/d)`` is the per-dimension variance whose
    ``d``-dimensional volume stays ``eps0``: ``(eps0^(2/d))^(d/2) = eps0``. Note that this initialises the
    pre-softplus ``eps``; ``sigma_eps^2 = softplus(eps)`` (Appendix B).
    """
    if support_size < 1 or dim < 1 or eps0 <= 0:
        raise ValueError(f"eps_init needs support_size >= 1, dim >= 1 and eps0 > 0, got {support_size}, {dim}, {eps0}")
    return float(support_size) * eps0 ** (2.0 / dim)


# ----------------------------------------------------------------------------------------------------------
# Densities and posteriors (Eq. 4-8)
# ----------------------------------------------------------------------------------------------------------

def diag_gauss_logpdf_paired(z: torch.Tensor, mu: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """Elementwise ``log N(z; mu, diag(var))`` summed over the last dimension (all shapes broadcast)."""
    return -0.5 * (((z - mu) ** 2 / var) + torch.log(var) + LOG_2PI).sum(-1)


def prototype_posterior(mu_s: torch.Tensor, var_s: torch.Tensor,
                        sigma_eps2: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
    """Prototype posterior ``p(nu_y | S_y) = N(mu_y, diag(var_y))`` (Eq. 4-5).

    ``vhat_i = var_i + sigma_eps^2``, ``var_y = (sum_i 1/vhat_i)^-1``, ``mu_y = var_y * sum_i mu_i / vhat_i``:
    a precision-weighted average of the support embeddings.

    Args:
        mu_s, var_s: ``[..., K, n, d]`` support means and variances, class-major (``[k, i]`` is shot ``i`` of
            class ``k``).
        sigma_eps2: ``sigma_eps^2``, a float, ``[d]`` or broadcastable to ``[..., K, n, d]``.

    Returns:
        ``(mu_y, var_y)``, both ``[..., K, d]``.
    """
    prec = (var_s + sigma_eps2).reciprocal()
    var_y = prec.sum(-2).reciprocal()
    return var_y * (prec * mu_s).sum(-2), var_y


def class_gaussians(mu_s: torch.Tensor, var_s: torch.Tensor,
                    sigma_eps2: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
    """The class densities of Eq. 5: ``(mu_y, vhat_y = var_y + sigma_eps^2)``, each ``[..., K, d]``."""
    mu_y, var_y = prototype_posterior(mu_s, var_s, sigma_eps2)
    return mu_y, var_y + sigma_eps2


def _normal(shape: tuple[int, ...], like: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Standard normal noise; drawn on the generator's device and moved, so a CPU generator works on GPU."""
    if generator is None:
        return torch.randn(shape, device=like.device, dtype=like.dtype)
    return torch.randn(shape, generator=generator, device=generator.device, dtype=like.dtype).to(like.device)


def naive_log_posterior(mu_q: torch.Tensor, var_q: torch.Tensor, mu_c: torch.Tensor, vhat_c: torch.Tensor,
                        samples: int = 200, noise: torch.Tensor | None = None,
                        generator: torch.Generator | None = None) -> torch.Tensor:
    """Naive Monte-Carlo estimate of ``log p(y|x,S)`` (Eq. 6, Sec. 2.2.1).

    ``z_s = mu_x + sqrt(var_x) * e_s`` (reparameterised, Kingma & Welling), ``p(y|x,S) ~ mean_s softmax_y
    log N(z_s; mu_y, vhat_y)``. The estimate is normalised over classes.

    Args:
        mu_q, var_q: ``[..., Q, d]`` query Gaussians.
        mu_c, vhat_c: ``[..., K, d]`` class Gaussians of Eq. 5 (:func:`class_gaussians`).
        samples: ``S``, samples per query.
        noise: optional fixed standard-normal noise ``[..., Q, S, d]`` (then ``samples`` is ignored).
        generator: optional generator for the noise.

    Returns:
        ``[..., Q, K]`` log-posteriors.
    """
    if noise is None:
        if samples < 1:
            raise ValueError(f"the naive sampler needs samples >= 1, got {samples}")
        noise = _normal((*mu_q.shape[:-1], samples, mu_q.shape[-1]), mu_q, generator)
    s = noise.shape[-2]
    z = mu_q.unsqueeze(-2) + var_q.sqrt().unsqueeze(-2) * noise  # [..., Q, S, d]
    lead = z.shape[:-3]
    q = z.shape[-3]
    logp = pairwise_diag_gaussian_logpdf(z.reshape(*lead, q * s, z.shape[-1]), mu_c, vhat_c)  # [..., Q*S, K]
    logp = logp.reshape(*logp.shape[:-2], q, s, logp.shape[-1])
    log_soft = logp - torch.logsumexp(logp, -1, keepdim=True)  # log p(y|z_s, S)
    return torch.logsumexp(log_soft, -2) - math.log(s)


def intersection_gaussian(mu_q: torch.Tensor, var_q: torch.Tensor, mu_y: torch.Tensor,
                          vhat_y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The two factors of Eq. 7, elementwise (all shapes broadcast, last dim ``d``).

    ``N(z; mu_x, var_x) N(z; mu_y, vhat_y) = N(z; mu_xy, var_xy) N(mu_x; mu_y, var_x + vhat_y)`` with
    ``var_xy = (1/var_x + 1/vhat_y)^-1`` and ``mu_xy = var_xy (mu_x/var_x + mu_y/vhat_y)``, evaluated in the
    algebraically equal forms ``var_x vhat_y / (var_x + vhat_y)`` and ``(vhat_y mu_x + var_x mu_y) /
    (var_x + vhat_y)``, which stay finite as ``var_x -> 0``.

    Returns:
        ``(mu_xy, var_xy, log N(mu_x; mu_y, var_x + vhat_y))``; the last has the ``d`` dimension summed out.
    """
    tot = var_q + vhat_y
    mu_xy = (vhat_y * mu_q + var_q * mu_y) / tot
    var_xy = var_q * vhat_y / tot
    return mu_xy, var_xy, diag_gauss_logpdf_paired(mu_q, mu_y, tot)


def intersection_log_posterior(mu_q: torch.Tensor, var_q: torch.Tensor, mu_c: torch.Tensor, vhat_c: torch.Tensor,
                               target: torch.Tensor | None = None, samples: int = 1,
                               noise: torch.Tensor | None = None, generator: torch.Generator | None = None,
                               inverse: Literal["mean_of", "of_mean"] = "mean_of") -> torch.Tensor:
    """Intersection-sampling estimate of ``log p(y|x,S)`` (Eq. 7-8, Sec. 2.2.2).

    ``p(y|x,S) = N(mu_x; mu_y, var_x + vhat_y) E_{z ~ N(mu_xy, var_xy)}[1 / sum_c N(z; mu_c, vhat_c)]``, so
    ``log p(y|x,S) ~ log N(mu_x; mu_y, var_x + vhat_y) + log mean_s exp(-log sum_c N(z_s; mu_c, vhat_c))``
    with ``z_s ~ N(mu_xy, var_xy)`` (reparameterised). Eq. 8's typesetting, ``E[sum_c N(...)]^-1``, could be
    read as ``1 / E[sum_c N]``; substituting Eq. 7 into Eq. 6 gives the expectation of the reciprocal, which
    this function estimates (unbiased in probability space). The other reading converges to a different,
    smaller number by Jensen's inequality (the test against quadrature of Eq. 6 catches it). Estimates of
    different classes use different samples, so they are not exactly normalised.

    Both readings agree for ``S = 1`` (the paper's Omniglot training). ``inverse="of_mean"`` gives the literal
    ``1 / mean_s`` reading for ``S > 1`` (lower variance, biased). Variance: the per-sample value is the
    importance weight ``N(z; mu_x, var_x) / N(z; mu_xy, var_xy)`` times ``softmax_y(z)``; its second moment is
    finite when ``vhat_y > var_x`` in every dimension, so for very uncertain queries the naive sampler is the
    better estimator (the paper evaluates with it).

    Args:
        mu_q, var_q: ``[..., Q, d]``.
        mu_c, vhat_c: ``[..., K, d]`` class Gaussians of Eq. 5.
        target: ``[..., Q]`` int64 class indices: sample only for each query's target class (training; the
            loss is ``-output``). None: estimate every class.
        samples: ``S``.
        noise: optional fixed standard-normal noise, ``[..., Q, S, d]`` with ``target`` or ``[..., Q, K, S, d]``
            without (then ``samples`` is ignored).
        generator: optional generator for the noise.
        inverse: ``"mean_of"`` (``E[1 / sum]``, exact; default) or ``"of_mean"`` (``1 / E[sum]``).

    Returns:
        ``[..., Q]`` with ``target``, else ``[..., Q, K]``.
    """
    if target is not None:
        idx = target.unsqueeze(-1).expand(*target.shape, mu_c.shape[-1])
        mu_y = torch.gather(mu_c.expand(*target.shape[:-1], *mu_c.shape[-2:]), -2, idx)  # [..., Q, d]
        vhat_y = torch.gather(vhat_c.expand(*target.shape[:-1], *vhat_c.shape[-2:]), -2, idx)
        mu_xy, var_xy, log_first = intersection_gaussian(mu_q, var_q, mu_y, vhat_y)  # [..., Q, d] / [..., Q]
    else:
        mu_xy, var_xy, log_first = intersection_gaussian(mu_q.unsqueeze(-2), var_q.unsqueeze(-2),
                                                         mu_c.unsqueeze(-3), vhat_c.unsqueeze(-3))  # [..., Q, K, d]
    if noise is None:
        if samples < 1:
            raise ValueError(f"the intersection sampler needs samples >= 1, got {samples}")
        noise = _normal((*mu_xy.shape[:-1], samples, mu_xy.shape[-1]), mu_xy, generator)
    s = noise.shape[-2]
    z = mu_xy.unsqueeze(-2) + var_xy.sqrt().unsqueeze(-2) * noise  # [..., Q(, K), S, d]
    lead = z.shape[: -(4 if target is None else 3)]
    flat = z.reshape(*lead, -1, z.shape[-1])
    log_mix = torch.logsumexp(pairwise_diag_gaussian_logpdf(flat, mu_c, vhat_c), -1)  # log sum_c N(z_s; mu_c, vhat_c)
    log_mix = log_mix.reshape(z.shape[:-1])  # [..., Q(, K), S]
    if inverse == "mean_of":
        return log_first + torch.logsumexp(-log_mix, -1) - math.log(s)
    if inverse == "of_mean":
        return log_first - (torch.logsumexp(log_mix, -1) - math.log(s))
    raise ValueError(f"inverse must be 'mean_of' or 'of_mean', got {inverse!r}")


def spe_log_posterior(mu_s: torch.Tensor, var_s: torch.Tensor, mu_q: torch.Tensor, var_q: torch.Tensor,
                      sigma_eps2: torch.Tensor | float, sampler: Sampler = "naive", samples: int = 200,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """Class posterior ``log p(y|x,S)`` of an episode (Eq. 4-6), every class estimated.

    Args:
        mu_s, var_s: ``[..., K, n, d]`` support Gaussians, class-major.
        mu_q, var_q: ``[..., Q, d]`` query Gaussians.
        sigma_eps2: ``sigma_eps^2`` (float or ``[d]``).
        sampler: ``"naive"`` (the paper's evaluation sampler) or ``"intersection"``.
        samples: samples per query (the paper evaluates with 200).
        generator: optional generator.

    Returns:
        ``[..., Q, K]`` log-posteriors.
    """
    mu_c, vhat_c = class_gaussians(mu_s, var_s, sigma_eps2)
    if sampler == "naive":
        return naive_log_posterior(mu_q, var_q, mu_c, vhat_c, samples, generator=generator)
    if sampler == "intersection":
        return intersection_log_posterior(mu_q, var_q, mu_c, vhat_c, None, samples, generator=generator)
    raise ValueError(f"unknown sampler {sampler!r}; use 'naive' or 'intersection'")


def spe_classifier(sigma_eps2: torch.Tensor | float, sampler: Sampler = "naive", samples: int = 200,
                   min_var: float = 0.0, seed: int | None = 0, max_elements: int = 2 ** 26
                   ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """An evaluation classifier with the project's protocol (``studylib.evaluation.classifiers``)::

        scores = fn(support [E, w, n, 2d], query [E, Q, 2d])  ->  [E, Q, w] log p(y|x,S)

    The features are ``mu || var`` as returned by :meth:`SPEMethod.gaussian_features` (the variance already
    positive; it is *not* passed through softplus again). Do not apply CL2N or any other feature transform to
    them. ``seed`` fixes the sampler's noise per call (a generator on the features' device) so that
    evaluations are reproducible; None draws from the global generator. Episodes are processed in chunks of
    at most ``max_elements`` sampled numbers (``E * Q * S * max(d, w)``, times ``w`` for the intersection
    sampler), because the samples themselves are ``[E, Q, S, d]``.
    """
    sig = sigma_eps2.detach() if isinstance(sigma_eps2, torch.Tensor) else float(sigma_eps2)

    def classify(support: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        if support.dim() != 4 or query.dim() != 3 or support.shape[-1] % 2 or support.shape[-1] != query.shape[-1] \
                or support.shape[0] != query.shape[0]:
            raise ValueError(f"spe_classifier takes support [E, w, n, 2d] and query [E, Q, 2d] (mu || var), got "
                             f"{tuple(support.shape)} and {tuple(query.shape)}")
        e, w, _, d2 = support.shape
        d = d2 // 2
        s = sig.to(support.device, torch.float32) if isinstance(sig, torch.Tensor) else sig
        gen = torch.Generator(device=support.device).manual_seed(seed) if seed is not None else None
        support, query = support.float(), query.float()
        per_episode = query.shape[1] * samples * max(d, w) * (w if sampler == "intersection" else 1)
        step = max(1, max_elements // max(per_episode, 1))
        out = [spe_log_posterior(sp[..., :d], sp[..., d:] + min_var, qr[..., :d], qr[..., d:] + min_var,
                                 s, sampler, samples, gen)
               for sp, qr in zip(support.split(step), query.split(step))]  # chunks bound memory only
        return torch.cat(out)

    return classify


# ----------------------------------------------------------------------------------------------------------
# Deterministic sibling: Prototypical Networks
# ----------------------------------------------------------------------------------------------------------

def pn_log_posterior(support: torch.Tensor, query: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Prototypical Network posterior ``log softmax_k(-scale ||q - c_k||^2)``, ``c_k = mean(S_k)`` (Snell 2017).

    With ``scale = 1 / (2 sigma^2)`` this is the SPE posterior in the limit ``var_x -> 0`` with equal class
    variances ``sigma^2`` (seed 002, Sec. 2.2).

    Args:
        support: ``[..., K, n, D]`` class-major.
        query: ``[..., Q, D]``.

    Returns:
        ``[..., Q, K]``.
    """
    with autocast_off(query.device.type):  # the expanded distance cancels in bf16
        support, query = at_least_float32(support, query)
        c = support.mean(-2)
        d2 = ((query * query).sum(-1).unsqueeze(-1) - 2.0 * torch.matmul(query, c.transpose(-1, -2))
              + (c * c).sum(-1).unsqueeze(-2)).clamp_min(0.0)
        return torch.log_softmax(-scale * d2, -1)


# ----------------------------------------------------------------------------------------------------------
# Methods
# ----------------------------------------------------------------------------------------------------------

def _episode_split(x: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Episodic batch (class-major: per class ``shots`` support then ``queries`` query rows) ->
    ``(support [K, n, ...], query [K*m, ...], query_labels [K*m])``."""
    if batch.support is None or batch.ways is None or batch.shots is None or batch.queries is None:
        raise ValueError("SPE/PN training needs episodic batches with support/query roles; build the sampler as "
                         "EpisodicSampler(..., roles=True) (sampler 'episodic' in the training config)")
    if batch.shots < 1 or batch.queries < 1:
        raise ValueError(f"an episode needs shots >= 1 and queries >= 1, got shots={batch.shots}, "
                         f"queries={batch.queries}")
    sup = batch.support
    support = x[sup].reshape(batch.ways, batch.shots, *x.shape[1:])
    labels = batch.labels if batch.labels is not None else torch.arange(batch.ways, device=x.device).repeat_interleave(
        batch.shots + batch.queries)
    return support, x[~sup], labels[~sup].to(x.device)


def _to_input(images: torch.Tensor, augment: Callable[[torch.Tensor], torch.Tensor] | None) -> torch.Tensor:
    return augment(images) if augment is not None else images.float().div(255.0)


class SPEMethod(Method):
    """Stochastic Prototype Embedding trained episodically (seed 002, Sec. 2-3, Appendix B).

    Loss of an episode: ``-mean_q log p(y_q | x_q, S)`` with the chosen training sampler (``intersection``:
    Eq. 8 for the target class only, the paper's choice with 1 sample on Omniglot and 8 on the synthetic data;
    ``naive``: Sec. 2.2.1). Logged: ``acc`` (argmax of the sampler's estimate over all classes, computed without
    gradient for the intersection sampler), ``sigma_eps2`` (mean over dimensions) and ``var_x`` (mean query
    variance).

    Args:
        backbone: ``[B, C, H, W] -> [B, 2d]`` (paper) or ``[B, D]`` with ``in_features=D``; see
            :class:`GaussianHead`.
        augment: callable turning the uint8 batch ``[B, C, H, W]`` into the float network input
            (augmentation + normalisation); None divides by 255.
        dim: embedding dimensionality ``d``.
        sampler: training sampler.
        samples: samples per query during training.
        support_size: ``|S|`` of Appendix B's initialisation ``eps = |S| eps0^(2/d)`` (support examples per
            training episode, ``ways * shots``). None: set from the first training batch
            (``batch.ways * batch.shots``), before the first optimiser step.
        eps0: Appendix B's ``eps0`` (0.01 in all the paper's models).
        per_dim_eps: one noise parameter per dimension (bold epsilon in Appendix B; default) or one shared.
        in_features: see :class:`GaussianHead`.
        min_var: variance floor of :class:`GaussianHead`.
        eval_samples: naive-sampler samples for :meth:`log_posterior` / :meth:`classifier` (paper: 200).
        features_with_variance: :meth:`features` returns ``mu || var`` ``[B, 2d]`` (for :func:`spe_classifier`)
            instead of the mean ``[B, d]``.
        intersection_inverse: reading of Eq. 8 for ``samples > 1``, see :func:`intersection_log_posterior`.
        num_classes, size, mean, std: accepted from the experiment builder and unused.
    """

    def __init__(self, backbone: nn.Module, augment: Callable[[torch.Tensor], torch.Tensor] | None, dim: int,
                 sampler: Sampler = "intersection", samples: int = 1, support_size: int | None = None,
                 eps0: float = 0.01, per_dim_eps: bool = True, in_features: int | None = None,
                 min_var: float = 1e-6, eval_samples: int = 200, features_with_variance: bool = False,
                 intersection_inverse: Literal["mean_of", "of_mean"] = "mean_of", num_classes: int | None = None,
                 size: int | None = None, mean: object = None, std: object = None) -> None:
        super().__init__()
        if sampler not in ("naive", "intersection"):
            raise ValueError(f"unknown sampler {sampler!r}; use 'naive' or 'intersection'")
        if samples < 1 or eval_samples < 1:
            raise ValueError(f"samples and eval_samples must be >= 1, got {samples} and {eval_samples}")
        self.head = GaussianHead(backbone, dim, in_features, min_var)
        self.backbone = backbone
        self.augment, self.dim, self.sampler, self.samples = augment, dim, sampler, samples
        self.eps0, self.eval_samples, self.features_with_variance = eps0, eval_samples, features_with_variance
        if intersection_inverse not in ("mean_of", "of_mean"):
            raise ValueError(f"intersection_inverse must be 'mean_of' or 'of_mean', got {intersection_inverse!r}")
        self.intersection_inverse = intersection_inverse
        self.eps = nn.Parameter(torch.zeros(dim if per_dim_eps else 1))
        self.register_buffer("eps_ready", torch.tensor(False))  # saved with the weights: resuming keeps eps
        self._eps_checked = False
        if support_size is not None:
            self.init_eps(support_size)

    @torch.no_grad()
    def init_eps(self, support_size: int) -> None:
        """``eps <- |S| eps0^(2/d)`` (Appendix B)."""
        self.eps.fill_(eps_init(support_size, self.dim, self.eps0))
        self.eps_ready.fill_(True)

    @property
    def sigma_eps2(self) -> torch.Tensor:
        """``sigma_eps^2 = softplus(eps)``, ``[d]`` or ``[1]`` (Appendix B)."""
        return F.softplus(self.eps)

    def embed(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Float input ``[B, C, H, W]`` -> ``(mu [B, d], var [B, d])`` with gradients."""
        return self.head(x)

    def loss(self, images: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        if not self._eps_checked and not bool(self.eps_ready):  # the flag avoids a device sync per step
            if batch.ways is None or batch.shots is None:
                raise ValueError("SPEMethod needs support_size=... or episodic batches to initialise eps")
            self.init_eps(batch.ways * batch.shots)
        self._eps_checked = True
        mu, var = self.embed(_to_input(images, self.augment))
        mu, var = mu.float(), var.float()  # densities in float32 even under autocast
        (mu_s, mu_q, y), (var_s, var_q, _) = _episode_split(mu, batch), _episode_split(var, batch)
        mu_c, vhat_c = class_gaussians(mu_s, var_s, self.sigma_eps2)
        if self.sampler == "naive":
            logp = naive_log_posterior(mu_q, var_q, mu_c, vhat_c, self.samples)
            loss = -logp.gather(-1, y[:, None]).mean()
            pred = logp.argmax(-1)
        else:
            inv = self.intersection_inverse
            loss = -intersection_log_posterior(mu_q, var_q, mu_c, vhat_c, y, self.samples, inverse=inv).mean()
            with torch.no_grad():
                pred = intersection_log_posterior(mu_q, var_q, mu_c, vhat_c, None, self.samples,
                                                  inverse=inv).argmax(-1)
        # 0-d tensors: the loop reads them every log_every steps in one transfer (no host sync per step)
        return loss, {"acc": (pred == y).float().mean(), "sigma_eps2": self.sigma_eps2.detach().mean(),
                      "var_x": var_q.detach().mean()}

    @torch.no_grad()
    def features(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, d]`` mean embedding ``mu_x`` (or ``mu || var`` ``[B, 2d]`` with ``features_with_variance``)."""
        return self.gaussian_features(x) if self.features_with_variance else self.head(x)[0]

    @torch.no_grad()
    def gaussian_features(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, 2d]`` ``mu || var`` (variance after softplus), the input of :func:`spe_classifier`."""
        mu, var = self.head(x)
        return torch.cat([mu, var], -1)

    def classifier(self, sampler: Sampler = "naive", samples: int | None = None,
                   seed: int | None = 0) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """:func:`spe_classifier` bound to this model's ``sigma_eps^2`` (naive, ``eval_samples`` by default)."""
        return spe_classifier(self.sigma_eps2.detach(), sampler, samples or self.eval_samples, 0.0, seed)

    @torch.no_grad()
    def log_posterior(self, mu_s: torch.Tensor, var_s: torch.Tensor, mu_q: torch.Tensor, var_q: torch.Tensor,
                      sampler: Sampler = "naive", samples: int | None = None,
                      generator: torch.Generator | None = None) -> torch.Tensor:
        """:func:`spe_log_posterior` with this model's ``sigma_eps^2``; shapes as there."""
        return spe_log_posterior(mu_s, var_s, mu_q, var_q, self.sigma_eps2, sampler, samples or self.eval_samples,
                                 generator)


class PrototypicalMethod(Method):
    """The deterministic sibling: a Prototypical Network (Snell et al. 2017) trained episodically.

    Loss: cross-entropy of ``log softmax_k(-scale ||f(q) - c_k||^2)`` with ``c_k`` the mean support embedding.
    For the paper's comparisons build the backbone exactly as for the SPE but with ``d`` outputs instead of
    ``2d`` (e.g. ``Conv4(last_block_plain=True, out_channels=d)``); ``scale = 1`` is Snell et al.'s choice.

    Args:
        backbone: ``[B, C, H, W] -> [B, D]``.
        augment: as in :class:`SPEMethod`.
        scale: multiplies the squared distances.
        num_classes, size, mean, std: accepted from the experiment builder and unused.
    """

    def __init__(self, backbone: nn.Module, augment: Callable[[torch.Tensor], torch.Tensor] | None,
                 scale: float = 1.0, num_classes: int | None = None, size: int | None = None,
                 mean: object = None, std: object = None) -> None:
        super().__init__()
        if scale <= 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        self.backbone, self.augment, self.scale = backbone, augment, float(scale)

    def loss(self, images: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        f = self.backbone(_to_input(images, self.augment)).flatten(1).float()
        support, query, y = _episode_split(f, batch)
        logp = pn_log_posterior(support, query, self.scale)
        loss = F.nll_loss(logp, y)
        return loss, {"acc": float((logp.argmax(-1) == y).float().mean())}

    @torch.no_grad()
    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(x).flatten(1)


register_method("spe")(SPEMethod)
register_method("pn_deterministic")(PrototypicalMethod)
