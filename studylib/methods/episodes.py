"""Seed 000, "On Episodes, Prototypical Networks, and Few-Shot Learning": the PN, MN, NCA and CE losses.

All distance losses are one computation, a *neighbourhood softmax* over "elements" of a batch (images, or
prototypes of the support images of a class): for every anchor element ``i``

    loss_i = -log( sum_{j in N(i), y_j = y_i} exp(-d_ij / T) / sum_{j in N(i)} exp(-d_ij / T) ),

with ``d_ij`` the squared Euclidean distance and ``N(i)`` the neighbours the loss allows. Two switches decide
the elements and neighbourhoods (Sec. 2.2, 3.4, Fig. 4, Appendix B and H of the paper; the authors' public code
``fiveai/on-episodes-fsl`` ``train.py`` flags ``proto_disable_aggregates`` / ``proto_enable_all_pairs``):

* ``prototypes=True, sq_split=True`` — L_PNs: anchors = queries, neighbours = the class prototypes
  (Fig. 4 rows 4-5).
* ``prototypes=False, sq_split=True`` — L_MNs: anchors = queries, neighbours = the support *points*. This is
  also "PN without prototypes" (Fig. 4 row 6): with prototypes disabled the PN loss becomes exactly Eq. L_MNs
  (the authors' ``query_support_nca_loss`` on point distances). Same pairs as PN (``wmn`` / ``w(w-1)mn``);
  only the aggregation differs.
* ``prototypes=True, sq_split=False`` — "PN without the S/Q split" (row 7): the support points of each class
  are replaced by their prototype and L_NCA is computed on the union ``queries ∪ prototypes`` (every element
  is an anchor; all pairs). Support points never appear on their own, so no point is ever compared with a
  prototype it contributes to and no leave-one-out is needed; what is lost w.r.t. NCA are the ``w·C(n, 2)``
  support-support positives (a prototype has no distance to itself). For n = 1 this is NCA (Sec. 3.4).
* ``prototypes=False, sq_split=False`` — L_NCA on all points of the batch: row 3 on an episodic batch ("NCA
  with fixed batch composition"), rows 1-2 on shuffled / replacement batches. It is also the Matching Network
  "no S/Q" ablation of Appendix H (MN has no prototypes, so its ablations are rows 6 and 3 of the PN table).

The appendices are not part of the seed text we have; these definitions follow Sec. 3.4 and the authors'
public code, whose ablation flags do exactly the above.

``kind`` only picks the default switches: ``"pn"`` = (True, True), ``"mn"`` = (False, True),
``"nca"`` = (False, False). Sampling with/without replacement and fixed batch composition are sampler
choices (:mod:`studylib.data.samplers`), not loss switches.

Choices the paper leaves open (see ``../shared/PAPER-NOTES.md``, section 000):

* Log-sum-exp everywhere. The authors compute ``exp(-d)`` and take the log after clamping to 1e-10, which
  silently drops terms (and whole anchors) whose probabilities underflow; here nothing is clamped.
* Temperature as the authors' code uses it: distances are divided by ``T`` (miniImageNet T = 0.9,
  CIFAR-FS T = 1). It applies to every kind (the authors' PN/MN use T = 1, the default).
* An anchor with no positive neighbour (a class seen once in a random batch, or all its positive pairs
  dropped by subsampling) contributes nothing. ``reduction`` sets the divisor: ``"anchors"`` (default) takes
  the mean over the anchors that contribute (as pytorch-metric-learning's NCALoss); ``"batch"`` divides by all
  anchors, the ``1/|B|`` of the paper's L_NCA (Sec. 2.2) and of the authors' code. They differ by the share of
  anchors with a positive, under 2% at miniImageNet's batch of 256 from 64 classes, but under pair subsampling
  that share is the fraction itself: at f = 0.05 ``"anchors"`` scales the gradient up about 6x over the
  paper's loss, and NCA at lr 0.1 diverges within a dozen steps (in fp32 and in bf16 alike; this was the NaN
  of notebook 03 on the GPU). Notebook 03 therefore uses ``"batch"``.
* Distances are computed in float32 (or float64) with autocast disabled, on embeddings centred by their batch
  mean (distances are translation-invariant; centring removes most cancellation of ``|a|² + |b|² - 2a·b``).
* No host read in a training step (``sync=False``, as :class:`DistanceMethod` calls it): class ids are each
  label's first position in the batch rather than ``torch.unique``'s dense ids, and the counts and accuracy
  stay on the device for the loop to read in blocks. Prototypes (``torch.unique``, the present classes) and
  pair subsampling (``nonzero``) still read sizes back once per step.

Pair accounting. ``positives`` / ``negatives`` count the distinct unordered *image* pairs ``{i, j}`` whose
distance enters the loss, read off the masks actually applied: an element pair used by a contributing anchor
links every image of one element with every image of the other (a query-prototype distance uses the ``n``
query-support pairs of that prototype). This is the unit of Table 1: PN/MN use ``wmn`` positives and
``w(w-1)mn`` negatives, NCA ``w·C(m+n, 2)`` and ``C(w, 2)(m+n)²``.

Pair subsampling (Fig. 3, Sec. 3.3), only for losses on points (``prototypes=False``): among the unordered
pairs the loss allows, ``floor(pos_fraction · P)`` of the ``P`` positive and ``floor(neg_fraction · N)`` of the
``N`` negative pairs are kept, uniformly without replacement. A dropped pair ``{i, j}`` is removed in both
directions: a dropped positive leaves the numerator *and* the denominator of anchors ``i`` and ``j``, a
dropped negative leaves their denominators. (The authors sample ordered (anchor, neighbour) entries; sampling
distances keeps the fraction in the unit of Table 1 / Fig. 3's x-axis.) Validation uses the full loss:
:class:`DistanceMethod` subsamples only in training mode.

Why not pytorch-metric-learning: its NCALoss has no support/query roles, prototypes, pair subsampling or pair
counting, and takes softmax-then-log (underflowing positives are silently dropped). It serves as the test
reference for L_NCA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from studylib.data.samplers import Batch
from studylib.methods.base import Method
from studylib.methods.registry import register_method

KINDS = ("nca", "pn", "mn")
REDUCTIONS = ("anchors", "batch")
_DEFAULT_SWITCHES: dict[str, tuple[bool, bool]] = {"nca": (False, False), "pn": (True, True), "mn": (False, True)}


@dataclass
class LossOutput:
    """Result of one loss on one batch.

    Attributes:
        loss: scalar tensor (mean over contributing anchors).
        positives, negatives: distinct unordered image pairs of the same / different class whose distance
            the loss used (see the module docstring); 0 for cross-entropy.
        accuracy: fraction of contributing anchors whose soft-assignment class (sum of the softmax over
            neighbours per class; for PN the nearest prototype) is right; NaN when no anchor contributes.
            With ``episode_loss(..., counts_only=True)`` loss and accuracy are NaN.
        anchors: number of anchors that contributed to the loss.
    """

    loss: Tensor
    positives: int
    negatives: int
    accuracy: float
    anchors: int

    def synced(self) -> "LossOutput":
        """The same output with its counts and accuracy as Python numbers (one host read each on a GPU)."""
        def num(v: Any, kind: type) -> Any:
            return kind(v) if torch.is_tensor(v) else v
        return LossOutput(self.loss, num(self.positives, int), num(self.negatives, int),
                          num(self.accuracy, float), num(self.anchors, int))


# ----------------------------------------------------------------------------------------------------------
# Pair formulas (Table 1, Appendix A)
# ----------------------------------------------------------------------------------------------------------

def table1_pairs(w: int, n: int, m: int, kind: str) -> tuple[int, int]:
    """Table 1: ``(positives, negatives)`` distance pairs on one batch of ``w(n+m)`` images.

    Args:
        w, n, m: ways, shots (support per class), queries per class.
        kind: ``"pn"``, ``"mn"`` or ``"episodic"`` (row EPISODES: ``wmn``, ``w(w-1)mn``); ``"nca"`` (row NO
            EPISODES: ``C(m+n, 2)·w``, ``C(w, 2)(m+n)²``); ``"lost"`` (row PAIRS LOST:
            ``w/2 (m²+n²-m-n)``, ``w/2 (w-1)(m²+n²)``).
    """
    if w < 1 or n < 0 or m < 0 or n + m < 1:
        raise ValueError(f"need w >= 1, n >= 0, m >= 0 and n + m >= 1, got w={w}, n={n}, m={m}")
    if kind in ("pn", "mn", "episodic"):
        return w * m * n, w * (w - 1) * m * n
    if kind == "nca":
        return math.comb(m + n, 2) * w, math.comb(w, 2) * (m + n) ** 2
    if kind == "lost":
        return w * (m * m + n * n - m - n) // 2, w * (w - 1) * (m * m + n * n) // 2
    raise ValueError(f"unknown kind {kind!r}; allowed: 'pn', 'mn', 'episodic', 'nca', 'lost'")


def ablation_pairs(w: int, n: int, m: int, prototypes: bool, sq_split: bool) -> tuple[int, int]:
    """``(positives, negatives)`` of each switch setting on an episodic batch, in Table 1's unit.

    Table 1 gives the S/Q rows (PN, MN = PN without prototypes: ``wmn``, ``w(w-1)mn``) and the all-pairs row
    (NCA, fixed composition). "PN without S/Q" (prototypes, no split) is not in Table 1; by the same counting
    it keeps every negative, ``C(w,2)(m+n)²``, and every positive except the ``w·C(n,2)`` support-support ones:
    ``w(C(m,2) + mn)``.
    """
    if sq_split:
        return table1_pairs(w, n, m, "episodic")
    if not prototypes:
        return table1_pairs(w, n, m, "nca")
    if n < 1:
        raise ValueError(f"prototypes need n >= 1 shots, got n={n}")
    return w * (math.comb(m, 2) + m * n), math.comb(w, 2) * (m + n) ** 2


# ----------------------------------------------------------------------------------------------------------
# Building blocks
# ----------------------------------------------------------------------------------------------------------

def squared_distances(a: Tensor, b: Tensor) -> Tensor:
    """``[Na, D]``, ``[Nb, D]`` -> ``[Na, Nb]`` squared Euclidean distances ``|a_i - b_j|²``.

    Uses ``|a|² + |b|² - 2 a·b`` (one matmul, a smooth gradient everywhere, including at zero distance, where
    ``cdist``'s square root is not). Rounding can make a distance slightly negative; that is harmless because
    distances only enter ``exp(-d/T)`` inside a log-sum-exp, so nothing is clamped.
    """
    na = (a * a).sum(1)
    nb = (b * b).sum(1)
    return na[:, None] + nb[None, :] - 2.0 * (a @ b.T)


def _keep_count(fraction: float, count: int) -> int:
    """``floor(fraction * count)``, rounded to 9 decimals first so that e.g. 0.29 * 100 gives 29, not 28."""
    return int(math.floor(round(fraction * count, 9)))


def subsample_pairs(allowed: Tensor, same: Tensor, pos_fraction: float, neg_fraction: float,
                    generator: torch.Generator | None = None) -> Tensor:
    """Random pair subsampling of Fig. 3: drop unordered pairs from a neighbourhood mask.

    Args:
        allowed: ``[E, E]`` bool, ``allowed[i, j]``: element ``j`` is a neighbour of anchor ``i``.
        same: ``[E, E]`` bool, same class.
        pos_fraction, neg_fraction: fractions in ``[0, 1]`` of the positive / negative unordered pairs
            ``{i, j}`` (with ``allowed[i, j] or allowed[j, i]``) to keep: ``floor(f * count)`` of each, chosen
            uniformly without replacement (argsort of i.i.d. uniform keys).
        generator: RNG for the keys (its device is used to draw them); None uses the global RNG of
            ``allowed``'s device (which the training loop checkpoints, so resumes stay exact).

    Returns:
        ``[E, E]`` bool: ``allowed`` without the dropped pairs, removed in both directions.
    """
    cand = torch.triu(allowed | allowed.T, diagonal=1)
    keep = torch.zeros_like(cand)
    for mask, frac in ((cand & same, pos_fraction), (cand & ~same, neg_fraction)):
        idx = mask.nonzero()  # [P, 2]
        k = _keep_count(frac, len(idx))
        if k < len(idx):
            dev = generator.device if generator is not None else allowed.device
            keys = torch.rand(len(idx), generator=generator, device=dev).to(allowed.device)
            idx = idx[torch.argsort(keys)[:k]]
        keep[idx[:, 0], idx[:, 1]] = True
    return allowed & (keep | keep.T)


def _neighbourhood_loss(elems: Tensor, elem_ids: Tensor, allowed: Tensor, temperature: float,
                        membership: Tensor | None, image_ids: Tensor, anchors: Tensor | None = None,
                        counts_only: bool = False) -> LossOutput:
    """Masked neighbourhood softmax (module docstring) with log-sum-exp, plus pair counts and accuracy.

    Args:
        elems: ``[E, D]`` float element embeddings (images or prototypes).
        elem_ids: ``[E]`` int64 class ids in ``0..E-1`` (dense ids, or each class's first position).
        allowed: ``[E, E]`` bool neighbour mask (row = anchor), False on the diagonal.
        temperature: distances are divided by it.
        membership: ``[E, B]`` 0/1 float, images each element is made of; None when elements are the images.
        image_ids: ``[B]`` class ids of the images (for counting).
        anchors: ``[E]`` bool, the anchors by role (before subsampling); given, the loss is divided by their
            number (``reduction="batch"``), else by the anchors that contribute.
        counts_only: the pair counts and anchors only, from the same masks; loss and accuracy are NaN (the
            distances, log-sum-exps and the accuracy's ``[E, E] @ [E, E]`` class sums are skipped: 01's measured
            Table 1 counts on batches of thousands of images).

    Counts and accuracy come back as 0-d tensors (no host read); :meth:`LossOutput.synced` converts them.
    """
    same = elem_ids[:, None] == elem_ids[None, :]
    e = elems.shape[0]
    pos = allowed & same
    has_pos = pos.any(1)  # anchors that contribute
    row = has_pos[:, None]
    n_anchors = has_pos.sum()
    if counts_only:
        loss = accuracy = torch.full((), float("nan"), device=elems.device)
    else:
        centre = elems.mean(0, keepdim=True).detach()
        c = elems - centre
        logits = -squared_distances(c, c) / temperature
        # Rows without a positive get a harmless all-zero row (finite, no NaN gradient) and weight 0.
        safe = torch.where(row, logits, torch.zeros_like(logits))
        pos_m = pos | ~row
        all_m = allowed | ~row
        neg_inf = float("-inf")
        lse_pos = torch.logsumexp(safe.masked_fill(~pos_m, neg_inf), dim=1)
        lse_all = torch.logsumexp(safe.masked_fill(~all_m, neg_inf), dim=1)
        per_anchor = (lse_all - lse_pos) * has_pos.to(logits.dtype)
        divisor = n_anchors if anchors is None else anchors.sum()
        loss = per_anchor.sum() / divisor.clamp_min(1).to(per_anchor.dtype)
        with torch.no_grad():
            # Class columns indexed by the ids themselves (< E when the ids are dense or first-occurrence
            # positions), so the number of classes is never read back from the device.
            probs = torch.softmax(safe.masked_fill(~all_m, neg_inf), dim=1)
            onehot = F.one_hot(elem_ids, max(e, 1)).to(probs.dtype)
            correct = ((probs @ onehot).argmax(1) == elem_ids) & has_pos
            accuracy = torch.where(n_anchors > 0, correct.sum() / n_anchors.clamp_min(1),
                                   torch.full((), float("nan"), device=elems.device))

    with torch.no_grad():
        used = allowed & row
        used = used | used.T
        if membership is not None:
            used = (membership.T @ used.to(membership.dtype) @ membership) > 0
        used = torch.triu(used, diagonal=1)
        same_img = image_ids[:, None] == image_ids[None, :]
        positives = (used & same_img).sum()
        negatives = (used & ~same_img).sum()
    return LossOutput(loss, positives, negatives, accuracy, n_anchors)


def _check(z: Tensor, labels: Tensor, support: Tensor | None, temperature: float) -> None:
    if z.ndim != 2:
        raise ValueError(f"z must be [B, D] embeddings, got shape {tuple(z.shape)}; flatten features first")
    if labels is None or labels.shape != (z.shape[0],):
        got = None if labels is None else tuple(labels.shape)
        raise ValueError(f"labels must be [B] = [{z.shape[0]}] class ids, got {got}; pass the batch's labels")
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integer class ids, got dtype {labels.dtype}; cast with .long()")
    if support is not None and (support.shape != (z.shape[0],) or support.dtype != torch.bool):
        raise ValueError(f"support must be a [B] = [{z.shape[0]}] bool mask, got shape {tuple(support.shape)} "
                         f"and dtype {support.dtype}; pass Batch.support of an episodic sampler")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def _float(z: Tensor) -> Tensor:
    """float32 at least (float64 stays float64): the distance losses never run in half precision."""
    return z if z.dtype in (torch.float32, torch.float64) else z.float()


# ----------------------------------------------------------------------------------------------------------
# Losses
# ----------------------------------------------------------------------------------------------------------

def episode_loss(z: Tensor, labels: Tensor, support: Tensor | None = None, kind: str = "nca", *,
                 prototypes: bool | None = None, sq_split: bool | None = None, temperature: float = 1.0,
                 pos_fraction: float = 1.0, neg_fraction: float = 1.0,
                 generator: torch.Generator | None = None, reduction: str = "anchors",
                 sync: bool = True, counts_only: bool = False) -> LossOutput:
    """Every distance loss of seed 000 and its ablations (module docstring has the table).

    Args:
        z: ``[B, D]`` embeddings.
        labels: ``[B]`` integer class ids (any values; remapped internally).
        support: ``[B]`` bool, True for support images (episodic roles); needed when ``prototypes`` or
            ``sq_split`` is on, ignored otherwise.
        kind: ``"nca"``, ``"pn"`` or ``"mn"``: sets the default switches.
        prototypes: average each class's support points into a prototype (Sec. 2.2, L_PNs).
        sq_split: keep the support/query roles (anchors = queries, neighbours = support side).
        temperature: ``T``, distances are divided by it.
        pos_fraction, neg_fraction: pair subsampling (Fig. 3), only with ``prototypes=False``.
        generator: RNG of the subsampling (None: global RNG of ``z``'s device).
        reduction: ``"anchors"``: mean over the anchors that have a positive; ``"batch"``: sum over them divided
            by the number of anchors by role (every image for NCA, the queries with ``sq_split``): the paper's
            ``1/|B|`` (module docstring).
        sync: return the counts and accuracy as Python numbers. ``False`` keeps them 0-d tensors on ``z``'s
            device so that a training step never waits for the GPU (the loop reads its logs in blocks);
            without prototypes and without pair subsampling the loss then makes no host read at all.
        counts_only: the pair counts (and anchors) only, from the masks the loss uses; loss and accuracy are NaN.
            For callers that count pairs on large batches (01's measured Table 1 counts, up to 4096 images).

    Returns:
        :class:`LossOutput`.
    """
    if kind not in _DEFAULT_SWITCHES:
        raise ValueError(f"unknown kind {kind!r}; allowed: {', '.join(KINDS)}")
    proto, split = _DEFAULT_SWITCHES[kind]
    proto = proto if prototypes is None else bool(prototypes)
    split = split if sq_split is None else bool(sq_split)
    _check(z, labels, support, temperature)
    for name, f in (("pos_fraction", pos_fraction), ("neg_fraction", neg_fraction)):
        if not 0.0 <= f <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {f}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; allowed: {', '.join(REDUCTIONS)}")
    subsample = pos_fraction < 1.0 or neg_fraction < 1.0
    if subsample and proto:
        raise ValueError("pair subsampling applies to losses on points; set prototypes=False (or fractions to 1)")
    if (proto or split) and support is None:
        raise ValueError(f"prototypes={proto}, sq_split={split} need the support mask of an episodic batch; use "
                         "the 'episodic' sampler, or prototypes=False and sq_split=False (plain NCA)")

    with torch.autocast(device_type=z.device.type, enabled=False):
        z = _float(z)
        b, dev = z.shape[0], z.device
        if proto:
            _, ids = torch.unique(labels, return_inverse=True)  # dense 0..K-1: one prototype per class
        else:
            ids = (labels[:, None] == labels[None, :]).to(torch.uint8).argmax(1)  # first position, no host read
        if proto:
            k = int(ids.max()) + 1
            member = (ids[None, :] == torch.arange(k, device=dev)[:, None]) & support[None, :]  # [K, B]
            counts = member.sum(1)
            present = counts > 0
            member = member[present].to(z.dtype)
            protos = (member @ z) / counts[present, None].to(z.dtype)  # [P, D] class means of the support
            query = ~support
            elems = torch.cat([z[query], protos])
            elem_ids = torch.cat([ids[query], torch.arange(k, device=dev)[present]])
            eye_b = torch.eye(b, dtype=z.dtype, device=dev)
            membership = torch.cat([eye_b[query], member])  # [E, B]
            e, nq = elems.shape[0], int(query.sum())
            is_query = torch.arange(e, device=dev) < nq
            if split:
                allowed = is_query[:, None] & ~is_query[None, :]
            else:
                allowed = ~torch.eye(e, dtype=torch.bool, device=dev)
        else:
            elems, elem_ids, membership = z, ids, None
            if split:
                allowed = (~support)[:, None] & support[None, :]
            else:
                allowed = ~torch.eye(b, dtype=torch.bool, device=dev)
        roles = allowed.any(1) if reduction == "batch" else None  # before subsampling drops pairs
        if subsample and not proto:
            same = ids[:, None] == ids[None, :]
            allowed = subsample_pairs(allowed, same, pos_fraction, neg_fraction, generator)
        out = _neighbourhood_loss(elems, elem_ids, allowed, temperature, membership, ids, roles, counts_only)
        return out.synced() if sync else out


def pn_loss(z: Tensor, labels: Tensor, support: Tensor, temperature: float = 1.0, *, prototypes: bool = True,
            sq_split: bool = True) -> LossOutput:
    """Eq. L_PNs: softmax over negative squared distances of each query to the class prototypes.

    ``z``: ``[B, D]``; ``labels``: ``[B]``; ``support``: ``[B]`` bool. The switches give the Fig. 4 ablations
    (``prototypes=False``: row 6, equal to :func:`mn_loss`; ``sq_split=False``: row 7; both: row 3).
    """
    return episode_loss(z, labels, support, "pn", prototypes=prototypes, sq_split=sq_split, temperature=temperature)


def mn_loss(z: Tensor, labels: Tensor, support: Tensor, temperature: float = 1.0, *, sq_split: bool = True,
            pos_fraction: float = 1.0, neg_fraction: float = 1.0,
            generator: torch.Generator | None = None) -> LossOutput:
    """Eq. L_MNs without full-context embeddings: each query against the individual support points.

    ``z``: ``[B, D]``; ``labels``: ``[B]``; ``support``: ``[B]`` bool. ``sq_split=False`` is the Appendix H
    ablation (NCA on the episodic batch).
    """
    return episode_loss(z, labels, support, "mn", sq_split=sq_split, temperature=temperature,
                        pos_fraction=pos_fraction, neg_fraction=neg_fraction, generator=generator)


def nca_loss(z: Tensor, labels: Tensor, temperature: float = 1.0, *, pos_fraction: float = 1.0,
             neg_fraction: float = 1.0, generator: torch.Generator | None = None) -> LossOutput:
    """Eq. L_NCA on all pairs of the batch, distances divided by ``temperature``, optional pair subsampling.

    ``z``: ``[B, D]``; ``labels``: ``[B]`` any integer ids.
    """
    return episode_loss(z, labels, None, "nca", temperature=temperature, pos_fraction=pos_fraction,
                        neg_fraction=neg_fraction, generator=generator)


def ce_loss(logits: Tensor, labels: Tensor) -> LossOutput:
    """Cross-entropy baseline: ``logits`` ``[B, C]`` of a linear head, ``labels`` ``[B]`` in ``0..C-1``.

    Uses no distance pairs (``positives = negatives = 0``); ``F.cross_entropy`` is already log-sum-exp.
    """
    if logits.ndim != 2 or labels.shape != (logits.shape[0],):
        raise ValueError(f"need logits [B, C] and labels [B], got {tuple(logits.shape)} and {tuple(labels.shape)}")
    c = logits.shape[1]
    if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= c):
        raise ValueError(f"labels must lie in 0..{c - 1} (the head's classes), got {int(labels.min())}.."
                         f"{int(labels.max())}; train cross-entropy on split labels with num_classes = classes")
    with torch.autocast(device_type=logits.device.type, enabled=False):
        logits = _float(logits)
        loss = F.cross_entropy(logits, labels)
        acc = float((logits.detach().argmax(1) == labels).float().mean()) if len(labels) else float("nan")
    return LossOutput(loss, 0, 0, acc, len(labels))


# ----------------------------------------------------------------------------------------------------------
# Methods
# ----------------------------------------------------------------------------------------------------------

def _out_dim(backbone: nn.Module) -> int:
    d = getattr(backbone, "out_dim", None)
    if not isinstance(d, int) or d < 1:
        raise ValueError(f"the backbone {type(backbone).__name__} needs an integer attribute out_dim (its feature "
                         f"size), got {d!r}")
    return d


class DistanceMethod(Method):
    """PN / MN / NCA training (and the Fig. 4 ablations) on top of a backbone.

    ``loss`` applies ``augment`` (uint8 ``[B, C, H, W]`` -> float), the backbone, the optional training-only
    projection (``projection_dim``: a Linear head, the 128-d NCA projection of miniImageNet) and
    :func:`episode_loss` with ``batch.labels`` and ``batch.support``. :meth:`features` (evaluation) returns
    the backbone output without projection. Pair subsampling runs only in training mode (validation uses the
    full loss) and draws from the global RNG of the device, which the training loop checkpoints.
    """

    def __init__(self, backbone: nn.Module, augment: Callable[[Tensor], Tensor], kind: str = "nca",
                 temperature: float = 1.0, projection_dim: int | None = None, pos_fraction: float = 1.0,
                 neg_fraction: float = 1.0, prototypes: bool | None = None, sq_split: bool | None = None,
                 reduction: str = "anchors") -> None:
        super().__init__()
        if reduction not in REDUCTIONS:
            raise ValueError(f"unknown reduction {reduction!r}; allowed: {', '.join(REDUCTIONS)} (module docstring)")
        self.reduction = reduction
        if kind not in _DEFAULT_SWITCHES:
            raise ValueError(f"unknown kind {kind!r}; allowed: {', '.join(KINDS)}")
        proto, split = _DEFAULT_SWITCHES[kind]
        self.kind = kind
        self.prototypes = proto if prototypes is None else bool(prototypes)
        self.sq_split = split if sq_split is None else bool(sq_split)
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        for name, f in (("pos_fraction", pos_fraction), ("neg_fraction", neg_fraction)):
            if not 0.0 <= f <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {f}")
        if self.prototypes and (pos_fraction < 1 or neg_fraction < 1):
            raise ValueError("pair subsampling applies to losses on points; use kind 'nca' or 'mn' (or "
                             "prototypes=False), or leave the fractions at 1")
        self.temperature, self.pos_fraction, self.neg_fraction = float(temperature), pos_fraction, neg_fraction
        self.backbone = backbone
        self.augment = augment
        self.projection = nn.Linear(_out_dim(backbone), projection_dim) if projection_dim else None

    def embed(self, x: Tensor) -> Tensor:
        """``[B, C, H, W]`` float -> ``[B, D']`` training embeddings (through the projection if any)."""
        z = self.backbone(x)
        return self.projection(z) if self.projection is not None else z

    def loss(self, images: Tensor, batch: Batch) -> tuple[Tensor, dict[str, float]]:
        if batch.labels is None:
            raise ValueError(f"method {self.kind!r} needs labels; build the sampler with the split's labels")
        if (self.prototypes or self.sq_split) and batch.support is None:
            raise ValueError(f"method {self.kind!r} with prototypes={self.prototypes}, sq_split={self.sq_split} "
                             "needs support/query roles; use the 'episodic' sampler")
        z = self.embed(self.augment(images))
        fp, fn = (self.pos_fraction, self.neg_fraction) if self.training else (1.0, 1.0)
        out = episode_loss(z, batch.labels, batch.support, self.kind, prototypes=self.prototypes,
                           sq_split=self.sq_split, temperature=self.temperature, pos_fraction=fp, neg_fraction=fn,
                           reduction=self.reduction, sync=False)
        return out.loss, {"positives": out.positives, "negatives": out.negatives, "acc": out.accuracy}


class CEMethod(Method):
    """Cross-entropy baseline: backbone + a Linear head over the ``num_classes`` training classes.

    Needs batches with split labels ``0..num_classes-1`` (the 'shuffled' or 'replacement' sampler); episodic
    batches carry episode-local labels and are refused. :meth:`features` is the backbone output (no head).
    """

    def __init__(self, backbone: nn.Module, augment: Callable[[Tensor], Tensor],
                 num_classes: int | None = None) -> None:
        super().__init__()
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"method 'ce' needs num_classes = the number of training classes (>= 2), "
                             f"got {num_classes!r}")
        self.backbone = backbone
        self.augment = augment
        self.head = nn.Linear(_out_dim(backbone), num_classes)

    def loss(self, images: Tensor, batch: Batch) -> tuple[Tensor, dict[str, float]]:
        if batch.labels is None or batch.ways is not None:
            raise ValueError("method 'ce' needs split labels 0..K-1; use the 'shuffled' or 'replacement' sampler "
                             "(episodic and fixed-composition batches carry episode-local labels)")
        out = ce_loss(self.head(self.backbone(self.augment(images))), batch.labels)
        return out.loss, {"positives": 0.0, "negatives": 0.0, "acc": out.accuracy}


@register_method("nca")
def build_nca(backbone: nn.Module, augment: Callable[[Tensor], Tensor], **params: Any) -> DistanceMethod:
    """NCA (Sec. 2.2): all pairs of the batch; params of :class:`DistanceMethod`."""
    return DistanceMethod(backbone, augment, kind="nca", **params)


@register_method("pn")
def build_pn(backbone: nn.Module, augment: Callable[[Tensor], Tensor], **params: Any) -> DistanceMethod:
    """Prototypical Networks (and the Fig. 4 ablations via ``prototypes`` / ``sq_split``)."""
    return DistanceMethod(backbone, augment, kind="pn", **params)


@register_method("mn")
def build_mn(backbone: nn.Module, augment: Callable[[Tensor], Tensor], **params: Any) -> DistanceMethod:
    """Matching Networks without full-context embeddings (Appendix H ablation via ``sq_split``)."""
    return DistanceMethod(backbone, augment, kind="mn", **params)


register_method("ce")(CEMethod)
