"""Every run in the run store as a table: ``./study results`` (``python -m studylib.results``).

A run is named by what it is (:func:`identity`, :class:`RunName`): the notebook that trained it, its method, its
data and its training seed, e.g. ``90_use_your_data · pn · my-images #4ee98151 · seed 0``. The data of a folder of
your own images is its folder's name and the first 8 hex digits of its content hash (the run's configuration
holds only the hash, so the same images reuse a run wherever they lie; the name comes from the run's
``inference.json``); ``api.load_run`` accepts the name, or ``method=``, ``data=`` and ``seed=``.

By default the seeds of one configuration are **grouped**: one row per notebook, method, data set, parameters
(all but the training seed; BECLR's method-option seed, equal to it, goes too) and evaluation protocol, with
each headline accuracy as the mean over the seeds and its Student-t 95% interval over them
(:func:`studylib.evaluation.stats.over_seeds`, the estimate every notebook reports; one seed falls back to its
episode CI, as there), and ``n``, the number of seeds. The default table is long (one line per
``classifier/shots``) so that it fits an 80-100 column terminal; the parameters column is shortened to fit
(``--csv``/``--json`` hold it whole).

``--per-seed``: one entry per evaluation of a trained run (a run trained but not evaluated, or still training,
gets one without accuracies), within 120 columns: a line with the notebook, method, data, seed and status
(``running``: a live process holds the run's lock; ``interrupted``: a checkpoint and nobody training it;
``finished``; ``empty``/``damaged``), then indented lines with when it was created, the git commit and device
that computed it, its parameters and protocol, and its headline accuracies (mean ± 95% CI over that run's
episodes per ``classifier/shots``).

Filters: ``--notebook``, ``--data``, ``--method`` (substrings, case-insensitive; ``--notebook 00`` works).
Exports: ``--csv FILE`` (one column per number: ``<classifier>/<shots> mean %`` and ``... ci95 %``) and
``--latex FILE``: paper tables, one per notebook, data set and protocol, with a row per method and a column per
shot count (``mean $\\pm$ CI`` in %, over seeds) and a caption stating the shared setting; with
``--per-seed`` one ``tabular`` of the runs. Percent everywhere. Reads only; never writes into the store.
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
    name: str = ""  # the display name: notebook · method · data · seed (:class:`RunName`)

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


def data_label(cfg: dict[str, Any], record: dict[str, Any] | None = None) -> str:
    """The data a run trained on, by name: a registered data set as ``name (folder) size px``; a folder of your
    own images as its folder's name and the first 8 hex digits of its content hash (``my-images #4ee98151``);
    in-memory data as its data set's name and hash. ``record``: the ``data`` entry of the run's
    ``inference.json`` (where folder and in-memory runs keep their name; their configuration holds only the
    hash). Without it (a run not evaluated yet, or evaluated before the record existed): ``own data #<hash>``."""
    data = cfg.get("data") or {}
    if "content_sha256" in data:
        digest = "#" + str(data["content_sha256"])[:8]
        record = record or {}
        root, dataset = record.get("root"), record.get("dataset")
        if root:
            return f"{Path(str(root)).name} {digest}"
        if dataset and dataset not in ("memory", "folder"):
            return f"{dataset} {digest}"
        return f"own data {digest}"
    name = str(data.get("name", "?"))
    root = data.get("root")
    opts = data.get("options") or {}
    text = name + (f" ({Path(str(root)).name})" if root else "")
    size = opts.get("size")
    return text + (f" {size}px" if size else "")


@dataclass(frozen=True)
class RunName:
    """What a run is, by name: the notebook that trained it, its method, its data (:func:`data_label`) and
    training seed, and its folder in the store. ``text``: ``90_use_your_data · pn · my-images #4ee98151 · seed 0``."""

    notebook: str
    method: str
    data: str
    seed: int | None
    folder: str
    data_keys: tuple[str, ...] = ()  # what data= may name: folder name, path, data set name, content hash

    @property
    def text(self) -> str:
        return f"{self.notebook} · {self.method} · {self.data} · seed {self.seed}"


def _verified_json(path: Path) -> Any:
    """The JSON file of a run when it verifies against its checksum, else None (reads only, as list_runs)."""
    from studylib.training.runstore import _try_json
    return _try_json(path)


def _raw_json(path: Path) -> dict[str, Any]:
    """A JSON file as it is, for a name only (a configuration without a valid checksum still names its run)."""
    try:
        out = json.loads(path.read_text(encoding="utf-8"))
        return out if isinstance(out, dict) else {}
    except (OSError, ValueError):
        return {}


