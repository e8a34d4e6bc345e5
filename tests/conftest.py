"""Shared fixtures: a private cache folder per test session so tests never touch the user's runs."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent

# One cache for the whole test session unless the caller chose one: the controller makes it before xdist starts
# its workers, which inherit the variable, and so do the notebook kernels of nbval and the check scale. Data sets
# are generated once there, and two workers that need the same run meet in its run store (the run's lock makes
# the second wait and reuse what the first trained). The process that made the folder removes it at the end.
_OWN_CACHE = "STUDYLIB_CACHE" not in os.environ
if _OWN_CACHE:
    os.environ["STUDYLIB_CACHE"] = tempfile.mkdtemp(prefix="studylib-test-cache-")


def pytest_unconfigure(config):
    if _OWN_CACHE and not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        shutil.rmtree(os.environ["STUDYLIB_CACHE"], ignore_errors=True)


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


def pytest_collection_modifyitems(config, items):
    """Schedule for ``pytest -n 2 --dist loadgroup --no-loadscope-reorder`` (``./study test``).

    A test file stays on one worker (its module fixtures are built once), a notebook's nbval cells stay on one
    worker in order (they share one kernel), and each check-scale notebook is a unit of its own. The long units
    go first (the notebooks' nbval, then the check scale, then the unit-test files), so that the two workers end
    together on short units instead of one worker finishing a notebook alone.
    """
    def unit(item) -> tuple[int, str]:
        path = Path(str(item.fspath))
        rel = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name
        if path.suffix == ".ipynb":
            return 0, rel
        if path.name == "test_check_scale.py" and hasattr(item, "callspec"):
            return 1, f"check-{item.callspec.id}"
        return 2, rel

    units = {id(item): unit(item) for item in items}
    items.sort(key=lambda item: units[id(item)][0])  # stable: collection order within each rank
    for item in items:
        item.add_marker(pytest.mark.xdist_group(name=units[id(item)][1]))
