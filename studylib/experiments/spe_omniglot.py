"""Notebook 10_spe_omniglot: SPE against PN on Omniglot (seed 002, Sec. 3.2, Fig. 4 and Table 1).

The notebook's cells call the functions below; nothing else. Protocol (seed 002 Sec. 3.2, App. A.1,
PAPER-NOTES 002):

* Data: Omniglot 28x28 with the four 90-degree rotations as classes and the Vinyals splits
  (``data="omniglot"``, ``rotations=True``, ``split="vinyals"``), or, at smoke scale, the embedded glyph set.
* Network: Conv4 whose last block has ``2d`` (SPE) or ``d`` (PN) filters and no BN/ReLU.
* Training: episodes of ``train_ways`` classes (paper: 60) with ``train_queries`` queries per class
  (paper: 5); Adam at 1e-3 halved every 50 epochs (App. A.1). The paper stops early on validation accuracy
  with an unstated patience: ``patience`` (paper parameters: 20 validations) stops the loop and keeps the best
  validation weights; the smoke run trains a fixed length and logs the validation accuracy per epoch. The paper does not give the training shots; ``train_shots``
  sets them, and ``match_train_shots`` trains one Table 1 model per test shot count instead (Snell et al.).
* Test: ``eval_episodes`` episodes (paper: 1000) with 15 queries per class; SPE with the naive sampler and
  200 samples per query (Sec. 3), PN with the nearest centroid (its posterior's argmax); see
  :mod:`studylib.experiments.spe_common`.
* Fig. 4: a 2-D SPE trained with the naive or the intersection sampler and ``s`` samples per training query,
  tested 1-shot 20-way; mean over replications (training seeds) with the standard error of the mean.
* Table 1: PN against the intersection SPE with 1 training sample, 2-D and 64-D, 1/5-shot x 5/20-way; mean
  over the test episodes with the standard error of the mean (as the paper reports it) and the CI95.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch

from studylib.config import param
from studylib.experiments.common import check_data_params
from studylib.experiments.runner import DataSpec, Outcome, RunSpec, run_sweep
from studylib.experiments.spe_common import eval_spec_stub, few_shot_accuracies, method_parts
from studylib.training.loop import OPTIMIZERS, TrainConfig
from studylib.utils import mean_ci95

NOTEBOOK = "10_spe_omniglot"

# Seed 002, Table 1 (Omniglot, % with +-1 SEM over 1000 episodes): (method, dim, shots, ways) -> (mean, sem).
PAPER_TABLE1: dict[tuple[str, int, int, int], tuple[float, float]] = {
    ("pn", 2, 1, 5): (75.7, 0.4), ("spe", 2, 1, 5): (76.9, 0.4),
    ("pn", 2, 5, 5): (82.6, 0.3), ("spe", 2, 5, 5): (82.3, 0.3),
    ("pn", 2, 1, 20): (45.0, 0.2), ("spe", 2, 1, 20): (49.7, 0.2),
    ("pn", 2, 5, 20): (55.9, 0.2), ("spe", 2, 5, 20): (55.3, 0.2),
    ("pn", 64, 1, 5): (98.46, 0.09), ("spe", 64, 1, 5): (98.53, 0.08),
    ("pn", 64, 5, 5): (99.55, 0.03), ("spe", 64, 5, 5): (99.52, 0.03),
    ("pn", 64, 1, 20): (94.87, 0.08), ("spe", 64, 1, 20): (94.93, 0.08),
    ("pn", 64, 5, 20): (98.63, 0.03), ("spe", 64, 5, 20): (98.56, 0.02),
}


@dataclass
class Params:
    """Parameters of ``notebooks/10_spe_omniglot.ipynb`` (``params/10_spe_omniglot/{smoke,paper}.yaml``)."""

    scale: str = param("smoke", choices=("smoke", "paper"), help="label of the parameter set, shown in titles")
    data: str = param("glyphs", choices=("glyphs", "omniglot"), help="'glyphs' (generated) or 'omniglot' (needs "
                                                                    "data_root)")
    data_root: str | None = param(None, help="folder of Omniglot's zips or folders")
    image_size: int = param(28, help="side of the square images (paper: 28)")
    split: str = param("random", help="class split: glyphs 'random'|'alphabet'; omniglot 'vinyals' (paper)")
    rotations: bool = param(True, help="omniglot only: the four 90-degree rotations are classes (paper: True)")
    max_classes: int | None = param(300, help="glyphs only: keep this many classes (None: all)")
    hidden: int = param(64, help="filters of the first three conv blocks (paper: 64)")
    train_ways: int = param(60, help="classes per training episode (paper: 60)")
    train_shots: int = param(1, help="support images per class in training (the paper gives none)")
    train_queries: int = param(5, help="queries per class in training (paper: 5)")
    match_train_shots: bool = param(False, help="Table 1: train one model per test shot count with that many "
                                                "training shots (Snell et al.) instead of train_shots")
    epochs: int = param(300)
    patience: int | None = param(None, help="early stopping: validations without a new best val_acc "
                                          "before training stops (App. A; None: fixed length)")
    batches_per_epoch: int = param(100, help="training episodes per epoch")
    optimizer: str = param("adam", choices=OPTIMIZERS)
    lr: float = param(1e-3, help="App. A.1: 1e-3")
    halve_every: int | None = param(50, help="halve the learning rate every this many epochs (App. A.1: 50)")
    fig4_dim: int = param(2, help="Fig. 4: embedding dimension (paper: 2)")
    fig4_samplers: list[str] = param(["naive", "intersection"], choices=("naive", "intersection"))
    fig4_samples: list[int] = param([1, 2, 4, 8, 16, 32], help="Fig. 4: training samples per query s")
    fig4_ways: int = param(20, help="Fig. 4: test ways (paper: 20)")
    fig4_shots: int = param(1, help="Fig. 4: test shots (paper: 1)")
    replications: int = param(5, help="Fig. 4: training seeds per point (paper: 5)")
    table_dims: list[int] = param([2, 64], help="Table 1: embedding dimensions")
    table_ways: list[int] = param([5, 20], help="Table 1: test ways")
    table_shots: list[int] = param([1, 5], help="Table 1: test shots")
    table_samples: int = param(1, help="Table 1: intersection samples per training query (paper: 1)")
    eval_queries: int = param(15, help="test queries per class (paper: 15)")
    eval_episodes: int = param(1000, help="test episodes per setting (paper: 1000)")
    eval_samples: int = param(200, help="naive-sampler samples per test query (paper: 200)")
    val_episodes: int = param(200, help="validation episodes after each epoch (0: none)")
    seed: int = param(0, help="first training seed; replication r uses seed + r")
    device: str = param("auto", help="'auto' (CUDA when present), 'cpu' or 'cuda'")

    def check(self) -> None:
        check_data_params(self.data, self.data_root, self.split)
        if self.replications < 1 or not self.fig4_samples or not self.fig4_samplers:
            raise ValueError("Fig. 4 needs replications >= 1 and at least one sampler and one sample count")
        if min(self.fig4_samples) < 1 or self.table_samples < 1:
            raise ValueError(f"samples per query must be >= 1, got {self.fig4_samples} and {self.table_samples}")
        if not self.table_dims or not self.table_ways or not self.table_shots:
            raise ValueError("Table 1 needs at least one dimension, ways and shots value")


# ----------------------------------------------------------------------------------------------------------
# Run specifications
# ----------------------------------------------------------------------------------------------------------

def data_spec(p: Params) -> DataSpec:
    """Glyphs with the quickstart's options (so the generated set is shared) or Omniglot with rotations."""
    if p.data == "glyphs":
        return DataSpec("glyphs", None, {"size": p.image_size, "split": p.split, "rgb": False,
                                         "max_classes": p.max_classes, "seed": 0})
    return DataSpec("omniglot", p.data_root, {"size": p.image_size, "split": p.split, "rotations": p.rotations})


