"""Omniglot: Lake et al.'s zips, their unzipped folders, or any ``<alphabet>/<character>/<image>.png`` folder."""

from __future__ import annotations

import collections
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from studylib.data.base import DataError, FewShotDataset, ImageSplit, resolve_root
from studylib.data.readers.common import SPLITS, _rule_note, _scaled_class_counts, cache_path, cached, check_size
from studylib.data.readers.folder import (_alphabet_assignment, _one_shot_runs, _one_shot_runs_error,
                                          _refuse_aliased_classes, _refuse_one_image_classes,
                                          _refuse_split_named, _subfolders)
from studylib.data.readers import images as _images
from studylib.data.readers.zips import check_member, open_zip, read_members, refuse_duplicates

OMNIGLOT_SPLITS = ("vinyals", "background-evaluation", "alphabet", "random")
# Snell et al.'s version of the Vinyals et al. protocol on the full 1623 characters: 1028 train, 172 val,
# 423 test characters (1200 = train + val are Vinyals et al.'s training characters).
OMNIGLOT_VINYALS_COUNTS = (1028, 172, 423)
_OMNI_FRACTIONS = tuple(c / sum(OMNIGLOT_VINYALS_COUNTS) for c in OMNIGLOT_VINYALS_COUNTS)
_OMNI_LAYOUT = ("expected one of: Lake et al.'s images_background*.zip / images_evaluation*.zip; their unzipped "
                "folders images_background*/<alphabet>/<character>/<image>.png and images_evaluation*/...; or any "
                "folder laid out as <alphabet>/<character>/<image>.png (point data_root at that folder)")
_OMNI_HINT = ("point data_root at a folder holding Lake et al.'s images_background.zip and images_evaluation.zip "
              "(or a subset such as images_background_small1.zip), zipped or unzipped, or at any folder laid out as "
              "<alphabet>/<character>/<image>.png")
_OMNI_KINDS = ("background", "evaluation")


class _OmniSource:
    """One Omniglot archive: a zip, or its unzipped top folder ``images_background*`` / ``images_evaluation*``."""

    def __init__(self, kind: str, top: str, path: Path, is_zip: bool) -> None:
        self.kind, self.top, self.path, self.is_zip = kind, top, path, is_zip

    def __repr__(self) -> str:
        return f"{self.path}" + (f" ({self.top}/)" if self.is_zip else "")


def _omniglot_kind(top: str) -> str | None:
    for kind in _OMNI_KINDS:
        if top.startswith(f"images_{kind}"):
            return kind
    return None


def _has_character_layout(folder: Path) -> bool:
    """Whether ``folder`` holds ``<alphabet>/<character>/<image>.png`` (at least one such image)."""
    for a in _subfolders(folder):
        for c in _subfolders(a):
            if any(p.is_file() and p.suffix.lower() == ".png" and not p.name.startswith(".") for p in c.iterdir()):
                return True
    return False


def _describe_folder(folder: Path, limit: int = 8) -> str:
    """A short listing of ``folder`` for messages: names, ``/`` after folders."""
    items = sorted(folder.iterdir(), key=lambda p: p.name)
    shown = [p.name + ("/" if p.is_dir() else "") for p in items[:limit]]
    return (", ".join(shown) + (f", ... ({len(items)} entries)" if len(items) > limit else "")) or "nothing"


def _safe_members(path: Path, names: list[str]) -> list[str]:
    """The members of a zip without ``..`` parts or an absolute path; each stray one is skipped with a warning."""
    safe = []
    for n in names:
        parts = n.replace("\\", "/").split("/")
        if n.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
            warnings.warn(f"omniglot: skipping the member {n!r} of {path}: it points outside the archive's folder "
                          f"(the rest of the archive is read)", stacklevel=3)
            continue
        safe.append(n)
    return safe


