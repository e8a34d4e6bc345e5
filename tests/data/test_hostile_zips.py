"""Hostile or damaged zips given as Omniglot's data_root (issue 40, part A): each is answered by the reader and by
``./study check`` (before: "ok", then a traceback or a bare MemoryError in the run) with one line naming the zip, the
member and the fix, before anything is decoded. Each zip is built here in milliseconds; the bomb is declared in the
zip's directory, never inflated."""

from __future__ import annotations

import io
import os
import warnings
import zipfile

import pytest
import torch

from conftest import OMNIGLOT_ZIP, needs_omniglot  # tests/conftest.py
from hostile_files import bounded, glyph_png, omniglot_members, omniglot_zip, patch_member, zeros_deflate  # tests/hostile_files.py
from studylib import preflight
from studylib.data.base import DataError
from studylib.data.readers import load_omniglot, zips
from studylib.data.readers.common import MAX_IMAGE_BYTES
from studylib.data.readers.omniglot import check_omniglot

ONE = "images_background/Alpha0/character01/01.png"  # the member the damaged zips damage
SPLITS = ("train", "val", "test")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path_factory.mktemp("cache")))


def _stored(**kw) -> bytes:
    return omniglot_zip(io.BytesIO(), zipfile.ZIP_STORED, **kw).getvalue()


def _lzma_damaged() -> bytes:
    data = bytearray(omniglot_zip(io.BytesIO(), zipfile.ZIP_LZMA).getvalue())
    info = zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo(ONE)
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + 9  # past LZMA's 9-byte properties
    for k in range(start, start + 16):
        data[k] ^= 0x5A
    return bytes(data)


def _zip_of_zips() -> bytes:
    inner = omniglot_zip(io.BytesIO()).getvalue()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:  # the layout of github.com/brendenlake/omniglot's download
        zf.writestr("omniglot-master/README.md", "Omniglot data set")
        zf.writestr("omniglot-master/python/images_background.zip", inner)
        zf.writestr("omniglot-master/python/images_evaluation.zip", inner)
        zf.writestr("omniglot-master/python/one-shot-classification/demo_classification.py", "pass")
        zf.writestr("omniglot-master/matlab/demo.m", "% demo")
    return buf.getvalue()


def _bomb() -> bytes:
    """A member that inflates to 3 GB of zeros (2,861 MiB in a 3 MB deflate stream, built without inflating it) and
    declares so: stored, then marked deflated with its true unpacked size (its CRC, never reached, is the stored
    bytes')."""
    raw = zeros_deflate(2861)[2:-4]  # zlib's header and Adler-32 off: the raw deflate a zip holds
    data = omniglot_zip(io.BytesIO(), zipfile.ZIP_STORED, extra=(("images_background/Alpha0/character01/99.png", raw),))
    return patch_member(data.getvalue(), "images_background/Alpha0/character01/99.png", method=8,
                        file_size=2861 << 20)


def _duplicate() -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile's "Duplicate name" warning
        omniglot_zip(buf, extra=((ONE, glyph_png(999)),))
    return buf.getvalue()


def _empty_zip() -> bytes:
    buf = io.BytesIO()
    zipfile.ZipFile(buf, "w").close()
    return buf.getvalue()


