"""Data-set pickles read safely: a restricted unpickler that resolves only NumPy arrays, dtypes and scalars and
plain containers, strings, bytes and numbers, with the array data a file may build bounded by its own size.
"""

from __future__ import annotations

import codecs
import collections
import pickle
import threading
from pathlib import Path
from typing import Any, Callable

import numpy as np

from studylib.data.base import DataError


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