def _zip_names(path: Path, strict: bool) -> list[str] | None:
    """The member names of a zip without the stray ones (:func:`_safe_members`), or None for an unreadable zip when
    not ``strict`` (``strict``: the DataError of :func:`~.zips.open_zip`, naming the file and the fix)."""
    try:
        with open_zip(path, "omniglot") as zf:
            names = zf.namelist()
    except DataError:
        if strict:
            raise
        return None
    return _safe_members(path, names)


def _zip_top(path: Path, strict: bool) -> str | None:
    """The single top folder of a zip, or None. ``strict``: an unreadable zip is a DataError, else skipped."""
    names = _zip_names(path, strict)
    if names is None:
        return None
    tops = {n.split("/", 1)[0] for n in names if n and not n.startswith("__MACOSX")}
    return tops.pop() if len(tops) == 1 else None


def _nested_omniglot_zips(path: Path) -> list[str]:
    """The members of the zip ``path`` that are Omniglot zips themselves (``.../images_background*.zip``): a zip of
    the authors' repository, such as GitHub's omniglot-master.zip."""
    with warnings.catch_warnings():  # stray members were warned about by _zip_top
        warnings.simplefilter("ignore")
        names = _zip_names(path, strict=False) or []
    return sorted(n for n in names if n.lower().endswith(".zip") and _omniglot_kind(n.rsplit("/", 1)[-1]))


def _zip_of_zips_error(path: Path, nested: list[str]) -> DataError:
    folder = nested[0].rsplit("/", 1)[0] if "/" in nested[0] else ""
    where = path.parent / folder if folder else path.parent
    return DataError(f"omniglot: {path} is a zip of zips ({', '.join(nested[:3])}{', ...' if len(nested) > 3 else ''}"
                     f"), such as GitHub's download of Lake et al.'s repository, omniglot-master.zip: unzip it "
                     f"(unzip {path} -d {path.parent}) and point data_root at the folder that holds those zips, "
                     f"{where}")


def _find_omniglot_sources(root: Path) -> tuple[list[_OmniSource], list[str]]:
    """Omniglot archives under ``root`` (or ``root`` itself): background first, then evaluation.

    An unzipped folder wins over a zip with the same top folder, and the full ``images_background`` /
    ``images_evaluation`` wins over its ``_small*`` subsets (which it contains). With none of those, ``root``
    itself is read when it is laid out as ``<alphabet>/<character>/<image>.png`` (whatever its name; its
    alphabets count as background alphabets), and so is a zip whose single top folder has that layout.
    Returns (sources, ignored).
    """
    candidates: list[_OmniSource] = []
    if root.is_file():
        if root.suffix.lower() != ".zip":
            raise DataError(f"omniglot: {root} is neither a folder nor a .zip; {_OMNI_HINT}")
        zips, dirs = [root], []
    elif _omniglot_kind(root.name) and not any(_omniglot_kind(p.name) for p in root.iterdir()):
        zips, dirs = [], [root]  # the user pointed at an unzipped top folder itself
    else:
        zips = sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() == ".zip")
        dirs = sorted(p for p in root.iterdir() if p.is_dir() and _omniglot_kind(p.name))
    for d in dirs:
        candidates.append(_OmniSource(str(_omniglot_kind(d.name)), d.name, d, False))
    for z in zips:
        top = _zip_top(z, strict=root.is_file() or _omniglot_kind(z.stem) is not None)
        kind = _omniglot_kind(top) if top else None
        if kind:
            candidates.append(_OmniSource(kind, str(top), z, True))
        elif top and root.is_file():  # the user named this zip: any top folder of <alphabet>/<character>/ PNGs
            candidates.append(_OmniSource("background", top, z, True))
    if not candidates and root.is_dir() and _has_character_layout(root):
        candidates.append(_OmniSource("background", root.name, root, False))
    if not candidates or (root.is_file() and candidates[0].kind == "background" and not _omniglot_kind(
            candidates[0].top)):  # a zip of the authors' zips (any top folder) reads as an empty alphabet folder
        for z in zips:
            nested = _nested_omniglot_zips(z)
            if nested:
                raise _zip_of_zips_error(z, nested)
    chosen: dict[str, _OmniSource] = {}
    ignored: list[str] = []
    for c in candidates:  # folders come first, so they win over zips of the same top folder
        if c.top in chosen:
            ignored.append(f"{c.path}: same top folder as {chosen[c.top].path}")
        else:
            chosen[c.top] = c
    for kind in _OMNI_KINDS:
        full = f"images_{kind}"
        if full in chosen:
            for top in [t for t, c in chosen.items() if c.kind == kind and t != full]:
                ignored.append(f"{chosen.pop(top).path}: a subset of {chosen[full].path}")
    order = sorted(chosen.values(), key=lambda c: (_OMNI_KINDS.index(c.kind), c.top))
    return order, ignored


