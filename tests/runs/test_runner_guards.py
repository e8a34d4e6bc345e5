"""The runner never stores a wrong result as finished: bad evaluation parameters fail before training, a
diverged run fails loudly, training and evaluation are cached separately, damaged results heal, results say
what computed them, and a kill before the evaluation result is written re-evaluates without training."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from studylib.data.base import DataError
from studylib.evaluation import evaluate
from studylib.runs.runner import RunBusy, features_of, load_trained, run_spec
from studylib.training.loop import Diverged
from studylib.training.runstore import RunFileError, RunStore

sys.path.insert(0, os.path.dirname(__file__))
from test_runner import _spec  # noqa: E402


def _with_eval(spec, **changes):
    return dataclasses.replace(spec, eval=dataclasses.replace(spec.eval, **changes))


@pytest.fixture
def no_training(monkeypatch):
    """Any optimiser step fails: proves that nothing is trained."""
    def boom(*a, **k):
        raise AssertionError("an optimiser step was taken")

    monkeypatch.setattr(torch.optim.SGD, "step", boom)


@pytest.mark.parametrize("change,error,message", [
    ({"queries": 0}, ValueError, r"evaluation queries per class \(eval_queries\) must be >= 1, got 0"),
    ({"episodes": 0}, ValueError, r"evaluation episodes \(eval_episodes\) must be >= 1, got 0"),
    ({"shots": [1, 30]}, DataError, r"shots \+ queries = 30 \+ 15 = 45 images per class, but the smallest class of "
                                    r"the evaluation split glyphs/test .* has 20"),
    # the validation split (6 classes) is met first, and checked first
    ({"ways": 9}, DataError, r"9-way episodes need 9 classes but the validation split glyphs/val .* has 6"),
    ({"split": "valid"}, DataError, r"evaluation split \(eval_split\) 'valid' does not exist in glyphs"),
    ({"classifiers": ["nearest"]}, ValueError, r"unknown classifier 'nearest'"),
    ({"val_shots": 30}, DataError, r"smallest class of the validation split .* has 20"),
])
def test_bad_evaluation_parameters_fail_before_training_and_write_nothing(tmp_path, no_training, change, error,
                                                                          message):
    with pytest.raises(error, match=message):
        run_spec(_with_eval(_spec(), **change), RunStore(tmp_path / "store"), progress=False)
    assert not (tmp_path / "store").exists()


def test_diverging_run_fails_naming_step_and_lr_and_stores_nothing(tmp_path):
    """lr = 1000: the loss reaches ~1e16 (finite) and BatchNorm variances become inf; before the guard every
    accuracy was exactly chance and stored as finished."""
    store = RunStore(tmp_path)
    with pytest.raises(Diverged, match=r"training diverged at step \d+ \(epoch 0\) with learning rate 1e\+03 "
                                       r"\(lr=1000\): the loss reached"):
        run_spec(_spec(lr=1000.0), store, progress=False)
    assert all(i.status != "finished" and not i.evaluations for i in store.list_runs())
    assert not list(tmp_path.glob("**/result.json"))


def test_new_evaluation_protocol_reuses_the_trained_weights(tmp_path, monkeypatch):
    store = RunStore(tmp_path)
    first = run_spec(_spec(), store, progress=False)
    monkeypatch.setattr(torch.optim.SGD, "step", lambda *a, **k: pytest.fail("trained again"))
    other = _with_eval(_spec(), shots=[1], episodes=30, classifiers=["knn"])
    second = run_spec(other, store, progress=False)
    assert second.run.path == first.run.path and second.evaluation.path != first.evaluation.path
    assert second.evaluation.path.parent == first.run.path
    assert set(second.result["test"]) == {"knn/1"} and second.accuracies("knn", 1).shape == (30,)
    # The reused weights give what a direct evaluation of the stored weights gives.
    method, transform, dataset = load_trained(second)
    assert {t.device.type for t in method.parameters()} == {"cpu"}  # the run's device (spec.train.device)
    on_meta, _, _ = load_trained(second, device="meta")  # another device: every weight goes there
    assert {t.device.type for t in on_meta.parameters()} == {"meta"} and not on_meta.training
    test, device = dataset["test"], torch.device("cpu")
    feats = features_of(method, test, transform, device)
    mean = features_of(method, dataset["train"], transform, device).mean(0)
    ref = evaluate(feats, test.labels, ways=5, shots=[1], queries=15, episodes=30, classifier=["knn"], seed=0,
                   train_mean=mean)
    assert torch.equal(ref[("knn", 1)].accuracies.cpu(), second.accuracies("knn", 1))
    assert first.result == run_spec(_spec(), store, progress=False).result  # the first protocol is still there


def test_damaged_results_heal_and_damaged_weights_are_named(tmp_path):
    store = RunStore(tmp_path)
    first = run_spec(_spec(), store, progress=False)
    ev = first.evaluation.path
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.optim.SGD, "step", lambda *a, **k: pytest.fail("trained again"))
        (ev / "result.json").write_text("")  # empty: was JSONDecodeError on every later run
        with pytest.warns(UserWarning, match=r"evaluating again: .*result.json: is empty") as rec:
            again = run_spec(_spec(), store, progress=False)
        assert again.result["test"] == first.result["test"]
        # nothing needs deleting: the warning says what is redone, with no rm advice (before: "... rm -r")
        assert not [str(w.message) for w in rec if "evaluating again" in str(w.message) and "rm " in str(w.message)]
        acc = ev / "episode_accuracies.pt"
        acc.write_bytes(acc.read_bytes()[:200])
        with pytest.warns(UserWarning, match=r"evaluating again: .*episode_accuracies.pt: is damaged"):
            again = run_spec(_spec(), store, progress=False)
        assert again.result["test"] == first.result["test"]
        (first.run.path / "result.json").write_bytes(b"")  # the training record: rebuilt, the weights verify
        with pytest.warns(UserWarning, match=r"rebuilding the training record"):
            run_spec(_with_eval(_spec(), episodes=10), store, progress=False)
    w = first.run.path / "weights.pt"
    w.write_bytes(w.read_bytes()[:-1])
    (ev / "result.json").write_text("{}")
    with pytest.raises(RunFileError, match=rf"weights.pt: is damaged .*rm -r '{first.run.path}'"):
        with pytest.warns(UserWarning, match="evaluating again"):
            run_spec(_spec(), store, progress=False)


def test_result_records_what_computed_it_and_the_store_lists_it(tmp_path):
    store = RunStore(tmp_path)
    out = run_spec(_spec(), store, progress=False)
    r = out.result
    head = subprocess.run(["git", "-C", os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "rev-parse",
                           "HEAD"], capture_output=True, text=True)
    assert r["git_commit"] == (head.stdout.strip() if head.returncode == 0 else None)
    assert r["torch_version"] == str(torch.__version__) and r["device"] == "cpu"
    assert r["threads"] == torch.get_num_threads() and r["studylib_version"]
    assert r["train_seconds"] > 0 and r["eval_seconds"] > 0 and r["training_run"] == out.run.path.name
    [info] = store.list_runs()
    assert info.status == "finished" and info.training["steps"] == 2 * (len(load_trained(out)[2]["train"]) // 64)
    [ev] = info.evaluations
    assert ev["headline"] == {k: (v["mean"], v["ci95"]) for k, v in r["test"].items()}


CHILD = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, {tests!r})
    from test_runner_guards import tiny_spec, install_tiny
    from studylib.runs.runner import run_spec
    from studylib.training.runstore import RunStore
    torch.set_num_threads(1)
    install_tiny()
    if sys.argv[2] == "no-training":
        torch.optim.SGD.step = None  # any step would fail
    out = run_spec(tiny_spec(), RunStore(sys.argv[1]), progress=False)
    print("RESULT", out.result["test"]["nearest_centroid/1"]["mean"])
""")


