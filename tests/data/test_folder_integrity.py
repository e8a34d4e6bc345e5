"""Folders of your own images (issue 29 item 6, issue 28's truncated PNG): a class folder that resolves to another
class (symlink, hard links) is refused, an image whose header disagrees with its data is refused, and the pre-flight
checks every image file cheaply, before any training."""

from __future__ import annotations

import io
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hostile_files import image_folder  # tests/hostile_files.py
from studylib import preflight
from studylib.data.base import DataError
from studylib.data.readers import decode_images, load_image_folder, load_omniglot
from studylib.data.readers.images import image_problem, png_problem


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path_factory.mktemp("cache")))


def _png(size=64, seed=0, mode="L") -> bytes:
    rng = np.random.default_rng(seed)
    shape = (size, size) if mode == "L" else (size, size, 3)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8), mode).save(buf, "PNG")
    return buf.getvalue()


def _lying_header(data: bytes, width: int = 1, height: int = 1) -> bytes:
    """The PNG with its IHDR saying ``width x height`` (CRC recomputed, so the file is well-formed)."""
    assert data[12:16] == b"IHDR"
    body = struct.pack(">II", width, height) + data[24:29]
    return data[:8] + data[8:12] + b"IHDR" + body + struct.pack(">I", zlib.crc32(b"IHDR" + body)) + data[33:]


def _check(root: Path):
    return preflight.check("90_use_your_data", "smoke", {"data_root": str(root)})


# ------------------------------------------------------------------------------------------------ class aliases

def test_a_symlinked_class_folder_is_refused_by_the_reader_and_the_check(tmp_path):
    """Before: class99_alias -> class01 trained as a separate class with the same images, without notice."""
    root = image_folder(tmp_path / "mine")
    (root / "c99_alias").symlink_to(root / "c01", target_is_directory=True)
    with pytest.raises(DataError, match=r"class folder .*c99_alias \(a symlink\) is the same folder as class 'c01'"):
        load_image_folder(root, size=8, split="random")
    report = _check(root)
    assert not report.ok and any("c99_alias (a symlink) is the same folder" in p.text for p in report.problems)


def test_hard_linked_images_in_two_classes_are_refused(tmp_path):
    root = image_folder(tmp_path / "mine")
    twin = root / "c98_twin"
    twin.mkdir()
    for f in sorted((root / "c02").iterdir()):
        os.link(f, twin / f.name)
    with pytest.raises(DataError, match=r"every image of class 'c98_twin' is also an image of class 'c02' \(the same "
                                        r"file: a hard link or a symlink"):
        load_image_folder(root, size=8, split="random")
    (twin / "own.png").write_bytes(_png(8, seed=99))  # partly shared is refused too
    with pytest.raises(DataError, match=r"12 image\(s\) of class 'c98_twin' are also an image of class 'c02'"):
        load_image_folder(root, size=8, split="random")


def test_a_test_class_linking_a_training_class_is_refused_in_the_given_layout(tmp_path):
    root = tmp_path / "given"
    for s, n in (("train", 6), ("val", 3), ("test", 3)):
        image_folder(root / s, classes=n, per=4)
    (root / "test" / "c02").rename(root / "test" / "old")
    (root / "test" / "c02").symlink_to(root / "train" / "c00", target_is_directory=True)
    with pytest.raises(DataError, match=r"test/c02 \(a symlink\) is the same folder as class 'train/c00'"):
        load_image_folder(root, size=8, split="given")


def test_an_omniglot_character_folder_linking_another_is_refused(tmp_path):
    root = tmp_path / "omni"
    for a in ("Alpha", "Beta", "Gamma"):
        for c in range(4):
            d = root / "images_background" / a / f"character{c:02d}"
            d.mkdir(parents=True)
            for i in range(3):
                (d / f"{i}.png").write_bytes(_png(8, seed=hash((a, c, i)) % 10_000))
    (root / "images_background" / "Beta" / "character09").symlink_to(
        root / "images_background" / "Alpha" / "character00", target_is_directory=True)
    with pytest.raises(DataError, match=r"Beta/character09 \(a symlink\) is the same folder as class "
                                        r"'Alpha/character00'"):
        load_omniglot(root, size=8, split="random")


# ------------------------------------------------------------------------------------------------ image files

@pytest.mark.parametrize("mode, kw", [("1", {}), ("L", {}), ("L", {"interlace": 1}), ("I;16", {}), ("LA", {}),
                                      ("RGB", {}), ("RGB", {"interlace": 1}), ("RGBA", {}), ("P", {})])
def test_every_kind_of_png_that_pil_writes_passes(mode, kw):
    """The expected image-data size (PNG spec 7.2, Adam7 8.2) against files PIL writes: no false alarm."""
    for w, h in ((1, 1), (5, 3), (64, 64), (13, 29)):
        img = Image.fromarray(np.random.default_rng(w * h).integers(0, 255, (h, w, 3), dtype=np.uint8)).convert(mode)
        buf = io.BytesIO()
        try:
            img.save(buf, "PNG", **kw)
        except (OSError, ValueError):
            pytest.skip(f"PIL does not write {mode} PNGs with {kw}")
        assert png_problem(buf.getvalue()) is None, (mode, kw, w, h)


def test_a_png_whose_header_disagrees_with_its_data_is_refused(tmp_path):
    """Before: a header saying 1x1 over 64x64 data decoded as a one-pixel image without warning."""
    data = _lying_header(_png(64))
    assert Image.open(io.BytesIO(data)).size == (1, 1)  # what PIL makes of it, silently
    with pytest.raises(DataError, match=r"its header says 1x1 pixels \(2 bytes of image data\) but its data hold more: "
                                        r"the header disagrees with the data"):
        decode_images([data], 8, "L")
    root = image_folder(tmp_path / "mine")
    (root / "c03" / "5.png").write_bytes(_lying_header(_png(8, seed=3005)))
    with pytest.raises(DataError, match=r"c03/5.png .*header disagrees with the data"):
        load_image_folder(root, size=8, split="random", cache=False)
    report = _check(root)
    assert any("1 of 360 image files cannot be read" in p.text and "c03/5.png: its header says 1x1" in p.text
               for p in report.problems), report.text()


def test_a_truncated_png_is_caught_by_the_check_before_training(tmp_path):
    """Issue 28: a truncated PNG passed ./study check and the run failed 24 s later."""
    root = image_folder(tmp_path / "mine")
    good = _png(64, seed=7)
    (root / "c04" / "0.png").write_bytes(good[: len(good) // 2])
    report = _check(root)
    assert not report.ok
    (problem,) = [p for p in report.problems if p.param == "data_root"]
    assert "c04/0.png: it is truncated" in problem.text and "Replace them" in problem.text
    assert _check(image_folder(tmp_path / "clean")).ok


def test_jpegs_truncated_or_whole(tmp_path):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buf, "JPEG")
    data = buf.getvalue()
    assert image_problem(data) is None and image_problem(data + b"\0\0") is None
    assert "truncated" in image_problem(data[: len(data) // 2])
    assert image_problem(b"") == "it is empty" and "not a readable image" in image_problem(b"GIF89a-not-really")
    assert "CRC" in png_problem(_png(8)[:-5] + b"XXXXX")
