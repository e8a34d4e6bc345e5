"""Image files that would exhaust memory (issue 40, part A): a PNG declaring 16000x16000 16-bit RGBA over a deflate
bomb, an image of another format declaring more pixels than Pillow decodes, a 4 GiB file named .png. Each is refused
from its header or its size by the pre-flight (``./study check 90``) and the folder reader, before it is read whole
or a pixel is unpacked, in bounded memory (measured by :func:`hostile_files.bounded`, under an address-space limit,
so a regression ends in this test's MemoryError). Before: peaks of 4.7 GB, then a bare MemoryError."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from hostile_files import (MiB, bounded, image_folder, png, png_declaring, sparse_file,  # tests/hostile_files.py
                           zeros_deflate)
from studylib import preflight
from studylib.data.base import DataError
from studylib.data.readers import decode_images, load_image_folder
from studylib.data.readers import images as images_module
from studylib.data.readers.common import MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS
from studylib.data.readers.images import image_problem, png_problem


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path_factory.mktemp("cache")))


def _png_bomb() -> bytes:
    """16000x16000 16-bit RGBA (2,048,016,000 bytes of image data) over 1,954 MiB of deflated zeros: a 2 MB file,
    built without inflating it."""
    return png_declaring(16000, 16000, depth=16, color=6, idat=zeros_deflate(1954))


BOMB = rf"its header declares 16000x16000 pixels \(256,000,000\), more than the {MAX_IMAGE_PIXELS:,} an image may have"
HUGE = rf"it is 4,294,967,296 bytes, more than the {MAX_IMAGE_BYTES:,} an image file may have"


def test_a_png_bomb_is_refused_from_its_header_before_anything_is_inflated():
    data = _png_bomb()
    assert len(data) < 3 * MiB
    with bounded(512 << 20) as mem:  # the old check inflated up to 2 GB here
        assert png_problem(data).startswith("its header declares 16000x16000 pixels (256,000,000)")
        assert image_problem(data).startswith("its header declares 16000x16000")
        with pytest.raises(DataError, match=rf"image bomb\.png: {BOMB} .*: a decompression bomb or a damaged header; "
                                            r"no data set of the study has an image near that size: delete the file"):
            decode_images([data], 8, "RGB", names=["bomb.png"])
    assert mem["peak"] < 64 << 20, mem


@pytest.mark.parametrize("kind", ["png bomb", "4 GiB file"])
def test_the_check_and_the_folder_reader_refuse_the_file_by_name_in_bounded_memory(kind, tmp_path):
    """Before: ./study check 90 peaked at 4.7 GB on the PNG bomb; the 4 GiB file was read whole by the check and the
    reader; each ended in a bare MemoryError."""
    root = image_folder(tmp_path / "mine")
    bad = root / "c05" / "big.png"
    if kind == "png bomb":
        bad.write_bytes(_png_bomb())
        want = BOMB
    else:
        sparse_file(bad, 4 << 30)  # 4 GiB that take no disk
        assert bad.stat().st_blocks * 512 < MiB
        want = HUGE
    with bounded(1 << 30) as mem:
        report = preflight.check("90_use_your_data", "smoke", {"data_root": str(root)})
        with pytest.raises(DataError, match=rf"image {bad}: {want}"):
            load_image_folder(root, size=8, split="random", cache=False)
    assert mem["peak"] < 256 << 20, mem
    (problem,) = [p for p in report.problems if p.param == "data_root"]
    assert f"1 of 361 image files cannot be read as the images they claim to be: {bad}: " in problem.text
    assert __import__("re").search(want, problem.text) and "delete them" in problem.text


def test_another_format_declaring_too_many_pixels_is_refused_whatever_pillows_bound_says(monkeypatch):
    """A BMP whose header declares 15000x15000: refused from the header by our bound even when a user has turned
    Pillow's own bound off (``Image.MAX_IMAGE_PIXELS = None``), before Pillow would allocate 675 MB."""
    buf = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buf, "BMP")
    data = bytearray(buf.getvalue())
    struct.pack_into("<ii", data, 18, 15000, 15000)  # BITMAPINFOHEADER width, height
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    with bounded(512 << 20):
        assert image_problem(bytes(data)).startswith("its header declares 15000x15000 pixels (225,000,000)")
        with pytest.raises(DataError, match=r"image tall\.bmp: its header declares 15000x15000 pixels"):
            decode_images([bytes(data)], 8, "RGB", names=["tall.bmp"])


def test_the_png_check_counts_the_image_data_a_piece_at_a_time():
    """A valid 4000x4000 RGBA PNG holds 64 MB of image data: the check inflates and counts it in 1 MiB pieces
    (before: all of it at once, and twice the compressed data)."""
    raw = 4000 * (1 + 4000 * 4)
    idat = zlib_zeros(raw)
    data = png_declaring(4000, 4000, depth=8, color=6, idat=idat)
    with bounded(512 << 20) as mem:
        assert png_problem(data) is None
        assert "data hold more" in png_problem(png_declaring(3999, 4000, depth=8, color=6, idat=idat))
    assert mem["peak"] < 24 << 20, mem


def zlib_zeros(n: int) -> bytes:
    c = __import__("zlib").compressobj(1)
    step = bytes(MiB)
    parts = [c.compress(step) for _ in range(n // MiB)]
    return b"".join(parts) + c.compress(bytes(n % MiB)) + c.flush()


def test_big_images_decode_one_at_a_time_with_the_same_pixels(tmp_path, monkeypatch):
    files = []
    for i in range(300):
        files.append(tmp_path / f"{i}.png")
        files[-1].write_bytes(png(12, seed=i, mode="RGB"))
    free = decode_images(files, 8, "RGB", workers=4)
    monkeypatch.setattr(images_module, "BIG_IMAGE_BYTES", 0)  # every image is big: one thread at a time
    alone = decode_images(files, 8, "RGB", workers=4)
    assert torch.equal(free, alone)
    assert [why for _, why in images_module.check_image_files(files, workers=4)] == []
    assert np.asarray(Image.open(files[0])).shape == (12, 12, 3)
