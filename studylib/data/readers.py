"""Readers for real few-shot data sets, read from a folder the user names.

Every reader returns a :class:`~studylib.data.base.FewShotDataset` with class-disjoint ``"train"``,
``"val"`` and ``"test"`` :class:`~studylib.data.base.ImageSplit` objects: uint8 ``[N, C, H, W]`` images
decoded once, int64 labels ``0..K-1`` local to each split, and ``class_names``.

Formats (one reader each, see :data:`READERS`):

* Omniglot (:func:`load_omniglot`): the authors' ``images_background*.zip`` / ``images_evaluation*.zip``, their
  unzipped folders, or any folder laid out as ``<alphabet>/<character>/*.png``; optional 90-degree rotation
  classes; several documented character splits.
* miniImageNet (:func:`load_mini_imagenet`): ``mini-imagenet-cache-{train,val,test}.pkl`` (dict with
  ``"image_data"`` uint8 ``[N, 84, 84, 3]`` and ``"class_dict"`` ``{wnid: [indices]}``), or Ravi &
  Larochelle's ``images/`` folder with ``{train,val,test}.csv`` (columns ``filename,label``).
* tieredImageNet (:func:`load_tiered_imagenet`): ``{split}_images_png.pkl`` (PNG-encoded byte arrays) and
  ``{split}_labels.pkl`` (``label_specific``, ``label_general`` and, when present, their ``*_str`` names);
  the superclass of a class is its ``label_general``.
* CIFAR-FS / FC100 (:func:`load_cifar_fs`, :func:`load_fc100`): ``CIFAR_FS_{split}.pickle`` /
  ``FC100_{split}.pickle`` with ``"data"`` uint8 ``[N, 32, 32, 3]`` and ``"labels"`` (CIFAR-100 fine-label
  ids); Python-2 pickles are read with ``encoding="latin1"``. Class names and superclasses (CIFAR-100's 20
  coarse classes, the basis of FC100's split) come from the CIFAR-100 label lists below.
* CUB-200-2011 (:func:`load_cub`): the ``CUB_200_2011`` layout, split 100/50/50 by class id order, or a
  generic folder layout.
* Any folder of images (:func:`load_image_folder`): ``root/{train,val,test}/<class>/<image>``, or
  ``root/<class>/<image>`` / ``root/<superclass>/<class>/<image>`` split by a seeded class- or superclass-disjoint
  rule.

Pickles are read by a restricted unpickler (:func:`load_pickle`) that resolves only NumPy arrays, dtypes and
scalars and plain containers, strings, bytes and numbers, so a crafted pickle in a data folder is refused
instead of running code.

Paths: a relative ``root`` is taken relative to the repository root (the folder holding ``params/`` and
``notebooks/``), whatever the working directory (:func:`~studylib.data.base.resolve_root`); every "not found"
message prints the absolute path it looked at.

Decoding uses PIL in a thread pool (PIL releases the GIL while decoding and resizing), with JPEG ``draft``
mode so large JPEGs are decoded at the smallest DCT scale that still covers ``size``. Every image is
converted to one fixed mode (RGB, 3 channels, for the natural-image sets; L, 1 channel, for Omniglot) and
resized straight to ``size x size`` (no crop) with PIL's bilinear filter, which is antialiased when
shrinking. Arrays that arrive already decoded (pickles) are resized with ``torch`` bilinear interpolation
with ``antialias=True``, the same filter. Decoded arrays are cached under
``studylib.utils.default_cache_dir() / "decoded"``, keyed by the reader, the resolved root, ``size``, the
reader's options and a fingerprint (names, sizes, mtimes) of the source files, and written atomically, so a
second load only reads one ``.pt`` file.
"""

from __future__ import annotations

import codecs
import collections
import csv
import hashlib
import io
import os
import pickle
import threading
import warnings
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from studylib.data.base import ROOT_RULE, DataError, FewShotDataset, ImageSplit, resolve_root
from studylib.utils import atomic_torch_save, config_hash, default_cache_dir

SPLITS = ("train", "val", "test")
IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"})
CACHE_VERSION = 1

