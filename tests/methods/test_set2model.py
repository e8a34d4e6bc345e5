"""Set2Model (seed 003): fits, gradients, EM, histogram loss, retrieval AP, precision, against independent
references (torch.distributions, finite differences, scikit-learn, pytorch-metric-learning, slow loops)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from studylib.data.samplers import EpisodicSampler
from studylib.evaluation.retrieval import average_precision, retrieval_tasks, svm_negatives
from studylib.methods import build_method
from studylib.methods.set2model import histogram_loss, set_scores, tuple_scores, violation_rate
from studylib.numerics.gaussian import (GMM, diag_gaussian_logpdf, fit_gaussian, fit_gmm, gmm_logpdf,
                                        kmeans_pp_init)
from studylib.numerics.svm import linear_svm, svm_objective


def _clusters(b: int, n_per: int, k: int, d: int, sep: float = 8.0, seed: int = 0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(b, k, d, generator=g, dtype=dtype) * sep
    scales = 0.5 + torch.rand(b, k, d, generator=g, dtype=dtype)
    pts = centres.unsqueeze(2) + scales.unsqueeze(2) * torch.randn(b, k, n_per, d, generator=g, dtype=dtype)
    return pts.reshape(b, k * n_per, d)


# ---------------------------------------------------------------- Gaussian fit and log-likelihood

def test_gaussian_loglik_matches_torch_multivariate_normal():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 12, 6, generator=g, dtype=torch.float64)
    z = torch.randn(4, 7, 6, generator=g, dtype=torch.float64)
    mu, var = fit_gaussian(x, var_floor=0.0)
    ref = torch.distributions.MultivariateNormal(mu.unsqueeze(1), covariance_matrix=torch.diag_embed(var).unsqueeze(1))
    torch.testing.assert_close(diag_gaussian_logpdf(z, mu, var), ref.log_prob(z), rtol=1e-10, atol=1e-10)
    # the ML fit is numpy's mean and biased variance
    torch.testing.assert_close(mu, torch.from_numpy(x.numpy().mean(1)))
    torch.testing.assert_close(var, torch.from_numpy(x.numpy().var(1)))
    # shared queries broadcast against every set
    torch.testing.assert_close(diag_gaussian_logpdf(z[0], mu, var)[1], ref.log_prob(z[0].unsqueeze(0))[1])


def test_gaussian_fit_gradient_matches_finite_differences():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 6, 3, generator=g, dtype=torch.float64, requires_grad=True)
    z = torch.randn(2, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: set_scores(a, b, "gauss", var_floor=1e-3), (x, z))


def test_gaussian_fit_gradient_is_eq10():
    """d mu / d x^j = 1/N; d phi_i / d x^j_i = 2/N (x^j_i - mu_i) (seed 003, Eq. 10)."""
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    mu, var = fit_gaussian(x, var_floor=0.0)
    (gm,) = torch.autograd.grad(mu.sum(), x)
    (gv,) = torch.autograd.grad(var.sum(), x)
    torch.testing.assert_close(gm, torch.full_like(x, 1 / 5))
    torch.testing.assert_close(gv, 2 / 5 * (x - x.mean(0)).detach())


# ---------------------------------------------------------------- GMM by EM

def test_em_matches_sklearn_gaussian_mixture_on_separated_clusters():
    from sklearn.mixture import GaussianMixture
    x = _clusters(b=3, n_per=60, k=3, d=4, sep=25.0, seed=2)
    gmm = fit_gmm(x, 3, iters=500, tol=1e-10, unroll=0, var_floor=1e-6, generator=torch.Generator().manual_seed(0))
    for i in range(3):
        sk = GaussianMixture(3, covariance_type="diag", reg_covar=1e-6, tol=1e-10, max_iter=500, n_init=3,
                             random_state=0).fit(x[i].numpy())
        order = np.lexsort(sk.means_.T[::-1])
        ours = np.lexsort(gmm.means[i].numpy().T[::-1])
        np.testing.assert_allclose(gmm.means[i].numpy()[ours], sk.means_[order], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(gmm.vars[i].numpy()[ours], sk.covariances_[order], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gmm.weights[i].numpy()[ours], sk.weights_[order], rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(gmm_logpdf(x[i], GMM(gmm.weights[i], gmm.means[i], gmm.vars[i])).numpy(),
                                   sk.score_samples(x[i].numpy()), rtol=1e-6, atol=1e-6)


def test_one_component_gmm_is_the_gaussian():
    x = torch.randn(3, 9, 5, dtype=torch.float64)
    gmm = fit_gmm(x, 1, var_floor=1e-6)
    mu, var = fit_gaussian(x, var_floor=1e-6)
    torch.testing.assert_close(gmm.means[:, 0], mu)
    torch.testing.assert_close(gmm.vars[:, 0], var)
    torch.testing.assert_close(gmm.weights, torch.ones(3, 1, dtype=torch.float64))


def test_unrolled_em_gradient_matches_finite_differences_of_the_converged_fit():
    """Finite differences of the converged fit (the implicit function theta*(X)) against the gradient of
    EM unrolled from the detached fixed point: enough unrolled steps sum the Neumann series."""
    x0 = _clusters(b=2, n_per=4, k=2, d=2, sep=1.0, seed=3)  # overlapping: soft responsibilities
    init = x0[:, [0, 4]].clone()  # one point of each cluster: the same basin under any perturbation
    q = torch.randn(2, 3, 2, dtype=torch.float64)

    def f(x, z):
        gmm = fit_gmm(x, 2, iters=3000, tol=1e-14, unroll=100, var_floor=1e-3, init=init)
        return gmm_logpdf(z, gmm)

    x = x0.clone().requires_grad_(True)
    z = q.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(f, (x, z), eps=1e-6, atol=1e-5, rtol=1e-4)


def test_short_unroll_gradient_approaches_the_long_one():
    x0 = _clusters(b=1, n_per=6, k=2, d=3, sep=0.5, seed=4)  # overlapping: soft responsibilities
    init = x0[:, [0, 6]].clone()
    z = torch.randn(1, 4, 3, dtype=torch.float64)
    grads = {}
    for r in (1, 3, 10, 300):
        x = x0.clone().requires_grad_(True)
        gmm_logpdf(z, fit_gmm(x, 2, iters=3000, tol=1e-14, unroll=r, var_floor=1e-3, init=init)).sum().backward()
        grads[r] = x.grad
    err = {r: float((grads[r] - grads[300]).norm() / grads[300].norm()) for r in (1, 3, 10)}
    assert err[1] > 1e-2 and err[1] > err[3] > err[10] and err[10] < 1e-3, err  # one step alone is not exact


def test_implicit_em_gradient_matches_finite_differences_of_the_converged_fit():
    """The implicit gradient of the fixed point (seed 003, Eq. 13-15) against central finite differences of
    the converged fit (tight tolerance, fixed warm start: a smooth function of X)."""
    x0 = _clusters(b=2, n_per=4, k=2, d=2, sep=1.0, seed=3)
    init = x0[:, [0, 4]].clone()
    q = torch.randn(2, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def loss(x):
        gmm = fit_gmm(x, 2, iters=5000, tol=1e-15, var_floor=1e-3, init=init, grad="implicit")
        return gmm_logpdf(q, gmm).sum() + (gmm.weights ** 2).sum() + gmm.vars.sum()

    x = x0.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(loss(x), x)
    fd = torch.zeros_like(x0)
    eps = 1e-6
    for i in range(x0.numel()):
        e = torch.zeros(x0.numel(), dtype=x0.dtype)
        e[i] = eps
        e = e.reshape(x0.shape)
        fd.view(-1)[i] = (loss(x0 + e) - loss(x0 - e)) / (2 * eps)
    torch.testing.assert_close(g, fd, rtol=1e-5, atol=1e-6)
    assert torch.autograd.gradcheck(lambda a: loss(a), (x0.clone().requires_grad_(True),), eps=1e-6, atol=1e-5,
                                    rtol=1e-4)


def test_implicit_em_gradient_equals_many_unrolled_steps():
    x0 = _clusters(b=3, n_per=6, k=2, d=3, sep=0.5, seed=4)
    init = x0[:, [0, 6]].clone()
    z = torch.randn(3, 4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    grads = {}
    for grad, r in (("implicit", 0), ("unrolled", 400)):
        x = x0.clone().requires_grad_(True)
        gmm = fit_gmm(x, 2, iters=3000, tol=1e-14, unroll=r, var_floor=1e-3, init=init, grad=grad)
        (gmm_logpdf(z, gmm).sum() + gmm.weights[..., 0].sum()).backward()
        grads[grad] = x.grad
    torch.testing.assert_close(grads["implicit"], grads["unrolled"], rtol=1e-6, atol=1e-7)


def test_one_component_implicit_gradient_is_the_closed_form_gaussians():
    g = torch.Generator().manual_seed(7)
    x0 = torch.randn(3, 9, 5, generator=g, dtype=torch.float64)
    z = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    x = x0.clone().requires_grad_(True)
    gmm = fit_gmm(x, 1, var_floor=1e-6, grad="implicit")
    (gi,) = torch.autograd.grad(gmm_logpdf(z, gmm).sum() + gmm.vars.sum(), x)
    x = x0.clone().requires_grad_(True)
    mu, var = fit_gaussian(x, var_floor=1e-6)
    (gc,) = torch.autograd.grad(diag_gaussian_logpdf(z, mu, var).sum() + var.sum(), x)
    torch.testing.assert_close(gi, gc, rtol=1e-9, atol=1e-10)


def test_implicit_gradient_is_float32_under_autocast_and_rejects_unknown_modes():
    x = torch.nn.functional.normalize(torch.randn(2, 10, 8), dim=-1).requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        gmm = fit_gmm(x, 2, grad="implicit", generator=torch.Generator().manual_seed(0))
        gmm_logpdf(torch.randn(5, 8), gmm).sum().backward()
    assert gmm.means.dtype == torch.float32 and x.grad.dtype == torch.float32
    assert bool(torch.isfinite(x.grad).all()) and bool((x.grad.abs().sum(-1) > 0).all())
    with pytest.raises(ValueError, match="grad must be one of"):
        fit_gmm(x, 2, grad="exact")


def test_every_concept_descriptor_gets_a_gradient():
    """The authors' fast path back-propagates only into the first 10 descriptors; ours reaches all."""
    x = torch.randn(2, 25, 8, dtype=torch.float64, requires_grad=True)
    set_scores(x, torch.randn(6, 8, dtype=torch.float64), "gmm", components=2, em_unroll=2).sum().backward()
    assert bool((x.grad.abs().sum(-1) > 0).all())


