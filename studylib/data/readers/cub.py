"""CUB-200-2011: the ``CUB_200_2011`` layout split by class id, or a generic split folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from studylib.data.base import DataError, FewShotDataset
from studylib.data.readers.common import (SPLITS, _scaled_class_counts, cache_path, cached, check_size, require_folder,
                                          split_payload, to_dataset)
from studylib.data.readers.folder import load_image_folder
from studylib.data.readers.images import decode_images

_CUB_HINT = ("extract CUB_200_2011.tgz (images/, images.txt, image_class_labels.txt, classes.txt) and point "
             "data_root at CUB_200_2011/ or its parent, or arrange the images as <root>/{train,val,test}/<class>/")
CUB_FRACTIONS = (0.5, 0.25, 0.25)


def _read_id_table(path: Path, hint: str) -> dict[int, str]:
    if not path.is_file():
        raise DataError(f"cub: missing {path}; {hint}")
    table: dict[int, str] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            parts = line.split(maxsplit=1)
            if len(parts) != 2 or not parts[0].isdigit():
                raise DataError(f"cub: {path} line {lineno} should read '<id> <value>', got {line.strip()!r}; {hint}")
            table[int(parts[0])] = parts[1].strip()
    return table


def load_cub(root: str | os.PathLike, size: int = 84, cache: bool = True) -> FewShotDataset:
    """Read CUB-200-2011 (200 bird species, 11,788 images) split 100/50/50 by class id.

    Split rule (documented choice): classes sorted by their id in ``classes.txt``; the first half train
    (ids 1-100), the next quarter val (101-150), the rest test (151-200); proportions are scaled for a copy
    with fewer classes. Chen et al. ("A Closer Look", 2019) use an interleaved rule instead (id mod 2 / mod 4),
    so numbers are comparable only within one rule. Whole images are resized to ``size x size`` (bounding
    boxes are not used). A root with ``train/``, ``val/`` and ``test/`` class folders is read with
    :func:`load_image_folder` instead.
    """
    size = check_size(size)
    root = require_folder(root, "cub", _CUB_HINT)
    base = root / "CUB_200_2011" if (root / "CUB_200_2011" / "images.txt").is_file() else root
    if not (base / "images.txt").is_file():
        if all((root / s).is_dir() for s in SPLITS):
            return load_image_folder(root, size, cache, dataset_name="cub")
        raise DataError(f"cub: no images.txt (CUB_200_2011 layout) and no train/, val/, test/ folders under {root}; "
                        f"{_CUB_HINT}")
    images_txt = _read_id_table(base / "images.txt", _CUB_HINT)
    class_of = _read_id_table(base / "image_class_labels.txt", _CUB_HINT)
    classes = _read_id_table(base / "classes.txt", _CUB_HINT)
    per_class: dict[int, list[Path]] = {c: [] for c in classes}
    for img_id in sorted(images_txt):
        if img_id not in class_of:
            raise DataError(f"cub: image id {img_id} of images.txt has no line in image_class_labels.txt under {base}; "
                            f"extract the data set again")
        c = int(class_of[img_id])
        if c not in per_class:
            raise DataError(f"cub: image id {img_id} has class {c}, which classes.txt under {base} does not list; "
                            f"extract the data set again")
        per_class[c].append(base / "images" / images_txt[img_id])
    for c, fs in per_class.items():
        if not fs:
            raise DataError(f"cub: class {c} ({classes[c]}) has no images in images.txt under {base}; extract the "
                            f"data set again or remove the class from classes.txt")
    missing = [f for fs in per_class.values() for f in fs if not f.is_file()]
    if missing:
        raise DataError(f"cub: {len(missing)} images listed in images.txt are missing (first: {missing[0]}); "
                        f"{_CUB_HINT}")
    ids = sorted(per_class)
    n_train, n_val, _ = _scaled_class_counts(len(ids), CUB_FRACTIONS, "cub", "use the full CUB_200_2011 copy")
    split_ids = {"train": ids[:n_train], "val": ids[n_train:n_train + n_val], "test": ids[n_train + n_val:]}
    sources = [base / n for n in ("images.txt", "image_class_labels.txt", "classes.txt")]
    all_files = [f for fs in per_class.values() for f in fs]
    path = cache_path("cub", root, size, {"layout": "CUB_200_2011", "fractions": CUB_FRACTIONS},
                      [*sources, *all_files]) if cache else None

    def build() -> dict[str, Any]:
        splits = {}
        for s in SPLITS:
            paths = [f for c in split_ids[s] for f in per_class[c]]
            labels = np.concatenate([np.full(len(per_class[c]), c) for c in split_ids[s]])
            splits[s] = split_payload(decode_images(paths, size, "RGB"), labels, lambda c: classes[c])
        return {"splits": splits, "info": {"root": str(root), "layout": "CUB_200_2011", "size": size,
                                           "split_rule": "classes sorted by id: first 50% train, next 25% val, "
                                                         "last 25% test (100/50/50 for 200 classes)",
                                           "class_ids": {s: split_ids[s] for s in SPLITS}}}

    return to_dataset("cub", cached(path, build), path)