def identity(path: str | Path, config: dict[str, Any] | None = None,
             training: dict[str, Any] | None = None) -> RunName:
    """The :class:`RunName` of the run folder ``path`` from what the store records: ``config.json`` (method,
    seed, data hash or registered data set), ``result.json`` (the notebook, from the training's provenance) and
    ``inference.json`` (the data's name). ``config`` and ``training``: those files when already read."""
    path = Path(path)
    cfg = config if config is not None else (_verified_json(path / "config.json") or _raw_json(path / "config.json"))
    train = training if training is not None else _verified_json(path / "result.json")
    inference = _verified_json(path / "inference.json") if (path / "inference.json").exists() else None
    record = (inference or {}).get("data") if isinstance(inference, dict) else None
    notebook = str((train or {}).get("notebook") or "") or (
        path.name.rsplit("-", 1)[0].split("-", 1)[0] if path.name[:2].isdigit() and path.name[2:3] == "_" else "-")
    data = cfg.get("data") or {}
    keys = [data_label(cfg, record)]
    if "content_sha256" in data:
        keys.append(str(data["content_sha256"]))
    else:
        keys.append(str(data.get("name", "")))
    for root in (data.get("root"), (record or {}).get("root")):
        if root:
            keys += [str(root), Path(str(root)).name]
    if (record or {}).get("dataset"):
        keys.append(str(record["dataset"]))
    seed = (cfg.get("train") or {}).get("seed")
    return RunName(notebook, str(cfg.get("method", "?")), keys[0], seed, path.name,
                   tuple(dict.fromkeys(k for k in keys if k)))


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


def config_key(cfg: dict[str, Any]) -> str:
    """The training configuration without its seed (JSON), the key that groups a configuration's seeds. A
    method option ``seed`` equal to the training seed goes too (BECLR seeds its memory's clustering with it)."""
    train = dict(cfg.get("train") or {})
    seed = train.pop("seed", None)
    opts = dict(cfg.get("method_options") or {})
    if "seed" in opts and opts["seed"] == seed:
        opts.pop("seed")
    return json.dumps({**cfg, "train": train, "method_options": opts}, sort_keys=True, default=str)


def _name(ident: RunName, notebook: str) -> str:
    return RunName(notebook, ident.method, ident.data, ident.seed, ident.folder).text


def rows(store: RunStore | None = None, notebook: str | None = None, data: str | None = None,
         method: str | None = None, status: str | None = None) -> list[Row]:
    """The table's rows, oldest run first, filtered by substrings of notebook, data set and method."""
    store = store or RunStore()
    out = []
    for info in store.list_runs():
        cfg = info.config or {}
        st = status_of(store, info)
        created = _dt.datetime.fromtimestamp(info.created).strftime("%Y-%m-%d %H:%M")
        ident = identity(info.path, cfg, info.training)
        base = dict(run=info.name, method=ident.method, data=ident.data, params=_params_text(cfg), status=st,
                    created=created, path=str(info.path), seed=ident.seed, config_key=config_key(cfg))
        if not info.evaluations:
            owner = lock_owner(store, info.name) if st == "running" else None
            nb = _notebook_of(info, info.training, owner)
            out.append(Row(notebook=nb, commit=_commit(info.training), device=_device(info.training),
                           name=_name(ident, nb), **base))
        for ev in info.evaluations:
            res = ev.get("result") or {}
            nb = _notebook_of(info, res, info.training)
            out.append(Row(notebook=nb, commit=_commit(res or info.training),
                           device=_device(res or info.training), protocol=_protocol(ev.get("config")),
                           accuracies=dict(sorted(ev["headline"].items())),
                           episodes=int((ev.get("config") or {}).get("episodes") or 0), name=_name(ident, nb), **base))

    def keep(value: str, want: str | None) -> bool:
        return want is None or want.lower() in value.lower()

    return [r for r in out if keep(r.notebook, notebook) and keep(r.data, data) and keep(r.method, method)
            and (status is None or r.status == status)]


COLUMNS = ("notebook", "method", "data", "params", "status", "created", "commit", "device")
HEAD = ("notebook", "method", "data", "seed", "status")


