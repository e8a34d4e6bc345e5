"""./study results (issue 13): every run with notebook, method, data, parameters, status, time, commit, device
and headline accuracies; filters; CSV and LaTeX exports; reads only."""

from __future__ import annotations

import csv
import dataclasses
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from studylib import config, results
from studylib.runs.runner import run_lock, run_spec
from studylib.training.loop import Interrupted
from studylib.training.runstore import RunStore

sys.path.insert(0, str(Path(__file__).parent / "runs"))
from test_runner_guards import tiny_spec  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = RunStore(tmp_path_factory.mktemp("store"))
    old = config._CURRENT["notebook"]
    config._CURRENT["notebook"] = "00_quickstart"
    try:
        run_spec(tiny_spec(), store, progress=False)
        config._CURRENT["notebook"] = "99_other"
        other = tiny_spec()
        other = dataclasses.replace(other, name="pn", method="pn",
                                    train=dataclasses.replace(other.train, sampler="episodic", ways=4, shots=2,
                                                              queries=3, batches_per_epoch=4))
        with pytest.raises(Interrupted):
            run_spec(other, store, stop_after=4, progress=False)
    finally:
        config._CURRENT["notebook"] = old
    return store


def test_rows_show_status_provenance_and_accuracies(store):
    table = results.rows(store)
    assert [r.status for r in table] == ["finished", "interrupted"]
    done, cut = table
    assert done.notebook == "00_quickstart" and done.method == "nca" and re.fullmatch(r"tiny #[0-9a-f]{8}", done.data)
    assert "conv4" in done.params and "seed0" in done.params and done.device == "cpu"
    assert done.commit != "" and done.created[:2] == "20" and done.protocol.startswith("5-way 3q 20 ep")
    assert set(done.accuracies) == {"nearest_centroid/1", "nearest_centroid/2", "knn/1", "knn/2"}
    assert all(0 <= m <= 1 and c >= 0 for m, c in done.accuracies.values())
    assert cut.method == "pn" and cut.notebook == "-" and cut.accuracies == {} and "4w2s" in cut.params
    assert [r.method for r in results.rows(store, method="pn")] == ["pn"]
    assert [r.method for r in results.rows(store, notebook="00")] == ["nca"]
    assert results.rows(store, data="mini") == []


def test_a_run_whose_lock_is_held_is_running(store):
    [cut] = [r for r in results.rows(store) if r.method == "pn"]
    config._CURRENT["notebook"], old = "99_other", config._CURRENT["notebook"]
    lock = run_lock(store, store.run("x", {}).__class__(Path(cut.path), {}))
    config._CURRENT["notebook"] = old
    assert lock.acquire()
    try:
        [row] = results.rows(store, method="pn")
        assert row.status == "running" and row.notebook == "99_other"
    finally:
        lock.release()
    assert [r.status for r in results.rows(store, method="pn")] == ["interrupted"]


def test_csv_and_latex_exports(store, tmp_path):
    table = results.rows(store)
    rows = list(csv.DictReader(io.StringIO(results.to_csv(table))))
    assert [r["status"] for r in rows] == ["finished", "interrupted"]
    # percent, as in the table
    assert float(rows[0]["nearest_centroid/1 mean %"]) == pytest.approx(100 * table[0].accuracies["nearest_centroid/1"][0],
                                                                       rel=1e-3)
    assert rows[1]["nearest_centroid/1 mean %"] == "" and rows[0]["seed"] == "0"
    tex = results.to_latex(table)
    assert tex.startswith(r"\begin{tabular}{lllr" + "cccc}") and r"00\_quickstart" in tex and r"\pm" in tex
    assert tex.count(r"\\") == 3 and tex.rstrip().endswith(r"\end{tabular}")


