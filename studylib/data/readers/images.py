"""Decoding and resizing images into uint8 tensors, and checking an image file cheaply (its header against its
data, truncation) without decoding its pixels."""

from __future__ import annotations

import io
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from studylib.data.base import DataError


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
