"""The study's page of claims: one judgement everywhere, families fixed in advance, columns per scale,
provenance and staleness, the README's generated section."""

from __future__ import annotations

import json

import pytest

from studylib.claims import store as C
from studylib.claims import table as T
from studylib.claims import page as P
from studylib.claims import reference as R
from studylib.evaluation.stats import over_seeds
from studylib.evaluation.verdicts import NOT_RUN, REPRODUCED, Claim, Expectation


def _table(nb="00_quickstart", scale="smoke"):
    return T.ClaimsTable(nb, scale, [
        Claim("a-beats-b", "A beats B", "Table 2", "62.6 vs 60.4", "A - B", Expectation("greater")),
        Claim("level", "A's accuracy", "Table 2", "62.55", "ours - paper", Expectation("within", margin=0.01),
              applies=False, why_not="needs miniImageNet"),
    ])


def _as_committed(table: T.ClaimsTable, nb: str) -> dict:
    """A saved table of today's code, its ids those of the notebook's smoke listing (so the page shows it)."""
    data = table.as_dict()
    data["claims"] = [dict(c, id=s.id) for c, s in zip(data["claims"], C.static_claims(nb))]
    data.update(T.provenance(nb), params_hash=None)
    return data


def test_save_names_its_parameter_file_and_records_provenance(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path))
    t = _table()
    t.measure("a-beats-b", over_seeds([0.05, 0.049, 0.051]))
    path = t.save()
    assert path == tmp_path / "claims" / "00_quickstart" / "smoke.json"
    saved = json.loads(path.read_text())
    assert saved["claims"][0]["verdict"] == REPRODUCED and saved["claims"][0]["measured"]["seeds"] == [0.05, 0.049, 0.051]
    assert saved["code_version"] == C.code_version("00_quickstart") and len(saved["code_version"]) == 16
    assert saved["commit"] is None or len(saved["commit"].split("+")[0]) == 40
    assert saved["family"] == 1 and saved["claims"][0]["p_adj"] == saved["claims"][0]["p"]
    page = P.summary_markdown(["00_quickstart"])
    for c in C.static_claims("00_quickstart"):
        assert c.claim in page
    path.write_text("{broken")  # a damaged table is named on stderr and treated as not run
    assert P.summary_markdown(["00_quickstart"]).count(NOT_RUN) >= len(C.static_claims("00_quickstart"))
    assert f"ignoring unreadable {path}" in capsys.readouterr().err


def test_the_page_shows_the_notebooks_own_judgement_and_marks_stale_tables(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path / "empty-cache"))
    nb = "00_quickstart"
    t = C.static_claims(nb)
    t.measure("table2-nc-beats-soft-5shot", over_seeds([0.05, 0.049, 0.051]))
    committed = tmp_path / "smoke.claims.json"
    committed.write_text(json.dumps(dict(t.as_dict(), **T.provenance(nb), params_hash=None)))
    monkeypatch.setattr(C, "committed_claims_path", lambda n, name: committed if name == "smoke" else tmp_path / "x")
    j = t.judgements()["table2-nc-beats-soft-5shot"]
    listing, rows, _ = P.page_rows([nb])
    row = rows["smoke"][(nb, "table2-nc-beats-soft-5shot")]
    assert row.judgement == j and row.verdict == REPRODUCED and not row.stale
    assert f"p = {T._fmt_p(j.p)}, p_adj = {T._fmt_p(j.p_adj)} → **reproduced**" in row.cell()
    # made by other code: shown, marked stale, counted as not run
    committed.write_text(json.dumps(dict(t.as_dict(), **dict(T.provenance(nb), code_version="0" * 16),
                                         params_hash=None)))
    row = P.page_rows([nb])[1]["smoke"][(nb, "table2-nc-beats-soft-5shot")]
    assert row.stale and row.verdict == NOT_RUN and "stale" in row.cell() and "**reproduced**" in row.cell()