def _list_omniglot_source(src: _OmniSource) -> dict[tuple[str, str], list[str]]:
    """``{(alphabet, character): [sorted PNG member names or file paths]}`` of one source."""
    chars: dict[tuple[str, str], list[str]] = {}
    alphabets: set[str] = set()
    if src.is_zip:
        with open_zip(src.path, "omniglot") as zf:
            infos = zf.infolist()
        with warnings.catch_warnings():  # warned once already, by _zip_top
            warnings.simplefilter("ignore")
            safe = set(_safe_members(src.path, [i.filename for i in infos]))
        images = []
        for info in infos:
            name = info.filename
            if name not in safe:
                continue
            parts = name.split("/")
            if parts[0] != src.top or len(parts) < 3:
                continue
            alphabets.add(parts[1])
            if len(parts) == 4 and parts[2]:
                entry = chars.setdefault((parts[1], parts[2]), [])
                if parts[3].lower().endswith(".png"):
                    entry.append(name)
                    images.append(info)
        refuse_duplicates(src.path, images, "omniglot")  # before: one name twice was read twice, as two images
        for info in images:  # encrypted, deflate64 or bomb members refused before a byte is read
            check_member(src.path, info, "omniglot")
    else:
        for a in sorted(p for p in src.path.iterdir() if p.is_dir() and not p.name.startswith(".")):
            alphabets.add(a.name)
            for c in sorted(p for p in a.iterdir() if p.is_dir() and not p.name.startswith(".")):
                chars[(a.name, c.name)] = [str(p) for p in c.iterdir()
                                           if p.is_file() and p.suffix.lower() == ".png" and not p.name.startswith(".")]
    if not src.is_zip:  # unzipped: a character folder may be a link to another one
        _refuse_aliased_classes([(f"{a}/{c}", src.path / a / c, [Path(f) for f in files])
                                 for (a, c), files in chars.items()], "omniglot", src.path)
    for (a, c), files in chars.items():
        if not files:
            raise DataError(f"omniglot: character folder {src.top}/{a}/{c} in {src.path} holds no .png images; "
                            f"extract the archive again or delete that empty folder")
        files.sort()
    for a in sorted(alphabets - {a for a, _ in chars}):
        raise DataError(f"omniglot: alphabet folder {src.top}/{a} in {src.path} holds no character folders; "
                        f"extract the archive again or delete that empty folder")
    if not chars:
        raise DataError(f"omniglot: {src.path} holds no <alphabet>/<character>/<image>.png under {src.top}/; {_OMNI_HINT}")
    return chars


