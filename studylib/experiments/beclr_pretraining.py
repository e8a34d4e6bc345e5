"""Notebook 06_beclr_pretraining: BECLR's unsupervised pretraining with DyCE (seed 001, Sec. 4.1) and its
few-shot accuracy with and without OpTA over the pretraining checkpoints (Fig. 7, Sec. 5.1 [A3-b]).

The notebook calls :func:`run`, :func:`loss_figure`, :func:`checkpoint_curve`, :func:`curve_figure`,
:func:`final_table`, :func:`shot_gain_table` and :func:`against_paper`; the logic is in
:mod:`studylib.experiments.beclr_common`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from studylib.evaluation.evaluate import EvalResult
from studylib.experiments.beclr_common import (PAPER_BECLR_RN18, BeclrParams, beclr_spec, checkpoint_curve,
                                               gain_difference, pct, train_images, train_with_snapshots)
from studylib.experiments.runner import Outcome, RunSpec

NOTEBOOK = "06_beclr_pretraining"


@dataclass
class Params(BeclrParams):
    """Parameters of ``notebooks/06_beclr_pretraining.ipynb`` (``params/06_beclr_pretraining/*.yaml``)."""


def spec(p: Params) -> RunSpec:
    """The BECLR (DyCE) run of ``p``; notebooks 07 and 08 ask for the same one."""
    return beclr_spec(p, train_images(p), "dyce")


def run(p: Params, progress: bool = False) -> Outcome:
    """Train (or load) the run, with a backbone + memory snapshot after every epoch."""
    return train_with_snapshots(spec(p), progress=progress)


def loss_figure(outcome: Outcome, title: str = "") -> plt.Figure:
    """Per-step loss of Eq. 3 and its two terms; the shaded region is where DyCE enhances the batch."""
    steps = [m for m in outcome.metrics if "loss" in m]
    x = np.array([m["step"] for m in steps])
    fig, ax = plt.subplots(1, 3, figsize=(11, 3.0))
    for a, key, name in zip(ax, ("loss", "loss_pos", "loss_neg"),
                            ("loss = pos + λ·neg", "pos (−cos, student vs teacher)", "neg (log-mean-exp)")):
        y = np.array([m[key] for m in steps])
        a.plot(x, y, lw=0.7, alpha=0.4, color="C0")
        k = max(len(y) // 20, 2)
        if len(y) > 2 * k:
            a.plot(x[k - 1:], np.convolve(y, np.ones(k) / k, mode="valid"), color="C0", label=f"mean of {k} steps")
        on = x[np.array([m.get("enhanced", 0.0) for m in steps]) > 0]
        if on.size:
            a.axvspan(on.min(), x.max(), color="C2", alpha=0.12, label="DyCE enhancing")
        a.set(xlabel="optimiser step", title=name)
        a.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def curve_figure(curve: dict[int, dict[tuple[str, int], EvalResult]], shots: tuple[int, ...] = (1, 5),
                 title: str = "") -> plt.Figure:
    """Fig. 7: accuracy with and without OpTA against the pretraining epoch (CI95 bands), one panel per shot."""
    epochs = sorted(curve)
    fig, ax = plt.subplots(1, len(shots), figsize=(4.4 * len(shots), 3.2), squeeze=False)
    for a, s in zip(ax[0], shots):
        for clf, name, color in (("logreg", "pure pretraining (no OpTA)", "C0"), ("opta", "with OpTA", "C3")):
            m = np.array([100 * curve[e][(clf, s)].mean for e in epochs])
            c = np.array([100 * curve[e][(clf, s)].ci95 for e in epochs])
            a.plot(epochs, m, marker="o", color=color, label=name)
            a.fill_between(epochs, m - c, m + c, color=color, alpha=0.2)
        a.set(xlabel="pretraining epoch (0 = initial weights)", ylabel="accuracy (%)", title=f"5-way {s}-shot")
        a.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def final_table(curve: dict[int, dict[tuple[str, int], EvalResult]]) -> list[dict[str, Any]]:
    """Rows for the initial and the last checkpoint: accuracy without / with OpTA per shot count."""
    rows = []
    for e in (min(curve), max(curve)):
        for (clf, s), r in sorted(curve[e].items(), key=lambda kv: (kv[0][1], kv[0][0])):
            rows.append({"epoch": e, "shots": s, "inference": "OpTA + logreg" if clf == "opta" else "logreg",
                         "mean": r.mean, "ci95": r.ci95, "accuracy (%)": pct(r.mean, r.ci95)})
    return rows


def shot_gain_table(curve: dict[int, dict[tuple[str, int], EvalResult]]) -> list[dict[str, Any]]:
    """Per checkpoint: OpTA's gain at 1 and 5 shots and the paired CI95 of their difference."""
    rows = []
    for e in sorted(curve):
        g = gain_difference(curve[e])
        rows.append({"epoch": e, "OpTA gain 1-shot": pct(*g["gain_1"], signed=True),
                     "OpTA gain 5-shot": pct(*g["gain_5"], signed=True),
                     "gain1 − gain5": pct(*g["difference"], signed=True),
                     "1-shot gain larger (CI excludes 0)": g["difference"][0] - g["difference"][1] > 0})
    return rows


def against_paper(curve: dict[int, dict[tuple[str, int], EvalResult]]) -> list[dict[str, Any]]:
    """The last checkpoint beside the paper's ResNet-18 miniImageNet numbers (Table 1 and Table 14)."""
    last = curve[max(curve)]
    rows = []
    for (clf, s), (pm, pc) in PAPER_BECLR_RN18.items():
        r = last[(clf, s)]
        rows.append({"inference": "OpTA + logreg" if clf == "opta" else "logreg (no OpTA)", "shots": s,
                     "paper (%)": f"{pm:.1f} ± {pc:.1f}", "smoke (%)": pct(r.mean, r.ci95)})
    for s in (1, 5):
        g = gain_difference(last)[f"gain_{s}"]
        paper = PAPER_BECLR_RN18[("opta", s)][0] - PAPER_BECLR_RN18[("logreg", s)][0]
        rows.append({"inference": "OpTA gain", "shots": s, "paper (%)": f"{paper:+.1f}",
                     "smoke (%)": pct(*g, signed=True)})
    return rows


__all__ = ["NOTEBOOK", "Params", "spec", "run", "loss_figure", "checkpoint_curve", "curve_figure", "final_table",
           "shot_gain_table", "against_paper"]