def test_kmeans_pp_picks_one_point_per_separated_cluster():
    x = _clusters(b=8, n_per=10, k=3, d=2, sep=50.0, seed=5)
    c = kmeans_pp_init(x, 3, torch.Generator().manual_seed(0))
    owner = ((c.unsqueeze(2) - x.unsqueeze(1)) ** 2).sum(-1).argmin(-1) // 10  # cluster of each centre
    assert all(sorted(row.tolist()) == [0, 1, 2] for row in owner)


# ---------------------------------------------------------------- histogram loss

def _slow_histogram_loss(pos, neg, bins, lo, hi, half_width, normalize):
    step = (hi - lo) / (bins - 1)
    nodes = [lo + step * b for b in range(bins)]

    def hist(s):
        h = [sum(max(0.0, 1 - abs(v - t) / (half_width * step)) for v in s) for t in nodes]
        tot = sum(h)
        return [x / tot for x in h] if normalize else h

    hp, hn = hist(pos), hist(neg)
    return sum(hn[r] * sum(hp[: r + 1]) for r in range(bins))


@pytest.mark.parametrize("half_width,normalize,value_range", [(2.0, True, "adaptive"), (1.0, True, "fixed"),
                                                              (2.0, False, "adaptive"), (1.5, True, "fixed")])
