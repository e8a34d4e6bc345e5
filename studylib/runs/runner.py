"""Run one configuration end to end — data, backbone, method, training, evaluation — through the run store.

A :class:`RunSpec` is everything that determines a result. Training and evaluation are cached separately:
the trained weights live in the run folder named by the hash of the training configuration
(:meth:`RunSpec.config`: everything but the test protocol), and each evaluation protocol's results in a
sub-folder ``eval-<hash of RunSpec.eval_config()>`` of it, so a new evaluation protocol reuses the trained
weights. :func:`run_spec` trains only what has not been trained (an interrupted run resumes from its
checkpoint) and evaluates only what has not been evaluated; :func:`run_sweep` does this for a list of specs (a
sweep killed half-way continues where it stopped).

Every parameter, training and evaluation alike, is checked against the data before training starts
(:func:`check_protocol`); a model whose features are non-finite or all identical (a diverged run) fails
instead of storing chance accuracies; nothing non-finite is stored as a result.
"""

from __future__ import annotations

import inspect
import math
import os
import sys
import time
import warnings
import weakref
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch

from studylib import progress as progress_display
from studylib.data import load_dataset
from studylib.data.base import DataError, FewShotDataset, ImageSplit
from studylib.data.samplers import check_episode
from studylib.methods import method_version
from studylib.methods.base import Method
from studylib.provenance import count_reused, made_here
from studylib.training import distributed
from studylib.training.loop import Diverged, TrainConfig, build_sampler, config_dict, train
from studylib.training.runstore import WEIGHTS, Run, RunFileError, RunStore, provenance
from studylib.utils import get_device, kill_point

if TYPE_CHECKING:
    from studylib.training.runlock import RunLock

# Bump when a change to the runner alters results or the run layout, so stale runs are not reused.
# 2: training and evaluation cached separately (eval-<hash>/ sub-folders), checksummed files.
RUNNER_VERSION = "2"
ACCURACIES = "episode_accuracies.pt"


CONTENT_HASHED = ("folder", "memory")  # data sets whose run configuration holds a hash of their content


@dataclass
class DataSpec:
    """Which data set and how to load it (see :func:`studylib.data.load_dataset`).

    * A registered data set: ``DataSpec("mini_imagenet", "data/mini-imagenet", {"size": 84})`` (a relative
      root is taken relative to the repository root).
    * Your own folder: ``DataSpec("folder", "/my/images", {"split": "random", "size": 84})`` with ``split``
      ``"given"`` (``root/{train,val,test}/<class>/``), ``"random"`` (``root/<class>/``, seeded class-disjoint
      split) or ``"alphabet"`` (``root/<superclass>/<class>/``, whole superclasses per split); see
      :func:`studylib.data.readers.load_image_folder`.
    * Tensors in memory: ``DataSpec.of(dataset)`` for a :class:`FewShotDataset`, or pass the dataset itself
      as ``RunSpec(data=dataset)``.

    What enters the run's hash (:meth:`config`): for registered data sets ``(name, root, options)`` as given;
    for ``folder`` and in-memory data only the SHA-256 of the loaded arrays, labels, class names and split
    assignment (:meth:`FewShotDataset.content_hash`), so two different data sets never share a run and the
    same data always does, wherever it lies and however it was loaded.
    """

    name: str = "glyphs"
    root: str | None = None
    options: dict[str, Any] = field(default_factory=dict)  # size, rgb, split, max_classes, rotations, ...

    @classmethod
    def of(cls, dataset: FewShotDataset) -> "DataSpec":
        """The spec of an in-memory data set (registered, so :func:`load_dataset` finds it in this process)."""
        from studylib.data import register_dataset
        spec = cls("memory", None, {"content": register_dataset(dataset)})
        spec._dataset = dataset  # type: ignore[attr-defined]  # travels with the spec when pickled
        return spec

    def load(self) -> FewShotDataset:
        """The data set (generated, read or from memory); kept in memory by :func:`load_dataset`."""
        dataset = getattr(self, "_dataset", None)
        if dataset is not None:  # (re-)register it, e.g. in a worker process the spec was pickled to
            from studylib.data import register_dataset
            register_dataset(dataset, digest=self.options.get("content"))
            return dataset
        return load_dataset(self.name, self.root, **self.options)

    def config(self) -> dict[str, Any]:
        """What the run's hash sees of the data (see the class docstring)."""
        if self.name not in CONTENT_HASHED:
            return {"name": self.name, "root": self.root, "options": dict(self.options)}
        digest = self.options.get("content") if self.name == "memory" else None
        if digest is None:
            dataset = self.load()
            digest = dataset.__dict__.get("_content_hash")  # memo: load_dataset returns the same object
            if digest is None:
                digest = dataset.__dict__["_content_hash"] = dataset.content_hash()
        return {"content_sha256": digest}


