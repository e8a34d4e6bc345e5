"""Every run in the run store as a table: ``./study results`` (``python -m studylib.results``).

By default the seeds of one configuration are **grouped**: one row per notebook, method, data set, parameters
(all but the training seed) and evaluation protocol, with each headline accuracy as the mean over the seeds
and its Student-t 95% interval over them (:func:`studylib.evaluation.stats.over_seeds`, the estimate every
notebook reports; one seed falls back to its episode CI, as there), and ``n``, the number of seeds. The default
table is long (one line per ``classifier/shots``) so that it fits an 80-100 column terminal; the parameters
column is shortened to fit (``--csv``/``--json`` hold it whole).

``--per-seed``: one row per evaluation of a trained run (a run trained but not evaluated, or still training,
gets one row without accuracies): the notebook that made it, the method, the data set, the key parameters, the
status (``running``: a live process holds the run's lock; ``interrupted``: a checkpoint and nobody training
it; ``finished``; ``empty``/``damaged``), when it was created, the git commit and device that computed it, and
the headline accuracies (mean ± 95% CI over that run's episodes per ``classifier/shots``).

Filters: ``--notebook``, ``--data``, ``--method`` (substrings, case-insensitive; ``--notebook 00`` works).
Exports: ``--csv FILE`` (one column per number: ``<classifier>/<shots> mean %`` and ``... ci95 %``) and
``--latex FILE`` (a paper-style ``tabular``: ``mean $\\pm$ CI`` in %, over seeds by default). Percent
everywhere. Reads only; never writes into the store.
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

from studylib.evaluation import stats
from studylib.evaluation.stats import Estimate
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
    seed: int | None = None  # the training seed
    config_key: str = ""  # the training configuration without its seed, for grouping (JSON)
    episodes: int = 0  # evaluation episodes

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
        train = dict(cfg.get("train") or {})
        seed = train.pop("seed", None)
        key = json.dumps({**cfg, "train": train}, sort_keys=True, default=str)
        base = dict(run=info.name, method=str(cfg.get("method", "?")), data=_data_text(cfg),
                    params=_params_text(cfg), status=st, created=created, path=str(info.path), seed=seed,
                    config_key=key)
        if not info.evaluations:
            owner = lock_owner(store, info.name) if st == "running" else None
            out.append(Row(notebook=_notebook_of(info, info.training, owner), commit=_commit(info.training),
                           device=_device(info.training), **base))
        for ev in info.evaluations:
            res = ev.get("result") or {}
            out.append(Row(notebook=_notebook_of(info, res, info.training), commit=_commit(res or info.training),
                           device=_device(res or info.training), protocol=_protocol(ev.get("config")),
                           accuracies=dict(sorted(ev["headline"].items())),
                           episodes=int((ev.get("config") or {}).get("episodes") or 0), **base))

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


def _pct(x: float) -> str:
    return f"{100 * x:.4g}"


def to_csv(table: list[Row]) -> str:
    """CSV text: the columns, the protocol, the seed, the run folder and ``<key> mean %``/``<key> ci95 %``
    (percent, as in the table; the CI over that run's episodes)."""
    keys = _keys(table)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([*COLUMNS, "protocol", "seed", "run", *(f"{k} {s} %" for k in keys for s in ("mean", "ci95"))])
    for r in table:
        nums = []
        for k in keys:
            m, c = r.accuracies.get(k, (None, None))
            nums += ["" if m is None else _pct(m), "" if c is None else _pct(c)]
        w.writerow([*(getattr(r, c) for c in COLUMNS), r.protocol, "" if r.seed is None else r.seed, r.run, *nums])
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


# ----------------------------------------------------------------------------------------------------------
# Seeds grouped (the default view)
# ----------------------------------------------------------------------------------------------------------

@dataclass
class Group:
    """The runs of one configuration that differ only in their training seed, under one protocol."""

    notebook: str
    method: str
    data: str
    params: str  # without the seed
    protocol: str
    seeds: list[int | None] = field(default_factory=list)  # seeds with an evaluation under this protocol
    pending: list[str] = field(default_factory=list)  # "seed 2 running": runs without an evaluation
    accuracies: dict[str, Estimate] = field(default_factory=dict)  # "clf/shots" -> estimate over seeds

    @property
    def n(self) -> int:
        return len(self.seeds)


def _without_seed(params: str, seed: int | None) -> str:
    return " ".join(w for w in params.split() if w != f"seed{seed}")


def group_rows(table: list[Row]) -> list[Group]:
    """Group per-seed rows into :class:`Group` rows (first appearance order). An accuracy's estimate is
    :func:`studylib.evaluation.stats.over_seeds` of the per-seed means (their episode CIs for one seed) over
    the seeds that measured it."""
    out: dict[tuple[str, ...], Group] = {}
    evaluated: dict[tuple[str, ...], list[Row]] = {}
    for r in table:
        # a run not evaluated yet joins the group of its configuration under any protocol
        key = (r.notebook, r.config_key, r.protocol)
        if not r.accuracies:
            twin = next((k for k in out if k[:2] == key[:2]), key)
            g = out.setdefault(twin, Group(r.notebook, r.method, r.data, _without_seed(r.params, r.seed),
                                           r.protocol))
            g.pending.append(f"seed {r.seed} {r.status}")
            continue
        g = out.setdefault(key, Group(r.notebook, r.method, r.data, _without_seed(r.params, r.seed), r.protocol))
        g.seeds.append(r.seed)
        evaluated.setdefault(key, []).append(r)
    for key, rs in evaluated.items():
        g = out[key]
        for k in _keys(rs):
            have = [r for r in rs if k in r.accuracies]
            g.accuracies[k] = stats.over_seeds([r.accuracies[k][0] for r in have],
                                               [r.accuracies[k][1] for r in have], episodes=have[0].episodes)
    return list(out.values())


def _acc(e: Estimate) -> str:
    return f"{100 * e.value:.1f} ± {100 * e.ci95:.1f}"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def group_text_table(groups: list[Group], width: int = 100) -> str:
    """The grouped table, at most ``width`` columns: per group, one line per ``classifier/shots``; the group's
    notebook, method and data on its first line, its parameters and protocol wrapped under them."""
    import textwrap
    if not groups:
        return "no runs"
    head = ["notebook", "method", "data", "n", "classifier/shots", "acc % (95% CI)"]
    cells = [[g.notebook, g.method, _fit(g.data, 24)] for g in groups]
    right = [[[str(g.n), k, _acc(e)] for k, e in g.accuracies.items()] or [["0", "-", "-"]] for g in groups]
    w = [max(len(x[c]) for x in [head[:3], *cells]) for c in range(3)]
    w += [max(len(x[c]) for x in [head[3:], *(r for rs in right for r in rs)]) for c in range(3)]
    span = max(20, min(sum(w[:3]) + 4, width - sum(w[3:]) - 6))
    w[2] = max(4, span - w[0] - w[1] - 4)

    def line(left: str, r: list[str]) -> str:
        return (left.ljust(span) + "  " + "  ".join(x.ljust(v) for x, v in zip(r, w[3:]))).rstrip()

    out = [line("  ".join(x.ljust(v) for x, v in zip(head[:3], w[:3])), head[3:])]
    for g, c, rs in zip(groups, cells, right):
        text = g.params + (f"; {g.protocol}" if g.protocol else "") + (f" ({', '.join(g.pending)})"
                                                                        if g.pending else "")
        under = textwrap.wrap(text, span - 2) or [""]
        c = [c[0], c[1], _fit(c[2], w[2])]
        lefts = ["  ".join(x.ljust(v) for x, v in zip(c, w[:3]))] + ["  " + u for u in under]
        for k in range(max(len(lefts), len(rs))):
            out.append(line(lefts[k] if k < len(lefts) else "", rs[k] if k < len(rs) else ["", "", ""]))
    return "\n".join(out)


def groups_csv(groups: list[Group]) -> str:
    """CSV of the grouped rows: ``<key> mean %``, ``<key> ci95 %`` (over seeds) and ``n seeds``."""
    keys = sorted({k for g in groups for k in g.accuracies})
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["notebook", "method", "data", "params", "protocol", "n seeds", "seeds",
                *(f"{k} {s} %" for k in keys for s in ("mean", "ci95"))])
    for g in groups:
        nums = []
        for k in keys:
            e = g.accuracies.get(k)
            nums += ["", ""] if e is None else [_pct(e.value), _pct(e.ci95)]
        w.writerow([g.notebook, g.method, g.data, g.params, g.protocol, g.n, " ".join(map(str, g.seeds)), *nums])
    return buf.getvalue()


