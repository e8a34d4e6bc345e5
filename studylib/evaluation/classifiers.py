"""Few-shot classifiers batched over episodes (seed 000, Sec. 2.3), and the registry evaluation reads.

Every classifier follows one protocol, :class:`Classifier`::

    scores = classifier(support, query)
    support: [E, w, n, D]  float, support[e, c] are the n support features of episode-class c
    query:   [E, Q, D]     float, the query features of each episode (any order)
    scores:  [E, Q, w]     float, higher = more likely; the prediction is scores.argmax(-1)

The protocol sees whole chunks of episodes so that each classifier is a handful of batched tensor ops; the
same code runs on the CPU and on a GPU. The classifiers are written here instead of taken from scikit-learn
because sklearn fits one episode at a time on the CPU (10,000 Python-level fits per model), while these
process thousands of episodes per call. Tests compare each of them to a per-episode reference
(NumPy loops, ``torch.cdist``, ``sklearn.neighbors.KNeighborsClassifier``).

Registry. :data:`CLASSIFIERS` maps a name to a classifier; :func:`register_classifier` adds one and
:func:`get_classifier` resolves names. Built in:

* ``nearest_centroid`` — negative squared Euclidean distance to the class means (Prototypical Networks,
  SimpleShot; seed 000's default).
* ``soft_assignment`` — log of ``sum_{s in S_k} softmax_s(-||q - s||^2 / T)`` (NCA / Matching Networks,
  seed 000 Sec. 2.3, T = 1).
* ``knn`` — majority vote of the ``k = n`` nearest support points (seed 000 Sec. 2.3).
* ``cosine_prototype`` / ``cosine_nearest_sample`` — InfoPatch's test rules (seed 004): cosine to the class mean
  (the authors' code) or to the nearest support sample (the paper's Eq. 2).

Every other classifier is registered by the module of this package that defines it, with the same protocol:
``logreg`` in :mod:`studylib.evaluation.logreg` (multinomial logistic regression per episode), ``opta`` and
``opta_nearest`` in :mod:`studylib.evaluation.opta` (BECLR's optimal-transport prototype adaptation,
transductive: it may use ``query``), ``s2m_gauss`` / ``s2m_gmm2`` / ``s2m_avg`` in
:mod:`studylib.evaluation.likelihood` (Set2Model's likelihoods). The registry lives here, below its users (the
evaluator, the runner, the experiments); the methods register no classifier, so ``studylib.methods`` never
imports ``studylib.evaluation``. A classifier with hyper-parameters is registered as a ``functools.partial`` or
closure; one that needs the shot count reads ``support.shape[2]``.
"""

from __future__ import annotations

from typing import Callable, Protocol

import torch
import torch.nn.functional as F

from studylib.registry import Registry


class Classifier(Protocol):
    """``(support [E, w, n, D], query [E, Q, D]) -> scores [E, Q, w]``, higher = more likely."""

    def __call__(self, support: torch.Tensor, query: torch.Tensor) -> torch.Tensor: ...


