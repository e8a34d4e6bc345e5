"""Do the claims' verdicts survive another machine? Compare the verdicts of two run caches (issues 19, 27, 31).

Floating-point rounding acts like another training seed, so a verdict is evidence only if a second machine
gives the same one. Two torch thread counts round differently, as two CPUs do, so the check is::

    STUDYLIB_THREADS=1 STUDYLIB_CACHE=/tmp/c1 ./study run [--scale evidence]   # every notebook, empty cache
    STUDYLIB_THREADS=2 STUDYLIB_CACHE=/tmp/c2 ./study run [--scale evidence]   # the same, another empty cache
    .venv/bin/python benchmarks/verdict_stability.py /tmp/c1 /tmp/c2 [--scale evidence] --json OUT.json

Each cache's page of claims is judged exactly as ``figures/claims.md`` is (``studylib.claims.page``:
each saved table judged by its notebook's own rule, families per notebook), in a subprocess of its own so that
nothing of the first cache leaks into the second. Prints the verdict counts of both pages, every claim whose
verdict differs (with both measurements, p and adjusted p), the decisive verdicts that differ (one page decisive,
the other not) and those that flip direction (reproduced on one page, not reproduced on the other); exits 1 when
a direction flips or more than ``--allow`` decisive verdicts differ. ``--json FILE`` writes the comparison with
every claim's p, p_adj and verdict on both pages (the committed evidence, ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from studylib.claims.page import DECISIVE  # the page's decisive verdicts, one definition

REPO = Path(__file__).resolve().parent.parent

_DUMP = """
import json, sys
from pathlib import Path
from studylib.claims import page as claims_page, store as claims
claims.committed_claims_path = lambda nb, name: Path("/nonexistent") / nb / name  # this cache's runs only
claims_page.stability = lambda column: None  # each page's own verdicts, not those of a committed comparison
_, judged, _ = claims_page.page_rows()
print(json.dumps([{"notebook": r.notebook, "id": r.id, "verdict": r.verdict,
                   "label": r.judgement.label if r.judgement else r.verdict,
                   "p": r.judgement.p if r.judgement else None, "p_adj": r.p_adj, "measured": r.measured_text,
                   "counted": r.status == "judged"}
                  for r in judged[sys.argv[1]].values() if r.counted]))
"""


def rows_of(cache: Path, scale: str = "smoke") -> list[dict]:
    """The judged rows of one scale column of the page built from ``cache`` alone (the committed tables fill
    nothing in: a notebook this cache never ran reads "not run")."""
    if not (cache / "claims").is_dir():
        raise SystemExit(f"verdict_stability: {cache} has no claims/ folder; run the notebooks with "
                         f"STUDYLIB_CACHE={cache} ./study run first")
    env = dict(os.environ, STUDYLIB_CACHE=str(cache),
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    out = subprocess.run([sys.executable, "-c", _DUMP, scale], env=env, cwd=REPO, check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(a: list[dict], b: list[dict]) -> dict:
    """Rows matched by (notebook, claim id); a claim on one page only is an error (different code)."""
    ka = {(r["notebook"], r["id"]): r for r in a}
    kb = {(r["notebook"], r["id"]): r for r in b}
    if ka.keys() != kb.keys():
        only = sorted(ka.keys() ^ kb.keys())
        raise SystemExit(f"verdict_stability: the two pages list different claims ({len(only)}, e.g. {only[:3]}); "
                         f"run both caches with the same code")
    differ = [{"notebook": k[0], "id": k[1], "first": ka[k], "second": kb[k],
               "decisive": ka[k]["verdict"] in DECISIVE or kb[k]["verdict"] in DECISIVE,
               "flip": {ka[k]["verdict"], kb[k]["verdict"]} == set(DECISIVE)
               or (ka[k]["verdict"] == kb[k]["verdict"] == "not reproduced"
                   and ka[k].get("label") != kb[k].get("label"))}
              for k in ka if (ka[k]["verdict"], ka[k].get("label")) != (kb[k]["verdict"], kb[k].get("label"))]
    return {"counts": [dict(Counter(r["verdict"] for r in a)), dict(Counter(r["verdict"] for r in b))],
            "claims": len(ka), "differ": differ, "decisive_differ": sum(d["decisive"] and not d["flip"] for d in differ),
            "flips": sum(d["flip"] for d in differ),
            "rows": [{"notebook": k[0], "id": k[1], "first": ka[k], "second": kb[k]} for k in sorted(ka)]}


def _cell(r: dict) -> str:
    stats = "".join(f", {k} = {r[k]:.3g}" for k in ("p", "p_adj") if r.get(k) is not None)
    return f"{r.get('measured') or ''}{stats} -> {r.get('label') or r['verdict']}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("first", type=Path, help="cache of the first run (e.g. 1 thread)")
    ap.add_argument("second", type=Path, help="cache of the second run (e.g. 2 threads)")
    ap.add_argument("--scale", default="smoke", choices=("smoke", "evidence", "paper"), help="the page column")
    ap.add_argument("--allow", type=int, default=0, help="decisive-vs-inconclusive differences tolerated (issue "
                    "31: at most 3 at the evidence scale); a flip of direction is never tolerated")
    ap.add_argument("--json", type=Path, help="write the comparison here")
    ap.add_argument("--notebooks", nargs="+", metavar="NB",
                    help="compare only these notebooks (when the second run repeated only some of the first's)")
    a = ap.parse_args(argv)
    first, second = rows_of(a.first, a.scale), rows_of(a.second, a.scale)
    if a.notebooks:
        first, second = ([r for r in rows if r["notebook"] in a.notebooks] for rows in (first, second))
    res = compare(first, second)
    res["scale"] = a.scale
    res["notebooks"] = sorted({r["notebook"] for r in first})
    print(f"{res['claims']} claims; verdicts of the first page: {res['counts'][0]}")
    print(f"{'':>{len(str(res['claims']))}}         verdicts of the second page: {res['counts'][1]}")
    for d in res["differ"]:
        tag = "FLIP    " if d["flip"] else "DECISIVE" if d["decisive"] else "differs "
        print(f"{tag} {d['notebook']} {d['id']}: {_cell(d['first'])} | {_cell(d['second'])}")
    print(f"verdicts that differ: {len(res['differ'])}, decisive vs inconclusive: {res['decisive_differ']}, "
          f"direction flips: {res['flips']}")
    if a.json:
        from studylib.utils import atomic_write_text
        atomic_write_text(a.json, json.dumps(res, indent=1) + "\n")  # tracked under benchmarks/results/
    return 1 if res["flips"] or res["decisive_differ"] > a.allow else 0


if __name__ == "__main__":
    sys.exit(main())