def test_every_committed_table_is_judged_on_the_page_as_in_its_notebook(monkeypatch, tmp_path):
    """One judgement everywhere: each committed table's stored verdict, p and p_adj (what its notebook showed)
    equal the page's re-judgement of the same table, for every notebook and scale (tables made by today's code;
    an older one is marked stale and its own judgement is not compared)."""
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path / "empty-cache"))
    listing, rows, tables = P.page_rows()
    compared = 0
    for column, per_nb in tables.items():
        for nb, used in per_nb.items():
            for name, saved in used:
                if C.is_stale(saved, nb):
                    continue
                for entry in saved["claims"]:
                    row = rows[column].get((nb, entry["id"]))
                    if row is None or row.table != name or row.judgement is None:
                        continue
                    j = row.judgement
                    assert (j.verdict, j.label, j.p, j.p_adj) == (entry["verdict"], entry.get("label"),
                                                                 entry.get("p"), entry.get("p_adj")), (nb, entry["id"])
                    compared += 1
    fresh = sum(1 for per_nb in tables.values() for nb, used in per_nb.items() for _, s in used
                if not C.is_stale(s, nb))
    assert fresh == 0 or compared > 0


def test_adding_another_notebooks_table_changes_no_claims_adjusted_p(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path))
    a = C.static_claims("00_quickstart")
    a.measure("table2-nc-beats-soft-5shot", over_seeds([0.05, 0.04, 0.06, 0.052]))
    a.save()
    before = P.page_rows(["00_quickstart", "05_comparison"])[1]["smoke"][("00_quickstart", "table2-nc-beats-soft-5shot")]
    b = C.static_claims("05_comparison")
    for c in b:
        if c.applies and c.expect.kind == "greater":
            b.measure(c.id, over_seeds([0.001, 0.002, 0.0015]))  # small p's everywhere: BH would have moved q
    b.save()
    after = P.page_rows(["00_quickstart", "05_comparison"])[1]["smoke"][("00_quickstart", "table2-nc-beats-soft-5shot")]
    assert before.judgement == after.judgement and before.p_adj is not None


def test_families_are_fixed_in_advance_unmeasured_claims_count():
    t = C.static_claims("05_comparison")
    members = [c for c in t if c.applies and c.expect.kind != "equal"]
    t.measure("appD-nc-beats-knn-5shot", over_seeds([0.05, 0.049, 0.051]))
    j = t.judgements()["appD-nc-beats-knn-5shot"]
    assert j.family == len(members) > 5
    assert j.p_adj == pytest.approx(min(1.0, len(members) * j.p))  # the smallest p times the family's size


def test_columns_list_each_scales_own_claims_and_count_only_those(tmp_path, monkeypatch):
    from studylib.config import load_params
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path))
    nb = "02_batch_size_sweep"
    smoke_ids = {c.id for c in C.static_claims(nb)}
    paper_ids = {c.id for c in C.static_claims(nb, "paper")}
    assert paper_ids - smoke_ids  # 02 has paper-only claims
    listing, rows, _ = P.page_rows([nb])
    for cid in paper_ids - smoke_ids:
        r = rows["smoke"][(nb, cid)]
        assert r.status == "not at this scale" and not r.counted and r.cell() == P.NOT_AT_SCALE
    counted = sum(1 for *_, r, _ in P._canonical(listing, rows["smoke"]))
    assert counted == len([c for c in smoke_ids
                           if not P.meta(nb, c, "greater").alias_of])
    # a paper-scale table made with paper.yaml's own parameters fills the column; a -p override does not
    nb = "09_spe_synthetic"
    mod = C.experiment_module(nb)
    p = load_params(mod.Params, nb, "paper")
    table = C.static_claims(nb, "paper")
    directional = next(c for c in table if c.expect.kind == "greater")
    table.measure(directional.id, over_seeds([5.0, 4.9, 5.1]))
    table.save(params=load_params(mod.Params, nb, "paper", seeds=[7, 8, 9]))  # as `-p seeds [7, 8, 9]` would
    assert "other parameters than paper.yaml's" in P.summary_markdown([nb])
    with pytest.raises(ValueError, match="not made with params/09_spe_synthetic/paper.yaml"):
        C.save_committed("paper", [nb])
    table.save(params=p)
    saved = json.loads((tmp_path / "claims" / nb / "paper.json").read_text())
    assert saved["made_on"]["torch"] and saved["params_hash"] == R.params_hash(p) and saved["name"] == "paper"
    j = table.judgements()[directional.id]
    assert f"p = {T._fmt_p(j.p)}, p_adj = {T._fmt_p(j.p_adj)} → **{j.label}**" in P.summary_markdown([nb])
    dst = tmp_path / "paper.claims.json"
    monkeypatch.setattr(C, "committed_claims_path", lambda n, s: dst)
    assert C.save_committed("paper", [nb]) == [dst] and json.loads(dst.read_text())["code_version"]