def _milestones(p: Params) -> list[float]:
    """App. A.1's "halved every 50 epochs" as fractions of training for the step schedule (gamma 0.5)."""
    if not p.halve_every:
        return []
    return [k * p.halve_every / p.epochs for k in range(1, math.ceil(p.epochs / p.halve_every))]


def make_spec(p: Params, kind: str, dim: int, sampler: str = "intersection", samples: int = 1, seed: int = 0,
              train_shots: int | None = None) -> RunSpec:
    """One SPE or PN training run. The name carries no notebook, so Fig. 4 and Table 1 share identical runs."""
    method, method_opts, bb_opts = method_parts(kind, dim, p.hidden, sampler, samples, p.eval_samples)
    shots = train_shots or p.train_shots
    label = f"{kind}{dim}d" + (f"-{sampler}{samples}" if kind == "spe" else "") + f"-{shots}shot-s{seed}"
    return RunSpec(
        name=f"spe-{p.data}-{label}", data=data_spec(p), backbone="conv4", backbone_options=bb_opts,
        method=method, method_options=method_opts, augment="none",
        train=TrainConfig(epochs=p.epochs, sampler="episodic", ways=p.train_ways, shots=shots,
                          queries=p.train_queries, batches_per_epoch=p.batches_per_epoch, optimizer=p.optimizer,
                          lr=p.lr, weight_decay=0.0, schedule="step", milestones=_milestones(p), gamma=0.5,
                          seed=seed, device=p.device, patience=p.patience, scale=p.scale),
        eval=eval_spec_stub(5, 1, p.eval_queries, val_episodes=p.val_episodes, episodes=50, seed=0))


