"""Claims tables: every notebook's conclusion, computed from its runs, judged once, saved with its provenance.

Each experiment module defines ``claims(p, results=None) -> ClaimsTable``: the paper's claims the notebook
tests, built from the parameters alone (so the list, and with it the family of every claim, is the same on
every machine and fixed before anything runs), with the measured
:class:`~studylib.evaluation.stats.Estimate` attached when ``results`` are given, and the notebook's regime
checks (:class:`~studylib.evaluation.verdicts.Regime`). Verdicts come from
:func:`~studylib.evaluation.verdicts.judge_family` over the table: the notebook shows them, and the study's page
(:mod:`studylib.claims.page`, ``./study claims``) re-judges the saved table with the same function,
so the notebook, ``figures/claims.md`` and the README show the same verdict, p and adjusted p. In the
notebook::

    table = ex.claims(P, results)
    print(table.checked())        # NBVAL_CHECK_OUTPUT: the claims and their rules (machine-independent)
    table.show()                  # regime checks, measured effects and verdicts (not compared by nbval)
    table.save()                  # <cache>/claims/<notebook>/<name>.json, read by the page

``<name>`` is the parameter file the table was made with (``smoke``, ``evidence``, ``paper``, or a variant such
as ``paper-cifarfs`` for a data set the paper scale reaches only by an override), else the scale's name.
``./study claims --save SCALE NB`` commits a table as ``params/<nb>/<name>.claims.json``.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from studylib.claims.store import claims_dir, code_version, static_claims, table_name
from studylib.evaluation.stats import AllOf, Estimate, measured_from_dict
from studylib.evaluation.verdicts import (NOT_RUN, NOT_TESTED, VERDICTS, Claim, Expectation, Judgement, Regime,
                                          judge_family)
from studylib.paths import check_scale
from studylib.utils import atomic_write_json

pd.set_option("display.max_colwidth", 120)


def effect_size(notebook: str, claim_id: str, kind: str, measured: Any, unit: float = 100.0) -> str:
    """A directional claim's measured effect as a multiple of the paper's own effect
    (:func:`~studylib.claims.registry.paper_effect`), with its 95% interval over seeds: "0.89x the paper's +9.60
    pts (0.76x to 1.0x)"; "" where the paper gives no effect or nothing was measured (issue 42: the size beside
    the sign). An all-of claim's size is that of its worst effect."""
    from studylib.claims.registry import meta, paper_effect
    e = measured.worst if isinstance(measured, AllOf) else measured
    if kind not in ("greater", "less") or not isinstance(e, Estimate):
        return ""
    pe = paper_effect(meta(notebook, claim_id, kind))
    if not pe:
        return ""
    lo, hi = sorted(((e.value - e.ci95) * unit / pe, (e.value + e.ci95) * unit / pe))
    return (f"{_times(e.value * unit / pe)} the paper's {pe:+.2f}{' pts' if unit == 100 else ''} "
            f"({_times(lo)} to {_times(hi)})")


def _times(x: float) -> str:
    """A ratio to the paper's effect: two significant digits, at least one decimal ("0.89x", "9.0x", "-1.3x")."""
    return f"{x:.2g}x" if abs(x) < 1 else f"{x:.1f}x" if abs(x) < 10 else f"{x:.0f}x"


def _fmt_p(x: float | None) -> str:
    if x is None:
        return ""
    return f"{x:.3g}" if x >= 0.001 else f"{x:.1e}"


