"""Uncertainty of trained results: estimates over training seeds and paired differences on shared episodes.

A few-shot accuracy has two sources of noise: the evaluation episodes (how many, which ones) and the training
run (initialisation, batch order; and, across machines, floating-point chaos, which acts like another seed).
A CI over the episodes of one run says nothing about the second. So every trained number the study reports
is an :class:`Estimate` over training seeds:

* each seed gives one value (its mean over episodes, or a per-seed effect such as a paired difference);
* the point estimate is the mean of the per-seed values;
* its 95% interval is Student's ``t_{0.975, n-1} * s / sqrt(n)`` over the ``n`` seeds (``s`` their sample
  standard deviation, floored at each seed's episode standard error: :attr:`Estimate.sd`). It carries both sources of noise: each training seed is evaluated on episodes of its
  own (:func:`studylib.evaluation.episode_seed`), so the seed-to-seed spread holds the training run's noise
  and the episode sampling's. Each seed's CI over its episodes is also reported (:attr:`Estimate.episode_ci95`:
  the evaluation noise alone);
* :func:`p_value` is the two-sided t-test behind that interval; :mod:`studylib.evaluation.verdicts` builds each
  claim's tests on the same statistic and adjusts them over the notebook's family (Holm-Shaffer);
* with one seed the only uncertainty available is the episodes': ``1.96 * std / sqrt(E)`` (seed 000,
  Sec. 3.1). :mod:`studylib.evaluation.verdicts` never calls a difference reproduced from one seed.

Differences between two methods are measured **paired**: seed ``i`` of one method is paired with seed ``i`` of
the other, and both are evaluated on the episodes of training seed ``i``, so the per-episode difference
cancels the episode difficulty within a seed while the seeds' spread still carries the episode sampling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from scipy.special import stdtr, stdtrit  # Student's t CDF and quantile; scipy.stats costs ~1.5 s of import

Z95 = 1.959963984540054  # two-sided 95% normal quantile (the papers' "1.96")


def t_quantile(level: float, dof: float) -> float:
    """Two-sided ``level`` quantile of Student's t (``t_quantile(0.95, 2) = 4.303``, ``(0.99, 2) = 9.925``;
    ``dof = math.inf``: the normal quantile, 1.960 at 95%)."""
    if dof < 1:
        raise ValueError(f"Student's t needs at least 1 degree of freedom, got {dof}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"a confidence level lies in (0, 1), got {level}")
    return float(stdtrit(dof, 0.5 + level / 2.0))


def t_cdf(t: float, dof: float) -> float:
    """Student's t CDF with ``dof`` degrees of freedom (``t`` may be +-inf; = scipy.stats.t.cdf)."""
    if dof < 1:
        raise ValueError(f"Student's t needs at least 1 degree of freedom, got {dof}")
    return float(stdtr(dof, t))


def t95(dof: int) -> float:
    """Two-sided 95% quantile of Student's t with ``dof`` degrees of freedom (``t95(2) = 4.303``;
    = scipy.stats.t.ppf(0.975, dof), tests/evaluation/test_stats.py)."""
    return t_quantile(0.95, dof)


def episode_ci95(values: torch.Tensor | np.ndarray | Sequence[float]) -> tuple[float, float]:
    """Mean and CI95 half-width ``1.96 * std / sqrt(E)`` of per-episode values (seed 000, Sec. 3.1)."""
    v = np.asarray(torch.as_tensor(values, dtype=torch.float64).cpu()).ravel()
    if v.size == 0:
        raise ValueError("no episodes: the estimate of an empty sequence is undefined")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{int((~np.isfinite(v)).sum())} of {v.size} episode values are not finite")
    sd = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return float(v.mean()), Z95 * sd / math.sqrt(v.size)


