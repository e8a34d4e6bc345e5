"""miniImageNet: Ravi & Larochelle's pickles, or their ``images/`` folder with CSV files."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import numpy as np

from studylib.data.base import DataError, FewShotDataset
from studylib.data.readers.common import SPLITS, cache_path, cached, check_size, require_folder, split_payload, to_dataset
from studylib.data.readers.images import decode_images, hwc_to_tensor
from studylib.data.readers.pickles import check_hwc_uint8, int_labels, load_pickle

_MINI_HINT = ("download the miniImageNet pickles (mini-imagenet-cache-train.pkl, -val.pkl, -test.pkl) or Ravi & "
              "Larochelle's images/ folder with train.csv, val.csv and test.csv, and point data_root at the "
              "folder that holds them")


def load_mini_imagenet(root: str | os.PathLike, size: int = 84, cache: bool = True) -> FewShotDataset:
    """Read miniImageNet (64/16/20 classes of 600 images) from pickles or from ``images/`` + CSV files.

    Layouts (checked in this order):
      * ``mini-imagenet-cache-{train,val,test}.pkl``: dict with ``"image_data"`` uint8 ``[N, 84, 84, 3]``
        and ``"class_dict"`` ``{wnid: [image indices]}``; only indexed images are kept.
      * ``images/`` + ``{train,val,test}.csv`` with a ``filename,label`` header; images are resized
        straight to ``size x size`` (no crop), as the common preprocessing does.

    Returns:
        FewShotDataset ``"mini_imagenet"``; class names are the wnids, sorted; images ``[N, 3, size, size]``.
    """
    size = check_size(size)
    root = require_folder(root, "mini_imagenet", _MINI_HINT)
    pkls = [root / f"mini-imagenet-cache-{s}.pkl" for s in SPLITS]
    csvs = [root / f"{s}.csv" for s in SPLITS]
    if any(p.exists() for p in pkls):
        for p in pkls:
            if not p.is_file():
                raise DataError(f"mini_imagenet: missing {p.name} under {root} (the other pickles are there); "
                                f"{_MINI_HINT}")
        return _mini_from_pickles(root, pkls, size, cache)
    if (root / "images").is_dir() and any(c.exists() for c in csvs):
        for c in csvs:
            if not c.is_file():
                raise DataError(f"mini_imagenet: missing {c.name} under {root} (images/ is there); {_MINI_HINT}")
        return _mini_from_csv(root, csvs, size, cache)
    raise DataError(f"mini_imagenet: no mini-imagenet-cache-train.pkl or images/ + train.csv under {root}; {_MINI_HINT}")


def _mini_from_pickles(root: Path, pkls: list[Path], size: int, cache: bool) -> FewShotDataset:
    path = cache_path("mini_imagenet", root, size, {"layout": "pickle"}, pkls) if cache else None

    def build() -> dict[str, Any]:
        splits = {}
        for s, p in zip(SPLITS, pkls):
            obj = load_pickle(p, "mini_imagenet", _MINI_HINT)
            if not isinstance(obj, dict) or "image_data" not in obj or "class_dict" not in obj:
                keys = sorted(map(str, obj)) if isinstance(obj, dict) else type(obj).__name__
                raise DataError(f"mini_imagenet: {p} should hold a dict with 'image_data' and 'class_dict', got "
                                f"{keys}; download the miniImageNet pickles again")
            data = check_hwc_uint8(obj["image_data"], p, "mini_imagenet", "'image_data'")
            n = data.shape[0]
            if not isinstance(obj["class_dict"], dict):
                raise DataError(f"mini_imagenet: the mini_imagenet reader expected 'class_dict' in {p.absolute()} to "
                                f"be a dict, got {type(obj['class_dict']).__name__}; download the file again")
            names, idx = [], []
            for wnid in sorted(obj["class_dict"], key=str):
                ids = int_labels(obj["class_dict"][wnid], p, "mini_imagenet", f"the image ids of class {wnid}")
                if ids.size == 0:
                    raise DataError(f"mini_imagenet: class {wnid} in {p} lists no images; download the file again")
                if ids.min() < 0 or ids.max() >= n:
                    raise DataError(f"mini_imagenet: class {wnid} in {p} indexes image {int(ids.max())} but "
                                    f"image_data holds {n} images (label/data length mismatch); download it again")
                names.append(str(wnid))
                idx.append(ids)
            if not names:
                raise DataError(f"mini_imagenet: {p} has an empty class_dict; download the file again")
            order = np.concatenate(idx)
            labels = np.concatenate([np.full(len(i), k) for k, i in enumerate(idx)])
            images = hwc_to_tensor(data[order], size, f"mini_imagenet: {p}")
            splits[s] = split_payload(images, labels, lambda k, names=names: names[k])
        return {"splits": splits, "info": {"root": str(root), "layout": "pickle", "size": size}}

    return to_dataset("mini_imagenet", cached(path, build), path)


def _read_csv(path: Path, dataset: str, hint: str) -> list[tuple[str, str]]:
    with open(path, newline="") as fh:
        rows = [r for r in csv.reader(fh) if r]
    if not rows or [c.strip().lower() for c in rows[0][:2]] != ["filename", "label"]:
        raise DataError(f"{dataset}: {path} should start with the header 'filename,label'; {hint}")
    bad = [i + 2 for i, r in enumerate(rows[1:]) if len(r) < 2]
    if bad:
        raise DataError(f"{dataset}: {path} line {bad[0]} has fewer than 2 columns; {hint}")
    if len(rows) == 1:
        raise DataError(f"{dataset}: {path} lists no images; {hint}")
    return [(r[0].strip(), r[1].strip()) for r in rows[1:]]


def _mini_from_csv(root: Path, csvs: list[Path], size: int, cache: bool) -> FewShotDataset:
    tables = {s: _read_csv(c, "mini_imagenet", _MINI_HINT) for s, c in zip(SPLITS, csvs)}
    files = {s: [root / "images" / f for f, _ in rows] for s, rows in tables.items()}
    missing = [f for fs in files.values() for f in fs if not f.is_file()]
    if missing:
        raise DataError(f"mini_imagenet: {len(missing)} images listed in the CSV files are missing from "
                        f"{root / 'images'} (first: {missing[0].name}); extract all images there")
    path = (cache_path("mini_imagenet", root, size, {"layout": "csv"}, [*csvs, *(f for fs in files.values() for f in fs)])
            if cache else None)

    def build() -> dict[str, Any]:
        splits = {}
        for s in SPLITS:
            labels = np.asarray([lab for _, lab in tables[s]])
            splits[s] = split_payload(decode_images(files[s], size, "RGB"), labels, str)
        return {"splits": splits, "info": {"root": str(root), "layout": "csv", "size": size}}

    return to_dataset("mini_imagenet", cached(path, build), path)
