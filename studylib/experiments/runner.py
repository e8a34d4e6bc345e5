"""Run one configuration end to end — data, backbone, method, training, evaluation — through the run store.

A :class:`RunSpec` is everything that determines a result. Its hash names the run's folder, so
:func:`run_spec` trains only what has not been trained: a finished run is loaded, an interrupted one resumes
from its checkpoint, and :func:`run_sweep` does this for a list of specs (a sweep killed half-way continues
where it stopped).
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch
from tqdm.auto import tqdm

from studylib.data import load_dataset
from studylib.data.base import FewShotDataset, ImageSplit
from studylib.methods.base import Method
from studylib.training.loop import TrainConfig, config_dict, train
from studylib.training.runstore import Run, RunStore
from studylib.utils import get_device

RUNNER_VERSION = "1"  # bump when a change to the runner alters results, so stale runs are not reused


@dataclass
class DataSpec:
    """Which data set and how to load it (see :func:`studylib.data.load_dataset`)."""

    name: str = "glyphs"
    root: str | None = None
    options: dict[str, Any] = field(default_factory=dict)  # size, rgb, split, max_classes, rotations, ...


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
    seed: int = 0


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

    def config(self) -> dict[str, Any]:
        """What the run's hash is computed from."""
        d = asdict(self)
        d["train"] = config_dict(self.train)
        d["runner_version"] = RUNNER_VERSION
        d["data_version"] = data_version(self.data.name)
        d.pop("name")
        return d


def data_version(name: str) -> str:
    """Version of the code that produces a data set's arrays: a generator change must not reuse old runs."""
    if name == "glyphs":
        from studylib.data.glyphs import GENERATOR_VERSION
        return f"glyphs-{GENERATOR_VERSION}"
    return name


@dataclass
class Outcome:
    """A finished run: its folder, summary, per-step metrics and per-episode accuracies."""

    spec: RunSpec
    run: Run
    result: dict[str, Any]

    @property
    def metrics(self) -> list[dict[str, Any]]:
        return self.run.metrics

    def accuracies(self, classifier: str = "nearest_centroid", shots: int = 1) -> torch.Tensor:
        """``[E]`` per-episode accuracies on the evaluation split."""
        return self.run.load_tensor("episode_accuracies.pt")[f"{classifier}/{shots}"]

    def summary(self, classifier: str = "nearest_centroid", shots: int = 1) -> tuple[float, float]:
        r = self.result["test"][f"{classifier}/{shots}"]
        return r["mean"], r["ci95"]


def normalisation(split: ImageSplit) -> tuple[list[float], list[float]]:
    """Per-channel mean and std of a split's pixels in [0, 1] (used to normalise network inputs)."""
    x = split.images[: min(len(split), 20000)].float().div_(255)
    return x.mean(dim=(0, 2, 3)).tolist(), x.std(dim=(0, 2, 3)).clamp_min(1e-3).tolist()


def build_parts(spec: RunSpec, dataset: FewShotDataset) -> tuple[Method, Callable[[torch.Tensor], torch.Tensor]]:
    """The method (backbone, heads, training augmentation) and the evaluation transform of ``spec``."""
    from studylib.data.augment import build_augment, eval_transform
    from studylib.methods import build_method
    from studylib.models import build_backbone

    train_split = dataset["train"]
    size = int(train_split.images.shape[-1])
    mean, std = normalisation(train_split)
    torch.manual_seed(spec.train.seed)
    backbone = build_backbone(spec.backbone, in_channels=int(train_split.images.shape[1]), **spec.backbone_options)
    augment = build_augment(spec.augment, size=size, mean=mean, std=std, **spec.augment_options)
    # Context a method may need besides its own options (CE's classifier size, BECLR's second augmentation).
    context = {"num_classes": train_split.num_classes, "size": size, "mean": mean, "std": std}
    method = build_method(spec.method, backbone=backbone, augment=augment,
                          **_accepted(spec.method, context), **spec.method_options)

    def transform(x: torch.Tensor) -> torch.Tensor:
        return eval_transform(x, size=size, mean=mean, std=std)

    return method, transform


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