@dataclass
class EvalSpec:
    """Few-shot evaluation protocol (seed 000 Sec. 3.1: 5-way, 15 queries, CL2N, nearest centroid)."""

    ways: int = 5
    shots: list[int] = field(default_factory=lambda: [1, 5])
    queries: int = 15
    episodes: int = 1000
    classifiers: list[str] = field(default_factory=lambda: ["nearest_centroid"])
    cl2n: bool = True
    split: str = "test"
    val_episodes: int = 300
    val_shots: int = 1
    val_classifier: str = "nearest_centroid"
    seed: int = 0  # base seed of the test episodes; each training seed draws its own (episodes.episode_seed)
    mean_images: int | None = None  # CL2N centre from a fixed subset of this many training images (None: all)

    def check(self) -> None:
        """Rules that need no data (the notebook parameter is named in brackets)."""
        from studylib.evaluation import get_classifier
        if self.ways < 2:
            raise ValueError(f"evaluation ways (eval_ways) must be >= 2, got {self.ways}: a 1-way episode is always "
                             f"right")
        if not self.shots or min(self.shots) < 1:
            raise ValueError(f"evaluation shots (eval_shots) must be a non-empty list of counts >= 1, got {self.shots}")
        if self.queries < 1:
            raise ValueError(f"evaluation queries per class (eval_queries) must be >= 1, got {self.queries}: accuracy "
                             f"is measured on the queries")
        if self.episodes < 1:
            raise ValueError(f"evaluation episodes (eval_episodes) must be >= 1, got {self.episodes}")
        if not self.classifiers:
            raise ValueError("no evaluation classifier given (classifiers); e.g. ['nearest_centroid']")
        for c in self.classifiers:
            get_classifier(c)
        if self.val_episodes < 0:
            raise ValueError(f"val_episodes must be >= 0 (0: no validation), got {self.val_episodes}")
        if self.val_episodes > 0:
            if self.val_shots < 1:
                raise ValueError(f"val_shots must be >= 1, got {self.val_shots}")
            get_classifier(self.val_classifier)

    def validation_config(self) -> dict[str, Any]:
        """The part of the protocol training uses (per-epoch validation, early stopping)."""
        if self.val_episodes <= 0:
            return {"val_episodes": 0}
        d = {"ways": self.ways, "queries": self.queries, "cl2n": self.cl2n, "val_episodes": self.val_episodes,
             "val_shots": self.val_shots, "val_classifier": self.val_classifier, "seed": self.seed}
        return d if self.mean_images is None else {**d, "mean_images": self.mean_images}

    def test_config(self) -> dict[str, Any]:
        """The final evaluation's protocol (order-free: every shot count and classifier sees the same episodes)."""
        d = {"ways": self.ways, "shots": sorted(set(self.shots)), "queries": self.queries,
             "episodes": self.episodes, "classifiers": sorted(set(self.classifiers)), "cl2n": self.cl2n,
             "split": self.split, "seed": self.seed, "episode_seeds": "per training seed"}
        return d if self.mean_images is None else {**d, "mean_images": self.mean_images}


@dataclass
class RunSpec:
    """A full experiment configuration; ``name`` only prefixes the run folder."""

    name: str
    data: DataSpec = field(default_factory=DataSpec)
    backbone: str = "conv4"
    backbone_options: dict[str, Any] = field(default_factory=dict)
    method: str = "nca"
    method_options: dict[str, Any] = field(default_factory=dict)
    augment: str = "standard"
    augment_options: dict[str, Any] = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalSpec = field(default_factory=EvalSpec)

    def __post_init__(self) -> None:
        if isinstance(self.data, FewShotDataset):  # tensors in memory are a data spec too
            self.data = DataSpec.of(self.data)

    def config(self) -> dict[str, Any]:
        """What the training run's hash is computed from: everything but the final evaluation's protocol
        (the validation protocol stays: it is logged during training and drives early stopping)."""
        d = asdict(self)
        d["data"] = self.data.config()
        d["train"] = config_dict(self.train)
        d["validation"] = self.eval.validation_config()
        d["runner_version"] = RUNNER_VERSION
        d["data_version"] = data_version_of(self.data)
        version = method_version(self.method)
        if version != 1:  # a method whose training changed: its older runs are not this configuration
            d["method_version"] = version
        d.pop("name")
        d.pop("eval")
        return d

    def eval_config(self) -> dict[str, Any]:
        """What an evaluation's hash (inside the training run's folder) is computed from."""
        return {**self.eval.test_config(), "runner_version": RUNNER_VERSION}

    def check(self) -> None:
        """The checks that need no data: :meth:`TrainConfig.check` and :meth:`EvalSpec.check`."""
        self.train.check()
        self.eval.check()


