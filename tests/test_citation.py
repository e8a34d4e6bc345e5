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


SEEDS = ROOT.parent / "shared" / "seeds"  # the five papers, beside the checkout as CI lays it out


def test_citation_names_the_project_and_references_the_five_papers():
    """Authors: the project (an entity), no placeholder; references: the five papers the study reproduces, each
    a well-formed CFF reference; repository-code only when it is this checkout's real remote (there is none)."""
    import subprocess
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["authors"] == [{"name": "The Few-shot Embedding Learning Study project"}]
    remote = subprocess.run(["git", "-C", str(ROOT), "remote", "get-url", "origin"], capture_output=True, text=True)
    if "repository-code" in cff:
        assert remote.returncode == 0 and cff["repository-code"] == remote.stdout.strip()
    refs = cff["references"]
    titles = [r["title"] for r in refs]
    assert titles == ["On Episodes, Prototypical Networks, and Few-Shot Learning",
                      "BECLR: Batch Enhanced Contrastive Few-Shot Learning", "Stochastic Prototype Embeddings",
                      "Set2Model Networks: Learning Discriminatively To Learn Generative Models",
                      "Learning a Few-shot Embedding Model with Contrastive Learning"]
    for r in refs:
        assert r["type"] in ("conference-paper", "article") and isinstance(r["year"], int), r["title"]
        assert r["authors"] and all(a.get("family-names") and a.get("given-names") for a in r["authors"])
        assert r.get("journal") or r.get("conference", {}).get("name") or r.get("collection-title")
    if not SEEDS.is_dir():
        return
    seeds = sorted(SEEDS.glob("00[0-4]_*.txt"))
    assert len(seeds) == 5
    for ref, seed in zip(refs, seeds):  # what each seed itself states: its title, and its authors where given
        text = seed.read_text(encoding="utf-8")
        key = "BECLR" if ref["title"].startswith("BECLR") else ref["title"].split(":")[0][:30]
        assert key.lower() in text.lower().replace("\n", " "), (seed.name, key)
        if seed.name[:3] in ("000", "002", "003"):
            for a in ref["authors"]:
                assert a["family-names"] in text, (seed.name, a)
    assert "AAAI2021" in SEEDS.joinpath(seeds[4].name).read_text() and refs[4]["year"] == 2021