def _omniglot_assignment(kinds: list[str], alphabets: list[str], split: str, seed: int) -> np.ndarray:
    """``[n_chars]`` split ids (0 train, 1 val, 2 test) of characters given in canonical order."""
    n = len(alphabets)
    fix = "use a copy with more characters or alphabets, or another split rule"
    if split in ("vinyals", "random"):
        n_train, n_val, n_test = _scaled_class_counts(n, _OMNI_FRACTIONS, "omniglot", fix)
        ids = np.repeat(np.array([0, 1, 2]), [n_train, n_val, n_test])
        if split == "vinyals":
            return ids
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).numpy()
        out = np.empty(n, dtype=np.int64)
        out[perm] = ids
        return out
    # whole-alphabet rules; alphabets in canonical order (background first, then names sorted)
    alpha_order = list(dict.fromkeys(zip(kinds, alphabets)))
    sizes = [sum(1 for ka in zip(kinds, alphabets) if ka == key) for key in alpha_order]
    if split == "alphabet":
        assign = _alphabet_assignment(sizes, _OMNI_FRACTIONS)
    else:  # background-evaluation
        if "evaluation" not in kinds:
            raise DataError("omniglot: split='background-evaluation' needs images_evaluation (zip or folder) next to "
                            "images_background; add it to data_root, or use split='alphabet' to hold out whole "
                            "background alphabets instead")
        bg = [i for i, (k, _) in enumerate(alpha_order) if k == "background"]
        if not bg:
            raise DataError("omniglot: split='background-evaluation' needs images_background next to "
                            "images_evaluation; add it to data_root")
        bg_assign = _alphabet_assignment([sizes[i] for i in bg], (1028 / 1200, 172 / 1200))
        assign = [2] * len(alpha_order)
        for i, a in zip(bg, bg_assign):
            assign[i] = a
    counts = np.bincount(np.asarray(assign), minlength=3)
    if (counts == 0).any():
        empty = [SPLITS[i] for i in range(3) if counts[i] == 0]
        raise DataError(f"omniglot: split={split!r} leaves no alphabet for {empty} ({len(alpha_order)} alphabets "
                        f"with {sizes} characters); {fix} (split='vinyals' and 'random' cut by character)")
    of_alpha = dict(zip(alpha_order, assign))
    return np.array([of_alpha[ka] for ka in zip(kinds, alphabets)], dtype=np.int64)


def _refuse_omniglot_lookalikes(listing: list[tuple[str, str, str, _OmniSource, list[str]]], root: Path) -> None:
    """Refuse what reads as ``<alphabet>/<character>/*.png`` but is not Omniglot's characters: Lake's one-shot
    ``all_runs`` (alphabets ``runNN`` of characters ``training``/``test``), a folder already split into
    train/val/test, or character folders of one image each."""
    children: dict[str, set[str]] = collections.defaultdict(set)
    for _, a, c, _, _ in listing:
        children[a].add(c)
    runs = _one_shot_runs(children)
    if runs:
        raise _one_shot_runs_error("omniglot", root, runs)
    _refuse_split_named(children, "omniglot", root, "alphabet",
                        "point data_root at Omniglot's <alphabet>/<character>/<image>.png folders")
    _refuse_one_image_classes([len(fs) for *_, fs in listing], "omniglot", root, "character")


