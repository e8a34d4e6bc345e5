"""What the loop does for speed without changing a result (issue 30): checkpoints are written while training
goes on, from a snapshot that later steps cannot touch."""

from __future__ import annotations

import os
import sys
import threading

import pytest
import torch

from studylib import utils
from studylib.training.loop import Interrupted, train
from studylib.training.runstore import RunStore

sys.path.insert(0, os.path.dirname(__file__))
from test_resume import TinyMethod, _cfg, _split, _weights, make  # noqa: E402


class Counting(TinyMethod):
    """TinyMethod that counts its training steps."""

    steps = 0

    def loss(self, images, batch):
        type(self).steps += 1
        return super().loss(images, batch)


def test_a_checkpoint_is_written_while_training_goes_on_and_resumes_exactly(tmp_path, monkeypatch):
    """The write of the checkpoint of step 4 is held until the training thread has taken two more steps (it
    fails after 20 s if the write blocks training, as it did before issue 30). The checkpoint still holds step
    4's weights and optimiser state, not later ones: resuming from it ends with the uninterrupted run's
    weights, bit for bit."""
    cfg = _cfg(batch_size=8)  # 12 steps per epoch: no epoch end before step 7
    expected = _weights(train(make(), _split(), cfg, RunStore(tmp_path / "a").run("r", {})))
    real = utils._write_all
    seen: dict[str, object] = {}

    def slow(fh, data, target):
        if target.name == "checkpoint.pt" and "thread" not in seen:
            seen["thread"] = threading.current_thread().name
            for _ in range(2000):  # wait for two training steps after step 4, at most 20 s
                if Counting.steps >= 6:
                    break
                threading.Event().wait(0.01)
            seen["steps_meanwhile"] = Counting.steps - 4
        real(fh, data, target)

    monkeypatch.setattr(utils, "_write_all", slow)
    torch.manual_seed(123)
    model = Counting()
    Counting.steps = 0
    run = RunStore(tmp_path / "b").run("r", {})
    with pytest.raises(Interrupted):  # checkpoint_every=4: stopped after step 7, resumed from step 4
        train(model, _split(), cfg, run, stop_after=7)
    assert seen["thread"] != threading.main_thread().name and seen["steps_meanwhile"] >= 2, seen
    assert torch.load(run.path / "checkpoint.pt", weights_only=True)["global_step"] == 4
    monkeypatch.setattr(utils, "_write_all", real)
    got = _weights(train(make(), _split(), cfg, RunStore(tmp_path / "b").run("r", {})))
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)


def test_per_step_values_are_read_in_blocks_on_the_cpu_too(tmp_path):
    """Without ``log_every`` the CPU reads the logged values every 10 steps (a read per step cost about 0.5 ms,
    a few % of a smoke-scale step): 24 steps, 3 block reads (steps 10, 20 and the epoch's end) instead of 24,
    and the same metrics and weights as reading every step."""
    from torch.overrides import TorchFunctionMode

    class Reads(TorchFunctionMode):
        count = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") == "tolist":
                Reads.count += 1
            return func(*args, **(kwargs or {}))

    cfg = dict(epochs=1, sampler="replacement", batch_size=8, batches_per_epoch=24, checkpoint_every=1000)
    runs = {}
    for every in (None, 1):
        run = RunStore(tmp_path / str(every)).run("r", {})
        Reads.count = 0
        with Reads():
            weights = _weights(train(make(), _split(), _cfg(log_every=every, **cfg), run))
        runs[every] = (weights, run.metrics, Reads.count)
    assert runs[None][2] == 3 and runs[1][2] == 24
    assert runs[None][1] == runs[1][1]
    assert all(torch.equal(runs[None][0][k], runs[1][0][k]) for k in runs[1][0])
