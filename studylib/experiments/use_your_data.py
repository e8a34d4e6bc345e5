"""Notebook 90_use_your_data: train on a folder of your own images, browse the run, classify new images.

Not a reproduction: it shows the day-to-day path a user takes with their own data. With ``data_root`` unset
(the smoke scale) the notebook first writes a small example folder (``<class>/<image>.png``) itself; point
``data_root`` at your own ``root/<class>/*`` folder to use yours (``split='random'``: a seeded class-disjoint
split; ``'given'``: ``root/{train,val,test}/<class>/``; ``'alphabet'``: ``root/<superclass>/<class>/``).

The comparison (:func:`compare`, :func:`comparison_table`) trains every method of the study on the folder,
each with its own objective and optimiser (:func:`method_recipe`) on the same backbone, epochs and training
seeds, and evaluates all of them on the same test episodes (:func:`eval_spec`); a method that cannot train on
the folder gets its reason (:func:`cannot_run`) instead of a silent drop. Methods that are one function under the
chosen settings train once and share a row (:func:`same_function`: PN and MN with 1-shot training episodes).
Every difference to the reference method is a paired estimate over seeds, marked where the study's rule decides
it (:func:`decided`); a test split too small for an interval is named before training (:func:`interval_caveat`,
also in ``./study check``) and its rows are marked, as is any interval that reaches beyond 0-100 %;
:func:`comparison_rows` holds it all for the table (:func:`comparison_table`) and the figure
(:func:`studylib.plots.comparison_figure`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from studylib.claims.table import ClaimsTable
from studylib.config import ParamError, param
from studylib.evaluation import stats
from studylib.evaluation.verdicts import Claim, Expectation
from studylib.experiments.common import BACKBONES, check_data_params
from studylib.paths import SCALES
from studylib.runs.runner import DataSpec, EvalSpec, Outcome, RunSpec
from studylib.runs.sweeps import run_sweep
from studylib.training.loop import TrainConfig

NOTEBOOK = "90_use_your_data"
CLASSIFIERS = ("nearest_centroid", "soft_assignment")
# Every method of the study, compared on your folder: seed 000's NCA, PN and MN, SPE (seed 002), Set2Model (seed
# 003), InfoPatch (seed 004) and BECLR without labels (seed 001).
COMPARE_METHODS = ("nca", "pn", "mn", "spe", "set2model", "infopatch", "beclr")
EPISODIC_METHODS = ("pn", "mn", "spe", "set2model", "infopatch")  # the others train on shuffled batches
METHOD_LABELS = {"nca": "NCA (000)", "pn": "PN (000)", "mn": "MN (000)", "spe": "SPE (002)",
                 "set2model": "Set2Model S2M-Gauss (003)", "infopatch": "InfoPatch (004)",
                 "beclr": "BECLR, no labels (001)"}


# PIL modes of single-channel images: a folder of these is read in grayscale by image_mode='auto'.
GRAY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"})


@dataclass
class Params:
    """Parameters of ``notebooks/90_use_your_data.ipynb``; the defaults are the smoke scale. Only parameters that
    apply to a folder of images (no generated-set options such as ``rgb`` or ``max_classes``)."""

    scale: str = param("smoke", choices=SCALES, help="smoke (the example folder, CPU), evidence (unused here), "
                                                     "paper (your folder, the paper-style protocol, GPU) or check "
                                                     "(few steps on a stand-in folder); separates outputs and "
                                                     "references", cut=True)
    data: str = param("folder", choices=("folder",), help="your own images (the layout is chosen by split)")
    data_root: str | None = param(None, help="your image folder (relative: to the repository root); None: the "
                                             "notebook writes a small example folder and uses it; standin:folder "
                                             "for the check scale", cut=True)
    split: str = param("random", choices=("random", "given", "alphabet"),
                       help="random (root/<class>/), given (root/{train,val,test}/<class>/) or alphabet "
                            "(root/<superclass>/<class>/, whole superclasses per split)")
    split_seed: int = param(0, ge=0, help="random and alphabet: seed of the class (or superclass) order")
    split_fractions: list[float] = param([0.64, 0.16, 0.2], ge=0,
                                         help="random and alphabet: train, val, test share of the classes (train "
                                              "> 0, test > 0; alphabet: whole superclasses, so only approximately)")
    image_size: int = param(28, ge=1, help="side of the square images fed to the network")
    image_mode: str = param("auto", choices=("auto", "grayscale", "rgb"),
                            help="how image files are decoded: grayscale (1 channel), rgb (3 channels), or auto: "
                                 "grayscale when every image file is single-channel, else rgb")
    example_classes: int = param(30, ge=10, help="example folder (data_root None): classes")
    example_images: int = param(12, ge=6, help="example folder (data_root None): images per class")
    backbone: str = param("conv4", choices=BACKBONES, help="embedding network")
    hidden: int = param(32, ge=1, help="conv4 only: filters per block")
    epochs: int = param(4, ge=1, help="training epochs", cut=True)
    batch_size: int = param(64, ge=2, help="NCA batch size (images)", cut=True)
    max_steps: int | None = param(None, ge=1, help="stop after this many optimiser steps (None: all epochs)",
                                  cut=True)
    lr: float = param(0.05, gt=0, help="SGD learning rate")
    eval_ways: int = param(5, ge=2)
    eval_shots: list[int] = param([1, 5], ge=1)
    eval_queries: int = param(5, ge=1)
    eval_episodes: int = param(300, ge=1, help="test episodes per model", cut=True)
    eval_mean_images: int | None = param(None, ge=1, help="CL2N centre from this many training images (None: all)",
                                         cut=True)
    seeds: list[int] = param([0, 1, 2], help="training seeds", cut=True)
    compare: list[str] = param(list(COMPARE_METHODS), choices=COMPARE_METHODS,
                               help="methods trained on the same folder and compared on the same test episodes "
                                    "(default: every method of the study): nca (shuffled batches of batch_size), "
                                    "pn, mn, spe, set2model, infopatch (episodes of episode_ways x (episode_shots "
                                    "+ episode_queries) images), beclr (no labels: two augmented views of "
                                    "batch_size images); [] skips the comparison", cut=True)
    episode_ways: int = param(5, ge=2, help="episodic methods (pn, mn, spe, set2model, infopatch): classes per "
                                            "training episode")
    episode_shots: int = param(1, ge=1, help="episodic methods: support images per class in a training episode "
                                             "(set2model: at least 2, a Gaussian is fitted to them)")
    episode_queries: int = param(5, ge=1, help="episodic methods: query images per class in a training episode")
    spe_dim: int = param(16, ge=1, help="spe: dimension d of the Gaussian embedding (a 2d-output last layer)")
    device: str = param("auto", help="'auto' (CUDA when present), 'cpu' or 'cuda'")

    def check(self) -> None:
        # data_root None is allowed here: the notebook writes its example folder
        check_data_params(self.data, self.data_root or "example", self.split)
        unknown = [m for m in self.compare if m not in COMPARE_METHODS]
        if unknown:
            raise ParamError(f"compare={self.compare} names {unknown}; allowed: {', '.join(COMPARE_METHODS)}")
        if len(set(self.compare)) != len(self.compare):
            raise ParamError(f"compare={self.compare} names a method twice; name each once")
        fr = self.split_fractions
        if len(fr) != 3 or fr[0] <= 0 or fr[2] <= 0:
            raise ParamError(f"split_fractions={fr} must be three shares [train, val, test] with train > 0 and "
                             f"test > 0 (val may be 0), e.g. [0.64, 0.16, 0.2]")
        if not self.seeds:
            raise ParamError("seeds is empty; give at least one training seed, e.g. [0, 1]")
        if self.eval_queries + max(self.eval_shots) > self.example_images and self.data_root is None:
            raise ParamError(f"the example folder has example_images={self.example_images} per class but an episode "
                             f"needs {max(self.eval_shots)} shots + {self.eval_queries} queries; raise "
                             f"example_images or lower eval_queries")


def example_folder(p: Params) -> Path:
    """Where the example folder lives: ``<cache>/use_your_data/example-<classes>x<images>/``."""
    from studylib.utils import default_cache_dir
    return default_cache_dir() / "use_your_data" / f"example-{p.example_classes}x{p.example_images}"


def write_example_folder(p: Params) -> Path:
    """Write (once) a small folder of images ``<class>/<image>.png`` (synthetic objects, one class each) and
    return it: the kind of folder a user points ``data_root`` at."""
    from studylib.data.standins import write_folder
    root = example_folder(p)
    if not root.is_dir() or len(list(root.iterdir())) != p.example_classes:
        tmp = root.with_name(root.name + ".tmp")
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
        write_folder(tmp, classes=p.example_classes, per_class=p.example_images, size=p.image_size)
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
    return root


def data_root(p: Params) -> str:
    """The folder the notebook trains on: ``data_root``, or the example folder (written on first use)."""
    return p.data_root if p.data_root else str(write_example_folder(p))


def image_files(root: str | Path) -> list[Path]:
    """Every image file under ``root`` (recursively; hidden files skipped)."""
    from studylib.data.base import resolve_root
    from studylib.data.readers import IMAGE_EXTENSIONS
    return sorted(f for f in resolve_root(root).rglob("*") if f.is_file() and not f.name.startswith(".")
                  and f.suffix.lower() in IMAGE_EXTENSIONS)


def decode_mode(p: Params, root: str | None = None) -> str:
    """The reader's mode, ``"L"`` or ``"RGB"``, for ``image_mode``: ``auto`` reads every file's header (PIL
    opens lazily: no pixels are decoded) and picks ``"L"`` only when all of them are single-channel, so a
    grayscale folder is never silently tripled into RGB, and one colour image keeps the colours."""
    if p.image_mode != "auto":
        return "L" if p.image_mode == "grayscale" else "RGB"
    from PIL import Image
    from studylib.data.standins import resolve_root
    files = image_files(resolve_root("folder", root if root is not None else data_root(p)))
    for f in files:
        try:
            with Image.open(f) as img:
                if img.mode not in GRAY_MODES and not (img.mode == "P" and _gray_palette(img)):
                    return "RGB"
        except OSError:
            continue  # the reader names an unreadable file when it decodes it
    return "L" if files else "RGB"  # no files: the reader says what is missing


def _gray_palette(img: Any) -> bool:
    """Whether a palette image's colours are all grey (r = g = b)."""
    pal = img.getpalette() or []
    return all(pal[i] == pal[i + 1] == pal[i + 2] for i in range(0, len(pal) - 2, 3))


