"""The study's commands against hostile input (issue 40, part B): every case of the issue answered by one line
naming the argument and the fix, before any expensive work; nothing read outside where it belongs.

Each test names its case as the issue reproduced it (on 578d2a7) and what was wrong then. The commands' ``main``
functions run in this process (seconds); the Ctrl-C tests run the real command.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import sigint_default
from studylib import config, preflight
from studylib.claims import page as P
from studylib.claims import power
from studylib.claims import store as C

REPO = Path(__file__).resolve().parent.parent
NB = "00_quickstart"


def _check(capsys, *argv: str) -> tuple[int, str]:
    code = preflight.main([NB, *argv])
    return code, capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- -y and seeds

def test_repeated_seeds_are_refused_by_the_check_and_by_the_notebooks_validation(capsys):
    """Silent before: ``./study run 00 -y "seeds: [0, 0]"`` reported one run as "2 seeds, 74.6 +- 3.2" and judged a
    claim on it (p = 0.0287)."""
    code, err = _check(capsys, "-y", "seeds: [0, 0]")
    assert code == 1
    assert ("  - seeds: parameter 'seeds' = [0, 0] in the command line (-p/-y) repeats seed 0: each seed is one "
            "training run, so a repeat would count the same run twice; give distinct seeds, e.g. -y "
            "\"seeds: [0, 1]\"") in err.splitlines()
    from studylib.experiments.quickstart import Params
    with pytest.raises(config.ParamError, match=r"repeats seeds 3, 5: .* -y \"seeds: \[3, 5, 0, 1\]\""):
        config.validate(Params, {"seeds": [3, 3, 5, 5]}, where="notebook 00_quickstart")  # the notebook's own path
    assert config.validate(Params, {"seeds": [2, 0, 1]}).seeds == [2, 0, 1]


def test_a_deeply_nested_y_is_one_line_not_a_recursion_error(capsys):
    """Traceback before: a 3000-level nested ``-y`` raised RecursionError from PyYAML's composer."""
    code, err = _check(capsys, "-y", "a: " + "[" * 3000 + "]" * 3000)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("study: -y 'a: [[[[") and "nest more than 32 levels deep" in err


def test_an_unquoted_date_says_quote_it(capsys):
    """Unclear before: ``-y 'data_root: 2026-01-01'`` was refused as a date without saying "quote it"."""
    code, err = _check(capsys, "-y", "data_root: 2026-01-01")
    assert code == 1
    assert ("YAML reads an unquoted 2026-01-01 as a date: quote it, e.g. -y \"data_root: '2026-01-01'\"") in err


@pytest.mark.parametrize("how", ["-y", "-p"])
def test_a_5000_digit_number_names_its_parameter(capsys, how):
    """Unclear before: Python's digit-limit message ("Exceeds the limit (4300 digits) ...") named no parameter."""
    digits = "9" * 5000
    code, err = _check(capsys, *(["-y", f"epochs: {digits}"] if how == "-y" else ["-p", "epochs", digits]))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "4300" not in err
    assert "epochs" in err and "a number written with 5,000 characters is beyond every parameter's range" in err
    assert ("e.g. -y 'epochs: 10'" if how == "-y" else "e.g. -p epochs 10") in err


# ------------------------------------------------------------------------------------ variant parameter files

@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout with notebook 00's smoke file and a broken, untracked variant of it (smoke-old.yaml)."""
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    (root / "params" / NB).mkdir(parents=True)
    (root / "params" / NB / "smoke.yaml").write_text((REPO / "params" / NB / "smoke.yaml").read_text())
    (root / "params" / NB / "smoke-old.yaml").write_text("epochz: 2\n")
    monkeypatch.chdir(root)
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path / "cache"))
    return root


def test_a_broken_variant_file_is_named_by_the_check_and_cannot_fail_the_run_at_its_end(checkout, capsys):
    """Unclear before: a broken untracked ``params/00_quickstart/smoke-old.yaml`` passed the check, then ``./study
    run 00`` trained and failed at the end on it (the claims table is matched against every variant)."""
    report = preflight.check(NB, "smoke")
    assert report.ok and report.warnings[0].startswith(
        f"params/{NB}/smoke-old.yaml (a variant of smoke) is ignored: unknown parameter 'epochz' in params/{NB}/"
        "smoke-old.yaml; did you mean 'epochs'?")
    assert report.warnings[0].endswith("; fix it or delete it")
    assert C.table_name(NB, "smoke", "0123456789ab") == "smoke"  # what saving the table asks, at the run's end
    assert f"claims: params/{NB}/smoke-old.yaml is ignored: unknown parameter 'epochz'" in capsys.readouterr().err


