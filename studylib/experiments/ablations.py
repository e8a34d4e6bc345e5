"""Notebook 04_ablations: Fig. 4 of seed 000 (NCA vs PN) and its Matching Network analogue (Appendix H).

Rows of Fig. 4 as Sec. 3.4 describes them (episodes of ``m + n = 8`` images per class, ``w = b / 8`` ways):

1. NCA, batches sampled without replacement (shuffled, every image once per epoch);
2. NCA, batches sampled with replacement (each batch drawn independently);
3. NCA with a fixed batch composition: an episodic batch (``b/8`` classes x 8 images), all pairs, with
   replacement = PN with every ablation on (and the MN "no S/Q" ablation);
4. PN 1-shot (n = 1, m = 7) — identical to MN 1-shot;
5. PN 5-shot (n = 5, m = 3);
6. PN 5-shot without prototypes (support/query split kept) — exactly the MN loss, so it is also MN 5-shot;
7. PN 5-shot without the S/Q split (prototypes of the support points, NCA over queries and prototypes).

For 1-shot there is no "no proto" row, and "no S/Q" equals row 3. The MN table of Appendix H is rows 1-3,
MN 1-shot (= row 4), MN 5-shot (= row 6) and MN without S/Q (= row 3), evaluated with soft assignment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt

from studylib.config import param
from studylib.experiments.episodes_common import (CommonParams, Variant, episode_shape, episodic, nca, pooled,
                                                  run_variants)
from studylib.experiments.runner import Outcome

NOTEBOOK = "04_ablations"

PAPER_FINDINGS = (
    "Rows 1 vs 2: sampling with or without replacement has a negligible effect.",
    "Row 6 vs 5: disabling prototypes slightly lowers PN 5-shot accuracy.",
    "Row 7 > row 5: using all pairs (no S/Q split) raises the accuracy.",
    "Row 3 (all ablations) completely recovers the performance lost by PN.",
    "Row 3 > row 1 at b = 128 (few positives in small random batches); the gap disappears at b = 512.",
    "Appendix H: the MN ablations lead to the same conclusions.",
)


@dataclass
class Params(CommonParams):
    """Parameters of ``notebooks/04_ablations.ipynb`` (``params/04_ablations/*.yaml``)."""

    batch_sizes: list[int] = param([64, 256], help="batch sizes (paper: 128, 256, 512)")
    per_class: int = param(8, help="images per class m+n of the episodes and fixed batches (paper: 8)")
    shots: int = param(5, help="shots of the multi-shot PN rows (paper: 5)")

    def check(self) -> None:
        super().check()
        for b in self.batch_sizes:
            episode_shape(b, self.shots, self.per_class)
            episode_shape(b, 1, self.per_class)


# (row number, description, shots it is evaluated at, PN table?, MN table?)
ROWS: tuple[tuple[int, str, tuple[int, ...]], ...] = (
    (1, "NCA (without replacement)", (1, 5)),
    (2, "NCA (with replacement)", (1, 5)),
    (3, "NCA fixed batch composition (= PN/MN, all ablations)", (1, 5)),
    (4, "PN 1-shot (= MN 1-shot)", (1,)),
    (5, "PN 5-shot", (5,)),
    (6, "PN 5-shot no proto (= MN 5-shot)", (5,)),
    (7, "PN 5-shot no S/Q", (5,)),
)


def row_variant(row: int, b: int, shots: int, per_class: int) -> Variant:
    """The training variant of Fig. 4 row ``row`` at batch size ``b``."""
    if row == 1:
        return nca(b)
    if row == 2:
        return nca(b, sampler="replacement")
    if row == 3:
        return nca(b, sampler="fixed", per_class=per_class)
    if row == 4:
        return episodic("pn", b, 1, per_class)
    if row == 5:
        return episodic("pn", b, shots, per_class)
    if row == 6:
        return episodic("mn", b, shots, per_class)  # prototypes off + S/Q split = L_MNs (methods.episodes)
    if row == 7:
        return episodic("pn", b, shots, per_class, prototypes=True, sq_split=False)
    raise ValueError(f"Fig. 4 has rows 1-7, got {row}")


def variants(p: Params) -> list[tuple[int, int, Variant]]:
    return [(row, b, row_variant(row, b, p.shots, p.per_class)) for b in p.batch_sizes for row, _, _ in ROWS]


def run(p: Params, train_images: int, progress: bool = False) -> dict[Variant, list[Outcome]]:
    return run_variants(p, [v for _, _, v in variants(p)], train_images, progress=progress)


def results(p: Params, outcomes: dict[Variant, list[Outcome]]) -> list[dict[str, Any]]:
    """Rows (table, row, name, batch, shots, mean, ci95): the PN table with nearest centroid (rows 1-7) and the
    MN table with soft assignment (rows 1-3, MN 1-shot = row 4, MN 5-shot = row 6)."""
    names = {r: n for r, n, _ in ROWS}
    shots_of = {r: s for r, _, s in ROWS}
    mn_rows = {1: names[1], 2: names[2], 3: "NCA fixed composition (= MN no S/Q)", 4: "MN 1-shot", 6: "MN 5-shot"}
    out = []
    for table, clf, rowset in (("PN", "nearest_centroid", names), ("MN", "soft_assignment", mn_rows)):
        for row, b, v in variants(p):
            if row not in rowset:
                continue
            for shots in shots_of[row]:
                m, c, e = pooled(outcomes[v], clf, shots)
                out.append({"table": table, "classifier": clf, "row": row, "name": rowset[row], "batch": b,
                            "shots": shots, "mean": m, "ci95": c, "episodes": e})
    return out


def comparisons(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The paper's claims as pairwise comparisons (PN table): difference of means, CI95 overlap, and whether
    the claim holds (``≈``: CIs overlap; ``<`` / ``>``: the difference has that sign and CIs separate; ``≥``:
    ``a`` higher or CIs overlap). The CIs are over evaluation episodes; they do not include seed variance."""
    def get(row: int, b: int, shots: int, table: str = "PN") -> dict[str, Any]:
        return next(r for r in rows if (r["table"], r["row"], r["batch"], r["shots"]) == (table, row, b, shots))

    # (claim, row a, row b, shots, relation of a to b)
    claims = [("row 2 ≈ row 1 (replacement negligible)", 2, 1, 1, "≈"),
              ("row 2 ≈ row 1 (replacement negligible)", 2, 1, 5, "≈"),
              ("row 6 < row 5 (no proto slightly worse)", 6, 5, 5, "<"),
              ("row 7 > row 5 (no S/Q better)", 7, 5, 5, ">"),
              ("row 3 ≥ row 5 (all ablations recover PN)", 3, 5, 5, "≥"),
              ("row 3 ≥ row 4 (all ablations, 1-shot)", 3, 4, 1, "≥"),
              ("row 3 > row 1 (few positives in random batches)", 3, 1, 1, ">"),
              ("row 3 > row 1 (few positives in random batches)", 3, 1, 5, ">")]
    out = []
    for b in sorted({r["batch"] for r in rows}):
        for text, a, c, shots, rel in claims:
            ra, rc = get(a, b, shots), get(c, b, shots)
            d = ra["mean"] - rc["mean"]
            sep = abs(d) > ra["ci95"] + rc["ci95"]
            holds = {"≈": not sep, "<": d < 0 and sep, ">": d > 0 and sep, "≥": d > 0 or not sep}[rel]
            out.append({"claim": text, "batch": b, "shots": shots, "diff (a - b)": d,
                        "ci95 (a + b)": ra["ci95"] + rc["ci95"], "CIs separate": sep, "holds": holds})
    return out


def figure(rows: list[dict[str, Any]], table: str, title: str = "") -> plt.Figure:
    """Fig. 4: horizontal bars per row, one group per batch size, 1-shot and 5-shot panels, CI95 error bars."""
    sel = [r for r in rows if r["table"] == table]
    batches = sorted({r["batch"] for r in sel})
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.5 + 0.45 * len({r["row"] for r in sel}) * len(batches) / 1.5))
    for ax, shots in zip(axes, (1, 5)):
        rs = sorted({r["row"] for r in sel if r["shots"] == shots})
        h = 0.8 / len(batches)
        for k, b in enumerate(batches):
            ys, ms, cs = [], [], []
            for i, row in enumerate(rs):
                r = next((x for x in sel if x["row"] == row and x["batch"] == b and x["shots"] == shots), None)
                if r is not None:
                    ys.append(i + (k - (len(batches) - 1) / 2) * h)
                    ms.append(100 * r["mean"])
                    cs.append(100 * r["ci95"])
            ax.barh(ys, ms, h * 0.9, xerr=cs, capsize=2, label=f"b={b}", color=f"C{k}")
        labels = {r["row"]: f"{r['row']}. {r['name']}" for r in sel}
        ax.set_yticks(range(len(rs)), [labels[r] for r in rs], fontsize=7)
        ax.invert_yaxis()
        lo = min(100 * r["mean"] - 100 * r["ci95"] for r in sel if r["shots"] == shots)
        hi = max(100 * r["mean"] + 100 * r["ci95"] for r in sel if r["shots"] == shots)
        ax.set_xlim(max(0.0, lo - 3), min(100.0, hi + 2))
        ax.set(xlabel="accuracy (%)", title=f"{table} table, {shots}-shot ({sel[0]['classifier'].replace('_', ' ')})")
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
