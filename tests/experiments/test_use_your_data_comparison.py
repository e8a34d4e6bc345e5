"""Notebook 90's comparison you can trust (issue 28 item 2): methods that are one function train once and share a
row (PN = MN with 1-shot episodes, checked on the losses themselves); a test split too small for an interval is
named by the pre-flight before training and marked in the table, as is any interval beyond 0-100 %; the
differences the study's rule decides are marked; the figure shows every method's accuracy and its paired
difference."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

import studylib.experiments.use_your_data as mod  # noqa: E402
from studylib import preflight  # noqa: E402
from studylib.data.standins import write_folder  # noqa: E402
from studylib.evaluation import stats  # noqa: E402
from studylib.methods.episodes import episode_loss  # noqa: E402


def _episode(shots: int, ways: int = 5, queries: int = 3, dim: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(ways).repeat_interleave(shots + queries)
    support = torch.tensor(([True] * shots + [False] * queries) * ways)
    return torch.randn(len(labels), dim, generator=g, dtype=torch.float64), labels, support


def test_pn_and_mn_are_one_function_with_one_shot_and_two_with_more():
    """The fact same_function rests on: on 1-shot episodes PN's loss and its gradient equal MN's (a prototype of
    one image is that image); on 2-shot episodes they differ."""
    for seed in range(3):
        z, labels, support = _episode(1, seed=seed)
        z1 = z.clone().requires_grad_(True)
        z2 = z.clone().requires_grad_(True)
        pn = episode_loss(z1, labels, support, "pn").loss
        mn = episode_loss(z2, labels, support, "mn").loss
        pn.backward()
        mn.backward()
        assert torch.allclose(pn, mn, rtol=1e-12) and torch.allclose(z1.grad, z2.grad, rtol=1e-10)
    z, labels, support = _episode(2)
    assert not torch.allclose(episode_loss(z, labels, support, "pn").loss, episode_loss(z, labels, support, "mn").loss)
    assert set(mod.same_function(mod.Params())) == {"mn"}
    assert mod.same_function(mod.Params(episode_shots=2)) == {}
    assert mod.same_function(mod.Params(compare=["nca", "mn"])) == {}  # nothing to share a row with


def test_compare_trains_mn_once_as_pn_with_one_shot_episodes(monkeypatch):
    trained = []

    def sweep(specs, progress=True):
        trained.extend(s.name.rsplit("-", 1)[1] for s in specs)
        return [SimpleNamespace(spec=s) for s in specs]

    ds = {"train": SimpleNamespace(labels=torch.arange(10).repeat_interleave(8))}
    monkeypatch.setattr(mod, "run_sweep", sweep)
    monkeypatch.setattr(mod, "load_data", lambda p: ds)
    monkeypatch.setattr(mod, "spec_from_params", lambda p, s, m: SimpleNamespace(name=f"x-{m}"))
    p = mod.Params(compare=["nca", "pn", "mn"], seeds=[0, 1])
    by = mod.compare(p, progress=False)
    assert trained == ["nca", "nca", "pn", "pn"] and by["mn"] is by["pn"]
    trained.clear()
    by = mod.compare(dataclasses.replace(p, episode_shots=2), progress=False)
    assert trained == ["nca", "nca", "pn", "pn", "mn", "mn"] and by["mn"] is not by["pn"]


def _outcomes(per_seed: list[np.ndarray], secs: float = 1.0) -> list[SimpleNamespace]:
    return [SimpleNamespace(accuracies=lambda c, s, a=a: a, result={"train_seconds": secs}) for a in per_seed]


def _test_split(classes: int) -> dict:
    return {"test": SimpleNamespace(num_classes=classes)}


def test_a_merged_row_an_unbounded_interval_and_a_decided_difference_are_marked():
    rng = np.random.default_rng(0)
    base = [np.clip(rng.normal(0.6, 0.05, 300), 0, 1) for _ in range(3)]
    ref = _outcomes(base)
    better = _outcomes([np.clip(b + 0.2, 0, 1) for b in base])  # +20 pts on every episode of every seed
    ceiling = _outcomes([np.ones(300), np.ones(300), np.r_[np.ones(150), np.full(150, 0.1)]])  # beyond 100 %
    p = mod.Params(eval_shots=[1], compare=["nca", "pn", "mn", "spe"], eval_episodes=300)
    by = {"nca": ref, "pn": better, "mn": better, "spe": ceiling}
    rows, caveat = mod.comparison_rows(p, by, _test_split(6))
    assert caveat is None and [r.label for r in rows] == ["NCA (000)", "PN = MN (000)", "SPE (002)"]
    assert rows[1].decided == {1: "higher"} and "MN is trained once" in rows[1].note
    table = mod.comparison_table(p, by, _test_split(6))
    assert table[1]["1-shot vs nca (pts)"].endswith("(higher, decided)")
    assert table[2]["1-shot (%)"].endswith("(no interval)†") and "±" not in table[2]["1-shot (%)"]
    assert "±" in table[0]["1-shot (%)"] and "†" not in table[0]["1-shot (%)"]
    est = rows[2].accuracy[1]
    assert est.hi > 1.0  # what the table no longer prints
    notes = mod.comparison_notes(p, by, _test_split(6))
    assert "beyond 0-100 %" in notes and "Holm-adjusted" in notes


def test_a_test_split_as_small_as_the_episodes_marks_every_row_and_decides_nothing():
    """9 RGB classes, split 64/16/20: 2 test classes for 2-way episodes. Every interval is marked, and no
    difference counts as decided (the episodes never vary the classes)."""
    rng = np.random.default_rng(1)
    base = [np.clip(rng.normal(0.6, 0.05, 300), 0, 1) for _ in range(3)]
    by = {"nca": _outcomes(base), "pn": _outcomes([np.clip(b + 0.2, 0, 1) for b in base])}
    p = mod.Params(eval_shots=[1], eval_ways=2, compare=["nca", "pn"])
    rows, caveat = mod.comparison_rows(p, by, _test_split(2))
    assert "every 2-way test episode draws the same 2" in caveat
    assert all(r.marked[1] for r in rows) and not rows[1].decided.get(1)
    table = mod.comparison_table(p, by, _test_split(2))
    assert all(r["1-shot (%)"].endswith("†") for r in table)
    assert mod.comparison_notes(p, by, _test_split(2)).startswith("† every interval: the test split has 2 classes")


def test_interval_caveat_names_too_few_classes_or_episodes():
    assert mod.interval_caveat(6, 5, 300) is None
    assert "every 5-way test episode draws the same 5" in mod.interval_caveat(5, 5, 300)
    assert "lower eval_ways below 5" in mod.interval_caveat(5, 5, 300)
    assert "lower eval_ways" not in mod.interval_caveat(2, 2, 300)  # 2-way is the least
    assert "10 test episodes per seed are too few" in mod.interval_caveat(6, 5, 10)


def test_the_preflight_warns_before_training_on_nine_classes(tmp_path):
    write_folder(tmp_path / "nine", classes=9, per_class=12, size=16)
    report = preflight.check("90_use_your_data", "smoke", {"data_root": str(tmp_path / "nine")})
    assert report.ok and report.adapted.get("eval_ways") == 2, report.text()
    warning = [n for n in report.notes if n.startswith("warning: ")]
    assert warning and "test split has 2 classes" in warning[0]
    assert "model.classify(" in preflight.FEWER_CLASSES and "api.classify(run" not in preflight.FEWER_CLASSES
    write_folder(tmp_path / "forty", classes=40, per_class=12, size=16)
    report = preflight.check("90_use_your_data", "smoke", {"data_root": str(tmp_path / "forty")})
    assert report.ok and not [n for n in report.notes if n.startswith("warning: ")], report.text()


def test_decided_follows_the_rule_with_the_correction_over_the_table():
    def effect(values, episode_ci=0.001):
        return stats.over_seeds(values, [episode_ci] * len(values), episodes=300)

    strong_up, strong_down, null = effect([0.20, 0.21, 0.19]), effect([-0.20, -0.21, -0.19]), effect([0.05, -0.04, 0.0])
    assert mod.decided([strong_up, strong_down, null]) == ["higher", "lower", None]
    marginal = effect([0.035, 0.05, 0.065])  # the 95% interval excludes 0, p = 0.03: not at the 1% level
    assert 0.01 < stats.p_value(marginal) < 0.05 and marginal.lo > 0 and marginal.sd < marginal.value
    assert mod.decided([marginal]) == [None]
    assert mod.decided([effect([0.2])]) == [None]  # one seed decides nothing
    same = effect([0.001, -0.001, 0.0005, -0.0005, 0.0, 0.0008, -0.0002, 0.0003])  # inside ±1 pt: no effect
    assert mod.decided([same]) == ["same"]


def test_the_comparison_figure_shows_every_method_and_its_paired_difference():
    rng = np.random.default_rng(2)
    base = [np.clip(rng.normal(0.6, 0.05, 300), 0, 1) for _ in range(3)]
    by = {"nca": _outcomes(base), "pn": _outcomes([np.clip(b + 0.2, 0, 1) for b in base]),
          "mn": None, "spe": _outcomes([rng.permutation(b) for b in base]),  # the same mean: no difference
          "beclr": "needs 5 classes"}
    by["mn"] = by["pn"]
    p = mod.Params(eval_shots=[1, 5], compare=list(by))
    fig = mod.comparison_figure(p, by, _test_split(6))
    left, right = fig.axes[:2]
    assert [t.get_text() for t in left.get_yticklabels()] == ["NCA (000)", "PN = MN (000)", "SPE (002)"]
    acc, diff = left.containers, right.containers  # one errorbar per point: (marker line, caps, bar)
    assert len(acc) == 6 and len(diff) == 4  # 3 methods x 2 shot counts; the 2 non-reference methods x 2
    assert all(c.has_xerr for c in [*acc, *diff])  # every interval drawn (none is marked here)
    means = sorted(float(c.lines[0].get_xdata()[0]) for c in diff)
    want = sorted(100 * r.difference[s].value for r in mod.comparison_rows(p, by)[0] for s in (1, 5)
                  if r.difference.get(s) is not None)
    assert means == pytest.approx(want)
    squares = [c.lines[0] for c in diff if c.lines[0].get_marker() == "s"]
    assert len(squares) == 2 and all(ln.get_markerfacecolor() != "white" for ln in squares)  # PN decided, 1 and 5
    assert [float(ln.get_xdata()[0]) for ln in squares] == pytest.approx([20.0, 20.0], abs=0.5)
