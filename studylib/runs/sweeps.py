"""Sweeps on a Ray cluster: every unfinished run of a sweep is one Ray task; the run store is the meeting point.

``run_sweep(specs, backend="ray")`` (or ``$STUDYLIB_RAY_ADDRESS``, which ``./study run --ray ADDRESS`` sets for
whole notebooks) sends each spec whose run has no result to the cluster as one task with ``num_cpus`` and
``num_gpus`` from the spec (:func:`resources_of`); finished runs are loaded without a task. A task:

1. opens the run in the shared store and returns at once if it is finished;
2. takes the run's lock (:class:`studylib.training.runlock.RunLock`: owner host and pid, heartbeat, taken
   over when stale); if another live worker holds it, the task returns ``"busy"`` and frees its slot, and the
   driver waits for that run's result in the store (or resubmits when the holder's lock goes stale);
3. trains through :func:`~studylib.runs.runner.run_spec`, which resumes from the run's checkpoint, so a
   worker that died mid-run (Ray retries its task, ``max_retries``) costs only the steps since the last
   checkpoint;
4. appends what it did to ``<store>/.locks/<run>.log`` (host, pid, resumed or fresh, trained or found done).

The driver shows one bar over the sweep and returns the outcomes in the order of ``specs``, read from the
store exactly as the sequential backend returns them. Two sweeps on the same store (two notebooks, two
drivers) share the work: the second finds runs finished or locked and waits for them instead of training them
again.

Ray is optional (``pip install -e .[ray]``); without it, or with ``backend="local"``, sweeps run one run after
another in this process, as before.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any


from studylib import progress as progress_display
from studylib.progress import bar as progress_bar
from studylib.runs.runner import Outcome, RunSpec, run_spec, stored_outcome
from studylib.training.runlock import RunLock
from studylib.training.runstore import Run, RunStore

ADDRESS_ENV = "STUDYLIB_RAY_ADDRESS"  # cluster address ("auto", "host:6379", or "local" to start one here)
NUM_GPUS_ENV = "STUDYLIB_RAY_NUM_GPUS"  # override of a GPU run's share of a GPU (e.g. 0.25: four runs per GPU)
NUM_CPUS_ENV = "STUDYLIB_RAY_NUM_CPUS"  # override of the CPUs per run
BACKENDS = ("local", "ray")
LOCKS = ".locks"


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def choose_backend(backend: str | None = None) -> str:
    """``backend`` if given, else ``"ray"`` when ``$STUDYLIB_RAY_ADDRESS`` is set, else ``"local"``."""
    if backend is None:
        backend = "ray" if os.environ.get(ADDRESS_ENV) else "local"
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not known; allowed: {', '.join(BACKENDS)}")
    if backend == "ray" and not ray_available():
        why = f" (${ADDRESS_ENV} is set)" if os.environ.get(ADDRESS_ENV) else ""
        raise ImportError(f"the Ray backend was asked for{why} but Ray is not installed; install the extra with "
                          "`pip install -e .[ray]` (or `./study setup ray`), or use backend='local'")
    return backend


def resources_of(spec: RunSpec, cluster_gpus: float) -> dict[str, float]:
    """The Ray resources of one run: one CPU, and one GPU when the spec may use one and the cluster has any.

    ``device="cpu"`` runs take no GPU; ``"auto"``/``"cuda"`` runs take one where the cluster has GPUs (a run is
    one process; Ray sets ``CUDA_VISIBLE_DEVICES`` for it) and run on a CPU otherwise, as ``"auto"`` would.
    ``$STUDYLIB_RAY_NUM_GPUS`` / ``$STUDYLIB_RAY_NUM_CPUS`` override the amounts (smoke runs on a GPU can share
    it: 0.25 packs four).
    """
    gpus = 0.0
    if spec.train.device != "cpu" and cluster_gpus > 0:
        gpus = float(os.environ.get(NUM_GPUS_ENV, "1"))
    if spec.train.device.startswith("cuda") and cluster_gpus <= 0:
        raise ValueError(f"run {spec.name!r} asks for device={spec.train.device!r} but the Ray cluster has no GPU")
    return {"num_cpus": float(os.environ.get(NUM_CPUS_ENV, "1")), "num_gpus": gpus}


def connect(address: str | None = None) -> None:
    """Join the Ray cluster at ``address`` (``"auto"``, ``"host:port"``), or start one here (None, ``"local"``).

    Nothing happens when this process is already connected.
    """
    import atexit
    import logging

    import ray
    if ray.is_initialized():
        return
    address = address or os.environ.get(ADDRESS_ENV) or None
    quiet = dict(log_to_driver=False, logging_level=logging.ERROR)  # notebooks show results, not Ray's start-up
    if address in (None, "", "local"):  # "local" always starts a new cluster (never a stale one's address)
        start_local(**quiet)
        atexit.register(ray.shutdown)  # stop it with this process (a notebook kernel), not by signal
    else:
        ray.init(address=address, **quiet)


def start_local(attempts: int = 3, **init_kwargs: Any) -> None:
    """``ray.init(address="local")``, tried again when the node misses Ray's fixed 30 s start-up window (seen
    on an overloaded 2-core machine: "The current node timed out during startup")."""
    import ray
    for attempt in range(attempts):
        try:
            ray.init(address="local", include_dashboard=False, **init_kwargs)
            return
        except Exception as e:  # Ray raises a bare Exception for this
            if "timed out during startup" not in str(e) or attempt == attempts - 1:
                raise
            ray.shutdown()


def lock_for(store: RunStore, run: Run, stale_after: float = 120.0, heartbeat: float = 10.0) -> RunLock:
    return RunLock(store.root / LOCKS / f"{run.path.name}.json", stale_after=stale_after, heartbeat=heartbeat)


def _log(store: RunStore, run: Run, event: dict[str, Any]) -> None:
    """Append one line to the run's attempt log (only the lock holder writes it)."""
    path = store.root / LOCKS / f"{run.path.name}.log"
    with open(path, "a") as fh:
        fh.write(json.dumps({"time": time.time(), "host": socket.gethostname(), "pid": os.getpid(), **event}) + "\n")


