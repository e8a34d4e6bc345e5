"""The pre-flight refuses what cannot run before any work (issue 29 items 2-4, issue 28's '-p NAME [list]'):
-y text that is not a mapping, values out of range, alias bombs, and configurations whose memory cannot be had,
all in seconds and with bounded memory; hours of work are a warning with the numbers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from studylib import preflight, resources
from studylib.resources import GIB, Machine

sys.path.insert(0, os.path.dirname(__file__))
from test_param_bounds import billion_laughs  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("text, want", [
    ("5", "got an int 5; for one parameter use -p NAME VALUE"),
    ("[1, 2]", "got a list [1, 2]"),
    ("abc", "got a str 'abc'"),
])
def test_y_that_is_not_a_mapping_is_a_clear_error(text, want, capsys):
    """Before: TypeError tracebacks (5, [1, 2]) and 'dictionary update sequence element #0' (abc)."""
    rc = preflight.main(["00", "-y", text])
    err = capsys.readouterr().err
    assert rc == 2 and want in err and "parameters must be a mapping of names to values" in err
    assert "Traceback" not in err


def test_p_with_a_list_points_to_y(capsys):
    rc = preflight.main(["00", "-p", "seeds", "[0]"])
    err = capsys.readouterr().err
    assert rc == 1 and '-y "seeds: [0]"' in err


def test_out_of_range_and_non_finite_values_are_problems(capsys):
    """Before: image_size 100000, lr inf and batch_size 10^9 passed the check."""
    rc = preflight.main(["00", "-p", "image_size", "100000", "-p", "lr", "inf", "-p", "batch_size", "1000000000",
                         "-y", "epochs: 1000000000000000000000000000000"])
    err = capsys.readouterr().err
    assert rc == 1 and "4 problems" in err
    for want in ("image_size: parameter 'image_size' = 100000", "lr: parameter 'lr' must be a finite number",
                 "batch_size: parameter 'batch_size' = 1000000000", "epochs: parameter 'epochs' = 1"):
        assert want in err, err


def _fake(ram_gib: float = 16, device_gib: float | None = None, gflops: float = 20) -> Machine:
    return Machine("cuda" if device_gib else "cpu", int(ram_gib * GIB), int(device_gib * GIB) if device_gib else None,
                   gflops * 1e9, 1, "Fake GPU" if device_gib else "cpu")


def _values(**over):
    from studylib.config import defaults
    from studylib.experiments import quickstart as qs
    return {**defaults(qs.Params), **over}


def test_images_that_cannot_fit_in_memory_are_refused_with_the_numbers():
    need = resources.estimate(_values(image_size=1024, rgb=True), host=_fake(ram_gib=16))
    (problem,) = need.problems
    # 300 glyph classes x 20 images x 3 x 1024 x 1024 bytes, twice while they are generated
    assert need.data_bytes == 300 * 20 * 3 * 1024 * 1024
    assert "the images alone need about 35.2 GiB" in problem and "16.0 GiB available" in problem
    assert "6,000 images (300 glyph classes x 20) x 3 x 1024 x 1024 bytes" in problem
    assert not resources.estimate(_values(image_size=1024, rgb=True, batch_size=8), host=_fake(ram_gib=64)).problems
    (batch,) = resources.estimate(_values(image_size=1024, rgb=True), host=_fake(ram_gib=64)).problems
    assert batch.startswith("one training batch of 128 images at 1024 px needs about") and "lower batch_size" in batch


def test_a_batch_that_cannot_fit_on_the_gpu_is_refused():
    need = resources.estimate(_values(image_size=512, batch_size=4096), host=_fake(ram_gib=256, device_gib=16))
    assert any("of GPU memory" in p and "Fake GPU's 16.0 GiB" in p for p in need.problems), need.problems
    assert not resources.estimate(_values(), host=_fake(ram_gib=256, device_gib=16)).problems


def test_hours_of_work_are_a_warning_with_the_numbers():
    quick = resources.estimate(_values(), host=_fake(gflops=20))
    assert not quick.warnings and not quick.problems and quick.seconds < 3600
    slow = resources.estimate(_values(epochs=5000), host=_fake(gflops=20))
    (warning,) = slow.warnings
    assert not slow.problems and slow.seconds > 3600
    assert "runs for about" in warning and "3 seed(s)" in warning and "5,000 epoch(s)" in warning
    # 5000 x as many training passes: the estimate grows with the epochs
    assert slow.flops > 1000 * quick.flops
    assert slow.seconds == pytest.approx(slow.flops / 20e9)


def test_the_network_cost_is_the_convolutions_flops():
    """Conv4 on one 32 x 32 grey image: 2 x 9 x (1 x 64 x 32^2 + 64 x 64 x (16^2 + 8^2 + 4^2)) multiply-adds x 2."""
    flops, act, n_params = resources.network_cost("conv4", 1, 32)
    assert flops == 2 * 9 * (1 * 64 * 32 ** 2 + 64 * 64 * (16 ** 2 + 8 ** 2 + 4 ** 2))
    assert n_params == sum(p.numel() for p in __import__("studylib.models", fromlist=["x"]).build_backbone(
        "conv4", in_channels=1).parameters())
    flops64, act64, _ = resources.network_cost("conv4", 1, 64)
    assert flops64 == pytest.approx(4 * flops) and act64 == pytest.approx(4 * act)


_FLOP_CASES = [("conv4", 1), ("resnet12_basic", 3), ("resnet12", 3), ("resnet12_infopatch", 3), ("resnet18", 3),
               ("resnet50", 3)]


@pytest.mark.parametrize("backbone, channels", _FLOP_CASES)
def test_the_hooks_count_what_torchs_flop_counter_counts(backbone, channels):
    """The pre-flight counts FLOPs with forward hooks (FlopCounterMode imports torch._dynamo: seconds); on every
    registered backbone the count equals FlopCounterMode's on the same network and image."""
    from torch.utils.flop_counter import FlopCounterMode

    from studylib.models import BACKBONES, build_backbone
    assert {b for b, _ in _FLOP_CASES} == set(BACKBONES)  # a new backbone joins this test
    flops, act, n_params = resources.network_cost(backbone, channels, 32)
    torch.manual_seed(0)
    net = build_backbone(backbone, in_channels=channels).eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        net(torch.zeros(1, channels, 32, 32))
    assert flops == counter.get_total_flops() > 0
    assert n_params == sum(p.numel() for p in net.parameters())


