"""The ./study script's surface and the thread setting (issue 13)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_of_study, sigint_default
from studylib import notebooks

REPO = Path(__file__).resolve().parent.parent

THREADS = "import studylib.training.loop, torch; print(torch.get_num_threads())"


def _env(**set_):
    env = {k: v for k, v in os.environ.items() if k not in ("STUDYLIB_THREADS", "OMP_NUM_THREADS")}
    env.update({"PYTHONPATH": os.pathsep.join(sys.path), **set_})
    return env


@pytest.mark.parametrize("env, threads", [({}, "1"), ({"STUDYLIB_THREADS": "2"}, "2"),
                                          ({"OMP_NUM_THREADS": "2"}, "2"),
                                          ({"OMP_NUM_THREADS": "2", "STUDYLIB_THREADS": "1"}, "1")])
def test_threads_follow_studylib_threads_then_omp_then_default(env, threads):
    out = subprocess.run([sys.executable, "-c", THREADS], env=_env(**env), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == threads


def test_bad_thread_setting_is_refused():
    out = subprocess.run([sys.executable, "-c", THREADS], env=_env(STUDYLIB_THREADS="two"), capture_output=True,
                         text=True)
    assert out.returncode != 0 and "STUDYLIB_THREADS='two' must be a positive integer" in out.stderr


def test_help_exits_0_and_prints_only_the_usage(repo):
    out = subprocess.run([str(repo / "study"), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("The study's entry point")
    assert "set -" not in out.stdout and "#" not in out.stdout and "./study list" in out.stdout
    bad = subprocess.run([str(repo / "study"), "bogus"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown command 'bogus'" in bad.stderr


def test_list_names_every_notebook_with_its_heading(repo):
    out = subprocess.run([str(repo / "study"), "list"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines] == notebooks.names()
    assert lines[0].split(None, 1)[1] == "Quickstart: NCA on the embedded glyph set"


def test_notebook_names_resolve_or_get_did_you_mean(repo):
    assert notebooks.resolve("00") == notebooks.resolve("quickstart") == "00_quickstart"
    assert notebooks.resolve("notebooks/00_quickstart.ipynb") == "00_quickstart"
    with pytest.raises(ValueError, match="did you mean 00_quickstart"):
        notebooks.resolve("00_quikstart")
    for cmd in ("run", "reference"):  # fails before papermill starts
        out = subprocess.run([str(repo / "study"), cmd, "quikstart"], capture_output=True, text=True)
        assert out.returncode == 2 and "did you mean 00_quickstart?" in out.stderr


# ------------------------------------------------------------------ ./study reference never loses a notebook

FAKE_PAPERMILL = """#!/usr/bin/env bash
# papermill's arguments as ./study reference passes them: --cwd DIR INPUT OUTPUT ...
echo "$STUDYLIB_CACHE" > "$FAKE_LOG"
case "$FAKE_MODE" in
    kill) head -c 2000 "$3" > "$4"; kill -KILL $$ ;;       # killed after its first write
    # interrupted (Ctrl-C) after its first write; the marker comes from the process that then sleeps, so a Ctrl-C
    # after it cannot land in the gap before the sleep (bash ignores a SIGINT whose child exited normally)
    hang) head -c 2000 "$3" > "$4"; exec bash -c 'touch "$0"; sleep 60' "$FAKE_LOG.ready" ;;
    ok) cp "$FAKE_RESULT" "$4" ;;
    # as the notebook does: its new reference into the staging folder, its claims table into the cache
    stage-*) mkdir -p "$STUDYLIB_REFERENCE_STAGE/00_quickstart" "$STUDYLIB_CACHE/claims/00_quickstart"
        echo '{"new": "reference"}' > "$STUDYLIB_REFERENCE_STAGE/00_quickstart/smoke.reference.json"
        echo '{"new": "claims"}' > "$STUDYLIB_CACHE/claims/00_quickstart/smoke.json"
        if [ "$FAKE_MODE" = stage-ok ]; then cp "$FAKE_RESULT" "$4"
        else head -c 2000 "$3" > "$4"; exec bash -c 'touch "$0"; sleep 60' "$FAKE_LOG.ready"; fi ;;
