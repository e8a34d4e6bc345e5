"""Pre-flight of a notebook run: its parameters and its data checked together, before any kernel starts.

``./study check NB [-p NAME VALUE]... [-y YAML]... [--scale S]`` (``python -m studylib.preflight check ...``), also
run by ``./study run`` before papermill. It reads ``params/<NB>/<scale>.yaml`` and the overrides exactly as
papermill does, then reports **every** problem at once, each with its fix and the real parameter names:

* every parameter on its own: unknown names (with the closest real name), types, allowed values, bounds
  (the rules of :func:`studylib.config.validate`, collected instead of stopping at the first);
* the notebook's own cross-field rules (``Params.check``);
* the data: a paper data set whose folder is missing gets two lines (what is missing; where people get it, its
  size and layout); a folder of your own images (``data: folder``) is scanned without decoding an image (every file's
  header and data checked cheaply: a truncated or inconsistent image is named now, and so is a class folder
  that is another class's, through a symlink or hard links): classes
  and images per split (the reader's own scan and split rule, :mod:`studylib.data.readers`), the minimum the
  chosen episodes need, the training batch against the training images
  (:class:`studylib.data.samplers.ShuffledSampler`'s rule) and the episodes against each split
  (:func:`studylib.data.samplers.check_episode`).

* the resources (:mod:`studylib.resources`): the memory and time the configuration needs, estimated from its
  sizes (images, batch, epochs, network) against this machine; what cannot fit is a problem, hours are a warning,
  both with the numbers.

Every number has a range (:func:`studylib.config.field_limits`) and non-finite values are refused; ``-y`` text is
read by :func:`studylib.config.load_yaml` (a mapping of names to values, aliases bounded), so a configuration
that cannot run is refused in seconds, before anything is allocated.

Data read in place from the folder beside every checkout (``../shared/data/...``, e.g. the Omniglot subset of the
evidence scale of notebooks 10-12) that is absent on this machine is no problem: the run is *not run* (one line:
"not run: needs the Omniglot subset (../shared/data/omniglot/)", exit status :data:`NOT_RUN`), and ``./study run``
goes on with the other notebooks without failing.

Defaults adapt where the intent is clear, and the report says so in one line each: a ``batch_size`` larger than
the training split becomes the training split's size; ``eval_ways`` above the evaluation split's classes becomes
that number of classes (at least 2). A value given on the command line is never adapted (it is reported as a
problem instead). ``./study run`` passes the adapted values to papermill, so the run uses them.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from studylib.paths import SCALES, experiment_module, experiment_module_name, resolve_notebook


# What a missing paper data set is, where people get it, its size and on-disk layout (two lines of a report).
DATASET_SOURCES: dict[str, tuple[str, str]] = {
    "mini_imagenet": ("miniImageNet (Vinyals et al. 2016, Ravi & Larochelle's split): 100 ImageNet classes x 600 "
                      "images, 64/16/20 classes, 84x84 (60,000 images, 1.3 GB decoded)",
                      "get the mini-imagenet-cache-{train,val,test}.pkl pickles (distributed with Ravi & "
                      "Larochelle's split and common few-shot repositories) or ImageNet images (image-net.org) + "
                      "Ravi & Larochelle's train.csv/val.csv/test.csv; layout: <data_root>/mini-imagenet-cache-"
                      "train.pkl ... or <data_root>/images/*.jpg + <data_root>/{train,val,test}.csv"),
    "tiered_imagenet": ("tieredImageNet (Ren et al. 2018): 608 ImageNet classes in 34 superclasses, 779,165 images, "
                        "84x84 (16.5 GB decoded)",
                        "get the {train,val,test}_images_png.pkl + {train,val,test}_labels.pkl files released with "
                        "Ren et al.'s paper (ImageNet licence); layout: <data_root>/train_images_png.pkl, "
                        "<data_root>/train_labels.pkl, ..."),
    "cifar_fs": ("CIFAR-FS (Bertinetto et al. 2019): CIFAR-100's 100 classes x 600 images, 64/16/20 classes, 32x32 "
                 "(60,000 images, 184 MB decoded)",
                 "get CIFAR_FS_{train,val,test}.pickle (as released with MetaOptNet, Lee et al. 2019) or build them "
                 "from CIFAR-100 (cs.toronto.edu/~kriz/cifar.html); layout: <data_root>/CIFAR_FS_train.pickle ..."),
    "fc100": ("FC100 (Oreshkin et al. 2018): CIFAR-100 split by superclass 12/4/4 (60/20/20 classes), 32x32 "
              "(60,000 images, 184 MB decoded)",
              "get FC100_{train,val,test}.pickle (as released with MetaOptNet, Lee et al. 2019) or build them from "
              "CIFAR-100 (cs.toronto.edu/~kriz/cifar.html); layout: <data_root>/FC100_train.pickle ..."),
    "omniglot": ("Omniglot (Lake et al. 2015): 1,623 characters of 50 alphabets x 20 drawers, 105x105 PNG (32,460 "
                 "images, about 16 MB zipped)",
                 "get images_background.zip and images_evaluation.zip from github.com/brendenlake/omniglot "
                 "(python/); layout: <data_root>/images_background.zip + images_evaluation.zip, zipped or "
                 "unzipped, or any <data_root>/<alphabet>/<character>/*.png"),
    "cub": ("CUB-200-2011 (Wah et al. 2011): 200 bird species, 11,788 images (1.1 GB tgz)",
            "get CUB_200_2011.tgz from data.caltech.edu (Caltech-UCSD Birds-200-2011) and extract it; layout: "
            "<data_root>/CUB_200_2011/{images/,images.txt,image_class_labels.txt,classes.txt}"),
}
# Data the project reads in place from the folder beside every checkout (here and in CI), never copied into it:
# an evidence configuration that reads it is not run where it is absent (one line, no failure).
SHARED_DATA = "../shared/data/"
SHARED_DATA_NAMES = {"omniglot": "the Omniglot subset"}
FEWER_CLASSES = ("with fewer classes, train nothing: classify your images with a backbone trained elsewhere "
                 "(model = studylib.api.load_run(...), then model.classify(support_files, labels, query_files); "
                 "README: Your own images)")


@dataclass
class Problem:
    """One thing that would stop the run: what is wrong and how to fix it (``param``: the parameter at fault)."""

    param: str | None
    text: str

    def line(self) -> str:
        return f"  - {self.param + ': ' if self.param else ''}{self.text}"


@dataclass
class Report:
    """Everything :func:`check` found: problems, adapted defaults, and facts about the data."""

    notebook: str
    scale: str
    problems: list[Problem] = field(default_factory=list)
    adapted: dict[str, Any] = field(default_factory=dict)  # parameter -> the value the run will use
    notes: list[str] = field(default_factory=list)  # one line each: the data, the minimum, each adaptation
    warnings: list[str] = field(default_factory=list)  # what runs but deserves a second look (hours of work)
    folder_images: int | None = None  # images of a folder of your own (its scan), for the resource estimate
    not_run: str = ""  # why the run is skipped without failing: shared data (SHARED_DATA) absent on this machine

    @property
    def ok(self) -> bool:
        return not self.problems

    def text(self) -> str:
        head = f"study check {self.notebook} ({self.scale}): "
        head += (f"not run: {self.not_run}" if self.ok and self.not_run else
                 "ok" if self.ok else f"{len(self.problems)} problem{'s' if len(self.problems) > 1 else ''}")
        lines = [head, *(f"  {n}" for n in self.notes), *(f"  warning: {w}" for w in self.warnings),
                 *(p.line() for p in self.problems)]
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------
# Parameters
# ----------------------------------------------------------------------------------------------------------

def papermill_value(text: str) -> Any:
    """A ``-p NAME VALUE`` value as papermill reads it: True/False/None, an int, a float, else the string."""
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def check_values(schema: type, values: dict[str, Any], where: str) -> tuple[dict[str, Any], list[Problem]]:
    """Each value on its own against the schema (name, type, allowed values, bounds), as
    :func:`studylib.config.validate` checks them, but collecting every problem.

    Returns ``(valid values coerced to their types, problems)``; a faulty value is left out of the first.
    """
    from studylib.config import ParamError, check_field
    fields = {f.name: f for f in dataclasses.fields(schema)}
    hints = typing.get_type_hints(schema)
    good: dict[str, Any] = {}
    problems = []
    for key, value in values.items():
        if key not in fields:
            close = difflib.get_close_matches(key, sorted(fields), n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}? " if close else ""
            problems.append(Problem(key, f"unknown parameter in {where}; {hint}allowed: {', '.join(sorted(fields))}"))
            continue
        try:
            good[key] = check_field(fields[key], hints[key], key, value, where)
        except ParamError as e:
            problems.append(Problem(key, str(e)))
    return good, problems


# ----------------------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------------------

def scan_files(root: Path, split: str, seed: int = 0,
               fractions: Sequence[float] | None = None) -> dict[str, list[tuple[str, list[Path]]]]:
    """``{split: [(class name, image files)]}`` of a folder of your own images, without decoding an image: the
    reader's scan (:func:`studylib.data.readers.load_image_folder`'s layouts, its refusals: a class folder that
    is another class's, through a symlink or hard links, included) and its seeded split rule.

    Raises:
        DataError: the reader's message when the layout is not one it reads.
    """
    from studylib.data import readers
    if split == "given":
        layout = readers._scan_image_folder(root, "folder")
        return {s: list(layout[s]) for s in readers.SPLITS}
    entries = readers._scan_flat_classes(root, "folder", split)
    fr = readers._check_fractions(fractions if fractions is not None else readers.FOLDER_FRACTIONS, "folder")
    assign = readers._flat_assignment(entries, split, seed, fr, "folder")
    return {s: [(c, fs) for (c, _, fs), a in zip(entries, assign) if a == i] for i, s in enumerate(readers.SPLITS)}


def scan_folder(root: Path, split: str, seed: int = 0,
                fractions: Sequence[float] | None = None) -> dict[str, list[tuple[str, int]]]:
    """``{split: [(class name, images)]}`` (:func:`scan_files`, counted)."""
    return {s: [(c, len(fs)) for c, fs in classes] for s, classes in scan_files(root, split, seed, fractions).items()}


def _check_image_files(report: Report, files: list[Path]) -> None:
    """Every image file checked cheaply before training (:func:`studylib.data.readers.images.check_image_files`:
    PNG chunks and image-data size against the header, a JPEG's end marker), so a truncated or inconsistent
    file is named now, not after minutes of work."""
    from studylib.data.readers.images import check_image_files
    bad = check_image_files(files)
    if bad:
        shown = "; ".join(f"{f}: {why}" for f, why in bad[:5]) + (f"; ... ({len(bad) - 5} more)" if len(bad) > 5 else "")
        report.problems.append(Problem("data_root", f"{len(bad)} of {len(files)} image files cannot be read as the "
                                                    f"images they claim to be: {shown}. Replace them (copy them "
                                                    f"again) or delete them"))


def _check_omniglot(report: Report, path: Path) -> None:
    """Omniglot data read by the reader's own scan, every image read and checked without decoding
    (:func:`studylib.data.readers.omniglot.check_omniglot`): an empty zip, random bytes named .zip, a zip of the
    authors' zips, a member twice, an encrypted, deflate64, damaged or bomb member is a problem now, not after the
    run has started."""
    from studylib.data.base import DataError
    from studylib.data.readers.omniglot import check_omniglot
    try:
        report.notes.append(check_omniglot(path))
    except DataError as e:
        report.problems.append(Problem("data_root", str(e)))


def min_classes_random(test_classes: int, fractions: Sequence[float] | None = None, train_classes: int = 2) -> int:
    """The fewest classes of ``root/<class>/`` whose seeded random split (the reader's rounding,
    ``readers._scaled_class_counts``) leaves ``test_classes`` for evaluation and ``train_classes`` for training."""
    from studylib.data import readers
    fr = readers._check_fractions(fractions if fractions is not None else readers.FOLDER_FRACTIONS, "folder")
    n = 3
    while True:
        n_val, n_test = max(1, round(n * fr[1])), max(1, round(n * fr[2]))
        if n_test >= test_classes and n - n_val - n_test >= train_classes:
            return n
        n += 1


def _count_text(classes: list[tuple[str, int]]) -> str:
    if not classes:
        return "0 classes"
    sizes = [n for _, n in classes]
    return (f"{len(classes)} classes, {sum(sizes)} images ({min(sizes)}-{max(sizes)} per class)"
            if min(sizes) != max(sizes) else f"{len(classes)} classes x {sizes[0]} images")


def reader_options(mod: Any, v: dict[str, Any]) -> dict[str, Any]:
    """The folder reader's options (split, seed, fractions) the notebook's ``data_spec(p)`` gives for ``v``;
    ``{}`` when the module has none or it cannot be built from these values."""
    make = getattr(mod, "data_spec", None)
    if make is None:
        return {}
    try:
        return dict(make(mod.Params(**v)).options or {})
    except Exception:  # a value the cross-field check reports anyway
        return {}


def _check_folder(report: Report, v: dict[str, Any], given: set[str], root: Path, module: Any) -> None:
    """Folder data: classes and images per split, the minimum the episodes need, adapted defaults, problems."""
    import torch
    from studylib.data.base import DataError
    from studylib.data.samplers import check_episode
    # the split rule exactly as the run's reader gets it: the notebook's own data_spec(p) options when it has one
    opts = reader_options(module, v)
    split = opts.get("split", v.get("split", "random"))
    seed = int(opts.get("seed", 0) or 0)
    fractions = opts.get("fractions")
    try:
        files = scan_files(root, split, seed, fractions)
    except (DataError, ValueError) as e:
        fix = f"; {FEWER_CLASSES}" if "too few" in str(e) else ""
        report.problems.append(Problem("data_root", f"{e}{fix}"))
        return
    splits = {s: [(c, len(fs)) for c, fs in classes] for s, classes in files.items()}
    _check_image_files(report, [f for classes in files.values() for _, fs in classes for f in fs])
    report.notes.append(f"folder {root} (split={split}): " + "; ".join(f"{s} {_count_text(c)}"
                                                                       for s, c in splits.items()))
    report.folder_images = sum(n for c in splits.values() for _, n in c)
    if split == "given":  # few-shot splits must be class-disjoint (the reader refuses a class in two splits)
        seen: dict[str, str] = {}
        for s, classes in splits.items():
            for c, _ in classes:
                if c in seen:
                    report.problems.append(Problem("data_root", f"class {c!r} is in both the {seen[c]} and the {s} "
                                                   f"split; few-shot splits must be class-disjoint: move or rename "
                                                   f"{root / s / c}"))
                seen.setdefault(c, s)
    ways = v.get("eval_ways")
    shots = max(v.get("eval_shots") or [1])
    queries = v.get("eval_queries")
    if ways is not None:
        total = sum(len(c) for c in splits.values())
        need = (f"at least {min_classes_random(ways, fractions)} classes in <root>/<class>/ (split=random gives "
                f"about 20% of the classes to test)" if split == "random" else
                f"{ways} classes in the test split and 2 in train")
        report.notes.append(f"minimum: eval_ways={ways} needs {ways} test classes of >= {shots} + {queries} images "
                            f"(eval_shots up to {shots} + eval_queries) -> {need}; training needs >= 2 classes; "
                            f"this folder has {total}")
    train = splits.get("train", [])
    n_train = sum(n for _, n in train)
    if len(train) < 2:
        report.problems.append(Problem("data_root", f"the training split has {len(train)} class(es); training "
                                       f"needs at least 2: add classes; {FEWER_CLASSES}"))
    bs = v.get("batch_size")
    if bs is not None and n_train and bs > n_train:
        if "batch_size" in given:
            report.problems.append(Problem("batch_size", f"batch_size={bs} is larger than the training split "
                                           f"({n_train} images); pass -p batch_size {n_train} or less"))
        elif n_train >= 2:
            report.adapted["batch_size"] = n_train
            report.notes.append(f"adapted: batch_size {bs} -> {n_train} (the training split holds {n_train} images)")
    if ways is None:
        return
    for s, shots_of, what in (("test", shots, "eval_shots"), ("val", v.get("val_shots"), "val_shots")):
        if s == "val" and not v.get("val_episodes"):
            continue
        classes = splits.get(s, [])
        k = len(classes)
        use = ways
        if ways > k:
            if k >= 2 and "eval_ways" not in given and s == "test":
                use = k
                report.adapted["eval_ways"] = k
                report.notes.append(f"adapted: eval_ways {ways} -> {k} (the {s} split has {k} classes)")
            else:
                fix = (f"lower eval_ways to at most {k} (-p eval_ways {k})" if k >= 2 else
                       f"the folder needs {need}; {FEWER_CLASSES}")
                report.problems.append(Problem("eval_ways", f"{ways}-way episodes need {ways} classes but the {s} "
                                               f"split has {k}; {fix}"))
                continue
        counts = torch.tensor([n for _, n in classes])
        try:
            check_episode(use, int(shots_of or 1), int(queries or 1), counts, f"{s} split", [c for c, _ in classes])
        except DataError as e:
            report.problems.append(Problem(f"{what}/eval_queries", str(e)))
        caveat = getattr(module, "interval_caveat", None)  # a test split too small for an interval: said now
        if s == "test" and caveat is not None and (why := caveat(k, use, int(v.get("eval_episodes") or 0))):
            report.notes.append(f"warning: {why}")


def _check_data(report: Report, v: dict[str, Any], given: set[str], module: Any = None) -> None:
    from studylib.data import GENERATED
    from studylib.data.base import resolve_root
    data, root = v.get("data"), v.get("data_root")
    if data is None or data in GENERATED or not root or str(root).startswith("standin:"):
        if data == "folder" and not root:
            report.notes.append("data_root unset: the notebook writes its own example folder")
        return
    path = resolve_root(root)
    if not path.exists():
        shared = str(root).replace("\\", "/")
        if shared.startswith(SHARED_DATA):  # e.g. ../shared/data/omniglot/images_background_small1.zip
            folder = SHARED_DATA + shared[len(SHARED_DATA):].split("/", 1)[0] + "/"
            report.not_run = f"needs {SHARED_DATA_NAMES.get(data, f'the shared {data} data')} ({folder})"
            return
        if data in DATASET_SOURCES:
            what, where = DATASET_SOURCES[data]
            report.problems.append(Problem("data_root", f"no folder {path}: it should hold {what}\n"
                                                        f"    {where}; then pass -p data_root /path/to/it"))
        else:
            report.problems.append(Problem("data_root", f"no folder {path}; point data_root at your image folder"))
        return
    if data == "omniglot":
        _check_omniglot(report, path)
    if data == "folder":
        if not path.is_dir():
            report.problems.append(Problem("data_root", f"{path} is a file, not a folder; point data_root at the "
                                                        f"folder that holds your class folders"))
            return
        _check_folder(report, v, given, path, module)


# ----------------------------------------------------------------------------------------------------------
# The check
# ----------------------------------------------------------------------------------------------------------

def overrides(pairs: Sequence[tuple[str, str]] = (), yamls: Sequence[str] = ()) -> dict[str, Any]:
    """The parameters ``-y YAML``... and ``-p NAME VALUE``... give, merged in papermill's order.

    Raises:
        ParamError: a ``-y`` text that is not a mapping of names to values, or too large once its aliases are
            expanded (:func:`studylib.config.load_yaml`).
    """
    from studylib.config import MAX_NUMBER_DIGITS, ParamError, load_yaml, show
    out: dict[str, Any] = {}
    for text in yamls:
        out.update(load_yaml(text, f"-y {show(text)}"))
    for name, value in pairs:
        if len(value) > MAX_NUMBER_DIGITS and re.fullmatch(r"\s*[-+]?[0-9_.eE+-]+\s*", value):
            raise ParamError(f"-p {name}: a number written with {len(value):,} characters is beyond every "
                             f"parameter's range; give one in its range, e.g. -p {name} 10")
        out[name] = papermill_value(value)
    return out


def check(notebook: str, scale: str = "smoke", given: dict[str, Any] | None = None) -> Report:
    """Pre-flight of ``notebook`` at ``scale`` with the command-line parameters ``given`` (see the module)."""
    from studylib.config import ParamError, defaults, read_param_file
    from studylib.paths import params_dir
    report = Report(notebook, scale)
    given = dict(given or {})
    try:
        module = experiment_module(notebook)
        schema = module.Params
    except ValueError as e:  # not a name of the form NN_name
        report.problems.append(Problem(None, str(e)))
        return report
    except ModuleNotFoundError as e:
        if e.name != experiment_module_name(notebook):
            raise
        report.problems.append(Problem(None, f"no experiment module {e.name} for {notebook} (a notebook NN_name "
                                             f"runs studylib/experiments/name.py)"))
        return report
    where = f"params/{notebook}/{scale}.yaml"
    try:
        values = read_param_file(params_dir() / notebook / f"{scale}.yaml")
    except ParamError as e:
        report.problems.append(Problem(None, str(e)))
        return report
    _check_variants(report, notebook, scale)
    good_file, bad_file = check_values(schema, values, where)
    good_cli, bad_cli = check_values(schema, given, "the command line (-p/-y)")
    report.problems += bad_file + bad_cli
    v = {**defaults(schema), **good_file, **good_cli}
    _check_data(report, v, set(given), module)
    v.update(report.adapted)
    if not (bad_file or bad_cli):  # the notebook's cross-field rules, on the values the run would get
        try:
            schema(**v).check()
        except (ParamError, ValueError) as e:
            if not any(str(e) in p.text for p in report.problems):
                report.problems.append(Problem(None, str(e)))
    if not report.problems:
        _check_resources(report, v)
    return report


def _check_variants(report: Report, notebook: str, scale: str) -> None:
    """The other parameter files of the scale (``params/<nb>/<scale>-*.yaml``, the variants a saved claims table
    is matched against when the notebook ends): one that cannot be read or validated is named now, as ignored,
    with the fix (before: a broken untracked ``smoke-old.yaml`` passed the check, and the run failed on it at the
    end, after training)."""
    from studylib.claims.store import param_files, variant_problem
    base = scale.split("-", 1)[0]
    for name in param_files(notebook, base):
        if name != scale and (why := variant_problem(notebook, name)):
            report.warnings.append(f"params/{notebook}/{name}.yaml (a variant of {base}) is ignored: {why}; fix it "
                                   f"or delete it")


NOT_RUN = 3  # the exit status of a check whose run is skipped (Report.not_run); ./study run goes on without failing


def _scale_name(name: str) -> str:
    """A scale (smoke, evidence, paper, check) or a variant of one (``paper-cifarfs``), for ``--scale``."""
    if name.split("-", 1)[0] not in SCALES:
        raise argparse.ArgumentTypeError(f"unknown scale {name!r}; allowed: {', '.join(SCALES)}, or a variant's "
                                         "parameter file such as paper-cifarfs")
    return name


def _check_resources(report: Report, v: dict[str, Any]) -> None:
    """Memory that cannot be had is a problem, hours a warning (:func:`studylib.resources.estimate`)."""
    from studylib import resources
    need = resources.estimate(v, report.folder_images)
    for text in need.problems:
        param = "batch_size" if "training batch" in text else "image_size"
        report.problems.append(Problem(param, text))
    report.warnings += need.warnings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="./study check", description="Check a notebook's parameters and data "
                                 "together before any kernel starts; lists every problem with its fix.")
    ap.add_argument("notebook", help="notebook name, number (90) or short name (use_your_data)")
    ap.add_argument("--scale", default="smoke", type=_scale_name,
                    help=f"{', '.join(SCALES)}, or a variant's parameter file (paper-cifarfs: params/NB/paper-cifarfs.yaml)")
    ap.add_argument("-p", "--parameters", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    ap.add_argument("-y", "--parameters_yaml", action="append", default=[], metavar="YAML")
    ap.add_argument("--adapted", metavar="FILE", help="write the adapted parameters as YAML (for papermill -f)")
    args = ap.parse_args(argv)
    try:
        name = resolve_notebook(args.notebook)
        given = overrides([tuple(p) for p in args.parameters], args.parameters_yaml)
    except ValueError as e:  # ParamError too: -y that is not a mapping, or too large
        print(f"study: {e}", file=sys.stderr)
        return 2
    report = check(name, args.scale, given)
    print(report.text(), file=sys.stderr)
    if args.adapted:
        Path(args.adapted).write_text(yaml.safe_dump(report.adapted) if report.adapted else "", encoding="utf-8")
    return 1 if not report.ok else NOT_RUN if report.not_run else 0


__all__ = ["DATASET_SOURCES", "Problem", "Report", "check", "check_values", "min_classes_random", "overrides",
           "reader_options", "scan_files", "scan_folder"]

if __name__ == "__main__":
    from studylib.utils import run_command
    run_command(main, "study check")