# -------------------------------------------------------------------------------------------- ./study power

def _power(capsys, *argv: str) -> tuple[int, str, str]:
    code = power.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_power_names_an_unknown_notebook(capsys):
    """Traceback before: ``./study power nosuch`` (ValueError)."""
    code, out, err = _power(capsys, "nosuch")
    assert code == 2 and out == "" and err.startswith("power: no notebook 'nosuch' in ") and "see ./study list" in err


def test_pilot_is_a_name_of_the_notebooks_parameter_files_never_a_path(capsys, tmp_path, monkeypatch):
    """Read outside before: ``--pilot ../../../../x/evil`` read ``evil.claims.json`` outside the repository (and,
    with a table lacking "scale", crashed with KeyError); ``--pilot nonsense`` suggested a run that fails."""
    evil = tmp_path / "x" / "evil.claims.json"
    evil.parent.mkdir()
    evil.write_text(json.dumps({"notebook": NB, "claims": []}))
    reads = []
    monkeypatch.setattr(C, "load_table_file", lambda path: reads.append(path))
    relative = os.path.relpath(evil.with_name("evil"), REPO / "params" / NB)
    for pilot in (relative, "nonsense", "/etc/passwd"):
        code, out, err = _power(capsys, NB, "--pilot", pilot)
        assert code == 2 and out == "" and reads == []
        assert err == (f"power: --pilot {pilot}: not a parameter file of {NB}; {NB}'s pilots: smoke, evidence, "
                       "check, paper (e.g. --pilot smoke)\n")


def test_a_notebook_without_the_pilot_scale_is_told_so_without_a_command_that_fails(capsys):
    """Unclear before: ``./study power 90 --pilot evidence`` suggested ``./study run --scale evidence 90...``, which
    fails (notebook 90 has no evidence scale)."""
    code, _, err = _power(capsys, "90", "--pilot", "evidence")
    assert code == 2 and "./study run" not in err
    assert err.startswith("power: --pilot evidence: not a parameter file of 90_use_your_data; 90_use_your_data's "
                          "pilots: smoke, check, paper")
    lines = power.report(["90_use_your_data"], "evidence").splitlines()
    assert lines[0] == ("90_use_your_data: no evidence scale (no params/90_use_your_data/evidence.yaml), so no "
                        "evidence table")


def test_a_missing_or_damaged_pilot_table_is_one_line_with_the_command_that_makes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path))
    (tmp_path / "claims" / NB).mkdir(parents=True)
    (tmp_path / "claims" / NB / "smoke.json").write_text(json.dumps({"notebook": NB, "claims": []}))  # no "scale"
    first = power.report([NB], "smoke").splitlines()[0]
    assert first.startswith(f"{NB}: the smoke table {tmp_path}/claims/{NB}/smoke.json is damaged (KeyError: 'scale')")
    assert first.endswith(f"re-make it: ./study run --scale smoke {NB}")
    assert power.report([NB], "paper").splitlines()[0] == (
        f"{NB}: no paper table yet; ./study run --scale paper {NB} makes one (it needs the paper's data: ./study "
        f"check --scale paper {NB} says whether this machine has it)")