def make_validator(spec: RunSpec, dataset: FewShotDataset, transform: Callable[[torch.Tensor], torch.Tensor],
                   device: torch.device) -> Callable[[Method, int], dict[str, float]] | None:
    """Few-shot accuracy on the validation split, CL2N with the mean of a fixed subset of training features."""
    from studylib.evaluation import evaluate
    if "val" not in dataset.splits or spec.eval.val_episodes <= 0:
        return None
    val, train_split = dataset["val"], dataset["train"]
    sub = torch.randperm(len(train_split), generator=torch.Generator().manual_seed(0))[:2000]
    train_sub = ImageSplit(train_split.images[sub], train_split.labels[sub], train_split.class_names,
                           name=train_split.name)

    def validate(method: Method, epoch: int) -> dict[str, float]:
        feats = features_of(method, val, transform, device)
        mean = features_of(method, train_sub, transform, device).mean(0) if spec.eval.cl2n else None
        res = evaluate(feats, val.labels, ways=spec.eval.ways, shots=[spec.eval.val_shots],
                       queries=spec.eval.queries, episodes=spec.eval.val_episodes,
                       classifier=[spec.eval.val_classifier], seed=spec.eval.seed, train_mean=mean)
        r = res[(spec.eval.val_classifier, spec.eval.val_shots)]
        return {"val_acc": r.mean, "val_ci95": r.ci95}

    return validate


def run_spec(spec: RunSpec, store: RunStore | None = None, stop_after: int | None = None,
             progress: bool = True) -> Outcome:
    """Train and evaluate ``spec``, or load it when its run already finished.

    Args:
        spec: the configuration.
        store: the run store (default ``<repo>/.cache/runs`` or ``$STUDYLIB_CACHE/runs``).
        stop_after: test hook, see :func:`studylib.training.loop.train`.
        progress: show tqdm bars.
    """
    from studylib.evaluation import evaluate
    store = store or RunStore()
    run = store.run(spec.name, spec.config())
    if run.finished:
        return Outcome(spec, run, run.result())
    dataset = load_dataset(spec.data.name, spec.data.root, **spec.data.options)
    method, transform = build_parts(spec, dataset)
    device = get_device(spec.train.device)
    spec.train.progress = progress
    validate = make_validator(spec, dataset, transform, device)
    train(method, dataset["train"], spec.train, run, validate=validate, stop_after=stop_after)

    test = dataset[spec.eval.split]
    feats = features_of(method, test, transform, device)
    mean = features_of(method, dataset["train"], transform, device).mean(0) if spec.eval.cl2n else None
    res = evaluate(feats, test.labels, ways=spec.eval.ways, shots=list(spec.eval.shots), queries=spec.eval.queries,
                   episodes=spec.eval.episodes, classifier=list(spec.eval.classifiers), seed=spec.eval.seed,
                   train_mean=mean)
    run.save_tensor("episode_accuracies.pt", {f"{c}/{s}": r.accuracies.cpu() for (c, s), r in res.items()})
    run.save_tensor("weights.pt", {k: v.cpu() for k, v in method.state_dict().items()})
    result = {"test": {f"{c}/{s}": {"mean": r.mean, "ci95": r.ci95, "episodes": int(r.accuracies.numel())}
                       for (c, s), r in res.items()},
              "split": spec.eval.split, "device": str(device)}
    run.save_result(result)
    run.checkpoint_path.unlink(missing_ok=True)  # weights.pt holds the final model; the result marks completion
    return Outcome(spec, run, run.result())  # read back: a fresh and a reused run give the same object


def run_sweep(specs: list[RunSpec], store: RunStore | None = None, progress: bool = True) -> list[Outcome]:
    """Run every spec, reusing finished runs; the outer bar counts runs."""
    out = []
    for spec in tqdm(specs, desc="runs", disable=not progress or len(specs) < 2):
        out.append(run_spec(spec, store, progress=progress))
    return out


def load_trained(outcome: Outcome) -> tuple[Method, Callable[[torch.Tensor], torch.Tensor], FewShotDataset]:
    """Rebuild a finished run's method with its final weights (for features, figures, OpTA...)."""
    spec = outcome.spec
    dataset = load_dataset(spec.data.name, spec.data.root, **spec.data.options)
    method, transform = build_parts(spec, dataset)
    method.load_state_dict(outcome.run.load_tensor("weights.pt"))
    method.eval()
    return method, transform, dataset
