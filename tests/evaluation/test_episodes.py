"""Episode sampling: reproducible, class-disjoint, support/query disjoint, uniform, clear errors."""

from __future__ import annotations

import pytest
import torch

from studylib.data.base import DataError
from studylib.evaluation.episodes import Episodes, _distinct, sample_episodes



def _labels(sizes: list[int], seed: int = 0) -> torch.Tensor:
    """Shuffled labels with the given class sizes (classes not contiguous in the split)."""
    labels = torch.cat([torch.full((s,), k) for k, s in enumerate(sizes)])
    return labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))]


def test_shapes_and_reproducible():
    labels = _labels([30] * 12)
    a = sample_episodes(labels, 5, 3, 4, 200, seed=7)
    b = sample_episodes(labels, 5, 3, 4, 200, seed=7)
    c = sample_episodes(labels, 5, 3, 4, 200, seed=8)
    assert a.support.shape == (200, 5, 3) and a.query.shape == (200, 5, 4) and a.classes.shape == (200, 5)
    assert a.support.dtype == torch.int64 and a.query.dtype == torch.int64
    assert (a.ways, a.shots, a.queries, len(a)) == (5, 3, 4, 200)
    assert torch.equal(a.support, b.support) and torch.equal(a.query, b.query) and torch.equal(a.classes, b.classes)
    assert not torch.equal(a.support, c.support)


def test_episode_invariants_with_unequal_classes():
    sizes = [9, 20, 7, 31, 12, 8, 50, 7]
    labels = _labels(sizes, seed=3)
    ep = sample_episodes(labels, ways=4, shots=2, queries=5, num_episodes=500, seed=1)
    # classes distinct inside each episode
    srt = ep.classes.sort(1).values
    assert (srt[:, 1:] != srt[:, :-1]).all()
    # labels: every support/query image of episode-class c has split label classes[e, c]
    assert torch.equal(labels[ep.support], ep.classes[:, :, None].expand_as(ep.support))
    assert torch.equal(labels[ep.query], ep.classes[:, :, None].expand_as(ep.query))
    # all images of an episode distinct: support and query disjoint, no repeats
    allidx = torch.cat([ep.support.reshape(500, -1), ep.query.reshape(500, -1)], 1).sort(1).values
    assert (allidx[:, 1:] != allidx[:, :-1]).all()
    # query labels are class-major episode-local ids
    assert torch.equal(ep.query_labels(), torch.arange(4).repeat_interleave(5))


def test_class_and_image_choice_uniform():
    labels = _labels([10, 10, 10, 10, 10, 10])
    ep = sample_episodes(labels, ways=3, shots=1, queries=1, num_episodes=6000, seed=0)
    counts = torch.bincount(ep.classes.reshape(-1), minlength=6).double()
    assert ((counts - 3000).abs() < 5 * 3000 ** 0.5).all()  # each class in half the episodes
    imgs = torch.bincount(ep.support.reshape(-1), minlength=60).double()  # each image ~ 3000/10 times
    assert ((imgs - 300).abs() < 5 * 300 ** 0.5).all()


def test_distinct_is_uniform_over_ordered_tuples():
    gen = torch.Generator().manual_seed(0)
    out = _distinct(torch.full((60000,), 4), 2, gen)
    freq = torch.bincount(out[:, 0] * 4 + out[:, 1], minlength=16).double()
    assert freq[[0, 5, 10, 15]].sum() == 0  # never the same element twice
    expected = 60000 / 12
    assert ((freq[freq > 0] - expected).abs() < 5 * expected ** 0.5).all() and (freq > 0).sum() == 12
    full = _distinct(torch.tensor([5, 3, 5]), 3, gen)  # k == count: a permutation of 0..count-1
    assert torch.equal(full[1].sort().values, torch.arange(3))


def test_with_shots_shares_queries():
    labels = _labels([25] * 8)
    ep = sample_episodes(labels, 5, 5, 15, 50, seed=2)
    one = ep.with_shots(1)
    assert isinstance(one, Episodes) and one.shots == 1
    assert torch.equal(one.support, ep.support[:, :, :1]) and torch.equal(one.query, ep.query)
    part = ep[10:20]
    assert torch.equal(part.support, ep.support[10:20]) and len(part) == 10
    with pytest.raises(ValueError, match="hold 5 shots"):
        ep.with_shots(6)


def test_impossible_requests_raise_data_error():
    labels = _labels([10, 10, 10, 4])
    with pytest.raises(DataError, match="5-way episodes need 5 classes but the split has 4"):
        sample_episodes(labels, 5, 1, 1, 10, seed=0)
    with pytest.raises(DataError, match="smallest class of the split has 4"):
        sample_episodes(labels, 2, 1, 4, 10, seed=0)
    with pytest.raises(DataError, match="shots >= 1"):
        sample_episodes(labels, 2, 0, 2, 10, seed=0)


def test_no_query_episodes_are_refused_instead_of_giving_nan():
    labels = _labels([10, 10, 10])
    with pytest.raises(DataError, match=r"queries >= 1 .*got shots=1, queries=0"):
        sample_episodes(labels, 2, 1, 0, 10, seed=0)


def test_too_small_classes_are_named_with_their_counts():
    labels = _labels([20, 1, 20, 20])
    with pytest.raises(DataError, match=r"smallest class of the test split has 1; 1 of its 4 classes holds fewer than 16 "
                                        r"images: 'Greek/alpha' \(1\)\. Fix: a class needs at least 2 images"):
        sample_episodes(labels, 3, 1, 15, 10, what="test split", class_names=["a", "Greek/alpha", "b", "c"])


def test_episode_seed_per_training_seed():
    """Training seed 0 keeps the base seed; different (base, training seed) pairs never share a seed."""
    from studylib.evaluation.episodes import EPISODE_SEED_STRIDE, episode_seed
    assert episode_seed(0, 0) == 0 and episode_seed(7, 0) == 7
    seen = {episode_seed(b, s) for b in (0, 1, 2, EPISODE_SEED_STRIDE - 1) for s in range(5)}
    assert len(seen) == 20
    with pytest.raises(ValueError, match="base seed"):
        episode_seed(EPISODE_SEED_STRIDE, 0)
    with pytest.raises(ValueError, match="training seed"):
        episode_seed(0, -1)
