"""evaluate / cl2n / extract_features against direct computations and analytic limits."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

from studylib.data.base import DataError
from studylib.evaluation import (EvalResult, cl2n, evaluate, extract_features, nearest_centroid, pool_results,
                                 results_as_dict, sample_episodes)



def _blobs(classes=12, per=25, dim=16, spread=0.05, seed=0):
    g = torch.Generator().manual_seed(seed)
    centres = 3.0 * torch.randn(classes, dim, generator=g)
    labels = torch.arange(classes).repeat_interleave(per)
    return centres[labels] + spread * torch.randn(classes * per, dim, generator=g), labels


def test_cl2n_unit_norm_and_formula():
    x = torch.randn(50, 8) + 3.0
    mean = torch.randn(40, 8).mean(0)
    y = cl2n(x, mean)
    torch.testing.assert_close(y.norm(dim=1), torch.ones(50))
    ref = (x - mean) / (x - mean).norm(dim=1, keepdim=True)
    torch.testing.assert_close(y, ref)
    with pytest.raises(ValueError, match="train_features.mean"):
        cl2n(x, mean[:3])


def test_separated_blobs_near_perfect():
    feats, labels = _blobs()
    res = evaluate(feats, labels, ways=5, shots=(1, 5), queries=10, episodes=300,
                   classifier=["nearest_centroid", "soft_assignment", "knn"], seed=0)
    assert set(res) == {(c, n) for c in ("nearest_centroid", "soft_assignment", "knn") for n in (1, 5)}
    for r in res.values():
        assert r.mean > 0.999 and r.accuracies.shape == (300,)


def test_pure_noise_is_chance():
    # Large classes: with a small pool the empirical class means of noise differ by ~1/sqrt(per class),
    # which is real (weak) class structure and lifts accuracy above chance (30 per class gave 21%).
    g = torch.Generator().manual_seed(1)
    feats, labels = torch.randn(20 * 3000, 8, generator=g), torch.arange(20).repeat_interleave(3000)
    res = evaluate(feats, labels, ways=5, shots=(1, 5), queries=15, episodes=2000, seed=3)
    for r in res.values():
        assert abs(r.mean - 0.2) < 3 * r.ci95, str(r)  # CI95 half-width ~0.004 at 2000 episodes
        acc = r.accuracies.double().numpy()  # reference: NumPy's mean and SciPy's standard error of the mean
        assert r.mean == pytest.approx(acc.mean()) and r.ci95 == pytest.approx(1.96 * stats.sem(acc))


def test_matches_per_episode_numpy_reference():
    feats, labels = _blobs(spread=3.0, seed=2)  # overlapping classes: accuracies strictly between 0 and 1
    ep = sample_episodes(labels, 4, 3, 6, 25, seed=5)
    res = evaluate(feats, labels, shots=(1, 3), episodes=ep)
    x = feats.numpy()
    for n in (1, 3):
        ref = []
        for e in range(25):
            cent = x[ep.support[e, :, :n].numpy()].mean(1)  # [w, D]
            q = x[ep.query[e].numpy()].reshape(-1, x.shape[1])  # class-major [w*m, D]
            pred = ((q[:, None] - cent[None]) ** 2).sum(-1).argmin(1)
            ref.append((pred == np.repeat(np.arange(4), 6)).mean())
        np.testing.assert_allclose(res[("nearest_centroid", n)].accuracies.numpy(), ref, rtol=0, atol=1e-6)
    assert 0.2 < res[("nearest_centroid", 1)].mean < 0.95


def test_chunked_equals_unchunked_and_shots_share_episodes():
    feats, labels = _blobs(spread=2.5, seed=4)
    kw = dict(ways=5, shots=(1, 5), queries=7, episodes=101, classifier=["nearest_centroid", "knn"], seed=9)
    full = evaluate(feats, labels, chunk=101, **kw)
    small = evaluate(feats, labels, chunk=8, **kw)
    for key in full:
        assert torch.equal(full[key].accuracies, small[key].accuracies)
    # the 1-shot problem is the first shot of the 5-shot episodes
    ep = sample_episodes(labels, 5, 5, 7, 101, seed=9)
    alone = evaluate(feats, labels, shots=1, episodes=ep.with_shots(1))
    assert torch.equal(alone[("nearest_centroid", 1)].accuracies, full[("nearest_centroid", 1)].accuracies)


def test_train_mean_applies_cl2n():
    feats, labels = _blobs(spread=2.0, seed=6)
    mean = feats[:100].mean(0) + 1.0
    a = evaluate(feats, labels, episodes=60, shots=5, queries=5, train_mean=mean)
    b = evaluate(cl2n(feats, mean), labels, episodes=60, shots=5, queries=5)
    c = evaluate(feats, labels, episodes=60, shots=5, queries=5)
    key = ("nearest_centroid", 5)
    assert torch.equal(a[key].accuracies, b[key].accuracies)
    assert not torch.equal(a[key].accuracies, c[key].accuracies)


def test_results_json_and_pooling():
    feats, labels = _blobs(spread=2.0)
    res = evaluate(feats, labels, episodes=40, queries=5, classifier={"nc": nearest_centroid})
    blob = json.loads(json.dumps(results_as_dict(res, with_accuracies=True)))
    assert set(blob) == {"nc/1shot", "nc/5shot"} and len(blob["nc/5shot"]["accuracies"]) == 40
    assert blob["nc/1shot"]["ways"] == 5 and blob["nc/1shot"]["episodes"] == 40
    r = res[("nc", 1)]
    pooled = pool_results([r, r, r])
    assert pooled.episodes == 120 and pooled.mean == pytest.approx(r.mean) and pooled.extra["runs"] == 3
    pooled_acc = np.tile(r.accuracies.double().numpy(), 3)  # the 120 pooled episodes
    assert pooled.ci95 == pytest.approx(1.96 * stats.sem(pooled_acc)) and pooled.ci95 < r.ci95
    with pytest.raises(ValueError, match="different settings"):
        pool_results([r, res[("nc", 5)]])
    assert isinstance(r, EvalResult) and "nc 5-way 1-shot" in str(r)


def test_errors():
    feats, labels = _blobs(classes=4, per=10)
    with pytest.raises(DataError, match="5-way episodes need 5 classes"):
        evaluate(feats, labels, ways=5, episodes=10)
    with pytest.raises(DataError, match="lower shots or queries"):
        evaluate(feats, labels, ways=3, shots=(1, 5), queries=6, episodes=10)
    ep = sample_episodes(torch.arange(4).repeat_interleave(20), 3, 1, 2, 5, seed=0)
    with pytest.raises(DataError, match="index image"):
        evaluate(feats, labels, shots=1, episodes=ep)
    with pytest.raises(DataError, match="hold 1 shots"):
        evaluate(feats, labels, shots=(1, 2), episodes=ep.with_shots(1))
    with pytest.raises(ValueError, match="expected"):
        evaluate(feats, labels, ways=3, shots=1, queries=2, episodes=5, classifier=lambda s, q: q)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3)
        self.bn = nn.BatchNorm2d(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x)).relu().mean((2, 3))


def test_extract_features_matches_direct_forward():
    torch.manual_seed(0)
    net = _Net()
    net.bn.running_mean.uniform_(-1, 1)
    images = torch.randint(0, 256, (23, 3, 10, 10), dtype=torch.uint8)
    net.train()
    feats = extract_features(net, images, batch_size=5, progress=False)
    assert net.training  # mode restored
    net.eval()
    with torch.no_grad():
        ref = net(images.float() / 255)
    assert feats.shape == (23, 6) and feats.dtype == torch.float32
    torch.testing.assert_close(feats, ref)  # eval-mode BN, batch-size independent
    feats -= 1.0  # an ordinary tensor, not an inference tensor
    mean_t = torch.tensor([0.5, 0.4, 0.3]).view(1, 3, 1, 1)
    by_method = extract_features(net.forward, images, lambda x: x.float() / 255 - mean_t, batch_size=64)
    torch.testing.assert_close(by_method, net(images.float() / 255 - mean_t).detach())
    with pytest.raises(DataError, match="uint8"):
        extract_features(net, images.float())


def test_extract_features_refuses_a_model_on_another_device():
    """The GPU check found it: weights left on the CPU, images sent to CUDA, and bf16 autocast cast only the
    CUDA input, so the conv failed deep inside with a dtype message. Now a clear error names the fix."""
    net = _Net().to("meta")
    images = torch.randint(0, 256, (4, 3, 10, 10), dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"weights are on meta but the images go to cpu; move the model"):
        extract_features(net, images, device="cpu", progress=False)