# CIFAR-100 fine labels in the order of their ids (the data set's ``fine_label_names``).
CIFAR100_FINE_NAMES = (
    "apple", "aquarium_fish", "baby", "bear", "beaver", "bed", "bee", "beetle", "bicycle", "bottle",
    "bowl", "boy", "bridge", "bus", "butterfly", "camel", "can", "castle", "caterpillar", "cattle",
    "chair", "chimpanzee", "clock", "cloud", "cockroach", "couch", "crab", "crocodile", "cup", "dinosaur",
    "dolphin", "elephant", "flatfish", "forest", "fox", "girl", "hamster", "house", "kangaroo", "keyboard",
    "lamp", "lawn_mower", "leopard", "lion", "lizard", "lobster", "man", "maple_tree", "motorcycle", "mountain",
    "mouse", "mushroom", "oak_tree", "orange", "orchid", "otter", "palm_tree", "pear", "pickup_truck", "pine_tree",
    "plain", "plate", "poppy", "porcupine", "possum", "rabbit", "raccoon", "ray", "road", "rocket",
    "rose", "sea", "seal", "shark", "shrew", "skunk", "skyscraper", "snail", "snake", "spider",
    "squirrel", "streetcar", "sunflower", "sweet_pepper", "table", "tank", "telephone", "television", "tiger",
    "tractor", "train", "trout", "tulip", "turtle", "wardrobe", "whale", "willow_tree", "wolf", "woman", "worm",
)
# CIFAR-100's 20 coarse classes and their five fine classes each (FC100 splits whole coarse classes).
CIFAR100_COARSE: dict[str, tuple[str, ...]] = {
    "aquatic_mammals": ("beaver", "dolphin", "otter", "seal", "whale"),
    "fish": ("aquarium_fish", "flatfish", "ray", "shark", "trout"),
    "flowers": ("orchid", "poppy", "rose", "sunflower", "tulip"),
    "food_containers": ("bottle", "bowl", "can", "cup", "plate"),
    "fruit_and_vegetables": ("apple", "mushroom", "orange", "pear", "sweet_pepper"),
    "household_electrical_devices": ("clock", "keyboard", "lamp", "telephone", "television"),
    "household_furniture": ("bed", "chair", "couch", "table", "wardrobe"),
    "insects": ("bee", "beetle", "butterfly", "caterpillar", "cockroach"),
    "large_carnivores": ("bear", "leopard", "lion", "tiger", "wolf"),
    "large_man-made_outdoor_things": ("bridge", "castle", "house", "road", "skyscraper"),
    "large_natural_outdoor_scenes": ("cloud", "forest", "mountain", "plain", "sea"),
    "large_omnivores_and_herbivores": ("camel", "cattle", "chimpanzee", "elephant", "kangaroo"),
    "medium_mammals": ("fox", "porcupine", "possum", "raccoon", "skunk"),
    "non-insect_invertebrates": ("crab", "lobster", "snail", "spider", "worm"),
    "people": ("baby", "boy", "girl", "man", "woman"),
    "reptiles": ("crocodile", "dinosaur", "lizard", "snake", "turtle"),
    "small_mammals": ("hamster", "mouse", "rabbit", "shrew", "squirrel"),
    "trees": ("maple_tree", "oak_tree", "palm_tree", "pine_tree", "willow_tree"),
    "vehicles_1": ("bicycle", "bus", "motorcycle", "pickup_truck", "train"),
    "vehicles_2": ("lawn_mower", "rocket", "streetcar", "tank", "tractor"),
}


# ----------------------------------------------------------------------------------------------------------
# Shared helpers: folders, pickles, decoding, resizing, caching.
# ----------------------------------------------------------------------------------------------------------

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


class _RefusedGlobal(pickle.UnpicklingError):
    """A data pickle names a global outside :data:`_PICKLE_GLOBALS` (see :func:`load_pickle`)."""

    def __init__(self, module: str, name: str) -> None:
        super().__init__(f"{module}.{name}")
        self.qualname = f"{module}.{name}"


