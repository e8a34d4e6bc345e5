"""Notebook 02_batch_size_sweep: Fig. 2 of seed 000, NCA against PN / MN episodes at equal batch sizes.

NCA's only batch hyperparameter is ``b``; an episode of the same batch size also needs ``n`` and ``m + n``
(``w = b / (m + n)``). Every model sees the same images (``train_images`` in all, or the same images per epoch).
PN models (and NCA, in the PN panels) are evaluated with the nearest centroid, MN models (and NCA, in the MN
panels) with soft assignment. Every model is trained once per seed of ``p.seeds``; every estimate is a mean
over the seeds with Student's t interval (:mod:`studylib.evaluation.stats`), differences are paired on the
evaluation episodes that the models of a training seed share (each seed draws its own:
:func:`~studylib.evaluation.episode_seed`), and the verdicts follow
:mod:`studylib.evaluation.verdicts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from studylib.claims.table import ClaimsTable
from studylib.config import param
from studylib.evaluation import stats
from studylib.evaluation.verdicts import Claim, Expectation
from studylib.experiments import regimes
from studylib.experiments.episodes_common import (SweepParams, Variant, accuracy, episode_shape, episodic, nca,
                                                  paired, run_variants, train_size)
from studylib.runs.runner import Outcome

NOTEBOOK = "02_batch_size_sweep"
PANELS = {"PN": "nearest_centroid", "MN": "soft_assignment"}

# What Sec. 3.2 says about Fig. 2 (CIFAR-FS, val. set); the figure's values are not given in the text.
PAPER_FINDINGS = (
    "NCA-trained embeddings perform better than all episodic configurations, no matter the batch size.",
    "PN and MN are sensitive to the episode configuration (e.g. at b=128 PN 5-shot m+n=32 < m+n=16).",
    "1-shot m+n=16 and m+n=32 are 4% and 10% worse than the lowest lines (not plotted).",
)


@dataclass
class Params(SweepParams):
    """Parameters of ``notebooks/02_batch_size_sweep.ipynb`` (``params/02_batch_size_sweep/*.yaml``).

    Smoke (the defaults): synthfs at 16 px, Conv4-32, batch sizes 64 and 128 (the paper: 128/256/512), 1-shot
    ``m+n = 8`` and 5-shot ``m+n = 16`` episodes (the paper also 5-shot 8 and 32), 3840 training images per
    model (7680 until 2026-11-29; the evidence scale keeps 7680), three seeds, 500 validation episodes per model and seed.
    """

    batch_sizes: list[int] = param([64, 128], ge=2, help="batch sizes b of NCA and of the episodes", cut=True)
    episodes: list[list[int]] = param([[1, 8], [5, 16]], help="episode configs [n, m+n]", cut=True)
    share_one_shot: bool = param(True, help="train 1-shot PN and MN once: with one shot a prototype is its "
                                            "single support point and L_PNs equals L_MNs exactly")

    def check(self) -> None:
        super().check()
        if not self.batch_sizes or not self.episodes:
            raise ValueError("batch_sizes and episodes must be non-empty lists, e.g. [64, 128] and [[1, 8], [5, 16]]")
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


def models_table(p: Params) -> list[dict[str, Any]]:
    """The grid of models (shapes and images per run; no training): deterministic, checked by nbval."""
    n_train = train_size(p)
    rows = []
    for who, b, v in variants(p):
        steps = (p.train_images // b if p.train_images is not None
                 else p.epochs * ((p.images_per_epoch or n_train) // b))
        rows.append({"panel": who, "batch": b, "model": v.label, "ways": v.ways or "-", "shots": v.shots or "-",
                     "queries": v.queries or "-", "steps": steps, "images": steps * b})
    return rows


def run(p: Params, progress: bool = True) -> dict[Variant, list[Outcome]]:
    """Train (or load) every model of the sweep for every seed; ``{variant: [outcome per seed]}``."""
    return run_variants(p, [v for _, _, v in variants(p)], train_size(p), progress=progress)


def _series(p: Params) -> list[tuple[str, str, int, str, int, Variant]]:
    """``(panel, classifier, shots, series, batch, variant)`` of every point of Fig. 2."""
    out = []
    for panel, clf in PANELS.items():
        for shots in (1, 5):
            for who, b, v in variants(p):
                if who == "NCA":
                    out.append((panel, clf, shots, "NCA", b, v))
                elif who == panel and v.shots == shots:
                    out.append((panel, clf, shots, f"{panel} {v.shots}-shot m+n={v.per_class}", b, v))
    return out


def results(p: Params, outcomes: dict[Variant, list[Outcome]]) -> list[dict[str, Any]]:
    """One row per (panel, eval shots, series, batch size): mean over seeds and its 95% interval (fractions).

    Panels: PN (nearest centroid) and MN (soft assignment), each at 1 and 5 evaluation shots. An episodic
    model appears at the evaluation shot count it was trained for; NCA in every panel.
    """
    rows = []
    for panel, clf, shots, series, b, v in _series(p):
        est = accuracy(outcomes[v], clf, shots)
        rows.append({"panel": panel, "classifier": clf, "shots": shots, "series": series, "batch": b,
                     "ways": v.ways, "mean": est.value, "ci95": est.ci95, "seeds": est.n_seeds,
                     "episodes": est.episodes, "accuracy (%)": est.fmt()})
    return rows


def best_episodes(p: Params, outcomes: dict[Variant, list[Outcome]], panel: str, shots: int,
                  b: int) -> tuple[str, Variant] | None:
    """The episodic configuration of a panel with the highest mean accuracy over seeds (None if there is none).

    Picking the best on the same episodes favours the episodes slightly, so a verdict for NCA is conservative.
    """
    cands = [(s, v) for pa, clf, sh, s, bb, v in _series(p) if (pa, sh, bb) == (panel, shots, b) and s != "NCA"]
    if not cands:
        return None
    return max(cands, key=lambda sv: accuracy(outcomes[sv[1]], PANELS[panel], shots).value)


def _claim_id(panel: str, shots: int, b: int) -> str:
    return f"fig2-nca-beats-{panel.lower()}-{shots}shot-b{b}"


def check_measure(v: Variant) -> tuple[str, int]:
    """``(classifier, shots)`` a model's regime check is measured at: its panel's classifier at the shots it
    was trained for (NCA, in both panels: the nearest centroid, 1-shot)."""
    if v.method == "mn":
        return PANELS["MN"], v.shots or 1
    return "nearest_centroid", v.shots or 1


def claims(p: Params, outcomes: dict[Variant, list[Outcome]] | None = None,
           untrained: dict[Variant, list[Outcome]] | None = None) -> ClaimsTable:
    """Fig. 2's claims (from ``p`` alone), measured when ``outcomes`` are given, with the regime checks: every
    model beats its untrained network (``untrained``: its evaluation per model and seed, default
    :func:`~studylib.experiments.regimes.untrained_of` of ``outcomes``). A claim is gated by the checks of NCA
    and of every episode configuration it compares NCA with (the best is picked among them)."""
    rows = []
    for panel, clf in PANELS.items():
        for shots in (1, 5):
            for b in p.batch_sizes:
                has = any(n == shots for n, _ in p.episodes)
                rows.append(Claim(
                    _claim_id(panel, shots, b),
                    f"NCA beats every {panel} episode configuration ({shots}-shot, batch {b}, "
                    f"{clf.replace('_', ' ')})", "Fig. 2, Sec. 3.2",
                    "NCA above all episodic lines at b = 128/256/512 (CIFAR-FS val., 3 seeds; values only plotted)",
                    f"NCA - the best {panel} {shots}-shot config (highest mean over seeds) at b = {b}, paired episodes", Expectation("greater"),
                    applies=has, why_not=f"no {shots}-shot episode config in episodes"))
    cfgs = {tuple(e) for e in p.episodes}
    has_sens = {(5, 16), (5, 32)} <= cfgs and 128 in p.batch_sizes
    rows.append(Claim("fig2-pn-5shot-16-beats-32-b128",
                      "PN is sensitive to the episode: at b = 128, 5-shot m+n = 16 beats m+n = 32", "Fig. 2, Sec. 3.2",
                      "qualitative (CIFAR-FS val.)", "PN 5-shot m+n=16 - m+n=32 at b = 128, nearest centroid, paired",
                      Expectation("greater"), applies=has_sens,
                      why_not="needs 5-shot m+n = 16 and 32 episodes at b = 128 (the smoke grid leaves m+n = 32 out "
                              "to stay within its time budget)"))
    table = ClaimsTable(NOTEBOOK, p.scale, rows)
    if outcomes is None:
        return table
    for panel, clf in PANELS.items():
        for shots in (1, 5):
            for b in p.batch_sizes:
                c = table[_claim_id(panel, shots, b)]
                best = best_episodes(p, outcomes, panel, shots, b)
                if c.applies and best is not None:
                    table.measure(c.id, paired(outcomes[nca(b)], outcomes[best[1]], clf, shots))
    if has_sens:
        table.measure("fig2-pn-5shot-16-beats-32-b128",
                      paired(outcomes[episodic("pn", 128, 5, 16)], outcomes[episodic("pn", 128, 5, 32)],
                             "nearest_centroid", 5))
    gates: dict[str, list[Variant]] = {}
    for panel, clf in PANELS.items():
        for shots in (1, 5):
            for b in p.batch_sizes:
                if table[_claim_id(panel, shots, b)].applies:
                    gates[_claim_id(panel, shots, b)] = [v for pa, _, sh, _, bb, v in _series(p)
                                                         if (pa, sh, bb) == (panel, shots, b)]
    if has_sens:
        gates["fig2-pn-5shot-16-beats-32-b128"] = [episodic("pn", 128, 5, 16), episodic("pn", 128, 5, 32)]
    untrained = untrained if untrained is not None else regimes.untrained_of(outcomes)
    for v, ids in regimes.claims_of(gates).items():
        clf, shots = check_measure(v)
        table.regime(regimes.learned_check(v.label, outcomes[v], untrained[v], clf, shots, ids))
    return table


def reference_values(p: Params, outcomes: dict[Variant, list[Outcome]]) -> dict[str, Any]:
    """The trained numbers the notebook asserts (accuracy of every point of Fig. 2 over seeds) and the grid size."""
    out: dict[str, Any] = {"models": len({v for _, _, v in variants(p)})}
    for panel, clf, shots, series, b, v in _series(p):
        out[f"{panel}/{shots}-shot/{series}/b{b}"] = accuracy(outcomes[v], clf, shots)
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
