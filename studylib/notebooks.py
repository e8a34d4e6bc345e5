"""The study's notebooks by name, for the ``./study`` script: ``list`` (one line each on what it reproduces)
and ``resolve`` (a misspelt name gets "did you mean"); and what keeps the committed notebooks clean: one
kernelspec everywhere (:data:`KERNELSPEC`, installed by ``install-jupyter``), JupyterLab server settings under
which a committed notebook opens read-only and is never saved (:mod:`studylib.jupyter`), and ``check-committed``
(each committed notebook is one complete run with that kernelspec).

``python -m studylib.notebooks list`` prints ``NAME  TITLE`` per notebook (the title is the notebook's first
heading); ``python -m studylib.notebooks resolve NAME...`` prints each name as a notebook of ``notebooks/``
(``00`` and ``quickstart`` find ``00_quickstart``) or exits 2 naming the closest ones. Imports no torch.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from studylib.paths import experiment_module, notebook_names as names, notebooks_dir, resolve_notebook as resolve


def title(name: str, folder: Path | None = None) -> str:
    """The first heading of the notebook, without ``#`` and its ``NN ·`` number."""
    nb = json.loads(((folder or notebooks_dir()) / f"{name}.ipynb").read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "markdown":
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        for line in source.splitlines():
            if line.startswith("#"):
                return re.sub(r"^\d+\s*[·:.-]\s*", "", line.lstrip("#").strip())
    return ""


# Paper scale: training images of each data set's training split (the readers' splits), and the training
# throughputs measured by ./study gpu-check on a GPU, read from its records in benchmarks/results/ (the newest one
# that holds the figure): the images per second of the project's loop for a backbone and image side.
TRAIN_IMAGES = {"mini_imagenet": 38_400, "cifar_fs": 38_400, "fc100": 36_000, "tiered_imagenet": 448_695,
                "omniglot": 1028 * 20, "cub": 5_885}
#: (backbone, image side) -> (figure of a gpu-check record, images per unit of it, what it times)
MEASURED_FIGURES = {
    ("resnet12_basic", 84): ("nca_project", 1.0, "the project's NCA loop, ResNet-12 at 84 px, batch 512, bf16"),
    ("resnet18", 224): ("beclr_bf16_dyce", 0.5, "BECLR with DyCE, ResNet-18 at 224 px, B = 256, bf16 (two views "
                                                "per image)"),
}
RESULTS = "benchmarks/results"

#: whole paper-scale runs timed on a GPU (notebook -> (seconds, where)): the measurement replaces the estimate
MEASURED_RUNS = {
    "09_spe_synthetic": (126.0, "measured: the whole notebook at paper scale (3 seeds, training and evaluation), "
                                "126 s on an NVIDIA H200, 2026-11-26 (benchmarks/results/NVIDIA-H200-2026-11-26-"
                                "session.md)"),
}


def measured_rate(key: tuple[Any, Any], root: Path | None = None) -> tuple[float, str] | None:
    """``(training images per second, source)`` for a (backbone, image side), from the newest gpu-check record
    in ``benchmarks/results/*.json`` that holds its figure (:data:`MEASURED_FIGURES`); None when none does."""
    if key not in MEASURED_FIGURES:
        return None
    figure, per_unit, what = MEASURED_FIGURES[key]
    from studylib.paths import project_root
    folder = (root or project_root()) / RESULTS
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            for step in record.get("steps", []):
                for row in (step.get("figures") or {}).get("rows", []):
                    if row.get("key") == figure and row.get("img_per_s"):
                        env = record.get("environment", {})
                        found.append((str(env.get("date", "")), float(row["img_per_s"]) * per_unit,
                                      f"{RESULTS}/{path.name}: {what}, {float(row['img_per_s']) * per_unit:,.0f} img/s "
                                      f"on an {env.get('gpu', 'unknown GPU')}"))
        except (OSError, ValueError, AttributeError, TypeError):
            continue
    if not found:
        return None
    _, rate, source = max(found)
    return rate, source


def _trains(p: Any) -> bool:
    """Whether the notebook trains a network: its parameters set a training length (``epochs`` or
    ``max_steps``; notebook 01 counts pairs on random embeddings and has neither)."""
    return any(hasattr(p, k) for k in ("epochs", "max_steps"))


def _backbone_and_size(mod: Any, p: Any) -> tuple[str | None, int | None]:
    """The backbone and image side the notebook trains: its ``backbone`` parameter, else the one its module's
    run specifications name (``backbone="..."``), and ``image_size`` (28 px for generated and Omniglot data by
    default)."""
    import inspect
    import re as _re
    backbone = getattr(p, "backbone", None)
    if backbone is None:
        named = sorted(set(_re.findall(r'backbone\s*=\s*"([a-z0-9_]+)"', inspect.getsource(mod))))
        backbone = ", ".join(named) or None
    return backbone, getattr(p, "image_size", None)


def paper_estimate(name: str) -> dict[str, object]:
    """Data set, folder and estimated GPU hours of ``name`` at paper scale (``./study list --scale paper``).

    GPU hours = training images seen per run (``epochs`` x the training split, or ``max_steps`` x
    ``batch_size``, or ``train_images`` where the notebook caps it) / the measured throughput of its backbone
    and image size (:func:`measured_rate`: the gpu-check records in ``benchmarks/results/``), x its seeds x its
    configurations (``variants(p)`` where the notebook defines one). Evaluation is not counted (the batched
    evaluator's time is in the same records, ``evaluator_batched_cuda_s``). A notebook that trains nothing, a
    backbone or size never measured, or a folder whose size is unknown gets no estimate, and says which.
    """
    from studylib.config import defaults, read_param_file, validate
    from studylib.paths import params_dir
    mod = experiment_module(name)
    values = read_param_file(params_dir() / name / "paper.yaml")
    p = validate(mod.Params, {**defaults(mod.Params), **values, "data_root": values.get("data_root") or "x"}
                 if values.get("data") not in (None, "glyphs", "synthfs", "lshapes") else values)
    data, root = getattr(p, "data", "?"), values.get("data_root")
    out: dict[str, object] = {"notebook": name, "data": data if data != "?" else "(none)",
                              "folder": root or "(generated)", "gpu_hours": None}
    if name in MEASURED_RUNS:
        seconds, out["source"] = MEASURED_RUNS[name]
        out["gpu_hours"] = seconds / 3600
        return out
    if not _trains(p):
        first = (mod.__doc__ or "").strip().splitlines()[0] if mod.__doc__ else name
        out["source"] = f"trains nothing ({first.split(': ', 1)[-1].rstrip('.')}): no GPU time to estimate"
        return out
    key = _backbone_and_size(mod, p)
    measured = measured_rate(key)
    if measured is None:
        size = f" at {key[1]} px" if key[1] else ""
        known = "; ".join(f"{b} at {px} px" for b, px in MEASURED_FIGURES)
        out["source"] = (f"trains {key[0] or 'a network'}{size}: no training throughput measured for it (the "
                         f"gpu-check records in {RESULTS}/ time {known}), not estimated")
        return out
    rate, source = measured
    per_epoch = TRAIN_IMAGES.get(str(data))
    if data == "folder":
        per_epoch = _folder_train_images(mod, p, root)
        if per_epoch is None:
            out["source"] = (f"trains on your folder {root}, which is not here: ./study check {name} --scale paper "
                             f"-p data_root DIR counts its training images; then epochs x images / {rate:,.0f} img/s")
            return out
    steps, batch, capped = getattr(p, "max_steps", None), getattr(p, "batch_size", None), getattr(p, "train_images", None)
    if capped:
        images = float(capped)
    elif steps and batch:
        images = float(steps * batch)
    elif per_epoch:
        images = float(getattr(p, "epochs", 1) * per_epoch)
    else:
        out["source"] = f"training split size of {data} unknown"
        return out
    seeds = len(getattr(p, "seeds", [0]) or [0])
    configs = len(mod.variants(p)) if hasattr(mod, "variants") else 1
    out["gpu_hours"] = images / rate / 3600 * seeds * configs
    out["source"] = (f"{images:,.0f} images/run / {rate:,.0f} img/s x {seeds} seeds"
                     + (f" x {configs} configurations" if configs > 1 else " (x the notebook's configurations)")
                     + f"; {source}")
    return out


def _folder_train_images(mod: Any, p: Any, root: str | None) -> int | None:
    """Training images of a folder of your own images as the run would split it (None: no such folder)."""
    from studylib.data.base import resolve_root
    from studylib.preflight import reader_options, scan_folder
    if not root or not resolve_root(root).is_dir():
        return None
    import dataclasses
    opts = reader_options(mod, dataclasses.asdict(p))
    try:
        splits = scan_folder(resolve_root(root), opts.get("split", "random"), int(opts.get("seed", 0) or 0),
                             opts.get("fractions"))
    except Exception:  # noqa: BLE001 (./study check names what is wrong with the folder)
        return None
    return sum(n for _, n in splits.get("train", []))


def paper_list() -> str:
    """``./study list --scale paper``: per notebook its data set, folder and estimated GPU hours, each with a
    numbered note saying how it was estimated, from which measurement, or why not."""
    lines, sources = [], {}
    for n in names():
        try:
            e = paper_estimate(n)
        except Exception as err:  # a notebook without paper parameters still gets its line
            lines.append(f"{n:<22} (no paper estimate: {err})")
            continue
        h = e["gpu_hours"]
        est = (f"~{h:,.2f} GPU-h" if h < 0.1 else f"~{h:,.1f} GPU-h") if isinstance(h, float) else "not estimated"
        lines.append(f"{n:<22} {str(e['data']):<15} {str(e['folder']):<20} {est:>14}  [{len(sources) + 1}]")
        sources[len(sources) + 1] = e["source"]
    head = f"{'notebook':<22} {'data set':<15} {'folder':<20} {'estimate':>14}  (training only; notes below)"
    notes = [f"[{k}] {v}" for k, v in sources.items()]
    return "\n".join([head, *lines, "", *notes])


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def strip_stale_widgets(path: Path) -> bool:
    """Remove a notebook's saved widget state (``metadata.widgets``) when no output shows a widget any more
    (progress bars are text now; papermill keeps the old state of an earlier run). True if it changed."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    if "widgets" not in nb.get("metadata", {}):
        return False
    if any(WIDGET_VIEW in o.get("data", {}) for c in nb.get("cells", []) for o in c.get("outputs", [])):
        return False
    del nb["metadata"]["widgets"]
    _write_atomic(path, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return True


INJECTED = "injected-parameters"  # papermill's tag on the cell it adds after the ``parameters`` cell


def strip_injected_parameters(path: Path) -> bool:
    """Remove papermill's ``injected-parameters`` cells from the notebook at ``path`` (the committed notebooks
    keep only their ``parameters`` cell: the values a run used are in its parameter file). Nothing else
    changes: the file is rewritten in nbformat's layout (indent 1, sorted keys), keeping whether it ended with
    a newline. True if it changed."""
    text = path.read_text(encoding="utf-8")
    nb = json.loads(text)
    cells = nb.get("cells", [])
    kept = [c for c in cells if INJECTED not in c.get("metadata", {}).get("tags", [])]
    if len(kept) == len(cells):
        return False
    nb["cells"] = kept
    out = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False)
    _write_atomic(path, out + "\n" if text.endswith("\n") else out)
    return True


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path`` (keeping its mode);
    no torch import, so the ./study script's calls stay quick."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def clean_executed(path: Path) -> None:
    """What ``./study reference`` does to a freshly executed notebook: :func:`strip_stale_widgets`, then
    :func:`strip_injected_parameters`, then :func:`set_kernelspec`."""
    strip_stale_widgets(path)
    strip_injected_parameters(path)
    set_kernelspec(path)


# ----------------------------------------------------------------------------------------------------------
# Notebooks that open clean (issue 28): one kernelspec everywhere, committed notebooks never saved half-run
# ----------------------------------------------------------------------------------------------------------

#: The study's kernel: ``./study setup`` installs it into the venv (:func:`install_jupyter`) and every committed
#: notebook names it, so JupyterLab, which writes the kernelspec of the kernel it starts into the notebook,
#: finds nothing to change on open (a different display name marked every notebook modified).
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (study)", "language": "python"}
ALLOW_SAVE_ENV = "STUDYLIB_SAVE_COMMITTED"  # =1 before starting JupyterLab: save committed notebooks on purpose
#: what install_jupyter writes into the venv's jupyter_server_config.json (studylib/jupyter.py)
SERVER_CONFIG = {"ServerApp": {"contents_manager_class": "studylib.jupyter.StudyContentsManager"},
                 "ContentsManager": {"pre_save_hook": "studylib.jupyter.refuse_committed_save"}}


def set_kernelspec(path: Path) -> bool:
    """Write :data:`KERNELSPEC` into the notebook at ``path`` (nbformat's layout kept). True if it changed."""
    text = path.read_text(encoding="utf-8")
    nb = json.loads(text)
    if nb.get("metadata", {}).get("kernelspec") == KERNELSPEC:
        return False
    nb.setdefault("metadata", {})["kernelspec"] = dict(KERNELSPEC)
    out = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False)
    _write_atomic(path, out + "\n" if text.endswith("\n") else out)
    return True


