"""Every run in the run store as a table: ``./study results`` (``python -m studylib.results``).

One row per evaluation of a trained run (a run trained but not evaluated, or still training, gets one row
without accuracies): the notebook that made it, the method, the data set, the key parameters, the status
(``running``: a live process holds the run's lock; ``interrupted``: a checkpoint and nobody training it;
``finished``; ``empty``/``damaged``), when it was created, the git commit and device that computed it, and the
headline accuracies (mean ± 95% CI, in %, per ``classifier/shots``).

Filters: ``--notebook``, ``--data``, ``--method`` (substrings, case-insensitive; ``--notebook 00`` works).
Exports: ``--csv FILE`` (one column per number: ``<classifier>/<shots> mean`` and ``... ci95``, as fractions) and
``--latex FILE`` (a ``tabular`` with ``mean $\\pm$ CI`` in %). Reads only; never writes into the store.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studylib.training.runstore import RunInfo, RunStore

STATUSES = ("running", "interrupted", "finished", "empty", "damaged")


@dataclass
class Row:
    """One line of the table (see the module docstring)."""

    run: str
    notebook: str
    method: str
    data: str
    params: str
    status: str
    created: str
    commit: str
    device: str
    protocol: str = ""
    accuracies: dict[str, tuple[float, float]] = field(default_factory=dict)  # "clf/shots" -> (mean, ci95)
    path: str = ""

    def accuracy_text(self) -> str:
        return ", ".join(f"{k} {100 * m:.1f}±{100 * c:.1f}" for k, (m, c) in self.accuracies.items())


def lock_owner(store: RunStore, name: str) -> dict[str, Any] | None:
    """The live owner of the run's lock (host, pid, notebook...), or None when nobody is training it."""
    path = store.root / ".locks" / f"{name}.json"
    if not path.exists():  # (no RunLock object without a file: its constructor creates the folder)
        return None
    from studylib.training.runlock import RunLock
    try:
        lock = RunLock(path)
        info = lock.owner()
        return info if info is not None and not lock.is_stale(info) else None
    except OSError:
        return None


def status_of(store: RunStore, info: RunInfo) -> str:
    """``running`` when a live process holds the run's lock, else the store's status."""
    if info.status != "finished" and lock_owner(store, info.name) is not None:
        return "running"
    return info.status


def _data_text(cfg: dict[str, Any]) -> str:
    data = cfg.get("data") or {}
    if "content_sha256" in data:
        return f"own data (sha256 {str(data['content_sha256'])[:10]})"
    name = str(data.get("name", "?"))
    root = data.get("root")
    opts = data.get("options") or {}
    text = name + (f" ({Path(str(root)).name})" if root else "")
    size = opts.get("size")
    return text + (f" {size}px" if size else "")


def _params_text(cfg: dict[str, Any]) -> str:
    train = cfg.get("train") or {}
    parts = [str(cfg.get("backbone", "?"))]
    for key, short in (("sampler", ""), ("epochs", "ep"), ("max_steps", "steps"), ("batch_size", "bs"),
                       ("lr", "lr"), ("seed", "seed")):
        if train.get(key) is not None:
            parts.append(f"{short}{train[key]}" if short else str(train[key]))
    if train.get("sampler") in ("episodic", "fixed"):
        parts.append(f"{train.get('ways')}w{train.get('shots')}s")
    opts = cfg.get("method_options") or {}
    parts += [f"{k}={v}" for k, v in sorted(opts.items()) if not isinstance(v, (dict, list))]
    return " ".join(parts)


def _notebook_of(info: RunInfo, *records: dict[str, Any] | None) -> str:
    for r in records:
        if r and r.get("notebook"):
            return str(r["notebook"])
    return info.name.rsplit("-", 1)[0] if info.name[:2].isdigit() and info.name[2:3] == "_" else "-"


def _commit(record: dict[str, Any] | None) -> str:
    if not record or not record.get("git_commit"):
        return "-"
    return str(record["git_commit"])[:10] + ("+dirty" if record.get("git_dirty") else "")


def _device(record: dict[str, Any] | None) -> str:
    if not record:
        return "-"
    dev = str(record.get("device", "-"))
    name = record.get("device_name")
    return f"{dev} ({name})" if name and dev.startswith("cuda") else dev


def _protocol(cfg: dict[str, Any] | None) -> str:
    if not cfg:
        return ""
    return (f"{cfg.get('ways')}-way {cfg.get('queries')}q {cfg.get('episodes')} ep"
            + (f" on {cfg['split']}" if cfg.get("split") not in (None, "test") else ""))