def test_a_variant_parameter_file_names_its_table_and_fills_the_paper_column(tmp_path, monkeypatch):
    """A claim that needs a data-set override (06's CIFAR-FS level) gets a parameter file of its own,
    paper-cifarfs.yaml: a run with it saves paper-cifarfs.json, and the paper column takes the claim from it."""
    nb = "06_beclr_pretraining"
    names = C.param_files(nb, "paper")
    assert "paper-cifarfs" in names and "paper-fc100" in names
    mod = C.experiment_module(nb)
    from studylib.config import load_params
    p = load_params(mod.Params, nb, "paper-cifarfs")
    assert p.scale == "paper" and C.table_name(nb, "paper", R.params_hash(p)) == "paper-cifarfs"
    assert C.static_claims(nb, "paper-cifarfs")["t2-level-cifarfs-1shot"].applies
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path))
    listing, rows, _ = P.page_rows([nb])
    assert rows["paper"][(nb, "t2-level-cifarfs-1shot")].table == "paper-cifarfs"
    assert rows["paper"][(nb, "t2-level-cifarfs-1shot")].status == "not run"


def test_a_run_writes_its_page_under_out_and_leaves_tracked_files_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path / "cache"))
    root = C.project_root()
    tracked = {f: (root / f).read_bytes() for f in ("figures/claims.md", "README.md")}
    monkeypatch.setattr(P, "notebook_names", lambda: ["00_quickstart"])
    out = tmp_path / "out" / "claims.md"
    P.main(["--out", str(out)])
    assert out.read_text().startswith("# Claims of the study")
    assert {f: (root / f).read_bytes() for f in tracked} == tracked
    script = (root / "study").read_text()
    run_path = script[script.index("run_notebooks() {"):script.index("reference() {")]
    assert "-m studylib.claims.page --out out/claims.md" in run_path


def test_the_registry_names_real_claims_and_the_counts_take_aliases_once():
    from studylib.claims import registry as G
    ids = {}
    for nb in {nb for nb, _ in G.REGISTRY} | {a.split(":")[0] for m in G.REGISTRY.values() if (a := m.alias_of)}:
        ids[nb] = {c.id for scale in ("smoke", "paper") for c in C.static_claims(nb, scale)}
    for (nb, cid), m in G.REGISTRY.items():
        assert cid in ids[nb], f"claim_registry names {nb}:{cid}, which no scale of {nb} has"
        if m.alias_of:
            anb, aid = m.alias_of.split(":")
            assert aid in ids[anb] and G.REGISTRY.get((anb, aid), G.Meta()).alias_of is None, m.alias_of
    listing, rows, _ = P.page_rows(["04_ablations"])
    smoke = [cid for cid, _ in listing["04_ablations"] if rows["smoke"][("04_ablations", cid)].counted]
    aliases = [cid for cid in smoke if G.meta("04_ablations", cid).alias_of]
    assert aliases and len(P._canonical(listing, rows["smoke"])) == len(smoke) - len(aliases)


