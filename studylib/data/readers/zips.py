"""Zips of images read safely (issue 40): opened with a one-line refusal of what is not a readable zip (an empty
file, random bytes, a directory too large to list), listed with duplicate member names refused, and read member by
member, each member checked first against what its directory entry declares (encryption, compression method,
unpacked size: :data:`~studylib.data.readers.common.MAX_IMAGE_BYTES`), so a password-protected, deflate64, damaged
or gigabyte-inflating member costs one line naming the zip, the member and the fix, never a bare ``RuntimeError``,
``NotImplementedError``, ``LZMAError`` or ``MemoryError``."""

from __future__ import annotations

import bz2
import collections
import lzma
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Iterator, Sequence

from studylib.data.base import DataError
from studylib.data.readers.common import MAX_IMAGE_BYTES, MAX_ZIP_DIRECTORY_BYTES, ZIP_READ_BYTES

REZIP = "re-zip the folder with deflate (zip -r NAME.zip FOLDER, or Python's zipfile with ZIP_DEFLATED)"
# The methods Python's zipfile reads (bzip2 and lzma when Python was built with them).
READABLE_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate", zipfile.ZIP_BZIP2: "bzip2",
                    zipfile.ZIP_LZMA: "lzma"}
# Names of the others (APPNOTE.TXT 4.4.5), for the message: Windows' Explorer writes deflate64 for large files.
OTHER_METHODS = {1: "shrink", 2: "reduce", 3: "reduce", 4: "reduce", 5: "reduce", 6: "implode", 9: "deflate64",
                 10: "PKWARE DCL implode", 18: "IBM TERSE", 19: "IBM LZ77", 20: "zstandard", 93: "zstandard",
                 94: "MP3", 95: "xz", 96: "JPEG", 97: "WavPack", 98: "PPMd", 99: "AES encryption"}
# What reading a damaged member raises: CRC and header mismatches, broken deflate, bzip2 or LZMA data, data cut short.
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, OSError, RuntimeError,
                NotImplementedError, ValueError)


def open_zip(path: Path, dataset: str) -> zipfile.ZipFile:
    """``path`` opened as a zip, or a DataError naming it and the fix: an empty file, bytes that are no zip, or a
    central directory larger than :data:`~studylib.data.readers.common.MAX_ZIP_DIRECTORY_BYTES` (checked from the
    end record, before :mod:`zipfile` lists a member)."""
    try:
        nbytes = path.stat().st_size
        if nbytes == 0:
            raise DataError(f"{dataset}: {path} is empty (0 bytes), not a zip; download it again")
        with open(path, "rb") as fh:
            end = zipfile._EndRecData(fh)  # the end record zipfile itself reads first (ZIP64 included)
        if end is not None and end[zipfile._ECD_SIZE] > MAX_ZIP_DIRECTORY_BYTES:
            raise DataError(f"{dataset}: {path} declares a list of members of {end[zipfile._ECD_SIZE]:,} bytes, more "
                            f"than the {MAX_ZIP_DIRECTORY_BYTES:,} of any data set's zip "
                            f"(studylib.data.readers.common.MAX_ZIP_DIRECTORY_BYTES): it is damaged or not a zip of "
                            f"a data set; download it again, or unzip it and point data_root at the folder")
        return zipfile.ZipFile(path)
    except DataError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, NotImplementedError,
            struct.error) as e:  # what zipfile raises on a damaged directory (ValueError: UnicodeDecodeError too)
        raise DataError(f"{dataset}: {path} is not a readable zip ({e}); download it again") from e


def member_problem(info: zipfile.ZipInfo) -> str | None:
    """Why the member ``info`` cannot be read, from its directory entry alone, with the fix; or None."""
    if info.flag_bits & 0x1:
        return ("is encrypted (password-protected); unzip the archive with its password and point data_root at the "
                "unzipped folder, or re-zip that folder without a password (zip -r NAME.zip FOLDER)")
    if info.compress_type not in READABLE_METHODS:
        method = OTHER_METHODS.get(info.compress_type, "an unknown method")
        return (f"is compressed with {method} (zip method {info.compress_type}), which Python's zipfile cannot "
                f"read; {REZIP}")
    if max(info.file_size, info.compress_size) > MAX_IMAGE_BYTES:
        return (f"declares {max(info.file_size, info.compress_size):,} bytes unpacked, more than the {MAX_IMAGE_BYTES:,} an image may have "
                f"(studylib.data.readers.common.MAX_IMAGE_BYTES): a zip bomb or a damaged zip; download it again, "
                f"or {REZIP} holding only the images")
    return None


