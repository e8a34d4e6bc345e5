"""Helpers of notebooks 09-10 (seed 002, SPE): evaluation path, factor alignment, AUROC, schedules, specs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import norm, sem
from sklearn.linear_model import LinearRegression
from torch import nn

from studylib.config import load_params
from studylib.data import load_dataset
from studylib.data.base import FewShotDataset, ImageSplit
from studylib.evaluation import evaluate
from studylib.experiments import spe_omniglot as so
from studylib.experiments import spe_synthetic as ss
from studylib.experiments.spe_common import few_shot_accuracies, method_parts, model_features
from studylib.methods.spe import SPEMethod
from studylib.models import build_backbone
from studylib.runs.runner import Outcome, RunSpec, run_spec
from studylib.training.loop import TrainConfig, lr_factor
from studylib.training.runstore import RunStore
from conftest import OMNIGLOT_ZIP, needs_omniglot  # tests/conftest.py


# ------------------------------------------------------------------------------------------------ alignment

def test_eta_squared_equals_r2_of_one_hot_regression():
    """The correlation ratio is the R^2 of regressing a column on its group indicators (one-way ANOVA)."""
    g = torch.Generator().manual_seed(0)
    groups = torch.randint(0, 3, (200,), generator=g)
    x = torch.randn(200, 2, generator=g, dtype=torch.float64) + torch.stack([groups * 1.5, groups * 0.1], 1)
    onehot = torch.nn.functional.one_hot(groups, 3).double().numpy()
    ref = [LinearRegression().fit(onehot, x[:, j].numpy()).score(onehot, x[:, j].numpy()) for j in range(2)]
    np.testing.assert_allclose(ss.eta_squared(x, groups).numpy(), ref, rtol=1e-9)


@pytest.mark.parametrize("colour", [0, 1])
def test_factor_alignment_finds_the_colour_dimension(colour):
    """Class 2i + j has orientation centre i and hue centre j: the dimension that tracks j codes colour."""
    g = torch.Generator().manual_seed(1)
    labels = torch.arange(4).repeat_interleave(50)
    mu = torch.randn(200, 2, generator=g) * 0.3
    mu[:, colour] += 2.0 * (labels % 2)
    mu[:, 1 - colour] += 2.0 * (labels // 2)
    a = ss.factor_alignment(mu, labels)
    assert (a["colour_dim"], a["orientation_dim"]) == (colour, 1 - colour)
    assert a["eta2_hue"][colour] > 0.8 and a["eta2_orientation"][1 - colour] > 0.8


# ---------------------------------------------------------------------------------------------------- AUROC

def test_auroc_matches_the_binormal_formula_and_hanley_mcneil_width():
    """Scores N(0,1) vs N(d,1): AUROC = Phi(d / sqrt 2); the bootstrap interval's width matches the
    Hanley-McNeil (1982) standard error."""
    rng = np.random.default_rng(0)
    d, n = 1.0, 2000
    clean, shifted = rng.normal(0, 1, n), rng.normal(d, 1, n)
    auc, lo, hi = ss.auroc_ci(clean, shifted, paired=False, resamples=200)
    a = norm.cdf(d / math.sqrt(2))
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    se = math.sqrt((a * (1 - a) + (n - 1) * (q1 - a * a) + (n - 1) * (q2 - a * a)) / (n * n))
    assert abs(auc - a) < 4 * se and lo < auc < hi
    assert (hi - lo) / (2 * 1.96) == pytest.approx(se, rel=0.3)
    auc_p, lo_p, hi_p = ss.auroc_ci(clean, shifted, paired=True, resamples=50)
    assert auc_p == auc and lo_p <= auc <= hi_p


# ---------------------------------------------------------------------------------- evaluation: PN limit

class _FixedGaussian(nn.Module):
    """Maps an image to ``mu || raw_var``: mu a fixed linear map of the pixels, raw_var = ``raw`` everywhere."""

    def __init__(self, pixels: int, dim: int, raw: float) -> None:
        super().__init__()
        self.lin = nn.Linear(pixels, 2 * dim)
        with torch.no_grad():
            self.lin.weight[dim:].zero_()
            self.lin.bias[dim:].fill_(raw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x.flatten(1))


def test_spe_evaluation_reduces_to_nearest_centroid_as_variances_vanish(tmp_path):
    """Seed 002 Sec. 2.2: with sigma_x^2 -> 0 and equal class variances the SPE posterior is the PN's, so the
    naive-sampler evaluation on mu || var must give the nearest-centroid accuracies of the means (no CL2N)."""
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (8 * 20, 1, 4, 4), generator=g, dtype=torch.uint8)
    labels = torch.arange(8).repeat_interleave(20)
    ds = FewShotDataset("toy", {"test": ImageSplit(images, labels, [str(i) for i in range(8)])})
    method = SPEMethod(_FixedGaussian(16, 3, raw=-60.0), None, dim=3, support_size=5, min_var=0.0)  # var_x ~ 1e-26
    method.eval()
    transform = lambda x: x.float() / 255.0  # noqa: E731
    run = RunStore(tmp_path).run("toy", {"k": 1})
    out = Outcome(RunSpec("toy"), run, {})
    acc = few_shot_accuracies(out, [5], [1, 5], 15, 40, samples=20, loaded=(method, transform, ds))
    with torch.no_grad():
        mu = method.head(transform(images))[0]
    ref = evaluate(mu, labels, ways=5, shots=[1, 5], queries=15, episodes=40, classifier="nearest_centroid")
    for n in (1, 5):
        torch.testing.assert_close(acc[f"5way/{n}shot"], ref[("nearest_centroid", n)].accuracies)
    assert any(p.name.startswith("fewshot-") for p in run.path.iterdir())  # cached in the run's folder
    again = few_shot_accuracies(out, [5], [1, 5], 15, 40, samples=20, loaded=None)  # loads, never rebuilds
    torch.testing.assert_close(again["5way/1shot"], acc["5way/1shot"])


# ------------------------------------------------------------------------------------------- specs, parts

@pytest.mark.parametrize("kind,out", [("spe", 6), ("pn", 3)])
def test_method_parts_give_2d_outputs_for_spe_and_d_for_pn(kind, out):
    name, m_opts, bb_opts = method_parts(kind, 3, 8)
    x = torch.rand(2, 1, 28, 28)
    assert build_backbone("conv4", 1, **bb_opts)(x).shape == (2, out)
    assert name == ("spe" if kind == "spe" else "pn_deterministic")


def test_halving_schedule_matches_appendix_a1():
    """App. A.1: lr 1e-3 halved every 50 epochs -> factor 0.5 ** floor(epoch / 50) at every step."""
    p = load_params(so.Params, so.NOTEBOOK, "smoke", epochs=300, halve_every=50, batches_per_epoch=10)
    spec = so.make_spec(p, "spe", 2)
    total = p.epochs * p.batches_per_epoch
    for step in range(0, total, 7):
        assert lr_factor(spec.train, step, total) == pytest.approx(0.5 ** (step // (50 * 10)))


def test_fig4_and_table_share_the_intersection_2d_run():
    """The 2-D intersection SPE with s = table_samples is the same run in Fig. 4 and Table 1, seed by seed."""
    p = load_params(so.Params, so.NOTEBOOK, "smoke")
    f4 = {s.name: s.config() for _, s in so.fig4_specs(p)}
    tb = {s.name: s.config() for _, s in so.table_specs(p)}
    shared = set(f4) & set(tb)
    assert len(shared) == len(p.seeds) and all(f4[k] == tb[k] for k in shared)
    assert len(f4) == len(p.fig4_samplers) * len(p.fig4_samples) * len(p.seeds)
    counts = so.run_counts(p)
    assert counts["distinct runs"] == counts["fig4 runs"] + counts["table runs"] - len(p.seeds)
    assert {so.make_spec(p, "pn", 2).method, so.make_spec(p, "spe", 2).method} == {"pn_deterministic", "spe"}
    # every seed is evaluated on the same episodes (paired differences)
    assert {s.eval.seed for _, s in so.fig4_specs(p) + so.table_specs(p)} == {0}


def test_omniglot_claims_are_static_and_measured_pairwise(monkeypatch):
    """claims(p) lists the same rows with or without runs; with runs each effect is the paired difference of the
    per-seed, per-episode accuracies (checked against NumPy by hand)."""
    p = load_params(so.Params, so.NOTEBOOK, "smoke")
    static = so.claims(p)
    assert [c.id for c in static] == [c.id for c in so.claims(load_params(so.Params, so.NOTEBOOK, "smoke"))]
    assert not static["table1-64d-1shot-5way"].applies and static["table1-2d-1shot-20way"].applies
    rng = np.random.default_rng(0)
    fake = {}

    def acc(out, ways, shots, queries, episodes, split="test", seed=0, samples=200, loaded=None, untrained=False):
        key = (out, tuple(ways), tuple(shots), untrained)
        if key not in fake:
            fake[key] = {f"{w}way/{n}shot": torch.tensor(rng.random(episodes)) for w in ways for n in shots}
        return fake[key]

    monkeypatch.setattr(so, "few_shot_accuracies", acc)
    monkeypatch.setattr(so, "untrained_accuracies", lambda out, *a, **k: acc(out, *a, **k, untrained=True))
    runs = so.Runs([(k, f"{s.name}") for k, s in so.fig4_specs(p)], [(k, f"{s.name}") for k, s in so.table_specs(p)])
    table = so.claims(p, runs)
    tk = (tuple(p.table_ways), tuple(p.table_shots))
    pn = [fake[(s.name, *tk, False)]["20way/1shot"].numpy() for k, s in so.table_specs(p) if k["method"] == "pn"]
    spe = [fake[(s.name, *tk, False)]["20way/1shot"].numpy() for k, s in so.table_specs(p) if k["method"] == "spe"]
    est = table["table1-2d-1shot-20way"].measured
    assert est.n_seeds == len(p.seeds)
    np.testing.assert_allclose(est.seeds, [np.mean(a - b) for a, b in zip(spe, pn)])
    assert table["table1-64d-1shot-5way"].verdict == "not tested"
    assert set(so.reference_values(p, runs)) >= {"fig4/naive/s1", "table1/pn/2d/1shot/5way"}


def test_omniglot_data_spec_uses_rotations_and_vinyals():
    p = load_params(so.Params, so.NOTEBOOK, "paper")
    d = so.data_spec(p)
    assert (d.name, d.options["rotations"], d.options["split"], d.options["size"]) == ("omniglot", True, "vinyals", 28)
    with pytest.raises(ValueError, match="data_root"):
        load_params(so.Params, so.NOTEBOOK, "paper", data_root=None)


# ------------------------------------------------------------------------------------ synthetic end to end

def test_lshapes_is_registered_and_the_synthetic_pipeline_runs():
    """A tiny two-seed run through the runner: data by name, training, analysis, claims and reference values."""
    p = load_params(ss.Params, ss.NOTEBOOK, "smoke", image_size=16, hidden=8, train_per_class=10, test_per_class=20,
                    eval_queries=5, batches_per_epoch=3, queries=2, eval_episodes=10, eval_samples=10, per_level=2,
                    hue_levels=[0.0, 40.0], leg_fractions=[1.0, 0.3], ood_hue_levels=[30.0],
                    ood_leg_fractions=[0.4], seeds=[0, 1], interp_steps=3)
    ds = load_dataset("lshapes", None, **ss.data_spec(p).options)
    assert ds["train"].images.shape == (40, 3, 16, 16) and ds["test"].num_classes == 4
    assert [r["images"] for r in ss.data_table(p, ds)] == [40, 80]
    assert ss.bayes_optimal(p) == pytest.approx(norm.cdf(1.5) ** 2, abs=1e-4)  # boundaries 1.5 std away
    outcomes = ss.run(p, progress=False)
    analyses = ss.analyse(p, outcomes)
    assert [a.seed for a in analyses] == [0, 1] and all(a.accuracies.shape == (10,) for a in analyses)
    t = ss.load(outcomes[0])
    a = analyses[0]
    align = a.align
    assert {align["colour_dim"], align["orientation_dim"]} == {0, 1}
    probes = ss.fig3_probes(p)
    rows = a.sweep
    assert len(rows) == 8
    for r in rows:  # reference: NumPy's mean and 1.96 x SciPy's SEM of the variances of the level's images
        probe = probes[r["probe"]]
        v = t.embed(probe.images)[1][:, align[f"{r['dim']}_dim"]].double().numpy()[(probe.value == r["level"]).numpy()]
        assert r["n"] == len(v) and r["mean"] == pytest.approx(v.mean()) and r["ci95"] == pytest.approx(1.96 * sem(v))
    assert len(ss.sweep_trends(rows)) == 4
    # Fig. 3 effect by hand: log of the strongest over the mildest level's mean variance on the colour dim
    by = {(r["probe"], r["dim"], r["level"]): r["mean"] for r in rows}
    assert ss.variance_log_ratio(a, "hue_noise", "colour") == pytest.approx(
        math.log(by[("hue_noise", "colour", 40.0)] / by[("hue_noise", "colour", 0.0)]))
    short, full = sorted({lv for pr, _, lv in by if pr == "legs"})  # float32 levels: 0.3 is 0.30000001
    assert ss.variance_log_ratio(a, "legs", "orientation") == pytest.approx(
        math.log(by[("legs", "orientation", short)] / by[("legs", "orientation", full)]))
    # Fig. 2 effect by hand on the 3 x 3 grid: middle row/column minus the outer ones
    lv = a.interp_var.double().log().numpy()
    cd, od = align["colour_dim"], align["orientation_dim"]
    grid_c, grid_o = lv[:, cd].reshape(3, 3), lv[:, od].reshape(3, 3)
    assert ss.between_class_log_ratio(a, 3, "colour") == pytest.approx(grid_c[1].mean() - grid_c[[0, 2]].mean())
    assert ss.between_class_log_ratio(a, 3, "orientation") == pytest.approx(grid_o[:, 1].mean()
                                                                            - grid_o[:, [0, 2]].mean())
    ood = a.ood
    assert {r["shift"] for r in ood} <= {"hue_noise", "legs", "test_minority"}
    # Reference AUROC by hand (Mann-Whitney: P(shifted > clean) + P(tie) / 2 over all pairs) for the test split's
    # noisy minority against its clean images, scored by the total variance.
    f, split = t.dataset.info["factors"]["test"], t.dataset["test"]
    assert bool(f.noisy.any()) and not bool(f.noisy.all())
    v_clean = t.embed(split.images[~f.noisy])[1].sum(1).double().numpy()
    v_noisy = t.embed(split.images[f.noisy])[1].sum(1).double().numpy()
    diff = v_noisy[:, None] - v_clean[None, :]
    (row,) = [r for r in ood if r["shift"] == "test_minority" and r["score"] == "total"]
    assert row["auroc"] == pytest.approx(float((diff > 0).mean() + 0.5 * (diff == 0).mean()))
    assert (row["n_clean"], row["n_shifted"]) == (len(v_clean), len(v_noisy))
    table = ss.claims(p, analyses)
    assert [c.id for c in table] == [c.id for c in ss.claims(p)]
    assert table["sec3.1-bayes-optimal"].verdict == "reproduced"  # 0.871: boundaries 1.5 std away
    acc = table["sec3.1-accuracy-near-bayes"].measured
    assert acc.seeds == pytest.approx([float(x.accuracies.mean()) - ss.bayes_optimal(p) for x in analyses])
    ref = ss.reference_values(p, analyses)
    assert ref["bayes_optimal"] == ss.bayes_optimal(p) and ref["accuracy"].n_seeds == 2
    assert len(ss.ood_table(analyses)) == len(ood) and len(ss.sweep_table(analyses)) == 8


# ------------------------------------------------------------------------------------------ real Omniglot

@needs_omniglot
def test_paper_parameters_run_on_the_real_omniglot_reader():
    """The paper's data path (rotations, Vinyals split) through a one-step PN and SPE run, tested 5-way."""
    p = load_params(so.Params, so.NOTEBOOK, "paper", data_root=str(OMNIGLOT_ZIP), epochs=1, batches_per_epoch=1,
                    train_ways=5, hidden=4, val_episodes=0, eval_episodes=4, eval_samples=4, halve_every=None, patience=None)
    for kind in ("pn", "spe"):
        out = run_spec(so.make_spec(p, kind, 2), progress=False)
        acc = few_shot_accuracies(out, [5], [1], p.eval_queries, p.eval_episodes, samples=p.eval_samples)
        assert acc["5way/1shot"].shape == (4,)
    ds = load_dataset(**{"name": so.data_spec(p).name, "root": so.data_spec(p).root}, **so.data_spec(p).options)
    assert ds["train"].num_classes % 4 == 0  # every character in its four rotations


