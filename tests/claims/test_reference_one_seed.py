"""A run with one training seed: the reference cell says that one seed gives no interval and compares nothing
(issue 29: `./study run 00 -y "seeds: [0]"` failed in this cell after all its training)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from studylib.claims import reference as R
from studylib.config import param
from studylib.evaluation.stats import over_seeds


@dataclass
class P:
    scale: str = param("smoke")
    seeds: list = param([0, 1, 2])


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "params" / "99_demo").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_one_seed_is_reported_and_nothing_compared(project):
    """Before: ValueError 'needs at least 2 training seeds (got 1)' from the notebook's reference cell."""
    R.check("99_demo", P(), {"acc": over_seeds([0.60, 0.62, 0.64]), "count": 120}, update=True)
    one = R.check("99_demo", P(seeds=[0]), {"acc": over_seeds([0.9], [0.01]), "count": 7})
    assert one.status == "one seed" and one.comparisons == [] and one.frame().empty
    assert str(one) == ("reference check (smoke): 1 training seed gives no interval over seeds, so nothing is "
                        "compared with params/99_demo/smoke.reference.json (train 2 or more seeds to check the "
                        "trained numbers)")


def test_one_seed_without_a_reference_file_is_reported_too(project):
    assert R.check("99_demo", P(seeds=[0]), {"acc": over_seeds([0.9], [0.01])}).status == "one seed"


def test_a_reference_is_never_written_from_one_seed(project):
    with pytest.raises(ValueError, match="at least 2 training seeds"):
        R.check("99_demo", P(seeds=[0]), {"acc": over_seeds([0.9], [0.01])}, update=True)
    assert not (project / "params" / "99_demo" / "smoke.reference.json").exists()
