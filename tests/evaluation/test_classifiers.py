"""Batched classifiers against plain per-episode references (NumPy loops, torch.cdist, scikit-learn)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from sklearn.neighbors import KNeighborsClassifier

from studylib.evaluation.classifiers import (CLASSIFIERS, get_classifier, knn, nearest_centroid, pairwise_sq_dists,
                                             register_classifier, soft_assignment)



def _toy(e=6, w=4, n=3, q=7, d=5, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(e, w, n, d, generator=g, dtype=torch.float64),
            scale * torch.randn(e, q, d, generator=g, dtype=torch.float64))


@pytest.mark.parametrize("p,s", [(7, 3), (3, 7), (5, 5)])
def test_pairwise_sq_dists_matches_cdist(p, s):
    g = torch.Generator().manual_seed(p * 10 + s)
    a, b = torch.randn(4, p, 16, generator=g), torch.randn(4, s, 16, generator=g)
    d = pairwise_sq_dists(a, b)
    assert d.shape == (4, p, s) and (d >= 0).all()
    torch.testing.assert_close(d, torch.cdist(a, b) ** 2, rtol=1e-4, atol=1e-4)
    same = pairwise_sq_dists(a, a)  # cancellation must not give negatives on the diagonal
    assert (same >= 0).all() and same.diagonal(dim1=1, dim2=2).abs().max() < 1e-4


def test_nearest_centroid_matches_loop():
    support, query = _toy()
    scores = nearest_centroid(support, query)
    s, q = support.numpy(), query.numpy()
    for e in range(s.shape[0]):
        cent = s[e].mean(1)  # [w, D]
        ref = np.array([[-np.sum((qi - c) ** 2) for c in cent] for qi in q[e]])
        np.testing.assert_allclose(scores[e].numpy(), ref, rtol=1e-9, atol=1e-9)


def _soft_reference(s: np.ndarray, q: np.ndarray, t: float) -> np.ndarray:
    """Seed 000 Sec. 2.3 literally: p_ij = exp(-d_ij/T) / sum_k exp(-d_ik/T); class likelihood sum_{j in S_k}."""
    w, n, _ = s.shape
    flat = s.reshape(w * n, -1)
    out = np.zeros((q.shape[0], w))
    for i, qi in enumerate(q):
        d = np.array([np.sum((qi - sj) ** 2) for sj in flat])
        p = np.exp(-d / t) / np.exp(-d / t).sum()
        out[i] = [p[k * n:(k + 1) * n].sum() for k in range(w)]
    return out


@pytest.mark.parametrize("temperature", [1.0, 2.5])
def test_soft_assignment_matches_formula(temperature):
    support, query = _toy(scale=0.4)  # small distances so the literal exp formula does not underflow
    scores = soft_assignment(support, query, temperature=temperature)
    for e in range(support.shape[0]):
        ref = _soft_reference(support[e].numpy(), query[e].numpy(), temperature)
        np.testing.assert_allclose(scores[e].exp().numpy(), ref, rtol=1e-9, atol=1e-12)
    assert torch.allclose(scores.exp().sum(-1), torch.ones(()).double())  # class likelihoods sum to 1


def test_soft_assignment_log_space_survives_far_points():
    support, query = _toy(scale=30.0)  # exp(-d) underflows to 0 in float64 for every support point
    scores = soft_assignment(support, query)
    assert torch.isfinite(scores).all()
    s, q = support.numpy(), query.numpy()
    for e in range(2):
        w, n, dim = s[e].shape
        d = ((q[e][:, None, :] - s[e].reshape(w * n, dim)[None]) ** 2).sum(-1)  # [Q, w*n]
        ref = logsumexp(-d.reshape(-1, w, n), axis=2) - logsumexp(-d, axis=1)[:, None]
        np.testing.assert_allclose(scores[e].numpy(), ref, rtol=1e-9, atol=1e-6)


def test_knn_matches_sklearn_where_no_ties():
    support, query = _toy(e=8, w=5, n=5, q=30, d=4, seed=3)
    for k in (1, 3, 5):
        pred = knn(support, query, k=k).argmax(-1)
        checked = 0
        for e in range(support.shape[0]):
            x = support[e].reshape(-1, 4).numpy()
            y = np.repeat(np.arange(5), 5)
            clf = KNeighborsClassifier(n_neighbors=k).fit(x, y)
            proba = clf.predict_proba(query[e].numpy())
            top = proba.max(1, keepdims=True)
            untied = (proba == top).sum(1) == 1
            ref = clf.predict(query[e].numpy())
            assert (pred[e].numpy()[untied] == ref[untied]).all()
            checked += int(untied.sum())
        assert checked > 100


def test_knn_tie_break_by_summed_distance():
    # 2 ways x 2 shots, k = 2: the query at 0 has one neighbour of each class -> tie on votes;
    # class 1's neighbour is closer, so class 1 wins although class 0 has the lower index.
    support = torch.tensor([[[[1.0], [10.0]], [[-0.5], [-20.0]]]])  # [1, 2, 2, 1]
    query = torch.zeros(1, 1, 1)
    scores = knn(support, query)
    assert scores.argmax(-1).item() == 1
    assert scores[0, 0, 0] >= 1 and scores[0, 0, 0] < 1.5 and scores[0, 0, 1] > scores[0, 0, 0]
    # majority beats distance: the nearest point is class 0 (d = 1), but with k = 3 class 1 has 2 votes
    support = torch.tensor([[[[1.0], [30.0]], [[-1.5], [-2.0]]]])
    assert knn(support, query, k=1).argmax(-1).item() == 0
    assert knn(support, query, k=3).argmax(-1).item() == 1


def test_all_classifiers_coincide_in_one_shot():
    support, query = _toy(e=10, w=5, n=1, q=20, d=8, seed=5)
    ref = nearest_centroid(support, query).argmax(-1)
    assert torch.equal(knn(support, query).argmax(-1), ref)
    assert torch.equal(soft_assignment(support, query).argmax(-1), ref)


def test_float32_and_shape_errors():
    support, query = _toy()
    for name in ("nearest_centroid", "soft_assignment", "knn"):
        out = CLASSIFIERS[name](support.float(), query.float())
        assert out.shape == (6, 7, 4) and out.dtype == torch.float32
    with pytest.raises(ValueError, match=r"support \[E, w, n, D\]"):
        nearest_centroid(support[0], query)
    with pytest.raises(ValueError, match="k=13"):
        knn(support, query, k=13)


def test_registry():
    def my_clf(support, query):
        return nearest_centroid(support, query)

    try:
        register_classifier("test_only_clf", my_clf)
        assert get_classifier("test_only_clf") == ("test_only_clf", my_clf)
        register_classifier("test_only_clf", my_clf)  # same function again is fine
        with pytest.raises(ValueError, match="already registered"):
            register_classifier("test_only_clf", lambda s, q: s)
    finally:
        CLASSIFIERS.unregister("test_only_clf")
    name, fn = get_classifier(functools.partial(knn, k=1))
    assert name == "knn" and callable(fn)
    with pytest.raises(ValueError, match="unknown classifier 'nope'"):
        get_classifier("nope")