class ClaimsTable:
    """The claims one notebook tests at one scale, and its regime checks (see the module docstring)."""

    def __init__(self, notebook: str, scale: str, claims: Iterable[Claim], regimes: Iterable[Regime] = ()) -> None:
        self.notebook = notebook
        self.scale = check_scale(scale)
        self.claims = list(claims)
        self.regimes: list[Regime] = list(regimes)
        ids = [c.id for c in self.claims]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"claim ids must be unique within {notebook}; repeated: {', '.join(dup)}")
        if self.scale == "check":
            self.claims = self._with_paper_ids()
        for c in self.claims:
            c.table = self

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
            c, measured=None, applies=False, table=None,
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

    def __deepcopy__(self, memo: dict) -> "ClaimsTable":
        out = ClaimsTable.__new__(ClaimsTable)
        out.notebook, out.scale = self.notebook, self.scale
        out.claims = [copy.deepcopy(c, memo) for c in self.claims]
        out.regimes = list(self.regimes)
        for c in out.claims:
            c.table = out
        return out

    def measure(self, claim_id: str, value: Any) -> None:
        """Attach a measurement (an Estimate, or the value of an ``equal`` claim)."""
        self[claim_id].measured = value

    def regime(self, check: Regime) -> Regime:
        """Add a regime check (the claims it names read "not tested" unless it passed); returns it."""
        unknown = [cid for cid in check.claims if cid not in {c.id for c in self.claims}]
        if unknown:
            raise KeyError(f"regime check {check.name!r} names claims {unknown} that {self.notebook} does not have")
        self.regimes.append(check)
        return check

    # -- the judgement ------------------------------------------------------------------------------------------
    def same_as(self) -> dict[str, str]:
        """``{alias: canonical}`` for the claims of this table that the claim registry declares the same
        measurement as another claim of the same notebook."""
        from studylib.claims.registry import meta
        out = {}
        for c in self.claims:
            m = meta(self.notebook, c.id, c.expect.kind)
            alias = m.alias_of
            if alias and not m.replication and alias.split(":")[0] == self.notebook:
                out[c.id] = alias.split(":", 1)[1]
        return out

    def judgements(self) -> dict[str, Judgement]:
        """Every claim's judgement in this table's family (:func:`~studylib.evaluation.verdicts.judge_family`)."""
        return judge_family(self.claims, self.regimes, self.same_as())

    # -- views ----------------------------------------------------------------------------------------------
    def checked(self) -> str:
        """The machine-independent part: which claims are tested, where the paper makes them, and the rule."""
        rows = [{"id": c.id, "source": c.source, "claim": c.claim, "paper": c.paper, "test": c.test,
                 "rule": c.expect.rule(c.unit) if c.applies else f"not tested here: {c.why_not}"}
                for c in self.claims]
        return pd.DataFrame(rows).to_string(index=False)

    def frame(self) -> pd.DataFrame:
        """Measured effects with their 95% intervals over seeds, their size against the paper's effect, p, the
        family-adjusted p, and the verdicts."""
        j = self.judgements()
        return pd.DataFrame([{"id": c.id, "source": c.source, "claim": c.claim, "paper": c.paper,
                              "measured": c.measured_text(),
                              "size": effect_size(self.notebook, c.id, c.expect.kind, c.measured, c.unit) or "-",
                              "p": _fmt_p(j[c.id].p),
                              "p_adj": _fmt_p(j[c.id].p_adj), "verdict": j[c.id].label, "why": j[c.id].reason}
                             for c in self.claims])

    def regime_frame(self) -> pd.DataFrame:
        """The regime checks: what each checks, its measurement, whether it passed and the claims it gates."""
        return pd.DataFrame([{"check": r.name, "passed": {True: "yes", False: "NO", None: "not measured"}[r.passed],
                              "measured": r.detail, "gates": ", ".join(r.claims)} for r in self.regimes],
                            columns=["check", "passed", "measured", "gates"])

    def counts(self) -> dict[str, int]:
        out = {v: 0 for v in VERDICTS}
        for j in self.judgements().values():
            out[j.verdict] += 1
        return {k: n for k, n in out.items() if n}

    def conclusion(self) -> str:
        """A markdown summary generated from the verdicts (the notebook displays it; no number is typed)."""
        j = self.judgements()
        family = max((x.family for x in j.values()), default=0)
        lines = [f"**{self.notebook}, {self.scale} scale:** " + ", ".join(f"{n} {v}" for v, n in self.counts().items())
                 + f" of {len(self.claims)} claims (family of {family} claims adjusted together; decisive at "
                   "Holm-adjusted p <= 0.01)."]
        for r in self.regimes:
            lines.append(f"- regime check *{r.name}*: {'passed' if r.passed else 'NOT passed'} ({r.detail}).")
        for c in self.claims:
            stats_text = f", p = {_fmt_p(j[c.id].p)}, p_adj = {_fmt_p(j[c.id].p_adj)}" if j[c.id].p is not None else ""
            size = effect_size(self.notebook, c.id, c.expect.kind, c.measured, c.unit)
            lines.append(f"- *{c.source}*: {c.claim} — measured {c.measured_text() or 'nothing'}"
                         + (f" ({size})" if size else "") + f"{stats_text} → **{j[c.id].label}** ({j[c.id].reason}).")
        return "\n".join(lines)

    def show(self) -> None:
        """Display the regime checks, the table and its conclusion in a notebook (plain text elsewhere)."""
        try:
            from IPython.display import Markdown, display
            if self.regimes:
                display(Markdown("**Regime checks** (a claim gated by a check that did not pass reads *not tested*):"))
                display(self.regime_frame())
            display(self.frame())
            display(Markdown(self.conclusion()))
        except ImportError:  # pragma: no cover - IPython is a dependency of the notebooks
            if self.regimes:
                print(self.regime_frame().to_string(index=False))
            print(self.frame().to_string(index=False))
            print(self.conclusion())

    # -- persistence ----------------------------------------------------------------------------------------
    def as_dict(self) -> dict[str, Any]:
        """Everything the page needs to judge the table again exactly as the notebook did."""
        j = self.judgements()
        family = max((x.family for x in j.values()), default=0)
        return {"notebook": self.notebook, "scale": self.scale, "family": family,
                "regimes": [r.as_dict() for r in self.regimes],
                "claims": [{"id": c.id, "claim": c.claim, "source": c.source, "paper": c.paper, "test": c.test,
                            "rule": c.expect.rule(c.unit), "kind": c.expect.kind, "margin": c.expect.margin,
                            "delta": c.expect.delta, "expected": c.expect.expected, "unit": c.unit,
                            "signed": c.signed, "applies": c.applies, "why_not": c.why_not,
                            "measured": c.measured.as_dict() if isinstance(c.measured, (Estimate, AllOf))
                            else c.measured, "parts": c.expect.parts,
                            "measured_text": c.measured_text(), "verdict": j[c.id].verdict,
                            "label": j[c.id].label, "why": j[c.id].reason, "test_name": j[c.id].test,
                            "p": j[c.id].p, "p_adj": j[c.id].p_adj} for c in self.claims]}

    @classmethod
    def from_dict(cls, data: dict[str, Any], listing: "ClaimsTable | None" = None) -> "ClaimsTable":
        """A saved table, to be judged again. ``listing`` (the notebook's static claims) fills in what tables
        saved by older code lack (a claim's margin, unit or band)."""
        known = {c.id: c for c in listing} if listing is not None else {}
        claims = []
        for d in data["claims"]:
            ref = known.get(d["id"])
            kind = d.get("kind") or (ref.expect.kind if ref else "greater")
            applies = d.get("applies", d.get("verdict") != NOT_TESTED)
            why_not = d.get("why_not", d.get("why", ""))
            if "margin" in d:
                expect = Expectation(kind, float(d.get("margin") or 0.0), d.get("expected"), d.get("delta"),
                                     parts=int(d.get("parts", 1)))
            elif ref is not None:  # an older table: today's rule of the claim, on the stored measurement
                expect = ref.expect
            elif kind in ("greater", "less", "equal"):
                expect = Expectation(kind, expected=d.get("expected"))
            else:  # a margin claim the listing no longer has: its rule is unknown
                expect, applies, why_not = Expectation("greater"), False, "saved by older code without its rule"
            measured = measured_from_dict(d.get("measured"))
            claims.append(Claim(d["id"], d.get("claim", ""), d.get("source", ""), d.get("paper", ""), d.get("test", ""),
                                expect, measured, bool(applies), why_not,
                                float(d.get("unit", ref.unit if ref else 100.0)), bool(d.get("signed", True))))
        out = cls.__new__(cls)
        out.notebook, out.scale = data["notebook"], data["scale"]
        out.claims = claims
        out.regimes = [Regime.from_dict(r) for r in data.get("regimes", [])]
        for c in out.claims:
            c.table = out
        return out

    def save(self, params: Any = None) -> Path:
        """Write the table to ``<cache>/claims/<notebook>/<name>.json`` (atomically; ``<name>``: the parameter
        file it was made with, the module docstring), with its provenance: the machine (``made_on``), the
        commit, the code version of the notebook's code (:mod:`studylib.provenance`) and the hash of the
        parameters (``params``, default: those the notebook validated in this process), so the page counts a
        table only for its own parameter file and marks one made by other code as stale."""
        from studylib.claims.reference import params_hash
        from studylib.config import current_params
        params = params if params is not None else current_params()
        data = self.as_dict()
        data["params_hash"] = params_hash(params) if dataclasses.is_dataclass(params) else None
        data.update(provenance(self.notebook))
        name = table_name(self.notebook, self.scale, data["params_hash"])
        data["name"] = name
        path = claims_dir() / self.notebook / f"{name}.json"
        atomic_write_json(path, data)
        return path


def provenance(notebook: str) -> dict[str, Any]:
    """``made_on`` (the machine), ``commit`` and ``code_version`` of a table made now, and ``seconds``: the time
    since this process imported ``studylib`` (a notebook's whole run, from the kernel's first cell) plus the
    recorded training and evaluation seconds of the runs it reused from the store
    (:func:`studylib.provenance.reused_seconds`; also stored alone as ``reused_seconds``): about what the
    notebook costs from an empty cache, which the power analysis scales by seeds, also for a table re-made from
    cached runs. Work cached outside runs (e.g. Set2Model's retrieval scores) is not in it."""
    import time

    import studylib
    from studylib.claims.reference import made_on
    from studylib.provenance import git_commit, reused_seconds
    reused = reused_seconds()
    return {"made_on": made_on(), "commit": git_commit(), "code_version": code_version(notebook),
            "seconds": round(time.monotonic() - studylib.STARTED + reused, 1), "reused_seconds": round(reused, 1)}
