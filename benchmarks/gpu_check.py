"""``./study gpu-check``: the GPU path in one command (issue 22): CUDA tests, every notebook's check scale on the
device, and a short run of every benchmark row, each step a subprocess with its own time limit.

Plan (the same steps in both modes; ``--tiny`` shrinks each one):

* ``tests``: pytest over every test that skips without CUDA (found by reading ``tests/`` for
  ``skipif(not torch.cuda.is_available() ...)``) plus the device and autocast tests (test names with cuda, gpu,
  device, autocast, bf16 or bfloat16 in the files that mention CUDA or autocast). On CUDA a skipped test
  fails the step: it proves nothing. ``--tiny``: the bf16-autocast tests of ``tests/numerics/test_ot_sinkhorn.py``
  (Sinkhorn, DyCE and OpTA under autocast: where the H100 run found BECLR's bf16 crash).
* ``params``: every notebook's ``params/<nb>/check.yaml`` (with the device override) validated against its
  schema (``studylib.experiments.<name>.Params``), so a broken parameter file fails in seconds.
* ``notebook:<nb>``: papermill at check scale with ``-p device <device>`` where the schema has ``device``. The
  notebooks have no precision parameter: the training loop runs bf16 autocast on CUDA (``TrainConfig.amp``,
  what the paper parameters use) and fp32 on the CPU; a schema with an ``amp`` field gets paper.yaml's value.
  On CUDA several run at once, the longest first. ``--tiny`` executes one notebook (the check scale of all 15
  takes about 25 CPU-minutes; every check.yaml is still validated): 90 cut further (one seed, 32 px, 5
  episodes), which goes through papermill's parameter injection, the kernel, the training loop, evaluation and
  ``studylib.api`` on the device in about 14 CPU-seconds.
* ``bench:nca``, ``bench:beclr``, ``bench:conv4``, ``bench:evaluator``, ``bench:opta``:
  ``benchmarks/bench_train.py`` (each configuration's loop next to its bare step, the loop as a fraction of
  it, FLOPs per step and MFU against the matrix rate measured in the run: NCA ResNet-12 84 px, with the
  compiled bare step and the compiled loop on CUDA, and the official-style PIL + DataLoader pipeline; BECLR
  ResNet-18 224 px with/without DyCE in bf16 and in fp32; the Conv4 PN, SPE and S2M-Gauss paper configurations),
  ``bench_evaluator.py`` and ``bench_opta.py`` on 2000 episodes. On CUDA they run one at a time after the
  correctness steps (nothing else on the GPU while they time it).

Budget (CUDA): :data:`PLAN_S`, at most 8 minutes in all with set-up; every timing step has its own limit and
``bench_train.py`` skips (and names) a compiled measurement that would not fit it.

Writes ``<out>/<gpu name>-<date>.json`` and ``.md`` (device, driver, torch, every step with status and seconds,
every figure, targets) even when a step fails, and exits 1 if any step did not pass. Logs and executed
notebooks go to ``<out>/<stem>.d/`` (``out/gpu-check/<stem>/`` when writing to ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as _dt
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's studylib, whatever the venv has installed
RESULTS = REPO / "benchmarks" / "results"
#: The plan's budget on CUDA in seconds (issue 30: ``./study gpu-check`` in one call under 8 minutes on an H200,
#: set-up included), and each part's time limit. The comments give what the H200 run of 2026-11-26 took, or
#: "new" where the part did not exist then (to be measured by the next GPU session). The correctness steps
#: (tests, params, notebooks) share their part, 6 at a time; the timing steps then run one after another, each
#: within its own limit (bench_train.py gets its limit less BENCH_MARGIN_S as --budget, so it skips a compiled
#: measurement that would not fit instead of being killed). ``report`` is what is left after the last step.
PLAN_S = {
    "setup": 40.0,             # ./study's set-up (pip from the carried wheels): 32
    "correctness": 125.0,      # tests (20), params (6), 15 notebooks at check scale, 6 at a time: about 100 in all
    "bench:nca": 135.0,        # 49 for loop + official-style; new: bare step eager and compiled, compiled loop, FLOPs
    "bench:beclr": 80.0,       # 75 for 4 loop rows of 25 steps; now 15 timed steps, 4 loop + 4 bare-step rows
    "bench:conv4": 45.0,       # new: PN, SPE 64-d, S2M-Gauss, loop and bare step, one epoch each
    "bench:evaluator": 15.0,   # 5
    "bench:opta": 20.0,        # 9
    "report": 10.0,
}
#: what bench_train.py leaves of its step's limit for starting (imports) and ending
BENCH_MARGIN_S = 15.0
#: wall-clock budget of a run (issue 22: at most 8 minutes with set-up); steps not started by then fail. CUDA:
#: the plan above without its report share.
BUDGET_S = {"full": sum(v for k, v in PLAN_S.items() if k != "report"), "tiny": 400.0}
#: the time limit of every step in --tiny mode: only a guard against a hang (CI machines are slow and shared)
TINY_LIMIT_S = 180.0
#: test names that select the device and autocast tests (pytest ``-k``)
TEST_WORDS = ("cuda", "gpu", "device", "autocast", "bf16", "bfloat16")
TINY_NOTEBOOKS = {"90_use_your_data": {"seeds": [0], "image_size": 32, "eval_episodes": 5, "eval_mean_images": 8}}
#: check-scale minutes of each notebook on the 2-core CPU (README table): the longest start first
CHECK_MINUTES = {"00_quickstart": 0.8, "01_episodes_pairs": 0.2, "02_batch_size_sweep": 1.1, "03_pair_subsampling": 1.3,
                 "04_ablations": 2.4, "05_comparison": 3.7, "06_beclr_pretraining": 1.5, "07_dyce_memory_umap": 2.7,
                 "08_opta_before_after": 3.9, "09_spe_synthetic": 0.7, "10_spe_omniglot": 2.2, "11_set2model": 1.3,
                 "12_set2model_omniglot": 0.4, "13_infopatch": 1.5, "90_use_your_data": 0.2}
#: seconds of the budget kept for the timing steps on CUDA (they run after the correctness steps)
BENCH_RESERVE_S = sum(v for k, v in PLAN_S.items() if k.startswith("bench:"))
#: targets of issues 9 and 30 (reported, not failures: the check proves the path; the figures are facts)
TARGETS = (("nca_project", ">=", 16000.0, "NCA ResNet-12 84 px img/s (H100, issue 9)"),
           ("nca_project_over_official", ">=", 4.0, "NCA project / official-style"),
           ("nca_loop_over_ceiling", ">=", 0.9, "NCA loop / bare step (best of each)"),
           ("beclr_bf16_dyce_overhead_pct", "<", 10.0, "BECLR DyCE overhead in bf16, %"))


@dataclass
class Step:
    """One item of the plan: a command run as a subprocess (own process group) under ``timeout`` seconds."""
    name: str
    kind: str                      # tests | params | notebook | bench
    argv: list[str]
    timeout: float
    exclusive: bool = False        # timing step: runs alone on the device
    json_out: str | None = None    # figures the command writes
    info: dict[str, Any] = field(default_factory=dict)
    status: str = "planned"        # pass | fail | timeout | not run
    seconds: float | None = None   # wall
    cpu_seconds: float | None = None  # user + system of the step's processes (the honest figure on a busy CPU)
    detail: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    log: str | None = None


def cuda_only_tests(root: Path = REPO) -> list[tuple[str, str]]:
    """``(file, test name)`` of every test under ``root/tests`` marked ``skipif(not torch.cuda.is_available())``."""
    found = []
    pat = re.compile(r"@pytest\.mark\.skipif\(\s*not torch\.cuda\.is_available\(\)[^\n]*\n(?:@[^\n]*\n)*"
                     r"def (test_\w+)")
    for path in sorted((root / "tests").rglob("test_*.py")):
        for m in pat.finditer(path.read_text()):
            found.append((str(path.relative_to(root)), m.group(1)))
    return found


def pytest_selection(tiny: bool, root: Path = REPO) -> tuple[list[str], str, list[str]]:
    """(files, ``-k`` expression, names that must run and not skip on CUDA) of the ``tests`` step."""
    if tiny:
        return ["tests/numerics/test_ot_sinkhorn.py"], "autocast", []
    cuda = cuda_only_tests(root)
    files = {f for f, _ in cuda}
    for path in sorted((root / "tests").rglob("test_*.py")):
        text = path.read_text()
        if path.name == "test_gpu_check.py":
            continue  # this command's own tests: they would run it again
        if "cuda" in text or "autocast" in text:
            files.add(str(path.relative_to(root)))
    names = [n for _, n in cuda]
    return sorted(files), " or ".join([*TEST_WORDS, *names]), names


def notebook_names(root: Path = REPO) -> list[str]:
    return sorted(p.stem for p in (root / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def schema_of(notebook: str) -> type:
    from studylib.paths import experiment_module
    return experiment_module(notebook).Params


def notebook_overrides(notebook: str, device: str, tiny: bool) -> tuple[dict[str, Any], str]:
    """The ``-p`` parameters of a notebook's check run and the precision its training uses on ``device``."""
    import dataclasses

    from studylib.config import read_param_file
    fields = {f.name for f in dataclasses.fields(schema_of(notebook))}
    over: dict[str, Any] = dict(TINY_NOTEBOOKS.get(notebook, {})) if tiny else {}
    if "device" in fields:
        over["device"] = device
    amp = True  # TrainConfig.amp: bf16 autocast on CUDA unless a schema exposes it
    if "amp" in fields:
        amp = bool(read_param_file(REPO / "params" / notebook / "paper.yaml").get("amp", True))
        over["amp"] = amp
    return over, ("bf16 autocast" if amp and device == "cuda" else "fp32")


