"""Notebook 90's schema (issue 20, item 4): only parameters that apply to a folder; a seed and fractions for the
random and alphabet splits; an image mode that never reads a grayscale folder as RGB; the demo's accuracy
against chance and against the binomial range the test accuracy predicts."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from scipy import stats as sps

import studylib.experiments.use_your_data as mod
from studylib.config import ParamError


def _folder(root: Path, supers: int, classes: int, per_class: int = 2, mode: str = "L") -> Path:
    """``root/<super>/<class>/<image>.png`` (``supers`` 0: ``root/<class>/``), 8 px images in ``mode``."""
    rng = np.random.default_rng(0)
    for s in range(max(supers, 1)):
        base = root / f"alpha{s}" if supers else root
        for c in range(classes):
            for j in range(per_class):
                (base / f"c{c:02d}").mkdir(parents=True, exist_ok=True)
                shape = (8, 8) if mode == "L" else (8, 8, 3)
                Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8)).save(base / f"c{c:02d}" / f"{j}.png")
    return root


def test_only_folder_parameters():
    names = {f.name for f in dataclasses.fields(mod.Params)}
    assert not names & {"rgb", "max_classes"}  # generated-set options do nothing to a folder
    assert {"split_seed", "split_fractions", "image_mode"} <= names
    for f in dataclasses.fields(mod.Params):
        assert "glyphs only" not in f.metadata.get("help", ""), f.name
    with pytest.raises(ParamError, match="split_fractions"):
        mod.Params(split_fractions=[0.5, 0.5]).check()


def test_grayscale_folders_are_read_in_grayscale(tmp_path):
    gray = _folder(tmp_path / "gray", 0, 10)
    p = mod.Params(data_root=str(gray))
    assert mod.decode_mode(p) == "L"
    ds = mod.load_data(p)
    assert ds["train"].images.shape[1] == 1 and ds.info["decode"] == {"mode": "L", "invert": False}
    assert mod.decode_mode(dataclasses.replace(p, image_mode="rgb")) == "RGB"
    assert mod.load_data(dataclasses.replace(p, image_mode="rgb"))["train"].images.shape[1] == 3
    # one colour image makes the folder RGB under auto; grayscale can still be asked for
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(gray / "c00" / "colour.png")
    assert mod.decode_mode(p) == "RGB"
    assert mod.decode_mode(dataclasses.replace(p, image_mode="grayscale")) == "L"


def test_split_seed_and_fractions_reach_the_alphabet_and_random_splits(tmp_path):
    root = _folder(tmp_path / "alpha", 6, 4)  # 6 superclasses x 4 classes
    p = mod.Params(data_root=str(root), split="alphabet", split_fractions=[0.5, 0.17, 0.33])
    supers = {}
    for seed in range(4):
        ds = mod.load_data(dataclasses.replace(p, split_seed=seed))
        assert [ds[s].num_classes for s in ("train", "val", "test")] == [12, 4, 8]  # 3, 1, 2 superclasses
        supers[seed] = tuple(sorted(ds["train"].superclass_names))
    assert len(set(supers.values())) > 1  # the seed picks which superclasses train
    flat = _folder(tmp_path / "flat", 0, 20)
    ds = mod.load_data(mod.Params(data_root=str(flat), split_fractions=[0.5, 0.25, 0.25], split_seed=3))
    assert [ds[s].num_classes for s in ("train", "val", "test")] == [10, 5, 5]


def test_binomial_range_matches_scipy():
    for n, prob in [(15, 0.47), (15, 0.2), (40, 0.9), (7, 0.0), (7, 1.0)]:
        lo, hi = mod.binomial_range(n, prob)
        assert (lo, hi) == (int(sps.binom.ppf(0.025, n, prob)), int(sps.binom.ppf(0.975, n, prob)))


def test_demo_summary_states_chance_and_the_expected_range(monkeypatch):
    p = mod.Params()
    pred = SimpleNamespace(labels=["a", "b", "a", "c", "c", "b"], classes=["a", "b", "c"])
    truth = ["a", "b", "b", "c", "a", "a"]  # 3 of 6 right
    train = type("Split", (), {"num_classes": 19, "__len__": lambda self: 228})()
    est = SimpleNamespace(value=0.6, ci95=0.1, fmt=lambda: "60.0 ± 10.0")
    monkeypatch.setattr(mod, "accuracy", lambda outcomes, c, s: est)  # the models' test accuracy: 60%
    out = mod.demo_summary(p, pred, truth, [object()] * 3, {"train": train})
    assert out["correct"] == 3 and out["chance"] == pytest.approx(1 / 3)
    assert out["range"] == (int(sps.binom.ppf(0.025, 6, 0.6)), int(sps.binom.ppf(0.975, 6, 0.6)))
    assert "3 of 6" in out["text"] and "chance is 1 in 3 (33%)" in out["text"]
    assert "within that range" in out["text"] and "expected to beat chance" in out["text"]
    assert "228 training images of 19 classes" in out["text"]


def test_every_method_of_the_study_is_compared_by_default_with_its_own_recipe():
    p = mod.Params()
    assert p.compare == ["nca", "pn", "mn", "spe", "set2model", "infopatch", "beclr"]
    specs = {m: mod.spec_from_params(p, 1, m) for m in p.compare}
    assert {m: s.method for m, s in specs.items()} == {
        "nca": "nca", "pn": "pn", "mn": "mn", "spe": "spe", "set2model": "set2model", "infopatch": "infopatch",
        "beclr": "beclr"}
    assert specs["nca"].train.sampler == "shuffled" and specs["nca"].train.batch_size == p.batch_size
    for m in ("pn", "mn", "spe", "infopatch"):
        t = specs[m].train
        assert (t.sampler, t.ways, t.shots, t.queries) == ("episodic", p.episode_ways, p.episode_shots,
                                                           p.episode_queries), m
    assert specs["set2model"].train.shots == 2  # a Gaussian needs a set of at least 2
    assert specs["beclr"].train.sampler == "shuffled" and specs["beclr"].method_options["use_dyce"]
    # SPE (seed 002 App. A.1): the last Conv4 block outputs mean and variance, 2d numbers
    assert specs["spe"].backbone_options == {"hidden": p.hidden, "last_block_plain": True,
                                             "out_channels": 2 * p.spe_dim}
    assert (specs["spe"].train.optimizer, specs["spe"].train.lr) == ("adam", 1e-3)
    for s in specs.values():  # one data set, backbone, epochs, training seed and evaluation protocol
        assert (s.data, s.eval, s.backbone, s.train.epochs, s.train.seed) == \
            (specs["nca"].data, specs["nca"].eval, p.backbone, p.epochs, 1)
    with pytest.raises(ParamError, match="compare"):
        mod.Params(compare=["nca", "dino"]).check()


def test_a_method_that_does_not_fit_the_folder_gets_a_reason_not_a_silent_drop():
    ds = {"train": SimpleNamespace(labels=torch.arange(4).repeat_interleave(3))}  # 4 classes x 3 images
    p = mod.Params(episode_ways=5, batch_size=8)
    assert "needs 5 training classes" in mod.cannot_run(p, "pn", ds)
    assert mod.cannot_run(p, "nca", ds) is None
    assert "batch_size=16 exceeds the 12" in mod.cannot_run(dataclasses.replace(p, batch_size=16), "beclr", ds)
    rows = mod.comparison_table(dataclasses.replace(p, eval_shots=[1]), {"pn": "needs 5 training classes"})
    assert rows[0]["1-shot (%)"] == "not run" and rows[0]["note"].startswith("cannot run: needs 5")


def test_every_method_trains_and_is_evaluated_on_the_same_episodes(tmp_path, monkeypatch):
    """A small run of every method: each trains, and the episode index tensors its evaluation drew are those of
    every other method of the same training seed (recorded where the evaluation samples them)."""
    import importlib
    ev = importlib.import_module("studylib.evaluation.evaluate")
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path / "cache"))
    drawn = []
    real = ev.sample_episodes

    def recording(*args, **kw):
        eps = real(*args, **kw)
        drawn.append((eps.support.clone(), eps.query.clone()))
        return eps

    monkeypatch.setattr(ev, "sample_episodes", recording)
    root = _folder(tmp_path / "imgs", 0, 10, per_class=6)
    p = mod.Params(data_root=str(root), image_size=16, split_fractions=[0.4, 0.1, 0.5], epochs=1, max_steps=2,
                   batch_size=8, hidden=8, episode_ways=3, episode_queries=2, eval_shots=[1], eval_queries=2,
                   eval_episodes=4, seeds=[0, 1])
    p.check()
    by_method = mod.compare(p, progress=False)
    assert list(by_method) == list(mod.COMPARE_METHODS)
    trained = [m for m in mod.COMPARE_METHODS if m != "mn"]  # MN = PN with 1-shot episodes: trained once
    assert by_method["mn"] is by_method["pn"]
    assert len(drawn) == len(trained) * len(p.seeds)  # one evaluation per run, in sweep order
    for m, outs in by_method.items():
        assert [o.spec.train.seed for o in outs] == p.seeds, m
        assert all(o.result["train_seconds"] > 0 for o in outs), m
    n = len(p.seeds)
    for i in range(n):
        support, query = drawn[i]  # nca's run of seed i
        for k in range(1, len(trained)):
            s2, q2 = drawn[k * n + i]
            assert torch.equal(support, s2) and torch.equal(query, q2), trained[k]
    rows = mod.comparison_table(p, by_method, mod.load_data(p))
    assert [r["method"] for r in rows][:2] == ["NCA (000)", "PN = MN (000)"]
    assert [r["seeds"] for r in rows] == [2] * 6 and all(r["train s/run"] is not None for r in rows)


def test_comparison_table_pairs_the_episodes_of_each_seed():
    rng = np.random.default_rng(1)

    def outcome(acc, secs):
        return SimpleNamespace(accuracies=lambda c, s, acc=acc: acc[s], result={"train_seconds": secs})

    p = mod.Params(eval_shots=[1])
    a = [outcome({1: rng.random(50)}, 2.0) for _ in range(3)]
    b = [outcome({1: rng.random(50)}, 4.0) for _ in range(3)]
    rows = mod.comparison_table(p, {"nca": a, "pn": b})
    per_seed = [float(np.mean(y.accuracies("nearest_centroid", 1) - x.accuracies("nearest_centroid", 1)))
                for x, y in zip(a, b)]  # paired: the same episodes per seed
    # the spread over seeds, floored at the seeds' mean episode standard error of the paired differences
    floor = np.mean([np.std(y.accuracies("nearest_centroid", 1) - x.accuracies("nearest_centroid", 1), ddof=1)
                     / np.sqrt(50) for x, y in zip(a, b)])
    mean, sd = np.mean(per_seed), max(np.std(per_seed, ddof=1), floor)
    half = sps.t.ppf(0.975, 2) * sd / np.sqrt(3)
    assert rows[1]["1-shot vs nca (pts)"] == f"{100 * mean:+.1f} ± {100 * half:.1f}"
    assert rows[0]["1-shot vs nca (pts)"] == "(reference)"
    assert [r["train s/run"] for r in rows] == [2.0, 4.0]
