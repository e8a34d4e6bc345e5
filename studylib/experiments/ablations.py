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
Because those MN models *are* PN-table models, the MN table is the same runs under another classifier, not an
independent replication; its claims are listed separately because Appendix H states them separately.

Every row is trained once per seed of ``p.seeds``; the rows of a seed are evaluated on that seed's episodes
(:func:`~studylib.evaluation.episode_seed`), so each claim is a paired per-episode difference, averaged per seed, with a 95% interval over the seeds
(:mod:`studylib.evaluation.stats`); verdicts follow :mod:`studylib.evaluation.verdicts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt

from studylib.claims.table import ClaimsTable
from studylib.config import param
from studylib.evaluation import stats
from studylib.evaluation.verdicts import Claim, Expectation
from studylib.experiments import episodes_contract as ct
from studylib.experiments import regimes
from studylib.experiments.episodes_common import Variant, episode_shape, episodic, nca, pairs_used
from studylib.runs.runner import Outcome

NOTEBOOK = "04_ablations"

# "Negligible" (rows 1 vs 2) and "the gap disappears" (rows 3 vs 1 at b = 512) as a margin, fixed before any run:
# one point of accuracy, the margin the study uses for "matches the paper" (quickstart.LEVEL_MARGIN).
NEGLIGIBLE = 0.01
# Fig. 4 reports bars only; the text gives no numbers (the paper's ablation table is its figure).
PAPER_FIG4 = "Fig. 4 (bars; no numbers in the text)"


@dataclass
class Params(ct.ContractParams):
    """Parameters of ``notebooks/04_ablations.ipynb`` (``params/04_ablations/*.yaml``); defaults = smoke scale.

    Smoke: the embedded glyphs (192 training classes of 20 images), Conv4 with 16 filters, one epoch per model
    (two until 2026-11-29; the evidence scale keeps two), one batch size (128, the paper's smallest) and three
    training seeds: 7 rows x 3 seeds = 21 short runs.
    """

    epochs: int = param(1, ge=1, help="training epochs of every run (smoke: 1, cut from 2 for the suite's time; "
                                           "evidence.yaml keeps 2)", cut=True)
    conv4_hidden: int = param(16, ge=1, help="conv4 only: filters per block (64 in Snell et al.; fewer is faster)")
    eval_episodes: int = param(500, ge=1, help="evaluation episodes per model (paper: 10,000)", cut=True)
    batch_sizes: list[int] = param([128], ge=2, help="batch sizes (paper: 128, 256, 512)", cut=True)
    per_class: int = param(8, ge=2, help="images per class m+n of the episodes and fixed batches (paper: 8)")
    shots: int = param(5, ge=1, help="shots of the multi-shot PN rows (paper: 5)")

    def check(self) -> None:
        super().check()
        if not self.batch_sizes:
            raise ValueError("batch_sizes is empty; give at least one, e.g. [128] (paper: [128, 256, 512])")
        for b in self.batch_sizes:
            episode_shape(b, self.shots, self.per_class)
            episode_shape(b, 1, self.per_class)


# (row number, description, shots it is evaluated at)
ROWS: tuple[tuple[int, str, tuple[int, ...]], ...] = (
    (1, "NCA (without replacement)", (1, 5)),
    (2, "NCA (with replacement)", (1, 5)),
    (3, "NCA fixed batch composition (= PN/MN, all ablations)", (1, 5)),
    (4, "PN 1-shot (= MN 1-shot)", (1,)),
    (5, "PN 5-shot", (5,)),
    (6, "PN 5-shot no proto (= MN 5-shot)", (5,)),
    (7, "PN 5-shot no S/Q", (5,)),
)
MN_ROWS = {1: "NCA (without replacement)", 2: "NCA (with replacement)", 3: "NCA fixed composition (= MN no S/Q)",
           4: "MN 1-shot", 6: "MN 5-shot"}
TABLES = (("PN", "nearest_centroid"), ("MN", "soft_assignment"))


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
    """``(row, batch, variant)`` of the whole grid."""
    return [(row, b, row_variant(row, b, p.shots, p.per_class)) for b in p.batch_sizes for row, _, _ in ROWS]


def grid(p: Params) -> list[dict[str, Any]]:
    """The models the notebook trains (deterministic: it depends on ``p`` only)."""
    return [{"row": r, "batch": b, "model": v.label, "sampler": v.sampler, "ways": v.ways or "-",
             "prototypes": v.prototypes, "sq_split": v.sq_split, "seeds": len(p.seeds)} for r, b, v in variants(p)]


def run(p: Params, train_images: int | None = None, progress: bool = True) -> dict[Variant, list[Outcome]]:
    """Train (or load) every row x batch size x seed; ``{variant: [outcome per seed]}``."""
    n = train_images if train_images is not None else ct.train_size(p)
    return ct.run(p, [v for _, _, v in variants(p)], n, progress=progress)


def results(p: Params, outcomes: dict[Variant, list[Outcome]]) -> list[dict[str, Any]]:
    """Rows (table, classifier, row, name, batch, shots, mean, ci95 over seeds): the PN table with the nearest
    centroid (rows 1-7) and the MN table with soft assignment (rows 1-3, MN 1-shot = row 4, MN 5-shot = row 6)."""
    names = {r: n for r, n, _ in ROWS}
    shots_of = {r: s for r, _, s in ROWS}
    out = []
    for table, clf in TABLES:
        rowset = names if table == "PN" else MN_ROWS
        for row, b, v in variants(p):
            if row not in rowset:
                continue
            for shots in shots_of[row]:
                out.append(ct.estimate_row(ct.accuracy(outcomes[v], clf, shots), table=table, classifier=clf,
                                           row=row, name=rowset[row], batch=b, shots=shots))
    return out


def pairs_table(p: Params, outcomes: dict[Variant, list[Outcome]]) -> list[dict[str, Any]]:
    """Positive and negative pairs per training batch that each loss used (from the training logs; the samplers
    draw on the CPU from seeded generators, so the counts are the same on every machine)."""
    out = []
    for r, b, v in variants(p):
        pos, neg = pairs_used(outcomes[v])
        out.append({"row": r, "batch": b, "model": v.label, "positives/batch": round(pos),
                    "negatives/batch": round(neg)})
    return out


# (claim id stem, claim text, rows a and b of the effect a - b, shots, table, expectation, applies, why not)
ClaimSpec = tuple[str, str, int, int, int, str, Expectation, bool, str]


def _claim_specs(p: Params, b: int) -> list[ClaimSpec]:
    """The claims tested at batch size ``b``: the ablation claims at every batch size; the small-batch gap
    (row 3 > row 1) at the smallest one (the paper: b = 128); its closing at the largest (the paper: b = 512)."""
    out: list[ClaimSpec] = []
    if b == min(p.batch_sizes):
        for shots in (1, 5):
            out.append((f"fixed-beats-random-{shots}shot", "A fixed batch composition beats random NCA batches at a "
                        f"small batch size (row 3 > row 1 at b = 128), {shots}-shot", 3, 1, shots, "PN",
                        Expectation("greater"), True, ""))
    if b == max(p.batch_sizes):
        regime = p.data in ct.PAPER_REGIME_DATA
        for shots in (1, 5):
            out.append((f"gap-closes-{shots}shot", f"The row 3 - row 1 gap disappears at b = 512, {shots}-shot", 3, 1,
                        shots, "PN", Expectation("within", margin=NEGLIGIBLE), b >= 512 and regime,
                        "needs b = 512 on data with the paper's ~600 images per class (the glyphs have 20)"))
    out += [
        ("replacement-1shot", "Sampling NCA batches with replacement has a negligible effect (row 2 vs row 1), "
         "1-shot", 2, 1, 1, "PN", Expectation("within", margin=NEGLIGIBLE), True, ""),
        ("replacement-5shot", "Sampling NCA batches with replacement has a negligible effect (row 2 vs row 1), "
         "5-shot", 2, 1, 5, "PN", Expectation("within", margin=NEGLIGIBLE), True, ""),
        ("noproto-5shot", "Disabling prototypes lowers PN 5-shot accuracy, slightly (row 6 < row 5)",
         6, 5, 5, "PN", Expectation("less"), True, ""),
        ("nosq-5shot", "Using all pairs (no S/Q split) raises PN 5-shot accuracy (row 7 > row 5)",
         7, 5, 5, "PN", Expectation("greater"), True, ""),
        ("all-ablations-5shot", "All ablations together recover what PN loses (row 3 > row 5), 5-shot",
         3, 5, 5, "PN", Expectation("greater"), True, ""),
        ("all-ablations-1shot", "All ablations together recover what PN loses (row 3 > row 4), 1-shot",
         3, 4, 1, "PN", Expectation("greater"), True, ""),
        ("mn-all-ablations-5shot", "The MN ablations agree: all ablations beat MN 5-shot "
         "(row 3 > MN 5-shot = row 6, soft assignment)", 3, 6, 5, "MN", Expectation("greater"), True, ""),
        ("mn-all-ablations-1shot", "The MN ablations agree: all ablations beat MN 1-shot "
         "(row 3 > MN 1-shot = row 4, soft assignment)", 3, 4, 1, "MN", Expectation("greater"), True, ""),
    ]
    return out


def _source(table: str) -> str:
    return "Fig. 4, Sec. 3.4" if table == "PN" else "App. H"


def claims(p: Params, outcomes: dict[Variant, list[Outcome]] | None = None,
           untrained: dict[Variant, list[Outcome]] | None = None) -> ClaimsTable:
    """The claims of Fig. 4 / Appendix H, one per batch size (from ``p`` alone), measured when given outcomes,
    with the regime checks: every row a claim compares (both rows of its difference) beats its untrained
    network, nearest centroid at the row's first evaluated shot count (``untrained``: default
    :func:`~studylib.experiments.regimes.untrained_of` of ``outcomes``)."""
    table = measured_claims(p, outcomes)
    if outcomes is None:
        return table
    gates = {cid: [(ra, b), (rb, b)] for cid, ra, rb, _, _, b in _listing(p)[1] if table[cid].applies}
    untrained = untrained if untrained is not None else regimes.untrained_of(outcomes)
    names, shots_of = {r: n for r, n, _ in ROWS}, {r: s[0] for r, _, s in ROWS}
    for (row, b), ids in regimes.claims_of(gates).items():
        v = row_variant(row, b, p.shots, p.per_class)
        table.regime(regimes.learned_check(f"row {row} ({names[row]}, b = {b})", outcomes[v], untrained[v],
                                           "nearest_centroid", shots_of[row], ids))
    return table


def _listing(p: Params) -> tuple[list[Claim], list[tuple[str, int, int, int, str, int]]]:
    """The claims (from ``p`` alone) and what each measures: ``(claim id, row a, row b, shots, classifier,
    batch)``, the effect being row a - row b."""
    rows, measure = [], []
    for b in p.batch_sizes:
        for stem, text, ra, rb, shots, table, expect, applies, why in _claim_specs(p, b):
            clf = dict(TABLES)[table]
            test = (f"row {ra} - row {rb}, b = {b}, {shots}-shot, {clf.replace('_', ' ')}, paired episodes, "
                    "per-seed means")
            bb = 512 if stem.startswith("gap-closes") else b
            test = test.replace(f"b = {b},", f"b = {bb},")
            cid = (f"fig4-{stem}" if stem.startswith("gap-closes") else f"fig4-{stem}-b{b}" if table == "PN"
                   else f"appH-{stem[3:]}-b{b}")
            rows.append(Claim(cid, text, _source(table), PAPER_FIG4 if table == "PN" else "App. H (figure)", test,
                              expect, applies=applies, why_not=why))
            measure.append((cid, ra, rb, shots, clf, b))
    return rows, measure


def measured_claims(p: Params, outcomes: dict[Variant, list[Outcome]] | None = None) -> ClaimsTable:
    """:func:`claims` without the regime checks (the measured effects alone: :func:`reference_values`)."""
    rows, measure = _listing(p)
    table = ClaimsTable(NOTEBOOK, p.scale, rows)
    if outcomes is not None:
        for cid, ra, rb, shots, clf, b in measure:
            if table[cid].applies:
                va, vb = (row_variant(r, b, p.shots, p.per_class) for r in (ra, rb))
                table.measure(cid, ct.difference(outcomes[va], outcomes[vb], clf, shots))
    return table


def reference_values(p: Params, outcomes: dict[Variant, list[Outcome]]) -> dict[str, stats.Estimate | float | int]:
    """Trained numbers the notebook asserts (accuracies and claim effects over seeds) and exact counts."""
    out: dict[str, stats.Estimate | float | int] = {}
    for r in results(p, outcomes):
        v = row_variant(r["row"], r["batch"], p.shots, p.per_class)
        out[f"{r['table']}/row{r['row']}/b{r['batch']}/{r['shots']}shot"] = ct.accuracy(outcomes[v], r["classifier"],
                                                                                      r["shots"])
    for c in measured_claims(p, outcomes):
        if c.measured is not None:
            out[f"claim/{c.id}"] = c.measured
    for r in pairs_table(p, outcomes):
        out[f"pairs/row{r['row']}/b{r['batch']}/positives"] = r["positives/batch"]
        out[f"pairs/row{r['row']}/b{r['batch']}/negatives"] = r["negatives/batch"]
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
