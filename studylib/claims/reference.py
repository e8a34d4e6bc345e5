"""Reference checks: trained numbers asserted against stored values, with tolerances from their uncertainty.

nbval compares only machine-independent outputs (formulas, data statistics, shapes, which claims are tested).
A trained number differs between CPUs, thread counts and GPUs (floating-point chaos acts like another
training seed), so it is never compared as text. Instead the notebook's last cell calls :func:`check` with
its headline :class:`~studylib.evaluation.stats.Estimate`\\ s, which compares each with the value stored in
``params/<notebook>/<scale>.reference.json``:

    | fresh - reference | <= 2 * max(CI95 fresh, CI95 reference)

where each CI95 is the estimate's interval over training seeds (Student's t; the issue's "2 CI95"). Plain
numbers (formulas, counts, statistics of generated data) must match to a relative 1e-9. A trained number
checked here must come from at least two seeds, since one run's episode CI says nothing about how far a
re-run on another machine may land: a run with one training seed (``seeds: [0]``) is reported as such ("1
training seed: no interval over seeds ...") and nothing is compared, and a reference is never written from
one. A failure raises ``AssertionError`` naming each value, so nbval fails.

The printed summary line is the same whether the check passed or the file was just rewritten, so it can sit
in an ``NBVAL_CHECK_OUTPUT`` cell. ``./study reference NOTEBOOK`` re-executes a notebook with
``STUDYLIB_UPDATE_REFERENCE=1``, which rewrites the file from that run (with the machine it ran on): into the
script's staging folder (``STUDYLIB_REFERENCE_STAGE``), from which it replaces the committed file only once the
notebook has run to its end.
A reference made with other parameters (the user edited the parameters cell) is not applied: the summary says
so and nothing is asserted.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pandas as pd
import torch

from studylib.evaluation.stats import Estimate
from studylib.paths import check_scale, params_dir
from studylib.utils import atomic_write_json, config_hash

TOLERANCE_CI95 = 2.0  # tolerance in units of the larger CI95 of the two estimates
UPDATE_ENV = "STUDYLIB_UPDATE_REFERENCE"
# ./study reference sets this to a folder of its own: a rewritten reference goes to <folder>/<notebook>/<scale>
# .reference.json, and the script installs it with the notebook once the whole run has succeeded, so an
# interrupted or failed run leaves the committed reference as it was
STAGE_ENV = "STUDYLIB_REFERENCE_STAGE"


def reference_path(notebook: str, scale: str) -> Path:
    return params_dir() / notebook / f"{check_scale(scale)}.reference.json"


def params_hash(p: Any) -> str:
    """Hash of a notebook's parameters (a dataclass): a reference applies only to the parameters it was made with."""
    return config_hash(dataclasses.asdict(p))


def made_on() -> dict[str, Any]:
    """Where a result was made: torch, thread count, CPU architecture, Python, CUDA."""
    return {"torch": torch.__version__, "threads": torch.get_num_threads(), "machine": platform.machine(),
            "python": platform.python_version(), "cuda": torch.cuda.is_available()}


def _encode(v: Estimate | float | int) -> dict[str, Any]:
    if isinstance(v, Estimate):
        if v.n_seeds < 2:
            raise ValueError("a trained number checked against a reference needs at least 2 training seeds "
                             f"(got {v.n_seeds}); one run's episode CI does not bound a re-run's drift")
        return {"estimate": v.as_dict()}
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise TypeError(f"reference values are Estimates or finite numbers, got {v!r}")
    return {"exact": float(v)}


@dataclass
class Comparison:
    key: str
    fresh: float
    reference: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return abs(self.fresh - self.reference) <= self.tolerance


@dataclass
class ReferenceReport:
    """What :func:`check` compared; ``str()`` is the machine-independent summary line."""

    notebook: str
    scale: str
    path: Path
    status: str  # "checked", "written", "no reference", "other parameters", "one seed"
    comparisons: list[Comparison]
    count: int

    def __str__(self) -> str:
        rel = f"params/{self.notebook}/{self.path.name}"
        if self.status in ("checked", "written"):
            return (f"reference check ({self.scale}): {self.count} values within {TOLERANCE_CI95:g} x CI95 "
                    f"(trained) or exactly (deterministic) of {rel}")
        if self.status == "no reference":
            return f"reference check ({self.scale}): no {rel}; trained numbers are not checked at this scale"
        if self.status == "one seed":
            return (f"reference check ({self.scale}): 1 training seed gives no interval over seeds, so nothing is "
                    f"compared with {rel} (train 2 or more seeds to check the trained numbers)")
        return (f"reference check ({self.scale}): the parameters differ from those {rel} was made with; "
                "nothing checked")

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([{"value": c.key, "fresh": c.fresh, "reference": c.reference,
                              "|difference|": abs(c.fresh - c.reference), "tolerance": c.tolerance, "ok": c.ok}
                             for c in self.comparisons])


