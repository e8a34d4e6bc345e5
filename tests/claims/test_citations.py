"""Every number a claim quotes is found where its citation says, and the cited table's backbone is the one the
notebook's paper.yaml trains (the paper.yaml of the notebook whose models the claim measures), or the claim says
it is a proxy and why. Reads the papers' texts in ``../shared/seeds/`` and ``../shared/PAPER-NOTES.md`` for
numbers from the authors' repositories; skips when they are absent.

Numbers are compared as numbers: the seed text is cut into numeric tokens and a quoted number must equal one of
them at the quoted precision. The texts are OCR, which loses decimal points ("8527" for 85.27): a token without a
point matches when its digits are all of the quoted number's digits. Where the OCR merged a number into a longer
token ("2062" for "± 0.62"), the citation names that token (``Citation.ocr``)."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
import yaml

from studylib.claims import registry as R
from studylib.claims.store import static_claims
from studylib.paths import notebook_names

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
SEEDS = SHARED / "seeds"
pytestmark = pytest.mark.skipif(not SEEDS.is_dir() or not (SHARED / "PAPER-NOTES.md").is_file(),
                                reason="the papers' texts (../shared/seeds/, ../shared/PAPER-NOTES.md) are absent")

CAPTION = re.compile(r"(Table|Figure) (\d+):")
CAPTION_DOT = re.compile(r"^(Table|Figure) (\d+)\. ")  # seeds 002/003 write "Table 1. Test ..." at a line's start
NUMBER = re.compile(r"\d+\.\d+|\d+%")  # a number as the claims quote it
TOKEN = re.compile(r"\d+(?:\.\d+)?")  # a number as the seed text holds it
WINDOW = 30  # lines either side of a caption that a row-less citation may quote from
CAPTIONS_BELOW = {"000", "003"}  # seeds whose text prints a table's caption after its rows
FLAG = re.compile(r"(--[A-Za-z][\w-]*)(?:[ :=]+'?([\w./-]+))?")  # a command-line flag and its value, as quoted


def _lines(seed: str) -> list[str]:
    (path,) = SEEDS.glob(f"{seed}_*.txt")
    return path.read_text().splitlines()


def same_number(token: str, quoted: str) -> bool:
    """Whether a numeric token of the seed text is the quoted number (``"0.29"``, ``"86%"``): the same value at the
    quoted precision, or, for a token without a decimal point (lost by the OCR), exactly the quoted digits."""
    q = quoted.rstrip("%")
    if "." not in token:
        return token == q.replace(".", "")
    places = len(q.split(".")[1]) if "." in q else 0
    if len(token.split(".")[1]) < places:
        return False
    return Decimal(token).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP) == Decimal(q)


def holds(text: str, number: str, ocr: tuple[tuple[str, str], ...] = ()) -> bool:
    """Whether ``text`` holds ``number`` as a numeric token, or as the merged token ``ocr`` names for it."""
    tokens = TOKEN.findall(text)
    if any(same_number(t, number) for t in tokens):
        return True
    return any(n == number and tok in tokens and number.rstrip("%").replace(".", "") in tok for n, tok in ocr)


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


def _entry_numbers(line: str, label: str) -> list[list[str]]:
    """For every occurrence of ``label`` as a whole (whitespace-delimited) token of ``line``, the numeric tokens
    that follow it (a side-by-side table's entry: its label, then its numbers)."""
    return [TOKEN.findall(line[m.end():]) for m in re.finditer(rf"(?<!\S){re.escape(label)}(?!\S)", line)]


def _entry_holds(c: R.Citation, after: list[str]) -> bool:
    """The tokens right after a side-by-side entry's label are its numbers, in order."""
    if len(after) < len(c.numbers):
        return False
    return all(holds(tok, n, c.ocr) for tok, n in zip(after, c.numbers))


def _row_problem(c: R.Citation, lines: list[str]) -> str | None:
    """Why the row of ``c`` does not hold its numbers (and backbone) in the seed text, or None."""
    below = c.seed in CAPTIONS_BELOW
    if c.side:
        rows = [i for i, line in enumerate(lines) if _entry_numbers(line, c.row)]
    elif c.column is None:
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
        backbone_ok = c.backbone is None or c.backbone in lines[i] or (cap >= 0 and c.backbone in lines[cap])
        if not backbone_ok:
            continue
        if c.side:
            if any(_entry_holds(c, after) for after in _entry_numbers(lines[i], c.row)):
                return None
            continue
        cells = lines[i].split("\t")
        if c.column is not None and c.column >= len(cells):
            continue
        where = cells[c.column] if c.column is not None else lines[i]
        if all(holds(where, n, c.ocr) for n in c.numbers):
            return None
    col = f" column {c.column}" if c.column is not None else ""
    what = "entry" if c.side else "row"
    return f"{what} {c.row!r}{col} of seed {c.seed} {c.table} does not hold {c.numbers} with backbone {c.backbone}"


def citation_problem(c: R.Citation) -> str | None:
    """Why ``c`` does not hold in the texts, or None."""
    if c.notes:  # the seed's section of PAPER-NOTES.md ("## 000 · ...")
        text = (SHARED / "PAPER-NOTES.md").read_text()
        section = re.search(rf"^## {c.notes} .*?(?=^## |\Z)", text, re.M | re.S)
        if section is None:
            return f"PAPER-NOTES.md has no section for seed {c.notes}"
        missing = [n for n in c.numbers if not holds(section.group(), n)]
        return f"{missing} not in PAPER-NOTES.md's section for seed {c.notes}" if missing else None
    if c.repo:
        notes = (SHARED / "PAPER-NOTES.md").read_text().splitlines()
        at = [i for i, line in enumerate(notes) if c.repo in line]
        if not at:
            return f"PAPER-NOTES.md does not name the repository {c.repo}"
        block = " ".join(notes[at[0]:at[0] + 3])
        missing = [n for n in c.numbers if not holds(block, n)]
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
        if c.backbone is not None and not any(c.backbone in lines[i] for i in caps):
            return f"seed {c.seed}'s caption of {c.table} does not name the backbone {c.backbone}; cite a row that does"
        block = " ".join(" ".join(lines[max(0, i - WINDOW):i + WINDOW]) for i in caps)
    if c.derived:  # each number is its expression's value, and the expression's operands are in the text
        if len(c.derived) != len(c.numbers):
            return f"{len(c.numbers)} derived numbers but {len(c.derived)} expressions"
        for n, expr in zip(c.numbers, c.derived):
            operands = NUMBER.findall(expr)
            if abs(eval(expr, {"__builtins__": {}}) - float(n)) > 0.005:  # noqa: S307 - literals only
                return f"{expr} is not {n}"
            if not all(holds(block, x, c.ocr) or holds(" ".join(lines), x, c.ocr) for x in operands):
                return f"the operands of {expr} are not in seed {c.seed}"
        return None
    missing = [n for n in c.numbers if not holds(block, n, c.ocr)]
    return f"{missing} are not in seed {c.seed} {c.table or 'anywhere'}" if missing else None


def row_named_problem(c: R.Citation) -> str | None:
    """A citation of the seed text names the row that holds its numbers, or says why it cannot (``no_row``)."""
    if c.seed is None:  # the authors' repository or PAPER-NOTES: no table
        return None
    if c.row is None and not c.no_row:
        return (f"{c.text()} names no row: give the row the numbers are read from, or say in no_row why none "
                "can be named")
    if c.row is not None and c.no_row:
        return f"{c.text()} names a row and says no row can be named"
    if c.side and c.row is None:
        return f"{c.text()}: a side-by-side entry needs its label (row)"
    return None


def _paper_backbone(notebook: str) -> str | None:
    values = yaml.safe_load((ROOT / "params" / notebook / "paper.yaml").read_text()) or {}
    return values.get("backbone")


def backbone_problem(notebook: str, meta: R.Meta) -> str | None:
    """A cited table's backbone that is not the one the measured models have (the paper.yaml of the notebook
    that trains them: ``meta.models_of``, else the claim's own), unless the claim is a stated proxy."""
    trained_by = meta.models_of or notebook
    ours = _paper_backbone(trained_by)
    for c in meta.citations:
        if c.backbone is None:
            continue
        if R.BACKBONE_IN_TABLES.get(ours) == c.backbone:
            continue
        if meta.evidence == R.PROXY and meta.backbone_proxy:
            continue
        return (f"{notebook}: cites {c.text()} ({c.backbone}) but the models it measures ({trained_by}'s "
                f"paper.yaml) are {ours}; cite the {ours} row, or mark the claim a proxy with its reason "
                "(backbone_proxy)")
    return None


def flag_problem(text: str, seed: str) -> str | None:
    """A command-line flag quoted in a claim's texts (``--nExemplars 5``) that neither the seed text nor
    PAPER-NOTES.md holds with that value right after it."""
    sources = _lines(seed) + (SHARED / "PAPER-NOTES.md").read_text().splitlines()
    for flag, value in FLAG.findall(text):
        found = [line[line.index(flag) + len(flag):] for line in sources if flag in line]
        if not found:
            return f"{flag} is in neither seed {seed} nor PAPER-NOTES.md"
        if value and not any(re.match(rf"[\s:=]*'?{re.escape(value)}", rest) for rest in found):
            return f"{flag} {value}: seed {seed} and PAPER-NOTES.md give {flag} only as {found}"
    return None


def test_every_registered_citation_holds_in_the_seed_text():
    problems = [f"{nb}:{cid}: {p}" for (nb, cid), m in R.REGISTRY.items() for c in m.citations
                if (p := citation_problem(c))]
    assert not problems, "\n".join(problems)


def test_every_citation_of_the_seed_text_names_its_row_or_says_why_not():
    problems = [f"{nb}:{cid}: {p}" for (nb, cid), m in R.REGISTRY.items() for c in m.citations
                if (p := row_named_problem(c))]
    assert not problems, "\n".join(problems)


def test_cited_backbones_match_the_measured_models():
    problems = [p for (nb, _), m in R.REGISTRY.items() if (p := backbone_problem(nb, m))]
    assert not problems, "\n".join(problems)


def test_claims_on_another_notebooks_models_name_that_notebook():
    """08's Table 4 claims add OpTA to the runs of the notebook its paper.yaml names (table4_notebook): the registry
    says so (models_of), so the backbone check reads that notebook's paper.yaml (ResNet-12, not 08's ResNet-18)."""
    from studylib.config import load_params
    from studylib.experiments import opta_before_after as ob
    source = load_params(ob.Params, ob.NOTEBOOK, "paper").table4_notebook
    for m in ("nca", "pn", "mn"):
        meta = R.REGISTRY[(ob.NOTEBOOK, f"t4-opta-helps-{m}")]
        assert meta.models_of == source, (m, meta.models_of)
        # against 05's ResNet-12 the RN18 rows of Tables 1 and 4 are another backbone: a stated proxy, or an error
        assert _paper_backbone(source) != _paper_backbone(ob.NOTEBOOK)
        assert backbone_problem(ob.NOTEBOOK, R.Meta(citations=meta.citations, models_of=source))
        assert backbone_problem(ob.NOTEBOOK, R.Meta(citations=meta.citations)) is None  # 08's own: RN18


def test_quoted_command_line_flags_are_in_the_sources():
    """A flag a claim's texts or its registry note quote (``--nExemplars 5``) is in the seed text or PAPER-NOTES.md
    with that value."""
    problems = []
    for nb in notebook_names():
        if nb[:2] not in R.SEED_OF:
            continue
        for scale in ("smoke", "paper"):
            for c in static_claims(nb, scale):
                texts = (c.claim, c.source, c.paper, c.test, R.meta(nb, c.id, c.expect.kind).note)
                if (p := flag_problem(" ".join(texts), R.SEED_OF[nb[:2]])):
                    problems.append(f"{nb}:{c.id}: {p}")
    assert not problems, "\n".join(sorted(set(problems)))
    assert flag_problem("the code's 5-shot model: --nExemplars 5", "004")  # seed 004 lists --nExemplars: 1
    assert flag_problem("--nExemplars: 1, --save-dir './mini_final_5shot/'", "004") is None


def test_numbers_are_compared_as_numbers():
    """A quoted number is a whole numeric token of the text at the quoted precision (the OCR's lost decimal point
    allowed), not a run of digits inside another number; merged tokens must be named (Citation.ocr)."""
    assert holds("87.82:029 DyCE", "0.29") and holds("8527 x024", "85.27") and holds("approximately 86%", "86%")
    assert holds("0.294", "0.29") and not holds("0.295", "0.29")  # the quoted precision, rounded half up
    for text, number in (("1029", "0.29"), ("10.3", "0.3"), ("186%", "86%"), ("85.271", "5.27"), ("9777", "97.7")):
        old = number.replace(".", "") in text.replace(".", "")  # the former substring test accepted all five
        assert old and not holds(text, number), (text, number)
    assert not holds("75.74 2062 84.93", "0.62") and holds("75.74 2062 84.93", "0.62", (("0.62", "2062"),))
    assert not holds("75.74 2062", "0.62", (("0.62", "3062"),))  # the named token must be in the text
    # Table 6 prints seven sub-tables side by side: both numbers are in the table, but 0.39 is DyCE-FIFO's
    wrong = R.Citation(("87.82", "0.39"), "001", "Table 6", "DyCE", side=True)
    assert citation_problem(wrong) and citation_problem(R.Citation(("87.82", "0.29"), "001", "Table 6", "DyCE",
                                                                   side=True)) is None


def _quoted(notebook: str, claim) -> tuple[set[str], R.Meta]:
    return set(NUMBER.findall(claim.paper)), R.meta(notebook, claim.id, claim.expect.kind)


@pytest.mark.parametrize("notebook", [nb for nb in notebook_names() if nb[:2] in R.SEED_OF])
def test_every_quoted_number_names_its_source(notebook):
    uncited = []
    for scale in ("smoke", "paper"):
        for c in static_claims(notebook, scale):
            numbers, m = _quoted(notebook, c)
            cited = {n for ct in m.citations for n in ct.numbers}
            # derived gains ("+9.6") and percentages of the claim text are not quotes
            missing = {n for n in numbers - cited if not re.search(rf"[+-]{re.escape(n)}", c.paper)}
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
    assert citation_problem(R.Citation(("86.95",), "001", "Table 6", "30%", side=True))