# name -> (zip bytes, the message, matched by both the reader and ./study check)
CASES = {
    "empty file": (lambda: b"", r"zip\.zip is empty \(0 bytes\), not a zip; download it again"),
    "random bytes": (lambda: os.urandom(4096), r"zip\.zip is not a readable zip \(File is not a zip file\); download"),
    "no members": (_empty_zip, r"no Omniglot images under .*zip\.zip; expected one of: .*Found: the zip holds no members"),
    "a name twice": (_duplicate, rf"zip\.zip holds a member under the same name twice \({ONE}\): a zip written to "
                                 r"more than once, whose copies may differ; re-zip the folder with deflate"),
    "encrypted": (lambda: patch_member(_stored(), ONE, flags=0x1),
                  rf"the member {ONE} of .*zip\.zip is encrypted \(password-protected\); unzip the archive with its "
                  r"password and point data_root at the unzipped folder, or re-zip that folder without a password"),
    "deflate64": (lambda: patch_member(_stored(), ONE, method=9),
                  rf"the member {ONE} of .*zip\.zip is compressed with deflate64 \(zip method 9\), which Python's "
                  r"zipfile cannot read; re-zip the folder with deflate \(zip -r NAME\.zip FOLDER"),
    "damaged lzma": (_lzma_damaged, rf"cannot read the member {ONE} of .*zip\.zip \(LZMAError: Corrupt input data\): "
                                    r"the zip is damaged; download it again, or re-zip the folder with deflate"),
    "zip of zips": (_zip_of_zips, r"zip\.zip is a zip of zips \(omniglot-master/python/images_background\.zip, "
                                  r"omniglot-master/python/images_evaluation\.zip\), such as GitHub's download of Lake "
                                  r"et al\.'s repository, omniglot-master\.zip: unzip it \(unzip .*zip\.zip -d .*\) and "
                                  r"point data_root at the folder that holds those zips, .*/omniglot-master/python$"),
    "3 GB member": (_bomb, rf"the member images_background/Alpha0/character01/99\.png of .*zip\.zip declares "
                           rf"{2861 << 20:,} bytes unpacked, more than the "
                           rf"{MAX_IMAGE_BYTES:,} an image may have .*: a zip bomb or a damaged zip; download it again"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_hostile_zip_is_one_line_from_the_reader_and_the_check(case, tmp_path):
    """Before (578d2a7): ./study check said "ok" for every one; the reader then read the duplicate twice (37 images
    of 36), the 3 GB member whole (MemoryError), raised RuntimeError (encrypted), NotImplementedError (deflate64),
    LZMAError naming no file, or called GitHub's zip of zips an empty alphabet folder."""
    make, want = CASES[case]
    path = tmp_path / "zip.zip"
    path.write_bytes(make())
    with bounded(1 << 30) as mem:  # the 3 GB member is refused from its declared size: nothing is inflated
        with pytest.raises(DataError, match=want) as err:
            load_omniglot(path, size=8, split="random", cache=False)
        report = preflight.check("10_spe_omniglot", "evidence", {"data_root": str(path)})
    assert "\n" not in str(err.value) and mem["peak"] < 256 << 20, mem  # the 3 GB member is never inflated
    assert not report.ok and [p.param for p in report.problems] == ["data_root"], report.text()
    assert str(err.value) in report.problems[0].text


def test_a_folder_holding_the_zip_of_zips_and_its_unzipped_copy_point_at_python(tmp_path):
    (tmp_path / "dl").mkdir()
    (tmp_path / "dl" / "omniglot-master.zip").write_bytes(_zip_of_zips())
    with pytest.raises(DataError, match=r"omniglot-master\.zip is a zip of zips .* point data_root at the folder that "
                                        r"holds those zips, .*/dl/omniglot-master/python$"):
        load_omniglot(tmp_path / "dl", cache=False)
    with zipfile.ZipFile(tmp_path / "dl" / "omniglot-master.zip") as zf:
        zf.extractall(tmp_path / "dl")
    (tmp_path / "dl" / "omniglot-master.zip").unlink()
    with pytest.raises(DataError, match=r"no Omniglot images under .*/omniglot-master; .*Found: README\.md, matlab/, "
                                        r"python/; further down: python/images_background\.zip, "
                                        r"python/images_evaluation\.zip: point data_root at .*/omniglot-master/python$"):
        load_omniglot(tmp_path / "dl" / "omniglot-master", cache=False)
    ds = load_omniglot(tmp_path / "dl" / "omniglot-master" / "python", size=8, split="random", cache=False)
    assert sum(len(ds[s]) for s in SPLITS) == 36  # the fix works (background and evaluation hold one alphabet set)


def test_members_are_read_in_groups_with_the_same_pixels(tmp_path, monkeypatch):
    """Reading member by member, a bounded group at a time, decodes exactly what one pass did."""
    omniglot_zip(tmp_path / "images_background.zip")
    whole = load_omniglot(tmp_path, size=8, split="random", cache=False)
    monkeypatch.setattr(zips, "ZIP_READ_BYTES", 300)  # a few members per group
    grouped = load_omniglot(tmp_path, size=8, split="random", cache=False)
    for s in SPLITS:
        assert grouped[s].class_names == whole[s].class_names and torch.equal(grouped[s].images, whole[s].images)


def test_a_zip_listing_more_members_than_any_data_set_is_refused_before_it_is_listed(tmp_path, monkeypatch):
    omniglot_zip(tmp_path / "images_background.zip")
    monkeypatch.setattr(zips, "MAX_ZIP_DIRECTORY_BYTES", 1024)  # the bound, shrunk below this zip's 36 members
    with pytest.raises(DataError, match=r"images_background\.zip declares a list of members of [\d,]+ bytes, more "
                                        r"than the 1,024 of any data set's zip"):
        load_omniglot(tmp_path / "images_background.zip", cache=False)


def test_the_check_reads_every_member_and_names_a_damaged_one(tmp_path):
    """A member whose bytes were changed (its CRC no longer matches) is named by ./study check, not after training
    has started; a clean zip is described in one note."""
    data = bytearray(_stored())
    info = zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo(ONE)
    data[info.header_offset + 30 + len(info.filename) + 40] ^= 0xFF  # a byte of the PNG's image data
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "images_background.zip").write_bytes(bytes(data))
    report = preflight.check("10_spe_omniglot", "evidence", {"data_root": str(tmp_path / "bad")})
    assert [p.param for p in report.problems] == ["data_root"], report.text()
    assert f"cannot read the member {ONE} of" in report.problems[0].text and "Bad CRC-32" in report.problems[0].text
    (tmp_path / "good").mkdir()
    omniglot_zip(tmp_path / "good" / "images_background.zip")
    assert check_omniglot(tmp_path / "good") == (f"omniglot {tmp_path / 'good'} (images_background.zip): 3 alphabets, "
                                                 f"12 characters, 36 images (each read and checked, none decoded)")


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_every_method_zipfile_reads_gives_the_pixels_of_deflate(method, tmp_path):
    """bzip2 and LZMA members are unpacked by the reader itself (bounded by their declared size): the same bytes."""
    (tmp_path / "deflate").mkdir()
    (tmp_path / "other").mkdir()
    omniglot_zip(tmp_path / "deflate" / "images_background.zip")
    omniglot_zip(tmp_path / "other" / "images_background.zip", method)
    a = load_omniglot(tmp_path / "deflate", size=12, split="random", cache=False)
    b = load_omniglot(tmp_path / "other", size=12, split="random", cache=False)
    for s in SPLITS:
        assert a[s].class_names == b[s].class_names and torch.equal(a[s].images, b[s].images)


def test_a_bzip2_member_lying_about_its_size_is_unpacked_no_further(tmp_path):
    """A member declaring 413 bytes over 32 MiB of bzip2'd zeros (58 bytes): zipfile would unpack all 32 MiB before
    cutting them to the declared size; the reader stops one byte past it and names the member."""
    name = "images_background/Alpha0/character01/99.png"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_BZIP2) as zf:
        for n, d in omniglot_members():
            zf.writestr(n, d)
        zf.writestr(name, bytes(32 << 20))
    (tmp_path / "zip.zip").write_bytes(patch_member(buf.getvalue(), name, file_size=413))
    with bounded(1 << 30) as mem:
        with pytest.raises(DataError, match=rf"cannot read the member {name} of .*zip\.zip \(BadZipFile: it unpacks "
                                            r"to more than 413 bytes, not the 413 it declares\): the zip is damaged"):
            load_omniglot(tmp_path / "zip.zip", size=8, split="random", cache=False)
    assert mem["peak"] < 8 << 20, mem


@pytest.mark.parametrize("notebook", ["11_set2model", "12_set2model_omniglot"])
def test_every_omniglot_notebook_checks_its_zip(notebook, tmp_path):
    (tmp_path / "zip.zip").write_bytes(os.urandom(512))
    report = preflight.check(notebook, "evidence", {"data_root": str(tmp_path / "zip.zip")})
    assert [p.text for p in report.problems] == [f"omniglot: {tmp_path / 'zip.zip'} is not a readable zip (File is "
                                                 f"not a zip file); download it again"]


@needs_omniglot
def test_the_real_subset_passes_the_check_with_every_image_read():
    report = preflight.check("10_spe_omniglot", "evidence", {"data_root": str(OMNIGLOT_ZIP)})
    assert report.ok, report.text()
    # the check names the file by its resolved path (no '..' in a note), so compare with that
    assert f"omniglot {OMNIGLOT_ZIP.resolve()}: 5 alphabets, 136 characters, 2720 images (each read and checked, none " \
           f"decoded)" in report.notes
