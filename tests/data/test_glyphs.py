"""Tests of the embedded glyph set (studylib.data.glyphs).

The class scan (rendering ~37k glyphs) runs once per session; every generation goes to a pytest temporary
cache folder and uses a ``max_classes`` subset so the file stays fast.
"""

from __future__ import annotations

import re
import time
import unicodedata

import numpy as np
import pytest
import torch

import studylib.data.glyphs as G
from studylib.data.base import FewShotDataset


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("glyph-cache")


@pytest.fixture(scope="module")
def classes():
    return G.glyph_classes()


@pytest.fixture(scope="module")
def ds300(cache) -> FewShotDataset:
    return G.load_glyphs(max_classes=300, cache_dir=cache)


def test_class_list_size_and_content(classes):
    assert len(classes) >= 1000
    codes = [c.code for c in classes]
    assert codes == sorted(set(codes))
    for c in classes:
        ch = chr(c.code)
        assert len(c.faces) >= G.MIN_FACES
        assert unicodedata.category(ch)[0] in "LNSP"  # no whitespace, control, format, marks
        assert not ch.isspace()
        assert c.name == f"U+{c.code:04X} {unicodedata.name(ch)}"
        assert c.alphabet == G.alphabet_of(c.code)
    rep = G.dedup_report()
    assert rep["classes"] == len(classes)
    assert rep["before_dedup"] - rep["dropped_duplicates"] == len(classes)


def test_script_and_block_grouping():
    assert G.alphabet_of(ord("A")) == "Latin"
    assert G.alphabet_of(0x03A9) == "Greek"        # GREEK CAPITAL LETTER OMEGA
    assert G.alphabet_of(0x0416) == "Cyrillic"     # CYRILLIC CAPITAL LETTER ZHE
    assert G.alphabet_of(ord("7")) == "Basic Latin"
    assert G.alphabet_of(0x2192) == "Arrows"
    assert G.alphabet_of(0x2500) == "Box Drawing"
    # block table: sorted, non-overlapping, and consistent with the Unicode names at a few block edges
    lo_hi = [(lo, hi) for lo, hi, _ in G._BLOCKS]
    assert all(h1 < l2 for (_, h1), (l2, _) in zip(lo_hi, lo_hi[1:])) and all(lo <= hi for lo, hi in lo_hi)
    for code, block, prefix in ((0x2500, "Box Drawing", "BOX DRAWINGS"), (0x257F, "Box Drawing", "BOX DRAWINGS"),
                                (0x2800, "Braille Patterns", "BRAILLE PATTERN"),
                                (0x28FF, "Braille Patterns", "BRAILLE PATTERN"),
                                (0x0531, "Armenian", "ARMENIAN"), (0x10D0, "Georgian", "GEORGIAN")):
        assert G.block_of(code) == block and unicodedata.name(chr(code)).startswith(prefix)


def test_homoglyphs_deduplicated_by_rendering(classes):
    kept = {c.code for c in classes}
    assert {ord("A"), ord("o"), ord("E")} <= kept
    # Greek Alpha, Cyrillic A, Greek omicron, Cyrillic o, Greek Epsilon, Cyrillic Ie render like Latin
    assert not kept & {0x0391, 0x0410, 0x03BF, 0x043E, 0x0395, 0x0415}
    # a visibly different letter of each script survives
    assert {0x03A9, 0x0416} <= kept


def test_no_two_class_means_closer_than_threshold(classes):
    means = G.class_means()
    d = torch.cdist(means, means).div_(G.REF_SIZE)
    d.fill_diagonal_(float("inf"))
    assert float(d.min()) >= G.DEDUP_THRESHOLD
    # the stored means are exactly what an independent rendering of the class list gives (subset)
    idx = torch.randperm(len(classes), generator=torch.Generator().manual_seed(0))[:150].sort().values
    again = G.clean_class_means([classes[i] for i in idx.tolist()])
    assert torch.equal(again, means[idx])
    # brute-force RMS distance, no matmul trick, on that subset
    sub = again
    diff = (sub[:, None, :] - sub[None, :, :]).pow(2).mean(-1).sqrt()
    diff.fill_diagonal_(float("inf"))
    assert float(diff.min()) >= G.DEDUP_THRESHOLD - 1e-12


def test_split_shapes_labels_and_counts(ds300):
    total = 0
    for name in ("train", "val", "test"):
        s = ds300[name]
        assert s.images.dtype == torch.uint8 and s.images.shape[1:] == (1, 28, 28)
        assert torch.equal(s.class_counts(), torch.full((s.num_classes,), 20))
        assert int(s.labels.min()) == 0 and int(s.labels.max()) == s.num_classes - 1
        assert all(re.fullmatch(r"U\+[0-9A-F]{4,5} [A-Z0-9 \-]+", n) for n in s.class_names)
        assert s.superclass is not None and len(s.superclass) == s.num_classes
        total += s.num_classes
    assert total == 300
    assert ds300.info["classes"] == {"train": 192, "val": 48, "test": 60}
    assert ds300.info["dedup_threshold"] == G.DEDUP_THRESHOLD and ds300.info["num_faces"] == 16
    # images have ink and are not all identical within a class
    tr = ds300["train"]
    assert int(tr.images.amax(dim=(1, 2, 3)).min()) > 100
    first = tr.images[tr.labels == 0].float()
    assert float((first - first.mean(0)).abs().mean()) > 1.0


