"""The shared Sinkhorn solver (studylib.numerics.ot): marginals, a slow reference, POT, and bf16 autocast (issue 9).

The autocast tests run on the CPU (``torch.autocast("cpu", dtype=torch.bfloat16)``), which exercises the same
dtype rules as CUDA autocast: before the fix, DyCE.assign crashed in the solver's in-place write-back
("Index put requires the source and destination dtypes match, got BFloat16 ... Float").
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from studylib.evaluation.opta import opta, opta_classifier, opta_nearest_classifier
from studylib.methods.dyce import DyCE
from studylib.numerics.ot import sinkhorn_log, sinkhorn_reference

BF16 = dict(device_type="cpu", dtype=torch.bfloat16)


def _problem(e: int = 3, m: int = 5, n: int = 8, scale: float = 1.0, dtype=torch.float64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    cost = scale * torch.rand(e, m, n, generator=g, dtype=dtype)
    a = torch.rand(e, m, generator=g, dtype=dtype) + 0.5
    a = a / a.sum(1, keepdim=True)
    b = torch.rand(e, n, generator=g, dtype=dtype) + 0.5
    b = b / b.sum(1, keepdim=True)
    return cost, a, b


@pytest.mark.parametrize("eps,scale", [(0.1, 1.0), (0.05, 100.0)])  # scaling-domain path, log-domain path
def test_output_marginals_match_targets(eps: float, scale: float) -> None:
    cost, a, b = _problem(scale=scale)
    plan = sinkhorn_log(cost, a, b, eps, max_iter=5000, tol=1e-10)
    torch.testing.assert_close(plan.sum(2), a, atol=1e-9, rtol=0)
    torch.testing.assert_close(plan.sum(1), b, atol=1e-9, rtol=0)
    assert bool((plan >= 0).all())


@pytest.mark.parametrize("iters", [1, 7, 200])
def test_matches_slow_reference_loop(iters: int) -> None:
    """Fixed iterations (tol=0) equal the plain loop of column then row normalisations, episode by episode."""
    cost, a, b = _problem(scale=2.0)
    plan = sinkhorn_log(cost, a, b, 0.2, max_iter=iters, tol=0.0)
    for i in range(cost.shape[0]):
        ref = sinkhorn_reference(cost[i], a[i], b[i], 0.2, iters)
        torch.testing.assert_close(plan[i], ref, atol=1e-12, rtol=1e-9)


@pytest.mark.skipif(importlib.util.find_spec("ot") is None, reason="POT is not installed")
def test_matches_pot_sinkhorn() -> None:
    import ot
    cost, a, b = _problem(e=2, m=4, n=6)
    plan = sinkhorn_log(cost, a, b, 0.05, max_iter=1000, tol=1e-9)
    for i in range(2):
        ref = ot.sinkhorn(a[i].numpy(), b[i].numpy(), cost[i].numpy(), 0.05, method="sinkhorn_log",
                          numItermax=1000, stopThr=1e-9, warn=False)
        np.testing.assert_allclose(plan[i].numpy(), ref, atol=1e-10, rtol=1e-7)


def test_low_precision_inputs_are_solved_in_float32() -> None:
    cost, a, b = _problem(dtype=torch.float32)
    cost16, b16 = cost.bfloat16(), b.bfloat16()
    ref = sinkhorn_log(cost16.float(), a, b16.float(), 0.1, 100, 1e-6)
    out = sinkhorn_log(cost16, a, b16, 0.1, 100, 1e-6)
    assert ref.dtype == out.dtype == torch.float32
    torch.testing.assert_close(out, ref, atol=0, rtol=0)


@pytest.mark.parametrize("tol", [0.0, 1e-4])
def test_under_bf16_autocast_matches_fp32(tol: float) -> None:
    """Episodes converging at different iterations exercise the in-place write-back that crashed."""
    cost, a, b = _problem(e=6, dtype=torch.float32)
    cost[::2] *= 5.0                               # two groups converge at different checks
    ref = sinkhorn_log(cost, a, b, 0.1, 500, tol)
    with torch.autocast(**BF16):
        out = sinkhorn_log(cost, a, b, 0.1, 500, tol)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, atol=0, rtol=0)


def _memory(seed: int = 0) -> tuple[DyCE, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mem = DyCE(16, size=64, partitions=4, k=2, epsilon=0.05, sinkhorn_iters=10, seed=seed)
    for _ in range(4):
        mem.update(torch.randn(16, 16, generator=g))
    assert bool(mem.initialised)
    return mem, F.normalize(torch.randn(32, 16, generator=g), dim=1)


def test_dyce_assign_under_bf16_autocast_matches_fp32() -> None:
    mem, z = _memory()
    ref = mem.assign(z)
    with torch.autocast(**BF16):
        out = mem.assign(z)
        mem_bf = DyCE(16, size=64, partitions=4, k=2)
        mem_bf.load_state_dict(mem.state_dict())
        mem_bf.update(z.bfloat16())                # the full path (ii) under autocast with bf16 embeddings
    assert torch.equal(out, ref)
    assert bool((mem_bf.labels >= 0).all())


def test_dyce_step_under_bf16_autocast_runs() -> None:
    mem, z = _memory(1)
    with torch.autocast(**BF16):
        views = [torch.nn.Linear(16, 16)(z[:16]), torch.nn.Linear(16, 16)(z[16:])]
        assert views[0].dtype == torch.bfloat16
        out = mem.step(views)
    assert out[0].shape == (16 * 3, 16) and out[0].dtype == torch.bfloat16


@pytest.mark.parametrize("shots", [1, 5])
def test_opta_under_bf16_autocast_matches_fp32(shots: int) -> None:
    g = torch.Generator().manual_seed(3)
    support = torch.randn(4, 5, shots, 32, generator=g)
    query = torch.randn(4, 20, 32, generator=g)
    ref = [opta(support, query), opta_classifier(support, query), opta_nearest_classifier(support, query)]
    with torch.autocast(**BF16):
        out = [opta(support, query), opta_classifier(support, query), opta_nearest_classifier(support, query)]
    for r, o in zip(ref, out):
        assert o.dtype == torch.float32
        torch.testing.assert_close(o, r, atol=0, rtol=0)


@pytest.mark.parametrize("spread", [0.5, 3.0])  # max C / eps = 10 (scaling domain) and 60 (log domain)
def test_without_host_sync_the_plan_is_bit_identical(spread: float) -> None:
    """``host_sync=False`` (DyCE on a GPU) runs both domains and picks on the device the one the cost's range
    selects: the same bits as the host-side choice, on either side of the limit."""
    g = torch.Generator().manual_seed(3)
    cost = spread * torch.rand(2, 7, 5, generator=g)
    cost[:, 0, 0], cost[:, 1, 1] = 0.0, spread
    a, b = torch.full((2, 7), 1 / 7), torch.full((2, 5), 1 / 5)
    want = sinkhorn_log(cost, a, b, 0.05, max_iter=10, tol=0.0)
    got = sinkhorn_log(cost, a, b, 0.05, max_iter=10, tol=0.0, host_sync=False)
    assert torch.equal(got, want)
    with pytest.raises(ValueError, match="tol=0"):
        sinkhorn_log(cost, a, b, 0.05, max_iter=10, tol=1e-4, host_sync=False)