def test_readme_what_we_found_is_generated_from_the_committed_tables_with_small_tracked_key_figures(
        tmp_path, monkeypatch):
    """The README's section between the claims-summary markers is exactly what ``./study claims`` writes for
    the committed claims tables (an empty cache: no machine's own runs), says which scale and data the verdicts
    come from, defines the verdict words, counts by paper, lists the decided paper claims, and links small,
    tracked key figures."""
    import subprocess
    from PIL import Image
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path / "empty-cache"))
    root = C.project_root()
    text = (root / "README.md").read_text()
    section = text.split(P.SUMMARY_START, 1)[1].split(P.SUMMARY_END, 1)[0].strip()
    rows = P.page_rows()
    assert section == P.readme_summary(rows=rows), "README out of date: run ./study claims"
    assert text.index(P.SUMMARY_START) < text.index("## Two commands")  # near the top
    assert "**Where these verdicts come from:**" in section and "**Verdict words.**" in section
    for word in ("*reproduced*", "*not reproduced*", "*inconclusive*", "*not tested*", "*not run*"):
        assert word in section
    marginal = section.split("**Marginal**")[1].split("**By kind")[0]
    qs = [(float(r.split("p_adj = ")[1].split(" ")[0]), "not stable: " in r and " reads " in r)
          for r in marginal.splitlines() if r.startswith("| 00")]
    assert qs and all(0.01 < q <= 0.05 or (q <= 0.01 and unstable) for q, unstable in qs)
    figures = P.write_key_figures(out=tmp_path / "key", rows=rows)
    for fresh in figures:
        committed = root / "figures" / "key" / fresh.name
        assert f"(figures/key/{fresh.name})" in section
        assert committed.stat().st_size < 100_000
        with Image.open(committed) as a, Image.open(fresh) as b:
            assert a.format == "PNG" and a.size == b.size
        ignored = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", str(committed)])
        assert ignored.returncode == 1, f"{committed} is ignored by git; it must be tracked"


def test_every_committed_evidence_table_matches_todays_evidence_configuration_and_code():
    """CI does not run the evidence scale (an hour); it checks that what is committed of it is current: each
    notebook with an evidence parameter file has a committed table made with that file and today's code."""
    from studylib.paths import notebook_names
    for nb in notebook_names():
        for name in C.param_files(nb, "evidence"):
            listing = C.static_claims(nb, name)  # the evidence configuration is valid and lists its claims
            assert listing is not None and len(listing) > 0
            path = C.committed_claims_path(nb, name)
            assert path.is_file(), f"no committed {path.name}: ./study run --scale evidence {nb}, then " \
                                   f"./study claims --save evidence {nb}"
            table = C.load_table_file(path)
            assert C.of_params(table, nb, name), f"{path} was made with other parameters than {name}.yaml"
            assert not C.is_stale(table, nb), f"{path} was made by other code (code version " \
                                              f"{table.get('code_version')} != {C.code_version(nb)}): re-run it"
            assert {c["id"] for c in table["claims"]} == {c.id for c in listing}


def test_every_decided_not_reproduced_paper_claim_says_why(tmp_path, monkeypatch):
    """Issue 31: each "not reproduced" the README lists (the lead scale's decided paper claims) carries one
    sentence of why (a real disagreement, the data or the scale): claim_registry's ``why_not_reproduced``."""
    from studylib.evaluation.verdicts import NOT_REPRODUCED
    from studylib.claims.registry import meta
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path / "empty-cache"))
    listing, judged, tables = P.page_rows()
    lead = P._lead(tables)
    missing = [f"{nb}:{cid}" for nb, cid, c, r, evidence in P._canonical(listing, judged[lead])
               if evidence == P.PAPER_EVIDENCE and r.verdict == NOT_REPRODUCED
               and not meta(nb, cid, c.expect.kind).why_not_reproduced.strip()]
    assert not missing, f"decided 'not reproduced' at {lead} without a why_not_reproduced sentence: {missing}"