def groups_latex(groups: list[Group]) -> str:
    """A paper-style LaTeX table of the grouped rows: method and data, then one column per ``classifier/shots``
    with ``mean $\\pm$ CI`` (%, 95% interval over the n training seeds), booktabs rules."""
    keys = sorted({k for g in groups for k in g.accuracies})
    cols = ["Method", "Data", "Setting", "$n$", *keys]
    lines = [r"\begin{tabular}{lll" + "c" + "c" * len(keys) + "}", r"\toprule",
             " & ".join(c if c == "$n$" else tex_escape(c) for c in cols) + r" \\", r"\midrule"]
    for g in groups:
        accs = [f"${100 * g.accuracies[k].value:.1f} \\pm {100 * g.accuracies[k].ci95:.1f}$"
                if k in g.accuracies else "--" for k in keys]
        lines.append(" & ".join([tex_escape(g.method), tex_escape(g.data), tex_escape(g.params), str(g.n), *accs])
                     + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}",
              "% accuracy in %: mean over n training seeds $\\pm$ Student-t 95% interval over them "
              "(one seed: its episode interval)"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="./study results", description="Every run in the run store. By default one "
                                 "row per configuration with its seeds grouped: headline accuracies as mean ± 95% "
                                 "CI over the training seeds (n seeds), in %. --per-seed: one row per run with "
                                 "status, creation time, git commit, device and its episode CIs.")
    ap.add_argument("--per-seed", action="store_true", help="one row per run (seed) instead of one per configuration")
    ap.add_argument("--notebook", help="only runs of this notebook (substring: 00, quickstart)")
    ap.add_argument("--data", help="only runs on this data set (substring)")
    ap.add_argument("--method", help="only runs of this method (substring)")
    ap.add_argument("--status", choices=STATUSES, help="only runs in this state")
    ap.add_argument("--csv", metavar="FILE", help="also write the table as CSV, in %% (- for stdout)")
    ap.add_argument("--latex", metavar="FILE", help="also write a LaTeX table (- for stdout): paper-style, over "
                                                    "seeds (per run with --per-seed)")
    ap.add_argument("--json", action="store_true", help="print the per-seed rows as JSON instead of the table")
    ap.add_argument("--width", type=int, default=None, help="columns of the grouped table (default: the terminal's, "
                                                            "at most 100)")
    ap.add_argument("--store", metavar="DIR", help="the run store (default: $STUDYLIB_CACHE/runs or .cache/runs)")
    args = ap.parse_args(argv)
    store = RunStore(args.store) if args.store else RunStore()
    table = rows(store, args.notebook, args.data, args.method, args.status)
    groups = None if args.per_seed else group_rows(table)
    exported = False
    exports = ((args.csv, to_csv, groups_csv), (args.latex, to_latex, groups_latex))
    for target, per_seed, grouped in exports:
        if target:
            content = per_seed(table) if groups is None else grouped(groups)
            if target == "-":
                sys.stdout.write(content)
                exported = True
            else:
                Path(target).write_text(content, encoding="utf-8")
                n = len(table) if groups is None else len(groups)
                print(f"wrote {n} rows to {target}", file=sys.stderr)
    if args.json:
        print(json.dumps([r.__dict__ for r in table], indent=1))
    elif not exported:
        if groups is None:
            print(f"run store {store.root}: {len(table)} row(s)", file=sys.stderr)
            print(text_table(table))
        else:
            import shutil
            width = args.width or min(100, shutil.get_terminal_size((100, 24)).columns)
            print(f"run store {store.root}: {len(table)} run(s) in {len(groups)} configuration(s); --per-seed "
                  f"shows each run", file=sys.stderr)
            print(group_text_table(groups, width))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # ./study results | head
        sys.exit(0)
