"""What each claim is evidence of, which claims are one measurement, and where every quoted number comes from.

The claims tables of the notebooks (``claims(p)`` in each experiment module) say *what* is tested and *how*;
their listing is compared by nbval, so it stays as it is. This registry adds what the study's page
(``figures/claims.md``) needs to count claims honestly, keyed by ``(notebook, claim id)``:

* **evidence**: a *paper claim* (the paper says it; the default), an *implementation check* (a formula or a
  count: deterministic, not a finding about learning; the default for ``equal`` claims), a *proxy* (a stated
  stand-in for the paper's setting: another backbone, another task), or the *study's own* (no paper makes it);
* **alias_of**: claims that measure the same thing are one claim: the alias row names its canonical claim
  and is left out of the headline counts;
* **citations**: every number quoted in the claim's ``paper`` text, with its source: a seed file and table
  (and the row it is read from, and that row's backbone), or the authors' repository as noted in
  ``../shared/PAPER-NOTES.md``. ``tests/experiments/test_citations.py`` reads the seed texts and checks them.
* **paper** / **source**: the corrected text the page shows where a notebook's (nbval-checked) listing quotes
  a wrong source; the notebook's listing is corrected at its next re-execution.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PAPER = "paper claim"
IMPLEMENTATION = "implementation check"
PROXY = "proxy"
OWN = "study's own"
EVIDENCE = (PAPER, IMPLEMENTATION, PROXY, OWN)

# the seed (paper) each notebook reproduces; 90 uses the study on the user's data and reproduces none
SEED_OF = {"00": "000", "01": "000", "02": "000", "03": "000", "04": "000", "05": "000", "06": "001",
           "07": "001", "08": "001", "09": "002", "10": "002", "11": "003", "12": "003", "13": "004"}

# a backbone in paper.yaml -> how the seeds' tables write it
BACKBONE_IN_TABLES = {"resnet18": "RN18", "resnet50": "RN50"}


@dataclass(frozen=True)
class Citation:
    """Where quoted numbers come from.

    Attributes:
        numbers: the numbers as the claim's ``paper`` text quotes them (``"64.10"``).
        seed: the seed file's number (``"001"``), or None for the authors' repository.
        table: the table (``"Table 1"``) whose caption precedes the row in the seed text.
        row: text that starts the row in the seed text (``"BECLR (Ours) RN18"``); None: anywhere in the table.
        backbone: the backbone of the quoted row as the table writes it (``"RN18"``), None if the table has none.
        repo: the authors' repository (``owner/name``) when the numbers are not in the seed text.
    """

    numbers: tuple[str, ...]
    seed: str | None = None
    table: str | None = None
    row: str | None = None
    backbone: str | None = None
    repo: str | None = None
    derived: tuple[str, ...] = ()  # numbers computed from the text, one expression each ("80.57 - 12.8")

    def text(self) -> str:
        if self.repo:
            return f"authors' repository {self.repo} (../shared/PAPER-NOTES.md)"
        where = f"seed {self.seed} {self.table or 'text'}" + (f", {self.backbone}" if self.backbone else "")
        return where + (f" (derived: {', '.join(self.derived)})" if self.derived else "")


@dataclass(frozen=True)
class Meta:
    """The registry's entry for one claim (see the module docstring)."""

    evidence: str = PAPER
    alias_of: str | None = None  # "NN_notebook:claim-id" of the canonical claim
    note: str = ""  # why a proxy is a proxy, why a claim is the study's own
    citations: tuple[Citation, ...] = ()
    paper: str | None = None  # corrected quoted text for the page
    source: str | None = None  # corrected source for the page
    backbone_proxy: str = ""  # why the cited table's backbone may differ from paper.yaml's

    def __post_init__(self) -> None:
        if self.evidence not in EVIDENCE:
            raise ValueError(f"unknown evidence kind {self.evidence!r}; allowed: {', '.join(EVIDENCE)}")