def test_evaluation_runs_where_the_callers_model_is_and_never_moves_it(tmp_path, monkeypatch):
    """Issue 9: on a GPU machine the evaluation moved the caller's CPU model to CUDA as a side effect, and the
    caller's next CPU forward met a cuda:0 weight. Simulated on the CPU: 'CUDA is available' (any .to('cuda')
    would raise here), the model and its features stay on the CPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (6 * 10, 1, 4, 4), generator=g, dtype=torch.uint8)
    labels = torch.arange(6).repeat_interleave(10)
    ds = FewShotDataset("toy", {"test": ImageSplit(images, labels, [str(i) for i in range(6)])})
    method = SPEMethod(_FixedGaussian(16, 2, raw=-3.0), None, dim=2, support_size=5)
    method.eval()
    transform = lambda x: x.float() / 255.0  # noqa: E731
    out = Outcome(RunSpec("toy"), RunStore(tmp_path).run("toy", {"k": 2}), {})
    acc = few_shot_accuracies(out, [5], [1], 5, 4, samples=4, loaded=(method, transform, ds))
    assert acc["5way/1shot"].shape == (4,)
    assert all(p.device.type == "cpu" for p in method.parameters())
    feats = model_features(method, images, transform)
    assert feats.device.type == "cpu" and feats.dtype == torch.float32 and feats.shape == (60, 4)


def _regime_inputs(p, gain, seeds=5, episodes=30):
    """Fake regime inputs: each model's trained accuracy is its untrained one + ``gain[model]`` (+ noise)."""
    g = torch.Generator().manual_seed(0)

    def accs(level):
        return [level + 0.02 * torch.rand(episodes, generator=g, dtype=torch.float64) for _ in range(seeds)]

    learned = {key: (accs(0.2 + gain[key[0] + key[2]]), accs(0.2))
               for key in (("spe", 2, "intersection", 1), ("spe", 2, "naive", 1), ("pn", 2, "", 0))}
    return so.RegimeInputs(learned)


