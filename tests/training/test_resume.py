"""The loop: a run interrupted anywhere resumes from its last checkpoint and ends with the same weights."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from torch import nn

from studylib.data.base import ImageSplit
from studylib.data.samplers import Batch
from studylib.methods.base import Method
from studylib.training.loop import Interrupted, TrainConfig, lr_factor, train
from studylib.training.runstore import RunStore


class TinyMethod(Method):
    """Linear classifier with dropout and random flips: exercises every RNG the loop must restore."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Dropout(0.3))
        self.head = nn.Linear(16, 4)

    def loss(self, images, batch: Batch):
        x = images.float() / 255
        flip = torch.rand(len(x), device=x.device) < 0.5
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
        logits = self.head(self.backbone(x))
        return nn.functional.cross_entropy(logits, batch.labels), {"acc": (logits.argmax(1) == batch.labels).float().mean()}


def make() -> TinyMethod:
    """Model construction is seeded, as the runner does (``build_parts`` seeds before building)."""
    torch.manual_seed(123)
    return TinyMethod()


def _split(n=96):
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(n) % 4
    images = (torch.rand(n, 1, 8, 8, generator=g) * 60 + labels[:, None, None, None] * 40).to(torch.uint8)
    return ImageSplit(images, labels, [f"c{i}" for i in range(4)])


def _cfg(**kw):
    base = dict(epochs=3, sampler="shuffled", batch_size=16, lr=0.05, checkpoint_every=4, progress=False, seed=7,
                device="cpu", schedule="step", milestones=[0.5])
    base.update(kw)
    return TrainConfig(**base)