def _scan_omniglot(root: str | os.PathLike) -> tuple[Path, list[_OmniSource], list[str],
                                                     list[tuple[str, str, str, _OmniSource, list[str]]]]:
    """``(resolved root, sources, ignored, listing)`` of an Omniglot ``root``, with every refusal of the reader
    before anything is decoded: no such path, no Omniglot under it (a zip of the authors' zips said as such), an
    unreadable zip, empty folders, an alphabet in two archives, the look-alikes, and, in a zip, members whose name
    appears twice, that are encrypted, compressed with a method zipfile cannot read, or declare more than
    :data:`~.common.MAX_IMAGE_BYTES`. ``listing``: ``(kind, alphabet, character, source, files)`` in canonical
    order."""
    path_in = resolve_root(root)
    if not path_in.exists():
        raise DataError(f"omniglot: data folder {path_in} does not exist{_rule_note(root)}; {_OMNI_HINT}")
    root_p = path_in.resolve()
    sources, ignored = _find_omniglot_sources(root_p)
    if not sources:
        if root_p.is_dir():
            runs = _one_shot_runs({root_p.name: {p.name for p in _subfolders(root_p)}})
            if runs:
                raise _one_shot_runs_error("omniglot", root_p, runs)
        found = _describe_folder(root_p) if root_p.is_dir() else _describe_zip(root_p)
        deeper = sorted(p for pattern in ("*/images_*", "*/*/images_*") for p in root_p.glob(pattern)
                        if _omniglot_kind(p.name) and (p.is_dir() or p.suffix.lower() == ".zip")) \
            if root_p.is_dir() else []
        if deeper:  # e.g. GitHub's omniglot-master/ unzipped, whose zips are in python/
            found += (f"; further down: {', '.join(str(p.relative_to(root_p)) for p in deeper[:3])}"
                      f"{', ...' if len(deeper) > 3 else ''}: point data_root at {deeper[0].parent}")
        raise DataError(f"omniglot: no Omniglot images under {root_p}; {_OMNI_LAYOUT}. Found: {found}")
    listing: list[tuple[str, str, str, _OmniSource, list[str]]] = []
    seen_alpha: dict[str, _OmniSource] = {}
    for src in sources:
        chars = _list_omniglot_source(src)
        for a in sorted({a for a, _ in chars}):
            if a in seen_alpha:
                raise DataError(f"omniglot: alphabet {a} is in both {seen_alpha[a].path} and {src.path}; keep only one "
                                f"copy of it under {root_p}")
            seen_alpha[a] = src
        listing.extend((src.kind, a, c, src, files) for (a, c), files in sorted(chars.items()))
    _refuse_omniglot_lookalikes(listing, root_p)
    return root_p, sources, ignored, listing


