"""Set2Model's few-shot classification by likelihood (seed 003, Table 2, Sec. 4.1), batched over episodes and
classes: one model per class of every episode, fitted to the class's support descriptors
(:func:`studylib.methods.set2model.fit_sets`), and each query scored by every class's model
(:func:`studylib.methods.set2model.score_sets`).

The classifiers ``s2m_gauss``, ``s2m_gmm2`` and ``s2m_avg`` are registered here, where they are defined; they
use the method's fit, which sits a layer below (``studylib.methods``), so the arrow points down.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from studylib.evaluation.classifiers import register_classifier
from studylib.methods.set2model import EVAL_ONLY, SCORES, fit_sets, score_sets



def _check_classification_score(score: str) -> None:
    if score not in SCORES or score in EVAL_ONLY:
        allowed = ", ".join(s for s in SCORES if s not in EVAL_ONLY)
        raise ValueError(f"unknown score {score!r} for classification by likelihood; allowed: {allowed} (an SVM "
                         f"needs negatives beyond the episode's classes)")


def likelihood_scores(support: torch.Tensor, query: torch.Tensor, score: str = "gauss", components: int = 2,
                      var_floor: float = 1e-4, em_iters: int = 100, em_tol: float = 1e-6,
                      seed: int | None = 0) -> torch.Tensor:
    """Set2Model few-shot classification (seed 003 Table 2, Sec. 4.1): one model per class of every episode,
    fitted to the class's support descriptors, and each query scored by every class's model; the predicted
    label is the class of highest relevance (log-likelihood for ``"gauss"``/``"gmm"``).

    A :class:`studylib.evaluation.classifiers.Classifier`: every episode and class is one set of the batched
    fit (:func:`fit_sets` on ``[E, w, n, D]``) and the queries broadcast against every class's model
    (:func:`score_sets`), so there is no Python loop over episodes or classes.

    Args:
        support: ``[E, w, n, D]`` support descriptors, class-major.
        query: ``[E, Q, D]`` query descriptors of each episode.
        score: one of :data:`SCORES` (``"avg"``: Eq. 16, the dot product with the class mean; ``"nn"``: Eq. 17).
        components, var_floor: the fit (``"gmm"`` needs ``n >= components``).
        em_iters, em_tol: EM to convergence, no graph (classification needs no gradient).
        seed: seeds the k-means++ initialisation of the GMM (a fresh generator per call, so results depend only
            on the episodes of the call); None: the global RNG.

    Returns:
        ``[E, Q, w]`` relevance of every query to every class, higher = more likely.
    """
    if support.dim() != 4 or query.dim() != 3 or support.shape[0] != query.shape[0] \
            or support.shape[3] != query.shape[2]:
        raise ValueError(f"likelihood_scores takes support [E, w, n, D] and query [E, Q, D], got "
                         f"{tuple(support.shape)} and {tuple(query.shape)}")
    _check_classification_score(score)
    if score == "gmm" and support.shape[2] < components:
        raise ValueError(f"a {components}-component GMM needs at least {components} support images per class, "
                         f"got {support.shape[2]}-shot episodes; lower components or raise the shots")
    gen = torch.Generator().manual_seed(seed) if seed is not None and score == "gmm" else None
    with torch.no_grad():
        model = fit_sets(support, score, components=components, var_floor=var_floor, em_iters=em_iters,
                         em_tol=em_tol, em_unroll=0, generator=gen)
        return score_sets(model, query.unsqueeze(1)).transpose(1, 2).contiguous()  # [E, w, Q] -> [E, Q, w]


def likelihood_classifier(score: str = "gauss", **kw: Any) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """:func:`likelihood_scores` with fixed options, as a classifier ``(support, query) -> [E, Q, w]``."""
    _check_classification_score(score)

    def classify(support: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        return likelihood_scores(support, query, score, **kw)

    classify.__name__ = classify.__qualname__ = f"s2m_{score}"
    return classify


def s2m_gauss(support: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """Registered ``"s2m_gauss"``: log-likelihood under each class's diagonal Gaussian (:func:`likelihood_scores`)."""
    return likelihood_scores(support, query, "gauss")


def s2m_gmm2(support: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """Registered ``"s2m_gmm2"``: log-likelihood under each class's 2-component diagonal GMM."""
    return likelihood_scores(support, query, "gmm", components=2)


def s2m_avg(support: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """Registered ``"s2m_avg"``: dot product with each class's mean descriptor (Eq. 16, the AVG baseline)."""
    return likelihood_scores(support, query, "avg")


for _name, _fn in (("s2m_gauss", s2m_gauss), ("s2m_gmm2", s2m_gmm2), ("s2m_avg", s2m_avg)):
    register_classifier(_name, _fn)

__all__ = ["likelihood_classifier", "likelihood_scores", "s2m_avg", "s2m_gauss", "s2m_gmm2"]
