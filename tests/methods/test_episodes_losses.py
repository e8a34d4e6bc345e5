"""Seed 000 losses against references: pytorch-metric-learning's NCALoss, independent loop implementations of
L_PNs / L_MNs, Table 1's formulas, analytic limits and finite-difference gradients."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning.distances import LpDistance
from pytorch_metric_learning.losses import NCALoss
from scipy.special import logsumexp
from torch import nn

from studylib.data.samplers import Batch
from studylib.methods import METHODS, build_method
from studylib.methods.episodes import (CEMethod, DistanceMethod, ablation_pairs, ce_loss, episode_loss, mn_loss,
                                       nca_loss, pn_loss, subsample_pairs, table1_pairs)


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


def episode(w: int, n: int, m: int, d: int = 6, seed: int = 0, shuffle: bool = True, ids: list[int] | None = None,
            dtype: torch.dtype = torch.float64):
    """A w-way n-shot m-query batch in random order with arbitrary label values."""
    g = torch.Generator().manual_seed(seed)
    names = torch.tensor(ids if ids is not None else [7 * k - 3 for k in range(w)])
    labels = names.repeat_interleave(n + m)
    support = (torch.arange(n + m) < n).repeat(w)
    z = torch.randn(w * (n + m), d, generator=g, dtype=dtype)
    if shuffle:
        p = torch.randperm(len(labels), generator=g)
        labels, support, z = labels[p], support[p], z[p]
    return z, labels, support


def sqd(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)


def pml_nca(z: torch.Tensor, labels: torch.Tensor, t: float) -> torch.Tensor:
    loss = NCALoss(softmax_scale=1.0 / t, distance=LpDistance(normalize_embeddings=False, p=2, power=2))
    return loss(z, labels)


# ---------------------------------------------------------------------------------------------- references


@pytest.mark.parametrize("t", [1.0, 0.9, 0.5])
def test_nca_matches_pytorch_metric_learning(t):
    g = torch.Generator().manual_seed(1)
    z = torch.randn(40, 8, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 12, (40,), generator=g) * 5 + 100  # some classes appear once: no positives
    out = nca_loss(z, labels, temperature=t)
    torch.testing.assert_close(out.loss, pml_nca(z, labels, t))
    counts = torch.bincount(labels - 100)
    assert out.anchors == int(counts[labels - 100].gt(1).sum())


def reference_pn(z, labels, support, t=1.0):
    classes = sorted(set(labels[support].tolist()))
    protos = torch.stack([z[support & (labels == c)].mean(0) for c in classes])
    q = ~support
    target = torch.tensor([classes.index(c) for c in labels[q].tolist()])
    logits = -sqd(z[q], protos) / t
    return F.cross_entropy(logits, target), (logits.argmax(1) == target).double().mean().item()


@pytest.mark.parametrize("w,n,m,t", [(5, 1, 3, 1.0), (4, 5, 2, 0.9), (3, 2, 4, 2.0)])
def test_pn_matches_cross_entropy_over_prototypes(w, n, m, t):
    z, labels, support = episode(w, n, m, seed=w + n + m)
    out = pn_loss(z, labels, support, temperature=t)
    ref, acc = reference_pn(z, labels, support, t)
    torch.testing.assert_close(out.loss, ref)
    assert out.accuracy == pytest.approx(acc)
    assert out.anchors == w * m


def reference_mn(z, labels, support, t=1.0):
    total, count = 0.0, 0
    for i in range(len(z)):
        if support[i]:
            continue
        num = [math.exp(-float(((z[i] - z[j]) ** 2).sum()) / t) for j in range(len(z))
               if support[j] and labels[j] == labels[i]]
        den = [math.exp(-float(((z[i] - z[j]) ** 2).sum()) / t) for j in range(len(z)) if support[j]]
        total += -math.log(sum(num) / sum(den))
        count += 1
    return total / count


@pytest.mark.parametrize("w,n,m,t", [(3, 2, 2, 1.0), (4, 3, 1, 0.9), (2, 5, 3, 1.5)])
def test_mn_matches_its_definition(w, n, m, t):
    z, labels, support = episode(w, n, m, d=3, seed=10 + w, dtype=torch.float64)
    z = z * 0.5
    out = mn_loss(z, labels, support, temperature=t)
    assert out.loss.item() == pytest.approx(reference_mn(z, labels, support, t), rel=1e-10)


def test_pn_without_prototypes_is_mn():
    z, labels, support = episode(5, 4, 3, seed=3)
    a = pn_loss(z, labels, support, prototypes=False)
    b = mn_loss(z, labels, support)
    torch.testing.assert_close(a.loss, b.loss)
    assert (a.positives, a.negatives) == (b.positives, b.negatives)


def test_pn_without_split_is_nca_on_queries_and_prototypes():
    z, labels, support = episode(4, 3, 2, seed=4)
    classes = sorted(set(labels.tolist()))
    protos = torch.stack([z[support & (labels == c)].mean(0) for c in classes])
    elems = torch.cat([z[~support], protos])
    elem_labels = torch.cat([labels[~support], torch.tensor(classes)])
    out = pn_loss(z, labels, support, sq_split=False, temperature=0.9)
    torch.testing.assert_close(out.loss, pml_nca(elems, elem_labels, 0.9))


def test_no_prototypes_no_split_is_nca_on_the_batch():
    z, labels, support = episode(4, 3, 2, seed=5)
    a = pn_loss(z, labels, support, prototypes=False, sq_split=False)
    b = mn_loss(z, labels, support, sq_split=False)
    c = nca_loss(z, labels)
    torch.testing.assert_close(a.loss, c.loss)
    torch.testing.assert_close(b.loss, c.loss)
    torch.testing.assert_close(c.loss, pml_nca(z, labels, 1.0))


def test_one_shot_no_split_equals_nca_fixed_composition():
    # Sec. 3.4: for 1-shot models the "no S/Q" ablation is the NCA with fixed batch composition.
    z, labels, support = episode(6, 1, 4, seed=6)
    a = pn_loss(z, labels, support, sq_split=False)
    b = nca_loss(z, labels)
    torch.testing.assert_close(a.loss, b.loss)
    assert (a.positives, a.negatives) == (b.positives, b.negatives) == table1_pairs(6, 1, 4, "nca")


# ---------------------------------------------------------------------------------------------- counting


SHAPES = [(w, n, m) for w in (2, 3, 5, 8) for n in (1, 2, 5) for m in (1, 3, 6)]


@pytest.mark.parametrize("w,n,m", SHAPES)
def test_counted_pairs_equal_table1(w, n, m):
    z, labels, support = episode(w, n, m, d=2, seed=w * 100 + n * 10 + m, dtype=torch.float32)
    for kind in ("pn", "mn"):
        out = episode_loss(z, labels, support, kind)
        assert (out.positives, out.negatives) == table1_pairs(w, n, m, kind) == (w * m * n, w * (w - 1) * m * n)
    out = nca_loss(z, labels)
    assert (out.positives, out.negatives) == table1_pairs(w, n, m, "nca")
    assert (out.positives, out.negatives) == (math.comb(m + n, 2) * w, math.comb(w, 2) * (m + n) ** 2)
    # PAIRS LOST row = NO EPISODES - EPISODES
    lost = table1_pairs(w, n, m, "lost")
    ep = table1_pairs(w, n, m, "episodic")
    assert lost == (out.positives - ep[0], out.negatives - ep[1])


@pytest.mark.parametrize("proto, split", [(True, True), (False, True), (True, False), (False, False)])
def test_counts_only_gives_the_full_losss_counts_and_leaves_its_loss_untouched(proto, split):
    # 01's measured Table 1 counts skip the distances and the accuracy (E^3 on batches of thousands): the counts
    # and anchors are those of the full computation; loss and accuracy are NaN there, not numbers
    z, labels, support = episode(6, 3, 4, d=5, seed=11, dtype=torch.float32)
    full = episode_loss(z, labels, support, "pn", prototypes=proto, sq_split=split)
    counted = episode_loss(z, labels, support, "pn", prototypes=proto, sq_split=split, counts_only=True)
    assert (counted.positives, counted.negatives, counted.anchors) == (full.positives, full.negatives, full.anchors)
    assert math.isfinite(full.loss.item()) and 0.0 <= full.accuracy <= 1.0
    assert math.isnan(counted.loss.item()) and math.isnan(counted.accuracy)
    # and on 01's shapes, NCA included (no S/Q split, no prototypes), against Table 1's formulas
    for w, n, m in ((20, 5, 15), (64, 1, 7)):
        z, labels, support = episode(w, n, m, d=4, seed=w, dtype=torch.float32)
        for kind in ("pn", "mn"):
            out = episode_loss(z, labels, support, kind, counts_only=True)
            assert (out.positives, out.negatives) == table1_pairs(w, n, m, "episodic")
        out = episode_loss(z, labels, support, "nca", counts_only=True)
        assert (out.positives, out.negatives) == table1_pairs(w, n, m, "nca")


@pytest.mark.parametrize("w,n,m", SHAPES)
def test_ablation_switches_change_counts_as_the_paper_says(w, n, m):
    z, labels, support = episode(w, n, m, d=2, seed=w + 7 * n + 13 * m, dtype=torch.float32)
    counts = {}
    for proto in (True, False):
        for split in (True, False):
            out = episode_loss(z, labels, support, "pn", prototypes=proto, sq_split=split)
            counts[proto, split] = (out.positives, out.negatives)
            assert counts[proto, split] == ablation_pairs(w, n, m, proto, split)
    # Sec. 3.4: the amount of gradient signal is the same with (row 5) or without (row 6) prototypes ...
    assert counts[True, True] == counts[False, True]
    # ... all ablations together (row 3) are the NCA, with all the pairs of the batch.
    assert counts[False, False] == table1_pairs(w, n, m, "nca")
    # Row 7 keeps every negative and loses only the support-support positives of each class.
    assert counts[True, False][1] == table1_pairs(w, n, m, "nca")[1]
    assert counts[True, False][0] == table1_pairs(w, n, m, "nca")[0] - w * math.comb(n, 2)


def test_paper_claim_more_than_150_percent():
    ep = table1_pairs(20, 5, 15, "episodic")
    nca = table1_pairs(20, 5, 15, "nca")
    assert ep == (1500, 28500) and nca == (3800, 76000)
    assert all((b - a) / a > 1.5 for a, b in zip(ep, nca))


def test_table1_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown kind"):
        table1_pairs(5, 1, 15, "proto")
    with pytest.raises(ValueError, match="w >= 1"):
        table1_pairs(0, 1, 15, "nca")


# ---------------------------------------------------------------------------------------------- subsampling


def floor_frac(f: float, count: int) -> int:
    return math.floor(Fraction(str(f)) * count)


@pytest.mark.parametrize("fp,fn", [(0.5, 1.0), (0.01, 0.8), (0.29, 0.33), (1.0, 0.1), (0.8, 0.5)])
def test_subsampling_keeps_floor_fraction(fp, fn):
    w, n, m = 8, 2, 3
    z, labels, support = episode(w, n, m, seed=11, dtype=torch.float32)
    p_all, n_all = table1_pairs(w, n, m, "nca")
    g = torch.Generator().manual_seed(0)
    out = nca_loss(z, labels, pos_fraction=fp, neg_fraction=fn, generator=g)
    # A kept positive pair gives both its images a positive, so it is always used.
    assert out.positives == floor_frac(fp, p_all)
    assert out.negatives <= floor_frac(fn, n_all)
    if fp == 1.0:  # every anchor keeps its positives, so every kept negative is used too
        assert out.negatives == floor_frac(fn, n_all)
    # the mask itself keeps exactly floor(f * count) unordered pairs of each type
    same = labels[:, None] == labels[None, :]
    allowed = ~torch.eye(len(z), dtype=torch.bool)
    kept = subsample_pairs(allowed, same, fp, fn, torch.Generator().manual_seed(0))
    assert torch.equal(kept, kept.T)
    up = torch.triu(kept, 1)
    assert int((up & same).sum()) == floor_frac(fp, p_all)
    assert int((up & ~same).sum()) == floor_frac(fn, n_all)


def test_subsampled_loss_masks_numerator_and_denominator():
    z, labels, support = episode(4, 2, 2, d=3, seed=12)
    same = labels[:, None] == labels[None, :]
    allowed = ~torch.eye(len(z), dtype=torch.bool)
    kept = subsample_pairs(allowed, same, 0.4, 0.3, torch.Generator().manual_seed(5))
    out = nca_loss(z, labels, pos_fraction=0.4, neg_fraction=0.3, generator=torch.Generator().manual_seed(5))
    terms = []
    for i in range(len(z)):
        num = sum(math.exp(-float(((z[i] - z[j]) ** 2).sum())) for j in range(len(z)) if kept[i, j] and same[i, j])
        den = sum(math.exp(-float(((z[i] - z[j]) ** 2).sum())) for j in range(len(z)) if kept[i, j])
        if num > 0:  # an anchor with no remaining positive contributes nothing
            terms.append(-math.log(num / den))
    assert out.anchors == len(terms)
    assert out.loss.item() == pytest.approx(sum(terms) / len(terms), rel=1e-10)


def test_subsampling_edge_cases():
    z, labels, support = episode(4, 2, 2, seed=13)
    full = nca_loss(z, labels)
    same_full = nca_loss(z, labels, pos_fraction=1.0, neg_fraction=1.0, generator=torch.Generator())
    torch.testing.assert_close(full.loss, same_full.loss)
    none = nca_loss(z.requires_grad_(), labels, pos_fraction=0.0)
    assert none.anchors == 0 and none.positives == 0 and none.loss.item() == 0.0
    none.loss.backward()  # still part of the graph, zero gradient
    assert torch.equal(z.grad, torch.zeros_like(z))
    # subsampling on MN keeps the query->support direction only
    out = mn_loss(z.detach(), labels, support, neg_fraction=0.5, generator=torch.Generator().manual_seed(1))
    assert out.positives == table1_pairs(4, 2, 2, "mn")[0]
    assert out.negatives == table1_pairs(4, 2, 2, "mn")[1] // 2
    with pytest.raises(ValueError, match="prototypes=False"):
        episode_loss(z.detach(), labels, support, "pn", pos_fraction=0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        nca_loss(z.detach(), labels, neg_fraction=1.5)


# ---------------------------------------------------------------------------------------------- numerics


def test_log_sum_exp_survives_huge_distances():
    # 1-D points: two of class 0 at 0 and 1000, one of class 1 at 3000. Every exp(-d) underflows in float64.
    z = torch.tensor([[0.0], [1000.0], [3000.0], [3001.0]], dtype=torch.float64)
    labels = torch.tensor([0, 0, 1, 1])
    out = nca_loss(z, labels)
    d = sqd(z, z)
    # analytic: each anchor has one positive (distance a) and two negatives (b, c):
    # -log(e^-a / (e^-a + e^-b + e^-c)) = log(1 + e^(a-b) + e^(a-c))
    expected = []
    for i in range(4):
        pos = [d[i, j] for j in range(4) if j != i and labels[j] == labels[i]][0]
        negs = [d[i, j] for j in range(4) if labels[j] != labels[i]]
        expected.append(torch.logsumexp(torch.stack([torch.zeros((), dtype=torch.float64)] +
                                                    [pos - x for x in negs]), 0))
    torch.testing.assert_close(out.loss, torch.stack(expected).mean())
    assert torch.isfinite(out.loss)
    naive = -torch.log(torch.exp(-d[0, 1]) / (torch.exp(-d[0, 1]) + torch.exp(-d[0, 2]) + torch.exp(-d[0, 3])))
    assert not torch.isfinite(naive)  # 0/0: what the clamp in the authors' code papers over
    # the same for PN and MN with large embeddings in float32: the loss of Eq. L_PN / L_MN / L_NCA written the
    # slow way in float64 with SciPy's logsumexp (losses ~1e6, so a dropped or clamped term would show)
    zz, ll, ss = episode(3, 2, 2, seed=14, dtype=torch.float32)
    for kind in ("pn", "mn", "nca"):
        big = episode_loss(zz * 1e3, ll, ss, kind)
        assert torch.isfinite(big.loss)
        assert big.loss.item() == pytest.approx(_slow_loss(zz * 1e3, ll, ss, kind), rel=1e-6)


def _slow_loss(z: torch.Tensor, labels: torch.Tensor, support: torch.Tensor, kind: str) -> float:
    """Mean over anchors of ``logsumexp(-d_i,all) - logsumexp(-d_i,positives)`` (float64, NumPy, one anchor at a
    time): NCA over all other points, MN from queries to support points, PN from queries to class means."""
    x, y, s = z.double().numpy(), labels.numpy(), support.numpy()
    if kind == "nca":
        anchors, pts, pts_y = range(len(x)), x, y
    elif kind == "mn":
        anchors, pts, pts_y = np.flatnonzero(~s), x[s], y[s]
    else:
        pts_y = np.unique(y)
        anchors, pts = np.flatnonzero(~s), np.stack([x[s & (y == c)].mean(0) for c in pts_y])
    losses = []
    for i in anchors:
        keep = [j for j in range(len(pts)) if not (kind == "nca" and j == i)]
        neg_d = -((x[i] - pts[keep]) ** 2).sum(1)
        losses.append(logsumexp(neg_d) - logsumexp(neg_d[pts_y[keep] == y[i]]))
    return float(np.mean(losses))


@pytest.mark.parametrize("kind,proto,split", [("nca", None, None), ("pn", None, None), ("mn", None, None),
                                              ("pn", True, False), ("pn", False, True)])
def test_gradients_match_finite_differences(kind, proto, split):
    z, labels, support = episode(3, 2, 2, d=3, seed=15)
    z = (0.7 * z).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x: episode_loss(x, labels, support, kind, prototypes=proto, sq_split=split, temperature=0.9).loss,
        (z,), eps=1e-6, atol=1e-7)


def test_gradients_with_subsampling_and_ce_match_finite_differences():
    z, labels, support = episode(3, 2, 2, d=3, seed=16)
    z = z.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x: nca_loss(x, labels, pos_fraction=0.5, neg_fraction=0.5,
                           generator=torch.Generator().manual_seed(2)).loss, (z,), eps=1e-6, atol=1e-7)
    logits = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    y = torch.tensor([0, 1, 2, 3, 1, 0])
    assert torch.autograd.gradcheck(lambda x: ce_loss(x, y).loss, (logits,), eps=1e-6, atol=1e-7)
    torch.testing.assert_close(ce_loss(logits, y).loss, F.cross_entropy(logits, y))


def test_autocast_bf16_runs_the_loss_in_float32():
    z, labels, support = episode(3, 2, 2, seed=17, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = episode_loss(z.bfloat16(), labels, support, "pn")
    assert out.loss.dtype == torch.float32


def test_input_errors_name_the_fix():
    z, labels, support = episode(3, 2, 2, seed=18)
    with pytest.raises(ValueError, match="episodic"):
        episode_loss(z, labels, None, "pn")
    with pytest.raises(ValueError, match="unknown kind"):
        episode_loss(z, labels, support, "proto")
    with pytest.raises(ValueError, match=r"\[B\]"):
        nca_loss(z, labels[:-1])
    with pytest.raises(ValueError, match="temperature"):
        nca_loss(z, labels, temperature=0.0)
    with pytest.raises(ValueError, match="0..3"):
        ce_loss(torch.randn(4, 4), torch.tensor([0, 1, 2, 4]))


# ---------------------------------------------------------------------------------------------- methods


class TinyBackbone(nn.Module):
    out_dim = 5

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def to_float(x: torch.Tensor) -> torch.Tensor:
    return x.float() / 255.0


def test_registry_and_build_method():
    assert {"nca", "pn", "mn", "ce"} <= set(METHODS)
    with pytest.raises(ValueError, match="allowed methods: .*nca"):
        build_method("protonet", TinyBackbone(), to_float)
    m = build_method("pn", TinyBackbone(), to_float, sq_split=False)
    assert isinstance(m, DistanceMethod) and m.prototypes and not m.sq_split
    with pytest.raises(ValueError, match="num_classes"):
        build_method("ce", TinyBackbone(), to_float)


def test_distance_method_loss_projection_and_eval_uses_full_loss():
    torch.manual_seed(0)
    w, n, m = 4, 2, 2
    images = torch.randint(0, 256, (w * (n + m), 3, 4, 4), dtype=torch.uint8)
    labels = torch.arange(w).repeat_interleave(n + m)
    support = (torch.arange(n + m) < n).repeat(w)
    batch = Batch(torch.arange(len(labels)), labels, support, w, n, m)
    method = build_method("nca", TinyBackbone(), to_float, projection_dim=3, temperature=0.9, neg_fraction=0.5)
    method.train()
    loss, logs = method.loss(images, batch)
    loss.backward()
    assert method.projection.weight.grad is not None
    p_all, n_all = table1_pairs(w, n, m, "nca")
    assert logs["positives"] == p_all and logs["negatives"] == n_all // 2
    assert set(logs) == {"positives", "negatives", "acc"}
    method.eval()
    loss_eval, logs_eval = method.loss(images, batch)  # validation: the full loss
    assert logs_eval["negatives"] == n_all
    z = method.backbone(to_float(images))
    torch.testing.assert_close(loss_eval, nca_loss(method.projection(z), labels, temperature=0.9).loss)
    assert method.features(to_float(images)).shape == (len(labels), 5)  # no projection at evaluation
    pn = build_method("pn", TinyBackbone(), to_float)
    with pytest.raises(ValueError, match="episodic"):
        pn.loss(images, Batch(batch.indices, labels))
    loss_pn, logs_pn = pn.loss(images, batch)
    assert (logs_pn["positives"], logs_pn["negatives"]) == table1_pairs(w, n, m, "pn")


def test_ce_method():
    torch.manual_seed(0)
    images = torch.randint(0, 256, (6, 3, 4, 4), dtype=torch.uint8)
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    method = build_method("ce", TinyBackbone(), to_float, num_classes=3)
    assert isinstance(method, CEMethod)
    loss, logs = method.loss(images, Batch(torch.arange(6), labels))
    expected = F.cross_entropy(method.head(method.backbone(to_float(images))), labels)
    torch.testing.assert_close(loss, expected)
    assert logs["positives"] == 0.0
    with pytest.raises(ValueError, match="shuffled"):
        method.loss(images, Batch(torch.arange(6), labels, None, 3, None, None))


@pytest.mark.parametrize("kind", ["nca", "mn", "pn"])
def test_bf16_autocast_loss_and_gradient_match_float32(kind):
    """Issue 9: under bf16 autocast (a GPU run of notebook 03 at pair fraction 0.05 stopped with a NaN loss) the
    distances and the masked log-sum-exps run in float32, so loss and gradient equal the float32 ones, also with
    anchors that have no positive left (all-masked rows) and with embeddings far from the origin, whose squared
    distances cancel catastrophically in bfloat16."""
    g = torch.Generator().manual_seed(23)
    w, n, m = 16, 2, 6  # 128 images
    z32 = 40.0 + 3.0 * torch.randn(w * (n + m), 64, generator=g)  # large norms, small differences
    z32 = z32.bfloat16().float()  # representable in bf16: both paths see the same numbers
    labels = torch.arange(w).repeat_interleave(n + m)
    labels[-1] = 99  # a class seen once: its row has no positive at all
    support = (torch.arange(n + m) < n).repeat(w)
    frac = 0.05 if kind != "pn" else 1.0  # subsampling is for losses on points

    def run(z, amp):
        z = z.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            out = episode_loss(z, labels, support, kind, pos_fraction=frac, neg_fraction=frac,
                               generator=torch.Generator().manual_seed(5))
        out.loss.backward()
        return out, z.grad

    ref, g_ref = run(z32, amp=False)
    for z in (z32, z32.bfloat16()):  # fp32 input (autocast casts inside) and a bf16 backbone output
        out, grad = run(z, amp=True)
        assert out.loss.dtype == torch.float32
        assert torch.isfinite(out.loss) and torch.isfinite(grad).all()
        assert (out.positives, out.negatives, out.anchors) == (ref.positives, ref.negatives, ref.anchors)
        if kind == "nca":
            assert 0 < out.anchors < len(labels)  # some rows lost every positive at 5%
        torch.testing.assert_close(out.loss, ref.loss, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(grad.float(), g_ref, rtol=1e-2, atol=1e-5)


class _NoHostRead:
    """Make every device-to-host read of a tensor (``int``, ``float``, ``bool``, ``.item``, ``.tolist``) and
    every op whose output size depends on the data (``unique``, ``nonzero``) raise: on a GPU each one blocks
    the host until the GPU catches up. A CPU stand-in for CUDA's sync-debug mode, which CI cannot run."""

    NAMES = ("__int__", "__float__", "__bool__", "__index__", "item", "tolist", "nonzero", "unique")

    def __enter__(self):
        self.saved = {n: getattr(torch.Tensor, n) for n in self.NAMES}
        self.saved_fns = {n: getattr(torch, n) for n in ("unique", "nonzero")}

        def refuse(name):
            def f(*a, **k):
                raise AssertionError(f"host read: Tensor.{name}")
            return f

        for n in self.NAMES:
            setattr(torch.Tensor, n, refuse(n))
        for n in self.saved_fns:
            setattr(torch, n, refuse(n))
        return self

    def __exit__(self, *exc):
        for n, f in self.saved.items():
            setattr(torch.Tensor, n, f)
        for n, f in self.saved_fns.items():
            setattr(torch, n, f)


