"""Stand-ins of the real data sets: written in the real on-disk formats and read back by the real readers."""

from __future__ import annotations

import os

import pytest

import studylib.data.standins as SI
from studylib.data import load_dataset
from studylib.data.base import DataError
from studylib.data.readers import READERS


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setattr(SI, "COUNTS", (30, 5, 6))
    monkeypatch.setattr(SI, "PER_CLASS", 4)
    monkeypatch.setattr(SI, "EVAL_PER_CLASS", 3)
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path))
    return tmp_path


SIZES = {"omniglot": 28, "cifar_fs": 32, "fc100": 32}


@pytest.mark.parametrize("fmt", [f for f in SI.FORMATS if f != "fc100"])
def test_each_standin_reads_back_through_its_reader(tiny, fmt):
    name = SI.FORMATS[fmt][0]
    root = SI.standin_root(fmt)
    opts = {"split": "random"} if name == "folder" else {}  # the folder stand-in is <root>/<class>/<image>
    ds = READERS[name](str(root), size=SIZES.get(name, 84), cache=False, **opts)
    stats = ds.stats()
    if name == "folder":  # 25 classes of 20, a seeded class-disjoint split
        assert sum(stats[s]["classes"] for s in ("train", "val", "test")) == 25
        assert {s["min_per_class"] for s in stats.values()} == {20}
    elif name == "omniglot":  # 14 alphabets x 10 characters, vinyals proportions, 20 drawers
        assert sum(s["classes"] for s in stats.values()) == 140
        assert {s["min_per_class"] for s in stats.values()} == {20}
    elif name == "cub":  # 20 classes split 50/25/25 by class id
        assert [stats[s]["classes"] for s in ("train", "val", "test")] == [10, 5, 5]
    else:
        assert [stats[s]["classes"] for s in ("train", "val", "test")] == [30, 5, 6]
        assert [stats[s]["min_per_class"] for s in ("train", "val", "test")] == [4, 3, 3]  # evaluation splits smaller
    assert ds["train"].images.shape[-1] == SIZES.get(name, 84)


def test_fc100_standin_splits_whole_superclasses(tiny):
    ds = READERS["fc100"](str(SI.standin_root("fc100")), size=32, cache=False)
    assert [ds[s].num_classes for s in ("train", "val", "test")] == [60, 20, 20]
    sup = [{ds[s].superclass_names[i] for i in ds[s].superclass.tolist()} for s in ("train", "val", "test")]
    assert [len(x) for x in sup] == [12, 4, 4]
    assert not (sup[0] & sup[1] or sup[1] & sup[2] or sup[0] & sup[2])


def test_load_dataset_resolves_standin_roots_once(tiny):
    ds = load_dataset("cifar_fs", "standin:cifar_fs", size=32)
    assert ds["train"].num_classes == 30
    root = SI.standin_root("cifar_fs")
    mtime = os.stat(root).st_mtime_ns
    assert SI.standin_root("cifar_fs") == root and os.stat(root).st_mtime_ns == mtime  # written once
    assert not [p for p in root.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_standin_errors_name_the_allowed_ones(tiny):
    with pytest.raises(DataError, match="unknown stand-in.*standin:mini_imagenet"):
        SI.resolve_root("mini_imagenet", "standin:imagenet")
    with pytest.raises(DataError, match="in the cifar_fs format, but the data set is 'mini_imagenet'.*"
                                        "standin:mini_imagenet, standin:mini_imagenet_csv"):
        SI.resolve_root("mini_imagenet", "standin:cifar_fs")
    assert SI.resolve_root("cifar_fs", "/data/cifar") == "/data/cifar"
