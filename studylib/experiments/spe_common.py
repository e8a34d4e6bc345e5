"""What notebooks 09 and 10 (seed 002, Stochastic Prototype Embeddings) share: specs, features, evaluation.

Both notebooks train through :mod:`studylib.runs.runner` (runs cached by configuration hash) and then
evaluate here, because the runner's own evaluation applies registered classifiers to CL2N-normalised
features, which is wrong for an SPE:

* An SPE is evaluated on ``mu || var`` features (:meth:`SPEMethod.gaussian_features`) with
  :func:`studylib.methods.spe.spe_classifier` (naive sampler, 200 samples per query: seed 002, Sec. 3), and
  no feature transform at all (``train_mean=None``): centring and normalising would change the Gaussians.
* The deterministic PN is evaluated with the nearest centroid on raw (not CL2N) features: its posterior is
  ``softmax(-||q - c_k||^2)`` (Snell et al. 2017), whose argmax is the nearest centroid.

The runner's evaluation of an SPE/PN run is therefore kept tiny (:func:`eval_spec_stub`: nearest centroid on
the mean embedding, no CL2N) and the real evaluation results are cached in the run's folder under a hash of
the evaluation protocol (:func:`cached`), so re-executing a notebook neither retrains nor re-evaluates.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from studylib.data.base import FewShotDataset
from studylib.evaluation import episode_seed, evaluate, extract_features, get_classifier
from studylib.methods.base import Method
from studylib.methods.spe import SPEMethod
from studylib.runs.runner import EvalSpec, Outcome, load_trained
from studylib.utils import config_hash

KINDS = ("spe", "pn")  # SPE (stochastic) or its deterministic sibling, the Prototypical Network


def method_parts(kind: str, dim: int, hidden: int, sampler: str = "intersection", samples: int = 1,
                 eval_samples: int = 200) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``(method name, method_options, backbone_options)`` of an SPE or PN with a ``d``-dim embedding.

    Appendix A.1: Conv4 whose last block has ``2d`` filters (SPE: mean and variance) or ``d`` (PN: the
    embedding), no BN/ReLU in the last block, so the outputs are unconstrained. ``hidden`` filters in the
    other blocks (64 in the paper). The map after the last block is average-pooled (``pool="avg"``); on
    28x28 inputs it is 1x1, so this equals the paper's flattening.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown model kind {kind!r}; use one of {KINDS}")
    if dim < 1 or hidden < 1:
        raise ValueError(f"dim and hidden must be >= 1, got {dim} and {hidden}")
    if kind == "pn":
        return "pn_deterministic", {}, {"hidden": hidden, "last_block_plain": True, "out_channels": dim}
    return ("spe", {"dim": dim, "sampler": sampler, "samples": samples, "eval_samples": eval_samples},
            {"hidden": hidden, "last_block_plain": True, "out_channels": 2 * dim})


def eval_spec_stub(ways: int, shots: int, queries: int, val_episodes: int = 0, episodes: int = 50,
                   seed: int = 0) -> EvalSpec:
    """The runner's own (cheap) evaluation of an SPE/PN run: nearest centroid on the mean embedding without
    CL2N (CL2N would project a 2-D embedding onto the unit circle). ``val_episodes`` > 0 logs the same
    measure on the validation split after each epoch (a learning curve; the loop has no early stopping)."""
    return EvalSpec(ways=ways, shots=[shots], queries=queries, episodes=episodes, classifiers=["nearest_centroid"],
                    cl2n=False, val_episodes=val_episodes, val_shots=shots, val_classifier="nearest_centroid",
                    seed=seed)


def model_features(method: Method, images: torch.Tensor, transform: Callable[[torch.Tensor], torch.Tensor],
                   device: torch.device | str | None = None) -> torch.Tensor:
    """``[N, 2d]`` ``mu || var`` for an SPE (:meth:`SPEMethod.gaussian_features`), ``[N, d]`` for a PN; float32.

    The features are computed where the model's parameters are (``device=None``, the default) and returned on
    that device: the caller's model is never moved as a side effect (issue 9: moving it to CUDA here left a
    caller that kept using it on CPU tensors with a CPU tensor meeting a ``cuda:0`` weight). Pass ``device``
    to move the model explicitly first.
    """
    if device is not None:
        method.to(device)
    fn = method.gaussian_features if isinstance(method, SPEMethod) else method.features
    return extract_features(fn, images, transform, device=None)


def split_gaussian_features(feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[N, 2d]`` ``mu || var`` -> ``(mu [N, d], var [N, d])``."""
    if feats.dim() != 2 or feats.shape[1] % 2:
        raise ValueError(f"expected [N, 2d] mu || var features, got {tuple(feats.shape)}")
    d = feats.shape[1] // 2
    return feats[:, :d], feats[:, d:]


def cached(outcome: Outcome, name: str, config: dict[str, Any], compute: Callable[[], Any]) -> Any:
    """``compute()`` once per (run, ``config``): the result is stored as ``<name>-<hash>.pt`` in the run's
    folder (tensors and plain containers only) and loaded on the next call."""
    fname = f"{name}-{config_hash(config)}.pt"
    if outcome.run.has(fname):
        return outcome.run.load_tensor(fname)
    out = compute()
    outcome.run.save_tensor(fname, out)
    return out


def few_shot_accuracies(outcome: Outcome, ways: list[int], shots: list[int], queries: int, episodes: int,
                        split: str = "test", seed: int = 0, samples: int = 200,
                        loaded: tuple[Method, Callable, FewShotDataset] | None = None) -> dict[str, torch.Tensor]:
    """Per-episode accuracies ``{"<ways>way/<shots>shot": [E] float64}`` of a finished SPE or PN run.

    SPE: naive sampler with ``samples`` samples per query (seed 002 Sec. 3: 200), fixed noise seed, on
    ``mu || var`` features, no CL2N. PN: nearest centroid on raw features. Episodes: ``episodes`` per ways,
    drawn from ``seed`` and the run's training seed (:func:`~studylib.evaluation.episode_seed`: every model of a
    training seed sees the same episodes, so models are compared paired, and each training seed its own, so an
    interval over seeds covers episode sampling); all shot counts share them
    (:func:`studylib.evaluation.evaluate`). Cached in the run's folder.
    """
    config = {"ways": list(ways), "shots": list(shots), "queries": queries, "episodes": episodes, "split": split,
              "seed": seed, "samples": samples, "v": 2}  # 2: episodes per training seed
    seed = episode_seed(seed, outcome.spec.train.seed)

    def compute() -> dict[str, torch.Tensor]:
        method, transform, dataset = loaded or load_trained(outcome)
        data = dataset[split]
        feats = model_features(method, data.images, transform)
        if isinstance(method, SPEMethod):
            clf = {"spe": method.classifier(sampler="naive", samples=samples, seed=seed)}
        else:
            clf = {"pn": get_classifier("nearest_centroid")[1]}
        out = {}
        for w in ways:
            res = evaluate(feats, data.labels.to(feats.device), ways=w, shots=list(shots), queries=queries,
                           episodes=episodes, classifier=clf, seed=seed, train_mean=None)
            for (_, n), r in res.items():
                out[f"{w}way/{n}shot"] = r.accuracies
        return out

    return cached(outcome, "fewshot", config, compute)
