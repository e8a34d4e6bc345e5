"""Vectorised sampling of few-shot evaluation episodes (seed 000, Sec. 2.1 and 3.1).

An evaluation episode picks ``ways`` distinct classes and, inside each class, ``shots`` support and
``queries`` query images, all distinct. Seed 000 evaluates every model on 10,000 such episodes (5-way,
15 queries, 1 and 5 shots). The authors draw them one at a time in a NumPy loop; here all episodes are drawn
at once: a partial Fisher-Yates shuffle vectorised over episodes (a loop over the ``shots + queries``
slots, never over episodes) picks positions in a padded per-class index table
(:class:`studylib.data.samplers.ClassTable`), so sampling 10,000 episodes costs a few dozen tensor ops.

1- and 5-shot share episodes: :func:`sample_episodes` is called with the largest shot count and
:meth:`Episodes.with_shots` keeps the first ``n`` support items of every class. The query set is identical
for every shot count and the 1-shot support is a subset of the 5-shot support, which removes the sampling
noise from 1- vs 5-shot comparisons (the same choice BECLR's evaluation makes, PAPER-NOTES 001).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from studylib.data.base import DataError
from studylib.data.samplers import ClassTable, check_episode

@dataclass(frozen=True)
class Episodes:
    """A batch of ``E`` episodes as index tensors into one split.

    Attributes:
        support: ``[E, ways, shots]`` int64, ``support[e, c]`` are the support images of episode-class ``c``.
        query: ``[E, ways, queries]`` int64, ``query[e, c]`` are the query images of episode-class ``c``.
        classes: ``[E, ways]`` int64, the split's label of episode-class ``c`` (episode-local label = ``c``).
        seed: the seed the episodes were drawn with (for records).
    """

    support: torch.Tensor
    query: torch.Tensor
    classes: torch.Tensor
    seed: int = 0

    def __post_init__(self) -> None:
        e, w = self.classes.shape
        if self.support.shape[:2] != (e, w) or self.query.shape[:2] != (e, w):
            raise ValueError(f"inconsistent episode shapes: support {tuple(self.support.shape)}, query "
                             f"{tuple(self.query.shape)}, classes {tuple(self.classes.shape)}")

    @property
    def num_episodes(self) -> int:
        return int(self.classes.shape[0])

    @property
    def ways(self) -> int:
        return int(self.classes.shape[1])

    @property
    def shots(self) -> int:
        return int(self.support.shape[2])

    @property
    def queries(self) -> int:
        return int(self.query.shape[2])

    def __len__(self) -> int:
        return self.num_episodes

    def with_shots(self, n: int) -> "Episodes":
        """The same episodes with only the first ``n`` support images of each class (queries unchanged)."""
        if not 1 <= n <= self.shots:
            raise ValueError(f"with_shots({n}): these episodes hold {self.shots} shots; sample with "
                             f"shots >= {n} (the largest shot count you evaluate)")
        return Episodes(self.support[:, :, :n], self.query, self.classes, self.seed)

    def __getitem__(self, item: slice) -> "Episodes":
        """Episodes ``item`` (a slice), e.g. a chunk ``episodes[i:i + chunk]``."""
        return Episodes(self.support[item], self.query[item], self.classes[item], self.seed)

    def to(self, device: torch.device | str) -> "Episodes":
        return Episodes(self.support.to(device), self.query.to(device), self.classes.to(device), self.seed)

    def query_labels(self) -> torch.Tensor:
        """``[ways * queries]`` int64 episode-local labels of ``query.reshape(E, -1)`` (class-major)."""
        return torch.arange(self.ways, device=self.query.device).repeat_interleave(self.queries)


#: seeds of different training runs' evaluation episodes are this far apart (any base seed below it is distinct)
EPISODE_SEED_STRIDE = 1_000_003


def episode_seed(base: int, train_seed: int) -> int:
    """The seed of the evaluation episodes of the run trained with ``train_seed`` (issue 19).

    Each training seed is evaluated on its own episodes, so an interval over training seeds carries both sources
    of noise (training and episode sampling), and methods trained with the same seed share their episodes, so a
    difference between methods stays paired within a seed. Training seed 0 keeps the base seed's episodes.
    """
    if not 0 <= base < EPISODE_SEED_STRIDE:
        raise ValueError(f"episode base seed must lie in 0..{EPISODE_SEED_STRIDE - 1}, got {base}")
    if train_seed < 0:
        raise ValueError(f"training seed must be >= 0, got {train_seed}")
    return base + EPISODE_SEED_STRIDE * train_seed


def sample_episodes(labels: torch.Tensor, ways: int, shots: int, queries: int, num_episodes: int,
                    seed: int = 0, what: str = "split", class_names: Sequence[str] | None = None) -> Episodes:
    """Draw ``num_episodes`` episodes at once, reproducibly from ``seed`` (torch CPU generator).

    Per episode: ``ways`` distinct classes chosen uniformly among the classes present in ``labels``; per class
    ``shots + queries`` distinct images chosen uniformly, the first ``shots`` become support. Episodes are
    independent of one another (images recur across episodes, as in the authors' evaluation).

    To evaluate several shot counts on the same episodes, pass the largest and use
    :meth:`Episodes.with_shots`.

    Args:
        labels: ``[N]`` integer labels of the split (any device; sampling runs on the CPU).
        ways, shots, queries: the episode shape; ``shots >= 1`` and ``queries >= 1``.
        num_episodes: ``E``.
        seed: seed of the ``torch.Generator``; the same seed gives the same episodes.
        what: name of the split for error messages.
        class_names: names of the split's classes, for the message naming classes too small for the request.

    Returns:
        :class:`Episodes` with CPU tensors ``support [E, ways, shots]``, ``query [E, ways, queries]``.

    Raises:
        DataError: ``shots < 1`` or ``queries < 1``, the split has fewer than ``ways`` classes, or a class has
            fewer than ``shots + queries`` images (the message names those classes, their counts and the fix;
            see :func:`studylib.data.samplers.check_episode`).
    """
    if labels.dim() != 1 or labels.numel() == 0:
        raise DataError(f"sample_episodes needs a non-empty 1-D label tensor, got shape {tuple(labels.shape)}")
    if shots < 1 or queries < 1:
        raise DataError(f"evaluation episodes need shots >= 1 and queries >= 1 (with no query the accuracy is 0/0, "
                        f"NaN), got shots={shots}, queries={queries}")
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be >= 1, got {num_episodes}")
    if int(labels.min()) < 0:
        raise DataError("labels must be non-negative class ids")
    table = ClassTable(labels)
    check_episode(ways, shots, queries, table.counts, what, class_names)
    present = torch.nonzero(table.counts > 0).squeeze(1)  # [K]
    per = shots + queries
    gen = torch.Generator().manual_seed(int(seed))
    # ways distinct classes per episode, then shots + queries distinct images per (episode, class).
    pick = _distinct(torch.full((num_episodes,), len(present), dtype=torch.long), ways, gen)  # [E, ways]
    classes = present[pick]
    slots = _distinct(table.counts[classes].reshape(-1), per, gen).reshape(num_episodes, ways, per)
    idx = table.table[classes[:, :, None], slots]  # [E, ways, per]
    return Episodes(idx[:, :, :shots].contiguous(), idx[:, :, shots:].contiguous(), classes, int(seed))


def _distinct(counts: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
    """``[R, k]`` int64: row ``r`` holds ``k`` distinct uniform draws from ``0..counts[r]-1``, in random order.

    A partial Fisher-Yates shuffle of the virtual arrays ``arange(counts[r])``, vectorised over rows: step
    ``j`` swaps position ``j`` with a uniform position ``r_j`` in ``j..count-1`` and emits the value landing
    at ``j``. Only the (at most ``k``) swapped positions are stored, so the cost is ``O(R k^2)`` whatever the
    class sizes, instead of ``O(R * max count)`` random keys for a sort/top-k (10x faster for 600-image
    classes). Requires ``k <= counts`` (checked by the caller).
    """
    rows = counts.shape[0]
    u = torch.rand(k, rows, generator=gen, dtype=torch.float64)
    span = counts[None, :] - torch.arange(k)[:, None]  # [k, R] choices left at step j
    target = torch.arange(k)[:, None] + (u * span).long().minimum(span - 1)  # [k, R], r_j in j..count-1
    # Layout [k, R]: reductions over the few swap records run along the long, contiguous row axis.
    # Record i says "position pos[i] now holds value pos[i] + delta[i]"; at most one record per position is
    # live (older ones are voided), so a lookup is a masked sum of deltas (0 when the position is untouched).
    pos = torch.full((k, rows), -1, dtype=torch.long)
    delta = torch.zeros(k, rows, dtype=torch.long)
    out = torch.empty(k, rows, dtype=torch.long)
    for j in range(k):  # k steps, each vectorised over all rows
        r = target[j]
        if j == 0:
            v_r, v_j = r, torch.zeros_like(r)
        else:
            at_r = pos[:j] == r
            v_r = r + (delta[:j] * at_r).sum(0)
            v_j = j + (delta[:j] * (pos[:j] == j)).sum(0)
            pos[:j].masked_fill_(at_r, -1)
        out[j] = v_r
        pos[j], delta[j] = r, v_j - r  # position r now holds the old value at j; position j is final
    return out.t().contiguous()
