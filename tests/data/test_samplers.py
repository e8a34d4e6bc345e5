"""Samplers: episode shapes, roles, with/without replacement, epoch coverage, determinism, impossible requests."""

from __future__ import annotations

import pytest
import torch

from studylib.data.base import DataError
from studylib.data.samplers import (EpisodicSampler, FixedCompositionSampler, ReplacementSampler,
                                    ShuffledSampler)


def _labels(counts):
    return torch.cat([torch.full((c,), k) for k, c in enumerate(counts)])[torch.randperm(sum(counts),
                                                                                     generator=torch.Generator().manual_seed(1))]


def test_episodic_shape_roles_and_classes():
    labels = _labels([10] * 12)
    s = EpisodicSampler(labels, ways=5, shots=2, queries=3, episodes_per_epoch=20, seed=3)
    for b in s.epoch(0):
        assert b.indices.shape == (25,) and b.indices.unique().numel() == 25
        got = labels[b.indices].view(5, 5)
        assert (got == got[:, :1]).all()  # class-major: one class per row
        assert got[:, 0].unique().numel() == 5
        assert b.support.view(5, 5)[:, :2].all() and not b.support.view(5, 5)[:, 2:].any()
        assert torch.equal(b.labels, torch.arange(5).repeat_interleave(5))


def test_deterministic_per_epoch_and_different_across_epochs():
    labels = _labels([8] * 10)
    s = EpisodicSampler(labels, 4, 1, 2, 5, seed=0)
    a, b, c = s.epoch(2), s.epoch(2), s.epoch(3)
    assert all(torch.equal(x.indices, y.indices) for x, y in zip(a, b))
    assert not all(torch.equal(x.indices, y.indices) for x, y in zip(a, c))


def test_without_replacement_never_repeats_in_epoch():
    labels = _labels([12] * 10)
    s = EpisodicSampler(labels, 5, 2, 2, episodes_per_epoch=1000, replacement=False, seed=0)
    batches = s.epoch(0)
    idx = torch.cat([b.indices for b in batches])
    assert idx.unique().numel() == idx.numel()
    assert len(batches) == 120 // 20  # every image exactly once: 10 classes x 3 chunks of 4 / 5 ways
    s2 = EpisodicSampler(labels, 5, 2, 2, episodes_per_epoch=200, replacement=True, seed=0)
    idx2 = torch.cat([b.indices for b in s2.epoch(0)])
    assert idx2.unique().numel() < idx2.numel()  # with replacement images recur


def test_fixed_composition_has_no_roles():
    labels = _labels([6] * 8)
    s = FixedCompositionSampler(labels, ways=4, per_class=3, batches_per_epoch=3)
    b = s.epoch(0)[0]
    assert b.support is None and b.indices.numel() == 12 and labels[b.indices].unique().numel() == 4


def test_shuffled_visits_every_image_once():
    s = ShuffledSampler(100, 10, labels=torch.arange(100) % 7, seed=0)
    idx = torch.cat([b.indices for b in s.epoch(0)])
    assert torch.equal(idx.sort().values, torch.arange(100))
    assert torch.equal(s.epoch(0)[0].labels, s.epoch(0)[0].indices % 7)


def test_replacement_batches_are_independent_and_distinct_within():
    s = ReplacementSampler(50, 20, batches_per_epoch=10, seed=0)
    batches = s.epoch(0)
    assert len(batches) == 10 and all(b.indices.unique().numel() == 20 for b in batches)
    assert all(b.labels is None for b in batches)
    idx = torch.cat([b.indices for b in batches])
    assert idx.unique().numel() < idx.numel()


def test_impossible_requests_fail_with_numbers():
    labels = _labels([5, 5, 3])
    with pytest.raises(DataError, match=r"4-way episodes need 4 classes but the split has 3"):
        EpisodicSampler(labels, 4, 1, 1, 1)
    with pytest.raises(DataError, match=r"shots \+ queries = 1 \+ 3 = 4 .* smallest class of the split has 3"):
        EpisodicSampler(labels, 2, 1, 3, 1)
    with pytest.raises(DataError, match=r"batch_size=60 must lie in 1..13"):
        ShuffledSampler(13, 60)


def test_a_one_image_class_is_named_and_the_fix_is_not_a_nan_episode():
    """A class with 1 image can never give 1 support + 1 query: the message names it and never suggests
    shots + queries <= 1 (which would mean an episode without queries, a 0/0 accuracy)."""
    counts = [6, 6, 1, 6, 3]
    names = ["ant", "bee", "cat", "dog", "eel"]
    with pytest.raises(DataError) as info:
        EpisodicSampler(_labels(counts), 2, 1, 3, 1, what="test split x/test", class_names=names)
    msg = str(info.value)
    assert "smallest class of the test split x/test has 1" in msg
    assert "2 of its 5 classes hold fewer than 4 images: 'cat' (1), 'eel' (3)" in msg
    assert "lowering shots or queries cannot help" in msg and "at most 1" not in msg
    # Without 1-image classes the fix is to lower shots + queries to the smallest class, keeping both >= 1.
    with pytest.raises(DataError, match=r"'eel' \(3\)\. Fix: lower shots or queries so that they sum to at most 3 "
                                        r"\(keeping shots >= 1 and queries >= 1\)"):
        EpisodicSampler(_labels([6, 6, 3]), 2, 1, 3, 1, class_names=["a", "b", "eel"])


def test_too_small_classes_are_listed_first_few_then_counted():
    counts = [9] * 3 + [2] * 8
    with pytest.raises(DataError, match=r"8 of its 11 classes hold fewer than 5 images: class 3 \(2\), class 4 \(2\), "
                                        r"class 5 \(2\), class 6 \(2\), class 7 \(2\) and 3 more\."):
        EpisodicSampler(_labels(counts), 3, 2, 3, 1)


@pytest.mark.parametrize("shots,queries,missing", [(0, 5, "shots"), (1, 0, "queries")])
def test_episodes_need_a_support_and_a_query_per_class(shots, queries, missing):
    with pytest.raises(DataError, match=rf"at least one support and one query image per class .*set {missing} to "
                                        rf"at least 1"):
        EpisodicSampler(_labels([10] * 5), 3, shots, queries, 1)


def test_fixed_composition_needs_a_positive_per_image():
    with pytest.raises(DataError, match=r"at least 2 images per class"):
        FixedCompositionSampler(_labels([10] * 5), ways=4, per_class=1, batches_per_epoch=1)
