"""Any folder of images: ``root/{train,val,test}/<class>/<image>``, ``root/<class>/<image>`` or
``root/<superclass>/<class>/<image>`` (:func:`load_image_folder`), and the refusals of layouts that look like a data
set of classes but are not one (shared with the Omniglot reader)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from studylib.data.base import DataError, FewShotDataset, ImageSplit
from studylib.data.readers.common import (IMAGE_EXTENSIONS, SPLITS, _image_files, _scaled_class_counts, cache_path,
                                          cached, check_size, require_folder, split_payload, to_dataset)
from studylib.data.readers.images import decode_images

FOLDER_SPLITS = ("given", "random", "alphabet")
FOLDER_FRACTIONS = (0.64, 0.16, 0.20)  # miniImageNet's 64/16/20 classes
_FOLDER_HINT = ("arrange the images as <root>/train/<class>/<image>, <root>/val/<class>/<image> and "
                "<root>/test/<class>/<image>, and point data_root at <root>")
_FOLDER_LAYOUTS = ("split='given' reads <root>/{train,val,test}/<class>/<image>; split='random' reads "
                   "<root>/<class>/<image> and splits the classes; split='alphabet' reads "
                   "<root>/<superclass>/<class>/<image> and keeps each superclass in one split")


def _subfolders(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


# Layouts that look like a data set of classes but are not one (issue 20): refused before any decoding.
_SPLIT_NAMES = frozenset({"train", "training", "val", "valid", "validation", "test", "testing"})
_RUN_PARTS = frozenset({"training", "test"})  # Lake et al.'s all_runs/runNN/{training,test}/


def _one_shot_runs_error(dataset: str, where: Path | str, runs: Sequence[str]) -> DataError:
    """The refusal of Lake et al.'s one-shot benchmark (``all_runs/run01..run20/{training,test}/``)."""
    shown = ", ".join(sorted(runs)[:3]) + (", ..." if len(runs) > 3 else "")
    return DataError(
        f"{dataset}: {where} is Lake et al.'s one-shot classification benchmark (all_runs: {len(runs)} run(s) "
        f"{shown}, each one 20-way 1-shot episode: training/class01..20.png are the support images, test/item01..20.png "
        f"the queries, class_labels.txt the answers), not a data set of classes: its folders training/ and test/ "
        f"each hold 20 different characters. Point data_root at Omniglot's character images instead: "
        f"images_background.zip and images_evaluation.zip (or their unzipped folders) from "
        f"github.com/brendenlake/omniglot, or any folder laid out as <alphabet>/<character>/<image>.png")


def _one_shot_runs(children: dict[str, set[str]]) -> list[str]:
    """The names in ``{folder name: names of its subfolders}`` that are one-shot runs (``{training, test}``)."""
    return [n for n, sub in children.items() if sub and sub <= _RUN_PARTS and "training" in sub]


def _split_named(names: Iterable[str]) -> list[str]:
    """The names that are split names (train, val, test, ...), case-insensitive."""
    return sorted(n for n in names if n.lower() in _SPLIT_NAMES)


def _refuse_one_image_classes(counts: Sequence[int], dataset: str, where: Path | str, what: str) -> None:
    """Refuse a layout whose every class holds one image: one folder per image, not per class."""
    if len(counts) >= 2 and max(counts) == 1:
        raise DataError(f"{dataset}: every {what} folder under {where} holds exactly one image ({len(counts)} "
                        f"folders): that is one folder per image, not per class, and a few-shot class needs at "
                        f"least 2 images (shots + queries). Put the images of one class in one folder "
                        f"(<class>/<image>), or point data_root one level higher if these folders are images of "
                        f"classes one level up")


