"""Shared fixtures: a private cache folder per test session so tests never touch the user's runs."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent

# Every test process (xdist workers included) caches generated data and runs in its own temporary folder
# unless the caller chose one; the glyph set is generated once per session there.
os.environ.setdefault("STUDYLIB_CACHE", tempfile.mkdtemp(prefix="studylib-test-cache-"))


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
