"""Notebook 11_set2model: Set2Model networks (seed 003) -- retrieval from concept sets, Table 1 analog.

The notebook's cells call the functions below; nothing else. Protocol (seed 003 Sec. 3-4, PAPER-NOTES 003):

* Training (meta-learning, Sec. 3.2): tuples ``(X, Z+, Z-)`` from the loop's episodic sampler, ``tuples``
  classes per batch, ``|X| = set_size``, ``|Z+| = relevant``, ``|Z-| = negatives`` drawn from the other
  classes' relevant images (:func:`studylib.methods.set2model.tuple_scores`); the histogram loss (Eq. 5-7,
  the authors' conventions: adaptive range, 100 nodes, half-width-2 kernel) of the relevance scores; Adam.
  One network per *training objective* and seed: ``"gauss"`` (S2M-Gauss: scores are log-likelihoods under
  the set's diagonal Gaussian), ``"gmm"`` (S2M-GMM``k``: under a ``components``-GMM fitted by EM and
  back-propagated through unrolled EM steps), ``"avg"`` (AVG-FT, the mean baseline of Eq. 16, trained the
  same way), ``"nn"`` (NN-FT, Eq. 17).
* Pre-learned features (the paper's ``-PL`` rows, Table 1: ImageNet-classification AlexNet features never
  trained for retrieval): with ``pretrained="ce"`` one more network per seed is trained by the loop's
  cross-entropy classification of the training classes (the same images per batch and the same batches as the
  set networks; :class:`studylib.methods.episodes.CEMethod`), and every retrieval score is evaluated on its
  L2-normalised backbone features (NN-PL, AVG-PL, SVM-PL, Gauss-PL, GMMk-PL). Unlike the paper's PL features,
  ours come from the same training classes as the fine-tuned networks; only the objective differs.
* Test (Sec. 4.1, 4.3): the descriptors of the test split (unseen classes); every test class is a concept
  ``eval_draws`` times with a different concept set of ``eval_set_size`` images; the rest of the split is
  the database; AP of the ranking (the set's own images left out), mAP over concepts. Every trained network
  is scored with every retrieval score (NN, AVG, SVM, Gauss, GMM-k for ``eval_components``), so Gauss-AVG-FT
  (a Gaussian fitted on AVG-FT descriptors) is a cell of the same table. SVM (Sec. 4.3, Eq. 18): a linear
  squared-hinge SVM (``LinearSVC``'s primal, ``C = svm_c``) of the concept set against ``2 |X|`` images drawn
  from the other concepts' sets (:func:`studylib.evaluation.retrieval.svm_negatives`), which are then left out
  of that concept's ranking; the paper never fine-tunes it (evaluation only). Three task kinds: ``plain`` (clean
  sets of one class), ``noisy`` (``eval_noise`` of the set replaced by images of other classes, the
  irrelevant images of a web search) and ``polysemous`` (two classes merged into one concept, Fig. 3). Each
  training seed draws its own concept sets (``episode_seed(0, seed)``), shared by every network of that seed, so
  differences are paired by concept within a seed.
* The paper's web data (ImageNet / RGBD / Flowers concept sets from Google image search) are not
  available; the closest protocol our readers allow is its Omniglot retrieval column (paper.yaml: Omniglot
  with the four rotations as classes, sets of 10, tuples of 10 + 10 + 10, 5 tuples per batch, 100-d
  descriptors). The paper's LeNet is replaced by the Conv4 it uses for Table 2; noise and polysemy are
  simulated by the task sampler (:func:`studylib.evaluation.retrieval.retrieval_tasks`). The evidence scale
  (``evidence.yaml``) runs that column on the real Omniglot subset split by alphabet, the variance floor chosen
  on its validation alphabet; its claims are proxies.
* Regime checks (:func:`regimes`; :mod:`studylib.experiments.omniglot_evidence`), shown above the claims table:
  every network beats its untrained network (absolute checks only: none compares two trained networks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch

from studylib.claims.table import ClaimsTable
from studylib.config import param
from studylib.evaluation import episode_seed, extract_features, stats
from studylib.evaluation.retrieval import average_precision, retrieval_tasks, svm_negatives
from studylib.evaluation.verdicts import Claim, Expectation, Regime, beats
from studylib.experiments.common import BACKBONES, DataParams, data_spec as common_data_spec
from studylib.experiments.common import load_data  # noqa: F401 (the notebook calls mod.load_data)
from studylib.experiments.omniglot_evidence import learned, proxy_note, untrained_network
from studylib.methods.set2model import EVAL_ONLY, SCORES, fit_sets, histogram_loss, score_sets, violation_rate
from studylib.numerics.gaussian import GRADS
from studylib.runs.runner import DataSpec, EvalSpec, Outcome, RunSpec, load_trained
from studylib.runs.sweeps import run_sweep
from studylib.training.loop import OPTIMIZERS, TrainConfig
from studylib.utils import config_hash, get_device

NOTEBOOK = "11_set2model"
TASKS = ("plain", "noisy", "polysemous")
EVAL_VERSION = 3  # 3: tasks drawn per training seed; bump when the retrieval evaluation changes, so cached results are recomputed


@dataclass
class Params(DataParams):
    """Parameters of ``notebooks/11_set2model.ipynb``; the defaults are the smoke scale."""

    max_classes: int | None = param(300, ge=3, help="glyphs only: keep this many classes (None: all)")
    rotations: bool = param(False, help="omniglot only: the four 90-degree rotations are classes (paper: True)")
    backbone: str = param("conv4", choices=BACKBONES, help="embedding network (paper, Omniglot: LeNet; we use "
                                                            "the Conv4 of its Table 2)")
    hidden: int = param(32, ge=1, help="conv4 only: filters per block (paper's Conv4: 64)")
    dim: int | None = param(64, ge=1, help="linear layer to this many descriptor dimensions (paper: 100 for "
                                           "characters, 128 for web images; None: the backbone's features)")
    train_models: list[str] = param(["gauss", "gmm", "avg"], choices=SCORES,
                                    help="training objectives, one network each: gauss (S2M-Gauss), gmm "
                                         "(S2M-GMM), avg (AVG-FT), nn (NN-FT); svm is evaluation only")
    pretrained: str | None = param("ce", choices=("ce",), help="the -PL rows: a network trained by cross-entropy "
                                                               "classification of the training classes, every "
                                                               "score evaluated on its features (None: no -PL "
                                                               "rows)")
    components: int = param(2, ge=1, help="mixture components of the gmm objective (paper, Omniglot: 2)")
    tuples: int = param(5, ge=2, help="training tuples (classes) per batch (paper, Omniglot retrieval: 5)",
                        cut=True)
    set_size: int = param(10, ge=1, help="concept set size |X| in training (paper: 10)")
    relevant: int = param(10, ge=1, help="relevant images |Z+| per training tuple (paper: 10)")
    negatives: int | None = param(10, ge=1, help="irrelevant images |Z-| per training tuple, drawn from the "
                                                 "other tuples' relevant images (paper: 10; None: all)")
    train_noise: float = param(0.0, ge=0, lt=1, help="fraction of each training set replaced by another "
                                                     "class's images")
    epochs: int = param(1, ge=1, help="training epochs", cut=True)
    batches_per_epoch: int = param(50, ge=1, help="training batches (tuples x ...) per epoch (smoke: 50, cut from "
                                                  "100 for the suite's time; evidence.yaml sets its own)", cut=True)
    optimizer: str = param("adam", choices=OPTIMIZERS, help="paper: Adam")
    lr: float = param(1e-3, gt=0, help="learning rate (paper: chosen on validation, not stated)")
    bins: int = param(100, ge=2, help="histogram loss: nodes (authors' code: 100)")
    half_width: float = param(2.0, gt=0, help="histogram loss: kernel half-width in node spacings (authors' "
                                              "code: 2; Ustinova and Lempitsky: 1)")
    hist_range: str = param("adaptive", choices=("adaptive", "fixed"), help="histogram loss: nodes span each "
                                                                              "tuple's scores (paper) or [-1, 1]")
    var_floor: float = param(1e-4, gt=0, help="variance added to every fitted Gaussian / component (the authors' "
                                              "1e-6 at paper scale; smoke: 1e-4, as notebook 12's smoke, where 1e-6 "
                                              "was measured worse; not re-measured here)")
    em_iters: int = param(1000, ge=1, help="most EM iterations without a graph in training: EM stops at convergence "
                                           "(1e-5 on the mean log-likelihood per point), this is a cap (the "
                                           "authors': 1000); then em_unroll steps with a graph")
    em_unroll: int = param(3, ge=0, help="EM iterations back-propagated through (training, unrolled em_grad)")
    em_grad: str = param("unrolled", choices=GRADS, help="gradient through the GMM fit: unrolled (em_unroll EM "
                                                         "steps) or implicit (the fixed point's exact gradient, "
                                                         "the paper's Eq. 13-15)")
    eval_set_size: int = param(10, ge=1, help="concept set size at test (paper, Omniglot: 10)")
    eval_draws: int = param(2, ge=1, help="concept sets per test class (each a retrieval task)", cut=True)
    eval_noise: float = param(0.3, ge=0, lt=1, help="noisy tasks: fraction of the set from other classes")
    noise_curve: list[float] = param([0.15, 0.45], ge=0, lt=1, help="noise rates of the robustness figure besides "
                                                                   "0 and eval_noise")
    eval_components: list[int] = param([2, 3], ge=1, help="GMM sizes used at retrieval (GMM-k scores)")
    svm_c: float = param(1.0, gt=0, help="SVM score: LinearSVC's C (paper: not stated); negatives: 2 |X| images "
                                         "of other concepts' sets (paper)")
    seeds: list[int] = param([0, 1, 2], help="training seeds (the project rule: at least 3 for a comparison a verdict "
                                                "rests on)", cut=True)
    device: str = param("auto", help="'auto' (CUDA when present), 'cpu' or 'cuda'")

    def check(self) -> None:
        super().check()
        if not self.seeds:
            raise ValueError("seeds is empty; give at least one training seed, e.g. [0, 1]")
        if not self.train_models:
            raise ValueError("train_models is empty; give at least one objective, e.g. ['gauss', 'avg']")
        bad = [m for m in self.train_models if m in EVAL_ONLY]
        if bad:
            raise ValueError(f"train_models lists {bad}: an evaluation-only score (seed 003 never fine-tunes the "
                             f"SVM; every network is evaluated with it anyway); remove it")
        if len(set(self.train_models)) != len(self.train_models):
            raise ValueError(f"train_models lists an objective twice: {self.train_models}")
        if "gmm" in self.train_models and self.components > self.set_size:
            raise ValueError(f"a {self.components}-component GMM cannot be fitted to sets of set_size="
                             f"{self.set_size}; lower components or raise set_size")
        if max(self.eval_components) > self.eval_set_size:
            raise ValueError(f"eval_components {self.eval_components} exceed eval_set_size={self.eval_set_size}: "
                             f"a GMM needs at least as many set images as components")
        if self.tuples < 2:
            raise ValueError("tuples must be >= 2: the irrelevant images come from the other tuples of a batch")


# ----------------------------------------------------------------------------------------------------------
# Runs
# ----------------------------------------------------------------------------------------------------------

def data_spec(p: Params) -> DataSpec:
    spec = common_data_spec(p)
    if p.data == "omniglot":
        spec.options["rotations"] = p.rotations
    return spec


PL = "pl"  # the key of the pre-learned network in outcomes / results


def model_label(model: str, p: Params) -> str:
    """The paper's row name of a training objective (``"pl"``: the pre-learned network)."""
    return {"gauss": "S2M-Gauss", "gmm": f"S2M-GMM{p.components}", "avg": "AVG-FT", "nn": "NN-FT",
            PL: f"PL ({p.pretrained})"}[model]


