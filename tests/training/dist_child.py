"""Worker of tests/training/test_distributed.py, started by torchrun: ``python -m torch.distributed.run
--standalone --nproc-per-node N dist_child.py JOB.json``. Each job writes what the test compares to ``out``."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
torch.set_num_threads(1)


def bn_job(job: dict) -> None:
    """GlobalBatchNorm on this rank's rows of a fixed float64 batch; the test compares with nn.BatchNorm2d."""
    import torch.distributed as dist
    from studylib.training import distributed as D
    assert D.init()
    world, rank = D.world_size(), D.rank()
    g = torch.Generator().manual_seed(0)
    x_full = torch.randn(job["rows"], 3, 4, 5, generator=g, dtype=torch.float64) * 2 + 1
    w_out = torch.randn(job["rows"], 3, 4, 5, generator=g, dtype=torch.float64)
    lo, hi = D.shard_bounds(job["rows"], world, rank)
    x = x_full[lo:hi].clone().requires_grad_(True)
    bn = D.GlobalBatchNorm(3, momentum=0.3).double()
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([0.5, 1.5, -1.0]))
        bn.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    y = D.gather_rows(bn(x), D.shard_sizes(job["rows"], world))
    (y * w_out).sum().backward()
    # The gathered loss is replicated on every rank: each rank's gradients are world x its share (DDP averages).
    x_grad = D.gather_rows(x.grad.detach(), D.shard_sizes(job["rows"], world)) / world
    wg, bg = bn.weight.grad.clone(), bn.bias.grad.clone()
    dist.all_reduce(wg)
    dist.all_reduce(bg)
    if rank == 0:
        torch.save({"y": y.detach(), "x_grad": x_grad, "w_grad": wg / world, "b_grad": bg / world,
                    "running_mean": bn.running_mean, "running_var": bn.running_var}, job["out"])


def spec_job(job: dict) -> None:
    """run_spec of the test's RunSpec; ``slow`` sleeps in every loss so that a kill lands mid-run."""
    from test_distributed import nca_spec
    from studylib.runs.runner import run_spec
    from studylib.methods.episodes import DistanceMethod
    from studylib.training import distributed as D
    from studylib.training.runstore import RunStore
    if job.get("slow"):
        loss = DistanceMethod.loss

        def slow_loss(self, images, batch):
            time.sleep(job["slow"])
            return loss(self, images, batch)

        DistanceMethod.loss = slow_loss
    Path(job["pids"]).mkdir(exist_ok=True)
    (Path(job["pids"]) / f"rank{os.environ['RANK']}-{os.getpid()}").write_text(str(os.getpid()))
    t0 = time.perf_counter()
    outcome = run_spec(nca_spec(**job.get("spec", {})), RunStore(job["store"]), progress=False)
    if D.is_main():
        json.dump({"result": outcome.result, "seconds": time.perf_counter() - t0,
                   "world": D.world_size()}, open(job["out"], "w"))


def beclr_job(job: dict) -> None:
    """A few BECLR steps with DyCE active: each rank saves its whole state (memories, teacher, student)."""
    from test_distributed import beclr_method, beclr_split, beclr_cfg
    from studylib.training import distributed as D
    from studylib.training.loop import train
    from studylib.training.runstore import RunStore
    D.init()
    method = train(beclr_method(), beclr_split(), beclr_cfg(), RunStore(job["store"]).run("beclr", {}))
    torch.save({k: v.detach().clone() for k, v in method.state_dict().items()},
               job["out"].replace(".pt", f"-rank{D.rank()}.pt"))


def nca64_job(job: dict) -> None:
    """NCA in float64 through the training loop: rank 0 saves the final weights and the per-step losses."""
    from test_distributed import nca64_method, nca64_split, nca64_cfg
    from studylib.training import distributed as D
    from studylib.training.loop import train
    from studylib.training.runstore import RunStore
    run = RunStore(job["store"]).run("nca64", {})
    method = train(nca64_method(), nca64_split(), nca64_cfg(), run)
    if D.is_main():
        torch.save({"weights": method.state_dict(), "loss": [m["loss"] for m in run.metrics if "loss" in m]},
                   job["out"])


if __name__ == "__main__":
    jobs = json.loads(Path(sys.argv[1]).read_text())
    for job in jobs if isinstance(jobs, list) else [jobs]:  # several jobs share one (slow) torchrun start
        {"bn": bn_job, "spec": spec_job, "beclr": beclr_job, "nca64": nca64_job}[job["kind"]](job)
