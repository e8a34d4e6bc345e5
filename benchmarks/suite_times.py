"""Where the test suite's time goes, from the JUnit XML of a run of ``./study test``.

    ./study test --junitxml out/suite.xml
    .venv/bin/python benchmarks/suite_times.py out/suite.xml

Prints the time of each part of the suite (nbval at smoke scale, the check scale, the other tests), each
notebook's nbval time (the sum of its cells: the notebook's smoke run from the cache the suite shares) and check
time, and the slowest test files. Times are the tests' own durations on their worker; the wall time of the suite is
about their sum divided by the number of workers, plus start-up and the last worker's tail.
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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("xml", type=Path, help="the --junitxml file of a ./study test run")
    ap.add_argument("--files", type=int, default=15, help="how many of the slowest test files to list")
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


if __name__ == "__main__":
    main()
