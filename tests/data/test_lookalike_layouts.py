"""Layouts that look like a data set but are not one (issue 20, item 3) are refused before any decoding, with a
message saying what they are and what to point at instead: Lake et al.'s one-shot ``all_runs`` benchmark, folders
of one image each, and folders already split into train/val/test read as classes or alphabets."""

from __future__ import annotations

import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from studylib.data.base import DataError
from studylib.data.readers import load_image_folder, load_omniglot


def _png(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8), value, dtype=np.uint8)).save(path)


def _all_runs(root: Path, runs: int = 2, ways: int = 3) -> Path:
    """Lake et al.'s one-shot layout: all_runs/runNN/{training/classKK.png, test/itemKK.png, class_labels.txt}."""
    base = root / "all_runs"
    for r in range(1, runs + 1):
        run = base / f"run{r:02d}"
        for k in range(1, ways + 1):
            _png(run / "training" / f"class{k:02d}.png", 10 * k)
            _png(run / "test" / f"item{k:02d}.png", 10 * k + 1)
        (run / "class_labels.txt").write_text("\n".join(f"run{r:02d}/test/item{k:02d}.png "
                                                        f"run{r:02d}/training/class{k:02d}.png"
                                                        for k in range(1, ways + 1)))
    return base


def _classes(root: Path, names: list[str], per_class: int) -> Path:
    for i, n in enumerate(names):
        for j in range(per_class):
            _png(root / n / f"{j:02d}.png", (20 * i + j) % 256)
    return root


def test_omniglot_refuses_lakes_one_shot_runs(tmp_path):
    base = _all_runs(tmp_path)
    for where in (base, base / "run01"):
        with pytest.raises(DataError, match=r"one-shot classification benchmark .*images_background\.zip"):
            load_omniglot(where, size=8, cache=False)
    zpath = tmp_path / "all_runs.zip"  # the zip of the repository, named directly
    with zipfile.ZipFile(zpath, "w") as zf:
        for f in sorted(base.rglob("*")):
            zf.write(f, f.relative_to(tmp_path).as_posix())
    with pytest.raises(DataError, match=r"one-shot classification benchmark \(all_runs: 2 run\(s\) run01, run02"):
        load_omniglot(zpath, size=8, cache=False)


@pytest.mark.parametrize("split", ["alphabet", "random", "given"])
def test_the_folder_reader_refuses_lakes_one_shot_runs(tmp_path, split):
    base = _all_runs(tmp_path)
    with pytest.raises(DataError, match="one-shot classification benchmark"):
        load_image_folder(base, size=8, cache=False, split=split)
    if split == "random":  # pointed at one run: "classes" training/ and test/
        with pytest.raises(DataError, match="one-shot classification benchmark"):
            load_image_folder(base / "run01", size=8, cache=False, split=split)


def test_one_image_per_class_is_refused(tmp_path):
    root = _classes(tmp_path / "flat", [f"img{i:02d}" for i in range(12)], per_class=1)
    with pytest.raises(DataError, match="holds exactly one image .*12 folders.*one folder per image"):
        load_image_folder(root, size=8, cache=False, split="random")
    omni = tmp_path / "omni"
    for a in ("Alpha", "Beta"):
        _classes(omni / a, [f"character{i:02d}" for i in range(3)], per_class=1)
    with pytest.raises(DataError, match="every character folder .* holds exactly one image"):
        load_omniglot(omni, size=8, cache=False)
    # a class with a single image among larger ones is the protocol's business, not a look-alike
    ok = _classes(tmp_path / "ok", [f"c{i:02d}" for i in range(6)], per_class=3)
    _png(ok / "single" / "00.png", 1)
    assert sum(s.num_classes for s in load_image_folder(ok, size=8, cache=False, split="random").splits.values()) == 7


def test_split_folders_read_as_classes_or_alphabets_are_refused(tmp_path):
    root = tmp_path / "pre_split"  # train/ and test/ without val/: not the 'given' layout, not classes either
    for s in ("train", "test"):
        _classes(root / s, [f"c{i}" for i in range(4)], per_class=3)
    with pytest.raises(DataError, match="class folders test, train under .* are named as splits.*split='given'"):
        load_image_folder(root, size=8, cache=False, split="random")
    with pytest.raises(DataError, match="superclass folders test, train .* named as splits"):
        load_image_folder(root, size=8, cache=False, split="alphabet")
    with pytest.raises(DataError, match="alphabet folders test, train .* named as splits.*data='folder'"):
        load_omniglot(root, size=8, cache=False)
    nested = tmp_path / "nested"  # <root>/{train,val,test}/{train,val,test}/<class>/: one level too high
    for s in ("train", "val", "test"):
        for inner in ("train", "val", "test"):
            _classes(nested / s / inner, ["c0"], per_class=2)
    with pytest.raises(DataError, match="class folders test, train, val under .*train are named as splits"):
        load_image_folder(nested, size=8, cache=False, split="given")


def test_one_class_named_like_a_split_warns(tmp_path):
    root = _classes(tmp_path / "one", ["apple", "pear", "test", "plum", "fig", "kiwi"], per_class=3)
    with pytest.warns(UserWarning, match="class folder test under .* is named like a split"):
        load_image_folder(root, size=8, cache=False, split="random")
    plain = _classes(tmp_path / "plain", ["apple", "pear", "plum", "fig", "kiwi"], per_class=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_image_folder(plain, size=8, cache=False, split="random")