def test_cli_writes_files_and_never_writes_into_the_store(store, tmp_path):
    before = sorted((p, p.stat().st_mtime_ns) for p in store.root.rglob("*"))
    out = subprocess.run([sys.executable, "-m", "studylib.results", "--store", str(store.root), "--csv",
                          str(tmp_path / "r.csv"), "--latex", str(tmp_path / "r.tex")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "r.csv").read_text().count("\n") == 3 and "tabular" in (tmp_path / "r.tex").read_text()
    shown = subprocess.run([sys.executable, "-m", "studylib.results", "--store", str(store.root), "--notebook",
                            "quickstart", "--per-seed"], capture_output=True, text=True)
    assert shown.returncode == 0 and shown.stdout.splitlines()[0].startswith("notebook")
    # the run's line, then (indented) its provenance and setting, and its accuracies
    lines = shown.stdout.splitlines()
    assert lines[1].split() == ["00_quickstart", "nca", "tiny", lines[1].split()[3], "0", "finished"]
    assert "nearest_centroid/1" in shown.stdout and all(x.startswith("    ") for x in lines[2:])
    assert sorted((p, p.stat().st_mtime_ns) for p in store.root.rglob("*")) == before


def _row(seed: int, means: dict[str, tuple[float, float]], lr: str = "lr0.05", status: str = "finished") -> results.Row:
    return results.Row(run=f"r{seed}", notebook="00_quickstart", method="nca", data="glyphs 28px",
                       params=f"conv4 shuffled ep4 bs64 {lr} seed{seed}", status=status, created="2026-11-26 03:00",
                       commit="abc", device="cpu", protocol="5-way 5q 300 ep" if means else "", accuracies=means,
                       seed=seed, config_key=lr, episodes=300)


def test_seeds_are_grouped_with_the_t_interval_over_seeds(capsys):
    """Default view: one row per configuration, mean over seeds ± Student-t 95% interval over the per-seed means
    (scipy's t interval, computed here), n seeds; one seed keeps its episode CI; a run still training is named."""
    from scipy import stats as sp
    a = [0.50, 0.56, 0.59]
    table = [_row(s, {"nearest_centroid/1": (m, 0.02), "nearest_centroid/5": (m + 0.1, 0.01)}) for s, m in enumerate(a)]
    table += [_row(0, {"nearest_centroid/1": (0.40, 0.03)}, lr="lr0.5"), _row(3, {}, status="running")]
    groups = results.group_rows(table)
    assert [(g.params, g.n) for g in groups] == [("conv4 shuffled ep4 bs64 lr0.05", 3), ("conv4 shuffled ep4 bs64 lr0.5", 1)]
    lo, hi = sp.t.interval(0.95, len(a) - 1, loc=sum(a) / 3, scale=sp.sem(a))
    est = groups[0].accuracies["nearest_centroid/1"]
    assert est.value == pytest.approx(sum(a) / 3) and est.ci95 == pytest.approx((hi - lo) / 2)
    assert groups[0].pending == ["seed 3 running"]
    assert groups[1].accuracies["nearest_centroid/1"].ci95 == pytest.approx(0.03)  # one seed: its episode CI
    for width in (80, 100):
        text = results.group_text_table(groups, width)
        assert max(map(len, text.splitlines())) <= width, text
        assert f"{100 * est.value:.1f} ± {100 * est.ci95:.1f}" in text and "seed 3 running" in text
    csv_rows = list(csv.DictReader(io.StringIO(results.groups_csv(groups))))
    assert csv_rows[0]["n seeds"] == "3" and csv_rows[0]["seeds"] == "0 1 2"
    assert float(csv_rows[0]["nearest_centroid/1 mean %"]) == pytest.approx(100 * est.value, rel=1e-3)
    assert float(csv_rows[0]["nearest_centroid/1 ci95 %"]) == pytest.approx(100 * est.ci95, rel=1e-3)
    tex = results.groups_latex(groups)
    body = tex.split(r"\midrule")[1].split(r"\bottomrule")[0].strip().splitlines()
    assert len(body) == 2 and f"${100 * est.value:.1f} \\pm {100 * est.ci95:.1f}$" in body[0]
    # seeds differ between the rows: a column of n; the 5-shot cell of the one-seed row is empty
    assert body[0].startswith("NCA (lr0.05) & 3 & ") and body[1].endswith("& --" + r" \\")


def test_help_prints_percent_once(capsys):
    with pytest.raises(SystemExit):
        results.main(["--help"])
    out = capsys.readouterr().out
    assert "95% CI" in out and "%%" not in out and "--per-seed" in out
