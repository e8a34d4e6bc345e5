"""Use what the study trained on new images: load a run as an embedding model, embed images, classify queries.

::

    from studylib import api
    model = api.load_run("00_quickstart-nca-3f2a...")            # a run folder, its name in the store, or an Outcome
    model = api.load_run("90_use_your_data", method="pn", data="my-images", seed=0)  # a run by what it is
    feats = model.embed("my_images/")                             # a folder, image files, or a uint8 tensor
    pred = model.classify(support_images, support_labels, query_images, classifier="nearest_centroid")
    pred.labels, pred.probabilities

* :func:`load_run` finds a run by its folder, its name or a prefix of it in the store, its display name
  (``notebook · method · data · seed N``, :func:`studylib.results.identity`), or by what it is: a notebook's name
  or number with ``method=``, ``data=`` (a folder's name or path, a data set's name, or the start of the content
  hash) and ``seed=``. A call that fits several runs raises a ``LookupError`` of at most 10 lines listing them by
  what differs, each with the exact call that loads it. It rebuilds the run's model (backbone, method and heads)
  from its ``config.json`` and loads its final ``weights.pt``; :func:`load_weights` does it for a ``weights.pt`` file and the :class:`RunSpec` that
  trained it. The evaluation transform (resize to the training size, centre crop, the training split's
  normalisation) and the CL2N centre come from the run's ``inference.json``, written when the run is evaluated;
  for a run evaluated before that file existed, they are computed from the run's data set again (registered
  data sets are found from the configuration; for your own data pass ``data=``). Its ``preprocessing`` record
  says how the training images were decoded (mode, channels, inversion, size, normalisation:
  :func:`studylib.runs.runner.preprocessing`); image files are decoded exactly so, e.g. inverted for an
  Omniglot run (the reader stores white ink on black). A run stored before that record existed decodes files
  in the mode its channels imply, uninverted, and says so in a warning.
* :meth:`EmbeddingModel.embed` takes a folder (every image file in it, sorted by name, recursively), a list of
  image files, or a ``[N, C, H, W]`` uint8 tensor (float in [0, 1] is accepted too); files are decoded as the
  run's preprocessing record says (channels, inversion, size); tensors are taken as a reader returns them
  (already decoded and inverted), only resized and converted to the model's channels.
* :meth:`EmbeddingModel.classify` runs any registered classifier (:data:`studylib.evaluation.CLASSIFIERS`:
  ``nearest_centroid``, ``soft_assignment``, ``knn``, ``logreg``, ``opta`` = OpTA + logistic regression,
  ``opta_nearest``) on one episode made of your support set and queries, after CL2N with the training centre
  as the study's evaluation does; ``"spe"`` uses an SPE model's own posterior (mean and variance embeddings).
  Each class needs the same number of support images (the classifiers' episode layout).
"""

from __future__ import annotations

import glob
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from studylib.data.base import FewShotDataset

ImagesLike = "torch.Tensor | str | Path | Sequence[str | Path]"


@dataclass
class Prediction:
    """Predictions for the queries: ``labels`` (one of the support labels per query), ``scores`` ``[Q, w]`` as
    the classifier returned them (higher = more likely), ``probabilities`` = ``softmax(scores)`` and the
    ``classes`` (the support labels in column order)."""

    labels: list[Any]
    scores: torch.Tensor
    classes: list[Any]

    @property
    def probabilities(self) -> torch.Tensor:
        return self.scores.float().softmax(-1)

    @property
    def indices(self) -> torch.Tensor:
        """``[Q]`` column index of each prediction in :attr:`classes`."""
        return self.scores.argmax(-1)


