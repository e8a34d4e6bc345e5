"""The study's page of claims (``figures/claims.md``), the README's "What we found" and the key figures.

``python -m studylib.claims.page`` (``./study claims``) writes them from the saved claims tables: this
machine's (``<cache>/claims/``), else the committed ones (``params/<notebook>/<name>.claims.json``). Every
claim of every notebook appears once, with its kind of evidence (:mod:`studylib.claims.registry`)
and one column per scale: **smoke** (what CI runs), **evidence** (the smoke data with the seeds and training
the verdicts need) and **paper** (the paper's data and protocol, with its data-set variants such as
``paper-cifarfs``). Each saved table is judged again by the function the notebook used
(:meth:`ClaimsTable.judgements`), so a cell shows the notebook's verdict, p and adjusted p; a claim's family is
its own notebook's table, so no other notebook's table changes it.

A cell reads "—" where the claim does not exist at that scale (it is not counted there), "not run" where no
table of that scale's parameter file was saved, "other parameters" for a table made with a ``-p`` override (not
counted), and carries *stale* when the table was made by other code than today's (its code version differs:
counted as not run). A decisive verdict that the scale's committed second run (1 thread against 2 threads,
``benchmarks/results/verdict-stability-<scale>-*.json``, :func:`stability`) does not give again counts as
*inconclusive*: "a verdict is evidence only if another machine gives the same one". ``./study run`` writes its
page to ``out/claims.md`` (``--out``) and never rewrites tracked files.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys
from pathlib import Path
from typing import Any, Iterable

from studylib.claims.power import AFFORDABLE
from studylib.claims.registry import EVIDENCE, PAPER as PAPER_EVIDENCE, SEED_OF, meta
from studylib.claims.store import is_stale, of_params, param_files, save_committed, saved_table, static_claims
from studylib.claims.table import ClaimsTable, _fmt_p, effect_size
from studylib.evaluation.stats import AllOf, Estimate, measured_from_dict
from studylib.evaluation.verdicts import (DECIDE_ALPHA, DEFAULT_DELTA, INCONCLUSIVE, MARGINAL_ALPHA, NOT_REPRODUCED,
                                          NOT_RUN, REPRODUCED, VERDICTS, Claim, Judgement)
from studylib.paths import (SCALES, experiment_module, notebook_names, project_root, resolve_notebook,
                            writable_file)
from studylib.utils import (atomic_write_many, atomic_write_text, figure_bytes, remove_stale_temp_files,
                            run_command)

COLUMNS = ("smoke", "evidence", "paper")  # the page's scale columns (check is wiring, not evidence)
DECISIVE = (REPRODUCED, NOT_REPRODUCED)
SUMMARY_START, SUMMARY_END = "<!-- claims-summary:start -->", "<!-- claims-summary:end -->"
NOT_AT_SCALE = "—"


@dataclasses.dataclass
class Row:
    """One claim of the page in one scale column."""

    notebook: str
    id: str
    kind: str
    status: str  # "judged", "not at this scale", "not run", "other parameters"
    table: str = ""  # the parameter file whose table it comes from
    judgement: Judgement | None = None
    measured: Estimate | Any = None
    measured_text: str = ""
    stale: bool = False
    test: str = ""  # what this scale measures for the claim (its own parameters' text)
    note: str = ""  # for a claim not run: what running it needs (a level claim's seeds)
    unstable: str = ""  # the scale's second run (2 threads) crossed decisive / not decisive: what it read
    unit: float = 100.0  # the claim's unit (100: accuracies and mAP in points)

    @property
    def counted(self) -> bool:
        return self.status != "not at this scale"

    @property
    def verdict(self) -> str:
        """The verdict this row counts as (stale tables and overrides: not run)."""
        if self.status != "judged" or self.stale or self.judgement is None:
            return NOT_RUN
        if self.unstable:
            return INCONCLUSIVE
        return self.judgement.verdict

    @property
    def p_adj(self) -> float | None:
        return self.judgement.p_adj if self.judgement is not None else None

    def estimate(self) -> Estimate | None:
        if isinstance(self.measured, AllOf):
            return self.measured.worst
        return self.measured if isinstance(self.measured, Estimate) else None

    def cell(self) -> str:
        if self.status == "not at this scale":
            return NOT_AT_SCALE
        if self.status == "other parameters":
            return f"other parameters than {self.table}.yaml's (not counted)"
        if self.status == "not run" or self.judgement is None:
            return NOT_RUN + (f" ({self.note})" if self.note else "")
        j = self.judgement
        stats_text = ""
        if j.p is not None:
            test = "" if j.test in ("difference", "non-inferior", "inside") else f"{j.test} test "
            stats_text = f", {test}p = {_fmt_p(j.p)}, p_adj = {_fmt_p(j.p_adj)}"
        where = f" [{self.table}]" if self.table not in COLUMNS else ""
        stale = " *(stale: made by other code; not counted)*" if self.stale else ""
        unstable = f" *(not stable: {self.unstable}; counted as inconclusive)*" if self.unstable else ""
        head = f"{self.measured_text}{stats_text}".lstrip(", ")
        size = self.size()
        return (f"{head} → " if head else "") + f"**{j.label}**{where}{stale}{unstable}" + (
            f" (size: {size})" if size else "")

    def size(self) -> str:
        """The measured effect against the paper's (:func:`~studylib.claims.table.effect_size`); "" where the
        paper gives no effect or the row is not judged."""
        return effect_size(self.notebook, self.id, self.kind, self.measured, self.unit) if self.status == "judged" \
            else ""


# (listing: {notebook: [(claim id, claim)]}, rows: {column: {(notebook, claim id): Row}}, tables: {column:
# {notebook: [(name, saved table)]}})
PageRows = tuple[dict[str, list[tuple[str, Claim]]], dict[str, dict[tuple[str, str], Row]],
                 dict[str, dict[str, list[tuple[str, dict[str, Any]]]]]]


def _judge_column(nb: str, column: str) -> tuple[dict[str, Claim], dict[str, Row], list[tuple[str, dict]]]:
    """The claims of ``nb`` at a scale column (its parameter file and variants) and their rows."""
    listings: dict[str, ClaimsTable] = {}
    for name in param_files(nb, column):
        try:
            t = static_claims(nb, name)
        except Exception as err:  # noqa: BLE001 - a broken parameter file is named, the page still builds
            print(f"claims: {nb} at {name}: cannot list its claims ({err})", file=sys.stderr)
            t = None
        if t is not None:
            listings[name] = t
    claims: dict[str, Claim] = {}
    source: dict[str, str] = {}
    for name, t in listings.items():  # a claim comes from the file where it applies (a data-set variant)
        for c in t:
            if c.id not in claims or (c.applies and not claims[c.id].applies):
                claims[c.id], source[c.id] = c, name
    rows: dict[str, Row] = {}
    used: list[tuple[str, dict]] = []
    notes = _level_notes(nb, listings) if column == "paper" else {}
    judged: dict[str, tuple[dict, dict[str, Judgement], bool, bool]] = {}
    for name in listings:
        saved = saved_table(nb, name)
        if saved is None:
            continue
        ok, stale = of_params(saved, nb, name), is_stale(saved, nb)
        try:
            judgements = ClaimsTable.from_dict(saved, listing=listings[name]).judgements() if ok else {}
        except (TypeError, ValueError) as err:
            if not stale:
                raise
            # a table of older code whose measurements today's claims cannot take (e.g. one number where a
            # claim is now about several effects): its rows read "not run" (stale) until it is re-run
            print(f"claims: {nb} at {name}: a stale table today's rules cannot judge ({err}); re-run it",
                  file=sys.stderr)
            continue
        judged[name] = (saved, judgements, ok, stale)
        if ok:
            used.append((name, saved))
    for cid, c in claims.items():
        name = source[cid]
        if name not in judged:
            rows[cid] = Row(nb, cid, c.expect.kind, "not run", name, test=c.test, note=notes.get(cid, ""))
            continue
        saved, judgements, ok, stale = judged[name]
        entry = saved["by_id"].get(cid)
        if entry is None:
            rows[cid] = Row(nb, cid, c.expect.kind, "not run", name, test=c.test, note=notes.get(cid, ""))
        elif not ok:
            rows[cid] = Row(nb, cid, c.expect.kind, "other parameters", name, test=c.test)
        else:
            measured = measured_from_dict(entry.get("measured"))
            rows[cid] = Row(nb, cid, c.expect.kind, "judged", name, judgements[cid], measured,
                            entry.get("measured_text") or "", stale, c.test, unit=c.unit)
    return claims, rows, used


def _level_notes(nb: str, listings: dict[str, ClaimsTable]) -> dict[str, str]:
    """For the paper-scale claims that our number matches the paper's (``within`` against a quoted ``±``): the
    seeds a perfect reproduction needs to pass (:func:`power.level_seeds`) where the parameter file has fewer."""
    from studylib.claims.power import level_seeds
    from studylib.config import load_params
    out = {}
    for name, t in listings.items():
        family = sum(1 for c in t if c.applies and c.expect.kind != "equal")
        try:
            have = len(load_params(experiment_module(nb).Params, nb, name).seeds)
        except Exception:  # noqa: BLE001 - a schema without seeds
            continue
        for c in t:
            if c.applies and c.expect.kind == "within":
                need = level_seeds(c, family)
                if need is not None and need > have:
                    out[c.id] = (f"a perfect reproduction passes with 80% power only from {need} seeds (the "
                                 f"paper's own episode error, family of {family}); {name}.yaml keeps {have} for "
                                 "their GPU cost (./study list --scale paper)")
    return out


def stability(column: str) -> tuple[Path, dict[tuple[str, str], dict[str, Any]]] | None:
    """The committed second-run comparison of a scale (``benchmarks/verdict_stability.py --json``:
    ``benchmarks/results/verdict-stability-<scale>-<date>.json``): the newest file, and the earlier files it names
    as still holding for the notebooks it does not cover (its ``also``, in order); each notebook's rows come from
    the first of these that covers it (compares it, or names it among those with no second run). Returns the
    newest file and ``{(notebook, claim id): {"first": ..., "second": ..., "file": its file}}`` (each page's
    verdict, label, p and p_adj); None without one."""
    files = sorted((project_root() / "benchmarks" / "results").glob(f"verdict-stability-{column}-*.json"))
    if not files:
        return None
    pairs: dict[tuple[str, str], dict[str, Any]] = {}
    covered: set[str] = set()
    chain, seen = [files[-1]], set()
    while chain:  # the newest file, then the earlier files it says still hold (``also``) for the rest
        path = chain.pop(0)
        if path.name in seen or not path.is_file():
            continue
        seen.add(path.name)
        data = json.loads(path.read_text())
        chain += [path.parent / name for name in data.get("also", [])]
        mine = set(data.get("notebooks") or {r["notebook"] for r in data.get("rows", [])})
        mine |= set(data.get("no_second_run", []))
        for r in data.get("rows", []):
            if r["notebook"] not in covered:
                pairs[(r["notebook"], r["id"])] = {**r, "file": path}
        covered |= mine
    return files[-1], pairs


def _mark_unstable(column: str, rows: dict[tuple[str, str], Row]) -> None:
    """Mark the rows of ``column`` whose second run read them otherwise across the line between decisive and not
    (:attr:`Row.unstable`), in either direction (issue 42): a decisive verdict the second run did not give, or
    an inconclusive one the second run decided. Both count as inconclusive. A row is compared only when the
    file's first page is this very table (same label and p_adj): a table re-run since is not judged by an older
    comparison."""
    found = stability(column)
    if found is None:
        return
    path, pairs = found
    for key, row in rows.items():
        pair = pairs.get(key)
        if pair is None or row.verdict not in DECISIVE + (INCONCLUSIVE,):
            continue
        first, second = pair["first"], pair["second"]
        same = first.get("label") == row.judgement.label and first.get("p_adj") is not None and \
            row.p_adj is not None and math.isclose(first["p_adj"], row.p_adj, rel_tol=1e-9, abs_tol=1e-15)
        if same and second.get("verdict") != row.verdict and (row.verdict in DECISIVE
                                                               or second.get("verdict") in DECISIVE):
            p2 = f", p_adj = {_fmt_p(second['p_adj'])}" if second.get("p_adj") is not None else ""
            where = pair.get("file", path)
            row.unstable = f"{_second_run(where, key[0])} reads {second.get('label') or second.get('verdict')}" \
                           f"{p2} (`benchmarks/results/{where.name}`)"


def _second_run(path: Path, notebook: str = "") -> str:
    """What a stability file's second page was for ``notebook``: what the file says of it (``second_runs``), else
    "the 2-thread run", or the tables committed at an earlier commit on another machine (``second_page:
    git:REV``)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    said = (data.get("second_runs") or {}).get(notebook)
    if said:
        return said
    second = data.get("second_page", "")
    return f"the other machine's run ({second[4:12]})" if second.startswith("git:") else "the 2-thread run"


