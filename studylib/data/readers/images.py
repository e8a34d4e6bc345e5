"""Decoding and resizing images into uint8 tensors, and checking an image file cheaply (its header against its
data, truncation) without decoding its pixels."""

from __future__ import annotations

import io
import os
import struct
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from studylib.data.base import DataError
from studylib.data.readers.common import BIG_IMAGE_BYTES, BIG_IMAGE_PIXELS, MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS


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


# ---------------------------------------------------------------------------------------- checking a file cheaply

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # colour type -> samples per pixel
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
_INFLATE_STEP = 1 << 20  # bytes of image data inflated at a time while a PNG's data are counted
BOUND_FIX = ("no data set of the study has an image near that size: delete the file, or shrink it first (e.g. "
             "with PIL's Image.thumbnail) if it is an image you mean to use")
# One big image (common.BIG_IMAGE_BYTES / BIG_IMAGE_PIXELS) read and decoded at a time, over all threads.
_ONE_BIG_AT_A_TIME = threading.Lock()


class _Alone:
    """``with _Alone() as alone: ... alone.take()``: from ``take()`` (once it is known that the image is big) to the
    end of the block, this thread is the only one handling a big image."""

    def __init__(self) -> None:
        self.held = False

    def take(self) -> None:
        if not self.held:
            _ONE_BIG_AT_A_TIME.acquire()
            self.held = True

    def __enter__(self) -> "_Alone":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.held:
            self.held = False
            _ONE_BIG_AT_A_TIME.release()


class TooBig(Exception):
    """An image file, or an image its header declares, above the bounds of :mod:`.common` (the message says which);
    raised before the file is read whole or a pixel is unpacked."""


def pixels_problem(width: int, height: int) -> str | None:
    """Why an image declaring ``width x height`` pixels is refused (above :data:`~.common.MAX_IMAGE_PIXELS`), or
    None."""
    if width * height <= MAX_IMAGE_PIXELS:
        return None
    return (f"its header declares {width}x{height} pixels ({width * height:,}), more than the {MAX_IMAGE_PIXELS:,} "
            f"an image may have (studylib.data.readers.common.MAX_IMAGE_PIXELS, Pillow's own bound): a "
            f"decompression bomb or a damaged header")


def bytes_problem(nbytes: int, what: str = "it is") -> str | None:
    """Why an image file of ``nbytes`` is refused (above :data:`~.common.MAX_IMAGE_BYTES`), or None."""
    if nbytes <= MAX_IMAGE_BYTES:
        return None
    return (f"{what} {nbytes:,} bytes, more than the {MAX_IMAGE_BYTES:,} an image file may have "
            f"(studylib.data.readers.common.MAX_IMAGE_BYTES)")