def _latin1_encode(obj: str, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """``_codecs.encode`` as Python 3 writes ``bytes`` into protocol-2 pickles (``encode(text, "latin1")``) only."""
    if encoding.lower().replace("-", "_") not in ("latin1", "latin_1", "iso8859_1", "iso_8859_1"):
        raise _RefusedGlobal("_codecs", f"encode(..., {encoding!r})")
    return codecs.encode(obj, "latin1", errors)


class _Refused(pickle.UnpicklingError):
    """A data pickle asks for something a data-set file never holds (an object array, an allocation its bytes
    cannot back); ``why`` says what."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


_LOAD = threading.local()  # the byte budget of the pickle being loaded in this thread (see _DataUnpickler)


def _charge(nbytes: int, what: str) -> None:
    """Count ``nbytes`` of array data against the current file's budget; refuse before allocating past it."""
    budget = getattr(_LOAD, "budget", None)
    if budget is None:
        raise _Refused(f"{what} outside a data-pickle load")
    if nbytes > budget[0]:
        raise _Refused(f"{what} declares {nbytes:,} bytes of array data, more than the file's {budget[1]:,} bytes can "
                       f"hold (memo references or a forged shape)")
    budget[0] -= nbytes


def _plain_dtype(dtype: Any, what: str) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise _Refused(f"{what} has an unknown dtype {dtype!r}") from e
    if dt.hasobject:
        raise _Refused(f"{what} is an object array (dtype {dt}); data-set arrays hold numbers only")
    return dt


class _GuardedArray(np.ndarray):
    """What ``_reconstruct`` makes while a pickle loads: an empty array whose ``__setstate__`` (pickle's BUILD)
    checks the declared dtype and size against the file's budget before NumPy allocates. Turned back into
    plain arrays after the load (:func:`_plain_arrays`)."""

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise _Refused("an array with a malformed state")
        shape, dtype = state[-4], state[-3]
        dt = dtype if isinstance(dtype, np.dtype) and dtype == np.dtype(object) else _plain_dtype(dtype, "an array")
        try:
            n = int(np.prod([int(d) for d in shape], dtype=object)) if len(shape) else 1
        except (TypeError, ValueError) as e:
            raise _Refused(f"an array with a malformed shape {shape!r}") from e
        if any(int(d) < 0 for d in shape):
            raise _Refused(f"an array with a negative dimension {shape!r}")
        if dt.hasobject:  # tieredImageNet's list of PNG buffers: only objects the file itself holds, one per cell
            if not isinstance(state[-1], list) or len(state[-1]) != n:
                raise _Refused(f"an object array of {n:,} cells filled from "
                               f"{len(state[-1]) if isinstance(state[-1], list) else 'no'} stored objects")
        elif not isinstance(state[-1], (bytes, bytearray, str)):  # str: a Python-2 pickle read as latin1
            raise _Refused(f"an array of {dt} whose data is a {type(state[-1]).__name__}, not bytes")
        _charge(n * dt.itemsize, f"an array {tuple(shape)} of {dt}")
        super().__setstate__(state)


class _RefusedCall:
    """A global a data pickle may name but never call (``numpy.ndarray`` is only ``_reconstruct``'s argument)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise _Refused(f"a call of {self.name}(...), which allocates without data (NumPy's own pickles never call it)")


_NDARRAY = _RefusedCall("numpy.ndarray")


def _numpy_globals() -> dict[tuple[str, str], Any]:
    """What NumPy's own pickles of arrays, dtypes and scalars name, under NumPy 1's and NumPy 2's module paths,
    each guarded: arrays are made empty and filled only by data the file holds (see :class:`_GuardedArray`)."""
    try:
        from numpy._core import multiarray as ma, numeric as nu  # NumPy >= 2
    except ImportError:  # pragma: no cover - NumPy 1
        from numpy.core import multiarray as ma, numeric as nu  # type: ignore[no-redef]

    def reconstruct(subtype: Any, shape: Any, dtype: Any) -> np.ndarray:
        if subtype is not _NDARRAY:
            raise _Refused(f"an array of type {getattr(subtype, 'name', subtype)!r}")
        if tuple(shape) != (0,):  # NumPy writes (0,): the data come with the state, checked there
            raise _Refused(f"an array preallocated with shape {tuple(shape)!r} before its data")
        return ma._reconstruct(_GuardedArray, (0,), _plain_dtype(dtype, "an array"))

    def scalar(dtype: Any, *data: Any) -> Any:
        return ma.scalar(_plain_dtype(dtype, "a scalar"), *data)

    def frombuffer(buf: Any, dtype: Any, shape: Any, order: str) -> np.ndarray:
        dt = _plain_dtype(dtype, "an array")
        _charge(len(memoryview(buf).cast("B")), f"an array {tuple(shape)} of {dt}")
        return nu._frombuffer(buf, dt, shape, order)

    out: dict[tuple[str, str], Any] = {("numpy", "ndarray"): _NDARRAY, ("numpy", "dtype"): np.dtype}
    for mod in ("numpy.core", "numpy._core"):
        out[(f"{mod}.multiarray", "_reconstruct")] = reconstruct
        out[(f"{mod}.multiarray", "scalar")] = scalar
        if hasattr(nu, "_frombuffer"):
            out[(f"{mod}.numeric", "_frombuffer")] = frombuffer
    return out


def _sized(kind: type) -> Callable[..., Any]:
    """``bytes``/``bytearray`` as a pickle may call them (from text or bytes), never ``bytes(10**10)``."""
    def make(*args: Any) -> Any:
        if args and isinstance(args[0], int):
            raise _Refused(f"a call of {kind.__name__}({args[0]}), which allocates without data")
        return kind(*args)
    return make


# Every global a data pickle (miniImageNet, tieredImageNet, CIFAR-FS, FC100) may name: NumPy arrays, dtypes and
# scalars, and the built-in containers and numbers that protocols 0-5 (and Python 2) refer to by name.
# tests/data/test_readers.py pins this list: widening it is a decision, not an accident.
_PICKLE_GLOBALS: dict[tuple[str, str], Any] = {
    **_numpy_globals(),
    **{(mod, t.__name__): t for mod in ("builtins", "__builtin__")
       for t in (set, frozenset, complex, int, float, bool, str, dict, list, tuple)},
    **{(mod, t.__name__): _sized(t) for mod in ("builtins", "__builtin__") for t in (bytes, bytearray)},
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("_codecs", "encode"): _latin1_encode,
}


class _DataUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals in :data:`_PICKLE_GLOBALS`; any other refuses the file.

    ``pickle.load`` calls whatever global a file names (``os.system``, ``subprocess.Popen``, ...), so a crafted
    file in a data folder would run code. The data-set pickles hold nothing but NumPy arrays and plain Python
    containers, strings, bytes and numbers, so nothing else is ever resolved, and nothing is imported.

    Memory is bounded too: object arrays are refused, arrays are never preallocated from a declared shape, and
    the array data built in one load may not exceed the file's own size (a legitimate pickle stores each array's
    bytes once; a forged one reuses them through memo references, or declares a shape its bytes cannot fill).
    """

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _PICKLE_GLOBALS[(module, name)]
        except KeyError:
            raise _RefusedGlobal(module, name) from None

    def persistent_load(self, pid: Any) -> Any:
        raise _RefusedGlobal("persistent_id", repr(pid)[:60])


def _plain_arrays(obj: Any, seen: set[int] | None = None) -> Any:
    """``obj`` with every :class:`_GuardedArray` replaced by a plain ``np.ndarray`` view (containers rebuilt)."""
    seen = set() if seen is None else seen
    if isinstance(obj, _GuardedArray):
        plain = obj.view(np.ndarray)
        if plain.dtype.hasobject and id(obj) not in seen:  # tieredImageNet: an object array of uint8 arrays
            seen.add(id(obj))
            flat = plain.reshape(-1)
            for i in range(flat.size):
                flat[i] = _plain_arrays(flat[i], seen)
        return plain
    if id(obj) in seen or not isinstance(obj, (dict, list, tuple)):
        return obj
    seen.add(id(obj))
    if isinstance(obj, dict):
        for k in list(obj):
            obj[k] = _plain_arrays(obj[k], seen)
        return obj
    if isinstance(obj, list):
        for i, v in enumerate(obj):
            obj[i] = _plain_arrays(v, seen)
        return obj
    return tuple(_plain_arrays(v, seen) for v in obj)


def load_pickle(path: Path, dataset: str, hint: str) -> Any:
    """Unpickle a data-set file safely (Python-2 pickles too, via ``encoding="latin1"``); failures are DataErrors.

    The file is read by :class:`_DataUnpickler`, which admits only NumPy arrays, dtypes and scalars, dicts,
    lists, tuples, sets, strings, bytes and numbers: a pickle naming anything else (a crafted file whose
    ``__reduce__`` calls ``os.system``, say) is refused before any of it runs, with a message naming the file;
    object arrays and array data beyond the file's size are refused before they are allocated.
    """
    if not path.is_file():
        raise DataError(f"{dataset}: missing file {path.absolute()}; {hint}")
    reader = f"the {dataset} reader"
    size = path.stat().st_size
    _LOAD.budget = [size + 4096, size]
    try:
        with open(path, "rb") as fh:
            return _plain_arrays(_DataUnpickler(fh, encoding="latin1").load())
    except _RefusedGlobal as e:
        raise DataError(f"{dataset}: refused to load {path.absolute()}: it refers to {e.qualname}, which a {dataset} "
                        f"pickle never holds (the {dataset} files hold only NumPy arrays, dicts, lists, strings, bytes "
                        f"and numbers; loading it could run code). Replace it with the original file; {hint}") from None
    except _Refused as e:
        raise DataError(f"{dataset}: {reader} refused {path.absolute()}: it holds {e.why}, which a {dataset} file "
                        f"never does. Replace it with the original file; {hint}") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError, KeyError,
            TypeError, ValueError, UnicodeDecodeError, OverflowError, MemoryError) as e:
        raise DataError(f"{dataset}: {path.absolute()} is not a readable pickle ({type(e).__name__}: {e}); the file "
                        f"is corrupt or truncated: download it again") from e
    finally:
        _LOAD.budget = None