@pytest.mark.parametrize("split", ["random", "alphabet"])
def test_class_disjoint_splits(ds300, cache, split):
    ds = G.load_glyphs(max_classes=300, split=split, cache_dir=cache)
    assert ds.info["cache_hit"]  # the split is applied after loading the cached arrays
    names = {k: set(ds[k].class_names) for k in ("train", "val", "test")}
    assert not names["train"] & names["val"] and not names["train"] & names["test"]
    assert not names["val"] & names["test"]
    assert sum(len(v) for v in names.values()) == 300
    if split == "alphabet":
        alph = {k: {ds[k].superclass_names[i] for i in ds[k].superclass.tolist()} for k in names}
        assert not alph["train"] & alph["val"] and not alph["train"] & alph["test"]
        assert not alph["val"] & alph["test"]
        # alphabets of a class agree with the class list
        by_name = {c.name: c.alphabet for c in G.glyph_classes()}
        for k in names:
            for n, a in zip(ds[k].class_names, ds[k].superclass.tolist()):
                assert by_name[n] == ds[k].superclass_names[a]


def test_unknown_split_raises(cache):
    with pytest.raises(ValueError, match="random, alphabet"):
        G.load_glyphs(split="bogus", cache_dir=cache)


def test_deterministic_and_per_class_streams(ds300, tmp_path_factory):
    a = G.load_glyphs(max_classes=30, cache_dir=tmp_path_factory.mktemp("det-a"))
    b = G.load_glyphs(max_classes=30, cache_dir=tmp_path_factory.mktemp("det-b"))
    for k in ("train", "val", "test"):
        assert torch.equal(a[k].images, b[k].images) and torch.equal(a[k].labels, b[k].labels)
        assert a[k].class_names == b[k].class_names
    # a class looks the same whether generated among 30 or 300 classes
    big = {n: ds300[k].images[ds300[k].labels == i]
           for k in ("train", "val", "test") for i, n in enumerate(ds300[k].class_names)}
    shared = 0
    for k in ("train", "val", "test"):
        for i, n in enumerate(a[k].class_names):
            if n in big:
                assert torch.equal(a[k].images[a[k].labels == i], big[n])
                shared += 1
    assert shared > 0


def test_cache_hit_fast_and_version_bump_regenerates(ds300, cache, monkeypatch):
    t = time.perf_counter()
    again = G.load_glyphs(max_classes=300, cache_dir=cache)
    assert again.info["cache_hit"] and time.perf_counter() - t < 2.0
    assert torch.equal(again["train"].images, ds300["train"].images)
    monkeypatch.setattr(G, "GENERATOR_VERSION", G.GENERATOR_VERSION + "-bumped")
    small = G.load_glyphs(max_classes=10, cache_dir=cache)
    assert not small.info["cache_hit"]
    files_before = set(cache.glob("*.npz"))
    monkeypatch.setattr(G, "GENERATOR_VERSION", G.GENERATOR_VERSION + "-again")
    bumped = G.load_glyphs(max_classes=10, cache_dir=cache)
    assert not bumped.info["cache_hit"] and set(cache.glob("*.npz")) - files_before


def test_rgb_variant(cache):
    gray = G.load_glyphs(max_classes=20, cache_dir=cache)
    rgb = G.load_glyphs(max_classes=20, rgb=True, cache_dir=cache)
    x, g = rgb["train"].images, gray["train"].images
    assert x.shape[1] == 3 and x.shape[0] == g.shape[0]
    bg = x[:, :, 0, 0]                                                  # corner: background
    # every image: the most ink-covered pixel differs from the background by >= 0.3 * 255 in a channel
    flat = g.flatten(1).argmax(1)
    fg = x.flatten(2)[torch.arange(len(x)), :, flat]
    assert int((fg.int() - bg.int()).abs().amax(1).min()) >= 70
    # where the grayscale ink rounds to 0 (coverage < 0.5/255) the colour is the background within 1 level
    empty = g[:, 0] == 0
    ref = bg[:, None, None, :].expand(-1, 28, 28, -1)[empty].int()
    assert int((x.permute(0, 2, 3, 1)[empty].int() - ref).abs().max()) <= 1
    # colours vary across instances
    assert bg.float().std(0).min() > 20


@pytest.mark.parametrize("size", [16, 40])
def test_size_parameter(cache, size):
    ds = G.load_glyphs(size=size, max_classes=12, cache_dir=cache)
    s = ds["train"]
    assert s.images.shape[1:] == (1, size, size)
    # ink is roughly centred: mean ink position within the middle half of the image
    w = s.images[:, 0].double()
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    cy = (w * yy).sum((1, 2)) / w.sum((1, 2))
    cx = (w * xx).sum((1, 2)) / w.sum((1, 2))
    assert bool(((cy - (size - 1) / 2).abs() < size / 4).all()) and bool(((cx - (size - 1) / 2).abs() < size / 4).all())


def test_clean_rendering_matches_matplotlib_text_layout():
    """Our per-glyph placement draws the same pixels as FT2Font.set_text/draw_glyphs_to_bitmap."""
    from matplotlib.ft2font import LoadFlags

    r = G._Renderer(56)
    for face in (0, 8, 12):
        for ch in "AgQ7":
            ours = r.render(ord(ch), face)
            font = r.fonts[face]
            font.set_size(r.em, 72)
            r.sizes[face] = r.em
            font.set_text(ch, flags=LoadFlags.NO_HINTING)
            font.draw_glyphs_to_bitmap(antialiased=True)
            ref = np.asarray(font.get_image())
            crop = lambda im: im[np.ix_(im.max(1) > 0, im.max(0) > 0)]  # noqa: E731
            assert crop(ours).shape == crop(ref).shape
            assert np.abs(crop(ours).astype(int) - crop(ref).astype(int)).max() <= 1