def data_version(name: str) -> str:
    """Version of the code that produces a data set's arrays: a generator change must not reuse old runs."""
    if name == "glyphs":
        from studylib.data.glyphs import GENERATOR_VERSION
        return f"glyphs-{GENERATOR_VERSION}"
    if name == "synthfs":
        from studylib.data.synthfs import GENERATOR_VERSION as SYNTHFS_VERSION
        return f"synthfs-{SYNTHFS_VERSION}"
    if name in CONTENT_HASHED:
        return "content"  # the data's own hash is in the configuration
    return name


def data_version_of(data: "DataSpec") -> str:
    """:func:`data_version`, plus the stand-in writer's version when ``data.root`` is a ``standin:`` folder."""
    from studylib.data.standins import STANDIN_VERSION, is_standin
    v = data_version(data.name)
    return f"{v}+standin-{STANDIN_VERSION}" if is_standin(data.root) else v


@dataclass
class Outcome:
    """A finished run: its training folder (``run``: weights, metrics), its evaluation (``evaluation``: the
    ``eval-<hash>`` sub-folder of ``spec.eval``'s protocol), the evaluation's ``result``, per-step metrics and
    per-episode accuracies."""

    spec: RunSpec
    run: Run
    result: dict[str, Any]
    evaluation: Run | None = None

    @property
    def metrics(self) -> list[dict[str, Any]]:
        return self.run.metrics

    def accuracies(self, classifier: str = "nearest_centroid", shots: int = 1) -> torch.Tensor:
        """``[E]`` per-episode accuracies on the evaluation split."""
        return (self.evaluation or self.run).load_tensor(ACCURACIES)[f"{classifier}/{shots}"]

    def summary(self, classifier: str = "nearest_centroid", shots: int = 1) -> tuple[float, float]:
        r = self.result["test"][f"{classifier}/{shots}"]
        return r["mean"], r["ci95"]


# Per-image-tensor memo of normalisation(): load_dataset returns the same data set (and tensors) to every run of a
# process, and each run asks twice (its model's and its inference record's normalisation); at 224 px that was 20 s
# of notebook 07's check run. Keyed by the tensor's id, checked to be that very tensor (a weak reference, so the
# memo does not keep a data set alive, and the entry goes with the tensor) and against its in-place version
# counter, so a tensor modified in place is measured again. (A WeakKeyDictionary cannot hold tensors: it
# compares keys with ==, which is element-wise for tensors.)
_NORMALISATION: dict[int, tuple[weakref.ref, int, list[float], list[float]]] = {}


def normalisation(split: ImageSplit) -> tuple[list[float], list[float]]:
    """Per-channel mean and std of a split's pixels in [0, 1] (used to normalise network inputs)."""
    images = split.images
    key = id(images)
    hit = _NORMALISATION.get(key)
    if hit is not None and hit[0]() is images and hit[1] == images._version:
        return list(hit[2]), list(hit[3])
    x = images[: min(len(split), 20000)].float().div_(255)
    mean, std = x.mean(dim=(0, 2, 3)).tolist(), x.std(dim=(0, 2, 3)).clamp_min(1e-3).tolist()
    _NORMALISATION[key] = (weakref.ref(images, lambda _, key=key: _NORMALISATION.pop(key, None)),
                           images._version, mean, std)
    return list(mean), list(std)


INFERENCE = "inference.json"  # in the training run: what rebuilding the model without its data needs


def data_stats(dataset: FewShotDataset) -> dict[str, Any]:
    """What building a run's model and evaluation transform needs from its data: the training split's image
    size, channels, class count and per-channel normalisation (:func:`normalisation`)."""
    train_split = dataset["train"]
    mean, std = normalisation(train_split)
    return {"size": int(train_split.images.shape[-1]), "in_channels": int(train_split.images.shape[1]),
            "num_classes": int(train_split.num_classes), "mean": mean, "std": std}


PREPROCESSING_VERSION = 1  # bump when the meaning of a preprocessing record's keys changes