def validate_all(device: str, tiny: bool) -> int:
    """The ``params`` step: every notebook's check.yaml plus its overrides, validated against its schema."""
    from studylib.config import read_param_file, validate
    bad = 0
    for nb in notebook_names():
        try:
            over, prec = notebook_overrides(nb, device, tiny)
            values = {**read_param_file(REPO / "params" / nb / "check.yaml"), **over}
            validate(schema_of(nb), values, where=f"params/{nb}/check.yaml + {over}")
            print(f"{nb}: ok ({prec})")
        except Exception as e:  # noqa: BLE001 - every notebook is reported, then the step fails
            print(f"{nb}: FAILED: {type(e).__name__}: {e}")
            bad += 1
    return 1 if bad else 0


def make_plan(device: str, tiny: bool, work: Path, step_timeout: float | None = None) -> list[Step]:
    """Every step of the check, in the order they are started."""
    py = sys.executable
    me = str(Path(__file__).resolve())
    cuda = device == "cuda"
    t = (lambda full, small: step_timeout if step_timeout is not None else (small if tiny else full))
    files, expr, must = pytest_selection(tiny)
    steps = [Step("tests", "tests", [py, "-m", "pytest", *files, "-k", expr, "-q", "-p", "no:cacheprovider",
                                     f"--junitxml={work / 'tests.xml'}"], t(150, TINY_LIMIT_S),
                  info={"files": files, "k": expr, "must_run": must})]
    steps.append(Step("params", "params", [py, me, "validate", "--device", device] + (["--tiny"] if tiny else []),
                      t(60, TINY_LIMIT_S)))
    longest_first = sorted(notebook_names(), key=lambda n: -CHECK_MINUTES.get(n, 5.0))
    for nb in (TINY_NOTEBOOKS if tiny else longest_first):
        over, prec = notebook_overrides(nb, device, tiny)
        argv = [py, "-m", "papermill", "--cwd", "notebooks", f"notebooks/{nb}.ipynb",
                str(work / "notebooks" / f"{nb}.ipynb"), "-f", f"params/{nb}/check.yaml", "-k", "python3",
                "--log-level", "WARNING"]
        for k, v in over.items():
            argv += ["-y", json.dumps({k: v})]
        steps.append(Step(f"notebook:{nb}", "notebook", argv, t(240, TINY_LIMIT_S), info={"params": over, "precision": prec}))
    bench = REPO / "benchmarks"
    size = ["--tiny"] if tiny else []
    j = (lambda n: str(work / f"{n}.json"))

    def train_bench(rows: str, *extra: str) -> Step:
        """bench_train.py on ``rows`` within its step's limit (less BENCH_MARGIN_S)."""
        name = f"bench:{rows}"
        limit = t(PLAN_S[name], TINY_LIMIT_S)
        argv = [py, str(bench / "bench_train.py"), "--rows", rows, *extra, "--device", device, *size,
                "--budget", f"{max(limit - BENCH_MARGIN_S, 1.0):g}", "--json", j(rows)]
        return Step(name, "bench", argv, limit, exclusive=cuda, json_out=j(rows))

    steps += [
        # the loop with its backbone compiled too on CUDA (the 0.9-of-the-compiled-bare-step target)
        train_bench("nca", *(["--compile"] if cuda else [])),
        train_bench("beclr", "--precision", "both"),
        # reported, not targeted: the eager bare step only (three more compiles would not fit the budget)
        train_bench("conv4", "--ceiling-compile", "off"),
        Step("bench:evaluator", "bench",
             [py, str(bench / "bench_evaluator.py"), "--json", j("evaluator"), "--threads", "1"]
             + (["--classes", "20", "--per-class", "30", "--dim", "64", "--episodes", "50", "--no-cache"] if tiny
                else ["--episodes", "2000", "--loop-episodes", "500"]) + ([] if cuda else ["--no-cuda"]),
             t(PLAN_S["bench:evaluator"], TINY_LIMIT_S), exclusive=cuda, json_out=j("evaluator")),
        Step("bench:opta", "bench",
             [py, str(bench / "bench_opta.py"), "--device", device, "--skip-dyce", "--json", j("opta")]
             + (["--episodes", "40", "--baseline-episodes", "4", "--chunk", "40", "--per-class", "20",
                 "--threads", "1"] if tiny else ["--episodes", "2000", "--baseline-episodes", "50"]),
             t(PLAN_S["bench:opta"], TINY_LIMIT_S), exclusive=cuda, json_out=j("opta")),
    ]
    return steps


