"""Claims tables and reference checks: machine-independent listing, verdicts, persistence, tolerances."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from studylib.config import param
from studylib.evaluation.stats import over_seeds
from studylib.evaluation.verdicts import NOT_RUN, NOT_TESTED, REPRODUCED, Claim, Expectation
from studylib.experiments import claims as C
from studylib.experiments import reference as R


def _table(scale="smoke"):
    return C.ClaimsTable("00_quickstart", scale, [
        Claim("a-beats-b", "A beats B", "Table 2", "62.6 vs 60.4", "A - B", Expectation("greater")),
        Claim("level", "A's accuracy", "Table 2", "62.55", "ours - paper", Expectation("within", margin=0.01),
              applies=False, why_not="needs miniImageNet"),
    ])


def test_checked_view_does_not_depend_on_measurements():
    t = _table()
    before = t.checked()
    t.measure("a-beats-b", over_seeds([0.05, 0.04, 0.06]))
    assert t.checked() == before
    assert "effect > 0" in before and "not tested here: needs miniImageNet" in before
    frame = t.frame()
    assert list(frame["verdict"]) == [REPRODUCED, NOT_TESTED]
    assert t.counts() == {REPRODUCED: 1, NOT_TESTED: 1}
    assert "**reproduced**" in t.conclusion()


def test_ids_are_unique_and_lookups_name_the_choices():
    with pytest.raises(ValueError, match="repeated: x"):
        C.ClaimsTable("00_quickstart", "smoke", [Claim("x", "", "", "", "", Expectation("greater"))] * 2)
    with pytest.raises(KeyError, match="a-beats-b, level"):
        _table()["nope"]


def test_save_and_summary_page(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path))
    t = _table()
    t.measure("a-beats-b", over_seeds([0.05, 0.04, 0.06]))
    path = t.save()
    assert path == tmp_path / "claims" / "00_quickstart" / "smoke.json"
    saved = json.loads(path.read_text())
    assert saved["claims"][0]["verdict"] == REPRODUCED and saved["claims"][0]["measured"]["seeds"] == [0.05, 0.04, 0.06]
    page = C.summary_markdown(["00_quickstart"])
    # the page lists the notebook's real claims (from its module), with a smoke column and a paper column
    static = C.static_claims("00_quickstart")
    for c in static:
        assert c.claim in page
    assert NOT_RUN in page  # no paper-scale table saved
    path.write_text("{broken")  # a damaged table is named on stderr and treated as not run
    assert C.summary_markdown(["00_quickstart"]).count(NOT_RUN) >= len(static)
    assert f"ignoring unreadable {path}" in capsys.readouterr().err


def test_summary_falls_back_to_the_committed_table_of_the_reference_run(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path / "empty-cache"))
    t = _table()
    t.measure("a-beats-b", over_seeds([0.05, 0.04, 0.06]))
    data = t.as_dict()
    data["claims"] = [dict(c, id=s.id) for c, s in zip(data["claims"], C.static_claims("00_quickstart"))]
    committed = tmp_path / "smoke.claims.json"
    committed.write_text(json.dumps(data))
    monkeypatch.setattr(C, "committed_claims_path", lambda nb, scale: committed if scale == "smoke" else tmp_path / "x")
    page = C.summary_markdown(["00_quickstart"])
    assert f"**{REPRODUCED}**" in page and "+5.0" in page  # the committed verdict and effect, in points
    monkeypatch.setattr(C, "committed_claims_path", lambda nb, scale: tmp_path / "absent.json")
    assert f"**{REPRODUCED}**" not in C.summary_markdown(["00_quickstart"])


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
