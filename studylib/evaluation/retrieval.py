"""Set-query retrieval (seed 003, Sec. 4): concept sets, database ranking, average precision.

A *retrieval task* is a concept set ``X`` (``set_size`` images, drawn from the concept's classes, with a
``noise`` fraction replaced by images of other classes, like the irrelevant images of an Internet search) and
the rest of the split as the database: an image is relevant when its class belongs to the concept. A concept
is one class, or the union of ``merge`` classes (a polysemous concept, seed 003 Fig. 3). The images of ``X``
are left out of the ranking. Everything is batched with tensor ops on the features' device.

:func:`average_precision` is the mean of the precision at the rank of every relevant item (non-interpolated
AP, as ``sklearn.metrics.average_precision_score`` for untied scores); mAP is its mean over concepts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def average_precision(scores: torch.Tensor, relevant: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Average precision of each row's ranking, batched.

    Args:
        scores: ``[C, M]`` higher = more relevant.
        relevant: ``[C, M]`` bool.
        valid: ``[C, M]`` bool, items to rank (default all); the others are ignored.

    Returns:
        ``[C]`` float64 AP; NaN for a row with no relevant valid item. Ties are broken by position (a stable
        sort), so tied scores are ranked in index order (scikit-learn instead averages over a tie).
    """
    if scores.shape != relevant.shape:
        raise ValueError(f"scores {tuple(scores.shape)} and relevant {tuple(relevant.shape)} differ in shape")
    rel = relevant.bool()
    s = scores.double()
    if valid is not None:
        rel = rel & valid.bool()
        s = s.masked_fill(~valid.bool(), float("-inf"))
    order = torch.argsort(s, dim=-1, descending=True, stable=True)
    r = torch.gather(rel, -1, order).double()
    hits = torch.cumsum(r, -1)
    ranks = torch.arange(1, r.shape[-1] + 1, device=r.device, dtype=r.dtype)
    n_rel = r.sum(-1)
    return ((hits / ranks) * r).sum(-1) / n_rel  # invalid items sort last and are never relevant


@dataclass
class RetrievalTasks:
    """Concept sets over one split: ``sets [C, N]`` indices of the concept sets, ``relevant [C, M]`` and
    ``valid [C, M]`` over the ``M`` images of the split (``valid`` is False for the set's own images),
    ``classes [C, merge]`` the concept's classes, ``noisy [C, N]`` True for the irrelevant set members."""

    sets: torch.Tensor
    relevant: torch.Tensor
    valid: torch.Tensor
    classes: torch.Tensor
    noisy: torch.Tensor


