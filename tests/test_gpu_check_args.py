"""``./study gpu-check`` refuses bad numbers and an existing file as --out before any work, with exit 2 (issue 29
item 5). Before: --step-timeout -1 marked every step timed out and reported FAIL on a healthy machine, --budget nan
and --jobs -3 were accepted, --out <a file> ended in a traceback."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check_args", REPO / "benchmarks" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


@pytest.mark.parametrize("args, want", [
    (["--step-timeout", "-1"], "argument --step-timeout: '-1': give a positive, finite number of seconds"),
    (["--step-timeout", "0"], "argument --step-timeout: '0': give a positive"),
    (["--budget", "nan"], "argument --budget: 'nan': give a positive, finite number of seconds"),
    (["--budget", "inf"], "argument --budget: 'inf'"),
    (["--budget", "-5"], "argument --budget: '-5'"),
    (["--budget", "soon"], "argument --budget: 'soon' is not a number of seconds"),
    (["--jobs", "-3"], "argument --jobs: '-3': give 1 or more"),
    (["--jobs", "0"], "argument --jobs: '0': give 1 or more"),
])
def test_bad_numbers_exit_2_before_any_work(gpu_check, monkeypatch, capsys, args, want):
    monkeypatch.setattr(gpu_check, "run_check", lambda a: pytest.fail("the check started"))
    with pytest.raises(SystemExit) as e:
        gpu_check.main(["--device", "cpu", "--tiny", *args])
    assert e.value.code == 2 and want in capsys.readouterr().err


def test_an_existing_file_as_out_exits_2(gpu_check, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(gpu_check, "run_check", lambda a: pytest.fail("the check started"))
    f = tmp_path / "results.md"
    f.write_text("mine")
    with pytest.raises(SystemExit) as e:
        gpu_check.main(["--device", "cpu", "--tiny", "--out", str(f)])
    assert e.value.code == 2 and f"argument --out: {f} is a file" in capsys.readouterr().err
    assert f.read_text() == "mine"


def test_good_numbers_reach_the_check(gpu_check, monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(gpu_check, "run_check", lambda a: seen.update(vars(a)) or 0)
    assert gpu_check.main(["--device", "cpu", "--tiny", "--step-timeout", "30", "--budget", "1e3", "--jobs", "3",
                           "--out", str(tmp_path / "new")]) == 0
    assert seen["step_timeout"] == 30.0 and seen["budget"] == 1000.0 and seen["jobs"] == 3