def eval_scores(p: Params) -> list[str]:
    """Retrieval scores every network is evaluated with: ``nn``, ``avg``, ``svm``, ``gauss``, ``gmm<k>`` (the
    ``eval_components``, plus the trained mixture's size)."""
    ks = sorted(set(p.eval_components) | ({p.components} if "gmm" in p.train_models else set()))
    return ["nn", "avg", "svm", "gauss"] + [f"gmm{k}" for k in ks]


def own_score(model: str, p: Params) -> str | None:
    """The retrieval score a network was trained for (None for the pre-learned network)."""
    if model == PL:
        return None
    return f"gmm{p.components}" if model == "gmm" else model


def networks(p: Params) -> list[str]:
    """The networks trained per seed: the ``train_models`` and, with ``pretrained``, the PL network."""
    return list(p.train_models) + ([PL] if p.pretrained else [])


def make_spec(p: Params, model: str, seed: int) -> RunSpec:
    opts: dict[str, Any] = {"score": model, "dim": p.dim, "negatives": p.negatives, "noise": p.train_noise,
                            "bins": p.bins, "half_width": p.half_width, "value_range": p.hist_range,
                            "var_floor": p.var_floor}
    if model == "gmm":
        opts.update(components=p.components, em_iters=p.em_iters, em_unroll=p.em_unroll, em_grad=p.em_grad)
    return RunSpec(
        name=f"{NOTEBOOK}-{model}", data=data_spec(p), backbone=p.backbone,
        backbone_options={"hidden": p.hidden} if p.backbone == "conv4" else {},
        method="set2model", method_options=opts, augment="none",
        train=TrainConfig(epochs=p.epochs, sampler="episodic", ways=p.tuples, shots=p.set_size,
                          queries=p.relevant, batches_per_epoch=p.batches_per_epoch, optimizer=p.optimizer,
                          lr=p.lr, weight_decay=0.0, schedule="constant", milestones=[], seed=seed,
                          device=p.device, scale=p.scale),
        # the runner's own few-shot evaluation is a cheap stub; retrieval is evaluated below
        eval=EvalSpec(ways=2, shots=[1], queries=1, episodes=10, classifiers=["nearest_centroid"], cl2n=False,
                      val_episodes=0, seed=0))