class _FlatBackbone(nn.Module):
    out_dim = 12

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 4 * 4, self.out_dim)

    def forward(self, x):
        return self.fc(x.flatten(1))


@pytest.mark.parametrize("kind", ["nca", "mn"])
def test_training_loss_makes_no_host_read(kind):
    """NCA and MN training steps (no prototypes, no subsampling) never read from the device: the loss, the
    pair counts and the accuracy stay tensors, and equal the synced values of episode_loss."""
    g = torch.Generator().manual_seed(3)
    w, n, m = 4, 2, 3
    labels = torch.arange(w).repeat_interleave(n + m) * 7 + 2  # sparse label values: ids are not 0..w-1
    support = torch.tensor(([True] * n + [False] * m) * w)
    images = torch.rand(len(labels), 3, 4, 4, generator=g)
    method = DistanceMethod(_FlatBackbone(), lambda x: x, kind=kind, temperature=0.9, projection_dim=5).train()
    batch = Batch(torch.arange(len(labels)), labels, support, w, n, m)
    with _NoHostRead():
        loss, logs = method.loss(images, batch)
        loss.backward()
    assert all(torch.is_tensor(v) and v.ndim == 0 for v in logs.values())
    ref = episode_loss(method.embed(images), labels, support, kind, temperature=0.9)
    assert loss.item() == pytest.approx(ref.loss.item(), rel=1e-6)
    assert (logs["positives"].item(), logs["negatives"].item()) == (ref.positives, ref.negatives)
    assert (ref.positives, ref.negatives) == table1_pairs(w, n, m, kind)
    assert logs["acc"].item() == pytest.approx(ref.accuracy)
    assert isinstance(ref.positives, int) and isinstance(ref.accuracy, float)