def test_the_report_prints_warnings_and_passes(monkeypatch, capsys):
    monkeypatch.setattr(resources, "machine", lambda device="auto": _fake(gflops=20))
    rc = preflight.main(["00", "-p", "epochs", "5000"])
    err = capsys.readouterr().err
    assert rc == 0 and "ok" in err.splitlines()[0] and "\n  warning: this configuration runs for about" in err


def _cpu_seconds(cmd: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``cmd`` and return it with the CPU seconds (user + system) it used: unlike wall time, not stretched by
    whatever else the machine runs (the suite's other worker, other jobs)."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _limited(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    """``./study check`` (the pre-flight module) under a 5 GiB address-space limit: what it allocates is bounded."""
    code = ("import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, (5 << 30, 5 << 30)); "
            "sys.argv = ['preflight'] + sys.argv[1:]; runpy.run_module('studylib.preflight', run_name='__main__')")
    return _cpu_seconds([sys.executable, "-c", code, *args], env)


def test_check_refuses_in_seconds_under_an_address_space_limit(tmp_path):
    """Done-when of issue 29: epochs 1e30, image_size 100000 and a billion-laughs document are refused in under
    5 s with bounded memory. The time is the CPU time the check takes beyond importing the notebook's module (CPU
    seconds of the same imports alone, just before), so another job on the machine does not stretch it."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "STUDYLIB_CACHE": str(tmp_path / "cache")}
    _, base = _cpu_seconds([sys.executable, "-c", "import studylib.preflight, studylib.experiments.quickstart, "
                            "studylib.resources"], env)
    for args, rc, want in (
            (["00", "-p", "epochs", "1e30"], 1, "epochs: parameter 'epochs' must be int"),
            (["00", "-p", "image_size", "100000"], 1, "image_size: parameter 'image_size' = 100000"),
            (["00", "-y", billion_laughs()], 2, "the YAML expands to more than 10,000 values")):
        done, took = _limited(args, env)
        assert done.returncode == rc and want in done.stderr, done.stderr[-2000:]
        assert "MemoryError" not in done.stderr and "Traceback" not in done.stderr
        assert took - base < 5.0, (args, took, base)
