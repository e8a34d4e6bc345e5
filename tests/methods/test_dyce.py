"""DyCE memory (seed 001, Alg. 2/4, Eq. 1-2): assignment sign, retrieval order, ring buffer, prototypes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from studylib.methods.dyce import DyCE, kmeans


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
