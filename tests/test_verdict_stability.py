"""benchmarks/verdict_stability.py: which verdicts two run caches disagree on, and which of those count."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import verdict_stability as vs  # noqa: E402


def _row(nb, cid, verdict, q=None, label=None):
    return {"notebook": nb, "id": cid, "verdict": verdict, "label": label or verdict, "p": q, "p_adj": q,
            "measured": "+1.0 ± 0.5 (3 seeds)"}


def test_decisive_differences_are_those_where_either_page_is_decisive():
    a = [_row("00", "x", "reproduced", 0.01), _row("00", "y", "inconclusive", 0.3), _row("01", "z", "not run"),
         _row("02", "w", "not reproduced", 0.02), _row("02", "v", "inconclusive", 0.2)]
    b = [_row("00", "x", "inconclusive", 0.07), _row("00", "y", "inconclusive", 0.4), _row("01", "z", "not run"),
         _row("02", "w", "not reproduced", 0.03), _row("02", "v", "not tested")]
    res = vs.compare(a, b)
    assert [(d["id"], d["decisive"]) for d in res["differ"]] == [("x", True), ("v", False)]
    assert res["decisive_differ"] == 1 and res["claims"] == 5 and res["flips"] == 0
    assert res["counts"][0] == {"reproduced": 1, "inconclusive": 2, "not run": 1, "not reproduced": 1}
    assert len(res["rows"]) == 5 and res["rows"][0]["first"]["p_adj"] == 0.01  # every claim, both pages


def test_a_change_of_direction_is_a_flip():
    a = [_row("00", "x", "reproduced", 0.001), _row("00", "y", "not reproduced", 0.001, "not reproduced (reversed)")]
    b = [_row("00", "x", "not reproduced", 0.001, "not reproduced (no effect)"),
         _row("00", "y", "not reproduced", 0.002, "not reproduced (no effect)")]
    res = vs.compare(a, b)
    assert res["flips"] == 2 and res["decisive_differ"] == 0


def test_pages_of_different_code_are_refused():
    with pytest.raises(SystemExit, match="different claims"):
        vs.compare([_row("00", "x", "reproduced")], [_row("00", "y", "reproduced")])


def test_a_cache_without_claims_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no claims/ folder"):
        vs.rows_of(tmp_path)


def test_a_second_run_of_some_notebooks_is_compared_on_those_only(monkeypatch, tmp_path):
    """--notebooks: the second cache repeated only notebook 00; 01's rows ("not run" there) do not count."""
    pages = {tmp_path / "a": [_row("00", "x", "reproduced", 0.001), _row("01", "z", "reproduced", 0.001)],
             tmp_path / "b": [_row("00", "x", "reproduced", 0.002), _row("01", "z", "not run")]}
    monkeypatch.setattr(vs, "rows_of", lambda cache, scale, stale_ok=False: pages[Path(cache)])
    out = tmp_path / "cmp.json"
    assert vs.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1  # 01 differs: decisive vs not run
    assert vs.main([str(tmp_path / "a"), str(tmp_path / "b"), "--notebooks", "00", "--json", str(out)]) == 0
    import json
    assert json.loads(out.read_text())["notebooks"] == ["00"]


def _carried(monkeypatch, tmp_path, old_second, p01):
    """An earlier comparison of notebook 01 (first side reproduced, p_adj 0.001; ``old_second``) in old.json, and
    today's pages: a (00 and 01, 01 at p_adj ``p01``) and b (00 only, 01 not run). Returns the pages, the
    arguments comparing 00 and carrying 01 from old.json, and the output path."""
    import json
    old = {"rows": [{"notebook": "01", "id": "z", "first": _row("01", "z", "reproduced", 0.001),
                     "second": old_second}]}
    (tmp_path / "old.json").write_text(json.dumps(old))
    pages = {tmp_path / "a": [_row("00", "x", "reproduced", 0.001), _row("01", "z", "reproduced", p01)],
             tmp_path / "b": [_row("00", "x", "reproduced", 0.002), _row("01", "z", "not run")]}
    monkeypatch.setattr(vs, "rows_of", lambda cache, scale, stale_ok=False: pages[Path(cache)])
    out = tmp_path / "cmp.json"
    return pages, [str(tmp_path / "a"), str(tmp_path / "b"), "--notebooks", "00", "--carry",
                   str(tmp_path / "old.json"), "--json", str(out)], out


def test_carried_rows_are_kept_only_where_todays_first_page_reads_as_the_old_comparisons(monkeypatch, tmp_path):
    """--carry: the notebooks the second run did not repeat keep an earlier comparison's rows when today's first
    page gives each of them the same verdict, label and p_adj (the same numbers, the same rule); otherwise the
    notebook is named and must be run again."""
    import json
    pages, base, out = _carried(monkeypatch, tmp_path, _row("01", "z", "inconclusive", 0.03), 0.001)
    args = base + ["--allow", "1"]
    assert vs.main(args) == 0
    res = json.loads(out.read_text())
    assert res["notebooks"] == ["00", "01"] and res["carried"]["notebooks"] == ["01"]
    assert [d["id"] for d in res["differ"]] == ["z"] and res["decisive_differ"] == 1  # the old second side
    pages[tmp_path / "a"][1] = _row("01", "z", "reproduced", 0.002)  # 01 re-run since: another p_adj
    with pytest.raises(SystemExit, match="01 read otherwise"):
        vs.main(args)


def test_tables_committed_at_a_revision_become_a_cache_of_their_own(tmp_path):
    """git:REV as the second page: each params/<nb>/<scale>.claims.json committed at REV is laid out as a cache's
    claims/<nb>/<scale>.json, byte for byte (a comparison with tables made on another machine)."""
    import subprocess
    rev = subprocess.run(["git", "-C", str(vs.REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if not rev:
        pytest.skip("not a git checkout")
    folder = vs.committed_cache(rev, "evidence", tmp_path)
    made = sorted(p.parent.name for p in folder.glob("claims/*/evidence.json"))
    listed = subprocess.run(["git", "-C", str(vs.REPO), "ls-tree", "-r", "--name-only", rev, "params"],
                            capture_output=True, text=True).stdout.split()
    assert made == sorted(Path(p).parts[1] for p in listed if p.endswith("/evidence.claims.json")) and made
    first = made[0]
    committed = subprocess.run(["git", "-C", str(vs.REPO), "show", f"{rev}:params/{first}/evidence.claims.json"],
                               capture_output=True, text=True).stdout
    assert (folder / "claims" / first / "evidence.json").read_text() == committed


def test_notebooks_without_a_second_run_and_named_second_runs_are_recorded(monkeypatch, tmp_path):
    """--without: notebooks re-made with no second run are recorded (no_second_run) and not carried from an older
    comparison; --second-run names what a notebook's second page was where it is not the file's own."""
    import json
    _, base, out = _carried(monkeypatch, tmp_path, _row("01", "z", "reproduced", 0.002), 0.004)
    with pytest.raises(SystemExit, match="01 read otherwise"):  # 01 was re-made since the old comparison
        vs.main(base)
    assert vs.main(base + ["--without", "01", "--second-run", "00=the 1-thread run of abc",
                           "--also", str(tmp_path / "old.json")]) == 0
    res = json.loads(out.read_text())
    assert res["also"] == ["old.json"]
    assert res["no_second_run"] == ["01"] and "carried" not in res and [r["id"] for r in res["rows"]] == ["x"]
    assert res["second_runs"] == {"00": "the 1-thread run of abc"}