def data_spec(p: Params) -> DataSpec:
    root = data_root(p)
    opts: dict[str, Any] = {"size": p.image_size, "split": p.split, "mode": decode_mode(p, root)}
    if p.split != "given":
        opts.update(seed=p.split_seed, fractions=list(p.split_fractions))
    return DataSpec("folder", root, opts)


def load_data(p: Params):
    return data_spec(p).load()


def _backbone_options(p: Params) -> dict[str, Any]:
    return {"hidden": p.hidden} if p.backbone == "conv4" else {}


def _backbone_out_dim(p: Params) -> int:
    """``out_dim`` of the chosen backbone (does not depend on the input channels)."""
    from studylib.models import build_backbone
    return int(build_backbone(p.backbone, in_channels=1, **_backbone_options(p)).out_dim)


def _episodic(p: Params, seed: int, shots: int | None = None, **kw: Any) -> TrainConfig:
    """Episodes of ``episode_ways`` x (``episode_shots`` + ``episode_queries``) images, as many images per
    epoch as the training split holds; ``kw`` overrides the optimiser (a method's own recipe)."""
    opts: dict[str, Any] = dict(epochs=p.epochs, sampler="episodic", ways=p.episode_ways,
                                shots=shots or p.episode_shots, queries=p.episode_queries, lr=p.lr, milestones=[0.7],
                                max_steps=p.max_steps, seed=seed, device=p.device, scale=p.scale)
    opts.update(kw)
    return TrainConfig(**opts)