@dataclass(frozen=True)
class Estimate:
    """A trained quantity with its uncertainty (fractions for accuracies).

    Attributes:
        value: mean of the per-seed values.
        ci95: half-width of the 95% interval: Student's t over seeds when there are at least two, else the
            episode CI of the one run.
        seeds: the per-seed values, in seed order.
        episode_ci95: each seed's CI95 over its episodes averaged over seeds as a variance (root mean square;
            the evaluation noise alone; 0 when the values do not come from episodes).
        episodes: evaluation episodes per seed (0 when not from episodes).
        sd_floor: a stated floor of the per-seed standard deviation for a measure that does not come from
            episodes (a clustering index, an effect size of a fit): the noise one seed's value carries at
            least, stated where the measure is made (0: none stated).
    """

    value: float
    ci95: float
    seeds: tuple[float, ...]
    episode_ci95: float = 0.0
    episodes: int = 0
    sd_floor: float = 0.0

    @property
    def n_seeds(self) -> int:
        return len(self.seeds)

    @property
    def spread(self) -> float:
        """Sample standard deviation of the per-seed values (0 with one seed)."""
        return float(np.std(self.seeds, ddof=1)) if len(self.seeds) > 1 else 0.0

    @property
    def sd(self) -> float:
        """The per-seed standard deviation behind the interval and the t-test: the sample spread, floored at
        each seed's own episode standard error (``episode_ci95 / 1.96``) and at a stated floor (``sd_floor``).

        A seed's value is a mean over its own episodes, so its variance is at least that sampling variance;
        with 2 or 3 seeds the sample spread alone is often far below it by chance (identical per-seed values
        gave "+0.3 ± 0.0" and p = 0 on one machine, "+0.0 ± 0.5" on another). The floor is known from
        hundreds of episodes, so it is the better-measured of the two where the spread falls below it.
        """
        return max(self.spread, self.episode_ci95 / Z95, self.sd_floor)

    def halfwidth(self, level: float = 0.95) -> float:
        """Half-width of the two-sided ``level`` interval: Student's t over the seeds (with :attr:`sd`), or the
        normal episode interval of a single run."""
        if self.n_seeds >= 2:
            return t_quantile(level, self.n_seeds - 1) * self.sd / math.sqrt(self.n_seeds)
        return self.episode_ci95 * t_quantile(level, math.inf) / Z95

    @property
    def lo(self) -> float:
        return self.value - self.ci95

    @property
    def hi(self) -> float:
        return self.value + self.ci95

    def fmt(self, scale: float = 100.0, digits: int = 1, signed: bool = False) -> str:
        """``"62.5 ± 0.4"`` (accuracies in percent by default; ``signed`` for differences)."""
        sign = "+" if signed else ""
        return f"{self.value * scale:{sign}.{digits}f} ± {self.ci95 * scale:.{digits}f}"

    def as_dict(self) -> dict[str, Any]:
        out = {"value": self.value, "ci95": self.ci95, "seeds": list(self.seeds),
               "episode_ci95": self.episode_ci95, "episodes": self.episodes}
        if self.sd_floor:
            out["sd_floor"] = self.sd_floor
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Estimate":
        return cls(float(d["value"]), float(d["ci95"]), tuple(float(x) for x in d["seeds"]),
                   float(d.get("episode_ci95", 0.0)), int(d.get("episodes", 0)), float(d.get("sd_floor", 0.0)))


def over_seeds(values: Sequence[float], episode_ci95s: Sequence[float] | None = None, episodes: int = 0,
               sd_floor: float = 0.0) -> Estimate:
    """The :class:`Estimate` of per-seed values (see the module docstring for the interval).

    Args:
        values: one value per training seed.
        episode_ci95s: each seed's CI95 over its evaluation episodes (needed when there is one seed).
        episodes: evaluation episodes per seed, for the record.
        sd_floor: a stated floor of the per-seed standard deviation (:attr:`Estimate.sd_floor`), for values
            that do not come from episodes.
    """
    v = [float(x) for x in values]
    if not v:
        raise ValueError("an estimate needs at least one seed's value")
    if not all(math.isfinite(x) for x in v):
        raise ValueError(f"non-finite per-seed values {v}: a run diverged or an evaluation was empty")
    ep = [float(x) for x in episode_ci95s] if episode_ci95s is not None else []
    if ep and len(ep) != len(v):
        raise ValueError(f"{len(v)} seed values but {len(ep)} episode CIs")
    if not (math.isfinite(sd_floor) and sd_floor >= 0):
        raise ValueError(f"sd_floor must be a finite number >= 0, got {sd_floor}")
    # the seeds' episode errors averaged as variances (root mean square): the floor of one seed's variance
    ep_mean = float(np.sqrt(np.mean(np.square(ep)))) if ep else 0.0
    est = Estimate(float(np.mean(v)), ep_mean, tuple(v), ep_mean, int(episodes), float(sd_floor))
    if len(v) >= 2:  # Student's t over the seeds, the spread floored (Estimate.sd)
        est = Estimate(est.value, est.halfwidth(0.95), est.seeds, ep_mean, int(episodes), float(sd_floor))
    elif sd_floor and not ep:
        est = Estimate(est.value, Z95 * sd_floor, est.seeds, 0.0, int(episodes), float(sd_floor))
    return est