def int_labels(value: Any, path: Path, dataset: str, what: str) -> np.ndarray:
    """``[N]`` int64 labels from a file's ``value`` (a list or array of integers); DataError naming the file and
    the reader otherwise (None, floats, strings, object arrays)."""
    arr = value if isinstance(value, np.ndarray) else None
    if arr is None and isinstance(value, (list, tuple)) and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
        arr = np.asarray(value, dtype=np.int64)
    if arr is None or not (np.issubdtype(arr.dtype, np.integer) and arr.dtype != np.bool_):
        got = type(value).__name__ if arr is None else f"an array of {arr.dtype}"
        raise DataError(f"{dataset}: the {dataset} reader found {what} in {path.absolute()} to be {got}, not a list "
                        f"of integer class ids; the file is not in the {dataset} format: download it again")
    return arr.astype(np.int64).reshape(-1)


def check_hwc_uint8(value: Any, path: Path, dataset: str, what: str) -> np.ndarray:
    """``value`` as a uint8 ``[N, H, W, 3]`` array; DataError naming the file and the reader otherwise."""
    if not isinstance(value, np.ndarray) or value.dtype != np.uint8 or value.ndim != 4 or value.shape[-1] != 3:
        got = (f"an array of {value.dtype} with shape {value.shape}" if isinstance(value, np.ndarray)
               else type(value).__name__)
        raise DataError(f"{dataset}: the {dataset} reader expected {what} in {path.absolute()} to be uint8 images "
                        f"[N, H, W, 3], got {got}; the file is not in the {dataset} format: download it again")
    return value


