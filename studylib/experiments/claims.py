"""Claims tables: every notebook's conclusion, computed from its runs, and the study's one page of claims.

Each experiment module defines ``claims(p, results=None) -> ClaimsTable``: the paper's claims the notebook
tests, built from the parameters alone (so the list is the same on every machine), with the measured
:class:`~studylib.evaluation.stats.Estimate` attached when ``results`` are given. Verdicts come from the rules
of :mod:`studylib.evaluation.verdicts`. In the notebook::

    table = ex.claims(P, results)
    print(table.checked())        # NBVAL_CHECK_OUTPUT: the claims and their rules (machine-independent)
    table.show()                  # measured effects and verdicts (not compared by nbval)
    table.save()                  # <cache>/claims/<notebook>/<scale>.json, read by the summary page

``python -m studylib.experiments.claims`` (``./study claims``) writes the tracked ``figures/claims.md`` and the
README's "What we found": every claim of every notebook (the ids of each scale's own parameters) with its kind
of evidence (:mod:`studylib.experiments.claim_registry`), its smoke verdict and a paper-scale column that fills
once a paper-scale table made with ``paper.yaml`` itself is saved (``./study claims --save paper NB`` commits
it as ``params/<nb>/paper.claims.json``). Directional verdicts are re-judged from the stored per-seed values
with a Benjamini-Hochberg correction over each scale's directional claims. ``./study run`` writes its page to
``out/claims.md`` (``--out``) and never rewrites tracked files.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import json
import sys
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from studylib.evaluation.stats import Estimate, bh_qvalues, over_seeds, p_value
from studylib.evaluation.verdicts import NOT_RUN, NOT_TESTED, VERDICTS, Claim, Expectation, judge, with_fdr
from studylib.experiments.claim_registry import EVIDENCE, PAPER as PAPER_EVIDENCE, meta
from studylib.paths import check_scale, notebook_names, project_root
from studylib.utils import atomic_write_json, atomic_write_text, default_cache_dir

pd.set_option("display.max_colwidth", 120)


def claims_dir() -> Path:
    return default_cache_dir() / "claims"


class ClaimsTable:
    """The claims one notebook tests at one scale (see the module docstring)."""

    def __init__(self, notebook: str, scale: str, claims: Iterable[Claim]) -> None:
        self.notebook = notebook
        self.scale = check_scale(scale)
        self.claims = list(claims)
        ids = [c.id for c in self.claims]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"claim ids must be unique within {notebook}; repeated: {', '.join(dup)}")
        if self.scale == "check":
            self.claims = self._with_paper_ids()

    def _with_paper_ids(self) -> list[Claim]:
        """At check scale: the paper scale's claims first (a check run carries the paper ids; those the cut
        configuration does not produce, e.g. a batch size it leaves out, are "not tested"), then the check
        run's own claims that the paper scale does not have."""
        try:
            paper = static_claims(self.notebook, "paper")
        except Exception:  # noqa: BLE001 - a notebook without paper.yaml (a user's) keeps its own claims
            return self.claims
        if paper is None:
            return self.claims
        own = {c.id: c for c in self.claims}
        merged = [own.pop(c.id, None) or dataclasses.replace(
            c, measured=None, applies=False,
            why_not="the check scale cuts this configuration (its own rows below test the wiring)")
            for c in paper]
        return merged + list(own.values())

    def __getitem__(self, claim_id: str) -> Claim:
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(f"{self.notebook} has no claim {claim_id!r}; it has {', '.join(c.id for c in self.claims)}")

    def __iter__(self):
        return iter(self.claims)

    def __len__(self) -> int:
        return len(self.claims)

    def measure(self, claim_id: str, value: Any) -> None:
        """Attach a measurement (an Estimate, or the value of an ``equal`` claim)."""
        self[claim_id].measured = value

    # -- views ----------------------------------------------------------------------------------------------
    def checked(self) -> str:
        """The machine-independent part: which claims are tested, where the paper makes them, and the rule."""
        rows = [{"id": c.id, "source": c.source, "claim": c.claim, "paper": c.paper, "test": c.test,
                 "rule": c.expect.rule(c.unit) if c.applies else f"not tested here: {c.why_not}"}
                for c in self.claims]
        return pd.DataFrame(rows).to_string(index=False)

    def frame(self) -> pd.DataFrame:
        """Measured effects with their 95% intervals over seeds, and the computed verdicts."""
        return pd.DataFrame([{"id": c.id, "source": c.source, "claim": c.claim, "paper": c.paper,
                              "measured": c.measured_text(), "verdict": c.verdict, "why": c.reason}
                             for c in self.claims])

    def counts(self) -> dict[str, int]:
        out = {v: 0 for v in VERDICTS}
        for c in self.claims:
            out[c.verdict] += 1
        return {k: n for k, n in out.items() if n}

    def conclusion(self) -> str:
        """A markdown summary generated from the verdicts (the notebook displays it; no number is typed)."""
        lines = [f"**{self.notebook}, {self.scale} scale:** " + ", ".join(f"{n} {v}" for v, n in self.counts().items())
                 + f" of {len(self.claims)} claims."]
        for c in self.claims:
            lines.append(f"- *{c.source}*: {c.claim} — measured {c.measured_text() or 'nothing'} → "
                         f"**{c.verdict}** ({c.reason}).")
        return "\n".join(lines)

    def show(self) -> None:
        """Display the table and its conclusion in a notebook (plain text elsewhere)."""
        try:
            from IPython.display import Markdown, display
            display(self.frame())
            display(Markdown(self.conclusion()))
        except ImportError:  # pragma: no cover - IPython is a dependency of the notebooks
            print(self.frame().to_string(index=False))
            print(self.conclusion())

    # -- persistence ----------------------------------------------------------------------------------------
    def as_dict(self) -> dict[str, Any]:
        return {"notebook": self.notebook, "scale": self.scale, "claims": [
            {"id": c.id, "claim": c.claim, "source": c.source, "paper": c.paper, "test": c.test,
             "rule": c.expect.rule(c.unit), "kind": c.expect.kind,
             "measured": c.measured.as_dict() if isinstance(c.measured, Estimate) else c.measured,
             "measured_text": c.measured_text(), "verdict": c.verdict, "why": c.reason} for c in self.claims]}

    def save(self, params: Any = None) -> Path:
        """Write the table to ``<cache>/claims/<notebook>/<scale>.json`` (atomically), with the machine it ran
        on (``made_on``) and the hash of the parameters it was made with (``params``, default: those the
        notebook validated in this process), so the page marks a row "paper" only for ``paper.yaml``'s own."""
        from studylib.config import current_params
        from studylib.experiments.reference import made_on, params_hash
        params = params if params is not None else current_params()
        data = self.as_dict()
        data["params_hash"] = params_hash(params) if dataclasses.is_dataclass(params) else None
        data["made_on"] = made_on()
        path = claims_dir() / self.notebook / f"{self.scale}.json"
        atomic_write_json(path, data)
        return path


