"""What every reader shares: the splits, folders and paths, the decode cache, and the payload -> FewShotDataset
step (:func:`to_dataset`)."""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch

from studylib.data.base import ROOT_RULE, DataError, FewShotDataset, ImageSplit, resolve_root
from studylib.utils import atomic_torch_save, config_hash, default_cache_dir

SPLITS = ("train", "val", "test")
IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"})
CACHE_VERSION = 1

# Bounds on what a data file may declare (issue 40), checked before a file is read whole or a pixel is unpacked, so a
# hostile or damaged file costs one line, never the machine's memory. One place for all of them: the folder and
# Omniglot readers, the decoding (hence studylib.api's embed and classify) and the pre-flight (./study check) use
# these. The real data the study reads is far below each: Omniglot's PNGs are 105x105 (11,025 pixels) and at most
# a few hundred bytes (the largest member of images_background_small1.zip: 413 bytes), CUB-200-2011's JPEGs are at
# most 500 px a side, miniImageNet's and tieredImageNet's are ImageNet photos or 84x84 PNGs.
MAX_IMAGE_PIXELS = 178_956_970
"""Pixels (width x height) an image's header may declare: Pillow's own refusal bound (twice its
``Image.MAX_IMAGE_PIXELS`` of 89,478,485, above which ``Image.open`` raises ``DecompressionBombError``), so no image
that Pillow decoded before is refused (a 50-megapixel camera photo is 28% of it; a 13,377 x 13,377 image fits), but
applied from the header, before any pixel data is inflated, whatever Pillow's global says (the PNG check used to
inflate first: a 9 MB PNG declaring 16000x16000 16-bit RGBA took 4.7 GB). At the bound an RGBA decode is 716 MB."""
MAX_IMAGE_BYTES = 512 << 20
"""Bytes an image file, or an image member of a zip (its declared unpacked size), may hold: 512 MiB admits every
uncompressed 8-bit RGBA image (BMP, TIFF, PPM) below Pillow's warning bound of 89.5 megapixels (358 MB), and a camera
JPEG (tens of MB) ten times over, while a file is read whole into memory only below it (before: a 4 GiB file named
.png, or a zip member inflating to 3 GB, was read whole and ended in a bare MemoryError)."""
MAX_ZIP_DIRECTORY_BYTES = 64 << 20
"""Bytes a zip's central directory (the list of its members, which :mod:`zipfile` parses whole on opening) may
declare: Lake et al.'s full images_background.zip lists about 20,000 members in about 2.3 MB (the subset's 2,862
members take 325 KB), so 64 MiB is some 28 times the largest real one; above it a zip would cost gigabytes of
member records before a single one is read."""
ZIP_READ_BYTES = 64 << 20
"""Unpacked bytes of zip members held at once while reading a zip: members are read and decoded in groups of at
most this many bytes (at least one member each), so a zip's images are never all in memory as encoded bytes."""
BIG_IMAGE_BYTES = 32 << 20
"""An image file above this many bytes, or one declaring more than :data:`BIG_IMAGE_PIXELS`, is read and decoded by
one thread at a time (the others go on with small images), so the decoding threads together never hold more than
one big image plus a thread's worth of small ones each, however many big images a folder holds."""
BIG_IMAGE_PIXELS = 1 << 24
"""Pixels above which an image is big (:data:`BIG_IMAGE_BYTES`): 16.8 megapixels, 67 MB as RGBA."""


def check_size(size: int) -> int:
    """``size`` as a positive int, else ValueError."""
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ValueError(f"size must be a positive int (the output side in pixels), got {size!r}")
    return int(size)


def _rule_note(root: str | os.PathLike) -> str:
    """The relative-path rule, for messages about a ``root`` that was given as a relative path."""
    return "" if Path(root).expanduser().is_absolute() else f" ({ROOT_RULE})"


def require_folder(root: str | os.PathLike, dataset: str, hint: str) -> Path:
    """The absolute ``root`` folder (:func:`resolve_root`), or a DataError naming that path and the fix."""
    path = resolve_root(root)
    if not path.exists():
        raise DataError(f"{dataset}: data folder {path} does not exist{_rule_note(root)}; {hint}")
    if not path.is_dir():
        raise DataError(f"{dataset}: {path} is not a folder; {hint}")
    return path.resolve()