def _refuse_split_named(names: Iterable[str], dataset: str, where: Path, what: str, other: str = "point data_root "
                        "at one of them") -> None:
    """Refuse two or more ``what`` folders named as splits (a folder already split into train/val/test); warn for
    one (a class may be called "test", but it usually is a split). ``other``: the fix besides split='given'."""
    named = _split_named(names)
    if len(named) >= 2:
        plural = what[:-1] + "ies" if what.endswith("y") else what + ("es" if what.endswith("s") else "s")
        raise DataError(f"{dataset}: the {what} folders {', '.join(named)} under {where} are named as splits, not "
                        f"{plural}: this folder is already split. Read it with data='folder' and split='given' "
                        f"(<root>/train/<class>/, <root>/val/<class>/ and <root>/test/<class>/; add the missing "
                        f"split folder), or {other}")
    if named:
        warnings.warn(f"{dataset}: the {what} folder {named[0]} under {where} is named like a split; if it holds "
                      f"a split of the data rather than one {what}, use split='given' "
                      f"(<root>/{{train,val,test}}/<class>/)", stacklevel=3)


def _refuse_aliased_classes(classes: Sequence[tuple[str, Path, Sequence[Path]]], dataset: str, root: Path) -> None:
    """Refuse class folders that resolve to the same images: a folder that is another class's folder (a symlink to
    it), or an image file that is also an image of another class (a hard link or a symlink to the same file). Each
    would train (or test) the same images as two classes, without a word. ``classes``: ``(name, folder, files)``.
    One ``stat`` per file (the scan's own cost)."""
    def ident(p: Path) -> tuple[int, int] | None:
        try:
            st = p.stat()  # follows symlinks
        except OSError:
            return None
        return st.st_dev, st.st_ino

    folders: dict[tuple[int, int], str] = {}
    for name, folder, _ in classes:
        key = ident(folder)
        if key is not None and key in folders:
            link = " (a symlink)" if folder.is_symlink() else ""
            raise DataError(f"{dataset}: the class folder {folder}{link} is the same folder as class "
                            f"{folders[key]!r} ({folder.resolve()}): its images would train as a second class. "
                            f"Remove it, or make it a folder of its own images")
        if key is not None:
            folders[key] = name
    files: dict[tuple[int, int], tuple[str, Path]] = {}
    for name, _, fs in classes:
        shared = []
        for f in fs:
            key = ident(f)
            if key is None:
                continue
            other = files.get(key)
            if other is not None and other[0] != name:
                shared.append((f, other))
            else:
                files[key] = (name, f)
        if shared:
            f, (other, g) = shared[0]
            every = len(shared) == len(fs)
            raise DataError(f"{dataset}: {'every image' if every else f'{len(shared)} image(s)'} of class {name!r} "
                            f"{'is' if every else 'are'} also an image of class {other!r} (the same file: a hard link "
                            f"or a symlink; e.g. {f} and {g}): the same image cannot be two classes. Remove the "
                            f"links, or copy the files a class should really hold")


def _scan_image_folder(root: Path, dataset: str) -> dict[str, list[tuple[str, list[Path]]]]:
    layout: dict[str, list[tuple[str, list[Path]]]] = {}
    for s in SPLITS:
        d = root / s
        if not d.is_dir():
            found = _subfolders(root)
            runs = _one_shot_runs({root.name: {p.name for p in found}}) or \
                _one_shot_runs({a.name: {p.name for p in _subfolders(a)} for a in found})
            if runs:
                raise _one_shot_runs_error(dataset, root, runs)
            other = ""
            if found and not any((root / t).is_dir() for t in SPLITS):
                other = (f" It holds {len(found)} other folders ({', '.join(p.name for p in found[:4])}"
                         f"{', ...' if len(found) > 4 else ''}): if each is a class, use split='random' "
                         f"(<root>/<class>/<image>); if each holds class folders, use split='alphabet' "
                         f"(<root>/<superclass>/<class>/<image>).")
            raise DataError(f"{dataset}: no {s}/ folder under {root}; {_FOLDER_HINT}.{other}")
        classes = _subfolders(d)
        if not classes:
            raise DataError(f"{dataset}: {d} holds no class folders; {_FOLDER_HINT}")
        _refuse_split_named([c.name for c in classes], dataset, d, "class")
        entries = []
        for c in classes:
            files = _image_files(c)
            if not files:
                raise DataError(f"{dataset}: class folder {c} is empty (no image files with an extension in "
                                f"{sorted(IMAGE_EXTENSIONS)}); add its images or delete the folder")
            entries.append((c.name, files))
        layout[s] = entries
    _refuse_one_image_classes([len(fs) for s in SPLITS for _, fs in layout[s]], dataset, root, "class")
    _refuse_aliased_classes([(f"{s}/{c}", root / s / c, fs) for s in SPLITS for c, fs in layout[s]], dataset, root)
    return layout