def text_table(table: list[Row], width: int = 120) -> str:
    """The per-seed table for the terminal, at most ``width`` columns: per run one line with its notebook,
    method, data, seed and status, then, indented and wrapped, when it was created, the commit and device that
    computed it, its parameters and protocol, and its accuracies (mean ± 95% CI over that run's episodes per
    ``classifier/shots``)."""
    import textwrap
    if not table:
        return "no runs"
    cells = [[r.notebook, r.method, r.data, "-" if r.seed is None else str(r.seed), r.status] for r in table]
    widths = [max(len(x[c]) for x in [list(HEAD), *cells]) for c in range(len(HEAD))]
    over = sum(widths) + 2 * (len(widths) - 1) - width
    if over > 0:  # the data column gives way (whole names on the lines below)
        widths[2] = max(8, widths[2] - over)

    def line(xs: list[str]) -> str:
        return "  ".join(_fit(x, w).ljust(w) for x, w in zip(xs, widths)).rstrip()[:width]

    def wrapped(text: str) -> list[str]:
        return textwrap.wrap(text, width, initial_indent="    ", subsequent_indent="      ")

    out = [line(list(HEAD))]
    for r, c in zip(table, cells):
        out.append(line(c))
        out += wrapped(f"{r.created}, commit {r.commit}, {r.device}: {r.params}"
                       + (f"; {r.protocol}" if r.protocol else ""))
        if r.accuracies:
            out += wrapped("  ".join(f"{k} {100 * m:.1f}±{100 * ci:.1f}" for k, (m, ci) in r.accuracies.items()))
    return "\n".join(out)


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
    """A LaTeX ``tabular`` of the runs (booktabs rules): notebook, method, data, seed, then one column per
    ``classifier/shots`` with ``mean $\\pm$ CI`` in % (over that run's episodes)."""
    keys = _keys(table)
    cols = ["Notebook", "Method", "Data", "Seed", *keys]
    lines = [r"\begin{tabular}{" + "l" * 3 + "r" + "c" * len(keys) + "}", r"\toprule",
             " & ".join(tex_escape(c) for c in cols) + r" \\", r"\midrule"]
    for r in table:
        accs = [f"${100 * r.accuracies[k][0]:.1f} \\pm {100 * r.accuracies[k][1]:.1f}$" if k in r.accuracies
                else "--" for k in keys]
        lines.append(" & ".join([*(tex_escape(x) for x in (r.notebook, r.method, r.data)),
                                 "--" if r.seed is None else str(r.seed), *accs]) + r" \\")
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
    return " ".join(w for w in params.split() if w not in (f"seed{seed}", f"seed={seed}"))


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


METHOD_NAMES = {"nca": "NCA", "pn": "PN", "mn": "MN", "ce": "CE", "spe": "SPE", "set2model": "Set2Model",
                "infopatch": "InfoPatch", "beclr": "BECLR"}


def _shots_of(key: str) -> tuple[str, str]:
    clf, _, shots = key.rpartition("/")
    return clf, shots


def _caption(block: list[Group]) -> str:
    """The setting every row of ``block`` shares, in a sentence: data, protocol, backbone and schedule, seeds."""
    g = block[0]
    common = [w for w in g.params.split() if all(w in h.params.split() for h in block)]
    short = [w for w in common if w == common[0] or w[:2] in ("ep", "st") and w[2:3].isdigit()
             or w.startswith("steps")]
    ns = sorted({h.n for h in block})
    seeds = (f"{ns[0]} training seed{'s' if ns[0] != 1 else ''}" if len(ns) == 1
             else "$n$ training seeds")
    interval = ("Student-t 95\\% interval over the seeds" if ns != [1] else "95\\% interval over one seed's episodes")
    parts = [f"{tex_escape(g.data)}", tex_escape(g.protocol) if g.protocol else "",
             tex_escape(" ".join(short)) if short else ""]
    return (f"{g.notebook and tex_escape(g.notebook) + ': ' or ''}few-shot accuracy (\\%) on "
            + ", ".join(x for x in parts if x) + f"; mean over {seeds} $\\pm$ {interval}.")


def _row_labels(block: list[Group]) -> list[str]:
    """Each row's method, with the parameters that tell it from another row of the same method."""
    labels = []
    for g in block:
        name = METHOD_NAMES.get(g.method, g.method)
        twins = [h for h in block if h.method == g.method and h is not g]
        if twins:
            own = [w for w in g.params.split() if any(w not in h.params.split() for h in twins)]
            name += f" ({' '.join(own[:3]) + (' ...' if len(own) > 3 else '')})" if own else ""
        labels.append(tex_escape(name))
    return labels


