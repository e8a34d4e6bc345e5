"""Tiny stand-ins of the real data sets, written by studylib in their real on-disk formats (the check scale).

The check scale runs a notebook's paper configuration (backbone, image size, batch composition, method
options, classifiers, data set *format*) for a few steps. It cannot download miniImageNet, so it writes a
stand-in folder in exactly the layout a user's copy has, and points ``data_root`` at it: the readers of
:mod:`studylib.data.readers` then read it through the same code a real copy takes (pickles, PNG/JPEG
decoding, CSVs, zips, split rules, decode cache).

A parameter file names a stand-in as ``data_root: standin:<format>``; :func:`resolve_root` writes it on first
use under ``default_cache_dir() / "standins"`` (atomically: into a temporary folder, then renamed) and
returns its path. Formats (:data:`FORMATS`):

============================  ===============================================================================
``mini_imagenet``             ``mini-imagenet-cache-{train,val,test}.pkl``, 32/5/5 classes x 20/10/10, 84 px
``mini_imagenet_csv``         ``images/*.jpg`` + ``{train,val,test}.csv`` (Ravi & Larochelle), same classes
``tiered_imagenet``           ``{split}_images_png.pkl`` + ``{split}_labels.pkl``, 32/5/5 classes in 8/3/3
                              superclasses, 84 px PNGs
``cifar_fs`` / ``fc100``      ``CIFAR_FS_{split}.pickle`` / ``FC100_{split}.pickle``, Python-2 pickles, 32 px,
                              CIFAR-100 fine ids (FC100: whole coarse classes 12/4/4 per split)
``omniglot``                  ``images_background.zip`` + ``images_evaluation.zip``, 1-bit 105 px PNGs,
                              10 + 4 alphabets of 10 characters x 20 drawers
``cub``                       ``CUB_200_2011/`` (images/, images.txt, image_class_labels.txt, classes.txt),
                              20 classes x 20 JPEGs of varying sizes
``folder``                    your own images: ``<class>/<image>.png``, 25 classes x 20, 84 px (read with
                              ``data='folder'``, ``split='random'``)
============================  ===============================================================================

The images are :mod:`studylib.data.synthfs` objects drawn at the format's resolution (Omniglot: their
luminance thresholded into ink strokes), one class per class, so a few steps of training can move the
accuracy. Twenty images per training class hold the largest training episode the paper configurations draw (5
shots and 15 queries); 32 training classes hold the widest training episodes (30 ways). In the image formats
(miniImageNet, tieredImageNet, CIFAR-FS, FC100) the 5 validation and test classes hold 10 images each: 5-way
evaluation with 5 shots and 5 queries (``eval_queries: 5`` in check.yaml), which halves the feature extraction
that dominates a check run (a ResNet-12 forward at 84 px runs at about 10 images/s on two CPU cores, ResNet-18
at 224 px slower still). Omniglot, CUB and the folder stand-in keep 20 per class.
"""

from __future__ import annotations

import csv
import io
import os
import pickle
import shutil
import struct
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from PIL import Image

from studylib.data.base import DataError
from studylib.utils import default_cache_dir

STANDIN_VERSION = "2"
PREFIX = "standin:"
PER_CLASS = 20  # training split: the widest training episodes draw 5 shots + 15 queries per class
EVAL_PER_CLASS = 10  # validation and test splits: 5 shots + 5 queries (check.yaml: eval_queries 5)
COUNTS = (32, 5, 5)


def _per_class(split: str) -> int:
    """Images per class of a stand-in split: evaluation splits are smaller, as feature extraction at the paper's
    image size dominates a check run's time (the check scale cuts eval_queries to 5)."""
    return PER_CLASS if split == "train" else EVAL_PER_CLASS