def fig4_specs(p: Params) -> list[tuple[dict[str, Any], RunSpec]]:
    """``(key, spec)`` for every sampler x samples x replication of Fig. 4."""
    return [({"sampler": sm, "samples": s, "rep": r}, make_spec(p, "spe", p.fig4_dim, sm, s, p.seed + r))
            for sm in p.fig4_samplers for s in p.fig4_samples for r in range(p.replications)]


def table_specs(p: Params) -> list[tuple[dict[str, Any], RunSpec]]:
    """``(key, spec)`` for every method x dimension (x training shots with ``match_train_shots``) of Table 1."""
    shots = list(p.table_shots) if p.match_train_shots else [p.train_shots]
    return [({"method": kind, "dim": d, "train_shots": n},
             make_spec(p, kind, d, "intersection", p.table_samples, p.seed, n))
            for kind in ("pn", "spe") for d in p.table_dims for n in shots]


def train_all(p: Params) -> dict[str, list[tuple[dict[str, Any], Outcome]]]:
    """Train (or load) every run of Fig. 4 and Table 1; runs the two share are trained once."""
    f4, tb = fig4_specs(p), table_specs(p)
    outs = run_sweep([s for _, s in f4] + [s for _, s in tb])
    return {"fig4": [(k, o) for (k, _), o in zip(f4, outs[:len(f4)])],
            "table": [(k, o) for (k, _), o in zip(tb, outs[len(f4):])]}


# ----------------------------------------------------------------------------------------------------------
# Evaluation
# ----------------------------------------------------------------------------------------------------------

def _sem(x: torch.Tensor) -> float:
    return float(x.double().std(unbiased=True) / math.sqrt(x.numel())) if x.numel() > 1 else float("nan")


def fig4_results(p: Params, runs: list[tuple[dict[str, Any], Outcome]]) -> list[dict[str, Any]]:
    """Per sampler and ``s``: mean over replications of the 1-shot ``fig4_ways``-way test accuracy, its SEM
    over replications (the paper's error bars) and the per-replication means."""
    per: dict[tuple[str, int], list[float]] = {}
    for key, out in runs:
        acc = few_shot_accuracies(out, [p.fig4_ways], [p.fig4_shots], p.eval_queries, p.eval_episodes,
                                  seed=0, samples=p.eval_samples)[f"{p.fig4_ways}way/{p.fig4_shots}shot"]
        per.setdefault((key["sampler"], key["samples"]), []).append(float(acc.mean()))
    rows = []
    for (sm, s), accs in per.items():
        a = torch.tensor(accs, dtype=torch.float64)
        rows.append({"sampler": sm, "samples": s, "mean": float(a.mean()), "sem": _sem(a), "replications": len(accs),
                     "per_replication": accs})
    return rows


def table_results(p: Params, runs: list[tuple[dict[str, Any], Outcome]]) -> list[dict[str, Any]]:
    """Rows ``method, dim, shots, ways, mean, sem, ci95`` over the test episodes (the same episodes for every
    model at a given ways; with ``match_train_shots`` each shot count uses its own model)."""
    rows = []
    for key, out in runs:
        accs = few_shot_accuracies(out, list(p.table_ways), list(p.table_shots), p.eval_queries, p.eval_episodes,
                                   seed=0, samples=p.eval_samples)
        for w in p.table_ways:
            for n in p.table_shots:
                if p.match_train_shots and key["train_shots"] != n:
                    continue
                a = accs[f"{w}way/{n}shot"]
                m, ci = mean_ci95(a)
                rows.append({"method": key["method"], "dim": key["dim"], "shots": n, "ways": w, "mean": m,
                             "sem": _sem(a), "ci95": ci, "episodes": int(a.numel())})
    return rows