def attempts(store: RunStore, run: Run) -> list[dict[str, Any]]:
    """The attempt log of ``run``: one dict per event (``event``: ``start``, ``trained``, ``found_finished``)."""
    path = store.root / LOCKS / f"{run.path.name}.log"
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


def train_task(spec: RunSpec, root: str, cache: str | None, threads: int, stale_after: float,
               heartbeat: float) -> str:
    """One run on a Ray worker: ``"done"`` (finished, by anyone), ``"trained"`` (by this call) or ``"busy"``."""
    if cache:
        os.environ["STUDYLIB_CACHE"] = cache  # generated data sets are cached where the driver caches them
    store = RunStore(root)
    run = store.run(spec.name, spec.config())
    if stored_outcome(spec, store) is not None:
        return "done"
    lock = lock_for(store, run, stale_after, heartbeat)
    if not lock.acquire():
        return "busy"
    try:
        if stored_outcome(spec, store) is not None:  # finished by another worker between the look and the lock
            _log(store, run, {"event": "found_finished"})
            return "done"
        import torch
        torch.set_num_threads(max(1, threads))
        _log(store, run, {"event": "start", "resumed": run.checkpoint_path.exists()})
        run_spec(spec, store, progress=False)
        _log(store, run, {"event": "trained"})
        return "trained"
    finally:
        lock.release()


