"""Helpers of notebooks 01-05 (seed 000): episode shapes, run specs, pair accounting, pooling, row mapping."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from scipy import stats

from studylib.config import load_params
from studylib.evaluation.verdicts import ONE_SEED
from studylib.experiments import ablations, batch_size_sweep, comparison, episodes_pairs, pair_subsampling
from studylib.experiments.episodes_common import (Variant, episode_shape, episodic, make_spec, nca, overlap, pct,
                                                  pooled)
from studylib.methods import build_method
from studylib.methods.episodes import episode_loss, mn_loss, pn_loss
from studylib.training.loop import build_sampler
from studylib.data.base import ImageSplit

N_TRAIN = 3840


def _params(module, **over):
    return load_params(module.Params, module.NOTEBOOK, "smoke", **over)


@pytest.mark.parametrize("b,n,per", [(128, 1, 8), (256, 5, 8), (512, 5, 16), (512, 5, 32), (400, 5, 20)])
def test_episode_shape_is_b_over_m_plus_n(b, n, per):
    w, shots, m = episode_shape(b, n, per)
    assert (w, shots, m) == (b // per, n, per - n)
    assert w * (shots + m) == b


@pytest.mark.parametrize("b,n,per", [(100, 5, 8), (8, 5, 8), (64, 8, 8), (64, 0, 8)])
def test_episode_shape_rejects_impossible_episodes(b, n, per):
    with pytest.raises(ValueError):
        episode_shape(b, n, per)


def test_paper_example_of_sec_3_2():
    # "a 5-shot model with m + n = 8 and b = 256 ... n = 5, m = 3, w = 32"
    assert episode_shape(256, 5, 8) == (32, 5, 3)


def test_spec_builder_same_images_per_epoch_for_every_batch_size():
    p = _params(batch_size_sweep, images_per_epoch=None)
    seen = set()
    for b in (64, 128, 256):
        for v in (nca(b), episodic("pn", b, 5, 8), episodic("mn", b, 5, 16), nca(b, "replacement"),
                  nca(b, "fixed", per_class=8)):
            spec = make_spec(p, v, 0, N_TRAIN)
            sampler = build_sampler(spec.train, _fake_split(), labels_needed=True)
            first = sampler.epoch(0)
            assert len(first) * len(first[0]) == N_TRAIN, v.label
            assert all(len(x) == b for x in first), v.label
            if v.sampler == "episodic":
                assert spec.train.ways == b // v.per_class and first[0].ways == b // v.per_class
                assert int(first[0].support.sum()) == spec.train.ways * v.shots
            seen.add(len(first) * b)
    assert seen == {N_TRAIN}


def _fake_split() -> ImageSplit:
    labels = torch.arange(192).repeat_interleave(20)
    return ImageSplit(torch.zeros(len(labels), 1, 2, 2, dtype=torch.uint8), labels, [str(i) for i in range(192)],
                      name="train")


def test_spec_options_follow_the_variant():
    p = _params(batch_size_sweep)
    s = make_spec(p, nca(128, fraction=0.1), 0, N_TRAIN)
    assert s.method == "nca" and s.method_options["pos_fraction"] == s.method_options["neg_fraction"] == 0.1
    s = make_spec(p, episodic("pn", 64, 5, 8, prototypes=True, sq_split=False), 0, N_TRAIN)
    assert s.method_options == {"prototypes": True, "sq_split": False} and s.train.sampler == "episodic"
    assert "temperature" not in make_spec(p, episodic("mn", 64, 5, 8), 0, N_TRAIN).method_options
    # The same variant gives the same run (name and hash) in every notebook: runs are shared.
    a = make_spec(_params(batch_size_sweep), episodic("pn", 128, 5, 8), 0, N_TRAIN)
    b = make_spec(_params(pair_subsampling), episodic("pn", 128, 5, 8), 0, N_TRAIN)
    assert a.name == b.name and a.config() == b.config()
    assert make_spec(p, nca(128), 1, N_TRAIN).config() != make_spec(p, nca(128), 0, N_TRAIN).config()


def test_pair_subsampling_trains_nca_with_the_papers_divisor():
    """Notebook 03's NCA runs divide the loss by |B| (paper Sec. 2.2): the option reaches the method, the run
    is a different one from the other notebooks' NCA, and the built method uses it."""
    p = _params(pair_subsampling)
    assert p.nca_reduction == "batch"
    s = make_spec(p, pair_subsampling.nca_variant(p, 0.05), 0, N_TRAIN)
    assert s.method_options["reduction"] == "batch" and s.method_options["pos_fraction"] == 0.05
    assert "reduction" not in make_spec(p, nca(p.batch_size, fraction=0.05), 0, N_TRAIN).method_options
    assert s.config() != make_spec(p, nca(p.batch_size, fraction=0.05), 0, N_TRAIN).config()
    net = torch.nn.Linear(4, 3)
    net.out_dim = 3
    assert build_method("nca", net, lambda x: x, **s.method_options).reduction == "batch"