def test_histogram_loss_matches_a_loop_over_its_formula(half_width, normalize, value_range):
    g = torch.Generator().manual_seed(6)
    pos = (torch.rand(3, 7, generator=g, dtype=torch.float64) * 1.2 - 0.2)
    neg = (torch.rand(3, 11, generator=g, dtype=torch.float64) * 1.2 - 0.9)
    out = histogram_loss(pos, neg, bins=20, value_range=value_range, half_width=half_width, normalize=normalize)
    for i in range(3):
        p, n = pos[i].tolist(), neg[i].tolist()
        lo, hi = (min(p + n) - 1e-6, max(p + n) + 1e-6) if value_range == "adaptive" else (-1.0, 1.0)
        assert out[i].item() == pytest.approx(_slow_histogram_loss(p, n, 20, lo, hi, half_width, normalize), rel=1e-10)


def test_histogram_loss_matches_pytorch_metric_learning():
    """pytorch-metric-learning's HistogramLoss: cosine similarities of all positive / negative pairs, 100 bins
    on [-1, 1] (101 nodes), linear assignment, normalised. Similarities are clamped just below 1 there."""
    from pytorch_metric_learning.losses import HistogramLoss
    g = torch.Generator().manual_seed(7)
    emb = torch.randn(24, 5, generator=g, dtype=torch.float64)
    labels = torch.arange(4).repeat_interleave(6)
    ref = HistogramLoss(n_bins=100)(emb, labels)
    e = torch.nn.functional.normalize(emb, dim=-1)
    sim = (e @ e.T).clamp(-1, 1 - 1e-6)
    i, j = torch.triu_indices(24, 24, 1)
    same = labels[i] == labels[j]
    ours = histogram_loss(sim[i, j][same], sim[i, j][~same], bins=101, value_range="fixed", half_width=1.0)
    assert float(ours) == pytest.approx(float(ref), rel=1e-6)