def preprocessing(dataset: FewShotDataset) -> dict[str, Any]:
    """How the run's images were decoded and normalised, so that image files can be read exactly as training saw
    them (:mod:`studylib.api`).

    The reader states its decoding in ``dataset.info["decode"]`` (``mode``: ``"L"`` or ``"RGB"``, ``invert``:
    whether ``255 - pixel`` was stored, e.g. Omniglot's white ink on black); data sets that state none (generated
    sets, tensors, pickled arrays) are taken as decoded in the mode their channel count implies, uninverted.

    Returns:
        ``{"version", "mode", "channels", "invert", "size", "resize", "mean", "std"}``: every image is decoded
        in ``mode``, inverted when ``invert``, resized straight to ``size x size`` (bilinear, antialiased, no
        crop), then scaled to [0, 1] and normalised per channel, ``(x - mean) / std``.
    """
    train_split = dataset["train"]
    channels = int(train_split.images.shape[1])
    decode = dict(dataset.info.get("decode") or {}) if isinstance(dataset.info, dict) else {}
    mode = str(decode.get("mode", "RGB" if channels == 3 else "L"))
    if (mode == "RGB") != (channels == 3):
        raise ValueError(f"{dataset.name}: the reader says it decoded in mode {mode!r} but the training images "
                         f"have {channels} channel(s)")
    mean, std = normalisation(train_split)
    return {"version": PREPROCESSING_VERSION, "mode": mode, "channels": channels,
            "invert": bool(decode.get("invert", False)), "size": int(train_split.images.shape[-1]),
            "resize": "bilinear, antialiased, straight to size x size (no crop)", "mean": mean, "std": std}


def build_parts(spec: RunSpec, dataset: FewShotDataset) -> tuple[Method, Callable[[torch.Tensor], torch.Tensor]]:
    """The method (backbone, heads, training augmentation) and the evaluation transform of ``spec``."""
    return build_parts_from(spec, data_stats(dataset), train_labels=dataset["train"].labels)


def build_parts_from(spec: RunSpec, stats: dict[str, Any], train_labels: torch.Tensor | None = None
                     ) -> tuple[Method, Callable[[torch.Tensor], torch.Tensor]]:
    """:func:`build_parts` from :func:`data_stats` (a run's ``inference.json``) instead of the data set
    (``train_labels``: the training split's labels, for methods that train on base classes per image)."""
    from studylib.data.augment import build_augment, eval_transform
    from studylib.methods import build_method
    from studylib.models import build_backbone

    size, mean, std = int(stats["size"]), list(stats["mean"]), list(stats["std"])
    torch.manual_seed(spec.train.seed)
    backbone = build_backbone(spec.backbone, in_channels=int(stats["in_channels"]), **spec.backbone_options)
    augment = build_augment(spec.augment, size=size, mean=mean, std=std, **spec.augment_options)
    # Context a method may need besides its own options (CE's classifier size, BECLR's second augmentation).
    context = {"num_classes": int(stats["num_classes"]), "size": size, "mean": mean, "std": std}
    if train_labels is not None:
        context["train_labels"] = train_labels  # InfoPatch's global loss: the base class of every image
    method = build_method(spec.method, backbone=backbone, augment=augment,
                          **_accepted(spec.method, context), **spec.method_options)

    def transform(x: torch.Tensor) -> torch.Tensor:
        return eval_transform(x, size=size, mean=mean, std=std)

    return method, transform


def save_inference_record(run: Run, spec: RunSpec, dataset: FewShotDataset,
                          cl2n_mean: torch.Tensor | None) -> None:
    """Write the training run's ``inference.json`` once (:mod:`studylib.api` rebuilds the model from it and
    ``config.json`` without the data): :func:`data_stats`, the spec's ``name``, the ``data`` it trained on by
    name (``{"name", "root", "dataset"}``: the run's display name, :func:`studylib.results.identity`), the CL2N centre (the mean
    training feature the evaluation used, with its ``eval_mean_images``) and the :func:`preprocessing` record
    (how the training images were decoded; :mod:`studylib.api` decodes files the same way)."""
    if run.has(INFERENCE):
        return
    import json
    record = {**data_stats(dataset), "preprocessing": preprocessing(dataset), "name": spec.name,
              # which data, by name (the configuration of folder and in-memory data holds only their hash)
              "data": {"name": spec.data.name, "root": spec.data.root, "dataset": dataset.name},
              "cl2n": spec.eval.cl2n,
              "cl2n_mean_images": spec.eval.mean_images,
              "cl2n_mean": cl2n_mean.detach().float().cpu().tolist() if cl2n_mean is not None else None}
    run.write_bytes(INFERENCE, json.dumps(record).encode())


