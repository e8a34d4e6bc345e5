"""The run store: lookups write nothing, every file is checksummed, damaged files heal or are named, a full
disk is reported as such, files respect the umask, runs can be listed."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
import time

import pytest
import torch

import studylib
from studylib.training.loop import Interrupted, train
from studylib.training.runstore import RunFileError, RunStore, git_commit, provenance
import studylib.utils as utils
from studylib.utils import DiskFullError

sys.path.insert(0, os.path.dirname(__file__))
from test_resume import _cfg, _split, _weights, make  # noqa: E402


def _clean_weights(tmp_path, **cfg):
    return _weights(train(make(), _split(), _cfg(**cfg), RunStore(tmp_path / "clean").run("r", {})))


def _interrupted(tmp_path, steps=9, **cfg):
    """A run killed (test hook) after ``steps`` steps; 6 steps per epoch and checkpoint_every=4 give
    checkpoints at steps 4, 6 (end of epoch 0) and 8: checkpoint.pt is step 8, checkpoint.prev.pt step 6."""
    run = RunStore(tmp_path / "store").run("r", {})
    with pytest.raises(Interrupted):
        train(make(), _split(), _cfg(**cfg), run, stop_after=steps)
    return run


def test_lookup_writes_nothing_and_training_creates_the_folder(tmp_path):
    store = RunStore(tmp_path / "store")
    run = store.run("r", {"a": 1})
    assert run.status == "missing" and run.metrics == [] and run.load_checkpoint() is None and not run.finished
    assert store.runs() == [] and store.list_runs() == []
    assert not (tmp_path / "store").exists()  # neither the store nor the run folder
    train(make(), _split(), _cfg(epochs=1), run)
    assert sorted(p.name for p in run.path.iterdir() if not p.name.startswith(".") and p.name != "tb") == [
        "config.json", "metrics.jsonl", "result.json", "weights.pt"]  # (tb/: TensorBoard, when installed)


def test_failed_attempt_before_any_checkpoint_leaves_no_folder(tmp_path):
    run = RunStore(tmp_path).run("r", {})
    with pytest.raises(Interrupted):
        train(make(), _split(), _cfg(), run, stop_after=2)  # checkpoint_every=4: nothing to resume yet
    assert not run.path.exists()


def test_every_file_carries_its_sha256(tmp_path):
    run = RunStore(tmp_path).run("r", {"x": 1})
    train(make(), _split(), _cfg(epochs=1), run)
    for name in ("config.json", "metrics.jsonl", "result.json", "weights.pt"):
        digest = hashlib.sha256((run.path / name).read_bytes()).hexdigest()  # computed here, independently
        assert (run.path / f".{name}.sha256").read_text().split()[0] == digest


def test_flipped_byte_in_checkpoint_is_detected_and_the_previous_one_used(tmp_path):
    """torch.load accepts a checkpoint with a byte flipped inside a tensor and returns other numbers; the
    store's checksum catches it and resumes from the previous checkpoint, ending with the exact weights."""
    expected = _clean_weights(tmp_path)
    run = _interrupted(tmp_path)
    ckpt = run.path / "checkpoint.pt"
    good = torch.load(ckpt, weights_only=True)
    data = bytearray(ckpt.read_bytes())
    w = good["model"]["head.weight"]
    raw = w.numpy().tobytes()
    at = bytes(data).find(raw)  # the tensor's bytes inside the zip (stored uncompressed)
    assert at > 0
    data[at + 5] ^= 0x40
    ckpt.write_bytes(bytes(data))
    bad = torch.load(ckpt, weights_only=True)  # the problem: no error, different weights
    assert not torch.equal(bad["model"]["head.weight"], w)
    with pytest.warns(UserWarning, match=r"checkpoint.pt: is damaged .*resuming from the previous checkpoint "
                                         r"checkpoint.prev.pt \(step 6\)"):
        state = run.load_checkpoint()
    assert state["global_step"] == 6
    got = _weights(train(make(), _split(), _cfg(), RunStore(tmp_path / "store").run("r", {})))
    assert all(torch.equal(expected[k], got[k]) for k in expected)