def groups_latex(groups: list[Group]) -> str:
    """Paper tables of the grouped rows: per notebook, data set and evaluation protocol one ``table`` with a
    row per method and a column per shot count (grouped by classifier when there are several), each cell
    ``mean $\\pm$ CI`` in % (Student-t 95% interval over the n training seeds; one seed: its episode
    interval), booktabs rules, and a caption that states the shared setting (data, protocol, backbone,
    schedule, seeds). Rows of one method that differ in other parameters name those parameters."""
    blocks: dict[tuple[str, str, str], list[Group]] = {}
    for g in groups:
        if g.accuracies:
            blocks.setdefault((g.notebook, g.data, g.protocol), []).append(g)
    out = ["% ./study results --latex: accuracy in %, mean over training seeds $\\pm$ 95% interval (needs booktabs)"]
    for block in blocks.values():
        keys = sorted({k for g in block for k in g.accuracies}, key=lambda k: (_shots_of(k)[0],
                                                                               int(_shots_of(k)[1] or 0)))
        classifiers = list(dict.fromkeys(_shots_of(k)[0] for k in keys))
        show_n = len({g.n for g in block}) > 1
        lines = [r"\begin{table}[t]", r"\centering", r"\caption{" + _caption(block) + "}",
                 r"\begin{tabular}{l" + ("r" if show_n else "") + "c" * len(keys) + "}", r"\toprule"]
        lead = ["Method", *(["$n$"] if show_n else [])]
        if len(classifiers) > 1:
            top = [""] * len(lead)
            rules, col = [], len(lead) + 1
            for clf in classifiers:
                k = sum(1 for key in keys if _shots_of(key)[0] == clf)
                top.append(rf"\multicolumn{{{k}}}{{c}}{{{tex_escape(clf.replace('_', ' '))}}}")
                rules.append(rf"\cmidrule(lr){{{col}-{col + k - 1}}}")
                col += k
            lines += [" & ".join(top) + r" \\", " ".join(rules)]
        else:
            lines[2] = lines[2][:-2] + f" Classifier: {tex_escape(classifiers[0].replace('_', ' '))}." + "}"
        lines += [" & ".join([*lead, *(f"{_shots_of(k)[1]}-shot" for k in keys)]) + r" \\", r"\midrule"]
        for g, label in zip(block, _row_labels(block)):
            accs = [f"${100 * g.accuracies[k].value:.1f} \\pm {100 * g.accuracies[k].ci95:.1f}$"
                    if k in g.accuracies else "--" for k in keys]
            lines.append(" & ".join([label, *([str(g.n)] if show_n else []), *accs]) + r" \\")
        lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


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
    ap.add_argument("--width", type=int, default=None, help="columns of the table (default: the terminal's, at most "
                                                            "100; --per-seed: 120)")
    ap.add_argument("--store", metavar="DIR", help="the run store (default: $STUDYLIB_CACHE/runs or .cache/runs)")
    args = ap.parse_args(argv)
    try:  # every argument checked before the store is read
        targets = _check_arguments(args)
    except ValueError as err:
        print(f"results: {err}", file=sys.stderr)
        return 2
    store = RunStore(args.store) if args.store else RunStore()
    table = rows(store, args.notebook, args.data, args.method, args.status)
    groups = None if args.per_seed else group_rows(table)
    exported = False
    exports = ((targets["--csv"], to_csv, groups_csv), (targets["--latex"], to_latex, groups_latex))
    for target, per_seed, grouped in exports:
        if target:
            content = per_seed(table) if groups is None else grouped(groups)
            if target == "-":
                sys.stdout.write(content)
                exported = True
            else:
                from studylib.utils import atomic_write_text
                atomic_write_text(target, content)  # an interrupt leaves the old file, never half a table
                n = len(table) if groups is None else len(groups)
                print(f"wrote {n} rows to {target}", file=sys.stderr)
    if args.json:
        print(json.dumps([r.__dict__ for r in table], indent=1))
    elif not exported:
        if groups is None:
            import shutil
            width = args.width or min(120, shutil.get_terminal_size((120, 24)).columns)
            print(f"run store {store.root}: {len(table)} row(s)", file=sys.stderr)
            print(text_table(table, width))
        else:
            import shutil
            width = args.width or min(100, shutil.get_terminal_size((100, 24)).columns)
            print(f"run store {store.root}: {len(table)} run(s) in {len(groups)} configuration(s); --per-seed "
                  f"shows each run", file=sys.stderr)
            print(group_text_table(groups, width))
    return 0


MIN_WIDTH = 40  # columns the tables need


def _check_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The paths and numbers of the command line, checked up front (ValueError: one line naming the argument and
    the fix): ``--store`` an existing folder, ``--csv``/``--latex`` a file that can be written (or ``-``),
    ``--width`` at least :data:`MIN_WIDTH`. Returns the export targets (``{"--csv": path | "-" | None, ...}``)."""
    from studylib.paths import existing_folder, writable_file
    if args.width is not None and args.width < MIN_WIDTH:
        raise ValueError(f"--width {args.width}: the table needs at least {MIN_WIDTH} columns; give --width "
                         f"{MIN_WIDTH} or more (default: the terminal's width)")
    if args.store is not None:
        existing_folder(args.store, "--store", "the run store's folder (default: $STUDYLIB_CACHE/runs or "
                                               ".cache/runs), the folder holding the run folders")
    out: dict[str, Any] = {}
    for flag in ("--csv", "--latex"):
        value = getattr(args, flag[2:])
        out[flag] = value if value in (None, "-") else writable_file(value, flag)
    return out


if __name__ == "__main__":
    from studylib.utils import run_command
    run_command(main, "results")
