"""The ./study script's surface and the thread setting (issue 13)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from studylib import notebooks

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
