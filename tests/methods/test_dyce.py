"""DyCE memory (seed 001, Alg. 2/4, Eq. 1-2): assignment sign, retrieval order, ring buffer, prototypes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from studylib.methods.dyce import DyCE, kmeans
from studylib.numerics.ot import sinkhorn_log


def _unit(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, dim=1)


def test_sinkhorn_assigns_to_nearest_prototype_when_balanced() -> None:
    """Small epsilon + a batch with two members per prototype: the OT assignment is the argmax similarity
    (the authors' distance-as-similarity bug would pick the farthest prototype instead)."""
    g = torch.Generator().manual_seed(0)
    protos = torch.eye(4, 8)
    owner = torch.tensor([2, 0, 3, 1, 1, 0, 2, 3])
    z = _unit(protos[owner] + 0.1 * torch.randn(8, 8, generator=g))
    mem = DyCE(8, size=16, partitions=4, k=2, epsilon=0.01, sinkhorn_iters=50)
    mem.prototypes.copy_(protos)
    assert torch.equal(mem.assign(z), owner)
    assert torch.equal(mem.assign(z), (z @ protos.T).argmax(1))
    # Unbalanced batch: equipartition moves some embeddings away from their nearest prototype.
    z_all0 = _unit(protos[torch.zeros(8, dtype=torch.long)] + 0.1 * torch.randn(8, 8, generator=g))
    assert len(mem.assign(z_all0).unique()) == 4


def test_ring_buffer_wraps_and_initialises() -> None:
    mem = DyCE(3, size=10, partitions=2, k=1, adapt_steps=0)
    batches = [_unit(torch.randn(4, 3)) for _ in range(3)]
    mem.update(batches[0])
    mem.update(batches[1])
    assert int(mem.filled) == 8 and int(mem.ptr) == 8 and not bool(mem.initialised) and not mem.active
    mem.update(batches[2])                       # rows 8, 9, then wrap to 0, 1
    assert int(mem.filled) == 10 and int(mem.ptr) == 2 and bool(mem.initialised) and mem.active
    torch.testing.assert_close(mem.memory[8:10], batches[2][:2])
    torch.testing.assert_close(mem.memory[0:2], batches[2][2:])
    torch.testing.assert_close(mem.memory[2:8], torch.cat(batches[:2])[2:8])
    assert set(mem.labels.tolist()) <= {0, 1}
    with pytest.raises(ValueError, match="does not fit"):
        mem.update(torch.randn(11, 3))


def test_retrieval_before_enqueue_never_returns_own_samples() -> None:
    g = torch.Generator().manual_seed(1)
    mem = DyCE(6, size=32, partitions=4, k=3, variant="dyce")
    for _ in range(4):
        mem.update(torch.randn(8, 6, generator=g))
    assert mem.active
    z = torch.randn(5, 6, generator=g)
    (out,) = mem.step([z])
    assert out.shape == (5 * 4, 6)
    torch.testing.assert_close(out[:5], z)
    neigh = out[5:]
    # The batch is now in memory (it would be everyone's top-1), yet no neighbour is a batch row.
    assert (mem.memory[:, None] - _unit(z)[None]).abs().sum(-1).min(0).values.max() < 1e-6
    assert ((neigh[:, None] - _unit(z)[None]).abs().sum(-1) > 1e-4).all()


def _reference_retrieval(mem: DyCE, z: torch.Tensor) -> torch.Tensor:
    """Per-sample loop: nearest prototype (cosine), top-k inside the partition, global if too small."""
    out = []
    zn = _unit(z)
    for i in range(z.shape[0]):
        sim = mem.memory @ zn[i]
        c = int((_unit(mem.prototypes) @ zn[i]).argmax())
        members = (mem.labels == c).nonzero()[:, 0]
        if mem.variant != "fifo" and len(members) >= mem.k:
            idx = members[sim[members].topk(mem.k).indices]
        else:
            idx = sim.topk(mem.k).indices
        out.append(mem.memory[idx])
    return torch.stack(out)


@pytest.mark.parametrize("variant", ["dyce", "fifo", "kmeans"])
def test_batched_retrieval_matches_loop(variant: str) -> None:
    g = torch.Generator().manual_seed(2)
    mem = DyCE(5, size=40, partitions=6, k=4, variant=variant)
    for _ in range(5):
        mem.update(torch.randn(8, 5, generator=g) + torch.tensor([2.0, 0, 0, 0, 0]))
    if variant != "fifo":  # make one partition too small for k, to exercise the fallback
        mem.labels[mem.labels == 0] = 1
        mem.labels[:2] = 0
        mem.prototypes[0] = mem.memory[0]
    z = torch.randn(12, 5, generator=g)
    z[:3] = 3.0 * mem.memory[0]  # rows whose nearest prototype is the small partition (2 < k members)
    torch.testing.assert_close(mem.retrieve(z), _reference_retrieval(mem, z))
    if variant != "fifo":
        assert (mem.nearest_prototype(z[:3]) == 0).all()


def test_empty_cluster_keeps_prototype_and_mean_update() -> None:
    mem = DyCE(2, size=6, partitions=3, k=1, variant="kmeans", momentum=0.0)
    mem.memory.copy_(_unit(torch.tensor([[1.0, 0.1], [1.0, -0.1], [1.0, 0.2], [0.1, 1.0], [-0.1, 1.0], [0.2, 1.0]])))
    mem.labels.copy_(torch.tensor([0, 0, 0, 1, 1, 1]))
    far = torch.tensor([-1.0, -1.0])
    mem.prototypes.copy_(torch.stack([torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), far]))
    mem.filled.fill_(6)
    mem.initialised.fill_(True)
    z = _unit(torch.tensor([[1.0, 0.05], [0.05, 1.0]]))
    mem.update(z)
    assert mem.labels.tolist() == [0, 1, 0, 1, 1, 1]
    torch.testing.assert_close(mem.prototypes[2], far)                # empty: unchanged
    torch.testing.assert_close(mem.prototypes[0], mem.memory[[0, 2]].mean(0))
    torch.testing.assert_close(mem.prototypes[1], mem.memory[[1, 3, 4, 5]].mean(0))
    # EMA with momentum 0.5
    old = mem.prototypes.clone()
    mem.momentum = 0.5
    mem.update(z)
    torch.testing.assert_close(mem.prototypes[0], 0.5 * old[0] + 0.5 * mem.memory[mem.labels == 0].mean(0))


