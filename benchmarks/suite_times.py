"""Where the test suite's time goes, from the JUnit XML of a run of ``./study test``.

    ./study test --junitxml out/suite.xml
    .venv/bin/python benchmarks/suite_times.py out/suite.xml

Prints the time of each part of the suite (nbval at smoke scale, the check scale, the other tests), each
notebook's nbval time (the sum of its cells: the notebook's smoke run from the cache the suite shares) and check
time, and the slowest test files. Times are the tests' own durations on their worker; the wall time of the suite is
about their sum divided by the number of workers, plus start-up and the last worker's tail.

    STUDYLIB_TEST_TIMELINE=out/timeline.tsv ./study test --junitxml out/suite.xml
    .venv/bin/python benchmarks/suite_times.py out/suite.xml --timeline out/timeline.tsv

adds each worker's units in the order it ran them (a notebook's nbval cells, a check-scale notebook, a test file),
with their start and end in minutes from the first test, and each worker's idle time at the end (tests/conftest.py
writes the file).
"""

from __future__ import annotations

import argparse
import collections
import re
import xml.etree.ElementTree as ET
from pathlib import Path


def durations(xml: Path) -> list[tuple[str, str, float]]:
    """``(classname, name, seconds)`` of every test case of a JUnit XML file."""
    root = ET.parse(xml).getroot()
    return [(c.get("classname", ""), c.get("name", ""), float(c.get("time", 0.0))) for c in root.iter("testcase")]


def unit_of(nodeid: str) -> str:
    """The scheduling unit of tests/conftest.py: a check-scale notebook, else the file (a notebook's nbval)."""
    if nodeid.startswith("tests/test_check_scale.py::test_check_scale_runs["):
        return "check " + nodeid.split("[", 1)[1].rstrip("]")
    return nodeid.split("::", 1)[0]


def timeline(path: Path) -> dict[str, list[tuple[str, float, float]]]:
    """``{worker: [(unit, start, end), ...]}`` in the order run, times in seconds from the suite's first test."""
    events = [ln.split("\t", 3) for ln in path.read_text().splitlines() if ln.count("\t") == 3]
    t0 = min(float(t) for _, _, t, _ in events)
    out: dict[str, list[tuple[str, float, float]]] = collections.defaultdict(list)
    for worker, event, t, nodeid in sorted(events, key=lambda e: (e[0], float(e[2]), e[1] == "start")):
        unit, at = unit_of(nodeid), float(t) - t0
        runs = out[worker]
        if event == "start" and (not runs or runs[-1][0] != unit):
            runs.append((unit, at, at))
        elif runs and runs[-1][0] == unit:
            runs[-1] = (unit, runs[-1][1], at)
    return dict(out)


def print_timeline(path: Path, min_seconds: float = 10.0) -> None:
    lines = timeline(path)
    end = max(r[-1][2] for r in lines.values())
    for worker, runs in sorted(lines.items()):
        busy = sum(b - a for _, a, b in runs)
        print(f"\n{worker}: {busy / 60:.1f} min in tests, idle {(end - runs[-1][2]) / 60:.1f} min at the end "
              f"(units under {min_seconds:.0f} s folded)")
        small = 0.0
        for unit, a, b in runs:
            if b - a < min_seconds:
                small += b - a
                continue
            print(f"  {a / 60:5.1f}-{b / 60:5.1f} min  {b - a:6.1f} s  {unit}")
        print(f"  {'':15s}  {small:6.1f} s  in shorter units")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("xml", type=Path, help="the --junitxml file of a ./study test run")
    ap.add_argument("--files", type=int, default=15, help="how many of the slowest test files to list")
    ap.add_argument("--timeline", type=Path, help="the STUDYLIB_TEST_TIMELINE file of the same run")
    args = ap.parse_args(argv)
    cases = durations(args.xml)
    smoke: dict[str, float] = collections.defaultdict(float)
    check: dict[str, float] = {}
    files: dict[str, float] = collections.defaultdict(float)
    for cls, name, t in cases:
        if cls.startswith("notebooks.") or ".ipynb" in cls:  # nbval: one case per cell
            smoke[re.sub(r"^notebooks\.|\.ipynb$", "", cls)] += t
        elif name.startswith("test_check_scale_runs["):
            check[name[len("test_check_scale_runs["):-1]] = t
        else:
            files[cls] += t  # the test module (module.Class for tests in a class)
    total = sum(t for *_, t in cases)
    parts = {"nbval (smoke)": sum(smoke.values()), "check scale": sum(check.values()), "other tests": sum(files.values())}
    print(f"{len(cases)} test cases, {total / 60:.1f} min of test time")
    for k, v in parts.items():
        print(f"  {k:<14} {v / 60:5.1f} min")
    print("\n| notebook | nbval (smoke) | check |\n| --- | --- | --- |")
    for nb in sorted(set(smoke) | set(check)):
        s = f"{smoke[nb]:.0f} s" if nb in smoke else "-"
        c = f"{check[nb] / 60:.1f} min" if nb in check else "-"
        print(f"| {nb} | {s} | {c} |")
    print("\nslowest test files:")
    for f, t in sorted(files.items(), key=lambda kv: -kv[1])[:args.files]:
        print(f"  {t:6.1f} s  {f}")
    if args.timeline:
        print_timeline(args.timeline)


if __name__ == "__main__":
    main()