def run_sweep_ray(specs: list[RunSpec], store: RunStore | None = None, progress: bool = True,
                  address: str | None = None, poll: float = 0.5, stale_after: float = 120.0,
                  heartbeat: float = 10.0, max_retries: int = 3) -> list[Outcome]:
    """Run every spec on the Ray cluster (see the module docstring); outcomes in the order of ``specs``.

    Args:
        specs: the sweep.
        store: the run store, a folder every worker sees (default ``<repo>/.cache/runs``).
        progress: one bar over the sweep.
        address: the cluster (default ``$STUDYLIB_RAY_ADDRESS``; none: a local cluster on this machine).
        poll: seconds between looks at runs that another worker holds.
        stale_after, heartbeat: of the per-run lock.
        max_retries: Ray's retries of a task whose worker died (each resumes from the run's checkpoint).
    """
    import ray
    store = store or RunStore()
    connect(address)
    root = str(Path(store.root).resolve())
    cache = os.environ.get("STUDYLIB_CACHE")
    gpus = float(ray.cluster_resources().get("GPU", 0.0))
    task = ray.remote(train_task)
    runs = [store.run(s.name, s.config()) for s in specs]
    out: list[Outcome | None] = [None] * len(specs)
    pending: dict[Any, int] = {}
    waiting: set[int] = set()
    bar = progress_bar(total=len(specs), desc="runs (ray)", enabled=bool(progress) and len(specs) >= 2)

    def finish(i: int) -> None:
        out[i] = stored_outcome(specs[i], store)
        if out[i] is None:
            raise RuntimeError(f"run {runs[i].path.name} was reported done but its evaluation is not in {root}")
        bar.update(1)

    def submit(i: int) -> None:
        res = resources_of(specs[i], gpus)
        ref = task.options(max_retries=max_retries, **res).remote(
            specs[i], root, cache, int(res["num_cpus"]), stale_after, heartbeat)
        pending[ref] = i

    for i in range(len(runs)):
        if stored_outcome(specs[i], store) is not None:
            finish(i)
        else:
            submit(i)
    try:
        while pending or waiting:
            if pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=poll)
            else:
                ready = []
                time.sleep(poll)
            for ref in ready:
                i = pending.pop(ref)
                if ray.get(ref) == "busy":
                    waiting.add(i)
                else:
                    finish(i)
            for i in sorted(waiting):
                if stored_outcome(specs[i], store) is not None:
                    waiting.discard(i)
                    finish(i)
                elif not lock_for(store, runs[i], stale_after, heartbeat).busy():
                    waiting.discard(i)  # its holder let go without finishing (died, or failed): try ourselves
                    submit(i)
    except BaseException:
        for ref in pending:
            ray.cancel(ref)
        raise
    finally:
        bar.close()
    return out  # type: ignore[return-value]


def run_sweep(specs: list[RunSpec], store: RunStore | None = None, progress: bool | None = None,
              backend: str | None = None) -> list[Outcome]:
    """Run every spec, reusing finished runs.

    Progress (on by default; ``progress=False`` or ``STUDYLIB_PROGRESS=0`` turns it off): one text line per run
    over the whole sweep and the current run's training bar, prefixed ``[i/n]`` (:mod:`studylib.progress`);
    plain text, so JupyterLab, papermill's logs and the saved notebook all show it.

    ``backend``: ``"local"`` (one after another in this process, :func:`~studylib.runs.runner.run_spec`),
    ``"ray"`` (one Ray task per unfinished run, :func:`run_sweep_ray`), or None: ``"ray"`` when
    ``$STUDYLIB_RAY_ADDRESS`` is set, else local.
    """
    show = progress_display.resolve(progress)
    if choose_backend(backend) == "ray":
        return run_sweep_ray(specs, store, progress=show)
    out = []
    sweep = progress_display.SweepProgress(len(specs), desc="sweep", enabled=show)
    for spec in specs:
        with sweep.run(spec.name):
            out.append(run_spec(spec, store, progress=show))
    return out


__all__ = ["run_sweep", "run_sweep_ray", "choose_backend", "resources_of", "connect", "start_local", "train_task", "attempts", "lock_for",
           "ray_available", "ADDRESS_ENV"]
