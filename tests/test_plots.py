"""The figure defects of issue 28 (item 6), each checked on the drawn figure: the legend of the bar charts covers no
bar; the epoch axis of the training curves has whole-number ticks; the class labels of the image grids are whole
(they were cut at 28 characters)."""

from __future__ import annotations

import matplotlib
import numpy as np
import torch

matplotlib.use("Agg")

from studylib import plots  # noqa: E402
from studylib.data.base import ImageSplit  # noqa: E402


def _bars(fig):
    ax = fig.axes[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    return legend, [p.get_window_extent(renderer) for p in ax.patches]


def test_the_legend_of_the_bar_chart_covers_no_bar():
    """Notebook 00's chart: 1- and 5-shot groups, three classifiers; tall bars (90 %) where the legend used to sit."""
    rows = [{"shots": f"{s}-shot", "classifier": c, "mean": m, "ci95": 0.02}
            for s in (1, 5) for c, m in (("nearest_centroid", 0.85), ("soft_assignment", 0.9), ("knn", 0.88))]
    fig = plots.accuracy_bars(rows, group="shots", hue="classifier", chance=0.2)
    legend, bars = _bars(fig)
    assert len(bars) == 6
    assert not any(legend.overlaps(b) for b in bars)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert sorted(labels) == ["chance", "knn", "nearest_centroid", "soft_assignment"]


def test_epoch_ticks_are_whole_numbers():
    runs = [[{"step": s, "epoch": e, "loss": 1.0 / (s + 1)} for e in range(3) for s in range(e * 10, e * 10 + 10)]
            + [{"step": 10 * (e + 1), "epoch": e, "val_acc": 0.5 + 0.1 * e, "val_ci95": 0.02} for e in range(3)]]
    fig = plots.training_curves(runs)
    fig.canvas.draw()
    ax = fig.axes[1]
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks  # were 1.0, 1.25, 1.5, ...
    assert {1.0, 2.0, 3.0} <= set(ticks)


def test_class_labels_of_the_image_grid_are_whole():
    names = ["Japanese_(hiragana)/character13", "Tifinagh/character55", "a_very_long_glyph_alphabet_name_of_forty_x"]
    split = ImageSplit(torch.randint(0, 255, (6, 1, 8, 8), dtype=torch.uint8), torch.arange(3).repeat_interleave(2),
                       names, name="t")
    fig = plots.image_grid(split, classes=3, per_class=2)
    shown = {t.get_text().replace("\n", "") for ax in fig.axes for t in ax.texts}
    assert shown == set(names)  # every character of every name (the 42-character one was cut to 28)
    for text in (t.get_text() for ax in fig.axes for t in ax.texts):
        assert max(map(len, text.split("\n"))) <= 26
    assert plots.class_label("Japanese_(hiragana)/character13") == "Japanese_(hiragana)/\ncharacter13"
    assert plots.class_label("class_001") == "class_001"


def test_class_label_breaks_after_separators_and_keeps_every_character():
    rng = np.random.default_rng(0)
    for _ in range(50):
        name = "".join(rng.choice(list("ab_/ xyz0"), size=int(rng.integers(1, 80))))
        label = plots.class_label(name)
        assert label.replace("\n", "") == name
        assert max(map(len, label.split("\n"))) <= 26
