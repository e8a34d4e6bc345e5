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
    t.measure("a-beats-b", over_seeds([0.05, 0.049, 0.051]))  # p = 1.3e-4: decisive under the stability rule
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


def test_page_q_values_are_benjamini_hochberg_over_the_scales_directional_claims():
    import scipy.stats
    # p = 0.0127, 0.039, 0.42, 0.0127: c1 passes the t-interval rules alone (p < 0.05), not BH (q = 0.052)
    seeds = [[0.05, 0.04, 0.06], [0.015, 0.03, 0.02], [0.02, -0.01, 0.04], [-0.05, -0.06, -0.04]]
    rows = [C.Row("nb", f"c{i}", "greater", {"measured": over_seeds(s).as_dict(), "verdict": "x", "why": ""})
            for i, s in enumerate(seeds)]
    rows.append(C.Row("nb", "w", "within", {"measured": over_seeds([0.0, 0.01]).as_dict(), "verdict": "kept"}))
    C._judge_rows(rows)
    p = [scipy.stats.ttest_1samp(s, 0.0).pvalue for s in seeds]
    assert [r.p for r in rows[:4]] == pytest.approx(p)
    assert [r.q for r in rows[:4]] == pytest.approx(scipy.stats.false_discovery_control(p))
    for r in rows[:4]:  # decisive only with q <= 0.01: BH at 5% and the marginal-effects rule
        decisive = r.q <= 0.01 and r.p < 0.05 and r.estimate().sd < abs(r.estimate().value)
        assert (r.verdict in (REPRODUCED, "not reproduced")) == decisive, (r.id, r.p, r.q, r.verdict)
    assert rows[1].q > 0.05 >= rows[1].p and rows[1].verdict == "inconclusive"
    # c0 and c3: q = 0.026 passes BH at 5% but not the stability rule's 1%
    assert 0.01 < rows[0].q <= 0.05 and rows[0].verdict == "inconclusive" and rows[0].why.startswith("marginal")
    assert rows[4].verdict == "kept" and rows[4].q is None  # within claims keep their rule, no q
    assert "p = " in rows[0].cell() and "q = " in rows[0].cell()


def test_page_rows_come_from_each_scales_own_claims_and_the_paper_column_only_from_paper_yaml(tmp_path, monkeypatch):
    from studylib.config import load_params
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path))
    nb = "02_batch_size_sweep"
    smoke_ids = [c.id for c in C.static_claims(nb)]
    paper = C.static_claims(nb, "paper")
    assert set(c.id for c in paper) - set(smoke_ids)  # 02 has paper-only claims (issue 19: 8 of them)
    page = C.summary_markdown([nb])
    for c in paper:
        assert c.claim in page
    # a paper-scale table made with paper.yaml's own parameters fills the column; a -p override does not
    nb = "09_spe_synthetic"
    mod = C.experiment_module(nb)
    p = load_params(mod.Params, nb, "paper")
    table = C.static_claims(nb, "paper")
    directional = next(c for c in table if c.expect.kind == "greater")
    table.measure(directional.id, over_seeds([5.0, 4.9, 5.1]))  # a unit-1 effect (log variance ratio)
    table.save(params=load_params(mod.Params, nb, "paper", seeds=[7, 8, 9]))  # as `-p seeds [7, 8, 9]` would
    assert "other parameters than paper.yaml's" in C.summary_markdown([nb])
    with pytest.raises(ValueError, match="not made with params/09_spe_synthetic/paper.yaml"):
        C.save_committed("paper", [nb])
    table.save(params=p)
    saved = json.loads((tmp_path / "claims" / nb / "paper.json").read_text())
    assert saved["made_on"]["torch"] and saved["params_hash"] == R.params_hash(p)
    # the only measured directional claim of this scale, so q = p; t = 5 / (0.1 / sqrt 3) on 2 dof, whose
    # two-sided p is 1 - t / sqrt(t^2 + 2) = 1.3e-4 (<= 0.01: decisive under the stability rule)
    t = 5.0 / (0.1 / 3 ** 0.5)
    p2 = f"{1 - t / (t * t + 2) ** 0.5:.1e}"
    assert p2 == "1.3e-04"
    assert f"+5.0 ± 0.2 (3 seeds), p = {p2}, q = {p2} → **reproduced**" in C.summary_markdown([nb])
    dst = tmp_path / "paper.claims.json"
    monkeypatch.setattr(C, "committed_claims_path", lambda n, s: dst)
    assert C.save_committed("paper", [nb]) == [dst] and json.loads(dst.read_text())["made_on"]


@pytest.mark.parametrize("nb", ["02_batch_size_sweep", "03_pair_subsampling", "04_ablations", "10_spe_omniglot",
                                "08_opta_before_after", "13_infopatch"])
def test_a_check_run_claims_the_paper_ids(nb):
    check, paper = C.static_claims(nb, "check"), C.static_claims(nb, "paper")
    ids = [c.id for c in check]
    assert ids[:len(paper)] == [c.id for c in paper]  # the paper ids first, in the paper's order
    cut = [c for c in check if "check scale cuts" in c.why_not]
    assert all(c.verdict == "not tested" for c in cut)
    assert len(cut) < len(paper)  # the check run still measures some paper ids (the wiring is exercised)


