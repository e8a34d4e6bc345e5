"""Every number a claim quotes is found where its citation says, and the cited table's backbone is the one the
notebook's paper.yaml trains (or the claim says it is a proxy and why). Reads the papers' texts in
``../shared/seeds/`` (OCR: a number's decimal point may be lost, so numbers are compared without it) and
``../shared/PAPER-NOTES.md`` for numbers from the authors' repositories; skips when they are absent."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from studylib.experiments import claim_registry as R
from studylib.experiments.claims import static_claims

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
SEEDS = SHARED / "seeds"
pytestmark = pytest.mark.skipif(not SEEDS.is_dir() or not (SHARED / "PAPER-NOTES.md").is_file(),
                                reason="the papers' texts (../shared/seeds/, ../shared/PAPER-NOTES.md) are absent")

CAPTION = re.compile(r"(Table|Figure) (\d+):")
NUMBER = re.compile(r"\d+\.\d+")
WINDOW = 30  # lines either side of a caption that a row-less citation may quote from


def _lines(seed: str) -> list[str]:
    (path,) = SEEDS.glob(f"{seed}_*.txt")
    return path.read_text().splitlines()


def _has(text: str, number: str) -> bool:
    return number.replace(".", "") in text.replace(".", "")


def _caption_before(lines: list[str], i: int) -> str | None:
    """The last "Table N:" / "Figure N:" caption on or before line ``i``."""
    for j in range(i, -1, -1):
        found = CAPTION.findall(lines[j])
        if found:
            kind, n = found[-1]
            return f"{kind} {n}"
    return None


def citation_problem(c: R.Citation) -> str | None:
    """Why ``c`` does not hold in the texts, or None."""
    if c.repo:
        notes = (SHARED / "PAPER-NOTES.md").read_text().splitlines()
        at = [i for i, line in enumerate(notes) if c.repo in line]
        if not at:
            return f"PAPER-NOTES.md does not name the repository {c.repo}"
        block = " ".join(notes[at[0]:at[0] + 3])
        missing = [n for n in c.numbers if not _has(block, n)]
        return f"{missing} not noted for {c.repo}" if missing else None
    lines = _lines(c.seed)
    if c.row is not None:
        rows = [i for i, line in enumerate(lines) if c.row in line]
        if not rows:
            return f"seed {c.seed} has no row {c.row!r}"
        tables = {_caption_before(lines, i) for i in rows}
        good = [i for i in rows if _caption_before(lines, i) == c.table]
        if not good:
            return f"row {c.row!r} of seed {c.seed} is in {sorted(t or '?' for t in tables)}, not {c.table}"
        for i in good:
            if all(_has(lines[i], n) for n in c.numbers) and (c.backbone is None or c.backbone in lines[i]):
                return None
        return f"row {c.row!r} of seed {c.seed} {c.table} does not hold {c.numbers} with backbone {c.backbone}"
    if c.table is None:  # anywhere in the seed's text
        caps, block = [], " ".join(lines)
    else:
        caps = [i for i, line in enumerate(lines) if f"{c.table}:" in line]
        if not caps:
            return f"seed {c.seed} has no caption {c.table}:"
        block = " ".join(" ".join(lines[max(0, i - WINDOW):i + WINDOW]) for i in caps)
    if c.derived:  # each number is its expression's value, and the expression's operands are in the text
        if len(c.derived) != len(c.numbers):
            return f"{len(c.numbers)} derived numbers but {len(c.derived)} expressions"
        for n, expr in zip(c.numbers, c.derived):
            operands = NUMBER.findall(expr)
            if abs(eval(expr, {"__builtins__": {}}) - float(n)) > 0.005:  # noqa: S307 - literals only
                return f"{expr} is not {n}"
            if not all(_has(block, x) or _has(" ".join(lines), x) for x in operands):
                return f"the operands of {expr} are not in seed {c.seed}"
        return None
    missing = [n for n in c.numbers if not _has(block, n)]
    return f"{missing} are not in seed {c.seed} {c.table or 'anywhere'}" if missing else None


def _paper_backbone(notebook: str) -> str | None:
    values = yaml.safe_load((ROOT / "params" / notebook / "paper.yaml").read_text()) or {}
    return values.get("backbone")


def backbone_problem(notebook: str, meta: R.Meta) -> str | None:
    """A cited table's backbone that is not the one paper.yaml trains, unless the claim is a stated proxy."""
    ours = _paper_backbone(notebook)
    for c in meta.citations:
        if c.backbone is None:
            continue
        if R.BACKBONE_IN_TABLES.get(ours) == c.backbone:
            continue
        if meta.evidence == R.PROXY and meta.backbone_proxy:
            continue
        return (f"{notebook}: cites {c.text()} ({c.backbone}) but paper.yaml trains {ours}; cite the {ours} row, "
                "or mark the claim a proxy with its reason (backbone_proxy)")
    return None


def test_every_registered_citation_holds_in_the_seed_text():
    problems = [f"{nb}:{cid}: {p}" for (nb, cid), m in R.REGISTRY.items() for c in m.citations
                if (p := citation_problem(c))]
    assert not problems, "\n".join(problems)


def test_cited_backbones_match_paper_yaml():
    problems = [p for (nb, _), m in R.REGISTRY.items() if (p := backbone_problem(nb, m))]
    assert not problems, "\n".join(problems)


def _quoted(notebook: str, claim) -> tuple[set[str], R.Meta]:
    m = R.meta(notebook, claim.id, claim.expect.kind)
    return set(NUMBER.findall(m.paper or claim.paper)), m


@pytest.mark.parametrize("notebook", ["06_beclr_pretraining", "07_dyce_memory_umap", "08_opta_before_after",
                                      "13_infopatch"])
def test_every_quoted_number_of_seeds_001_and_004_names_its_source(notebook):
    uncited = []
    for scale in ("smoke", "paper"):
        for c in static_claims(notebook, scale):
            numbers, m = _quoted(notebook, c)
            cited = {n for ct in m.citations for n in ct.numbers}
            # derived gains ("+9.6") and percentages of the claim text are not quotes
            missing = {n for n in numbers - cited if not re.search(rf"[+-]{re.escape(n)}", m.paper or c.paper)}
            if missing:
                uncited.append(f"{c.id}: {sorted(missing)}")
    assert not uncited, f"{notebook}: quoted numbers without a citation: {uncited}"


# -- each of the four citation errors of issue 19 fails these checks ----------------------------------------------
def test_the_four_known_citation_errors_are_caught():
    # 07 level-t6-dyce against BECLR's ResNet-50 number, for a ResNet-18 run
    rn50 = R.Meta(citations=(R.Citation(("87.82",), "001", "Table 1", "BECLR (Ours) RN50", "RN50"),))
    assert citation_problem(rn50.citations[0]) is None and backbone_problem("07_dyce_memory_umap", rn50)
    # 08's Table 5 (ResNet-50) quoted for 08's ResNet-18 without saying it is a proxy
    t5 = R.REGISTRY[("08_opta_before_after", "t5-dyce-helps-1shot")]
    assert backbone_problem("08_opta_before_after", R.Meta(citations=t5.citations))
    # UniSiam's 64.10 cited from Table 4: its row is in Table 1
    wrong = R.Citation(("64.10",), "001", "Table 4", "UniSiam + dist (Lu et al., 2022) RN18", "RN18")
    assert "not Table 4" in citation_problem(wrong)
    # InfoPatch's 67.67 / 82.44 cited from seed 004's text: they are the authors' repository's
    assert "not in seed 004" in citation_problem(R.Citation(("67.67", "82.44"), "004"))