def _tail(path: Path, n: int = 1500) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-n:]


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# the last line of a Python or IPython traceback: "OSError: [Errno 28] ...", "studylib.x.DiskFullError: ..."
_RAISED = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b(?::.*)?$", re.M)


def failure_line(log_text: str) -> str:
    """The line a reader needs from a failed step's log: the last exception a traceback names (ANSI colour
    codes removed), else the last line that says "error", else the last non-empty line. A log's last 600
    characters are mostly a traceback's source context: the step's one-line summary used to show a fragment of
    that (stop 37's CI: "exit status 1: ep = step") instead of the error."""
    text = _ANSI.sub("", log_text)
    raised = _RAISED.findall(text)
    if raised:
        return raised[-1].strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.search(r"\berror\b", ln, re.I)]  # e.g. a refused command line
    return (errors or lines or ["(the log is empty)"])[-1]


def _wait(proc: subprocess.Popen, limit: float) -> tuple[int | None, Any]:
    """Wait for ``proc`` up to ``limit`` seconds: (exit status or None when killed, its resource usage, which
    counts the descendants it reaped, e.g. papermill's kernel). At the limit its process group is killed."""
    end = time.monotonic() + limit
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage
        if time.monotonic() >= end:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = -9
            return None, usage
        time.sleep(0.05)