def retrieval_tasks(labels: torch.Tensor, set_size: int, concepts: int | None = None, noise: float = 0.0,
                    merge: int = 1, seed: int = 0) -> RetrievalTasks:
    """Draw retrieval tasks (module docstring) over a split with ``labels``, deterministic in ``seed``.

    Args:
        labels: ``[M]`` class of each image of the split.
        set_size: images per concept set ``|X|``.
        concepts: tasks to draw (default: every class once as a concept, or every disjoint ``merge``-tuple).
        noise: fraction of ``X`` replaced by images of classes outside the concept (``round(noise * N)``).
        merge: classes per concept (1: plain; 2: polysemous, two classes merged).
        seed: the draw's seed (CPU generator: the same tasks on every device).

    Raises:
        ValueError: when the classes are too small for ``set_size`` clean members plus at least one relevant
            database image each, or ``noise`` is outside [0, 1).
    """
    if set_size < 1 or merge < 1:
        raise ValueError(f"set_size and merge must be >= 1, got {set_size}, {merge}")
    if not 0.0 <= noise < 1.0:
        raise ValueError(f"noise must be in [0, 1), got {noise}")
    device = labels.device
    lab = labels.detach().cpu().long()
    classes = torch.unique(lab)
    k = len(classes)
    if k < merge + 1:
        raise ValueError(f"{k} classes cannot make concepts of {merge} classes with negatives")
    n_noisy = int(round(noise * set_size))
    n_clean = set_size - n_noisy
    counts = torch.bincount(lab)[classes]
    if int(counts.min()) * merge < n_clean + merge:
        raise ValueError(f"the smallest class has {int(counts.min())} images: a concept of {merge} class(es) "
                         f"cannot give {n_clean} clean set images and keep a relevant image per class in the "
                         f"database; lower set_size")
    g = torch.Generator().manual_seed(seed)
    n_concepts = concepts if concepts is not None else k // merge
    rows_cls, rows_set, rows_noisy = [], [], []
    for c in range(n_concepts):
        if c % (k // merge) == 0:
            perm = classes[torch.randperm(k, generator=g)]
        j = c % (k // merge)
        cls = perm[j * merge:(j + 1) * merge]
        neg = torch.nonzero(~torch.isin(lab, cls)).squeeze(1)
        # clean members spread over the merged classes: sample per class round robin so each keeps >= 1 image
        per = [torch.nonzero(lab == int(cc)).squeeze(1) for cc in cls]
        per = [p[torch.randperm(len(p), generator=g)] for p in per]
        take, i = [], 0
        while len(take) < n_clean:
            q = per[i % merge]
            used = sum(1 for t in take if lab[t] == lab[q[0]])
            if used < len(q) - 1:
                take.append(int(q[used]))
            i += 1
        clean = torch.tensor(take, dtype=torch.long)
        noisy = neg[torch.randperm(len(neg), generator=g)[:n_noisy]]
        members = torch.cat([clean, noisy])
        mix = torch.randperm(set_size, generator=g)
        rows_set.append(members[mix])
        rows_noisy.append((torch.arange(set_size) >= n_clean)[mix])
        rows_cls.append(cls)
    sets = torch.stack(rows_set)
    relevant = (lab[None, None, :] == torch.stack(rows_cls)[:, :, None]).any(1)  # [C, M]
    valid = torch.ones_like(relevant)
    valid.scatter_(1, sets, False)
    return RetrievalTasks(sets.to(device), relevant.to(device), valid.to(device), torch.stack(rows_cls).to(device),
                          torch.stack(rows_noisy).to(device))


def svm_negatives(tasks: RetrievalTasks, labels: torch.Tensor, count: int, seed: int = 0) -> torch.Tensor:
    """``[C, count]`` negatives of each concept's SVM (seed 003 Sec. 4.3, after Arandjelovic & Zisserman
    2012): images drawn at random (without replacement, seed ``seed``, CPU generator) from the *other* concepts'
    sets, skipping images of the concept's own classes (a noisy set may hold one). The paper uses
    ``count = 2 |X|``. Leave them out of the concept's ranking (they are training data of its SVM).

    Raises:
        ValueError: when fewer than ``count`` such images exist for some concept.
    """
    lab = labels.detach().cpu().long()
    sets, classes = tasks.sets.cpu(), tasks.classes.cpu()
    c, n = sets.shape
    pool = sets.reshape(-1)  # [C * N]; an image may sit in several sets, it is drawn at most once
    owner = torch.arange(c).repeat_interleave(n)
    ok = (owner[None, :] != torch.arange(c)[:, None]) & ~(lab[pool][None, :, None] == classes[:, None, :]).any(-1)
    keys = torch.rand(c, len(pool), generator=torch.Generator().manual_seed(seed)).masked_fill(~ok, 2.0)
    order = torch.argsort(keys, -1)
    picked = []
    for row in range(c):
        out: list[int] = []
        for j in order[row].tolist():
            if float(keys[row, j]) >= 2.0 or len(out) == count:
                break
            if int(pool[j]) not in out:
                out.append(int(pool[j]))
        if len(out) < count:
            raise ValueError(f"concept {row} has {len(out)} images in other concepts' sets outside its classes, "
                             f"fewer than the {count} SVM negatives asked for; lower the count or draw more concepts")
        picked.append(out)
    return torch.tensor(picked, dtype=torch.long, device=tasks.sets.device)