esac
"""
NB = "00_quickstart"


def _copy_of_repo(repo, tmp_path):
    """The files ./study reference NB needs, in a throwaway checkout, with a fake papermill."""
    root = copy_of_study(repo, tmp_path, NB)
    fake = tmp_path / "papermill"
    fake.write_text(FAKE_PAPERMILL)
    fake.chmod(0o755)
    return root, _env(STUDYLIB_PAPERMILL=str(fake), FAKE_LOG=str(tmp_path / "cache.txt"))


def _leftovers(root):
    return sorted(p.name for p in (root / "notebooks").iterdir() if p.name != f"{NB}.ipynb")


@pytest.mark.parametrize("mode", ["kill", "hang"])
def test_reference_killed_or_interrupted_leaves_the_notebook_unchanged(repo, tmp_path, mode):
    """Before: papermill wrote over notebooks/NB.ipynb itself (input = output), so a kill after its first
    write left the committed notebook without its outputs, and the mktemp cache stayed behind."""
    root, env = _copy_of_repo(repo, tmp_path)
    before = (root / "notebooks" / f"{NB}.ipynb").read_bytes()
    proc = subprocess.Popen([str(root / "study"), "reference", NB], env={**env, "FAKE_MODE": mode},
                            start_new_session=True, preexec_fn=sigint_default, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    if mode == "hang":  # Ctrl-C once the executor has written its first bytes
        import signal
        import time
        deadline = time.time() + 60
        ready = tmp_path / "cache.txt.ready"  # written after the first bytes, by the process that then hangs
        while not ready.exists() and proc.poll() is None:
            assert time.time() < deadline
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, err
    assert (root / "notebooks" / f"{NB}.ipynb").read_bytes() == before
    assert _leftovers(root) == []  # no half-written copy
    cache = (tmp_path / "cache.txt").read_text().strip()
    assert cache and not os.path.exists(cache)  # the trap removed the cache


def test_reference_replaces_the_notebook_only_after_success_without_injected_parameters(repo, tmp_path):
    import json
    root, env = _copy_of_repo(repo, tmp_path)
    nb = json.loads((root / "notebooks" / f"{NB}.ipynb").read_text(encoding="utf-8"))
    executed = json.loads(json.dumps(nb))
    executed["cells"][-1]["outputs"] = [{"name": "stdout", "output_type": "stream", "text": ["new run\n"]}]
    where = next(i for i, c in enumerate(nb["cells"]) if "parameters" in c["metadata"].get("tags", [])) + 1
    executed["cells"].insert(where, {"cell_type": "code", "execution_count": 3, "id": "x1", "outputs": [],
                                     "metadata": {"tags": ["injected-parameters"]}, "source": ["seed = 0\n"]})
    (tmp_path / "executed.ipynb").write_text(json.dumps(executed, indent=1), encoding="utf-8")
    out = subprocess.run([str(root / "study"), "reference", NB], capture_output=True, text=True,
                         env={**env, "FAKE_MODE": "ok", "FAKE_RESULT": str(tmp_path / "executed.ipynb")})
    assert out.returncode == 0, out.stderr
    got = json.loads((root / "notebooks" / f"{NB}.ipynb").read_text(encoding="utf-8"))
    del executed["cells"][where]
    executed["metadata"].pop("widgets", None)  # stale widget state: strip-widgets, as before
    assert got == executed
    assert _leftovers(root) == [] and not os.path.exists((tmp_path / "cache.txt").read_text().strip())


@pytest.mark.parametrize("mode", ["stage-hang", "stage-ok"])
def test_reference_changes_the_notebooks_reference_and_claims_table_only_with_a_run_that_succeeds(repo, tmp_path,
                                                                                                   mode):
    """Issue 40: the notebook wrote params/NB/smoke.reference.json itself while it ran, and the claims table was
    copied over params/NB/smoke.claims.json with cp, so a Ctrl-C late in the run left the committed reference
    new and the notebook old. Now both are staged and installed with the notebook, after it succeeded."""
    import signal
    import time
    root, env = _copy_of_repo(repo, tmp_path)
    files = {f"params/{NB}/smoke.reference.json": b'{"old": "reference"}\n',
             f"params/{NB}/smoke.claims.json": b'{"old": "claims"}\n'}
    for f, data in files.items():
        (root / f).write_bytes(data)
    files[f"notebooks/{NB}.ipynb"] = (root / "notebooks" / f"{NB}.ipynb").read_bytes()
    (tmp_path / "executed.ipynb").write_bytes(files[f"notebooks/{NB}.ipynb"])
    proc = subprocess.Popen([str(root / "study"), "reference", NB], start_new_session=True, preexec_fn=sigint_default,
                            env={**env, "FAKE_MODE": mode, "FAKE_RESULT": str(tmp_path / "executed.ipynb")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if mode == "stage-hang":  # Ctrl-C once the notebook has written its new reference and claims table
        deadline = time.time() + 60
        while not (tmp_path / "cache.txt.ready").exists() and proc.poll() is None:
            assert time.time() < deadline
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    now = {f: (root / f).read_bytes() for f in files}
    if mode == "stage-hang":
        assert proc.returncode != 0 and now == files
    else:
        assert proc.returncode == 0, err
        assert now[f"params/{NB}/smoke.reference.json"] == b'{"new": "reference"}\n'
        assert now[f"params/{NB}/smoke.claims.json"] == b'{"new": "claims"}\n'
    assert _leftovers(root) == [] and sorted(p.name for p in (root / "params" / NB).iterdir()) == \
        ["smoke.claims.json", "smoke.reference.json", "smoke.yaml"]


def test_no_committed_notebook_holds_papermills_injected_parameters(repo):
    for path in sorted((repo / "notebooks").glob("*.ipynb")):
        tags = [c["metadata"].get("tags", []) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]
        assert not any(notebooks.INJECTED in t for t in tags), path.name
        assert sum("parameters" in t for t in tags) == 1, path.name


def test_strip_injected_parameters_removes_only_that_cell(tmp_path):
    cells = [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "a = 1", "outputs": [],
              "execution_count": 1},
             {"cell_type": "code", "metadata": {"tags": ["injected-parameters"]}, "source": "a = 2", "outputs": [],
              "execution_count": 2},
             {"cell_type": "markdown", "metadata": {}, "source": "é"}]
    nb = {"cells": cells, "metadata": {"z": 1, "a": 2}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False), encoding="utf-8")
    assert notebooks.strip_injected_parameters(path)
    expected = {**nb, "cells": [cells[0], cells[2]]}
    assert path.read_text(encoding="utf-8") == json.dumps(expected, indent=1, sort_keys=True, ensure_ascii=False)
    assert not notebooks.strip_injected_parameters(path)  # nothing left to strip: unchanged


FAKE_RUN = """#!/usr/bin/env bash
# papermill as ./study run calls it: --cwd DIR INPUT OUTPUT ...; logs its start and end, fails for FAIL_NB
name=$(basename "$3" .ipynb)
echo "start $name $(date +%s.%N)" >> "$FAKE_LOG"
# with FAKE_WAIT, wait (at most 120 s) until another notebook has started: only a side-by-side run gets one
for _ in $(seq 1200); do
    [ -n "$FAKE_WAIT" ] && [ "$(grep -c '^start' "$FAKE_LOG")" -lt 2 ] || break
    sleep 0.1