def page_rows(notebooks: Iterable[str] | None = None) -> PageRows:
    """The listing, the judged rows of every column and the tables they come from (computed once per write)."""
    names = list(notebooks) if notebooks is not None else notebook_names()
    listing: dict[str, list[tuple[str, Claim]]] = {}
    rows: dict[str, dict[tuple[str, str], Row]] = {c: {} for c in COLUMNS}
    tables: dict[str, dict[str, list[tuple[str, dict]]]] = {c: {} for c in COLUMNS}
    for nb in names:
        seen: dict[str, Claim] = {}
        per: dict[str, tuple[dict[str, Claim], dict[str, Row]]] = {}
        for column in COLUMNS:
            claims, crow, used = _judge_column(nb, column)
            per[column] = (claims, crow)
            tables[column][nb] = used
            for cid, c in claims.items():
                seen.setdefault(cid, c)
        if not seen:
            continue
        listing[nb] = list(seen.items())
        for column in COLUMNS:
            claims, crow = per[column]
            for cid, c in seen.items():
                rows[column][(nb, cid)] = crow.get(cid) or Row(nb, cid, c.expect.kind, "not at this scale")
    for column in COLUMNS:
        _mark_unstable(column, rows[column])
    return listing, rows, tables


# -- counts and summaries -----------------------------------------------------------------------------------
def _paper_of(notebook: str) -> str:
    return SEED_OF.get(notebook[:2], "-")


