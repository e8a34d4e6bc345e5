"""A damaged glyph cache (truncated or empty ``.npz``) is regenerated with a warning, never fatal."""

from __future__ import annotations

import numpy as np
import pytest

from studylib.data.glyphs import _load_or_generate


@pytest.mark.parametrize("damage", ["truncate", "empty", "flip"])
def test_damaged_glyph_cache_is_regenerated(tmp_path, damage):
    data, hit, path = _load_or_generate(16, False, 0, 4, 5, tmp_path)
    assert not hit
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])  # was zipfile.BadZipFile on every later load
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        flipped = bytearray(raw)
        flipped[len(raw) // 3] ^= 0xFF  # inside the stored image array: the zip's CRC-32 catches it
        path.write_bytes(bytes(flipped))
    with pytest.warns(UserWarning, match=r"regenerating the damaged glyph cache .*glyphs-16px"):
        again, hit, _ = _load_or_generate(16, False, 0, 4, 5, tmp_path)
    assert not hit
    for k in ("images", "codes", "names"):
        assert np.array_equal(again[k], data[k])
    assert _load_or_generate(16, False, 0, 4, 5, tmp_path)[1]  # the regenerated file is a cache hit