done
# with FAKE_SLEEP, take that long: two notebooks run side by side overlap
[ -z "${FAKE_SLEEP:-}" ] || sleep "$FAKE_SLEEP"
echo "end $name $(date +%s.%N)" >> "$FAKE_LOG"
[ "$name" != "$FAIL_NB" ] || { echo "boom in $name"; exit 1; }
cp "$3" "$4"
"""


def _fake_study(repo: Path, tmp_path: Path, nbs: tuple[str, ...], files: dict[str, str]) -> tuple[Path, Path, Path]:
    """A copy of ./study with the notebooks ``nbs`` and ``files`` (``{relative path: text}``; the text ``"copy"``
    copies the repository's file), the real .venv and the fake papermill :data:`FAKE_RUN`: ``(root, fake
    papermill, its log)``."""
    import shutil
    root = tmp_path / "repo"
    for nb in nbs:
        (root / "params" / nb).mkdir(parents=True)
    (root / "notebooks").mkdir()
    for f in ("study", "pyproject.toml", *(f"notebooks/{nb}.ipynb" for nb in nbs)):
        shutil.copy2(repo / f, root / f)
    for f, text in files.items():
        if text == "copy":
            shutil.copy2(repo / f, root / f)
        else:
            (root / f).write_text(text)
    (root / ".venv").symlink_to((repo / ".venv").resolve())
    fake = tmp_path / "papermill"
    fake.write_text(FAKE_RUN)
    fake.chmod(0o755)
    return root, fake, tmp_path / "log.txt"


def _times(log: Path) -> dict[tuple[str, str], float]:
    """``{("start" | "end", notebook): time}`` from the fake papermill's log."""
    times = {}
    for line in log.read_text().split("\n"):
        if line:
            what, nb, t = line.split()
            times[(what, nb)] = float(t)
    return times


