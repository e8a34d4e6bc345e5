"""Notebook 09_spe_synthetic: a 2-D SPE on seed 002's colour/orientation L shapes (Sec. 3.1, Fig. 1-3).

The notebook's cells call the functions below; nothing else. Protocol (seed 002, Sec. 3.1 and App. A.2;
``studylib.data.lshapes`` documents the generator):

* Four classes (two orientations x two hues, 30-degree standard deviations), 15% of the training images with
  per-pixel hue noise and shortened legs. Training: 4-way episodes with 2 support images per class and the
  intersection sampler with 8 samples per query, learning rate 1e-4 (the paper's optimiser is not named;
  Adam here).
* Held-out accuracy: 4-way 2-shot episodes on the test split, naive sampler with 200 samples (Sec. 3), next
  to the Bayes-optimal accuracy of the generative model (about 87%, :func:`bayes_optimal_accuracy`).
* Fig. 2: the 5 x 5 interpolation between the class centres, embedded (means and 0.4-sigma ellipses).
* Fig. 3: the embedding variance on the colour and the orientation dimension as the hue noise grows and as
  the legs shorten. Which embedding dimension codes colour is read off the clean test embeddings
  (:func:`factor_alignment`: the share of each dimension's variance explained by the hue class vs. the
  orientation class), not assumed.
* Not in the paper: the embedding variance as an out-of-distribution score, the AUROC of clean test images
  against the same latents rendered with hue noise or shorter legs (:func:`ood_auroc`).

Network: the paper's synthetic network is Conv4 plus two more conv blocks for 64-px inputs
(``conv_blocks: 6``, the paper parameters); the smoke run keeps four blocks, so the last (plain) block's map
(2x2 at 32 px) is average-pooled to the ``2d`` outputs. The paper stops training early on validation accuracy with an
unstated patience; ``patience`` does that (paper parameters: 10 validations, best weights kept), and the smoke
run trains a fixed length with the validation accuracy logged per epoch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.offsetbox import AnnotationBbox, OffsetImage
from matplotlib.patches import Ellipse
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

from studylib.config import param
from studylib.data.lshapes import (LShapeFactors, LShapeProbe, LShapeSpec, bayes_classify, bayes_optimal_accuracy,
                                   hue_noise_probe, interpolation_probe, leg_length_probe, render_lshapes)
from studylib.experiments.runner import DataSpec, Outcome, RunSpec, run_spec
from studylib.experiments.spe_common import (cached, eval_spec_stub, few_shot_accuracies, load_for_evaluation, method_parts,
                                             model_features, split_gaussian_features)
from studylib.methods.base import Method
from studylib.training.loop import OPTIMIZERS, SCHEDULES, TrainConfig
from studylib.utils import mean_ci95

NOTEBOOK = "09_spe_synthetic"
WAYS = 4  # the four classes of the synthetic domain

# Seed 002, Sec. 3.1: the paper's numbers for the comparison cell.
PAPER = {"heldout_accuracy": 0.86, "bayes_optimal_accuracy": 0.87}


@dataclass
class Params:
    """Parameters of ``notebooks/09_spe_synthetic.ipynb`` (``params/09_spe_synthetic/{smoke,paper}.yaml``)."""

    scale: str = param("smoke", choices=("smoke", "paper"), help="label of the parameter set, shown in titles")
    image_size: int = param(64, help="side of the generated images (paper: 64)")
    orientation_std: float = param(30.0, help="class std of the orientation, degrees (App. A.2: 30)")
    hue_std: float = param(30.0, help="class std of the hue, degrees (App. A.2: 30)")
    train_per_class: int = param(1500, help="training images per class (the paper gives none)")
    val_per_class: int = param(250, help="validation images per class (0: no validation)")
    test_per_class: int = param(250, help="test images per class")
    data_seed: int = param(0, help="seed of the generated data set")
    dim: int = param(2, help="embedding dimensionality d (paper: 2)")
    hidden: int = param(64, help="filters of the first three conv blocks (paper: 64)")
    conv_blocks: int = param(4, help="conv blocks of the network (App. A.2: Conv4 + 2 = 6 for 64-px images)")
    sampler: str = param("intersection", choices=("intersection", "naive"), help="training sampler (paper: "
                                                                                  "intersection)")
    samples: int = param(8, help="training samples per query (App. A.2: 8)")
    shots: int = param(2, help="support images per class in training and test episodes (App. A.2: 2)")
    queries: int = param(6, help="query images per class in a training episode (the paper gives none)")
    epochs: int = param(50)
    patience: int | None = param(None, help="early stopping: validations without a new best val_acc "
                                          "before training stops (App. A; None: fixed length)")
    batches_per_epoch: int = param(100, help="training episodes per epoch")
    optimizer: str = param("adam", choices=OPTIMIZERS)
    lr: float = param(1e-4, help="App. A.2: 1e-4")
    weight_decay: float = param(0.0)
    schedule: str = param("constant", choices=SCHEDULES)
    eval_queries: int = param(15, help="query images per class in a test episode")
    eval_episodes: int = param(1000, help="4-way test episodes")
    eval_samples: int = param(200, help="naive-sampler samples per test query (Sec. 3: 200)")
    val_episodes: int = param(200, help="validation episodes after each epoch (0: none)")
    interp_steps: int = param(5, help="Fig. 2: steps x steps interpolation grid (paper: 5 x 5 = 25)")
    hue_levels: list[float] = param([0.0, 9.0, 18.0, 27.0, 36.0, 45.0, 54.0, 63.0, 72.0],
                                    help="Fig. 3 left: per-pixel hue-noise std levels, degrees")
    per_level: int = param(16, help="Fig. 3 left: images per centre and hue-noise level")
    leg_fractions: list[float] = param([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1],
                                       help="Fig. 3 right: leg-length factors")
    ood_hue_levels: list[float] = param([18.0, 36.0, 54.0], help="OOD: hue-noise stds applied to clean test latents")
    ood_leg_fractions: list[float] = param([0.75, 0.5, 0.25], help="OOD: leg factors applied to clean test latents")
    bootstrap: int = param(500, help="bootstrap resamples for the AUROC confidence intervals")
    seed: int = param(0, help="training seed")
    device: str = param("auto", help="'auto' (CUDA when present), 'cpu' or 'cuda'")

    def check(self) -> None:
        if self.test_per_class < self.shots + self.eval_queries:
            raise ValueError(f"test_per_class={self.test_per_class} cannot fill a test episode of {self.shots} shots "
                             f"+ {self.eval_queries} queries per class; raise test_per_class or lower eval_queries")
        if self.train_per_class < self.shots + self.queries:
            raise ValueError(f"train_per_class={self.train_per_class} cannot fill a training episode of "
                             f"{self.shots} + {self.queries} images per class")
        if self.val_episodes > 0 and self.val_per_class < self.shots + self.eval_queries:
            raise ValueError(f"val_per_class={self.val_per_class} cannot fill a validation episode; raise it or set "
                             f"val_episodes=0")
        if not self.hue_levels or not self.leg_fractions:
            raise ValueError("hue_levels and leg_fractions need at least one value each")
        if self.dim < 2:
            raise ValueError(f"the figures need a 2-D (or larger) embedding, got dim={self.dim}")


# ----------------------------------------------------------------------------------------------------------
# Data and training
# ----------------------------------------------------------------------------------------------------------

def lshape_spec(p: Params) -> LShapeSpec:
    """The generator's parameters (everything else at the App. A.2 defaults of :class:`LShapeSpec`)."""
    return LShapeSpec(image_size=p.image_size, orientation_std=p.orientation_std, hue_std=p.hue_std)