def test_a_decisive_verdict_the_second_run_does_not_give_counts_as_inconclusive(monkeypatch, tmp_path):
    """"A verdict is evidence only if another machine gives the same one": a decisive row whose committed 2-thread
    comparison reads otherwise is marked not stable and counted as inconclusive (its own judgement unchanged); a
    row the comparison confirms, or a table re-run since (another p_adj), is left as judged."""
    from pathlib import Path
    from studylib.evaluation.verdicts import INCONCLUSIVE
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(P, "stability", lambda column: None)
    monkeypatch.setattr(P, "is_stale", lambda table, nb: False)  # the committed numbers, whatever today's code
    _, rows, _ = P.page_rows(["00_quickstart"])
    key, row = next((k, r) for k, r in rows["evidence"].items() if r.verdict == REPRODUCED)
    first = {"verdict": row.verdict, "label": row.judgement.label, "p_adj": row.p_adj}

    def comparison(second, first=first):
        return lambda column: ((Path("verdict-stability-evidence-x.json"), {key: {"first": first, "second": second}})
                               if column == "evidence" else None)

    monkeypatch.setattr(P, "stability", comparison({"verdict": INCONCLUSIVE, "label": "inconclusive (marginal)",
                                                    "p_adj": 0.02}))
    _, rows, _ = P.page_rows(["00_quickstart"])
    r = rows["evidence"][key]
    assert r.verdict == INCONCLUSIVE and r.judgement.verdict == REPRODUCED
    assert "not stable: the 2-thread run reads inconclusive (marginal), p_adj = 0.02" in r.cell()
    assert "counted as inconclusive" in r.cell()
    monkeypatch.setattr(P, "stability", comparison(dict(first)))  # confirmed
    assert P.page_rows(["00_quickstart"])[1]["evidence"][key].verdict == REPRODUCED
    monkeypatch.setattr(P, "stability", comparison({"verdict": INCONCLUSIVE, "label": "inconclusive", "p_adj": 0.3},
                                                   dict(first, p_adj=0.5)))  # compared another table
    assert P.page_rows(["00_quickstart"])[1]["evidence"][key].verdict == REPRODUCED


def test_an_inconclusive_verdict_the_second_run_decides_is_marked_not_stable(monkeypatch, tmp_path):
    """Issue 42, stability both ways: an inconclusive row (marginal here) that the 2-thread run decides is marked
    not stable too (it stays inconclusive); two inconclusive readings with different labels are no instability."""
    from pathlib import Path
    from studylib.evaluation.verdicts import INCONCLUSIVE
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(P, "stability", lambda column: None)
    monkeypatch.setattr(P, "is_stale", lambda table, nb: False)  # the committed numbers, whatever today's code
    nb = "02_batch_size_sweep"
    _, rows, _ = P.page_rows([nb])
    key, row = next((k, r) for k, r in rows["evidence"].items() if r.verdict == INCONCLUSIVE and r.p_adj is not None)
    first = {"verdict": row.verdict, "label": row.judgement.label, "p_adj": row.p_adj}

    def comparison(second):
        return lambda column: ((Path("verdict-stability-evidence-x.json"), {key: {"first": first, "second": second}})
                               if column == "evidence" else None)

    monkeypatch.setattr(P, "stability", comparison({"verdict": REPRODUCED, "label": "reproduced", "p_adj": 0.004}))
    r = P.page_rows([nb])[1]["evidence"][key]
    assert r.verdict == INCONCLUSIVE and "not stable: the 2-thread run reads reproduced, p_adj = 0.004" in r.cell()
    monkeypatch.setattr(P, "stability", comparison({"verdict": INCONCLUSIVE, "label": "inconclusive (marginal)",
                                                    "p_adj": 0.03}))
    assert not P.page_rows([nb])[1]["evidence"][key].unstable


def test_the_newest_committed_stability_comparison_is_of_the_committed_tables():
    """The committed 1-thread / 2-thread comparison of each scale compares the committed tables themselves: every
    claim it lists that the page judges has the page's label and adjusted p on its first side (else the tables
    were re-run since and the comparison must be made again)."""
    from studylib.paths import notebook_names
    for column in P.COLUMNS:
        found = P.stability(column)
        if found is None:
            continue
        path, pairs = found
        _, rows, _ = P.page_rows(sorted({nb for nb, _ in pairs} & set(notebook_names())))
        compared = 0
        for key, pair in pairs.items():
            row = rows[column].get(key)
            if row is None or row.judgement is None or row.stale or pair["first"].get("p_adj") is None:
                continue
            assert (pair["first"]["label"], pair["first"]["p_adj"]) == pytest.approx(
                (row.judgement.label, row.p_adj)), f"{path.name} compared another table of {key}: re-run it"
            compared += 1
        assert compared > 0, f"{path.name} compares none of the committed {column} tables"


