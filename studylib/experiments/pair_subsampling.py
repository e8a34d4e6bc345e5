"""Notebook 03_pair_subsampling: Fig. 3 of seed 000, episodes against randomly discarding pairs.

NCA models keep a fraction ``f`` of the positive and of the negative pairs of each training batch (uniformly
without replacement; validation uses the full loss). PN and MN models on episodes of the same batch size are
placed on the x-axis at the fraction of the batch's pairs their episodes use (Table 1:
``(wmn + w(w-1)mn) / (w C(m+n, 2) + C(w, 2)(m+n)^2)``). The paper finds the PN / MN points close to the
subsampled-NCA curve: episodes behave like throwing away a random part of the batch's distances.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from studylib.config import param
from studylib.experiments.episodes_common import (CommonParams, Variant, episode_shape, episodic, nca, pooled,
                                                  run_variants)
from studylib.experiments.runner import Outcome
from studylib.methods.episodes import table1_pairs

NOTEBOOK = "03_pair_subsampling"

PAPER_FINDINGS = (
    "Subsampling the pairs of a batch (b = 256, miniImageNet val.) lowers NCA's accuracy.",
    "PN and MN points lie very close to the subsampled-NCA curve.",
    "Along the x-axis, PN / MN variants that use more of the batch's distances do better.",
)


@dataclass
class Params(CommonParams):
    """Parameters of ``notebooks/03_pair_subsampling.ipynb`` (``params/03_pair_subsampling/*.yaml``)."""

    batch_size: int = param(128, help="batch size of NCA and of the episodes (paper: 256)")
    fractions: list[float] = param([0.05, 0.1, 0.25, 0.5, 1.0], help="fractions of pairs NCA keeps")
    episodes: list[list[int]] = param([[1, 8], [5, 8], [5, 16]], help="PN / MN episode configs [n, m+n]")
    share_one_shot: bool = param(True, help="1-shot PN and MN are the same loss; train it once")

    def check(self) -> None:
        super().check()
        for f in self.fractions:
            if not 0 < f <= 1:
                raise ValueError(f"fractions must lie in (0, 1], got {f}")
        for n, per in self.episodes:
            episode_shape(self.batch_size, n, per)


def episode_fraction(batch_size: int, shots: int, per_class: int) -> float:
    """Fraction of the pairs of a ``b``-image batch (``w`` classes x ``m+n``) that an episode uses (Table 1)."""
    w, n, m = episode_shape(batch_size, shots, per_class)
    used = sum(table1_pairs(w, n, m, "episodic"))
    return used / sum(table1_pairs(w, n, m, "nca"))


def variants(p: Params) -> list[tuple[str, Variant]]:
    """``(series, variant)``: ``"NCA"`` per fraction, then ``"PN"`` and ``"MN"`` per episode config."""
    out: list[tuple[str, Variant]] = [("NCA", nca(p.batch_size, fraction=f)) for f in p.fractions]
    for n, per in p.episodes:
        pn = episodic("pn", p.batch_size, n, per)
        out.append(("PN", pn))
        out.append(("MN", pn if (n == 1 and p.share_one_shot) else episodic("mn", p.batch_size, n, per)))
    return out


def run(p: Params, train_images: int, progress: bool = False) -> dict[Variant, list[Outcome]]:
    return run_variants(p, [v for _, v in variants(p)], train_images, progress=progress)


def results(p: Params, outcomes: dict[Variant, list[Outcome]], classifier: str = "nearest_centroid"
            ) -> list[dict[str, Any]]:
    """Rows (series, label, fraction of pairs, eval shots, mean, ci95); NCA at 1 and 5 shots, an episodic model
    at its own shot count. All with ``classifier`` (the paper's default, nearest centroid)."""
    rows = []
    for series, v in variants(p):
        if series == "NCA":
            frac, shots_list, label = v.fraction, (1, 5), f"NCA f={v.fraction:g}"
        else:
            frac, shots_list = episode_fraction(v.batch_size, v.shots, v.per_class), (v.shots,)
            label = f"{series} {v.shots}-shot m+n={v.per_class} (w={v.ways})"
        for shots in shots_list:
            m, c, e = pooled(outcomes[v], classifier, shots)
            rows.append({"series": series, "label": label, "fraction": frac, "shots": shots, "mean": m, "ci95": c,
                         "episodes": e})
    return rows


def nca_at(rows: list[dict[str, Any]], shots: int, fraction: float) -> tuple[float, float]:
    """Subsampled-NCA accuracy and CI95 at ``fraction``, linearly interpolated between the swept fractions."""
    pts = sorted((r["fraction"], r["mean"], r["ci95"]) for r in rows if r["series"] == "NCA" and r["shots"] == shots)
    x = np.array([q[0] for q in pts])
    return float(np.interp(fraction, x, [q[1] for q in pts])), float(np.interp(fraction, x, [q[2] for q in pts]))


def episodes_vs_curve(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each PN / MN point against the NCA curve at the same fraction: difference and whether CIs overlap."""
    out = []
    for r in rows:
        if r["series"] == "NCA":
            continue
        m, c = nca_at(rows, r["shots"], r["fraction"])
        out.append({"model": r["label"], "shots": r["shots"], "fraction": r["fraction"], "model acc": r["mean"],
                    "model ci95": r["ci95"], "NCA curve": m, "curve ci95": c, "diff": r["mean"] - m,
                    "within CIs": abs(r["mean"] - m) <= r["ci95"] + c})
    return out


def figure(rows: list[dict[str, Any]], batch_size: int, title: str = "") -> plt.Figure:
    """Fig. 3: accuracy against the fraction of pairs used (log x); NCA line with CI95 band, PN stars, MN squares."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, shots in zip(axes, (1, 5)):
        pts = sorted((r for r in rows if r["series"] == "NCA" and r["shots"] == shots), key=lambda r: r["fraction"])
        x = np.array([r["fraction"] for r in pts])
        y = np.array([100 * r["mean"] for r in pts])
        e = np.array([100 * r["ci95"] for r in pts])
        ax.plot(x, y, color="k", marker="o", label=f"NCA, subsampled pairs (b={batch_size})")
        ax.fill_between(x, y - e, y + e, color="k", alpha=0.15)
        for series, marker, color in (("PN", "*", "C0"), ("MN", "s", "C3")):
            for r in (r for r in rows if r["series"] == series and r["shots"] == shots):
                ax.errorbar(r["fraction"], 100 * r["mean"], yerr=100 * r["ci95"], marker=marker, color=color,
                            ms=11 if marker == "*" else 7, capsize=3, ls="none")
                ax.annotate(r["label"].split(" (")[0].replace(series + " ", ""), (r["fraction"], 100 * r["mean"]),
                            fontsize=6, xytext=(4, -10), textcoords="offset points", color=color)
        ax.plot([], [], "*", color="C0", ms=11, label="PN episodes")
        ax.plot([], [], "s", color="C3", label="MN episodes")
        ax.set_xscale("log")
        ax.set(xlabel="fraction of the batch's pairs used by the loss", ylabel="accuracy (%)",
               title=f"{shots}-shot (nearest centroid)")
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