def make_pl_spec(p: Params, seed: int) -> RunSpec:
    """The pre-learned network: cross-entropy over the training classes, batches of ``tuples x (set_size +
    relevant)`` images (as many as a set network's batch), the same batches, optimiser and rate."""
    return RunSpec(
        name=f"{NOTEBOOK}-pl-{p.pretrained}", data=data_spec(p), backbone=p.backbone,
        backbone_options={"hidden": p.hidden} if p.backbone == "conv4" else {},
        method=p.pretrained, method_options={}, augment="none",
        train=TrainConfig(epochs=p.epochs, sampler="replacement", batch_size=p.tuples * (p.set_size + p.relevant),
                          batches_per_epoch=p.batches_per_epoch, optimizer=p.optimizer, lr=p.lr, weight_decay=0.0,
                          schedule="constant", milestones=[], seed=seed, device=p.device, scale=p.scale),
        eval=EvalSpec(ways=2, shots=[1], queries=1, episodes=10, classifiers=["nearest_centroid"], cl2n=False,
                      val_episodes=0, seed=0))


def run(p: Params, progress: bool = True) -> dict[str, list[Outcome]]:
    """Train (or load) one network per training objective and seed, and the pre-learned one (key ``"pl"``):
    ``{network: [outcome per seed]}``."""
    p.check()
    nets = networks(p)
    specs = [make_pl_spec(p, s) if m == PL else make_spec(p, m, s) for m in nets for s in p.seeds]
    outs = run_sweep(specs, progress=progress)
    n = len(p.seeds)
    return {m: outs[i * n:(i + 1) * n] for i, m in enumerate(nets)}


# ----------------------------------------------------------------------------------------------------------
# Retrieval evaluation (cached in each run's folder)
# ----------------------------------------------------------------------------------------------------------

def task_settings(p: Params) -> dict[str, dict[str, Any]]:
    """Every task kind's sampler settings (``noise=<r>`` entries feed the robustness figure)."""
    out = {"plain": {"noise": 0.0, "merge": 1}, "noisy": {"noise": p.eval_noise, "merge": 1},
           "polysemous": {"noise": 0.0, "merge": 2}}
    for r in p.noise_curve:
        if float(r) not in (0.0, float(p.eval_noise)):  # those rates are the plain and noisy tasks
            out[f"noise={r:g}"] = {"noise": float(r), "merge": 1}
    return out


def noise_task(p: Params, rate: float) -> str:
    """The task holding the concepts of noise ``rate`` (plain at 0, noisy at ``eval_noise``)."""
    return "plain" if rate == 0.0 else "noisy" if rate == float(p.eval_noise) else f"noise={rate:g}"


def _score_chunked(sets: torch.Tensor, feats: torch.Tensor, score: str, var_floor: float,
                   negatives: torch.Tensor | None = None, svm_c: float = 1.0, chunk: int = 64,
                   qchunk: int = 8192) -> torch.Tensor:
    """``[C, M]`` scores of every database image for every concept set, in chunks (bounded memory);
    ``negatives [C, M-, d]``: the SVM's negative class."""
    kind, k = ("gmm", int(score[3:])) if score.startswith("gmm") else (score, 1)
    rows = []
    for i in range(0, sets.shape[0], chunk):
        model = fit_sets(sets[i:i + chunk], kind, components=k, var_floor=var_floor, em_iters=200, em_tol=1e-6,
                         em_unroll=0, generator=torch.Generator().manual_seed(i),
                         negatives=None if negatives is None else negatives[i:i + chunk], svm_c=svm_c)
        rows.append(torch.cat([score_sets(model, feats[j:j + qchunk]) for j in range(0, feats.shape[0], qchunk)],
                              -1))
    return torch.cat(rows)