def test_histogram_loss_approaches_the_violation_rate_as_bins_grow():
    g = torch.Generator().manual_seed(8)
    pos = torch.randn(4, 50, generator=g, dtype=torch.float64) + 1.0
    neg = torch.randn(4, 80, generator=g, dtype=torch.float64)
    exact = violation_rate(pos, neg).double()
    errs = [float((histogram_loss(pos, neg, bins=b) - exact).abs().max()) for b in (10, 100, 2000)]
    assert errs[0] > errs[1] > errs[2] and errs[2] < 5e-3, errs  # the kernel's width shrinks as 1/bins


def test_histogram_loss_gradient_lowers_violations():
    pos = torch.tensor([[0.0, 0.2, 0.9]], requires_grad=True)
    neg = torch.tensor([[0.1, 0.5, 0.3]], requires_grad=True)
    before = histogram_loss(pos, neg, bins=10, value_range="fixed", half_width=1.0).sum()
    before.backward()
    assert bool((pos.grad <= 0).all()) and bool((neg.grad >= 0).all()) and float(pos.grad.abs().sum()) > 0
    with torch.no_grad():
        after = histogram_loss(pos - 0.01 * pos.grad, neg - 0.01 * neg.grad, bins=10, value_range="fixed",
                               half_width=1.0).sum()
    assert float(after) < float(before)


# ---------------------------------------------------------------- retrieval

def test_average_precision_matches_sklearn():
    from sklearn.metrics import average_precision_score
    g = torch.Generator().manual_seed(9)
    scores = torch.randn(6, 40, generator=g)
    rel = torch.rand(6, 40, generator=g) < 0.3
    valid = torch.rand(6, 40, generator=g) < 0.8
    ap = average_precision(scores, rel, valid)
    for i in range(6):
        v = valid[i].numpy()
        ref = average_precision_score(rel[i].numpy()[v], scores[i].numpy()[v])
        assert ap[i].item() == pytest.approx(ref, rel=1e-9)