def test_a_failing_regime_check_gates_exactly_its_claims():
    """Issue 31: a PN that did not learn gates Table 1's 2-D claims and not Fig. 4's; an intersection SPE that
    did not learn gates both; a naive SPE that did not learn gates nothing (the paper: the naive sampler is
    "susceptible to poor initialization", part of Fig. 4's claim). Issue 42: no check compares the PN with the SPE
    (the contrast Table 1's claims measure), so a PN that learned gates nothing however far behind it lies."""
    p = so.Params(fig4_samples=[1], seeds=[0, 1, 2, 3, 4])
    fig4 = {"fig4-intersection-beats-naive-s1"}
    table = {c.id for c in so.claims(p) if c.id.startswith("table1-2d")}
    assert table == {"table1-2d-1shot-5way", "table1-2d-5shot-5way", "table1-2d-1shot-20way", "table1-2d-5shot-20way",
                     "table1-2d-gain-larger-at-1shot"}

    g = torch.Generator().manual_seed(1)
    diff = so.stats.paired_difference([0.6 + 0.1 * torch.rand(30, generator=g, dtype=torch.float64) for _ in range(5)],
                                      [0.5 + 0.1 * torch.rand(30, generator=g, dtype=torch.float64) for _ in range(5)])
    measured = {c.id: diff for c in so.claims(p) if c.applies}

    def gated(gain):
        t = so.claims(p, measured=measured, regime_in=_regime_inputs(p, gain))
        return {cid for cid, j in t.judgements().items() if "regime check" in j.reason}, t

    ok = {"speintersection": 0.2, "spenaive": 0.2, "pn": 0.2}
    assert gated(ok)[0] == set()
    assert gated({**ok, "pn": 0.0})[0] == table
    assert gated({**ok, "speintersection": 0.0})[0] == table | fig4
    got, t = gated({**ok, "spenaive": 0.0})
    assert got == set() and [r.passed for r in t.regimes if r.name.startswith("naive")] == [False]
    assert not any("paper's gap" in r.name or "SPE" in r.name and r.name.startswith("PN") for r in t.regimes)