def check_member(path: Path, info: zipfile.ZipInfo, dataset: str) -> None:
    """A DataError naming the zip, the member and the fix when :func:`member_problem` refuses ``info``."""
    why = member_problem(info)
    if why:
        raise DataError(f"{dataset}: the member {info.filename} of {path} {why}")


def refuse_duplicates(path: Path, infos: Sequence[zipfile.ZipInfo], dataset: str) -> None:
    """A DataError when two members of ``infos`` have one name: a zip appended to, whose copies may differ, of
    which only the last can be read by name (it was read twice, as two images, without a word)."""
    counts = collections.Counter(i.filename for i in infos)
    twice = sorted(n for n, k in counts.items() if k > 1)
    if twice:
        shown = ", ".join(twice[:3]) + (f", ... ({len(twice)} names)" if len(twice) > 3 else "")
        raise DataError(f"{dataset}: {path} holds {'a member' if len(twice) == 1 else 'members'} under the same name "
                        f"twice ({shown}): a zip written to more than once, whose copies may differ; {REZIP}, so "
                        f"that each image is stored once")


def _unpack_bounded(path: Path, info: zipfile.ZipInfo) -> bytes:
    """A bzip2 or LZMA member unpacked here, no further than one byte past its declared size, then checked against
    its size and CRC: for these methods zipfile unpacks whatever compressed data it reads at once and truncates
    afterwards (bzip2 packs 100 MB of zeros into 113 bytes), so a member declaring a small size over a bomb would
    inflate whole first. The compressed data are found from the local header (APPNOTE 4.3.7); the LZMA properties
    are decoded as zipfile decodes them."""
    with open(path, "rb") as fh:
        fh.seek(info.header_offset)
        head = fh.read(30)
        if len(head) < 30 or head[:4] != b"PK\x03\x04":
            raise zipfile.BadZipFile("bad magic number for its local header")
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        fh.seek(info.header_offset + 30 + name_len + extra_len)
        raw = fh.read(info.compress_size)
    if len(raw) < info.compress_size:
        raise EOFError(f"its data end after {len(raw):,} of {info.compress_size:,} bytes")
    limit = info.file_size + 1
    if info.compress_type == zipfile.ZIP_BZIP2:
        out = bz2.BZ2Decompressor().decompress(raw, limit)
    else:
        if len(raw) < 4 or len(raw) < 4 + struct.unpack("<H", raw[2:4])[0]:
            raise EOFError("its LZMA header is cut short")
        psize = struct.unpack("<H", raw[2:4])[0]
        filters = [lzma._decode_filter_properties(lzma.FILTER_LZMA1, raw[4:4 + psize])]  # as zipfile does
        out = lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=filters).decompress(raw[4 + psize:], limit)
    if len(out) != info.file_size:
        raise zipfile.BadZipFile(f"it unpacks to {'more than' if len(out) > info.file_size else 'only'} "
                                 f"{min(len(out), info.file_size):,} bytes, not the {info.file_size:,} it declares")
    if zlib.crc32(out) != info.CRC:
        raise zipfile.BadZipFile(f"Bad CRC-32 for file {info.filename!r}")
    return out


def read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path, dataset: str) -> bytes:
    """The bytes of one member, after :func:`check_member`, unpacked no further than its declared size (stored and
    deflate by zipfile, which stops there; bzip2 and LZMA by :func:`_unpack_bounded`); a read that fails (a
    damaged member: its CRC, its deflate, bzip2 or LZMA data) is a DataError naming the zip, the member and the
    fix."""
    check_member(path, info, dataset)
    try:
        if info.compress_type in (zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
            return _unpack_bounded(path, info)
        with zf.open(info) as fh:
            return fh.read(info.file_size + 1)  # zipfile inflates no more than asked, and stops at the size
    except _READ_ERRORS as e:
        raise DataError(f"{dataset}: cannot read the member {info.filename} of {path} ({type(e).__name__}: {e}): "
                        f"the zip is damaged; download it again, or {REZIP}") from e


def read_members(zf: zipfile.ZipFile, infos: Sequence[zipfile.ZipInfo], path: Path,
                 dataset: str) -> Iterator[tuple[int, list[bytes]]]:
    """``(start, [bytes of infos[start], ...])`` in order, member by member (:func:`read_member`), in groups of at
    most :data:`~studylib.data.readers.common.ZIP_READ_BYTES` declared bytes (one member at least), so a caller
    that decodes each group holds one group of encoded images at a time."""
    start, group, held = 0, [], 0
    for k, info in enumerate(infos):
        if group and held + info.file_size > ZIP_READ_BYTES:
            yield start, group
            start, group, held = k, [], 0
        group.append(read_member(zf, info, path, dataset))
        held += info.file_size
    if group:
        yield start, group