def test_ctrl_c_of_power_is_one_line_and_status_130(tmp_path):
    """Traceback before: Ctrl-C of ``./study power`` printed a KeyboardInterrupt traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "studylib.claims.power"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    time.sleep(1.5)  # importing, or computing the first notebooks (all of them take several seconds)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGINT, err  # the shell reports 130
    assert "Traceback" not in err and err.strip().splitlines()[-1] in ("power: interrupted", "study: interrupted")


# ------------------------------------------------------------------------------------------ ./study results

@pytest.mark.parametrize("argv, message", [
    (["--csv", "/proc/x"], "results: --csv /proc/x: cannot write in /proc ("),
    (["--csv", "{tmp}/missing/x.csv"],
     "results: --csv {tmp}/missing/x.csv: the folder {tmp}/missing does not exist; create it first (mkdir -p "
     "{tmp}/missing)"),
    (["--latex", "{tmp}"],
     "results: --latex {tmp}: that is a folder; name a file in it, e.g. --latex {tmp}/out.tex"),
    (["--csv", "/dev/null"], "results: --csv /dev/null: not a regular file"),
    (["--per-seed", "--width", "-5"], "results: --width -5: the table needs at least 40 columns; give --width 40"),
    (["--store", "{tmp}/nowhere"], "results: --store {tmp}/nowhere: no such folder; give the run store's folder"),
    (["--store", "{tmp}/file"], "results: --store {tmp}/file: a file, not a folder; give the run store's folder"),
])
def test_results_arguments_are_checked_before_the_store_is_read(argv, message, tmp_path, capsys, monkeypatch):
    """Tracebacks before: ``--csv /proc/x``, ``--csv`` into a missing folder, ``--latex`` at a folder, ``--per-seed
    --width -5``; unclear: ``--store`` at a missing folder or a file answered "no runs"."""
    from studylib import results
    from studylib.training.runstore import RunStore
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(RunStore, "list_runs", lambda self: pytest.fail("the store was read"))
    code = results.main([a.format(tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith(message.format(tmp=tmp_path))


def test_a_run_with_a_garbage_config_is_listed_as_damaged(tmp_path):
    """Unclear before: runs with a garbage ``config.json`` were listed as "empty", not "damaged"."""
    from studylib.training.runstore import RunStore
    store = RunStore(tmp_path / "store")
    run = store.run("pn", {"method": "pn"})
    run.open()
    (run.path / "config.json").write_text("garbage")  # checksummed run: fails its checksum
    old = tmp_path / "store" / "old-0123456789ab"  # a run of the format before checksums, not JSON
    old.mkdir()
    (old / "config.json").write_text("{")
    fine = store.run("nca", {"method": "nca"})
    fine.open()
    status = {i.name.split("-")[0]: i.status for i in store.list_runs()}
    assert status == {"pn": "damaged", "old": "damaged", "nca": "empty"}


# ------------------------------------------------------------------------------------------- ./study claims

@pytest.mark.parametrize("out, message", [
    ("/proc/x", "claims: --out /proc/x: cannot write in /proc ("),
    ("{tmp}", "claims: --out {tmp}: that is a folder; name a file in it, e.g. --out {tmp}/out.md"),
])
def test_claims_out_is_checked_before_the_page_is_built(out, message, tmp_path, capsys, monkeypatch):
    """Traceback before: ``./study claims --out /proc/x`` or at a folder failed after 15 s of work, naming a
    temporary file."""
    monkeypatch.setattr(P, "page_rows", lambda *a, **k: pytest.fail("the page was built"))
    assert P.main(["--out", out.format(tmp=tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(message.format(tmp=tmp_path))
    assert P.main(["--save", "bogus", NB]) == 2
    assert capsys.readouterr().err.startswith("claims: --save bogus: not a scale; give one of smoke, evidence")


# ---------------------------------------------------------------------------------------------- api.load_run

def test_load_run_takes_names_as_names_and_says_when_a_folder_is_no_run(tmp_path):
    """Traceback before: ``api.load_run('**')`` (glob's ValueError); unclear: ``load_run('../../../../etc')``
    said /etc is "not a finished training run"."""
    from studylib import api
    store = tmp_path / "store"
    (store / "nca-0123456789ab").mkdir(parents=True)
    for pattern in ("**", "*", "[a", "nca?"):
        with pytest.raises(FileNotFoundError, match=r"no run '.*' \(a run folder, or a run name or prefix in "):
            api.load_run(pattern, store=store)
    with pytest.raises(FileNotFoundError, match=r"no run folder 'x/../../..': pass a run folder that exists"):
        api.load_run("x/../../..", store=store)
    folder = tmp_path / "etc"
    folder.mkdir()
    with pytest.raises(FileNotFoundError, match=r"etc is not a run folder \(it holds no config.json\)"):
        api.load_run(os.path.relpath(folder), store=store)