def test_adaptation_period_and_state_dict() -> None:
    mem = DyCE(4, size=8, partitions=2, k=2, adapt_steps=5)
    z = torch.randn(4, 4)
    for step in range(5):
        assert mem.enhance(z).shape == (4, 4)   # never before adapt_steps updates
        mem.update(torch.randn(4, 4))
    assert mem.enhance(z).shape == (12, 4)
    clone = DyCE(4, size=8, partitions=2, k=2, adapt_steps=5)
    clone.load_state_dict(mem.state_dict())
    torch.testing.assert_close(clone.enhance(z), mem.enhance(z))
    snap = mem.snapshot()
    assert snap["embeddings"].shape == (8, 4) and snap["labels"].shape == (8,) and snap["prototypes"].shape == (2, 4)


def test_kmeans_recovers_separated_clusters() -> None:
    g = torch.Generator().manual_seed(5)
    centres = 10 * torch.eye(3, 4)
    truth = torch.arange(3).repeat_interleave(20)
    x = centres[truth] + 0.1 * torch.randn(60, 4, generator=g)
    found, labels = kmeans(x, 3, iters=20, generator=torch.Generator().manual_seed(0))
    # same partition up to relabelling
    for c in range(3):
        assert len(labels[truth == c].unique()) == 1
    assert len(labels.unique()) == 3


# ---------------------------------------------------------------------------------------------------------------
# The batched, sync-free step (issue 30) against the implementation it replaced, written out here the slow way