def test_the_untrained_spe_is_the_runs_initial_network_shared_by_both_samplers(tmp_path, monkeypatch):
    """The regime checks' baseline: the naive and the intersection SPE of a seed start from one network (the
    sampler is no parameter), the one a Conv4 built right after seeding with the run's seed has; training
    changes it; its evaluation is cached apart from the trained one's."""
    from studylib.experiments.omniglot_evidence import untrained_network
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path / "cache"))
    p = so.Params(hidden=8, train_ways=5, batches_per_epoch=2, eval_episodes=4, eval_samples=5, seeds=[3],
                  device="cpu")
    outs = {sm: run_spec(so.make_spec(p, "spe", 2, sm, 1, 3), progress=False) for sm in ("naive", "intersection")}
    nets = {sm: untrained_network(o)[0] for sm, o in outs.items()}
    assert all(torch.equal(a, b) for a, b in zip(nets["naive"].state_dict().values(),
                                                  nets["intersection"].state_dict().values()))
    torch.manual_seed(3)
    fresh = build_backbone("conv4", in_channels=1, hidden=8, last_block_plain=True, out_channels=4)
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), nets["naive"].backbone.state_dict().values()))
    trained = outs["naive"].run.load_tensor("weights.pt")
    assert not torch.equal(trained["backbone.blocks.0.0.weight"], nets["naive"].backbone.state_dict()["blocks.0.0.weight"])
    a = few_shot_accuracies(outs["naive"], [5], [1], 3, 4, samples=5)
    b = so.untrained_accuracies(outs["naive"], [5], [1], 3, 4, samples=5)
    assert not torch.equal(a["5way/1shot"], b["5way/1shot"])
    assert torch.equal(a["5way/1shot"], few_shot_accuracies(outs["naive"], [5], [1], 3, 4, samples=5)["5way/1shot"])
    assert torch.equal(b["5way/1shot"], so.untrained_accuracies(outs["naive"], [5], [1], 3, 4, samples=5)["5way/1shot"])


