"""The embedded CIFAR-FS-regime set (studylib.data.synthfs): counts, splits, determinism, cache, content."""

from __future__ import annotations

import colorsys
import zipfile

import numpy as np
import pytest
import torch

import studylib.data.synthfs as S


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("synthfs-cache")


@pytest.fixture(scope="module")
def small(cache):
    return S.load_synthfs(instances=20, cache_dir=cache)


def test_regime_counts_are_cifar_fs():
    # CIFAR-FS (Bertinetto et al.): 100 CIFAR-100 classes of 600 images, 64/16/20 classes, 32 px;
    # FC100 (Oreshkin et al.): 20 superclasses of 5 classes, 12/4/4 superclasses.
    assert (S.NUM_CLASSES, S.INSTANCES, S.SIZE) == (100, 600, 32)
    assert S.RANDOM_COUNTS == (64, 16, 20) and sum(S.RANDOM_COUNTS) == S.NUM_CLASSES
    assert S.SUPERCLASS_COUNTS == (12, 4, 4) and S.NUM_SUPERCLASSES * S.PER_SUPERCLASS == S.NUM_CLASSES
    import inspect
    assert inspect.signature(S.load_synthfs).parameters["instances"].default == 600


def test_split_shapes_and_counts(small):
    assert {k: (v.num_classes, len(v)) for k, v in small.splits.items()} == {
        "train": (64, 64 * 20), "val": (16, 16 * 20), "test": (20, 20 * 20)}
    for sp in small.splits.values():
        assert sp.images.dtype == torch.uint8 and sp.images.shape[1:] == (3, 32, 32)
        assert sp.class_counts().tolist() == [20] * sp.num_classes


@pytest.mark.parametrize("split", S.SPLITS)
def test_class_disjoint_splits(cache, split):
    ds = S.load_synthfs(instances=20, split=split, cache_dir=cache)
    names = [set(ds[s].class_names) for s in ("train", "val", "test")]
    assert not (names[0] & names[1] or names[0] & names[2] or names[1] & names[2])
    assert len(names[0] | names[1] | names[2]) == 100
    if split == "superclass":
        sup = [set(ds[s].superclass.tolist()) for s in ("train", "val", "test")]
        assert [len(x) for x in sup] == [12, 4, 4]
        assert not (sup[0] & sup[1] or sup[0] & sup[2] or sup[1] & sup[2])
        assert [ds[s].num_classes for s in ("train", "val", "test")] == [60, 20, 20]


def test_deterministic_and_classes_independent(small, cache, tmp_path):
    again = S.load_synthfs(instances=20, cache_dir=tmp_path)  # a fresh generation in another folder
    for s in ("train", "val", "test"):
        assert torch.equal(again[s].images, small[s].images)
    # a class is drawn from its own generator: rendering it alone gives the same pixels
    full = S.generate(seed=0, instances=20, classes=3)
    alone = S._render_class(0, 2, 20, 32).mul(255).round().to(torch.uint8).numpy()
    assert np.array_equal(full[40:60], alone)
    other_seed = S.generate(seed=1, instances=20, classes=1)
    assert not np.array_equal(full[:20], other_seed)


def test_cache_hit_damage_and_version_bump(cache, monkeypatch):
    ds = S.load_synthfs(instances=20, cache_dir=cache)
    assert ds.info["cache_hit"]
    path = ds.info["cache_file"]
    data = open(path, "rb").read()
    with open(path, "wb") as fh:  # a truncated file (a kill mid-copy): regenerated, not a BadZipFile
        fh.write(data[: len(data) // 2])
    with pytest.raises(zipfile.BadZipFile):
        np.load(path)
    healed = S.load_synthfs(instances=20, cache_dir=cache)
    assert not healed.info["cache_hit"] and torch.equal(healed["train"].images, ds["train"].images)
    monkeypatch.setattr(S, "GENERATOR_VERSION", "test-bump")
    bumped = S.load_synthfs(instances=20, cache_dir=cache)
    assert not bumped.info["cache_hit"] and bumped.info["cache_file"] != path


def test_hsv_matches_colorsys():
    g = torch.Generator().manual_seed(0)
    h, s, v = (torch.rand(200, generator=g, dtype=torch.float64) for _ in range(3))
    ours = S._hsv_to_rgb(h, s, v).numpy()
    ref = np.array([colorsys.hsv_to_rgb(*x) for x in zip(h.tolist(), s.tolist(), v.tolist())])
    assert np.allclose(ours, ref, atol=1e-12)


def test_classes_carry_signal_and_variation(small):
    """Raw-pixel nearest class mean (5 images per class as support) beats chance on 5-way episodes by far,
    and instances of a class are not copies of each other."""
    x = small["test"].images.double().flatten(1) / 255
    y = small["test"].labels
    g = torch.Generator().manual_seed(0)
    correct = total = 0
    for _ in range(200):
        cls = torch.randperm(20, generator=g)[:5]
        support, query = [], []
        for c in cls:
            idx = torch.nonzero(y == c).flatten()[torch.randperm(20, generator=g)]
            support.append(x[idx[:5]].mean(0))
            query.append(x[idx[5:]])
        protos = torch.stack(support)
        for k, q in enumerate(query):
            pred = torch.cdist(q, protos).argmin(1)
            correct += int((pred == k).sum())
            total += len(q)
    assert correct / total > 0.35  # chance is 0.2
    per_class = x[y == 0]
    assert torch.cdist(per_class, per_class).fill_diagonal_(1e9).min() > 0.5


def test_bad_requests(cache):
    with pytest.raises(ValueError, match="unknown synthfs split"):
        S.load_synthfs(split="alphabet", cache_dir=cache)
    with pytest.raises(ValueError, match="at least 2 images"):
        S.load_synthfs(instances=1, cache_dir=cache)


@pytest.mark.parametrize("chunk", [1, 7, 40])
def test_chunked_painting_gives_the_same_values_as_painting_all_instances_at_once(monkeypatch, chunk):
    # the painting runs _CHUNK instances at a time for speed; every per-pixel step is elementwise, so any chunk
    # size must give the float64 image of painting all instances in one pass, bit for bit
    monkeypatch.setattr(S, "_CHUNK", 10_000)
    whole = [S._render_class(0, k, 45, 32) for k in (0, 7, 93)]
    monkeypatch.setattr(S, "_CHUNK", chunk)
    for k, want in zip((0, 7, 93), whole):
        assert torch.equal(S._render_class(0, k, 45, 32), want)