def _scan_flat_classes(root: Path, dataset: str, split: str) -> list[tuple[str, str | None, list[Path]]]:
    """``[(class name, superclass name or None, image files)]`` of ``root/<class>/`` or ``root/<super>/<class>/``."""
    top = _subfolders(root)
    if {p.name for p in top} & set(SPLITS) == set(SPLITS):
        raise DataError(f"{dataset}: {root} holds train/, val/ and test/ folders, the layout of split='given'; "
                        f"use split='given' to keep those splits (split={split!r} expects "
                        f"{'<root>/<class>/<image>' if split == 'random' else '<root>/<superclass>/<class>/<image>'})")
    if not top:
        raise DataError(f"{dataset}: {root} holds no folders; {_FOLDER_LAYOUTS}")
    runs = _one_shot_runs({root.name: {p.name for p in top}}) or \
        _one_shot_runs({a.name: {p.name for p in _subfolders(a)} for a in top})
    if runs:
        raise _one_shot_runs_error(dataset, root, runs)
    _refuse_split_named([p.name for p in top], dataset, root, "class" if split == "random" else "superclass")
    out: list[tuple[str, str | None, list[Path]]] = []
    for a in top:
        if split == "random":
            files = _image_files(a)
            if not files:
                sub = _subfolders(a)
                why = (f"holds folders ({', '.join(p.name for p in sub[:3])}), not images: for "
                       f"<root>/<superclass>/<class>/<image> use split='alphabet'" if sub else
                       f"is empty (no image files with an extension in {sorted(IMAGE_EXTENSIONS)}): add its images "
                       f"or delete the folder")
                raise DataError(f"{dataset}: class folder {a} {why}")
            out.append((a.name, None, files))
            continue
        classes = _subfolders(a)
        if not classes:
            why = ("holds images but no class folders: for <root>/<class>/<image> use split='random'"
                   if _image_files(a) else "holds no class folders: add them or delete the folder")
            raise DataError(f"{dataset}: superclass folder {a} {why}")
        for c in classes:
            files = _image_files(c)
            if not files:
                raise DataError(f"{dataset}: class folder {c} is empty (no image files with an extension in "
                                f"{sorted(IMAGE_EXTENSIONS)}); add its images or delete the folder")
            out.append((f"{a.name}/{c.name}", a.name, files))
    _refuse_one_image_classes([len(fs) for _, _, fs in out], dataset, root, "class")
    _refuse_aliased_classes([(c, root / c, fs) for c, _, fs in out], dataset, root)
    return out


def _check_fractions(fractions: Sequence[float], dataset: str) -> tuple[float, float, float]:
    fr = tuple(float(f) for f in fractions)
    if len(fr) != 3 or min(fr) < 0 or fr[0] <= 0 or fr[2] <= 0:
        raise ValueError(f"{dataset}: fractions must be three numbers (train, val, test) with train > 0, test > 0 "
                         f"and val >= 0, got {tuple(fractions)}")
    total = sum(fr)
    return fr[0] / total, fr[1] / total, fr[2] / total