def test_each_notebook_is_judged_by_the_newest_stability_file_that_covers_it(monkeypatch, tmp_path):
    """Stability files chained: the newest file and the earlier ones it names (``also``); a file that compares a
    notebook, or names it among those with no second run, supersedes the later-read files' rows of it; the other
    notebooks keep the earlier file's rows; a file not named is not read; a row names the second run its own
    file says it was."""
    import json
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    pair = {"first": {"verdict": "reproduced", "label": "reproduced", "p_adj": 0.001},
            "second": {"verdict": "inconclusive", "label": "inconclusive", "p_adj": 0.3}}
    old = {"second_page": "/tmp/c2", "notebooks": ["00", "01", "02"],
           "rows": [{"notebook": nb, "id": "x", **pair} for nb in ("00", "01", "02")]}
    new = {"second_page": "/tmp/c2", "notebooks": ["01"], "no_second_run": ["02"],
           "also": ["verdict-stability-evidence-2026-01-01.json"],
           "second_runs": {"01": "the 1-thread run of abc"}, "rows": [{"notebook": "01", "id": "x", **pair}]}
    (results / "verdict-stability-evidence-2026-01-01.json").write_text(json.dumps(old))
    (results / "verdict-stability-evidence-2025-12-01.json").write_text(json.dumps(
        {"second_page": "/tmp/c2", "notebooks": ["03"], "rows": [{"notebook": "03", "id": "x", **pair}]}))
    (results / "verdict-stability-evidence-2026-01-01b.json").write_text(json.dumps(new))
    monkeypatch.setattr(P, "project_root", lambda: tmp_path)
    path, pairs = P.stability("evidence")
    assert path.name.endswith("01b.json") and set(pairs) == {("00", "x"), ("01", "x")}
    assert pairs[("00", "x")]["file"].name.endswith("01-01.json") and pairs[("01", "x")]["file"] == path
    assert P._second_run(path, "01") == "the 1-thread run of abc" and P._second_run(path, "00") == "the 2-thread run"


def test_real_data_is_read_from_each_table_s_own_parameter_file():
    """Issue 42 counts the decided paper claims "on real data": a row is on real data when the parameter file of
    the table it comes from names a data set studylib reads from files, whatever the notebook's name says."""
    judged = lambda nb, name: P.Row(nb, "x", "greater", "judged", name)  # noqa: E731
    assert P.data_of("10_spe_omniglot", "evidence") == "omniglot"  # params/10/evidence.yaml: the subset
    assert P.data_of("10_spe_omniglot", "smoke") == "glyphs"  # the same notebook's smoke file: generated
    assert P.data_of("02_batch_size_sweep", "evidence") == "synthfs"
    assert P.data_of("01_episodes_pairs", "smoke") is None  # formulas: no data parameter
    assert P.on_real_data(judged("10_spe_omniglot", "evidence"))
    assert not P.on_real_data(judged("10_spe_omniglot", "smoke"))
    assert not P.on_real_data(judged("09_spe_synthetic", "evidence"))  # generated L shapes
    assert not P.on_real_data(P.Row("10_spe_omniglot", "x", "greater", "not run", "evidence"))  # nothing measured


def test_the_cost_sentence_adds_the_tables_own_seconds():
    used = {"a": [("evidence", {"seconds": 600.0})], "b": [("evidence", {"seconds": 1500.0}),
                                                           ("evidence-x", {"seconds": 300.0})],
            "c": [], "d": [("evidence", {})]}
    text = P._cost_sentence(used)
    assert "40 min of work" in text and "(2 notebooks;" in text  # (600 + 1500 + 300) / 60; d records nothing
    assert "the longest, b, 30 min" in text
    assert P._cost_sentence({"a": [("evidence", {})]}) == ""