@pytest.mark.parametrize("damage", ["truncate", "empty"])
def test_truncated_or_empty_checkpoint_falls_back_and_resumes_exactly(tmp_path, damage):
    expected = _clean_weights(tmp_path)
    run = _interrupted(tmp_path)
    ckpt = run.path / "checkpoint.pt"
    ckpt.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2] if damage == "truncate" else b"")
    with pytest.warns(UserWarning, match="is empty" if damage == "empty" else "is damaged"):
        got = _weights(train(make(), _split(), _cfg(), RunStore(tmp_path / "store").run("r", {})))
    assert all(torch.equal(expected[k], got[k]) for k in expected)


def test_both_checkpoints_damaged_names_them_and_the_command(tmp_path):
    run = _interrupted(tmp_path)
    (run.path / "checkpoint.pt").write_bytes(b"")
    prev = run.path / "checkpoint.prev.pt"
    prev.write_bytes(prev.read_bytes()[:100])
    with pytest.raises(RunFileError, match=r"no usable checkpoint: .*checkpoint.pt: is empty; .*checkpoint.prev.pt: "
                                           r"is damaged.*rm -f .*checkpoint.pt' .*checkpoint.prev.pt'"):
        train(make(), _split(), _cfg(), RunStore(tmp_path / "store").run("r", {}))


def test_damaged_final_files_are_named_with_the_fix(tmp_path):
    run = RunStore(tmp_path).run("r", {})
    train(make(), _split(), _cfg(epochs=1), run)
    (run.path / "result.json").write_text("")
    with pytest.raises(RunFileError, match=r"result.json: is empty\. Delete the run folder .*rm -r"):
        run.result()
    w = run.path / "weights.pt"
    w.write_bytes(w.read_bytes()[:-10])
    with pytest.raises(RunFileError, match=r"weights.pt: is damaged .*cannot be rebuilt without training: .*rm -r"):
        run.load_tensor("weights.pt")
    with pytest.raises(RunFileError, match="weights.pt"):
        train(make(), _split(), _cfg(epochs=1), run)  # a finished run loads its weights: refused, named


def test_disk_full_at_a_checkpoint_says_so_and_loses_nothing(tmp_path, monkeypatch):
    expected = _clean_weights(tmp_path)
    real = utils._write_all
    calls = {"n": 0}

    def full_disk(fh, data, target):
        if target.name == "checkpoint.pt":
            calls["n"] += 1
            if calls["n"] == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
        real(fh, data, target)

    monkeypatch.setattr(utils, "_write_all", full_disk)
    run = RunStore(tmp_path / "store").run("r", {})
    with pytest.raises(DiskFullError, match=r"the disk is full .* while writing .*checkpoint.pt .*Nothing was lost: "
                                            r".* holds the checkpoint of step 4 .*resumes from step 4"):
        train(make(), _split(), _cfg(), run)
    assert not list(run.path.glob(".*.tmp"))
    assert torch.load(run.path / "checkpoint.pt", weights_only=True)["global_step"] == 4
    monkeypatch.setattr(utils, "_write_all", real)
    got = _weights(train(make(), _split(), _cfg(), RunStore(tmp_path / "store").run("r", {})))
    assert all(torch.equal(expected[k], got[k]) for k in expected)


@pytest.mark.parametrize("umask", [0o002, 0o022])
def test_files_respect_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        run = RunStore(tmp_path / "store").run("r", {})
        with pytest.raises(Interrupted):
            train(make(), _split(), _cfg(), run, stop_after=9)  # two checkpoints: checkpoint.prev.pt too
        train(make(), _split(), _cfg(), run)
        (run.path / "tmp_probe").write_bytes(b"")  # what a plain open() gives under this umask
        want = (run.path / "tmp_probe").stat().st_mode & 0o777
        assert want == 0o666 & ~umask
        modes = {p.name: p.stat().st_mode & 0o777 for p in run.path.iterdir() if p.is_file()}
        assert modes and all(m == want for m in modes.values()), modes
        assert run.path.stat().st_mode & 0o777 == 0o777 & ~umask
    finally:
        os.umask(old)