def _flat_assignment(entries: list[tuple[str, str | None, list[Path]]], split: str, seed: int,
                     fractions: tuple[float, float, float], dataset: str) -> np.ndarray:
    """``[K]`` split ids (0 train, 1 val, 2 test) of the classes of ``entries``, class- or superclass-disjoint.

    ``random``: classes permuted with ``torch.Generator().manual_seed(seed)``, then cut in ``fractions``
    (each split at least one class). ``alphabet``: superclasses (sorted names) permuted with the same
    generator; whole superclasses go to train/val/test in that order, each to the split whose cumulative
    class range holds its midpoint (:func:`_alphabet_assignment`), so no superclass is cut.
    """
    gen = torch.Generator().manual_seed(int(seed))
    n = len(entries)
    if split == "random":
        counts = _scaled_class_counts(n, fractions, dataset, "add classes, or use split='given' with your own "
                                                            "train/val/test folders")
        ids = np.repeat(np.array([0, 1, 2]), counts)
        out = np.empty(n, dtype=np.int64)
        out[torch.randperm(n, generator=gen).numpy()] = ids
        return out
    supers = sorted({str(sup) for _, sup, _ in entries})
    order = [supers[i] for i in torch.randperm(len(supers), generator=gen).tolist()]
    sizes = [sum(1 for _, sup, _ in entries if sup == a) for a in order]
    assign = _alphabet_assignment(sizes, fractions)
    counts = np.bincount(np.asarray(assign, dtype=np.int64), minlength=3)
    if (counts[[0, 2]] == 0).any() or (fractions[1] > 0 and counts[1] == 0):
        empty = [SPLITS[i] for i in range(3) if counts[i] == 0]
        raise DataError(f"{dataset}: split='alphabet' leaves no superclass for {empty} ({len(supers)} superclasses "
                        f"with {sorted(sizes, reverse=True)} classes); add superclass folders, or use "
                        f"split='random' to split by class")
    of_super = dict(zip(order, assign))
    return np.array([of_super[str(sup)] for _, sup, _ in entries], dtype=np.int64)


def _alphabet_assignment(sizes: list[int], fractions: tuple[float, ...]) -> list[int]:
    """Assign whole alphabets (in the given order, with ``sizes`` characters each) to consecutive splits.

    An alphabet goes to the split whose cumulative character range (``fractions`` of the total) holds the
    alphabet's midpoint, so split sizes approach the fractions without cutting an alphabet. A split left
    empty (a small copy, a narrow val range) then takes the boundary alphabet of a neighbour that has two or
    more, so the assignment stays in order.
    """
    total = float(sum(sizes))
    bounds = np.cumsum(fractions)[:-1] * total
    out, start = [], 0
    for size in sizes:
        out.append(int(np.searchsorted(bounds, start + size / 2.0, side="right")))
        start += size
    for j in range(len(fractions)):
        counts = np.bincount(out, minlength=len(fractions))
        if counts[j] or not fractions[j]:
            continue
        if j > 0 and counts[j - 1] > 1:
            out[max(i for i, v in enumerate(out) if v == j - 1)] = j
        elif j + 1 < len(fractions) and counts[j + 1] > 1:
            out[min(i for i, v in enumerate(out) if v == j + 1)] = j
    return out


