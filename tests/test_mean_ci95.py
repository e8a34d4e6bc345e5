"""The CI95 every table reports: ``1.96 x`` the standard error of the mean (seed 000, Sec. 3.1), against SciPy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from studylib.utils import mean_ci95


@pytest.mark.parametrize("n", [2, 7, 1000])
def test_mean_ci95_is_1_96_standard_errors(n):
    x = np.random.default_rng(n).random(n)
    m, ci = mean_ci95(torch.tensor(x, dtype=torch.float32))
    assert m == pytest.approx(x.mean(), rel=1e-6)
    assert ci == pytest.approx(1.96 * stats.sem(x), rel=1e-5)  # sem: ddof=1


def test_mean_ci95_of_one_value_and_of_none():
    assert mean_ci95([0.25]) == (0.25, 0.0)
    with pytest.raises(ValueError, match="empty"):
        mean_ci95([])
