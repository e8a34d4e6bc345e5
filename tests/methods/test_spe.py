"""Tests of the Stochastic Prototype Embedding (seed 002, Eq. 1-8) against SciPy densities, numerical
integration, analytic limits and finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats
from torch import nn

from studylib.data.samplers import EpisodicSampler
from studylib.methods.spe import (GaussianHead, PrototypicalMethod, SPEMethod, class_gaussians,
                                  eps_init, intersection_gaussian, intersection_log_posterior, naive_log_posterior,
                                  pn_log_posterior, prototype_posterior, softplus_inverse, spe_classifier,
                                  spe_log_posterior)
from studylib.numerics.gaussian import pairwise_diag_gaussian_logpdf



def _rand_episode(gen: torch.Generator, k: int = 4, n: int = 3, q: int = 5, d: int = 3, scale: float = 1.0):
    mu_s = torch.randn(k, n, d, generator=gen, dtype=torch.float64) * 2
    var_s = torch.rand(k, n, d, generator=gen, dtype=torch.float64) * scale + 0.1
    mu_q = torch.randn(q, d, generator=gen, dtype=torch.float64) * 2
    var_q = torch.rand(q, d, generator=gen, dtype=torch.float64) * scale + 0.1
    return mu_s, var_s, mu_q, var_q


def test_diag_gauss_logpdf_matches_scipy():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(2, 7, 4, generator=g, dtype=torch.float64)
    mu = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    var = torch.rand(2, 3, 4, generator=g, dtype=torch.float64) + 0.05
    out = pairwise_diag_gaussian_logpdf(z, mu, var)
    assert out.shape == (2, 7, 3)
    for e in range(2):
        for k in range(3):
            ref = stats.multivariate_normal(mu[e, k].numpy(), np.diag(var[e, k].numpy())).logpdf(z[e].numpy())
            np.testing.assert_allclose(out[e, :, k].numpy(), ref, rtol=1e-10, atol=1e-10)


def test_prototype_posterior_closed_form_and_eq4_by_quadrature():
    g = torch.Generator().manual_seed(1)
    mu_s, var_s, _, _ = _rand_episode(g, k=3, n=4, d=2)
    eps2 = torch.tensor([0.3, 0.7], dtype=torch.float64)
    mu_y, var_y = prototype_posterior(mu_s, var_s, eps2)
    # Closed form of Eq. 5 written as explicit loops.
    for k in range(3):
        for j in range(2):
            prec = [1.0 / (float(var_s[k, i, j]) + float(eps2[j])) for i in range(4)]
            v = 1.0 / sum(prec)
            m = v * sum(p * float(mu_s[k, i, j]) for i, p in enumerate(prec))
            assert math.isclose(float(var_y[k, j]), v, rel_tol=1e-12)
            assert math.isclose(float(mu_y[k, j]), m, rel_tol=1e-12, abs_tol=1e-12)
    # Eq. 4 directly: normalise the product of the densities p(nu|x_i) = N(nu; mu_i, var_i + eps2) numerically.
    k, j = 1, 0
    grid = np.linspace(-15, 15, 200001)
    logprod = sum(stats.norm(float(mu_s[k, i, j]), math.sqrt(float(var_s[k, i, j] + eps2[j]))).logpdf(grid)
                  for i in range(4))
    dens = np.exp(logprod - logprod.max())
    dens /= integrate.trapezoid(dens, grid)
    mean = integrate.trapezoid(grid * dens, grid)
    var = integrate.trapezoid((grid - mean) ** 2 * dens, grid)
    assert abs(mean - float(mu_y[k, j])) < 1e-6 and abs(var - float(var_y[k, j])) < 1e-6


def test_eq7_product_identity_pointwise_and_integrated():
    g = torch.Generator().manual_seed(2)
    mu_x, mu_y = torch.randn(2, 3, generator=g, dtype=torch.float64)
    var_x, vhat_y = torch.rand(2, 3, generator=g, dtype=torch.float64) + 0.2
    mu_xy, var_xy, log_first = intersection_gaussian(mu_x, var_x, mu_y, vhat_y)
    # Against Eq. 7's written form var_xy = (1/var_x + 1/vhat_y)^-1, mu_xy = var_xy (mu_x/var_x + mu_y/vhat_y).
    v_ref = 1.0 / (1.0 / var_x + 1.0 / vhat_y)
    torch.testing.assert_close(var_xy, v_ref)
    torch.testing.assert_close(mu_xy, v_ref * (mu_x / var_x + mu_y / vhat_y))
    z = torch.randn(50, 3, generator=g, dtype=torch.float64) * 2
    lhs = (stats.norm(mu_x.numpy(), np.sqrt(var_x.numpy())).logpdf(z.numpy())
           + stats.norm(mu_y.numpy(), np.sqrt(vhat_y.numpy())).logpdf(z.numpy())).sum(1)
    rhs = stats.norm(mu_xy.numpy(), np.sqrt(var_xy.numpy())).logpdf(z.numpy()).sum(1) + float(log_first)
    np.testing.assert_allclose(lhs, rhs, rtol=1e-10)
    # The integral over z of the left-hand side (1-D, per dimension) is the second factor.
    total = 0.0
    for j in range(3):
        f = lambda t, j=j: (_npdf(t, float(mu_x[j]), float(var_x[j])) * _npdf(t, float(mu_y[j]), float(vhat_y[j])))
        total += math.log(integrate.quad(f, -30, 30, epsabs=1e-13)[0])
    assert abs(total - float(log_first)) < 1e-7


def _npdf(t: float, m: float, v: float) -> float:
    return math.exp(-0.5 * (t - m) ** 2 / v) / math.sqrt(2 * math.pi * v)


def _eq6_quadrature_1d(mu_q: float, var_q: float, mu_c: np.ndarray, vhat_c: np.ndarray) -> np.ndarray:
    """Eq. 6 in one dimension by adaptive quadrature."""
    out = []
    for y in range(len(mu_c)):
        def f(z: float) -> float:
            logs = -0.5 * (z - mu_c) ** 2 / vhat_c - 0.5 * np.log(2 * np.pi * vhat_c)
            return _npdf(z, mu_q, var_q) * math.exp(logs[y] - np.logaddexp.reduce(logs))
        lo, hi = mu_q - 12 * math.sqrt(var_q), mu_q + 12 * math.sqrt(var_q)
        out.append(integrate.quad(f, lo, hi, epsabs=1e-12, limit=200)[0])
    return np.array(out)


def test_samplers_match_eq6_quadrature_in_1d():
    g = torch.Generator().manual_seed(3)
    mu_c = torch.tensor([[-1.0], [0.5], [2.0]], dtype=torch.float64)
    vhat_c = torch.tensor([[0.5], [1.5], [0.8]], dtype=torch.float64)
    mu_q = torch.tensor([[0.2], [1.4]], dtype=torch.float64)
    var_q = torch.tensor([[1.0], [0.3]], dtype=torch.float64)
    ref = np.stack([_eq6_quadrature_1d(float(mu_q[i]), float(var_q[i]), mu_c[:, 0].numpy(), vhat_c[:, 0].numpy())
                    for i in range(2)])
    np.testing.assert_allclose(ref.sum(1), 1.0, atol=1e-8)
    s = 100_000
    naive = naive_log_posterior(mu_q, var_q, mu_c, vhat_c, s, generator=g).exp().numpy()
    inter = intersection_log_posterior(mu_q, var_q, mu_c, vhat_c, None, s, generator=g).exp().numpy()
    # Monte-Carlo standard error of a mean of values in [0, 1] is at most 0.5 / sqrt(S) = 0.0016.
    np.testing.assert_allclose(naive, ref, atol=0.008)
    np.testing.assert_allclose(inter, ref, atol=0.008)
    # The literal "1 / E[sum]" reading of Eq. 8 converges elsewhere (Jensen): the test can tell them apart.
    lit = intersection_log_posterior(mu_q, var_q, mu_c, vhat_c, None, s, generator=g, inverse="of_mean").exp()
    assert np.abs(lit.numpy() - ref).max() > 0.012
    # With one sample the two readings coincide.
    one = torch.randn(2, 3, 1, 1, generator=g, dtype=torch.float64)
    torch.testing.assert_close(intersection_log_posterior(mu_q, var_q, mu_c, vhat_c, None, noise=one),
                               intersection_log_posterior(mu_q, var_q, mu_c, vhat_c, None, noise=one,
                                                          inverse="of_mean"))
    # Target-only intersection estimates (training mode) equal the all-class ones given the same noise.
    noise = torch.randn(2, 3, 64, 1, generator=g, dtype=torch.float64)
    full = intersection_log_posterior(mu_q, var_q, mu_c, vhat_c, None, noise=noise)
    tgt = torch.tensor([2, 0])
    part = intersection_log_posterior(mu_q, var_q, mu_c, vhat_c, tgt, noise=noise[torch.arange(2), tgt])
    torch.testing.assert_close(part, full[torch.arange(2), tgt])


def test_naive_and_intersection_agree_on_random_inputs():
    g = torch.Generator().manual_seed(4)
    mu_s, var_s, mu_q, _ = _rand_episode(g, k=4, n=2, q=6, d=3)
    # Query variances well below every vhat_y (>= sigma_eps^2 = 0.5), where the intersection estimator's
    # importance weights are well behaved (see intersection_log_posterior on its variance).
    var_q = torch.rand(6, 3, generator=g, dtype=torch.float64) * 0.15 + 0.02
    eps2 = torch.full((3,), 0.5, dtype=torch.float64)
    reps, s = 8, 20_000
    p_naive = torch.stack([spe_log_posterior(mu_s, var_s, mu_q, var_q, eps2, "naive", s, g).exp()
                           for _ in range(reps)])
    p_inter = torch.stack([spe_log_posterior(mu_s, var_s, mu_q, var_q, eps2, "intersection", s, g).exp()
                           for _ in range(reps)])
    torch.testing.assert_close(p_naive.sum(-1), torch.ones(reps, 6, dtype=torch.float64))
    # Monte-Carlo standard error of the difference, estimated from the independent replicates.
    se = (p_naive.var(0) / reps + p_inter.var(0) / reps).sqrt()
    diff = (p_naive.mean(0) - p_inter.mean(0)).abs()
    assert se.max() < 0.015, "the comparison would have no power"
    assert (diff <= 5 * se + 1e-3).all(), (diff, se)
    # And the samplers are not trivially equal to the plug-in softmax at mu_x (the test has power).
    mu_c, vhat_c = class_gaussians(mu_s, var_s, eps2)
    plug_in = pairwise_diag_gaussian_logpdf(mu_q, mu_c, vhat_c).softmax(-1)
    assert (p_naive.mean(0) - plug_in).abs().max() > 0.03


@pytest.mark.parametrize("sampler", ["naive", "intersection"])
def test_pn_limit_with_equal_class_variances(sampler: str):
    g = torch.Generator().manual_seed(5)
    k, n, q, d = 5, 3, 7, 4
    mu_s = torch.randn(k, n, d, generator=g, dtype=torch.float64) * 2
    mu_q = torch.randn(q, d, generator=g, dtype=torch.float64) * 2
    s2, eps2 = 0.6, 0.25
    var_s = torch.full((k, n, d), s2, dtype=torch.float64)
    var_q = torch.full((q, d), 1e-14, dtype=torch.float64)
    out = spe_log_posterior(mu_s, var_s, mu_q, var_q, eps2, sampler, 4, g)
    vhat = (s2 + eps2) / n + eps2  # Eq. 5: equal for every class
    ref = pn_log_posterior(mu_s, mu_q, scale=1.0 / (2.0 * vhat))
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    # Larger query variance: the answer moves away from the PN softmax.
    far = spe_log_posterior(mu_s, var_s, mu_q, torch.full_like(var_q, 2.0), eps2, sampler, 4000, g)
    assert (far.exp() - ref.exp()).abs().max() > 0.02


def test_intersection_gradients_match_finite_differences():
    g = torch.Generator().manual_seed(6)
    mu_s, var_s, mu_q, var_q = _rand_episode(g, k=3, n=2, q=2, d=2)
    noise = torch.randn(2, 2, 2, generator=g, dtype=torch.float64)
    target = torch.tensor([1, 2])

    def f(ms, vs, mq, vq, e):
        mc, vc = class_gaussians(ms, vs, e)
        return intersection_log_posterior(mq, vq, mc, vc, target, noise=noise)

    def h(ms, vs, mq, vq, e):
        mc, vc = class_gaussians(ms, vs, e)
        return naive_log_posterior(mq, vq, mc, vc, noise=noise)

    eps2 = torch.tensor([0.3, 0.4], dtype=torch.float64)
    args = [t.clone().requires_grad_() for t in (mu_s, var_s, mu_q, var_q, eps2)]
    assert torch.autograd.gradcheck(f, args)
    assert torch.autograd.gradcheck(h, args)


def _tiny_backbone(out: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                         nn.Linear(32, out))


def _episode(ways: int = 3, shots: int = 2, queries: int = 3):
    labels = torch.arange(5).repeat_interleave(6)
    sampler = EpisodicSampler(labels, ways, shots, queries, episodes_per_epoch=1, seed=0)
    batch = sampler.epoch(0)[0]
    images = (torch.rand(len(batch), 1, 12, 12, generator=torch.Generator().manual_seed(7)) * 255).to(torch.uint8)
    return images, batch


@pytest.mark.parametrize("sampler", ["naive", "intersection"])
def test_spe_method_one_sample_gradients_are_finite(sampler: str):
    torch.manual_seed(0)
    d = 2
    method = SPEMethod(_tiny_backbone(2 * d), None, d, sampler=sampler, samples=1)
    images, batch = _episode()
    with torch.random.fork_rng():
        torch.manual_seed(5)
        loss, logs = method.loss(images, batch)
        # The logged accuracy, counted by hand (NumPy) from the loss's own predictions: replay its random draws.
        torch.manual_seed(5)
        with torch.no_grad():
            mu, var = (t.float() for t in method.embed(images.float() / 255.0))
            sup, ways, shots = batch.support, batch.ways, batch.shots
            mu_c, vhat_c = class_gaussians(mu[sup].reshape(ways, shots, d), var[sup].reshape(ways, shots, d),
                                           method.sigma_eps2)
            y = batch.labels[~sup]
            args = (mu[~sup], var[~sup], mu_c, vhat_c)
            if sampler == "naive":
                logp = naive_log_posterior(*args, 1)
            else:
                intersection_log_posterior(*args, y, 1, inverse=method.intersection_inverse)  # the loss's draw
                logp = intersection_log_posterior(*args, None, 1, inverse=method.intersection_inverse)
    pred = logp.numpy().argmax(-1)
    assert logs["acc"] == pytest.approx(float(np.mean(pred == y.numpy())))
    # Appendix B initialisation with |S| = ways * shots.
    torch.testing.assert_close(method.eps.detach(), torch.full((d,), 6 * 0.01 ** (2 / d)))
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    grads = [p.grad for p in method.parameters()]
    assert all(gr is not None and torch.isfinite(gr).all() for gr in grads)
    assert method.eps.grad.abs().sum() > 0
    # Features are the mean embedding; gaussian_features adds the positive variance.
    x = images.float() / 255
    assert method.features(x).shape == (len(images), d)
    gf = method.gaussian_features(x)
    assert gf.shape == (len(images), 2 * d) and (gf[:, d:] > 0).all()
    torch.testing.assert_close(gf[:, :d], method.features(x))


def test_spe_method_loss_equals_functional_posterior():
    torch.manual_seed(1)
    d = 3
    method = SPEMethod(_tiny_backbone(2 * d), None, d, sampler="naive", samples=5, support_size=4)
    images, batch = _episode()
    torch.manual_seed(11)
    loss, _ = method.loss(images, batch)
    mu, var = method.embed(images.float() / 255)
    sup = batch.support
    mu_s, var_s = mu[sup].reshape(3, 2, d), var[sup].reshape(3, 2, d)
    torch.manual_seed(11)
    logp = spe_log_posterior(mu_s, var_s, mu[~sup], var[~sup], method.sigma_eps2, "naive", 5)
    ref = -logp[torch.arange(len(logp)), batch.labels[~sup]].mean()
    torch.testing.assert_close(loss, ref)


def test_spe_classifier_protocol_and_batch_equivalence():
    g = torch.Generator().manual_seed(8)
    e, k, n, q, d = 3, 4, 2, 5, 2
    sup = torch.cat([torch.randn(e, k, n, d, generator=g), torch.rand(e, k, n, d, generator=g) + 0.1], -1)
    qry = torch.cat([torch.randn(e, q, d, generator=g), torch.rand(e, q, d, generator=g) + 0.1], -1)
    clf = spe_classifier(torch.tensor([0.2, 0.3]), samples=50)
    scores = clf(sup, qry)
    assert scores.shape == (e, q, k)
    torch.testing.assert_close(scores.exp().sum(-1), torch.ones(e, q))
    torch.testing.assert_close(scores, clf(sup, qry))  # seeded: reproducible
    # Batching over episodes equals per-episode computation with the same noise.
    noise = torch.randn(e, q, 7, d, generator=g)
    mu_c, vhat_c = class_gaussians(sup[..., :d], sup[..., d:], torch.tensor([0.2, 0.3]))
    batched = naive_log_posterior(qry[..., :d], qry[..., d:], mu_c, vhat_c, noise=noise)
    for i in range(e):
        single = naive_log_posterior(qry[i, :, :d], qry[i, :, d:], mu_c[i], vhat_c[i], noise=noise[i])
        torch.testing.assert_close(batched[i], single)
    with pytest.raises(ValueError, match="2d"):
        clf(sup[..., :3], qry[..., :3])
    # Chunking over episodes (memory bound) does not change the answer: checked where it is noise-free.
    qry0 = torch.cat([qry[..., :d], torch.full_like(qry[..., d:], 1e-12)], -1)
    whole = spe_classifier(0.3, samples=3)(sup, qry0)
    chunked = spe_classifier(0.3, samples=3, max_elements=1)(sup, qry0)
    torch.testing.assert_close(whole, chunked)
    mu_c, vhat_c = class_gaussians(sup[..., :d], sup[..., d:], 0.3)
    torch.testing.assert_close(whole, pairwise_diag_gaussian_logpdf(qry[..., :d], mu_c, vhat_c).log_softmax(-1),
                               rtol=1e-4, atol=1e-4)


def test_densities_ignore_bfloat16_autocast():
    g = torch.Generator().manual_seed(9)
    z = torch.randn(20, 8, generator=g) * 3 + 40  # large offsets: bf16 expansion would cancel badly
    mu = torch.randn(5, 8, generator=g) + 40
    var = torch.rand(5, 8, generator=g) + 0.05
    ref = pairwise_diag_gaussian_logpdf(z.double(), mu.double(), var.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = pairwise_diag_gaussian_logpdf(z, mu, var)
        pn = pn_log_posterior(mu.view(5, 1, 8), z)
    assert out.dtype == torch.float32 and pn.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-2)


def test_gaussian_head_shapes_and_errors():
    head = GaussianHead(_tiny_backbone(6), 3)
    mu, var = head(torch.rand(4, 1, 8, 8))
    assert mu.shape == var.shape == (4, 3) and (var > 0).all()
    lin = GaussianHead(_tiny_backbone(10), 3, in_features=10)
    assert lin(torch.rand(2, 1, 8, 8))[0].shape == (2, 3)
    with pytest.raises(ValueError, match="out_channels=6"):
        GaussianHead(_tiny_backbone(5), 3)(torch.rand(2, 1, 8, 8))
    y = torch.tensor([1e-4, 0.5, 3.0, 40.0])
    torch.testing.assert_close(torch.nn.functional.softplus(softplus_inverse(y)), y)
    assert eps_init(60, 64) == pytest.approx(60 * 0.01 ** (2 / 64))


def test_prototypical_method_matches_reference():
    torch.manual_seed(2)
    method = PrototypicalMethod(_tiny_backbone(4), None)
    images, batch = _episode(ways=3, shots=2, queries=3)
    loss, logs = method.loss(images, batch)
    f = method.backbone(images.float() / 255)
    sup = batch.support
    protos = f[sup].reshape(3, 2, 4).mean(1)
    logits = -torch.cdist(f[~sup], protos) ** 2
    ref = torch.nn.functional.cross_entropy(logits, batch.labels[~sup])
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="episodic"):
        from studylib.data.samplers import Batch
        method.loss(images, Batch(batch.indices, batch.labels))


# ------------------------------------------------------------------------------- issue 9: bf16 and devices

@pytest.mark.parametrize("sampler", ["naive", "intersection"])
def test_spe_forward_and_loss_under_bf16_autocast_match_float32(sampler: str):
    """The SPE under CPU bf16 autocast (what a GPU paper run uses): the variance comes out of the head in
    float32 (softplus of the float32 upcast, never rounded back to bf16), and the loss and its gradients
    match the float32 run within bf16's rounding of the network's matmuls/convs."""
    torch.manual_seed(0)
    d = 3
    method = SPEMethod(_tiny_backbone(2 * d), None, d, sampler=sampler, samples=4, support_size=6)
    images, batch = _episode()
    x = images.float() / 255
    mu32, var32 = method.embed(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mu16, var16 = method.embed(x)
        gf = method.gaussian_features(x)
    assert mu16.dtype == var16.dtype == gf.dtype == torch.float32
    torch.testing.assert_close(var16, var32, rtol=2e-2, atol=1e-3)
    torch.testing.assert_close(mu16, mu32, rtol=2e-2, atol=2e-2)
    # a tiny variance keeps its float32 floor: bf16 rounding would make softplus(-20) + 1e-6 == 2e-9 + 0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        raw = torch.nn.functional.linear(torch.ones(1, 2), torch.ones(2, 2)) * -10  # bf16 [-20, -20]
        from studylib.methods.spe import split_gaussian
        _, v = split_gaussian(raw, 1e-6)
    assert v.dtype == torch.float32 and torch.allclose(v, torch.full_like(v, 1e-6 + math.log1p(math.exp(-20))))

    def run(autocast: bool):
        method.zero_grad()
        torch.manual_seed(3)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss, _ = method.loss(images, batch)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in method.parameters()]

    loss32, g32 = run(False)
    loss16, g16 = run(True)
    assert loss16.dtype == torch.float32 and torch.isfinite(loss16)
    torch.testing.assert_close(loss16, loss32, rtol=3e-2, atol=3e-2)
    for a, b in zip(g16, g32):
        assert torch.isfinite(a).all()
        assert float((a - b).norm()) <= 0.1 * float(b.norm()) + 1e-3


def test_spe_functions_create_every_tensor_on_the_inputs_device():
    """Run on the 'meta' device (shapes only, no data): any tensor the code makes on the default (CPU) device
    instead of the input's would meet a meta tensor and raise."""
    meta = torch.device("meta")
    k, n, q, d = 4, 2, 5, 3
    mu_s, var_s = torch.randn(k, n, d, device=meta), torch.rand(k, n, d, device=meta)
    mu_q, var_q = torch.randn(q, d, device=meta), torch.rand(q, d, device=meta)
    eps2 = torch.rand(d, device=meta)
    for sampler in ("naive", "intersection"):
        out = spe_log_posterior(mu_s, var_s, mu_q, var_q, eps2, sampler, 3)
        assert out.device == meta and out.shape == (q, k)
    mu_c, vhat_c = class_gaussians(mu_s, var_s, eps2)
    target = torch.zeros(q, dtype=torch.long, device=meta)
    assert intersection_log_posterior(mu_q, var_q, mu_c, vhat_c, target, 2).device == meta
    clf = spe_classifier(eps2, "naive", 3, seed=None)
    sup = torch.rand(2, k, n, 2 * d, device=meta)
    qry = torch.rand(2, q, 2 * d, device=meta)
    assert clf(sup, qry).device == meta and clf(sup, qry).shape == (2, q, k)
    method = SPEMethod(_tiny_backbone(2 * d), None, d, support_size=6).to(meta)
    x = torch.rand(7, 1, 12, 12, device=meta)
    assert method.gaussian_features(x).device == meta
    assert method.log_posterior(mu_s, var_s, mu_q, var_q, samples=2).device == meta