def read_image_bytes(path: Path) -> bytes:
    """The bytes of the image file ``path``, read whole only below :data:`~.common.MAX_IMAGE_BYTES`: its size is
    checked first (``TooBig``), and the read stops one byte past the bound should the file grow meanwhile."""
    size = path.stat().st_size
    why = bytes_problem(size)
    if why:
        raise TooBig(why)
    with open(path, "rb") as fh:  # read(size), not read(bound): CPython allocates what a read asks for
        parts = [fh.read(size)]
        total = len(parts[0])
        while piece := fh.read(min(1 << 16, MAX_IMAGE_BYTES + 1 - total)):  # it grew since: on, up to the bound
            parts.append(piece)
            total += len(piece)
            why = bytes_problem(total, "it has grown to")
            if why:
                raise TooBig(why)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _png_raw_size(width: int, height: int, depth: int, color: int, interlace: int) -> int:
    """Bytes of a PNG's decompressed image data: one filter byte + ``ceil(width * bits / 8)`` per row (per row of
    each of the seven Adam7 passes when interlaced; PNG spec, sections 7.2 and 8.2)."""
    bits = depth * _PNG_CHANNELS.get(color, 4)
    if not interlace:
        return height * (1 + (width * bits + 7) // 8)
    total = 0
    for x0, y0, dx, dy in _ADAM7:
        cols, rows = (width - x0 + dx - 1) // dx, (height - y0 + dy - 1) // dy
        if cols > 0 and rows > 0:
            total += rows * (1 + (cols * bits + 7) // 8)
    return total


def _inflated_size(idat: Sequence[memoryview], limit: int) -> int:
    """Bytes the concatenated ``idat`` data inflate to, counted :data:`_INFLATE_STEP` bytes at a time (never held
    whole) and no further than one step past ``limit``. Raises ``zlib.error`` for data that do not inflate."""
    inflater = zlib.decompressobj()
    total = 0
    for body in idat:
        pending: bytes | memoryview = body
        while True:
            out = inflater.decompress(pending, _INFLATE_STEP)
            total += len(out)
            if total > limit:
                return total
            pending = inflater.unconsumed_tail
            if not pending and len(out) < _INFLATE_STEP:
                break
    return total


def png_header(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` a PNG's IHDR header declares (the first chunk), or None when it has none."""
    if data.startswith(PNG_SIGNATURE) and len(data) >= 24 and data[12:16] == b"IHDR":
        return struct.unpack(">II", data[16:24])
    return None


def png_problem(data: bytes, check_crc: bool = True) -> str | None:
    """Why PNG bytes cannot be the image their header describes, or None: the header may declare at most
    :data:`~.common.MAX_IMAGE_PIXELS` (checked before any data are inflated); the chunks (and, with ``check_crc``,
    their CRCs) up to IEND must be complete, and the image data must decompress to exactly the size the IHDR
    header's width, height, bit depth, colour type and interlacing give: a file cut short, or a header that
    says 1x1 over the data of a 64x64 image (which PIL decodes as one pixel without a word), is named. The data are
    inflated a piece at a time and only counted, so the check holds one piece in memory, whatever the image."""
    view = memoryview(data)
    pos, header, idat = 8, None, []
    while True:
        if pos + 8 > len(data):
            return f"it is truncated: it ends after {len(data):,} bytes, before its IEND chunk"
        length, kind = struct.unpack(">I4s", view[pos:pos + 8])
        end = pos + 12 + length
        if end > len(data):
            return (f"it is truncated: its {kind.decode('latin1')} chunk needs {length:,} bytes, the file ends "
                    f"{len(data) - pos - 8:,} bytes into it")
        body = view[pos + 8:pos + 8 + length]
        if check_crc and zlib.crc32(body, zlib.crc32(kind)) != int.from_bytes(view[end - 4:end], "big"):
            return f"its {kind.decode('latin1')} chunk does not match its CRC (the file is damaged)"
        if kind == b"IHDR" and length >= 13:
            header = struct.unpack(">IIBBBBB", body[:13])
            why = pixels_problem(header[0], header[1])
            if why:
                return why
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos = end
    if header is None:
        return "it has no IHDR header"
    width, height, depth, color, _, _, interlace = header
    expected = _png_raw_size(width, height, depth, color, interlace)
    try:
        inflated = _inflated_size(idat, expected)
    except zlib.error as e:
        return f"its image data do not decompress ({e})"
    if inflated > expected:
        return (f"its header says {width}x{height} pixels ({expected:,} bytes of image data) but its data hold more: "
                f"the header disagrees with the data")
    if inflated < expected:
        return (f"its image data end after {inflated:,} of the {expected:,} bytes its {width}x{height} header needs "
                f"(truncated or damaged)")
    return None


def image_problem(src: bytes | Path) -> str | None:
    """Why an image file cannot be decoded as the image it claims to be, or None; cheap (no full decode of a PNG
    or a complete JPEG): a file above :data:`~.common.MAX_IMAGE_BYTES` is refused before it is read, PNGs are
    checked by :func:`png_problem`; a JPEG must end with its end-of-image marker (else it is decoded at 1/8 scale
    to see whether it is truncated); other formats are decoded by PIL once their header's size is checked
    (:data:`~.common.MAX_IMAGE_PIXELS`). A big file or image (:data:`~.common.BIG_IMAGE_BYTES`) is checked by one
    thread at a time."""
    with _Alone() as alone:
        try:
            if isinstance(src, Path):
                if src.stat().st_size > BIG_IMAGE_BYTES:
                    alone.take()
                data = read_image_bytes(src)
            else:
                data = bytes(src)
                why = bytes_problem(len(data))
                if why:
                    return why
        except TooBig as e:
            return str(e)
        except OSError as e:
            return f"it cannot be read ({e.strerror or e})"
        if not data:
            return "it is empty"
        if data.startswith(PNG_SIGNATURE):
            return png_problem(data)
        try:
            with Image.open(io.BytesIO(data)) as img:
                why = pixels_problem(*img.size)
                if why:
                    return why
                if img.format == "JPEG" and data.rstrip(b"\0\r\n ").endswith(b"\xff\xd9"):
                    return None
                img.draft(img.mode, (8, 8))  # JPEG: the smallest DCT scale
                if img.size[0] * img.size[1] > BIG_IMAGE_PIXELS:
                    alone.take()
                img.load()
        except Image.DecompressionBombError as e:
            return f"it is not a readable image (DecompressionBombError: {e}): a decompression bomb or a damaged header"
        except (OSError, ValueError, SyntaxError) as e:
            return f"it is not a readable image ({type(e).__name__}: {e})"
    return None


def check_image_files(files: Sequence[Path], workers: int | None = None) -> list[tuple[Path, str]]:
    """``[(file, problem)]`` of the ``files`` that :func:`image_problem` refuses (in a thread pool: reading and
    inflating release the GIL)."""
    n_workers = workers or _default_workers()
    if n_workers <= 1 or len(files) < 64:
        found = [image_problem(f) for f in files]
    else:
        with ThreadPoolExecutor(max_workers=n_workers) as pool:
            found = list(pool.map(image_problem, files, chunksize=64))
    return [(f, why) for f, why in zip(files, found) if why]


def decode_images(sources: Sequence[bytes | Path], size: int, mode: str = "RGB", invert: bool = False,
                  names: Sequence[str] | None = None, workers: int | None = None) -> torch.Tensor:
    """Decode image files or encoded bytes into one uint8 tensor.

    Each file is refused before it is read whole when it is larger than :data:`~.common.MAX_IMAGE_BYTES`, and each
    image before a pixel is unpacked when its header declares more than :data:`~.common.MAX_IMAGE_PIXELS` (a
    :class:`~studylib.data.base.DataError` naming the file, the size and the fix); a big file or image
    (:data:`~.common.BIG_IMAGE_BYTES`) is decoded by one thread at a time.

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
            with _Alone() as alone:  # a big file or image: read and decoded by one thread at a time
                if isinstance(src, (bytes, bytearray, memoryview)):
                    data = bytes(src)
                    why = bytes_problem(len(data))
                    if why:
                        raise TooBig(why)
                else:
                    if Path(src).stat().st_size > BIG_IMAGE_BYTES:
                        alone.take()
                    data = read_image_bytes(Path(src))  # refused above MAX_IMAGE_BYTES before it is read
                if data.startswith(PNG_SIGNATURE):  # PIL decodes a PNG whose header disagrees with its data silently
                    dims = png_header(data)
                    why = pixels_problem(*dims) if dims else None
                    if why:  # before a pixel is inflated, whatever PIL's own bound says
                        raise TooBig(why)
                    why = png_problem(data, check_crc=False)
                    if why:
                        raise ValueError(why)
                with Image.open(io.BytesIO(data)) as img:
                    why = pixels_problem(*img.size)  # the header's size (Image.open reads no pixel)
                    if why:
                        raise TooBig(why)
                    img.draft(mode, (size, size))  # JPEG only: decode at a reduced DCT scale >= size
                    if img.size[0] * img.size[1] > BIG_IMAGE_PIXELS:
                        alone.take()
                    img = to_8bit(img).convert(mode)
                    if invert:
                        img = Image.fromarray(255 - np.asarray(img))
                    if img.size != (size, size):
                        img = img.resize((size, size), Image.Resampling.BILINEAR)
                    out[i] = np.asarray(img, dtype=np.uint8).reshape(size, size, channels)
        except (TooBig, Image.DecompressionBombError) as e:
            raise DataError(f"image {name_of(i)}: {e}; {BOUND_FIX}") from None
        except (OSError, ValueError, SyntaxError) as e:
            raise DataError(f"cannot decode image {name_of(i)} ({type(e).__name__}: {e}); the file is corrupt or not "
                            f"an image: replace it or download the data set again") from e

    def name_of(i: int) -> str:
        src = sources[i]
        return names[i] if names is not None else str(src if not isinstance(src, (bytes, bytearray, memoryview))
                                                       else f"image #{i}")

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