def _weights(m):
    return {k: v.clone() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("stops", [[5], [4], [6, 6], [3, 1, 7]])
def test_interrupted_run_ends_with_identical_weights(tmp_path, stops):
    split = _split()
    ref = train(make(), split, _cfg(), RunStore(tmp_path / "a").run("ref", {"x": 1}))
    expected = _weights(ref)

    run = RunStore(tmp_path / "b").run("resumed", {"x": 1})
    for s in stops:  # each call is killed after s steps, then resumed by a fresh process-like call
        with pytest.raises(Interrupted):
            train(make(), split, _cfg(), run, stop_after=s)
    model = make()
    torch.manual_seed(999)  # a different global state before resuming must not matter
    final = train(model, split, _cfg(), run)
    got = _weights(final)
    assert expected.keys() == got.keys()
    for k in expected:
        assert torch.equal(expected[k], got[k]), k
    steps = [m["step"] for m in run.metrics if "loss" in m]
    assert steps == list(range(1, 3 * 6 + 1))  # metrics are neither lost nor duplicated


def test_episodic_and_replacement_samplers_resume_too(tmp_path):
    split = _split()
    for sampler in ("episodic", "replacement"):
        cfg = _cfg(sampler=sampler, ways=4, shots=2, queries=2, batches_per_epoch=5)
        ref = _weights(train(make(), split, cfg, RunStore(tmp_path / f"{sampler}a").run("r", {})))
        run = RunStore(tmp_path / f"{sampler}b").run("r", {})
        with pytest.raises(Interrupted):
            train(make(), split, cfg, run, stop_after=7)
        got = _weights(train(make(), split, cfg, run))
        assert all(torch.equal(ref[k], got[k]) for k in ref)


def test_step_schedule_decays_at_fraction():
    cfg = _cfg(schedule="step", milestones=[0.7], gamma=0.1)
    assert lr_factor(cfg, 69, 100) == 1.0 and lr_factor(cfg, 70, 100) == pytest.approx(0.1)
    cos = _cfg(schedule="cosine")
    assert lr_factor(cos, 0, 100) == 1.0 and lr_factor(cos, 50, 100) == pytest.approx(0.5)


def test_unknown_sampler_is_refused():
    with pytest.raises(ValueError, match="sampler='epsiodic' is not known; allowed: episodic, shuffled"):
        _cfg(sampler="epsiodic").check()


def test_sigkill_mid_run_then_resume(tmp_path):
    """A real kill (SIGKILL of a child process) between checkpoints; the resumed run matches a clean one."""
    script = textwrap.dedent(f"""
        import sys, time, torch
        sys.path.insert(0, {str(os.path.dirname(__file__))!r})
        from test_resume import TinyMethod, _split, _cfg
        from studylib.training.loop import train
        from studylib.training.runstore import RunStore
        torch.set_num_threads(1)
        slow = sys.argv[1] == "slow"
        class Slow(TinyMethod):
            def loss(self, images, batch):
                if slow:
                    time.sleep(0.05)
                return super().loss(images, batch)
        torch.manual_seed(123)
        m = train(Slow(), _split(), _cfg(epochs=6), RunStore(sys.argv[2]).run("k", {{}}))
        torch.save(m.state_dict(), sys.argv[3])
    """)
    f = tmp_path / "child.py"
    f.write_text(script)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    store = tmp_path / "store"
    proc = subprocess.Popen([sys.executable, str(f), "slow", str(store), str(tmp_path / "w.pt")], env=env)
    ckpt = None
    deadline = time.time() + 60
    while time.time() < deadline:
        found = list(store.glob("*/checkpoint.pt"))
        if found:
            ckpt = found[0]
            break
        time.sleep(0.05)
    assert ckpt is not None, "the child never wrote a checkpoint"
    time.sleep(0.13)  # land between two checkpoints
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    subprocess.run([sys.executable, str(f), "fast", str(store), str(tmp_path / "w.pt")], env=env, check=True)
    subprocess.run([sys.executable, str(f), "fast", str(tmp_path / "clean"), str(tmp_path / "ref.pt")], env=env,
                   check=True)
    a = torch.load(tmp_path / "w.pt", weights_only=True)
    b = torch.load(tmp_path / "ref.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in b)


def _scripted_validator(scores):
    """A validation callback that returns ``scores[epoch]`` and records the weights it saw."""
    seen = {}

    def validate(method, epoch):
        seen[epoch] = _weights(method)
        return {"val_acc": scores[epoch]}

    return validate, seen


def test_early_stopping_stops_after_patience_and_keeps_best_weights(tmp_path):
    validate, seen = _scripted_validator([0.5, 0.7, 0.6, 0.65, 0.69, 0.9, 0.95])
    run = RunStore(tmp_path).run("es", {})
    final = train(make(), _split(), _cfg(epochs=7, patience=3), run, validate=validate)
    assert sorted(seen) == [0, 1, 2, 3, 4]  # best at epoch 1, then 3 validations without a new best
    got = _weights(final)
    assert all(torch.equal(got[k], seen[1][k]) for k in got)
    epochs = [m for m in run.metrics if "early_stop" in m]
    assert [m["early_stop"] for m in epochs] == [False, False, False, False, True]


def test_early_stopping_resumes_exactly(tmp_path):
    validate, _ = _scripted_validator([0.5, 0.7, 0.6, 0.65, 0.69, 0.9, 0.95])
    ref = _weights(train(make(), _split(), _cfg(epochs=7, patience=3), RunStore(tmp_path / "a").run("r", {}),
                         validate=validate))
    run = RunStore(tmp_path / "b").run("r", {})
    validate2, _ = _scripted_validator([0.5, 0.7, 0.6, 0.65, 0.69, 0.9, 0.95])
    with pytest.raises(Interrupted):
        train(make(), _split(), _cfg(epochs=7, patience=3), run, validate=validate2, stop_after=15)
    got = _weights(train(make(), _split(), _cfg(epochs=7, patience=3), run, validate=validate2))
    assert all(torch.equal(ref[k], got[k]) for k in ref)


def test_patience_off_keeps_run_hashes():
    from studylib.training.loop import config_dict
    assert "patience" not in config_dict(_cfg())
    assert config_dict(_cfg(patience=5))["patience"] == 5
    with pytest.raises(ValueError, match="patience must be >= 1"):
        _cfg(patience=0).check()