def test_retrieval_tasks_noise_merge_and_exclusion():
    labels = torch.arange(10).repeat_interleave(12)
    t = retrieval_tasks(labels, set_size=10, noise=0.3, merge=2, seed=0)
    assert t.sets.shape == (5, 10) and t.classes.shape == (5, 2)
    for c in range(5):
        member_cls = labels[t.sets[c]]
        inside = torch.isin(member_cls, t.classes[c])
        assert int((~inside).sum()) == 3 and torch.equal(~inside, t.noisy[c])
        assert not bool(t.valid[c, t.sets[c]].any()) and int(t.valid[c].sum()) == 120 - 10
        assert torch.equal(t.relevant[c], torch.isin(labels, t.classes[c]))
        assert all(int((labels[t.valid[c]] == k).sum()) >= 1 for k in t.classes[c])
    assert torch.equal(retrieval_tasks(labels, 10, noise=0.3, merge=2, seed=0).sets, t.sets)
    with pytest.raises(ValueError, match="set_size"):
        retrieval_tasks(labels, set_size=12)


# ---------------------------------------------------------------- method, tuples, precision

def test_tuple_scores_split_positives_and_negatives():
    w, shots, q, d = 4, 3, 2, 5
    emb = torch.randn(w, shots + q, d)
    pos, neg = tuple_scores(emb, shots, score="avg")
    assert pos.shape == (w, q) and neg.shape == (w, (w - 1) * q)
    means = emb[:, :shots].mean(1)
    torch.testing.assert_close(pos[1], emb[1, shots:] @ means[1])
    others = torch.cat([emb[c, shots:] for c in range(w) if c != 2])
    torch.testing.assert_close(neg[2], others @ means[2])
    torch.manual_seed(0)
    assert tuple_scores(emb, shots, negatives=3, score="nn")[1].shape == (w, 3)


# ---------------------------------------------------------------- SVM baseline (Eq. 18)

