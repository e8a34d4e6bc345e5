"""Readers for real data sets, on tiny fixtures written in each on-disk format.

References: the fixture arrays themselves (what was written must come back, relabelled), PIL's decoder for
the PNG/JPEG files, ``torch.rot90`` for rotation classes, and torch's antialiased bilinear interpolation
(which matches PIL's bilinear filter within 1 grey level) for resizing.
"""

from __future__ import annotations

import collections
import csv
import io
import os
import pickle
import re
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from studylib.data import readers as R
from studylib.data.base import DataError, FewShotDataset

SPLITS = ("train", "val", "test")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test writes its decode cache to a fresh folder, never to the repository's .cache/."""
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path_factory.mktemp("cache")))
    torch.set_num_threads(1)


def torch_resize(x: np.ndarray, size: int) -> np.ndarray:
    """Reference resize: ``[..., H, W]`` uint8 -> antialiased bilinear ``[..., size, size]`` via torch."""
    t = torch.tensor(np.array(x), dtype=torch.float32)
    shape = t.shape
    t = t.reshape(-1, 1, *shape[-2:])
    y = F.interpolate(t, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return y.round().clamp(0, 255).reshape(*shape[:-2], size, size).numpy().astype(np.int64)


def png_bytes(array: np.ndarray, mode: str | None = None) -> bytes:
    buf = io.BytesIO()
    img = Image.fromarray(array)
    if mode:
        img = img.convert(mode)
    img.save(buf, format="PNG")
    return buf.getvalue()


def assert_class_disjoint(ds: FewShotDataset) -> None:
    names = [set(ds[s].class_names) for s in SPLITS]
    assert not (names[0] & names[1]) and not (names[0] & names[2]) and not (names[1] & names[2])


# ----------------------------------------------------------------------------------------------------------
# Omniglot
# ----------------------------------------------------------------------------------------------------------

def glyph(rng: np.random.Generator) -> np.ndarray:
    """A 105x105 bool image as the authors store it: True = white background, False = ink strokes."""
    img = np.ones((105, 105), dtype=bool)
    for _ in range(3):
        r, c = rng.integers(5, 80, size=2)
        h, w = rng.integers(3, 25, size=2)
        img[r:r + h, c:c + w] = False
    return img


def write_omniglot(root: Path, top: str, alphabets: dict[str, int], drawers: int = 2, as_zip: bool = True,
                   seed: int = 0) -> dict[str, np.ndarray]:
    """Write ``top`` (zip or folder) with ``alphabets[name]`` characters of ``drawers`` 1-bit PNGs each.

    Returns ``{"<alphabet>/<character>/<file>": bool array}`` of what was written.
    """
    rng = np.random.default_rng(seed)
    written: dict[str, np.ndarray] = {}
    entries: list[tuple[str, bytes | None]] = [(f"{top}/", None)]
    for a, n_chars in alphabets.items():
        entries.append((f"{top}/{a}/", None))
        for c in range(1, n_chars + 1):
            entries.append((f"{top}/{a}/character{c:02d}/", None))
            for d in range(1, drawers + 1):
                arr = glyph(rng)
                name = f"{a}/character{c:02d}/{c:02d}{d:02d}_{d:02d}.png"
                written[name] = arr
                entries.append((f"{top}/{name}", png_bytes(arr.astype(np.uint8) * 255, "1")))
    if as_zip:
        with zipfile.ZipFile(root / f"{top}.zip", "w") as zf:
            for name, data in entries:
                if data is None:
                    zf.writestr(zipfile.ZipInfo(name), b"")
                else:
                    zf.writestr(name, data)
    else:
        for name, data in entries:
            p = root / name
            if data is None:
                p.mkdir(parents=True, exist_ok=True)
            else:
                p.write_bytes(data)
    return written


BG = {"Alpha": 3, "Beta": 2, "Gamma": 4}
EV = {"Delta": 2, "Epsilon": 3}


@pytest.fixture
def omni_root(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    root = tmp_path / "omni"
    root.mkdir()
    written = write_omniglot(root, "images_background", BG, seed=1)
    written.update(write_omniglot(root, "images_evaluation", EV, seed=2))
    return root, written


def test_omniglot_pixels_polarity_and_resize(omni_root):
    root, written = omni_root
    full = R.load_omniglot(root, size=105, split="vinyals")
    small = R.load_omniglot(root, size=28, split="vinyals")
    n_chars = sum(BG.values()) + sum(EV.values())
    assert sum(full[s].num_classes for s in SPLITS) == n_chars
    for s in SPLITS:
        sp = full[s]
        assert sp.images.shape[1:] == (1, 105, 105) and small[s].images.shape[1:] == (1, 28, 28)
        assert torch.equal(sp.labels, small[s].labels)
        # images are grouped by class in file order; ink = 255, background = 0 (inverted PNG)
        files = [f for c in sp.class_names for f in sorted(k for k in written if k.startswith(c + "/"))]
        expected = np.stack([(~written[f]).astype(np.uint8) * 255 for f in files])
        assert np.array_equal(sp.images[:, 0].numpy(), expected)
        assert torch.equal(sp.labels, torch.arange(sp.num_classes).repeat_interleave(2))
        # 28x28 = antialiased bilinear resize of the exact 105x105 pixels (PIL vs torch: within 1 level)
        diff = np.abs(small[s].images[:, 0].numpy().astype(np.int64) - torch_resize(expected, 28))
        assert diff.max() <= 1
    assert full.info["polarity"].startswith("ink=255")


def test_omniglot_zip_and_folder_agree(omni_root, tmp_path):
    root, _ = omni_root
    unzipped = tmp_path / "unzipped"
    for z in root.glob("*.zip"):
        with zipfile.ZipFile(z) as zf:
            zf.extractall(unzipped)
    a = R.load_omniglot(root, split="background-evaluation")
    b = R.load_omniglot(unzipped, split="background-evaluation")
    for s in SPLITS:
        assert a[s].class_names == b[s].class_names
        assert torch.equal(a[s].images, b[s].images) and torch.equal(a[s].labels, b[s].labels)
    # a single zip, or the unzipped top folder itself, also works as root
    one = R.load_omniglot(root / "images_background.zip", split="alphabet")
    assert set(one["train"].superclass_names) | set(one["val"].superclass_names) | set(one["test"].superclass_names) == set(BG)
    top = R.load_omniglot(unzipped / "images_background", split="alphabet")
    assert top["test"].class_names == one["test"].class_names
    # the unzipped folder wins over the zip of the same name when both are there
    both = tmp_path / "both"
    both.mkdir()
    write_omniglot(both, "images_background", BG, seed=1)
    write_omniglot(both, "images_background", BG, seed=1, as_zip=False)
    ds = R.load_omniglot(both, split="alphabet")
    assert any("same top folder" in s for s in ds.info["ignored_sources"])
    assert ds.info["sources"][0].endswith("images_background")


def test_omniglot_rotations(omni_root):
    root, _ = omni_root
    plain = R.load_omniglot(root, size=28, split="random", seed=3)
    rot = R.load_omniglot(root, size=28, split="random", seed=3, rotations=True)
    for s in SPLITS:
        p, r = plain[s], rot[s]
        assert r.num_classes == 4 * p.num_classes and len(r) == 4 * len(p)
        assert r.class_names[:4] == [f"{p.class_names[0]}/rot{a:03d}" for a in (0, 90, 180, 270)]
        for j in range(p.num_classes):
            orig = p.images[p.labels == j]
            for k in range(4):
                got = r.images[r.labels == 4 * j + k]
                assert torch.equal(got, torch.rot90(orig, k, dims=(-2, -1)))
                assert r.superclass[4 * j + k] == r.superclass_names.index(p.superclass_names[int(p.superclass[j])])
    assert_class_disjoint(rot)
    # all four rotations of a character sit in one split
    chars = [{n.rsplit("/", 1)[0] for n in rot[s].class_names} for s in SPLITS]
    assert not (chars[0] & chars[1]) and not (chars[0] & chars[2]) and not (chars[1] & chars[2])


def test_omniglot_split_rules(omni_root):
    root, _ = omni_root
    order = [f"{a}/character{c:02d}" for alph in (BG, EV) for a, n in alph.items() for c in range(1, n + 1)]
    n = len(order)  # 14 characters
    v = R.load_omniglot(root, split="vinyals")
    n_val, n_test = round(n * 172 / 1623), round(n * 423 / 1623)
    assert v["test"].class_names == order[n - n_test:]
    assert v["val"].class_names == order[n - n_test - n_val:n - n_test]
    assert v["train"].class_names == order[:n - n_test - n_val]
    assert v.info["characters"] == {"train": n - n_val - n_test, "val": n_val, "test": n_test}

    be = R.load_omniglot(root, split="background-evaluation")
    assert set(be["test"].superclass_names) == set(EV)
    assert set(be["train"].superclass_names) | set(be["val"].superclass_names) == set(BG)
    assert not set(be["train"].superclass_names) & set(be["val"].superclass_names)

    al = R.load_omniglot(root, split="alphabet")
    alph = [set(al[s].superclass_names) for s in SPLITS]
    assert all(alph) and not (alph[0] & alph[1]) and not (alph[0] & alph[2]) and not (alph[1] & alph[2])
    for s in SPLITS:  # superclass = alphabet
        sp = al[s]
        assert [sp.superclass_names[int(i)] for i in sp.superclass] == [c.split("/")[0] for c in sp.class_names]

    r1, r1b, r2 = (R.load_omniglot(root, split="random", seed=sd) for sd in (1, 1, 2))
    assert [r1[s].class_names for s in SPLITS] == [r1b[s].class_names for s in SPLITS]
    assert [sorted(r1[s].class_names) for s in SPLITS] != [sorted(r2[s].class_names) for s in SPLITS]
    assert sorted(sum((r1[s].class_names for s in SPLITS), [])) == sorted(order)
    for ds in (v, be, al, r1):
        assert_class_disjoint(ds)
    with pytest.raises(ValueError, match="unknown split"):
        R.load_omniglot(root, split="lake")


def test_omniglot_full_archive_wins_over_subset(tmp_path):
    write_omniglot(tmp_path, "images_background", BG)
    write_omniglot(tmp_path, "images_background_small1", {"Alpha": 3})
    ds = R.load_omniglot(tmp_path, split="alphabet")
    assert any("subset of" in s for s in ds.info["ignored_sources"])
    assert sum(ds[s].num_classes for s in SPLITS) == sum(BG.values())


def test_omniglot_errors(tmp_path):
    with pytest.raises(DataError, match=r"does not exist.*images_background\.zip"):
        R.load_omniglot(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"no Omniglot images under .*empty; expected one of: .*images_background\*\.zip.*"
                                        r"<alphabet>/<character>/<image>\.png.*Found: nothing"):
        R.load_omniglot(tmp_path / "empty")
    # an empty character folder inside the zip
    bad = tmp_path / "bad"
    bad.mkdir()
    write_omniglot(bad, "images_background", BG)
    with zipfile.ZipFile(bad / "images_background.zip", "a") as zf:
        zf.writestr(zipfile.ZipInfo("images_background/Alpha/character09/"), b"")
    with pytest.raises(DataError, match=r"images_background/Alpha/character09 .* holds no \.png"):
        R.load_omniglot(bad)
    # the same alphabet in two archives
    dup = tmp_path / "dup"
    dup.mkdir()
    write_omniglot(dup, "images_background_small1", {"Alpha": 2})
    write_omniglot(dup, "images_background_small2", {"Alpha": 2})
    with pytest.raises(DataError, match="alphabet Alpha is in both"):
        R.load_omniglot(dup)
    # background-evaluation without evaluation alphabets says what to do instead
    only_bg = tmp_path / "only_bg"
    only_bg.mkdir()
    write_omniglot(only_bg, "images_background", BG)
    with pytest.raises(DataError, match=r"needs images_evaluation.*split='alphabet'"):
        R.load_omniglot(only_bg, split="background-evaluation")
    # a corrupt PNG names the file
    corrupt = tmp_path / "corrupt"
    (corrupt / "images_background" / "Alpha" / "character01").mkdir(parents=True)
    (corrupt / "images_background" / "Alpha" / "character01" / "x.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match=r"cannot decode image .*x\.png"):
        R.load_omniglot(corrupt, split="vinyals")


def test_omniglot_unzipped_empty_character(tmp_path):
    write_omniglot(tmp_path, "images_evaluation", EV, as_zip=False)
    (tmp_path / "images_evaluation" / "Delta" / "character05").mkdir()
    with pytest.raises(DataError, match=r"images_evaluation/Delta/character05 .* holds no \.png.*delete"):
        R.load_omniglot(tmp_path)


def test_decode_cache_is_reused_and_invalidated(omni_root, monkeypatch):
    root, _ = omni_root
    first = R.load_omniglot(root, split="vinyals")
    cache_file = Path(first.info["cache_file"])
    assert cache_file.is_file()
    from studylib.data.readers import images  # the module the readers decode through
    decode = images.decode_images
    monkeypatch.setattr(images, "decode_images", lambda *a, **k: pytest.fail("decoded again despite the cache"))
    second = R.load_omniglot(root, split="alphabet", rotations=True)  # split/rotations need no new decode
    assert second.info["cache_file"] == str(cache_file)
    again = R.load_omniglot(root, split="vinyals")
    assert torch.equal(again["train"].images, first["train"].images)
    monkeypatch.setattr(images, "decode_images", decode)
    # a changed source file changes the fingerprint, hence the cache file
    z = root / "images_evaluation.zip"
    st = z.stat()
    os.utime(z, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    third = R.load_omniglot(root, split="vinyals")
    assert third.info["cache_file"] != str(cache_file)
    # a damaged cache file is rebuilt with a warning, never fatal
    Path(third.info["cache_file"]).write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="unreadable decode cache"):
        fourth = R.load_omniglot(root, split="vinyals")
    assert torch.equal(fourth["test"].images, first["test"].images)


# ----------------------------------------------------------------------------------------------------------
# miniImageNet
# ----------------------------------------------------------------------------------------------------------

MINI_CLASSES = {"train": ["n01", "n02", "n03"], "val": ["n04", "n05"], "test": ["n06", "n07"]}


def write_mini_pickles(root: Path, per_class: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {}
    for s, classes in MINI_CLASSES.items():
        n = per_class * len(classes)
        data = rng.integers(0, 256, (n, 84, 84, 3), dtype=np.uint8)
        perm = rng.permutation(n)  # classes interleaved in the array, as class_dict allows
        class_dict = {c: perm[i * per_class:(i + 1) * per_class].tolist() for i, c in enumerate(reversed(classes))}
        with open(root / f"mini-imagenet-cache-{s}.pkl", "wb") as fh:
            pickle.dump({"image_data": data, "class_dict": class_dict}, fh, protocol=4)
        arrays[s] = (data, class_dict)
    return arrays


def test_mini_imagenet_pickles(tmp_path):
    arrays = write_mini_pickles(tmp_path)
    ds = R.load_mini_imagenet(tmp_path)
    assert ds.name == "mini_imagenet"
    for s in SPLITS:
        data, class_dict = arrays[s]
        sp = ds[s]
        assert sp.class_names == sorted(MINI_CLASSES[s])
        assert sp.images.shape == (len(data), 3, 84, 84) and sp.images.dtype == torch.uint8
        for k, c in enumerate(sp.class_names):
            got = sp.images[sp.labels == k].permute(0, 2, 3, 1).numpy()
            assert np.array_equal(got, data[class_dict[c]])
    assert_class_disjoint(ds)
    small = R.load_mini_imagenet(tmp_path, size=21)
    data, class_dict = arrays["val"]
    got = small["val"].images[small["val"].labels == 0].numpy().astype(np.int64)
    ref = torch_resize(data[class_dict["n04"]].transpose(0, 3, 1, 2), 21)
    assert np.abs(got - ref).max() <= 1


def test_mini_imagenet_csv_layout(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "images").mkdir()
    truth = {}
    for s, classes in MINI_CLASSES.items():
        rows = []
        for c in classes:
            for i in range(2):
                name = f"{c}{i:08d}.jpg" if i == 0 else f"{c}{i:08d}.png"
                arr = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
                if name.endswith(".jpg"):
                    Image.fromarray(arr).convert("L").save(tmp_path / "images" / name, quality=95)  # grayscale JPEG
                else:
                    Image.fromarray(arr).save(tmp_path / "images" / name)
                truth[name] = np.asarray(Image.open(tmp_path / "images" / name).convert("RGB"))
                rows.append((name, c))
        with open(tmp_path / f"{s}.csv", "w", newline="") as fh:
            csv.writer(fh).writerows([("filename", "label"), *rows])
    ds = R.load_mini_imagenet(tmp_path, size=12)
    for s in SPLITS:
        sp = ds[s]
        assert sp.class_names == MINI_CLASSES[s] and sp.images.shape == (2 * len(MINI_CLASSES[s]), 3, 12, 12)
        assert sp.class_counts().tolist() == [2] * sp.num_classes
    # the PNG of class n02 matches the resized original within 1 grey level (grayscale JPEG -> 3 equal channels)
    sp = ds["train"]
    png = sp.images[sp.labels == 1][1].numpy().astype(np.int64)
    assert np.abs(png - torch_resize(truth["n0200000001.png"].transpose(2, 0, 1), 12)).max() <= 1
    gray = sp.images[sp.labels == 0][0]
    assert torch.equal(gray[0], gray[1]) and torch.equal(gray[1], gray[2])
    (tmp_path / "images" / "n0700000000.jpg").unlink()
    with pytest.raises(DataError, match=r"1 images listed in the CSV files are missing .*n0700000000\.jpg"):
        R.load_mini_imagenet(tmp_path, size=12)


def test_mini_imagenet_errors(tmp_path):
    with pytest.raises(DataError, match=r"does not exist"):
        R.load_mini_imagenet(tmp_path / "missing")
    with pytest.raises(DataError, match=r"no mini-imagenet-cache-train\.pkl or images/ \+ train\.csv under .*"
                                        r"point data_root at the folder"):
        R.load_mini_imagenet(tmp_path)
    write_mini_pickles(tmp_path)
    (tmp_path / "mini-imagenet-cache-val.pkl").unlink()
    with pytest.raises(DataError, match=r"missing mini-imagenet-cache-val\.pkl under"):
        R.load_mini_imagenet(tmp_path)
    (tmp_path / "mini-imagenet-cache-val.pkl").write_bytes(b"\x80\x04garbage that is no pickle")
    with pytest.raises(DataError, match=r"mini-imagenet-cache-val\.pkl is not a readable pickle"):
        R.load_mini_imagenet(tmp_path, cache=False)
    with open(tmp_path / "mini-imagenet-cache-val.pkl", "wb") as fh:  # an index past the end of image_data
        pickle.dump({"image_data": np.zeros((2, 84, 84, 3), np.uint8), "class_dict": {"n09": [0, 5]}}, fh)
    with pytest.raises(DataError, match=r"indexes image 5 but image_data holds 2 images"):
        R.load_mini_imagenet(tmp_path, cache=False)


# ----------------------------------------------------------------------------------------------------------
# tieredImageNet
# ----------------------------------------------------------------------------------------------------------

def write_tiered(root: Path, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    spec_names = [f"n{i:03d}" for i in range(8)]
    gen_names = ["animal", "device", "plant", "food"]
    layout = {"train": ([0, 1, 2], [0, 0, 1]), "val": ([3, 4], [2, 2]), "test": ([5, 6, 7], [3, 3, 3])}
    truth = {}
    for s, (spec_ids, gen_ids) in layout.items():
        spec = np.repeat(spec_ids, 2)[::-1].copy()  # reversed order: the reader must not assume sorted labels
        gen = np.repeat(gen_ids, 2)[::-1].copy()
        imgs = rng.integers(0, 256, (len(spec), 16, 16, 3), dtype=np.uint8)
        encoded = [np.frombuffer(png_bytes(im), dtype=np.uint8) for im in imgs]
        with open(root / f"{s}_images_png.pkl", "wb") as fh:
            pickle.dump(encoded, fh)
        with open(root / f"{s}_labels.pkl", "wb") as fh:
            pickle.dump({"label_specific": spec, "label_general": gen, "label_specific_str": spec_names,
                         "label_general_str": gen_names}, fh)
        truth[s] = (imgs, spec, gen)
    return truth


def test_tiered_imagenet(tmp_path):
    truth = write_tiered(tmp_path)
    ds = R.load_tiered_imagenet(tmp_path, size=16)
    gen_names = ["animal", "device", "plant", "food"]
    for s in SPLITS:
        imgs, spec, gen = truth[s]
        sp = ds[s]
        assert sp.class_names == [f"n{i:03d}" for i in sorted(set(spec.tolist()))]
        for k, name in enumerate(sp.class_names):
            mask = spec == int(name[1:])
            assert np.array_equal(sp.images[sp.labels == k].permute(0, 2, 3, 1).numpy(), imgs[mask])
            assert sp.superclass_names[int(sp.superclass[k])] == gen_names[int(gen[mask][0])]
    assert ds["train"].superclass_names == ["animal", "device"]
    assert_class_disjoint(ds)


def test_tiered_imagenet_errors(tmp_path):
    write_tiered(tmp_path)
    (tmp_path / "test_labels.pkl").unlink()
    with pytest.raises(DataError, match=r"missing test_labels\.pkl under .*_images_png\.pkl"):
        R.load_tiered_imagenet(tmp_path)
    with open(tmp_path / "test_labels.pkl", "wb") as fh:  # 5 labels for 6 images
        pickle.dump({"label_specific": np.arange(5), "label_general": np.zeros(5, int)}, fh)
    with pytest.raises(DataError, match=r"holds 6 images but .* 5 specific .*length mismatch"):
        R.load_tiered_imagenet(tmp_path)
    (tmp_path / "test_labels.pkl").write_bytes(pickle.dumps({"x": 1})[:-3])  # truncated
    with pytest.raises(DataError, match=r"test_labels\.pkl is not a readable pickle"):
        R.load_tiered_imagenet(tmp_path)


# ----------------------------------------------------------------------------------------------------------
# CIFAR-FS / FC100
# ----------------------------------------------------------------------------------------------------------

class Py2Pickler(pickle._Pickler):
    """Writes bytes and str as Python-2 ``str`` (SHORT_BINSTRING/BINSTRING), as a Python-2 pickle does.

    A numpy array pickled this way carries its raw buffer as a Python-2 string: ``pickle.load`` without
    ``encoding="latin1"`` fails on it, exactly like the CIFAR-FS/FC100 files made under Python 2.
    """

    dispatch = pickle._Pickler.dispatch.copy()

    def _py2_string(self, raw: bytes, obj) -> None:
        n = len(raw)
        self.write(pickle.SHORT_BINSTRING + bytes([n]) + raw if n < 256 else pickle.BINSTRING + struct.pack("<i", n) + raw)
        self.memoize(obj)

    def save_bytes(self, obj: bytes) -> None:
        self._py2_string(obj, obj)

    def save_str(self, obj: str) -> None:
        self._py2_string(obj.encode("latin1"), obj)

    dispatch[bytes] = save_bytes
    dispatch[str] = save_str


CIFAR_IDS = {"train": [0, 51, 99], "val": [3, 30], "test": [8, 13]}


def write_cifar(root: Path, prefix: str, seed: int = 0) -> dict[str, tuple[np.ndarray, list[int]]]:
    rng = np.random.default_rng(seed)
    truth = {}
    for s, ids in CIFAR_IDS.items():
        labels = [i for i in ids for _ in range(2)][::-1]
        data = rng.integers(0, 256, (len(labels), 32, 32, 3), dtype=np.uint8)
        with open(root / f"{prefix}_{s}.pickle", "wb") as fh:
            Py2Pickler(fh, protocol=2).dump({"data": data, "labels": labels})
        truth[s] = (data, labels)
    return truth


@pytest.mark.parametrize("loader,prefix", [(R.load_cifar_fs, "CIFAR_FS"), (R.load_fc100, "FC100")])
def test_cifar_like(tmp_path, loader, prefix):
    truth = write_cifar(tmp_path, prefix)
    with open(tmp_path / f"{prefix}_train.pickle", "rb") as fh, pytest.raises(UnicodeDecodeError):
        pickle.load(fh)  # the fixture really is a Python-2 pickle
    ds = loader(tmp_path)
    for s in SPLITS:
        data, labels = truth[s]
        sp = ds[s]
        assert sp.class_names == [R.CIFAR100_FINE_NAMES[i] for i in sorted(CIFAR_IDS[s])]
        for k, gid in enumerate(sorted(CIFAR_IDS[s])):
            mask = np.asarray(labels) == gid
            assert np.array_equal(sp.images[sp.labels == k].permute(0, 2, 3, 1).numpy(), data[mask])
    assert ds["train"].class_names == ["apple", "mushroom", "worm"]
    tr = ds["train"]
    assert [tr.superclass_names[int(i)] for i in tr.superclass] == [
        "fruit_and_vegetables", "fruit_and_vegetables", "non-insect_invertebrates"]
    assert ds.info["global_label_ids"]["val"] == [3, 30]
    big = loader(tmp_path, size=84)  # upscaling (the seed-000 protocol trains CIFAR-FS at 84 px)
    ref = torch_resize(truth["test"][0].transpose(0, 3, 1, 2), 84)  # images keep the file's order
    assert big["test"].images.shape == (4, 3, 84, 84)
    assert np.abs(big["test"].images.numpy().astype(np.int64) - ref).max() <= 1


def test_cifar100_label_tables():
    assert len(R.CIFAR100_FINE_NAMES) == 100 and list(R.CIFAR100_FINE_NAMES) == sorted(R.CIFAR100_FINE_NAMES)
    fines = [f for v in R.CIFAR100_COARSE.values() for f in v]
    assert len(R.CIFAR100_COARSE) == 20 and all(len(v) == 5 for v in R.CIFAR100_COARSE.values())
    assert sorted(fines) == sorted(R.CIFAR100_FINE_NAMES)


def test_cifar_errors(tmp_path):
    with pytest.raises(DataError, match=r"missing CIFAR_FS_train\.pickle under .*CIFAR_FS_val\.pickle"):
        R.load_cifar_fs(tmp_path)
    write_cifar(tmp_path, "FC100")
    with open(tmp_path / "FC100_val.pickle", "wb") as fh:
        pickle.dump({"data": np.zeros((3, 32, 32, 3), np.uint8), "labels": [1, 2]}, fh)
    with pytest.raises(DataError, match=r"FC100_val\.pickle holds 3 images but 2 labels"):
        R.load_fc100(tmp_path)
    (tmp_path / "FC100_val.pickle").write_bytes(b"")
    with pytest.raises(DataError, match=r"FC100_val\.pickle is not a readable pickle \(EOFError"):
        R.load_fc100(tmp_path)


# ----------------------------------------------------------------------------------------------------------
# CUB and generic folders
# ----------------------------------------------------------------------------------------------------------

def write_cub(base: Path, n_classes: int = 8, per_class: int = 2, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    (base / "images").mkdir(parents=True)
    img_lines, label_lines, class_lines = [], [], []
    img_id = 1
    for c in range(1, n_classes + 1):
        name = f"{c:03d}.Bird_{c}"
        class_lines.append(f"{c} {name}")
        (base / "images" / name).mkdir()
        for i in range(per_class):
            rel = f"{name}/Bird_{c}_{i}.jpg"
            arr = rng.integers(0, 256, (24, 30, 3), dtype=np.uint8)
            img = Image.fromarray(arr)
            (img.convert("L") if c == 1 else img).save(base / "images" / rel)
            img_lines.append(f"{img_id} {rel}")
            label_lines.append(f"{img_id} {c}")
            img_id += 1
    for fname, lines in (("images.txt", img_lines), ("image_class_labels.txt", label_lines),
                         ("classes.txt", class_lines)):
        (base / fname).write_text("\n".join(lines) + "\n")


def test_cub_layout_and_split(tmp_path):
    write_cub(tmp_path / "CUB_200_2011")
    ds = R.load_cub(tmp_path, size=10)  # the parent of CUB_200_2011/ works too
    assert [ds[s].class_names for s in SPLITS] == [
        [f"{c:03d}.Bird_{c}" for c in range(1, 5)], ["005.Bird_5", "006.Bird_6"], ["007.Bird_7", "008.Bird_8"]]
    for s in SPLITS:
        assert ds[s].images.shape == (2 * ds[s].num_classes, 3, 10, 10)
        assert ds[s].class_counts().tolist() == [2] * ds[s].num_classes
    gray = ds["train"].images[0]  # class 1 was saved as a grayscale JPEG: 3 equal channels
    assert torch.equal(gray[0], gray[1]) and torch.equal(gray[0], gray[2])
    assert ds.info["class_ids"]["test"] == [7, 8]
    assert_class_disjoint(ds)
    same = R.load_cub(tmp_path / "CUB_200_2011", size=10)
    assert torch.equal(same["val"].images, ds["val"].images)


def test_cub_errors(tmp_path):
    with pytest.raises(DataError, match=r"no images\.txt .*CUB_200_2011"):
        R.load_cub(tmp_path)
    write_cub(tmp_path)
    with open(tmp_path / "classes.txt", "a") as fh:
        fh.write("9 009.Empty_bird\n")
    with pytest.raises(DataError, match=r"class 9 \(009\.Empty_bird\) has no images"):
        R.load_cub(tmp_path)
    (tmp_path / "image_class_labels.txt").unlink()
    with pytest.raises(DataError, match=r"missing .*image_class_labels\.txt"):
        R.load_cub(tmp_path)


def write_folder(root: Path, classes: dict[str, list[str]], per_class: int = 2, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for s, names in classes.items():
        for c in names:
            (root / s / c).mkdir(parents=True)
            for i in range(per_class):
                Image.fromarray(rng.integers(0, 256, (9, 9, 3), dtype=np.uint8)).save(root / s / c / f"{i}.png")


FOLDER = {"train": ["cat", "dog", "emu"], "val": ["fox"], "test": ["gnu", "hen"]}


def test_image_folder_and_cub_fallback(tmp_path):
    write_folder(tmp_path, FOLDER)
    (tmp_path / "train" / "cat" / "notes.txt").write_text("not an image")  # ignored
    ds = R.load_image_folder(tmp_path, size=9)
    for s in SPLITS:
        assert ds[s].class_names == FOLDER[s]
        assert ds[s].images.shape == (2 * len(FOLDER[s]), 3, 9, 9)
        assert torch.equal(ds[s].labels, torch.arange(len(FOLDER[s])).repeat_interleave(2))
    ref = np.asarray(Image.open(tmp_path / "test" / "hen" / "1.png").convert("RGB"))
    assert np.array_equal(ds["test"].images[-1].permute(1, 2, 0).numpy(), ref)
    cub = R.load_cub(tmp_path, size=9)
    assert cub.name == "cub" and cub["val"].class_names == ["fox"]


def test_image_folder_errors(tmp_path):
    with pytest.raises(DataError, match=r"does not exist.*<root>/train/<class>/<image>"):
        R.load_image_folder(tmp_path / "nope")
    write_folder(tmp_path, {"train": ["a"], "val": ["b"]})
    with pytest.raises(DataError, match=r"no test/ folder under"):
        R.load_image_folder(tmp_path)
    write_folder(tmp_path, {"test": ["c"]})
    (tmp_path / "val" / "empty_class").mkdir()
    with pytest.raises(DataError, match=r"class folder .*val/empty_class is empty"):
        R.load_image_folder(tmp_path)
    (tmp_path / "val" / "empty_class").rmdir()
    write_folder(tmp_path / "dup", {"train": ["a", "b"], "val": ["b"], "test": ["c"]})
    with pytest.raises(DataError, match=r"class 'b' is in both the train and the val split"):
        R.load_image_folder(tmp_path / "dup")


def test_readers_registry():
    assert set(R.READERS) == {"omniglot", "mini_imagenet", "tiered_imagenet", "cifar_fs", "fc100", "cub", "folder"}
    assert R.READERS["omniglot"] is R.load_omniglot and R.READERS["folder"] is R.load_image_folder


# ----------------------------------------------------------------------------------------------------------
# Safe unpickling: a crafted pickle is refused before it runs; the real formats still load.
# ----------------------------------------------------------------------------------------------------------

class _Crafted:
    """Unpickling this calls ``os.system`` (what a malicious data file does), which would create ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _write_crafted(path: Path, marker: Path, wrap) -> None:
    with open(path, "wb") as fh:
        pickle.dump(wrap(_Crafted(marker)), fh, protocol=2)


@pytest.mark.parametrize("fmt", ["mini_imagenet", "cifar_fs", "fc100", "tiered_labels", "tiered_images"])
def test_crafted_pickle_is_refused_and_never_runs(tmp_path, fmt):
    marker = tmp_path / "PWNED"
    if fmt == "mini_imagenet":
        write_mini_pickles(tmp_path)
        bad, load = tmp_path / "mini-imagenet-cache-val.pkl", R.load_mini_imagenet
        _write_crafted(bad, marker, lambda x: {"image_data": x, "class_dict": {}})
    elif fmt in ("cifar_fs", "fc100"):
        prefix = "CIFAR_FS" if fmt == "cifar_fs" else "FC100"
        write_cifar(tmp_path, prefix)
        bad, load = tmp_path / f"{prefix}_test.pickle", getattr(R, f"load_{fmt}")
        _write_crafted(bad, marker, lambda x: {"data": x, "labels": [0]})
    else:
        write_tiered(tmp_path)
        bad = tmp_path / ("train_labels.pkl" if fmt == "tiered_labels" else "train_images_png.pkl")
        load = R.load_tiered_imagenet
        _write_crafted(bad, marker, lambda x: [x])
    with pytest.raises(DataError) as info:
        load(tmp_path, cache=False)
    assert not marker.exists()
    msg = str(info.value)
    assert f"refused to load {bad}" in msg and "posix.system" in msg and "Replace it with the original file" in msg
    with open(bad, "rb") as fh:  # the fixture is real: plain pickle.load runs the payload
        pickle.load(fh)
    assert marker.exists()


def _py2_numpy1(obj) -> bytes:
    """A protocol-2 pickle of ``obj`` as NumPy 1 under Python 2 writes it: ``numpy.core.multiarray`` globals and
    Python-2 strings (decoded with ``encoding="latin1"``)."""
    buf = io.BytesIO()
    Py2Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue().replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5, "py2-numpy1"])
def test_real_format_pickles_load_in_every_protocol(tmp_path, protocol):
    """The formats as the published files hold them: NumPy arrays, scalars and object arrays in dicts and lists."""
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)
    labels = [np.int64(7), 7, 30, 30]  # a NumPy scalar among ints
    obj = {"data": data, "labels": labels, "names": np.array(["apple", "cattle"]), "meta": ("v", 1.5, None, b"\x00")}
    pngs = np.empty(2, dtype=object)
    pngs[:] = [np.frombuffer(png_bytes(data[i]), np.uint8) for i in range(2)]
    blob = (_py2_numpy1 if protocol == "py2-numpy1" else lambda o: pickle.dumps(o, protocol=protocol))(obj)
    blob_pngs = (_py2_numpy1 if protocol == "py2-numpy1" else lambda o: pickle.dumps(o, protocol=protocol))(pngs)
    if protocol == "py2-numpy1":
        assert b"numpy.core.multiarray" in blob and b"numpy._core" not in blob
    (tmp_path / "a.pickle").write_bytes(blob)
    (tmp_path / "b.pkl").write_bytes(blob_pngs)
    got = R.load_pickle(tmp_path / "a.pickle", "cifar_fs", "hint")
    assert np.array_equal(got["data"], data) and got["data"].dtype == np.uint8
    assert [int(x) for x in got["labels"]] == [7, 7, 30, 30]
    assert list(got["names"]) == ["apple", "cattle"] and got["meta"][1:3] == (1.5, None)
    got_pngs = R.load_pickle(tmp_path / "b.pkl", "tiered_imagenet", "hint")
    for i in range(2):
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(bytes(got_pngs[i])))), data[i])


def test_pickled_numpy_scalars_and_sets_but_no_other_callables(tmp_path):
    ok = {"s": {1, 2}, "f": frozenset({3}), "c": 1 + 2j, "b": bytearray(b"ab"), "n": np.float32(2.5)}
    for proto in (2, 5):
        (tmp_path / "ok.pkl").write_bytes(pickle.dumps(ok, protocol=proto))
        assert R.load_pickle(tmp_path / "ok.pkl", "cifar_fs", "hint") == ok
    for payload, name in ((collections.Counter("ab"), "collections.Counter"), (Path("/x"), "pathlib")):
        (tmp_path / "no.pkl").write_bytes(pickle.dumps(payload, protocol=2))
        with pytest.raises(DataError, match=rf"refused to load .*no\.pkl: it refers to {name}"):
            R.load_pickle(tmp_path / "no.pkl", "cifar_fs", "hint")


# ----------------------------------------------------------------------------------------------------------
# Relative data roots: one rule, the repository root, whatever the working directory.
# ----------------------------------------------------------------------------------------------------------

def test_relative_root_is_taken_from_the_repository_root(tmp_path, monkeypatch):
    import studylib.data.base as base
    repo = tmp_path / "repo"
    write_folder(repo / "data" / "mine", FOLDER)
    (repo / "params").mkdir()
    (repo / "notebooks" / "sub").mkdir(parents=True)
    monkeypatch.chdir(repo / "notebooks" / "sub")  # papermill --cwd notebooks, JupyterLab in a subfolder, ...
    assert base.resolve_root("data/mine") == repo / "data" / "mine"
    ds = R.load_image_folder("data/mine", size=9)
    assert ds["val"].class_names == ["fox"] and ds.info["root"] == str(repo / "data" / "mine")
    with pytest.raises(DataError, match=rf"data folder {repo / 'data' / 'nope'} does not exist \(a relative data_root is "
                                        r"taken relative to the project root"):
        R.load_image_folder("data/nope")
    with pytest.raises(DataError, match=rf"omniglot: data folder {repo / 'data' / 'nope'} does not exist"):
        R.load_omniglot("data/nope")


# ----------------------------------------------------------------------------------------------------------
# Omniglot-like folders of any name; your own folders split by class or by superclass.
# ----------------------------------------------------------------------------------------------------------

def test_omniglot_reads_any_alphabet_character_folder(tmp_path):
    write_omniglot(tmp_path, "my_strokes", BG, as_zip=False, seed=4)
    (tmp_path / "ref").mkdir()
    write_omniglot(tmp_path / "ref", "images_background", BG, as_zip=False, seed=4)
    got = R.load_omniglot(tmp_path / "my_strokes", size=28, split="alphabet")
    ref = R.load_omniglot(tmp_path / "ref", size=28, split="alphabet")  # the authors' folder name
    for s in SPLITS:
        assert got[s].class_names == ref[s].class_names and torch.equal(got[s].images, ref[s].images)
        assert got[s].superclass_names == ref[s].superclass_names
    zipped = tmp_path / "zipped"
    zipped.mkdir()
    write_omniglot(zipped, "strokes", BG, seed=4)  # a zip with any top folder, named directly
    z = R.load_omniglot(zipped / "strokes.zip", size=28, split="alphabet")
    assert torch.equal(z["test"].images, ref["test"].images)
    # A folder one level too deep says what layout was expected and what it found.
    with pytest.raises(DataError, match=r"no Omniglot images under .*; expected one of: .*any folder laid out as "
                                        r"<alphabet>/<character>/<image>\.png.*Found: my_strokes/, ref/"):
        R.load_omniglot(tmp_path, split="alphabet")


def write_flat(root: Path, layout: dict[str, int], per_class: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    """``root/<class>/<i>.png`` (class names without '/') or ``root/<super>/<class>/<i>.png``."""
    rng = np.random.default_rng(seed)
    written = {}
    for cls, n in layout.items():
        (root / cls).mkdir(parents=True)
        for i in range(per_class if n is None else n):
            arr = rng.integers(0, 256, (9, 9, 3), dtype=np.uint8)
            Image.fromarray(arr).save(root / cls / f"{i}.png")
            written[f"{cls}/{i}"] = arr
    return written


def test_folder_random_split_is_seeded_class_disjoint_and_complete(tmp_path):
    classes = {f"c{k:02d}": 2 for k in range(25)}
    written = write_flat(tmp_path, classes)
    ds = R.load_image_folder(tmp_path, size=9, split="random", seed=1)
    names = [ds[s].class_names for s in SPLITS]
    assert sorted(sum(names, [])) == sorted(classes)  # every class once
    assert_class_disjoint(ds)
    assert [len(n) for n in names] == [16, 4, 5]  # round(25 * 0.16) = 4 val, round(25 * 0.2) = 5 test
    # Reference assignment written the slow way: the classes (sorted) in the order of torch.randperm(25) with the
    # seed; the first 16 train, the next 4 val, the last 5 test.
    perm = torch.randperm(25, generator=torch.Generator().manual_seed(1)).tolist()
    want = {s: sorted(f"c{perm[j]:02d}" for j in range(lo, hi)) for s, (lo, hi) in
            zip(SPLITS, ((0, 16), (16, 20), (20, 25)))}
    assert {s: n for s, n in zip(SPLITS, names)} == want
    for s in SPLITS:  # pixels: what PIL decodes from the files
        sp = ds[s]
        for k, c in enumerate(sp.class_names):
            got = sp.images[sp.labels == k].permute(0, 2, 3, 1).numpy()
            assert np.array_equal(got, np.stack([written[f"{c}/0"], written[f"{c}/1"]]))
    other = R.load_image_folder(tmp_path, size=9, split="random", seed=2)
    assert other["test"].class_names != ds["test"].class_names


def test_folder_alphabet_split_keeps_each_superclass_in_one_split(tmp_path):
    layout = {f"Script{a}/char{c}": 2 for a, n in enumerate([3, 5, 2, 4, 3, 6, 2, 3]) for c in range(n)}
    write_flat(tmp_path, layout)
    ds = R.load_image_folder(tmp_path, size=9, split="alphabet", seed=0, mode="L")
    seen: dict[str, str] = {}
    for s in SPLITS:
        sp = ds[s]
        assert sp.images.shape[1] == 1 and sp.superclass is not None
        for k, c in enumerate(sp.class_names):
            alphabet = c.split("/")[0]
            assert sp.superclass_names[int(sp.superclass[k])] == alphabet
            assert seen.setdefault(alphabet, s) == s  # never in two splits
    assert sorted(seen) == [f"Script{a}" for a in range(8)] and set(seen.values()) == set(SPLITS)
    assert sum(ds[s].num_classes for s in SPLITS) == len(layout)
    # Grey levels: PIL's own conversion of the PNG to mode L.
    first = ds["train"].class_names[0]
    ref = np.asarray(Image.open(tmp_path / first / "0.png").convert("L"))
    sp = ds["train"]
    assert np.array_equal(sp.images[sp.labels == 0][0, 0].numpy(), ref)


def test_folder_layout_errors_name_the_rule_to_use(tmp_path):
    write_folder(tmp_path / "given", FOLDER)
    with pytest.raises(DataError, match=r"holds train/, val/ and test/ folders, the layout of split='given'; use "
                                        r"split='given'"):
        R.load_image_folder(tmp_path / "given", split="random")
    write_flat(tmp_path / "flat", {"cat": 2, "dog": 2, "emu": 2})
    with pytest.raises(DataError, match=r"no train/ folder under .*flat.*It holds 3 other folders \(cat, dog, emu\): "
                                        r"if each is a class, use split='random'"):
        R.load_image_folder(tmp_path / "flat")
    with pytest.raises(DataError, match=r"superclass folder .*cat holds images but no class folders: for "
                                        r"<root>/<class>/<image> use split='random'"):
        R.load_image_folder(tmp_path / "flat", split="alphabet")
    write_flat(tmp_path / "nested", {"A/x": 2, "A/y": 2, "B/z": 2})
    with pytest.raises(DataError, match=r"class folder .*nested/A holds folders \(x, y\), not images: for "
                                        r"<root>/<superclass>/<class>/<image> use split='alphabet'"):
        R.load_image_folder(tmp_path / "nested", split="random")
    with pytest.raises(DataError, match=r"split='alphabet' leaves no superclass for \['val'\] \(2 superclasses"):
        R.load_image_folder(tmp_path / "nested", split="alphabet")
    (tmp_path / "flat" / "gnu").mkdir()
    with pytest.raises(DataError, match=r"class folder .*flat/gnu is empty"):
        R.load_image_folder(tmp_path / "flat", split="random")
    with pytest.raises(ValueError, match=r"unknown split 'vinyals'; allowed: given, random, alphabet"):
        R.load_image_folder(tmp_path / "flat", split="vinyals")


# ------------------------------------------------------------------------- bounded loaders (issue 21)

BOMBS = r'''
import json, pickle, resource, sys, tracemalloc
import numpy as np
from studylib.data import readers as R
from studylib.data.base import DataError
try:
    from numpy._core.multiarray import _reconstruct
except ImportError:
    from numpy.core.multiarray import _reconstruct

class Prealloc:  # a 124-ish-byte file that asks NumPy for 2e8 cells before any data
    def __reduce__(self):
        return (_reconstruct, (np.ndarray, (200_000_000,), np.dtype(object)))

class Filled:  # an empty array, then BUILD with a forged state
    def __init__(self, state):
        self.state = state
    def __reduce__(self):
        return (_reconstruct, (np.ndarray, (0,), b"b"), self.state)

big = bytes(1 << 20)
cases = {
    "prealloc": Prealloc(),
    "object_build": Filled((1, (200_000_000,), np.dtype(object), False, [None])),
    "memo": [Filled((1, (1 << 20,), np.dtype(np.uint8), False, big)) for _ in range(900)],  # ~1 MB file, 0.9 GB
    "bytes_call": None,  # written by hand below
}
vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (400 << 20), resource.RLIM_INFINITY))  # 400 MB more at most
out = {}
for name, obj in cases.items():
    path = f"{sys.argv[1]}/{name}.pkl"
    blob = pickle.dumps(obj, protocol=2)
    if name == "bytes_call":
        blob = b"\x80\x02cbuiltins\nbytearray\n\x8a\x05\x00\xe4\x0bT\x02\x85R."  # bytearray(10**10)
    open(path, "wb").write(blob)
    tracemalloc.start()
    try:
        R.load_pickle(__import__("pathlib").Path(path), "mini_imagenet", "hint")
        out[name] = ["loaded", len(blob), 0]
    except DataError as e:
        out[name] = [str(e), len(blob), tracemalloc.get_traced_memory()[1]]
    except MemoryError as e:
        out[name] = ["MemoryError", len(blob), 0]
    tracemalloc.stop()
print(json.dumps(out))
'''


def test_crafted_pickles_are_refused_before_allocating(tmp_path):
    """Before: a small file made the loader allocate 1.6 GB (2e8 object cells) or 0.9 GB (one 1 MB buffer
    built into 900 arrays through memo references). Run under an address-space limit of +400 MB."""
    import json
    import subprocess
    import sys
    script = tmp_path / "bombs.py"
    script.write_text(BOMBS)
    run = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["prealloc"][1] < 200 and out["memo"][1] < 1.2e6
    expect = {"prealloc": r"preallocated with shape \(200000000,\)",
              "object_build": r"object array of 200,000,000 cells filled from 1 stored objects",
              "memo": r"declares 1,048,576 bytes of array data, more than the file's [\d,]+ bytes can hold",
              "bytes_call": r"a call of bytearray\(10000000000\)"}
    for name, pattern in expect.items():
        message, _, peak = out[name]
        assert re.search(rf"mini_imagenet: the mini_imagenet reader refused {tmp_path}/{name}.pkl: it holds "
                         rf".*{pattern}", message), (name, message)
        assert peak < 8 * 2**20, (name, peak)  # refused before allocating (tracemalloc peak)


def test_unpickler_allow_list_is_pinned(tmp_path):
    """Adding a global (say builtins.getattr) to the allow-list must be a visible decision: this list changes."""
    expected = {("numpy", "ndarray"), ("numpy", "dtype"), ("collections", "OrderedDict"), ("_codecs", "encode")}
    expected |= {(f"{m}.multiarray", f) for m in ("numpy.core", "numpy._core") for f in ("_reconstruct", "scalar")}
    expected |= {(f"{m}.numeric", "_frombuffer") for m in ("numpy.core", "numpy._core")}
    expected |= {(m, t) for m in ("builtins", "__builtin__") for t in ("set", "frozenset", "bytearray", "complex",
                                                                      "int", "float", "bool", "str", "bytes", "dict",
                                                                      "list", "tuple")}
    assert set(R._PICKLE_GLOBALS) == expected
    # getattr would reach any attribute (e.g. os.system through a module object): refused, naming it
    blob = b"\x80\x02cbuiltins\ngetattr\ncbuiltins\nstr\nX\x04\x00\x00\x00joinq\x00\x86R."
    (tmp_path / "g.pkl").write_bytes(blob)
    with pytest.raises(DataError, match=r"refused to load .*g.pkl: it refers to builtins.getattr"):
        R.load_pickle(tmp_path / "g.pkl", "cifar_fs", "hint")


def test_tiered_labels_holding_none_name_the_file_and_reader(tmp_path):
    """Before: a bare TypeError naming neither."""
    write_tiered(tmp_path)
    with open(tmp_path / "train_labels.pkl", "wb") as fh:
        pickle.dump({"label_specific": None, "label_general": None}, fh)
    with pytest.raises(DataError, match=rf"tiered_imagenet reader found 'label_specific' in "
                                        rf"{tmp_path}/train_labels.pkl to be NoneType, not a list of integer"):
        R.load_tiered_imagenet(tmp_path, size=16, cache=False)
    with open(tmp_path / "train_labels.pkl", "wb") as fh:
        pickle.dump({"label_specific": np.array([0.5, 1.0]), "label_general": [0, 0]}, fh)
    with pytest.raises(DataError, match=r"'label_specific' .* to be an array of float64"):
        R.load_tiered_imagenet(tmp_path, size=16, cache=False)


def test_sixteen_bit_pngs_are_scaled_not_clipped(tmp_path):
    """Before: PIL's convert clipped 16-bit grey at 255 (40000/65535 decoded as white)."""
    values = np.array([[0, 257, 40000, 65535]], dtype=np.uint16).repeat(4, 0)
    Image.fromarray(values).save(tmp_path / "g16.png")
    with Image.open(tmp_path / "g16.png") as im:
        assert im.mode.startswith("I")  # PIL reads it as 16-bit
    expected = np.round(values.astype(np.float64) * 255 / 65535).astype(np.uint8)  # [0, 1, 156, 255]
    grey = R.decode_images([tmp_path / "g16.png"], size=4, mode="L")
    assert np.array_equal(grey[0, 0].numpy(), expected)
    rgb = R.decode_images([tmp_path / "g16.png"], size=4, mode="RGB")
    assert all(np.array_equal(rgb[0, c].numpy(), expected) for c in range(3))


@pytest.mark.parametrize("kind", ["CMYK", "P+alpha", "LA"])
def test_cmyk_palette_alpha_and_la_decode_to_the_requested_mode(tmp_path, kind):
    """Guard: colour channels as PIL converts them (alpha dropped), in 3 or 1 channels as asked."""
    if kind == "CMYK":
        img, fmt = Image.new("CMYK", (4, 4), (0, 255, 255, 0)), "JPEG"  # red
    elif kind == "LA":
        img, fmt = Image.fromarray(np.dstack([np.full((4, 4), 100, np.uint8), np.full((4, 4), 30, np.uint8)]),
                                   "LA"), "PNG"
    else:
        img = Image.new("P", (4, 4), 1)
        img.putpalette([0, 0, 0, 200, 10, 10] + [0] * 762)
        img.info["transparency"] = 0
        fmt = "PNG"
    path = tmp_path / f"x.{fmt.lower()}"
    img.save(path, fmt)
    with Image.open(path) as im:
        want_rgb, want_l = np.asarray(im.convert("RGB")), np.asarray(im.convert("L"))
    rgb = R.decode_images([path], size=4, mode="RGB")
    grey = R.decode_images([path], size=4, mode="L")
    assert rgb.shape == (1, 3, 4, 4) and grey.shape == (1, 1, 4, 4)
    assert np.array_equal(rgb[0].permute(1, 2, 0).numpy(), want_rgb)
    assert np.array_equal(grey[0, 0].numpy(), want_l)


def test_omniglot_zip_with_a_stray_parent_member_skips_it_and_reads_the_rest(omni_root):
    """Before: one '../' member made the zip have two top folders, so the whole archive was ignored."""
    root, _ = omni_root
    clean = R.load_omniglot(root, split="background-evaluation", cache=False)
    with zipfile.ZipFile(root / "images_background.zip", "a") as zf:
        zf.writestr("../evil.png", b"x")
        zf.writestr("images_background/../../outside.png", b"x")
    with pytest.warns(UserWarning, match=r"skipping the member '\.\./evil\.png' of .*images_background.zip: it "
                                         r"points outside"):
        got = R.load_omniglot(root, split="background-evaluation", cache=False)
    for s in SPLITS:
        assert got[s].class_names == clean[s].class_names and torch.equal(got[s].images, clean[s].images)


def test_loaded_arrays_are_plain_numpy_arrays(tmp_path):
    """The guard's array subclass never leaks out of load_pickle, nested in containers or object arrays."""
    pngs = np.empty(2, dtype=object)
    pngs[:] = [np.arange(3, dtype=np.uint8), np.arange(4, dtype=np.uint8)]
    (tmp_path / "p.pkl").write_bytes(pickle.dumps({"a": [pngs, (np.zeros(2),)]}, protocol=2))
    got = R.load_pickle(tmp_path / "p.pkl", "tiered_imagenet", "hint")
    arrays = [got["a"][0], got["a"][1][0], *got["a"][0]]
    assert all(type(a) is np.ndarray for a in arrays)
    assert np.array_equal(got["a"][0][1], np.arange(4))