# -- the study's page of claims -------------------------------------------------------------------------------
def experiment_module(notebook: str) -> Any:
    """The experiment module of a notebook: ``NN_name`` -> ``studylib.experiments.name``."""
    return importlib.import_module(f"studylib.experiments.{notebook.split('_', 1)[1]}")


_STATIC: dict[tuple[Any, ...], ClaimsTable | None] = {}


def static_claims(notebook: str, scale: str = "smoke") -> ClaimsTable | None:
    """The claims a notebook tests at ``scale``, from ``params/<notebook>/<scale>.yaml`` (the smoke scale: the
    schema's defaults); None if its module defines no ``claims``.

    Some listings compute formulas (01's Table 1 counts: seconds), so a listing is kept for the process, keyed
    by the notebook, scale, the parameter file's text and the ``claims`` function; each call returns a copy
    (a caller may measure into it)."""
    import copy
    module = experiment_module(notebook)
    if not hasattr(module, "claims"):
        return None
    path = project_root() / "params" / notebook / f"{scale}.yaml"
    key = (notebook, scale, path.read_text() if scale != "smoke" and path.is_file() else None, module.claims,
           module.Params)
    if key not in _STATIC:
        if scale == "smoke":
            _STATIC[key] = module.claims(module.Params())
        else:
            from studylib.config import load_params
            _STATIC[key] = module.claims(load_params(module.Params, notebook, scale))
    return copy.deepcopy(_STATIC[key])


