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
if sys.argv[2] == "stale-ok":  # tables committed at an earlier commit: judged by today's rules, not marked stale
    claims_page.is_stale = lambda saved, nb: False
_, judged, _ = claims_page.page_rows()
print(json.dumps([{"notebook": r.notebook, "id": r.id, "verdict": r.verdict,
                   "label": r.judgement.label if r.judgement else r.verdict,
                   "p": r.judgement.p if r.judgement else None, "p_adj": r.p_adj, "measured": r.measured_text,
                   "counted": r.status == "judged"}
                  for r in judged[sys.argv[1]].values() if r.counted]))
"""


def committed_cache(rev: str, scale: str, folder: Path) -> Path:
    """A cache folder holding the claims tables committed at ``rev`` (``params/<nb>/<scale>.claims.json``), so
    that tables made on another machine can be the second page (``git:REV``: a comparison across machines)."""
    listing = subprocess.run(["git", "-C", str(REPO), "ls-tree", "-r", "--name-only", rev, "params"], check=True,
                             capture_output=True, text=True).stdout.split()
    for path in listing:
        parts = Path(path).parts
        if len(parts) == 3 and parts[2] == f"{scale}.claims.json":
            text = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{path}"], check=True, capture_output=True,
                                  text=True).stdout
            out = folder / "claims" / parts[1] / f"{scale}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
    return folder


def rows_of(cache: Path, scale: str = "smoke", stale_ok: bool = False) -> list[dict]:
    """The judged rows of one scale column of the page built from ``cache`` alone (the committed tables fill
    nothing in: a notebook this cache never ran reads "not run"); ``stale_ok``: tables of other code are judged
    by today's rules instead of reading "stale" (a comparison with tables committed earlier)."""
    if not (cache / "claims").is_dir():
        raise SystemExit(f"verdict_stability: {cache} has no claims/ folder; run the notebooks with "
                         f"STUDYLIB_CACHE={cache} ./study run first")
    env = dict(os.environ, STUDYLIB_CACHE=str(cache),
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    out = subprocess.run([sys.executable, "-c", _DUMP, scale, "stale-ok" if stale_ok else "-"], env=env, cwd=REPO, check=True, capture_output=True,
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


def _same_first(today: dict, earlier: dict | None) -> bool:
    """Whether today's row reads as an earlier comparison's first side (same verdict, label and p_adj)."""
    if earlier is None:
        return False
    e = earlier["first"]
    same_p = (today.get("p_adj") is None and e.get("p_adj") is None) or (
        today.get("p_adj") is not None and e.get("p_adj") is not None
        and abs(today["p_adj"] - e["p_adj"]) <= 1e-9 * max(abs(e["p_adj"]), 1e-300))
    return today["verdict"] == e["verdict"] and today.get("label") == e.get("label") and same_p


def _cell(r: dict) -> str:
    stats = "".join(f", {k} = {r[k]:.3g}" for k in ("p", "p_adj") if r.get(k) is not None)
    return f"{r.get('measured') or ''}{stats} -> {r.get('label') or r['verdict']}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("first", type=Path, help="cache of the first run (e.g. 1 thread)")
    ap.add_argument("second", help="cache of the second run (e.g. 2 threads), or git:REV: the tables committed at "
                                   "REV (made on another machine; judged by today's rules, numbers as committed)")
    ap.add_argument("--scale", default="smoke", choices=("smoke", "evidence", "paper"), help="the page column")
    ap.add_argument("--allow", type=int, default=0, help="decisive-vs-inconclusive differences tolerated (issue "
                    "31: at most 3 at the evidence scale); a flip of direction is never tolerated")
    ap.add_argument("--json", type=Path, help="write the comparison here")
    ap.add_argument("--notebooks", nargs="+", metavar="NB",
                    help="compare only these notebooks (when the second run repeated only some of the first's)")
    ap.add_argument("--carry", type=Path, metavar="OLD_JSON",
                    help="with --notebooks: the other notebooks' rows come from this earlier comparison, each kept "
                         "only where today's first page reads it exactly as that comparison's first side did (same "
                         "label and p_adj: the same numbers, judged by the same rule), so its second side still "
                         "applies; a notebook with any other row must be in --notebooks")
    ap.add_argument("--without", nargs="+", metavar="NB", default=[],
                    help="notebooks this comparison covers without a second run (their tables were re-made and not "
                         "run again): recorded as no_second_run, so an older comparison's rows no longer apply")
    ap.add_argument("--second-run", action="append", default=[], metavar="NB=TEXT",
                    help="what the second page was for a notebook where it is not the file's (e.g. "
                         "'08_opta_before_after=the 1-thread run of f9f5abe'); the page names it")
    ap.add_argument("--also", nargs="+", default=[], metavar="OLD_JSON", type=Path,
                    help="earlier comparisons that still hold for the notebooks this one does not cover (another "
                         "second page, e.g. an earlier machine's): the page reads them after this one, in order")
    a = ap.parse_args(argv)
    if a.second.startswith("git:"):
        import tempfile
        second_cache, stale_ok = committed_cache(a.second[4:], a.scale, Path(tempfile.mkdtemp())), True
    else:
        second_cache, stale_ok = Path(a.second), False
    first, second = rows_of(a.first, a.scale), rows_of(second_cache, a.scale, stale_ok)
    carried: list[dict] = []
    if a.notebooks and a.carry:
        old = {(r["notebook"], r["id"]): r for r in json.loads(a.carry.read_text())["rows"]}
        moved = sorted({r["notebook"] for r in first if r["notebook"] not in a.notebooks + a.without
                        and not _same_first(r, old.get((r["notebook"], r["id"])))})
        if moved:
            raise SystemExit(f"verdict_stability: {', '.join(moved)} read otherwise than in {a.carry}'s first "
                             f"page: run them again with --notebooks")
        carried = [old[(r["notebook"], r["id"])] for r in first if r["notebook"] not in a.notebooks + a.without]
    if a.notebooks:
        first, second = ([r for r in rows if r["notebook"] in a.notebooks] for rows in (first, second))
    res = compare(first + [c["first"] for c in carried], second + [c["second"] for c in carried])
    if carried:
        res["carried"] = {"from": a.carry.name, "notebooks": sorted({c["notebook"] for c in carried})}
    res["scale"] = a.scale
    res["second_page"] = a.second
    if a.without:
        res["no_second_run"] = sorted(a.without)
    if a.also:
        res["also"] = [p.name for p in a.also]
    if a.second_run:
        res["second_runs"] = dict(x.split("=", 1) for x in a.second_run)
    res["notebooks"] = sorted({r["notebook"] for r in first} | set(res.get("carried", {}).get("notebooks", [])))
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
