"""SPE (seed 002, Appendix B): the variance transforms, against softplus written independently in float64.

Kills the audit's SP01/SP02 mutants (issue 10): ``exp`` instead of softplus for ``var_x``, and ``|eps|`` (or any
other transform) for ``sigma_eps^2 = softplus(eps)``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from studylib.methods.spe import GaussianHead, SPEMethod


def _softplus64(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)  # log(1 + e^x), exact in float64


def test_gaussian_head_variance_is_softplus_of_the_raw_outputs_plus_the_floor():
    raw = torch.tensor([[0.3, -1.0, -6.0, 0.0, 2.5, -0.7]])            # mean 3 values, raw variance 3 values
    head = GaussianHead(nn.Identity(), dim=3, min_var=1e-6)
    mu, var = head(raw)
    torch.testing.assert_close(mu, raw[:, :3])
    expected = _softplus64(raw[:, 3:].double().numpy()) + 1e-6
    np.testing.assert_allclose(var.double().numpy(), expected, rtol=1e-6)
    # exp would give 1.0 at raw 0 and 12.18 at 2.5, softplus 0.693 and 2.579
    assert abs(float(var[0, 0]) - np.log(2.0)) < 1e-5


def test_sigma_eps2_is_softplus_of_eps_also_for_negative_eps():
    m = SPEMethod(nn.Identity(), None, dim=4, support_size=None)
    eps = torch.tensor([-3.0, -0.5, 0.0, 1.5])
    with torch.no_grad():
        m.eps.copy_(eps)
    np.testing.assert_allclose(m.sigma_eps2.double().detach().numpy(), _softplus64(eps.double().numpy()),
                               rtol=1e-6)
    # |eps| would give softplus(3) = 3.05 instead of softplus(-3) = 0.0486 in the first dimension
    assert float(m.sigma_eps2[0].detach()) < 0.05