def _old_retrieve(mem: DyCE, z: torch.Tensor) -> torch.Tensor:
    """Retrieval before issue 30: a global and a partition top-k per view, bincount, masked_fill."""
    zn = F.normalize(z.float(), dim=1)
    sim = zn @ mem.memory.T
    top_global = sim.topk(mem.k, dim=1).indices
    if mem.variant == "fifo":
        return mem.memory[top_global]
    part = (zn @ F.normalize(mem.prototypes, dim=1).T).argmax(dim=1)
    member = mem.labels[None, :] == part[:, None]
    top_part = sim.masked_fill(~member, float("-inf")).topk(mem.k, dim=1).indices
    counts = torch.bincount(mem.labels.clamp_min(0), minlength=mem.prototypes.shape[0])
    return mem.memory[torch.where((counts[part] >= mem.k)[:, None], top_part, top_global)]


def _old_step(mem: DyCE, views: list[torch.Tensor]) -> list[torch.Tensor]:
    """DyCE.step before issue 30: each view enhanced on its own, then the update with device reads of the
    state, slot-index writes and bincount (on the buffers of ``mem``, a separate copy)."""
    def active() -> bool:
        full = int(mem.filled) >= mem.size
        return full and (mem.variant == "fifo" or bool(mem.initialised)) and int(mem.num_updates) >= mem.adapt_steps

    out = []
    for v in views:
        if active():
            neigh = _old_retrieve(mem, v.detach()).transpose(0, 1).reshape(-1, mem.dim).to(v.dtype)
            v = torch.cat([v, neigh], dim=0)
        out.append(v)
    zn = F.normalize(torch.cat([v.detach() for v in views]).float(), dim=1)

    def write(labels: torch.Tensor | None) -> None:
        slots = (mem.ptr + torch.arange(zn.shape[0])) % mem.size
        mem.memory[slots] = zn
        if labels is not None:
            mem.labels[slots] = labels
        mem.ptr.copy_((mem.ptr + zn.shape[0]) % mem.size)
        mem.filled.copy_(torch.clamp(mem.filled + zn.shape[0], max=mem.size))

    if mem.variant == "fifo":
        write(None)
    elif bool(mem.initialised):
        protos = F.normalize(mem.prototypes.float(), dim=1)
        sim = zn @ protos.T
        if mem.variant == "kmeans":
            labels = sim.argmax(dim=1)
        else:
            n, p = sim.shape
            a, b = torch.full((1, n), 1.0 / n), torch.full((1, p), 1.0 / p)
            labels = sinkhorn_log(-sim[None], a, b, mem.epsilon, mem.sinkhorn_iters, tol=0.0)[0].argmax(dim=1)
        write(labels)
        sums = torch.zeros_like(mem.prototypes).index_add_(0, mem.labels, mem.memory)
        counts = torch.bincount(mem.labels, minlength=mem.prototypes.shape[0]).to(sums.dtype)
        new = mem.momentum * mem.prototypes + (1.0 - mem.momentum) * (sums / counts.clamp_min(1)[:, None])
        mem.prototypes.copy_(torch.where(counts[:, None] > 0, new, mem.prototypes))
    else:
        write(None)
        if int(mem.filled) >= mem.size:
            mem.initialise()
    mem.num_updates += 1
    return out


@pytest.mark.parametrize("variant,momentum", [("dyce", 0.0), ("dyce", 0.5), ("fifo", 0.0), ("kmeans", 0.0)])
def test_batched_step_is_bit_identical_to_the_per_view_implementation(variant: str, momentum: float) -> None:
    """30 steps of two views (3 to 8 rows, below and above the sizes where a matmul's kernel changes): every
    enhanced view and every buffer equal the old implementation's bit for bit on the CPU, through the filling,
    the k-means initialisation, ring wrap-arounds, retrieval and partitions too small for k (global fallback)."""
    g = torch.Generator().manual_seed(7)
    new = DyCE(6, size=40, partitions=12, k=4, variant=variant, momentum=momentum, epsilon=0.05, seed=3)
    old = DyCE(6, size=40, partitions=12, k=4, variant=variant, momentum=momentum, epsilon=0.05, seed=3)
    fallback = 0
    for step in range(30):
        b = 3 + step % 6
        views = [torch.randn(b, 6, generator=g) * (1 + step % 3), torch.randn(b, 6, generator=g)]
        if old.active and variant != "fifo":
            counts = torch.bincount(old.labels.clamp_min(0), minlength=12)
            part = old.nearest_prototype(torch.cat(views))
            fallback += int((counts[part] < old.k).sum())
        want = _old_step(old, views)
        got = new.step(views)
        assert len(got) == len(want) and all(torch.equal(x, y) for x, y in zip(got, want)), step
        for name, buf in old.named_buffers():
            assert torch.equal(getattr(new, name), buf), (step, name)
    assert new.active
    if variant != "fifo":
        assert fallback > 0  # the global fallback was exercised