def retrieval_eval(p: Params, outcome: Outcome, model: str, untrained: bool = False,
                   split: str = "test") -> dict[str, torch.Tensor]:
    """``{"<task>/<score>": [C] AP per concept, "plain/hist" and "plain/violation": [C]}`` of one network.

    ``plain/hist`` is the histogram loss (the training conventions) of each plain concept's relevant and
    irrelevant database scores under the network's own score, ``plain/violation`` the exact rate of Eq. 5.
    Cached in the run's folder under a hash of the protocol. ``untrained``: the run's initial network
    (:func:`~studylib.experiments.omniglot_evidence.untrained_network`; the regime checks' baseline) on the same
    plain concepts (the other tasks are not evaluated). ``split="val"``: the validation classes (for choosing
    hyperparameters, ``benchmarks/set2model_omniglot_learning.py``).
    """
    settings = task_settings(p)
    if untrained:
        settings = {"plain": settings["plain"]}
    config = {"set_size": p.eval_set_size, "draws": p.eval_draws, "tasks": settings,
              "scores": eval_scores(p), "own": own_score(model, p), "var_floor": p.var_floor,
              "hist": [p.bins, p.half_width, p.hist_range], "svm_c": p.svm_c, "pl": model == PL,
              "v": EVAL_VERSION}
    if untrained:
        config["untrained"] = True
    if split != "test":
        config["split"] = split
    fname = f"retrieval-{config_hash(config)}.pt"
    if outcome.run.has(fname):
        return outcome.run.load_tensor(fname)
    method, transform, dataset = (untrained_network if untrained else load_trained)(outcome)
    device = get_device(p.device)
    test = dataset[split]
    with torch.no_grad():
        feats = extract_features(method.features, test.images, transform, device=device).float()
        if model == PL:  # pre-learned features are L2-normalised like the set networks' descriptors (Sec. 4.2)
            feats = torch.nn.functional.normalize(feats, dim=-1)
        labels = test.labels.to(feats.device)
        out: dict[str, torch.Tensor] = {}
        # each training seed draws its own tasks; the networks of one seed share them (paired)
        task_seed = episode_seed(0, outcome.spec.train.seed)
        for task, kw in settings.items():
            merge = kw["merge"]
            classes = int(torch.unique(labels).numel())
            tasks = retrieval_tasks(labels, p.eval_set_size, concepts=p.eval_draws * (classes // merge),
                                    noise=kw["noise"], merge=merge, seed=task_seed)
            sets = feats[tasks.sets]
            svm_neg = svm_negatives(tasks, labels, 2 * p.eval_set_size, seed=task_seed)
            svm_valid = tasks.valid.clone()
            svm_valid.scatter_(1, svm_neg, False)  # the SVM's training negatives are not ranked
            for score in eval_scores(p):
                s = _score_chunked(sets, feats, score, p.var_floor, feats[svm_neg] if score == "svm" else None,
                                   p.svm_c)
                valid = svm_valid if score == "svm" else tasks.valid
                out[f"{task}/{score}"] = average_precision(s, tasks.relevant, valid).cpu()
                if task == "plain" and score == own_score(model, p):
                    hist, viol = [], []
                    for c in range(s.shape[0]):
                        pos = s[c][tasks.relevant[c] & tasks.valid[c]]
                        neg = s[c][~tasks.relevant[c] & tasks.valid[c]]
                        hist.append(histogram_loss(pos, neg, p.bins, p.hist_range, p.half_width))
                        viol.append(violation_rate(pos, neg))
                    out["plain/hist"] = torch.stack(hist).double().cpu()
                    out["plain/violation"] = torch.stack(viol).double().cpu()
    outcome.run.save_tensor(fname, out)
    return out


def evaluate_all(p: Params, outcomes: dict[str, list[Outcome]]) -> dict[str, list[dict[str, torch.Tensor]]]:
    """:func:`retrieval_eval` of every network: ``{objective: [per seed]}``."""
    return {m: [retrieval_eval(p, o, m) for o in outs] for m, outs in outcomes.items()}


def evaluate_untrained(p: Params, outcomes: dict[str, list[Outcome]]) -> dict[str, list[dict[str, torch.Tensor]]]:
    """:func:`retrieval_eval` of every network's untrained network on its seed's plain concepts: ``{network: [per
    seed]}``. The set networks of a seed (gauss, gmm, avg, nn) start from one network (the backbone and the
    descriptor layer are built right after seeding, the score adds no parameter), evaluated once per seed on the
    first set network's run with every score; the PL network (another method) separately."""
    done: dict[tuple[str, int], dict[str, torch.Tensor]] = {}
    out: dict[str, list[dict[str, torch.Tensor]]] = {}
    for m, outs in outcomes.items():
        row = []
        for o in outs:
            key = (PL if m == PL else "set", o.spec.train.seed)
            if key not in done:
                done[key] = retrieval_eval(p, o, m, untrained=True)
            row.append(done[key])
        out[m] = row
    return out


def task_counts(p: Params) -> dict[str, int]:
    """Concepts per task kind (a data statistic: identical on every machine)."""
    labels = load_data(p)["test"].labels
    classes = int(torch.unique(labels).numel())
    return {t: p.eval_draws * (classes // kw["merge"]) for t, kw in task_settings(p).items()}


def mean_ap(res: dict[str, list[dict[str, torch.Tensor]]], model: str, key: str) -> stats.Estimate:
    """mAP over seeds (each seed's mean AP over the same concepts)."""
    return stats.accuracy([r[key] for r in res[model]])


def score_row_label(model: str, score: str, p: Params) -> str:
    """Table 1's name of a (network, score) cell: ``S2M-Gauss``, ``Gauss-PL``, ``Gauss on AVG-FT``..."""
    if model == PL:
        return f"{score_label(score)}-PL"
    return model_label(model, p) if score == own_score(model, p) else f"{score_label(score)} on {model_label(model, p)}"


def results_table(p: Params, res: dict[str, list[dict[str, torch.Tensor]]]) -> list[dict[str, Any]]:
    """Table 1 analog: one row per (network, retrieval score), mAP (%) per task kind over seeds."""
    rows = []
    for m in res:
        for score in eval_scores(p):
            own = score == own_score(m, p)
            label = score_row_label(m, score, p)
            row: dict[str, Any] = {"method": label, "trained for": model_label(m, p), "score": score_label(score),
                                   "own score": own}
            for t in TASKS:
                row[f"{t} mAP (%)"] = mean_ap(res, m, f"{t}/{score}").fmt()
            rows.append(row)
    return rows


def score_label(score: str) -> str:
    return {"nn": "NN", "avg": "AVG", "gauss": "Gauss", "svm": "SVM"}.get(score, score.upper())


def ft_network(score: str, p: Params) -> str | None:
    """The fine-tuned network of a score's -FT row: the one trained for it; for SVM (never fine-tuned in the
    paper) the AVG-FT network; None when that network is not in ``train_models``."""
    for m in p.train_models:
        if own_score(m, p) == score:
            return m
    return "avg" if score == "svm" and "avg" in p.train_models else None


def pl_ft_table(p: Params, res: dict[str, list[dict[str, torch.Tensor]]], task: str = "plain") -> list[dict[str, Any]]:
    """Table 1's -PL / -FT pairs: for every score, mAP (%) on the pre-learned features and on the network
    fine-tuned for it, and the paired difference FT - PL (by concept, over seeds)."""
    if PL not in res:
        return []
    rows = []
    for score in eval_scores(p):
        m = ft_network(score, p)
        row: dict[str, Any] = {"score": score_label(score), "PL": f"{score_label(score)}-PL",
                               "PL mAP (%)": mean_ap(res, PL, f"{task}/{score}").fmt(),
                               "FT": score_row_label(m, score, p) if m else "-"}
        if m:
            row["FT mAP (%)"] = mean_ap(res, m, f"{task}/{score}").fmt()
            row["FT - PL (pts)"] = stats.paired_difference([r[f"{task}/{score}"] for r in res[m]],
                                                           [r[f"{task}/{score}"] for r in res[PL]]).fmt(signed=True)
        else:
            row["FT mAP (%)"] = row["FT - PL (pts)"] = "-"
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------------------
# Claims
# ----------------------------------------------------------------------------------------------------------

# Seed 003, Table 1 (mAP): ImageNet, RGBD Object, Oxford Flowers, Omniglot ("-" = not run).
PAPER_TABLE1 = {
    "AVG-FT": (0.236, 0.669, 0.439, 0.661),
    "S2M-Gauss": (0.254, 0.706, 0.467, 0.740),
    "Gauss-AVG-FT": (0.246, 0.676, 0.465, 0.695),
    "S2M-GMM2": (0.265, 0.711, 0.560, 0.689),
    "NN-FT": (0.073, 0.318, 0.528, 0.145),
    # pre-learned AlexNet features (no -PL run on Omniglot)
    "NN-PL": (0.070, 0.316, 0.076, None),
    "SVM-PL": (0.080, 0.481, 0.145, None),
    "AVG-PL": (0.183, 0.556, 0.212, None),
    "Gauss-PL": (0.186, 0.529, 0.240, None),
    "GMM2-PL": (0.180, 0.483, 0.301, None),
    "GMM3-PL": (0.174, 0.473, 0.319, None),
    "S2M-GMM3": (0.258, 0.658, 0.581, None),
    "GMM4-PL": (0.178, 0.455, 0.327, None),
    "S2M-GMM4": (0.250, 0.690, 0.577, None),
}
# a paper-scale Omniglot mAP "matches": ours - paper's inside ±3 points (the verdict rule of verdicts.py)
LEVEL_MARGIN = 0.03
# the histogram loss approximates Eq. 5: their paired difference inside ±2 points (the verdict rule of verdicts.py)
HIST_MARGIN = 0.02


def _t1(row: str) -> str:
    v = PAPER_TABLE1[row]
    out = f"{v[0]:.3f} (ImageNet), {v[1]:.3f} (RGBD), {v[2]:.3f} (Flowers)"
    return out + (f", {v[3]:.3f} (Omniglot)" if v[3] is not None else "")


def paper_gap(a: str, b: str, columns: tuple[int, ...] = (0, 1, 2, 3)) -> float | None:
    """The paper's smallest effect ``a - b`` over the Table 1 columns (0-3: ImageNet, RGBD, Flowers, Omniglot)
    that hold both rows (None: none does); a claim's no-effect band is half of it (``verdicts.beats``)."""
    gaps = [PAPER_TABLE1[a][c] - PAPER_TABLE1[b][c] for c in columns
            if PAPER_TABLE1[a][c] is not None and PAPER_TABLE1[b][c] is not None]
    return min(gaps, key=abs) if gaps else None


def _pair(pm: str, ps: str, qm: str, qs: str, task: str) -> tuple[tuple[str, str], tuple[str, str], str]:
    return (pm, ps), (qm, qs), task


def claim_pairs(p: Params) -> dict[str, tuple[tuple[str, str], tuple[str, str], str]]:
    """The paired mAP differences the comparison claims measure: ``id -> ((objective, score) A, B, task)``."""
    k = own_score("gmm", p)
    return {
        "t1-gauss-beats-avg-ft": _pair("gauss", "gauss", "avg", "avg", "plain"),
        "t1-gauss-beats-gauss-on-avg-ft": _pair("gauss", "gauss", "avg", "gauss", "plain"),
        "t1-omniglot-gauss-beats-gmm": _pair("gauss", "gauss", "gmm", k, "plain"),
        "fig3-gmm-beats-gauss-polysemous": _pair("gmm", k, "gauss", "gauss", "polysemous"),
        "sec44-gmm-beats-gauss-noisy": _pair("gmm", k, "gauss", "gauss", "noisy"),
        "t1-gmm-beats-avg-ft-polysemous": _pair("gmm", k, "avg", "avg", "polysemous"),
        "t1-ft-beats-pl-gauss": _pair("gauss", "gauss", PL, "gauss", "plain"),
        "t1-ft-beats-pl-gmm": _pair("gmm", k, PL, k, "plain"),
        "t1-ft-beats-pl-avg": _pair("avg", "avg", PL, "avg", "plain"),
        "sec31-gauss-pl-beats-svm-pl": _pair(PL, "gauss", PL, "svm", "plain"),
        "t1-avg-pl-beats-nn-pl": _pair(PL, "avg", PL, "nn", "plain"),
        "t1-gauss-beats-nn-ft": _pair("gauss", "gauss", "nn", "nn", "plain"),
        "t1-ft-beats-pl-nn": _pair("nn", "nn", PL, "nn", "plain"),
    }


def claims(p: Params, outcomes: dict[str, list[Outcome]] | None = None,
           res: dict[str, list[dict[str, torch.Tensor]]] | None = None,
           untrained: dict[str, list[dict[str, torch.Tensor]]] | None = None) -> ClaimsTable:
    """The claims this notebook tests (from ``p`` alone), measured when ``outcomes`` (or their retrieval results
    ``res``) are given, with the regime checks (:func:`regimes`) when the untrained networks' results
    ``untrained`` are given or computed from ``outcomes``."""
    gk = f"S2M-GMM{p.components}"
    have = set(networks(p))

    def needs(*models: str) -> tuple[bool, str]:
        missing = [m for m in models if m not in have]
        what = [f"the {m} objective in train_models" if m != PL else "pretrained (the -PL network)"
                for m in missing]
        return (not missing, f"needs {', '.join(what)}" if missing else "")

    omni = p.data == "omniglot" and p.scale == "paper" and p.rotations
    why_omni = "needs Omniglot with rotations at paper scale (the paper's Omniglot retrieval protocol)"
    rows = []

    def add(cid: str, text: str, source: str, paper: str, test: str, expect: Expectation, models: tuple[str, ...],
            extra: tuple[bool, str] = (True, ""), rows_compared: tuple[str, str] | None = None,
            columns: tuple[int, ...] = (0, 1, 2, 3)) -> None:
        ok, why = needs(*models)
        if ok and not extra[0]:
            ok, why = extra
        if rows_compared is not None:  # the band rule: half the smallest of the paper's gaps the claim quotes
            expect = beats(expect.kind, paper_gap(*rows_compared, columns))
        rows.append(Claim(cid, text, source, paper, test + proxy_note(p), expect, applies=ok, why_not=why))

    add("t1-gauss-beats-avg-ft", "Training through the Gaussian fit beats training for the mean (S2M-Gauss > "
        "AVG-FT)", "Table 1", f"S2M-Gauss {_t1('S2M-Gauss')}; AVG-FT {_t1('AVG-FT')}",
        "mAP S2M-Gauss - AVG-FT, plain concepts, paired by concept", Expectation("greater"), ("gauss", "avg"),
        rows_compared=("S2M-Gauss", "AVG-FT"), columns=(3,))
    add("t1-gauss-beats-gauss-on-avg-ft", "End-to-end training through the fit beats fitting a Gaussian to "
        "descriptors trained for the mean (S2M-Gauss > Gauss-AVG-FT)", "Table 1",
        f"S2M-Gauss {_t1('S2M-Gauss')}; Gauss-AVG-FT {_t1('Gauss-AVG-FT')}",
        "mAP S2M-Gauss - Gauss on AVG-FT, plain concepts, paired by concept", Expectation("greater"),
        ("gauss", "avg"), rows_compared=("S2M-Gauss", "Gauss-AVG-FT"), columns=(3,))
    add("t1-omniglot-gauss-beats-gmm", "On small clean concept sets (10 characters) a single Gaussian beats a "
        "mixture (S2M-Gauss > S2M-GMM2)", "Table 1 (Omniglot), Sec. 4.4", "0.740 vs 0.689 (Omniglot)",
        f"mAP S2M-Gauss - {gk}, plain concepts, paired by concept", Expectation("greater"), ("gauss", "gmm"),
        (p.components == 2, "the paper's comparison is with GMM2 (components=2)"),
        rows_compared=("S2M-Gauss", "S2M-GMM2"), columns=(3,))
    add("fig3-gmm-beats-gauss-polysemous", "Mixtures handle polysemous concepts better than one Gaussian",
        "Fig. 3, Table 1 (Flowers), Sec. 4.4", "S2M-GMM2 0.560 vs S2M-Gauss 0.467 (Flowers, polysemous/noisy "
        "web sets)", f"mAP {gk} - S2M-Gauss, polysemous concepts (two classes merged), paired by concept",
        Expectation("greater"), ("gauss", "gmm"), rows_compared=("S2M-GMM2", "S2M-Gauss"), columns=(2,))
    add("sec44-gmm-beats-gauss-noisy", "Mixtures absorb the irrelevant images of a noisy concept set in a "
        "separate component and retrieve better than one Gaussian", "Sec. 4.4, Fig. 2, Table 1 (ImageNet)",
        "S2M-GMM2 0.265 vs S2M-Gauss 0.254 (ImageNet, raw Google search sets)",
        f"mAP {gk} - S2M-Gauss, noisy concepts ({p.eval_noise:g} of the set irrelevant), paired by concept",
        Expectation("greater"), ("gauss", "gmm"), rows_compared=("S2M-GMM2", "S2M-Gauss"), columns=(0,))
    add("t1-gmm-beats-avg-ft-polysemous", "Set2Model mixtures beat the mean baseline where concepts are "
        "polysemous", "Table 1 (Flowers)", "S2M-GMM2 0.560 vs AVG-FT 0.439 (Flowers)",
        f"mAP {gk} - AVG-FT, polysemous concepts, paired by concept", Expectation("greater"), ("gmm", "avg"),
        rows_compared=("S2M-GMM2", "AVG-FT"), columns=(2,))
    pl_note = ("our PL network is a cross-entropy classifier of the same training classes, not the paper's "
               "ImageNet AlexNet")
    add("t1-ft-beats-pl-gauss", "Fine-tuning through the Gaussian fit beats a Gaussian on pre-learned features "
        "(S2M-Gauss > Gauss-PL)", "Table 1", f"S2M-Gauss {_t1('S2M-Gauss')}; Gauss-PL {_t1('Gauss-PL')}",
        f"mAP S2M-Gauss - Gauss-PL, plain concepts, paired by concept ({pl_note})", Expectation("greater"),
        ("gauss", PL), rows_compared=("S2M-Gauss", "Gauss-PL"))
    add("t1-ft-beats-pl-gmm", f"Fine-tuning through the mixture fit beats a mixture on pre-learned features "
        f"({gk} > GMM{p.components}-PL)", "Table 1",
        f"S2M-GMM2 {_t1('S2M-GMM2')}; GMM2-PL {_t1('GMM2-PL')}",
        f"mAP {gk} - GMM{p.components}-PL, plain concepts, paired by concept", Expectation("greater"),
        ("gmm", PL), rows_compared=("S2M-GMM2", "GMM2-PL"))
    add("t1-ft-beats-pl-avg", "Fine-tuning for the mean score beats the mean of pre-learned features (AVG-FT > "
        "AVG-PL)", "Table 1", f"AVG-FT {_t1('AVG-FT')}; AVG-PL {_t1('AVG-PL')}",
        "mAP AVG-FT - AVG-PL, plain concepts, paired by concept", Expectation("greater"), ("avg", PL),
        rows_compared=("AVG-FT", "AVG-PL"))
    add("sec31-gauss-pl-beats-svm-pl", "On pre-learned features a generative Gaussian ranks better than a "
        "discriminative SVM (Gauss-PL > SVM-PL)", "Sec. 3.1, Table 1",
        f"Gauss-PL {_t1('Gauss-PL')}; SVM-PL {_t1('SVM-PL')}",
        f"mAP Gauss-PL - SVM-PL (SVM: C = {p.svm_c:g}, {2 * p.eval_set_size} negatives from other concepts' sets), "
        "plain concepts, paired by concept", Expectation("greater"), (PL,),
        rows_compared=("Gauss-PL", "SVM-PL"))
    add("t1-avg-pl-beats-nn-pl", "On pre-learned features the set mean ranks better than the nearest set member "
        "(AVG-PL > NN-PL)", "Table 1", f"AVG-PL {_t1('AVG-PL')}; NN-PL {_t1('NN-PL')}",
        f"mAP AVG-PL - NN-PL, plain concepts, paired by concept ({pl_note})", Expectation("greater"), (PL,),
        rows_compared=("AVG-PL", "NN-PL"))
    add("t1-gauss-beats-nn-ft", "Training through the Gaussian fit beats training for the nearest set member "
        "(S2M-Gauss > NN-FT)", "Table 1 (Omniglot)", "S2M-Gauss 0.740 vs NN-FT 0.145 (Omniglot)",
        "mAP S2M-Gauss - NN-FT, plain concepts, paired by concept", Expectation("greater"), ("gauss", "nn"),
        rows_compared=("S2M-Gauss", "NN-FT"), columns=(3,))
    add("t1-ft-beats-pl-nn", "Fine-tuning for the nearest-neighbour score beats it on pre-learned features (NN-FT > "
        "NN-PL)", "Table 1", f"NN-FT {_t1('NN-FT')}; NN-PL {_t1('NN-PL')}",
        f"mAP NN-FT - NN-PL, plain concepts, paired by concept ({pl_note})", Expectation("greater"), ("nn", PL),
        rows_compared=("NN-FT", "NN-PL"))
    why_gmm34 = ("Table 1 has S2M-GMM3/4 only on the web data sets (ImageNet, RGBD, Flowers), which "
                 "the study cannot obtain (Google image search sets); the paper does not run them on Omniglot, the "
                 "data here (\"we do not use GMM with 3 or 4 components with Omniglot due to small size of the "
                 "concept-describing sets\", Table 1)")
    for m in (3, 4):
        rows.append(Claim(f"t1-s2m-gmm{m}-beats-gmm{m}-pl", f"Fine-tuning through a {m}-component mixture fit beats "
                          f"the mixture on pre-learned features (S2M-GMM{m} > GMM{m}-PL)", "Table 1",
                          f"S2M-GMM{m} {_t1(f'S2M-GMM{m}')}; GMM{m}-PL {_t1(f'GMM{m}-PL')}",
                          f"mAP S2M-GMM{m} - GMM{m}-PL on web concept sets",
                          beats("greater", paper_gap(f"S2M-GMM{m}", f"GMM{m}-PL")), applies=False,
                          why_not=why_gmm34))
    add("sec32-hist-approximates-eq5", "The histogram loss (Eq. 7) is a differentiable approximation of the "
        "violation probability (Eq. 5)", "Sec. 3.2", "",
        f"histogram loss - exact violation rate on test concepts (S2M-Gauss scores, within "
        f"{100 * HIST_MARGIN:g} pts)", Expectation("within", margin=HIST_MARGIN), ("gauss",))
    for model, row in (("gauss", "S2M-Gauss"), ("avg", "AVG-FT")):
        add(f"t1-omniglot-{model}-level", f"{row} mAP on Omniglot retrieval", "Table 1 (Omniglot)",
            f"{PAPER_TABLE1[row][3]:.3f}", f"our mAP - the paper's (within {100 * LEVEL_MARGIN:g} pts)",
            Expectation("within", margin=LEVEL_MARGIN), (model,), (omni, why_omni))
    table = ClaimsTable(NOTEBOOK, p.scale, rows)
    if outcomes is not None or res is not None:
        res = res if res is not None else evaluate_all(p, outcomes)
        for cid, (a, b, task) in claim_pairs(p).items():
            if table[cid].applies:
                table.measure(cid, stats.paired_difference([r[f"{task}/{a[1]}"] for r in res[a[0]]],
                                                           [r[f"{task}/{b[1]}"] for r in res[b[0]]]))
        if table["sec32-hist-approximates-eq5"].applies:
            table.measure("sec32-hist-approximates-eq5", stats.paired_difference(
                [r["plain/hist"] for r in res["gauss"]], [r["plain/violation"] for r in res["gauss"]]))
        for model, row in (("gauss", "S2M-Gauss"), ("avg", "AVG-FT")):
            c = table[f"t1-omniglot-{model}-level"]
            if c.applies:
                ref = PAPER_TABLE1[row][3]
                table.measure(c.id, stats.combine(lambda a: a - ref,
                                                  mean_ap(res, model, f"plain/{own_score(model, p)}")))
        if untrained is None and outcomes is not None:
            untrained = evaluate_untrained(p, outcomes)
        if untrained is not None:
            for r in regimes(p, res, untrained):
                table.regime(r)
    return table


def regimes(p: Params, res: dict[str, list[dict[str, torch.Tensor]]],
            untrained: dict[str, list[dict[str, torch.Tensor]]]) -> list[Regime]:
    """The regime checks (:mod:`studylib.experiments.omniglot_evidence`), on plain concepts:

    * every network beats its untrained network with its own score (the PL network with the Gauss score),
      gating every comparison it enters; NN-FT's check is shown and gates nothing: the paper's NN-FT is its
      worst row on Omniglot (0.145 against 0.661-0.740), so an NN-FT that does not learn is what Table 1 says.

    No check compares a baseline with S2M-Gauss (issue 42: a gate never depends on the contrast it gates; the
    earlier "AVG-FT / NN-FT within the paper's gap of S2M-Gauss + 5 pts" did).

    The level claims against Table 1's numbers and the histogram-loss check are not gated."""
    pairs = claim_pairs(p)
    out = []
    for m in res:
        score = own_score(m, p) or "gauss"
        gates = [] if m == "nn" else [cid for cid, ((a, _), (b, _), _) in pairs.items() if m in (a, b)]
        out.append(learned(score_row_label(m, score, p), [r[f"plain/{score}"] for r in res[m]],
                           [r[f"plain/{score}"] for r in untrained.get(m, [])], gates, "plain concepts, mAP"))
    return out


def reference_values(p: Params, outcomes: dict[str, list[Outcome]],
                     res: dict[str, list[dict[str, torch.Tensor]]] | None = None) -> dict[str, Any]:
    """The trained numbers the notebook asserts (mAP per network, own score and task; the claims' effects)
    and the exact concept counts per task."""
    res = res if res is not None else evaluate_all(p, outcomes)
    out: dict[str, Any] = {}
    for m in res:
        for score in ([own_score(m, p)] if m != PL else ["avg", "svm", "gauss"]):
            for t in TASKS:
                out[f"{m}/{t}/{score}"] = mean_ap(res, m, f"{t}/{score}")
    table = claims(p, outcomes, res)
    for c in table:
        if c.applies and isinstance(c.measured, stats.Estimate):
            out[f"claim/{c.id}"] = c.measured
    out.update({f"concepts/{t}": n for t, n in task_counts(p).items()})
    return out


# ----------------------------------------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------------------------------------

def noise_figure(p: Params, res: dict[str, list[dict[str, torch.Tensor]]]) -> plt.Figure:
    """mAP against the fraction of irrelevant images in the concept set, per network with its own score
    (and Gaussian retrieval on AVG-FT descriptors), mean over seeds with the 95% interval."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    lines = [(m, own_score(m, p)) for m in res if m != PL] + ([("avg", "gauss")] if "avg" in res else [])
    lines += [(PL, "gauss")] if PL in res else []
    rates = sorted({0.0, float(p.eval_noise)} | {float(r) for r in p.noise_curve})
    for i, (m, score) in enumerate(lines):
        est = [mean_ap(res, m, f"{noise_task(p, r)}/{score}") for r in rates]
        y = np.array([e.value for e in est]) * 100
        c = np.array([e.ci95 for e in est]) * 100
        label = score_row_label(m, score, p)
        ax.errorbar(rates, y, yerr=c, marker="o", capsize=3, label=label, color=f"C{i}")
    ax.set(xlabel="fraction of irrelevant images in the concept set", ylabel="mAP (%)",
           title=f"Retrieval under set noise ({p.scale})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def task_bars_rows(p: Params, res: dict[str, list[dict[str, torch.Tensor]]]) -> list[dict[str, Any]]:
    """Rows for :func:`studylib.plots.accuracy_bars`: mAP of each network's own score per task kind."""
    rows = []
    for m in res:
        if m == PL:
            continue
        for t in TASKS:
            e = mean_ap(res, m, f"{t}/{own_score(m, p)}")
            rows.append({"task": t, "method": model_label(m, p), "mean": e.value, "ci95": e.ci95})
    return rows


def retrieval_examples(p: Params, outcome: Outcome, model: str = "gmm", top: int = 8,
                       concepts: int = 3) -> plt.Figure:
    """Fig. 2-3 analog: for polysemous concepts (two merged classes), the set and the top images retrieved
    by each mixture component of the fitted GMM (a relevant image framed green, an irrelevant one red)."""
    method, transform, dataset = load_trained(outcome)
    test = dataset["test"]
    device = get_device(p.device)
    with torch.no_grad():
        feats = extract_features(method.features, test.images, transform, device=device).float()
    labels = test.labels.to(feats.device)
    k = p.components if model == "gmm" else max(p.eval_components)
    tasks = retrieval_tasks(labels, p.eval_set_size, concepts=concepts, merge=2, seed=0)
    gmm = fit_sets(feats[tasks.sets], "gmm", components=k, var_floor=p.var_floor, em_iters=200, em_unroll=0,
                   generator=torch.Generator().manual_seed(0)).params
    from studylib.numerics.gaussian import component_logpdf
    rows = concepts * (1 + k)
    fig, axes = plt.subplots(rows, top, figsize=(top * 0.8, rows * 0.9))
    for c in range(concepts):
        comp = component_logpdf(feats, type(gmm)(gmm.weights[c], gmm.means[c], gmm.vars[c]))  # [M, K]
        comp = comp.masked_fill(~tasks.valid[c][:, None], float("-inf"))
        for j in range(top):
            ax = axes[c * (1 + k), j]
            if j < p.eval_set_size:
                ax.imshow(test.images[int(tasks.sets[c, j])].permute(1, 2, 0).squeeze(-1), cmap="gray")
            ax.axis("off")
        axes[c * (1 + k), 0].set_title(f"concept {c}: set", fontsize=7, loc="left")
        for kk in range(k):
            best = torch.argsort(comp[:, kk], descending=True)[:top]
            for j, idx in enumerate(best.tolist()):
                ax = axes[c * (1 + k) + 1 + kk, j]
                ax.imshow(test.images[idx].permute(1, 2, 0).squeeze(-1), cmap="gray")
                ok = bool(tasks.relevant[c, idx])
                for sp in ax.spines.values():
                    sp.set_color("green" if ok else "red")
                    sp.set_linewidth(2)
                ax.set_xticks([])
                ax.set_yticks([])
            axes[c * (1 + k) + 1 + kk, 0].set_title(f"component {kk + 1} (w={float(gmm.weights[c, kk]):.2f})",
                                                     fontsize=7, loc="left")
    fig.suptitle(f"Polysemous concepts: top images per mixture component ({model_label(model, p)}, {p.scale})",
                 fontsize=9)
    fig.tight_layout()
    return fig


def histogram_demo() -> dict[str, float]:
    """Exact numbers of the histogram loss on a fixed example (a formula check, the same on every machine):
    positives {0.1, 0.4, 0.8}, negatives {0.0, 0.5}; Eq. 5 gives 2/6 violations."""
    pos = torch.tensor([[0.1, 0.4, 0.8]], dtype=torch.float64)
    neg = torch.tensor([[0.0, 0.5]], dtype=torch.float64)
    out = {"violation rate (Eq. 5)": float(violation_rate(pos, neg))}
    for bins in (10, 100, 1000):
        out[f"histogram loss, {bins} nodes"] = float(histogram_loss(pos, neg, bins=bins))
    return out

