"""Do the claims' verdicts survive another machine? Compare the smoke verdicts of two run caches (issue 19).

Floating-point rounding acts like another training seed, so a verdict is evidence only if a second machine
gives the same one. Two torch thread counts round differently, as two CPUs do, so the check is::

    STUDYLIB_THREADS=1 STUDYLIB_CACHE=/tmp/c1 ./study run        # every notebook, smoke scale, empty cache
    STUDYLIB_THREADS=2 STUDYLIB_CACHE=/tmp/c2 ./study run        # the same from another empty cache
    .venv/bin/python benchmarks/verdict_stability.py /tmp/c1 /tmp/c2

Each cache's page of claims is judged exactly as ``figures/claims.md`` is (``studylib.experiments.claims``:
each table re-judged from its per-seed values, Benjamini-Hochberg over the directional claims of the scale),
in a subprocess of its own so that nothing of the first cache leaks into the second. Prints the verdict counts
of both pages, every claim whose verdict differs (with both measurements, p and q), and the number of decisive
verdicts (reproduced / not reproduced) that differ; exits 1 when that number is not 0. ``--json FILE`` writes
the comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DECISIVE = ("reproduced", "not reproduced")

_DUMP = """
import json
from pathlib import Path
from studylib.experiments import claims
claims.committed_claims_path = lambda nb, scale: Path("/nonexistent") / nb / scale  # this cache's runs only
_, judged = claims.page_rows()
print(json.dumps([{"notebook": r.notebook, "id": r.id, "verdict": r.verdict, "p": r.p, "q": r.q,
                   "measured": (r.saved or {}).get("measured_text"), "counted": bool(r.saved) and not r.note}
                  for r in judged["smoke"].values()]))
"""


def smoke_rows(cache: Path) -> list[dict]:
    """The judged smoke rows of the page built from ``cache`` alone (the committed tables fill nothing in: a
    notebook this cache never ran reads "not run")."""
    if not (cache / "claims").is_dir():
        raise SystemExit(f"verdict_stability: {cache} has no claims/ folder; run the notebooks with "
                         f"STUDYLIB_CACHE={cache} ./study run first")
    env = dict(os.environ, STUDYLIB_CACHE=str(cache),
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    out = subprocess.run([sys.executable, "-c", _DUMP], env=env, cwd=REPO, check=True, capture_output=True,
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
               "decisive": ka[k]["verdict"] in DECISIVE or kb[k]["verdict"] in DECISIVE}
              for k in ka if ka[k]["verdict"] != kb[k]["verdict"]]
    return {"counts": [dict(Counter(r["verdict"] for r in a)), dict(Counter(r["verdict"] for r in b))],
            "claims": len(ka), "differ": differ, "decisive_differ": sum(d["decisive"] for d in differ)}


def _cell(r: dict) -> str:
    stats = "".join(f", {k} = {r[k]:.3g}" for k in ("p", "q") if r.get(k) is not None)
    return f"{r.get('measured') or ''}{stats} -> {r['verdict']}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("first", type=Path, help="cache of the first run (e.g. 1 thread)")
    ap.add_argument("second", type=Path, help="cache of the second run (e.g. 2 threads)")
    ap.add_argument("--json", type=Path, help="write the comparison here")
    a = ap.parse_args(argv)
    res = compare(smoke_rows(a.first), smoke_rows(a.second))
    print(f"{res['claims']} claims; verdicts of the first page: {res['counts'][0]}")
    print(f"{'':>{len(str(res['claims']))}}         verdicts of the second page: {res['counts'][1]}")
    for d in res["differ"]:
        tag = "DECISIVE" if d["decisive"] else "differs "
        print(f"{tag} {d['notebook']} {d['id']}: {_cell(d['first'])} | {_cell(d['second'])}")
    print(f"verdicts that differ: {len(res['differ'])}, decisive ones: {res['decisive_differ']}")
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 1 if res["decisive_differ"] else 0


if __name__ == "__main__":
    sys.exit(main())
