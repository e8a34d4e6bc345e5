"""Sweeps on a real local Ray cluster (``ray.init(num_cpus=2)``) against the sequential backend, and the run lock.

The reference is the sequential ``run_sweep`` in this process (one torch thread, as each Ray task uses): the
same specs must give the same result files and bit-identical weights. Killing a worker mid-run must still
finish every run exactly once, resumed from its checkpoint to the weights an uninterrupted run reaches.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import torch

from studylib.runs import sweeps
from studylib.runs.runner import DataSpec, EvalSpec, RunSpec, run_spec
from studylib.runs.sweeps import run_sweep
from studylib.training.loop import TrainConfig
from studylib.training.runlock import RunLock
from studylib.training.runstore import RunStore


def spec(seed: int = 0, batch_size: int = 64, epochs: int = 1, hidden: int = 8) -> RunSpec:
    """NCA on 30 glyph classes at 16 px (380 training images), Conv4 with ``hidden`` filters, on the CPU."""
    return RunSpec(name=f"ray-nca-s{seed}-b{batch_size}", data=DataSpec("glyphs", options={"size": 16, "max_classes": 30}),
                   backbone="conv4", backbone_options={"hidden": hidden}, method="nca", augment="none",
                   train=TrainConfig(epochs=epochs, sampler="shuffled", batch_size=batch_size, lr=0.1, seed=seed,
                                     device="cpu", checkpoint_every=2, progress=False),
                   eval=EvalSpec(ways=5, shots=[1], queries=5, episodes=100, split="test", val_episodes=0))


def _same_run(a, b) -> None:
    assert a.run.path.name == b.run.path.name
    assert a.result["test"] == b.result["test"]
    wa, wb = a.run.load_tensor("weights.pt"), b.run.load_tensor("weights.pt")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


# ----------------------------------------------------------------------------------------- the lock alone


def test_lock_is_exclusive_and_released(tmp_path):
    a, b = RunLock(tmp_path / "r.json"), RunLock(tmp_path / "r.json")
    assert a.acquire() and not b.acquire()
    owner = json.loads((tmp_path / "r.json").read_text())
    assert owner["host"] == socket.gethostname() and owner["pid"] == os.getpid()
    a.release()
    assert not (tmp_path / "r.json").exists() and b.acquire()
    b.release()


def test_lock_of_a_dead_process_is_taken_over(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "r.json").write_text(json.dumps({"host": socket.gethostname(), "pid": dead.pid, "token": "x"}))
    lock = RunLock(tmp_path / "r.json")
    assert lock.acquire()
    assert json.loads((tmp_path / "r.json").read_text())["token"] == lock.token
    lock.release()


def test_lock_of_another_host_is_stale_only_without_heartbeat(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"host": "elsewhere", "pid": 1, "token": "x"}))
    lock = RunLock(path, stale_after=5.0, heartbeat=1.0)
    assert not lock.acquire()  # fresh: its owner may be alive on its own host
    old = time.time() - 10
    os.utime(path, (old, old))
    assert lock.acquire()
    lock.release()


def test_heartbeat_keeps_a_held_lock_fresh(tmp_path):
    a = RunLock(tmp_path / "r.json", stale_after=2.0, heartbeat=0.2)
    assert a.acquire()
    time.sleep(3.0)  # without the heartbeat the file would be 3 s old, past stale_after
    assert time.time() - (tmp_path / "r.json").stat().st_mtime < 2.0
    assert not RunLock(tmp_path / "r.json", stale_after=2.0, heartbeat=0.2).acquire()
    a.release()


def test_backend_choice(monkeypatch):
    monkeypatch.delenv(sweeps.ADDRESS_ENV, raising=False)
    assert sweeps.choose_backend(None) == "local"
    with pytest.raises(ValueError, match="backend='spark' is not known; allowed: local, ray"):
        sweeps.choose_backend("spark")
    monkeypatch.setenv(sweeps.ADDRESS_ENV, "auto")
    assert sweeps.choose_backend("local") == "local"
    if sweeps.ray_available():
        assert sweeps.choose_backend(None) == "ray"
    else:
        with pytest.raises(ImportError, match=r"pip install -e \.\[ray\]"):
            sweeps.choose_backend(None)


# ---------------------------------------------------------------------------------------- a real cluster


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    sweeps.start_local(num_cpus=2, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_sweep_equals_sequential_sweep(tmp_path, cluster):
    specs = [spec(seed=s, batch_size=b) for s in (0, 1) for b in (32, 64)]
    seq = run_sweep(specs, RunStore(tmp_path / "seq"), progress=False, backend="local")
    par = run_sweep(specs, RunStore(tmp_path / "ray"), progress=False, backend="ray")
    assert [o.spec.name for o in par] == [s.name for s in specs]
    for a, b in zip(seq, par):
        _same_run(a, b)
    # A second Ray sweep finds every run finished and submits nothing.
    again = run_sweep(specs, RunStore(tmp_path / "ray"), progress=False, backend="ray")
    assert [o.result for o in again] == [o.result for o in par]
    for o in par:
        events = [e["event"] for e in sweeps.attempts(RunStore(tmp_path / "ray"), o.run)]
        assert events == ["start", "trained"]


def test_killed_worker_mid_sweep_still_finishes_every_run_once(tmp_path, cluster):
    specs = [spec(seed=s, batch_size=32, epochs=6, hidden=16) for s in (0, 1, 2)]  # 66 steps each
    store = RunStore(tmp_path / "store")
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(out=run_sweep(specs, store, progress=False, backend="ray")))
    t.start()
    victim = None
    deadline = time.time() + 180
    while victim is None and time.time() < deadline:
        for run in store.runs():
            lock = sweeps.lock_for(store, run).owner()
            if run.checkpoint_path.exists() and not run.finished and lock and lock.get("pid"):
                victim = (run, lock["pid"])
                break
        time.sleep(0.02)
    assert victim is not None, "no run was caught between two checkpoints"
    os.kill(victim[1], signal.SIGKILL)
    t.join(timeout=300)
    assert not t.is_alive() and "out" in result
    for o in result["out"]:
        events = sweeps.attempts(store, o.run)
        assert [e["event"] for e in events].count("trained") == 1, events
        steps = [m["step"] for m in o.run.metrics if "loss" in m]
        assert steps == list(range(1, len(steps) + 1)) and len(steps) == 6 * 11  # none lost or repeated
        assert not o.run.checkpoint_path.exists() and not list(o.run.path.glob(".*.tmp"))
    killed = next(o for o in result["out"] if o.run.path == victim[0].path)
    starts = [e for e in sweeps.attempts(store, killed.run) if e["event"] == "start"]
    assert len(starts) == 2 and starts[0]["pid"] == victim[1] and starts[1]["resumed"]
    _same_run(run_spec(killed.spec, RunStore(tmp_path / "clean"), progress=False), killed)


def test_two_concurrent_sweeps_share_the_work(tmp_path, cluster):
    specs = [spec(seed=s, batch_size=b) for s in (3, 4) for b in (32, 64)]
    store = RunStore(tmp_path / "store")
    outs: list = [None, None]

    def sweep(k: int) -> None:
        outs[k] = run_sweep(specs[::1 if k == 0 else -1], store, progress=False, backend="ray")

    threads = [threading.Thread(target=sweep, args=(k,)) for k in (0, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert outs[0] is not None and outs[1] is not None
    by_name = {o.spec.name: o.result for o in outs[1]}
    assert {o.spec.name: o.result for o in outs[0]} == by_name
    for o in outs[0]:
        events = [e["event"] for e in sweeps.attempts(store, o.run)]
        assert events.count("trained") == 1 and events.count("start") == 1, events