def _accepted(method: str, context: dict[str, Any]) -> dict[str, Any]:
    """The items of ``context`` that the registered factory of ``method`` takes as keyword arguments."""
    from studylib.methods import METHODS
    factory = METHODS.get(method)
    if factory is None:
        return {}
    params = inspect.signature(factory).parameters
    named = {n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    return {k: v for k, v in context.items() if k in named}


def features_of(method: Method, split: ImageSplit, transform: Callable[[torch.Tensor], torch.Tensor],
                device: torch.device, progress: bool = False) -> torch.Tensor:
    """``[N, D]`` float32 evaluation features of a whole split (extracted once)."""
    from studylib.evaluation import extract_features
    return extract_features(method.features, split.images, transform, device=device, progress=progress)


def mean_subset(split: ImageSplit, images: int | None, seed: int = 0) -> ImageSplit:
    """``split`` itself, or a fixed seeded subset of ``images`` of its images (the CL2N centre of a cut run)."""
    if images is None or images >= len(split):
        return split
    sub = torch.randperm(len(split), generator=torch.Generator().manual_seed(seed))[:images]
    return ImageSplit(split.images[sub], split.labels[sub], split.class_names, name=split.name)


def make_validator(spec: RunSpec, dataset: FewShotDataset, transform: Callable[[torch.Tensor], torch.Tensor],
                   device: torch.device) -> Callable[[Method, int], dict[str, float]] | None:
    """Few-shot accuracy on the validation split, CL2N with the mean of a fixed subset of training features."""
    from studylib.evaluation import evaluate
    if "val" not in dataset.splits or spec.eval.val_episodes <= 0:
        return None
    val, train_split = dataset["val"], dataset["train"]
    n_mean = min(2000, spec.eval.mean_images or 2000)
    sub = torch.randperm(len(train_split), generator=torch.Generator().manual_seed(0))[:n_mean]
    train_sub = ImageSplit(train_split.images[sub], train_split.labels[sub], train_split.class_names,
                           name=train_split.name)

    def validate(method: Method, epoch: int) -> dict[str, float]:
        feats = features_of(method, val, transform, device)
        check_features(feats, f"validation split after epoch {epoch + 1}", spec)
        mean = features_of(method, train_sub, transform, device).mean(0) if spec.eval.cl2n else None
        res = evaluate(feats, val.labels, ways=spec.eval.ways, shots=[spec.eval.val_shots],
                       queries=spec.eval.queries, episodes=spec.eval.val_episodes,
                       classifier=[spec.eval.val_classifier], seed=spec.eval.seed, train_mean=mean)
        r = res[(spec.eval.val_classifier, spec.eval.val_shots)]
        return {"val_acc": r.mean, "val_ci95": r.ci95}

    return validate


def check_features(feats: torch.Tensor, what: str, spec: RunSpec) -> None:
    """Fail when a model's features cannot be evaluated: non-finite, or all identical (every prediction the
    same, so every accuracy exactly chance: the mark of a diverged run whose BatchNorm statistics blew up)."""
    bad = None
    if not bool(torch.isfinite(feats).all()):
        bad = "non-finite features"
    elif feats.shape[0] > 1 and bool((feats == feats[:1]).all()):
        bad = "identical features for every image (every prediction would be the same)"
    if bad:
        raise Diverged(f"the model of run {spec.name} gives {bad} on the {what}: training diverged (lr="
                       f"{spec.train.lr:g}). Lower lr (or set grad_clip / warmup_steps) and re-run; nothing was "
                       f"stored as finished")


def check_protocol(spec: RunSpec, dataset: FewShotDataset) -> None:
    """Check every parameter against the data before anything is trained: the training batches, the
    validation episodes and the final evaluation's episodes (splits, ways vs classes, images per class).

    An episode needs at least one support and one query image per class; a class too small for the request is
    named with its image count (:func:`studylib.data.samplers.check_episode`).

    Raises:
        ValueError / DataError: naming the parameter, what the data hold and the fix.
    """
    spec.check()
    if "train" not in dataset.splits:
        raise DataError(f"data set {dataset.name} has no 'train' split (it has {sorted(dataset.splits)})")
    build_sampler(spec.train, dataset["train"], labels_needed=False)
    ev = spec.eval
    if ev.split not in dataset.splits:
        raise DataError(f"evaluation split (eval_split) {ev.split!r} does not exist in {dataset.name}; it has "
                        f"{sorted(dataset.splits)}")
    if ev.val_episodes > 0 and "val" in dataset.splits:  # in the order the run would meet them
        val = dataset["val"]
        check_episode(ev.ways, ev.val_shots, ev.queries, val.class_counts(),
                      f"validation split {val.name} (ways={ev.ways}, val_shots={ev.val_shots}, queries={ev.queries})",
                      val.class_names)
    test = dataset[ev.split]
    check_episode(ev.ways, max(ev.shots), ev.queries, test.class_counts(),
                  f"evaluation split {test.name} (eval_ways={ev.ways}, eval_shots up to {max(ev.shots)}, "
                  f"eval_queries={ev.queries})", test.class_names)


def stored_outcome(spec: RunSpec, store: RunStore | None = None) -> Outcome | None:
    """The finished outcome of ``spec`` in the store (trained and evaluated under its protocol), or None.

    A damaged evaluation is reported (warning) and treated as not done, so the caller evaluates again.
    Nothing to delete: the evaluation is computed again from the weights and overwrites the damaged file.
    """
    store = store or RunStore()
    return stored_outcome_in(spec, store.run(spec.name, spec.config()))


class RunBusy(RuntimeError):
    """Another live process holds the run's lock (it is training this run) and waiting was not allowed."""


NO_WAIT_ENV = "STUDYLIB_NO_WAIT"  # "1": run_spec fails instead of waiting for a run another process trains
LOCK_POLL = 1.0  # seconds between looks at a busy run's lock


def resolve_no_wait(no_wait: bool | None) -> bool:
    if no_wait is not None:
        return bool(no_wait)
    return os.environ.get(NO_WAIT_ENV, "").strip().lower() in ("1", "true", "yes")


def take_run_lock(lock: "RunLock", run: Run, no_wait: bool, poll: float | None = None) -> bool:
    """Take ``run``'s lock, waiting (polling every ``poll`` s) while another live process holds it.

    One message (stderr) names the holder (host, pid, notebook) when the wait starts; a stale lock (dead owner,
    no heartbeat for ``lock.stale_after`` s) is taken over by :meth:`RunLock.acquire`.

    Returns:
        True when this call took the lock (the caller releases it); False when this process already holds it
        (a Ray task took it before calling :func:`run_spec`).

    Raises:
        RunBusy: ``no_wait`` and a live holder, named with the way to wait instead.
    """
    from studylib.training.runlock import describe_owner
    poll = LOCK_POLL if poll is None else poll
    announced = False
    while True:
        if lock.acquire():
            return True
        info = lock.owner()
        if info is None:  # released between the two looks
            continue
        if lock.held_by_this_process(info):
            return False
        if no_wait:
            raise RunBusy(f"run {run.path.name} is being trained by another process ({describe_owner(info)}; lock "
                          f"{lock.path}). Wait for it (no_wait=False, unset {NO_WAIT_ENV}) to reuse its result, or "
                          f"stop that process; a dead owner's lock is taken over automatically")
        if not announced:
            print(f"studylib: waiting for run {run.path.name}: another process trains it ({describe_owner(info)}); "
                  f"its result will be reused", file=sys.stderr, flush=True)
            announced = True
        time.sleep(poll)


def run_spec(spec: RunSpec, store: RunStore | None = None, stop_after: int | None = None,
             progress: bool | None = None, no_wait: bool | None = None) -> Outcome:
    """Train and evaluate ``spec``, reusing what the run store already holds.

    The trained weights are reused when the training configuration was trained before (whatever the
    evaluation protocol); the evaluation is reused when this protocol was evaluated on them. A damaged
    evaluation result is computed again from the weights (with a warning). Every parameter is checked against
    the data before training (:func:`check_protocol`).

    One trainer per run: the run's lock (``<store>/.locks/<run folder>.json``) is taken before training and held
    through the evaluation. When another live process holds it, this call waits for it (one message naming the
    holder), then finds the run finished and reuses it.

    Args:
        spec: the configuration.
        store: the run store (default ``<repo>/.cache/runs`` or ``$STUDYLIB_CACHE/runs``).
        stop_after: test hook, see :func:`studylib.training.loop.train`.
        progress: show the training bar (text, :mod:`studylib.progress`); None: on unless
            ``STUDYLIB_PROGRESS=0``.
        no_wait: raise :class:`RunBusy` instead of waiting for another process's run; None: ``$STUDYLIB_NO_WAIT``.
    """
    spec.check()
    store = store or RunStore()
    run = store.run(spec.name, spec.config())
    done = stored_outcome(spec, store)
    if done is not None:
        return done
    dataset = spec.data.load()
    check_protocol(spec, dataset)
    # The run's lock: one trainer per run, and "running" for ./study results.
    lock = run_lock(store, run) if distributed.is_main() else None
    took = lock is not None and take_run_lock(lock, run, resolve_no_wait(no_wait))
    try:
        if took:
            done = stored_outcome(spec, store)  # finished by the process we waited for
            if done is not None:
                return done
        return _train_and_evaluate(spec, store, run, dataset, stop_after, progress)
    finally:
        if took:
            lock.release()


def _train_and_evaluate(spec: RunSpec, store: RunStore, run: Run, dataset: FewShotDataset, stop_after: int | None,
                        progress: bool | None) -> Outcome:
    ev_run = run.child("eval", spec.eval_config())
    made_here(run.path, ev_run.path)  # this process's wall time holds them
    method, transform = build_parts(spec, dataset)
    device = get_device(spec.train.device)
    spec.train.progress = progress_display.resolve(progress)
    validate = make_validator(spec, dataset, transform, device)
    train(method, dataset["train"], spec.train, run, validate=validate, stop_after=stop_after)
    if not distributed.is_main():  # [dist] under torchrun rank 0 evaluates and writes the result; the others wait
        distributed.barrier()
        return Outcome(spec, run, ev_run.result(), ev_run)
    training = _training_record(run)
    _evaluate_into(spec, method, transform, dataset, device, run, ev_run,
                   {"train_seconds": training.get("train_seconds"), "training_run": run.path.name})
    distributed.barrier()  # [dist]
    return Outcome(spec, run, ev_run.result(), ev_run)  # read back: a fresh and a reused run give the same object


def _evaluate_into(spec: RunSpec, method: Method, transform: Callable[[torch.Tensor], torch.Tensor],
                   dataset: FewShotDataset, device: torch.device, run: Run, ev_run: Run,
                   extra: dict[str, Any], inference: bool = True) -> None:
    """Evaluate ``method`` under ``spec``'s protocol (features once, CL2N, the episodes of
    ``episode_seed(spec.eval.seed, spec.train.seed)``) and write ``ev_run``'s per-episode accuracies and result
    (``extra`` joins the result); ``inference``: write ``run``'s ``inference.json`` once (a trained run's)."""
    from studylib.evaluation import episode_seed, evaluate
    t0 = time.perf_counter()
    test = dataset[spec.eval.split]
    feats = features_of(method, test, transform, device)
    check_features(feats, f"evaluation split {spec.eval.split}", spec)
    mean = features_of(method, mean_subset(dataset["train"], spec.eval.mean_images), transform,
                       device).mean(0) if spec.eval.cl2n else None
    res = evaluate(feats, test.labels, ways=spec.eval.ways, shots=list(spec.eval.shots), queries=spec.eval.queries,
                   episodes=spec.eval.episodes, classifier=list(spec.eval.classifiers),
                   seed=episode_seed(spec.eval.seed, spec.train.seed), train_mean=mean)
    bad = [f"{c}/{s}" for (c, s), r in res.items() if not (math.isfinite(r.mean) and math.isfinite(r.ci95))]
    if bad:
        raise FloatingPointError(f"the evaluation of run {run.path.name} gave non-finite accuracies for {bad}; "
                                 f"nothing was stored")
    if inference:
        save_inference_record(run, spec, dataset, mean)
    ev_run.save_tensor(ACCURACIES, {f"{c}/{s}": r.accuracies.cpu() for (c, s), r in res.items()})
    kill_point("runner.before_result")
    result = {"test": {f"{c}/{s}": {"mean": r.mean, "ci95": r.ci95, "episodes": int(r.accuracies.numel())}
                       for (c, s), r in res.items()},
              "split": spec.eval.split, **extra, "eval_seconds": time.perf_counter() - t0, **provenance(device)}
    ev_run.save_result(result)


UNTRAINED = "untrained"  # name of the run folders of randomly initialised networks


def untrained_config(spec: RunSpec, method: Method) -> dict[str, Any]:
    """What the evaluation of ``spec``'s randomly initialised network ``method`` is keyed by: the data, the
    training seed (it picks the evaluation episodes) and what the features are computed from, identified by
    the SHA-256 of its initial weights. A method whose features are its backbone's (:meth:`Method.features` not
    overridden) is keyed by the backbone alone, so the models of one notebook that share a backbone and a seed
    (:func:`build_parts` seeds torch before building the backbone) share one evaluation; any other method by
    its whole configuration and weights. The training loop's settings are not part of it: a longer training of
    the same network reuses its untrained evaluation."""
    fn = type(method).features
    if fn is Method.features:  # features = backbone(x)
        who: dict[str, Any] = {"features": "backbone", "backbone": spec.backbone,
                               "backbone_options": dict(spec.backbone_options),
                               "weights_sha256": state_digest(method.backbone)}
    else:
        who = {"features": f"{fn.__module__}.{fn.__qualname__}", "backbone": spec.backbone,
               "backbone_options": dict(spec.backbone_options), "method": spec.method,
               "method_options": dict(spec.method_options), "weights_sha256": state_digest(method)}
    return {"untrained": True, "data": spec.data.config(), "data_version": data_version_of(spec.data),
            "seed": spec.train.seed, "runner_version": RUNNER_VERSION, **who}


def state_digest(module: torch.nn.Module) -> str:
    """SHA-256 of a module's parameters and buffers (names, dtypes, shapes and values, in name order)."""
    import hashlib
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.float().numpy().tobytes())
    return h.hexdigest()


