"""Notebook 01_episodes_pairs: Table 1 and Fig. 1 of seed 000, the pairs an episode throws away.

No training: the losses of :mod:`studylib.methods.episodes` are applied to random embeddings of an episodic
batch and the pairs they use are read off the masks they apply (``LossOutput.positives/negatives``); these
*measured* counts are set beside the formulas of Table 1 (:func:`~studylib.methods.episodes.table1_pairs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from studylib.claims.table import ClaimsTable
from studylib.config import param
from studylib.evaluation.verdicts import Claim, Expectation
from studylib.methods.episodes import ablation_pairs, episode_loss, table1_pairs
from studylib.paths import SCALES

NOTEBOOK = "01_episodes_pairs"

# Sec. 2.1: "In a typical training batch with w = 20, m = 15 and n = 5 [40], ignoring the episodic
# constraints increases the number of both positives and negatives by more than 150%."
PAPER_TYPICAL = {"w": 20, "n": 5, "m": 15, "min_increase_pct": 150.0}

# The losses whose pairs are counted: (name, prototypes, sq_split), see studylib.methods.episodes.
LOSSES = (("PN / MN (episodes)", True, True), ("MN = PN without prototypes", False, True),
          ("PN without S/Q split", True, False), ("NCA (no episodes)", False, False))


@dataclass
class Params:
    """Parameters of ``notebooks/01_episodes_pairs.ipynb`` (``params/01_episodes_pairs/*.yaml``).

    No data and no training: every scale counts pairs on random embeddings, so the check scale is the paper's
    shapes with fewer batches measured (``measure_max_images``)."""

    scale: str = param("smoke", choices=SCALES, help="label of the parameter set", cut=True)
    settings: list[list[int]] = param([[2, 4, 1], [5, 1, 15], [5, 5, 15], [20, 5, 15], [30, 1, 15], [32, 5, 3]],
                                      help="episodes [w, n, m] of the Table 1 check")
    base: list[int] = param([20, 5, 15], help="[w, n, m] held fixed while one of them varies (growth plots)")
    w_range: list[int] = param([2, 5, 10, 20, 40, 64], help="ways to sweep")
    n_range: list[int] = param([1, 2, 5, 10, 15, 20], help="shots to sweep")
    m_range: list[int] = param([1, 2, 5, 10, 15, 20], help="queries to sweep")
    measure_max_images: int = param(1500, ge=1, help="measure counts from the losses only for batches up to this "
                                                     "size", cut=True)
    embed_dim: int = param(16, ge=1, help="dimension of the random embeddings")
    seed: int = param(0)

    def check(self) -> None:
        for s in [*self.settings, self.base]:
            if len(s) != 3 or s[0] < 2 or s[1] < 1 or s[2] < 1:
                raise ValueError(f"an episode is [w, n, m] with w >= 2, n >= 1, m >= 1, got {s}")


def episodic_batch(w: int, n: int, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``([B] labels, [B] support mask)`` of an episode in the samplers' class-major order (B = w(n+m))."""
    per = n + m
    labels = torch.arange(w).repeat_interleave(per)
    support = (torch.arange(per) < n).repeat(w)
    return labels, support


def measured_pairs(w: int, n: int, m: int, embed_dim: int = 16, seed: int = 0) -> dict[str, tuple[int, int]]:
    """``{loss name: (positives, negatives)}`` counted by each loss of :data:`LOSSES` on one random batch."""
    labels, support = episodic_batch(w, n, m)
    z = torch.randn(len(labels), embed_dim, generator=torch.Generator().manual_seed(seed))
    out = {}
    for name, proto, split in LOSSES:
        r = episode_loss(z, labels, support, "pn", prototypes=proto, sq_split=split, counts_only=True)
        out[name] = (r.positives, r.negatives)
    return out


def table1(settings: Sequence[Sequence[int]], embed_dim: int = 16, seed: int = 0) -> list[dict[str, Any]]:
    """Rows of Table 1 per episode: formula and measured counts of NO EPISODES, EPISODES, PAIRS LOST.

    Also the two ablations of Fig. 4 (MN / "no prototypes" and "no S/Q split") by :func:`ablation_pairs`.
    """
    rows = []
    for w, n, m in settings:
        meas = measured_pairs(w, n, m, embed_dim, seed)
        nca_f, epi_f, lost_f = (table1_pairs(w, n, m, k) for k in ("nca", "episodic", "lost"))
        nca_m, epi_m = meas["NCA (no episodes)"], meas["PN / MN (episodes)"]
        lost_m = (nca_m[0] - epi_m[0], nca_m[1] - epi_m[1])
        for row, f, mm in (("NO EPISODES", nca_f, nca_m), ("EPISODES", epi_f, epi_m), ("PAIRS LOST", lost_f, lost_m),
                           ("MN / PN no proto", ablation_pairs(w, n, m, False, True), meas["MN = PN without prototypes"]),
                           ("PN no S/Q", ablation_pairs(w, n, m, True, False), meas["PN without S/Q split"])):
            rows.append({"w": w, "n": n, "m": m, "row": row, "pos (formula)": f[0], "pos (measured)": mm[0],
                         "neg (formula)": f[1], "neg (measured)": mm[1], "match": f == mm})
    return rows


def increase_pct(w: int, n: int, m: int) -> tuple[float, float]:
    """Extra positives and negatives of NCA over the episode on the same batch, in % of the episode's."""
    (pn, nn), (pe, ne) = table1_pairs(w, n, m, "nca"), table1_pairs(w, n, m, "episodic")
    return 100.0 * (pn - pe) / pe, 100.0 * (nn - ne) / ne


def growth(base: Sequence[int], ranges: dict[str, Sequence[int]], measure_max_images: int = 1500,
           embed_dim: int = 16, seed: int = 0) -> list[dict[str, Any]]:
    """Pairs lost (formula, and measured where the batch has at most ``measure_max_images`` images) and the
    fraction of the batch's pairs an episode uses, as one of ``w``, ``n``, ``m`` varies from ``base``."""
    rows = []
    for var, values in ranges.items():
        for v in values:
            w, n, m = (v if var == k else b for k, b in zip("wnm", base))
            lost = table1_pairs(w, n, m, "lost")
            nca_p, epi_p = table1_pairs(w, n, m, "nca"), table1_pairs(w, n, m, "episodic")
            row = {"vary": var, "value": v, "w": w, "n": n, "m": m, "lost_pos": lost[0], "lost_neg": lost[1],
                   "fraction_used": sum(epi_p) / sum(nca_p), "measured_lost_pos": np.nan,
                   "measured_lost_neg": np.nan}
            if w * (n + m) <= measure_max_images:
                meas = measured_pairs(w, n, m, embed_dim, seed)
                a, e = meas["NCA (no episodes)"], meas["PN / MN (episodes)"]
                row["measured_lost_pos"], row["measured_lost_neg"] = a[0] - e[0], a[1] - e[1]
            rows.append(row)
    return rows


def fig1(w: int = 2, n: int = 4, m: int = 1) -> plt.Figure:
    """Fig. 1: the distances a batch of ``w`` ways x (``n`` shots + ``m`` queries) contributes with and
    without episodes (green: positives, red: negatives), with the counts measured from the losses."""
    labels, support = episodic_batch(w, n, m)
    meas = measured_pairs(w, n, m)
    b = len(labels)
    ang = np.linspace(0, 2 * np.pi, b, endpoint=False)
    xy = np.stack([np.cos(ang), np.sin(ang)], 1)
    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    for ax, (title, key) in zip(axes, (("episodes (PN / MN)", "PN / MN (episodes)"),
                                      ("no episodes (NCA)", "NCA (no episodes)"))):
        for i in range(b):
            for j in range(i + 1, b):
                if key.startswith("PN") and bool(support[i]) == bool(support[j]):
                    continue  # episodes only use query-support distances
                same = bool(labels[i] == labels[j])
                ax.plot(*xy[[i, j]].T, color="tab:green" if same else "tab:red", lw=1.2 if same else 0.6,
                        alpha=0.8 if same else 0.4, zorder=1)
        for i in range(b):
            ax.scatter(*xy[i], s=160, marker="o" if support[i] else "s", color=f"C{int(labels[i])}",
                       edgecolor="k", zorder=2)
        pos, neg = meas[key]
        ax.set_title(f"{title}\n{pos} positives, {neg} negatives", fontsize=9)
        ax.set_aspect("equal")
        ax.set_axis_off()
    fig.suptitle(f"{w} ways, {n} shots (circles) and {m} query (squares) per class", fontsize=9)
    fig.tight_layout()
    return fig


def growth_figure(rows: list[dict[str, Any]], base: Sequence[int]) -> plt.Figure:
    """Pairs lost (log scale; lines = Table 1 formulas, markers = measured) and the fraction of pairs an
    episode uses, against ``w``, ``n`` and ``m`` with the others fixed at ``base``."""
    fig, axes = plt.subplots(2, 3, figsize=(11, 6))
    for c, var in enumerate("wnm"):
        r = [x for x in rows if x["vary"] == var]
        v = np.array([x["value"] for x in r])
        ax = axes[0, c]
        for key, color, name in (("pos", "tab:green", "positives"), ("neg", "tab:red", "negatives")):
            ax.plot(v, [x[f"lost_{key}"] for x in r], color=color, label=f"lost {name} (formula)")
            ax.scatter(v, [x[f"measured_lost_{key}"] for x in r], color=color, marker="x", s=30,
                       label=f"lost {name} (measured)")
        ax.set_yscale("symlog", linthresh=1)
        fixed = ", ".join(f"{k}={b}" for k, b in zip("wnm", base) if k != var)
        ax.set(xlabel=var, ylabel="pairs lost per batch", title=f"varying {var} ({fixed})")
        if c == 0:
            ax.legend(fontsize=7)
        ax = axes[1, c]
        ax.plot(v, [100 * x["fraction_used"] for x in r], marker="o", color="C0")
        ax.set(xlabel=var, ylabel="% of the batch's pairs an episode uses", ylim=(0, 100))
    fig.tight_layout()
    return fig


# -- claims (all deterministic: formulas and counts, no training) -------------------------------------------
FIG1 = (2, 4, 1)  # Fig. 1: 2 ways, 4 shots, 1 query per class


def claims(p: Params, outcomes: Any = None) -> ClaimsTable:
    """Table 1, Fig. 1 and Sec. 2.1's claims; ``outcomes`` is unused (nothing is trained): every claim is an
    exact count, measured from the losses' masks, judged by the ``equal`` rule."""
    w, n, m = (PAPER_TYPICAL[k] for k in "wnm")
    fw, fn, fm = FIG1
    rows = [
        Claim("table1-counts", "Table 1's formulas give the positives and negatives each loss uses", "Table 1",
              "NO EPISODES C(m+n,2)w, C(w,2)(m+n)²; EPISODES wmn, w(w-1)mn; PAIRS LOST",
              f"every formula equals the count read from the losses' masks, on {len(p.settings)} episode shapes",
              Expectation("equal", expected=True), unit=1),
        Claim("sec2.1-more-than-150pct", "Without episodes, a 20-way 5-shot 15-query batch has more than 150% more "
              "positives and more negatives", "Sec. 2.1", "> 150% for both",
              f"min(extra positives, extra negatives) of NCA over the episode at w={w}, n={n}, m={m}, in %, "
              "measured from the losses, > 150", Expectation("equal", expected=True), unit=1),
        Claim("fig1-counts", "Fig. 1: the episode uses query-support pairs only, NCA every pair",
              "Fig. 1", f"{fw}-way {fn}-shot {fm}-query: episode {table1_pairs(fw, fn, fm, 'episodic')}, "
              f"NCA {table1_pairs(fw, fn, fm, 'nca')} (pos, neg)",
              "(positives, negatives) measured from the PN and NCA losses", Expectation(
                  "equal", expected=[list(table1_pairs(fw, fn, fm, "episodic")), list(table1_pairs(fw, fn, fm, "nca"))]),
              unit=1),
        Claim("appA-growth", "Pairs lost grow as w(m²+n²-m-n)/2 positives and w(w-1)(m²+n²)/2 negatives",
              "Sec. 2.1, Appendix A", "O(w²(m² + n²))",
              f"formula = measured on every shape of the growth sweep up to {p.measure_max_images} images",
              Expectation("equal", expected=True), unit=1),
    ]
    table = ClaimsTable(NOTEBOOK, p.scale, rows)
    t1 = table1(p.settings, p.embed_dim, p.seed)
    table.measure("table1-counts", all(r["match"] for r in t1))
    meas = measured_pairs(w, n, m, p.embed_dim, p.seed)
    (pa, na), (pe, ne) = meas["NCA (no episodes)"], meas["PN / MN (episodes)"]
    table.measure("sec2.1-more-than-150pct", min(100 * (pa - pe) / pe, 100 * (na - ne) / ne) > 150)
    f1 = measured_pairs(fw, fn, fm, p.embed_dim, p.seed)
    table.measure("fig1-counts", [list(f1["PN / MN (episodes)"]), list(f1["NCA (no episodes)"])])
    g = growth(p.base, {"w": p.w_range, "n": p.n_range, "m": p.m_range}, p.measure_max_images, p.embed_dim, p.seed)
    done = [r for r in g if not np.isnan(r["measured_lost_pos"])]
    table.measure("appA-growth", bool(done) and all(r["measured_lost_pos"] == r["lost_pos"]
                                                    and r["measured_lost_neg"] == r["lost_neg"] for r in done))
    return table


def reference_values(p: Params, outcomes: Any = None) -> dict[str, int | float]:
    """Exact numbers the notebook asserts: Table 1's measured counts per shape and Sec. 2.1's increases."""
    out: dict[str, int | float] = {}
    for r in table1(p.settings, p.embed_dim, p.seed):
        key = f"w{r['w']}-n{r['n']}-m{r['m']}/{r['row']}"
        out[f"{key}/pos"], out[f"{key}/neg"] = int(r["pos (measured)"]), int(r["neg (measured)"])
    inc_pos, inc_neg = increase_pct(*(PAPER_TYPICAL[k] for k in "wnm"))
    out["sec2.1 extra positives %"], out["sec2.1 extra negatives %"] = inc_pos, inc_neg
    return out
