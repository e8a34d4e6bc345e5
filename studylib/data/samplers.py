"""Batch samplers: index tensors into a split, never images.

Four ways to build a training batch, the ones seed 000 compares (Sec. 2.2 III, Sec. 3.4, Appendix B):

* :class:`EpisodicSampler` — ``w`` ways, ``n`` shots, ``m`` queries; images are drawn per episode, either
  independently for every episode ("with replacement", the default of Snell et al.) or from per-class
  queues that hand out every image at most once per epoch ("without replacement").
* :class:`ShuffledSampler` — a permutation per epoch cut into batches: every image once per epoch (NCA).
* :class:`ReplacementSampler` — every batch drawn independently and uniformly (NCA "with replacement").
* :class:`FixedCompositionSampler` — an episodic batch (``w`` classes x ``n+m`` images) with no
  support/query roles (NCA with "fixed batch composition").

Every sampler is deterministic in ``(seed, epoch)``: :meth:`epoch` returns the same batches however often it
is called, which is what makes a killed run resume exactly where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from studylib.data.base import DataError


@dataclass
class Batch:
    """What a sampler drew.

    Attributes:
        indices: ``[B]`` int64 indices into the split.
        labels: ``[B]`` int64 or None. Episodic samplers give episode-local labels ``0..w-1``; the others give
            the split's labels, or None when built without labels (self-supervised training).
        support: ``[B]`` bool, True for support images of an episode; None when the batch has no roles.
        ways, shots, queries: the episode shape when the batch is episodic (class-major order: for each of
            the ``ways`` classes, ``shots`` support images then ``queries`` query images).
        episodes: how many episodes of that shape are concatenated in the batch (InfoPatch trains on 4 per
            batch); ``labels`` and ``support`` repeat per episode. Only methods with ``multi_episode = True``
            accept more than one (the training loop checks).
        classes: ``[episodes * ways]`` int64 split labels of the episodes' classes in batch order (episodic
            samplers only; None otherwise): what a method that memorises per-class state reads (Set2Model's
            EM warm start, seed 003 Sec. 4.2).
    """

    indices: torch.Tensor
    labels: torch.Tensor | None = None
    support: torch.Tensor | None = None
    ways: int | None = None
    shots: int | None = None
    queries: int | None = None
    episodes: int = 1
    classes: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.indices.numel())


def _epoch_generator(seed: int, epoch: int) -> torch.Generator:
    return torch.Generator().manual_seed((seed * 1_000_003 + epoch * 7919 + 17) % (2**63 - 1))


class ClassTable:
    """Per-class index table: ``table[k, :counts[k]]`` are the indices of class ``k`` (CPU, int64)."""

    def __init__(self, labels: torch.Tensor, num_classes: int | None = None) -> None:
        labels = labels.detach().cpu().long()
        k = int(labels.max()) + 1 if num_classes is None else num_classes
        self.counts = torch.bincount(labels, minlength=k)
        order = torch.argsort(labels, stable=True)
        width = int(self.counts.max()) if len(labels) else 0
        self.table = torch.full((k, width), -1, dtype=torch.long)
        starts = torch.cumsum(self.counts, 0) - self.counts
        pos = torch.arange(len(labels)) - starts[labels[order]]
        self.table[labels[order], pos] = order
        self.num_classes = k

    def draw(self, classes: torch.Tensor, per_class: int, gen: torch.Generator) -> torch.Tensor:
        """``[len(classes), per_class]`` indices, drawn without replacement inside each class."""
        keys = torch.rand(len(classes), self.table.shape[1], generator=gen)
        valid = torch.arange(self.table.shape[1])[None, :] < self.counts[classes][:, None]
        keys[~valid] = 2.0  # invalid slots sort last
        cols = torch.argsort(keys, dim=1)[:, :per_class]
        return torch.gather(self.table[classes], 1, cols)


def check_episode(ways: int, shots: int, queries: int, counts: torch.Tensor, what: str = "split",
                  class_names: Sequence[str] | None = None, roles: bool = True) -> None:
    """Fail before any training or evaluation when the data cannot hold ``ways`` classes of ``shots + queries``.

    With support/query roles (``roles=True``: episodic training, evaluation episodes) an episode needs at least
    one support and one query image per class: with no query the accuracy is 0/0 (NaN), with no support there
    is no prototype. Without roles (fixed batch composition, ``shots`` images per class, ``queries = 0``) every
    image needs a second image of its class (its positive), so ``shots + queries >= 2``. A class with fewer than
    ``shots + queries`` images can never enter an episode; the message names those classes (the first few, with
    their image counts) and the change that fixes the request.

    Args:
        ways, shots, queries: the episode shape.
        counts: ``[K]`` images per class (classes with 0 images are absent and ignored).
        what: the split's name for messages, e.g. ``"test split omniglot/test"``.
        class_names: ``K`` names for the message (default ``class <k>``).
        roles: whether the episode has support/query roles (see above).
    """
    if roles and (ways < 1 or shots < 1 or queries < 1):
        raise DataError(f"an episode needs ways >= 1 and at least one support and one query image per class "
                        f"(shots >= 1, queries >= 1), got ways={ways}, shots={shots}, queries={queries}: with no "
                        f"query image the accuracy is 0/0 (NaN), with no support image there is no prototype; "
                        f"set {'shots' if shots < 1 else 'queries' if queries < 1 else 'ways'} to at least 1")
    if not roles and (ways < 1 or shots + queries < 2):
        raise DataError(f"a batch of fixed composition needs ways >= 1 and at least 2 images per class (every "
                        f"image needs a positive of its class), got ways={ways}, {shots + queries} per class; "
                        f"raise the images per class to at least 2")
    k = int((counts > 0).sum())
    if ways > k:
        raise DataError(f"{ways}-way episodes need {ways} classes but the {what} has {k}; lower 'ways' to at most {k}")
    per = shots + queries
    small = torch.nonzero((counts > 0) & (counts < per)).squeeze(1).tolist()
    if not small:
        return
    smallest = int(counts[counts > 0].min())
    name = (lambda c: repr(str(class_names[c]))) if class_names is not None else (lambda c: f"class {c}")
    listed = ", ".join(f"{name(c)} ({int(counts[c])})" for c in small[:5])
    more = f" and {len(small) - 5} more" if len(small) > 5 else ""
    need = 2  # the fewest images a class can have and still enter an episode (1 + 1, or a positive pair)
    if smallest >= need:
        fix = (f"lower shots or queries so that they sum to at most {smallest}"
               + (" (keeping shots >= 1 and queries >= 1)" if roles else "")
               + ", or add images to those classes or remove them from the data")
    else:
        fix = (f"a class needs at least {need} images to enter any episode "
               f"({'1 support + 1 query' if roles else 'an image and its positive'}), so lowering shots or queries "
               f"cannot help: add images to those classes or remove them from the data")
    raise DataError(f"shots + queries = {shots} + {queries} = {per} images per class, but the smallest class of the "
                    f"{what} has {smallest}; {len(small)} of its {k} classes {'holds' if len(small) == 1 else 'hold'} fewer "
                    f"than {per} images: "
                    f"{listed}{more}. Fix: {fix}")


class EpisodicSampler:
    """Episodes of ``ways`` classes x (``shots`` support + ``queries`` query) images.

    ``replacement=True``: every episode independently picks ``ways`` classes and ``shots+queries`` images of
    each (images recur across episodes of an epoch). ``replacement=False``: each class keeps a shuffled queue
    per epoch; an episode takes the next ``shots+queries`` images of ``ways`` classes chosen among those with
    enough left, so no image appears twice in an epoch; the epoch ends after ``episodes_per_epoch`` episodes
    or when fewer than ``ways`` classes have enough images left.

    ``episodes_per_batch = E > 1`` concatenates ``E`` consecutive episodes into one :class:`Batch`
    (``Batch.episodes = E``); ``episodes_per_epoch`` then counts batches, so an epoch draws ``E`` times as many
    episodes (with ``E = 1`` the draws are exactly those of a one-episode sampler).
    """

    def __init__(self, labels: torch.Tensor, ways: int, shots: int, queries: int, episodes_per_epoch: int,
                 replacement: bool = True, seed: int = 0, roles: bool = True, what: str = "split",
                 class_names: Sequence[str] | None = None, episodes_per_batch: int = 1) -> None:
        if episodes_per_batch < 1:
            raise DataError(f"episodes_per_batch must be >= 1, got {episodes_per_batch}")
        self.episodes_per_batch = episodes_per_batch
        self.classes = ClassTable(labels)
        check_episode(ways, shots, queries, self.classes.counts, what, class_names, roles)
        self.ways, self.shots, self.queries = ways, shots, queries
        self.episodes_per_epoch = episodes_per_epoch
        self.replacement, self.seed, self.roles = replacement, seed, roles
        per = shots + queries
        self.labels = torch.arange(ways).repeat_interleave(per)
        self.support = (torch.arange(per) < shots).repeat(ways) if roles else None

    @property
    def batch_size(self) -> int:
        return self.ways * (self.shots + self.queries) * self.episodes_per_batch

    def __len__(self) -> int:
        return self.episodes_per_epoch

    def _batch(self, idx: torch.Tensor, classes: torch.Tensor) -> Batch:
        if self.roles:
            return Batch(idx.reshape(-1), self.labels, self.support, self.ways, self.shots, self.queries,
                         classes=classes)
        return Batch(idx.reshape(-1), self.labels, None, self.ways, None, None, classes=classes)

    def epoch(self, epoch: int) -> list[Batch]:
        e = self.episodes_per_batch
        episodes = self._episodes(epoch, self.episodes_per_epoch * e)
        if e == 1:
            return episodes
        out = []
        for i in range(len(episodes) // e):  # without replacement an epoch may end early: whole batches only
            group = episodes[i * e:(i + 1) * e]
            first = group[0]
            out.append(Batch(torch.cat([b.indices for b in group]), first.labels.repeat(e),
                             first.support.repeat(e) if first.support is not None else None,
                             first.ways, first.shots, first.queries, episodes=e,
                             classes=torch.cat([b.classes for b in group])))
        return out

    def _episodes(self, epoch: int, count: int) -> list[Batch]:
        gen = _epoch_generator(self.seed, epoch)
        present = torch.nonzero(self.classes.counts > 0).squeeze(1)
        per = self.shots + self.queries
        out: list[Batch] = []
        if self.replacement:
            for _ in range(count):
                cls = present[torch.randperm(len(present), generator=gen)[: self.ways]]
                out.append(self._batch(self.classes.draw(cls, per, gen), cls))
            return out
        # Without replacement: per-class shuffled queues with cursors.
        queue = self.classes.draw(present, int(self.classes.counts.max()), gen)  # [K, max] shuffled per class
        left = self.classes.counts[present].clone()
        cursor = torch.zeros(len(present), dtype=torch.long)
        for _ in range(count):
            ok = torch.nonzero(left >= per).squeeze(1)
            if len(ok) < self.ways:
                break
            pick = ok[torch.randperm(len(ok), generator=gen)[: self.ways]]
            cols = cursor[pick][:, None] + torch.arange(per)[None, :]
            out.append(self._batch(torch.gather(queue[pick], 1, cols), present[pick]))
            cursor[pick] += per
            left[pick] -= per
        return out


class FixedCompositionSampler(EpisodicSampler):
    """Episodic batch composition (``ways`` x ``per_class`` images) without support/query roles."""

    def __init__(self, labels: torch.Tensor, ways: int, per_class: int, batches_per_epoch: int,
                 replacement: bool = True, seed: int = 0, what: str = "split",
                 class_names: Sequence[str] | None = None) -> None:
        super().__init__(labels, ways, per_class, 0, batches_per_epoch, replacement, seed, roles=False, what=what,
                         class_names=class_names)


class ShuffledSampler:
    """A fresh permutation per epoch cut into batches of ``batch_size``: every image once per epoch."""

    def __init__(self, num_items: int, batch_size: int, labels: torch.Tensor | None = None, seed: int = 0,
                 drop_last: bool = True) -> None:
        if batch_size < 1 or batch_size > num_items:
            raise DataError(f"batch_size={batch_size} must lie in 1..{num_items} (the number of training images)")
        self.num_items, self.batch_size, self.seed, self.drop_last = num_items, batch_size, seed, drop_last
        self.labels = labels.cpu().long() if labels is not None else None

    def __len__(self) -> int:
        n, b = self.num_items, self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def epoch(self, epoch: int) -> list[Batch]:
        perm = torch.randperm(self.num_items, generator=_epoch_generator(self.seed, epoch))
        chunks = perm.split(self.batch_size)[: len(self)]
        return [Batch(c, self.labels[c] if self.labels is not None else None) for c in chunks]


class ReplacementSampler(ShuffledSampler):
    """Every batch drawn independently: ``batch_size`` distinct images uniformly from the whole split."""

    def __init__(self, num_items: int, batch_size: int, batches_per_epoch: int, labels: torch.Tensor | None = None,
                 seed: int = 0) -> None:
        super().__init__(num_items, batch_size, labels, seed)
        self.batches_per_epoch = batches_per_epoch

    def __len__(self) -> int:
        return self.batches_per_epoch

    def epoch(self, epoch: int) -> list[Batch]:
        gen = _epoch_generator(self.seed, epoch)
        keys = torch.rand(self.batches_per_epoch, self.num_items, generator=gen)
        idx = torch.topk(keys, self.batch_size, dim=1).indices
        return [Batch(c, self.labels[c] if self.labels is not None else None) for c in idx]


Sampler = EpisodicSampler | ShuffledSampler
