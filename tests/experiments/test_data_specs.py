"""Your own data wherever a DataSpec goes: folders and in-memory tensors, keyed by a hash of their content;
bad data caught before training, with the classes and the fix named."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from studylib.config import ParamError, validate
import studylib.data as data_mod
from studylib.data import load_dataset
from studylib.data.base import DataError, FewShotDataset, ImageSplit
from studylib.experiments import quickstart as qs
from studylib.experiments.common import data_spec, load_data
import studylib.runs.runner as runner
from studylib.runs.runner import DataSpec, EvalSpec, RunSpec, run_spec
from studylib.training.loop import TrainConfig
from studylib.training.runstore import RunStore
from studylib.utils import config_hash


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path_factory.mktemp("cache")))
    torch.set_num_threads(1)


def _split(classes: int, per: int, seed: int, name: str, size: int = 16, counts: list[int] | None = None) -> ImageSplit:
    g = torch.Generator().manual_seed(seed)
    counts = counts or [per] * classes
    labels = torch.arange(len(counts)).repeat_interleave(torch.tensor(counts))
    images = torch.randint(0, 256, (len(labels), 1, size, size), generator=g, dtype=torch.uint8)
    return ImageSplit(images, labels, [f"{name}{k}" for k in range(len(counts))], name=f"mine/{name}")


def _dataset(test_counts: list[int] | None = None, seed: int = 0) -> FewShotDataset:
    return FewShotDataset("mine", {"train": _split(8, 6, seed, "tr"), "val": _split(5, 6, seed + 1, "va"),
                                   "test": _split(5, 6, seed + 2, "te", counts=test_counts)})


def _spec(data, **eval_kw) -> RunSpec:
    ev = dict(ways=3, shots=[1, 2], queries=2, episodes=20, val_episodes=5)
    ev.update(eval_kw)
    return RunSpec(name="own", data=data, backbone="conv4", backbone_options={"hidden": 8}, method="nca",
                   augment="none", train=TrainConfig(epochs=1, sampler="shuffled", batch_size=16, lr=0.05,
                                                     device="cpu"),
                   eval=EvalSpec(**ev))


def _clone(ds: FewShotDataset, name: str) -> FewShotDataset:
    return FewShotDataset(name, {k: ImageSplit(s.images.clone(), s.labels.clone(), list(s.class_names), name=s.name)
                                 for k, s in ds.splits.items()})


def test_in_memory_tensors_train_and_share_runs_exactly_when_the_content_is_equal(tmp_path, monkeypatch):
    ds = _dataset()
    store = RunStore(tmp_path)
    first = run_spec(_spec(ds), store, progress=False)  # a FewShotDataset stands where a DataSpec goes
    assert first.run.finished and set(first.result["test"]) == {"nearest_centroid/1", "nearest_centroid/2"}
    cfg = _spec(ds).config()
    assert set(cfg["data"]) == {"content_sha256"} and cfg["data"]["content_sha256"] == ds.content_hash()

    def boom(*a, **k):
        raise AssertionError("the same data must reuse the finished run")

    monkeypatch.setattr(runner, "train", boom)
    again = run_spec(_spec(_clone(ds, "renamed copy")), store, progress=False)  # equal tensors, other name
    assert again.run.path == first.run.path and again.result == first.result
    changed = _clone(ds, "mine")
    changed.splits["train"].images[3, 0, 5, 5] ^= 1  # one pixel
    assert store.run("own", _spec(changed).config()).path != first.run.path
    relabelled = _clone(ds, "mine")
    relabelled.splits["test"].class_names[0] = "other"
    assert config_hash(_spec(relabelled).config()) != config_hash(cfg)


def test_in_memory_spec_survives_pickling_into_another_process():
    spec = _spec(_dataset(seed=5))
    blob = pickle.dumps(spec)
    data_mod._MEMORY.clear()  # a worker process has an empty registry
    back = pickle.loads(blob)
    assert back.data.load().content_hash() == spec.data.options["content"]
    data_mod._MEMORY.clear()
    bare = DataSpec("memory", None, dict(spec.data.options))  # the spec without its data object
    with pytest.raises(DataError, match=r"is not registered in this process; pass the FewShotDataset itself"):
        bare.load()


def _write_flat(root: Path, classes: int = 12, per: int = 4, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for k in range(classes):
        (root / f"class{k:02d}").mkdir(parents=True)
        for i in range(per):
            Image.fromarray(rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)).save(root / f"class{k:02d}" / f"{i}.png")


def test_folder_runs_are_keyed_by_content_not_by_path(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    _write_flat(a)
    shutil.copytree(a, b)  # the same images elsewhere
    shutil.copytree(a, c)
    Image.fromarray(np.zeros((20, 20, 3), np.uint8)).save(c / "class03" / "1.png")  # one image differs
    opts = {"split": "random", "size": 16}
    cfg_a = _spec(DataSpec("folder", str(a), opts)).config()
    assert "root" not in cfg_a["data"] and cfg_a["data_version"] == "content"
    assert cfg_a == _spec(DataSpec("folder", str(b), dict(opts))).config()
    assert cfg_a != _spec(DataSpec("folder", str(c), dict(opts))).config()
    assert cfg_a != _spec(DataSpec("folder", str(a), {"split": "random", "size": 16, "seed": 1})).config()
    # The folder loaded into memory is the same data: the same run.
    assert cfg_a == _spec(load_dataset("folder", str(a), **opts)).config()
    # Registered data sets keep (name, root, options) in the hash, as before.
    glyph_cfg = _spec(DataSpec("glyphs", None, {"size": 28})).config()["data"]
    assert glyph_cfg == {"name": "glyphs", "root": None, "options": {"size": 28}}


def test_a_one_image_test_class_fails_before_training_naming_it(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("nothing may train when the evaluation cannot run")

    monkeypatch.setattr(runner, "train", boom)
    monkeypatch.setattr(runner, "build_parts", boom)
    spec = _spec(_dataset(test_counts=[6, 6, 1, 6, 6]))
    with pytest.raises(DataError, match=r"smallest class of the evaluation split mine/te \(eval_ways=3, eval_shots up to 2, "
                                        r"eval_queries=2\) has 1; 1 of its 5 classes "
                                        r"holds fewer than 4 images: 'te2' \(1\)\. Fix: a class needs at least 2 images"):
        run_spec(spec, RunStore(tmp_path), progress=False)
    assert not RunStore(tmp_path).run("own", spec.config()).finished
    with pytest.raises(DataError, match=r"6-way episodes need 6 classes but the validation split mine/va \(ways=6, val_shots=1, queries=2\) has 5"):
        run_spec(_spec(_dataset(), ways=6), RunStore(tmp_path), progress=False)


def test_notebook_parameters_take_your_own_folder(tmp_path):
    _write_flat(tmp_path / "mine")
    p = validate(qs.Params, {"data": "folder", "data_root": str(tmp_path / "mine"), "split": "random",
                             "image_size": 16}, where="test")
    d = data_spec(p)
    assert (d.name, d.options) == ("folder", {"size": 16, "split": "random"})
    ds = load_data(p)
    assert sum(ds[s].num_classes for s in ("train", "val", "test")) == 12
    with pytest.raises(ParamError, match=r"split='vinyals' is not a split rule of data='folder'; allowed: given, "
                                         r"random, alphabet"):
        validate(qs.Params, {"data": "folder", "data_root": str(tmp_path), "split": "vinyals"})


def test_data_root_with_generated_data_is_an_error_naming_the_fix():
    with pytest.raises(ParamError, match=r"data_root='data/x' is given but data='glyphs' is generated .*remove "
                                         r"data_root \(null\)"):
        validate(qs.Params, {"data": "glyphs", "data_root": "data/x"})
    with pytest.raises(DataError, match=r"'glyphs' is generated by studylib and reads no folder, but data_root"):
        load_dataset("glyphs", "data/x", size=28)
    with pytest.raises(ParamError, match=r"data='cifar_fs' is read from a folder: pass data_root .*relative to the "
                                         r"project root"):
        validate(qs.Params, {"data": "cifar_fs"})