def test_a_run_writes_its_page_under_out_and_leaves_tracked_files_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path / "cache"))
    root = C.project_root()
    tracked = {f: (root / f).read_bytes() for f in ("figures/claims.md", "README.md")}
    monkeypatch.setattr(C, "notebook_names", lambda: ["00_quickstart"])
    out = tmp_path / "out" / "claims.md"
    C.main(["--out", str(out)])
    assert out.read_text().startswith("# Claims of the study")
    assert {f: (root / f).read_bytes() for f in tracked} == tracked
    # and the run path of ./study asks for exactly that
    script = (root / "study").read_text()
    run_path = script[script.index("run_notebooks() {"):script.index("reference() {")]
    assert "-m studylib.experiments.claims --out out/claims.md" in run_path
    assert "figures/claims.md" not in run_path.split("--out")[0].split("local failed=0")[1]


def test_the_registry_names_real_claims_and_the_headline_counts_aliases_once():
    from studylib.experiments import claim_registry as G
    ids = {}
    for nb in {nb for nb, _ in G.REGISTRY} | {a.split(":")[0] for m in G.REGISTRY.values() if (a := m.alias_of)}:
        ids[nb] = {c.id for scale in ("smoke", "paper") for c in C.static_claims(nb, scale)}
    for (nb, cid), m in G.REGISTRY.items():
        assert cid in ids[nb], f"claim_registry names {nb}:{cid}, which no scale of {nb} has"
        if m.alias_of:
            anb, aid = m.alias_of.split(":")
            assert aid in ids[anb] and G.REGISTRY.get((anb, aid), G.Meta()).alias_of is None, m.alias_of
    page = C.summary_markdown(["04_ablations"])
    rows = [line for line in page.split("## 04_ablations")[1].splitlines() if line.startswith("| ") and
            not line.startswith(("| claim", "| ---"))]
    aliases = [r for r in rows if "alias of" in r]
    total = int(next(line for line in page.splitlines() if line.startswith("| all |")).split("|")[-2])
    assert len(aliases) == 3 and total == len(rows) - 3  # App. H 1-shot at b = 128, 256, 512


def test_readme_what_we_found_is_generated_from_the_committed_tables_with_small_tracked_key_figures(
        tmp_path, monkeypatch):
    """The README's section between the claims-summary markers is exactly what ``./study claims`` writes for
    the committed claims tables (an empty cache: no machine's own runs), says which scale and data the verdicts
    come from, counts by paper, lists the decided paper claims, and links small, tracked key figures."""
    import subprocess
    from PIL import Image
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path / "empty-cache"))
    root = C.project_root()
    text = (root / "README.md").read_text()
    section = text.split(C.SUMMARY_START, 1)[1].split(C.SUMMARY_END, 1)[0].strip()
    rows = C.page_rows()
    assert section == C.readme_summary(rows=rows), "README out of date: run ./study claims"
    assert text.index(C.SUMMARY_START) < text.index("## Two commands")  # near the top
    assert "the **smoke** scale only" in section and "not the papers' Omniglot" in section
    # by paper: one row per seed 000-004 (and notebook 90), its counts summing to the headline's total
    by_paper = section.split("**By paper**")[1].split("**Paper claims")[0]
    paper_rows = [r for r in by_paper.splitlines() if r.startswith("| 00") or r.startswith("| - ")]
    assert [r.split("|")[1].strip()[:3] for r in paper_rows] == ["000", "001", "002", "003", "004", "- y"]
    total = int(next(r for r in section.splitlines() if r.startswith("| all |")).split("|")[-2])
    assert sum(int(r.split("|")[-3]) for r in paper_rows) == total
    decided = section.split("**Paper claims the smoke runs decided:**")[1].split("**Marginal**")[0]
    assert all("reproduced**" in r for r in decided.splitlines() if r.startswith("| 00"))
    # the marginal leads: 0.01 < q <= 0.05 (decided at 5% FDR, not under the stability rule)
    marginal = section.split("**Marginal**")[1].split("**By kind")[0]
    qs = [float(r.split("q = ")[1].split(" ")[0]) for r in marginal.splitlines() if r.startswith("| 00")]
    assert all(0.01 < q <= 0.05 for q in qs)
    figures = C.write_key_figures(out=tmp_path / "key", rows=rows)
    for fresh in figures:
        committed = root / "figures" / "key" / fresh.name
        assert f"(figures/key/{fresh.name})" in section
        assert committed.stat().st_size < 100_000
        with Image.open(committed) as a, Image.open(fresh) as b:
            assert a.format == "PNG" and a.size == b.size
        ignored = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", str(committed)])
        assert ignored.returncode == 1, f"{committed} is ignored by git; it must be tracked"


def test_the_page_rejudges_within_claims_by_todays_rule():
    """A table stored under the 95% rule says "reproduced"; the page applies the 99% interval to the same seeds:
    0 ± 0.0248 (95%) lies inside ±0.03, 0 ± 0.0573 (99%: 9.924843 * 0.01 / sqrt 3) does not."""
    from studylib.evaluation.verdicts import Expectation
    stored = {"measured": over_seeds([-0.01, 0.0, 0.01]).as_dict(), "verdict": REPRODUCED, "why": "old rule"}
    row = C.Row("nb", "w", "within", stored, expect=Expectation("within", margin=0.03))
    C._judge_rows([row])
    assert row.verdict == "inconclusive" and row.why.startswith("marginal") and row.q is None
    wide = C.Row("nb", "w", "within", stored, expect=Expectation("within", margin=0.06))
    C._judge_rows([wide])
    assert wide.verdict == REPRODUCED