def _default_workers() -> int:
    return max(1, min(16, (os.cpu_count() or 1) + 2))


_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N")


def to_8bit(img: Image.Image) -> Image.Image:
    """A 16-bit (``I;16*``, or ``I`` as PIL opens 16-bit PNGs) grey image scaled to 8-bit ``L``:
    ``round(v * 255 / 65535)``, so grey 40000/65535 becomes 156, not white (PIL's ``convert`` clips at 255).
    Other modes (8-bit, palette, CMYK, LA, RGBA...) are returned as they are for ``convert``."""
    if img.mode not in (*_SIXTEEN_BIT, "I"):
        return img
    v = np.asarray(img).astype(np.int64)
    if img.mode == "I" and img.format not in ("PNG", None) and v.max(initial=0) <= 255:
        return Image.fromarray(v.clip(0, 255).astype(np.uint8), "L")  # an 8-bit image stored as 32-bit ints
    return Image.fromarray(((v.clip(0, 65535) * 255 + 32767) // 65535).astype(np.uint8), "L")


def decode_images(sources: Sequence[bytes | Path], size: int, mode: str = "RGB", invert: bool = False,
                  names: Sequence[str] | None = None, workers: int | None = None) -> torch.Tensor:
    """Decode image files or encoded bytes into one uint8 tensor.

    Args:
        sources: ``N`` file paths or encoded image bytes (PNG, JPEG, ...).
        size: output side; every image is resized straight to ``size x size`` (bilinear, antialiased when
            shrinking) unless it already has that size.
        mode: ``"RGB"`` (3 channels; grayscale, palette, CMYK, LA and RGBA inputs are converted, alpha dropped;
            16-bit grey is scaled to 8 bits by :func:`to_8bit`, not clipped) or ``"L"`` (1 channel).
        invert: store ``255 - pixel`` (used for Omniglot: ink 255 on background 0).
        names: ``N`` names for error messages (defaults to the paths).
        workers: thread-pool size (PIL releases the GIL while decoding, so threads scale).

    Returns:
        ``[N, C, size, size]`` uint8, ``C = 3`` for RGB and ``1`` for L.
    """
    if mode not in ("RGB", "L"):
        raise ValueError(f"mode must be 'RGB' or 'L', got {mode!r}")
    n = len(sources)
    channels = 3 if mode == "RGB" else 1
    out = np.empty((n, size, size, channels), dtype=np.uint8)

    def decode_one(i: int) -> None:
        src = sources[i]
        try:
            with Image.open(io.BytesIO(src) if isinstance(src, (bytes, bytearray, memoryview)) else src) as img:
                img.draft(mode, (size, size))  # JPEG only: decode at a reduced DCT scale >= size
                img = to_8bit(img).convert(mode)
                if invert:
                    img = Image.fromarray(255 - np.asarray(img))
                if img.size != (size, size):
                    img = img.resize((size, size), Image.Resampling.BILINEAR)
                out[i] = np.asarray(img, dtype=np.uint8).reshape(size, size, channels)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
            name = names[i] if names is not None else str(src if isinstance(src, Path) else f"image #{i}")
            raise DataError(f"cannot decode image {name} ({type(e).__name__}: {e}); the file is corrupt or not "
                            f"an image: replace it or download the data set again") from e

    def decode_chunk(start: int) -> None:
        for i in range(start, min(start + 256, n)):
            decode_one(i)

    starts = range(0, n, 256)
    n_workers = workers or _default_workers()
    if n_workers <= 1 or len(starts) <= 1:
        for s in starts:
            decode_chunk(s)
    else:
        with ThreadPoolExecutor(max_workers=n_workers) as pool:
            list(pool.map(decode_chunk, starts))
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()


def resize_images(images: torch.Tensor, size: int, chunk: int = 1024) -> torch.Tensor:
    """``[N, C, H, W]`` uint8 -> ``[N, C, size, size]`` uint8 by bilinear interpolation with antialiasing.

    ``torch``'s antialiased bilinear filter is the one PIL uses (within rounding), so arrays that arrive
    decoded get the same resize as files decoded by :func:`decode_images`. Works on any device, chunked.
    """
    if images.shape[-2:] == (size, size):
        return images
    parts = []
    for start in range(0, images.shape[0], chunk):
        x = images[start:start + chunk].float()
        y = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
        parts.append(y.round_().clamp_(0, 255).to(torch.uint8))
    if not parts:
        return images.new_empty((0, images.shape[1], size, size))
    return torch.cat(parts)


def hwc_to_tensor(array: np.ndarray, size: int, what: str) -> torch.Tensor:
    """``[N, H, W, 3]`` uint8 array -> ``[N, 3, size, size]`` uint8 tensor; DataError on another shape."""
    if array.ndim != 4 or array.shape[-1] != 3:
        raise DataError(f"{what}: expected images of shape [N, H, W, 3], got {array.shape}; the file is not "
                        f"in the expected format")
    if array.dtype != np.uint8:
        raise DataError(f"{what}: expected uint8 images, got {array.dtype}; the file is not in the expected format")
    return resize_images(torch.from_numpy(np.ascontiguousarray(array)).permute(0, 3, 1, 2).contiguous(), size)


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


# ----------------------------------------------------------------------------------------------------------
# Generic image folders.
# ----------------------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------------------
# miniImageNet.
# ----------------------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------------------
# tieredImageNet.
# ----------------------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------------------
# CIFAR-FS and FC100.
# ----------------------------------------------------------------------------------------------------------

_COARSE_OF = {fine: coarse for coarse, fines in CIFAR100_COARSE.items() for fine in fines}


def _load_cifar_like(root: str | os.PathLike, size: int, cache: bool, prefix: str, dataset: str,
                     hint: str) -> FewShotDataset:
    size = check_size(size)
    root = require_folder(root, dataset, hint)
    pkls = [root / f"{prefix}_{s}.pickle" for s in SPLITS]
    for p in pkls:
        if not p.is_file():
            raise DataError(f"{dataset}: missing {p.name} under {root}; {hint}")
    path = cache_path(dataset, root, size, {}, pkls) if cache else None

    def build() -> dict[str, Any]:
        splits, global_ids = {}, {}
        for s, p in zip(SPLITS, pkls):
            obj = load_pickle(p, dataset, hint)
            if isinstance(obj, dict):  # Python-2 pickles may carry bytes keys
                obj = {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in obj.items()}
            if not isinstance(obj, dict) or "data" not in obj or "labels" not in obj:
                raise DataError(f"{dataset}: {p} should hold a dict with 'data' and 'labels'; download it again")
            data = check_hwc_uint8(obj["data"], p, dataset, "'data'")
            labels = int_labels(obj["labels"], p, dataset, "'labels'")
            if data.ndim != 4 or data.shape[0] != labels.shape[0]:
                raise DataError(f"{dataset}: {p} holds {data.shape[0] if data.ndim else 0} images but {labels.shape[0]} labels "
                                f"(label/data length mismatch); download it again")
            images = hwc_to_tensor(data, size, f"{dataset}: {p}")
            cifar_ids = bool(labels.size) and 0 <= labels.min() and labels.max() < len(CIFAR100_FINE_NAMES)
            cname = (lambda k: CIFAR100_FINE_NAMES[k]) if cifar_ids else (lambda k: f"class{k:03d}")
            sname = (lambda k: _COARSE_OF[CIFAR100_FINE_NAMES[k]]) if cifar_ids else None
            splits[s] = split_payload(images, labels, cname, sname)
            global_ids[s] = np.unique(labels).tolist()
        return {"splits": splits, "info": {"root": str(root), "size": size, "global_label_ids": global_ids,
                                           "label_names": "CIFAR-100 fine labels; superclass = CIFAR-100 coarse"}}

    return to_dataset(dataset, cached(path, build), path)


def load_cifar_fs(root: str | os.PathLike, size: int = 32, cache: bool = True) -> FewShotDataset:
    """Read CIFAR-FS (Bertinetto et al.; 64/16/20 CIFAR-100 classes) from ``CIFAR_FS_{split}.pickle``.

    Each pickle holds ``"data"`` uint8 ``[N, 32, 32, 3]`` and ``"labels"`` (CIFAR-100 fine-label ids, relabelled
    ``0..K-1`` per split in id order). Class names are CIFAR-100's fine names, superclasses its coarse classes.
    ``size != 32`` resizes with antialiased bilinear interpolation (e.g. 84 for the seed-000 protocol).
    """
    return _load_cifar_like(root, size, cache, "CIFAR_FS", "cifar_fs",
                            "download CIFAR-FS as CIFAR_FS_train.pickle, CIFAR_FS_val.pickle and CIFAR_FS_test.pickle "
                            "and point data_root at the folder that holds them")


def load_fc100(root: str | os.PathLike, size: int = 32, cache: bool = True) -> FewShotDataset:
    """Read FC100 (Oreshkin et al.; CIFAR-100 split by its 12/4/4 coarse classes) from ``FC100_{split}.pickle``.

    Same pickle format as :func:`load_cifar_fs`; superclass = CIFAR-100 coarse class.
    """
    return _load_cifar_like(root, size, cache, "FC100", "fc100",
                            "download FC100 as FC100_train.pickle, FC100_val.pickle and FC100_test.pickle and point "
                            "data_root at the folder that holds them")


# ----------------------------------------------------------------------------------------------------------
# CUB-200-2011.
# ----------------------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------------------
# Omniglot.
# ----------------------------------------------------------------------------------------------------------

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


def _zip_top(path: Path, strict: bool) -> str | None:
    """The single top folder of a zip, or None. ``strict``: an unreadable zip is a DataError, else skipped."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError) as e:
        if strict:
            raise DataError(f"omniglot: {path} is not a readable zip ({e}); download it again") from e
        return None
    names = _safe_members(path, names)
    tops = {n.split("/", 1)[0] for n in names if n and not n.startswith("__MACOSX")}
    return tops.pop() if len(tops) == 1 else None


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
        with zipfile.ZipFile(src.path) as zf:
            with warnings.catch_warnings():  # warned once already, by _zip_top
                warnings.simplefilter("ignore")
                names = _safe_members(src.path, zf.namelist())
        for name in names:
            parts = name.split("/")
            if parts[0] != src.top or len(parts) < 3:
                continue
            alphabets.add(parts[1])
            if len(parts) == 4 and parts[2]:
                entry = chars.setdefault((parts[1], parts[2]), [])
                if parts[3].lower().endswith(".png"):
                    entry.append(name)
    else:
        for a in sorted(p for p in src.path.iterdir() if p.is_dir() and not p.name.startswith(".")):
            alphabets.add(a.name)
            for c in sorted(p for p in a.iterdir() if p.is_dir() and not p.name.startswith(".")):
                chars[(a.name, c.name)] = [str(p) for p in c.iterdir()
                                           if p.is_file() and p.suffix.lower() == ".png" and not p.name.startswith(".")]
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
        found = _describe_folder(root_p) if root_p.is_dir() else f"the zip's top folders are not one folder"
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
    files_fp = [s.path for s in sources if s.is_zip] + [Path(f) for *_, s, fs in listing if not s.is_zip for f in fs]
    cpath = cache_path("omniglot", root_p, size, {"polarity": "ink255", "sources": [s.top for s in sources]},
                       files_fp) if cache else None

    def build() -> dict[str, Any]:
        blobs: list[bytes | Path] = []
        names: list[str] = []
        for src in sources:
            members = [(f, a, c) for k, a, c, s, fs in listing if s is src for f in fs]
            if src.is_zip:
                with zipfile.ZipFile(src.path) as zf:
                    try:
                        blobs.extend(zf.read(m) for m, _, _ in members)
                    except (zipfile.BadZipFile, OSError, zlib.error) as e:
                        raise DataError(f"omniglot: cannot read {src.path} ({e}); the zip is corrupt: download it "
                                        f"again") from e
                names.extend(f"{src.path}:{m}" for m, _, _ in members)
            else:
                blobs.extend(Path(m) for m, _, _ in members)
                names.extend(m for m, _, _ in members)
        images = decode_images(blobs, size, "L", invert=True, names=names)
        counts = [len(fs) for *_, fs in listing]
        return {"images": images,
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



# ----------------------------------------------------------------------------------------------------------
# Registry.
# ----------------------------------------------------------------------------------------------------------

READERS: dict[str, Callable[..., FewShotDataset]] = {
    "omniglot": load_omniglot,
    "mini_imagenet": load_mini_imagenet,
    "tiered_imagenet": load_tiered_imagenet,
    "cifar_fs": load_cifar_fs,
    "fc100": load_fc100,
    "cub": load_cub,
    "folder": load_image_folder,
}

__all__ = ["READERS", "load_omniglot", "load_mini_imagenet", "load_tiered_imagenet", "load_cifar_fs",
           "load_fc100", "load_cub", "load_image_folder", "decode_images", "resize_images",
           "CIFAR100_FINE_NAMES", "CIFAR100_COARSE"]
