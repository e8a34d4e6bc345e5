"""tieredImageNet: Ren et al.'s PNG-encoded image pickles and label pickles."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from studylib.data.base import DataError, FewShotDataset
from studylib.data.readers.common import SPLITS, cache_path, cached, check_size, require_folder, split_payload, to_dataset
from studylib.data.readers.images import decode_images, hwc_to_tensor
from studylib.data.readers.pickles import int_labels, load_pickle

_TIERED_HINT = ("download tieredImageNet as {train,val,test}_images_png.pkl with {train,val,test}_labels.pkl and "
                "point data_root at the folder that holds them")


def load_tiered_imagenet(root: str | os.PathLike, size: int = 84, cache: bool = True) -> FewShotDataset:
    """Read tieredImageNet (351/97/160 classes in 20/6/8 superclasses) from Ren et al.'s pickles.

    ``{split}_images_png.pkl`` holds a list (or object array) of PNG-encoded byte arrays (a decoded uint8
    ``[N, H, W, 3]`` array is accepted too); ``{split}_labels.pkl`` a dict with ``"label_specific"`` and
    ``"label_general"`` (``[N]`` ints) and, when present, ``"label_specific_str"`` / ``"label_general_str"``
    naming them. Superclass of a class = its ``label_general``; a class with two general labels is an error.

    Returns:
        FewShotDataset ``"tiered_imagenet"`` with ``[N, 3, size, size]`` images and superclasses.
    """
    size = check_size(size)
    root = require_folder(root, "tiered_imagenet", _TIERED_HINT)
    pairs = [(root / f"{s}_images_png.pkl", root / f"{s}_labels.pkl") for s in SPLITS]
    for img_p, lab_p in pairs:
        for p in (img_p, lab_p):
            if not p.is_file():
                raise DataError(f"tiered_imagenet: missing {p.name} under {root}; {_TIERED_HINT}")
    path = cache_path("tiered_imagenet", root, size, {}, [p for pair in pairs for p in pair]) if cache else None

    def build() -> dict[str, Any]:
        splits = {}
        for s, (img_p, lab_p) in zip(SPLITS, pairs):
            labels = load_pickle(lab_p, "tiered_imagenet", _TIERED_HINT)
            if not isinstance(labels, dict) or not {"label_specific", "label_general"} <= set(labels):
                raise DataError(f"tiered_imagenet: {lab_p} should hold a dict with 'label_specific' and "
                                f"'label_general'; download the labels file again")
            spec = int_labels(labels["label_specific"], lab_p, "tiered_imagenet", "'label_specific'")
            gen = int_labels(labels["label_general"], lab_p, "tiered_imagenet", "'label_general'")
            raw = load_pickle(img_p, "tiered_imagenet", _TIERED_HINT)
            if not isinstance(raw, (list, tuple, np.ndarray)) or any(
                    not isinstance(b, (bytes, np.ndarray)) or (isinstance(b, np.ndarray) and b.dtype != np.uint8)
                    for b in (raw if not (isinstance(raw, np.ndarray) and raw.ndim == 4) else [])):
                raise DataError(f"tiered_imagenet: the tiered_imagenet reader expected {img_p.absolute()} to hold a "
                                f"list of PNG-encoded images (bytes or uint8 arrays) or uint8 images [N, H, W, 3], got "
                                f"{type(raw).__name__}; download the file again")
            n = len(raw)
            if not (n == len(spec) == len(gen)):
                raise DataError(f"tiered_imagenet: {img_p} holds {n} images but {lab_p} holds {len(spec)} specific "
                                f"and {len(gen)} general labels (label/data length mismatch); download both again")
            if isinstance(raw, np.ndarray) and raw.dtype == np.uint8 and raw.ndim == 4:
                images = hwc_to_tensor(raw, size, f"tiered_imagenet: {img_p}")
            else:
                encoded = [bytes(np.asarray(b, dtype=np.uint8).reshape(-1)) if not isinstance(b, bytes) else b
                           for b in raw]
                del raw
                images = decode_images(encoded, size, "RGB", names=[f"{img_p}[{i}]" for i in range(n)])
            spec_str = labels.get("label_specific_str")
            gen_str = labels.get("label_general_str")
            general_of: dict[int, int] = {}
            for a, b in zip(spec.tolist(), gen.tolist()):
                if general_of.setdefault(a, b) != b:
                    raise DataError(f"tiered_imagenet: class {a} in {lab_p} has two general labels "
                                    f"({general_of[a]} and {b}); download the labels file again")

            def cname(k: int, spec_str=spec_str) -> str:
                return str(spec_str[k]) if spec_str is not None and 0 <= k < len(spec_str) else f"class{k:03d}"

            def sname(k: int, gen_str=gen_str, general_of=general_of) -> str:
                g = general_of[k]
                return str(gen_str[g]) if gen_str is not None and 0 <= g < len(gen_str) else f"super{g:02d}"

            splits[s] = split_payload(images, spec, cname, sname)
        return {"splits": splits, "info": {"root": str(root), "size": size}}

    return to_dataset("tiered_imagenet", cached(path, build), path)