def _per_seed(per_seed: Sequence[torch.Tensor | np.ndarray]) -> list[np.ndarray]:
    out = [np.asarray(torch.as_tensor(a, dtype=torch.float64).cpu()).ravel() for a in per_seed]
    if not out:
        raise ValueError("no seeds given")
    return out


def accuracy(per_seed: Sequence[torch.Tensor | np.ndarray]) -> Estimate:
    """Accuracy over seeds from ``[E]`` per-episode accuracies of each seed's model."""
    runs = _per_seed(per_seed)
    pairs = [episode_ci95(a) for a in runs]
    return over_seeds([m for m, _ in pairs], [c for _, c in pairs], episodes=len(runs[0]))


def paired_difference(a: Sequence[torch.Tensor | np.ndarray], b: Sequence[torch.Tensor | np.ndarray]) -> Estimate:
    """``A - B`` over seeds, each seed's value the mean per-episode difference on the episodes both share.

    ``a[i]`` and ``b[i]`` are the ``[E]`` per-episode accuracies of seed ``i`` of two models evaluated on the
    same episodes (those of training seed ``i``: same base seed, split and protocol), so the episode difficulty
    cancels.
    """
    ra, rb = _per_seed(a), _per_seed(b)
    if len(ra) != len(rb):
        raise ValueError(f"paired difference needs the same seeds on both sides, got {len(ra)} and {len(rb)}")
    diffs = []
    for i, (x, y) in enumerate(zip(ra, rb)):
        if x.shape != y.shape:
            raise ValueError(f"seed {i}: {x.shape[0]} vs {y.shape[0]} episodes; a paired difference needs the "
                             "same evaluation episodes on both sides (same eval seed, split and protocol)")
        diffs.append(x - y)
    pairs = [episode_ci95(d) for d in diffs]
    return over_seeds([m for m, _ in pairs], [c for _, c in pairs], episodes=len(diffs[0]))


def combine(fn: Callable[..., float], *estimates: Estimate) -> Estimate:
    """An :class:`Estimate` of ``fn`` applied seed by seed (``fn(a_i, b_i, ...)`` for seed ``i``).

    For effects that are not a plain difference of episodes, e.g. the difference of two gains, a slope over a
    sweep, a minimum over settings, or a distance to the paper's number. Every input must have the same seeds.

    The floor of the result's spread (its episode error) is propagated seed by seed by the delta method:
    ``floor_i^2 = sum_k (dfn/dx_k)^2 floor_k^2`` at the seed's values (central differences), averaged over seeds.
    So a shift ``a - c`` keeps ``a``'s floor, a difference of independent terms adds them in quadrature, a
    linear interpolation weighs its two points, and a minimum takes the floor of the term that is smallest for
    that seed (not all terms together). The terms are treated as independent: for a difference of terms
    measured on the same episodes (positively correlated) that overstates the floor, the conservative side; for
    a sum of such terms it understates it. Stated floors (``sd_floor``) propagate the same way. A claim about
    *every* one of several effects is not a ``combine`` of a minimum (the mean of a per-seed minimum is biased
    low: it tests E[min] rather than min E): use :class:`AllOf`.
    """
    n = {e.n_seeds for e in estimates}
    if len(n) != 1:
        raise ValueError(f"combine needs the same number of seeds in every estimate, got {sorted(n)}")
    n_seeds = n.pop()
    values = [float(fn(*(e.seeds[i] for e in estimates))) for i in range(n_seeds)]
    ep = [e.episode_ci95 for e in estimates]
    fl = [e.sd_floor for e in estimates]
    ep_out, fl_out = [], []
    for i in range(n_seeds):
        x = [e.seeds[i] for e in estimates]
        grad = []
        for k in range(len(x)):
            h = 1e-6 * max(1.0, abs(x[k]))
            up, down = list(x), list(x)
            up[k] += h
            down[k] -= h
            grad.append((float(fn(*up)) - float(fn(*down))) / (2 * h))
        ep_out.append(math.sqrt(sum((g * f) ** 2 for g, f in zip(grad, ep))))
        fl_out.append(math.sqrt(sum((g * f) ** 2 for g, f in zip(grad, fl))))
    return over_seeds(values, ep_out, episodes=max(e.episodes for e in estimates), sd_floor=float(np.mean(fl_out)))