def fingerprint(files: Iterable[Path]) -> str:
    """SHA-256 of the sorted (path, size, mtime) of ``files``: changes when any source file changes."""
    h = hashlib.sha256()
    for f in sorted(set(files)):
        st = f.stat()
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def cache_path(reader: str, root: Path, size: int, options: dict[str, Any], files: Iterable[Path]) -> Path:
    """Where the decoded arrays of this (reader, root, size, options, source files) are cached."""
    key = {"reader": reader, "root": str(root), "size": size, "options": options,
           "fingerprint": fingerprint(files), "version": CACHE_VERSION}
    return default_cache_dir() / "decoded" / f"{reader}-{config_hash(key, 20)}.pt"


def cached(path: Path | None, build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Load the payload cached at ``path``, or ``build()`` it and save it there atomically.

    ``path=None`` disables the cache. The payload holds only tensors, strings, numbers, lists, dicts and
    ``None``, so it loads with ``weights_only=True``. An unreadable cache file is rebuilt with a warning.
    """
    if path is None:
        return build()
    if path.is_file():
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # a damaged cache must never stop a run: decode again
            warnings.warn(f"ignoring unreadable decode cache {path} ({type(e).__name__}: {e}); decoding again")
    payload = build()
    try:
        atomic_torch_save(payload, path)
    except OSError as e:
        warnings.warn(f"could not write decode cache {path} ({e}); the next load decodes again")
    return payload


def split_payload(images: torch.Tensor, raw_labels: np.ndarray, class_name: Callable[[Any], str],
                  superclass_of: Callable[[Any], str] | None = None) -> dict[str, Any]:
    """Relabel one split ``0..K-1`` (classes in sorted order of ``raw_labels``) and attach names.

    Args:
        images: ``[N, C, H, W]`` uint8.
        raw_labels: ``[N]`` class keys (ints or strings) as the file stores them.
        class_name: the name of a raw class key.
        superclass_of: the superclass name of a raw class key, or None.
    """
    uniq, local = np.unique(np.asarray(raw_labels), return_inverse=True)
    out: dict[str, Any] = {"images": images, "labels": torch.from_numpy(local.reshape(-1).astype(np.int64)),
                           "class_names": [class_name(u.item() if hasattr(u, "item") else u) for u in uniq],
                           "superclass": None, "superclass_names": None}
    if superclass_of is not None:
        sup = [superclass_of(u.item() if hasattr(u, "item") else u) for u in uniq]
        sup_names = sorted(set(sup))
        out["superclass"] = torch.tensor([sup_names.index(s) for s in sup], dtype=torch.long)
        out["superclass_names"] = sup_names
    return out


def to_dataset(name: str, payload: dict[str, Any], cache_file: Path | None) -> FewShotDataset:
    """Build the :class:`FewShotDataset` from a payload ``{"splits": {split: split_payload}, "info": {...}}``.

    Raises DataError when a class name appears in two splits (few-shot splits must be class-disjoint).
    """
    splits = {}
    for s in SPLITS:
        p = payload["splits"][s]
        splits[s] = ImageSplit(p["images"], p["labels"], list(p["class_names"]), p["superclass"],
                               p["superclass_names"], name=f"{name}/{s}")
    seen: dict[str, str] = {}
    for s, sp in splits.items():
        for c in sp.class_names:
            if c in seen:
                raise DataError(f"{name}: class {c!r} is in both the {seen[c]} and the {s} split; few-shot splits "
                                f"must be class-disjoint: move or rename that class")
            seen[c] = s
    info = dict(payload.get("info", {}))
    info["cache_file"] = str(cache_file) if cache_file is not None else None
    return FewShotDataset(name, splits, info)


def _image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in IMAGE_EXTENSIONS)


def _scaled_class_counts(n: int, fractions: tuple[float, float, float], dataset: str, fix: str) -> tuple[int, int, int]:
    """Split ``n`` ordered classes into train/val/test counts in the given proportions (each at least 1)."""
    n_val = max(1, round(n * fractions[1]))
    n_test = max(1, round(n * fractions[2]))
    n_train = n - n_val - n_test
    if n_train < 1:
        raise DataError(f"{dataset}: only {n} classes, too few for train/val/test splits; {fix}")
    return n_train, n_val, n_test
