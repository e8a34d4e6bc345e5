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
from studylib.paths import notebook_names

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
SEEDS = SHARED / "seeds"
pytestmark = pytest.mark.skipif(not SEEDS.is_dir() or not (SHARED / "PAPER-NOTES.md").is_file(),
                                reason="the papers' texts (../shared/seeds/, ../shared/PAPER-NOTES.md) are absent")

CAPTION = re.compile(r"(Table|Figure) (\d+):")
CAPTION_DOT = re.compile(r"^(Table|Figure) (\d+)\. ")  # seeds 002/003 write "Table 1. Test ..." at a line's start
NUMBER = re.compile(r"\d+\.\d+|\d+%")
WINDOW = 30  # lines either side of a caption that a row-less citation may quote from
CAPTIONS_BELOW = {"000", "003"}  # seeds whose text prints a table's caption after its rows


def _lines(seed: str) -> list[str]:
    (path,) = SEEDS.glob(f"{seed}_*.txt")
    return path.read_text().splitlines()


def _has(text: str, number: str) -> bool:
    return number.replace(".", "") in text.replace(".", "")


def _caption(line: str) -> str | None:
    found = CAPTION.findall(line) or CAPTION_DOT.findall(line)
    return f"{found[-1][0]} {found[-1][1]}" if found else None


def _caption_before(lines: list[str], i: int) -> str | None:
    """The last "Table N:" / "Figure N:" caption on or before line ``i``."""
    return _caption_at(lines, i, below=False)[0]


def _caption_at(lines: list[str], i: int, below: bool) -> tuple[str | None, int]:
    """The caption of the table that holds line ``i`` and its line: the last caption on or before ``i``, or
    (``below``: the seed prints captions after their tables) the first one after it."""
    for j in (range(i, len(lines)) if below else range(i, -1, -1)):
        if (cap := _caption(lines[j])) is not None:
            return cap, j
    return None, -1


def _row_problem(c: R.Citation, lines: list[str]) -> str | None:
    """Why the row of ``c`` does not hold its numbers (and backbone) in the seed text, or None."""
    below = c.seed in CAPTIONS_BELOW
    if c.column is None:
        rows = [i for i, line in enumerate(lines) if c.row in line]
    else:  # a tab-separated row: its label is exact, its numbers are in the cited cell
        rows = [i for i, line in enumerate(lines) if line.split("\t")[0].strip() == c.row]
    if c.under is not None:
        rows = [i for i in rows if i > 0 and lines[i - 1].startswith(c.under)]
    if not rows:
        return f"seed {c.seed} has no row {c.row!r}" + (f" under {c.under!r}" if c.under else "")
    if c.table is None:  # a line of the body text
        good = [(i, -1) for i in rows]
    else:
        at = {i: _caption_at(lines, i, below) for i in rows}
        good = [(i, at[i][1]) for i in rows if at[i][0] == c.table]
        if not good:
            tables = sorted(at[i][0] or "?" for i in rows)
            return f"row {c.row!r} of seed {c.seed} is in {tables}, not {c.table}"
    for i, cap in good:
        cells = lines[i].split("\t")
        if c.column is not None and c.column >= len(cells):
            continue
        where = cells[c.column] if c.column is not None else lines[i]
        backbone_ok = c.backbone is None or c.backbone in lines[i] or (cap >= 0 and c.backbone in lines[cap])
        if all(_has(where, n) for n in c.numbers) and backbone_ok:
            return None
    col = f" column {c.column}" if c.column is not None else ""
    return f"row {c.row!r}{col} of seed {c.seed} {c.table} does not hold {c.numbers} with backbone {c.backbone}"


def citation_problem(c: R.Citation) -> str | None:
    """Why ``c`` does not hold in the texts, or None."""
    if c.notes:  # the seed's section of PAPER-NOTES.md ("## 000 · ...")
        text = (SHARED / "PAPER-NOTES.md").read_text()
        section = re.search(rf"^## {c.notes} .*?(?=^## |\Z)", text, re.M | re.S)
        if section is None:
            return f"PAPER-NOTES.md has no section for seed {c.notes}"
        missing = [n for n in c.numbers if not re.search(rf"(?<![\d.]){re.escape(n)}(?![\d])", section.group())]
        return f"{missing} not in PAPER-NOTES.md's section for seed {c.notes}" if missing else None
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
        return _row_problem(c, lines)
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


@pytest.mark.parametrize("notebook", [nb for nb in notebook_names() if nb[:2] in R.SEED_OF])
def test_every_quoted_number_names_its_source(notebook):
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


def test_issue19_new_claims_cite_their_tables():
    """The claims added for issue 19 item 6 cite rows that hold their numbers (Table 10 for Table 2's garbled
    BECLR row; Table 1's UniSiam RN18 row for Fig. 5; Table 6 for the other settings), and a wrong number fails."""
    for key in [("06_beclr_pretraining", f"t2-level-{d}-{s}shot") for d in ("cifarfs", "fc100") for s in (1, 5)] + \
            [("06_beclr_pretraining", f"fig5-no-opta-beats-unisiam-{s}shot") for s in (1, 5)] + \
            [("07_dyce_memory_umap", f"t6-{n}-best") for n in ("mask-ratio", "proj-dim", "lam", "topk", "partitions",
                                                                "memory-size")]:
        meta = R.REGISTRY[key]
        assert meta.citations and all(citation_problem(c) is None for c in meta.citations), key
    assert citation_problem(R.Citation(("70.40",), "001", "Table 10", "BECLR (Ours) RN18", "RN18"))
    assert citation_problem(R.Citation(("86.95",), "001", "Table 6", None, "RN50"))