def data_spec(p: Params) -> DataSpec:
    return DataSpec("lshapes", None, {"image_size": p.image_size, "orientation_std": p.orientation_std,
                                      "hue_std": p.hue_std, "train": p.train_per_class, "val": p.val_per_class,
                                      "test": p.test_per_class, "seed": p.data_seed})


def spec_from_params(p: Params) -> RunSpec:
    """The SPE run: Conv4 with ``2d`` outputs, 4-way ``shots``-shot episodes, the chosen training sampler."""
    method, method_opts, bb_opts = method_parts("spe", p.dim, p.hidden, p.sampler, p.samples, p.eval_samples)
    if p.conv_blocks != 4:  # the default network keeps its earlier configuration (and run hash)
        bb_opts["depth"] = p.conv_blocks
    return RunSpec(
        name=f"spe-lshapes-{p.sampler}",
        data=data_spec(p), backbone="conv4", backbone_options=bb_opts, method=method, method_options=method_opts,
        augment="none",
        train=TrainConfig(epochs=p.epochs, sampler="episodic", ways=WAYS, shots=p.shots, queries=p.queries,
                          batches_per_epoch=p.batches_per_epoch, optimizer=p.optimizer, lr=p.lr,
                          weight_decay=p.weight_decay, schedule=p.schedule, seed=p.seed, device=p.device,
                          patience=p.patience, scale=p.scale),
        eval=eval_spec_stub(WAYS, p.shots, p.eval_queries, val_episodes=p.val_episodes if p.val_per_class else 0,
                            episodes=50, seed=p.seed))


