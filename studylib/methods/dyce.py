"""DyCE: BECLR's dynamic clustered memory (seed 001, Sec. 4.1, Alg. 2 and 4, Eq. 1-2, Appendix A).

A ring buffer of the ``M`` most recent embeddings (both views enqueued), split into ``P`` partitions with
prototypes. Two paths (Fig. 3):

(i)  batch enhancement: each embedding ``z_i`` picks its nearest prototype (cosine) and the ``k`` most similar
     memory members of that partition, ``Y_i``; the enhanced batch is ``[Z, Y_1..Y_k]`` (slot-major:
     rows ``j*B .. (j+1)*B-1`` hold the ``j``-th neighbour of every row, ``j = 0`` the batch itself).
     Active only once the memory is full and ``adapt_steps`` updates have passed (adaptation period).
(ii) memory update: equipartitioned assignment of the batch to the prototypes by entropic optimal transport
     (Eq. 1-2, Sinkhorn), enqueue (the ``2B`` oldest rows are overwritten), prototype update.

Choices, where the authors' code differs or the paper is silent (``shared/PAPER-NOTES.md``, 001):

* Memory rows are stored L2-normalised; all similarities are cosines (prototypes are normalised before
  use). The loss that consumes the neighbours is cosine-based, so nothing is lost. Nearest prototype by
  cosine is the paper's Euclidean nearest prototype for unit vectors.
* The Sinkhorn input is the *similarity* (cost = ``-cos``): the authors feed Euclidean *distances* as if they
  were similarities, which sends embeddings to their farthest prototypes. Explicit ``epsilon`` (default 0.05,
  SwAV's) instead of the code's 1e-5, which overflows and is silently raised; the log-domain solver cannot
  overflow. ``sinkhorn_iters`` (default 10) fixed iterations, uniform marginals ``1/2B`` and ``1/P``; each
  embedding's partition is the argmax of its row of the plan.
* Retrieval happens BEFORE the current batch is enqueued (the code enqueues first, so a sample can retrieve
  itself). Neighbours are detached copies of memory rows.
* If the chosen partition holds fewer than ``k`` members, the global top-``k`` over the whole memory is used
  for that row (the code's fallback, done batched here).
* Prototypes: ``gamma <- momentum * gamma + (1 - momentum) * mean(members)`` over the whole memory after the
  enqueue (the paper says EMA, the code uses momentum 0 = plain mean; default 0 here, set it explicitly).
  A partition with no members keeps its previous prototype (the code misaligns counts in that case).
* Initialisation: the first time the memory is full, k-means (Lloyd, k-means++ seeding from a
  seeded generator, ``kmeans_iters`` iterations) on the normalised memory sets partitions and prototypes,
  once (the paper; the code re-clusters periodically).
* Variants (Table 6): ``"dyce"`` as above; ``"fifo"``: plain FIFO memory, no partitions, retrieval = global
  top-``k``; ``"kmeans"``: partitions from k-means only, each new embedding joins its nearest prototype
  (online k-means step) instead of the optimal-transport assignment.

Everything is batched on the memory's device: no per-sample or per-partition Python loop, and no host sync
per step. The scalar state (``filled``, ``ptr``, ``initialised``, ``num_updates``) is kept in buffers for
``state_dict`` and mirrored on the host (:meth:`DyCE._scalar`: a buffer is read back only after something else
changed it, e.g. ``load_state_dict``); partition sizes are counted with ``index_add_`` (CUDA's ``bincount``
reads its input's maximum back to size its output); the Sinkhorn assignment runs its fixed iterations with the
domain chosen on the device (:func:`studylib.numerics.ot.sinkhorn_log` with ``host_sync=False``). :meth:`step`
enhances all views from one normalisation and one masked top-``k``; per view only the similarity matmul runs
separately, so every result is bit-identical to the per-view computation on the CPU (tested against the loop
it replaced, ``tests/methods/test_dyce.py``). The one-off k-means initialisation has the k-means++ seeding
loop (``P`` sequential draws, once per run).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from studylib.numerics.guards import autocast_off
from studylib.numerics.ot import sinkhorn_log

VARIANTS = ("dyce", "fifo", "kmeans")


def kmeans(x: torch.Tensor, k: int, iters: int = 30, generator: torch.Generator | None = None
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Lloyd's k-means (squared Euclidean) on the device of ``x``.

    Written here rather than taken from scikit-learn because it runs on the GPU without copying the memory to
    the CPU. Initial centres by k-means++ (D^2 sampling) from ``generator`` (a CPU generator; only ``k``
    uniform numbers cross devices, no host sync per centre). An emptied cluster keeps its previous centre.

    Args:
        x: ``[N, D]`` points, ``N >= k``.
        k: number of clusters.
        iters: Lloyd iterations.
        generator: CPU ``torch.Generator`` for the initial centres.

    Returns:
        ``centres [k, D]`` and ``labels [N]`` (int64).
    """
    n = x.shape[0]
    if n < k:
        raise ValueError(f"k-means needs at least k={k} points, got {n}; lower the number of partitions")
    # k-means++ seeding: uniforms drawn on the CPU once, D^2 sampling by inverse CDF on the device.
    uniforms = torch.rand(k, generator=generator, dtype=torch.float64).to(x.device)
    first = int(torch.randint(n, (1,), generator=generator))
    centres = x.new_empty(k, x.shape[1])
    centres[0] = x[first]
    d2 = ((x - x[first]) ** 2).sum(1)
    for j in range(1, k):
        cdf = torch.cumsum(d2.double(), 0)
        pick = torch.searchsorted(cdf, (uniforms[j] * cdf[-1]).reshape(1)).clamp_max(n - 1)
        centres[j] = x[pick[0]]
        d2 = torch.minimum(d2, ((x - centres[j]) ** 2).sum(1))
    labels = torch.zeros(n, dtype=torch.long, device=x.device)
    for _ in range(iters):
        d = (x * x).sum(1, keepdim=True) - 2 * x @ centres.T + (centres * centres).sum(1)[None, :]
        labels = d.argmin(dim=1)
        sums = torch.zeros_like(centres).index_add_(0, labels, x)
        counts = _counts(labels, k).to(x.dtype)
        centres = torch.where(counts[:, None] > 0, sums / counts.clamp_min(1)[:, None], centres)
    return centres, labels