def tiny_dataset():
    """A 16-px data set of 8/4/6 classes x 10 images, built the same (same content hash) in every process."""
    from studylib.data.base import FewShotDataset, ImageSplit
    g = torch.Generator().manual_seed(0)

    def split(classes, name):
        base = torch.rand(classes, 1, 16, 16, generator=g)
        imgs = base.repeat_interleave(10, 0) * 200 + torch.rand(classes * 10, 1, 16, 16, generator=g) * 55
        return ImageSplit(imgs.to(torch.uint8), torch.arange(classes).repeat_interleave(10),
                          [f"c{i}" for i in range(classes)], name=name)

    return FewShotDataset("tiny", {"train": split(8, "train"), "val": split(4, "val"), "test": split(6, "test")})


def tiny_spec():
    from studylib.runs.runner import DataSpec
    spec = _spec()
    return dataclasses.replace(spec, data=DataSpec.of(tiny_dataset()), backbone_options={"hidden": 8},
                               eval=dataclasses.replace(spec.eval, shots=[1, 2], queries=3, episodes=20,
                                                        val_episodes=0))


def install_tiny() -> None:
    """Register the tiny data set in this process (tiny_spec does it too; kept for the child script)."""
    tiny_spec()


def test_kill_before_the_evaluation_result_then_rerun_evaluates_without_training(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=os.path.dirname(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "STUDYLIB_KILL_AT": "runner.before_result"}
    store = tmp_path / "store"
    killed = subprocess.run([sys.executable, str(script), str(store), "train"], env=env)
    assert killed.returncode == -signal.SIGKILL
    [run] = RunStore(store).runs()
    [ev] = run.path.glob("eval-*")
    assert run.finished and (ev / "episode_accuracies.pt").exists() and not (ev / "result.json").exists()
    metrics = (run.path / "metrics.jsonl").read_bytes()
    env.pop("STUDYLIB_KILL_AT")
    done = subprocess.run([sys.executable, str(script), str(store), "no-training"], env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    install_tiny()
    clean = run_spec(tiny_spec(), RunStore(tmp_path / "clean"), progress=False)
    assert json.loads((ev / "result.json").read_text())["test"] == clean.result["test"]
    assert (run.path / "metrics.jsonl").read_bytes() == metrics


def test_identical_or_non_finite_features_are_refused():
    """The last net under a diverged model: all-equal features make every prediction the same class (each
    accuracy exactly 1/ways, CI 0); non-finite ones make them undefined. Either fails instead of a result."""
    from studylib.runs.runner import check_features
    spec = _spec(lr=1000.0)
    with pytest.raises(Diverged, match=r"identical features for every image .*test split.*lr=1000"):
        check_features(torch.zeros(50, 8), "test split", spec)
    bad = torch.randn(50, 8)
    bad[3, 2] = float("inf")
    with pytest.raises(Diverged, match="non-finite features"):
        check_features(bad, "test split", spec)
    check_features(torch.randn(50, 8), "test split", spec)  # ordinary features pass


# ------------------------------------------------------------------------------------- one trainer per run

RACER = textwrap.dedent("""
    import json, os, sys, time, torch
    sys.path.insert(0, {tests!r})
    from test_runner_guards import tiny_spec
    from studylib.runs.runner import run_spec
    from studylib.training import loop
    from studylib.training.runstore import RunStore
    torch.set_num_threads(1)
    real = loop._train

    def counted(*a, **k):  # the loop's body runs only for a run that is not finished
        with open(sys.argv[2], "a") as fh:
            fh.write(f"{{os.getpid()}}\\n")
        return real(*a, **k)

    loop._train = counted
    spec = tiny_spec()
    open(sys.argv[3] + f".{{os.getpid()}}", "w").close()  # ready
    while not os.path.exists(sys.argv[3]):
        time.sleep(0.005)
    out = run_spec(spec, RunStore(sys.argv[1]), progress=False)
    print("RESULT", json.dumps(out.result["test"], sort_keys=True))
""")


def test_two_processes_racing_on_one_run_train_it_once(tmp_path):
    """Both start run_spec at the same instant on the same store: one trains (its lock held through the
    evaluation), the other waits with one message naming the holder and then reuses the finished run."""
    script = tmp_path / "racer.py"
    script.write_text(RACER.format(tests=os.path.dirname(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("STUDYLIB_KILL_AT", None)
    env.pop("STUDYLIB_NO_WAIT", None)
    go, trained = tmp_path / "go", tmp_path / "trained.txt"
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path / "store"), str(trained), str(go)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    deadline = time.time() + 120
    while len(list(tmp_path.glob("go.*"))) < 2:
        assert time.time() < deadline and all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.01)
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert len(trained.read_text().split()) == 1  # one trainer
    results = [line for out, _ in outs for line in out.splitlines() if line.startswith("RESULT")]
    assert len(results) == 2 and results[0] == results[1]
    waits = [err for _, err in outs if "waiting for run" in err]
    assert len(waits) == 1 and f"host {socket.gethostname()}, pid " in waits[0]
    assert waits[0].count("waiting for run") == 1  # one message, not one per poll


def _foreign_lock(store: RunStore, spec) -> Path:
    path = store.root / ".locks" / f"{store.run(spec.name, spec.config()).path.name}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"host": "gpu-node-7", "pid": 4242, "token": "theirs", "notebook": "05_comparison",
                                "since": time.time()}))
    return path