def pairwise_sq_dists(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Batched squared Euclidean distances ``||a_i - b_j||^2`` without an ``[E, P, S, D]`` intermediate.

    Uses ``||a||^2 + ||b||^2 - 2 a.b`` with one ``torch.baddbmm`` and clamps the small negative values that
    cancellation leaves at 0. ``torch.cdist`` computes the same thing but its matmul path is not guaranteed
    for all shapes/devices and it returns distances (a square root we would undo); this keeps the memory at
    ``O(E * P * S)``.

    Args:
        a: ``[E, P, D]``.
        b: ``[E, S, D]``.

    Returns:
        ``[E, P, S]`` float, non-negative, contiguous.
    """
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[2]:
        raise ValueError(f"pairwise_sq_dists needs [E, P, D] and [E, S, D], got {tuple(a.shape)} and {tuple(b.shape)}")
    a2 = torch.linalg.vector_norm(a, dim=-1).square_()  # [E, P]; one fused pass, no [E, P, D] temporary
    b2 = torch.linalg.vector_norm(b, dim=-1).square_()  # [E, S]
    if b.shape[1] < a.shape[1]:
        # Few columns (e.g. 5 centroids vs 75 queries): b @ a^T has the better shape for the batched GEMM
        # (measured ~2x faster on the CPU). The small result is made contiguous again: reductions over its
        # last axis (argmax, logsumexp) are ~6x slower on the transposed view.
        return torch.baddbmm(b2[:, :, None] + a2[:, None, :], b, a.transpose(1, 2), alpha=-2.0) \
            .clamp_min_(0.0).transpose(1, 2).contiguous()
    return torch.baddbmm(a2[:, :, None] + b2[:, None, :], a, b.transpose(1, 2), alpha=-2.0).clamp_min_(0.0)


def _check(support: torch.Tensor, query: torch.Tensor) -> None:
    if support.dim() != 4 or query.dim() != 3 or support.shape[0] != query.shape[0] \
            or support.shape[3] != query.shape[2]:
        raise ValueError(f"classifiers take support [E, w, n, D] and query [E, Q, D], got "
                         f"{tuple(support.shape)} and {tuple(query.shape)}")


def nearest_centroid(support: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """Negative squared distance to each class centroid ``c_k = mean(S_k)`` (seed 000 Sec. 2.3, Eq. 1's
    prototypes): ``scores[e, q, k] = -||query[e, q] - c_k||^2``. Shapes as in :class:`Classifier`."""
    _check(support, query)
    centroids = support[:, :, 0] if support.shape[2] == 1 else support.mean(2)  # [E, w, D]
    return -pairwise_sq_dists(query, centroids)


def soft_assignment(support: torch.Tensor, query: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Soft assignment (seed 000 Sec. 2.3; NCA and Matching Networks): for query ``q``,
    ``p_qj = softmax_j(-||q - s_j||^2 / T)`` over all support points, and the class likelihood is
    ``sum_{s_j in S_k} p_qj``.

    Computed in log space: ``scores[e, q, k] = logsumexp_{j in S_k}(l_qj) - logsumexp_j(l_qj)`` with
    ``l_qj = -d_qj / T``, i.e. the log of the class likelihood, so no term underflows to 0 (the authors'
    exp-then-clamp drops terms below 1e-10, PAPER-NOTES 000). Shapes as in :class:`Classifier`.
    """
    _check(support, query)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    e, w, n, d = support.shape
    logits = pairwise_sq_dists(query, support.reshape(e, w * n, d)).div_(-temperature)  # [E, Q, w*n]
    log_p = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return torch.logsumexp(log_p.reshape(e, -1, w, n), dim=-1)  # [E, Q, w]


def knn(support: torch.Tensor, query: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """k-nearest-neighbour vote (seed 000 Sec. 2.3) with ``k = n`` (the shots) unless given.

    ``scores[e, q, c] = votes_c + t_c`` where ``votes_c`` counts the support points of class ``c`` among the
    ``k`` nearest to the query (squared Euclidean distance) and ``t_c`` in ``[0, 1/2]`` breaks ties: for a
    class with votes, ``t_c = (1 - sum_c / (k * dmax)) / 2`` where ``sum_c`` is the summed distance of its
    neighbours and ``dmax`` the largest distance among the query's ``k`` neighbours; ``t_c = 0`` without
    votes. Hence the argmax is the majority class, ties go to the class whose neighbours are closer in sum,
    and exact ties left after that to the lower class index. With ``k = 1`` this is the nearest neighbour,
    which for 1 shot equals nearest centroid. Shapes as in :class:`Classifier`.
    """
    _check(support, query)
    e, w, n, d = support.shape
    k = n if k is None else int(k)
    if not 1 <= k <= w * n:
        raise ValueError(f"knn: k={k} must lie in 1..{w * n} (ways x shots support points)")
    dist = pairwise_sq_dists(query, support.reshape(e, w * n, d))  # [E, Q, w*n]
    near_d, near_i = torch.topk(dist, k, dim=-1, largest=False)  # [E, Q, k]
    cls = torch.div(near_i, n, rounding_mode="floor")  # support is class-major: point j has class j // n
    votes = torch.zeros(*dist.shape[:2], w, dtype=dist.dtype, device=dist.device)
    votes.scatter_add_(-1, cls, torch.ones_like(near_d))
    sums = torch.zeros_like(votes).scatter_add_(-1, cls, near_d)
    dmax = near_d.amax(-1, keepdim=True).clamp_min(torch.finfo(dist.dtype).tiny)
    # Half-unit tie term: vote counts stay separated by >= 1/2, far above float32 rounding at any k.
    tie = torch.where(votes > 0, 0.5 * (1.0 - sums / (k * dmax)), torch.zeros_like(votes)).clamp_(0.0, 0.5)
    return votes + tie


def cosine_prototype(support: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """InfoPatch's evaluation (seed 004; the authors' ``forward_test``): cosine similarity of each pooled query feature to
    the mean of its class's pooled support features, both L2-normalised (no centring).

    ``support [E, w, n, D]``, ``query [E, Q, D]`` -> ``[E, Q, w]`` (the classifier protocol; the scale of 7 does
    not change the argmax and is left out).
    """
    protos = F.normalize(support.mean(2), dim=-1, eps=1e-12)
    return torch.einsum("eqd,ewd->eqw", F.normalize(query, dim=-1, eps=1e-12), protos)




def cosine_nearest_sample(support: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """The paper's test rule (seed 004, Eq. 2): ``j* = argmax_j f^q_i . f^s_j`` over every support sample, both
    L2-normalised (the "testing phase" normalises as in training); the query takes the class of ``j*``.

    ``scores[e, q, c] = max_{j in S_c} cos(query[e, q], support[e, c, j])``, so ``argmax_c`` is the class of the
    nearest support sample. ``support [E, w, n, D]``, ``query [E, Q, D]`` -> ``[E, Q, w]`` (the classifier
    protocol). With one shot it is :func:`cosine_prototype`; with
    more it differs from the code's test (cosine to the class mean).
    """
    if support.dim() != 4 or query.dim() != 3 or support.shape[0] != query.shape[0] \
            or support.shape[3] != query.shape[2]:
        raise ValueError(f"cosine_nearest_sample takes support [E, w, n, D] and query [E, Q, D], got "
                         f"{tuple(support.shape)} and {tuple(query.shape)}")
    e, w, n, d = support.shape
    s = F.normalize(support, dim=-1, eps=1e-12).reshape(e, w * n, d)
    cos = torch.bmm(F.normalize(query, dim=-1, eps=1e-12), s.transpose(1, 2))  # [E, Q, w*n]
    return cos.reshape(e, -1, w, n).amax(-1)


CLASSIFIERS: Registry[Classifier] = Registry("classifier", "studylib.evaluation")
"""Name -> classifier, filled by the modules of ``studylib.evaluation`` that define them (:func:`register_classifier`);
a lookup of a name not registered yet imports those modules first (:class:`studylib.registry.Registry`)."""


def register_classifier(name: str, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                        overwrite: bool = False) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Add ``fn`` (a :class:`Classifier`) to :data:`CLASSIFIERS` under ``name``; returns ``fn``.

    Registering an existing name raises ValueError unless ``overwrite`` (re-importing the same module
    re-registers the same function, which is allowed).
    """
    if not name or not isinstance(name, str):
        raise ValueError(f"classifier name must be a non-empty string, got {name!r}")
    if not callable(fn):
        raise ValueError(f"register_classifier({name!r}, ...) needs a callable (support, query) -> scores")
    old = CLASSIFIERS.held(name)
    same = old is fn or (old is not None and _origin(old) == _origin(fn) and None not in _origin(fn))
    if old is not None and not same and not overwrite:
        raise ValueError(f"a classifier named {name!r} is already registered; pick another name or pass "
                         f"overwrite=True")
    return CLASSIFIERS.register(name, fn, replace=True)


for _name, _fn in (("nearest_centroid", nearest_centroid), ("soft_assignment", soft_assignment), ("knn", knn),
                   ("cosine_prototype", cosine_prototype), ("cosine_nearest_sample", cosine_nearest_sample)):
    register_classifier(_name, _fn)


def _origin(fn: object) -> tuple[str | None, str | None]:
    return getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)


def get_classifier(name_or_fn: str | Classifier) -> tuple[str, Classifier]:
    """Resolve a registry name or a callable to ``(name, classifier)``."""
    if callable(name_or_fn):
        fn = name_or_fn
        name = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", None) \
            or type(fn).__name__
        return name, fn
    if name_or_fn not in CLASSIFIERS:
        raise ValueError(CLASSIFIERS.unknown(name_or_fn))
    return name_or_fn, CLASSIFIERS[name_or_fn]
