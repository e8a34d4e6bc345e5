"""Data-parallel training (torchrun, gloo on the CPU, 2 processes) against the one-process run.

References: ``nn.BatchNorm2d`` on the whole batch for :class:`GlobalBatchNorm`; the one-process training loop
(``run_spec`` / ``train`` in this process, the path ``test_resume.py`` pins) for the 2-process runs.
Tolerances: only floating-point summation order differs (convolutions on half batches, gradients summed in
two parts, BatchNorm statistics summed across ranks), so float64 agrees to 1e-12 (BatchNorm) and 1e-9 (9 NCA
steps through the loop). In float32 rounding differences grow with SGD steps (measured on this run: 3e-4 max
after 5 steps, 3e-2 on a running variance of 14 after 10), so the float32 run_spec test takes 5 steps, allows
1e-3 + 1e-3 |w| per weight and 1 point of evaluation accuracy (measured: identical 1-shot, 0.02 points
5-shot). A killed-and-restarted 2-process run repeats the arithmetic of an uninterrupted 2-process run, so
they must agree bit for bit.
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
import torch
from torch import nn

from studylib.data.base import ImageSplit
from studylib.runs.runner import DataSpec, EvalSpec, RunSpec, run_spec
from studylib.training import distributed as D
from studylib.training.loop import TrainConfig, train
from studylib.training.runstore import RunStore

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or
                                not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")


def torchrun(tmp_path: Path, nproc: int, job: dict | list[dict], max_restarts: int = 0, wait: bool = True):
    """Start ``dist_child.py`` on ``nproc`` gloo processes through torchrun with ``job`` (or a list of jobs)."""
    f = tmp_path / f"job-{time.monotonic_ns()}.json"
    f.write_text(json.dumps(job))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path),
           "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           f"--max-restarts={max_restarts}", "--monitor-interval=0.2", str(HERE / "dist_child.py"), str(f)]
    if not wait:
        return subprocess.Popen(cmd, env=env)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def nca_spec(epochs: int = 2, checkpoint_every: int = 3, batch_size: int = 64) -> RunSpec:
    """NCA on 30 glyph classes at 16 px, Conv4 with 8 filters: 380 training images, 5 steps per epoch."""
    return RunSpec(name="dist-nca", data=DataSpec("glyphs", options={"size": 16, "max_classes": 30}),
                   backbone="conv4", backbone_options={"hidden": 8}, method="nca", augment="none",
                   train=TrainConfig(epochs=epochs, sampler="shuffled", batch_size=batch_size, lr=0.1, seed=3,
                                     device="cpu", checkpoint_every=checkpoint_every, progress=False),
                   eval=EvalSpec(ways=5, shots=[1, 5], queries=5, episodes=200, split="test", val_episodes=0))


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "weights.pt", weights_only=True)


def _one_run(store: Path) -> Path:
    dirs = [p for p in store.iterdir() if p.is_dir() and not p.name.startswith(".")]  # .locks: run locks
    assert len(dirs) == 1, dirs
    return dirs[0]


def test_shard_bounds_cover_the_batch_in_order():
    for n in (5, 64, 81):
        for world in (1, 2, 3):
            bounds = [D.shard_bounds(n, world, r) for r in range(world)]
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            assert [hi - lo for lo, hi in bounds] == [len(c) for c in torch.arange(n).tensor_split(world)]


def test_one_process_is_untouched():
    """Without torchrun's variables nothing is distributed: the loop gets the method's own loss."""
    assert not D.launched() and D.world_size() == 1 and D.is_main()
    m = nn.Linear(2, 2)
    m.loss = lambda x, b: x
    assert D.prepare(m, torch.device("cpu")) is m.loss


@pytest.fixture(scope="module")
def two(tmp_path_factory) -> Path:
    """One torchrun start (2 gloo processes) runs every job the equality tests read; its folder."""
    d = tmp_path_factory.mktemp("two")
    torchrun(d, 2, [
        {"kind": "bn", "rows": 5, "out": str(d / "bn.pt")},
        {"kind": "nca64", "store": str(d / "nca64"), "out": str(d / "nca64.pt")},
        {"kind": "spec", "store": str(d / "spec1"), "out": str(d / "spec1.json"), "pids": str(d / "pids"),
         "spec": {"epochs": 1}},
        {"kind": "spec", "store": str(d / "spec2"), "out": str(d / "spec2.json"), "pids": str(d / "pids")},
        {"kind": "beclr", "store": str(d / "beclr"), "out": str(d / "beclr.pt")},
    ])
    return d


def test_global_batchnorm_equals_batchnorm_on_the_whole_batch(two):
    """2 ranks, uneven shards (3 + 2 rows), float64: output, gradients and running statistics."""
    got = torch.load(two / "bn.pt", weights_only=True)
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(5, 3, 4, 5, generator=g, dtype=torch.float64) * 2 + 1).requires_grad_(True)
    w_out = torch.randn(5, 3, 4, 5, generator=g, dtype=torch.float64)
    bn = nn.BatchNorm2d(3, momentum=0.3).double()
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([0.5, 1.5, -1.0]))
        bn.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    y = bn(x)
    (y * w_out).sum().backward()
    for name, ref in (("y", y), ("x_grad", x.grad), ("w_grad", bn.weight.grad), ("b_grad", bn.bias.grad),
                      ("running_mean", bn.running_mean), ("running_var", bn.running_var)):
        torch.testing.assert_close(got[name], ref.detach(), rtol=0, atol=1e-12, msg=name)


def test_two_process_nca_run_equals_one_process_run(tmp_path, two):
    """Same global batch of 64: 2 gloo processes x 32 rows against this process training all 64 (5 steps)."""
    ref = run_spec(nca_spec(epochs=1), RunStore(tmp_path / "one"), progress=False)
    run_two = _one_run(two / "spec1")
    two = json.loads((two / "spec1.json").read_text())
    assert two["world"] == 2
    assert ref.run.path.name == run_two.name  # the same configuration hash: one run, however many processes
    a, b = _weights(ref.run.path), _weights(run_two)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-3, atol=1e-3, msg=k)
    loss_a = [m["loss"] for m in ref.run.metrics if "loss" in m]
    loss_b = [json.loads(line)["loss"] for line in (run_two / "metrics.jsonl").read_text().splitlines()
              if "\"loss\"" in line]
    assert len(loss_a) == len(loss_b) == 5
    torch.testing.assert_close(torch.tensor(loss_b), torch.tensor(loss_a), rtol=0, atol=1e-4)
    for key, r in ref.result["test"].items():
        assert abs(two["result"]["test"][key]["mean"] - r["mean"]) < 0.01, key
    assert not (run_two / "checkpoint.pt").exists()  # rank 0 finished the run: result written, checkpoint gone
    assert not list(run_two.glob(".*.tmp"))


def test_two_process_run_killed_midway_resumes_to_the_same_end(tmp_path, two):
    """SIGKILL rank 1 after the first checkpoint; torchrun restarts both ranks, which resume from it."""
    clean = two / "spec2"
    store, pids = tmp_path / "killed", tmp_path / "pids"
    proc = torchrun(tmp_path, 2, {"kind": "spec", "store": str(store), "out": str(tmp_path / "killed.json"),
                                  "pids": str(pids), "slow": 0.25}, max_restarts=1, wait=False)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not list(store.glob("*/checkpoint.pt")):
            time.sleep(0.05)
        assert list(store.glob("*/checkpoint.pt")), "no checkpoint was written"
        time.sleep(0.3)  # land between two checkpoints
        first_rank1 = [p for p in pids.iterdir() if p.name.startswith("rank1-")]
        assert len(first_rank1) == 1
        os.kill(int(first_rank1[0].read_text()), signal.SIGKILL)
        assert proc.wait(timeout=240) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len([p for p in pids.iterdir() if p.name.startswith("rank1-")]) == 2  # it really was restarted
    metrics = [json.loads(line) for line in (_one_run(store) / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "loss" in m] == list(range(1, 11))  # nothing lost or repeated
    a, b = _weights(_one_run(clean)), _weights(_one_run(store))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((tmp_path / "killed.json").read_text())["result"]["test"] == \
        json.loads((two / "spec2.json").read_text())["result"]["test"]


# ------------------------------------------------------------------------------------------- NCA in float64


def nca64_split() -> ImageSplit:
    g = torch.Generator().manual_seed(4)
    labels = torch.arange(120) % 8
    images = (torch.rand(120, 1, 16, 16, generator=g) * 120 + labels[:, None, None, None] * 16).to(torch.uint8)
    return ImageSplit(images, labels, [f"c{i}" for i in range(8)])


def nca64_method():
    from studylib.methods.episodes import DistanceMethod
    from studylib.models import build_backbone
    torch.manual_seed(6)
    return DistanceMethod(build_backbone("conv4", in_channels=1, hidden=8).double(), lambda x: x.double() / 255,
                          kind="nca")


def nca64_cfg() -> TrainConfig:
    return TrainConfig(epochs=3, sampler="shuffled", batch_size=40, lr=0.1, seed=2, device="cpu", progress=False,
                       checkpoint_every=100)


def test_two_process_nca_equals_one_process_in_float64(tmp_path, two):
    """In float64 only summation order differs: 9 steps of a batch of 40 (20 rows per rank) agree to 1e-9."""
    two = torch.load(two / "nca64.pt", weights_only=True)
    run = RunStore(tmp_path / "one").run("nca64", {})
    one = train(nca64_method(), nca64_split(), nca64_cfg(), run).state_dict()
    loss = [m["loss"] for m in run.metrics if "loss" in m]
    assert len(loss) == len(two["loss"]) == 9
    torch.testing.assert_close(torch.tensor(two["loss"]), torch.tensor(loss), rtol=0, atol=1e-9)
    for k, v in one.items():
        torch.testing.assert_close(two["weights"][k], v, rtol=0, atol=1e-9, msg=k)


# ------------------------------------------------------------------------------------------ BECLR and DyCE


def beclr_split() -> ImageSplit:
    g = torch.Generator().manual_seed(1)
    labels = torch.arange(96) % 6
    images = (torch.rand(96, 1, 16, 16, generator=g) * 200).to(torch.uint8)
    return ImageSplit(images, labels, [f"c{i}" for i in range(6)])


def _views(x: torch.Tensor) -> torch.Tensor:
    """A random view from the global RNG (flip and noise): ranks must draw it identically."""
    x = x.float() / 255
    flip = torch.rand(len(x), device=x.device) < 0.5
    return torch.where(flip[:, None, None, None], x.flip(-1), x) + 0.05 * torch.randn_like(x)


def beclr_method():
    from studylib.methods.beclr import BECLR
    from studylib.models import build_backbone
    torch.manual_seed(5)
    return BECLR(build_backbone("conv4", in_channels=1, hidden=8), _views, _views, proj_dim=16, pred_hidden=8,
                 mask_patch=4, memory_size=64, partitions=4, topk=2, sinkhorn_iters=5)


def beclr_cfg() -> TrainConfig:
    return TrainConfig(epochs=1, sampler="replacement", batch_size=16, batches_per_epoch=6, lr=0.05, seed=2,
                       device="cpu", progress=False, checkpoint_every=100)


def test_beclr_dyce_memories_and_teacher_agree_across_ranks_and_with_one_process(tmp_path, two):
    """DyCE fills (2 x 16 rows per step, 64 slots) and enhances from step 3 on; every buffer must agree."""
    r0 = torch.load(two / "beclr-rank0.pt", weights_only=True)
    r1 = torch.load(two / "beclr-rank1.pt", weights_only=True)
    assert all(torch.equal(r0[k], r1[k]) for k in r0), [k for k in r0 if not torch.equal(r0[k], r1[k])]
    one = train(beclr_method(), beclr_split(), beclr_cfg(), RunStore(tmp_path / "one").run("beclr", {}))
    ref = one.state_dict()
    assert bool(ref["memory_teacher.initialised"]) and int(ref["memory_teacher.num_updates"]) == 6
    for k, v in ref.items():
        if v.is_floating_point():
            torch.testing.assert_close(r0[k], v, rtol=0, atol=1e-4, msg=k)
        else:
            assert torch.equal(r0[k], v), k  # partition labels, pointers, counters