def run(p: Params) -> Outcome:
    return run_spec(spec_from_params(p))


@dataclass
class Trained:
    """A finished run rebuilt for probing: ``embed(images uint8) -> (mu [N, d], var [N, d])`` on the CPU."""

    outcome: Outcome
    method: Method
    transform: Callable[[torch.Tensor], torch.Tensor]
    dataset: Any

    def embed(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu, var = split_gaussian_features(model_features(self.method, images, self.transform))
        return mu.cpu(), var.cpu()

    @property
    def sigma_eps2(self) -> torch.Tensor:
        return self.method.sigma_eps2.detach().cpu()  # type: ignore[attr-defined]


def load(outcome: Outcome) -> Trained:
    return Trained(outcome, *load_for_evaluation(outcome))


# ----------------------------------------------------------------------------------------------------------
# Held-out accuracy and the Bayes-optimal bound
# ----------------------------------------------------------------------------------------------------------

def heldout_accuracy(t: Trained, p: Params) -> dict[str, Any]:
    """SPE accuracy on 4-way ``shots``-shot test episodes (naive sampler, ``eval_samples``) and the Bayes bounds.

    Returns ``{"spe": (mean, ci95), "bayes_analytic": float, "bayes_test": (mean, ci95)}``: the analytic
    Bayes-optimal accuracy of the generative model (quadrature) and the Bayes classifier's accuracy on the
    test split's own latents (a finite-sample check; CI over images). Both bound the accuracy of any
    classifier of the images, which see the latents only through rendering and noise.
    """
    acc = few_shot_accuracies(t.outcome, [WAYS], [p.shots], p.eval_queries, p.eval_episodes, "test", p.seed,
                              p.eval_samples, loaded=(t.method, t.transform, t.dataset))[f"{WAYS}way/{p.shots}shot"]
    f: LShapeFactors = t.dataset.info["factors"]["test"]
    bayes = (bayes_classify(f.orientation.double(), f.hue.double(), lshape_spec(p)) == f.labels).double()
    return {"spe": mean_ci95(acc), "episodes": int(acc.numel()),
            "bayes_analytic": bayes_optimal_accuracy(lshape_spec(p)),
            "bayes_test": mean_ci95(bayes), "test_images": len(f)}


# ----------------------------------------------------------------------------------------------------------
# Which embedding dimension codes which factor
# ----------------------------------------------------------------------------------------------------------

def eta_squared(values: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Correlation ratio per column: ``[N, d]`` values, ``[N]`` group ids -> ``[d]`` between-group variance
    share ``sum_g n_g (mean_g - mean)^2 / sum (x - mean)^2`` (1: the groups explain the column fully)."""
    x = values.double()
    g = groups.long()
    k = int(g.max()) + 1
    counts = torch.bincount(g, minlength=k).double()
    sums = torch.zeros(k, x.shape[1], dtype=torch.float64).index_add_(0, g, x)
    means = sums / counts.clamp_min(1).unsqueeze(1)
    grand = x.mean(0)
    between = (counts.unsqueeze(1) * (means - grand) ** 2).sum(0)
    total = ((x - grand) ** 2).sum(0)
    return between / total.clamp_min(1e-12)


def factor_alignment(mu: torch.Tensor, labels: torch.Tensor) -> dict[str, Any]:
    """Which embedding dimension codes colour and which orientation, from clean embeddings.

    Class ``2 i + j`` has orientation centre ``i`` and hue centre ``j`` (:class:`LShapeSpec`), so the hue class
    is ``label % 2`` and the orientation class ``label // 2``. The colour dimension is the one whose mean
    embedding is best explained by the hue class relative to the orientation class (largest
    ``eta2_hue - eta2_orientation``); the orientation dimension the best of the others by the reverse.
    """
    eh = eta_squared(mu, labels % 2)
    eo = eta_squared(mu, labels // 2)
    colour = int(torch.argmax(eh - eo))
    rest = [i for i in range(mu.shape[1]) if i != colour]
    orient = rest[int(torch.argmax((eo - eh)[rest]))]
    return {"colour_dim": colour, "orientation_dim": orient, "eta2_hue": eh.tolist(), "eta2_orientation": eo.tolist()}


def clean_test_alignment(t: Trained) -> dict[str, Any]:
    """:func:`factor_alignment` on the clean (noise-free, full-length) test images."""
    split = t.dataset["test"]
    f: LShapeFactors = t.dataset.info["factors"]["test"]
    keep = ~f.noisy
    mu, _ = t.embed(split.images[keep])
    return factor_alignment(mu, f.labels[keep])


# ----------------------------------------------------------------------------------------------------------
# Fig. 3: variance sweeps
# ----------------------------------------------------------------------------------------------------------

def variance_sweep(t: Trained, probe: LShapeProbe, align: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """Mean embedding variance per swept level on the colour and the orientation dimension (CI95 over the
    images of a level: all centres, all samples)."""
    _, var = t.embed(probe.images)
    rows = []
    for level in torch.unique(probe.value, sorted=True).tolist():
        sel = probe.value == level
        for role in ("colour", "orientation"):
            m, c = mean_ci95(var[sel, align[f"{role}_dim"]])
            rows.append({"probe": name, "level": float(level), "dim": role, "mean": m, "ci95": c, "n": int(sel.sum())})
    return rows


def sweep_trends(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per probe and dimension: variance at the mildest and the strongest level, their ratio, and the Spearman
    rank correlation between level and mean variance (over levels) with its p-value."""
    out = []
    for probe in dict.fromkeys(r["probe"] for r in rows):
        for role in ("colour", "orientation"):
            rs = [r for r in rows if r["probe"] == probe and r["dim"] == role]
            rs.sort(key=lambda r: r["level"], reverse=(probe == "legs"))  # legs: 1.0 (mildest) first
            rho, pval = spearmanr([r["level"] for r in rs], [r["mean"] for r in rs])
            if probe == "legs":
                rho = -rho  # report "variance grows as the perturbation grows" with a positive sign
            out.append({"probe": probe, "dim": role, "mildest": rs[0]["mean"], "mildest_ci95": rs[0]["ci95"],
                        "strongest": rs[-1]["mean"], "strongest_ci95": rs[-1]["ci95"],
                        "ratio": rs[-1]["mean"] / max(rs[0]["mean"], 1e-12), "spearman": float(rho),
                        "p": float(pval)})
    return out


def fig3_probes(p: Params) -> dict[str, LShapeProbe]:
    spec = lshape_spec(p)
    return {"hue_noise": hue_noise_probe(p.hue_levels, p.per_level, spec, seed=p.seed),
            "legs": leg_length_probe(p.leg_fractions, spec)}


# ----------------------------------------------------------------------------------------------------------
# Variance as an out-of-distribution score (not measured in the paper)
# ----------------------------------------------------------------------------------------------------------

def _perturbed(f: LShapeFactors, hue_std: float | None = None, leg: float | None = None) -> LShapeFactors:
    g = LShapeFactors(f.labels.clone(), f.orientation.clone(), f.hue.clone(), f.noise_std.clone(), f.leg.clone(),
                      f.noisy.clone())
    if hue_std is not None:
        g.noise_std = torch.full_like(g.noise_std, float(hue_std))
        g.noisy = torch.ones_like(g.noisy)
    if leg is not None:
        g.leg = torch.full_like(g.leg, float(leg))
        g.noisy = torch.ones_like(g.noisy)
    return g


def auroc_ci(clean: np.ndarray, shifted: np.ndarray, paired: bool, resamples: int, seed: int = 0
             ) -> tuple[float, float, float]:
    """AUROC of ``shifted`` (positive) against ``clean`` scores (sklearn ``roc_auc_score``) and a 95% percentile
    bootstrap interval; ``paired`` resamples the pairs ``(clean[i], shifted[i])`` jointly (same latents)."""
    y = np.r_[np.zeros(len(clean)), np.ones(len(shifted))]
    auc = float(roc_auc_score(y, np.r_[clean, shifted]))
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(resamples):
        i = rng.integers(0, len(clean), len(clean))
        j = i if paired else rng.integers(0, len(shifted), len(shifted))
        boots.append(roc_auc_score(y, np.r_[clean[i], shifted[j]]))
    lo, hi = np.percentile(boots, [2.5, 97.5]) if resamples else (auc, auc)
    return auc, float(lo), float(hi)


def ood_auroc(t: Trained, p: Params, align: dict[str, Any]) -> list[dict[str, Any]]:
    """AUROC of clean test inputs against shifted ones, scored by the embedding variance.

    Clean: the test images without noise. Shifted: (a) the same latents re-rendered with per-pixel hue noise
    of each ``ood_hue_levels`` std, (b) with both legs at each ``ood_leg_fractions``, (c) the test split's own
    noisy minority (hue noise and short legs, unpaired; its ``level`` is None). Scores: the variance on the colour dimension, on the
    orientation dimension, and the total ``sum_d var_d``. Cached in the run's folder.
    """
    config = {"hue": list(p.ood_hue_levels), "legs": list(p.ood_leg_fractions), "boot": p.bootstrap,
              "seed": p.seed, "align": [align["colour_dim"], align["orientation_dim"]], "v": 2}

    def compute() -> dict[str, Any]:
        spec = lshape_spec(p)
        split = t.dataset["test"]
        f: LShapeFactors = t.dataset.info["factors"]["test"]
        clean_idx = torch.nonzero(~f.noisy).squeeze(1)
        fc = f.subset(clean_idx)
        _, v_clean = t.embed(split.images[clean_idx])
        shifted: list[tuple[str, float | None, torch.Tensor, bool]] = []
        for k, level in enumerate(p.ood_hue_levels):
            imgs = render_lshapes(_perturbed(fc, hue_std=level), spec, seed=1000 + k)
            shifted.append(("hue_noise", float(level), t.embed(imgs)[1], True))
        for level in p.ood_leg_fractions:
            imgs = render_lshapes(_perturbed(fc, leg=level), spec)
            shifted.append(("legs", float(level), t.embed(imgs)[1], True))
        noisy_idx = torch.nonzero(f.noisy).squeeze(1)
        if len(noisy_idx):
            shifted.append(("test_minority", None, t.embed(split.images[noisy_idx])[1], False))
        rows = []
        cd, od = align["colour_dim"], align["orientation_dim"]
        scores = {"colour": lambda v: v[:, cd], "orientation": lambda v: v[:, od], "total": lambda v: v.sum(1)}
        for kind, level, v_shift, paired in shifted:
            for name, fn in scores.items():
                auc, lo, hi = auroc_ci(fn(v_clean).double().numpy(), fn(v_shift).double().numpy(), paired,
                                       p.bootstrap, p.seed)
                rows.append({"shift": kind, "level": level, "score": name, "auroc": auc, "lo": lo, "hi": hi,
                             "n_clean": len(v_clean), "n_shifted": len(v_shift)})
        return {"rows": rows}

    return cached(t.outcome, "ood_auroc", config, compute)["rows"]


# ----------------------------------------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------------------------------------

def _rgb(img: torch.Tensor) -> np.ndarray:
    return img.permute(1, 2, 0).float().div(255).cpu().numpy()


def fig_classes(p: Params, span: float = 2.0, steps: int = 5) -> plt.Figure:
    """Fig. 1: each class's centre and samples spanning +-``span`` std in orientation (columns) and hue (rows);
    a sample fades to white by its class-conditional likelihood relative to the centre."""
    spec = lshape_spec(p)
    z = torch.linspace(-span, span, steps)
    zo, zh = z.repeat(steps), z.repeat_interleave(steps)
    oc, hc = spec.class_centres()
    fig, axes = plt.subplots(2, 2, figsize=(7, 7))
    for k, ax in enumerate(axes.flat):
        n = steps * steps
        f = LShapeFactors(torch.full((n,), k), (oc[k] + zo * spec.orientation_std).remainder(360).float(),
                          (hc[k] + zh * spec.hue_std).remainder(360).float(), torch.zeros(n), torch.ones(n, 2),
                          torch.zeros(n, dtype=torch.bool))
        imgs = render_lshapes(f, spec)
        alpha = torch.exp(-0.5 * (zo ** 2 + zh ** 2)).numpy()
        s = spec.image_size
        mosaic = np.ones((steps * s, steps * s, 3))
        for i in range(n):
            r, c = divmod(i, steps)
            mosaic[r * s:(r + 1) * s, c * s:(c + 1) * s] = alpha[i] * _rgb(imgs[i]) + (1 - alpha[i])
        ax.imshow(mosaic)
        ax.set_xticks([]), ax.set_yticks([])
        ax.set_title(f"class {k}: orientation {float(oc[k]):g}°, hue {float(hc[k]):g}°", fontsize=8)
        ax.set_xlabel(f"orientation −{span:g}σ … +{span:g}σ", fontsize=7)
        ax.set_ylabel(f"hue: −{span:g}σ (top) … +{span:g}σ (bottom)", fontsize=7)
    fig.suptitle(f"Fig. 1: the four classes (σ = {spec.orientation_std:g}° / {spec.hue_std:g}°)", fontsize=9)
    fig.tight_layout()
    return fig


def fig_interpolation(probe: LShapeProbe, mu: torch.Tensor, var: torch.Tensor, align: dict[str, Any],
                      contour: float = 0.4, title: str = "") -> plt.Figure:
    """Fig. 2: (left) the interpolated examples, (right) their 2-D embedding: each image drawn at the mean of
    ``p(z|x)`` with the equi-probability ellipse at ``contour`` standard deviations (semi-axes
    ``contour * sqrt(var)``). Horizontal axis: the orientation dimension, vertical: the colour dimension."""
    steps = int(math.isqrt(len(probe.images)))
    s = probe.images.shape[-1]
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(11, 5))
    mosaic = np.zeros((steps * s, steps * s, 3))
    for i in range(len(probe.images)):
        r, c = divmod(i, steps)
        mosaic[r * s:(r + 1) * s, c * s:(c + 1) * s] = _rgb(probe.images[i])
    a0.imshow(mosaic)
    a0.set_xticks([]), a0.set_yticks([])
    a0.set_xlabel("orientation: centre 0 → centre 1"), a0.set_ylabel("hue: centre 0 → centre 1")
    a0.set_title("interpolated inputs", fontsize=9)
    xd, yd = align["orientation_dim"], align["colour_dim"]
    x, y = mu[:, xd].numpy(), mu[:, yd].numpy()
    sx, sy = var[:, xd].sqrt().numpy(), var[:, yd].sqrt().numpy()
    for i in range(len(x)):
        a1.add_patch(Ellipse((x[i], y[i]), 2 * contour * sx[i], 2 * contour * sy[i], fill=False, lw=0.8,
                             color="0.4"))
        a1.add_artist(AnnotationBbox(OffsetImage(_rgb(probe.images[i]), zoom=22 / s), (x[i], y[i]), frameon=False))
    pad_x = max(float(np.ptp(x)) * 0.1, float((contour * sx).max()))
    pad_y = max(float(np.ptp(y)) * 0.1, float((contour * sy).max()))
    a1.set_xlim(x.min() - pad_x, x.max() + pad_x), a1.set_ylim(y.min() - pad_y, y.max() + pad_y)
    a1.set_xlabel(f"embedding dim {xd} (orientation)"), a1.set_ylabel(f"embedding dim {yd} (colour)")
    a1.set_title(f"2-D SPE: means with {contour:g}σ ellipses", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def fig_variance(rows: list[dict[str, Any]], title: str = "") -> plt.Figure:
    """Fig. 3: mean embedding variance (CI95 error bars) on the colour (grey) and orientation (black)
    dimension, (left) against the hue-noise std, (right) against the leg-length factor."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, probe, xlabel in ((axes[0], "hue_noise", "pixel hue-noise std (degrees)"),
                              (axes[1], "legs", "leg length (fraction of full)")):
        rs = [r for r in rows if r["probe"] == probe]
        levels = sorted({r["level"] for r in rs}, reverse=(probe == "legs"))
        pos = np.arange(len(levels))
        for off, role, colour in ((-0.2, "colour", "0.6"), (0.2, "orientation", "0.0")):
            by = {r["level"]: r for r in rs if r["dim"] == role}
            ax.bar(pos + off, [by[lv]["mean"] for lv in levels], 0.4, yerr=[by[lv]["ci95"] for lv in levels],
                   color=colour, label=f"{role} dimension", capsize=2)
        ax.set_xticks(pos, [f"{lv:g}" for lv in levels])
        ax.set_xlabel(xlabel), ax.set_ylabel("embedding variance σ²ₓ")
        ax.legend(fontsize=8)
    axes[0].set_title("Fig. 3 left: hue noise (colour harder to read)", fontsize=9)
    axes[1].set_title("Fig. 3 right: shorter legs (both harder to read)", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def fig_ood(rows: list[dict[str, Any]], title: str = "") -> plt.Figure:
    """AUROC (95% bootstrap interval) of clean against shifted inputs for each variance score."""
    shifts = list(dict.fromkeys((r["shift"], r["level"]) for r in rows))
    scores = list(dict.fromkeys(r["score"] for r in rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(shifts)), 3.6))
    width = 0.8 / len(scores)
    for k, sc in enumerate(scores):
        rs = [next(r for r in rows if (r["shift"], r["level"]) == s and r["score"] == sc) for s in shifts]
        xs = np.arange(len(shifts)) + (k - (len(scores) - 1) / 2) * width
        ax.bar(xs, [r["auroc"] for r in rs], width, label=f"{sc} variance",
               yerr=[[r["auroc"] - r["lo"] for r in rs], [r["hi"] - r["auroc"] for r in rs]], capsize=2)
    ax.axhline(0.5, color="k", lw=0.8, ls="--")
    ax.set_xticks(np.arange(len(shifts)), [_shift_label(s, lv) for s, lv in shifts], fontsize=7)
    ax.set_ylim(0, 1.02), ax.set_ylabel("AUROC (clean vs shifted)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(title or "embedding variance as an OOD score", fontsize=9)
    fig.tight_layout()
    return fig


def _shift_label(kind: str, level: float | None) -> str:
    if kind == "hue_noise":
        return f"hue noise {level:g}°"
    if kind == "legs":
        return f"legs ×{level:g}"
    return "test noisy 15%"


def fmt_p(p: float) -> str:
    """``"= 0.03"`` or ``"< 0.001"`` (p-values below 0.001 are not resolved further)."""
    return f"= {p:.1g}" if p >= 1e-3 else "< 0.001"


def paper_comparison(acc: dict[str, Any], trends: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Rows ``quantity | paper | this run`` for the closing cell."""
    def t(probe: str, role: str) -> dict[str, Any]:
        return next(r for r in trends if r["probe"] == probe and r["dim"] == role)
    m, c = acc["spe"]
    rows = [{"quantity": "held-out accuracy (4-way 2-shot)", "paper": f"~{100 * PAPER['heldout_accuracy']:.0f}%",
             "this run": f"{100 * m:.1f} ± {100 * c:.1f}%"},
            {"quantity": "Bayes-optimal accuracy", "paper": f"~{100 * PAPER['bayes_optimal_accuracy']:.0f}%",
             "this run": f"{100 * acc['bayes_analytic']:.1f}% (analytic)"}]
    for probe, what in (("hue_noise", "hue noise grows"), ("legs", "legs shorten")):
        for role, claim in (("colour", "grows"), ("orientation", "flat" if probe == "hue_noise" else "grows")):
            r = t(probe, role)
            rows.append({"quantity": f"{role}-dim variance as {what}", "paper": claim,
                         "this run": f"×{r['ratio']:.2f} (ρ = {r['spearman']:+.2f}, p {fmt_p(r['p'])})"})
    return rows


__all__ = ["NOTEBOOK", "PAPER", "Params", "Trained", "auroc_ci", "clean_test_alignment", "data_spec", "eta_squared", "fmt_p",
           "factor_alignment", "fig3_probes", "fig_classes", "fig_interpolation", "fig_ood", "fig_variance",
           "heldout_accuracy", "interpolation_probe", "load", "lshape_spec", "ood_auroc", "paper_comparison", "run",
           "spec_from_params", "sweep_trends", "variance_sweep"]
