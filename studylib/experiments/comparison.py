"""Notebook 05_comparison: Table 2 of seed 000 (our implementations) and Appendix D (k-NN / centroid / soft).

Models, all on the test split with CL2N features:

* MN and PN with Snell et al.'s episodes ("[40] episodes"): 30-way 1-shot 15-query for the 1-shot column,
  20-way 5-shot 15-query for the 5-shot column (two models per method; 1-shot PN and MN are the same loss);
* MN and PN with "our episodes", the best of Fig. 2: batch ``b``, 5-shot, ``m + n = 16`` (one model, both
  columns);
* SimpleShot: cross-entropy over the training classes, nearest centroid on CL2N features;
* NCA on shuffled batches of ``b``, evaluated with soft assignment and with nearest centroid.

PN, SimpleShot and NCA-NC columns use the nearest centroid, MN and NCA-SA soft assignment (Sec. 3.2).
Appendix D compares k-NN (k = shots), nearest centroid and soft assignment on every model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from studylib.config import param
from studylib.experiments.episodes_common import (CommonParams, Variant, episode_shape, episodic, nca, pooled,
                                                  run_variants)
from studylib.experiments.common import CLASSIFIERS
from studylib.experiments.runner import Outcome

NOTEBOOK = "05_comparison"

# Seed 000, Table 2, "Our implementations" (ResNet-12, test set, mean ± CI95 in %, 3 seeds x 10,000 episodes).
PAPER_TABLE2: dict[str, dict[str, tuple[tuple[float, float], tuple[float, float]]]] = {
    "mini_imagenet": {
        "MN ([40] episodes)": ((58.91, 0.12), (72.48, 0.10)), "PN ([40] episodes)": ((59.78, 0.12), (75.42, 0.09)),
        "MN (our episodes)": ((60.77, 0.12), (73.82, 0.09)), "PN (our episodes)": ((61.32, 0.12), (77.77, 0.09)),
        "SimpleShot": ((62.16, 0.12), (78.33, 0.09)), "NCA soft assignment": ((62.55, 0.12), (76.93, 0.11)),
        "NCA nearest centroid": ((62.55, 0.12), (78.27, 0.09))},
    "cifar_fs": {
        "MN ([40] episodes)": ((69.28, 0.13), (80.79, 0.10)), "PN ([40] episodes)": ((69.94, 0.12), (84.01, 0.09)),
        "MN (our episodes)": ((71.86, 0.13), (82.41, 0.10)), "PN (our episodes)": ((70.41, 0.12), (84.61, 0.10)),
        "SimpleShot": ((69.98, 0.12), (84.40, 0.09)), "NCA soft assignment": ((72.49, 0.12), (83.38, 0.09)),
        "NCA nearest centroid": ((72.49, 0.12), (85.15, 0.09))},
    "tiered_imagenet": {
        "MN ([40] episodes)": ((65.75, 0.13), (78.40, 0.10)), "PN ([40] episodes)": ((65.80, 0.13), (81.26, 0.10)),
        "MN (our episodes)": ((66.53, 0.13), (79.08, 0.10)), "PN (our episodes)": ((66.89, 0.14), (82.20, 0.09)),
        "SimpleShot": ((66.67, 0.14), (81.57, 0.10)), "NCA soft assignment": ((68.35, 0.13), (81.04, 0.09)),
        "NCA nearest centroid": ((68.35, 0.13), (83.20, 0.10))},
}

PAPER_FINDINGS = (
    "The best episodes of Fig. 2 (b=512, 5-shot, m+n=16) beat Snell et al.'s episodes for PN and MN.",
    "NCA is at least as good as PN / MN with either episodes, and competitive with SimpleShot.",
    "Nearest centroid is the best evaluation classifier for 5-shot (Appendix D); all coincide at 1-shot.",
)


@dataclass
class Params(CommonParams):
    """Parameters of ``notebooks/05_comparison.ipynb`` (``params/05_comparison/*.yaml``)."""

    batch_size: int = param(256, help="batch of NCA, SimpleShot and 'our episodes' (paper: 512)")
    ours: list[int] = param([5, 16], help="'our episodes' [n, m+n] at batch_size (paper: 5-shot, m+n=16)")
    snell_1shot: list[int] = param([30, 1, 15], help="[w, n, m] of Snell et al.'s 1-shot training episodes")
    snell_5shot: list[int] = param([20, 5, 15], help="[w, n, m] of Snell et al.'s 5-shot training episodes")
    paper_data: str = param("mini_imagenet", choices=tuple(PAPER_TABLE2), help="whose Table 2 column to show")

    def check(self) -> None:
        super().check()
        episode_shape(self.batch_size, *self.ours)
        for w, n, m in (self.snell_1shot, self.snell_5shot):
            episode_shape(w * (n + m), n, n + m)


def _snell(method: str, wnm: list[int]) -> Variant:
    w, n, m = wnm
    return episodic(method, w * (n + m), n, n + m)


def models(p: Params) -> list[tuple[str, Variant | None, Variant | None, str]]:
    """Table 2 rows: ``(name, 1-shot model, 5-shot model, classifier)``."""
    pn1 = _snell("pn", p.snell_1shot)
    mn1 = pn1 if p.snell_1shot[1] == 1 else _snell("mn", p.snell_1shot)  # n = 1: L_PNs = L_MNs
    pn_ours = episodic("pn", p.batch_size, *p.ours)
    mn_ours = episodic("mn", p.batch_size, *p.ours)
    nca_v = nca(p.batch_size)
    ce = Variant("ce", "shuffled", p.batch_size)
    return [("MN ([40] episodes)", mn1, _snell("mn", p.snell_5shot), "soft_assignment"),
            ("PN ([40] episodes)", pn1, _snell("pn", p.snell_5shot), "nearest_centroid"),
            ("MN (our episodes)", mn_ours, mn_ours, "soft_assignment"),
            ("PN (our episodes)", pn_ours, pn_ours, "nearest_centroid"),
            ("SimpleShot", ce, ce, "nearest_centroid"),
            ("NCA soft assignment", nca_v, nca_v, "soft_assignment"),
            ("NCA nearest centroid", nca_v, nca_v, "nearest_centroid")]


def run(p: Params, train_images: int, progress: bool = False) -> dict[Variant, list[Outcome]]:
    vs = [v for _, a, b, _ in models(p) for v in (a, b) if v is not None]
    return run_variants(p, vs, train_images, progress=progress)


def table2(p: Params, outcomes: dict[Variant, list[Outcome]]) -> list[dict[str, Any]]:
    """Rows (name, shots, smoke mean/ci95 as fractions, paper mean/ci95 in %)."""
    paper = PAPER_TABLE2[p.paper_data]
    out = []
    for name, v1, v5, clf in models(p):
        for shots, v in ((1, v1), (5, v5)):
            m, c, e = pooled(outcomes[v], clf, shots)
            pm, pc = paper[name][0 if shots == 1 else 1]
            out.append({"model": name, "shots": shots, "trained on": v.label, "mean": m, "ci95": c, "episodes": e,
                        "paper": pm, "paper ci95": pc})
    return out


def appendix_d(p: Params, outcomes: dict[Variant, list[Outcome]]) -> list[dict[str, Any]]:
    """Every distinct model x classifier x shots (k-NN with k = shots, nearest centroid, soft assignment)."""
    out = []
    seen: set[tuple[Variant, int]] = set()
    for name, v1, v5, _ in models(p):
        base = name.replace(" soft assignment", "").replace(" nearest centroid", "")
        for shots, v in ((1, v1), (5, v5)):
            if (v, shots) in seen:
                continue
            seen.add((v, shots))
            for clf in CLASSIFIERS:
                m, c, e = pooled(outcomes[v], clf, shots)
                out.append({"model": base, "trained on": v.label, "shots": shots, "classifier": clf, "mean": m,
                            "ci95": c})
    return out