@dataclass(frozen=True)
class AllOf:
    """Several effects a claim is about together ("DyCE at 30% masking beats 10%, 50% and 70%": one paired
    difference per other value), judged by :mod:`studylib.evaluation.verdicts` as an intersection-union test:
    reproduced only if every effect is shown on the paper's side, reversed if any one is shown on the other
    (Bonferroni over them). The table shows the smallest effect."""

    effects: tuple[Estimate, ...]

    def __post_init__(self) -> None:
        if not self.effects:
            raise ValueError("AllOf needs at least one effect")
        if len({e.n_seeds for e in self.effects}) != 1:
            raise ValueError("the effects of an AllOf need the same seeds")

    @property
    def n_seeds(self) -> int:
        return self.effects[0].n_seeds

    @property
    def seeds(self) -> tuple[float, ...]:
        return self.worst.seeds

    @property
    def worst(self) -> Estimate:
        """The effect with the smallest mean (what the table shows)."""
        return min(self.effects, key=lambda e: e.value)

    def fmt(self, scale: float = 100.0, digits: int = 1, signed: bool = False) -> str:
        return f"smallest of {len(self.effects)}: {self.worst.fmt(scale, digits, signed)}"

    def as_dict(self) -> dict[str, Any]:
        return {"all_of": [e.as_dict() for e in self.effects], "seeds": list(self.worst.seeds)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AllOf":
        return cls(tuple(Estimate.from_dict(x) for x in d["all_of"]))


def measured_from_dict(m: Any) -> Any:
    """A stored measurement: an :class:`Estimate`, an :class:`AllOf`, or a plain value (an ``equal`` claim's)."""
    if isinstance(m, dict) and "all_of" in m:
        return AllOf.from_dict(m)
    if isinstance(m, dict) and "seeds" in m:
        return Estimate.from_dict(m)
    return m


def difference(a: Estimate, b: Estimate) -> Estimate:
    """``A - B`` paired by seed, when the per-episode values are not at hand (``combine`` of a minus)."""
    return combine(lambda x, y: x - y, a, b)


def p_value(effect: Estimate) -> float | None:
    """Two-sided p-value of the one-sample t-test of ``H0: effect = 0`` over the per-seed values.

    ``t = mean / (s / sqrt(n))`` with ``n - 1`` degrees of freedom and ``s`` = :attr:`Estimate.sd` (the seed
    spread floored at the episode error): the test behind the Student-t interval of :func:`over_seeds` (the
    interval excludes 0 exactly when ``p < 0.05``). With all seeds equal and no episode error the test
    degenerates: ``p = 0`` for a non-zero mean, ``1`` for zero. None with fewer than 2 seeds (no test exists).
    """
    n = effect.n_seeds
    if n < 2:
        return None
    s = effect.sd
    if s == 0.0:
        return 0.0 if effect.value != 0.0 else 1.0
    t = effect.value / (s / math.sqrt(n))
    return float(2.0 * stdtr(n - 1, -abs(t)))  # = 2 scipy.stats.t.sf(|t|, n - 1)