def run_step(step: Step, work: Path, env: dict[str, str], deadline: float) -> Step:
    """Run one step (its whole process group is killed at its time limit or the run's deadline)."""
    left = deadline - time.monotonic()
    if left <= 1:
        step.status, step.detail = "not run", "the run's time budget was spent before this step could start"
        return step
    limit = min(step.timeout, left)
    for stale in (step.json_out, work / "tests.xml" if step.kind == "tests" else None):
        if stale:  # a file left by an earlier run in the same folder must not pass for this run's figures
            Path(stale).unlink(missing_ok=True)
    log = work / "logs" / (step.name.replace(":", "-") + ".log")
    step.log = str(log)
    t0 = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(step.argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        rc, usage = _wait(proc, limit)
    step.seconds = round(time.monotonic() - t0, 2)
    step.cpu_seconds = round(usage.ru_utime + usage.ru_stime, 2) if usage is not None else None
    if rc is None:
        step.status, step.detail = "timeout", f"killed after {limit:.0f} s (its limit)"
    elif rc != 0:
        text = _tail(log, 20000)  # read once: the error line is searched in it, the last 600 characters shown
        step.status = "fail"
        step.detail = f"exit status {rc}: {failure_line(text)[:400]}\nlog tail:\n{text[-600:]}"
    else:
        step.status = "pass"
    if step.json_out and Path(step.json_out).exists():
        step.figures = json.loads(Path(step.json_out).read_text())
    if step.kind == "tests":
        _judge_tests(step, work / "tests.xml", env.get("GPU_CHECK_DEVICE") == "cuda")
    return step


def _judge_tests(step: Step, xml: Path, cuda: bool) -> None:
    """Counts from pytest's JUnit XML; none collected fails, and on CUDA so does any skipped test."""
    if not xml.exists():
        step.status = "fail" if step.status == "pass" else step.status
        step.detail = step.detail or "pytest wrote no report"
        return
    ran, skipped, failed = [], [], []
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("name", "")
        if case.find("skipped") is not None:
            skipped.append(name)
        elif case.find("failure") is not None or case.find("error") is not None:
            failed.append(name)
        else:
            ran.append(name)
    step.figures = {"passed": len(ran), "failed": len(failed), "skipped": len(skipped),
                    "failed_names": failed, "skipped_names": skipped}
    missing = [n for n in step.info.get("must_run", []) if not any(r.split("[")[0] == n for r in ran)]
    problems = []
    if not ran and not failed:
        problems.append("no test ran")
    if cuda and skipped:
        problems.append(f"skipped on CUDA: {', '.join(skipped)}")
    if cuda and missing:
        problems.append(f"CUDA-only tests that did not pass: {', '.join(missing)}")
    if problems and step.status == "pass":
        step.status = "fail"
    step.detail = "; ".join(filter(None, [step.detail if step.status != "pass" else "", *problems]))


def environment(device: str) -> dict[str, Any]:
    """Device, driver, torch and CUDA versions, host and time of this run."""
    import platform

    import torch
    env: dict[str, Any] = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda,
                           "python": platform.python_version(), "host": platform.node(),
                           "cpus": os.cpu_count(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name(0)
        props = torch.cuda.get_device_properties(0)
        env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=20).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            env["driver"] = None
    else:
        env["gpu"], env["driver"] = None, None
        env["cpu"] = platform.processor() or platform.machine()
    return env


def key_figures(steps: list[Step]) -> dict[str, float]:
    """The headline figures: img/s of every bench_train row, its ratios, evaluator and OpTA times."""
    out: dict[str, float] = {}
    for s in steps:
        f = s.figures
        if s.name in ("bench:nca", "bench:beclr", "bench:conv4") and f:
            out.update({r["key"]: r["img_per_s"] for r in f.get("rows", [])})
            ratios = dict(f.get("ratios", {}))
            if "matrix_tflops" in ratios:  # each step times the matrix rate its MFUs use
                ratios[f"{s.name.split(':')[1]}_matrix_tflops"] = ratios.pop("matrix_tflops")
            out.update(ratios)
        elif s.name == "bench:evaluator" and f:
            out.update({f"evaluator_{k}": v for k, v in f.items() if k != "episodes"})
        elif s.name == "bench:opta" and f:
            for dev, g in f.items():
                out.update({f"opta_{dev}_{k}": g[k] for k in ("batched_s", "speedup", "agreement") if k in g})
    return out


def unit(key: str) -> str:
    """The unit of a figure of :func:`key_figures` (by its name)."""
    if key.endswith("_pct"):
        return "% of the step time"
    if key.endswith("_s"):
        return "s"
    if "_mfu_" in key:
        return "of the matrix rate (model FLOP utilisation)"
    if key.endswith("_gflop_per_step"):
        return "GFLOP per step (forward + backward)"
    if key.endswith("matrix_tflops"):
        return "TFLOP/s (large matmul: bf16 on CUDA, fp32 on the CPU)"
    if "_loop_over_ceiling" in key:
        return "of the bare step's rate"
    if "over" in key or "speedup" in key:
        return "x"
    if key.startswith(("nca_", "pn_", "spe_", "set2model_")):
        return "img/s"
    if key.startswith("beclr_"):
        return "views/s (2 per image)"
    return "fraction" if key.endswith(("agreement", "accuracy")) else ""


def _write_atomic(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary file in the same folder, fsynced, then renamed over it (the
    results under benchmarks/results/ are tracked: an interrupt leaves the old file whole, never half of one).
    No studylib import, so the check starts without torch."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def render_md(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [f"# GPU check: {env.get('gpu') or 'CPU'}, {env['date']}", "",
             f"`{report['command']}` ({report['mode']} mode): **{'PASS' if report['passed'] else 'FAIL'}** in "
             f"{report['wall_s']:.0f} s (set-up {report['setup_s']:.0f} s).", "",
             f"device {env['device']}, GPU {env.get('gpu')}, driver {env.get('driver')}, torch {env['torch']}, "
             f"CUDA {env.get('cuda')}, Python {env['python']}, {env['cpus']} CPUs", "",
             "| step | status | wall s | CPU s | detail |", "| --- | --- | --- | --- | --- |"]
    for s in report["steps"]:
        extra = s["info"].get("precision", "")
        if s["kind"] == "tests" and s["figures"]:
            extra = f"{s['figures']['passed']} passed, {s['figures']['failed']} failed, {s['figures']['skipped']} skipped"
        detail = "; ".join(filter(None, [extra, s["detail"].replace("\n", " ")[:300]])).replace("|", "/")
        wall, cpu = (s[k] if s[k] is not None else "-" for k in ("seconds", "cpu_seconds"))
        lines.append(f"| {s['name']} | {s['status']} | {wall} | {cpu} | {detail} |")
    lines += ["", "| figure | value | unit |", "| --- | --- | --- |"]
    lines += [f"| {k} | {v:.4g} | {unit(k)} |" for k, v in report["figures"].items() if isinstance(v, (int, float))]
    if report["targets"]:
        lines += ["", "| target (issue 9, H100) | value | met |", "| --- | --- | --- |"]
        lines += [f"| {t['what']} {t['op']} {t['goal']:g} | {t['value']:.4g} | {'yes' if t['met'] else 'no'} |"
                  for t in report["targets"]]
    return "\n".join(lines) + "\n"


def step_names(tiny: bool) -> list[str]:
    """The names of the plan's steps (what ``--only`` selects from), without building the plan."""
    return ["tests", "params", *(f"notebook:{n}" for n in (TINY_NOTEBOOKS if tiny else notebook_names())),
            "bench:nca", "bench:beclr", "bench:conv4", "bench:evaluator", "bench:opta"]


def _wanted_any(prefix: str, names: list[str]) -> bool:
    return any(n.startswith(prefix) for n in names)


def _wanted(name: str, only: str | None) -> bool:
    return only is None or any(name.startswith(w.strip()) for w in only.split(",") if w.strip())


def run_check(args: argparse.Namespace) -> int:
    t_start = time.monotonic()
    if args.only:
        names = step_names(args.tiny)
        unknown = [w.strip() for w in args.only.split(",") if w.strip() and not _wanted_any(w.strip(), names)]
        if unknown:
            print(f"gpu-check: --only {', '.join(unknown)} names no step; the steps are: {', '.join(names)}",
                  file=sys.stderr)
            return 2
    import torch
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu-check: --device cuda, but torch sees no CUDA device (torch "
              f"{torch.__version__}, CUDA build {torch.version.cuda}); check the driver and "
              "CUDA_VISIBLE_DEVICES, or use --device cpu", file=sys.stderr)
        return 2
    mode = "tiny" if args.tiny else "full"
    env_info = environment(device)
    now = _dt.datetime.now(_dt.timezone.utc)
    label = re.sub(r"[^A-Za-z0-9]+", "-", env_info["gpu"] or "cpu").strip("-")
    # a partial run (--only) gets its own file instead of overwriting the day's full run
    stem = (f"{label}-{now.date().isoformat()}" + ("-tiny" if args.tiny else "")
            + (f"-only-{now.strftime('%H%M%S')}" if args.only else ""))
    out = Path(args.out) if args.out else (Path(tempfile.gettempdir()) / f"gpu-check-{os.getpid()}" if args.tiny
                                           else RESULTS)
    work = (REPO / "out" / "gpu-check" / stem) if out.resolve() == RESULTS.resolve() else out / f"{stem}.d"

    steps = [s for s in make_plan(device, args.tiny, work, args.step_timeout) if _wanted(s.name, args.only)]
    if args.list:
        for s in steps:
            print(f"{s.name:34s} limit {s.timeout:5.0f} s  {' '.join(s.argv[1:])}")
        return 0
    for d in (out, work / "logs", work / "notebooks"):
        d.mkdir(parents=True, exist_ok=True)

    # this checkout first, then whatever PYTHONPATH already holds (packages carried as wheels with pip --target)
    path = os.pathsep.join([str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    env = dict(os.environ, GPU_CHECK_DEVICE=device, PYTHONPATH=path, STUDYLIB_PROGRESS="0",
               STUDYLIB_CACHE=str(work / "cache"))
    env.setdefault("STUDYLIB_THREADS", "1")
    budget = args.budget if args.budget is not None else BUDGET_S[mode]
    # ./study passes when it started: the environment's set-up (pip from the wheels) counts against the budget
    setup_s = max(0.0, time.time() - float(os.environ.get("STUDY_GPU_CHECK_T0", time.time())) -
                  (time.monotonic() - t_start))
    deadline = t_start + budget - setup_s
    print(f"gpu-check: {mode} plan on {env_info.get('gpu') or 'the CPU'}: {len(steps)} steps, budget {budget:.0f} s "
          f"({setup_s:.0f} s spent on set-up), "
          f"logs in {work / 'logs'}", flush=True)

    def report_one(s: Step) -> None:
        print(f"  {s.name:28s} {s.status:8s} {s.seconds if s.seconds is not None else '-':>7} s wall, "
              f"{s.cpu_seconds if s.cpu_seconds is not None else '-':>7} s CPU"
              f"{'  ' + s.detail.splitlines()[0][:160] if s.detail and s.status != 'pass' else ''}", flush=True)

    shared = [s for s in steps if not s.exclusive]
    alone = [s for s in steps if s.exclusive]
    # the correctness steps leave the timing steps their share of the budget (PLAN_S; scaled with a smaller --budget)
    first_deadline = deadline - (BENCH_RESERVE_S * min(1.0, budget / BUDGET_S["full"]) if alone else 0.0)
    with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for fut in cf.as_completed([pool.submit(run_step, s, work, env, first_deadline) for s in shared]):
            report_one(fut.result())
    for s in alone:  # timing steps: nothing else on the GPU
        report_one(run_step(s, work, env, deadline))

    figures = key_figures(steps)
    targets = []
    if device == "cuda" and not args.tiny:
        for key, op, goal, what in TARGETS:
            if key in figures:
                v = figures[key]
                targets.append({"key": key, "what": what, "op": op, "goal": goal, "value": v,
                                "met": v >= goal if op == ">=" else v < goal})
    passed = all(s.status == "pass" for s in steps)
    report = {"command": " ".join(["./study gpu-check", *args.argv]), "mode": mode, "passed": passed,
              "wall_s": round(time.monotonic() - t_start + setup_s, 1), "setup_s": round(setup_s, 1), "budget_s": budget, "environment": env_info,
              "steps": [asdict(s) for s in steps], "figures": figures, "targets": targets}
    _write_atomic(out / f"{stem}.json", json.dumps(report, indent=1) + "\n")
    _write_atomic(out / f"{stem}.md", render_md(report))
    if figures:
        print("figures (measured in this run):")
        for k, v in figures.items():
            print(f"  {k:40s} {v:10.4g} {unit(k)}")
    for t in targets:
        print(f"  target {t['what']} {t['op']} {t['goal']:g}: {t['value']:.4g} ({'met' if t['met'] else 'NOT met'})")
    print(f"gpu-check: {'PASS' if passed else 'FAIL'} in {report['wall_s']:.0f} s -> {out / stem}.md and .json")
    return 0 if passed else 1


#: what a plain PyTorch GPU image already has (GPU-NOTES: torch, torchvision, scikit-learn, scipy, matplotlib,
#: seaborn, pandas, pyyaml), with everything those require; the wheel folder holds the rest of the venv's needs
PLAIN_IMAGE = ("torch", "torchvision", "numpy", "scipy", "scikit-learn", "matplotlib", "seaborn", "pandas", "pyyaml",
               "pillow")
#: needed to ``pip install -e .`` offline (the build backend of pyproject.toml) and by ``./study``'s set-up
BUILD = ("setuptools", "pip")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: list[str], extras: dict[str, set[str]] | None = None) -> dict[str, str]:
    """``{name: installed version}`` of ``roots`` and everything they require, read from this environment's
    installed metadata (markers evaluated here; ``extras`` maps a root to the extras to follow)."""
    from importlib import metadata

    from packaging.requirements import Requirement
    extras = extras or {}
    seen: dict[str, str] = {}
    todo = [(r, extras.get(_norm(r), set())) for r in roots]
    while todo:
        name, want = todo.pop()
        key = _norm(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional requirement this venv does not have
        if key in seen and not want:
            continue
        seen[key] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            envs = [{"extra": e} for e in want] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(e) for e in envs):
                if _norm(req.name) not in seen:
                    todo.append((req.name, set(req.extras)))
    return seen


def wheel_list(extras: list[str]) -> dict[str, str]:
    """The pinned packages the venv has for ``studylib`` (plus ``extras``) that a plain torch image lacks."""
    need = closure(["studylib"], {"studylib": set(extras)})
    need.pop("studylib", None)
    have = closure(list(PLAIN_IMAGE))
    out = {k: v for k, v in need.items() if k not in have}
    for b in BUILD:
        out.update({k: v for k, v in closure([b]).items()})
    return dict(sorted(out.items()))


def wheels(argv: list[str]) -> int:
    """``./study wheels DIR``: download (``pip download``) or build (``pip wheel``) the wheels to carry."""
    p = argparse.ArgumentParser(prog="./study wheels", description=(
        "Write to DIR a wheel of every package the venv has for studylib that a plain torch image lacks (POT, "
        "umap-learn, pynndescent, pytorch-metric-learning, papermill, nbval, ipykernel, ...), pinned to the "
        "venv's versions, and DIR/requirements.txt. Needs a package index. On the GPU machine: "
        "pip install --no-index --find-links DIR -r DIR/requirements.txt (README: Speed)."))
    p.add_argument("dir")
    p.add_argument("--extras", default="", help="optional extras of pyproject.toml to include too (ray,tensorboard)")
    p.add_argument("--python-version", default=None, help="the GPU machine's Python if it differs (e.g. 3.12)")
    p.add_argument("--platform", default=None, help="pip's --platform for it (default: this machine's)")
    p.add_argument("--dry-run", action="store_true", help="list the packages and the pip command; download nothing")
    a = p.parse_args(argv)
    pkgs = wheel_list([e for e in a.extras.split(",") if e])
    pins = [f"{k}=={v}" for k, v in pkgs.items()]
    target = ["--only-binary=:all:"] if a.python_version or a.platform else ["--prefer-binary"]
    if a.python_version:
        target += ["--python-version", a.python_version]
    if a.platform:
        target += ["--platform", a.platform]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *target, "--dest", a.dir]
    print(f"{len(pins)} packages the venv has and a plain torch image ({', '.join(PLAIN_IMAGE)}) lacks:")
    print("  " + " ".join(pins))
    print("$ " + " ".join(cmd) + " <packages>")
    if a.dry_run:
        return 0
    dest = Path(a.dir)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "requirements.txt").write_text("\n".join(p for p in pins if not p.startswith(("pip==", "setuptools=="))) + "\n")
    if subprocess.run(cmd + pins).returncode == 0:
        ok = True
    else:  # find the packages with no usable download and build their wheels here (same platform only)
        ok = True
        for pin in pins:
            if subprocess.run(cmd + [pin], capture_output=True).returncode != 0:
                print(f"wheels: no download for {pin}; building it with pip wheel", file=sys.stderr)
                ok &= subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", a.dir, pin]
                                     ).returncode == 0
    # sdists pip download fetched (no wheel on the index) are turned into wheels too
    for sdist in [*dest.glob("*.tar.gz"), *dest.glob("*.zip")]:
        ok &= subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", a.dir, str(sdist)]).returncode == 0
        sdist.unlink()
    print(f"wheels: {len(list(dest.glob('*.whl')))} wheels in {dest}; carry it, then on the GPU machine: "
          f"pip install --no-index --find-links {dest} -r {dest}/requirements.txt" if ok else
          "wheels: some packages are missing (see above)")
    return 0 if ok else 1


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse type: anything else exits 2 naming the value)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive, finite number of seconds")
    return value