def committed_problems(path: Path) -> list[str]:
    """Why the notebook at ``path`` is not a committed notebook as ``./study reference`` writes it: another
    kernelspec than :data:`KERNELSPEC`, or not one complete papermill run (a code cell that was not executed,
    execution counts out of order, a cell papermill did not complete, an error output). A notebook saved
    half-way through a run in JupyterLab fails here. [] when it is clean."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    out = []
    spec = nb.get("metadata", {}).get("kernelspec")
    if spec != KERNELSPEC:
        out.append(f"kernelspec {spec} is not the study's {KERNELSPEC} (JupyterLab marks it modified on open)")
    if (nb.get("metadata", {}).get("papermill") or {}).get("exception"):
        out.append("papermill recorded an exception: the run failed")
    last = 0
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        count = cell.get("execution_count")
        status = (cell.get("metadata", {}).get("papermill") or {}).get("status")
        if count is None:
            out.append(f"cell {i} was not executed (no execution count): a half-run notebook")
        elif count <= last:
            out.append(f"cell {i} has execution count {count} after {last}: cells ran out of order")
        if status != "completed":
            out.append(f"cell {i}: papermill status {status!r}, not 'completed'")
        if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            out.append(f"cell {i} holds an error output")
        last = count if count is not None else last
    return out


def committed_notebook(os_path: str | Path) -> Path | None:
    """The study checkout whose committed notebook ``os_path`` is (a file ``<checkout>/notebooks/*.ipynb`` that
    git tracks there), or None (any other file, and every file when git cannot tell)."""
    import subprocess
    path = Path(os_path).resolve()
    root = path.parent.parent
    if path.suffix != ".ipynb" or path.parent.name != "notebooks" or not (root / "params").is_dir():
        return None
    try:
        tracked = subprocess.run(["git", "-C", str(root), "ls-files", "--error-unmatch", "--",
                                  str(path.relative_to(root))], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return root if tracked.returncode == 0 else None


def install_jupyter(prefix: str | Path | None = None) -> list[Path]:
    """Install the study's kernel (:data:`KERNELSPEC`, this Python) and the JupyterLab server settings that keep
    committed notebooks as ``./study reference`` wrote them (:data:`SERVER_CONFIG`, :mod:`studylib.jupyter`:
    they open read-only, and the server refuses to save them) into ``prefix`` (default: this venv,
    ``sys.prefix``); what ``./study setup`` runs. Other settings of the config file are kept. Returns the
    files written."""
    from ipykernel.kernelspec import install
    prefix = Path(prefix or sys.prefix)
    install(kernel_name=KERNELSPEC["name"], display_name=KERNELSPEC["display_name"], prefix=str(prefix))
    # the server's own config file in the venv (the jupyter_server_config.d/ folders only enable extensions)
    config = prefix / "etc" / "jupyter" / "jupyter_server_config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    try:
        settings = json.loads(config.read_text(encoding="utf-8")) if config.exists() else {}
    except ValueError:
        settings = {}
    settings = settings if isinstance(settings, dict) else {}
    merged = {**settings, **{k: {**(settings.get(k) or {}), **v} for k, v in SERVER_CONFIG.items()}}
    if merged != settings or not config.exists():
        tmp = config.with_name(f".{config.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(merged, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, config)
    return [prefix / "share" / "jupyter" / "kernels" / KERNELSPEC["name"] / "kernel.json", config]


def check_committed(paths: list[Path]) -> int:
    """``python -m studylib.notebooks check-committed [FILE...]`` (default: every notebook of notebooks/):
    print each problem of :func:`committed_problems`; exit status 1 if any."""
    bad = 0
    for path in paths or [notebooks_dir() / f"{n}.ipynb" for n in names()]:
        for problem in committed_problems(Path(path)):
            print(f"{path}: {problem}", file=sys.stderr)
            bad = 1
    return bad


COMMANDS = {"strip-widgets": strip_stale_widgets, "strip-injected": strip_injected_parameters,
            "clean-executed": clean_executed, "set-kernelspec": set_kernelspec}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("list", "resolve", "install-jupyter", "check-committed", *COMMANDS):
        print("usage: python -m studylib.notebooks list | resolve NAME... | strip-widgets FILE... | "
              "strip-injected FILE... | clean-executed FILE... | set-kernelspec FILE... | install-jupyter [PREFIX] | "
              "check-committed [FILE...]", file=sys.stderr)
        return 2
    if argv[0] == "install-jupyter":
        install_jupyter(argv[1] if len(argv) > 1 else None)
        return 0
    if argv[0] == "check-committed":
        return check_committed([Path(a) for a in argv[1:]])
    if argv[0] in COMMANDS:
        for f in argv[1:]:
            COMMANDS[argv[0]](Path(f))
        return 0
    if argv[0] == "list":
        if argv[1:] in (["--scale", "paper"], ["--scale=paper"]):
            print(paper_list())
            return 0
        if argv[1:]:
            print("usage: ./study list [--scale paper]", file=sys.stderr)
            return 2
        all_names = names()
        width = max(map(len, all_names), default=0)
        for n in all_names:
            print(f"{n:<{width}}  {title(n)}")
        return 0
    try:
        for n in argv[1:]:
            print(resolve(n))
    except ValueError as e:
        print(f"study: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
