"""What ``api.embed`` and ``api.classify`` are given, when it is no image at all or a hostile file (issue 40, part A):
one line naming the argument (or the file) and the fix. Before: a 0x0 tensor raised torch's "Input and output sizes
should be greater than 0", ``query=[]`` said "extract_features got no images; check the split", a folder in a list of
files was "no such image file", and a 4 GiB file named .png was read whole (MemoryError)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from hostile_files import bounded, png_declaring, sparse_file, zeros_deflate  # tests/hostile_files.py
from studylib import api
from studylib.data.base import DataError


class _Flat(torch.nn.Module):
    """A stand-in for a trained method: its features are the first pixels (the checks under test come first)."""

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)[:, :16]


@pytest.fixture
def model() -> api.EmbeddingModel:
    return api.EmbeddingModel(_Flat(), lambda x: x.float() / 255, {"size": 8, "in_channels": 1}, None)


@pytest.fixture
def pngs(tmp_path):
    for i in range(4):
        Image.fromarray(np.full((8, 8), 40 * i, np.uint8)).save(tmp_path / f"{i}.png")
    (tmp_path / "sub").mkdir()
    return tmp_path


def test_no_image_at_all_names_the_argument(model, pngs):
    x = torch.zeros(4, 1, 8, 8, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"^images: the images of \(2, 1, 0, 0\) have no pixels \(height and width "
                                         r"must be at least 1\)"):
        model.embed(torch.zeros(2, 1, 0, 0, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"^images: the tensor \(0, 1, 8, 8\) holds no image; pass at least one$"):
        model.embed(x[:0])
    with pytest.raises(ValueError, match=r"^query: an empty list holds no image; pass at least one image file, a "
                                         r"folder of images, or a \[N, C, H, W\] tensor$"):
        model.classify(x[:2], [0, 1], [])
    with pytest.raises(ValueError, match=r"^query: the tensor \(0, 1, 8, 8\) holds no image"):
        model.classify(x[:2], [0, 1], x[:0])
    with pytest.raises(ValueError, match=r"^support: .*/sub holds no image files .*; point at the folder that holds"):
        model.classify(pngs / "sub", [0, 1], x)
    assert model.classify(x[:2], [0, 1], x).labels == [0] * 4  # the same call with images works


def test_a_folder_among_image_files_is_said_to_be_a_folder(model, pngs):
    with pytest.raises(ValueError, match=rf"^images: {pngs / 'sub'} is a folder, not an image file: list the image "
                                         rf"files, or pass a folder on its own \(embed\('{pngs / 'sub'}'\) reads every "
                                         r"image under it\)$"):
        model.embed([pngs / "0.png", pngs / "sub"])
    with pytest.raises(FileNotFoundError, match=r"no such image file: .*/nothere\.png"):
        model.embed([pngs / "0.png", pngs / "nothere.png"])
    assert model.embed([pngs / "0.png", pngs / "1.png"]).shape == (2, 16)


def test_a_huge_file_or_a_bomb_is_refused_before_it_is_read_or_decoded(model, tmp_path):
    big = sparse_file(tmp_path / "big.png", 4 << 30)  # 4 GiB that take no disk
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_declaring(16000, 16000, idat=zeros_deflate(1954)))
    with bounded(1 << 30) as mem:
        with pytest.raises(DataError, match=rf"^image {big}: it is 4,294,967,296 bytes, more than the 536,870,912 an "
                                            r"image file may have .*: delete the file"):
            model.embed(big)
        with pytest.raises(DataError, match=rf"^image {bomb}: its header declares 16000x16000 pixels"):
            model.classify(torch.zeros(2, 1, 8, 8, dtype=torch.uint8), [0, 1], [bomb])
    assert mem["peak"] < 256 << 20, mem