class EmbeddingModel:
    """A trained method as an embedding model (see the module docstring)."""

    def __init__(self, method: Any, transform: Callable[[torch.Tensor], torch.Tensor], stats: dict[str, Any],
                 cl2n_mean: torch.Tensor | None, spec: Any = None, path: Path | None = None,
                 device: str | torch.device = "cpu", preprocessing: dict[str, Any] | None = None) -> None:
        self.device = torch.device(device)
        self.method = method.to(self.device).eval()
        self.transform = transform
        self.size, self.channels = int(stats["size"]), int(stats["in_channels"])
        self.cl2n_mean = cl2n_mean.to(self.device) if cl2n_mean is not None else None
        self.spec, self.path = spec, path
        # How files are decoded (the run's preprocessing record); without one: the channels' mode, uninverted.
        prep = dict(preprocessing or {})
        self.mode = str(prep.get("mode", "RGB" if self.channels == 3 else "L"))
        self.invert = bool(prep.get("invert", False))
        self.preprocessing = prep or None

    def __repr__(self) -> str:
        what = f"{self.spec.method} / {self.spec.backbone}" if self.spec is not None else type(self.method).__name__
        return f"EmbeddingModel({what}, {self.channels}x{self.size}x{self.size}, {self.path or 'weights'})"

    # ------------------------------------------------------------------------------------------------ images
    def images(self, images: Any, what: str = "images") -> torch.Tensor:
        """``images`` (folder, files, or tensor) as ``[N, C, size, size]`` uint8 in the model's channels.

        ``what`` names the argument in messages (``support``, ``query``). No image at all (an empty list or folder, a
        tensor of 0 images or of 0 pixels) and a folder among listed files are ValueErrors naming the argument and the
        fix; a file too large to be an image, or declaring too many pixels, is refused before it is read whole or
        decoded (:data:`studylib.data.readers.common.MAX_IMAGE_BYTES`, ``MAX_IMAGE_PIXELS``).
        """
        from studylib.data.readers import IMAGE_EXTENSIONS, decode_images, resize_images
        if isinstance(images, torch.Tensor):
            x = images
            if x.dim() == 3:
                x = x[None]
            if x.dim() != 4:
                raise ValueError(f"{what} must be [N, C, H, W] (or one [C, H, W]), got {tuple(images.shape)}")
            if x.shape[0] == 0:
                raise ValueError(f"{what}: the tensor {tuple(images.shape)} holds no image; pass at least one")
            if x.shape[-1] == 0 or x.shape[-2] == 0:
                raise ValueError(f"{what}: the images of {tuple(images.shape)} have no pixels (height and width must "
                                 f"be at least 1); pass [N, C, H, W] images")
            if x.is_floating_point():
                bad = int((~torch.isfinite(x)).sum())
                if bad:
                    raise ValueError(f"images hold {bad} non-finite value(s) (NaN or inf); float images must be "
                                     f"finite values in [0, 1] (check how they were computed), or pass uint8 0..255")
                if float(x.min()) < 0 or float(x.max()) > 1:
                    raise ValueError("float images must lie in [0, 1]; pass uint8 0..255 otherwise")
                x = (x * 255).round().to(torch.uint8)
            elif x.dtype != torch.uint8:
                raise ValueError(f"images must be uint8 or float in [0, 1], got {x.dtype}")
            if x.shape[1] != self.channels:
                if x.shape[1] == 3 and self.channels == 1:
                    x = (x.float() * torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)).sum(1, True) \
                        .round().clamp(0, 255).to(torch.uint8)
                elif x.shape[1] == 1 and self.channels == 3:
                    x = x.expand(-1, 3, -1, -1)
                else:
                    raise ValueError(f"the model takes {self.channels}-channel images, got {x.shape[1]} channels")
            return resize_images(x.cpu(), self.size) if x.shape[-1] != self.size or x.shape[-2] != self.size \
                else x.cpu()
        if isinstance(images, (str, Path)):
            folder = Path(images)
            if not folder.is_dir():
                files = [folder]
            else:
                files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")
                               and p.suffix.lower() in IMAGE_EXTENSIONS)
                if not files:
                    raise ValueError(f"{what}: {folder.resolve()} holds no image files (extensions "
                                     f"{sorted(IMAGE_EXTENSIONS)}); point at the folder that holds the images")
        else:
            files = [Path(p) for p in images]
        if not files:
            raise ValueError(f"{what}: an empty list holds no image; pass at least one image file, a folder of images, "
                             f"or a [N, C, H, W] tensor")
        folders = [str(p) for p in files if p.is_dir()]
        if folders:
            raise ValueError(f"{what}: {', '.join(folders[:3])} {'is a folder' if len(folders) == 1 else 'are folders'}"
                             f", not an image file: list the image files, or pass a folder on its own "
                             f"(embed({folders[0]!r}) reads every image under it)")
        missing = [str(p) for p in files if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"no such image file: {', '.join(missing[:3])}")
        return decode_images(files, self.size, mode=self.mode, invert=self.invert)

    @staticmethod
    def files(folder: str | Path) -> list[Path]:
        """The image files :meth:`embed` reads from ``folder``, in its order."""
        from studylib.data.readers import IMAGE_EXTENSIONS
        return sorted(p for p in Path(folder).rglob("*") if p.is_file() and not p.name.startswith(".")
                      and p.suffix.lower() in IMAGE_EXTENSIONS)

    # ---------------------------------------------------------------------------------------------- features
    def _features(self, images: Any, fn: Callable[[torch.Tensor], torch.Tensor], batch_size: int,
                  what: str = "images") -> torch.Tensor:
        from studylib.evaluation import extract_features
        x = self.images(images, what)
        return extract_features(fn, x, self.transform, batch_size=batch_size, device=self.device,
                                progress=False).cpu()

    def embed(self, images: Any, batch_size: int = 256) -> torch.Tensor:
        """``[N, D]`` float32 embeddings (the method's evaluation features, before CL2N) of ``images``."""
        return self._features(images, self.method.features, batch_size)

    def cl2n(self, feats: torch.Tensor) -> torch.Tensor:
        """CL2N with the training centre (as the study's evaluation), or the features unchanged without one."""
        from studylib.evaluation import cl2n
        return feats if self.cl2n_mean is None else cl2n(feats, self.cl2n_mean.cpu())

    # -------------------------------------------------------------------------------------------- classify
    def classify(self, support: Any, support_labels: Sequence[Any], query: Any,
                 classifier: str | Callable[..., torch.Tensor] = "nearest_centroid", cl2n: bool = True,
                 batch_size: int = 256) -> Prediction:
        """Classify ``query`` images by the labelled ``support`` images (one few-shot episode).

        Args:
            support, query: images as :meth:`embed` takes them (for folders the order is :meth:`files`).
            support_labels: one label per support image (any hashable: ints, class names); every class needs
                the same number of support images.
            classifier: a registered name (:data:`studylib.evaluation.CLASSIFIERS`), a classifier callable, or
                ``"spe"`` for an SPE model.
            cl2n: centre with the training mean and L2-normalise first (the study's protocol; ignored for SPE).
        """
        from studylib.evaluation import get_classifier
        labels = list(support_labels)
        classes = sorted(set(labels), key=lambda c: (str(type(c)), c))
        if len(classes) < 2:
            raise ValueError(f"the support set needs at least 2 classes, got {classes}")
        if classifier == "spe":
            if not hasattr(self.method, "gaussian_features"):
                raise ValueError(f"classifier 'spe' needs an SPE model; this one is {type(self.method).__name__}")
            s = self._features(support, self.method.gaussian_features, batch_size, "support")
            q = self._features(query, self.method.gaussian_features, batch_size, "query")
            fn = self.method.classifier()
        else:
            _, fn = get_classifier(classifier)
            s = self._features(support, self.method.features, batch_size, "support")  # = embed, named in messages
            q = self._features(query, self.method.features, batch_size, "query")
            if cl2n:
                s, q = self.cl2n(s), self.cl2n(q)
        if s.shape[0] != len(labels):
            raise ValueError(f"{s.shape[0]} support images but {len(labels)} support labels")
        counts = {c: labels.count(c) for c in classes}
        if len(set(counts.values())) != 1:
            raise ValueError(f"every class needs the same number of support images (the classifiers take "
                             f"[ways, shots] episodes); got {counts}")
        order = [[i for i, y in enumerate(labels) if y == c] for c in classes]
        shaped = s[torch.tensor(order)][None]  # [1, w, n, D]
        with torch.no_grad():
            scores = fn(shaped.to(self.device), q[None].to(self.device))[0].cpu()
        return Prediction([classes[i] for i in scores.argmax(-1).tolist()], scores, classes)


