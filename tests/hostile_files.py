"""Hostile and damaged data files for the tests of issue 40, each built in a few milliseconds from a few lines of
PIL, zlib and zipfile: bombs are *declared* (in a PNG's IHDR header, in a zip's directory) or made of a deflate
stream built without inflating it, never inflated here; and :func:`bounded`, which runs a block under an
address-space limit above what the process has mapped and measures the resident memory the block added."""

from __future__ import annotations

import contextlib
import io
import resource
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np
from PIL import Image

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MiB = 1 << 20


# ------------------------------------------------------------------------------------------------ memory

def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


@contextlib.contextmanager
def bounded(limit: int = 2 << 30) -> Iterator[dict[str, int]]:
    """Run the block with at most ``limit`` bytes of address space above what the process maps now
    (``RLIMIT_AS``; a regression that reads a bomb ends in a MemoryError of this test, not in the machine's), and
    put the peak resident memory it added (``VmHWM`` after resetting it through ``/proc/self/clear_refs``) in the
    yielded dict as ``"peak"``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _status_bytes("VmSize") + limit
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    out: dict[str, int] = {}
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)
    except OSError:
        pass  # then the peak is the process's since it started: an upper bound
    base = _status_bytes("VmRSS")
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield out
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        out["peak"] = max(0, _status_bytes("VmHWM") - base)


# ------------------------------------------------------------------------------------------------ images

def png(size: int = 8, seed: int = 0, mode: str = "L") -> bytes:
    """A small valid PNG of noise."""
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    arr = rng.integers(0, 255, (size, size) if mode == "L" else (size, size, 3), dtype=np.uint8)
    Image.fromarray(arr).convert(mode).save(buf, "PNG")
    return buf.getvalue()


def image_folder(root: Path, classes: int = 30, per: int = 12) -> Path:
    """``root/c00 ... c<classes-1>``, each with ``per`` distinct 8-px PNGs of noise (:func:`png`): a valid folder
    data set to damage."""
    for k in range(classes):
        d = root / f"c{k:02d}"
        d.mkdir(parents=True)
        for i in range(per):
            (d / f"{i}.png").write_bytes(png(8, seed=1000 * k + i))
    return root


def glyph_png(seed: int = 0, size: int = 12) -> bytes:
    """A 1-bit PNG as Omniglot's."""
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 2, (size, size)).astype(bool)).save(buf, "PNG")
    return buf.getvalue()


def zeros_deflate(mib: int) -> bytes:
    """A zlib stream that inflates to ``mib`` MiB of zeros, about 1 KB per MiB, built without inflating it: after a
    full flush the compressor starts afresh, so every further MiB compresses to the same bytes; the Adler-32 of
    ``n`` zeros is ``(n mod 65521) << 16 | 1``."""
    c = zlib.compressobj(9)
    one = bytes(MiB)
    first = c.compress(one) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(one) + c.flush(zlib.Z_FULL_FLUSH)
    end = c.flush()[:-4]  # the final empty block, without the Adler-32 of two MiB
    adler = ((mib * MiB) % 65521) << 16 | 1
    return first + again * (mib - 1) + end + struct.pack(">I", adler)


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_declaring(width: int, height: int, depth: int = 16, color: int = 6, idat: bytes = b"") -> bytes:
    """A PNG whose IHDR declares ``width x height`` (16-bit RGBA by default) over the image data ``idat``."""
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, 0)
    return PNG_SIGNATURE + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def sparse_file(path: Path, nbytes: int, head: bytes = PNG_SIGNATURE) -> Path:
    """A file of ``nbytes`` that starts with ``head`` and takes no disk (a hole after the head)."""
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(nbytes)
    return path


# ------------------------------------------------------------------------------------------------ zips

def omniglot_members(top: str = "images_background", alphabets: int = 3, chars: int = 4,
                     per: int = 3) -> list[tuple[str, bytes]]:
    """``[(member name, 1-bit PNG)]`` of ``top/<alphabet>/<character>/<image>.png``."""
    return [(f"{top}/Alpha{a}/character{c:02d}/{i:02d}.png", glyph_png(a * 100 + c * 10 + i))
            for a in range(alphabets) for c in range(chars) for i in range(per)]


def omniglot_zip(path: Path | io.BytesIO, compression: int = zipfile.ZIP_DEFLATED,
                 extra: tuple[tuple[str, bytes], ...] = (), **layout: int) -> Path | io.BytesIO:
    """An Omniglot-like zip (:func:`omniglot_members`), then the ``extra`` members."""
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, data in [*omniglot_members(**layout), *extra]:
            zf.writestr(name, data)
    return path


def patch_member(data: bytes, name: str, *, flags: int | None = None, method: int | None = None,
                 file_size: int | None = None) -> bytes:
    """The zip bytes with the member ``name``'s flag bits, compression method or declared unpacked size set in its
    local header and its central directory entry (APPNOTE 4.3.7 and 4.3.12)."""
    out = bytearray(data)
    target = name.encode()
    for signature, name_len_at, name_at, fields in ((b"PK\x03\x04", 26, 30, (6, 8, 22)),
                                                    (b"PK\x01\x02", 28, 46, (8, 10, 24))):
        pos = out.find(signature)
        while pos >= 0:
            (n,) = struct.unpack("<H", out[pos + name_len_at:pos + name_len_at + 2])
            if out[pos + name_at:pos + name_at + n] == target:
                for value, at, fmt in ((flags, fields[0], "<H"), (method, fields[1], "<H"),
                                       (file_size, fields[2], "<I")):
                    if value is not None:
                        struct.pack_into(fmt, out, pos + at, value)
            pos = out.find(signature, pos + 4)
    return bytes(out)