_RN18_BECLR = Citation(("75.74", "84.93"), "001", "Table 1", "BECLR (Ours) RN18", "RN18")
_T5_WHY = ("Table 5 is BECLR's ResNet-50 ablation (its last row, 80.57 / 87.82, is the RN50 row of Table 1); "
           "08's paper.yaml trains the ResNet-18 of Table 1, so the study tests the direction of each step on "
           "ResNet-18, a stated stand-in")
_T6_WHY = ("Table 6 ablates the ResNet-50 model (its DyCE row, 87.82, is the RN50 row of Table 1); 07's "
           "paper.yaml trains a ResNet-18, so the study tests the ordering of the memory variants on ResNet-18")
_T5 = Citation(("54.53", "65.02", "65.33", "80.57", "82.33", "82.69", "68.35", "87.82"), "001", "Table 5", None,
               "RN50")
# the DyCE row of Table 5 is not legible in the seed text: derived from its last row and Sec. 5.2's OpTA gains
_T5_DYCE = Citation(("67.77", "85.52"), "001", "Table 5", None, "RN50", derived=("80.57 - 12.8", "87.82 - 2.3"))
_T6 = Citation(("87.82", "84.05", "85.37", "0.29", "0.39", "0.33"), "001", "Table 6", None, "RN50")
_RETRIEVAL = ("Set2Model's Table 1 is a retrieval result (mAP); the study applies it to Table 2's "
              "classification task, which the paper does not report")