# -------------------------------------------------------------------------------------------------- loading
def _store_root(store: Any) -> Path:
    """The folder of ``store``: a :class:`RunStore`, a folder (str or Path), or None (the study's run store)."""
    from studylib.training.runstore import RunStore
    if store is None:
        return RunStore().root
    if isinstance(store, RunStore):
        return store.root
    return Path(store)  # (not getattr(store, "root"): a Path's .root is "/")


def _read_config(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _differences(folders: list[Path]) -> list[str]:
    """The configuration keys (flattened, ``train.lr``) whose values differ between the runs, seed left out."""
    flats = [_flat(_read_config(f)) for f in folders]
    keys = sorted({k for fl in flats for k in fl})
    return [k for k in keys if k not in ("train.seed", "method_options.seed") and len(
        {json.dumps(fl.get(k), sort_keys=True, default=str) for fl in flats}) > 1]


MAX_LISTED = 8  # candidates an ambiguity error lists (the message stays within 10 lines)


def _call(run: Any, store: Any, **kw: Any) -> str:
    args = [repr(str(run))] + [f"{k}={v!r}" for k, v in kw.items() if v is not None]
    if store is not None:
        args.append(f"store={str(_store_root(store))!r}")
    return f"api.load_run({', '.join(args)})"


def _data_arg(ident: Any, others: list[Any]) -> str:
    """The shortest name of ``ident``'s data that no other candidate's data shares: its folder's name, else
    its label (name and content hash)."""
    label = ident.data
    short = label.rsplit(" #", 1)[0] if " #" in label else label
    if short and all(o.data == label or short.lower() not in (k.lower() for k in o.data_keys) for o in others):
        return short
    return label


def _ambiguous(run: Any, store: Any, root: Path, matches: list[Path], asked: dict[str, Any]) -> LookupError:
    """The error for a name that matches several runs: at most 10 lines, the candidates by what differs
    (notebook, method, data, seed; else the parameters) and the exact call that loads each."""
    from studylib.results import identity
    ids = [identity(m) for m in matches]
    order = sorted(range(len(ids)), key=lambda k: (ids[k].notebook, ids[k].method, ids[k].data,
                                                   -1 if ids[k].seed is None else ids[k].seed, ids[k].folder))
    ids, matches = [ids[k] for k in order], [matches[k] for k in order]
    fields = [f for f in ("notebook", "method", "data", "seed") if len({getattr(i, f) for i in ids}) > 1]
    keys = [tuple(getattr(i, f) for f in fields) for i in ids]
    rest = _differences(matches) if len(set(keys)) < len(ids) else []
    what = ", ".join([*fields, *([f"parameters ({', '.join(rest[:4])}{', ...' if len(rest) > 4 else ''})"]
                                 if rest else [])]) or "nothing but their folders"
    asked_text = "".join(f", {k}={v!r}" for k, v in asked.items() if v is not None)
    lines = [f"{str(run)!r}{asked_text} names {len(matches)} runs in {root}; they differ in {what}:"]
    for i, m, key in list(zip(ids, matches, keys))[:MAX_LISTED]:
        label = " · ".join(f"seed {i.seed}" if f == "seed" else str(getattr(i, f)) for f in fields)
        if fields and keys.count(key) == 1:
            kw = {k: v for k, v in asked.items() if v is not None}
            kw.update({f: getattr(i, f) for f in ("method", "seed") if f in fields})
            if "data" in fields:
                kw["data"] = _data_arg(i, [j for j in ids if j is not i])
            call = _call(i.notebook if "notebook" in fields else run, store,
                         **{k: kw.get(k) for k in ("method", "data", "seed")})
        else:  # told apart only by other parameters: the run's folder
            flat = _flat(_read_config(m))
            label = ", ".join(filter(None, [label, *(f"{k}={flat.get(k)!r}" for k in rest[:2])])) or m.name
            call = _call(m.name, store)
        lines.append(f"  {label}: {call}")
    if len(matches) > MAX_LISTED:
        lines.append(f"  ... and {len(matches) - MAX_LISTED} more (./study results --per-seed lists them all)")
    return LookupError("\n".join(lines))


def _matches_data(path: Path, data: Any) -> bool:
    """Whether the run at ``path`` trained on ``data``: a data set (its content hash), or a name (the folder's
    name or path, a registered data set's name, or at least 6 leading hex digits of the content hash)."""
    from studylib.results import identity
    if isinstance(data, FewShotDataset):
        digest = data.__dict__.get("_content_hash") or data.content_hash()
        data.__dict__["_content_hash"] = digest
        return (_read_config(path).get("data") or {}).get("content_sha256") == digest
    want = str(data).strip().lower().lstrip("#")
    keys = [k.lower() for k in identity(path).data_keys]
    return any(want == k or (len(want) >= 6 and all(c in "0123456789abcdef" for c in want) and k.startswith(want))
               or want == str(Path(k).resolve()).lower() for k in keys)


def _readable(run: str) -> dict[str, Any] | None:
    """``notebook · method · data · seed N`` (a run's display name, as ./study results shows it) as filters."""
    parts = [p.strip() for p in str(run).split("·")]
    if len(parts) != 4 or not parts[3].startswith("seed "):
        return None
    try:
        seed = int(parts[3][5:])
    except ValueError:
        return None
    return {"notebook": parts[0], "method": parts[1], "data": parts[2], "seed": seed}


def _find_run(run: Any, store: Any, seed: int | None = None, method: str | None = None, data: Any = None) -> Path:
    if hasattr(run, "run") and hasattr(run, "spec"):  # an Outcome
        return Path(run.run.path)
    path = Path(run)
    if path.is_dir():
        return path
    if path.is_file():  # a file of a run (weights.pt, config.json...): the run that holds it
        for folder in path.resolve().parents:
            if (folder / "config.json").is_file() and (folder / "weights.pt").is_file():
                return folder
        raise FileNotFoundError(f"{path} is a file, not a run: pass its run folder (the folder holding config.json and "
                                f"weights.pt), a run name from ./study results, or use api.load_weights(file, spec)")
    root = _store_root(store)
    name = str(run)
    if not name.strip() or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        # a path that names no folder here: never looked up in the store (no name there holds a separator)
        raise FileNotFoundError(f"no run folder {name!r}: pass a run folder that exists, or a run name or prefix "
                                f"from ./study results (names hold no '/')")
    if (root / name).is_dir():
        return root / name
    readable = _readable(name)
    prefix = readable["notebook"] if readable else name
    if readable:
        seed = readable["seed"] if seed is None else seed
        method = readable["method"] if method is None else method
        data = readable["data"] if data is None else data
    # the text is a prefix, never a pattern: '*', '?', '[' and '**' match themselves
    matches = sorted(p for p in root.glob(f"{glob.escape(prefix)}*") if p.is_dir() and not p.name.startswith(".")) \
        if root.is_dir() else []
    named = list(matches)
    if seed is not None:
        matches = [p for p in matches if (_read_config(p).get("train") or {}).get("seed") == seed]
    if method is not None:
        matches = [p for p in matches if str(_read_config(p).get("method", "")).lower() == str(method).lower()]
    if data is not None and (not isinstance(data, FewShotDataset) or len(matches) > 1):
        matches = [p for p in matches if _matches_data(p, data)]
    if len(matches) == 1:
        return matches[0]
    asked = {"method": method, "data": data if not isinstance(data, FewShotDataset) else None, "seed": seed}
    if len(matches) > 1:
        raise _ambiguous(run if not readable else prefix, store, root, matches, asked)
    what = ", ".join(f"{k}={v!r}" for k, v in asked.items() if v is not None)
    there = ""
    if named and what:  # the name exists: say what its runs are
        from studylib.results import identity
        ids = [identity(p) for p in named[:200]]
        there = (f"; the runs of {prefix!r} have method {', '.join(sorted({i.method for i in ids}))}; data "
                 f"{', '.join(sorted({i.data for i in ids}))}; seed "
                 f"{', '.join(str(x) for x in sorted({i.seed for i in ids if i.seed is not None}))}")
    raise FileNotFoundError(f"no run {str(run)!r}{' with ' + what if what else ''} (a run folder, or a run name or "
                            f"prefix in {root}){there}; ./study results lists the runs")


def spec_from_config(config: dict[str, Any], name: str = "run") -> Any:
    """The :class:`RunSpec` a training run's ``config.json`` describes (its evaluation protocol is the default)."""
    from studylib.runs.runner import DataSpec, RunSpec
    from studylib.training.loop import TrainConfig
    data = config.get("data") or {}
    if "content_sha256" in data:
        dspec = DataSpec("memory", None, {"content": data["content_sha256"]})
    else:
        dspec = DataSpec(data.get("name", "glyphs"), data.get("root"), dict(data.get("options") or {}))
    train = {k: v for k, v in (config.get("train") or {}).items() if k in TrainConfig.__dataclass_fields__}
    return RunSpec(name=name, data=dspec, backbone=config["backbone"],
                   backbone_options=dict(config.get("backbone_options") or {}), method=config["method"],
                   method_options=dict(config.get("method_options") or {}), augment=config.get("augment", "none"),
                   augment_options=dict(config.get("augment_options") or {}), train=TrainConfig(**train))


def _stats_from_data(spec: Any, data: FewShotDataset | None) -> tuple[dict[str, Any], torch.Tensor | None, bool]:
    """``(stats, None, False)`` from the run's data set (for runs without ``inference.json``)."""
    from studylib.runs.runner import data_stats
    if data is None:
        if spec.data.name in ("memory", "folder"):
            raise ValueError("this run was trained on your own data and has no inference.json (it was evaluated "
                             "before that file existed): pass the data set, load_run(..., data=dataset)")
        data = spec.data.load()
    return data_stats(data), None, False


def _model(spec: Any, weights: dict[str, torch.Tensor], stats: dict[str, Any], cl2n_mean: torch.Tensor | None,
           path: Path | None, device: str | torch.device, compute_mean_from: FewShotDataset | None,
           preprocessing: dict[str, Any] | None = None) -> EmbeddingModel:
    from studylib.runs.runner import build_parts_from
    method, transform = build_parts_from(spec, stats)
    method.load_state_dict(weights)
    model = EmbeddingModel(method, transform, stats, cl2n_mean, spec, path, device, preprocessing)
    if cl2n_mean is None and compute_mean_from is not None:
        from studylib.runs.runner import mean_subset
        train = mean_subset(compute_mean_from["train"], None)  # all training images, as EvalSpec(mean_images=None)
        model.cl2n_mean = model.embed(train.images).mean(0).to(model.device)
    return model


def load_run(run: Any, store: Any = None, data: FewShotDataset | str | None = None,
             device: str | torch.device = "cpu", seed: int | None = None,
             method: str | None = None) -> EmbeddingModel:
    """A finished training run as an :class:`EmbeddingModel`.

    ``api.load_run("90_use_your_data", method="pn", data="my-images", seed=0)`` picks one run of a notebook
    by what it is; so does its display name from ``./study results`` or the notebook's runs table
    (``"90_use_your_data · pn · my-images #4ee98151 · seed 0"``).

    Args:
        run: a run folder, a run folder's name or a prefix of it in ``store`` (a notebook's name or number
            names all its runs), a run's display name, or an ``Outcome``.
        store: a :class:`RunStore` or folder (default: the study's run store).
        data: which data the run trained on: a name (a folder's name or path, a registered data set's name, or
            leading hex digits of the content hash ``./study results`` shows after ``#``), or the data set itself
            (also needed for runs on your own data that have no ``inference.json``).
        device: where to run the model.
        seed: the training seed.
        method: the method (``nca``, ``pn``, ``spe`` ...: the ``method`` column of ``./study results``).

    Raises:
        LookupError: the name matches several runs: at most 10 lines listing them by what differs, each with
            the exact call that loads it.
        FileNotFoundError: no such run, a file that is not inside a run, or a folder that is not a run (no
            ``config.json``). A name is a name or prefix, never a pattern: ``*``, ``?``, ``[`` and ``**`` match
            themselves, and a text holding ``/`` is only ever a folder.
    """
    from studylib.training.runstore import CONFIG, WEIGHTS, Run, RunFileError
    path = _find_run(run, store, seed, method, data)
    r = Run(path, {})
    if not (path / CONFIG).is_file():
        raise FileNotFoundError(f"{path} is not a run folder (it holds no {CONFIG}): pass a run folder of the run "
                                f"store, or a run name or prefix from ./study results")
    if not r.finished or not r.has(WEIGHTS):
        raise RunFileError(path, f"is not a finished training run (status {r.status}, "
                                 f"weights.pt {'present' if r.has(WEIGHTS) else 'missing'})",
                           "Train it to the end first (re-run the notebook), or pick a finished run from "
                           "./study results --status finished")
    config = json.loads(r.read_bytes(CONFIG))
    record = json.loads(r.read_bytes("inference.json")) if r.has("inference.json") else None
    spec = spec_from_config(config, (record or {}).get("name", path.name.rsplit("-", 1)[0]))
    if not isinstance(data, FewShotDataset):
        data = None  # a name only chose the run
    if isinstance(data, FewShotDataset):
        from studylib.runs.runner import DataSpec
        spec.data = DataSpec.of(data)
    from studylib.runs.runner import preprocessing
    if record is not None:
        mean = record.get("cl2n_mean")
        stats, cl2n_mean, need = record, (torch.tensor(mean) if mean is not None else None), False
    else:
        stats, cl2n_mean, _ = _stats_from_data(spec, data)
        need = True
    dataset = (data if data is not None else spec.data.load()) if need else None
    prep = (record or {}).get("preprocessing")
    if prep is None and dataset is not None:
        prep = preprocessing(dataset)
    elif prep is None:
        mode = "RGB" if int(stats["in_channels"]) == 3 else "L"
        warnings.warn(f"run {path.name} has no preprocessing record (stored before it existed): image files are "
                      f"decoded as {mode}, uninverted, at {int(stats['size'])} px; if its reader inverted them "
                      f"(Omniglot), pass the images as tensors from the reader", stacklevel=2)
    return _model(spec, r.load_tensor(WEIGHTS), stats, cl2n_mean, path, device, dataset, prep)


def load_weights(weights: str | Path | dict[str, torch.Tensor], spec: Any, data: FewShotDataset | None = None,
                 device: str | torch.device = "cpu") -> EmbeddingModel:
    """An :class:`EmbeddingModel` from a ``weights.pt`` (file or state dict) and the ``RunSpec`` that trained it;
    the transform and CL2N centre come from ``data`` (default: the spec's data set)."""
    state = torch.load(weights, map_location="cpu", weights_only=True) if isinstance(weights, (str, Path)) \
        else weights
    dataset = data if data is not None else spec.data.load()
    from studylib.runs.runner import data_stats, preprocessing
    return _model(spec, state, data_stats(dataset), None, None, device, dataset, preprocessing(dataset))


__all__ = ["EmbeddingModel", "Prediction", "load_run", "load_weights", "spec_from_config"]