# the papers, by the seed each notebook reproduces (claim_registry.SEED_OF); notebook 90 reproduces none
PAPER_NAMES = {"000": "000 On Episodes (NCA vs PN/MN)", "001": "001 BECLR", "002": "002 SPE",
               "003": "003 Set2Model", "004": "004 InfoPatch", "-": "- your data (notebook 90)"}
KEY_FIGURES = ("verdicts_by_paper.png", "directional_effects.png")  # under figures/key/, by ./study claims


def key_figures_dir() -> Path:
    """``figures/key/``: the few small figures ``./study claims`` makes from the claims tables (tracked)."""
    return project_root() / "figures" / "key"


def _canonical(listing: dict[str, list[tuple[str, Claim]]], rows: dict[tuple[str, str], Row]
               ) -> list[tuple[str, str, Claim, Row, str]]:
    """``(notebook, id, claim, row, evidence)`` of every claim of the column counted once (aliases and claims
    that do not exist at this scale left out)."""
    out = []
    for nb, claims in listing.items():
        for cid, c in claims:
            m = meta(nb, cid, c.expect.kind)
            r = rows[(nb, cid)]
            if not m.counted_once_with and r.counted:
                out.append((nb, cid, c, r, m.evidence))
    return out


def _counts_table(groups: list[tuple[str, dict[str, int]]], extra: str = "") -> list[str]:
    out = [f"| {extra or 'group'} | " + " | ".join(VERDICTS) + " | total |",
           "| --- | " + " | ".join("---" for _ in VERDICTS) + " | --- |"]
    for name, c in groups:
        out.append(f"| {name} | " + " | ".join(str(c.get(v, 0)) for v in VERDICTS) + f" | {sum(c.values())} |")
    return out


