"""Shared fixtures: a private cache folder per test session so tests never touch the user's runs."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent

def sigint_default() -> None:
    """``preexec_fn`` of a child that a test sends Ctrl-C: SIGINT back to its default, as at a terminal. A shell
    that started pytest in the background (``nohup ... &``) leaves SIGINT ignored; an ignored signal is inherited,
    and bash can neither trap nor reset it, so a Ctrl-C test would hang there."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def copy_of_study(repo: Path, tmp_path: Path, notebook: str) -> Path:
    """The files ``./study reference NOTEBOOK`` needs, in a throwaway checkout under ``tmp_path`` (the real
    notebook is never at risk), sharing ``repo``'s ``.venv``."""
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    (root / "params" / notebook).mkdir(parents=True)
    for f in ("study", "pyproject.toml", f"notebooks/{notebook}.ipynb", f"params/{notebook}/smoke.yaml"):
        shutil.copy2(repo / f, root / f)
    (root / ".venv").symlink_to((repo / ".venv").resolve())
    return root


# One cache for the whole test session unless the caller chose one: the controller makes it before xdist starts
# its workers, which inherit the variable, and so do the notebook kernels of nbval and the check scale. Data sets
# are generated once there, and two workers that need the same run meet in its run store (the run's lock makes
# the second wait and reuse what the first trained). The process that made the folder removes it at the end.
_OWN_CACHE = "STUDYLIB_CACHE" not in os.environ
if _OWN_CACHE:
    os.environ["STUDYLIB_CACHE"] = tempfile.mkdtemp(prefix="studylib-test-cache-")


def label_trap(n: int):
    """A ``Batch`` of ``n`` images whose labels raise when read: what a label-free objective is handed in its
    tests (BECLR, SimCLR)."""
    from studylib.data.samplers import Batch

    class LabelTrap(Batch):
        @property
        def labels(self):  # type: ignore[override]
            raise AssertionError("the loss of a label-free objective read batch.labels")

        @labels.setter
        def labels(self, value) -> None:
            pass

    return LabelTrap(torch.arange(n))


def pytest_unconfigure(config):
    if _OWN_CACHE and not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        shutil.rmtree(os.environ["STUDYLIB_CACHE"], ignore_errors=True)


def _omniglot_zip() -> Path | None:
    """The real Omniglot subset for integration tests: ``$STUDYLIB_OMNIGLOT_ZIP``, else ``../shared/data/omniglot/``
    beside the checkout (as CI lays it out); None when absent."""
    env = os.environ.get("STUDYLIB_OMNIGLOT_ZIP")
    candidates = [Path(env)] if env else []
    candidates.append(REPO.parent / "shared" / "data" / "omniglot" / "images_background_small1.zip")
    return next((p for p in candidates if p.is_file()), None)


OMNIGLOT_ZIP = _omniglot_zip()
# the tests that read it skip cleanly without it: `from conftest import OMNIGLOT_ZIP, needs_omniglot`
needs_omniglot = pytest.mark.skipif(OMNIGLOT_ZIP is None, reason="images_background_small1.zip not found: set "
                                                                 "STUDYLIB_OMNIGLOT_ZIP or provide ../shared/data/omniglot/")


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread per test: the suite may run on 2 workers, and timings stay comparable."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture
def repo() -> Path:
    return REPO


CHECK_SCALE = "tests/test_check_scale.py::"


BROWSER_TEST = "test_jupyterlab_browser.py"


def pytest_collection_modifyitems(config, items):
    """The long units first: the notebooks' nbval, then the check scale, then the unit-test files (a stable sort,
    so the cells of a notebook keep their order), so that the two workers end together on short units instead of
    one worker finishing a notebook alone (``./study test`` runs ``--no-loadscope-reorder``). The JupyterLab
    browser test comes after the check scale, before the unit-test files: by then the nbval of notebooks 00 and
    90 has left their runs in the session's cache (the notebooks it runs in the browser load them instead of
    training; a run still training elsewhere is waited for through its lock), and the other worker works
    through the unit tests meanwhile."""
    def rank(item) -> float:
        path = Path(str(item.fspath))
        if path.name == BROWSER_TEST:
            return 1.5
        return 0 if path.suffix == ".ipynb" else 1 if path.name == "test_check_scale.py" else 2

    items.sort(key=rank)


