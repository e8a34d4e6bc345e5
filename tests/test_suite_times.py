"""The suite's own tools: benchmarks/suite_times.py's timeline (the units of tests/conftest.py's scheduler, per worker,
in the order run) and conftest's refusal of a run without the disk space it needs."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location("suite_times", REPO / "benchmarks" / "suite_times.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_timeline_groups_a_workers_tests_into_its_units_with_their_start_and_end(tmp_path):
    st = _module()
    rows = [("gw0", "start", 100.0, "notebooks/00_quickstart.ipynb::Cell 0"),
            ("gw0", "end", 101.0, "notebooks/00_quickstart.ipynb::Cell 0"),
            ("gw1", "start", 100.5, "tests/test_check_scale.py::test_check_scale_runs[01_episodes_pairs]"),
            ("gw0", "start", 101.5, "notebooks/00_quickstart.ipynb::Cell 1"),
            ("gw0", "end", 130.0, "notebooks/00_quickstart.ipynb::Cell 1"),
            ("gw1", "end", 120.0, "tests/test_check_scale.py::test_check_scale_runs[01_episodes_pairs]"),
            ("gw1", "start", 120.0, "tests/test_cli.py::test_a"), ("gw1", "end", 125.0, "tests/test_cli.py::test_a"),
            ("gw1", "start", 125.0, "tests/test_cli.py::test_b"), ("gw1", "end", 126.0, "tests/test_cli.py::test_b")]
    path = tmp_path / "timeline.tsv"
    path.write_text("".join(f"{w}\t{e}\t{t:.3f}\t{n}\n" for w, e, t, n in rows) + "a torn line\n")
    assert st.timeline(path) == {"gw0": [("notebooks/00_quickstart.ipynb", 0.0, 30.0)],
                                 "gw1": [("check 01_episodes_pairs", 0.5, 20.0), ("tests/test_cli.py", 20.0, 26.0)]}


def test_the_timeline_plugin_writes_a_start_and_an_end_line_per_test_notebook_cells_included(tmp_path):
    """A notebook's nbval cells are outside tests/: the plugin must see them too (conftest hooks would not)."""
    nb = tmp_path / "nb.ipynb"
    nb.write_text('{"cells": [{"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [], '
                  '"source": ["x = 1"]}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    path = tmp_path / "timeline.tsv"
    test = ("tests/test_suite_times.py::test_timeline_groups_a_workers_tests_into_its_units_with_their_start_"
            "and_end")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "--nbval-lax",
                           test, str(nb)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "STUDYLIB_TEST_TIMELINE": str(path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln.split("\t") for ln in path.read_text().splitlines()]
    assert [(w, e) for w, e, _, _ in lines] == [("main", "start"), ("main", "end")] * 2
    assert float(lines[1][2]) >= float(lines[0][2])
    assert lines[0][3] == lines[1][3] and lines[2][3] == lines[3][3]  # a start and an end per test
    ids = {lines[0][3], lines[2][3]}
    assert test in ids and any(i.endswith("::Cell 0") for i in ids - {test})


def test_a_run_without_the_disk_space_it_needs_is_refused_before_any_test(tmp_path):
    """Stop 37's CI: a full disk failed three training steps with tracebacks. Now pytest refuses at once."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                           "tests/test_suite_times.py::test_timeline_groups_a_workers_tests_into_its_units_with_"
                           "their_start_and_end"], cwd=REPO, capture_output=True, text=True,
                          env={**{k: v for k, v in os.environ.items() if k != "STUDYLIB_CACHE"},  # its own
                               "STUDYLIB_TEST_MIN_FREE_GB": "1e9"})  # a petabyte
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error: nothing ran
    assert "GB free; the suite needs about 1000000000.0 GB there" in proc.stderr
    assert "STUDYLIB_CACHE and TMPDIR" in proc.stderr and "passed" not in proc.stdout
    cache = proc.stderr.split("ERROR: ", 1)[1].split(" has ", 1)[0]
    assert "studylib-test-cache-" in cache and not Path(cache).exists()  # the session's own cache is removed
    for bad in ("3GB", "-1", "nan"):  # a bound that is not a number of GB >= 0 is refused, naming the variable
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "--co",
                               "tests/test_suite_times.py"], cwd=REPO, capture_output=True, text=True,
                              env={**os.environ, "STUDYLIB_TEST_MIN_FREE_GB": bad})
        assert proc.returncode == 4 and f"STUDYLIB_TEST_MIN_FREE_GB='{bad}': give the free disk" in proc.stderr
    import conftest
    assert conftest.free_space_problem([str(tmp_path)], 0.0) is None
    # a cache folder that does not exist yet (./study gpu-check names one for its inner pytest): its disk is asked
    assert conftest.free_space_problem([str(tmp_path / "not" / "made")], 0.0) is None
    assert "not/made has" in conftest.free_space_problem([str(tmp_path / "not" / "made")], 1e9)