def _draw(first_class: int, classes: int, per_class: int, size: int) -> np.ndarray:
    """``[classes * per_class, size, size, 3]`` uint8 HWC: synthfs objects of classes ``first_class...``, drawn at
    32 px and resized (bilinear) to ``size``: a stand-in's pixels only need to carry its classes."""
    from studylib.data.synthfs import NUM_CLASSES, SIZE, _render_class
    out = np.empty((classes * per_class, size, size, 3), dtype=np.uint8)
    for k in range(classes):
        x = _render_class(seed=1, klass=(first_class + k) % NUM_CLASSES, instances=per_class, size=SIZE)
        if first_class + k >= NUM_CLASSES:  # more classes than synthfs draws: a distinct colour twist
            x = x.roll(shifts=1 + (first_class + k) // NUM_CLASSES, dims=1)
        if size != SIZE:
            x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
        out[k * per_class:(k + 1) * per_class] = (x.clamp(0, 1).mul(255).round().to(torch.uint8)
                                                  .permute(0, 2, 3, 1).numpy())
    return out


def _png(array: np.ndarray, mode: str | None = None) -> bytes:
    buf = io.BytesIO()
    img = Image.fromarray(array)
    (img.convert(mode) if mode else img).save(buf, format="PNG")
    return buf.getvalue()


class _Py2Pickler(pickle._Pickler):  # type: ignore[name-defined]
    """Writes ``bytes``/``str`` as Python-2 strings, as the CIFAR-FS and FC100 files (made under Python 2) hold."""

    dispatch = pickle._Pickler.dispatch.copy()  # type: ignore[attr-defined]

    def _py2(self, raw: bytes, obj: object) -> None:
        n = len(raw)
        self.write(pickle.SHORT_BINSTRING + bytes([n]) + raw if n < 256 else
                   pickle.BINSTRING + struct.pack("<i", n) + raw)
        self.memoize(obj)

    def save_bytes(self, obj: bytes) -> None:
        self._py2(obj, obj)

    def save_str(self, obj: str) -> None:
        self._py2(obj.encode("latin1"), obj)

    dispatch[bytes] = save_bytes
    dispatch[str] = save_str


def _split_classes() -> dict[str, range]:
    a, b, c = COUNTS
    return {"train": range(0, a), "val": range(a, a + b), "test": range(a + b, a + b + c)}


def write_mini_imagenet(root: Path) -> None:
    for split, classes in _split_classes().items():
        per = _per_class(split)
        data = _draw(classes.start, len(classes), per, 84)
        n = len(data)
        perm = np.random.default_rng(len(classes)).permutation(n)  # classes interleaved, as class_dict allows
        class_dict = {f"n{9000000 + k:08d}": sorted(perm[i * per:(i + 1) * per].tolist())
                      for i, k in enumerate(classes)}
        inv = np.empty(n, dtype=np.int64)
        inv[perm] = np.arange(n)
        with open(root / f"mini-imagenet-cache-{split}.pkl", "wb") as fh:
            pickle.dump({"image_data": data[inv], "class_dict": class_dict}, fh, protocol=4)


def write_mini_imagenet_csv(root: Path) -> None:
    (root / "images").mkdir()
    for split, classes in _split_classes().items():
        per = _per_class(split)
        data = _draw(classes.start, len(classes), per, 84)
        rows = []
        for i, k in enumerate(classes):
            wnid = f"n{9000000 + k:08d}"
            for j in range(per):
                name = f"{wnid}{j + 1:08d}.jpg"
                Image.fromarray(data[i * per + j]).save(root / "images" / name, quality=92)
                rows.append((name, wnid))
        with open(root / f"{split}.csv", "w", newline="") as fh:
            csv.writer(fh).writerows([("filename", "label"), *rows])


def write_tiered_imagenet(root: Path) -> None:
    supers = {"train": 8, "val": 3, "test": 3}
    gen_names = [f"super{g:02d}" for g in range(sum(supers.values()))]
    spec_names = [f"n{9100000 + k:08d}" for k in range(sum(COUNTS))]
    g0 = 0
    for split, classes in _split_classes().items():
        data = _draw(classes.start, len(classes), _per_class(split), 84)
        spec = np.repeat(np.arange(classes.start, classes.stop), _per_class(split))
        gen = g0 + (spec - classes.start) * supers[split] // len(classes)
        g0 += supers[split]
        with open(root / f"{split}_images_png.pkl", "wb") as fh:
            pickle.dump([np.frombuffer(_png(im), dtype=np.uint8) for im in data], fh)
        with open(root / f"{split}_labels.pkl", "wb") as fh:
            pickle.dump({"label_specific": spec, "label_general": gen, "label_specific_str": spec_names,
                         "label_general_str": gen_names}, fh)


def _write_cifar_like(root: Path, prefix: str, ids: dict[str, list[int]]) -> None:
    for split, fine in ids.items():
        first = {"train": 0, "val": COUNTS[0], "test": COUNTS[0] + COUNTS[1]}[split]
        data = _draw(first, len(fine), _per_class(split), 32)
        labels = [int(i) for i in fine for _ in range(_per_class(split))]
        with open(root / f"{prefix}_{split}.pickle", "wb") as fh:
            _Py2Pickler(fh, protocol=2).dump({"data": data, "labels": labels})


def write_cifar_fs(root: Path) -> None:
    perm = np.random.default_rng(0).permutation(100).tolist()
    a, b, c = COUNTS
    _write_cifar_like(root, "CIFAR_FS", {"train": perm[:a], "val": perm[a:a + b], "test": perm[a + b:a + b + c]})


def write_fc100(root: Path) -> None:
    from studylib.data.readers import CIFAR100_COARSE, CIFAR100_FINE_NAMES
    coarse = list(CIFAR100_COARSE.values())
    fine_id = {n: i for i, n in enumerate(CIFAR100_FINE_NAMES)}
    groups = {"train": coarse[:12], "val": coarse[12:16], "test": coarse[16:]}
    _write_cifar_like(root, "FC100", {s: [fine_id[n] for grp in g for n in grp] for s, g in groups.items()})


def write_omniglot(root: Path) -> None:
    drawers, chars = 20, 10
    for top, alphabets, first in (("images_background", 10, 0), ("images_evaluation", 4, 10)):
        with zipfile.ZipFile(root / f"{top}.zip", "w") as zf:
            zf.writestr(zipfile.ZipInfo(f"{top}/"), b"")
            for a in range(alphabets):
                alpha = f"Standin_Alphabet_{first + a:02d}"
                zf.writestr(zipfile.ZipInfo(f"{top}/{alpha}/"), b"")
                data = _draw((first + a) * chars, chars, drawers, 105)
                for c in range(chars):
                    zf.writestr(zipfile.ZipInfo(f"{top}/{alpha}/character{c + 1:02d}/"), b"")
                    for d in range(drawers):
                        rgb = data[c * drawers + d].astype(np.float64)
                        lum = rgb @ np.array([0.299, 0.587, 0.114])
                        ink = lum < np.median(lum) - 0.25 * lum.std()  # dark strokes on a white page
                        name = f"{top}/{alpha}/character{c + 1:02d}/{(first + a) * chars + c + 1:04d}_{d + 1:02d}.png"
                        zf.writestr(name, _png((~ink).astype(np.uint8) * 255, "1"))


def write_cub(root: Path) -> None:
    base = root / "CUB_200_2011"
    (base / "images").mkdir(parents=True)
    n_classes = 20
    img_lines, label_lines, class_lines = [], [], []
    rng = np.random.default_rng(0)
    img_id = 1
    for c in range(1, n_classes + 1):
        name = f"{c:03d}.Standin_Bird_{c}"
        class_lines.append(f"{c} {name}")
        (base / "images" / name).mkdir()
        side = int(rng.integers(96, 160))
        data = _draw(c - 1, 1, PER_CLASS, side)
        for i in range(PER_CLASS):
            rel = f"{name}/Standin_Bird_{c}_{i + 1:04d}.jpg"
            w = int(side * rng.uniform(0.8, 1.25))  # CUB's photos are not square
            Image.fromarray(data[i]).resize((w, side)).save(base / "images" / rel, quality=90)
            img_lines.append(f"{img_id} {rel}")
            label_lines.append(f"{img_id} {c}")
            img_id += 1
    for fname, lines in (("images.txt", img_lines), ("image_class_labels.txt", label_lines),
                         ("classes.txt", class_lines)):
        (base / fname).write_text("\n".join(lines) + "\n")


def write_folder(root: Path, classes: int = 25, per_class: int = PER_CLASS, size: int = 84) -> Path:
    """Your-own-images layout ``root/<class>/<image>.png`` (``data='folder'``, ``split='random'``)."""
    data = _draw(0, classes, per_class, size)
    for c in range(classes):
        folder = root / f"class_{c:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            Image.fromarray(data[c * per_class + i]).save(folder / f"img_{i:03d}.png")
    return root


FORMATS: dict[str, tuple[str, Callable[[Path], None]]] = {
    # stand-in name: (the data set whose reader reads it, writer)
    "mini_imagenet": ("mini_imagenet", write_mini_imagenet),
    "mini_imagenet_csv": ("mini_imagenet", write_mini_imagenet_csv),
    "tiered_imagenet": ("tiered_imagenet", write_tiered_imagenet),
    "cifar_fs": ("cifar_fs", write_cifar_fs),
    "fc100": ("fc100", write_fc100),
    "omniglot": ("omniglot", write_omniglot),
    "cub": ("cub", write_cub),
    "folder": ("folder", write_folder),
}


def is_standin(root: str | os.PathLike | None) -> bool:
    return isinstance(root, str) and root.startswith(PREFIX)


def standin_root(fmt: str, cache_dir: str | Path | None = None) -> Path:
    """The folder of stand-in ``fmt``, written on first use (atomically) and reused afterwards."""
    if fmt not in FORMATS:
        raise DataError(f"unknown stand-in {PREFIX}{fmt}; allowed: {', '.join(PREFIX + f for f in FORMATS)}")
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "standins"
    final = base / f"{fmt}-v{STANDIN_VERSION}"
    if final.is_dir():
        return final
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=base, prefix=f".{fmt}-"))
    try:
        FORMATS[fmt][1](tmp)
        try:
            os.rename(tmp, final)
        except OSError:  # another process finished first: keep its copy
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def resolve_root(name: str, root: str | os.PathLike | None) -> str | os.PathLike | None:
    """``root`` itself, or for ``standin:<format>`` the stand-in's folder (checked against data set ``name``)."""
    if not is_standin(root):
        return root
    fmt = str(root)[len(PREFIX):]
    if fmt not in FORMATS:
        raise DataError(f"unknown stand-in {root!r}; allowed: {', '.join(PREFIX + f for f in FORMATS)}")
    if FORMATS[fmt][0] != name:
        raise DataError(f"stand-in {root!r} is in the {FORMATS[fmt][0]} format, but the data set is {name!r}; use "
                        f"one of {', '.join(PREFIX + f for f, (d, _) in FORMATS.items() if d == name) or 'none'}")
    return str(standin_root(fmt))
