"""Claims tables: every notebook's conclusion, computed from its runs, and the study's one page of claims.

Each experiment module defines ``claims(p, results=None) -> ClaimsTable``: the paper's claims the notebook
tests, built from the parameters alone (so the list is the same on every machine), with the measured
:class:`~studylib.evaluation.stats.Estimate` attached when ``results`` are given. Verdicts come from the rules
of :mod:`studylib.evaluation.verdicts`. In the notebook::

    table = ex.claims(P, results)
    print(table.checked())        # NBVAL_CHECK_OUTPUT: the claims and their rules (machine-independent)
    table.show()                  # measured effects and verdicts (not compared by nbval)
    table.save()                  # <cache>/claims/<notebook>/<scale>.json, read by the summary page

``python -m studylib.experiments.claims`` (run by ``./study run`` and ``./study claims``) writes
``figures/claims.md``: every claim of every notebook with its smoke verdict, and a paper-scale column that
fills in once a paper-scale run of that notebook has saved its table.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from studylib.evaluation.stats import Estimate
from studylib.evaluation.verdicts import NOT_RUN, VERDICTS, Claim
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

    def save(self) -> Path:
        """Write the table to ``<cache>/claims/<notebook>/<scale>.json`` (atomically)."""
        path = claims_dir() / self.notebook / f"{self.scale}.json"
        atomic_write_json(path, self.as_dict())
        return path


# -- the study's page of claims -------------------------------------------------------------------------------
def experiment_module(notebook: str) -> Any:
    """The experiment module of a notebook: ``NN_name`` -> ``studylib.experiments.name``."""
    return importlib.import_module(f"studylib.experiments.{notebook.split('_', 1)[1]}")


def static_claims(notebook: str) -> ClaimsTable | None:
    """The claims a notebook tests, from its smoke parameters (None if its module defines no ``claims``)."""
    module = experiment_module(notebook)
    if not hasattr(module, "claims"):
        return None
    return module.claims(module.Params())


def committed_claims_path(notebook: str, scale: str) -> Path:
    """``params/<notebook>/<scale>.claims.json``: the table of the run that made the committed reference
    (written by ``./study reference``), used when this machine has not run the notebook."""
    return project_root() / "params" / notebook / f"{scale}.claims.json"


def _saved(notebook: str, scale: str) -> dict[str, dict[str, Any]]:
    path = claims_dir() / notebook / f"{scale}.json"
    if not path.is_file():
        path = committed_claims_path(notebook, scale)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        return {c["id"]: c for c in data["claims"]}
    except (ValueError, KeyError) as err:  # a damaged file is named, not trusted
        print(f"claims: ignoring unreadable {path} ({err}); re-run the notebook to rewrite it", file=sys.stderr)
        return {}


def _cell(saved: dict[str, Any] | None) -> str:
    if not saved:
        return NOT_RUN
    text = f"**{saved['verdict']}**"
    return f"{saved['measured_text']} → {text}" if saved.get("measured_text") else text


def summary_markdown(notebooks: Iterable[str] | None = None) -> str:
    """Every claim of every notebook, with its smoke verdict and (once run) its paper-scale verdict."""
    names = list(notebooks) if notebooks is not None else notebook_names()
    out = ["# Claims of the study", "",
           "Generated by `./study claims` from the saved claims tables (`<cache>/claims/`, else the committed "
           "`params/<notebook>/smoke.claims.json` of the reference run); each verdict follows "
           "the rules of `studylib/evaluation/verdicts.py`. Measured effects are in points (percent) with 95% "
           "intervals over training seeds. Nothing here is typed by hand.", ""]
    for nb in names:
        table = static_claims(nb)
        if table is None:
            continue
        smoke, paper = _saved(nb, "smoke"), _saved(nb, "paper")
        out += [f"## {nb}", "", "| claim | source | paper | test | smoke | paper scale |",
                "| --- | --- | --- | --- | --- | --- |"]
        for c in table:
            cells = [c.claim, c.source, c.paper or "-", c.test, _cell(smoke.get(c.id)), _cell(paper.get(c.id))]
            out.append("| " + " | ".join(s.replace("|", "/") for s in cells) + " |")
        out.append("")
    return "\n".join(out)


def write_summary(path: str | Path | None = None) -> Path:
    path = Path(path) if path is not None else project_root() / "figures" / "claims.md"
    atomic_write_text(path, summary_markdown() + "\n")
    return path


if __name__ == "__main__":
    print(f"claims: wrote {write_summary(sys.argv[1] if len(sys.argv) > 1 else None)}")