def untrained_network(spec: RunSpec, dataset: FewShotDataset | None = None
                      ) -> tuple[Method, Callable[[torch.Tensor], torch.Tensor], FewShotDataset]:
    """``spec``'s network as :func:`build_parts` initialises it for its training seed (no training step), in
    eval mode on ``spec.train.device``, with its evaluation transform and the data set (as :func:`load_trained`)."""
    dataset = dataset if dataset is not None else spec.data.load()
    method, transform = build_parts(spec, dataset)
    method.to(get_device(spec.train.device))
    method.eval()
    return method, transform, dataset


def run_untrained(spec: RunSpec, store: RunStore | None = None) -> Outcome:
    """The randomly initialised network of ``spec`` (:func:`untrained_network`), evaluated under ``spec``'s
    protocol on the same episodes as the trained run of ``spec`` (``episode_seed(spec.eval.seed,
    spec.train.seed)``), so ``trained - untrained`` is a paired per-episode difference: the baseline of the
    notebooks' regime checks (:mod:`studylib.experiments.regimes`).

    Evaluation only, through the run store: the folder ``untrained-<hash of untrained_config>`` (its
    ``result.json`` says ``"kind": "untrained"``) holds one ``eval-<hash>`` sub-folder per protocol, like a trained
    run's; a finished evaluation is reused. The returned outcome's ``spec`` is ``spec`` (its training is not
    what the folder holds: rebuild the network with :func:`untrained_network`, not :func:`load_trained`).
    """
    spec.check()
    store = store or RunStore()
    dataset = spec.data.load()
    method, transform, _ = untrained_network(spec, dataset)
    run = store.run(UNTRAINED, untrained_config(spec, method))
    done = stored_outcome_in(spec, run)
    if done is not None:
        return done
    check_protocol(spec, dataset)
    lock = run_lock(store, run)
    took = take_run_lock(lock, run, resolve_no_wait(None))
    try:
        done = stored_outcome_in(spec, run)  # evaluated by the process we waited for
        if done is not None:
            return done
        if not run.finished:
            run.save_result({"kind": UNTRAINED, "steps": 0, "train_seconds": 0.0, "seed": spec.train.seed,
                             "first_spec": spec.name})
        ev_run = run.child("eval", spec.eval_config())
        _evaluate_into(spec, method, transform, dataset, get_device(spec.train.device), run, ev_run,
                       {"kind": UNTRAINED, "train_seconds": 0.0, "training_run": run.path.name}, inference=False)
        return Outcome(spec, run, ev_run.result(), ev_run)
    finally:
        if took:
            lock.release()


