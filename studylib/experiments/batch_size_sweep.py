"""Notebook 02_batch_size_sweep: Fig. 2 of seed 000, NCA against PN / MN episodes at equal batch sizes.

NCA's only batch hyperparameter is ``b``; an episode of the same batch size also needs ``n`` and ``m + n``
(``w = b / (m + n)``). Every model sees the same number of images per epoch. PN models (and NCA, in the PN
panels) are evaluated with the nearest centroid, MN models (and NCA, in the MN panels) with soft assignment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from studylib.config import param
from studylib.experiments.episodes_common import (CommonParams, Variant, episode_shape, episodic, nca, overlap,
                                                  pooled, run_variants)
from studylib.experiments.runner import Outcome

NOTEBOOK = "02_batch_size_sweep"
PANELS = {"PN": "nearest_centroid", "MN": "soft_assignment"}

# What Sec. 3.2 says about Fig. 2 (CIFAR-FS, val. set); the figure's values are not given in the text.
PAPER_FINDINGS = (
    "NCA-trained embeddings perform better than all episodic configurations, no matter the batch size.",
    "PN and MN are sensitive to the episode configuration (e.g. at b=128 PN 5-shot m+n=32 < m+n=16).",
    "1-shot m+n=16 and m+n=32 are 4% and 10% worse than the lowest lines (not plotted).",
)


@dataclass
class Params(CommonParams):
    """Parameters of ``notebooks/02_batch_size_sweep.ipynb`` (``params/02_batch_size_sweep/*.yaml``)."""

    batch_sizes: list[int] = param([64, 128, 256], help="batch sizes b of NCA and of the episodes")
    episodes: list[list[int]] = param([[1, 8], [5, 8], [5, 16]], help="episode configs [n, m+n]")
    share_one_shot: bool = param(True, help="train 1-shot PN and MN once: with n = 1 a prototype is its "
                                            "single support point and L_PNs = L_MNs exactly")

    def check(self) -> None:
        super().check()
        for b in self.batch_sizes:
            for n, per in self.episodes:
                episode_shape(b, n, per)


def variants(p: Params) -> list[tuple[str, int, Variant]]:
    """``(panel method, batch size, variant)`` of every model of the sweep ("NCA" rows for NCA)."""
    out: list[tuple[str, int, Variant]] = []
    for b in p.batch_sizes:
        out.append(("NCA", b, nca(b)))
        for n, per in p.episodes:
            pn = episodic("pn", b, n, per)
            out.append(("PN", b, pn))
            out.append(("MN", b, pn if (n == 1 and p.share_one_shot) else episodic("mn", b, n, per)))
    return out


def run(p: Params, train_images: int, progress: bool = False) -> dict[Variant, list[Outcome]]:
    return run_variants(p, [v for _, _, v in variants(p)], train_images, progress=progress)


def results(p: Params, outcomes: dict[Variant, list[Outcome]]) -> list[dict[str, Any]]:
    """One row per (panel, eval shots, series, batch size): pooled mean and CI95 (fractions).

    Panels: PN (nearest centroid) and MN (soft assignment), each at 1 and 5 evaluation shots. An episodic
    model appears at the evaluation shot count it was trained for; NCA in every panel.
    """
    rows = []
    for panel, clf in PANELS.items():
        for shots in (1, 5):
            for who, b, v in variants(p):
                if who == "NCA":
                    series = "NCA"
                elif who == panel and v.shots == shots:
                    series = f"{panel} {v.shots}-shot m+n={v.per_class}"
                else:
                    continue
                m, c, e = pooled(outcomes[v], clf, shots)
                rows.append({"panel": panel, "classifier": clf, "shots": shots, "series": series,
                             "batch": b, "ways": v.ways, "mean": m, "ci95": c, "episodes": e})
    return rows


def nca_vs_best(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per panel, shots and batch size: NCA against the best episodic configuration (CI95 overlap)."""
    out = []
    keys = sorted({(r["panel"], r["shots"], r["batch"]) for r in rows}, key=lambda k: (k[0], k[1], k[2]))
    for panel, shots, b in keys:
        group = [r for r in rows if (r["panel"], r["shots"], r["batch"]) == (panel, shots, b)]
        n = next(r for r in group if r["series"] == "NCA")
        epi = [r for r in group if r["series"] != "NCA"]
        if not epi:
            continue
        best = max(epi, key=lambda r: r["mean"])
        sep = not overlap((n["mean"], n["ci95"]), (best["mean"], best["ci95"]))
        verdict = ("NCA better" if n["mean"] > best["mean"] else "episodes better") + (
            " (CIs separate)" if sep else " (CIs overlap)")
        out.append({"panel": panel, "shots": shots, "batch": b, "NCA": n["mean"], "NCA ci95": n["ci95"],
                    "best episodes": best["series"], "best": best["mean"], "best ci95": best["ci95"],
                    "verdict": verdict})
    return out


def figure(rows: list[dict[str, Any]], title: str = "") -> plt.Figure:
    """Fig. 2: accuracy against batch size with CI95 bands; columns PN / MN, rows 1- / 5-shot."""
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), squeeze=False)
    for c, panel in enumerate(PANELS):
        for r_i, shots in enumerate((1, 5)):
            ax = axes[r_i, c]
            sel = [r for r in rows if r["panel"] == panel and r["shots"] == shots]
            for k, series in enumerate(dict.fromkeys(r["series"] for r in sel)):
                pts = sorted((r for r in sel if r["series"] == series), key=lambda r: r["batch"])
                x = np.array([r["batch"] for r in pts])
                y = np.array([100 * r["mean"] for r in pts])
                e = np.array([100 * r["ci95"] for r in pts])
                style = dict(color="k", lw=2, marker="o") if series == "NCA" else dict(color=f"C{k}", marker="s")
                ax.plot(x, y, label=series, **style)
                ax.fill_between(x, y - e, y + e, color=style["color"], alpha=0.2)
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({r["batch"] for r in sel}), [str(b) for b in sorted({r["batch"] for r in sel})])
            ax.set(xlabel="batch size", ylabel="accuracy (%)",
                   title=f"{panel} ({PANELS[panel].replace('_', ' ')}), {shots}-shot")
            ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
