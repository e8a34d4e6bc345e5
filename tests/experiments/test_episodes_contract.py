"""Notebooks 04 and 05 on the notebook contract: cut marks, seeds, paired claims, check-scale cuts."""

from __future__ import annotations

import pytest
import torch

from studylib.config import cut_fields, load_params
from studylib.evaluation.verdicts import NOT_TESTED, REPRODUCED
from studylib.experiments import ablations, comparison, episodes_contract as ct
from studylib.experiments.episodes_common import nca

N_TRAIN = 3840


class _Fake:
    """An outcome whose per-episode accuracies are a fixed tensor per (classifier, shots)."""

    def __init__(self, acc: dict[tuple[str, int], torch.Tensor]) -> None:
        self.acc = acc

    def accuracies(self, classifier: str = "nearest_centroid", shots: int = 1) -> torch.Tensor:
        return self.acc[(classifier, shots)]


def _untrained(outcomes, level=0.2):
    """Fake untrained networks of ``outcomes``' models: ``level`` on every episode (far below the trained ones)."""
    return {v: [_Fake({k: torch.full_like(a, level) for k, a in o.acc.items()}) for o in os]
            for v, os in outcomes.items()}


def _outcomes(variants, level, seeds=5, episodes=50):
    """Fake outcomes: accuracy ``level(variant, classifier, shots)`` plus a training-seed effect of each model
    (sd 0.002: without it, differences would agree exactly across seeds, and a test needs a spread) on episodes
    the models of a seed share."""
    g = torch.Generator().manual_seed(0)
    base = torch.rand(episodes, generator=g) * 0.1
    out = {}
    for v in variants:
        out[v] = [_Fake({(c, s): base + level(v, c, s) + 0.002 * float(torch.randn(1, generator=g))
                         for c in ("nearest_centroid", "soft_assignment", "knn") for s in (1, 5)})
                  for _ in range(seeds)]
    return out


@pytest.mark.parametrize("module", [ablations, comparison])
def test_schema_marks_the_cuts_and_defaults_to_three_seeds(module):
    p = module.Params()
    p.check()
    assert p.seeds == [0, 1, 2]
    assert {"scale", "data_root", "epochs", "eval_episodes", "seeds", "max_steps", "eval_mean_images"} <= \
        cut_fields(module.Params)
    assert "backbone" not in cut_fields(module.Params) and "lr" not in cut_fields(module.Params)


@pytest.mark.parametrize("module", [ablations, comparison])
def test_static_claims_need_no_runs(module):
    table = module.claims(module.Params())
    assert len(table) >= 10 and all(c.measured is None for c in table)
    assert "rule" in table.checked()


def test_check_scale_cuts_reach_the_run_specs():
    p = load_params(ablations.Params, ablations.NOTEBOOK, "smoke", max_steps=2, eval_mean_images=32, seeds=[0, 1])
    specs = ct.specs(p, [nca(128)], N_TRAIN)
    assert [s.train.seed for s in specs] == [0, 1]
    assert all(s.train.max_steps == 2 and s.eval.mean_images == 32 and s.eval.seed == 0 for s in specs)


def test_repeated_seeds_and_bad_episode_settings_are_refused():
    with pytest.raises(ValueError, match="repeat"):
        ablations.Params(seeds=[0, 0]).check()
    with pytest.raises(ValueError, match="n = 1"):
        comparison.Params(snell_1shot=[30, 5, 15]).check()
    with pytest.raises(ValueError, match="multiple"):
        ablations.Params(batch_sizes=[100]).check()


def test_ablation_claims_follow_the_paired_differences():
    p = ablations.Params()
    fixed = ablations.row_variant(3, 128, 5, 8)
    outs = _outcomes([v for _, _, v in ablations.variants(p)], lambda v, c, s: 0.6 + (0.1 if v == fixed else 0.0),
                     seeds=10)  # enough seeds for the no-effect test to decide "no difference" at p_adj <= 0.01
    table = ablations.claims(p, outs, _untrained(outs))
    assert table["fig4-all-ablations-5shot-b128"].verdict == REPRODUCED
    assert table["fig4-fixed-beats-random-1shot-b128"].verdict == REPRODUCED
    assert table["fig4-replacement-1shot-b128"].verdict == REPRODUCED  # identical: within +-1 point
    # no difference at all (three seeds 0.001 apart): "no effect" inside the claim's ±1 pt band, a finding
    assert table["fig4-nosq-5shot-b128"].judgement.label == "not reproduced (no effect)"
    assert table["fig4-gap-closes-1shot"].verdict == NOT_TESTED      # glyphs, b = 128


def test_comparison_competitive_claim_uses_the_margin():
    p = comparison.Params()
    vs = {v for _, a, b, _ in comparison.models(p) for v in (a, b)}
    ce = next(v for v in vs if v.method == "ce")
    # NCA - SimpleShot: about equal, and 17 points worse (one-sided: it fails); NCA 17 points better: SimpleShot
    # under-trained, its regime check fails (issue 31: not a finding about NCA)
    for gap, verdict in ((0.17, NOT_TESTED), (0.005, REPRODUCED), (-0.17, "not reproduced")):
        outs = _outcomes(vs, lambda v, c, s, g=gap: 0.6 - (g if v == ce else 0.0))
        table = comparison.claims(p, outs, _untrained(outs))
        assert table["t2-nca-competitive-simpleshot-5shot"].verdict == verdict, gap
    # the no-effect band of a Table 2 contrast is half the paper's own gap: NCA vs PN at 5 shots, 0.50 pts
    assert table["t2-nca-beats-pn-5shot"].expect.delta == pytest.approx(0.0025)
    assert table["t2-nca-beats-pn-1shot"].expect.delta == pytest.approx(0.00615)  # 62.55 - 61.32
    assert table["t2-ours-beat-snell-pn-5shot"].expect.delta is None  # 2.35 pts: the default ±1 pt band
    assert table["t2-nca-level-1shot"].verdict == NOT_TESTED
    values = comparison.reference_values(p, outs)
    assert all(getattr(v, "n_seeds", 5) == 5 for v in values.values())


def test_simpleshot_epochs_lengthen_only_the_cross_entropy_runs(monkeypatch):
    """Issue 31: SimpleShot (cross-entropy over the training classes) may train longer than the other models to
    reach its paper-relative level; unset, every run keeps the smoke configuration (and its stored run)."""
    captured = []
    monkeypatch.setattr(comparison, "run_sweep", lambda specs, progress=True: captured.extend(specs) or
                        [object()] * len(specs))
    p = comparison.Params()
    comparison.run(p, train_images=N_TRAIN, progress=False)
    plain = {(s.name, s.train.seed): s.config() for s in captured}
    models = list(dict.fromkeys(v for _, a, b, _ in comparison.models(p) for v in (a, b)))
    ref = {(s.name, s.train.seed): s.config() for s in ct.specs(p, models, N_TRAIN)}
    assert plain == ref and all(s.train.epochs == p.epochs for s in captured)
    captured.clear()
    out = comparison.run(comparison.Params(simpleshot_epochs=8), train_images=N_TRAIN, progress=False)
    epochs = {s.name: s.train.epochs for s in captured}
    assert epochs.pop("ep000-ce-b256") == 8 and set(epochs.values()) == {p.epochs}
    assert len(out) == len(models) == 7 and all(len(os) == len(p.seeds) for os in out.values())
