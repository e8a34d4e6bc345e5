"""Claims tables and reference checks: machine-independent listing, verdicts, persistence, tolerances."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from studylib.claims import store as C
from studylib.claims import table as T
from studylib.claims import reference as R
from studylib.config import param
from studylib.evaluation.stats import over_seeds
from studylib.evaluation.verdicts import NOT_RUN, NOT_TESTED, REPRODUCED, Claim, Expectation


def _table(scale="smoke"):
    return T.ClaimsTable("00_quickstart", scale, [
        Claim("a-beats-b", "A beats B", "Table 2", "62.6 vs 60.4", "A - B", Expectation("greater")),
        Claim("level", "A's accuracy", "Table 2", "62.55", "ours - paper", Expectation("within", margin=0.01),
              applies=False, why_not="needs miniImageNet"),
    ])


def test_checked_view_does_not_depend_on_measurements():
    t = _table()
    before = t.checked()
    t.measure("a-beats-b", over_seeds([0.05, 0.049, 0.051]))  # p = 1.3e-4 (family of one: p_adj = p)
    assert t.checked() == before
    assert "effect > 0" in before and "not tested here: needs miniImageNet" in before
    frame = t.frame()
    assert list(frame["verdict"]) == [REPRODUCED, NOT_TESTED]
    assert t.counts() == {REPRODUCED: 1, NOT_TESTED: 1}
    assert "**reproduced**" in t.conclusion()


def test_ids_are_unique_and_lookups_name_the_choices():
    with pytest.raises(ValueError, match="repeated: x"):
        T.ClaimsTable("00_quickstart", "smoke", [Claim("x", "", "", "", "", Expectation("greater"))] * 2)
    with pytest.raises(KeyError, match="a-beats-b, level"):
        _table()["nope"]


@dataclass
class P:
    scale: str = param("smoke")
    lr: float = param(0.1)


def test_reference_round_trip_and_tolerance(tmp_path, monkeypatch):
    (tmp_path / "params" / "99_demo").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path)
    values = {"acc": over_seeds([0.60, 0.62, 0.64]), "count": 120}
    written = R.check("99_demo", P(), values, update=True)
    ok = R.check("99_demo", P(), values)
    assert str(written) == str(ok)  # the printed line is the same whether written or checked
    assert ok.status == "checked" and all(c.ok for c in ok.comparisons)
    tol = 2 * values["acc"].ci95
    near = {"acc": over_seeds([v + 0.9 * tol for v in (0.60, 0.62, 0.64)]), "count": 120}
    assert R.check("99_demo", P(), near).status == "checked"
    far = {"acc": over_seeds([v + 1.1 * tol for v in (0.60, 0.62, 0.64)]), "count": 120}
    with pytest.raises(AssertionError, match="acc: fresh"):
        R.check("99_demo", P(), far)
    with pytest.raises(AssertionError, match="count"):
        R.check("99_demo", P(), {"acc": values["acc"], "count": 121})
    with pytest.raises(AssertionError, match="missing \\['count'\\]"):
        R.check("99_demo", P(), {"acc": values["acc"]})
    assert R.check("99_demo", P(lr=0.2), values).status == "other parameters"


def test_reference_needs_seeds_and_a_file(tmp_path, monkeypatch):
    (tmp_path / "params" / "99_demo").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="at least 2 training seeds"):
        R.check("99_demo", P(), {"acc": over_seeds([0.6], [0.01])}, update=True)
    with pytest.raises(AssertionError, match="./study reference 99_demo"):
        R.check("99_demo", P(), {"acc": over_seeds([0.6, 0.7])})
    assert R.check("99_demo", P(scale="paper"), {"acc": over_seeds([0.6, 0.7])}).status == "no reference"
    (tmp_path / "params" / "99_demo" / "smoke.reference.json").write_text("")
    with pytest.raises(AssertionError, match="damaged"):
        R.check("99_demo", P(), {"acc": over_seeds([0.6, 0.7])})


def test_reference_tolerance_takes_the_larger_of_two_intervals(tmp_path, monkeypatch):
    (tmp_path / "params" / "99_demo").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path)
    wide = over_seeds([0.50, 0.60, 0.70])  # 0.6 ± 4.303 * 0.1 / sqrt(3) = ± 0.2484
    R.check("99_demo", P(), {"acc": wide}, update=True)
    narrow = over_seeds([0.999, 1.0, 1.001])  # 1.0 ± 0.0025: |1.0 - 0.6| = 0.4 < 2 * 0.2484
    (comp,) = R.check("99_demo", P(), {"acc": narrow}).comparisons
    assert comp.tolerance == pytest.approx(2 * 4.302653 * 0.1 / 3 ** 0.5, rel=1e-6) and comp.ok
    far = over_seeds([1.099, 1.1, 1.101])  # 0.5 > 0.4968
    with pytest.raises(AssertionError, match="acc: fresh"):
        R.check("99_demo", P(), {"acc": far})


@pytest.mark.parametrize("nb", ["02_batch_size_sweep", "03_pair_subsampling", "04_ablations", "10_spe_omniglot",
                                "08_opta_before_after", "13_infopatch"])
def test_a_check_run_claims_the_paper_ids(nb):
    check, paper = C.static_claims(nb, "check"), C.static_claims(nb, "paper")
    ids = [c.id for c in check]
    assert ids[:len(paper)] == [c.id for c in paper]  # the paper ids first, in the paper's order
    cut = [c for c in check if "check scale cuts" in c.why_not]
    assert all(c.verdict == "not tested" for c in cut)
    assert len(cut) < len(paper)  # the check run still measures some paper ids (the wiring is exercised)


def test_a_rewritten_reference_goes_to_the_staging_folder_of_study_reference(tmp_path, monkeypatch):
    """``./study reference`` sets STUDYLIB_REFERENCE_STAGE: the notebook's new reference is written there and the
    script installs it only once the notebook has run to its end (issue 40: an interrupted run left the committed
    reference rewritten)."""
    (tmp_path / "params" / "99_demo").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path)
    committed = tmp_path / "params" / "99_demo" / "smoke.reference.json"
    committed.write_text("committed\n")
    monkeypatch.setenv(R.STAGE_ENV, str(tmp_path / "stage"))
    values = {"acc": over_seeds([0.60, 0.62, 0.64]), "count": 120}
    assert R.check("99_demo", P(), values, update=True).status == "written"
    assert committed.read_text() == "committed\n"
    staged = json.loads((tmp_path / "stage" / "99_demo" / "smoke.reference.json").read_text())
    assert staged["notebook"] == "99_demo" and set(staged["values"]) == {"acc", "count"}