def test_variant_validation():
    with pytest.raises(ValueError):
        Variant("pn", "shuffled", 128)  # PN needs episodes
    with pytest.raises(ValueError):
        Variant("nca", "shuffled", 128, fraction=0.0)
    assert nca(256, fraction=0.1).label == "nca-b256-f0.1"
    assert episodic("pn", 64, 5, 8, True, False).label == "pn-proto-noSQ-b64-n5-mn8"
    assert nca(64, "fixed", per_class=8).ways == 8


def test_episode_fraction_is_table1_ratio():
    w, n, m = 16, 5, 3  # b = 128, m + n = 8
    used = w * m * n + w * (w - 1) * m * n
    total = math.comb(m + n, 2) * w + math.comb(w, 2) * (m + n) ** 2
    assert pair_subsampling.episode_fraction(128, 5, 8) == pytest.approx(used / total)
    # 1-shot episodes use the fewest pairs (Sec. 3.2)
    assert pair_subsampling.episode_fraction(128, 1, 8) < pair_subsampling.episode_fraction(128, 5, 8)


def test_measured_pairs_equal_table1_and_paper_claim():
    rows = episodes_pairs.table1([[2, 4, 1], [5, 5, 15], [8, 1, 7]])
    assert all(r["match"] for r in rows)
    lost = next(r for r in rows if r["row"] == "PAIRS LOST" and r["w"] == 5)
    assert (lost["pos (formula)"], lost["neg (formula)"]) == (5 * (225 + 25 - 20) // 2, 5 * 4 * (225 + 25) // 2)
    inc_pos, inc_neg = episodes_pairs.increase_pct(20, 5, 15)
    assert inc_pos > 150 and inc_neg > 150  # Sec. 2.1


def test_row6_is_the_mn_loss_and_row3_the_nca_on_episodes():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(32, 8, generator=g)
    labels, support = episodes_pairs.episodic_batch(4, 5, 3)
    no_proto = pn_loss(z, labels, support, prototypes=False)
    assert torch.allclose(no_proto.loss, mn_loss(z, labels, support).loss)
    both = pn_loss(z, labels, support, prototypes=False, sq_split=False)
    assert torch.allclose(both.loss, episode_loss(z, labels, None, "nca").loss)
    assert ablations.row_variant(6, 64, 5, 8).method == "mn"
    r3 = ablations.row_variant(3, 64, 5, 8)
    assert (r3.method, r3.sampler, r3.ways) == ("nca", "fixed", 8)
    r7 = ablations.row_variant(7, 64, 5, 8)
    assert (r7.prototypes, r7.sq_split) == (True, False)


def test_one_shot_pn_equals_mn():
    z = torch.randn(48, 8, generator=torch.Generator().manual_seed(1))
    labels, support = episodes_pairs.episodic_batch(6, 1, 7)
    assert torch.allclose(pn_loss(z, labels, support).loss, mn_loss(z, labels, support).loss, atol=1e-6)
    p = _params(batch_size_sweep)
    vs = batch_size_sweep.variants(p)
    one = [(who, v) for who, _, v in vs if v.shots == 1]
    assert {v.method for _, v in one} == {"pn"}  # shared when share_one_shot


class _FakeOutcome:
    def __init__(self, acc: torch.Tensor) -> None:
        self._acc = acc

    def accuracies(self, classifier: str = "nearest_centroid", shots: int = 1) -> torch.Tensor:
        return self._acc


def test_pooled_ci_is_over_all_episodes_of_all_seeds():
    a, b = torch.rand(100, generator=torch.Generator().manual_seed(0)), torch.rand(50)
    m, c, e = pooled([_FakeOutcome(a), _FakeOutcome(b)], "nearest_centroid", 1)
    allacc = torch.cat([a, b]).double().numpy()  # 150 episodes pooled; reference: 1.96 x SciPy's SEM
    assert e == 150 and m == pytest.approx(allacc.mean()) and c == pytest.approx(1.96 * stats.sem(allacc))
    assert pct(0.6254, 0.0012) == "62.5 ± 0.1"
    assert overlap((0.5, 0.1), (0.65, 0.06)) and not overlap((0.5, 0.01), (0.6, 0.01))


def test_comparison_models_follow_table2_settings():
    p = _params(comparison)
    m = {name: (v1, v5) for name, v1, v5, _ in comparison.models(p)}
    one, five = m["PN ([40] episodes)"]
    assert (one.ways, one.shots, one.queries) == (30, 1, 15) and (five.ways, five.shots, five.queries) == (20, 5, 15)
    assert m["MN ([40] episodes)"][0] is one  # 1-shot: the same loss
    ours = m["PN (our episodes)"][0]
    assert (ours.batch_size, ours.shots, ours.per_class) == (p.batch_size, 5, 16)
    assert m["SimpleShot"][0].method == "ce"
    assert comparison.PAPER_TABLE2["mini_imagenet"]["NCA nearest centroid"][1] == (78.27, 0.09)


def test_nca_curve_interpolation():
    rows = [{"series": "NCA", "shots": 1, "fraction": f, "mean": a, "ci95": 0.01}
            for f, a in ((0.1, 0.5), (0.5, 0.7), (1.0, 0.8))]
    assert pair_subsampling.nca_at(rows, 1, 0.3) == pytest.approx((0.6, 0.01))


# ------------------------------------------------------------------------- the notebook contract (02, 03, 01)

class _SeedOutcome:
    """An outcome whose per-episode accuracy is ``base + noise`` for every classifier and shot count."""

    def __init__(self, base: float, seed: int, episodes: int = 50) -> None:
        g = torch.Generator().manual_seed(seed)
        self._acc = (base + 0.05 * torch.randn(episodes, generator=g)).clamp(0, 1)
        self.metrics: list = []

    def accuracies(self, classifier: str = "nearest_centroid", shots: int = 1) -> torch.Tensor:
        return self._acc


def test_sweep_specs_cap_the_images_and_the_mean_subset_but_04_05_specs_do_not_change():
    p = _params(batch_size_sweep)
    assert p.seeds == [0, 1, 2] and p.data == "synthfs"
    for b in p.batch_sizes:
        s = make_spec(p, nca(b), 0, N_TRAIN)
        assert s.train.max_steps == p.train_images // b and s.eval.mean_images == p.eval_mean_images
        assert s.eval.seed == 0  # the same evaluation episodes for every training seed: paired differences
    a = make_spec(_params(ablations), nca(64), 0, N_TRAIN)
    assert a.train.max_steps is None and a.eval.mean_images is None
    with pytest.raises(ValueError, match="train_images"):
        make_spec(_params(batch_size_sweep, train_images=32), nca(64), 0, N_TRAIN)


def test_batch_size_sweep_claims_follow_the_rules():
    p = _params(batch_size_sweep, seeds=[0, 1, 2, 3, 4, 5])  # 6 seeds: p_adj <= 0.01 over the notebook's family
    static = batch_size_sweep.claims(p)
    assert all(c.measured is None for c in static)
    assert not static["fig2-pn-5shot-16-beats-32-b128"].applies
    better = {v: [_SeedOutcome(0.6 if v.method == "nca" else 0.5, 10 * s + i) for s in p.seeds]
              for i, (_, _, v) in enumerate(batch_size_sweep.variants(p))}
    untrained = {v: [_SeedOutcome(0.2, 10 * s + i) for s in p.seeds] for v, i in zip(better, range(99))}
    table = batch_size_sweep.claims(p, better, untrained)
    assert {c.verdict for c in table if c.applies} == {"reproduced"}
    one = batch_size_sweep.claims(load_params(batch_size_sweep.Params, batch_size_sweep.NOTEBOOK, "smoke", seeds=[0]),
                                  {v: o[:1] for v, o in better.items()}, {v: o[:1] for v, o in untrained.items()})
    # one seed never decides a difference (nor passes a regime check: no interval over seeds)
    assert all(c.verdict == "not tested" and ONE_SEED in c.reason for c in one if c.applies)
    assert batch_size_sweep.claims(p).checked() == table.checked()  # what nbval compares does not depend on runs


def test_pair_subsampling_claims_and_curve_gap():
    p = _params(pair_subsampling)
    acc = {f: 0.4 + 0.2 * f for f in p.fractions}  # a straight NCA curve
    outs = {}
    for i, (series, v) in enumerate(pair_subsampling.variants(p)):
        base = acc[v.fraction] if series == "NCA" else 0.4 + 0.2 * pair_subsampling.episode_fraction(
            v.batch_size, v.shots, v.per_class)
        outs[v] = [_SeedOutcome(base, 100 * s + i, episodes=400) for s in p.seeds]
    untrained = {v: [_SeedOutcome(0.1, 100 * s + i, episodes=400) for s in p.seeds] for i, v in enumerate(outs)}
    table = pair_subsampling.claims(p, outs, untrained)
    assert table["fig3-subsampling-hurts-1shot"].verdict == "reproduced"
    for c in table:
        if c.id.endswith("-on-curve"):
            assert abs(c.measured.value) < 0.02 and c.measured.n_seeds == 3
    gap = pair_subsampling.curve_gap(p, outs, episodic("pn", p.batch_size, 1, 8))
    assert gap.n_seeds == 3
    assert set(pair_subsampling.reference_values(p, outs)) >= {"fraction 1-shot m+n=8", "NCA f=1/1-shot"}


def test_episodes_pairs_claims_are_exact():
    p = _params(episodes_pairs)
    table = episodes_pairs.claims(p)
    assert [c.verdict for c in table] == ["reproduced"] * len(table)
    ref = episodes_pairs.reference_values(p)
    assert ref["w20-n5-m15/EPISODES/pos"] == 20 * 5 * 15 and ref["sec2.1 extra positives %"] > 150