def test_stale_temp_files_are_removed_only_when_no_live_writer_owns_them(tmp_path):
    run = RunStore(tmp_path).run("r", {})
    run.open()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    host = utils._HOST
    files = {
        "dead": run.path / f".metrics.jsonl.{dead_pid}@{host}.abc123.tmp",
        "live": run.path / f".checkpoint.pt.{os.getppid()}@{host}.def456.tmp",
        "old_unowned": run.path / ".checkpoint.pt.ghi789.tmp",
        "new_unowned": run.path / ".result.json.jkl012.tmp",
        "other_host_new": run.path / f".weights.pt.{dead_pid}@elsewhere.mno345.tmp",
    }
    for f in files.values():
        f.write_bytes(b"partial")
    past = time.time() - 2 * utils.STALE_TMP_SECONDS
    os.utime(files["old_unowned"], (past, past))
    fresh = RunStore(tmp_path).run("r", {})
    fresh.open()
    left = {k for k, f in files.items() if f.exists()}
    assert left == {"live", "new_unowned", "other_host_new"}


def test_provenance_and_git_commit(tmp_path):
    repo = os.path.dirname(os.path.dirname(studylib.__file__))
    head = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True)
    p = provenance("cpu")
    assert p["git_commit"] == (head.stdout.strip() if head.returncode == 0 else None)
    assert p["studylib_version"] == studylib.__version__ and p["torch_version"] == str(torch.__version__)
    assert p["threads"] == torch.get_num_threads() and p["device"] == "cpu"
    assert git_commit(tmp_path) == (None, None)  # not a git checkout


def test_list_runs_reports_status_creation_and_training_record(tmp_path):
    store = RunStore(tmp_path)
    train(make(), _split(), _cfg(epochs=1), store.run("done", {"k": 1}))
    with pytest.raises(Interrupted):
        train(make(), _split(), _cfg(), store.run("half", {"k": 2}), stop_after=5)
    store.run("none", {"k": 3}).open()
    broken = store.run("broken", {"k": 4})
    train(make(), _split(), _cfg(epochs=1), broken)
    (broken.path / "result.json").write_text("{")
    infos = {i.name.split("-")[0]: i for i in store.list_runs()}
    assert {k: i.status for k, i in infos.items()} == {"done": "finished", "half": "interrupted", "none": "empty",
                                                       "broken": "damaged"}
    assert infos["done"].training["steps"] == 6 and infos["done"].training["train_seconds"] > 0
    assert infos["half"].training is None and infos["none"].config == {"k": 3}
    assert all(abs(i.created - time.time()) < 600 for i in infos.values())


# --------------------------------------------------------------------- a store of the previous format (no sidecars)

