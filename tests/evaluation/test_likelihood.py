"""Set2Model few-shot classification by likelihood (seed 003 Table 2): the batched classifier against a slow
per-episode, per-class loop with ``torch.distributions`` as the reference."""

from __future__ import annotations

import pytest
import torch
from torch.distributions import Categorical, Independent, MixtureSameFamily, Normal

from studylib.evaluation import evaluate
from studylib.evaluation.classifiers import CLASSIFIERS
from studylib.evaluation.likelihood import likelihood_classifier, likelihood_scores
from studylib.numerics.gaussian import fit_gmm


def _episodes(e=4, w=5, n=5, q=6, d=8, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(e, w, 1, d, generator=g, dtype=dtype) * 2
    support = centres + 0.5 * torch.randn(e, w, n, d, generator=g, dtype=dtype)
    labels = torch.randint(0, w, (e, q), generator=g)
    query = torch.gather(centres.squeeze(2), 1, labels[..., None].expand(-1, -1, d)) \
        + 0.7 * torch.randn(e, q, d, generator=g, dtype=dtype)
    return support, query, labels


def test_gaussian_likelihood_matches_a_per_episode_loop_with_torch_distributions():
    support, query, _ = _episodes()
    floor = 1e-4
    got = likelihood_scores(support, query, "gauss", var_floor=floor)
    e, w = support.shape[:2]
    ref = torch.empty(e, query.shape[1], w, dtype=support.dtype)
    for i in range(e):
        for c in range(w):
            x = support[i, c]
            mu, var = x.mean(0), x.var(0, unbiased=False) + floor
            ref[i, :, c] = Independent(Normal(mu, var.sqrt()), 1).log_prob(query[i])
    torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)
    assert torch.equal(got.argmax(-1), ref.argmax(-1))


def test_gmm_likelihood_matches_a_per_episode_loop_with_torch_distributions():
    # every class's support: 3 points around one centre and 2 around a distant one, so EM has one answer
    g = torch.Generator().manual_seed(1)
    e, w, d, q = 3, 4, 6, 5
    a = torch.randn(e, w, 1, d, generator=g, dtype=torch.float64) * 3
    b = a + 40.0
    support = torch.cat([a + 0.3 * torch.randn(e, w, 3, d, generator=g, dtype=torch.float64),
                         b + 0.3 * torch.randn(e, w, 2, d, generator=g, dtype=torch.float64)], 2)
    query = torch.randn(e, q, d, generator=g, dtype=torch.float64) * 5
    floor = 1e-4
    got = likelihood_scores(support, query, "gmm", components=2, var_floor=floor)
    ref = torch.empty(e, q, w, dtype=torch.float64)
    for i in range(e):
        for c in range(w):
            gmm = fit_gmm(support[i, c], 2, iters=100, tol=1e-6, unroll=0, var_floor=floor,
                          generator=torch.Generator().manual_seed(100 * i + c))
            mix = MixtureSameFamily(Categorical(probs=gmm.weights), Independent(Normal(gmm.means, gmm.vars.sqrt()), 1))
            ref[i, :, c] = mix.log_prob(query[i])
    torch.testing.assert_close(got, ref, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("score", ["avg", "nn"])
def test_baseline_scores_match_a_loop(score):
    support, query, _ = _episodes(dtype=torch.float32)
    got = likelihood_scores(support, query, score)
    for i in range(support.shape[0]):
        for c in range(support.shape[1]):
            s = query[i] @ support[i, c].T  # [Q, n]
            ref = s.mean(1) if score == "avg" else s.amax(1)
            torch.testing.assert_close(got[i, :, c], ref, rtol=1e-5, atol=1e-5)


def test_evaluate_with_the_registered_classifiers_equals_a_per_episode_loop():
    g = torch.Generator().manual_seed(3)
    classes, per, d = 12, 20, 16
    centres = torch.randn(classes, d, generator=g)
    feats = centres.repeat_interleave(per, 0) + 0.8 * torch.randn(classes * per, d, generator=g)
    feats = torch.nn.functional.normalize(feats, dim=1)
    labels = torch.arange(classes).repeat_interleave(per)
    from studylib.evaluation.episodes import sample_episodes
    eps = sample_episodes(labels, 5, 5, 15, 7, seed=0)
    res = evaluate(feats, labels, episodes=eps, shots=5, classifier=["s2m_gauss", "s2m_avg", "s2m_gmm2"], chunk=3)
    qlab = eps.query_labels()
    for name, score in (("s2m_gauss", "gauss"), ("s2m_avg", "avg"), ("s2m_gmm2", "gmm")):
        assert name in CLASSIFIERS
        accs = []
        for i in range(eps.num_episodes):
            sup = feats[eps.support[i]].unsqueeze(0)  # [1, w, n, D]
            qry = feats[eps.query[i].reshape(-1)].unsqueeze(0)
            pred = likelihood_scores(sup, qry, score).argmax(-1)[0]
            accs.append(float((pred == qlab).float().mean()))
        if score == "gmm":  # k-means++ draws differ between the chunked and single-episode calls
            assert abs(res[(name, 5)].mean - sum(accs) / len(accs)) < 0.1
        else:
            torch.testing.assert_close(res[(name, 5)].accuracies, torch.tensor(accs, dtype=torch.float64))
        assert res[(name, 5)].mean > 0.6  # well-separated classes


def test_classifier_factory_and_errors():
    support, query, labels = _episodes(dtype=torch.float32)
    clf = likelihood_classifier("gauss", var_floor=1e-3)
    assert clf.__name__ == "s2m_gauss"
    assert clf(support, query).shape == (4, 6, 5)
    assert (clf(support, query).argmax(-1) == labels).float().mean() > 0.8
    with pytest.raises(ValueError, match="unknown score"):
        likelihood_classifier("svm")  # a registered retrieval score, but it needs negatives
    with pytest.raises(ValueError, match="unknown score"):
        likelihood_scores(support, query, "svm")
    with pytest.raises(ValueError, match="unknown score"):
        likelihood_classifier("mahalanobis")
    with pytest.raises(ValueError, match="support images per class"):
        likelihood_scores(support[:, :, :1], query, "gmm", components=2)
    with pytest.raises(ValueError, match=r"support \[E, w, n, D\]"):
        likelihood_scores(support[0], query, "gauss")
