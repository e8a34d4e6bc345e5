"""The ./study script when runs overlap or die (issue 29 item 7): a killed (SIGKILL) ./study reference leaves a
temporary folder and cache that the next one removes; concurrent ./study runs of one notebook write separate
executed notebooks; a run waiting for another's training says so through the progress filter."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import copy_of_study, sigint_default
from studylib.progress import filter_run_log

NB = "00_quickstart"
FAKE = """#!/usr/bin/env bash
# papermill's arguments as ./study passes them: --cwd DIR INPUT OUTPUT ...
echo "$STUDYLIB_CACHE" > "$FAKE_LOG.$$"
case "$FAKE_MODE" in
    hang) head -c 2000 "$3" > "$4"; exec bash -c 'touch "$0"; sleep 120' "$FAKE_LOG.ready" ;;
    ok) cp "$3" "$4" ;;
    gate) touch "$FAKE_LOG.started.$$"; while [ ! -f "$FAKE_GO" ]; do sleep 0.1; done; echo "written by $$" > "$4" ;;
esac
"""


def _env(tmp_path, **set_):
    env = {k: v for k, v in os.environ.items() if k not in ("STUDYLIB_THREADS", "OMP_NUM_THREADS")}
    fake = tmp_path / "papermill"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    env.update({"PYTHONPATH": os.pathsep.join(sys.path), "STUDYLIB_PAPERMILL": str(fake),
                "FAKE_LOG": str(tmp_path / "log"), "TMPDIR": str(tmp_path / "tmp"),
                "STUDYLIB_CACHE": str(tmp_path / "cache"), **set_})
    (tmp_path / "tmp").mkdir()
    return env


def _start_reference(root, env, mode="hang"):
    """``./study reference NB`` with the fake executor in ``mode``, in a session of its own (a Ctrl-C or a kill
    reaches its whole group)."""
    return subprocess.Popen([str(root / "study"), "reference", NB], env={**env, "FAKE_MODE": mode},
                            start_new_session=True, preexec_fn=sigint_default, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _wait_for(path_glob, root, proc, seconds=120):
    deadline = time.time() + seconds
    while not list(root.glob(path_glob)):
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, f"no {path_glob}"
        time.sleep(0.1)


def test_a_reference_killed_with_sigkill_is_cleaned_by_the_next_one(repo, tmp_path):
    """Before: kill -9 left notebooks/.reference-*/ and a mktemp cache that no later run removed."""
    root = copy_of_study(repo, tmp_path, NB)
    env = _env(tmp_path)
    killed = _start_reference(root, env)
    _wait_for("log.ready", tmp_path, killed)
    os.killpg(killed.pid, signal.SIGKILL)  # no trap runs
    killed.communicate(timeout=60)
    [left] = (root / "notebooks").glob(".reference-*")
    [cache] = (tmp_path / "tmp").glob("study-reference-cache-*")
    assert (left / ".owner").read_text().split()[1] == str(cache)
    done = subprocess.run([str(root / "study"), "reference", NB], env={**env, "FAKE_MODE": "ok"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"removing notebooks/{left.name} (and its cache), left by a ./study reference that was killed" in done.stderr
    assert not list((root / "notebooks").glob(".reference-*")) and not cache.exists()
    assert not list((tmp_path / "tmp").iterdir())


def test_a_live_reference_keeps_its_folder(repo, tmp_path):
    root = copy_of_study(repo, tmp_path, NB)
    env = _env(tmp_path)
    live = _start_reference(root, env)
    try:
        _wait_for("log.ready", tmp_path, live)
        [mine] = (root / "notebooks").glob(".reference-*")
        other = subprocess.run([str(root / "study"), "reference", NB], env={**env, "FAKE_MODE": "ok"},
                               capture_output=True, text=True, timeout=300)
        assert other.returncode == 0 and "removing" not in other.stderr, other.stderr
        assert mine.is_dir() and (mine / ".owner").is_file()
    finally:
        os.killpg(live.pid, signal.SIGINT)  # its trap removes its own folder and cache
        live.communicate(timeout=60)
    assert not list((root / "notebooks").glob(".reference-*"))


@pytest.mark.slow  # three ./study runs, each with its pre-flight and claims page (about 30 s on an idle machine)
def test_concurrent_runs_of_one_notebook_write_separate_executed_notebooks(repo, tmp_path):
    """Before: both runs wrote out/smoke/<notebook>.ipynb (and its adapted-parameters file)."""
    root = copy_of_study(repo, tmp_path, NB)
    env = _env(tmp_path, FAKE_MODE="gate", FAKE_GO=str(tmp_path / "go"))
    first = subprocess.Popen([str(root / "study"), "run", NB], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        _wait_for("log.started.*", tmp_path, first, seconds=300)
        assert (root / "out" / "smoke" / f".{NB}.ipynb.running").read_text().strip() == str(first.pid)
        second = subprocess.Popen([str(root / "study"), "run", NB], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 300
        while len(list(tmp_path.glob("log.started.*"))) < 2:
            assert second.poll() is None, second.communicate()
            assert time.time() < deadline
            time.sleep(0.1)
    finally:
        (tmp_path / "go").touch()
    _, err1 = first.communicate(timeout=300)
    _, err2 = second.communicate(timeout=300)
    out = root / "out" / "smoke"
    a, b = (out / f"{NB}.ipynb").read_text(), (out / f"{NB}-2.ipynb").read_text()
    assert a != b and a.startswith("written by") and b.startswith("written by")
    assert f"{NB} (smoke) -> out/smoke/{NB}-2.ipynb (another run of it is writing out/smoke/{NB}.ipynb)" in err2
    assert f"-> out/smoke/{NB}-2.ipynb, figures/" in err2 and f"-> out/smoke/{NB}.ipynb, figures/" in err1
    assert not list(out.glob(".*.running"))  # the claims are released
    # a claim left by a run that died (kill -9: no trap) is taken over: the next run writes the usual file again
    probe = subprocess.Popen(["true"])
    probe.wait()
    (out / f".{NB}.ipynb.running").write_text(f"{probe.pid}\n")  # a pid that has exited
    again = subprocess.run([str(root / "study"), "run", NB], env=env, capture_output=True, text=True, timeout=300)
    assert f"-> out/smoke/{NB}.ipynb, figures/" in again.stderr, again.stderr
    assert not (out / f".{NB}.ipynb.running").exists()


def test_the_waiting_line_passes_the_progress_filter():
    """Before: a second run of a busy run printed nothing while it waited (the filter dropped the line)."""
    log = ["Executing Cell 10---------------------------------------\n",
           "studylib: waiting for run 00_quickstart-nca-ad8db90691af: another process trains it (host h, pid 7, "
           "notebook 00_quickstart); its result will be reused\n", "\n", "plain output of the notebook\n"]
    shown = io.StringIO()
    assert filter_run_log(iter(log), out=shown, interactive=False) == 1
    assert shown.getvalue() == log[1]