def stored_outcome_in(spec: RunSpec, run: Run) -> Outcome | None:
    """The finished evaluation of ``spec``'s protocol in ``run`` (a trained or an untrained run's folder), or None
    (a damaged one is reported and evaluated again)."""
    ev_run = run.child("eval", spec.eval_config())
    if not ev_run.finished:
        return None
    try:
        ev_run.read_bytes(ACCURACIES)
        outcome = Outcome(spec, run, ev_run.result(), ev_run)
    except RunFileError as e:
        warnings.warn(f"evaluating again: {e.path}: {e.problem}", stacklevel=3)
        return None
    count_reused((run.path, outcome.result.get("train_seconds")),
                 (ev_run.path, outcome.result.get("eval_seconds")))
    return outcome


def run_lock(store: RunStore, run: Run) -> "RunLock":
    """The lock of ``run`` (``<store>/.locks/<run folder>.json``; the same file Ray sweeps take)."""
    from studylib.config import current_notebook
    from studylib.training.runlock import RunLock
    lock = RunLock(store.root / ".locks" / f"{run.path.name}.json")
    if current_notebook():
        lock.info["notebook"] = current_notebook()  # shown by ./study results while the run trains
    return lock


def _training_record(run: Run) -> dict[str, Any]:
    """The training run's ``result.json``; a damaged one is rebuilt (with a warning) when the weights verify."""
    try:
        return run.result()
    except RunFileError as e:
        run.read_bytes(WEIGHTS)  # raises, naming weights.pt, when the weights themselves are damaged
        warnings.warn(f"rebuilding the training record: {e}; the weights verify, so the run is kept", stacklevel=3)
        record = {"kind": "training", "record_rebuilt": True, "train_seconds": None}
        run.save_result(record)
        return record


def load_trained(outcome: Outcome, device: torch.device | str | None = None
                 ) -> tuple[Method, Callable[[torch.Tensor], torch.Tensor], FewShotDataset]:
    """Rebuild a finished run's method with its final weights (for features, figures, OpTA...), in eval mode on
    ``device`` (None: the device the run was trained for, ``spec.train.device``; 'auto' is CUDA when present)."""
    spec = outcome.spec
    dataset = spec.data.load()
    method, transform = build_parts(spec, dataset)
    method.load_state_dict(outcome.run.load_tensor("weights.pt"))
    method.to(get_device(spec.train.device if device is None else device))
    method.eval()
    return method, transform, dataset
