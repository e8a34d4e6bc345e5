"""Notebook 13_infopatch's experiment module: ablation rows, run specs, static claims, formulas (no training)."""

from __future__ import annotations

import pytest

import studylib.experiments.infopatch as mod
from studylib.training.loop import lr_factor


def test_rows_add_one_component_each() -> None:
    p = mod.Params()
    opts = [mod.method_options(p, r) for r, _ in mod.ROWS]
    assert [o["local_weight"] for o in opts] == [0.0, 0.5, 0.5, 0.5, 0.5]
    assert [o["patches"] for o in opts] == [False, False, True, True, True]
    assert [o["patchmix"] for o in opts] == [False, False, False, True, True]
    assert [o["block"] for o in opts] == ["none", "none", "none", "none", "code"]
    assert all(o["box"] == "episode" and o["scale"] == 7.0 for o in opts)  # the code's PatchMix by default
    with pytest.raises(ValueError, match="ablation row"):
        mod.method_options(p, "mixup")


def test_spec_selects_on_validation_and_uses_the_codes_schedule() -> None:
    p = mod.Params()
    spec = mod.spec_for(p, "block", 0)
    t = spec.train
    assert spec.backbone == "resnet12_infopatch" and spec.method == "infopatch"
    assert t.sampler == "episodic" and t.episodes_per_batch == 2 and t.nesterov
    assert t.patience == p.epochs  # best validation epoch kept; never stops early
    assert spec.eval.classifiers == ["cosine_prototype", "cosine_nearest_sample"] and not spec.eval.cl2n and spec.eval.split == "test"
    total = 90 * 1200
    paper = mod.TrainConfig(milestones=list(p.lr_milestones), gammas=list(p.lr_factors))
    lrs = [0.1 * lr_factor(paper, e * 1200, total) for e in (59, 60, 70, 80)]
    assert lrs == pytest.approx([0.1, 0.006, 0.0012, 0.00024])
    # no validation: keep the last epoch (no patience)
    p.val_episodes = 0
    assert mod.spec_for(p, "block", 0).train.patience is None
    # the synthfs size reaches the data spec
    assert spec.data.options["instances"] == 30


def test_static_claims_and_formulas() -> None:
    p = mod.Params()
    table = mod.claims(p)
    ids = [c.id for c in table]
    assert ids[:2] == ["ablation-infonce-1shot", "ablation-infonce-5shot"] and len(ids) == 19
    assert not table["level-1shot"].applies and "67.67" in table["level-1shot"].paper
    assert "82.44" in table["level-5shot"].paper
    p2 = mod.Params(scale="paper", data="mini_imagenet", data_root="x", image_size=84, widths=[64, 128, 256, 512])
    assert mod.claims(p2)["level-5shot"].applies
    assert mod.map_side(84) == 11 and mod.map_side(32) == 4
    text = mod.grid_text(84, (10, 50, 30, 84))
    assert "cells rows 1:7, cols 4:11" in text
    p.rows = ["ce", "block"]
    assert mod.steps(p) == [("ce", "block")]
    with pytest.raises(ValueError, match="lr_factors"):
        mod.Params(lr_factors=[0.1]).check()


def test_missing_headline_claims_of_issue_19() -> None:
    """The full method against its CE baseline (on every data set of the paper), Eq. 2 beside the code's test,
    and a 5-shot-trained model, declared at every scale, with the check scale building the paper's ids."""
    from studylib.config import load_params
    from studylib.claims.store import static_claims
    smoke = mod.claims(mod.Params())
    for cid in ("full-beats-ce-1shot", "full-beats-ce-5shot", "eq2-is-code-test-1shot", "code-test-beats-eq2-5shot",
                "5shot-model-beats-1shot-model"):
        assert smoke[cid].applies, cid
    for cid in ("tiered-full-beats-ce-1shot", "fc100-full-beats-ce-5shot"):
        assert not smoke[cid].applies and "needs data" in smoke[cid].why_not
    fc100 = mod.claims(mod.Params(data="fc100", data_root="standin:fc100"))
    assert fc100["fc100-full-beats-ce-1shot"].applies and not fc100["full-beats-ce-1shot"].applies
    assert [c.id for c in static_claims(mod.NOTEBOOK, "check")] == [c.id for c in static_claims(mod.NOTEBOOK, "paper")]
    paper = load_params(mod.Params, mod.NOTEBOOK, "paper")
    assert paper.five_shot_model and mod.claims(paper)["level-5shot"].applies
    # the 5-shot model: the full method's options on 5-shot training episodes, its own run name
    five, one = mod.spec_for(paper, mod.FIVE_SHOT, 0), mod.spec_for(paper, "block", 0)
    assert five.train.shots == 5 and one.train.shots == 1 and five.method_options == one.method_options
    assert five.name != one.name and five.eval == one.eval


@pytest.mark.parametrize("data, size", [("fc100", 32), ("tiered_imagenet", 84)])
def test_the_papers_other_data_sets_read_through_the_real_readers(data, size) -> None:
    """paper.yaml's tieredImageNet / FC100 overrides: a stand-in in the real on-disk format is read by the real
    reader through this notebook's data path, and the data set's own claims apply to that run."""
    p = mod.Params(data=data, data_root=f"standin:{data}", image_size=size, synthfs_instances=None)
    p.check()
    ds = mod.load(p)
    assert ds["train"].images.shape[1:] == (3, size, size) and len(ds["test"]) > 0
    tag = {"fc100": "fc100", "tiered_imagenet": "tiered"}[data]
    table = mod.claims(p)
    assert table[f"{tag}-full-beats-ce-5shot"].applies and not table["full-beats-ce-5shot"].applies