def method_recipe(p: Params, seed: int, method: str) -> tuple[str, dict[str, Any], dict[str, Any], str, TrainConfig]:
    """``(registered method, method_options, backbone_options, augment, TrainConfig)`` of ``method`` on the
    folder: each method's own objective and optimiser (its notebook's defaults), on the shared backbone,
    epochs, seed and evaluation.

    * nca: shuffled batches of ``batch_size``, SGD at ``lr`` (seed 000); pn, mn: episodes, SGD at ``lr``.
    * spe: the paper's Conv4 whose last block outputs ``2 spe_dim`` unconstrained numbers (App. A.1; another
      backbone gets a linear ``D -> 2 spe_dim`` layer), intersection sampler, Adam 1e-3 (notebook 10).
    * set2model: S2M-Gauss, histogram loss of tuple scores, Adam 1e-3 (notebook 12's defaults); sets of at
      least 2 images (a Gaussian is fitted to each).
    * infopatch: the full InfoPatch (InfoNCE on patches, PatchMix, random block; notebook 13's last ablation
      row) on the backbone's feature map, SGD with Nesterov momentum at ``lr``.
    * beclr: BECLR pretraining without labels (DyCE memory, masking, EMA teacher; notebook 06's smoke
      defaults), two augmented views of ``batch_size`` images, SGD at 0.3 B / 256, cosine schedule.
    """
    bb = _backbone_options(p)
    if method == "nca":
        return "nca", {}, bb, "none", TrainConfig(
            epochs=p.epochs, sampler="shuffled", batch_size=p.batch_size, lr=p.lr, milestones=[0.7],
            max_steps=p.max_steps, seed=seed, device=p.device, scale=p.scale)
    if method in ("pn", "mn"):
        return method, {}, bb, "none", _episodic(p, seed)
    if method == "spe":
        from studylib.experiments.spe_common import method_parts
        from studylib.experiments.spe_omniglot import Params as SpeParams
        sp = SpeParams()
        if p.backbone == "conv4":
            name, opts, bb = method_parts("spe", p.spe_dim, p.hidden, "intersection", 1, sp.eval_samples)
        else:
            name, opts = "spe", {"dim": p.spe_dim, "sampler": "intersection", "samples": 1,
                                 "eval_samples": sp.eval_samples, "in_features": _backbone_out_dim(p)}
        return name, opts, bb, "none", _episodic(p, seed, optimizer=sp.optimizer, lr=sp.lr, weight_decay=0.0)
    if method == "set2model":
        from studylib.experiments.set2model_omniglot import Params as S2MParams
        sm = S2MParams()
        negatives = min(int(sm.negatives or 0), (p.episode_ways - 1) * p.episode_queries) or None
        opts = {"score": "gauss", "dim": sm.dim, "negatives": negatives, "bins": sm.bins,
                "half_width": sm.half_width, "value_range": "adaptive", "var_floor": sm.var_floor}
        return "set2model", opts, bb, "none", _episodic(p, seed, shots=max(2, p.episode_shots),
                                                         optimizer=sm.optimizer, lr=sm.lr, weight_decay=0.0,
                                                         schedule="constant", milestones=[])
    if method == "infopatch":
        from studylib.experiments import infopatch as ipx
        ip = ipx.Params()
        return "infopatch", ipx.method_options(ip, ipx.ROWS[-1][0]), bb, "none", _episodic(
            p, seed, momentum=0.9, nesterov=True, weight_decay=ip.weight_decay)
    if method == "beclr":
        from studylib.experiments.beclr_common import BeclrParams
        bp = BeclrParams()
        # DyCE's adaptation period: adapt_epochs epochs of steps (one step per batch of the training split)
        steps = bp.adapt_epochs * max(1, len(load_data(p)["train"]) // p.batch_size)
        if p.max_steps:
            steps = min(steps, p.max_steps // 2)
        opts = dict(profile=bp.view_profile, proj_dim=bp.proj_dim, pred_hidden=bp.pred_hidden, lam=bp.lam,
                    temperature=bp.temperature, mask_ratio=bp.mask_ratio, mask_patch=bp.mask_patch,
                    teacher_momentum=bp.teacher_momentum, use_dyce=True, memory_size=bp.memory_size,
                    partitions=bp.partitions, topk=bp.topk, epsilon=bp.epsilon, proto_momentum=bp.proto_momentum,
                    variant="dyce", adapt_steps=steps, pairing=bp.pairing, seed=seed)
        if bp.blur_sigma is not None:
            opts["strong_options"] = {"blur_sigma": tuple(bp.blur_sigma)}
        return "beclr", opts, bb, bp.augment, TrainConfig(
            epochs=p.epochs, sampler="shuffled", batch_size=p.batch_size, optimizer="sgd",
            lr=bp.lr * p.batch_size / 256, momentum=bp.momentum, weight_decay=bp.weight_decay, schedule=bp.schedule,
            max_steps=p.max_steps, seed=seed, device=p.device, scale=p.scale)
    raise ParamError(f"unknown method {method!r}; allowed: {', '.join(COMPARE_METHODS)}")


def eval_spec(p: Params) -> EvalSpec:
    """The one evaluation protocol of every method and seed (the same test episodes: differences are paired)."""
    return EvalSpec(ways=p.eval_ways, shots=list(p.eval_shots), queries=p.eval_queries, episodes=p.eval_episodes,
                    classifiers=list(CLASSIFIERS), val_episodes=0, seed=0, mean_images=p.eval_mean_images)


def spec_from_params(p: Params, seed: int, method: str = "nca") -> RunSpec:
    """The run of ``method`` for one training seed (:func:`method_recipe`): the same data, backbone, epochs
    and evaluation episodes for every method."""
    name, opts, bb, augment, train = method_recipe(p, seed, method)
    aug_opts = ({"blur_sigma": opts["strong_options"]["blur_sigma"]}
                if method == "beclr" and "strong_options" in opts else {})
    return RunSpec(name=f"{NOTEBOOK}-{method}", data=data_spec(p), backbone=p.backbone, backbone_options=bb,
                   method=name, method_options=opts, augment=augment, augment_options=aug_opts, train=train,
                   eval=eval_spec(p))


def run(p: Params, progress: bool = True) -> list[Outcome]:
    """Train (or load) one NCA model per seed on the folder; ``[outcome per seed]``."""
    return run_sweep([spec_from_params(p, s) for s in p.seeds], progress=progress)


def cannot_run(p: Params, method: str, dataset: Any) -> str | None:
    """Why ``method`` cannot train on this folder with these parameters (None: it can). Checked before any
    training, so a method that does not fit the folder gets a row saying why instead of an error."""
    from studylib.data.samplers import ClassTable
    train = dataset["train"]
    if method in EPISODIC_METHODS:
        shots = max(2, p.episode_shots) if method == "set2model" else p.episode_shots
        per = shots + p.episode_queries
        big = int((ClassTable(train.labels).counts >= per).sum())
        if big < p.episode_ways:
            return (f"needs {p.episode_ways} training classes with >= {per} images ({shots} shots + "
                    f"{p.episode_queries} queries); the training split has {big}: lower episode_ways/"
                    f"episode_queries or add images")
    elif p.batch_size > len(train.labels):
        return f"batch_size={p.batch_size} exceeds the {len(train.labels)} training images; lower batch_size"
    return None


def method_note(p: Params, method: str, dataset: Any) -> str:
    """What to know when reading ``method``'s row on this folder (empty: nothing)."""
    if method == "infopatch":
        from studylib.models import build_backbone
        import torch
        bb = build_backbone(p.backbone, in_channels=dataset["train"].images.shape[1], **_backbone_options(p))
        with torch.no_grad():
            h, w = bb.feature_map(torch.zeros(1, dataset["train"].images.shape[1], p.image_size,
                                              p.image_size)).shape[2:]
        if h * w == 1:
            return (f"the {p.backbone} map is 1x1 at {p.image_size} px: patches and PatchMix act on whole "
                    f"images (use larger images or a ResNet-12 for patch-level learning)")
        return f"patch-level loss on a {h}x{w} map"
    if method == "beclr":
        return "trained without labels (the other methods use the training labels)"
    if method == "set2model" and p.episode_shots < 2:
        return "sets of 2 images (episode_shots=1 leaves no variance to fit)"
    return ""


def same_function(p: Params) -> dict[str, tuple[str, str]]:
    """Methods of ``p.compare`` that are the same function as another one under these settings:
    ``{method: (the method it equals, why)}``. Each trains once; they share one row.

    * MN = PN with 1-shot training episodes: a class prototype of one support image is that image, so PN's
      softmax over query-prototype distances is MN's over query-support distances (seed 000, Eq. L_PNs and
      L_MNs; :func:`studylib.methods.episodes.episode_loss`).
    """
    out = {}
    if p.episode_shots == 1 and "pn" in p.compare and "mn" in p.compare:
        out["mn"] = ("pn", "with 1-shot training episodes MN's loss is PN's (the prototype of one image is the "
                           "image), so MN is trained once, as PN")
    return out


def compare(p: Params, progress: bool = True) -> dict[str, list[Outcome] | str]:
    """Train (or load) every method of ``p.compare`` for every seed: ``{method: [outcome per seed]}``, or for a
    method that cannot train on this folder the reason (:func:`cannot_run`). Every run is evaluated on the same
    test episodes (one :func:`eval_spec`), so differences are paired. A method that is the same function as
    another (:func:`same_function`) is not trained again: it maps to that method's outcomes (the same list)."""
    dataset = load_data(p) if p.compare else None
    same = same_function(p)
    reasons = {m: cannot_run(p, m, dataset) for m in p.compare}
    runnable = [m for m in p.compare if reasons[m] is None and m not in same]
    specs = [spec_from_params(p, s, m) for m in runnable for s in p.seeds]
    outcomes = run_sweep(specs, progress=progress) if specs else []
    n = len(p.seeds)
    done = {m: outcomes[i * n:(i + 1) * n] for i, m in enumerate(runnable)}
    for m, (other, _) in same.items():
        if reasons[m] is None:
            done[m] = done[other]
    return {m: done[m] if reasons[m] is None else str(reasons[m]) for m in p.compare}


MIN_EPISODES = 30  # fewer test episodes per seed: the normal interval over episodes is not to be trusted
MARK = "†"  # a marked interval: the note under the table says why


def interval_caveat(test_classes: int, ways: int, episodes: int) -> str | None:
    """Why this test split cannot give an accuracy an interval describes (None: it can). Said by the
    pre-flight (``./study check``) and by the notebook before training, and marked in the table's rows.

    * ``test_classes <= ways``: every ``ways``-way test episode draws the same classes, so the episodes do not
      vary the classes; the accuracy and its interval describe those few classes, not new ones (with 9 classes
      and ``split='random'``, 2 test classes: intervals of +-30 to +-55 points and 100.0 +- 0.0 were printed).
    * ``episodes < MIN_EPISODES``: too few test episodes per seed for the normal interval over episodes.
    """
    why = []
    if test_classes <= ways:
        fix = "add classes" + (f", or lower eval_ways below {test_classes}" if test_classes > 2 else "")
        why.append(f"the test split has {test_classes} classes, so every {ways}-way test episode draws the same "
                   f"{test_classes}: the accuracies describe these {test_classes} classes, not new ones, and their "
                   f"intervals do not generalise ({fix})")
    if episodes < MIN_EPISODES:
        why.append(f"{episodes} test episodes per seed are too few for an interval over episodes (at least "
                   f"{MIN_EPISODES}: raise eval_episodes)")
    return "; ".join(why) or None


def caveat_of(p: Params, dataset: Any) -> str | None:
    """:func:`interval_caveat` of the folder's test split under ``p``."""
    return interval_caveat(int(dataset["test"].num_classes), p.eval_ways, p.eval_episodes)


def split_report(p: Params, dataset: Any) -> str:
    """One line before training: whether the test split supports an interval (:func:`caveat_of`)."""
    caveat = caveat_of(p, dataset)
    if caveat:
        return f"warning: {caveat}. The tables below mark these intervals ({MARK})."
    k = int(dataset["test"].num_classes)
    return (f"test split: {k} classes for {p.eval_ways}-way episodes, {p.eval_episodes} episodes per seed: the "
            f"intervals below describe new classes of this kind")


def comparison_figure(p: Params, by_method: dict[str, list[Outcome] | str], dataset: Any = None) -> Any:
    """:func:`studylib.plots.comparison_figure` of :func:`comparison_rows` (the reference: the first method)."""
    from studylib import plots
    rows, _ = comparison_rows(p, by_method, dataset)
    reference = next((r.label for r in rows if r.reason is None), "")
    return plots.comparison_figure(rows, reference, title=f"methods on your folder, {p.eval_ways}-way, nearest "
                                                          f"centroid ({p.scale})")


def decided(differences: list[stats.Estimate]) -> list[str | None]:
    """Which paired differences the study's rule decides: ``"higher"`` or ``"lower"`` (than the reference),
    ``"same"`` (inside ±1 point: the no-effect test), or None. The rule of the claims tables
    (:func:`studylib.evaluation.verdicts.judge_family`): each difference a directional claim, the table's
    differences one family (Holm-adjusted p <= 0.01). The one place the comparison calls the verdict rules."""
    from studylib.evaluation import verdicts
    claims = [verdicts.Claim(f"d{k}", "", "", "", "", verdicts.Expectation("greater"), d)
              for k, d in enumerate(differences)]
    judged = verdicts.judge_family(claims)
    words = {verdicts.REPRODUCED: "higher", f"{verdicts.NOT_REPRODUCED} (reversed)": "lower",
             f"{verdicts.NOT_REPRODUCED} (no effect)": "same"}
    return [words.get(judged[c.id].label) for c in claims]


@dataclass
class ComparisonRow:
    """One method's row of the comparison: its label, seeds, and per shot count its accuracy, its paired
    difference to the reference method (None for the reference itself), whether the rule decides that
    difference (``"higher"``/``"lower"``/None) and whether its interval is marked (out of 0-100 % or a test
    split too small for an interval). ``reason``: why a method could not run (then nothing else is set)."""

    method: str
    label: str
    seeds: int = 0
    accuracy: dict[int, stats.Estimate] = field(default_factory=dict)
    difference: dict[int, stats.Estimate | None] = field(default_factory=dict)
    decided: dict[int, str | None] = field(default_factory=dict)
    marked: dict[int, bool] = field(default_factory=dict)
    train_seconds: float | None = None
    note: str = ""
    reason: str | None = None


def _joined_label(methods: list[str]) -> str:
    """``"PN (000)"``, or for methods that are one function ``"PN = MN (000)"`` (their shared seed paper)."""
    names, papers = [], []
    for m in methods:
        label = METHOD_LABELS.get(m, m)
        name, _, paper = label.partition(" (")
        names.append(name)
        papers.append(paper)
    return " = ".join(names) + (f" ({papers[0]}" if len(set(papers)) == 1 and papers[0] else "")


def _unbounded(e: stats.Estimate, lo: float, hi: float) -> bool:
    """An interval that leaves ``[lo, hi]`` or has no width over several seeds (every query right or wrong)."""
    return e.lo < lo or e.hi > hi or (e.n_seeds >= 2 and e.ci95 == 0.0)


def comparison_rows(p: Params, by_method: dict[str, list[Outcome] | str], dataset: Any = None
                    ) -> tuple[list[ComparisonRow], str | None]:
    """The comparison as rows (:class:`ComparisonRow`, one per method; methods of one function share one) and
    the caveat of the test split (:func:`caveat_of`, None without ``dataset``). The reference is the first
    method that ran; nearest-centroid accuracies; differences paired by seed and episode."""
    ran = {m: outs for m, outs in by_method.items() if not isinstance(outs, str)}
    first = next(iter(ran), None)
    caveat = caveat_of(p, dataset) if dataset is not None else None
    same = {m: other for m, (other, _) in same_function(p).items() if m in ran and other in ran
            and ran[m] is ran[other]}
    rows: list[ComparisonRow] = []
    for m, outs in by_method.items():
        if m in same:
            continue
        merged = [k for k, other in same.items() if other == m]
        label = _joined_label([m, *merged])
        if isinstance(outs, str):
            rows.append(ComparisonRow(m, label, reason=outs))
            continue
        row = ComparisonRow(m, label, seeds=len(outs))
        for s in sorted(p.eval_shots):
            acc = accuracy(outs, "nearest_centroid", s)
            row.accuracy[s] = acc
            row.marked[s] = caveat is not None or _unbounded(acc, 0.0, 1.0)
            row.difference[s] = None if m == first else stats.paired_difference(
                [o.accuracies("nearest_centroid", s) for o in outs],
                [o.accuracies("nearest_centroid", s) for o in ran[first]])
        secs = [o.result.get("train_seconds") for o in outs]
        row.train_seconds = round(sum(secs) / len(secs), 1) if secs and None not in secs else None
        notes = [method_note(p, m, dataset) if dataset is not None else ""]
        notes += [same_function(p)[k][1] for k in merged]
        row.note = "; ".join(x for x in notes if x)
        rows.append(row)
    # the family the rule decides: every difference with an interval (a marked one decides nothing)
    keys = [(r, s) for r in rows for s, d in r.difference.items() if d is not None and not r.marked[s]]
    for (r, s), word in zip(keys, decided([r.difference[s] for r, s in keys])):
        r.decided[s] = word
    return rows, caveat


def comparison_table(p: Params, by_method: dict[str, list[Outcome] | str],
                     dataset: Any = None) -> list[dict[str, Any]]:
    """One row per method (:func:`comparison_rows`): nearest-centroid accuracy per shot count (mean ± 95% CI over
    seeds, %), the paired difference to the first method that ran (``(higher, decided)`` where the study's rule
    decides it: :func:`decided`), the mean training time per run (s, as measured when it trained), and a note
    (:func:`method_note`; the methods a row stands for; for a method that could not run, why). A marked interval
    (:data:`MARK`) is one the test split cannot support (:func:`interval_caveat`) or that reaches beyond
    0-100 %: such a cell shows the mean only, ``87.0 (no interval)†``."""
    rows, _ = comparison_rows(p, by_method, dataset)
    first = next((r.method for r in rows if r.reason is None), None)
    out = []
    for r in rows:
        row: dict[str, Any] = {"method": r.label}
        if r.reason is not None:
            row.update({"seeds": 0, **{f"{s}-shot (%)": "not run" for s in sorted(p.eval_shots)},
                        **{f"{s}-shot vs {first} (pts)": "-" for s in sorted(p.eval_shots)},
                        "train s/run": None, "note": f"cannot run: {r.reason}"})
            out.append(row)
            continue
        row["seeds"] = r.seeds
        for s in sorted(p.eval_shots):
            acc = r.accuracy[s]
            if _unbounded(acc, 0.0, 1.0):
                row[f"{s}-shot (%)"] = f"{100 * acc.value:.1f} (no interval){MARK}"
            else:
                row[f"{s}-shot (%)"] = acc.fmt() + (MARK if r.marked[s] else "")
            d = r.difference[s]
            if d is None:
                row[f"{s}-shot vs {first} (pts)"] = "(reference)"
            elif _unbounded(d, -1.0, 1.0):
                row[f"{s}-shot vs {first} (pts)"] = f"{100 * d.value:+.1f} (no interval){MARK}"
            else:
                word = r.decided.get(s)
                row[f"{s}-shot vs {first} (pts)"] = (d.fmt(signed=True) + (MARK if r.marked[s] else "")
                                                     + (f" ({word}, decided)" if word else ""))
        row["train s/run"] = r.train_seconds
        row["note"] = r.note
        out.append(row)
    return out


def comparison_notes(p: Params, by_method: dict[str, list[Outcome] | str], dataset: Any = None) -> str:
    """The text under the comparison table: what a marked interval means here, and how differences are decided."""
    rows, caveat = comparison_rows(p, by_method, dataset)
    lines = []
    if caveat:
        lines.append(f"{MARK} every interval: {caveat}.")
    elif any(v for r in rows for v in r.marked.values()):
        lines.append(f"{MARK} an interval that would reach beyond 0-100 % (too few seeds or classes for a Student-t "
                     f"interval here): only the mean is shown.")
    lines.append("Differences are paired (the same test episodes per seed); '(higher, decided)', '(lower, "
                 "decided)' and '(same, decided)' (inside ±1 point) mark those the study's rule decides (t-tests "
                 "over seeds, Holm-adjusted p <= 0.01 over the table's differences); the others are undecided at "
                 "this scale.")
    return "\n".join(lines)


def accuracy(outcomes: list[Outcome], classifier: str, shots: int) -> stats.Estimate:
    return stats.accuracy([o.accuracies(classifier, shots) for o in outcomes])


def results_table(p: Params, outcomes: list[Outcome]) -> list[dict[str, Any]]:
    return [{"classifier": c, "shots": s, "accuracy (%)": accuracy(outcomes, c, s).fmt()}
            for c in CLASSIFIERS for s in sorted(p.eval_shots)]


def new_images(p: Params, dataset: Any, out: Path, shots: int = 1) -> tuple[list[Path], list[str], list[Path],
                                                                            list[str]]:
    """A few-shot task on unseen classes as files: for ``eval_ways`` test classes, ``shots`` support images
    and the rest as "new" query images, written as PNGs under ``out/{support,new}/``.

    Returns ``(support_files, support_labels, query_files, query_truth)`` (labels are the class names).
    """
    from PIL import Image
    test = dataset["test"]
    out.mkdir(parents=True, exist_ok=True)
    support, labels, query, truth = [], [], [], []
    for c in range(min(p.eval_ways, test.num_classes)):
        idx = (test.labels == c).nonzero().flatten().tolist()
        name = test.class_names[c]
        for j, i in enumerate(idx[:shots + 3]):
            kind = "support" if j < shots else "new"
            path = out / kind / f"{name}_{j}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            img = test.images[i]
            Image.fromarray(img.permute(1, 2, 0).squeeze(-1).numpy()).save(path)
            (support if j < shots else query).append(path)
            (labels if j < shots else truth).append(name)
    return support, labels, query, truth


def claims(p: Params, outcomes: list[Outcome] | None = None) -> ClaimsTable:
    """One sanity claim (not a paper's): the embedding separates unseen classes of the folder above chance."""
    shots = min(p.eval_shots)
    rows = [Claim("above-chance", f"{p.eval_ways}-way {shots}-shot accuracy on unseen classes of the folder is "
                                  f"above chance", "-", f"chance is {100 / p.eval_ways:.0f}%",
                  f"nearest centroid accuracy - 1/{p.eval_ways}, {shots}-shot", Expectation("greater"))]
    table = ClaimsTable(NOTEBOOK, p.scale, rows)
    if outcomes is not None:
        chance = 1 / p.eval_ways
        table.measure("above-chance", stats.combine(lambda a: a - chance,
                                                    accuracy(outcomes, "nearest_centroid", shots)))
    return table


def reference_values(p: Params, outcomes: list[Outcome],
                     by_method: dict[str, list[Outcome]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {f"{c}/{s}": accuracy(outcomes, c, s) for c in CLASSIFIERS for s in p.eval_shots}
    for m, outs in (by_method or {}).items():
        if m != "nca" and not isinstance(outs, str):  # NCA's runs are ``outcomes`` themselves
            out.update({f"compare/{m}/nearest_centroid/{s}": accuracy(outs, "nearest_centroid", s)
                        for s in p.eval_shots})
    out["test_images"] = int(sum(len(o.spec.data.load()["test"]) for o in outcomes[:1]))
    return out


def prediction_table(pred: Any, query_files: list[Path], truth: list[str]) -> list[dict[str, Any]]:
    probs = pred.probabilities
    return [{"image": f.name, "predicted": y, "probability": round(float(probs[i].max()), 3), "true": t}
            for i, (f, y, t) in enumerate(zip(query_files, pred.labels, truth))]


def binomial_range(n: int, prob: float, level: float = 0.95) -> tuple[int, int]:
    """The central ``level`` range ``[lo, hi]`` of correct answers out of ``n`` at accuracy ``prob``: the
    smallest ``lo`` with ``P(X <= lo) > (1 - level) / 2`` and the smallest ``hi`` with ``P(X <= hi) >=
    (1 + level) / 2``, for ``X ~ Binomial(n, prob)`` (exact sums)."""
    import math
    tail = (1 - level) / 2
    cdf, lo, hi = 0.0, None, n
    for k in range(n + 1):
        cdf += math.comb(n, k) * prob ** k * (1 - prob) ** (n - k)
        if lo is None and cdf > tail:
            lo = k
        if cdf >= 1 - tail:
            hi = k
            break
    return int(lo or 0), hi


def demo_summary(p: Params, pred: Any, truth: list[str], outcomes: list[Outcome], dataset: Any) -> dict[str, Any]:
    """The demo's accuracy against chance and against what the trained model's test accuracy predicts.

    Returns ``{"correct", "images", "ways", "chance", "expected", "range", "text"}``: ``expected`` is the
    models' mean 1-shot nearest-centroid test accuracy (:func:`accuracy` over seeds), ``range`` the binomial
    95% range of correct answers it predicts for this many images, and ``text`` one paragraph saying so.
    """
    correct = sum(a == b for a, b in zip(pred.labels, truth))
    n, ways = len(truth), len(pred.classes)
    chance = 1 / ways
    est = accuracy(outcomes, "nearest_centroid", 1) if 1 in p.eval_shots else None
    expected = float(est.value) if est is not None else None
    lo, hi = binomial_range(n, expected) if expected is not None else (None, None)
    text = (f"{correct} of {n} new images are classified correctly ({100 * correct / n:.0f}%); chance is 1 in "
            f"{ways} ({100 * chance:.0f}%). ")
    if expected is not None:
        where = "within" if lo <= correct <= hi else ("above" if correct > hi else "below")
        text += (f"The models' {p.eval_ways}-way 1-shot test accuracy, {est.fmt()}% over {len(outcomes)} seeds, "
                 f"predicts {lo} to {hi} correct of {n} (binomial 95% range): this demo is {where} that range. ")
    text += (f"These are {p.scale}-scale models ({p.backbone}, {p.epochs} epochs on {len(dataset['train'])} "
             f"training images of {dataset['train'].num_classes} classes)"
             + (": a smoke model shows the path in seconds and is expected to beat chance, not to be accurate; "
                "train at paper scale (a larger backbone, more epochs, a GPU) for accuracy." if p.scale == "smoke"
                else "."))
    return {"correct": correct, "images": n, "ways": ways, "chance": chance, "expected": expected,
            "range": (lo, hi), "text": text}


__all__ = ["Params", "NOTEBOOK", "run", "claims", "reference_values", "write_example_folder", "new_images",
           "results_table", "load_data", "data_root", "decode_mode", "demo_summary", "binomial_range", "compare",
           "comparison_table", "comparison_rows", "comparison_notes", "ComparisonRow", "same_function", "decided",
           "interval_caveat", "caveat_of", "split_report", "comparison_figure", "method_recipe", "cannot_run", "method_note", "eval_spec", "COMPARE_METHODS",
           "METHOD_LABELS"]