def _by_kind(listing: dict[str, list[tuple[str, Claim]]], rows: dict[tuple[str, str], Row]) -> list[str]:
    """Counts of the claims by kind of evidence and verdict (aliases once; only claims of this scale)."""
    counts = {k: {v: 0 for v in VERDICTS} for k in EVIDENCE}
    for _, _, _, r, evidence in _canonical(listing, rows):
        counts[evidence][r.verdict] += 1
    total = {v: sum(counts[k][v] for k in EVIDENCE) for v in VERDICTS}
    return _counts_table([(k, counts[k]) for k in EVIDENCE] + [("all", total)], "kind of evidence")


def _by_paper(listing: dict[str, list[tuple[str, Claim]]], rows: dict[tuple[str, str], Row]) -> list[str]:
    """Counts of the paper claims (aliases once) by paper and verdict."""
    counts: dict[str, dict[str, int]] = {}
    for nb, _, _, r, evidence in _canonical(listing, rows):
        if evidence == PAPER_EVIDENCE:
            counts.setdefault(_paper_of(nb), {v: 0 for v in VERDICTS})[r.verdict] += 1
    return _counts_table([(PAPER_NAMES.get(s, s), counts[s]) for s in sorted(counts, key=lambda k: (k == "-", k))],
                         "paper (paper claims only)")


def data_of(notebook: str, name: str) -> str | None:
    """The data set a notebook's parameter file ``name`` trains on (its ``data`` parameter); None for a notebook
    without one (01: formulas) or a file that does not load. Read once per project root and file in a process."""
    return _data_in(str(project_root()), notebook, name)


@functools.lru_cache(maxsize=None)
def _data_in(root: str, notebook: str, name: str) -> str | None:
    from studylib.config import load_params  # it reads params/ under project_root(), which ``root`` names
    try:
        return getattr(load_params(experiment_module(notebook).Params, notebook, name), "data", None)
    except Exception:  # noqa: BLE001 - a schema without data, or a broken file (named where the page lists it)
        return None


def on_real_data(row: Row) -> bool:
    """Whether a judged row's table trained on a real data set: one studylib reads from files (the Omniglot
    subset, the papers' data), not one it generates (:data:`studylib.data.GENERATED`)."""
    from studylib.data import GENERATED
    data = data_of(row.notebook, row.table) if row.status == "judged" else None
    return data is not None and data not in GENERATED