def test_accuracy_is_nan_without_contributing_anchors_in_both_modes():
    z = torch.randn(4, 3)
    labels = torch.tensor([0, 1, 2, 3])  # every class once: no anchor has a positive
    for sync in (True, False):
        out = episode_loss(z, labels, None, "nca", sync=sync)
        assert math.isnan(float(out.accuracy)) and int(out.anchors) == 0 and float(out.loss) == 0.0


def test_batch_reduction_is_the_papers_formula_under_subsampling():
    """reduction="batch" is Sec. 2.2's L_NCA, -1/|B| sum_i log(sum_pos exp(-d/T) / sum_all exp(-d/T)), on the
    pairs subsampling kept (anchors left without a positive add 0), written as a slow float64 loop; the
    default divides the same sum by the anchors that have a positive."""
    g = torch.Generator().manual_seed(5)
    z = torch.randn(14, 3, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 4, 4, 4, 5])  # classes 3 and 5 appear once
    same = labels[:, None] == labels[None, :]
    allowed = subsample_pairs(~torch.eye(14, dtype=torch.bool), same, 0.4, 0.3, torch.Generator().manual_seed(9))
    t, total, contributing = 0.9, 0.0, 0
    for i in range(14):
        pos = [j for j in range(14) if allowed[i, j] and same[i, j]]
        if not pos:
            continue
        num = sum(math.exp(-float(((z[i] - z[j]) ** 2).sum()) / t) for j in pos)
        den = sum(math.exp(-float(((z[i] - z[k]) ** 2).sum()) / t) for k in range(14) if allowed[i, k])
        total -= math.log(num / den)
        contributing += 1
    kw = dict(temperature=t, pos_fraction=0.4, neg_fraction=0.3)
    paper = episode_loss(z, labels, None, "nca", reduction="batch", generator=torch.Generator().manual_seed(9), **kw)
    mean = episode_loss(z, labels, None, "nca", generator=torch.Generator().manual_seed(9), **kw)
    assert 0 < contributing < 14
    assert paper.loss.item() == pytest.approx(total / 14, rel=1e-10)
    assert mean.loss.item() == pytest.approx(total / contributing, rel=1e-10)
    assert paper.anchors == mean.anchors == contributing


def test_batch_reduction_divides_by_the_queries_of_an_episode():
    """With support/query roles the anchors are the queries; all have a positive, so both divisors agree."""
    g = torch.Generator().manual_seed(2)
    w, n, m = 3, 2, 2
    z = torch.randn(w * (n + m), 4, generator=g, dtype=torch.float64)
    labels = torch.arange(w).repeat_interleave(n + m)
    support = torch.tensor(([True] * n + [False] * m) * w)
    for kind in ("pn", "mn"):
        a = episode_loss(z, labels, support, kind)
        b = episode_loss(z, labels, support, kind, reduction="batch")
        assert b.loss.item() == pytest.approx(a.loss.item(), rel=1e-12)


def test_unknown_reduction_is_refused():
    with pytest.raises(ValueError, match="reduction"):
        episode_loss(torch.randn(4, 2), torch.tensor([0, 0, 1, 1]), None, "nca", reduction="mean")
    with pytest.raises(ValueError, match="reduction"):
        DistanceMethod(_FlatBackbone(), lambda x: x, kind="nca", reduction="sum")
