"""Batched multinomial logistic regression vs scikit-learn's LogisticRegression(C) (seed 001, Sec. 4.2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from studylib.evaluation.logreg import fit_logreg, logreg_classifier


def _sklearn_proba(x: np.ndarray, y: np.ndarray, xq: np.ndarray, C: float) -> np.ndarray:
    clf = LogisticRegression(C=C, tol=1e-10, max_iter=10000).fit(x, y)
    return clf.predict_proba(xq)


@pytest.mark.parametrize("e,s,d,w,C", [(3, 10, 20, 4, 1.0), (3, 5, 64, 5, 1.0), (2, 40, 6, 3, 1.0),
                                       (2, 12, 8, 3, 0.1)])
def test_probabilities_match_sklearn(e: int, s: int, d: int, w: int, C: float) -> None:
    g = torch.Generator().manual_seed(e * 100 + s)
    x = 2.0 * torch.randn(e, s, d, generator=g, dtype=torch.float64) + 0.5
    y = torch.randint(0, w, (e, s), generator=g)
    y[:, :w] = torch.arange(w)  # every class present
    xq = torch.randn(e, 9, d, generator=g, dtype=torch.float64)
    weight, bias = fit_logreg(x, y, w, C=C)
    assert weight.shape == (e, w, d) and bias.shape == (e, w)
    mine = torch.softmax(xq @ weight.transpose(1, 2) + bias[:, None], dim=-1).numpy()
    for i in range(e):
        ref = _sklearn_proba(x[i].numpy(), y[i].numpy(), xq[i].numpy(), C)
        np.testing.assert_allclose(mine[i], ref, atol=1e-3)


def test_float32_and_gradient_is_zero_at_optimum() -> None:
    """The returned (W, b) is a stationary point of C*sum CE + 0.5||W||^2 (autograd gradient ~ 0)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 15, 30, generator=g)
    y = torch.arange(5).repeat(3).expand(4, 15)
    weight, bias = fit_logreg(x, y, 5, dtype=torch.float64)
    wv = weight.double().requires_grad_(True)
    bv = bias.double().requires_grad_(True)
    logits = x.double() @ wv.transpose(1, 2) + bv[:, None]
    obj = torch.nn.functional.cross_entropy(logits.reshape(-1, 5), y.reshape(-1), reduction="sum") \
        + 0.5 * (wv ** 2).sum()
    obj.backward()
    assert wv.grad.abs().max() < 1e-6 and bv.grad.abs().max() < 1e-6


def test_classifier_protocol_and_bad_labels() -> None:
    g = torch.Generator().manual_seed(0)
    centres = 3 * torch.randn(2, 5, 1, 16, generator=g)
    support = centres + 0.3 * torch.randn(2, 5, 3, 16, generator=g)
    query = (centres + 0.3 * torch.randn(2, 5, 4, 16, generator=g)).reshape(2, 20, 16)
    scores = logreg_classifier(support, query)
    assert scores.shape == (2, 20, 5)
    truth = torch.arange(5).repeat_interleave(4)
    assert (scores.argmax(-1) == truth).float().mean() > 0.9
    with pytest.raises(ValueError, match="labels must lie"):
        fit_logreg(torch.randn(1, 3, 4), torch.tensor([[0, 1, 5]]), 3)