def load_image_folder(root: str | os.PathLike, size: int = 84, cache: bool = True, *, split: str = "given",
                      seed: int = 0, fractions: Sequence[float] = FOLDER_FRACTIONS, mode: str = "RGB",
                      dataset_name: str = "folder") -> FewShotDataset:
    """Read a folder of your own images: class names are folder names (sorted); images resized to ``size``.

    Layouts (``split``):

    * ``"given"``: ``root/{train,val,test}/<class>/<image>``, the splits as the folders hold them.
    * ``"random"``: ``root/<class>/<image>``; the classes are split class-disjointly by a seeded permutation
      (``torch.Generator().manual_seed(seed)``) in ``fractions`` (train, val, test; default 64:16:20, each
      split at least one class).
    * ``"alphabet"``: ``root/<superclass>/<class>/<image>`` (Omniglot's ``<alphabet>/<character>/*.png``,
      any super-category layout); whole superclasses go to one split (seeded order, ``fractions`` of the
      classes), so all characters of an alphabet share a split. Class names are ``"<superclass>/<class>"``
      and every split carries ``superclass`` / ``superclass_names``.

    Args:
        root: the folder (a relative path is taken relative to the repository root).
        size: output side; images are resized to ``size x size`` without cropping.
        cache: keep the decoded arrays in the on-disk decode cache.
        split, seed, fractions: the layout and split rule above (``seed``/``fractions`` unused for ``given``).
        mode: ``"RGB"`` (3 channels) or ``"L"`` (1 channel, e.g. for Omniglot-like strokes).
        dataset_name: name used in messages and in ``FewShotDataset.name``.

    Returns:
        A FewShotDataset with ``[N, C, size, size]`` uint8 images per split.
    """
    size = check_size(size)
    if split not in FOLDER_SPLITS:
        raise ValueError(f"{dataset_name}: unknown split {split!r}; allowed: {', '.join(FOLDER_SPLITS)} "
                         f"({_FOLDER_LAYOUTS})")
    if mode not in ("RGB", "L"):
        raise ValueError(f"{dataset_name}: mode must be 'RGB' or 'L', got {mode!r}")
    root = require_folder(root, dataset_name, _FOLDER_HINT if split == "given" else _FOLDER_LAYOUTS)
    if split != "given":
        return _load_flat_folder(root, size, cache, split, seed, _check_fractions(fractions, dataset_name), mode,
                                 dataset_name)
    layout = _scan_image_folder(root, dataset_name)
    files = [f for s in SPLITS for _, fs in layout[s] for f in fs]
    options: dict[str, Any] = {"layout": "folder"} if mode == "RGB" else {"layout": "folder", "mode": mode}
    path = cache_path(dataset_name, root, size, options, files) if cache else None

    def build() -> dict[str, Any]:
        splits = {}
        for s in SPLITS:
            paths = [f for _, fs in layout[s] for f in fs]
            labels = np.concatenate([np.full(len(fs), k) for k, (_, fs) in enumerate(layout[s])])
            names = [c for c, _ in layout[s]]
            splits[s] = split_payload(decode_images(paths, size, mode), labels, lambda k, names=names: names[k])
        return {"splits": splits, "info": {"root": str(root), "layout": "folder", "size": size}}

    dataset = to_dataset(dataset_name, cached(path, build), path)
    dataset.info["decode"] = {"mode": mode, "invert": False}  # a run's preprocessing record (studylib.api)
    return dataset


def _load_flat_folder(root: Path, size: int, cache: bool, split: str, seed: int,
                      fractions: tuple[float, float, float], mode: str, dataset_name: str) -> FewShotDataset:
    """``root/<class>/`` or ``root/<superclass>/<class>/`` split by :func:`_flat_assignment` (see above)."""
    entries = _scan_flat_classes(root, dataset_name, split)
    files = [f for _, _, fs in entries for f in fs]
    path = (cache_path(dataset_name, root, size, {"layout": f"flat-{split}", "mode": mode}, files)
            if cache else None)

    def build() -> dict[str, Any]:  # decoding does not depend on the split rule, so seeds share the cache
        return {"images": decode_images(files, size, mode),
                "class_of_image": torch.repeat_interleave(torch.arange(len(entries)),
                                                          torch.tensor([len(fs) for _, _, fs in entries]))}

    payload = cached(path, build)
    assign = _flat_assignment(entries, split, seed, fractions, dataset_name)
    splits = {}
    for sid, s in enumerate(SPLITS):
        chosen = np.flatnonzero(assign == sid)
        local = torch.full((len(entries),), -1, dtype=torch.long)
        local[torch.from_numpy(chosen)] = torch.arange(len(chosen))
        lab = local[payload["class_of_image"]]
        keep = lab >= 0
        names = [entries[int(c)][0] for c in chosen]
        sup = sup_names = None
        if split == "alphabet":
            sup_of = [str(entries[int(c)][1]) for c in chosen]
            sup_names = sorted(set(sup_of))
            sup = torch.tensor([sup_names.index(a) for a in sup_of], dtype=torch.long)
        splits[s] = ImageSplit(payload["images"][keep].contiguous(), lab[keep], names, sup, sup_names,
                               name=f"{dataset_name}/{s}")
    info = {"root": str(root), "layout": f"<root>/<superclass>/<class>/<image>" if split == "alphabet" else
            "<root>/<class>/<image>", "split": split, "seed": seed, "fractions": list(fractions), "size": size,
            "classes": {s: int((assign == i).sum()) for i, s in enumerate(SPLITS)},
            "cache_file": str(path) if path is not None else None, "decode": {"mode": mode, "invert": False}}
    return FewShotDataset(dataset_name, splits, info)
