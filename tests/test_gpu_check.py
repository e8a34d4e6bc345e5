"""``./study gpu-check`` (issue 22): the CPU plan at toy size runs every step and writes the results files; a
failing or hanging step makes it exit non-zero and still write them; ``./study wheels --dry-run`` lists what a
plain torch image lacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
STEPS = {"tests", "params", "notebook:90_use_your_data", "bench:nca", "bench:beclr", "bench:conv4",
         "bench:evaluator", "bench:opta"}


def _gpu_check(out: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, dict, str]:
    proc = subprocess.run([str(REPO / "study"), "gpu-check", "--device", "cpu", "--tiny", "--out", str(out), *args],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=900)
    found = sorted(out.glob("*.json"))
    assert len(found) == 1, (proc.stdout, proc.stderr)
    partial = "--only" in args
    assert found[0].name.startswith("cpu-") and ("-tiny-only-" in found[0].name) == partial
    assert found[0].name.endswith(".json") and ("-tiny" in found[0].name)
    return proc, json.loads(found[0].read_text()), found[0].with_suffix(".md").read_text()


@pytest.mark.slow
def test_tiny_cpu_plan_runs_every_step_and_writes_its_figures(tmp_path):
    proc, rep, md = _gpu_check(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = {s["name"]: s for s in rep["steps"]}
    assert set(steps) == STEPS
    for name, s in steps.items():
        assert s["status"] == "pass" and s["seconds"] > 0 and s["cpu_seconds"] > 0, s
        assert f"| {name} | pass |" in md
    assert rep["passed"] and "**PASS**" in md
    env = rep["environment"]
    assert env["device"] == "cpu" and env["torch"] == torch.__version__ and env["gpu"] is None
    # pytest's own report: the autocast tests ran and none failed or skipped
    t = steps["tests"]["figures"]
    assert t["passed"] >= 1 and t["failed"] == 0 and t["skipped"] == 0
    # the notebooks really executed: the executed copies hold outputs and papermill's injected parameters
    (executed,) = tmp_path.glob("*.d/notebooks/90_use_your_data.ipynb")
    nb = json.loads(executed.read_text())
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert injected and 'device = "cpu"' in "".join(injected[0]["source"])
    assert any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")
    # every benchmark row and its ratio, measured in this run (the ratios recomputed from the rows)
    f = rep["figures"]
    assert f["nca_project_over_official"] == pytest.approx(f["nca_project"] / f["nca_official"])
    for prec in ("bf16", "fp32"):
        over = 100 * (f[f"beclr_{prec}_nodyce_project"] / f[f"beclr_{prec}_dyce_project"] - 1)
        assert f[f"beclr_{prec}_dyce_overhead_pct"] == pytest.approx(over)
        share = 100 * (1 - f[f"beclr_{prec}_dyce_ceiling_eager"] / f[f"beclr_{prec}_nodyce_ceiling_eager"])
        assert f[f"beclr_{prec}_ceiling_dyce_share_pct"] == pytest.approx(share)
    # the ceiling row of every configuration: the loop as a fraction of the bare step, and the MFU from the
    # FLOP counter and the matrix rate measured in the same run (the compiled bare step is CUDA's)
    for step, key in (("nca", "nca"), ("beclr", "beclr_bf16_dyce"), ("conv4", "pn"), ("conv4", "spe"),
                      ("conv4", "set2model")):
        mu = steps[f"bench:{step}"]["figures"]["matrix_rate"]
        assert mu["dtype"] == "float32" and f[f"{step}_matrix_tflops"] == pytest.approx(mu["flops"] / 1e12)
        assert f[f"{key}_loop_over_ceiling_eager"] == pytest.approx(f[f"{key}_project"] / f[f"{key}_ceiling_eager"])
        assert f[f"{key}_gflop_per_step"] > 0
        row = next(r for r in steps[f"bench:{step}"]["figures"]["rows"] if r["key"] == f"{key}_project")
        want = f[f"{key}_gflop_per_step"] * 1e9 * (f[f"{key}_project"] / row["batch"]) / mu["flops"]
        assert f[f"{key}_mfu_loop"] == pytest.approx(want)
        assert f"{key}_ceiling_compiled" not in f
    assert "| nca_loop_over_ceiling_eager |" in md and "of the bare step's rate" in md
    ev = steps["bench:evaluator"]["figures"]
    assert ev["episodes"] == 50 and f["evaluator_speedup_cpu"] == pytest.approx(ev["numpy_loop_s"] / ev["batched_cpu_s"])
    assert 0.0 <= f["opta_cpu_agreement"] <= 1.0 and f["opta_cpu_batched_s"] > 0
    assert rep["targets"] == []  # the H100 targets are judged on CUDA only


def test_a_failing_step_exits_nonzero_and_still_writes_the_results(tmp_path):
    # pytest refuses an unknown option (exit status 4): a real failure of the tests step; params still passes
    proc, rep, md = _gpu_check(tmp_path, "--only", "tests,params", PYTEST_ADDOPTS="--no-such-option")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    steps = {s["name"]: s for s in rep["steps"]}
    assert set(steps) == {"tests", "params"}
    assert steps["tests"]["status"] == "fail" and "exit status 4" in steps["tests"]["detail"]
    # the summary's first line names what went wrong, not a fragment of the log's tail
    assert steps["tests"]["detail"].splitlines()[0].endswith("unrecognized arguments: --no-such-option")
    assert steps["params"]["status"] == "pass"
    assert not rep["passed"] and "**FAIL**" in md and "| tests | fail |" in md


def test_a_hanging_step_is_killed_at_its_limit(tmp_path):
    proc, rep, md = _gpu_check(tmp_path, "--only", "bench:evaluator", "--step-timeout", "0.3")
    assert proc.returncode == 1
    (step,) = rep["steps"]
    assert step["status"] == "timeout" and step["seconds"] < 30 and "| bench:evaluator | timeout |" in md


def test_unknown_step_and_missing_cuda_are_refused_before_any_work(tmp_path):
    out = subprocess.run([str(REPO / "study"), "gpu-check", "--tiny", "--only", "bench:nac", "--out", str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "bench:nac" in out.stderr and "bench:nca" in out.stderr
    assert not any(tmp_path.iterdir())
    if not torch.cuda.is_available():
        out = subprocess.run([str(REPO / "study"), "gpu-check", "--device", "cuda", "--out", str(tmp_path)],
                             capture_output=True, text=True)
        assert out.returncode == 2 and "torch sees no CUDA device" in out.stderr


def test_wheels_dry_run_lists_what_a_plain_torch_image_lacks(tmp_path):
    out = subprocess.run([str(REPO / "study"), "wheels", str(tmp_path / "w"), "--dry-run"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    pins = {p.split("==")[0] for p in out.stdout.split() if "==" in p}
    # GPU-NOTES: the H100 image lacked these; setuptools builds `pip install -e .` offline
    assert {"pot", "umap-learn", "pynndescent", "pytorch-metric-learning", "papermill", "nbval", "ipykernel",
            "setuptools"} <= pins
    assert not pins & {"torch", "torchvision", "numpy", "scipy", "scikit-learn", "pandas", "matplotlib"}
    assert not (tmp_path / "w").exists()


def test_cuda_selection_holds_every_test_that_skips_without_cuda_and_not_its_own_tests(monkeypatch):
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
    gc = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_check", gc)  # its dataclass looks its module up there
    spec.loader.exec_module(gc)
    files, expr, must = gc.pytest_selection(tiny=False)
    # tests that skip on a CPU machine today (grep -rn "cuda" tests | grep -i skip)
    known = {("tests/data/test_augment.py", "test_cuda_matches_cpu_geometry_and_runs"),
             ("tests/methods/test_set2model.py", "test_scores_stay_on_the_device"),
             ("tests/training/test_loop_guards.py", "test_no_per_step_host_sync_on_the_gpu"),
             ("tests/methods/test_dyce.py", "test_dyce_step_makes_no_host_sync_on_the_gpu")}
    assert known <= set(gc.cuda_only_tests())
    assert {f for f, _ in known} <= set(files) and {n for _, n in known} <= set(must)
    assert all(n in expr for _, n in known) and "autocast" in expr
    # "gpu" in -k matches this file's name: running it from the check would start the check again
    assert "tests/test_gpu_check.py" not in files


def _module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_check_plan", REPO / "benchmarks" / "gpu_check.py")
    gc = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check_plan"] = gc  # its dataclass looks its module up there
    spec.loader.exec_module(gc)
    return gc


def test_the_cuda_plan_fits_eight_minutes_with_set_up(tmp_path):
    """Issue 30: the plan's budget is explicit. Its parts (set-up, correctness, each timing step, the report)
    sum to at most 8 minutes; the run's deadline leaves the report its share; every timing step's limit is its
    part; the correctness steps leave the timing steps their parts; bench_train.py gets its limit less the
    margin as --budget, so it skips a compile rather than being killed."""
    gc = _module()
    assert sum(gc.PLAN_S.values()) <= 480
    assert gc.BUDGET_S["full"] + gc.PLAN_S["report"] == sum(gc.PLAN_S.values())
    plan = {s.name: s for s in gc.make_plan("cuda", False, tmp_path)}
    timing = [s for s in plan.values() if s.exclusive]
    assert {s.name for s in timing} == {k for k in gc.PLAN_S if k.startswith("bench:")}
    assert all(s.timeout == gc.PLAN_S[s.name] for s in timing)
    assert gc.BENCH_RESERVE_S == sum(s.timeout for s in timing)
    assert gc.PLAN_S["setup"] + gc.PLAN_S["correctness"] + gc.BENCH_RESERVE_S == gc.BUDGET_S["full"]
    for name in ("bench:nca", "bench:beclr", "bench:conv4"):
        argv = plan[name].argv
        assert float(argv[argv.index("--budget") + 1]) == plan[name].timeout - gc.BENCH_MARGIN_S
    assert "--compile" in plan["bench:nca"].argv and "--compile" not in plan["bench:beclr"].argv
    # the CPU plan runs the same steps (nothing exclusive there)
    cpu = gc.make_plan("cpu", True, tmp_path)
    assert [s.name for s in cpu] == gc.step_names(True) and not any(s.exclusive for s in cpu)


def test_a_failed_steps_summary_names_the_exception_not_the_tracebacks_context():
    """Stop 37's CI failed three steps with summaries "exit status 1: ep = step" and "^^^^": the last 600
    characters of a log are a traceback's source context. The summary names the exception instead."""
    gc = _module()
    python = ('Traceback (most recent call last):\n  File "x.py", line 3, in <module>\n    saved_step = step\n'
              '    ^^^^^^^^^^^^^^^^^\nOSError: [Errno 28] No space left on device: \'/c/run.pt\'\n')
    assert gc.failure_line(python) == "OSError: [Errno 28] No space left on device: '/c/run.pt'"
    # IPython (papermill) colours its traceback; a chained exception: the last one raised is the one to name
    ipython = ("\x1b[0;31mRuntimeError\x1b[0m: first\n\nThe above exception was the direct cause\n"
               "   \x1b[1;32m    460\x1b[0m saved_step \x1b[38;5;241m=\x1b[39m step\n"
               "\x1b[0;31mstudylib.utils.DiskFullError\x1b[0m: [Errno 28] No space left\n")
    assert gc.failure_line(ipython) == "studylib.utils.DiskFullError: [Errno 28] No space left"
    refused = "ERROR: usage: pytest [options]\npytest: error: unrecognized arguments: --x\n  rootdir: /r\n\n"
    assert gc.failure_line(refused) == "pytest: error: unrecognized arguments: --x"
    assert gc.failure_line("step 1\nkilled\n") == "killed" and gc.failure_line("") == "(the log is empty)"
    assert gc.failure_line("KeyboardInterrupt\n") == "KeyboardInterrupt"