REGISTRY: dict[tuple[str, str], Meta] = {
    # -- seed 000 ---------------------------------------------------------------------------------------------
    ("00_quickstart", "table2-nc-beats-soft-5shot"): Meta(alias_of="05_comparison:appD-nc-beats-soft-5shot"),
    ("04_ablations", "appH-all-ablations-1shot-b128"): Meta(alias_of="04_ablations:fig4-all-ablations-1shot-b128"),
    ("04_ablations", "appH-all-ablations-5shot-b128"): Meta(alias_of="04_ablations:fig4-all-ablations-5shot-b128"),
    # -- seed 001 ---------------------------------------------------------------------------------------------
    ("06_beclr_pretraining", "t1-opta-gain-1shot"): Meta(citations=(
        Citation(("75.74",), "001", "Table 1", "BECLR (Ours) RN18", "RN18"),
        Citation(("66.14",), "001", "Table 14", "BECLR w/o OpTA (Ours) RN18", "RN18"))),
    ("06_beclr_pretraining", "t1-opta-gain-5shot"): Meta(citations=(
        Citation(("84.93",), "001", "Table 1", "BECLR (Ours) RN18", "RN18"),
        Citation(("84.32",), "001", "Table 14", "BECLR w/o OpTA (Ours) RN18", "RN18"))),
    ("06_beclr_pretraining", "t1-gain-1shot-exceeds-5shot"): Meta(
        alias_of="06_beclr_pretraining:t1-opta-gain-1shot",
        note="gain(1-shot) - gain(5-shot) is dominated by the 1-shot gain, measured on the same runs"),
    ("06_beclr_pretraining", "level-opta-1shot"): Meta(citations=(
        Citation(("75.74", "0.62"), "001", "Table 1", "BECLR (Ours) RN18", "RN18"),)),
    ("06_beclr_pretraining", "level-opta-5shot"): Meta(citations=(
        Citation(("84.93", "0.33"), "001", "Table 1", "BECLR (Ours) RN18", "RN18"),)),
    ("06_beclr_pretraining", "level-logreg-1shot"): Meta(citations=(
        Citation(("66.14", "0.43"), "001", "Table 14", "BECLR w/o OpTA (Ours) RN18", "RN18"),)),
    ("06_beclr_pretraining", "level-logreg-5shot"): Meta(citations=(
        Citation(("84.32", "0.27"), "001", "Table 14", "BECLR w/o OpTA (Ours) RN18", "RN18"),)),
    ("07_dyce_memory_umap", "t6-dyce-beats-fifo"): Meta(PROXY, note=_T6_WHY, citations=(_T6,),
                                                        backbone_proxy=_T6_WHY),
    ("07_dyce_memory_umap", "t6-dyce-beats-kmeans"): Meta(PROXY, note=_T6_WHY, citations=(_T6,),
                                                          backbone_proxy=_T6_WHY),
    ("07_dyce_memory_umap", "t6-kmeans-beats-fifo"): Meta(PROXY, note=_T6_WHY, citations=(_T6,),
                                                          backbone_proxy=_T6_WHY),
    # the paper's number for 07's ResNet-18 is Table 1's RN18 row, not Table 6's (ResNet-50) 87.82
    ("07_dyce_memory_umap", "level-t6-dyce"): Meta(
        paper="84.93 ± 0.33", source="Table 1 (miniImageNet, RN18)",
        citations=(Citation(("84.93", "0.33"), "001", "Table 1", "BECLR (Ours) RN18", "RN18"),)),
    **{("08_opta_before_after", cid): Meta(PROXY, note=_T5_WHY, citations=(_T5, _T5_DYCE), backbone_proxy=_T5_WHY,
                                          source="Table 5 (miniImageNet, ResNet-50), Sec. 5.2")
       for cid in ("t5-ema-teacher-helps", "t5-masking-helps-with-ema", "t5-dyce-helps-1shot",
                   "t5-dyce-helps-5shot")},
    ("08_opta_before_after", "t5-opta-helps-1shot"): Meta(
        PROXY, alias_of="06_beclr_pretraining:t1-opta-gain-1shot", note=_T5_WHY, citations=(_T5, _T5_DYCE),
        backbone_proxy=_T5_WHY, source="Table 5 (miniImageNet, ResNet-50), Sec. 5.2"),
    ("08_opta_before_after", "fig8-opta-gain"): Meta(citations=(
        Citation(("68.58", "97.77"), "001", "Figure 8"),)),
    # UniSiam's 64.10 (no OpTA) is in Table 1; 72.54 (with OpTA) in Table 4
    **{("08_opta_before_after", f"t4-opta-helps-{m}"): Meta(
        source="Table 1 and Table 4 (miniImageNet, RN18)",
        citations=(Citation(("64.10",), "001", "Table 1", "UniSiam + dist (Lu et al., 2022) RN18", "RN18"),
                   Citation(("72.54",), "001", "Table 4", "Unisiam+opra"))) for m in ("nca", "pn", "mn")},
    # -- seed 003 ---------------------------------------------------------------------------------------------
    **{("12_set2model_omniglot", f"{c}-{w}way"): Meta(PROXY, note=_RETRIEVAL)
       for c in ("s2m-gauss-beats-avg-ft", "s2m-gauss-beats-gauss-avg-ft", "s2m-gauss-beats-gmm")
       for w in (5, 20)},
    **{("12_set2model_omniglot", f"gauss-likelihood-beats-centroid-{w}way"): Meta(
        OWN, note="Table 2 reports only the likelihood classifier; the comparison is the study's")
       for w in (5, 20)},
    # -- seed 004 ---------------------------------------------------------------------------------------------
    ("13_infopatch", "level-1shot"): Meta(
        source="authors' repository (miniImageNet)",
        citations=(Citation(("67.67", "0.45"),
                            repo="corwinliu9669/Learning-a-Few-shot-Embedding-Model-with-Contrastive-Learning"),)),
    ("13_infopatch", "level-5shot"): Meta(
        source="authors' repository (miniImageNet)",
        citations=(Citation(("82.44", "0.31"),
                            repo="corwinliu9669/Learning-a-Few-shot-Embedding-Model-with-Contrastive-Learning"),)),
    # -- the study's own ----------------------------------------------------------------------------------------
    ("90_use_your_data", "above-chance"): Meta(OWN, note="a sanity check of a run on the user's data"),
}


def meta(notebook: str, claim_id: str, rule_kind: str = "greater") -> Meta:
    """The registry's entry of a claim; unregistered claims are paper claims, ``equal`` ones implementation
    checks (a formula or a count)."""
    found = REGISTRY.get((notebook, claim_id))
    if found is not None:
        return found
    return Meta(IMPLEMENTATION if rule_kind == "equal" else PAPER)