def table_frame_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Table 1 layout: one row per (dim, method), one column per ``<shots>-shot <ways>-way`` cell as
    ``"this run ± SEM  (paper ± SEM)"`` in %."""
    cells: dict[tuple[int, str], dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (r["dim"], r["method"] != "pn", r["ways"], r["shots"])):
        row = cells.setdefault((r["dim"], r["method"]), {"dim": f"{r['dim']}D", "method": r["method"].upper()})
        ref = PAPER_TABLE1.get((r["method"], r["dim"], r["shots"], r["ways"]))
        k = 2 if ref and ref[1] < 0.1 else 1  # the paper's own precision
        ref_txt = f"  ({ref[0]:.{k}f} ± {ref[1]:.{k}f})" if ref else ""
        row[f"{r['shots']}-shot {r['ways']}-way"] = f"{100 * r['mean']:.1f} ± {100 * r['sem']:.1f}{ref_txt}"
    return list(cells.values())


def spe_minus_pn(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """SPE minus PN accuracy per (dim, shots, ways) with a CI95 (independent-episode approximation: both models
    are tested on the same episodes, so this interval is conservative), next to the paper's difference."""
    by = {(r["method"], r["dim"], r["shots"], r["ways"]): r for r in rows}
    out = []
    for (m, d, n, w), r in by.items():
        if m != "spe" or ("pn", d, n, w) not in by:
            continue
        q = by[("pn", d, n, w)]
        diff = r["mean"] - q["mean"]
        ci = 1.96 * math.hypot(r["sem"], q["sem"])
        ps, pp = PAPER_TABLE1.get(("spe", d, n, w)), PAPER_TABLE1.get(("pn", d, n, w))
        out.append({"dim": d, "shots": n, "ways": w, "spe_minus_pn": diff, "ci95": ci,
                    "paper": (ps[0] - pp[0]) / 100 if ps and pp else float("nan")})
    return sorted(out, key=lambda r: (r["dim"], r["ways"], r["shots"]))


# ----------------------------------------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------------------------------------

def fig4(rows: list[dict[str, Any]], ways: int, shots: int, title: str = "") -> plt.Figure:
    """Fig. 4: test accuracy against training samples per query, one line per sampler, +-1 SEM over
    replications, individual replications as dots."""
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for sm, colour in (("naive", "tab:orange"), ("intersection", "tab:blue")):
        rs = sorted((r for r in rows if r["sampler"] == sm), key=lambda r: r["samples"])
        if not rs:
            continue
        x = np.array([r["samples"] for r in rs])
        m = np.array([100 * r["mean"] for r in rs])
        e = np.array([100 * (r["sem"] if r["sem"] == r["sem"] else 0.0) for r in rs])
        ax.errorbar(x, m, yerr=e, marker="o", capsize=3, color=colour, label=f"{sm} sampler")
        for r in rs:
            ax.scatter([r["samples"]] * len(r["per_replication"]), [100 * a for a in r["per_replication"]],
                       s=8, color=colour, alpha=0.4)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r["samples"] for r in rows}), [str(s) for s in sorted({r["samples"] for r in rows})])
    ax.set_xlabel("training samples per query s"), ax.set_ylabel(f"{shots}-shot {ways}-way accuracy (%)")
    ax.legend(fontsize=8)
    ax.set_title(title or "Fig. 4: naive vs intersection sampling (2-D SPE)", fontsize=9)
    fig.tight_layout()
    return fig


def fig_table(rows: list[dict[str, Any]], title: str = "") -> plt.Figure:
    """Table 1 as grouped bars (CI95), one panel per embedding dimension."""
    dims = sorted({r["dim"] for r in rows})
    fig, axes = plt.subplots(1, len(dims), figsize=(5 * len(dims), 3.6), squeeze=False)
    for ax, d in zip(axes[0], dims):
        settings = sorted({(r["ways"], r["shots"]) for r in rows if r["dim"] == d})
        pos = np.arange(len(settings))
        for off, m, colour in ((-0.2, "pn", "0.55"), (0.2, "spe", "tab:blue")):
            by = {(r["ways"], r["shots"]): r for r in rows if r["dim"] == d and r["method"] == m}
            ax.bar(pos + off, [100 * by[s]["mean"] if s in by else np.nan for s in settings], 0.4,
                   yerr=[100 * by[s]["ci95"] if s in by else 0 for s in settings], color=colour, label=m.upper(),
                   capsize=2)
        ax.set_xticks(pos, [f"{n}-shot {w}-way" for w, n in settings], fontsize=8)
        ax.set_ylabel("accuracy (%)"), ax.set_title(f"{d}-D embedding", fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle(title or "Table 1: PN vs intersection SPE", fontsize=10)
    fig.tight_layout()
    return fig


def sampler_gaps(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fig. 4's claim per ``s``: intersection minus naive accuracy with the combined SEM over replications."""
    by = {(r["sampler"], r["samples"]): r for r in rows}
    out = []
    for s in sorted({r["samples"] for r in rows}):
        if ("naive", s) in by and ("intersection", s) in by:
            a, b = by[("intersection", s)], by[("naive", s)]
            out.append({"samples": s, "intersection_minus_naive": a["mean"] - b["mean"],
                        "sem": math.hypot(a["sem"], b["sem"]) if a["sem"] == a["sem"] and b["sem"] == b["sem"]
                        else float("nan")})
    return out