def test_a_live_foreign_lock_makes_no_wait_fail_naming_the_holder(tmp_path, no_training, monkeypatch):
    store = RunStore(tmp_path / "store")
    spec = tiny_spec()
    lock = _foreign_lock(store, spec)
    holder = r"host gpu-node-7, pid 4242, notebook 05_comparison"
    with pytest.raises(RunBusy, match=rf"being trained by another process \({holder} \(heartbeat 0 s ago\); lock "):
        run_spec(spec, store, progress=False, no_wait=True)
    monkeypatch.setenv("STUDYLIB_NO_WAIT", "1")
    with pytest.raises(RunBusy, match=holder):
        run_spec(spec, store, progress=False)
    assert json.loads(lock.read_text())["token"] == "theirs"  # left to its owner
    assert not store.run(spec.name, spec.config()).exists


def test_waiting_for_a_foreign_lock_ends_when_it_goes_stale(tmp_path, monkeypatch, capfd):
    """A foreign holder stops beating: after stale_after the lock is taken over and the run trained here."""
    from studylib.runs import runner
    from studylib.training.runlock import RunLock
    store = RunStore(tmp_path / "store")
    spec = tiny_spec()
    _foreign_lock(store, spec)
    monkeypatch.setattr(runner, "run_lock", lambda st, run: RunLock(st.root / ".locks" / f"{run.path.name}.json",
                                                                      stale_after=1.5, heartbeat=0.5))
    monkeypatch.setattr(runner, "LOCK_POLL", 0.2)
    t0 = time.time()
    out = run_spec(spec, store, progress=False, no_wait=False)
    assert 1.2 < time.time() - t0 and out.run.finished
    assert capfd.readouterr().err.count("waiting for run") == 1
    assert not list((store.root / ".locks").glob("*.json"))  # released


def test_each_training_seed_is_evaluated_on_its_own_episodes(tmp_path):
    """Issue 19: the test episodes of a run come from episode_seed(eval seed, training seed), so an interval over
    training seeds carries the episode sampling too; seed 0 keeps the base seed's episodes."""
    from studylib.evaluation import episode_seed
    store = RunStore(tmp_path)
    out = run_spec(_with_eval(_spec(seed=1, epochs=1), shots=[1], episodes=40, classifiers=["nearest_centroid"]),
                   store, progress=False)
    method, transform, dataset = load_trained(out)
    test, device = dataset["test"], torch.device("cpu")
    feats = features_of(method, test, transform, device)
    mean = features_of(method, dataset["train"], transform, device).mean(0)

    def accs(seed: int) -> torch.Tensor:
        return evaluate(feats, test.labels, ways=5, shots=[1], queries=15, episodes=40,
                        classifier=["nearest_centroid"], seed=seed, train_mean=mean)[("nearest_centroid", 1)].accuracies
    stored = out.accuracies("nearest_centroid", 1)
    assert torch.equal(accs(episode_seed(0, 1)).cpu(), stored)
    assert not torch.equal(accs(0).cpu(), stored)  # not the episodes every seed used to share
