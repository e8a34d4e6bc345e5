"""Whole notebooks under torchrun: every rank executes the notebook, every run of it trains data-parallel.

    torchrun --nproc-per-node 4 -m studylib.launch 02_batch_size_sweep --scale paper
    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m studylib.launch 06_beclr_pretraining --scale paper

Each rank runs papermill on the notebook with ``params/<notebook>/<scale>.yaml`` (``-p NAME VALUE`` overrides a
value). The kernels inherit torchrun's ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``, so every ``run_spec`` in the
notebook joins the process group and trains its run on all ranks together
(:mod:`studylib.training.distributed`): rank 0 writes the runs, evaluates them and writes the executed notebook
to ``out/<scale>/`` and the figures; the other ranks' copies go to ``out/<scale>/rank<r>/`` and their
figures nowhere. The notebooks themselves are unchanged: the ranks execute the same cells in the same order,
so they meet at the same runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from studylib.config import read_param_file
from studylib.paths import project_root

GROUP_ENV = "STUDYLIB_DIST_GROUP"  # names the process group of one notebook (a new kernel per notebook)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="torchrun ... -m studylib.launch", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="+", help="notebook names, e.g. 02_batch_size_sweep")
    ap.add_argument("--scale", default="smoke", help="parameter file: params/<notebook>/<scale>.yaml")
    ap.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="override one parameter (VALUE is read as YAML)")
    args = ap.parse_args(argv)
    import papermill

    rank = int(os.environ.get("RANK", "0"))
    for name in args.notebooks:
        nb = project_root() / "notebooks" / f"{name}.ipynb"
        if not nb.is_file():
            print(f"launch: no notebook {nb}", file=sys.stderr)
            return 2
        params = read_param_file(project_root() / "params" / name / f"{args.scale}.yaml")
        params.update({k: yaml.safe_load(v) for k, v in args.p})
        out = project_root() / "out" / args.scale / ("" if rank == 0 else f"rank{rank}") / f"{name}.ipynb"
        out.parent.mkdir(parents=True, exist_ok=True)
        os.environ[GROUP_ENV] = name  # the kernel's process group is this notebook's alone
        try:
            papermill.execute_notebook(str(nb), str(out), parameters=params, cwd=str(Path(nb).parent),
                                       kernel_name="python3", progress_bar=rank == 0, log_output=False)
            if rank == 0:
                print(f"launch: {name} ({args.scale}) -> {out}", file=sys.stderr)
        except Exception as e:  # a failing cell: exit, so that torchrun stops the ranks waiting for this one
            print(f"launch: rank {rank}: {name} FAILED: {type(e).__name__}: {str(e)[:500]}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