def _decided(listing: dict[str, list[tuple[str, Claim]]], rows: dict[tuple[str, str], Row]) -> list[str]:
    """The paper claims a column decided, with the data they were decided on, the measured effect, p, adjusted p
    and seeds."""
    out = ["| paper | notebook | claim | data | measured (95% CI over seeds) | size (measured / the paper's effect) | "
           "p / p_adj | verdict |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for nb, cid, c, r, evidence in _canonical(listing, rows):
        if evidence != PAPER_EVIDENCE or r.verdict not in DECISIVE:
            continue
        j = r.judgement
        note = meta(nb, cid, c.expect.kind).why_not_reproduced if r.verdict == NOT_REPRODUCED else ""
        data = data_of(nb, r.table) or "-"
        cells = [PAPER_NAMES.get(_paper_of(nb), "-"), nb, c.claim,
                 data + (" (real)" if on_real_data(r) else " (generated)" if data != "-" else ""),
                 r.measured_text or "-", r.size() or "-",
                 f"{_fmt_p(j.p)} / {_fmt_p(j.p_adj)}" if j.p is not None else "-",
                 f"**{j.label}**" + (f": {note}" if note else "")]
        out.append("| " + " | ".join(x.replace("|", "/") for x in cells) + " |")
    return out if len(out) > 2 else out + ["| - | - | none | - | - | - | - | - |"]


def _marginal(listing: dict[str, list[tuple[str, Claim]]], rows: dict[tuple[str, str], Row]) -> list[str]:
    """The paper claims whose adjusted p lies between the decisive and the marginal level, and the decisive ones
    the 2-thread run did not give again (:attr:`Row.unstable`): leads."""
    out = ["| paper | notebook | claim | measured (95% CI over seeds), p_adj | size (measured / the paper's effect) | "
           "direction |", "| --- | --- | --- | --- | --- | --- |"]
    for nb, cid, c, r, evidence in _canonical(listing, rows):
        j = r.judgement
        if (evidence != PAPER_EVIDENCE or r.status != "judged" or r.stale or j is None
                or not (j.label.endswith("(marginal)") or r.unstable)):
            continue
        e = r.estimate()
        if j.verdict in DECISIVE:  # an unstable decisive verdict: the side its own test decided
            side = "as the paper says" if j.verdict == REPRODUCED else "against the paper"
        else:
            side = ("as the paper says" if e is not None and (e.value > 0) == (c.expect.kind != "less")
                    else "against the paper")
        cells = [PAPER_NAMES.get(_paper_of(nb), "-"), nb, c.claim, f"{r.measured_text}, p_adj = {_fmt_p(j.p_adj)}"
                 + (f" ({'decisive' if j.verdict in DECISIVE else 'not decisive'} in this run, not stable: "
                    f"{r.unstable})" if r.unstable else ""),
                 r.size() or "-", side]
        out.append("| " + " | ".join(x.replace("|", "/") for x in cells) + " |")
    return out if len(out) > 2 else out + ["| - | - | none | - | - | - |"]


VERDICT_WORDS = (
    "**Verdict words.** *reproduced*: the test the claim states decided in the paper's favour (family-adjusted "
    f"p <= {DECIDE_ALPHA:g}). *not reproduced*: it decided against the paper: the effect is *reversed*, shows *no "
    "effect* (the equivalence test, at the adjusted level, places it inside the claim's no-effect band), is worse "
    "than a non-inferiority margin, or a number lies outside the paper's margin. *inconclusive*: measured, but neither outcome is shown (*marginal*: "
    f"{DECIDE_ALPHA:g} < p_adj <= {MARGINAL_ALPHA:g}). *not tested*: this scale cannot test the claim (it needs "
    "the paper's data or another configuration), it ran with one seed, or a regime check failed (the trained "
    "model did not reach the regime the claim is about); the reason is on its row. *not run*: the scale has the "
    "claim but no current table of it (never run here, or made by older code: *stale*). Claims that do not exist "
    "at a scale are not counted there.")


def _rules() -> str:
    return (
        "Verdicts follow `studylib/evaluation/verdicts.py`; each cell is the notebook's own judgement, recomputed "
        "from its saved table by the same function. **Tests that decide both ways.** Each claim is a pair of t-tests "
        "over training seeds (the seed spread floored at each seed's own measurement noise): a directional claim "
        "(\"A beats B\") has the **two-sided** difference test (two-sided because a result on either side is a "
        "finding: \"reversed\") and a no-effect equivalence test against its band ±delta (stated per claim where "
        f"the paper implies one, otherwise ±{DEFAULT_DELTA * 100:g} pt for accuracies); a \"competitive\" claim "
        "is a one-sided non-inferiority test against its margin; a \"matches the paper\" claim an equivalence "
        "test against its margin, with the opposite test for \"outside\". **A family fixed in advance.** A claim's "
        "family is its notebook's table at that scale's parameter file: every claim it lists that applies, "
        "measured or not (unmeasured ones count with p = 1), so no other notebook's table, and nothing run later, "
        "changes a claim's adjusted p. The contrasts of a notebook share runs, so no independence is assumed: "
        "p_adj is Holm's step-down over the family's tests (valid under any dependence), with Shaffer's bound "
        "(at most one of a claim's two null hypotheses is true, so no step multiplies by more than the claims "
        "left; a claim about every one of several effects is an intersection-union test whose tests count "
        "singly). A true effect between 0 and the band can read *reproduced* with few seeds and *no effect* with "
        "many: the band is the claim's smallest meaningful effect. "
        f"**Decisive** at p_adj <= {DECIDE_ALPHA:g} (the stability rule: at 5%, a 1-thread and a 2-thread run "
        "of the study disagreed on many verdicts), and only if the scale's committed second run (another thread "
        "count, or another machine) gives it again (`benchmarks/results/verdict-stability-<scale>-*.json`): a "
        "verdict that crosses the line between decisive and not there, in either direction, is marked *not "
        "stable* and counted as inconclusive. " + VERDICT_WORDS + " Measured effects are in points (percent) "
        "with 95% intervals over training seeds; each training seed is evaluated on episodes of its own (the "
        "methods of a seed share them, so differences are paired). The intervals cover training seeds and the "
        "sampling of episodes from **one fixed test split** per data set (the same test classes for every seed: "
        "on Omniglot the 104 Latin classes), not another choice of test classes. **Kinds of evidence** "
        "(`studylib/claims/registry.py`): paper claim; implementation check (a formula or a count); "
        "proxy (a stated stand-in for the paper's setting); the study's own (no paper makes it, or the seed text "
        "has no source for it); extrapolation (a paper claim tested outside the condition the paper states it "
        "for: shown, not counted as a paper claim). Claims that measure the same thing appear once in the counts; "
        "their other rows say \"alias of\", and a claim whose verdict follows from another's says \"follows\". "
        "**Size beside sign**: where the paper gives its own effect (the two numbers its citations quote, or a "
        "stated difference), a judged directional claim shows the measured effect as a multiple of the paper's, "
        "with the 95% interval over seeds (\"0.89x the paper's +9.60 pts (0.76x to 1.0x)\"); a no-effect band "
        "is half that effect, at most 1 pt. A table counts only when made with its "
        "parameter file itself and by today's code (its code version, `studylib/provenance.py`).")


def summary_markdown(notebooks: Iterable[str] | None = None, rows: PageRows | None = None) -> str:
    """Every claim of every notebook with its kind of evidence and one cell per scale column; counts first."""
    listing, judged, tables = rows or page_rows(notebooks)
    out = ["# Claims of the study", "",
           "Generated by `./study claims` from the saved claims tables (`<cache>/claims/`, else the committed "
           "`params/<notebook>/<name>.claims.json`). Nothing here is typed by hand.", "", _rules(), ""]
    for column in COLUMNS:
        out += [f"## Counts at the {column} scale (claims of that scale, aliases once)", "",
                *_by_kind(listing, judged[column]), ""]
    out += ["**Seeds to decide** (last column): the training seeds at which the claim's verdict test reaches 80% "
            "power at Holm's first-step level, holding the pilot's effect and spread (the evidence table where there "
            "is one, else smoke; `./study power`). A pilot of few seeds underestimates the spread, so these are "
            "optimistic; \"no affordable number\" marks a claim whose pilot effect sits at the edge of its band, "
            f"which no run of up to {AFFORDABLE} seeds can decide.", ""]
    for nb, claims in listing.items():
        seeds = _seeds_to_decide(nb, tables)
        out += [f"## {nb}", "", "| claim | kind | source | paper | test | " + " | ".join(COLUMNS)
                + " | seeds to decide |", "| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in COLUMNS)
                + " | --- |"]
        for cid, c in claims:
            m = meta(nb, cid, c.expect.kind)
            kind = m.evidence + (f"; {'replication' if m.replication else 'alias'} of `{m.alias_of}`"
                                 if m.alias_of else "") + (f"; follows `{m.follows}` (counted once, with it)"
                                                           if m.follows else "")
            source = m.source or c.source
            cites = "; ".join(dict.fromkeys(ct.text() for ct in m.citations))  # each source once
            if cites:
                source += f" [{cites}]"
            # the test as the largest scale that has the claim states it (a claim about d = 512 is described as
            # paper.yaml measures it); a smaller scale's cell says how it measured the claim where that differs
            test = next((r.test for col in reversed(COLUMNS) if (r := judged[col][(nb, cid)]).counted), c.test)
            cells = [c.claim, kind, source, m.paper or c.paper or "-", test,
                     *(judged[col][(nb, cid)].cell() + (f" (tested here as: {judged[col][(nb, cid)].test})"
                                                        if judged[col][(nb, cid)].counted
                                                        and judged[col][(nb, cid)].test != test else "")
                       for col in COLUMNS), seeds.get(cid, "-")]
            out.append("| " + " | ".join(s.replace("|", "/") for s in cells) + " |")
        out.append("")
    return "\n".join(out)


def _seeds_to_decide(nb: str, tables: dict[str, dict[str, list]]) -> dict[str, str]:
    """Each measured claim's seeds to decide from the notebook's pilot: its evidence table, else its smoke one."""
    from studylib.claims.power import needs
    for column in ("evidence", "smoke"):
        for name, saved in tables[column].get(nb, []):
            if name == column:
                return {n.id: f"{n.text()} [{column} pilot, {n.seeds} seeds]"
                        for n in needs(saved, static_claims(nb, name))}
    return {}


def _lead(tables: dict[str, dict[str, list]]) -> str:
    """The column the README leads with: evidence once any evidence table is counted, else smoke."""
    return "evidence" if any(tables["evidence"].values()) else "smoke"


def _scale_sentence(column: str, judged: dict[str, dict[tuple[str, str], Row]], tables: dict) -> str:
    seeds = sorted({e.n_seeds for r in judged[column].values() if r.verdict != NOT_RUN and (e := r.estimate())})
    seeds_text = f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else (str(seeds[0]) if seeds else "no")
    made = [nb for nb, used in tables[column].items() if used]
    stale = sorted({nb for r in judged[column].values() if r.stale for nb in [r.notebook]})
    stale_text = f" Stale tables (made by older code, not counted): {', '.join(stale)}." if stale else ""
    return f"{len(made)} notebooks' tables; {seeds_text} training seeds per estimate.{stale_text}"


def _cost_sentence(used: dict[str, list[tuple[str, dict[str, Any]]]]) -> str:
    """What the counted tables of a scale cost, from their own records (``seconds``: the notebook's run from an
    empty cache, :func:`~studylib.claims.table.provenance`), or "" where none records it."""
    cost = {nb: sum(float(t.get("seconds") or 0) for _, t in tabs) for nb, tabs in used.items() if tabs}
    cost = {nb: s for nb, s in cost.items() if s > 0}
    if not cost:
        return ""
    top = max(cost, key=cost.get)
    return (f" The tables record {sum(cost.values()) / 60:.0f} min of work from an empty cache ({len(cost)} "
            f"notebooks; a run two notebooks share counted in each; the longest, {top}, "
            f"{cost[top] / 60:.0f} min).")


def readme_summary(notebooks: Iterable[str] | None = None, rows: PageRows | None = None) -> str:
    """The README's "What we found": the scale it leads with and why, verdict words, counts by paper and kind,
    the decided and marginal paper claims, the other scales beside, and the key figures."""
    listing, judged, tables = rows or page_rows(notebooks)
    lead = _lead(tables)
    others = [c for c in COLUMNS if c != lead]
    figs = " · ".join(f"[`figures/key/{n}`](figures/key/{n})" for n in KEY_FIGURES)
    where = {
        "smoke": "the **smoke** scale: small generated stand-in data sets embedded in the repository (glyphs and "
                 "synthetic images, not the papers' Omniglot, miniImageNet or ImageNet), CPU-sized networks trained "
                 "for minutes",
        "evidence": "the **evidence** scale: the smoke scale's data and networks (and, for the Omniglot papers, a "
                    "real Omniglot subset split by alphabet), trained long enough to pass each notebook's regime "
                    "checks, with the training seeds a power analysis asks for",
    }[lead]
    cost = _cost_sentence(tables[lead])
    decided_rows = [r for *_, r, e in _canonical(listing, judged[lead])
                    if e == PAPER_EVIDENCE and r.verdict in DECISIVE]
    decided, real = len(decided_rows), sum(1 for r in decided_rows if on_real_data(r))
    few = ("" if decided >= 10 else
           " Little is decided: a claim is decided only when its family-adjusted p reaches 1%, which small effects "
           "need many seeds for; the seeds each claim needs are on the claims page (`./study power`).")
    beside = []
    for col in others:
        beside += [f"**{col.capitalize()} scale.** {_scale_sentence(col, judged, tables)}", "",
                   *_by_kind(listing, judged[col]), ""]
    return "\n".join([
        "## What we found", "",
        f"**Where these verdicts come from:** {where}; {_scale_sentence(lead, judged, tables)}{cost} They say "
        f"whether a paper's effect shows up in this setting, not whether its published numbers hold. {decided} "
        f"paper claims are decided at this scale, {real} of them on real data (a data set read from files, here "
        f"the Omniglot subset; the others on data studylib generates).{few}", "",
        VERDICT_WORDS, "",
        f"**By paper** ({lead} scale; paper claims only, aliases once):", "", *_by_paper(listing, judged[lead]), "",
        f"**Paper claims the {lead} runs decided:**", "", *_decided(listing, judged[lead]), "",
        f"**Marginal** ({DECIDE_ALPHA:g} < p_adj <= {MARGINAL_ALPHA:g}, or decisive in one run but not in the "
        "committed 2-thread run: leads, not findings):", "",
        *_marginal(listing, judged[lead]), "",
        f"**By kind of evidence** ({lead} scale):", "", *_by_kind(listing, judged[lead]), "",
        *beside,
        f"![Verdicts by paper](figures/key/{KEY_FIGURES[0]})", "",
        f"Key figures (made by `./study claims` from the same tables): {figs}. Every claim, with its p and "
        "adjusted p at every scale: [`figures/claims.md`](figures/claims.md) (generated by `./study claims`)."])


def write_key_figures(notebooks: Iterable[str] | None = None, out: Path | None = None,
                      rows: PageRows | None = None) -> list[Path]:
    """Write the key figures (:func:`key_figures`) to ``out`` (default ``figures/key/``), both atomically as one
    change (:func:`studylib.utils.atomic_write_many`)."""
    out = out or key_figures_dir()
    files = {out / name: data for name, data in key_figures(notebooks, rows).items()}
    remove_stale_temp_files(out)
    atomic_write_many(files)
    return list(files)


def key_figures(notebooks: Iterable[str] | None = None, rows: PageRows | None = None) -> dict[str, bytes]:
    """``{name: PNG bytes}`` of ``verdicts_by_paper.png`` (the verdicts of every claim of the README's lead
    scale, by paper) and ``directional_effects.png`` (every measured directional claim's effect toward the paper
    divided by the half-width of its 95% interval over seeds, by paper: beyond ±1 the interval excludes 0). Small
    PNGs (about 100 dpi) without timestamps, so re-running on unchanged tables changes nothing. Drawn in memory:
    nothing is written here."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    listing, judged, tables = rows or page_rows(notebooks)
    lead = _lead(tables)
    canon = _canonical(listing, judged[lead])
    figures: dict[str, bytes] = {}
    papers = sorted({_paper_of(nb) for nb, *_ in canon}, key=lambda k: (k == "-", k))
    colours = {"reproduced": "#2a9d8f", "not reproduced": "#e76f51", "inconclusive": "#e9c46a",
               "not tested": "#a8a8a8", "not run": "#dddddd"}
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(papers) + 1.4), dpi=100)
    left = [0] * len(papers)
    for v in VERDICTS:
        n = [sum(1 for nb, _, _, r, _ in canon if _paper_of(nb) == p and r.verdict == v) for p in papers]
        ax.barh(range(len(papers)), n, left=left, color=colours.get(v, "#888888"), label=v)
        left = [a + b for a, b in zip(left, n)]
    ax.set_yticks(range(len(papers)), [PAPER_NAMES.get(p, p) for p in papers])
    ax.invert_yaxis()
    ax.set_xlabel("claims (aliases once)")
    ax.set_title(f"Verdicts by paper, {lead} scale", fontsize=9)
    ax.legend(ncol=3, fontsize=7, loc="lower right")
    fig.tight_layout()
    figures[KEY_FIGURES[0]] = figure_bytes(fig, KEY_FIGURES[0], metadata={"Software": None})
    plt.close(fig)
    pts = []
    for nb, cid, c, r, _ in canon:
        e = r.estimate()
        if c.expect.kind in ("greater", "less") and e is not None and e.ci95 > 0 and math.isfinite(e.value):
            sign = 1 if c.expect.kind == "greater" else -1
            pts.append((_paper_of(nb), sign * e.value / e.ci95, r.verdict))
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(papers) + 1.4), dpi=100)
    for i, p in enumerate(papers):
        xs = [min(max(z, -8), 8) for q, z, _ in pts if q == p]
        cs = [colours.get(v, "#888888") for q, _, v in pts if q == p]
        ax.scatter(xs, [i + 0.25 * ((k % 5) - 2) / 2 for k in range(len(xs))], c=cs, s=14, edgecolors="none")
    for x in (-1, 1):
        ax.axvline(x, color="#555555", lw=0.6, ls="--")
    ax.axvline(0, color="#000000", lw=0.6)
    for v in VERDICTS[:4]:
        ax.scatter([], [], c=colours[v], s=14, label=v)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_yticks(range(len(papers)), [PAPER_NAMES.get(p, p) for p in papers])
    ax.invert_yaxis()
    ax.set_xlabel("effect toward the paper / half-width of its 95% CI over seeds (clipped at ±8)", fontsize=8)
    ax.set_title(f"Directional claims, {lead} scale: beyond +1 the CI excludes 0 the paper's way", fontsize=9)
    fig.tight_layout()
    figures[KEY_FIGURES[1]] = figure_bytes(fig, KEY_FIGURES[1], metadata={"Software": None})
    plt.close(fig)
    return figures


def write_summary(path: str | Path | None = None, readme: bool | None = None) -> Path:
    """Write the page (default: the tracked ``figures/claims.md``, whose README section and key figures are then
    rewritten too; a run writes ``out/claims.md`` instead and leaves the tracked files alone).

    Everything is computed first and written as one change (:func:`studylib.utils.atomic_write_many`): an
    interrupt or an error leaves every file as it was (or, once the renames have begun, all of them new), never
    a half-written figure; temporary files of killed writers are removed first."""
    tracked = project_root() / "figures" / "claims.md"
    path = Path(path) if path is not None else tracked
    rows = page_rows()
    files = {path: (summary_markdown(rows=rows) + "\n").encode("utf-8")}
    if readme if readme is not None else path.resolve() == tracked.resolve():
        files.update({key_figures_dir() / name: data for name, data in key_figures(rows=rows).items()})
        readme_path = project_root() / "README.md"
        files[readme_path] = readme_text(readme_path, rows).encode("utf-8")
    for folder in {p.parent for p in files}:
        remove_stale_temp_files(folder)
    atomic_write_many(files)
    return path


def readme_text(readme: Path, rows: PageRows | None = None) -> str:
    """The README's text with the part between its ``claims-summary`` markers replaced by :func:`readme_summary`."""
    text = readme.read_text()
    if SUMMARY_START not in text or SUMMARY_END not in text:
        raise ValueError(f"{readme} has no {SUMMARY_START} ... {SUMMARY_END} markers to write the summary between")
    head, rest = text.split(SUMMARY_START, 1)
    _, tail = rest.split(SUMMARY_END, 1)
    return f"{head}{SUMMARY_START}\n{readme_summary(rows=rows)}\n{SUMMARY_END}{tail}"


def write_readme_summary(readme: Path | None = None, rows: PageRows | None = None) -> Path:
    """Replace the text between the README's ``claims-summary`` markers with :func:`readme_summary`."""
    readme = readme or project_root() / "README.md"
    atomic_write_text(readme, readme_text(readme, rows))
    return readme


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="./study claims",
                                 description="Write the study's page of claims, or commit a scale's tables.")
    ap.add_argument("--out", help="write the page here instead of the tracked figures/claims.md (and README)")
    ap.add_argument("--save", metavar="SCALE", help="copy <cache>/claims/NB/NAME.json to params/NB/NAME.claims.json "
                    "for the notebooks named (NAME: the scale's parameter file and its variants), then rebuild the "
                    "tracked page")
    ap.add_argument("notebooks", nargs="*")
    args = ap.parse_args(argv)
    if args.notebooks and not args.save:
        ap.error("notebooks are named only with --save")
    try:  # every argument checked before the work (the page takes seconds; a bad --out used to fail after it)
        out = writable_file(args.out, "--out", make_folder=True) if args.out is not None else None
        if args.save:
            if args.save not in SCALES:
                raise ValueError(f"--save {args.save}: not a scale; give one of {', '.join(SCALES)}, e.g. --save "
                                 f"evidence 00_quickstart")
            names = [resolve_notebook(n) for n in args.notebooks]
    except ValueError as err:
        print(f"claims: {err}", file=sys.stderr)
        return 2
    if args.save:
        try:
            written = save_committed(args.save, names)
        except ValueError as err:  # a missing, overridden or stale table: the message says what to run
            print(f"claims: {err}", file=sys.stderr)
            return 1
        for dst in written:
            print(f"claims: wrote {dst}")
    print(f"claims: wrote {write_summary(out)}")
    return 0


if __name__ == "__main__":
    run_command(main, "claims")
