"""Integration test on the real Omniglot subset ``images_background_small1.zip`` (Lake et al.'s own zip).

The zip has 5 alphabets (Balinese, Early_Aramaic, Greek, Korean, Latin), 136 characters, 20 drawers each,
105x105 1-bit PNGs. It is read in place (``$STUDYLIB_OMNIGLOT_ZIP``, else ``<repo>/../shared/data/omniglot/``);
the test skips cleanly when it is absent. Unzipped copies go under ``tmp_path`` only.
"""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from studylib.data.readers import load_omniglot

ALPHABETS = {"Balinese": 24, "Early_Aramaic": 22, "Greek": 24, "Korean": 40, "Latin": 26}
SPLITS = ("train", "val", "test")


from conftest import OMNIGLOT_ZIP as ZIP, needs_omniglot  # tests/conftest.py

pytestmark = needs_omniglot


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def full_105() -> dict[str, object]:
    """The subset at 105x105 (exact pixels), decoded without the cache."""
    return {"ds": load_omniglot(ZIP, size=105, split="alphabet", cache=False)}


def test_counts_and_alphabet_disjoint_split(full_105):
    ds = load_omniglot(ZIP, size=28, split="alphabet")
    total = 0
    for s in SPLITS:
        sp = ds[s]
        assert sp.images.shape[1:] == (1, 28, 28) and sp.images.dtype == torch.uint8
        assert sp.class_counts().tolist() == [20] * sp.num_classes  # 20 drawers per character
        total += sp.num_classes
        for name in sp.superclass_names:
            assert sum(c.startswith(name + "/") for c in sp.class_names) == ALPHABETS[name]
    assert total == 136 and sum(len(ds[s]) for s in SPLITS) == 136 * 20
    alph = [set(ds[s].superclass_names) for s in SPLITS]
    assert alph[0] | alph[1] | alph[2] == set(ALPHABETS)
    assert not (alph[0] & alph[1]) and not (alph[0] & alph[2]) and not (alph[1] & alph[2])
    # the same classes as the 105 px load, in the same order
    assert [ds[s].class_names for s in SPLITS] == [full_105["ds"][s].class_names for s in SPLITS]


def test_stroke_pixels_match_the_pngs(full_105):
    ds = full_105["ds"]
    sp = ds["test"]  # Latin under the alphabet rule
    assert sp.superclass_names == ["Latin"]
    with zipfile.ZipFile(ZIP) as zf:
        names = sorted(n for n in zf.namelist() if n.startswith("images_background_small1/Latin/") and n.endswith(".png"))
        raw = np.stack([np.asarray(Image.open(io.BytesIO(zf.read(n)))) for n in names])
    assert raw.shape == (26 * 20, 105, 105) and raw.dtype == bool  # 1-bit PNG, True = white paper
    ink = (~raw).astype(np.uint8) * 255
    assert np.array_equal(sp.images[:, 0].numpy(), ink)  # ink 255 on background 0, exact at 105 px
    ink_fraction = (~raw).mean()
    assert 0.02 < ink_fraction < 0.2  # thin pen strokes on white paper
    small = load_omniglot(ZIP, size=28, split="alphabet")["test"]
    ref = F.interpolate(torch.from_numpy(ink).float()[:, None], size=(28, 28), mode="bilinear",
                        antialias=True, align_corners=False).round().clamp(0, 255)
    assert (small.images.float() - ref).abs().max() <= 1  # PIL bilinear == torch antialias within 1 level
    # resizing keeps the ink mass: mean intensity per image within 1% of the 105 px ink fraction
    per_image = small.images.float().mean(dim=(1, 2, 3)) / 255
    assert torch.allclose(per_image, torch.from_numpy((~raw).mean(axis=(1, 2))).float(), atol=0.01)
    assert (small.images[:, 0, 0, :] == 0).float().mean() > 0.9  # the top row is background


def test_unzipped_copy_and_rotations(tmp_path, full_105):
    with zipfile.ZipFile(ZIP) as zf:
        zf.extractall(tmp_path / "omniglot")
    a = load_omniglot(ZIP, size=28, split="vinyals")
    b = load_omniglot(tmp_path / "omniglot", size=28, split="vinyals")
    for s in SPLITS:
        assert a[s].class_names == b[s].class_names and torch.equal(a[s].images, b[s].images)
    # vinyals rule scaled to 136 characters: round(136 * 172/1623) val, round(136 * 423/1623) test
    assert a.info["characters"] == {"train": 87, "val": 14, "test": 35}
    rot = load_omniglot(tmp_path / "omniglot", size=28, split="vinyals", rotations=True)
    assert sum(rot[s].num_classes for s in SPLITS) == 4 * 136
    r, p = rot["val"], a["val"]
    assert torch.equal(r.images[r.labels == 4 * 3 + 1], torch.rot90(p.images[p.labels == 3], 1, dims=(-2, -1)))
