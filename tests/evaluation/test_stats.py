"""Estimates over seeds and paired differences, against scipy's t interval and loops written the slow way."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from studylib.evaluation import stats


def test_t95_matches_tables():
    # Student's t two-sided 95% quantiles from printed tables.
    assert stats.t95(1) == pytest.approx(12.706, abs=1e-3)
    assert stats.t95(2) == pytest.approx(4.303, abs=1e-3)
    assert stats.t95(4) == pytest.approx(2.776, abs=1e-3)
    from scipy.stats import t  # the library quantile t95 replaces (scipy.special is lighter to import)
    for dof in (1, 2, 3, 5, 9, 29, 99, 10_000):
        assert stats.t95(dof) == pytest.approx(t.ppf(0.975, dof), rel=1e-12)
    with pytest.raises(ValueError):
        stats.t95(0)


def test_over_seeds_is_scipys_t_interval():
    values = [0.61, 0.64, 0.58, 0.66]
    est = stats.over_seeds(values)
    lo, hi = scipy.stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=scipy.stats.sem(values))
    assert est.value == pytest.approx(np.mean(values))
    assert est.lo == pytest.approx(lo) and est.hi == pytest.approx(hi)
    assert est.spread == pytest.approx(np.std(values, ddof=1))
    assert est.n_seeds == 4


def test_one_seed_falls_back_to_the_episode_ci():
    acc = torch.tensor([0.6, 0.8, 1.0, 0.4, 0.6])
    est = stats.accuracy([acc])
    sd = float(np.std(acc.numpy().astype(np.float64), ddof=1))
    assert est.value == pytest.approx(0.68)
    assert est.ci95 == pytest.approx(1.959964 * sd / math.sqrt(5), rel=1e-6)
    assert est.n_seeds == 1 and est.spread == 0.0 and est.episodes == 5


def test_paired_difference_equals_per_seed_loop():
    g = torch.Generator().manual_seed(0)
    a = [torch.rand(50, generator=g) for _ in range(3)]
    b = [torch.rand(50, generator=g) for _ in range(3)]
    est = stats.paired_difference(a, b)
    per_seed = []
    for x, y in zip(a, b):  # the slow way
        total = 0.0
        for i in range(len(x)):
            total += float(x[i]) - float(y[i])
        per_seed.append(total / len(x))
    assert list(est.seeds) == pytest.approx(per_seed)
    # the episode CI is that of the per-episode differences, averaged over seeds as a variance (root mean square)
    ep = math.sqrt(np.mean([(1.959964 * np.std((x - y).double().numpy(), ddof=1) / math.sqrt(50)) ** 2
                            for x, y in zip(a, b)]))
    assert est.episode_ci95 == pytest.approx(ep, rel=1e-6)
    # Student's t over seeds, the per-seed sd floored at the episode standard error (Estimate.sd)
    sd = max(np.std(per_seed, ddof=1), ep / 1.959964)
    ref = scipy.stats.t.interval(0.95, 2, loc=np.mean(per_seed), scale=sd / math.sqrt(3))
    assert (est.lo, est.hi) == pytest.approx(ref, rel=1e-5)
    assert stats.p_value(est) == pytest.approx(2 * scipy.stats.t.sf(abs(np.mean(per_seed)) / (sd / math.sqrt(3)), 2))


def test_paired_difference_refuses_unshared_episodes():
    with pytest.raises(ValueError, match="same evaluation episodes"):
        stats.paired_difference([torch.zeros(10)], [torch.zeros(12)])
    with pytest.raises(ValueError, match="same seeds"):
        stats.paired_difference([torch.zeros(10)] * 2, [torch.zeros(10)] * 3)


def test_combine_applies_seed_by_seed():
    a = stats.over_seeds([1.0, 2.0, 4.0])
    b = stats.over_seeds([0.5, 1.0, 1.0])
    ratio = stats.combine(lambda x, y: x / y, a, b)
    assert list(ratio.seeds) == [2.0, 2.0, 4.0]
    assert list(stats.difference(a, b).seeds) == [0.5, 1.0, 3.0]
    with pytest.raises(ValueError, match="same number of seeds"):
        stats.combine(lambda x, y: x - y, a, stats.over_seeds([1.0, 2.0]))


def test_estimates_refuse_non_finite_and_empty_values():
    with pytest.raises(ValueError, match="non-finite"):
        stats.over_seeds([0.5, float("nan")])
    with pytest.raises(ValueError, match="empty"):
        stats.episode_ci95([])
    with pytest.raises(ValueError, match="not finite"):
        stats.accuracy([torch.tensor([0.2, float("nan")])])


def test_estimate_round_trips_and_formats():
    est = stats.over_seeds([0.1, 0.2, 0.3], [0.01, 0.02, 0.03], episodes=100)
    assert stats.Estimate.from_dict(est.as_dict()) == est
    assert est.fmt() == f"20.0 ± {100 * est.ci95:.1f}"
    assert stats.over_seeds([-0.012, -0.01]).fmt(signed=True).startswith("-1.1 ±")


def test_two_seed_interval_and_p_value_by_hand():
    # seeds 0.01, 0.03: mean 0.02, s = 0.02 / sqrt(2), s / sqrt(2) = 0.01, t = 2 on 1 degree of freedom.
    # t_{0.975,1} = 12.7062 (tables); Student's t with 1 dof is Cauchy: p = 1 - (2 / pi) * atan(2) = 0.29517.
    e = stats.over_seeds([0.01, 0.03])
    assert e.ci95 == pytest.approx(12.7062047 * 0.01, rel=1e-6)
    assert stats.p_value(e) == pytest.approx(1 - 2 / math.pi * math.atan(2), rel=1e-9)
    # the p-value is the t-test behind the interval: the interval excludes 0 exactly when p < 0.05
    for seeds in ([0.05, 0.04, 0.06], [0.01, -0.02, 0.04, 0.03], [0.2, 0.21]):
        e = stats.over_seeds(seeds)
        assert stats.p_value(e) == pytest.approx(scipy.stats.ttest_1samp(seeds, 0.0).pvalue, rel=1e-9)
        assert (stats.p_value(e) < 0.05) == (e.lo > 0 or e.hi < 0)
    assert stats.p_value(stats.over_seeds([0.3])) is None  # one seed: no test
    assert stats.p_value(stats.over_seeds([0.1, 0.1])) == 0.0 and stats.p_value(stats.over_seeds([0, 0])) == 1.0


def test_combine_floor_by_the_delta_method_for_shifts_differences_interpolation_and_minimum():
    # each input's episode floor: a 0.02, b 0.01, c 0.03 (CI95 units); per-seed values chosen so the argmin of
    # min(a, b, c) is b for seed 0, c for seed 1, a for seed 2
    a = stats.over_seeds([0.50, 0.40, 0.10], [0.02] * 3)
    b = stats.over_seeds([0.20, 0.60, 0.30], [0.01] * 3)
    c = stats.over_seeds([0.30, 0.20, 0.40], [0.03] * 3)
    assert stats.combine(lambda x: x - 0.3, a).episode_ci95 == pytest.approx(0.02)  # a shift keeps its floor
    assert stats.combine(lambda x, y: x - y, a, b).episode_ci95 == pytest.approx(math.hypot(0.02, 0.01))
    # interpolation half way between two points: 0.5^2 weights
    interp = stats.combine(lambda x, y, z: x - 0.5 * (y + z), a, b, c)
    assert interp.episode_ci95 == pytest.approx(math.sqrt(0.02 ** 2 + 0.25 * 0.01 ** 2 + 0.25 * 0.03 ** 2))
    # the minimum takes the floor of the smallest term per seed (b, c, a), averaged as a variance: not all three
    m = stats.combine(lambda *d: min(d), a, b, c)
    assert list(m.seeds) == [0.20, 0.20, 0.10]
    assert m.episode_ci95 == pytest.approx(math.sqrt((0.01 ** 2 + 0.03 ** 2 + 0.02 ** 2) / 3))
    assert m.episode_ci95 < math.sqrt(0.02 ** 2 + 0.01 ** 2 + 0.03 ** 2)  # what the old root-sum-square gave
    # 06's min(gain1 - gain5, gain1): the gain difference's floor where it is the smaller term
    diff = stats.over_seeds([0.01, 0.02, 0.03], [0.0063] * 3)
    gain1 = stats.over_seeds([0.05, 0.06, 0.07], [0.0080] * 3)
    assert stats.combine(min, diff, gain1).episode_ci95 == pytest.approx(0.0063)
    # stated floors propagate the same way
    s1 = stats.over_seeds([1.0, 2.0, 3.0], sd_floor=0.3)
    s2 = stats.over_seeds([0.0, 1.0, 1.0], sd_floor=0.4)
    assert stats.combine(lambda x, y: x - y, s1, s2).sd_floor == pytest.approx(0.5)
    assert stats.Estimate.from_dict(s1.as_dict()) == s1
    with pytest.raises(ValueError, match="sd_floor"):
        stats.over_seeds([1.0, 2.0], sd_floor=-1.0)
