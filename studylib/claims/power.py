"""Seeds to decide: a power analysis of every claim from a pilot table (issue 31), ``./study power``.

For each measured claim of a notebook's saved table (the pilot: the committed smoke table by default, or an
evidence table), the number of training seeds at which the claim's verdict test (:mod:`verdicts`) reaches 80%
power, holding the pilot's mean effect, at the level Holm's first step asks of it: ``DECIDE_ALPHA / m``, ``m`` the
size of the notebook's family. That level is the strictest a claim can meet (later Holm steps are looser), so
in that respect the seeds are an upper bound. The spread is planned with the upper 80% confidence limit of the
pilot's (:func:`planning_sd`): a spread from 3 seeds is itself noisy (the reviewer measured spreads at 10 seeds
3-5x the 3-seed pilot's on notebook 13), and planning with its point value predicts too few seeds; so does a
pilot effect that was large by chance (this is post-hoc power: re-estimate from the evidence run itself,
``--pilot evidence``).

The test aimed at is the one the pilot's effect points to (:func:`aimed_at`): a directional claim's two-sided
difference test when the effect lies outside its no-effect band, else its no-effect test; for ``noninferior``
and ``within`` claims the test on the side of the margin the effect lies on. It plans for a test, not a verdict:
a true effect between 0 and the band can end in either reading (verdicts.py). A claim whose pilot effect sits
near the edge of its band needs more seeds than any affordable run (more than :data:`AFFORDABLE`): the page
says so.

Powers are those of the verdicts' own statistic, the mean over the floored spread referred to Student's t
(:func:`_sf`; without a floor, the noncentral t distribution): the difference test ``P(|T| > t_c)``; the one-sided
tests ``P(T > t_c)``; the equivalence (TOST) test the probability that the mean falls in the band shrunk by
``t_c`` floored standard errors, integrated over the seeds' spread (the two one-sided tests share it).
Cost: the pilot table records its notebook's seconds (its wall time plus the recorded training and evaluation
seconds of the runs it reused from the cache, so a table re-made from cached runs counts them too:
:func:`studylib.claims.table.provenance`), so a seed costs about ``seconds / seeds``; the fixed part (data
generation, kernel start) is counted in, which overstates the cost of added seeds a little. Tables saved before
2026-11-29 from cached runs recorded only the wall time, which understates it.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass
from typing import Any, Iterable

from studylib.evaluation.stats import AllOf, Estimate
from studylib.evaluation.verdicts import DECIDE_ALPHA, DIRECTIONAL, Claim, Expectation

TARGET_POWER = 0.8
MAX_SEEDS = 200
AFFORDABLE = 20  # seeds a notebook can have at the evidence scale (its hour on two cores)


def _stats():
    import scipy.stats  # ~1 s of import: only the power analysis needs it
    return scipy.stats


_GRID = 400  # quantiles of the chi-square variable the noncentral t tails are averaged over


def _q(dof: int, floor_ratio: float = 0.0):
    """The seeds' standard deviation over the true one, ``sqrt(V / dof)`` with ``V ~ chi2(dof)`` at
    :data:`_GRID` quantile midpoints, floored as the verdicts floor it (``floor_ratio`` = floor / true sd)."""
    import numpy as np
    v = _stats().chi2.ppf((np.arange(_GRID) + 0.5) / _GRID, dof)
    return np.maximum(np.sqrt(v / dof), floor_ratio)


def _sf(c: float, dof: int, ncp: float, floor_ratio: float = 0.0) -> float:
    """``P(T > c)`` for the verdicts' t statistic, ``T = mean / (max(s, floor) / sqrt n)``, whose mean has
    noncentrality ``ncp`` (true mean over its true standard error): the mean of ``Phi(ncp - c q)`` over the
    spread ratio ``q`` (:func:`_q`). Without a floor it is the noncentral t tail; scipy.stats.nct's own tails
    return NaN for some large noncentralities (seen at ncp ~ 10 on 3 dof), so it is integrated here; tested
    against nct where nct is finite."""
    import numpy as np
    return float(np.mean(_stats().norm.cdf(ncp - c * _q(dof, floor_ratio))))


def powers(expect: Expectation, value: float, sd: float, n: int, alpha: float, unit: float = 100.0,
           floor: float = 0.0) -> dict[str, float]:
    """The power of each of a claim's tests at ``n`` seeds, for a true effect ``value`` and per-seed standard
    deviation ``sd`` (the effect's unit), each test at level ``alpha``, the seeds' spread floored at ``floor`` as
    the verdicts floor it (module docstring)."""
    st = _stats()
    dof = n - 1
    se = sd / math.sqrt(n)
    if se <= 0:
        raise ValueError("a power needs a positive spread")
    one, two = float(st.t.isf(alpha, dof)), float(st.t.isf(alpha / 2, dof))

    ratio = floor / sd

    def above(c: float, ncp: float) -> float:  # P(T > c)
        return _sf(c, dof, ncp, ratio)

    def below(c: float, ncp: float) -> float:  # P(T < -c) = P(-T > c), -T noncentral with -ncp
        return _sf(c, dof, -ncp, ratio)

    def tost(bound: float) -> float:
        # both one-sided tests reject when the mean lies in (-bound + c s / sqrt n, bound - c s / sqrt n), s the
        # seeds' standard deviation: exact, averaged over s as in _sf (the two tests share s)
        import numpy as np
        q = _q(dof, ratio)  # the floored s / sd
        hi = (bound - one * q * se - value) / se
        lo = (-bound + one * q * se - value) / se
        return float(np.mean(np.clip(st.norm.cdf(hi) - st.norm.cdf(lo), 0.0, None)))

    if expect.kind in DIRECTIONAL:
        ncp = value / se
        out = {"difference": above(two, ncp) + below(two, ncp)}
        band = expect.band(unit)
        if band is not None:
            out["no effect"] = tost(band)
        return out
    m = expect.margin
    if expect.kind == "noninferior":
        ncp = (value + m) / se
        return {"non-inferior": above(one, ncp), "inferior": below(one, ncp)}
    if expect.kind == "within":
        return {"inside": tost(m), "outside": above(two, (value - m) / se) + below(two, (value + m) / se)}
    raise ValueError(f"an {expect.kind!r} claim has no test over seeds")


def aimed_at(expect: Expectation, value: float, unit: float = 100.0) -> str:
    """The test a pilot effect points to: a directional claim's difference test when the effect lies outside its
    no-effect band (or there is none), else its no-effect test; a non-inferiority or equivalence claim's test on
    the side of its margin the effect lies on. Chosen by the effect, not by whichever needs fewer seeds (that
    would plan for whichever verdict is cheapest, not for the one the pilot suggests)."""
    if expect.kind in DIRECTIONAL:
        band = expect.band(unit)
        return "difference" if band is None or abs(value) >= band else "no effect"
    if expect.kind == "noninferior":
        return "non-inferior" if value >= -expect.margin else "inferior"
    if expect.kind == "within":
        return "inside" if abs(value) <= expect.margin else "outside"
    raise ValueError(f"an {expect.kind!r} claim has no test over seeds")


def seeds_needed(expect: Expectation, value: float, sd: float, family: int, unit: float = 100.0,
                 target: float = TARGET_POWER, max_seeds: int = MAX_SEEDS, floor: float = 0.0
                 ) -> tuple[int | None, str]:
    """The fewest seeds (>= 2) at which the test the effect points to (:func:`aimed_at`) reaches ``target`` power
    at Holm's first-step level ``DECIDE_ALPHA / family``, and that test's name; ``(None, test)`` when it does not
    by ``max_seeds``."""
    alpha = DECIDE_ALPHA / max(family, 1)
    test = aimed_at(expect, value, unit)

    def ok(n: int) -> bool:
        return powers(expect, value, sd, n, alpha, unit, floor)[test] >= target

    if not ok(max_seeds):
        return None, test
    lo, hi = 2, max_seeds  # the power grows with n: the first n that reaches the target
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo, test


def planning_sd(e: Estimate, level: float = 0.8) -> float:
    """The per-seed spread to plan with: the upper ``level`` confidence limit of the pilot's sample spread
    (``s sqrt((n - 1) / chi2_{1 - level}(n - 1))``; a spread from 3 seeds is itself noisy, so planning with its
    point value predicts too few seeds), at least the pilot's floor."""
    n = e.n_seeds
    up = e.spread * math.sqrt((n - 1) / _stats().chi2.ppf(1 - level, n - 1)) if n >= 2 else 0.0
    return max(up, _floor(e))


def _floor(e: Estimate) -> float:
    """The floor the verdicts put under an estimate's spread (episode standard error, stated floor)."""
    return max(e.episode_ci95 / 1.959963984540054, e.sd_floor)


@dataclass
class Need:
    """What one claim of a pilot table needs."""

    notebook: str
    id: str
    kind: str
    value: float
    sd: float
    seeds: int  # the pilot's
    family: int
    needed: int | None
    test: str

    @property
    def affordable(self) -> bool:
        return self.needed is not None and self.needed <= AFFORDABLE

    def text(self) -> str:
        if self.needed is None:
            return f"> {MAX_SEEDS} (no affordable number)"
        return f"{self.needed} ({self.test})" + ("" if self.affordable else " (not affordable)")


def needs(table: dict[str, Any], listing: Any = None) -> list[Need]:
    """The seeds each measured claim of a saved table needs (module docstring)."""
    from studylib.claims.table import ClaimsTable
    t = ClaimsTable.from_dict(table, listing=listing)
    judged = t.judgements()
    family = max((j.family for j in judged.values()), default=0)
    out = []
    for c in t:
        e = c.measured
        expect = c.expect
        if isinstance(e, AllOf):  # planned for its smallest effect
            e, expect = e.worst, Expectation(expect.kind, delta=expect.delta)
        if not (c.applies and isinstance(e, Estimate) and e.n_seeds >= 2 and expect.kind != "equal" and e.sd > 0):
            continue
        sd = planning_sd(e)
        n, test = seeds_needed(expect, e.value, sd, family, c.unit, floor=_floor(e))
        out.append(Need(t.notebook, c.id, c.expect.kind, e.value, sd, e.n_seeds, family, n, test))
    return out


def level_seeds(claim: Claim, family: int) -> int | None:
    """Seeds a ``within`` claim against the paper's number needs so that a perfect reproduction (effect 0) passes
    with 80% power, its per-seed spread taken as the paper's own episode error (the ``±`` of its ``paper``
    text, a 95% interval over the paper's episodes); None without a stated interval."""
    m = re.search(r"±\s*([0-9]+(?:\.[0-9]+)?)", claim.paper or "")
    if claim.expect.kind != "within" or m is None:
        return None
    sd = float(m.group(1)) / 1.959963984540054 / claim.unit
    n, _ = seeds_needed(Expectation("within", margin=claim.expect.margin), 0.0, sd, family, claim.unit, floor=sd)
    return n


def minutes_per_seed(table: dict[str, Any]) -> float | None:
    """About how many minutes a training seed of the pilot's notebook costs (module docstring)."""
    seconds = table.get("seconds")
    seeds = max((len(c["measured"]["seeds"]) for c in table["claims"]
                 if isinstance(c.get("measured"), dict) and "seeds" in c["measured"]), default=0)
    if not seconds or not seeds:
        return None
    return seconds / 60.0 / seeds


def pilots(notebook: str) -> list[str]:
    """The pilot tables ``--pilot`` may name for a notebook: its parameter files (``smoke``, ``evidence``,
    ``paper``, variants such as ``paper-cifarfs``), whose tables are ``<cache>/claims/<nb>/<name>.json`` or the
    committed ``params/<nb>/<name>.claims.json``. Only these names ever become a path."""
    from studylib.claims.store import param_files
    return param_files(notebook)


def check_pilot(pilot: str, notebooks: list[str]) -> None:
    """ValueError (one line naming ``--pilot`` and what exists) unless ``pilot`` is a parameter file of at least
    one of ``notebooks`` (a name, never a path: ``--pilot ../../x`` is refused before anything is read)."""
    known = {nb: pilots(nb) for nb in notebooks}
    if any(pilot in names for names in known.values()):
        return
    order = {"smoke": 0, "evidence": 1}
    names = sorted({n for ns in known.values() for n in ns}, key=lambda n: (order.get(n, 2), n))
    where = f"{notebooks[0]}'s" if len(notebooks) == 1 else "the notebooks'"
    raise ValueError(f"--pilot {pilot}: not a parameter file of {'any of ' if len(notebooks) > 1 else ''}"
                     f"{', '.join(notebooks) if len(notebooks) <= 3 else f'{len(notebooks)} notebooks'}; "
                     f"{where} pilots: {', '.join(names) or 'none'} (e.g. --pilot smoke)")


def report(notebooks: Iterable[str], pilot: str = "smoke") -> str:
    """The text of ``./study power``: per notebook, each measured claim's pilot effect, the seeds it needs and
    the minutes the notebook would take at the seeds its claims need. A notebook without ``pilot`` as a parameter
    file, or without that table yet, or with a damaged one, gets one line saying so (and the command that makes
    the table, where one would)."""
    from studylib.claims.store import claims_dir, committed_claims_path, saved_table, static_claims
    lines = []
    total = decidable = 0
    for nb in notebooks:
        if pilot not in pilots(nb):
            lines.append(f"{nb}: no {pilot} scale (no params/{nb}/{pilot}.yaml), so no {pilot} table")
            continue
        table = saved_table(nb, pilot)
        try:
            listing = static_claims(nb, pilot)
        except Exception:  # noqa: BLE001 - the pilot's own stored rules suffice
            listing = None
        if table is None:
            data = (f" (it needs the paper's data: ./study check --scale {pilot} {nb} says whether this machine has "
                    f"it)" if pilot.startswith("paper") else "")
            lines.append(f"{nb}: no {pilot} table yet; ./study run --scale {pilot} {nb} makes one{data}" if listing
                         else f"{nb}: no {pilot} table (the notebook lists no claims at this scale)")
            continue
        try:
            rows = needs(table, listing)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            where = claims_dir() / nb / f"{pilot}.json" if table.get("from") == "this machine" else \
                committed_claims_path(nb, pilot)
            lines.append(f"{nb}: the {pilot} table {where} is damaged ({type(err).__name__}: {err}); re-make it: "
                         f"./study run --scale {pilot} {nb}")
            continue
        if not rows:
            continue
        per = minutes_per_seed(table)
        want = max((r.needed for r in rows if r.affordable), default=None)
        cost = f", about {per * want:.0f} min at {want} seeds" if per and want else ""
        lines.append(f"{nb} ({pilot} pilot: {rows[0].seeds} seeds, family of {rows[0].family}"
                     + (f", {per:.1f} min per seed" if per else "") + f"{cost}):")
        width = max(len(r.id) for r in rows)
        for r in rows:
            lines.append(f"  {r.id:<{width}}  {r.kind:<11} effect {r.value * 100:+7.2f} planning sd {r.sd * 100:6.2f}  "
                         f"seeds to decide: {r.text()}")
            total += 1
            decidable += r.affordable
    lines.append(f"{decidable} of {total} measured claims can be decided with at most {AFFORDABLE} seeds at "
                 f"{TARGET_POWER:.0%} power (effects in the table's unit x 100; the pilot's spread from few seeds "
                 "is optimistic: re-estimate from --pilot evidence).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="./study power", description="Seeds each claim needs to be decided (80% "
                                 "power under the verdict rules), from a pilot table.")
    ap.add_argument("notebooks", nargs="*", help="notebooks (default: all)")
    ap.add_argument("--pilot", default="smoke", help="the saved table to take effects and spreads from: smoke "
                    "(committed), evidence, or another of the notebook's parameter files")
    args = ap.parse_args(argv)
    from studylib.paths import notebook_names, resolve_notebook
    try:  # every argument checked before the work
        names = [resolve_notebook(n) for n in args.notebooks] if args.notebooks else notebook_names()
        check_pilot(args.pilot, names)
    except ValueError as err:
        print(f"power: {err}", file=sys.stderr)
        return 2
    print(report(names, args.pilot))
    return 0


if __name__ == "__main__":
    from studylib.utils import run_command
    run_command(main, "power")