class _Timeline:
    """``STUDYLIB_TEST_TIMELINE=FILE``: a line per test start and end (worker, event, wall clock, node id), so
    ``benchmarks/suite_times.py --timeline FILE`` can show when each worker ran what and where it waited (JUnit
    XML holds durations only). A plugin, not conftest hooks: those would see only the items under tests/, not the
    notebooks' nbval cells."""

    def __init__(self, path: str, worker: str) -> None:
        self.path, self.worker = path, worker

    def _write(self, event: str, nodeid: str) -> None:
        import time
        with open(self.path, "a") as f:  # one short write per line: O_APPEND keeps the workers' lines whole
            f.write(f"{self.worker}\t{event}\t{time.time():.3f}\t{nodeid}\n")

    def pytest_runtest_logstart(self, nodeid, location):
        self._write("start", nodeid)

    def pytest_runtest_logfinish(self, nodeid, location):
        self._write("end", nodeid)


# Free disk space a whole run needs (its shared cache and pytest's temporary folders): `./study test` from a fresh
# clone peaked at 2.5 GB (2026-11-29; `df` every 10 s), the cache 2.3 GB of it. Stop 37's CI failed three
# training steps when the disk filled; this says so before any test runs. STUDYLIB_TEST_MIN_FREE_GB overrides it.
FULL_RUN_FREE_GB = 3.0


def free_space_problem(folders: list[str], need_gb: float) -> str | None:
    """A one-paragraph refusal when a folder's file system has less than ``need_gb`` GB free, else None."""
    for folder in dict.fromkeys(folders):
        existing = next(p for p in (Path(folder).absolute(), *Path(folder).absolute().parents) if p.exists())
        free = shutil.disk_usage(existing).free / 1e9  # a cache folder named but not made yet: its parent's disk
        if free < need_gb:
            return (f"{folder} has {free:.1f} GB free; the suite needs about {need_gb:.1f} GB there (its run cache and "
                    f"temporary folders: 2.5 GB measured from a fresh clone). Free some space, or point "
                    f"STUDYLIB_CACHE and TMPDIR at a disk with room (STUDYLIB_TEST_MIN_FREE_GB=0 skips this check).")
    return None


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller, once, before xdist starts its workers
        full = any(Path(a.split("::")[0]).resolve() == REPO / "notebooks" for a in config.args)
        raw = os.environ.get("STUDYLIB_TEST_MIN_FREE_GB", str(FULL_RUN_FREE_GB if full else 0.5))
        try:
            need = float(raw)
        except ValueError:
            need = float("nan")
        if not need >= 0:  # NaN included
            problem = (f"STUDYLIB_TEST_MIN_FREE_GB={raw!r}: give the free disk space the suite needs in GB, e.g. 3 "
                       f"(0 skips the check)")
        else:
            problem = free_space_problem([os.environ["STUDYLIB_CACHE"], tempfile.gettempdir()], need)
        if problem:
            if _OWN_CACHE:  # pytest_unconfigure does not run after a refusal here
                shutil.rmtree(os.environ["STUDYLIB_CACHE"], ignore_errors=True)
            raise pytest.UsageError(problem)
    path = os.environ.get("STUDYLIB_TEST_TIMELINE")
    controller = not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))
    if path and not controller:  # xdist's controller replays its workers' hooks: the workers write
        # the worker's id from xdist itself: PYTEST_XDIST_WORKER is inherited by a pytest that a test starts
        worker = getattr(config, "workerinput", {}).get("workerid", "main")
        config.pluginmanager.register(_Timeline(path, worker), "studylib-timeline")


def pytest_xdist_make_scheduler(config, log):
    """``./study test``'s two workers: a test file is one unit (its module fixtures are built once), so is a
    notebook's nbval cells (they share one kernel and must run in order on one worker), and each check-scale
    notebook is a unit of its own. (xdist's ``loadgroup`` marks do not reach pytest 9's node ids.)"""
    from xdist.scheduler import LoadScopeScheduling

    class FileOrCheckNotebook(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid if nodeid.startswith(CHECK_SCALE) else nodeid.split("::", 1)[0]

    return FileOrCheckNotebook(config, log)