def test_a_step_reads_nothing_back_from_the_device() -> None:
    """On the ``meta`` device every read of a value (item, bool, int, bincount's size, nonzero) raises: a step
    of an active memory (retrieval, Sinkhorn assignment, enqueue, prototypes) runs there, so it makes no host
    sync on a GPU. The state's mirrors are set through DyCE's own writes."""
    mem = DyCE(8, size=32, partitions=4, k=3).to("meta")
    for name, value in (("filled", 32), ("ptr", 5), ("initialised", 1), ("num_updates", 4)):
        mem._set_scalar(name, value)
    assert mem.active
    views = [torch.empty(6, 8, device="meta"), torch.empty(6, 8, device="meta")]
    out = mem.step(views)
    assert [tuple(o.shape) for o in out] == [(24, 8), (24, 8)] and out[0].device.type == "meta"
    assert mem._scalar("ptr") == 17 and mem._scalar("num_updates") == 5
    with pytest.raises(Exception):  # the check itself: the memory before issue 30 read its state back
        bool(mem.initialised)


def test_host_mirrors_follow_writes_from_outside() -> None:
    """The state mirrors are re-read after load_state_dict, .to() and direct buffer writes."""
    g = torch.Generator().manual_seed(4)
    mem = DyCE(4, size=8, partitions=2, k=2)
    for _ in range(2):
        mem.update(torch.randn(4, 4, generator=g))
    assert mem.full and mem.active
    mem.filled.fill_(3)                      # a direct write
    assert not mem.full and not mem.active
    fresh = DyCE(4, size=8, partitions=2, k=2)
    assert not fresh.active
    fresh.load_state_dict(DyCE(4, size=8, partitions=2, k=2).state_dict())
    assert not fresh.active
    fresh.load_state_dict({**mem.state_dict(), "filled": torch.tensor(8)})
    assert fresh.active and fresh._scalar("ptr") == 0
    moved = fresh.to(torch.float64)          # new buffer tensors for the floating ones; 0-d longs stay
    assert moved.active


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_dyce_step_makes_no_host_sync_on_the_gpu() -> None:
    """CUDA's sync debug mode turns any synchronising call into an error during active steps (the BECLR
    step's three memories made about 30 per step before issue 30: state checks, bincount, Sinkhorn's range)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    mem = DyCE(32, size=256, partitions=8, k=3).cuda()
    for _ in range(5):
        mem.update(torch.randn(64, 32, device="cuda", generator=g))
    assert mem.active
    views = [torch.randn(32, 32, device="cuda", generator=g) for _ in range(2)]
    mem.step(views)  # mirrors read once after .cuda()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            out = mem.step(views)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert out[0].shape == (128, 32)


def test_retrieval_under_bf16_autocast_uses_float32_similarities() -> None:
    """The training loop runs the loss under bf16 autocast on a GPU; the memory's cosines stay float32 there
    (as the assignment's): with 8-bit mantissas the top-k among 512 close neighbours would be reshuffled."""
    g = torch.Generator().manual_seed(9)
    mem = DyCE(64, size=512, partitions=4, k=5)
    base = torch.randn(1, 64, generator=g)
    for _ in range(4):  # a memory of near-duplicates: cosines within a few bf16 steps of each other
        mem.update(base + 0.05 * torch.randn(128, 64, generator=g))
    z = base + 0.05 * torch.randn(16, 64, generator=g)
    want = mem.retrieve(z)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = mem.retrieve(z)
    assert torch.equal(got, want)