@pytest.mark.parametrize("c", [0.1, 1.0, 10.0])
def test_linear_svm_matches_sklearn_linearsvc(c):
    from sklearn.svm import LinearSVC
    g = torch.Generator().manual_seed(11)
    x = torch.nn.functional.normalize(torch.randn(4, 30, 12, generator=g, dtype=torch.float64), dim=-1)
    y = torch.where(torch.arange(30) < 10, 1.0, -1.0).to(torch.float64).expand(4, 30).clone()
    x[:, :10] += 0.4 * torch.randn(4, 1, 12, generator=g, dtype=torch.float64)  # a shifted positive class
    w, b = linear_svm(x, y, c)
    z = torch.randn(50, 12, generator=g, dtype=torch.float64)
    for i in range(4):
        sk = LinearSVC(C=c, loss="squared_hinge", tol=1e-12, max_iter=200000).fit(x[i].numpy(), y[i].numpy())
        np.testing.assert_allclose(w[i].numpy(), sk.coef_[0], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(float(b[i]), sk.intercept_[0], rtol=1e-6, atol=1e-7)
        ours = (z @ w[i] + b[i]).numpy()
        np.testing.assert_allclose(ours, sk.decision_function(z.numpy()), rtol=1e-6, atol=1e-7)
        assert np.corrcoef(ours, sk.decision_function(z.numpy()))[0, 1] > 0.999999
    # the optimum: no step of the objective lowers it
    f = svm_objective(torch.cat([w, b[:, None]], -1), x, y, c)
    for eps in (1e-4, -1e-4):
        assert bool((svm_objective(torch.cat([w, b[:, None]], -1) + eps, x, y, c) >= f).all())


def test_svm_retrieval_ap_matches_sklearn_linearsvc_on_a_toy_problem():
    from sklearn.svm import LinearSVC
    g = torch.Generator().manual_seed(12)
    centres = torch.randn(8, 6, generator=g, dtype=torch.float64) * 1.2
    labels = torch.arange(8).repeat_interleave(15)
    feats = torch.nn.functional.normalize(centres[labels] + torch.randn(120, 6, generator=g, dtype=torch.float64),
                                          dim=-1)
    tasks = retrieval_tasks(labels, 5, noise=0.2, seed=3)
    neg = svm_negatives(tasks, labels, 10, seed=0)
    s = set_scores(feats[tasks.sets], feats, "svm", negatives=feats[neg], svm_c=1.0)
    valid = tasks.valid.clone()
    valid.scatter_(1, neg, False)  # the SVM's negatives are left out of its ranking
    ap = average_precision(s, tasks.relevant, valid)
    ref = []
    for c in range(len(tasks.sets)):
        xs = torch.cat([feats[tasks.sets[c]], feats[neg[c]]]).numpy()
        ys = np.r_[np.ones(5), -np.ones(10)]
        d = LinearSVC(C=1.0, tol=1e-12, max_iter=200000).fit(xs, ys).decision_function(feats.numpy())
        assert np.corrcoef(d, s[c].numpy())[0, 1] > 0.99999
        ref.append(average_precision(torch.from_numpy(d)[None], tasks.relevant[c:c + 1], valid[c:c + 1]))
    torch.testing.assert_close(ap, torch.cat(ref), rtol=0, atol=1e-9)
    assert float(ap.mean()) > 0.3  # far above chance (1/8): the toy concepts are learnable


def test_svm_negatives_come_from_other_concepts_sets_outside_the_concept():
    labels = torch.arange(12).repeat_interleave(10)
    tasks = retrieval_tasks(labels, 6, noise=0.5, merge=2, seed=1)
    neg = svm_negatives(tasks, labels, 12, seed=0)
    assert neg.shape == (len(tasks.sets), 12)
    for c in range(len(tasks.sets)):
        others = set(torch.cat([tasks.sets[:c], tasks.sets[c + 1:]]).reshape(-1).tolist())
        assert set(neg[c].tolist()) <= others and len(set(neg[c].tolist())) == 12
        assert not bool(torch.isin(labels[neg[c]], tasks.classes[c]).any())
    torch.testing.assert_close(neg, svm_negatives(tasks, labels, 12, seed=0))  # deterministic in the seed
    with pytest.raises(ValueError, match="fewer than"):
        svm_negatives(tasks, labels, 1000)


def test_svm_is_an_evaluation_only_score():
    from studylib.models import build_backbone
    with pytest.raises(ValueError, match="evaluation-only"):
        build_method("set2model", build_backbone("conv4", in_channels=1, hidden=8), None, score="svm")
    with pytest.raises(ValueError, match="needs negatives"):
        set_scores(torch.randn(2, 5, 4), torch.randn(3, 4), "svm")


@pytest.mark.parametrize("score", ["gauss", "gmm", "avg", "nn", "gmm-implicit"])
def test_method_trains_on_episodic_batches(score):
    from studylib.models import build_backbone
    torch.manual_seed(0)
    labels = torch.arange(6).repeat_interleave(8)
    images = torch.randint(0, 256, (48, 1, 28, 28), dtype=torch.uint8)
    batch = EpisodicSampler(labels, ways=4, shots=4, queries=3, episodes_per_epoch=1, seed=0).epoch(0)[0]
    kw = {"score": "gmm", "em_grad": "implicit"} if score == "gmm-implicit" else {"score": score}
    m = build_method("set2model", build_backbone("conv4", in_channels=1, hidden=8), None, dim=16, **kw)
    loss, logs = m.loss(images[batch.indices], batch)
    loss.backward()
    assert math.isfinite(float(loss)) and 0 <= float(logs["violation"]) <= 1
    assert m.proj.weight.grad is not None and float(m.proj.weight.grad.abs().sum()) > 0
    assert m.features(images[:3].float() / 255).norm(dim=-1).sub(1).abs().max() < 1e-5


def test_bf16_autocast_on_cpu_matches_fp32():
    g = torch.Generator().manual_seed(10)
    x = torch.nn.functional.normalize(torch.randn(3, 12, 16, generator=g), dim=-1)
    z = torch.nn.functional.normalize(torch.randn(20, 16, generator=g), dim=-1)
    for score in ("gauss", "gmm", "avg", "nn"):
        kw = {"score": score, "components": 2}
        ref = set_scores(x, z, generator=torch.Generator().manual_seed(0), **kw)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = set_scores(x, z, generator=torch.Generator().manual_seed(0), **kw)
            loss = histogram_loss(out[:, :5], out[:, 5:])
        assert out.dtype == torch.float32 and loss.dtype == torch.float32
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(loss, histogram_loss(ref[:, :5], ref[:, 5:]))
    # bf16 descriptors (what a bf16 backbone hands over) are fitted in fp32: close to the fp32 fit
    xb, zb = x.bfloat16(), z.bfloat16()
    out = set_scores(xb, zb, "gauss")
    ref = set_scores(xb.float(), zb.float(), "gauss")
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_scores_stay_on_the_device():
    x = torch.randn(2, 10, 4, device="cuda")
    for score in ("gauss", "gmm", "avg", "nn"):
        assert set_scores(x, torch.randn(5, 4, device="cuda"), score).device.type == "cuda"
    s = set_scores(x, torch.randn(5, 4, device="cuda"), "svm", negatives=torch.randn(2, 20, 4, device="cuda"))
    assert s.device.type == "cuda"
    xg = x.clone().requires_grad_(True)
    gmm_logpdf(torch.randn(5, 4, device="cuda"), fit_gmm(xg, 2, grad="implicit")).sum().backward()
    assert xg.grad.device.type == "cuda" and bool(torch.isfinite(xg.grad).all())
    labels = torch.arange(4, device="cuda").repeat_interleave(5)
    t = retrieval_tasks(labels, 3)
    assert t.sets.device.type == "cuda"
    assert average_precision(torch.randn(4, 20, device="cuda"), t.relevant, t.valid).device.type == "cuda"


# ---------------------------------------------------------------- issue 19: EM as in seed 003 Sec. 4.2

def _slow_em_set() -> torch.Tensor:
    """``[1, 10, 3]`` float32: two overlapping clusters on which EM from k-means++ (seed 0) needs ~60
    iterations to meet the 1e-5 tolerance (found by a search over random sets)."""
    x = torch.randn(1, 10, 3, generator=torch.Generator().manual_seed(205))
    x[:, :5, 0] += 1.5
    return x


def test_training_em_runs_to_convergence_not_to_a_cap_of_30():
    """The method's own fit settings reach EM's stopping rule (one more EM step changes the mean
    log-likelihood by <= 1e-5) on a set that needs more than 30 iterations."""
    from studylib.methods.set2model import Set2ModelMethod, fit_sets
    from studylib.numerics.gaussian import em_step
    x = _slow_em_set()
    m = Set2ModelMethod(_PixelNet(3), None, score="gmm", normalize=False)
    kw = {k: v for k, v in m.score_kw.items() if k not in ("em_unroll",)}
    floor = kw["var_floor"]
    # independent count: EM steps from the same k-means++ start until the rule holds
    start = kmeans_pp_init(x, 2, torch.Generator().manual_seed(0))
    d2 = ((x.unsqueeze(-2) - start.unsqueeze(-3)) ** 2).sum(-1)
    resp = torch.nn.functional.one_hot(d2.argmin(-1), 2).to(x.dtype)
    nk = resp.sum(-2)
    means = (resp.transpose(-1, -2) @ x) / nk[..., None]
    var = (resp.transpose(-1, -2) @ x ** 2) / nk[..., None] - means ** 2 + floor
    g, prev, steps = GMM(nk / x.shape[-2], means, var), None, 0
    while True:
        g, ll = em_step(x, g, floor)
        steps += 1
        if prev is not None and float((ll - prev).abs().max()) <= 1e-5:
            break
        prev = ll
    assert steps > 40, steps  # the set is one where a cap of 30 stops early
    gmm = fit_sets(x, em_unroll=0, generator=torch.Generator().manual_seed(0), **kw).params
    _, ll0 = em_step(x, gmm, floor)
    nxt, _ = em_step(x, gmm, floor)
    _, ll1 = em_step(x, nxt, floor)
    assert float((ll1 - ll0).abs().max()) <= 1e-5


class _PixelNet(torch.nn.Module):
    """Descriptors = the images' pixel values / 255 (``[B, 1, 1, d]`` -> ``[B, d]``): a fixed embedding."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.out_dim = d
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) * self.scale


def test_episodic_batches_name_their_classes():
    labels = torch.arange(7).repeat_interleave(6)[torch.randperm(42, generator=torch.Generator().manual_seed(1))]
    for replacement in (True, False):
        s = EpisodicSampler(labels, ways=3, shots=2, queries=2, episodes_per_epoch=4, replacement=replacement,
                            seed=3)
        for b in s.epoch(0):
            per_class = labels[b.indices].reshape(3, 4)
            assert (per_class == per_class[:, :1]).all()
            assert torch.equal(b.classes, per_class[:, 0])
    s = EpisodicSampler(labels, ways=2, shots=1, queries=1, episodes_per_epoch=2, seed=0, episodes_per_batch=3)
    b = s.epoch(0)[0]
    assert torch.equal(b.classes, labels[b.indices].reshape(6, 2)[:, 0])


def _three_cluster_images() -> tuple[torch.Tensor, torch.Tensor]:
    """Two classes of 10 images ``[20, 1, 1, 2]`` (uint8 pixels = descriptors * 255): each class's 9 set images
    form three tight clusters, so a 2-component GMM has three distinct fixed points (which pair shares a
    component); the 10th image of each class is its relevant query."""
    g = torch.Generator().manual_seed(0)
    centres = torch.tensor([[40.0, 40.0], [200.0, 50.0], [120.0, 210.0]])
    out = []
    for c in range(2):
        pts = centres.repeat_interleave(3, 0) + 6 * torch.randn(9, 2, generator=g) + 3 * c
        out += [pts, centres[:1] + 3 * c]
    imgs = torch.cat(out).round().clamp(0, 255).to(torch.uint8).reshape(20, 1, 1, 2)
    return imgs, torch.arange(2).repeat_interleave(10)


def test_gmm_training_warm_starts_each_class_from_its_last_fit():
    """Seed 003 Sec. 4.2: EM of a class starts from the fit memorised when the class last appeared. A class
    whose memory holds an EM fixed point of its set other than the one k-means++ reaches keeps that fixed point."""
    from studylib.methods.set2model import Set2ModelMethod
    imgs, labels = _three_cluster_images()
    batch = EpisodicSampler(labels, ways=2, shots=9, queries=1, episodes_per_epoch=1, seed=0).epoch(0)[0]
    m = Set2ModelMethod(_PixelNet(2), None, score="gmm", normalize=False, var_floor=1e-4, num_classes=2)
    assert not bool(m.memory_seen.any())
    torch.manual_seed(0)
    m.loss(imgs[batch.indices], batch)
    assert bool(m.memory_seen.all())
    first = m.memory_means.clone()
    x = imgs[batch.indices].float().div(255).reshape(2, 10, 2)[:, :9]  # [class in batch order, 9, 2]
    # the three fixed points of each class's set, one per pairing of its clusters: start from one cluster's
    # centre and the midpoint of the other two
    c = torch.tensor([[40.0, 40.0], [200.0, 50.0], [120.0, 210.0]]) / 255
    fits = [fit_gmm(x, 2, iters=2000, tol=0.0, var_floor=1e-4,
                    init=torch.stack([c[a], (c.sum(0) - c[a]) / 2]).expand(2, 2, 2).clone()) for a in range(3)]
    cls = batch.classes

    def dist(g, means):  # component order does not matter
        return torch.minimum((g.means - means).abs().amax((-1, -2)),
                             (g.means.flip(-2) - means).abs().amax((-1, -2)))

    other = [next(f for f in fits if float(dist(f, first[cls])[i]) > 0.1) for i in range(2)]
    for i in range(2):
        c = int(cls[i])
        m.memory_weights[c], m.memory_means[c], m.memory_vars[c] = (other[i].weights[i], other[i].means[i],
                                                                    other[i].vars[i])
    m.loss(imgs[batch.indices], batch)
    for i in range(2):
        assert float(dist(other[i], m.memory_means[cls][i:i + 1])[i]) < 1e-3
