"""The runner: finished runs are reused, interrupted runs resume to the same result, bad parameters are refused."""

from __future__ import annotations

import pytest
import torch

from studylib.config import ParamError, notebook_params
from studylib.experiments import quickstart as qs
import studylib.runs.runner as runner
from studylib.runs.runner import DataSpec, EvalSpec, RunSpec, run_spec
from studylib.training.loop import Interrupted, TrainConfig
from studylib.training.runstore import RunStore


def _spec(**train) -> RunSpec:
    cfg = dict(epochs=2, sampler="shuffled", batch_size=64, lr=0.05, device="cpu", checkpoint_every=3)
    cfg.update(train)
    return RunSpec(name="t", data=DataSpec("glyphs", None, {"size": 28, "split": "random", "max_classes": 40,
                                                           "seed": 0}),
                   backbone="conv4", backbone_options={"hidden": 16}, method="nca", augment="none",
                   train=TrainConfig(**cfg),
                   eval=EvalSpec(episodes=60, val_episodes=20, classifiers=["nearest_centroid", "knn"]))


def test_finished_run_is_reused_without_training(tmp_path, monkeypatch):
    store = RunStore(tmp_path)
    first = run_spec(_spec(), store, progress=False)
    assert first.run.finished and set(first.result["test"]) == {"nearest_centroid/1", "nearest_centroid/5",
                                                               "knn/1", "knn/5"}
    assert first.accuracies("nearest_centroid", 5).shape == (60,)
    assert any("val_acc" in m for m in first.metrics)

    def boom(*a, **k):
        raise AssertionError("a finished run must not train again")

    monkeypatch.setattr(runner, "train", boom)
    again = run_spec(_spec(), store, progress=False)
    assert again.result == first.result and again.run.path == first.run.path
    # A different configuration is a different run.
    assert store.run("t", _spec(lr=0.01).config()).path != first.run.path


def test_interrupted_run_resumes_to_identical_result(tmp_path):
    clean = run_spec(_spec(), RunStore(tmp_path / "clean"), progress=False)
    store = RunStore(tmp_path / "killed")
    with pytest.raises(Interrupted):
        run_spec(_spec(), store, stop_after=4, progress=False)
    resumed = run_spec(_spec(), store, progress=False)
    assert resumed.result["test"] == clean.result["test"]
    a, b = clean.run.load_tensor("weights.pt"), resumed.run.load_tensor("weights.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_notebook_refuses_unknown_and_mistyped_parameters():
    baseline = {"np"}
    with pytest.raises(ParamError, match=r"unknown parameter 'epoch' in notebook 00_quickstart; did you mean 'epochs'\? allowed: .*epochs"):
        notebook_params(qs.Params, {"epoch": 3}, baseline, qs.NOTEBOOK)
    with pytest.raises(ParamError, match=r"'epochs' must be int, got str"):
        notebook_params(qs.Params, {"epochs": "3"}, baseline, qs.NOTEBOOK)
    with pytest.raises(ParamError, match=r"'backbone' = 'vgg'.*allowed values: conv4"):
        notebook_params(qs.Params, {"backbone": "vgg"}, baseline, qs.NOTEBOOK)
    with pytest.raises(ValueError, match="pass data_root"):
        notebook_params(qs.Params, {"data": "mini_imagenet"}, baseline, qs.NOTEBOOK)


def test_impossible_episode_request_fails_before_training(tmp_path):
    spec = _spec(sampler="episodic", ways=50, shots=1, queries=1, batches_per_epoch=2)
    with pytest.raises(Exception, match=r"50-way episodes need 50 classes but the training split"):
        run_spec(spec, RunStore(tmp_path), progress=False)


def test_a_method_whose_training_changed_gets_new_run_hashes():
    """Set2Model's loss gained the histogram range's gradient (issue 23, VERSION 2): its runs trained before must
    not be reused under the same hash, while methods at version 1 keep their hashes (and their stored runs)."""
    from dataclasses import replace

    from studylib.methods import METHODS, method_version
    from studylib.utils import config_hash
    nca = _spec()
    s2m = replace(nca, method="set2model")
    assert method_version("nca") == 1 and "method_version" not in nca.config()
    assert method_version("set2model") == METHODS["set2model"].VERSION == 3
    old = s2m.config()
    assert old.pop("method_version") == 3
    assert config_hash(old) != config_hash(s2m.config())  # the version-1 configuration is another run
    assert config_hash({**old, "method_version": 2}) != config_hash(s2m.config())  # version 2: EM capped at 30


def test_normalisation_is_measured_once_per_image_tensor_and_again_after_an_in_place_change(monkeypatch):
    """The memo gives the direct computation's numbers, is hit on a second call with the same tensor, and a tensor
    modified in place (its version counter moves) or a new tensor is measured afresh."""
    from studylib.data.base import ImageSplit
    from studylib.runs import runner as R
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (40, 3, 6, 6), generator=g, dtype=torch.uint8)
    split = ImageSplit(images, torch.arange(40) % 4, [f"c{i}" for i in range(4)], name="s")
    x = images.float().div(255)
    direct = (x.mean(dim=(0, 2, 3)).tolist(), x.std(dim=(0, 2, 3)).clamp_min(1e-3).tolist())
    assert R.normalisation(split) == direct
    calls = []
    real_std = torch.Tensor.std
    monkeypatch.setattr(torch.Tensor, "std", lambda self, *a, **k: calls.append(1) or real_std(self, *a, **k))
    mean, std = R.normalisation(split)
    assert (mean, std) == direct and not calls  # from the memo
    mean.append(9.0)  # callers get copies: the memo cannot be changed through them
    assert R.normalisation(split) == direct
    images[:20] = 0  # in place: measured again
    x = images.float().div(255)
    want = (x.mean(dim=(0, 2, 3)).tolist(), torch.std(x, dim=(0, 2, 3)).clamp_min(1e-3).tolist())  # not the method
    assert R.normalisation(split) == want and want != direct
    assert len(calls) == 1


def test_reused_runs_add_their_recorded_seconds_once_and_runs_made_here_add_none(tmp_path, monkeypatch):
    """A claims table's ``seconds`` is the process's wall time plus the recorded training and evaluation seconds of
    the runs it took from the store, each run once, so that a table re-made from cached runs still tells the power
    analysis what the notebook costs; runs trained in the same process are in its wall time already."""
    from studylib import provenance as PV
    from studylib.claims import table as T
    monkeypatch.setattr(PV, "REUSED_SECONDS", {})
    monkeypatch.setattr(PV, "_MADE_HERE", set())
    store = RunStore(tmp_path)
    first = run_spec(_spec(), store, progress=False)
    run_spec(_spec(), store, progress=False)  # read back in the process that made it
    assert PV.reused_seconds() == 0.0
    monkeypatch.setattr(PV, "_MADE_HERE", set())  # as in a later process
    for _ in range(3):
        again = run_spec(_spec(), store, progress=False)
    recorded = first.run.result()["train_seconds"] + again.result["eval_seconds"]
    assert recorded > 0 and PV.reused_seconds() == pytest.approx(recorded)
    prov = T.provenance("00_quickstart")
    assert prov["reused_seconds"] == round(recorded, 1) and prov["seconds"] >= prov["reused_seconds"]