def test_run_jobs_runs_notebooks_side_by_side_and_names_each_line(repo, tmp_path):
    """``./study run --jobs 2`` runs two notebooks at a time (each fake papermill waits for the other to start),
    each output line prefixed with its notebook, and fails when one fails."""
    jobs, overlap = "2", True
    nbs = ("00_quickstart", "13_infopatch")
    root, fake, log = _fake_study(repo, tmp_path, nbs, {f"params/{nb}/smoke.yaml": "copy" for nb in nbs})
    env = _env(STUDYLIB_PAPERMILL=str(fake), FAKE_LOG=str(log), FAIL_NB="13_infopatch",
               STUDYLIB_CACHE=str(tmp_path / "cache"), FAKE_WAIT="1" if overlap else "")
    out = subprocess.run([str(root / "study"), "run", "--jobs", jobs, *nbs], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 1, out.stderr  # 13 failed
    times = _times(log)
    side_by_side = times[("start", nbs[1])] < times[("end", nbs[0])]
    assert side_by_side == overlap  # one after the other: the first ended before the second started
    if jobs == "2":
        assert "[13_infopatch] study: 13_infopatch FAILED" in out.stderr
        assert "[00_quickstart] study: 00_quickstart done" in out.stderr
    bad = subprocess.run([str(root / "study"), "run", "--jobs", "0", nbs[0]], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "--jobs needs a whole number" in bad.stderr


@pytest.mark.parametrize("threads", ["1", "cores"])
def test_evidence_runs_as_many_notebooks_at_a_time_as_the_cores_hold_at_its_threads(repo, tmp_path, threads):
    """Without --jobs the evidence scale runs cores // threads notebooks at a time (at most 2, at least 1): with
    STUDYLIB_THREADS=2 on the 2-core machine, two notebooks side by side ran 4 threads on 2 cores and an NCA run
    of 00 took 82-93 s instead of 14 s one notebook at a time (2026-12-02). With as many threads as cores the
    notebooks run one after the other; with one thread on a machine of 2 or more cores, side by side."""
    cores = os.cpu_count() or 1
    if threads == "1" and cores < 2:
        pytest.skip("side by side needs 2 cores")
    nbs = ("00_quickstart", "13_infopatch")
    root, fake, log = _fake_study(repo, tmp_path, nbs, {f"params/{nb}/evidence.yaml": "scale: evidence\n"
                                                        for nb in nbs})
    overlap = threads == "1"
    env = _env(STUDYLIB_PAPERMILL=str(fake), FAKE_LOG=str(log), FAIL_NB="", FAKE_WAIT="1" if overlap else "",
               FAKE_SLEEP="" if overlap else "6", STUDYLIB_CACHE=str(tmp_path / "cache"),
               STUDYLIB_THREADS=str(cores) if threads == "cores" else "1")
    out = subprocess.run([str(root / "study"), "run", "--scale", "evidence", *nbs], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    times = _times(log)
    first, second = sorted(nbs, key=lambda nb: times[("start", nb)])
    assert (times[("start", second)] < times[("end", first)]) == overlap


def test_run_says_not_run_for_a_notebook_whose_shared_data_is_absent_and_goes_on(repo, tmp_path):
    """Issue 31: an evidence configuration that reads the Omniglot subset beside the checkout
    (../shared/data/omniglot/) is not run where the subset is absent: one clear line, no failure, and the other
    notebooks run. Before: the pre-flight's missing folder failed the whole ./study run --scale evidence."""
    import shutil
    import yaml
    root = tmp_path / "repo"
    nbs = ("00_quickstart", "12_set2model_omniglot")
    for nb in nbs:
        (root / "params" / nb).mkdir(parents=True)
    (root / "notebooks").mkdir()
    for f in ("study", "pyproject.toml", *(f"notebooks/{nb}.ipynb" for nb in nbs)):
        shutil.copy2(repo / f, root / f)
    (root / "params" / nbs[0] / "evidence.yaml").write_text("scale: evidence\n")
    ev = yaml.safe_load((repo / "params" / nbs[1] / "evidence.yaml").read_text())
    assert ev["data_root"].startswith("../shared/data/omniglot/")
    ev["data_root"] = "../shared/data/omniglot/absent-in-this-test.zip"
    (root / "params" / nbs[1] / "evidence.yaml").write_text(yaml.safe_dump(ev))
    (root / ".venv").symlink_to((repo / ".venv").resolve())
    fake = tmp_path / "papermill"
    fake.write_text(FAKE_RUN)
    fake.chmod(0o755)
    env = _env(STUDYLIB_PAPERMILL=str(fake), FAKE_LOG=str(tmp_path / "log.txt"), FAIL_NB="", FAKE_WAIT="",
               STUDYLIB_CACHE=str(tmp_path / "cache"))
    out = subprocess.run([str(root / "study"), "run", "--scale", "evidence", "--jobs", "1", *nbs], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert ("study check 12_set2model_omniglot (evidence): not run: needs the Omniglot subset "
            "(../shared/data/omniglot/)") in out.stderr
    assert "study: 12_set2model_omniglot not run" in out.stderr and "00_quickstart done" in out.stderr
    assert "start 12_set2model_omniglot" not in (tmp_path / "log.txt").read_text()


def test_every_module_the_study_script_runs_is_a_command(tmp_path):
    """Each ``python -m studylib.X`` in ``./study`` runs ``main`` (a module without a ``__main__`` block would
    exit 0 having done nothing: ``./study claims`` did so for one commit of the move to studylib.claims)."""
    import re
    script = (REPO / "study").read_text()
    modules = sorted(set(re.findall(r"-m (studylib[\w.]*)", script)))
    assert {"studylib.claims.page", "studylib.claims.power", "studylib.preflight", "studylib.results"} <= set(modules)
    for m in modules:
        path = REPO / Path(*m.split(".")).with_suffix(".py")
        assert re.search(r'^if __name__ == "__main__":', path.read_text(), re.M), f"{m} has no __main__ block"
    out = tmp_path / "claims.md"
    done = subprocess.run([sys.executable, "-m", "studylib.claims.page", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "STUDYLIB_CACHE": str(tmp_path / "c")})
    assert done.returncode == 0, done.stderr
    assert out.read_text().startswith("# Claims of the study") and f"claims: wrote {out}" in done.stdout
