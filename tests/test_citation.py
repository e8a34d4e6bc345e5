"""The repository's LICENSE and CITATION.cff (issue 20): CITATION.cff parses as YAML and holds what the Citation
File Format 1.2.0 requires (cff-version, message, title, authors) with well-formed optional keys; its version is
the package's and its license is the LICENSE file's."""

from __future__ import annotations

import datetime as dt
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_citation_cff_has_the_required_keys_of_cff_1_2_0():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert isinstance(cff, dict)
    assert {"cff-version", "message", "title", "authors"} <= set(cff)  # required by the CFF 1.2.0 schema
    assert cff["cff-version"] == "1.2.0"
    assert isinstance(cff["message"], str) and cff["message"].strip()
    assert isinstance(cff["title"], str) and cff["title"].strip()
    assert isinstance(cff["authors"], list) and cff["authors"]
    for a in cff["authors"]:  # an entity has a name, a person family-names
        assert isinstance(a, dict) and (a.get("name") or a.get("family-names")), a
    text = (ROOT / "CITATION.cff").read_text()
    assert not re.search(r"TODO|FIXME|placeholder|your name|<[^>]+>", text, re.I), "placeholder left in the file"
    # optional keys, as the schema types them
    date = cff["date-released"]
    assert isinstance(date, (str, dt.date)) and dt.date.fromisoformat(str(date)) == dt.date(2026, 11, 26)
    assert cff.get("type", "software") in ("software", "dataset")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert str(cff["version"]) == pyproject["project"]["version"]


def test_the_license_is_mit_and_matches_the_citation():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    license_text = (ROOT / "LICENSE").read_text()
    assert cff["license"] == "MIT"  # an SPDX identifier
    assert license_text.startswith("MIT License") and "Copyright (c) 2026" in license_text
    assert "Permission is hereby granted, free of charge" in license_text