def scale_params_hash(notebook: str, scale: str) -> str | None:
    """Hash of ``params/<notebook>/<scale>.yaml`` as validated (None when the file is missing)."""
    from studylib.config import load_params
    from studylib.experiments.reference import params_hash
    module = experiment_module(notebook)
    path = project_root() / "params" / notebook / f"{scale}.yaml"
    if not path.is_file():
        return None
    return params_hash(module.Params() if scale == "smoke" else load_params(module.Params, notebook, scale))


def committed_claims_path(notebook: str, scale: str) -> Path:
    """``params/<notebook>/<scale>.claims.json``: the table of the run that made the committed reference
    (written by ``./study reference``; at paper scale by ``./study claims --save paper NB``), used when this
    machine has not run the notebook."""
    return project_root() / "params" / notebook / f"{scale}.claims.json"


def _load(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        data["by_id"] = {c["id"]: c for c in data["claims"]}
        return data
    except (ValueError, KeyError, TypeError) as err:  # a damaged file is named, not trusted
        print(f"claims: ignoring unreadable {path} ({err}); re-run the notebook to rewrite it", file=sys.stderr)
        return None


def _saved_table(notebook: str, scale: str) -> dict[str, Any] | None:
    """The saved table of ``notebook`` at ``scale``: this machine's run, else the committed one (``from``
    says which)."""
    for where, path in (("this machine", claims_dir() / notebook / f"{scale}.json"),
                        ("committed", committed_claims_path(notebook, scale))):
        table = _load(path)
        if table is not None:
            table["from"] = where
            return table
    return None


def _saved(notebook: str, scale: str) -> dict[str, dict[str, Any]]:
    table = _saved_table(notebook, scale)
    return table["by_id"] if table else {}


def _of_scale(table: dict[str, Any] | None, notebook: str, scale: str) -> bool:
    """Whether a saved table was made with ``params/<notebook>/<scale>.yaml`` itself (not a ``-p`` override).
    Smoke tables made before the hash was recorded are the committed reference runs and count as smoke."""
    if table is None:
        return False
    h = table.get("params_hash")
    if h is None:
        return scale == "smoke"
    return h == scale_params_hash(notebook, scale)


# -- the study's page of claims -------------------------------------------------------------------------------
SCALES = ("smoke", "paper")
DIRECTIONAL = ("greater", "less")
DECISIVE = ("reproduced", "not reproduced")
SUMMARY_START, SUMMARY_END = "<!-- claims-summary:start -->", "<!-- claims-summary:end -->"


@dataclasses.dataclass
class Row:
    """One claim of the page at one scale, re-judged from its stored per-seed values."""

    notebook: str
    id: str
    kind: str  # the rule: greater, less, within, equal
    saved: dict[str, Any] | None
    note: str = ""  # why the saved table does not count ("other parameters")
    p: float | None = None
    q: float | None = None
    verdict: str = NOT_RUN
    why: str = ""
    expect: Expectation | None = None  # the claim's rule (a ``within`` claim's margin), for re-judging

    def estimate(self) -> Estimate | None:
        m = self.saved.get("measured") if self.saved else None
        if not (isinstance(m, dict) and "seeds" in m):
            return None
        est = Estimate.from_dict(m)
        if est.n_seeds < 2:
            return est
        # re-judged under today's rule (the episode-error floor of the spread), whatever rule stored the table
        return over_seeds(est.seeds, [est.episode_ci95] * est.n_seeds, est.episodes)

    def cell(self) -> str:
        if self.note:
            return self.note
        if not self.saved:
            return NOT_RUN
        text = f"**{self.verdict}**"
        stats_text = ""
        if self.p is not None:
            stats_text = f", p = {_fmt_p(self.p)}" + (f", q = {_fmt_p(self.q)}" if self.q is not None else "")
        measured = self.saved.get("measured_text") or ""
        return f"{measured}{stats_text} → {text}" if measured or stats_text else text


# (listing: {notebook: [(claim id, claim)]}, judged: {scale: {(notebook, claim id): Row}})
PageRows = tuple[dict[str, list[tuple[str, Claim]]], dict[str, dict[tuple[str, str], Row]]]


def _fmt_p(x: float) -> str:
    return f"{x:.3g}" if x >= 0.001 else f"{x:.1e}"


def _judge_rows(rows: list[Row]) -> None:
    """p-values, Benjamini-Hochberg q-values over the family of measured directional rows of one scale, and
    the verdicts: a decisive directional verdict needs ``q <= FDR_ALPHA`` besides the rules of verdicts.py;
    ``within`` claims are re-judged by their rule (the 99% interval); ``equal`` ones keep their stored verdict."""
    family = []
    for r in rows:
        if not r.saved or r.note:
            continue
        r.verdict, r.why = r.saved.get("verdict", NOT_RUN), r.saved.get("why", "")
        est = r.estimate()
        if r.kind in DIRECTIONAL and est is not None and r.verdict != NOT_TESTED:
            r.verdict, r.why = judge(Expectation(r.kind), est)
            r.p = p_value(est)
            if r.p is not None:
                family.append(r)
        elif r.kind == "within" and r.expect is not None and est is not None and r.verdict != NOT_TESTED:
            r.verdict, r.why = judge(r.expect, est)  # today's rule (the 99% interval), whatever stored it
    for r, q in zip(family, bh_qvalues([r.p for r in family])):
        r.q = q
    for r in rows:
        if r.kind in DIRECTIONAL and r.saved and not r.note and r.estimate() is not None:
            r.verdict, r.why = with_fdr(r.verdict, r.why, r.q)


def _page_rows(names: list[str]) -> PageRows:
    """The page's rows of each notebook (each scale's own claim ids, smoke first) and each scale's judged rows."""
    listing: dict[str, list[tuple[str, Claim]]] = {}
    judged: dict[str, dict[tuple[str, str], Row]] = {s: {} for s in SCALES}
    for nb in names:
        tables = {}
        for scale in SCALES:
            try:
                t = static_claims(nb, scale)
            except Exception as err:  # noqa: BLE001 - a broken paper.yaml is named, the page still builds
                print(f"claims: {nb} at {scale} scale: cannot list its claims ({err})", file=sys.stderr)
                t = None
            if t is not None:
                tables[scale] = t
        if not tables:
            continue
        seen: dict[str, Claim] = {}
        for scale in SCALES:
            for c in tables.get(scale, []):
                seen.setdefault(c.id, c)
        listing[nb] = list(seen.items())
        for scale in SCALES:
            saved = _saved_table(nb, scale)
            ok = _of_scale(saved, nb, scale)
            for cid, c in seen.items():
                entry = saved["by_id"].get(cid) if saved else None
                note = "" if ok or entry is None else f"other parameters than {scale}.yaml's (not counted)"
                judged[scale][(nb, cid)] = Row(nb, cid, c.expect.kind, entry, note, expect=c.expect)
    for scale in SCALES:
        _judge_rows(list(judged[scale].values()))
    return listing, judged


def _headline(listing: dict[str, list[tuple[str, Claim]]], rows: dict[tuple[str, str], Row]) -> list[str]:
    """Counts of the claims by kind of evidence and smoke verdict (aliases counted once, as their canonical)."""
    counts = {k: {v: 0 for v in VERDICTS} for k in EVIDENCE}
    for nb, claims in listing.items():
        for cid, c in claims:
            m = meta(nb, cid, c.expect.kind)
            if m.alias_of:
                continue
            counts[m.evidence][rows[(nb, cid)].verdict] += 1
    out = ["| kind of evidence | " + " | ".join(VERDICTS) + " | total |",
           "| --- | " + " | ".join("---" for _ in VERDICTS) + " | --- |"]
    for k in EVIDENCE:
        out.append(f"| {k} | " + " | ".join(str(counts[k][v]) for v in VERDICTS) + f" | {sum(counts[k].values())} |")
    total = {v: sum(counts[k][v] for k in EVIDENCE) for v in VERDICTS}
    out.append("| all | " + " | ".join(str(total[v]) for v in VERDICTS) + f" | {sum(total.values())} |")
    return out


_RULES = ("Verdicts follow `studylib/evaluation/verdicts.py`, re-judged here from the stored per-seed values. "
          "**Multiplicity:** every directional claim (\"A beats B\") shows the p-value of the two-sided t-test "
          "over training seeds behind its 95% interval and its Benjamini-Hochberg q-value over all measured "
          "directional claims of that scale (every notebook together, aliases included); \"reproduced\" and "
          "\"not reproduced\" also need q <= 0.05 (a 5% false-discovery rate), else the claim is "
          "inconclusive. **Marginal effects:** a verdict is evidence only if another machine gives the same "
          "one, and at 3 seeds nearly every directional verdict decided at 0.01 < q <= 0.05 flipped between a "
          "1-thread and a 2-thread run of every notebook (`benchmarks/verdict_stability.py`); so a decisive "
          "directional verdict needs q <= 0.01 (between 0.01 and 0.05 it reads \"inconclusive (marginal)\"), "
          "a \"within\" claim its 99% interval clear of the margin, and no seed spread counts below the noise "
          "of the seeds' own episodes. \"Equal\" claims are exact. Measured effects are in points "
          "(percent) with 95% intervals over training seeds; each training seed is evaluated on episodes of its "
          "own (the methods of a seed share them, so differences are paired), so the intervals carry both the "
          "training and the episode-sampling noise. **Kinds of evidence** (`studylib/experiments/"
          "claim_registry.py`): paper claim; implementation check (a formula or a count); proxy (a stated "
          "stand-in for the paper's setting); the study's own. Claims that measure the same thing appear once "
          "in the counts; their other rows say \"alias of\". Rows come from each scale's own parameters; a "
          "paper-scale table counts only when made with `params/<notebook>/paper.yaml` itself.")


def page_rows(notebooks: Iterable[str] | None = None) -> PageRows:
    """The listing and judged rows every generated text and figure is made from (computed once per write: the
    static claims of some notebooks compute formulas)."""
    return _page_rows(list(notebooks) if notebooks is not None else notebook_names())


def summary_markdown(notebooks: Iterable[str] | None = None, rows: PageRows | None = None) -> str:
    """Every claim of every notebook: its kind of evidence, its smoke verdict and (once run with paper.yaml)
    its paper-scale verdict, each with p and q; headline counts first (``rows``: :func:`page_rows`)."""
    listing, judged = rows or page_rows(notebooks)
    out = ["# Claims of the study", "",
           "Generated by `./study claims` from the saved claims tables (`<cache>/claims/`, else the committed "
           "`params/<notebook>/{smoke,paper}.claims.json`). Nothing here is typed by hand.", "", _RULES, "",
           "## Headline: claims by kind of evidence and smoke-scale verdict", "",
           *_headline(listing, judged["smoke"]), ""]
    for nb, claims in listing.items():
        out += [f"## {nb}", "", "| claim | kind | source | paper | test | smoke | paper scale |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for cid, c in claims:
            m = meta(nb, cid, c.expect.kind)
            kind = m.evidence + (f"; alias of `{m.alias_of}`" if m.alias_of else "")
            source = m.source or c.source
            cites = "; ".join(dict.fromkeys(ct.text() for ct in m.citations))  # each source once
            if cites:
                source += f" [{cites}]"
            cells = [c.claim, kind, source, m.paper or c.paper or "-", c.test,
                     judged["smoke"][(nb, cid)].cell(), judged["paper"][(nb, cid)].cell()]
            out.append("| " + " | ".join(s.replace("|", "/") for s in cells) + " |")
        out.append("")
    return "\n".join(out)


# the papers, by the seed each notebook reproduces (claim_registry.SEED_OF); notebook 90 reproduces none
PAPER_NAMES = {"000": "000 On Episodes (NCA vs PN/MN)", "001": "001 BECLR", "002": "002 SPE",
               "003": "003 Set2Model", "004": "004 InfoPatch", "-": "- your data (notebook 90)"}
KEY_FIGURES = ("verdicts_by_paper.png", "directional_effects.png")  # under figures/key/, by ./study claims


def key_figures_dir() -> Path:
    """``figures/key/``: the few small figures ``./study claims`` makes from the claims tables (tracked)."""
    return project_root() / "figures" / "key"


def _paper_of(notebook: str) -> str:
    from studylib.experiments.claim_registry import SEED_OF
    return SEED_OF.get(notebook[:2], "-")


def _canonical(listing: dict[str, list[tuple[str, Claim]]], rows: dict[tuple[str, str], Row]
               ) -> list[tuple[str, str, Claim, Row, str]]:
    """``(notebook, id, claim, row, evidence)`` of every claim counted once (aliases left out)."""
    out = []
    for nb, claims in listing.items():
        for cid, c in claims:
            m = meta(nb, cid, c.expect.kind)
            if not m.alias_of:
                out.append((nb, cid, c, rows[(nb, cid)], m.evidence))
    return out


def _by_paper(listing: dict[str, list[tuple[str, Claim]]], rows: dict[tuple[str, str], Row]) -> list[str]:
    """Counts of the claims (aliases once) by paper and smoke verdict, with how many are the paper's own."""
    counts: dict[str, dict[str, int]] = {}
    own: dict[str, int] = {}
    for nb, _, _, row, evidence in _canonical(listing, rows):
        seed = _paper_of(nb)
        counts.setdefault(seed, {v: 0 for v in VERDICTS})[row.verdict] += 1
        own[seed] = own.get(seed, 0) + (evidence == PAPER_EVIDENCE)
    out = ["| paper | " + " | ".join(VERDICTS) + " | total | of which paper claims |",
           "| --- | " + " | ".join("---" for _ in VERDICTS) + " | --- | --- |"]
    for seed in sorted(counts, key=lambda k: (k == "-", k)):
        c = counts[seed]
        out.append(f"| {PAPER_NAMES.get(seed, seed)} | " + " | ".join(str(c[v]) for v in VERDICTS)
                   + f" | {sum(c.values())} | {own[seed]} |")
    return out


def _headline_claims(listing: dict[str, list[tuple[str, Claim]]], rows: dict[tuple[str, str], Row]) -> list[str]:
    """The paper claims the smoke runs decided (reproduced or not reproduced), with their measured effects."""
    out = ["| paper | notebook | claim | measured (95% CI over seeds) | verdict |", "| --- | --- | --- | --- | --- |"]
    for nb, cid, c, row, evidence in _canonical(listing, rows):
        if evidence != PAPER_EVIDENCE or row.verdict not in DECISIVE:
            continue
        measured = (row.saved or {}).get("measured_text") or "-"
        q = f", q = {_fmt_p(row.q)}" if row.q is not None else ""
        cells = [PAPER_NAMES.get(_paper_of(nb), "-"), nb, c.claim, f"{measured}{q}", f"**{row.verdict}**"]
        out.append("| " + " | ".join(x.replace("|", "/") for x in cells) + " |")
    return out


def _marginal_claims(listing: dict[str, list[tuple[str, Claim]]], rows: dict[tuple[str, str], Row]) -> list[str]:
    """The paper claims whose direction held at 5% false discovery but not under the stability rule
    (``0.01 < q <= 0.05``): the leads a larger run should settle."""
    out = ["| paper | notebook | claim | measured (95% CI over seeds) | direction |", "| --- | --- | --- | --- | --- |"]
    for nb, cid, c, row, evidence in _canonical(listing, rows):
        if evidence != PAPER_EVIDENCE or not row.why.startswith("marginal") or row.q is None:
            continue
        measured = (row.saved or {}).get("measured_text") or "-"
        side = "as the paper says" if (row.estimate() is not None and (row.estimate().value > 0) ==
                                       (row.kind == "greater")) else "against the paper"
        cells = [PAPER_NAMES.get(_paper_of(nb), "-"), nb, c.claim, f"{measured}, q = {_fmt_p(row.q)}", side]
        out.append("| " + " | ".join(x.replace("|", "/") for x in cells) + " |")
    return out if len(out) > 2 else out + ["| - | - | none | - | - |"]


def readme_summary(notebooks: Iterable[str] | None = None, rows: PageRows | None = None) -> str:
    """The README's "What we found": which scale and data the verdicts come from, the counts by paper and by
    kind of evidence, the paper claims the runs decided, and the key figures (:func:`write_key_figures`);
    ``rows``: :func:`page_rows`."""
    listing, judged = rows or page_rows(notebooks)
    smoke = {nb: _saved_table(nb, "smoke") for nb in listing}
    committed = sorted(nb for nb, t in smoke.items() if t and t["from"] == "committed")
    seeds = sorted({len(e.seeds) for r in judged["smoke"].values() if (e := r.estimate()) is not None})
    paper = sorted(nb for nb in listing if committed_claims_path(nb, "paper").is_file())
    seeds_text = f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else (str(seeds[0]) if seeds else "no")
    figs = " · ".join(f"[`figures/key/{n}`](figures/key/{n})" for n in KEY_FIGURES)
    return "\n".join([
        "## What we found", "",
        f"**Where these verdicts come from:** the **smoke** scale only: small generated stand-in data sets "
        f"embedded in the repository (glyphs and synthetic images, not the papers' Omniglot, miniImageNet or "
        f"ImageNet), CPU-sized networks trained for minutes, {seeds_text} training seeds per estimate. They say "
        f"whether a paper's effect shows up in this small setting, not whether its published numbers hold. "
        f"{len(committed)} of {len(smoke)} notebooks' tables are the committed reference runs "
        "(`params/<notebook>/smoke.claims.json`), the others this machine's runs. Paper-scale tables "
        f"committed: {', '.join(paper) if paper else 'none yet'}. Decisive verdicts need a Benjamini-Hochberg "
        "q <= 0.05 over all directional claims and, so that another machine gives the same verdict, q <= 0.01 "
        "(a \"within\" claim: its 99% interval); see the rules on the claims page. Claims are counted once "
        "each (aliases merged).", "",
        "**By paper** (smoke verdicts):", "", *_by_paper(listing, judged["smoke"]), "",
        "**Paper claims the smoke runs decided:**", "", *_headline_claims(listing, judged["smoke"]), "",
        "**Marginal** (the direction holds at a 5% false-discovery rate, 0.01 < q <= 0.05, but a 1-thread and "
        "a 2-thread run of the study disagree on such verdicts, so none counts as decided; leads for more seeds "
        "or the paper scale):", "", *_marginal_claims(listing, judged["smoke"]), "",
        "**By kind of evidence** (smoke verdicts):", "", *_headline(listing, judged["smoke"]), "",
        f"![Smoke-scale verdicts by paper](figures/key/{KEY_FIGURES[0]})", "",
        f"Key figures (made by `./study claims` from the same tables): {figs}. Every claim, with its p and q: "
        "[`figures/claims.md`](figures/claims.md) (generated by `./study claims`)."])


def write_key_figures(notebooks: Iterable[str] | None = None, out: Path | None = None,
                      rows: PageRows | None = None) -> list[Path]:
    """``figures/key/verdicts_by_paper.png`` (the smoke verdicts of every claim, by paper) and
    ``directional_effects.png`` (every measured directional claim's effect divided by the half-width of its
    95% interval over seeds, by paper: beyond ±1 the interval excludes 0), from the same tables as the README.
    Small PNGs (about 100 dpi) without timestamps, so re-running on unchanged tables changes nothing."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    listing, judged = rows or page_rows(notebooks)
    canon = _canonical(listing, judged["smoke"])
    out = out or key_figures_dir()
    out.mkdir(parents=True, exist_ok=True)
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
    ax.set_title("Smoke-scale verdicts by paper (generated stand-in data)", fontsize=9)
    ax.legend(ncol=3, fontsize=7, loc="lower right")
    fig.tight_layout()
    paths = [out / KEY_FIGURES[0]]
    fig.savefig(paths[0], metadata={"Software": None})
    plt.close(fig)
    pts = []
    for nb, cid, c, r, _ in canon:
        e = r.estimate()
        if c.expect.kind in DIRECTIONAL and e is not None and e.ci95 > 0 and math.isfinite(e.value):
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
    for v in VERDICTS[:3]:  # the verdicts a measured directional claim can have
        ax.scatter([], [], c=colours[v], s=14, label=v)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_yticks(range(len(papers)), [PAPER_NAMES.get(p, p) for p in papers])
    ax.invert_yaxis()
    ax.set_xlabel("effect toward the paper / half-width of its 95% CI over seeds (clipped at ±8)", fontsize=8)
    ax.set_title("Directional claims, smoke scale: beyond +1 the CI excludes 0 the paper's way", fontsize=9)
    fig.tight_layout()
    paths.append(out / KEY_FIGURES[1])
    fig.savefig(paths[1], metadata={"Software": None})
    plt.close(fig)
    return paths


def write_summary(path: str | Path | None = None, readme: bool | None = None) -> Path:
    """Write the page (default: the tracked ``figures/claims.md``, whose README section is then rewritten too;
    a run writes ``out/claims.md`` instead and leaves the tracked files alone)."""
    tracked = project_root() / "figures" / "claims.md"
    path = Path(path) if path is not None else tracked
    rows = page_rows()
    atomic_write_text(path, summary_markdown(rows=rows) + "\n")
    if readme if readme is not None else path.resolve() == tracked.resolve():
        write_key_figures(rows=rows)
        write_readme_summary(rows=rows)
    return path


def write_readme_summary(readme: Path | None = None, rows: PageRows | None = None) -> Path:
    """Replace the text between the README's ``claims-summary`` markers with :func:`readme_summary`."""
    readme = readme or project_root() / "README.md"
    text = readme.read_text()
    if SUMMARY_START not in text or SUMMARY_END not in text:
        raise ValueError(f"{readme} has no {SUMMARY_START} ... {SUMMARY_END} markers to write the summary between")
    head, rest = text.split(SUMMARY_START, 1)
    _, tail = rest.split(SUMMARY_END, 1)
    atomic_write_text(readme, f"{head}{SUMMARY_START}\n{readme_summary(rows=rows)}\n{SUMMARY_END}{tail}")
    return readme


def save_committed(scale: str, notebooks: Iterable[str]) -> list[Path]:
    """Copy this machine's claims table of each notebook at ``scale`` to ``params/<nb>/<scale>.claims.json``.

    Refuses (before copying anything) a table that is missing, or was made with other parameters than
    ``params/<nb>/<scale>.yaml`` (a ``-p`` override), or has no ``made_on``.
    """
    scale = check_scale(scale)
    names = list(notebooks)
    if not names:
        raise ValueError("name the notebooks whose tables to commit: ./study claims --save paper 09_spe_synthetic")
    plan = []
    for nb in names:
        src = claims_dir() / nb / f"{scale}.json"
        table = _load(src)
        if table is None:
            raise ValueError(f"no claims table {src}; run the notebook first: ./study run --scale {scale} {nb}")
        if "made_on" not in table or not _of_scale(table, nb, scale) or table.get("params_hash") is None:
            raise ValueError(f"{src} was not made with params/{nb}/{scale}.yaml itself (an override, or an older "
                             f"table without its parameters' hash); re-run: ./study run --scale {scale} {nb}")
        table.pop("by_id")
        table.pop("from", None)
        plan.append((committed_claims_path(nb, scale), table))
    for dst, table in plan:
        atomic_write_json(dst, table)
    return [dst for dst, _ in plan]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m studylib.experiments.claims",
                                 description="Write the study's page of claims, or commit a scale's tables.")
    ap.add_argument("--out", help="write the page here instead of the tracked figures/claims.md (and README)")
    ap.add_argument("--save", metavar="SCALE", help="copy <cache>/claims/NB/SCALE.json to "
                    "params/NB/SCALE.claims.json for the notebooks named, then rebuild the tracked page")
    ap.add_argument("notebooks", nargs="*")
    args = ap.parse_args(argv)
    if args.save:
        from studylib.notebooks import resolve
        try:
            written = save_committed(args.save, [resolve(n) for n in args.notebooks])
        except ValueError as err:  # a missing or overridden table: the message says what to run
            sys.exit(f"claims: {err}")
        for dst in written:
            print(f"claims: wrote {dst}")
    elif args.notebooks:
        ap.error("notebooks are named only with --save")
    print(f"claims: wrote {write_summary(args.out)}")


if __name__ == "__main__":
    main()
