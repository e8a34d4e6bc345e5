"""Figures shared by the notebooks. Every function returns the matplotlib figure; :func:`save` writes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from studylib.data.base import ImageSplit
from studylib.paths import figures_dir
from studylib.utils import atomic_savefig


def save(fig: plt.Figure, notebook: str, name: str, scale: str, formats: Sequence[str] = ("png",)) -> list[Path]:
    """Write ``fig`` to ``figures/<notebook>/<scale>/<name>.<fmt>`` in the checkout the notebook runs in
    (:func:`studylib.paths.project_root`), atomically (:func:`studylib.utils.atomic_savefig`: drawn in memory,
    a temporary file in the same folder, fsync, rename; an interrupt leaves the old file and no temporary one).

    Under torchrun only rank 0 writes (every rank runs the notebook, :mod:`studylib.launch`).
    """
    from studylib.training.distributed import env_rank
    if env_rank() != 0:  # [dist]
        return []
    out = []
    folder = figures_dir(notebook, scale)
    folder.mkdir(parents=True, exist_ok=True)
    for fmt in formats:
        out.append(atomic_savefig(fig, folder / f"{name}.{fmt}", dpi=130, bbox_inches="tight"))
    return out


def image_grid(split: ImageSplit, classes: int = 12, per_class: int = 10, seed: int = 0,
               title: str | None = None) -> plt.Figure:
    """A grid of ``classes`` rows (random classes of ``split``) x ``per_class`` instances."""
    g = torch.Generator().manual_seed(seed)
    picked = torch.randperm(split.num_classes, generator=g)[:classes]
    labels = split.labels.cpu()
    fig, axes = plt.subplots(len(picked), per_class, figsize=(per_class * 0.7, len(picked) * 0.75))
    axes = np.atleast_2d(axes)
    for r, c in enumerate(picked.tolist()):
        idx = torch.nonzero(labels == c).squeeze(1)[:per_class]
        for j in range(per_class):
            ax = axes[r, j]
            ax.set_axis_off()
            if j < len(idx):
                img = split.images[idx[j]].cpu()
                if img.shape[0] == 1:
                    ax.imshow(img[0].numpy(), cmap="gray_r" if img.float().mean() < 128 else "gray", vmin=0, vmax=255)
                else:
                    ax.imshow(img.permute(1, 2, 0).numpy())
        axes[r, 0].text(-0.15, 0.5, class_label(split.class_names[c]), transform=axes[r, 0].transAxes, ha="right",
                        va="center", fontsize=6)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.subplots_adjust(wspace=0.05, hspace=0.05)
    return fig


def class_label(name: str, width: int = 26) -> str:
    """A class name whole, on lines of at most ``width`` characters (broken after ``/``, ``_`` or a space where
    possible): Omniglot's ``Japanese_(hiragana)/character13`` and the glyph sets' long names stay readable
    (they were cut at 28 characters)."""
    import re
    parts = [x for x in re.split(r"(?<=[/_ ])", str(name)) if x]
    lines, line = [], ""
    for part in parts:
        while len(part) > width:  # a part longer than a line: broken where it must be
            if line:
                lines.append(line)
                line = ""
            lines.append(part[:width])
            part = part[width:]
        if len(line) + len(part) > width and line:
            lines.append(line)
            line = ""
        line += part
    if line:
        lines.append(line)
    return "\n".join(lines)


def training_curves(metrics: list[dict[str, Any]] | list[list[dict[str, Any]]], title: str = "",
                    labels: Sequence[str] | None = None) -> plt.Figure:
    """Per-step training loss (smoothed) and, where logged, validation accuracy with its CI95 band.

    ``metrics`` is one run's metrics log, or a list of logs (one per seed), drawn in one colour each.
    """
    runs = metrics if metrics and isinstance(metrics[0], list) else [metrics]
    names = list(labels) if labels is not None else ([f"seed run {i}" for i in range(len(runs))] if len(runs) > 1
                                                     else [""])
    has_val = any("val_acc" in m for run in runs for m in run)
    fig, ax = plt.subplots(1, 2 if has_val else 1, figsize=(9 if has_val else 4.5, 3.2))
    ax = np.atleast_1d(ax)
    for i, (run, name) in enumerate(zip(runs, names)):
        colour = f"C{i}"
        steps = [m for m in run if "loss" in m]
        x = np.array([m["step"] for m in steps])
        y = np.array([m["loss"] for m in steps])
        ax[0].plot(x, y, alpha=0.25, lw=0.8, color=colour)
        if len(y) > 10:
            k = max(len(y) // 30, 2)
            label = f"{name + ': ' if name else ''}mean of {k} steps"
            ax[0].plot(x[k - 1:], np.convolve(y, np.ones(k) / k, mode="valid"), color=colour, label=label)
        epochs = [m for m in run if "val_acc" in m]
        if epochs:
            e = np.array([m["epoch"] + 1 for m in epochs])
            a = np.array([m["val_acc"] for m in epochs]) * 100
            c = np.array([m.get("val_ci95", 0.0) for m in epochs]) * 100
            ax[1].plot(e, a, marker="o", color=colour, label=name or None)
            ax[1].fill_between(e, a - c, a + c, color=colour, alpha=0.2)
    ax[0].set(xlabel="optimiser step", ylabel="training loss", title="loss")
    if ax[0].get_legend_handles_labels()[0]:
        ax[0].legend(fontsize=7)
    if has_val:
        from matplotlib.ticker import MaxNLocator
        ax[1].set(xlabel="epoch", ylabel="accuracy (%)", title="validation few-shot accuracy (CI95 over episodes)")
        ax[1].xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers (were 1.0, 1.5, ...)
        if len(runs) > 1:
            ax[1].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def accuracy_bars(rows: list[dict[str, Any]], group: str, hue: str, title: str = "",
                  chance: float | None = None) -> plt.Figure:
    """Bars of ``row['mean']`` (fractions) with ``row['ci95']`` error bars, grouped by ``group`` and ``hue``."""
    groups = list(dict.fromkeys(r[group] for r in rows))
    hues = list(dict.fromkeys(r[hue] for r in rows))
    width = 0.8 / len(hues)
    fig, ax = plt.subplots(figsize=(1.2 + 1.3 * len(groups) * max(1, len(hues) / 2), 3.2))
    for h_i, h in enumerate(hues):
        xs, ms, cs = [], [], []
        for g_i, g in enumerate(groups):
            for r in rows:
                if r[group] == g and r[hue] == h:
                    xs.append(g_i + (h_i - (len(hues) - 1) / 2) * width)
                    ms.append(100 * r["mean"])
                    cs.append(100 * r["ci95"])
        bars = ax.bar(xs, ms, width * 0.95, yerr=cs, capsize=3, label=str(h))
        ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=2)
    if chance is not None:
        ax.axhline(100 * chance, color="grey", ls="--", lw=1, label="chance")
    ax.set_xticks(range(len(groups)), [str(g) for g in groups])
    ax.set(ylabel="accuracy (%)", title=title, ylim=(0, 105))
    # beside the axes, never over a bar (inside, "lower right" covered the last group's bars)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)
    fig.tight_layout()
    return fig


def _bar(e: Any, lo: float, hi: float) -> float | None:
    """The error bar (in %) of an estimate, or None where it has no interval within ``[lo, hi]``."""
    if e.lo < lo or e.hi > hi or (e.n_seeds >= 2 and e.ci95 == 0.0):
        return None
    return 100 * e.ci95


def comparison_figure(rows: Sequence[Any], reference: str, title: str = "") -> plt.Figure:
    """Methods compared on the same episodes: left, each method's accuracy per shot count with its 95% interval
    over seeds; right, each method's paired difference to the ``reference`` method with its interval, a filled
    marker where the study's rule decides it (hollow: undecided). A marked accuracy (``row.marked``: a test split
    too small for an interval, or one beyond 0-100 %) is hollow; an interval beyond 0-100 % (or of no width over
    several seeds) gets no bar.

    ``rows``: objects with ``label``, ``reason`` (None when it ran), ``accuracy`` / ``difference`` / ``decided``
    / ``marked`` dicts by shot count (:class:`studylib.experiments.use_your_data.ComparisonRow`); fractions."""
    ran = [r for r in rows if r.reason is None]
    shots = sorted({s for r in ran for s in r.accuracy})
    ys = np.arange(len(ran))[::-1]
    step = 0.8 / max(len(shots), 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 0.5 * len(ran) + 1.6), sharey=True)
    for k, s in enumerate(shots):
        colour = f"C{k}"
        off = ((len(shots) - 1) / 2 - k) * step  # the first shot count on top
        for y, r in zip(ys, ran):
            acc, marked = r.accuracy.get(s), r.marked.get(s, False)
            if acc is not None:
                left.errorbar(100 * acc.value, y + off, xerr=_bar(acc, 0.0, 1.0), fmt="o", ms=5, color=colour,
                              mfc="white" if marked else colour, capsize=3)
            d = r.difference.get(s)
            if d is not None:
                decided = r.decided.get(s) is not None
                right.errorbar(100 * d.value, y + off, xerr=_bar(d, -1.0, 1.0), fmt="s" if decided else "o", ms=5,
                               color=colour, mfc=colour if decided else "white", capsize=3)
    right.axvline(0, color="grey", lw=1)
    left.set_yticks(ys, [r.label for r in ran])
    left.set(xlabel="accuracy (%), mean ± 95% CI over seeds", title="accuracy")
    right.set(xlabel=f"difference to {reference} (pts), paired", title=f"vs {reference}")
    handles = [plt.Line2D([], [], marker="o", ls="-", color=f"C{k}", label=f"{s}-shot") for k, s in enumerate(shots)]
    handles += [plt.Line2D([], [], marker="s", ls="", color="k", label="difference decided"),
                plt.Line2D([], [], marker="o", ls="", color="k", mfc="white", label="undecided / marked †\n(hollow); "
                                                                                   "no bar:\nno interval")]
    right.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    for ax in (left, right):
        ax.grid(axis="x", alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