def rows(store: RunStore | None = None, notebook: str | None = None, data: str | None = None,
         method: str | None = None, status: str | None = None) -> list[Row]:
    """The table's rows, oldest run first, filtered by substrings of notebook, data set and method."""
    store = store or RunStore()
    out = []
    for info in store.list_runs():
        cfg = info.config or {}
        st = status_of(store, info)
        created = _dt.datetime.fromtimestamp(info.created).strftime("%Y-%m-%d %H:%M")
        base = dict(run=info.name, method=str(cfg.get("method", "?")), data=_data_text(cfg),
                    params=_params_text(cfg), status=st, created=created, path=str(info.path))
        if not info.evaluations:
            owner = lock_owner(store, info.name) if st == "running" else None
            out.append(Row(notebook=_notebook_of(info, info.training, owner), commit=_commit(info.training),
                           device=_device(info.training), **base))
        for ev in info.evaluations:
            res = ev.get("result") or {}
            out.append(Row(notebook=_notebook_of(info, res, info.training), commit=_commit(res or info.training),
                           device=_device(res or info.training), protocol=_protocol(ev.get("config")),
                           accuracies=dict(sorted(ev["headline"].items())), **base))

    def keep(value: str, want: str | None) -> bool:
        return want is None or want.lower() in value.lower()

    return [r for r in out if keep(r.notebook, notebook) and keep(r.data, data) and keep(r.method, method)
            and (status is None or r.status == status)]


COLUMNS = ("notebook", "method", "data", "params", "status", "created", "commit", "device")


def text_table(table: list[Row]) -> str:
    """A fixed-width table for the terminal (one line per row, accuracies last)."""
    if not table:
        return "no runs"
    head = [*COLUMNS, "protocol", "accuracy % ± 95% CI (classifier/shots)"]
    body = [[getattr(r, c) for c in COLUMNS] + [r.protocol, r.accuracy_text()] for r in table]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    widths[-1] = 0  # the last column is not padded
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip() for line in [head, *body]]
    return "\n".join(lines)


def _keys(table: list[Row]) -> list[str]:
    return sorted({k for r in table for k in r.accuracies})


def to_csv(table: list[Row]) -> str:
    """CSV text: the columns, the protocol, the run folder and ``<key> mean``/``<key> ci95`` (fractions)."""
    keys = _keys(table)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([*COLUMNS, "protocol", "run", *(f"{k} {s}" for k in keys for s in ("mean", "ci95"))])
    for r in table:
        nums = []
        for k in keys:
            m, c = r.accuracies.get(k, ("", ""))
            nums += [m, c]
        w.writerow([*(getattr(r, c) for c in COLUMNS), r.protocol, r.run, *nums])
    return buf.getvalue()


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "±": r"$\pm$"}


def tex_escape(text: str) -> str:
    return "".join(_TEX.get(ch, ch) for ch in str(text))


def to_latex(table: list[Row]) -> str:
    """A LaTeX ``tabular`` (booktabs rules): notebook, method, data, parameters, status, then one column per
    ``classifier/shots`` with ``mean $\\pm$ CI`` in %."""
    keys = _keys(table)
    cols = ["Notebook", "Method", "Data", "Parameters", "Status", *keys]
    lines = [r"\begin{tabular}{" + "l" * 5 + "c" * len(keys) + "}", r"\toprule",
             " & ".join(tex_escape(c) for c in cols) + r" \\", r"\midrule"]
    for r in table:
        accs = [f"${100 * r.accuracies[k][0]:.1f} \\pm {100 * r.accuracies[k][1]:.1f}$" if k in r.accuracies
                else "--" for k in keys]
        lines.append(" & ".join([*(tex_escape(x) for x in (r.notebook, r.method, r.data, r.params, r.status)),
                                 *accs]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="./study results", description="Every run in the run store: notebook, "
                                 "method, data, key parameters, status, creation time, git commit, device and "
                                 "headline accuracies (mean ± 95%% CI).")
    ap.add_argument("--notebook", help="only runs of this notebook (substring: 00, quickstart)")
    ap.add_argument("--data", help="only runs on this data set (substring)")
    ap.add_argument("--method", help="only runs of this method (substring)")
    ap.add_argument("--status", choices=STATUSES, help="only runs in this state")
    ap.add_argument("--csv", metavar="FILE", help="also write the table as CSV (- for stdout)")
    ap.add_argument("--latex", metavar="FILE", help="also write the table as a LaTeX tabular (- for stdout)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    ap.add_argument("--store", metavar="DIR", help="the run store (default: $STUDYLIB_CACHE/runs or .cache/runs)")
    args = ap.parse_args(argv)
    store = RunStore(args.store) if args.store else RunStore()
    table = rows(store, args.notebook, args.data, args.method, args.status)
    exported = False
    for target, text in ((args.csv, to_csv), (args.latex, to_latex)):
        if target:
            content = text(table)
            if target == "-":
                sys.stdout.write(content)
                exported = True
            else:
                Path(target).write_text(content, encoding="utf-8")
                print(f"wrote {len(table)} rows to {target}", file=sys.stderr)
    if args.json:
        print(json.dumps([r.__dict__ for r in table], indent=1))
    elif not exported:
        print(f"run store {store.root}: {len(table)} row(s)", file=sys.stderr)
        print(text_table(table))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # ./study results | head
        sys.exit(0)