def _describe_zip(path: Path, limit: int = 8) -> str:
    """A zip's top folders for messages (``nothing`` for a zip without members)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        names = _zip_names(path, strict=True) or []
    tops = sorted({n.split("/", 1)[0] + ("/" if "/" in n else "") for n in names if n})
    if not tops:
        return "the zip holds no members"
    shown = ", ".join(tops[:limit]) + (f", ... ({len(tops)} entries)" if len(tops) > limit else "")
    return f"the zip's top level holds {shown} (one top folder <name>/<alphabet>/<character>/<image>.png is read)"


def load_omniglot(root: str | os.PathLike, size: int = 28, rotations: bool = False, split: str = "vinyals",
                  seed: int = 0, cache: bool = True) -> FewShotDataset:
    """Read Omniglot (Lake et al.) from the authors' zips or their unzipped folders.

    ``root`` is a folder holding ``images_background*.zip`` / ``images_evaluation*.zip`` (any zip whose top
    folder is ``images_background*`` or ``images_evaluation*``) and/or the unzipped folders
    ``images_background*/<Alphabet>/<character>/<image>.png``; a single such zip or top folder also works, and
    so does any folder (or a zip of one) laid out as ``<Alphabet>/<character>/<image>.png`` whatever its name
    (its alphabets count as background alphabets, so ``split="background-evaluation"`` needs the authors'
    evaluation archive; ``"alphabet"`` holds out whole alphabets of any copy).

    Pixels: the PNGs are 105x105 1-bit images with a white background. This reader stores **ink = 255 on a
    background of 0** (inverted), so zero padding and rotation keep the background, and resizes with PIL's
    antialiased bilinear filter (strokes become grey at the edges; ``size=105`` keeps the exact pixels).
    Images are ``[N, 1, size, size]`` uint8.

    Rotations (Vinyals et al.; Snell et al.): with ``rotations=True`` each character becomes four classes
    ``"<Alphabet>/<character>/rot000|rot090|rot180|rot270"``; rotation ``r`` is ``torch.rot90(image, r // 90,
    dims=(-2, -1))`` (counter-clockwise). All rotations of a character land in the same split, and the
    split rules below pick characters, never rotation classes.

    Split rules (characters in canonical order: background alphabets before evaluation alphabets,
    alphabets and then characters sorted by name):

    * ``"vinyals"``: the first 1028 characters train, the next 172 val, the last 423 test, i.e. Snell et
      al.'s 1028/172/423 counts of the Vinyals protocol (1200 train+val / 423 test); with fewer characters
      the counts are scaled by the same proportions. This is a deterministic approximation: the authors'
      exact character lists are not available here. With the published per-alphabet counts (not checked
      here) its 423 test characters on the full set are the last 423 evaluation characters, from
      Gurmukhi/character42 on; its 172 val characters are evaluation characters too, whereas Snell et al.'s
      val list holds five whole background alphabets (Hebrew, Mkhedruli, Armenian, Early_Aramaic, Bengali).
      Report results under this rule as a "Vinyals-style split", not as the exact lists.
    * ``"background-evaluation"``: Lake et al.'s split. Test = all evaluation alphabets; background alphabets
      are split by whole alphabets into train/val (about 1028:172 characters, see ``_alphabet_assignment``).
    * ``"alphabet"``: whole alphabets in canonical order go to train/val/test in 1028:172:423 proportion
      (each alphabet to the split holding its midpoint): an alphabet-disjoint split for any copy, e.g. one
      holding only background alphabets.
    * ``"random"``: characters permuted with ``torch.Generator().manual_seed(seed)``, then 1028:172:423.

    Superclass = alphabet. Decoded images are cached on disk (the split rule and rotations are applied after
    loading the cache, so changing them costs no decoding).
    """
    size = check_size(size)
    if split not in OMNIGLOT_SPLITS:
        raise ValueError(f"omniglot: unknown split {split!r}; allowed: {', '.join(OMNIGLOT_SPLITS)}")
    root_p, sources, ignored, listing = _scan_omniglot(root)
    files_fp = [s.path for s in sources if s.is_zip] + [Path(f) for *_, s, fs in listing if not s.is_zip for f in fs]
    cpath = cache_path("omniglot", root_p, size, {"polarity": "ink255", "sources": [s.top for s in sources]},
                       files_fp) if cache else None

    def build() -> dict[str, Any]:
        parts: list[torch.Tensor] = []
        for src in sources:
            members = [f for k, a, c, s, fs in listing if s is src for f in fs]
            if src.is_zip:  # member by member (each checked against its declared size first), a group at a time
                with open_zip(src.path, "omniglot") as zf:
                    infos = [zf.getinfo(m) for m in members]
                    for start, blobs in read_members(zf, infos, src.path, "omniglot"):
                        names = [f"{src.path}:{m}" for m in members[start:start + len(blobs)]]
                        parts.append(_images.decode_images(blobs, size, "L", invert=True, names=names))
            else:
                parts.append(_images.decode_images([Path(m) for m in members], size, "L", invert=True,
                                                   names=members))
        counts = [len(fs) for *_, fs in listing]
        return {"images": parts[0] if len(parts) == 1 else torch.cat(parts),
                "char_of_image": torch.repeat_interleave(torch.arange(len(listing)), torch.tensor(counts)),
                "kinds": [k for k, *_ in listing], "alphabets": [a for _, a, *_ in listing],
                "characters": [c for _, _, c, *_ in listing]}

    payload = cached(cpath, build)
    kinds, alphabets = payload["kinds"], payload["alphabets"]
    assign = _omniglot_assignment(kinds, alphabets, split, seed)
    splits = {}
    for sid, s in enumerate(SPLITS):
        chars = np.flatnonzero(assign == sid)
        splits[s] = _omniglot_split(payload, torch.from_numpy(chars), rotations, f"omniglot/{s}")
    info = {"root": str(root_p), "sources": [repr(s) for s in sources], "ignored_sources": ignored, "size": size,
            "split": split, "seed": seed if split == "random" else None, "rotations": rotations,
            "polarity": "ink=255, background=0 (the PNGs are inverted)",
            "decode": {"mode": "L", "invert": True},  # how the PNGs were decoded (a run's preprocessing record)
            "characters": {s: int((assign == i).sum()) for i, s in enumerate(SPLITS)},
            "cache_file": str(cpath) if cpath is not None else None}
    return FewShotDataset("omniglot", splits, info)


def check_omniglot(root: str | os.PathLike) -> str:
    """The pre-flight of an Omniglot ``data_root`` (``./study check``): the reader's own scan and refusals
    (:func:`_scan_omniglot`: the zip readable, its members listed, the expected layout present, no member encrypted,
    unreadable, twice or too large), then every image read, a zip member by member after its declared size, and
    checked cheaply (:func:`~.images.image_problem`: truncation, CRCs, the header's size against the data and
    against :data:`~.common.MAX_IMAGE_PIXELS`); no pixel is decoded. Returns a one-line description.

    Raises:
        DataError: the first problem (the reader's), or the images that cannot be read, each named.
    """
    root_p, sources, _, listing = _scan_omniglot(root)
    bad: list[tuple[str, str]] = []
    n = 0
    for src in sources:
        members = [f for k, a, c, s, fs in listing if s is src for f in fs]
        n += len(members)
        if src.is_zip:
            with open_zip(src.path, "omniglot") as zf:
                infos = [zf.getinfo(m) for m in members]
                for start, blobs in read_members(zf, infos, src.path, "omniglot"):
                    for m, data in zip(members[start:start + len(blobs)], blobs):
                        why = _images.image_problem(data)
                        if why:
                            bad.append((f"{src.path}:{m}", why))
        else:
            bad += [(str(f), why) for f, why in _images.check_image_files([Path(m) for m in members])]
    if bad:
        shown = "; ".join(f"{f}: {why}" for f, why in bad[:5]) + (f"; ... ({len(bad) - 5} more)" if len(bad) > 5 else "")
        raise DataError(f"omniglot: {len(bad)} of {n} images cannot be read as the images they claim to be: {shown}. "
                        f"Replace them (download the data set again) or delete them")
    alphabets = len({(k, a) for k, a, *_ in listing})
    read = "" if root_p.is_file() else f" ({', '.join(s.path.name + ('' if s.is_zip else '/') for s in sources)})"
    return (f"omniglot {root_p}{read}: {alphabets} alphabets, {len(listing)} characters, {n} images (each read and "
            f"checked, none decoded)")


def _omniglot_split(payload: dict[str, Any], chars: torch.Tensor, rotations: bool, name: str) -> ImageSplit:
    """The ImageSplit of the characters ``chars`` (global ids, in class order), with rotation classes.

    Class ``4 * j + r`` is character ``chars[j]`` rotated by ``r * 90`` degrees (``torch.rot90``); without
    rotations class ``j`` is character ``chars[j]``. Images are grouped by class.
    """
    n_chars = len(payload["characters"])
    local = torch.full((n_chars,), -1, dtype=torch.long)
    local[chars] = torch.arange(len(chars))
    lab = local[payload["char_of_image"]]
    keep = lab >= 0
    base, lab = payload["images"][keep], lab[keep]
    order = torch.argsort(lab, stable=True)
    base, lab = base[order], lab[order]
    alph = [payload["alphabets"][int(c)] for c in chars]
    char_names = [f"{a}/{payload['characters'][int(c)]}" for a, c in zip(alph, chars)]
    if rotations:
        rots = torch.stack([torch.rot90(base, k, dims=(-2, -1)) for k in range(4)], dim=1)  # [M, 4, 1, S, S]
        labels = (lab[:, None] * 4 + torch.arange(4)).reshape(-1)
        images = rots.reshape(-1, *base.shape[1:])
        order = torch.argsort(labels, stable=True)
        images, labels = images[order], labels[order]
        class_names = [f"{c}/rot{r:03d}" for c in char_names for r in (0, 90, 180, 270)]
        alph = [a for a in alph for _ in range(4)]
    else:
        images, labels, class_names = base, lab, char_names
    sup_names = list(dict.fromkeys(alph))
    superclass = torch.tensor([sup_names.index(a) for a in alph], dtype=torch.long)
    return ImageSplit(images.contiguous(), labels, class_names, superclass, sup_names, name)