def _at_least_one(text: str) -> int:
    """A whole number >= 1 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give 1 or more")
    return value


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["validate"]:
        p = argparse.ArgumentParser(prog="gpu_check.py validate")
        p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
        p.add_argument("--tiny", action="store_true")
        a = p.parse_args(argv[1:])
        return validate_all(a.device, a.tiny)
    if argv[:1] == ["wheels"]:
        return wheels(argv[1:])
    p = argparse.ArgumentParser(prog="./study gpu-check", description=__doc__.split("\n\n")[0],
                                epilog="The plan and its steps: benchmarks/gpu_check.py's docstring; README: Speed.")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: CUDA when torch sees one")
    p.add_argument("--tiny", action="store_true", help="the same plan at toy size (the CPU check CI runs)")
    p.add_argument("--out", default=None, help="folder of the results files (default: benchmarks/results; "
                                               "with --tiny a new temporary folder)")
    p.add_argument("--only", default=None, help="comma-separated step names or prefixes (tests, params, "
                                                "notebook:03, bench:beclr, bench)")
    p.add_argument("--jobs", type=_at_least_one, default=None, help="correctness steps run at once (default on CUDA: half the CPUs, 2 to 6; on the CPU 2)")
    p.add_argument("--step-timeout", type=_seconds, default=None, help="one time limit for every step, in seconds")
    p.add_argument("--budget", type=_seconds, default=None,
                   help=f"seconds for the whole run (default {BUDGET_S['full']:.0f}, tiny {BUDGET_S['tiny']:.0f})")
    p.add_argument("--list", action="store_true", help="print the plan (commands and limits) and exit")
    args = p.parse_args(argv)  # a bad number exits 2 here, before any work
    if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
        p.error(f"argument --out: {args.out} is a file; --out names the folder of the results files (it is created "
                f"if missing)")
    if args.jobs is None:
        cuda = args.device == "cuda" or (args.device is None and _has_cuda())
        args.jobs = max(2, min(6, (os.cpu_count() or 2) // 2)) if cuda else 2
    args.argv = argv
    return run_check(args)


def _has_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(main())
