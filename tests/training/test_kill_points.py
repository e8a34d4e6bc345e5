"""Real kills (SIGKILL of a child process) at the loop's and the run store's named points
(``STUDYLIB_KILL_AT``, :func:`studylib.utils.kill_point`): after each one the next process resumes, and the
final weights and the whole metrics log equal those of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import torch

from studylib.training.loop import train
from studylib.training.runstore import RunStore

sys.path.insert(0, os.path.dirname(__file__))
from test_resume import _cfg, _split, make  # noqa: E402

CHILD = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, {tests!r})
    from test_resume import make, _split, _cfg
    from studylib.training.loop import train
    from studylib.training.runstore import RunStore
    torch.set_num_threads(1)
    m = train(make(), _split(), _cfg(), RunStore(sys.argv[1]).run("k", {{}}))
    torch.save(m.state_dict(), sys.argv[2])
""")


def _child(tmp_path, kill_at: str | None) -> int:
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=os.path.dirname(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("STUDYLIB_KILL_AT", None)
    if kill_at:
        env["STUDYLIB_KILL_AT"] = kill_at
    return subprocess.run([sys.executable, str(script), str(tmp_path / "store"), str(tmp_path / "w.pt")],
                          env=env).returncode


def _step(path) -> int:
    return int(torch.load(path, weights_only=True)["global_step"])


def _metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]


def test_kill_at_every_named_point_then_resume_exactly(tmp_path):
    """18 steps (3 epochs of 6), checkpoints at steps 4, 6, 8, 12, 16, 18. Each child is killed at the next
    point, the following one resumes; the last finishes."""
    clean = RunStore(tmp_path / "clean").run("k", {})
    expected = train(make(), _split(), _cfg(), clean).state_dict()
    run = RunStore(tmp_path / "store").run("k", {})
    killed = -signal.SIGKILL

    # 1. Metrics written, their checkpoint not: the log is ahead of the checkpoint (never behind it).
    assert _child(tmp_path, "loop.after_metrics:2") == killed
    assert _step(run.path / "checkpoint.pt") == 4 and max(m["step"] for m in _metrics(run)) == 6

    # 2. Checkpoint of step 6 moved to checkpoint.prev.pt, the one of step 8 not installed yet.
    assert _child(tmp_path, "runstore.checkpoint_rotated:2") == killed
    assert not (run.path / "checkpoint.pt").exists() and _step(run.path / "checkpoint.prev.pt") == 6

    # 3. New metrics in a temporary file, checksum already updated, file not replaced: the old one verifies.
    assert _child(tmp_path, "write.before_replace@metrics.jsonl:2") == killed
    stale = list(run.path.glob(".metrics.jsonl.*.tmp"))
    assert len(stale) == 1

    # 4. A checkpoint in its temporary file; the stale metrics file of the dead process 3 is cleaned.
    assert _child(tmp_path, "write.before_replace@checkpoint.pt:2") == killed
    assert not stale[0].exists() and len(list(run.path.glob(".checkpoint.pt.*.tmp"))) == 1
    assert _step(run.path / "checkpoint.prev.pt") == 8

    # 5. Final weights written, training record not: still an interrupted run.
    assert _child(tmp_path, "loop.after_weights") == killed
    assert (run.path / "weights.pt").exists() and run.status == "interrupted"
    assert not list(run.path.glob(".*.tmp"))

    # 6. Finish.
    assert _child(tmp_path, None) == 0
    got = torch.load(tmp_path / "w.pt", weights_only=True)
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    assert _metrics(run) == _metrics(clean)
    assert run.status == "finished" and not (run.path / "checkpoint.pt").exists()
    assert not list(run.path.glob(".*.tmp"))