def _legacy_store(tmp_path):
    """A tiny finished run, then its checksum sidecars and format records removed: what studylib wrote before
    checksums."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "runs"))
    from test_runner_guards import tiny_spec
    from studylib.runs.runner import run_spec
    store = RunStore(tmp_path / "store")
    out = run_spec(tiny_spec(), store, progress=False)
    sidecars = list(store.root.rglob(".*.sha256"))
    assert len(sidecars) >= 6
    for f in [*sidecars, *store.root.rglob(".run-format")]:
        f.unlink()
    return store, out, tiny_spec


def _no_new_sidecars(folder):
    return not list(folder.rglob(".*.sha256"))


def test_a_run_of_the_previous_format_is_loaded_only_after_adopt_trust(tmp_path, monkeypatch):
    """Before: the first load verified and signed it on its own (trust on first use). Now it is named with the
    adopt command, nothing is written, and after ``adopt --trust`` it is reused without training."""
    from studylib.runs.runner import run_spec
    from studylib.training.adopt import main
    store, first, tiny_spec = _legacy_store(tmp_path)
    weights = (first.run.path / "weights.pt").read_bytes()
    monkeypatch.setattr(torch.optim.SGD, "step", lambda *a, **k: pytest.fail("trained again"))
    with pytest.raises(RunFileError, match=r"written by studylib before checksums, which is not loaded until someone "
                                           r"vouches for it\. .*python -m studylib.training.adopt --trust") as e:
        run_spec(tiny_spec(), store, progress=False)
    assert e.value.kind == "unchecked" and _no_new_sidecars(store.root)
    assert not list(store.root.rglob(".run-format"))
    assert main([str(first.run.path)]) == 1 and _no_new_sidecars(store.root)  # without --trust: nothing written
    assert main(["--trust", str(first.run.path)]) == 0
    again = run_spec(tiny_spec(), store, progress=False)
    assert again.result == first.result and (first.run.path / "weights.pt").read_bytes() == weights
    assert (first.run.path / ".weights.pt.sha256").read_text().split() == [hashlib.sha256(weights).hexdigest()]


def test_an_unverifiable_old_run_names_what_failed_and_the_adopt_command(tmp_path, capsys):
    from studylib.training.adopt import main
    store, first, _ = _legacy_store(tmp_path)
    run = first.run
    cfg = run.path / "config.json"
    cfg.write_text(cfg.read_text().replace('"lr": 0.05', '"lr": 0.06'))  # no longer hashes to the folder's name
    with pytest.raises(RunFileError, match=r"adopt --trust") as e:
        run.load_tensor("weights.pt")
    assert e.value.kind == "unchecked"
    assert main([str(run.path)]) == 1
    err = capsys.readouterr().err
    assert "config.json hashes to " in err and f"is named by {run.path.name[-12:]}" in err and "Nothing was written" in err
    assert not (run.path / ".weights.pt.sha256").exists()
    assert main(["--trust", str(run.path)]) == 0  # the person vouches for it
    assert set(run.load_tensor("weights.pt")) == set(torch.load(run.path / "weights.pt", weights_only=True))


def test_a_renamed_old_run_folder_is_named_plainly(tmp_path, capsys):
    """Before: 'config.json hashes to c16, not to the run its folder is named by' (the hash cut to the length of
    the last word of the new name)."""
    from studylib.training.adopt import main
    store, first, _ = _legacy_store(tmp_path)
    renamed = first.run.path.with_name("my-run")
    first.run.path.rename(renamed)
    assert main([str(renamed)]) == 1
    err = capsys.readouterr().err
    assert "the folder name 'my-run' does not end in '-<12 hex digits>'" in err
    assert f"hashes to {first.run.path.name[-12:]}" in err


def test_a_damaged_sidecar_makes_the_file_damaged_not_adoptable(tmp_path):
    """Before: named, with the advice to re-sign it with adopt (which signed whatever the file held)."""
    from studylib.training.adopt import main
    store = RunStore(tmp_path)
    run = store.run("r", {"a": 1})
    run.save_tensor("weights.pt", {"w": torch.ones(3)})
    (run.path / ".weights.pt.sha256").write_text("not a digest\n")
    with pytest.raises(RunFileError, match=r"weights.pt: its checksum sidecar \.weights\.pt\.sha256 is damaged .* "
                                           r"treated as damaged and not loaded\. .*rm -r") as e:
        run.load_tensor("weights.pt")
    assert e.value.kind == "sidecar"
    assert main(["--trust", str(run.path)]) == 1  # a run of today's format is never re-signed
    assert (run.path / ".weights.pt.sha256").read_text() == "not a digest\n"


# ------------------------------------------------------------- tampering with a run of today's format (issue 29)

def _finished(tmp_path):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "runs"))
    from test_runner_guards import tiny_spec
    from studylib.runs.runner import run_spec
    store = RunStore(tmp_path / "store")
    return store, run_spec(tiny_spec(), store, progress=False), tiny_spec


def test_tampered_weights_without_their_sidecar_are_never_loaded_or_re_signed(tmp_path):
    """Before: api.load_run loaded the changed tensors with a warning calling it 'a run of an older format' and
    wrote a fresh checksum for them."""
    from studylib import api
    from studylib.training.adopt import main
    store, out, _ = _finished(tmp_path)
    w = out.run.path / "weights.pt"
    state = torch.load(w, weights_only=True)
    key = next(k for k, v in state.items() if v.is_floating_point() and v.numel() > 4)
    raw = state[key].numpy().tobytes()
    data = bytearray(w.read_bytes())
    at = bytes(data).find(raw)
    assert at > 0
    data[at + 2] ^= 0x20  # other embeddings, and torch.load still accepts the file
    w.write_bytes(bytes(data))
    (out.run.path / ".weights.pt.sha256").unlink()
    with pytest.raises(RunFileError, match=r"weights.pt: is damaged: its checksum \.weights\.pt\.sha256 is missing "
                                           r"in a run of format 2 .*not loaded\. .*rm -r"):
        api.load_run(out.run.path.name, store=store.root)
    assert main(["--trust", str(out.run.path)]) == 1
    assert not (out.run.path / ".weights.pt.sha256").exists()


def test_a_tampered_evaluation_result_without_its_sidecar_is_evaluated_again(tmp_path):
    """Before: run_spec returned the edited 0.99."""
    import json
    import warnings
    from studylib.runs.runner import run_spec
    store, out, tiny_spec = _finished(tmp_path)
    res = out.evaluation.path / "result.json"
    record = json.loads(res.read_text())
    genuine = json.dumps(record["test"], sort_keys=True)
    for v in record["test"].values():
        if isinstance(v, dict) and "mean" in v:
            v["mean"] = 0.99
    res.write_text(json.dumps(record))
    (out.evaluation.path / ".result.json.sha256").unlink()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = run_spec(tiny_spec(), store, progress=False)
    assert any("evaluating again" in str(w.message) and "is damaged: its checksum" in str(w.message) for w in caught)
    assert json.dumps(again.result["test"], sort_keys=True) == genuine


def test_a_tampered_config_without_its_sidecar_is_never_loaded(tmp_path):
    from studylib import api
    store, out, _ = _finished(tmp_path)
    cfg = out.run.path / "config.json"
    cfg.write_text(cfg.read_text().replace('"lr": 0.05', '"lr": 0.5'))
    (out.run.path / ".config.json.sha256").unlink()
    with pytest.raises(RunFileError, match=r"config.json: is damaged: its checksum .* is missing"):
        api.load_run(out.run.path.name, store=store.root)
    assert not (out.run.path / ".config.json.sha256").exists()


def test_all_sidecars_gone_but_the_format_record_kept_is_damage_not_an_old_run(tmp_path):
    from studylib import api
    from studylib.training.adopt import main
    store, out, _ = _finished(tmp_path)
    for f in store.root.rglob(".*.sha256"):
        f.unlink()
    with pytest.raises(RunFileError, match=r"is missing in a run of format 2") as e:
        api.load_run(out.run.path.name, store=store.root)
    assert e.value.kind == "damaged"
    assert main(["--trust", str(out.run.path)]) == 1 and _no_new_sidecars(store.root)


def test_a_run_records_its_format_before_any_other_file(tmp_path):
    from studylib.training.runstore import RUN_FORMAT, run_format
    run = RunStore(tmp_path).run("r", {"a": 1})
    assert run_format(tmp_path) == 0
    run.open()
    assert (run.path / ".run-format").read_text().split()[-1] == str(RUN_FORMAT) == "2"
    assert run_format(run.path) == 2 and run_format(run.path / "config.json") == 2


def test_the_adopt_command_prints_no_runtime_warning(tmp_path):
    """Before: python -m studylib.training.runstore adopt always printed runpy's RuntimeWarning (the package
    imports runstore before it runs as __main__)."""
    store, first, _ = _legacy_store(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "studylib.training.adopt", "--trust",
                           str(first.run.path)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "RuntimeWarning" not in done.stderr and "checksums written" in done.stdout


# ------------------------------------------------------------------------------ guards of the defences

class _Payload:
    """Unpickling this runs code (creates the marker file): what a crafted checkpoint would carry."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def test_a_checkpoint_carrying_a_pickled_payload_is_refused_by_every_loading_path(tmp_path):
    """With weights_only=False anywhere, the payload would run and create the marker."""
    import io
    import warnings
    from studylib import api
    from studylib.data.readers import cached
    from studylib.training.runstore import _write_digests, adopt
    marker = tmp_path / "ran"
    blob = io.BytesIO()
    torch.save({"model": {"w": torch.ones(2)}, "extra": _Payload(marker)}, blob)
    data = blob.getvalue()
    run = RunStore(tmp_path / "store").run("r", {"a": 1})
    run.open()
    for name in ("checkpoint.pt", "weights.pt"):  # with a valid checksum: only weights_only stands in the way
        (run.path / name).write_bytes(data)
        _write_digests(run.path / name, [hashlib.sha256(data).hexdigest()])
    with pytest.raises(RunFileError, match=r"checkpoint.pt: cannot be read by torch"):
        run.load_checkpoint()
    with pytest.raises(RunFileError, match=r"weights.pt: cannot be read by torch"):
        run.load_tensor("weights.pt")
    for name in ("checkpoint.pt", "weights.pt", "config.json"):  # the previous format: adoption verifies by loading
        (run.path / f".{name}.sha256").unlink()
    (run.path / ".run-format").unlink()
    with pytest.raises(RunFileError, match=r"weights.pt: does not load \(UnpicklingError"):
        adopt(run.path)
    with pytest.raises(Exception, match="Weights only load failed"):
        api.load_weights(run.path / "weights.pt", spec=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cached(run.path / "weights.pt", lambda: {"rebuilt": True}) == {"rebuilt": True}
    assert any("ignoring unreadable decode cache" in str(w.message) for w in caught)
    assert not marker.exists()


def test_the_locks_folder_is_never_a_run(tmp_path):
    from studylib.training.runlock import RunLock
    store = RunStore(tmp_path)
    run = store.run("r", {"a": 1})
    run.save_result({"kind": "training"})
    locks = tmp_path / ".locks"
    lock = RunLock(locks / f"{run.path.name}.json")
    assert lock.acquire()
    try:
        (locks / "config.json").write_text("{}")  # even a stray config.json there does not make it a run
        assert [i.name for i in store.list_runs()] == [run.path.name]
        assert [r.path.name for r in store.runs()] == [run.path.name]
    finally:
        lock.release()


def test_a_damaged_metrics_log_of_an_interrupted_run_heals_from_the_checkpoint(tmp_path):
    """Before: RunFileError '... delete the run folder (rm -r ...)': the run could only be trained again."""
    run = _interrupted(tmp_path)  # checkpoint at step 8, metrics rows up to step 9
    log = run.path / "metrics.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:3]) + lines[3][:7] + b"\xff garbage\n" + b"".join(lines[4:]))
    fresh = RunStore(tmp_path / "store").run("r", {})
    with pytest.warns(UserWarning, match=r"metrics.jsonl was damaged .*rebuilt from its \d+ readable row\(s\) up to "
                                         r"the checkpoint's step 8 \(1 unreadable line\(s\) dropped\)"):
        weights = _weights(train(make(), _split(), _cfg(), fresh))
    assert all(torch.equal(weights[k], v) for k, v in _clean_weights(tmp_path).items())
    rows = RunStore(tmp_path / "store").run("r", {}).metrics  # rewritten with a checksum that verifies
    steps = [r["step"] for r in rows if "train_loss" in r]
    assert steps == sorted(steps) and steps[-1] == 18


def test_an_interrupted_run_of_the_previous_format_resumes_exactly_once_adopted(tmp_path):
    """Its checkpoints (no sidecars) are refused until adopt --trust, then training resumes exactly."""
    from studylib.training.adopt import main
    run = _interrupted(tmp_path)
    for f in [*run.path.glob(".*.sha256"), run.path / ".run-format"]:
        f.unlink()
    with pytest.raises(RunFileError, match=r"before checksums.*adopt --trust"):
        train(make(), _split(), _cfg(), RunStore(tmp_path / "store").run("r", {}))
    assert main(["--trust", str(run.path)]) == 0
    weights = _weights(train(make(), _split(), _cfg(), RunStore(tmp_path / "store").run("r", {})))
    assert all(torch.equal(weights[k], v) for k, v in _clean_weights(tmp_path).items())