def _compare(key: str, fresh: dict[str, Any], ref: dict[str, Any]) -> Comparison:
    if ("estimate" in fresh) != ("estimate" in ref):
        raise AssertionError(f"reference value {key!r} changed kind (trained vs deterministic); regenerate the "
                             "reference with ./study reference")
    if "estimate" in fresh:
        f, r = Estimate.from_dict(fresh["estimate"]), Estimate.from_dict(ref["estimate"])
        return Comparison(key, f.value, r.value, TOLERANCE_CI95 * max(f.ci95, r.ci95))
    f, r = fresh["exact"], ref["exact"]
    return Comparison(key, f, r, 1e-9 * max(abs(f), abs(r)) + 1e-12)


def check(notebook: str, p: Any, measured: Mapping[str, Estimate | float | int],
          update: bool | None = None) -> ReferenceReport:
    """Compare ``measured`` with the stored reference of ``notebook`` at ``p.scale`` (see module docstring).

    Args:
        notebook: the notebook's name (``"00_quickstart"``).
        p: its validated parameters (a dataclass with a ``scale`` field).
        measured: the values to check, by stable name.
        update: rewrite the reference from ``measured`` instead of checking (default: the
            ``STUDYLIB_UPDATE_REFERENCE`` environment variable).

    Raises:
        AssertionError: a value is outside its tolerance, or the set of names differs from the reference's.
    """
    scale = check_scale(p.scale)
    path = reference_path(notebook, scale)
    if update is None:
        update = os.environ.get(UPDATE_ENV, "") not in ("", "0", "false")
    if not update and scale != "smoke" and not path.is_file():
        # paper and check runs have no committed reference unless someone wrote one; nothing to compare
        return ReferenceReport(notebook, scale, path, "no reference", [], 0)
    if not update and any(isinstance(v, Estimate) and v.n_seeds < 2 for v in measured.values()):
        # one training seed: no interval over seeds to bound a re-run's drift, so no tolerance to compare within
        return ReferenceReport(notebook, scale, path, "one seed", [], 0)
    fresh = {k: _encode(v) for k, v in measured.items()}
    phash = params_hash(p)
    if update:
        stage = os.environ.get(STAGE_ENV)
        target = Path(stage) / notebook / path.name if stage else path
        atomic_write_json(target, {"notebook": notebook, "scale": scale, "params_hash": phash, "values": fresh,
                                   "made_on": made_on()})
        return ReferenceReport(notebook, scale, path, "written", [_compare(k, v, v) for k, v in sorted(fresh.items())],
                               len(fresh))
    if not path.is_file():
        if scale == "smoke":
            raise AssertionError(f"no reference file {path}; create it from a run with "
                                 f"`./study reference {notebook}` and commit it")
        return ReferenceReport(notebook, scale, path, "no reference", [], 0)
    try:
        stored = json.loads(path.read_text())
        ref_values, ref_hash = stored["values"], stored["params_hash"]
    except (ValueError, KeyError) as err:
        raise AssertionError(f"the reference file {path} is damaged ({err}); regenerate it with "
                             f"`./study reference {notebook}`") from err
    if ref_hash != phash:
        return ReferenceReport(notebook, scale, path, "other parameters", [], 0)
    missing, extra = sorted(set(ref_values) - set(fresh)), sorted(set(fresh) - set(ref_values))
    if missing or extra:
        raise AssertionError(f"{path}: the notebook measured other values than the reference holds (missing "
                             f"{missing}, new {extra}); regenerate it with `./study reference {notebook}`")
    comps = [_compare(k, fresh[k], ref_values[k]) for k in sorted(fresh)]
    bad = [c for c in comps if not c.ok]
    if bad:
        lines = "\n".join(f"  {c.key}: fresh {c.fresh:.6g}, reference {c.reference:.6g}, |difference| "
                          f"{abs(c.fresh - c.reference):.3g} > tolerance {c.tolerance:.3g}" for c in bad)
        raise AssertionError(f"{len(bad)} of {len(comps)} values moved beyond their tolerance from {path}:\n{lines}")
    return ReferenceReport(notebook, scale, path, "checked", comps, len(comps))