def test_evidence_scale_is_the_paper_protocol_on_the_real_subset_cut_in_length():
    ev = load_params(so.Params, so.NOTEBOOK, "evidence")
    paper = load_params(so.Params, so.NOTEBOOK, "paper")
    assert ev.data_root == "../shared/data/omniglot/images_background_small1.zip" and ev.split == "alphabet"
    same = ("data", "rotations", "image_size", "hidden", "train_ways", "train_queries", "optimizer", "lr",
            "fig4_dim", "fig4_ways", "fig4_shots", "eval_queries", "eval_samples", "table_ways", "table_shots")
    assert {k: getattr(ev, k) for k in same} == {k: getattr(paper, k) for k in same}
    assert len(ev.seeds) >= 10 and ev.epochs * ev.batches_per_epoch < paper.epochs * paper.batches_per_epoch
    applied = [c for c in so.claims(ev) if c.applies]
    assert {c.id for c in applied} >= {"fig4-intersection-beats-naive-s1", "table1-2d-1shot-20way"}
    assert all("proxy of the paper's Omniglot claim" in c.test for c in applied)
    assert "proxy" not in so.claims(so.Params()).checked()


@needs_omniglot
def test_evidence_configuration_runs_on_the_real_subset_with_its_regime_checks(tmp_path, monkeypatch):
    """evidence.yaml's path through the real reader, cut tiny: 60-way episodes of the training alphabets' rotation
    classes, Fig. 4's two samplers and Table 1's PN, their untrained networks on the same episodes, the claims
    table with its regime checks."""
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path / "cache"))
    p = load_params(so.Params, so.NOTEBOOK, "evidence", data_root=str(OMNIGLOT_ZIP), hidden=8, batches_per_epoch=2,
                    eval_episodes=2, eval_samples=5, seeds=[0, 1], device="cpu")
    runs = so.run(p, progress=False)
    assert so.run_counts(p)["distinct runs"] == 6  # naive and intersection SPE (Fig. 4 = Table 1's) and PN, 2 seeds
    table = so.claims(p, runs)
    assert len(table.regimes) == 3 and all(r.passed is not None for r in table.regimes)  # learned checks only
    assert table["fig4-intersection-beats-naive-s1"].measured.n_seeds == 2