class DyCE(nn.Module):
    """Dynamic clustered memory; all state lives in buffers, so it checkpoints with ``state_dict``.

    Args:
        dim: embedding dimension ``d``.
        size: memory size ``M`` (a multiple of nothing in particular; ``2B <= M`` is required per update).
        partitions: number of partitions/prototypes ``P`` (ignored by ``"fifo"``).
        k: neighbours appended per embedding.
        epsilon: Sinkhorn regularisation on the cosine cost.
        sinkhorn_iters: Sinkhorn iterations of the assignment.
        momentum: prototype EMA momentum (0 = plain mean of the members).
        variant: ``"dyce"``, ``"fifo"`` or ``"kmeans"`` (Table 6).
        adapt_steps: number of :meth:`update` calls before enhancement starts (adaptation period).
        kmeans_iters: Lloyd iterations of the initial clustering.
        seed: seed of the k-means initialisation.
    """

    def __init__(self, dim: int, size: int = 8192, partitions: int = 200, k: int = 3, epsilon: float = 0.05,
                 sinkhorn_iters: int = 10, momentum: float = 0.0, variant: str = "dyce", adapt_steps: int = 0,
                 kmeans_iters: int = 30, seed: int = 0) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"unknown DyCE variant {variant!r}; choose one of {VARIANTS}")
        if variant != "fifo" and not 1 <= partitions <= size:
            raise ValueError(f"partitions must lie in 1..size={size}, got {partitions}")
        if not 1 <= k <= size:
            raise ValueError(f"k must lie in 1..size={size}, got {k}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must lie in [0, 1), got {momentum}")
        if epsilon <= 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon}")
        self.dim, self.size, self.partitions, self.k = dim, size, partitions, k
        self.epsilon, self.sinkhorn_iters, self.momentum = epsilon, sinkhorn_iters, momentum
        self.variant, self.adapt_steps, self.kmeans_iters, self.seed = variant, adapt_steps, kmeans_iters, seed
        p = partitions if variant != "fifo" else 1
        self.register_buffer("memory", torch.zeros(size, dim))
        self.register_buffer("labels", torch.full((size,), -1, dtype=torch.long))
        self.register_buffer("prototypes", torch.zeros(p, dim))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))
        self.register_buffer("filled", torch.zeros((), dtype=torch.long))
        self.register_buffer("initialised", torch.zeros((), dtype=torch.bool))
        self.register_buffer("num_updates", torch.zeros((), dtype=torch.long))
        self._host: dict[str, tuple[torch.Tensor, int, int]] = {}  # host mirrors of the 0-d buffers (_scalar)

    # ------------------------------------------------------------------ state
    def _scalar(self, name: str) -> int:
        """The value of the 0-d buffer ``name`` from its host mirror; read from the device (one host sync) only
        when the buffer is another tensor or was changed in place since this module last wrote it
        (``load_state_dict``, ``.to()``, a direct write)."""
        buf = getattr(self, name)
        seen = self._host.get(name)
        if seen is None or seen[0] is not buf or seen[1] != buf._version:
            seen = (buf, buf._version, int(buf))
            self._host[name] = seen
        return seen[2]

    def _set_scalar(self, name: str, value: int) -> None:
        """Write the 0-d buffer ``name`` (on its device, no host sync) and its host mirror."""
        buf = getattr(self, name)
        buf.fill_(value)
        self._host[name] = (buf, buf._version, int(value))

    @property
    def full(self) -> bool:
        return self._scalar("filled") >= self.size

    @property
    def active(self) -> bool:
        """Whether path (i) enhances batches: memory full (and clustered) and adaptation period over."""
        ready = self.full and (self.variant == "fifo" or bool(self._scalar("initialised")))
        return ready and self._scalar("num_updates") >= self.adapt_steps

    # ------------------------------------------------------------------ path (i)
    @torch.no_grad()
    def nearest_prototype(self, z: torch.Tensor) -> torch.Tensor:
        """``[B, D] -> [B]`` index of the most cosine-similar prototype."""
        return (F.normalize(z.float(), dim=1) @ F.normalize(self.prototypes, dim=1).T).argmax(dim=1)

    @torch.no_grad()
    def retrieve(self, z: torch.Tensor) -> torch.Tensor:
        """Top-``k`` memory neighbours of each row, from the nearest partition (``"fifo"``: the whole memory).

        Falls back to the global top-``k`` for rows whose partition has fewer than ``k`` members.

        Args:
            z: ``[B, D]`` embeddings (any scale).

        Returns:
            ``[B, k, D]`` memory rows (unit norm, detached), most similar first.
        """
        return self._retrieve([F.normalize(z.float(), dim=1)])

    def _retrieve(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """:meth:`retrieve` of the rows of ``parts`` (unit-norm float ``[B_j, D]`` each) stacked: ``[sum B_j, k, D]``.

        Each part's similarities are their own matmul (a matmul's rounding may depend on its row count, so
        this equals retrieving each part alone, bit for bit); the masks and the top-``k`` run once for all.
        One top-``k`` serves both cases: a row whose partition holds fewer than ``k`` members is masked with
        all-True, so its top-``k`` is the global one.
        """
        rows = sum(int(p.shape[0]) for p in parts)
        sim = parts[0].new_empty(rows, self.size)                            # [B, M]
        protos = None if self.variant == "fifo" else F.normalize(self.prototypes, dim=1)
        part_ids, start = [], 0
        # float32 similarities, as in assign (bf16 autocast would round cosines to 8-bit mantissas)
        with autocast_off(sim.device.type):
            for zn in parts:
                end = start + int(zn.shape[0])
                torch.mm(zn, self.memory.T, out=sim[start:end])
                if protos is not None:
                    part_ids.append((zn @ protos.T).argmax(dim=1))
                start = end
        if protos is None:
            idx = sim.topk(self.k, dim=1).indices
        else:
            part = torch.cat(part_ids)                                       # [B] nearest prototype
            counts = _counts(self.labels.clamp_min(0), protos.shape[0])
            allowed = (self.labels[None, :] == part[:, None]) | (counts[part] < self.k)[:, None]
            idx = torch.where(allowed, sim, float("-inf")).topk(self.k, dim=1).indices
        return self.memory[idx]

    @torch.no_grad()
    def neighbours(self, z: torch.Tensor) -> torch.Tensor:
        """``[B, D] -> [B*k, D]`` slot-major neighbours (row ``j*B + i`` = ``j``-th neighbour of ``z_i``)."""
        return _slot_major(self.retrieve(z)).to(z.dtype)

    def enhance(self, z: torch.Tensor) -> torch.Tensor:
        """Path (i): ``[B, D] -> [B(1+k), D]`` = ``[z; neighbours]`` once active, else ``z`` unchanged.

        Reads the memory as it is (call before :meth:`update` with the same batch). Gradients flow through
        ``z`` only; the neighbours are detached.
        """
        if not self.active:
            return z
        return torch.cat([z, self.neighbours(z.detach())], dim=0)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.enhance(z)

    # ------------------------------------------------------------------ path (ii)
    @torch.no_grad()
    def assign(self, z: torch.Tensor) -> torch.Tensor:
        """Partition of each new embedding: Sinkhorn argmax (``"dyce"``) or nearest prototype (``"kmeans"``).

        Args:
            z: ``[N, D]`` unit-norm embeddings.

        Returns:
            ``[N]`` int64 partition indices.
        """
        # float32 with autocast off: under bf16 autocast the similarities (and so the Sinkhorn plan's argmax)
        # would carry 8-bit mantissas (issue 9); the solver itself also runs in float32.
        with autocast_off(z.device.type):
            protos = F.normalize(self.prototypes.float(), dim=1)
            sim = z.float() @ protos.T                                       # [N, P]
        if self.variant == "kmeans":
            return sim.argmax(dim=1)
        n, p = sim.shape
        a = torch.full((1, n), 1.0 / n, device=z.device, dtype=sim.dtype)
        b = torch.full((1, p), 1.0 / p, device=z.device, dtype=sim.dtype)
        # on the CPU a host read is free: the solver then runs only the domain it picks
        plan = sinkhorn_log(-sim[None], a, b, self.epsilon, self.sinkhorn_iters, tol=0.0,
                            host_sync=z.device.type == "cpu")[0]             # float32
        return plan.argmax(dim=1)

    @torch.no_grad()
    def _write(self, z: torch.Tensor, labels: torch.Tensor | None) -> None:
        """Enqueue ``z`` at the ring pointer (one or two slices; the pointer lives on the host)."""
        n, ptr = z.shape[0], self._scalar("ptr")
        first = min(n, self.size - ptr)
        self.memory[ptr:ptr + first] = z[:first]
        self.memory[:n - first] = z[first:]
        if labels is not None:
            self.labels[ptr:ptr + first] = labels[:first]
            self.labels[:n - first] = labels[first:]
        self._set_scalar("ptr", (ptr + n) % self.size)
        self._set_scalar("filled", min(self._scalar("filled") + n, self.size))

    @torch.no_grad()
    def _update_prototypes(self) -> None:
        p = self.prototypes.shape[0]
        sums = torch.zeros_like(self.prototypes).index_add_(0, self.labels, self.memory)
        counts = _counts(self.labels, p).to(sums.dtype)
        mean = sums / counts.clamp_min(1)[:, None]
        new = self.momentum * self.prototypes + (1.0 - self.momentum) * mean
        self.prototypes.copy_(torch.where(counts[:, None] > 0, new, self.prototypes))

    @torch.no_grad()
    def initialise(self) -> None:
        """k-means on the (full, normalised) memory -> partitions and prototypes (done once, automatically)."""
        gen = torch.Generator().manual_seed(self.seed)
        centres, labels = kmeans(self.memory, self.prototypes.shape[0], self.kmeans_iters, gen)
        self.prototypes.copy_(centres)
        self.labels.copy_(labels)
        self._set_scalar("initialised", 1)

    @torch.no_grad()
    def update(self, z: torch.Tensor) -> None:
        """Path (ii): enqueue ``z [N, D]`` (both views, ``N = 2B <= M``), assigning and updating partitions.

        Before the memory is first full the rows are only enqueued; when it becomes full the partitions are
        initialised by k-means. Afterwards each batch is assigned (Sinkhorn / nearest prototype), overwrites
        the ``N`` oldest rows, and the prototypes are recomputed from the members.
        """
        if z.dim() != 2 or z.shape[1] != self.dim:
            raise ValueError(f"DyCE.update expects [N, {self.dim}] embeddings, got {tuple(z.shape)}")
        self._update(F.normalize(z.detach().float(), dim=1))

    def _update(self, zn: torch.Tensor) -> None:
        """:meth:`update` of unit-norm float ``zn``."""
        if zn.shape[0] > self.size:
            raise ValueError(f"a batch of {zn.shape[0]} embeddings does not fit a memory of size {self.size}; "
                             f"raise the memory size or lower the batch size")
        if self.variant == "fifo":
            self._write(zn, None)
        elif self._scalar("initialised"):
            self._write(zn, self.assign(zn))
            self._update_prototypes()
        else:
            self._write(zn, None)
            if self.full:
                self.initialise()
        self._set_scalar("num_updates", self._scalar("num_updates") + 1)

    @torch.no_grad()
    def _neighbours_of(self, views: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The unit-norm float views and, once active, each view's ``[B*k, D]`` slot-major neighbours."""
        normed = [F.normalize(v.detach().float(), dim=1) for v in views]
        if not self.active:
            return normed, []
        found = self._retrieve(normed).split([int(v.shape[0]) for v in views])
        return normed, [_slot_major(n).to(v.dtype) for n, v in zip(found, views)]

    def step(self, views: list[torch.Tensor]) -> list[torch.Tensor]:
        """Enhance every view with the memory as it stands, then enqueue all views (Alg. 2 order, fixed).

        The same as ``[self.enhance(v) for v in views]`` followed by ``self.update(torch.cat(views))``, with
        one normalisation and one top-``k`` for all views.

        Args:
            views: list of ``[B, D]`` embeddings (e.g. the two augmented views).

        Returns:
            The enhanced views, ``[B(1+k), D]`` each once active, else unchanged.
        """
        if any(v.dim() != 2 or v.shape[1] != self.dim for v in views):
            raise ValueError(f"DyCE.step expects [B, {self.dim}] views, got {[tuple(v.shape) for v in views]}")
        normed, neigh = self._neighbours_of(views)
        out = [torch.cat([v, n], dim=0) for v, n in zip(views, neigh)] if neigh else list(views)
        self._update(torch.cat(normed, dim=0))
        return out

    @torch.no_grad()
    def snapshot(self) -> dict[str, torch.Tensor]:
        """CPU copies for figures: ``embeddings [F, D]`` (filled rows), ``labels [F]`` (-1 unassigned),
        ``prototypes [P, D]``."""
        f = self._scalar("filled")
        return {"embeddings": self.memory[:f].cpu().clone(), "labels": self.labels[:f].cpu().clone(),
                "prototypes": self.prototypes.cpu().clone()}

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, size={self.size}, partitions={self.partitions}, k={self.k}, "
                f"epsilon={self.epsilon}, momentum={self.momentum}, variant={self.variant!r}, "
                f"adapt_steps={self.adapt_steps}")


def _counts(labels: torch.Tensor, n: int) -> torch.Tensor:
    """``torch.bincount(labels, minlength=n)`` for labels in ``0..n-1`` without a host sync (on CUDA,
    ``bincount`` reads the maximum label back to size its output)."""
    return torch.zeros(n, dtype=torch.long, device=labels.device).index_add_(0, labels, torch.ones_like(labels))


def _slot_major(found: torch.Tensor) -> torch.Tensor:
    """``[B, k, D] -> [B*k, D]`` with row ``j*B + i`` the ``j``-th neighbour of row ``i``."""
    return found.transpose(0, 1).reshape(-1, found.shape[-1])


__all__ = ["DyCE", "kmeans", "VARIANTS"]
